#include "engine/request.h"

#include <algorithm>

namespace kiln {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "?";
}

Request::Request(EngineRequest r, int64_t arrival, int32_t max_model_len)
    : id(r.id),
      wants_logprobs(r.params.logprobs.has_value()),
      wants_prompt_logprobs(r.params.prompt_logprobs.has_value()),
      num_prompt_tokens(static_cast<int32_t>(r.prompt_token_ids.size())),
      max_tokens_is_default(r.max_tokens_is_default),
      min_tokens(r.params.min_tokens),
      token_ids(std::move(r.prompt_token_ids)),
      params(std::move(r.params)),
      seed(r.seed),
      cache_key(std::move(r.cache_key)),
      arrival_order(arrival) {
  const int64_t wanted = int64_t{num_prompt_tokens} + params.max_tokens;
  max_num_tokens = static_cast<int32_t>(std::min<int64_t>(wanted, max_model_len));
  logit_bias = params.logit_bias;
  sampling.temperature = params.temperature;
  sampling.top_k = std::max(params.top_k, 0);
  sampling.top_p = params.top_p;
  sampling.min_p = params.min_p;
  sampling.presence_penalty = params.presence_penalty;
  sampling.frequency_penalty = params.frequency_penalty;
  sampling.repetition_penalty = params.repetition_penalty;
  sampling.seed = seed;
  sampling.num_top_logprobs = params.logprobs.value_or(0);
  sampling.logit_bias = logit_bias;
}

void Request::SetStopTokens(const std::vector<int32_t>& eos_token_ids) {
  stop_token_ids.clear();
  if (!params.ignore_eos) stop_token_ids = eos_token_ids;
  stop_token_ids.insert(stop_token_ids.end(), params.stop_token_ids.begin(),
                        params.stop_token_ids.end());
  sampling.banned_token_ids = stop_token_ids;
}

}  // namespace kiln
