// The bits of Python's Unicode behaviour that chat templates observe: code point decoding,
// str.isspace(), and case mapping (upper/lower/islower/isupper/title/capitalize).
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic — the scripts where
// Python's mapping is one code point to one (plus ß -> SS). Other code points are left as they
// are and count as uncased; Greek final sigma in lower() is not applied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::jinja {

// Code point of one UTF-8 character `c` (as split by Utf8Chars); malformed bytes map to
// themselves.
uint32_t DecodeUtf8(std::string_view c);
void AppendUtf8(std::string& out, uint32_t cp);

// Python str.isspace() for one code point.
bool IsPythonSpace(uint32_t cp);

uint32_t ToUpper(uint32_t cp);
uint32_t ToLower(uint32_t cp);
bool IsLowerCased(uint32_t cp);  // a lower-case letter (has an upper-case form, or is ß & co.)
bool IsUpperCased(uint32_t cp);

// Python str.upper(), str.lower(), str.title(), str.capitalize().
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
// str.islower() / str.isupper(): some cased character, and all cased ones lower (upper).
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);

}  // namespace kiln::jinja
