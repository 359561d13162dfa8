// Request: the engine's state for one sequence being generated. The engine thread owns it; the
// scheduler moves it between the waiting and running queues.
//
//   token_ids:  | prompt (num_prompt_tokens) | output (generated so far) |
//               |<- num_computed_tokens (K/V in the cache) ->|<- to compute ->|
//
// With async scheduling the last num_pending_tokens output entries are placeholders
// (PreviousStepToken) for tokens a launched step is still sampling; num_computed_tokens then
// already counts the launched steps. Outputs never show placeholders.
//
// After preemption by recompute, num_computed_tokens falls back to 0 and the whole token list
// (prompt and output) is computed again; after a swap to host it is kept. Either way the output
// and its RNG position are kept, so a request's tokens do not depend on whether it was preempted.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/step.h"
#include "engine/kv_cache_manager.h"
#include "engine/sampling_params.h"

namespace kiln {

enum class FinishReason : uint8_t { kStop, kLength, kAbort };
std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", "abort"

// kSwapped: preempted with its computed K/V in the host swap space; it waits (in the waiting
// queue) to resume at num_computed_tokens.
enum class RequestStatus : uint8_t { kWaiting, kRunning, kSwapped, kFinished };

// What the engine needs to start a request (tokens, already validated parameters). One
// EngineRequest is one sequence: `n > 1` is expanded into n requests above the engine.
struct EngineRequest {
  RequestId id = 0;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;  // validated; params.n is ignored here
  uint64_t seed = 0;      // the request's random stream (params.seed or drawn by the caller)
  PrefixCacheKey cache_key;
  // params.max_tokens is the server's default (the room left in the context), not a bound the
  // caller chose: the auto capacity policy admits the request without reserving it.
  bool max_tokens_is_default = false;
};

struct Request {
  explicit Request(EngineRequest r, int64_t arrival_order, int32_t max_model_len);
  Request(const Request&) = delete;  // `sampling` points into the request's own vectors
  Request& operator=(const Request&) = delete;

  // Sets the stop tokens (eos unless ignore_eos, plus params.stop_token_ids) and the sampling
  // spans that point at them. Called once, before the request is scheduled.
  void SetStopTokens(const std::vector<int32_t>& eos_token_ids);

  // NOTE: the fields every step reads come first, so that the step's bookkeeping touches few
  // cache lines per request (it runs for hundreds of requests between two forward passes).
  RequestId id;
  RequestStatus status = RequestStatus::kWaiting;
  bool wants_logprobs;
  bool wants_prompt_logprobs;
  std::optional<FinishReason> finish_reason;
  int32_t num_prompt_tokens;
  int32_t num_computed_tokens = 0;
  int32_t num_pending_tokens = 0;  // trailing placeholders in token_ids (0..2)
  int32_t max_num_tokens;          // prompt + max_tokens, capped at the context length
  bool max_tokens_is_default;      // EngineRequest::max_tokens_is_default
  int32_t min_tokens;
  // What the engine has already handed out (outputs are deltas).
  int32_t num_reported_output_tokens = 0;
  int32_t num_reported_prompt_logprobs = 0;
  int32_t num_cached_tokens = 0;        // prefix-cache hit at the last admission
  int32_t stop_token_id = -1;           // the token that stopped it (eos or a stop_token_ids entry)
  std::vector<int32_t> token_ids;       // prompt then output
  std::vector<int32_t> stop_token_ids;  // eos (unless ignore_eos) + params.stop_token_ids
  // The sampling spec of every step, built once; BuildStepInputs sets the token spans and drops
  // the banned ids once min_tokens is reached.
  SamplingSpec sampling;
  int32_t num_preemptions = 0;

  SamplingParams params;
  uint64_t seed;
  PrefixCacheKey cache_key;
  int64_t arrival_order;                     // FCFS order and the priority tie-break
  std::vector<ScoredToken> output_logprobs;  // per output token (when params.logprobs)
  std::vector<ScoredToken> prompt_logprobs;  // per prompt token after the first
  std::vector<std::pair<int32_t, float>> logit_bias;
  // When the scheduler first admitted it (kept across preemptions); the server's queue-time
  // metric is this minus its arrival. Unset (epoch) until then.
  std::chrono::steady_clock::time_point first_scheduled_time{};

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const { return {token_ids.data(), size_t(num_prompt_tokens)}; }
  std::span<const int32_t> output() const {
    return {token_ids.data() + num_prompt_tokens, size_t(num_output_tokens())};
  }
  bool is_finished() const { return status == RequestStatus::kFinished; }
  // Output tokens that are real (sampled and seen by the host).
  int32_t num_known_output_tokens() const { return num_output_tokens() - num_pending_tokens; }
  // Whether sampling reads the output tokens (repetition, frequency or presence penalty).
  bool uses_penalties() const {
    return sampling.repetition_penalty != 1.0f || sampling.frequency_penalty != 0.0f ||
           sampling.presence_penalty != 0.0f;
  }
  // Drops the placeholders (a finished request's in-flight steps are discarded).
  void DropPendingTokens() {
    token_ids.resize(token_ids.size() - num_pending_tokens);
    num_pending_tokens = 0;
  }
};

}  // namespace kiln
