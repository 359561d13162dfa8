#include "benchmark/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

namespace kiln::benchmark {
namespace {

using Clock = std::chrono::steady_clock;

EngineRequest MakeRequest(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens,
                          bool ignore_eos, uint64_t seed) {
  EngineRequest r;
  r.id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = ignore_eos;
  r.seed = seed;
  return r;
}

// Steps `engine` until it has no work, calling on_output(output, seconds since `start`) for
// each output and adding the step counts to `counters` and one record a step to `steps`.
template <typename OnOutput>
void StepUntilDone(Engine& engine, Clock::time_point start, EngineCounters* counters,
                   std::vector<StepRecord>* steps, OnOutput on_output) {
  while (engine.HasWork()) {
    const Clock::time_point s0 = Clock::now();
    std::vector<RequestOutput> outputs = engine.Step();
    const Clock::time_point s1 = Clock::now();
    const StepStats& step = engine.stats().last_step;
    const double seconds = SecondsBetween(s0, s1);
    if (counters != nullptr) {
      ++counters->num_steps;
      counters->max_num_running = std::max(counters->max_num_running, step.num_running);
      if (step.num_seqs > 0 && step.num_decode_seqs == step.num_seqs) {
        ++counters->num_decode_only_steps;
        counters->decode_only_seconds += seconds;
        counters->mean_decode_batch += step.num_seqs;  // a sum until the end
      } else if (step.num_seqs > 0) {
        ++counters->num_prompt_steps;
        counters->prompt_step_seconds += seconds;
        counters->num_prompt_step_decodes += step.num_decode_seqs;
      }
    }
    const double now = SecondsBetween(start, s1);
    if (steps != nullptr && step.num_seqs > 0) {
      steps->push_back({now, seconds, step.num_seqs, step.num_decode_seqs, step.num_batched_tokens,
                        step.num_running, step.num_waiting});
    }
    for (const RequestOutput& o : outputs) on_output(o, now);
  }
}

Status AddRequests(Engine& engine, std::vector<EngineRequest> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    KILN_RETURN_IF_ERROR(
        engine.AddRequest(std::move(requests[i])).WithContext("request " + std::to_string(i)));
  }
  return Status::Ok();
}

}  // namespace

nlohmann::ordered_json CountersToJson(const EngineCounters& c) {
  return {{"num_steps", c.num_steps},
          {"num_decode_only_steps", c.num_decode_only_steps},
          {"decode_only_seconds", c.decode_only_seconds},
          {"mean_decode_batch", c.mean_decode_batch},
          {"num_prompt_tokens", c.num_prompt_tokens},
          {"num_cached_prompt_tokens", c.num_cached_prompt_tokens},
          {"num_preemptions", c.num_preemptions},
          {"num_swap_preemptions", c.num_swap_preemptions},
          {"max_num_running", c.max_num_running},
          {"num_prompt_steps", c.num_prompt_steps},
          {"prompt_step_seconds", c.prompt_step_seconds},
          {"num_prompt_step_decodes", c.num_prompt_step_decodes}};
}

nlohmann::ordered_json StepToJson(const StepRecord& s) {
  return {{"end_s", s.end_s},
          {"seconds", s.seconds},
          {"num_seqs", s.num_seqs},
          {"num_decode_seqs", s.num_decode_seqs},
          {"num_prompt_tokens", s.num_batched_tokens - s.num_decode_seqs},
          {"num_running", s.num_running},
          {"num_waiting", s.num_waiting}};
}

Result<OfflineRun> RunOffline(Engine& engine, const std::vector<BenchRequest>& requests,
                              const OfflineOptions& options) {
  if (requests.empty()) return InvalidArgument("the dataset has no requests");
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt_ids.empty()) {
      return InvalidArgument("request " + std::to_string(i) + " has no token ids");
    }
  }
  RequestId next_id = 1;
  if (options.num_warmup > 0) {
    std::vector<EngineRequest> warmup;
    for (int32_t i = 0; i < options.num_warmup; ++i) {
      const BenchRequest r = WarmupVariant(requests[i % requests.size()]);
      warmup.push_back(
          MakeRequest(next_id++, r.prompt_ids, r.output_len, options.ignore_eos, options.seed + i));
    }
    KILN_RETURN_IF_ERROR(AddRequests(engine, std::move(warmup)).WithContext("warm-up"));
    StepUntilDone(engine, Clock::now(), nullptr, nullptr, [](const RequestOutput&, double) {});
  }

  const EngineStats before = engine.stats();
  const RequestId first_id = next_id;
  std::vector<EngineRequest> batch;
  batch.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    batch.push_back(MakeRequest(next_id++, requests[i].prompt_ids, requests[i].output_len,
                                options.ignore_eos, options.seed + i));
  }
  OfflineRun run;
  run.records.resize(requests.size());
  std::vector<double> last_token_s(requests.size(), 0);
  const Clock::time_point start = Clock::now();
  KILN_RETURN_IF_ERROR(AddRequests(engine, std::move(batch)));
  StepUntilDone(engine, start, &run.counters, &run.steps, [&](const RequestOutput& o, double now) {
    const size_t i = static_cast<size_t>(o.id - first_id);
    RequestRecord& rec = run.records[i];
    if (!o.new_token_ids.empty()) {
      if (rec.output_tokens == 0) {
        rec.ttft_s = now;
      } else {
        rec.itl_s.push_back(now - last_token_s[i]);
      }
      last_token_s[i] = now;
      rec.output_tokens += static_cast<int32_t>(o.new_token_ids.size());
    }
    if (o.finished) {
      rec.e2e_s = now;
      rec.input_tokens = o.num_prompt_tokens;
      rec.ok = o.finish_reason != FinishReason::kAbort;
      if (!rec.ok) {
        rec.error_type = "abort";
        rec.error_message = "the engine aborted the request";
      }
    }
  });
  run.duration_s = SecondsBetween(start, Clock::now());
  const EngineStats& after = engine.stats();
  EngineCounters& c = run.counters;
  if (c.num_decode_only_steps > 0) c.mean_decode_batch /= c.num_decode_only_steps;
  c.num_prompt_tokens = after.num_prompt_tokens - before.num_prompt_tokens;
  c.num_cached_prompt_tokens = after.kv.num_hit_tokens - before.kv.num_hit_tokens;
  c.num_preemptions = after.num_preemptions - before.num_preemptions;
  c.num_swap_preemptions = after.num_swap_preemptions - before.num_swap_preemptions;
  return run;
}

Result<std::vector<LatencyIteration>> RunLatency(Engine& engine, const LatencyOptions& options,
                                                 const Tokenizer* tokenizer) {
  if (options.batch_size < 1 || options.input_len < 1 || options.output_len < 1 ||
      options.num_iterations < 1 || options.num_warmup < 0) {
    return InvalidArgument(
        "batch size, input length, output length and iterations must be >= 1, warm-up >= 0");
  }
  if (options.input_len + options.output_len > engine.max_model_len()) {
    return InvalidArgument("input length " + std::to_string(options.input_len) +
                           " + output length " + std::to_string(options.output_len) +
                           " exceeds the model's context of " +
                           std::to_string(engine.max_model_len()) + " tokens");
  }
  std::vector<LatencyIteration> iterations;
  RequestId next_id = 1;
  for (int32_t it = 0; it < options.num_warmup + options.num_iterations; ++it) {
    DatasetOptions data;
    data.kind = "random";
    data.num_requests = options.batch_size;
    data.input_len = options.input_len;
    data.output_len = options.output_len;
    data.seed = options.seed * 1000003 + static_cast<uint64_t>(it);
    data.vocab_size = engine.model_config().vocab_size;
    KILN_ASSIGN_OR_RETURN(std::vector<BenchRequest> prompts, MakeDataset(data, tokenizer));
    std::vector<EngineRequest> batch;
    const RequestId first_id = next_id;
    for (BenchRequest& p : prompts) {
      batch.push_back(MakeRequest(next_id++, std::move(p.prompt_ids), options.output_len,
                                  /*ignore_eos=*/true, options.seed));
    }
    LatencyIteration result;
    std::vector<bool> has_token(options.batch_size, false);
    int32_t num_with_token = 0;
    double last_step_s = 0;
    const Clock::time_point start = Clock::now();
    KILN_RETURN_IF_ERROR(AddRequests(engine, std::move(batch)));
    StepUntilDone(engine, start, nullptr, nullptr, [&](const RequestOutput& o, double now) {
      const size_t i = static_cast<size_t>(o.id - first_id);
      if (!o.new_token_ids.empty() && !has_token[i]) {
        has_token[i] = true;
        if (++num_with_token == options.batch_size) {
          result.prefill_s = now;
          last_step_s = now;
        }
      } else if (!o.new_token_ids.empty() && num_with_token == options.batch_size &&
                 now > last_step_s) {
        result.decode_step_s.push_back(now - last_step_s);
        last_step_s = now;
      }
    });
    result.e2e_s = SecondsBetween(start, Clock::now());
    if (it >= options.num_warmup) iterations.push_back(std::move(result));
  }
  return iterations;
}

}  // namespace kiln::benchmark
