// The in-process benchmarks of `kiln bench`: offline throughput (every request submitted at
// once, as TensorRT-LLM's `trtllm-bench throughput` and vLLM's `bench throughput` do) and batch
// latency (`bench latency`: N identical-length requests together, repeated). Both step an Engine
// on the calling thread, with greedy sampling.
//
//   KILN_ASSIGN_OR_RETURN(OfflineRun run, RunOffline(llm->engine(), requests, {}));
//   Summary s = Summarize(run.records, run.duration_s, {});
//
// Thread safety: one call at a time per Engine (it must have no other requests).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark/dataset.h"
#include "benchmark/metrics.h"
#include "core/status.h"
#include "engine/engine.h"

namespace kiln::benchmark {

struct OfflineOptions {
  bool ignore_eos = true;  // generate exactly output_len tokens per request
  // Requests run first, alone and unmeasured (CUDA graph capture and autotuning happen there).
  int32_t num_warmup = 0;
  uint64_t seed = 0;  // the requests' seeds (greedy sampling ignores them)
};

// What the engine did over the run, beyond the per-request records.
struct EngineCounters {
  int64_t num_steps = 0;
  int64_t num_decode_only_steps = 0;  // steps in which every sequence computed one token
  double decode_only_seconds = 0;
  double mean_decode_batch = 0;   // mean sequences per decode-only step
  int64_t num_prompt_tokens = 0;  // computed prompt tokens (prefix-cache hits excluded)
  int64_t num_cached_prompt_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_swap_preemptions = 0;
  int32_t max_num_running = 0;
  int64_t num_prompt_steps = 0;  // steps with at least one prompt token
  double prompt_step_seconds = 0;
  int64_t num_prompt_step_decodes = 0;  // decode tokens that rode in those steps
};
nlohmann::ordered_json CountersToJson(const EngineCounters& counters);

// One engine step as the benchmark saw it: the wall time between its result and the previous
// one (under async scheduling, the step's own device time plus whatever of the host's work did
// not overlap it) and what it computed.
struct StepRecord {
  double end_s = 0;  // since the run's start
  double seconds = 0;
  int32_t num_seqs = 0;
  int32_t num_decode_seqs = 0;
  int32_t num_batched_tokens = 0;  // prompt tokens = num_batched_tokens - num_decode_seqs
  int32_t num_running = 0;         // after the step
  int32_t num_waiting = 0;
};
nlohmann::ordered_json StepToJson(const StepRecord& step);

struct OfflineRun {
  // One per request, in dataset order: start_s 0, TTFT = its first token, ITL = the gaps
  // between the steps that gave it tokens.
  std::vector<RequestRecord> records;
  double duration_s = 0;  // first step -> last token
  EngineCounters counters;
  std::vector<StepRecord> steps;  // in order
};

// Submits every request (token ids; text prompts must have been tokenized, i.e. prompt_ids
// set) and steps the engine until all finish. Errors: kInvalidArgument for a request without
// token ids, and the engine's AddRequest errors naming the request index.
Result<OfflineRun> RunOffline(Engine& engine, const std::vector<BenchRequest>& requests,
                              const OfflineOptions& options);

struct LatencyOptions {
  int32_t batch_size = 1;
  int32_t input_len = 128;
  int32_t output_len = 128;
  int32_t num_iterations = 10;
  int32_t num_warmup = 2;  // iterations run first and not measured
  uint64_t seed = 0;       // the prompts (random ids, a fresh batch each iteration)
};

// One measured iteration.
struct LatencyIteration {
  double prefill_s = 0;               // submit -> every request has its first token
  double e2e_s = 0;                   // submit -> every request has finished
  std::vector<double> decode_step_s;  // the steps after the prefill (every request decodes)
};

// Runs batch-latency iterations: each submits batch_size random-id prompts of input_len tokens,
// asks for exactly output_len tokens and steps until all finish. Prompts differ between
// iterations, so the prefix cache never serves them; ids are drawn as the random dataset draws
// them (`tokenizer` may be null: then from the model's whole vocabulary). Errors:
// kInvalidArgument for a non-positive option or a prompt that cannot fit max_model_len.
Result<std::vector<LatencyIteration>> RunLatency(Engine& engine, const LatencyOptions& options,
                                                 const Tokenizer* tokenizer);

}  // namespace kiln::benchmark
