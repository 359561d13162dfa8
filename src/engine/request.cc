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
      params(std::move(r.params)),
      seed(r.seed),
      cache_key(std::move(r.cache_key)),
      arrival_order(arrival),
      token_ids(std::move(r.prompt_token_ids)),
      num_prompt_tokens(static_cast<int32_t>(token_ids.size())) {
  const int64_t wanted = int64_t{num_prompt_tokens} + params.max_tokens;
  max_num_tokens = static_cast<int32_t>(std::min<int64_t>(wanted, max_model_len));
  logit_bias = params.logit_bias;
}

}  // namespace kiln
