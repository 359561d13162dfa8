#include "tokenizer/jinja_parser.h"

#include <initializer_list>
#include <set>
#include <utility>

#include "tokenizer/jinja_lexer.h"

namespace kiln::jinja {
namespace {

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens, const ParseLimits& limits)
      : src_(source), tokens_(std::move(tokens)), limits_(limits) {}

  Result<StmtList> ParseAll() {
    StmtList body;
    std::string end_tag;
    KILN_RETURN_IF_ERROR(ParseBody({}, &body, &end_tag));
    return body;
  }

 private:
  // ---- Token helpers ------------------------------------------------------------------------
  const Token& Peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool AcceptOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  Status Error(std::string what, size_t offset) const {
    return InvalidArgument("template syntax error at " + DescribeLocation(src_, offset) + ": " +
                           what);
  }
  Status Unexpected(std::string_view expected) const {
    const Token& t = Peek();
    std::string found;
    switch (t.kind) {
      case TokenKind::kEnd:
        found = "end of template";
        break;
      case TokenKind::kStmtEnd:
        found = "'%}'";
        break;
      case TokenKind::kExprEnd:
        found = "'}}'";
        break;
      case TokenKind::kText:
        found = "template text";
        break;
      default:
        found = "'" + t.text + "'";
    }
    return Error("expected " + std::string(expected) + ", found " + found, t.offset);
  }
  Status ExpectOp(std::string_view op) {
    if (!AcceptOp(op)) return Unexpected("'" + std::string(op) + "'");
    return Status::Ok();
  }
  Status ExpectStmtEnd() {
    if (Peek().kind != TokenKind::kStmtEnd) return Unexpected("'%}'");
    Next();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) return Unexpected("a name");
    return Next().text;
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };
  Status CheckDepth(size_t offset) const {
    if (depth_ > limits_.max_nesting_depth) {
      return Error("nesting deeper than " + std::to_string(limits_.max_nesting_depth), offset);
    }
    return Status::Ok();
  }

  static ExprPtr Make(Expr::Kind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // ---- Statements ---------------------------------------------------------------------------

  // Parses statements until a {% tag %} whose name is in `end_tags` (consumed up to the name;
  // the name is returned in *end_tag) or the end of the template (only when end_tags is empty).
  Status ParseBody(std::initializer_list<std::string_view> end_tags, StmtList* body,
                   std::string* end_tag) {
    DepthGuard guard(&depth_);
    KILN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    while (true) {
      const Token& t = Peek();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (end_tags.size() == 0) return Status::Ok();
          return Error("unexpected end of template: missing {% " +
                           std::string(*(end_tags.end() - 1)) + " %}",
                       t.offset);
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kText;
          s->offset = t.offset;
          s->text = t.text;
          body->push_back(std::move(s));
          Next();
          break;
        }
        case TokenKind::kExprBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kOutput;
          s->offset = Next().offset;
          KILN_ASSIGN_OR_RETURN(s->expr, ParseExpression());
          if (Peek().kind != TokenKind::kExprEnd) return Unexpected("'}}'");
          Next();
          body->push_back(std::move(s));
          break;
        }
        case TokenKind::kStmtBegin: {
          const Token& name = Peek(1);
          if (name.kind != TokenKind::kName) {
            Next();
            return Unexpected("a statement name");
          }
          for (std::string_view end : end_tags) {
            if (name.text == end) {
              Next();
              Next();
              *end_tag = name.text;
              return Status::Ok();
            }
          }
          Next();
          KILN_RETURN_IF_ERROR(ParseStatement(body));
          break;
        }
        default:
          return Unexpected("template text or a tag");
      }
    }
  }

  Status ParseStatement(StmtList* body) {
    const Token& name_token = Next();
    const std::string& name = name_token.text;
    auto s = std::make_unique<Stmt>();
    s->offset = name_token.offset;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::kIf;
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
      while (true) {
        KILN_RETURN_IF_ERROR(ExpectStmtEnd());
        StmtList branch;
        KILN_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &branch, &end));
        s->branches.emplace_back(std::move(cond), std::move(branch));
        if (end == "endif") break;
        if (end == "else") {
          KILN_RETURN_IF_ERROR(ExpectStmtEnd());
          StmtList else_branch;
          KILN_RETURN_IF_ERROR(ParseBody({"endif"}, &else_branch, &end));
          s->branches.emplace_back(nullptr, std::move(else_branch));
          break;
        }
        KILN_ASSIGN_OR_RETURN(cond, ParseExpression());
      }
    } else if (name == "for") {
      s->kind = Stmt::Kind::kFor;
      KILN_RETURN_IF_ERROR(ParseTargets(&s->targets));
      if (!AcceptName("in")) return Unexpected("'in'");
      KILN_ASSIGN_OR_RETURN(s->expr, ParseExpression(/*allow_conditional=*/false));
      if (AcceptName("if")) {
        KILN_ASSIGN_OR_RETURN(s->condition, ParseExpression(false));
      }
      if (AcceptName("recursive")) return Error("recursive loops are not supported", s->offset);
      KILN_RETURN_IF_ERROR(ExpectStmtEnd());
      // break/continue belong to the body only: jinja2 compiles `else` after the Python loop.
      ++loop_depth_;
      KILN_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, &s->body, &end));
      --loop_depth_;
      if (end == "else") {
        KILN_RETURN_IF_ERROR(ExpectStmtEnd());
        KILN_RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
      }
    } else if (name == "set") {
      KILN_ASSIGN_OR_RETURN(std::string first, ExpectName());
      if (AcceptOp(".")) {
        s->kind = Stmt::Kind::kSet;
        s->attr_object = first;
        KILN_ASSIGN_OR_RETURN(s->name, ExpectName());
        KILN_RETURN_IF_ERROR(ExpectOp("="));
        KILN_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression());
      } else {
        s->targets.push_back(first);
        while (AcceptOp(",")) {
          KILN_ASSIGN_OR_RETURN(std::string t, ExpectName());
          s->targets.push_back(t);
        }
        if (AcceptOp("=")) {
          s->kind = Stmt::Kind::kSet;
          KILN_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression());
        } else {
          s->kind = Stmt::Kind::kSetBlock;
          if (s->targets.size() != 1) return Unexpected("'='");
          if (IsOp("|")) {
            KILN_ASSIGN_OR_RETURN(s->expr, ParseFilters(nullptr));
          }
          KILN_RETURN_IF_ERROR(ExpectStmtEnd());
          KILN_RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
        }
      }
    } else if (name == "macro") {
      s->kind = Stmt::Kind::kMacro;
      KILN_ASSIGN_OR_RETURN(s->name, ExpectName());
      KILN_RETURN_IF_ERROR(ParseParameters(s.get()));
      KILN_RETURN_IF_ERROR(ExpectStmtEnd());
      int outer_loop_depth = std::exchange(loop_depth_, 0);  // a macro body is its own function
      KILN_RETURN_IF_ERROR(ParseBody({"endmacro"}, &s->body, &end));
      loop_depth_ = outer_loop_depth;
    } else if (name == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (IsOp("(")) KILN_RETURN_IF_ERROR(ParseParameters(s.get()));
      KILN_ASSIGN_OR_RETURN(s->expr, ParseExpression());
      if (s->expr->kind != Expr::Kind::kCall) return Error("{% call %} needs a call", s->offset);
      KILN_RETURN_IF_ERROR(ExpectStmtEnd());
      int outer_loop_depth = std::exchange(loop_depth_, 0);
      KILN_RETURN_IF_ERROR(ParseBody({"endcall"}, &s->body, &end));
      loop_depth_ = outer_loop_depth;
    } else if (name == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      KILN_ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr));
      KILN_RETURN_IF_ERROR(ExpectStmtEnd());
      KILN_RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->body, &end));
    } else if (name == "generation") {
      s->kind = Stmt::Kind::kScope;
      KILN_RETURN_IF_ERROR(ExpectStmtEnd());
      KILN_RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->body, &end));
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error("'" + name + "' outside a loop", s->offset);
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else {
      return Error("unknown tag '" + name + "'", name_token.offset);
    }
    // Every statement ends with its own or its end tag's %}.
    KILN_RETURN_IF_ERROR(ExpectStmtEnd());
    body->push_back(std::move(s));
    return Status::Ok();
  }

  Status ParseTargets(std::vector<std::string>* targets) {
    bool paren = AcceptOp("(");
    do {
      KILN_ASSIGN_OR_RETURN(std::string t, ExpectName());
      targets->push_back(t);
    } while (AcceptOp(","));
    if (paren) KILN_RETURN_IF_ERROR(ExpectOp(")"));
    return Status::Ok();
  }

  Status ParseParameters(Stmt* s) {
    KILN_RETURN_IF_ERROR(ExpectOp("("));
    while (!AcceptOp(")")) {
      if (!s->targets.empty()) KILN_RETURN_IF_ERROR(ExpectOp(","));
      if (AcceptOp(")")) break;
      KILN_ASSIGN_OR_RETURN(std::string param, ExpectName());
      s->targets.push_back(param);
      ExprPtr def;
      if (AcceptOp("=")) {
        KILN_ASSIGN_OR_RETURN(def, ParseExpression());
      }
      s->defaults.push_back(std::move(def));
    }
    return Status::Ok();
  }

  // ---- Expressions --------------------------------------------------------------------------

  // `a, b` without brackets (as in `set x = 1, 2`) is a tuple.
  Result<ExprPtr> ParseTupleOrExpression() {
    size_t offset = Peek().offset;
    KILN_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, offset);
    tuple->children.push_back(std::move(first));
    while (AcceptOp(",")) {
      KILN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  Result<ExprPtr> ParseExpression(bool allow_conditional = true) {
    DepthGuard guard(&depth_);
    KILN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    KILN_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (allow_conditional && IsName("if")) {
      size_t offset = Next().offset;
      ExprPtr cond_expr = Make(Expr::Kind::kConditional, offset);
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (AcceptName("else")) {
        KILN_ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond_expr->children.push_back(std::move(cond));
      cond_expr->children.push_back(std::move(expr));
      cond_expr->children.push_back(std::move(otherwise));
      expr = std::move(cond_expr);
    }
    return expr;
  }

  ExprPtr Binary(std::string op, ExprPtr lhs, ExprPtr rhs, size_t offset) {
    ExprPtr e = Make(Expr::Kind::kBinary, offset);
    e->name = std::move(op);
    e->children.push_back(std::move(lhs));
    e->children.push_back(std::move(rhs));
    return e;
  }

  Result<ExprPtr> ParseOr() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseAnd());
    while (IsName("or")) {
      size_t offset = Next().offset;
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
      lhs = Binary("or", std::move(lhs), std::move(rhs), offset);
    }
    return lhs;
  }

  Result<ExprPtr> ParseAnd() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseNot());
    while (IsName("and")) {
      size_t offset = Next().offset;
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
      lhs = Binary("and", std::move(lhs), std::move(rhs), offset);
    }
    return lhs;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      size_t offset = Next().offset;
      DepthGuard guard(&depth_);
      KILN_RETURN_IF_ERROR(CheckDepth(offset));
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      ExprPtr e = Make(Expr::Kind::kUnary, offset);
      e->name = "not";
      e->children.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseMath1());
    while (true) {
      size_t offset = Peek().offset;
      std::string op;
      if (Peek().kind == TokenKind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        return lhs;
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      lhs = Binary(op, std::move(lhs), std::move(rhs), offset);
    }
  }

  Result<ExprPtr> ParseMath1() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseConcat());
      lhs = Binary(op.text, std::move(lhs), std::move(rhs), op.offset);
    }
    return lhs;
  }

  Result<ExprPtr> ParseConcat() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseMath2());
    while (IsOp("~")) {
      const Token& op = Next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath2());
      lhs = Binary("~", std::move(lhs), std::move(rhs), op.offset);
    }
    return lhs;
  }

  Result<ExprPtr> ParseMath2() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParsePow());
      lhs = Binary(op.text, std::move(lhs), std::move(rhs), op.offset);
    }
    return lhs;
  }

  Result<ExprPtr> ParsePow() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, ParseUnary());
    while (IsOp("**")) {
      const Token& op = Next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary());
      lhs = Binary("**", std::move(lhs), std::move(rhs), op.offset);
    }
    return lhs;
  }

  // `-x | f` is `(-x) | f`, as in jinja2: the operand of a sign takes no filters or tests.
  Result<ExprPtr> ParseUnary(bool with_filters = true) {
    DepthGuard guard(&depth_);
    KILN_RETURN_IF_ERROR(CheckDepth(Peek().offset));
    ExprPtr expr;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(/*with_filters=*/false));
      expr = Make(Expr::Kind::kUnary, op.offset);
      expr->name = op.text;
      expr->children.push_back(std::move(operand));
    } else {
      KILN_ASSIGN_OR_RETURN(expr, ParsePrimary());
      KILN_ASSIGN_OR_RETURN(expr, ParsePostfix(std::move(expr)));
    }
    if (!with_filters) return expr;
    return ParseFilterChain(std::move(expr));
  }

  // Filters and tests after an operand: x | f(a) | g is [not] t(b).
  Result<ExprPtr> ParseFilterChain(ExprPtr expr) {
    while (true) {
      if (IsOp("|") || (expr == nullptr && Peek().kind == TokenKind::kName)) {
        KILN_ASSIGN_OR_RETURN(expr, ParseFilters(std::move(expr)));
      } else if (IsName("is")) {
        KILN_ASSIGN_OR_RETURN(expr, ParseTest(std::move(expr)));
      } else {
        return expr;
      }
    }
  }

  // One filter `| name[(args)]`; `input` may be null (filter blocks: the leading `|` is absent).
  Result<ExprPtr> ParseFilters(ExprPtr input) {
    bool first_without_bar = input == nullptr && !IsOp("|");
    if (!first_without_bar) KILN_RETURN_IF_ERROR(ExpectOp("|"));
    size_t offset = Peek().offset;
    KILN_ASSIGN_OR_RETURN(std::string name, ExpectName());
    ExprPtr e = Make(Expr::Kind::kFilter, offset);
    e->name = name;
    e->children.push_back(std::move(input));
    if (IsOp("(")) KILN_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return e;
  }

  Result<ExprPtr> ParseTest(ExprPtr input) {
    size_t offset = Next().offset;  // 'is'
    ExprPtr e = Make(Expr::Kind::kTest, offset);
    e->negated = AcceptName("not");
    if (Peek().kind != TokenKind::kName) return Unexpected("a test name");
    e->name = Next().text;
    e->children.push_back(std::move(input));
    if (IsOp("(")) {
      KILN_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    } else {
      const Token& t = Peek();
      bool starts_arg =
          t.kind == TokenKind::kString || t.kind == TokenKind::kInt ||
          t.kind == TokenKind::kFloat || IsOp("[") || IsOp("{") ||
          (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
           t.text != "if" && t.text != "is" && t.text != "in" && t.text != "not");
      if (starts_arg) {
        KILN_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        KILN_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        e->children.push_back(std::move(arg));
      }
    }
    return e;
  }

  Status ParseCallArgs(Expr* e) {
    KILN_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!AcceptOp(")")) {
      if (!first) {
        KILN_RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp(")")) break;
      }
      first = false;
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        KILN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->keywords.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e->keywords.empty()) return Error("positional argument after keyword", Peek().offset);
        KILN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->children.push_back(std::move(value));
      }
    }
    return Status::Ok();
  }

  Result<ExprPtr> ParsePostfix(ExprPtr expr) {
    while (true) {
      size_t offset = expr->offset;  // errors point at the start of `a.b(c)`
      if (AcceptOp(".")) {
        ExprPtr e = Make(Expr::Kind::kGetAttr, offset);
        if (Peek().kind == TokenKind::kInt) {
          e->kind = Expr::Kind::kGetItem;
          ExprPtr index = Make(Expr::Kind::kLiteral, Peek().offset);
          index->literal = Value(Next().int_value);
          e->children.push_back(std::move(expr));
          e->children.push_back(std::move(index));
        } else {
          KILN_ASSIGN_OR_RETURN(e->name, ExpectName());
          e->children.push_back(std::move(expr));
        }
        expr = std::move(e);
      } else if (AcceptOp("[")) {
        KILN_ASSIGN_OR_RETURN(expr, ParseSubscript(std::move(expr), offset));
      } else if (IsOp("(")) {
        ExprPtr e = Make(Expr::Kind::kCall, offset);
        e->children.push_back(std::move(expr));
        KILN_RETURN_IF_ERROR(ParseCallArgs(e.get()));
        expr = std::move(e);
      } else {
        return expr;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr object, size_t offset) {
    ExprPtr parts[3];
    int num_colons = 0;
    while (!IsOp("]")) {
      if (AcceptOp(":")) {
        if (++num_colons > 2) return Unexpected("']'");
        continue;
      }
      if (parts[num_colons]) return Unexpected("':' or ']'");
      KILN_ASSIGN_OR_RETURN(parts[num_colons], ParseExpression());
    }
    Next();
    ExprPtr e = Make(num_colons == 0 ? Expr::Kind::kGetItem : Expr::Kind::kSlice, offset);
    e->children.push_back(std::move(object));
    if (num_colons == 0) {
      if (!parts[0]) return Error("empty subscript", offset);
      e->children.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) e->children.push_back(std::move(p));
    }
    return e;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    ExprPtr e;
    switch (t.kind) {
      case TokenKind::kName: {
        Next();
        e = Make(Expr::Kind::kLiteral, t.offset);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::kString: {
        e = Make(Expr::Kind::kLiteral, t.offset);
        std::string s;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // "a" "b" concatenates
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt:
        e = Make(Expr::Kind::kLiteral, t.offset);
        e->literal = Value(Next().int_value);
        return e;
      case TokenKind::kFloat:
        e = Make(Expr::Kind::kLiteral, t.offset);
        e->literal = Value(Next().float_value);
        return e;
      case TokenKind::kOperator:
        if (t.text == "(") return ParseParenthesized();
        if (t.text == "[") return ParseSequence(Expr::Kind::kList, "]");
        if (t.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  Result<ExprPtr> ParseParenthesized() {
    size_t offset = Next().offset;
    if (AcceptOp(")")) return Make(Expr::Kind::kTuple, offset);
    KILN_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (AcceptOp(")")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, offset);
    tuple->children.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (IsOp(")")) break;
      KILN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->children.push_back(std::move(item));
    }
    KILN_RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }

  Result<ExprPtr> ParseSequence(Expr::Kind kind, std::string_view close) {
    ExprPtr e = Make(kind, Next().offset);
    while (!AcceptOp(close)) {
      if (!e->children.empty()) {
        KILN_RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp(close)) break;
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      e->children.push_back(std::move(item));
    }
    return e;
  }

  Result<ExprPtr> ParseDict() {
    ExprPtr e = Make(Expr::Kind::kDict, Next().offset);
    while (!AcceptOp("}")) {
      if (!e->children.empty()) {
        KILN_RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp("}")) break;
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
      KILN_RETURN_IF_ERROR(ExpectOp(":"));
      KILN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      e->children.push_back(std::move(key));
      e->children.push_back(std::move(value));
    }
    return e;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<StmtList> ParseTemplate(std::string_view source, const ParseLimits& limits) {
  KILN_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  return Parser(source, std::move(tokens), limits).ParseAll();
}

}  // namespace kiln::jinja
