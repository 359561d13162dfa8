#include "tokenizer/jinja_unicode.h"

#include "tokenizer/jinja_value.h"

namespace kiln::jinja {

uint32_t DecodeUtf8(std::string_view c) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(c[i])); };
  if (c.empty()) return 0;
  if (c.size() == 1) return b(0);
  uint32_t cp = b(0) & (0x7F >> c.size());
  for (size_t i = 1; i < c.size(); ++i) cp = (cp << 6) | (b(i) & 0x3F);
  return cp;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Latin Extended-A: pairs are (even upper, odd lower) except in 0x139-0x148 and 0x179-0x17E,
// where they are (odd upper, even lower).
bool OddUpperBlock(uint32_t c) { return (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E); }
bool InLatinExtA(uint32_t c) {
  return c >= 0x100 && c <= 0x17E && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149;
}

}  // namespace

uint32_t ToUpper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (InLatinExtA(c)) {
    bool is_lower = OddUpperBlock(c) ? c % 2 == 0 : c % 2 == 1;
    return is_lower ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t ToLower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (InLatinExtA(c)) {
    bool is_upper = OddUpperBlock(c) ? c % 2 == 1 : c % 2 == 0;
    return is_upper ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsLowerCased(uint32_t cp) {
  return ToUpper(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149;
}
bool IsUpperCased(uint32_t cp) { return ToLower(cp) != cp; }

namespace {

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (std::string_view c : Utf8Chars(s)) f(DecodeUtf8(c), c, out);
  return out;
}

void AppendUpper(uint32_t cp, std::string_view raw, std::string& out) {
  if (cp == 0xDF) {
    out += "SS";
  } else if (uint32_t u = ToUpper(cp); u != cp) {
    AppendUtf8(out, u);
  } else {
    out += raw;
  }
}

void AppendLower(uint32_t cp, std::string_view raw, std::string& out) {
  if (uint32_t l = ToLower(cp); l != cp) {
    AppendUtf8(out, l);
  } else {
    out += raw;
  }
}

}  // namespace

std::string PyUpper(std::string_view s) { return MapCodePoints(s, AppendUpper); }
std::string PyLower(std::string_view s) { return MapCodePoints(s, AppendLower); }

std::string PyTitle(std::string_view s) {
  bool previous_cased = false;
  return MapCodePoints(s, [&](uint32_t cp, std::string_view raw, std::string& out) {
    bool cased = IsLowerCased(cp) || IsUpperCased(cp);
    if (cased) {
      previous_cased ? AppendLower(cp, raw, out) : AppendUpper(cp, raw, out);
    } else {
      out += raw;
    }
    previous_cased = cased;
  });
}

std::string PyCapitalize(std::string_view s) {
  bool first = true;
  return MapCodePoints(s, [&](uint32_t cp, std::string_view raw, std::string& out) {
    first ? AppendUpper(cp, raw, out) : AppendLower(cp, raw, out);
    first = false;
  });
}

bool PyIsLower(std::string_view s) {
  bool has_cased = false;
  for (std::string_view c : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8(c);
    if (IsUpperCased(cp)) return false;
    has_cased = has_cased || IsLowerCased(cp);
  }
  return has_cased;
}

bool PyIsUpper(std::string_view s) {
  bool has_cased = false;
  for (std::string_view c : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8(c);
    if (IsLowerCased(cp)) return false;
    has_cased = has_cased || IsUpperCased(cp);
  }
  return has_cased;
}

}  // namespace kiln::jinja
