// SamplingParams: what a user may ask of one request's generation, in the OpenAI vocabulary
// (plus vLLM's extensions). The server and the CLI fill it; Validate() checks it once at the
// edge and names the offending field, after which the engine trusts it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln {

struct SamplingParams {
  int32_t n = 1;                    // completions per prompt, each with its own seeded stream
  float temperature = 1.0f;         // 0 = greedy; OpenAI range [0, 2]
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // 0 or -1 = no limit
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  std::optional<uint64_t> seed;                       // absent: the engine draws one per request
  int32_t max_tokens = 16;                            // >= 1; also capped by the context length
  int32_t min_tokens = 0;         // eos and stop_token_ids are banned until this many
  std::vector<std::string> stop;  // stop strings: matched across token boundaries, not emitted
  std::vector<int32_t> stop_token_ids;  // extra stop tokens (emitted as tokens, not as text)
  bool ignore_eos = false;              // keep going past the model's eos tokens
  bool include_stop_str_in_output = false;
  std::optional<int32_t> logprobs;         // top-N raw logprobs per generated token, N in [0, 20]
  std::optional<int32_t> prompt_logprobs;  // top-N per prompt token (first has none), [0, 20]
  int32_t priority = 0;                    // smaller runs first under the priority policy
  bool skip_special_tokens = true;         // leave special tokens out of the text
  std::string cache_salt;                  // per-tenant prefix-cache isolation ("" = shared)

  static constexpr int32_t kMaxN = 128;
  static constexpr int32_t kMaxLogprobs = 20;
  static constexpr int32_t kMaxStopStrings = 16;
  static constexpr float kMaxLogitBias = 100.0f;  // |bias| <= this

  // Checks every field's range and that token ids are < vocab_size. Errors: kInvalidArgument
  // whose message starts with the field's name, e.g. "temperature: must be in [0, 2], got 3";
  // the first offending field in declaration order is reported. NaN fails every float range.
  // Does not normalize: top_k == -1 passes and means 0 (no limit) when building a SamplingSpec.
  // REQUIRES: vocab_size > 0.
  Status Validate(int32_t vocab_size) const;
};

}  // namespace kiln
