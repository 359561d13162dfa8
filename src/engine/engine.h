// Engine: the step loop (DESIGN.md §3). Single-threaded and synchronous: the caller adds
// requests and calls Step() until HasWork() is false. LLM (offline) drives it in a loop on the
// caller's thread; Executor drives it on its own thread for the server.
//
//   Engine::Step():
//     batch   = scheduler.Schedule()         // {request -> num_new_tokens}, preemptions
//     inputs  = BuildStepInputs(batch)       // flat tokens, positions, slots, block tables
//     result  = runner.Execute(inputs)       // forward + sampling
//     updated = scheduler.Update(batch, result)
//     return  MakeOutputs(updated)           // token deltas for the callers' streams
//
// With async scheduling (CPU/GPU overlap, vLLM's --async-scheduling) the runner works one step
// ahead of the host: a Step() launches batch N+1, scheduled from what batch N will have
// computed, before it waits for N and applies N's result:
//
//   Engine::Step():                            [batch N is launched]
//     next = scheduler.Schedule(ahead)         // decodes take N's token from the device
//     runner.Launch(BuildStepInputs(next))
//     result = runner.Wait()                   // N's; the device moves straight on to N+1
//     return MakeOutputs(scheduler.Update(N, result))
//
// A request that N stops (stop token) or that is aborted while in flight costs one discarded
// token of compute; nothing of it is reported. Where the ahead schedule would need N's result
// (a preemption, penalties over N's token), the step falls back to the synchronous order.
//
// Text (detokenization, stop strings) lives above the engine (OutputProcessor): the engine deals
// in token ids only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/model_runner.h"
#include "core/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/scheduler.h"

namespace kiln {

struct EngineOptions {
  SchedulerOptions scheduler;
  // Tokens per KV block (16 as vLLM). Smaller blocks share prefixes more finely and waste less
  // of a sequence's last block; larger ones make block tables shorter.
  int32_t block_size = 16;
  // KV pool size: an explicit number of blocks, or else bytes (the runner converts). 0 bytes =
  // automatic: 1 GiB here; LLM::Create sizes a CUDA pool from gpu_memory_utilization instead.
  int32_t num_kv_blocks = 0;
  int64_t kv_cache_memory_bytes = 0;
  // Host memory for swap-to-host preemption (the runner pins it on CUDA), in bytes; whole KV
  // blocks of it are used. 0 = none: every preemption recomputes. LLM::Create picks 4 GiB on
  // CUDA and 0 on the CPU when unset there.
  int64_t swap_space_bytes = 0;
  bool enable_prefix_caching = true;
  // The longest sequence (prompt + output). 0 = the model's max_position_embeddings, capped to
  // what the KV pool holds.
  int32_t max_model_len = 0;
  // Token ids that end a request (unless ignore_eos); empty = the model config's eos ids.
  std::vector<int32_t> eos_token_ids;
  // Run the KV cache manager's and scheduler's invariant checks after every step (tests).
  bool check_invariants = false;
  // Async scheduling (above). Unset: on when the runner overlaps host and device work
  // (ModelRunner::OverlapsHost: CUDA), off on the CPU, where it would only add the discarded
  // tokens. The tokens produced are the same either way.
  std::optional<bool> async_scheduling;
};

// What one step produced for one request: deltas since its previous output.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_token_ids;
  std::vector<ScoredToken> new_logprobs;         // when params.logprobs
  std::vector<ScoredToken> new_prompt_logprobs;  // when params.prompt_logprobs
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  bool finished = false;
  std::optional<FinishReason> finish_reason;
  int32_t stop_token_id = -1;  // the eos / stop_token_ids entry that stopped it, else -1
  // Request::first_scheduled_time (epoch when never scheduled, e.g. aborted while waiting).
  std::chrono::steady_clock::time_point first_scheduled_time{};
};

// Timing and counts of one step (microseconds of wall time per phase).
struct StepStats {
  int32_t num_seqs = 0;
  int32_t num_batched_tokens = 0;
  int32_t num_decode_seqs = 0;  // sequences computing exactly one token
  bool launched_ahead = false;  // the next batch was launched before this one's result came
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  double schedule_us = 0, build_us = 0, execute_us = 0, update_us = 0;
  double bookkeeping_us() const { return schedule_us + build_us + update_us; }
};

struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_prompt_tokens = 0;  // computed prompt tokens (excluding cache hits)
  int64_t num_generated_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_swap_preemptions = 0;  // of num_preemptions, those swapped to host
  int32_t num_host_kv_blocks = 0;    // the swap space, in KV blocks
  int32_t num_free_host_kv_blocks = 0;
  double total_bookkeeping_us = 0;  // schedule + build + update over all steps
  double total_execute_us = 0;
  int64_t num_steps_ahead = 0;  // steps whose successor was launched before their result
  StepStats last_step;
  KvCacheStats kv;
  int32_t num_kv_blocks = 0;
  int32_t num_free_kv_blocks = 0;
};

class Engine {
 public:
  // Takes the runner, sizes and allocates the KV pool. Errors: kInvalidArgument for options
  // that contradict each other or the model (naming the option), kResourceExhausted when the
  // pool cannot hold even one max_model_len sequence.
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelRunner> runner,
                                                const EngineOptions& options);
  ~Engine();

  // Validates and queues a request. Errors (kInvalidArgument, naming the field): invalid
  // params, an empty prompt, a token id outside the vocabulary, a prompt of max_model_len
  // tokens or more, a duplicate id.
  Status AddRequest(EngineRequest request);
  // The checks of AddRequest that need no engine state (all but the duplicate id); safe to call
  // from any thread.
  Status ValidateRequest(const EngineRequest& request) const;

  // Finishes the request with reason abort; its output appears in the next Step()'s result.
  // Returns false for an unknown or already finished id.
  bool Abort(RequestId id);

  // Runs one step and returns the outputs it produced (plus those of requests aborted since).
  std::vector<RequestOutput> Step();

  bool HasWork() const;
  bool async_scheduling() const { return async_; }
  const EngineStats& stats();
  const ModelConfig& model_config() const { return runner_->config(); }
  int32_t max_model_len() const { return max_model_len_; }
  const SchedulerOptions& scheduler_options() const { return options_.scheduler; }
  const ModelRunner& runner() const { return *runner_; }

 private:
  Engine() = default;
  RequestOutput MakeOutput(Request* r);
  // Builds, commits and launches a batch.
  void Launch(const ScheduledBatch& batch);

  EngineOptions options_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  int32_t max_model_len_ = 0;
  bool async_ = false;
  // Async: the launched batch whose result the next Step() applies.
  std::optional<ScheduledBatch> in_flight_;
  std::vector<RequestOutput> aborted_;
  EngineStats stats_;
};

}  // namespace kiln
