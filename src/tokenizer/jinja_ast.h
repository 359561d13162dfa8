// Syntax tree of a parsed template (built by jinja_parser.h, run by jinja_evaluator.h).
// Nodes are immutable after parsing and shared by every render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace kiln::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,      // literal
    kName,         // name
    kList,         // [children...]
    kTuple,        // (children...) — evaluates to a list
    kDict,         // {children[0]: children[1], ...}
    kGetAttr,      // children[0].name
    kGetItem,      // children[0][children[1]]
    kSlice,        // children[0][children[1]:children[2]:children[3]] (any may be null)
    kCall,         // children[0](children[1..], keywords)
    kFilter,       // children[0] | name(children[1..], keywords); children[0] null in filter blocks
    kTest,         // children[0] is [not] name(children[1..])
    kUnary,        // name ("-", "+", "not") children[0]
    kBinary,       // children[0] name children[1]; name is an operator, "and", "or", "in", "not in"
    kConditional,  // children[1] if children[0] else children[2] (children[2] may be null)
  };

  Kind kind;
  size_t offset = 0;  // source offset, for error locations
  Value literal;
  std::string name;
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition or null for else, body)
    kFor,          // for targets in expr [if condition]: body [else else_body]
    kSet,          // set targets = expr; or set attr_object.name = expr when attr_object is set
    kSetBlock,     // set targets[0] [| filter] %}body{% endset  (expr: the filter, input null)
    kMacro,        // macro name(params = defaults): body
    kCallBlock,    // call(params) expr: body — `caller` in the macro renders body
    kFilterBlock,  // filter expr: body
    kBreak,
    kContinue,
    kScope,  // body rendered in place (e.g. the `generation` tag HF adds)
  };

  Kind kind;
  size_t offset = 0;
  std::string text;
  std::string name;
  std::string attr_object;  // kSet: `ns` of `set ns.name = ...`
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;  // for/set targets, macro/call parameters
  std::vector<ExprPtr> defaults;     // macro parameter defaults (null where none)
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
};

}  // namespace kiln::jinja
