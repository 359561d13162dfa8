#include "tokenizer/jinja_lexer.h"

#include "tokenizer/jinja_unicode.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace kiln::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view RStripAll(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool strip_leading = false;  // the previous tag ended with '-'
    bool trim_newline = false;   // the previous tag was a block or comment (trim_blocks)
    while (true) {
      size_t tag = FindTag(pos);
      std::string_view text =
          src_.substr(pos, (tag == std::string_view::npos ? src_.size() : tag) - pos);
      if (strip_leading) {
        while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
      } else if (trim_newline) {
        if (text.starts_with("\r\n")) {
          text.remove_prefix(2);
        } else if (text.starts_with("\n")) {
          text.remove_prefix(1);
        }
      }
      size_t text_start = static_cast<size_t>(text.data() - src_.data());
      bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
      if (tag == std::string_view::npos) {
        Emit(TokenKind::kText, std::string(text), pos);
        break;
      }
      char type = src_[tag + 1];
      char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        text = RStripAll(text);
      } else if (type != '{' && modifier != '+') {
        // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
        if (line_start > 0 || line_starting) {
          std::string_view tail = text.substr(line_start);
          if (tail.find_first_not_of(" \t") == std::string_view::npos) {
            text = text.substr(0, line_start);
          }
        }
      }
      Emit(TokenKind::kText, std::string(text), pos);
      size_t inner = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (type == '#') {
        size_t end = src_.find("#}", inner);
        if (end == std::string_view::npos) return Error("unterminated comment", tag);
        strip_leading = end > inner && src_[end - 1] == '-';
        trim_newline = true;
        pos = end + 2;
        continue;
      }
      bool is_block = type == '%';
      Emit(is_block ? TokenKind::kStmtBegin : TokenKind::kExprBegin, "", tag);
      KILN_ASSIGN_OR_RETURN(size_t close, LexTag(inner, is_block ? '%' : '}', &strip_leading));
      trim_newline = is_block;
      pos = close;
      if (is_block && IsRawTag()) {
        KILN_ASSIGN_OR_RETURN(pos, LexRaw(pos, &strip_leading));
      }
    }
    Emit(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  Status Error(std::string_view what, size_t offset) {
    return InvalidArgument("template syntax error at " + DescribeLocation(src_, offset) + ": " +
                           std::string(what));
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    if (kind == TokenKind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), 0, 0, offset});
  }

  size_t FindTag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string_view::npos || p + 1 >= src_.size()) return std::string_view::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  // {% raw %}: the last tokens are StmtBegin, Name "raw", StmtEnd.
  bool IsRawTag() const {
    size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 1].kind == TokenKind::kStmtEnd &&
           tokens_[n - 2].kind == TokenKind::kName && tokens_[n - 2].text == "raw" &&
           tokens_[n - 3].kind == TokenKind::kStmtBegin;
  }

  // Emits the raw text up to {% endraw %} and returns the offset after that tag.
  Result<size_t> LexRaw(size_t pos, bool* strip_leading) {
    size_t start = pos;
    tokens_.resize(tokens_.size() - 3);
    size_t search = pos;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string_view::npos) return Error("missing {% endraw %}", start);
      size_t i = tag + 2;
      bool strip_before = i < src_.size() && src_[i] == '-';
      if (strip_before || (i < src_.size() && src_[i] == '+')) ++i;
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (src_.substr(i, 6) != "endraw") {
        search = tag + 2;
        continue;
      }
      i += 6;
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      bool strip_after = i < src_.size() && src_[i] == '-';
      if (strip_after) ++i;
      if (src_.substr(i, 2) != "%}") return Error("malformed {% endraw %}", tag);
      std::string_view text = src_.substr(start, tag - start);
      if (*strip_leading) {
        while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
      }
      if (strip_before) text = RStripAll(text);
      Emit(TokenKind::kText, std::string(text), start);
      *strip_leading = strip_after;
      return i + 2;
    }
  }

  // Lexes the inside of a tag starting at `pos`; returns the offset after its closing delimiter.
  Result<size_t> LexTag(size_t pos, char close_char, bool* strip_leading) {
    int depth = 0;  // open ( [ { inside the tag, so that `}}` of nested dicts is not the end
    size_t open = pos;
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      if (pos >= src_.size()) return Error("unterminated tag", open - 2);
      std::string_view rest = src_.substr(pos);
      if (depth == 0) {
        bool dash =
            rest.starts_with('-') && rest.size() >= 3 && rest[1] == close_char && rest[2] == '}';
        if (dash || (rest.size() >= 2 && rest[0] == close_char && rest[1] == '}')) {
          *strip_leading = dash;
          Emit(close_char == '%' ? TokenKind::kStmtEnd : TokenKind::kExprEnd, "", pos);
          return pos + (dash ? 3 : 2);
        }
      }
      char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        Emit(TokenKind::kName, std::string(rest.substr(0, n)), pos);
        pos += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        KILN_ASSIGN_OR_RETURN(pos, LexNumber(pos));
      } else if (c == '\'' || c == '"') {
        KILN_ASSIGN_OR_RETURN(pos, LexString(pos));
      } else {
        static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        size_t n = 0;
        for (std::string_view op : kTwo) {
          if (rest.starts_with(op)) n = 2;
        }
        if (n == 0) {
          if (std::string_view("+-*/%~<>=()[]{}.,:|").find(c) == std::string_view::npos) {
            return Error(std::string("unexpected character '") + c + "'", pos);
          }
          n = 1;
          if (c == '(' || c == '[' || c == '{') ++depth;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        }
        Emit(TokenKind::kOperator, std::string(rest.substr(0, n)), pos);
        pos += n;
      }
    }
  }

  Result<size_t> LexNumber(size_t pos) {
    size_t end = pos;
    bool is_float = false;
    auto digits = [&] {
      while (end < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInt, text, 0, 0, pos};
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), token.int_value);
      if (ec != std::errc()) return Error("integer literal out of range", pos);
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  Result<size_t> LexString(size_t pos) {
    char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) return Error("unterminated string literal", pos);
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return Error("unterminated string literal", pos);
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) return Error("truncated escape in string literal", i);
          uint32_t cp = 0;
          auto [p, ec] = std::from_chars(src_.data() + i, src_.data() + i + n, cp, 16);
          if (ec != std::errc() || p != src_.data() + i + n) {
            return Error("bad escape in string literal", i);
          }
          AppendUtf8(value, cp);
          i += n;
          break;
        }
        default:  // Python keeps unknown escapes as written
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back(Token{TokenKind::kString, std::move(value), 0, 0, pos});
    return i + 1;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string DescribeLocation(std::string_view source, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace kiln::jinja
