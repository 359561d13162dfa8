// Private to the api layer: what a parsed job carries for its ResponseWriter, and the helpers
// the parsers (api.cc) and the renderers (api_writer.cc) share. Not for the transport.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api.h"

namespace kiln::server {

struct ApiJob::Render {
  ApiKind kind = ApiKind::kCompletions;
  std::string id;  // "cmpl-<hex>" / "chatcmpl-<hex>"; the same in every chunk
  int64_t created = 0;
  std::string model_name;
  int32_t n = 1;  // choices per prompt
  // Completions: top-N logprobs per token (0 = the sampled token only). Chat: top_logprobs when
  // `logprobs` is true. Absent: no logprobs object.
  std::optional<int32_t> logprobs;
  bool echo = false;           // completions: the prompt's text (and logprobs) lead each choice
  bool include_usage = false;  // streaming: a last chunk with `choices: []` and usage
  std::vector<std::vector<int32_t>> prompt_token_ids;  // per prompt
  std::vector<std::string> echo_text;                  // per prompt, when echo
  std::vector<int32_t> stop_token_ids;                 // to tell stop_reason from eos
};

// A finite logprob for JSON (-inf, which JSON cannot carry, becomes OpenAI's -9999.0).
double JsonLogprob(float logprob);

// The bytes one token stands for, decoded alone (special tokens included, a SentencePiece
// leading space kept), so that the strings of consecutive tokens concatenate to their text.
std::string TokenBytes(const Tokenizer& tokenizer, int32_t id);

// `bytes` with each invalid UTF-8 sequence replaced by U+FFFD (as Python's
// decode(errors="replace")); *num_code_points gets the result's length in code points.
std::string SanitizeUtf8(std::string_view bytes, int64_t* num_code_points = nullptr);

// "data: <json>\n\n"; invalid UTF-8 in strings is replaced rather than thrown on.
std::string SseFrame(const nlohmann::json& chunk);
std::string DumpJson(const nlohmann::json& value);

}  // namespace kiln::server
