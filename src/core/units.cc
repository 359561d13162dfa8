#include "core/units.h"

#include <ctime>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kiln {

Result<int64_t> ParseByteSize(std::string_view text) {
  auto bad = [&](std::string_view why) {
    std::string msg = "size '";
    msg.append(text);
    msg.append("' ");
    msg.append(why);
    return InvalidArgument(std::move(msg));
  };
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
    return bad("is not a size; write e.g. 80GB or 16GiB");
  }
  struct Unit {
    std::string_view name;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1e3},
      {"K", 1e3},
      {"MB", 1e6},
      {"M", 1e6},
      {"GB", 1e9},
      {"G", 1e9},
      {"TB", 1e12},
      {"T", 1e12},
      {"KIB", 1024.0},
      {"MIB", 1048576.0},
      {"GIB", 1073741824.0},
      {"TIB", 1099511627776.0},
  };
  double scale = 0;
  for (const Unit& u : kUnits) {
    if (u.name == unit) scale = u.scale;
  }
  if (scale == 0) return bad("has an unknown unit; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  const double bytes = value * scale;
  if (bytes > 9.0e18) return bad("is too large");
  if (bytes < 1) return bad("must be at least 1 byte");
  return static_cast<int64_t>(bytes);
}

std::string UtcTimestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kiln
