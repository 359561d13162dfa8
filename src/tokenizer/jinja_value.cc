#include "tokenizer/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace kiln::jinja {

const Value* ValueDict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::FindString(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

Value* ValueDict::Find(const Value& key) {
  for (auto& [k, v] : entries) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

void ValueDict::Set(Value key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(std::string_view name, size_t index) const {
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  if (index < positional.size()) return &positional[index];
  return nullptr;
}

Value Value::List(ValueList items) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Dict(ValueDict dict) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::Namespace(ValueDict dict) {
  Value v(Kind::kNamespace);
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::Callable(std::string name, NativeFunction fn) {
  Value v(Kind::kCallable);
  v.fn_ = std::make_shared<std::pair<std::string, NativeFunction>>(std::move(name), std::move(fn));
  return v;
}

bool Value::as_bool() const {
  CHECK(is_bool()) << TypeName();
  return int_ != 0;
}
int64_t Value::as_int() const {
  CHECK(is_int() || is_bool()) << TypeName();
  return int_;
}
double Value::as_double() const {
  CHECK(is_number()) << TypeName();
  return is_float() ? float_ : static_cast<double>(int_);
}
const std::string& Value::as_string() const {
  CHECK(is_string()) << TypeName();
  return *str_;
}
ValueList& Value::as_list() const {
  CHECK(is_list()) << TypeName();
  return *list_;
}
ValueDict& Value::as_dict() const {
  CHECK(is_dict() || is_namespace()) << TypeName();
  return *dict_;
}
const NativeFunction& Value::as_function() const {
  CHECK(is_callable()) << TypeName();
  return fn_->second;
}
const std::string& Value::undefined_name() const {
  static const std::string kEmpty;
  return is_undefined() && str_ ? *str_ : kEmpty;
}

bool Value::Truthy() const {
  if (is_generator_) return true;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  double magnitude = std::fabs(d);
  bool scientific = magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16);
  auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), d,
                    scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(buf, end);
  if (scientific) {
    // C++ writes 1e+16 / 1.5e-05; Python writes 1e+16 / 1.5e-05 too (at least two exponent digits).
    return s;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string PythonStringRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Value::Str() const {
  if (is_generator_) return "<generator object select_or_reject at 0x7f0000000000>";
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return PythonStringRepr(*str_);
    case Kind::kList: {
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (is_tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kCallable:
      return "<function " + fn_->first + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return int_ == other.int_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *str_ == *other.str_;
    case Kind::kList: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->entries.size() != other.dict_->entries.size()) return false;
      for (const auto& [k, v] : dict_->entries) {
        const Value* o = other.dict_->Find(k);
        if (!o || !o->Equals(v)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return dict_ == other.dict_;
    case Kind::kCallable:
      return fn_ == other.fn_;
    default:
      return false;
  }
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::vector<std::string_view> Utf8Chars(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace kiln::jinja
