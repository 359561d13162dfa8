// The CPU sampler: the reference semantics of SamplingSpec (backend/step.h) that every backend's
// sampler must reproduce. Plain, single sequence at a time, fp32 throughout (sums in double).
//
// The details step.h leaves open, fixed here so that other backends can match them exactly:
//   - Penalties are applied in float, in the order bias, ban, repetition, frequency/presence:
//       x += bias;  x = -inf;  x = x > 0 ? x / rp : x * rp;  x -= f * count + p;
//     each distinct prompt/output token is penalized once by the repetition penalty.
//   - Temperature divides (x / temperature), it does not multiply by a reciprocal.
//   - The candidates are the tokens whose processed logit is not -inf. Order everywhere (top_k,
//     top_p) is (value desc, token id asc).
//   - softmax: weights w_i = expf(v_i - v_max) over the candidates left by top_k; probabilities
//     are w_i / sum(w), every sum of weights in double.
//   - top_p keeps the smallest prefix whose weight reaches (top_p - 1e-6) * sum(w). NOTE: the
//     slack absorbs fp32 rounding, so that top_p = 0.8 over probabilities 0.5 / 0.3 / 0.2 keeps
//     two tokens as exact arithmetic says, not three.
//   - min_p drops w_i < min_p * w_max (in float); the survivors are renormalized:
//     p_i = (float)(w_i / sum of the kept w).
//   - The race: token i scores p_i / E_i with U_i = UniformFloat(SamplerRandomWords(seed,
//     position, i / 4).w[i % 4]) (core/philox.h), position = output_token_ids.size(), and
//     E_i = -logf(U_i), except E_i = 2^-25 when U_i == 1. NOTE: U = 1 stands for the top bin
//     (1 - 2^-24, 1] where E averages 2^-25; E = 0 would give an infinite score, so any token,
//     however unlikely, would win with probability 2^-24 (0.3 % of draws over a 49k vocab).
//     Only tokens with p_i > 0 take part; the highest score wins; ties go to the lowest id.
//   - If every processed logit is -inf (everything banned), the sampler falls back to the argmax
//     of the raw logits rather than fail: a step always yields a token.
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
// repetition_penalty > 0, ids in logit_bias/banned/prompt/output < logits.size()); logits
// non-empty and free of NaN.
// Cost: O(vocab + prompt + output): top_k by nth_element, top_p by a weight histogram and a sort
// of one bucket, never a full sort; a few vocab-sized buffers per call. bench/sampler_bench
// measures it (vocab 49152, one 2-vCPU VM core: ~0.5 ms greedy, ~1-2 ms sampled).
ScoredToken Sample(std::span<const float> logits, const SamplingSpec& spec);

// Step 2 of step.h, in place on a copy of the raw logits ([vocab_size]): logit bias, banned ids
// to -inf, the repetition penalty once per distinct prompt or output token, then the frequency
// and presence penalties over the output tokens. Sample() calls it; exposed for tests and for
// checking other backends' penalty kernels against it.
// REQUIRES: as Sample().
void ApplyPenalties(const SamplingSpec& spec, std::span<float> logits);

// Scores `target` under raw logits: its logprob (log_softmax, the sum in double), its rank
// (1 + the number of raw logits strictly larger) and the top num_top alternatives (raw logit
// desc, id asc).
ScoredToken Score(std::span<const float> logits, int32_t target, int32_t num_top);

}  // namespace kiln::cpu
