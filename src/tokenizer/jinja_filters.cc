// jinja2's filters and tests, and HF's tojson (see jinja_builtins.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_unicode.h"

namespace kiln::jinja {
namespace {

// ---- JSON (Python json.dumps) -----------------------------------------------------------------

void AppendJsonString(std::string* out, std::string_view s, bool ensure_ascii) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default: {
        char buf[16];
        if (c < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else if (c >= 0x80 && ensure_ascii) {
          uint32_t cp = 0;
          int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
          cp = c & (0x3F >> extra);
          for (int k = 0; k < extra && i + 1 < s.size(); ++k) cp = (cp << 6) | (s[++i] & 0x3F);
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                          0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          *out += buf;
        } else if (c == 0x7f && ensure_ascii) {
          *out += "\\u007f";
        } else {
          *out += static_cast<char>(c);
        }
      }
    }
  }
  *out += '"';
}

struct JsonStyle {
  std::string indent;  // per level; used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};

Status WriteJson(const Value& v, const JsonStyle& st, int level, std::string* out);

Status WriteJsonValue(const Value& v, const JsonStyle& st, int level, std::string* out) {
  if (level > 512) return InvalidArgument("tojson: nesting too deep");
  auto newline = [&](int l) {
    if (!st.has_indent) return;
    *out += '\n';
    for (int i = 0; i < l; ++i) *out += st.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return Status::Ok();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : FormatPythonFloat(d);
      return Status::Ok();
    }
    case Value::Kind::kString:
      AppendJsonString(out, v.as_string(), st.ensure_ascii);
      return Status::Ok();
    case Value::Kind::kList: {
      const ValueList& l = v.as_list();
      if (l.empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) *out += st.item_sep;
        newline(level + 1);
        KILN_RETURN_IF_ERROR(WriteJson(l[i], st, level + 1, out));
      }
      newline(level);
      *out += ']';
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.as_dict().entries) entries.push_back(&e);
      if (entries.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      if (st.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) {
          auto c = Compare(a->first, b->first);
          return c.ok() && *c < 0;
        });
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) *out += st.item_sep;
        newline(level + 1);
        const Value& k = entries[i]->first;
        std::string key;
        if (k.is_string()) {
          key = k.as_string();
        } else if (k.is_bool()) {
          key = k.as_bool() ? "true" : "false";
        } else if (k.is_none()) {
          key = "null";
        } else if (k.is_number()) {
          key = k.Repr();
        } else {
          return InvalidArgument("keys must be str, int, float, bool or None, not " + k.TypeName());
        }
        AppendJsonString(out, key, st.ensure_ascii);
        *out += st.key_sep;
        KILN_RETURN_IF_ERROR(WriteJson(entries[i]->second, st, level + 1, out));
      }
      newline(level);
      *out += '}';
      return Status::Ok();
    }
    default:
      break;
  }
  return InvalidArgument("Object of type " + v.TypeName() + " is not JSON serializable");
}

Status WriteJson(const Value& v, const JsonStyle& st, int level, std::string* out) {
  if (v.is_generator()) return InvalidArgument("Object of type generator is not JSON serializable");
  return WriteJsonValue(v, st, level, out);
}

// ---- Helpers ----------------------------------------------------------------------------------

const Value* Arg(const CallArgs& a, std::string_view name, size_t index) {
  return a.Get(name, index);
}

bool BoolArg(const CallArgs& a, std::string_view name, size_t index, bool fallback) {
  const Value* v = Arg(a, name, index);
  return v ? v->Truthy() : fallback;
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Result<Value> GetPath(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key(part);
    int64_t index = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && ec == std::errc() && end == part.data() + part.size()) key = Value(index);
    KILN_ASSIGN_OR_RETURN(cur, GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value Lowered(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value(PyLower(v.as_string()));
}

Result<Value> SortKey(const Value& item, const CallArgs& a, size_t attr_index,
                      bool case_sensitive) {
  const Value* attr = Arg(a, "attribute", attr_index);
  Value key = item;
  if (attr && attr->is_string()) {
    KILN_ASSIGN_OR_RETURN(key, GetPath(item, attr->as_string()));
  }
  return Lowered(key, case_sensitive);
}

Result<ValueList> SortValues(ValueList items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    auto c = Compare(keys[x], keys[y]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.ok()) return error;
  ValueList out;
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

// select/reject/selectattr/rejectattr: `a` holds [attribute,] [test name, test args...].
Result<Value> SelectFilter(const Value& input, const CallArgs& a, bool by_attr, bool keep) {
  if (!input.Truthy()) return Value::List().AsGenerator();  // jinja2: `if value: for ...`
  KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string()) {
      return InvalidArgument("selectattr/rejectattr need an attribute name");
    }
    attr = a.positional[0].as_string();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < a.positional.size()) {
    test = a.positional[next].Str();
    test_args.positional.assign(a.positional.begin() + next + 1, a.positional.end());
  }
  ValueList out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      KILN_ASSIGN_OR_RETURN(subject, GetPath(item, attr));
    }
    bool passed;
    if (test.empty()) {
      passed = subject.Truthy();
    } else {
      KILN_ASSIGN_OR_RETURN(passed, ApplyTest(test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::List(std::move(out)).AsGenerator();
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Result<Value> Indent(const Value& input, const CallArgs& a) {
  if (!input.is_string()) {  // jinja2 does `s += "\n"`, which only strings survive
    return InvalidArgument("indent needs a string, not " + input.TypeName());
  }
  const Value* width = Arg(a, "width", 0);
  std::string pad =
      width && width->is_string()
          ? width->as_string()
          : std::string(width && width->is_int() ? std::clamp<int64_t>(width->as_int(), 0, 256) : 4,
                        ' ');
  bool first = BoolArg(a, "first", 1, false);
  bool blank = BoolArg(a, "blank", 2, false);
  std::vector<std::string> lines = SplitLines(input.Str() + "\n");
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += "\n";
      if (blank || !lines[i].empty()) rv += pad;
    }
    rv += lines[i];
  }
  if (first) rv = pad + rv;
  return Value(std::move(rv));
}

Result<Value> ToInt(const Value& v, const CallArgs& a) {
  const Value* def = Arg(a, "default", 0);
  Value fallback = def ? *def : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  auto from_double = [](double d) -> Result<Value> {
    if (!(d > -9.2e18 && d < 9.2e18)) return OutOfRange("int: value outside 64-bit range");
    return Value(static_cast<int64_t>(d));
  };
  if (v.is_float()) return from_double(v.as_double());
  if (v.is_string()) {
    std::string s = v.as_string();
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return Value(static_cast<int64_t>(i));
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return from_double(d);
  }
  return fallback;
}

}  // namespace

Result<std::string> ToJson(const Value& v, int indent, bool sort_keys) {
  JsonStyle st;
  if (indent >= 0) {
    st.has_indent = true;
    st.indent = std::string(std::clamp(indent, 0, 256), ' ');
    st.item_sep = ",";
  }
  st.sort_keys = sort_keys;
  std::string out;
  KILN_RETURN_IF_ERROR(WriteJson(v, st, 0, &out));
  return out;
}

Result<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& a) {
  const Value* arg0 = a.positional.empty() ? nullptr : &a.positional[0];
  if (name == "tojson") {
    // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonStyle st;
    st.ensure_ascii = BoolArg(a, "ensure_ascii", 0, false);
    const Value* indent = Arg(a, "indent", 1);
    if (indent && !indent->is_none()) {
      st.has_indent = true;
      st.indent =
          indent->is_string()
              ? indent->as_string()
              : std::string(indent->is_int() ? std::clamp<int64_t>(indent->as_int(), 0, 256) : 0,
                            ' ');
      st.item_sep = ",";
    }
    const Value* seps = Arg(a, "separators", 2);
    if (seps && seps->is_list() && seps->as_list().size() == 2) {
      st.item_sep = seps->as_list()[0].Str();
      st.key_sep = seps->as_list()[1].Str();
    }
    st.sort_keys = BoolArg(a, "sort_keys", 3, false);
    std::string out;
    KILN_RETURN_IF_ERROR(WriteJson(input, st, 0, &out));
    return Value(std::move(out));
  }
  if (name == "length" || name == "count") {
    KILN_ASSIGN_OR_RETURN(int64_t n, Length(input));
    return Value(n);
  }
  if (name == "default" || name == "d") {
    bool use_default = BoolArg(a, "boolean", 1, false) ? !input.Truthy() : input.is_undefined();
    if (!use_default) return input;
    const Value* def = Arg(a, "default_value", 0);
    return def ? *def : Value("");
  }
  if (name == "e" || name == "escape") {
    if (input.is_safe()) return input;
    return Value(HtmlEscape(input.Str())).AsSafe();
  }
  if (name == "safe") return (input.is_string() ? input : Value(input.Str())).AsSafe();
  if (name == "string") return input.is_string() ? input : Value(input.Str());
  if (name == "trim") {
    CallArgs strip_args;
    if (arg0) strip_args.positional.push_back(*arg0);
    KILN_ASSIGN_OR_RETURN(Value strip, GetAttr(Value(input.Str()), "strip"));
    return strip.as_function()(strip_args);
  }
  if (name == "title") {
    // jinja2's title filter (not str.title): the first character of each chunk that follows
    // -, whitespace, (, {, [ or < goes upper case, the rest of the chunk lower case.
    std::string s = input.Str(), out, chunk;
    auto flush = [&] {
      out += PyCapitalize(chunk);  // chunk[0].upper() + chunk[1:].lower()
      chunk.clear();
    };
    for (std::string_view c : Utf8Chars(s)) {
      uint32_t cp = DecodeUtf8(c);
      bool delimiter =
          cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || IsPythonSpace(cp);
      if (delimiter) {
        flush();
        out += c;
      } else {
        chunk += c;
      }
    }
    flush();
    return Value(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    KILN_ASSIGN_OR_RETURN(Value method, GetAttr(Value(input.Str()), std::string(name)));
    return method.as_function()(CallArgs{});
  }
  if (name == "replace") {
    KILN_ASSIGN_OR_RETURN(Value method, GetAttr(Value(input.Str()), "replace"));
    return method.as_function()(a);
  }
  if (name == "join") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    const Value* sep = Arg(a, "d", 0);
    const Value* attr = Arg(a, "attribute", 1);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep ? sep->Str() : "";
      Value item = items[i];
      if (attr && attr->is_string()) {
        KILN_ASSIGN_OR_RETURN(item, GetPath(item, attr->as_string()));
      }
      out += item.Str();
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::List();
    if (!input.is_dict()) return InvalidArgument("items filter needs a mapping");
    ValueList out;
    for (const auto& [k, v] : input.as_dict().entries) out.push_back(Value::List({k, v}).AsTuple());
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!input.is_dict()) return InvalidArgument("dictsort needs a mapping");
    bool case_sensitive = BoolArg(a, "case_sensitive", 0, false);
    const Value* by = Arg(a, "by", 1);
    bool by_value = by && by->is_string() && by->as_string() == "value";
    bool reverse = BoolArg(a, "reverse", 2, false);
    ValueList items;
    std::vector<Value> keys;
    for (const auto& [k, v] : input.as_dict().entries) {
      items.push_back(Value::List({k, v}).AsTuple());
      keys.push_back(Lowered(by_value ? v : k, case_sensitive));
    }
    KILN_ASSIGN_OR_RETURN(ValueList sorted, SortValues(std::move(items), keys, reverse));
    return Value::List(std::move(sorted));
  }
  if (name == "list") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    return Value::List(std::move(items));
  }
  if (name == "first" || name == "last") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    if (items.empty()) return Value::Undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "select" || name == "reject") return SelectFilter(input, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") {
    return SelectFilter(input, a, true, name == "selectattr");
  }
  if (name == "map") {
    if (!input.Truthy()) return Value::List().AsGenerator();
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    ValueList out;
    const Value* attr = Arg(a, "attribute", SIZE_MAX);
    const Value* def = Arg(a, "default", SIZE_MAX);
    for (const Value& item : items) {
      if (attr) {
        KILN_ASSIGN_OR_RETURN(Value v, GetPath(item, attr->Str()));
        out.push_back(v.is_undefined() && def ? *def : v);
      } else {
        if (!arg0) return InvalidArgument("map needs a filter name or attribute=");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        rest.keywords = a.keywords;
        KILN_ASSIGN_OR_RETURN(Value v, ApplyFilter(arg0->Str(), item, rest));
        out.push_back(std::move(v));
      }
    }
    return Value::List(std::move(out)).AsGenerator();
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    bool reverse = name == "sort" && BoolArg(a, "reverse", 0, false);
    bool case_sensitive = BoolArg(a, "case_sensitive", name == "sort" ? 1 : 0, false);
    size_t attr_index = name == "sort" ? 2 : 1;
    std::vector<Value> keys;
    for (const Value& item : items) {
      KILN_ASSIGN_OR_RETURN(Value k, SortKey(item, a, attr_index, case_sensitive));
      keys.push_back(std::move(k));
    }
    if (name == "unique") {
      ValueList out;
      std::vector<Value> seen;
      for (size_t i = 0; i < items.size(); ++i) {
        bool dup = false;
        for (const Value& s : seen) dup = dup || s.Equals(keys[i]);
        if (!dup) {
          seen.push_back(keys[i]);
          out.push_back(items[i]);
        }
      }
      return Value::List(std::move(out));
    }
    KILN_ASSIGN_OR_RETURN(ValueList sorted, SortValues(items, keys, reverse));
    if (name == "sort") return Value::List(std::move(sorted));
    if (sorted.empty()) return Value::Undefined();
    return name == "min" ? sorted.front() : sorted.back();
  }
  if (name == "sum") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    const Value* attr = Arg(a, "attribute", 0);
    const Value* start = Arg(a, "start", 1);
    Value total = start ? *start : Value(int64_t{0});
    for (const Value& item : items) {
      Value v = item;
      if (attr && attr->is_string()) {
        KILN_ASSIGN_OR_RETURN(v, GetPath(item, attr->as_string()));
      }
      KILN_ASSIGN_OR_RETURN(total, BinaryOp("+", total, v));
    }
    return total;
  }
  if (name == "abs") {
    if (input.is_float()) return Value(std::fabs(input.as_double()));
    if (input.is_number()) return Value(std::abs(input.as_int()));
    return InvalidArgument("bad operand type for abs(): '" + input.TypeName() + "'");
  }
  if (name == "round") {
    if (!input.is_number()) return InvalidArgument("round needs a number");
    const Value* how = Arg(a, "method", 1);
    if (!input.is_float() && (!how || how->Str() == "common")) return Value(input.as_int());
    const Value* precision = Arg(a, "precision", 0);
    const Value* method = Arg(a, "method", 1);
    double scale = std::pow(10.0, precision && precision->is_int() ? precision->as_int() : 0);
    double x = input.as_double() * scale;
    std::string m = method ? method->Str() : "common";
    double r = m == "ceil"    ? std::ceil(x)
               : m == "floor" ? std::floor(x)
                              : std::nearbyint(x);  // Python round(): half to even
    return Value(r / scale);
  }
  if ((name == "int" || name == "float") && input.is_undefined()) {
    return InvalidArgument("'" + input.undefined_name() + "' is undefined");
  }
  if (name == "int") return ToInt(input, a);
  if (name == "float") {
    if (input.is_number()) return Value(input.as_double());
    if (input.is_string()) {
      char* end = nullptr;
      double d = std::strtod(input.as_string().c_str(), &end);
      if (!input.as_string().empty() && *end == '\0') return Value(d);
    }
    const Value* def = Arg(a, "default", 0);
    return def ? *def : Value(0.0);
  }
  if (name == "wordcount") {  // jinja2: len(re.findall(r"\w+", str(value)))
    int64_t n = 0;
    bool in_word = false;
    for (char c : input.Str()) {
      auto u = static_cast<unsigned char>(c);
      bool word = std::isalnum(u) || c == '_' || u >= 0x80;
      if (word && !in_word) ++n;
      in_word = word;
    }
    return Value(n);
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<std::string_view> chars = Utf8Chars(input.as_string());
      std::string out;
      for (size_t i = chars.size(); i-- > 0;) out += chars[i];
      return Value(std::move(out));
    }
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items)).AsGenerator();
  }
  if (name == "indent") return Indent(input, a);
  if (name == "batch") {
    KILN_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    if (!arg0 || !arg0->is_int() || arg0->as_int() <= 0)
      return InvalidArgument("batch needs a size");
    ValueList out;
    for (size_t i = 0; i < items.size(); i += arg0->as_int()) {
      size_t end = std::min(items.size(), i + static_cast<size_t>(arg0->as_int()));
      out.push_back(Value::List(ValueList(items.begin() + i, items.begin() + end)));
    }
    return Value::List(std::move(out));
  }
  if (name == "attr") {
    if (!arg0) return InvalidArgument("attr needs a name");
    return GetAttr(input, arg0->Str());
  }
  return InvalidArgument("no filter named '" + std::string(name) + "'");
}

Result<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& a) {
  const Value* arg0 = a.positional.empty() ? nullptr : &a.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable" || name == "sequence") {
    return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  }
  if (name == "callable") return v.is_callable() || v.is_undefined();  // Undefined has __call__
  if (name == "escaped") return false;
  if (name == "lower") return PyIsLower(v.Str());  // jinja2: str(value).islower()
  if (name == "upper") return PyIsUpper(v.Str());
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (Python semantics, bools too).
    Value divisor = name == "divisibleby" ? (arg0 ? *arg0 : Value::Undefined("num")) : Value(2);
    KILN_ASSIGN_OR_RETURN(Value r, BinaryOp("%", v, divisor));
    return r.Equals(Value(name == "odd" ? 1 : 0));
  }
  static const std::pair<const char*, const char*> kComparisons[] = {
      {"equalto", "=="}, {"eq", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="},      {"lt", "<"},  {"lessthan", "<"}, {"<", "<"},
      {"le", "<="},      {"<=", "<="}, {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},        {"ge", ">="}, {">=", ">="},      {"in", "in"}};
  for (const auto& [test, op] : kComparisons) {
    if (name == test) {
      if (!arg0) return InvalidArgument("test '" + std::string(name) + "' needs an argument");
      KILN_ASSIGN_OR_RETURN(Value r, BinaryOp(op, v, *arg0));
      return r.Truthy();
    }
  }
  if (name == "sameas") return arg0 && v.Equals(*arg0) && v.kind() == arg0->kind();
  return InvalidArgument("no test named '" + std::string(name) + "'");
}

}  // namespace kiln::jinja
