// Chat templates: renders a HF `chat_template` (a Jinja2 program) into the prompt text a model
// expects, with kiln's own Jinja-subset engine (jinja_*.h). Output matches Python jinja2 as
// HF transformers configures it (trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
// strftime_now, tojson with ensure_ascii=False); see docs/chat_templates.md for what is
// supported and how it is checked against jinja2.
//
//   KILN_ASSIGN_OR_RETURN(std::string source, SelectChatTemplate(tokenizer_config_text, ""));
//   KILN_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Parse(source));
//   KILN_ASSIGN_OR_RETURN(std::string prompt, tmpl.Render(context));
//
// The context is a JSON object: `messages`, `tools`, `add_generation_prompt`, `bos_token`,
// `eos_token` and any extra template kwargs, as HF's apply_chat_template passes them.
//
// Thread safety: a parsed ChatTemplate is immutable; Render may run concurrently on one object.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja_evaluator.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_value.h"

namespace kiln {

struct ChatTemplateOptions {
  // Nesting and runaway bounds of one render (loop iterations, macro depth, output bytes);
  // exceeding one fails the render with kResourceExhausted.
  jinja::RenderLimits limits;
  // Deepest expression/block nesting the parser accepts.
  jinja::ParseLimits parse_limits;
  // strftime_now(fmt) for templates that print today's date. Default: the local clock.
  // Tests pin it to a fixed instant.
  jinja::StrftimeFunction strftime_now;
};

class ChatTemplate {
 public:
  // Parses `source`. Fails with kInvalidArgument naming line and column on a syntax error.
  static Result<ChatTemplate> Parse(std::string_view source, ChatTemplateOptions options = {});

  // Renders with `context` (a JSON object; JSON object key order is kept). Fails with
  // kInvalidArgument (with line and column) where jinja2 would raise — including the template's
  // own raise_exception(msg), whose msg the message carries — and kResourceExhausted past
  // options.limits.
  Result<std::string> Render(const nlohmann::ordered_json& context) const;
  // Same, with a context already converted to engine values (a dict).
  Result<std::string> Render(const jinja::Value& context) const;

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// Converts JSON to an engine value: objects -> ordered dicts, arrays -> lists, null -> none.
jinja::Value ValueFromJson(const nlohmann::ordered_json& json);

// Picks the chat template out of a tokenizer_config.json text. `chat_template` may be a string
// or a list of {"name", "template"}; from a list, `name` picks one ("" means "default", and, as
// in HF transformers, a list without a "default" entry then fails). Fails with kNotFound when
// there is no chat_template or no entry called `name` (the message lists the names there are),
// kInvalidArgument on malformed JSON.
Result<std::string> SelectChatTemplate(std::string_view tokenizer_config_json,
                                       std::string_view name = "");

}  // namespace kiln
