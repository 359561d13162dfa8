// The CPU sampler: the reference semantics of SamplingSpec (backend/step.h) that every backend's
// sampler must reproduce. Plain, single sequence at a time, fp32 throughout.
#pragma once

#include <cstdint>
#include <span>

#include "backend/step.h"

namespace kiln::cpu {

// Picks the next token of one sequence from its raw logits ([vocab_size]) following the order in
// backend/step.h, and returns it with its raw logprob, rank and spec.num_top_logprobs
// alternatives. Deterministic: the same logits and spec give the same token on any thread, in
// any batch.
// REQUIRES: spec valid (temperature >= 0, top_p in (0, 1], min_p in [0, 1], top_k >= 0,
// repetition_penalty > 0, ids in logit_bias/banned/prompt/output < logits.size()).
ScoredToken Sample(std::span<const float> logits, const SamplingSpec& spec);

// Scores `target` under raw logits: its logprob, rank and the top num_top alternatives.
ScoredToken Score(std::span<const float> logits, int32_t target, int32_t num_top);

}  // namespace kiln::cpu
