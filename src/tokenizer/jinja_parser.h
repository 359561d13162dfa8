// Parser for the Jinja subset of chat templates: tokens (jinja_lexer.h) -> syntax tree
// (jinja_ast.h). Grammar and operator precedence follow jinja2 (lowest first): `x if c else y`,
// or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix
// (.attr, [item], [a:b:c], (call)) and filters `|` / tests `is`.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (also `ns.attr = ...`
// and block set), macro, call, filter, break, continue, raw, and HF's `generation` tag.
#pragma once

#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"

namespace kiln::jinja {

struct ParseLimits {
  // Deepest nesting of expressions and blocks accepted; deeper input fails instead of
  // exhausting the stack.
  int max_nesting_depth = 256;
};

// Parses a whole template. Fails with kInvalidArgument naming the line and column of the first
// syntax error (unknown tag, unclosed block, unexpected token).
Result<StmtList> ParseTemplate(std::string_view source, const ParseLimits& limits = {});

}  // namespace kiln::jinja
