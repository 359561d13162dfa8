#include "cli/command.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace kiln::cli {

void Fail(std::string_view command, const Status& status) {
  std::cerr << "kiln" << (command.empty() ? "" : " ") << command << ": error: " << status.message()
            << std::endl;
  throw CLI::RuntimeError(1);
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

Result<int64_t> ParseByteSize(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  size_t pos = 0;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.')) {
    ++pos;
  }
  const std::string number = s.substr(0, pos);
  std::string unit = s.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  char* end = nullptr;
  const double value = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !(value >= 0)) {
    return InvalidArgument("'" + std::string(text) + "' is not a size; write e.g. 80GB or 16GiB");
  }
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KB" || unit == "K")
    scale = 1e3;
  else if (unit == "MB" || unit == "M")
    scale = 1e6;
  else if (unit == "GB" || unit == "G")
    scale = 1e9;
  else if (unit == "TB" || unit == "T")
    scale = 1e12;
  else if (unit == "KIB")
    scale = 1024.0;
  else if (unit == "MIB")
    scale = 1024.0 * 1024;
  else if (unit == "GIB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TIB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return InvalidArgument("unknown size unit '" + unit + "' in '" + std::string(text) +
                           "'; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  const double bytes = value * scale;
  if (bytes > 9.0e18) return InvalidArgument("size '" + std::string(text) + "' is too large");
  return static_cast<int64_t>(bytes);
}

}  // namespace kiln::cli
