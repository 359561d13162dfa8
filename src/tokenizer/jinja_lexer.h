// Lexer for the Jinja subset of chat templates: splits a template into text and the tokens of
// its {{ }} and {% %} tags, applying whitespace control as HF transformers configures jinja2:
// trim_blocks (the first newline after a block or comment tag is removed), lstrip_blocks (spaces
// and tabs before a block or comment tag that starts its line are removed; `{%+` opts out), and
// explicit `-` on either side of a tag (strips all whitespace on that side). Comments vanish.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln::jinja {

enum class TokenKind : uint8_t {
  kText,       // literal template text (already whitespace-trimmed)
  kExprBegin,  // {{
  kExprEnd,    // }}
  kStmtBegin,  // {%
  kStmtEnd,    // %}
  kName,       // identifier or keyword
  kString,     // string literal, escapes resolved
  kInt,        // integer literal
  kFloat,      // float literal
  kOperator,   // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } . , : |
  kEnd,        // end of template
};

struct Token {
  TokenKind kind;
  std::string text;  // text, name, string value or operator
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;  // byte offset in the source, for line/column in errors
};

// 1-based line and column of byte `offset` in `source`, as "line L, column C".
std::string DescribeLocation(std::string_view source, size_t offset);

// jinja2's source normalization: \r\n and \r become \n, and one trailing newline is dropped
// (keep_trailing_newline=False). ChatTemplate::Parse applies it before Lex.
std::string NormalizeNewlines(std::string_view source);

// Tokenizes `source`. Fails (kInvalidArgument, with line and column) on an unterminated tag,
// string or comment, or a character that starts no token.
Result<std::vector<Token>> Lex(std::string_view source);

}  // namespace kiln::jinja
