#include "cli/command.h"
#include <unistd.h>
#include <algorithm>
#include <memory>

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

std::function<void(int64_t, int64_t)> ByteProgressBar(std::string label) {
  const bool tty = ::isatty(STDERR_FILENO);
  auto last_quarter = std::make_shared<int>(-1);
  return [label = std::move(label), tty, last_quarter](int64_t done, int64_t total) {
    const double frac = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 1.0;
    if (!tty) {
      const int quarter = static_cast<int>(frac * 4);
      if (quarter == *last_quarter) return;
      *last_quarter = quarter;
    }
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::fprintf(stderr, "%s%s [%s%s] %.2f / %.2f GB %3d%%%s", tty ? "\r" : "", label.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 done / 1e9, total / 1e9, static_cast<int>(frac * 100),
                 tty && frac < 1.0 ? "" : "\n");
    std::fflush(stderr);
  };
}

}  // namespace kiln::cli
