#include "backend/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"

namespace kiln::cpu {
namespace {

// log_softmax over the whole row, accumulated in double for a stable reference.
std::vector<float> LogSoftmax(std::span<const float> logits) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits[i] - log_sum);
  return out;
}

}  // namespace

ScoredToken Score(std::span<const float> logits, int32_t target, int32_t num_top) {
  CHECK(target >= 0 && static_cast<size_t>(target) < logits.size());
  std::vector<float> logprobs = LogSoftmax(logits);
  ScoredToken out;
  out.token_id = target;
  out.logprob = logprobs[target];
  out.rank = 1;
  for (float lp : logprobs) out.rank += lp > out.logprob ? 1 : 0;
  if (num_top > 0) {
    std::vector<int32_t> ids(logprobs.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(num_top, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logprobs[a] != logprobs[b] ? logprobs[a] > logprobs[b] : a < b;
    });
    for (size_t i = 0; i < k; ++i) out.top_logprobs.push_back({ids[i], logprobs[ids[i]]});
  }
  return out;
}

ScoredToken Sample(std::span<const float> logits, const SamplingSpec& spec) {
  // Greedy only for now; the full pipeline lands with the sampler tests.
  CHECK(spec.temperature == 0.0f) << "sampling with temperature is not implemented yet";
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return Score(logits, best, spec.num_top_logprobs);
}

}  // namespace kiln::cpu
