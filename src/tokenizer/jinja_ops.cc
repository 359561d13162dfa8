// Python operators, attribute/item access and str/list/dict methods (see jinja_builtins.h).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_unicode.h"

namespace kiln::jinja {
namespace {

Status UndefinedError(const Value& v) {
  const std::string& name = v.undefined_name();
  return InvalidArgument(name.empty() ? "value is undefined" : "'" + name + "' is undefined");
}

Status TypeError(std::string_view op, const Value& a, const Value& b) {
  return InvalidArgument("unsupported operand type(s) for " + std::string(op) + ": '" +
                         a.TypeName() + "' and '" + b.TypeName() + "'");
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool IsWhitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// str.strip/lstrip/rstrip: Python whitespace by default, else any code point of `chars`.
// Walks in from the ends only, so trimming a long message costs no more than its margins.
std::string Strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::vector<std::string_view> strip_set;
  bool custom = chars && chars->is_string();
  if (custom) strip_set = Utf8Chars(chars->as_string());
  auto strip = [&](std::string_view c) {
    if (custom) return std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end();
    return IsPythonSpace(DecodeUtf8(c));
  };
  auto is_continuation = [&](size_t i) {
    return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
  };
  size_t b = 0, e = s.size();
  while (left && b < e) {
    size_t n = 1;
    while (b + n < e && is_continuation(b + n)) ++n;
    if (!strip(s.substr(b, n))) break;
    b += n;
  }
  while (right && e > b) {
    size_t start = e - 1;
    while (start > b && is_continuation(start)) --start;
    if (!strip(s.substr(start, e - start))) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

Result<Value> Split(const std::string& s, const CallArgs& a) {
  const Value* sep = a.Get("sep", 0);
  const Value* max_v = a.Get("maxsplit", 1);
  int64_t max_split = max_v && max_v->is_int() ? max_v->as_int() : -1;
  ValueList parts;
  if (!sep || sep->is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && IsWhitespace(s[i])) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        size_t e = s.size();
        while (e > i && IsWhitespace(s[e - 1])) --e;
        parts.push_back(Value(s.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsWhitespace(s[j])) ++j;
      parts.push_back(Value(s.substr(i, j - i)));
      i = j;
    }
    return Value::List(std::move(parts));
  }
  if (!sep->is_string() || sep->as_string().empty()) {
    return InvalidArgument("split() separator must be a non-empty string");
  }
  const std::string& d = sep->as_string();
  size_t start = 0;
  while (true) {
    size_t p = s.find(d, start);
    if (p == std::string::npos ||
        (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)) {
      parts.push_back(Value(s.substr(start)));
      break;
    }
    parts.push_back(Value(s.substr(start, p - start)));
    start = p + d.size();
  }
  return Value::List(std::move(parts));
}

// str.rsplit: like split, but maxsplit counts from the right.
Result<Value> RSplit(const std::string& s, const CallArgs& a) {
  const Value* max_v = a.Get("maxsplit", 1);
  if (!max_v || !max_v->is_int() || max_v->as_int() < 0) return Split(s, a);
  const Value* sep = a.Get("sep", 0);
  if (!sep || sep->is_none()) return Unsupported("rsplit() with maxsplit needs a separator");
  if (!sep->is_string() || sep->as_string().empty()) {
    return InvalidArgument("rsplit() separator must be a non-empty string");
  }
  const std::string& d = sep->as_string();
  ValueList parts;
  size_t end = s.size();
  while (static_cast<int64_t>(parts.size()) < max_v->as_int()) {
    size_t p = end < d.size() ? std::string::npos : s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    parts.insert(parts.begin(), Value(s.substr(p + d.size(), end - p - d.size())));
    end = p;
  }
  parts.insert(parts.begin(), Value(s.substr(0, end)));
  return Value::List(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++done;
  }
  out.append(s, start);
  return out;
}

// Applies `pred` to the prefix or suffix argument (a string or a tuple of strings).
Result<Value> AffixTest(const std::string& s, const CallArgs& a, bool prefix) {
  if (a.positional.empty()) return InvalidArgument("startswith/endswith need an argument");
  const Value& arg = a.positional[0];
  auto test = [&](const Value& v) -> Result<bool> {
    if (!v.is_string()) return InvalidArgument("startswith/endswith need strings");
    return prefix ? s.starts_with(v.as_string()) : s.ends_with(v.as_string());
  };
  if (arg.is_list()) {
    for (const Value& v : arg.as_list()) {
      KILN_ASSIGN_OR_RETURN(bool ok, test(v));
      if (ok) return Value(true);
    }
    return Value(false);
  }
  KILN_ASSIGN_OR_RETURN(bool ok, test(arg));
  return Value(ok);
}

Result<Value> StringMethod(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* arg0 = a.positional.empty() ? nullptr : &a.positional[0];
  if (name == "strip") return Value(Strip(s, arg0, true, true));
  if (name == "lstrip") return Value(Strip(s, arg0, true, false));
  if (name == "rstrip") return Value(Strip(s, arg0, false, true));
  if (name == "split") return Split(s, a);
  if (name == "rsplit") return RSplit(s, a);
  if (name == "startswith") return AffixTest(s, a, true);
  if (name == "endswith") return AffixTest(s, a, false);
  if (name == "upper") return Value(PyUpper(s));
  if (name == "lower") return Value(PyLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") return Value(PyCapitalize(s));
  if (name == "islower") return Value(PyIsLower(s));
  if (name == "isupper") return Value(PyIsUpper(s));
  if (name == "replace") {
    if (a.positional.size() < 2 || !a.positional[0].is_string() || !a.positional[1].is_string()) {
      return InvalidArgument("replace() needs two strings");
    }
    int64_t count =
        a.positional.size() > 2 && a.positional[2].is_int() ? a.positional[2].as_int() : -1;
    return Value(Replace(s, a.positional[0].as_string(), a.positional[1].as_string(), count));
  }
  if (name == "find" || name == "count" || name == "index" || name == "rfind") {
    if (!arg0 || !arg0->is_string()) return InvalidArgument(name + "() needs a string");
    const std::string& needle = arg0->as_string();
    if (name == "count") {
      if (needle.empty()) return Value(static_cast<int64_t>(Utf8Length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size()))
        ++n;
      return Value(n);
    }
    size_t p = name == "rfind" ? s.rfind(needle) : s.find(needle);
    if (p == std::string::npos) {
      if (name == "index") return InvalidArgument("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(Utf8Length(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    if (!arg0) return InvalidArgument("join() needs an argument");
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(*arg0));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return InvalidArgument("join() needs strings");
      if (i) out += s;
      out += items[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    ValueList lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(Value(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(Value(s.substr(start)));
    return Value::List(std::move(lines));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (unsigned char c : s) {
      bool ok = name == "isdigit"   ? std::isdigit(c)
                : name == "isalpha" ? std::isalpha(c)
                : name == "isspace" ? IsWhitespace(c)
                                    : std::isalnum(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return InvalidArgument("'str' object has no attribute '" + name + "'");
}

bool IsStringMethod(const std::string& n) {
  static const char* kNames[] = {"strip",      "lstrip",   "rstrip",     "split",   "rsplit",
                                 "startswith", "endswith", "upper",      "lower",   "title",
                                 "capitalize", "replace",  "find",       "rfind",   "count",
                                 "index",      "join",     "splitlines", "isdigit", "isalpha",
                                 "isspace",    "isalnum",  "islower",    "isupper"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

bool IsUnsafeMutator(const std::string& n) {
  static const char* kNames[] = {"append", "pop",        "extend",  "insert", "remove", "clear",
                                 "update", "setdefault", "popitem", "sort",   "reverse"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

Value Bind(const Value& self, const std::string& name) {
  return Value::Callable(name, [self, name](const CallArgs& a) -> Result<Value> {
    if (self.is_string()) return StringMethod(self.as_string(), name, a);
    if (IsUnsafeMutator(name)) {
      return InvalidArgument("access to attribute '" + name + "' of '" + self.TypeName() +
                             "' object is unsafe (the template sandbox is immutable)");
    }
    if (self.is_dict()) {
      const ValueDict& d = self.as_dict();
      if (name == "get") {
        if (a.positional.empty()) return InvalidArgument("get() needs a key");
        const Value* v = d.Find(a.positional[0]);
        if (v) return *v;
        return a.positional.size() > 1 ? a.positional[1] : Value::None();
      }
      ValueList out;
      for (const auto& [k, v] : d.entries) {
        if (name == "items") {
          out.push_back(Value::List({k, v}).AsTuple());
        } else {
          out.push_back(name == "keys" ? k : v);
        }
      }
      return Value::List(std::move(out));
    }
    if (self.is_list()) {
      if (a.positional.empty()) return InvalidArgument(name + "() needs an argument");
      const ValueList& l = self.as_list();
      int64_t n = 0;
      for (size_t i = 0; i < l.size(); ++i) {
        if (l[i].Equals(a.positional[0])) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") return InvalidArgument("value is not in list");
      return Value(n);
    }
    return InvalidArgument("no method " + name);
  });
}

int64_t NormalizeIndex(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

}  // namespace

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    if (a.is_float() || b.is_float()) return x < y ? -1 : x > y ? 1 : 0;
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(int c, Compare(x[i], y[i]));
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return InvalidArgument("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                         b.TypeName() + "'");
}

Result<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "~") return Value(a.Str() + b.Str());
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) return InvalidArgument("'in <string>' requires string as left operand");
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_dict()) {
      if (a.is_list() || a.is_dict()) {
        return InvalidArgument("unhashable type: '" + a.TypeName() + "'");
      }
      found = b.as_dict().Find(a) != nullptr;
    } else if (b.is_list()) {
      for (const Value& v : b.as_list()) found = found || v.Equals(a);
    } else if (!b.is_undefined()) {
      return InvalidArgument("argument of type '" + b.TypeName() + "' is not iterable");
    }
    return Value(found == (op == "in"));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    KILN_ASSIGN_OR_RETURN(int c, Compare(a, b));
    if (op == "<") return Value(c < 0);
    if (op == ">") return Value(c > 0);
    if (op == "<=") return Value(c <= 0);
    return Value(c >= 0);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_safe() == b.is_safe())
        return Value(a.as_string() + b.as_string()).AsSafe(a.is_safe());
      // Markup + str escapes the plain side (markupsafe).
      std::string lhs = a.is_safe() ? a.as_string() : HtmlEscape(a.as_string());
      std::string rhs = b.is_safe() ? b.as_string() : HtmlEscape(b.as_string());
      return Value(lhs + rhs).AsSafe();
    }
    if (a.is_list() && b.is_list()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::List(std::move(out));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
    return BinaryOp(op, b, a);
  }
  if (op == "*" && (a.is_int() || a.is_bool()) && (b.is_string() || b.is_list())) {
    int64_t n = std::max<int64_t>(0, a.as_int());
    if (b.is_string()) {
      if (!b.as_string().empty() && n > static_cast<int64_t>((64u << 20) / b.as_string().size()))
        return ResourceExhausted("string repetition too large");
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += b.as_string();
      return Value(std::move(out));
    }
    ValueList out;
    for (int64_t i = 0; i < n && out.size() < (1u << 20); ++i) {
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    }
    return Value::List(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) return TypeError(op, a, b);
  bool floats = a.is_float() || b.is_float() || op == "/";
  if (op == "**" && !floats && b.as_int() < 0) floats = true;
  if (floats) {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) return InvalidArgument("division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
  } else {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    Status overflow =
        OutOfRange("integer overflow in '" + std::string(op) + "' (kiln integers are 64-bit)");
    if (op == "+") return __builtin_add_overflow(x, y, &r) ? Result<Value>(overflow) : Value(r);
    if (op == "-") return __builtin_sub_overflow(x, y, &r) ? Result<Value>(overflow) : Value(r);
    if (op == "*") return __builtin_mul_overflow(x, y, &r) ? Result<Value>(overflow) : Value(r);
    if (op == "**") {
      r = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(r, x, &r)) return overflow;
        if (r == 0 || r == 1) break;
      }
      if (r == 1 && x == -1 && y % 2 == 1) r = -1;
      return Value(r);
    }
    if (y == 0) return InvalidArgument("integer division or modulo by zero");
    if (y == -1 && x == INT64_MIN) return overflow;
    if (op == "//") return Value(FloorDiv(x, y));
    if (op == "%") return Value(x - FloorDiv(x, y) * y);
  }
  return InvalidArgument("unknown operator " + std::string(op));
}

Result<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kString:
      if (IsStringMethod(name)) return Bind(obj, name);
      return Value::Undefined(name);
    case Value::Kind::kDict:
      if (name == "items" || name == "keys" || name == "values" || name == "get" ||
          IsUnsafeMutator(name)) {
        return Bind(obj, name);
      }
      [[fallthrough]];
    case Value::Kind::kNamespace: {
      const Value* v = obj.as_dict().FindString(name);
      return v ? *v : Value::Undefined(name);
    }
    case Value::Kind::kList:
      if (name == "index" || name == "count" || IsUnsafeMutator(name)) return Bind(obj, name);
      return Value::Undefined(name);
    default:
      return Value::Undefined(name);
  }
}

Result<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_generator()) return InvalidArgument("'generator' object is not subscriptable");
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const Value* v = obj.as_dict().Find(key);
      if (v) return *v;
      if (key.is_string() && obj.is_dict()) return GetAttr(obj, key.as_string());
      return Value::Undefined(key.Str());
    }
    case Value::Kind::kList: {
      if (!key.is_int()) return Value::Undefined(key.Str());
      const ValueList& l = obj.as_list();
      int64_t i = NormalizeIndex(key.as_int(), static_cast<int64_t>(l.size()));
      if (i < 0 || i >= static_cast<int64_t>(l.size())) return Value::Undefined();
      return l[i];
    }
    case Value::Kind::kString: {
      if (key.is_string()) return GetAttr(obj, key.as_string());
      if (!key.is_int()) return Value::Undefined();
      auto chars = Utf8Chars(obj.as_string());
      int64_t i = NormalizeIndex(key.as_int(), static_cast<int64_t>(chars.size()));
      if (i < 0 || i >= static_cast<int64_t>(chars.size())) return Value::Undefined();
      return Value(std::string(chars[i]));
    }
    default:
      return Value::Undefined();
  }
}

Result<Value> Slice(const Value& obj, const Value& start_v, const Value& stop_v,
                    const Value& step_v) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto as_index = [](const Value& v, int64_t fallback) -> Result<int64_t> {
    if (v.is_undefined() || v.is_none()) return fallback;
    if (!v.is_int()) return InvalidArgument("slice indices must be integers");
    return v.as_int();
  };
  KILN_ASSIGN_OR_RETURN(int64_t step, as_index(step_v, 1));
  if (step == 0) return InvalidArgument("slice step cannot be zero");
  std::vector<std::string_view> chars;
  int64_t n;
  if (obj.is_string()) {
    chars = Utf8Chars(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().size());
  } else {
    return InvalidArgument("'" + obj.TypeName() + "' object is not subscriptable");
  }
  auto clamp = [&](int64_t i, bool is_stop) {
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    (void)is_stop;
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  KILN_ASSIGN_OR_RETURN(int64_t start, as_index(start_v, step > 0 ? 0 : n - 1));
  KILN_ASSIGN_OR_RETURN(int64_t stop, as_index(stop_v, step > 0 ? n : -n - 1));
  start = clamp(start, false);
  stop = clamp(stop, true);
  std::string s_out;
  ValueList l_out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) {
      s_out += chars[i];
    } else {
      l_out.push_back(obj.as_list()[i]);
    }
  }
  return obj.is_string() ? Value(std::move(s_out)) : Value::List(std::move(l_out));
}

Result<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, unused] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string_view c : Utf8Chars(v.as_string())) chars.push_back(Value(c));
      return chars;
    }
    default:
      return InvalidArgument("'" + v.TypeName() + "' object is not iterable");
  }
}

Result<int64_t> Length(const Value& v) {
  if (v.is_generator()) return InvalidArgument("object of type 'generator' has no len()");
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(Utf8Length(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().entries.size());
    default:
      return InvalidArgument("object of type '" + v.TypeName() + "' has no len()");
  }
}

}  // namespace kiln::jinja
