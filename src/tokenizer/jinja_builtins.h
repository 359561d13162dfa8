// Built-in behaviour of the Jinja subset: Python operators, attribute/item access and the
// methods of str, list and dict (jinja_ops.cc), and jinja2's filters and tests plus HF's
// `tojson` (jinja_filters.cc). Each returns an error Status (without location; the evaluator
// adds it) where jinja2 would raise.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja_value.h"

namespace kiln::jinja {

// ---- Operators and access (jinja_ops.cc) ------------------------------------------------------

// Python binary operator `op`: + - * / // % ** ~ == != < > <= >= in "not in".
Result<Value> BinaryOp(std::string_view op, const Value& lhs, const Value& rhs);
// Python ordering for sort/min/max and < >: numbers, strings, lists. Fails on other mixes.
Result<int> Compare(const Value& lhs, const Value& rhs);
// `obj.name` as jinja2's sandbox does it: a method of str/list/dict (bound), else the item.
// Missing -> undefined; attribute of undefined fails.
Result<Value> GetAttr(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute for string keys. Missing -> undefined.
Result<Value> GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` on lists and strings; null parts are Undefined values.
Result<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a `for` loop visits: list items, dict keys, string characters; undefined -> none.
Result<ValueList> Iterate(const Value& v);
// Python len(): code points for strings.
Result<int64_t> Length(const Value& v);

// ---- Filters and tests (jinja_filters.cc) -----------------------------------------------------

// Applies filter `name` to `input`. Unknown filter -> kInvalidArgument.
Result<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
// Applies test `name` (defined, none, string, mapping, equalto, ...). Unknown -> error.
Result<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys) as HF's
// `tojson` calls it; indent < 0 means None. Fails on undefined and callables.
Result<std::string> ToJson(const Value& v, int indent, bool sort_keys = false);

}  // namespace kiln::jinja
