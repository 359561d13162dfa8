#include "engine/sampling_params.h"

#include <cmath>
#include <sstream>
#include <string>
#include <string_view>

#include "core/check.h"

namespace kiln {
namespace {

// "<field>: <what>, got <value>", the value printed as a user would write it (3, 0.5, nan).
template <typename T>
Status Invalid(std::string_view field, std::string_view what, const T& value) {
  std::ostringstream os;
  os << field << ": " << what << ", got " << value;
  return InvalidArgument(os.str());
}

// True when lo <= x <= hi; false for NaN.
bool InClosedRange(float x, float lo, float hi) { return x >= lo && x <= hi; }

// Checks that every id in `ids` is a token of the vocabulary.
Status CheckTokenIds(std::string_view field, const std::vector<int32_t>& ids, int32_t vocab_size) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      std::ostringstream os;
      os << field << ": token id " << id << " is out of range [0, " << vocab_size << ")";
      return InvalidArgument(os.str());
    }
  }
  return Status::Ok();
}

}  // namespace

Status SamplingParams::Validate(int32_t vocab_size) const {
  CHECK_GT(vocab_size, 0);
  if (n < 1 || n > kMaxN) return Invalid("n", "must be in [1, " + std::to_string(kMaxN) + "]", n);
  if (!InClosedRange(temperature, 0.0f, 2.0f)) {
    return Invalid("temperature", "must be in [0, 2]", temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Invalid("top_p", "must be in (0, 1]", top_p);
  if (top_k < -1) return Invalid("top_k", "must be -1 or 0 (no limit) or a positive count", top_k);
  if (!InClosedRange(min_p, 0.0f, 1.0f)) return Invalid("min_p", "must be in [0, 1]", min_p);
  if (!InClosedRange(presence_penalty, -2.0f, 2.0f)) {
    return Invalid("presence_penalty", "must be in [-2, 2]", presence_penalty);
  }
  if (!InClosedRange(frequency_penalty, -2.0f, 2.0f)) {
    return Invalid("frequency_penalty", "must be in [-2, 2]", frequency_penalty);
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return Invalid("repetition_penalty", "must be > 0 and finite (1 = off)", repetition_penalty);
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      std::ostringstream os;
      os << "logit_bias: token id " << id << " is out of range [0, " << vocab_size << ")";
      return InvalidArgument(os.str());
    }
    if (!InClosedRange(bias, -kMaxLogitBias, kMaxLogitBias)) {
      std::ostringstream os;
      os << "logit_bias: the bias of token " << id << " must be in [" << -kMaxLogitBias << ", "
         << kMaxLogitBias << "], got " << bias;
      return InvalidArgument(os.str());
    }
  }
  if (max_tokens < 1) return Invalid("max_tokens", "must be >= 1", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    std::ostringstream what;
    what << "must be in [0, max_tokens = " << max_tokens << "]";
    return Invalid("min_tokens", what.str(), min_tokens);
  }
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return Invalid("stop", "at most " + std::to_string(kMaxStopStrings) + " strings", stop.size());
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return InvalidArgument("stop: string " + std::to_string(i) + " is empty");
  }
  KILN_RETURN_IF_ERROR(CheckTokenIds("stop_token_ids", stop_token_ids, vocab_size));
  const std::string logprobs_range = "must be in [0, " + std::to_string(kMaxLogprobs) + "]";
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return Invalid("logprobs", logprobs_range, *logprobs);
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs)) {
    return Invalid("prompt_logprobs", logprobs_range, *prompt_logprobs);
  }
  return Status::Ok();
}

}  // namespace kiln
