// Value: the dynamic value of the Jinja subset behind chat templates (chat_template.h).
//
// Values follow Python/jinja2 semantics where chat templates can observe them: truthiness,
// equality (1 == 1.0 == True), str() and repr() (floats print as Python does: 1.0, 0.5), and
// jinja2's default Undefined (prints as "", is falsy, iterates as empty, fails on arithmetic,
// attribute access and calls).
//
// Lists, dicts and namespaces are shared by reference, as in Python: copying a Value copies the
// handle, so `ns.x = 1` through one copy is seen through all. Dicts keep insertion order.
// Not thread-safe: a Value graph belongs to one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::jinja {

class Value;
using ValueList = std::vector<Value>;

// Insertion-ordered dict with linear lookup (template dicts are small).
struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* Find(const Value& key) const;
  // Find for a string key, without building a Value (attribute lookups).
  const Value* FindString(std::string_view key) const;
  Value* Find(const Value& key);
  void Set(Value key, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument named `name`, else the positional one at `index`, else nullptr.
  const Value* Get(std::string_view name, size_t index) const;
};

using NativeFunction = std::function<Result<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,  // namespace(): a dict whose entries are attributes that `set ns.x` may change
    kCallable,
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "") {
    Value v;
    v.str_ = std::make_shared<std::string>(std::move(name));
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}       // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}     // NOLINT
  Value(int i) : kind_(Kind::kInt), int_(i) {}         // NOLINT
  Value(double d) : kind_(Kind::kFloat), float_(d) {}  // NOLINT
  Value(std::string s)                                 // NOLINT
      : kind_(Kind::kString), str_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  static Value List(ValueList items = {});
  static Value Dict(ValueDict dict = {});
  static Value Namespace(ValueDict dict = {});
  static Value Callable(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  // REQUIRES: the matching kind (CHECKed).
  bool as_bool() const;
  int64_t as_int() const;    // also bool
  double as_double() const;  // int, float or bool
  const std::string& as_string() const;
  ValueList& as_list() const;
  ValueDict& as_dict() const;  // dict or namespace
  const NativeFunction& as_function() const;
  // For an undefined value: the name that was looked up (for error messages), else "".
  const std::string& undefined_name() const;

  // A list made by select/reject/map stands for jinja2's generator: always truthy, has no len(),
  // is not JSON-serializable, prints as "<generator object ...>"; the `list` filter makes it a
  // plain list again.
  bool is_generator() const { return is_generator_; }
  Value AsGenerator() const {
    Value v = *this;
    v.is_generator_ = true;
    return v;
  }
  // A string marked safe (markupsafe.Markup, from the `safe` filter): `+` with a plain string
  // HTML-escapes the plain one, as Markup.__add__ does.
  bool is_safe() const { return is_safe_; }
  // A list that stands for a Python tuple (literal `(a, b)`, dict items): prints as (a, b).
  Value AsTuple() const {
    Value v = *this;
    v.is_tuple_ = true;
    return v;
  }
  Value AsSafe(bool safe = true) const {
    Value v = *this;
    v.is_safe_ = safe;
    return v;
  }

  bool Truthy() const;
  // Python str(): strings as-is, None -> "None", True -> "True", containers as repr.
  // Undefined -> "".
  std::string Str() const;
  // Python repr(): strings quoted ('a' or "it's").
  std::string Repr() const;
  // jinja2's idea of a type name, for messages: "str", "int", "list", "dict", "undefined", ...
  std::string TypeName() const;

  // Python ==: numbers by value across int/float/bool; containers element-wise.
  bool Equals(const Value& other) const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  bool is_generator_ = false;
  bool is_safe_ = false;
  bool is_tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;  // string, or undefined's name
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<std::pair<std::string, NativeFunction>> fn_;
};

// markupsafe.escape(): & < > " ' as HTML entities.
std::string HtmlEscape(std::string_view s);

// markupsafe.escape(): & < > " ' as HTML entities.
std::string HtmlEscape(std::string_view s);

// ASCII case mapping (other bytes unchanged).
inline char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
inline char AsciiUpper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }

// Python repr() of a float: shortest round-trip digits, always with '.0' or an exponent.
std::string FormatPythonFloat(double d);

// Python str.__repr__ of `s`.
std::string PythonStringRepr(std::string_view s);

// Number of Unicode code points in UTF-8 `s` (Python len()).
size_t Utf8Length(std::string_view s);
// Splits UTF-8 `s` into code points, each as its byte string.
std::vector<std::string_view> Utf8Chars(std::string_view s);

}  // namespace kiln::jinja
