// GPU sampling (DESIGN.md §3 "Sampling"): the semantics of SamplingSpec (backend/step.h) and of the
// reference sampler kiln::cpu::Sample / Score (backend/cpu/sampler.h), for a batch of rows of
// fp32 logits on the device. Raw device pointers + sizes; no engine types.
//
// A batch's variable-length inputs (logit bias, banned ids, prompt and output tokens) are packed
// by the caller into flat device arrays, each row pointing at its ranges [begin, end).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kiln::kernels {

struct SamplingRow {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t top_k = 0;             // 0 = no limit
  int32_t num_top_logprobs = 0;  // <= kMaxTopLogprobs
  uint64_t seed = 0;
  int32_t rng_position = 0;                  // the number of output tokens so far (Philox counter)
  int32_t bias_begin = 0, bias_end = 0;      // into bias_ids / bias_values
  int32_t banned_begin = 0, banned_end = 0;  // into banned_ids
  int32_t prompt_begin = 0, prompt_end = 0;  // into token_ids (repetition penalty)
  int32_t output_begin = 0, output_end = 0;  // into token_ids (all penalties)
};

struct SamplingInputs {
  const float* logits = nullptr;  // [num_rows, vocab_size], row stride logits_stride
  int64_t logits_stride = 0;
  int32_t num_rows = 0;
  int32_t vocab_size = 0;
  const SamplingRow* rows = nullptr;  // device [num_rows]
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const int32_t* banned_ids = nullptr;
  const int32_t* token_ids = nullptr;
};

inline constexpr int32_t kMaxTopLogprobs = 20;

// Per row: the chosen token, its raw logprob and 1-based rank, and the top-N raw alternatives
// (as cpu::ScoredToken).
struct SampledToken {
  int32_t token_id;
  float logprob;
  int32_t rank;
  int32_t num_top;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

size_t SamplingWorkspaceBytes(int32_t max_rows, int32_t vocab_size);

// Samples every row (cpu::Sample's semantics) into out[num_rows] (device). Graph-capturable.
cudaError_t SampleRows(const SamplingInputs& in, void* workspace, size_t workspace_bytes,
                       SampledToken* out, cudaStream_t stream);

// Scores targets[r] under raw logits row r (cpu::Score: logprob, rank, top num_top), for prompt
// logprobs. out[num_rows] (device).
cudaError_t ScoreRows(const float* logits, int64_t logits_stride, int32_t num_rows,
                      int32_t vocab_size, const int32_t* targets, int32_t num_top,
                      SampledToken* out, cudaStream_t stream);

// Async scheduling: token_ids[i] < 0 stands for the token sampled into previous[-1 - token_ids[i]]
// by the step before (still on the device); replaces every such entry with it, in place.
// Graph-capturable; num_tokens may be 0.
cudaError_t ResolvePreviousTokens(int32_t* token_ids, int32_t num_tokens,
                                  const SampledToken* previous, cudaStream_t stream);

}  // namespace kiln::kernels
