// Evaluator: renders a parsed template (jinja_ast.h) against a dict of variables, with jinja2's
// scoping (a `for` body and a macro call get their own scope; `set` inside them does not leak
// out — use namespace()), loop variables, macros, call and filter blocks.
//
// Sandboxed: templates reach only the values they are given and the built-ins (range, namespace,
// dict, raise_exception, strftime_now, joiner); mutating methods (list.append,
// dict.pop, ...) fail as in jinja2's ImmutableSandboxedEnvironment. Every render is bounded by
// RenderLimits and fails with kResourceExhausted instead of running away.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace kiln::jinja {

struct RenderLimits {
  // Loop iterations summed over all loops of one render. Real chat templates need a few
  // thousand for long conversations; the cap stops `range(10**9)` style runaways.
  int64_t max_loop_iterations = 1'000'000;
  // Nested macro calls (recursion). Deeper calls fail instead of overflowing the stack.
  int max_call_depth = 64;
  // Bytes of output of one render (including captured blocks).
  size_t max_output_bytes = 16 << 20;
};

// Formats `strftime_now(fmt)`; the default uses the local clock. Tests inject a fixed one.
using StrftimeFunction = std::function<std::string(std::string_view format)>;

// Renders `program` (parsed from `source`, used for error locations) with `variables` (a dict
// of top-level names). Errors name the line and column of the failing expression; a template's
// raise_exception(msg) fails with kInvalidArgument carrying msg.
Result<std::string> RenderProgram(const StmtList& program, std::string_view source,
                                  const Value& variables, const RenderLimits& limits,
                                  const StrftimeFunction& strftime_now);

}  // namespace kiln::jinja
