// The plain structs the engine and a backend exchange once per step (DESIGN.md §3):
//
//   StepInputs  = BuildStepInputs(scheduled batch)   engine -> backend
//   StepResult  = runner.Execute(inputs)             backend -> engine
//
// One step is one forward pass over a flat token array (no padding) that freely mixes prefill
// chunks and decode tokens. Sequence s owns the query tokens [cu_seqlens[s], cu_seqlens[s+1]):
//
//   seq s:   |<------ num_computed_tokens (already in KV) ------>|<-- num_new_tokens -->|
//            positions 0 ..                                       ..  seq_lens[s] - 1
//
// Every new token's K and V are written to its slot (slot_mapping: block_id * block_size +
// offset) before attention reads the sequence's first seq_lens[s] positions through its block
// table. The backend never allocates or frees blocks; the engine's KV cache manager does.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kiln {

// How one sequence's next token is chosen. The engine validates every field (SamplingParams)
// before it builds this; the backend assumes it is valid. Spans point into engine-owned request
// state that stays in place until the step's result is returned (Execute or Wait). The token
// spans hold real ids only: the engine does not launch a step ahead for a request whose
// penalties would need the token still being sampled.
//
// The order of operations, identical on every backend (backend/cpu/sampler.h is the reference):
//   1. raw logits (fp32) -> raw logprobs = log_softmax(raw); reported logprobs are these (as vLLM's
//      default "raw_logprobs"), so they do not depend on the sampling settings;
//   2. processed = raw + logit_bias; banned_token_ids -> -inf; repetition penalty over the
//      prompt and output tokens (HF: positive logits divided, negative multiplied); frequency and
//      presence penalties over the output tokens (OpenAI: -= f * count + p * [count > 0]);
//   3. temperature == 0: greedy argmax of processed (ties -> lowest token id);
//   4. otherwise processed / temperature -> top_k -> softmax -> top_p -> min_p -> renormalize,
//      then an exponential race: argmax_i p_i / E_i with E_i = -ln(U_i) and U_i a Philox-4x32-10
//      uniform keyed by (seed) at counter (rng_position, i), so the draw depends only on the
//      request, never on the batch around it. backend/cpu/sampler.h fixes the arithmetic of each
//      stage (and E_i when U_i = 1) so that other backends can match it.
struct SamplingSpec {
  float temperature = 0.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 = no limit
  float top_p = 1.0f;               // 1 = no limit
  float min_p = 0.0f;               // 0 = no limit
  float presence_penalty = 0.0f;    // OpenAI range [-2, 2]
  float frequency_penalty = 0.0f;   // OpenAI range [-2, 2]
  float repetition_penalty = 1.0f;  // HF/vLLM; 1 = off
  uint64_t seed = 0;                // the request's random stream key
  int32_t num_top_logprobs = 0;  // top-N raw logprobs to return with the sampled token (0 = none)
  std::span<const std::pair<int32_t, float>> logit_bias;  // (token id, bias), ids < vocab_size
  std::span<const int32_t> banned_token_ids;  // masked to -inf (eos + stop ids before min_tokens)
  std::span<const int32_t> prompt_token_ids;  // for the repetition penalty
  std::span<const int32_t> output_token_ids;  // for the penalties; the RNG counter is its size
};

struct StepSequence {
  int32_t num_computed_tokens = 0;  // tokens of this sequence already in the KV cache
  int32_t num_new_tokens = 0;       // tokens in this step (= cu_seqlens[s+1] - cu_seqlens[s])
  // Sample a next token from the logits of this step's last token. False for a prefill chunk
  // that does not yet reach the end of the known tokens.
  bool do_sample = false;
  SamplingSpec sampling;  // used when do_sample
  // Prompt logprobs: for the first prompt_logprob_targets.size() new tokens i of this step, the
  // logprob of prompt_logprob_targets[i] (the token that follows token i) and the top
  // num_prompt_top_logprobs alternatives. Empty = none wanted.
  std::span<const int32_t> prompt_logprob_targets;
  int32_t num_prompt_top_logprobs = 0;
};

// Async scheduling (ModelRunner::Launch): a decode can be launched before the host has seen its
// input token, the one the step launched just before it samples. Its token_ids entry is then
// PreviousStepToken(j): "what the previous step samples for its sequence j". Real ids are >= 0.
constexpr int32_t PreviousStepToken(int32_t seq) { return -1 - seq; }
constexpr bool IsPreviousStepToken(int32_t token_id) { return token_id < 0; }
constexpr int32_t PreviousStepSeq(int32_t token_id) { return -1 - token_id; }

// Swap-to-host preemption: one KV block's contents (every layer, K and V) moved between block
// `device_block` of the device pool and block `host_block` of the runner's host swap space
// (ModelRunner::AllocateSwapSpace). The engine's KV cache manager picks both ids.
struct BlockCopy {
  int32_t device_block = 0;
  int32_t host_block = 0;
};

struct StepInputs {
  // Done before the forward pass, in this order: swap_out (device -> host: the blocks of requests
  // preempted this step, which the step may already hand to others), then swap_in (host ->
  // device: requests resuming this step). A step may hold copies and no sequence.
  std::vector<BlockCopy> swap_out;
  std::vector<BlockCopy> swap_in;
  // [num_tokens]; an entry may be PreviousStepToken(j) in a step given to ModelRunner::Launch.
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;     // [num_tokens] position of each token in its sequence
  std::vector<int64_t> slot_mapping;  // [num_tokens] KV slot: block_id * block_size + offset
  std::vector<int32_t> cu_seqlens;    // [num_seqs + 1] query offsets into the flat arrays
  std::vector<int32_t> seq_lens;      // [num_seqs] context length after this step
  // [num_seqs, max_blocks_per_seq] row-major, unused entries -1; row s lists the blocks holding
  // positions [0, seq_lens[s]) of sequence s, block_size tokens each.
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;
  std::vector<StepSequence> seqs;  // [num_seqs]

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seqs.size()); }
};

// One step of a single sequence that computes tokens[begin, end) of `tokens` with its KV cache in
// blocks 0, 1, ... of block_size tokens (slot = position): a prefill, or a chunk of one when
// begin > 0. It samples and scores nothing; set seqs[0]'s fields for that. The pool must hold
// ceil(end / block_size) blocks.
inline StepInputs SingleSequenceStep(std::span<const int32_t> tokens, int32_t begin, int32_t end,
                                     int32_t block_size) {
  StepInputs in;
  for (int32_t p = begin; p < end; ++p) {
    in.token_ids.push_back(tokens[p]);
    in.positions.push_back(p);
    in.slot_mapping.push_back(p);
  }
  in.cu_seqlens = {0, end - begin};
  in.seq_lens = {end};
  in.max_blocks_per_seq = (end + block_size - 1) / block_size;
  for (int32_t b = 0; b < in.max_blocks_per_seq; ++b) in.block_tables.push_back(b);
  StepSequence seq;
  seq.num_computed_tokens = begin;
  seq.num_new_tokens = end - begin;
  seq.do_sample = false;
  in.seqs = {seq};
  return in;
}

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// A token with its raw logprob, its 1-based rank among the raw logits (1 = most likely; ties
// share the better rank) and the top-N alternatives, most likely first (ties: lower id first).
struct ScoredToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<TokenLogprob> top_logprobs;
};

struct SequenceResult {
  ScoredToken sampled;                       // valid when the sequence had do_sample
  std::vector<ScoredToken> prompt_logprobs;  // one per prompt_logprob_targets entry
};

struct StepResult {
  std::vector<SequenceResult> seqs;  // [num_seqs], same order as StepInputs::seqs
};

}  // namespace kiln
