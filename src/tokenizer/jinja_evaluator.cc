#include "tokenizer/jinja_evaluator.h"

#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"

namespace kiln::jinja {
namespace {

constexpr std::string_view kErrorPrefix = "template error at ";

class Renderer {
 public:
  Renderer(std::string_view source, const RenderLimits& limits, const StrftimeFunction& strftime)
      : source_(source), limits_(limits), strftime_(strftime) {}

  Result<std::string> Run(const StmtList& program, const Value& variables) {
    scopes_.emplace_back();
    InstallGlobals();
    if (variables.is_dict()) {
      for (const auto& [k, v] : variables.as_dict().entries) {
        if (k.is_string()) scopes_[0][k.as_string()] = v;
      }
    }
    std::string out;
    KILN_RETURN_IF_ERROR(Exec(program, &out));
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  // ---- Errors -------------------------------------------------------------------------------
  Status Located(const Status& status, size_t offset) const {
    if (status.message().starts_with(kErrorPrefix)) return status;
    return Status(status.code(), std::string(kErrorPrefix) + DescribeLocation(source_, offset) +
                                     ": " + status.message());
  }
  Status Fail(std::string message, size_t offset) const {
    return Located(InvalidArgument(std::move(message)), offset);
  }

  Status Emit(std::string* out, std::string_view text) {
    total_output_ += text.size();
    if (total_output_ > limits_.max_output_bytes) {
      return ResourceExhausted("template output exceeds max_output_bytes (" +
                               std::to_string(limits_.max_output_bytes) + ")");
    }
    out->append(text);
    return Status::Ok();
  }

  // ---- Variables ----------------------------------------------------------------------------
  Value Lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > frame_base_;) {
      auto it = scopes_[i].find(name);
      if (it != scopes_[i].end()) return it->second;
    }
    if (frame_base_ > 0) {
      auto it = scopes_[0].find(name);
      if (it != scopes_[0].end()) return it->second;
    }
    auto it = globals_.find(name);
    if (it != globals_.end()) return it->second;
    return Value::Undefined(name);
  }
  void Assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  void InstallGlobals() {
    globals_["range"] = Value::Callable("range", [this](const CallArgs& a) -> Result<Value> {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : a.positional) {
        if (!v.is_int() && !v.is_bool()) return InvalidArgument("range() needs integers");
      }
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() >= 2) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() >= 3) step = a.positional[2].as_int();
      } else {
        return InvalidArgument("range() needs 1 to 3 arguments");
      }
      if (step == 0) return InvalidArgument("range() step must not be zero");
      ValueList items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(items.size()) >= limits_.max_loop_iterations) {
          return ResourceExhausted("range() longer than max_loop_iterations");
        }
        items.push_back(Value(i));
      }
      return Value::List(std::move(items));
    });
    auto make_dict = [](const CallArgs& a) -> Result<Value> {
      ValueDict d;
      if (!a.positional.empty() && a.positional[0].is_dict()) d = a.positional[0].as_dict();
      for (const auto& [k, v] : a.keywords) d.Set(Value(k), v);
      return Value::Dict(std::move(d));
    };
    globals_["dict"] = Value::Callable("dict", [make_dict](const CallArgs& a) -> Result<Value> {
      KILN_ASSIGN_OR_RETURN(Value d, make_dict(a));
      return Value::Dict(std::move(d.as_dict()));
    });
    globals_["namespace"] =
        Value::Callable("namespace", [make_dict](const CallArgs& a) -> Result<Value> {
          KILN_ASSIGN_OR_RETURN(Value d, make_dict(a));
          return Value::Namespace(std::move(d.as_dict()));
        });
    globals_["raise_exception"] =
        Value::Callable("raise_exception", [](const CallArgs& a) -> Result<Value> {
          return InvalidArgument("raise_exception: " +
                                 (a.positional.empty() ? std::string() : a.positional[0].Str()));
        });
    globals_["strftime_now"] =
        Value::Callable("strftime_now", [this](const CallArgs& a) -> Result<Value> {
          if (a.positional.empty() || !a.positional[0].is_string()) {
            return InvalidArgument("strftime_now() needs a format string");
          }
          return Value(strftime_(a.positional[0].as_string()));
        });
    globals_["joiner"] = Value::Callable("joiner", [](const CallArgs& a) -> Result<Value> {
      std::string sep = a.positional.empty() ? ", " : a.positional[0].Str();
      auto used = std::make_shared<bool>(false);
      return Value::Callable("joiner", [sep, used](const CallArgs&) -> Result<Value> {
        if (!*used) {
          *used = true;
          return Value("");
        }
        return Value(sep);
      });
    });
  }

  // ---- Statements ---------------------------------------------------------------------------
  Status Exec(const StmtList& body, std::string* out) {
    for (const auto& stmt : body) {
      KILN_RETURN_IF_ERROR(ExecStmt(*stmt, out));
      if (flow_ != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status ExecStmt(const Stmt& s, std::string* out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        return Emit(out, s.text);
      case Stmt::Kind::kOutput: {
        KILN_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        return Emit(out, v.Str());
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          bool taken = true;
          if (cond) {
            KILN_ASSIGN_OR_RETURN(Value c, Eval(*cond));
            taken = c.Truthy();
          }
          if (taken) return Exec(body, out);
        }
        return Status::Ok();
      case Stmt::Kind::kFor:
        return ExecFor(s, out);
      case Stmt::Kind::kSet:
        return ExecSet(s);
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        KILN_RETURN_IF_ERROR(Exec(s.body, &captured));
        Value v(std::move(captured));
        if (s.expr) {
          KILN_ASSIGN_OR_RETURN(v, EvalFilterBlock(*s.expr, v));
        }
        Assign(s.targets[0], std::move(v));
        return Status::Ok();
      }
      case Stmt::Kind::kMacro:
        Assign(s.name, MakeMacro(s, /*is_caller=*/false));
        return Status::Ok();
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        KILN_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0]));
        KILN_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1));
        if (!callee.is_callable()) return Fail("{% call %} of a non-callable", s.offset);
        args.keywords.emplace_back("caller", MakeMacro(s, /*is_caller=*/true));
        auto result = callee.as_function()(args);
        if (!result.ok()) return Located(result.status(), s.offset);
        return Emit(out, result->Str());
      }
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        KILN_RETURN_IF_ERROR(Exec(s.body, &captured));
        KILN_ASSIGN_OR_RETURN(Value v, EvalFilterBlock(*s.expr, Value(std::move(captured))));
        return Emit(out, v.Str());
      }
      case Stmt::Kind::kBreak:
        flow_ = Flow::kBreak;
        return Status::Ok();
      case Stmt::Kind::kContinue:
        flow_ = Flow::kContinue;
        return Status::Ok();
      case Stmt::Kind::kScope:
        return Exec(s.body, out);
    }
    return Status::Ok();
  }

  Result<Value> EvalFilterBlock(const Expr& filter, Value input) {
    Value* saved = filter_input_;
    filter_input_ = &input;
    auto result = Eval(filter);
    filter_input_ = saved;
    return result;
  }

  Status Unpack(const std::vector<std::string>& targets, const Value& item, size_t offset) {
    if (targets.size() == 1) {
      Assign(targets[0], item);
      return Status::Ok();
    }
    auto items = Iterate(item);
    if (!items.ok() || items->size() != targets.size()) {
      return Fail(
          "cannot unpack " + item.TypeName() + " into " + std::to_string(targets.size()) + " names",
          offset);
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], (*items)[i]);
    return Status::Ok();
  }

  Status ExecFor(const Stmt& s, std::string* out) {
    KILN_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    auto items_or = Iterate(iterable);
    if (!items_or.ok()) return Located(items_or.status(), s.expr->offset);
    ValueList items = std::move(items_or).value();
    scopes_.emplace_back();
    if (s.condition) {
      ValueList kept;
      for (const Value& item : items) {
        KILN_RETURN_IF_ERROR(Unpack(s.targets, item, s.offset));
        KILN_ASSIGN_OR_RETURN(Value keep, Eval(*s.condition));
        if (keep.Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    scopes_.pop_back();
    int64_t n = static_cast<int64_t>(items.size());
    // jinja2 runs `else` unless some iteration reached the end of the body (an iteration left
    // by break or continue does not count).
    bool completed_an_iteration = false;
    for (int64_t i = 0; i < n; ++i) {
      if (++loop_iterations_ > limits_.max_loop_iterations) {
        return Located(
            ResourceExhausted("more than max_loop_iterations (" +
                              std::to_string(limits_.max_loop_iterations) + ") loop iterations"),
            s.offset);
      }
      // The keys are distinct, so entries are appended directly (ValueDict::Set would search).
      static const Value kKeys[] = {"index", "index0", "revindex", "revindex0", "first",
                                    "last",  "length", "previtem", "nextitem",  "cycle"};
      ValueDict loop;
      loop.entries.reserve(10);
      loop.entries.emplace_back(kKeys[0], Value(i + 1));
      loop.entries.emplace_back(kKeys[1], Value(i));
      loop.entries.emplace_back(kKeys[2], Value(n - i));
      loop.entries.emplace_back(kKeys[3], Value(n - i - 1));
      loop.entries.emplace_back(kKeys[4], Value(i == 0));
      loop.entries.emplace_back(kKeys[5], Value(i == n - 1));
      loop.entries.emplace_back(kKeys[6], Value(n));
      if (i > 0) loop.entries.emplace_back(kKeys[7], items[i - 1]);
      if (i + 1 < n) loop.entries.emplace_back(kKeys[8], items[i + 1]);
      loop.entries.emplace_back(kKeys[9],
                                Value::Callable("cycle", [i](const CallArgs& a) -> Result<Value> {
                                  if (a.positional.empty())
                                    return InvalidArgument("loop.cycle() needs arguments");
                                  return a.positional[i % a.positional.size()];
                                }));
      // Each iteration starts from a fresh scope: names set in the body are not seen by the
      // next iteration (jinja2 re-resolves them from the enclosing scope).
      scopes_.emplace_back();
      Assign("loop", Value::Dict(std::move(loop)));
      Status st = Unpack(s.targets, items[i], s.offset);
      if (st.ok()) st = Exec(s.body, out);
      scopes_.pop_back();
      KILN_RETURN_IF_ERROR(st);
      Flow flow = std::exchange(flow_, Flow::kNormal);
      if (flow == Flow::kNormal) completed_an_iteration = true;
      if (flow == Flow::kBreak) break;
    }
    if (!completed_an_iteration) return Exec(s.else_body, out);
    return Status::Ok();
  }

  Status ExecSet(const Stmt& s) {
    KILN_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
    if (!s.attr_object.empty()) {
      Value ns = Lookup(s.attr_object);
      if (!ns.is_namespace()) {
        return Fail("cannot assign attribute on non-namespace object '" + s.attr_object + "'",
                    s.offset);
      }
      ns.as_dict().Set(Value(s.name), std::move(v));
      return Status::Ok();
    }
    return Unpack(s.targets, v, s.offset);
  }

  // A macro (or a call block's `caller`) as a callable. Parameters bind positionally, then by
  // keyword; missing ones take their default (evaluated at call time) or are undefined.
  Value MakeMacro(const Stmt& s, bool is_caller) {
    const Stmt* stmt = &s;
    return Value::Callable(s.name, [this, stmt, is_caller](const CallArgs& a) -> Result<Value> {
      if (call_depth_ >= limits_.max_call_depth) {
        return ResourceExhausted("macro calls nested deeper than max_call_depth (" +
                                 std::to_string(limits_.max_call_depth) + ")");
      }
      size_t saved_base = frame_base_;
      size_t saved_size = scopes_.size();
      Flow saved_flow = flow_;
      // A caller body sees the scopes where it was written; a macro sees only the globals.
      if (!is_caller) frame_base_ = scopes_.size();
      scopes_.emplace_back();
      ++call_depth_;
      Status st = Status::Ok();
      for (size_t i = 0; i < stmt->targets.size() && st.ok(); ++i) {
        const Value* arg = a.Get(stmt->targets[i], i);
        if (arg) {
          Assign(stmt->targets[i], *arg);
        } else if (i < stmt->defaults.size() && stmt->defaults[i]) {
          auto def = Eval(*stmt->defaults[i]);
          if (def.ok()) {
            Assign(stmt->targets[i], *def);
          } else {
            st = def.status();
          }
        } else {
          Assign(stmt->targets[i], Value::Undefined(stmt->targets[i]));
        }
      }
      if (const Value* caller = a.Get("caller", SIZE_MAX)) Assign("caller", *caller);
      std::string captured;
      if (st.ok()) st = Exec(stmt->body, &captured);
      --call_depth_;
      scopes_.resize(saved_size);
      frame_base_ = saved_base;
      flow_ = saved_flow;
      if (!st.ok()) return st;
      return Value(std::move(captured));
    });
  }

  // ---- Expressions --------------------------------------------------------------------------
  Result<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.children.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, expr] : e.keywords) {
      KILN_ASSIGN_OR_RETURN(Value v, Eval(*expr));
      args.keywords.emplace_back(k, std::move(v));
    }
    return args;
  }

  Result<Value> Eval(const Expr& e) {
    auto result = EvalUnlocated(e);
    if (!result.ok()) return Located(result.status(), e.offset);
    return result;
  }

  Result<Value> EvalUnlocated(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) {
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*c));
          items.push_back(std::move(v));
        }
        if (e.kind == Expr::Kind::kTuple) return Value::List(std::move(items)).AsTuple();
        return Value::List(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          KILN_ASSIGN_OR_RETURN(Value k, Eval(*e.children[i]));
          KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1]));
          d.Set(std::move(k), std::move(v));
        }
        return Value::Dict(std::move(d));
      }
      case Expr::Kind::kGetAttr: {
        KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        KILN_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        KILN_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[i + 1]) {
            KILN_ASSIGN_OR_RETURN(parts[i], Eval(*e.children[i + 1]));
          }
        }
        return Slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        KILN_ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0]));
        KILN_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        if (callee.is_undefined()) {
          return InvalidArgument("'" + callee.undefined_name() + "' is undefined");
        }
        if (!callee.is_callable()) {
          return InvalidArgument("'" + callee.TypeName() + "' object is not callable");
        }
        return callee.as_function()(args);
      }
      case Expr::Kind::kFilter: {
        Value input;
        if (e.children[0]) {
          KILN_ASSIGN_OR_RETURN(input, Eval(*e.children[0]));
        } else if (filter_input_) {
          input = *filter_input_;
        }
        KILN_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        return ApplyFilter(e.name, input, args);
      }
      case Expr::Kind::kTest: {
        KILN_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0]));
        KILN_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        KILN_ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, input, args));
        return Value(result != e.negated);
      }
      case Expr::Kind::kUnary: {
        KILN_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        if (e.name == "not") return Value(!v.Truthy());
        if (!v.is_number())
          return InvalidArgument("bad operand type for unary " + e.name + ": '" + v.TypeName() +
                                 "'");
        if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        return Value(-v.as_int());
      }
      case Expr::Kind::kBinary: {
        KILN_ASSIGN_OR_RETURN(Value lhs, Eval(*e.children[0]));
        if (e.name == "and") return lhs.Truthy() ? Eval(*e.children[1]) : lhs;
        if (e.name == "or") return lhs.Truthy() ? lhs : Eval(*e.children[1]);
        KILN_ASSIGN_OR_RETURN(Value rhs, Eval(*e.children[1]));
        return BinaryOp(e.name, lhs, rhs);
      }
      case Expr::Kind::kConditional: {
        KILN_ASSIGN_OR_RETURN(Value cond, Eval(*e.children[0]));
        if (cond.Truthy()) return Eval(*e.children[1]);
        if (e.children[2]) return Eval(*e.children[2]);
        return Value::Undefined();
      }
    }
    return Internal("unknown expression kind");
  }

  std::string_view source_;
  const RenderLimits& limits_;
  const StrftimeFunction& strftime_;
  std::vector<Scope> scopes_;
  size_t frame_base_ = 0;  // lookups skip scopes below this (other than the root) in a macro
  Scope globals_;
  Flow flow_ = Flow::kNormal;
  int64_t loop_iterations_ = 0;
  int call_depth_ = 0;
  size_t total_output_ = 0;
  Value* filter_input_ = nullptr;
};

}  // namespace

Result<std::string> RenderProgram(const StmtList& program, std::string_view source,
                                  const Value& variables, const RenderLimits& limits,
                                  const StrftimeFunction& strftime_now) {
  return Renderer(source, limits, strftime_now).Run(program, variables);
}

}  // namespace kiln::jinja
