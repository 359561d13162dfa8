#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kiln {

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
  if (bytes < 1) return InvalidArgument("size '" + std::string(text) + "' must be at least 1 byte");
  return static_cast<int64_t>(bytes);
}

}  // namespace kiln
