#include "cli/command.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace kiln::cli {

void Fail(std::string_view command, const Status& status, int exit_code) {
  std::cerr << "kiln" << (command.empty() ? "" : " ") << command << ": error: " << status.message()
            << std::endl;
  throw CLI::RuntimeError(exit_code);
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double ab = std::fabs(b);
  char buf[64];
  if (ab >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (ab >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1024.0 * 1024));
  } else if (ab >= 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

std::string FormatCount(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace kiln::cli
