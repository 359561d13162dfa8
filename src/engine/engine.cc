#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "engine/step_builder.h"

namespace kiln {
namespace {

// Measures consecutive phases of a step: each Lap() stores the time since the previous one.
class LapTimer {
 public:
  void Lap(double* us) {
    const auto now = std::chrono::steady_clock::now();
    *us = std::chrono::duration<double, std::micro>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<ModelRunner> runner,
                                               const EngineOptions& options) {
  CHECK(runner != nullptr);
  const ModelConfig& config = runner->config();
  if (options.block_size < 1 || options.block_size > 1024) {
    return InvalidArgument("block_size: must be in [1, 1024], got " +
                           std::to_string(options.block_size));
  }
  if (options.scheduler.max_num_seqs < 1) {
    return InvalidArgument("max_num_seqs: must be >= 1");
  }
  if (options.scheduler.max_num_batched_tokens < 1) {
    return InvalidArgument("max_num_batched_tokens: must be >= 1");
  }
  int64_t num_blocks = options.num_kv_blocks;
  if (num_blocks <= 0) {
    const int64_t bytes =
        options.kv_cache_memory_bytes > 0 ? options.kv_cache_memory_bytes : int64_t{1} << 30;
    num_blocks = bytes / runner->KvBlockBytes(options.block_size);
  }
  if (num_blocks < 1) {
    return ResourceExhausted("KV cache: the memory given holds no block of " +
                             std::to_string(options.block_size) +
                             " tokens; raise the KV cache memory");
  }
  num_blocks = std::min<int64_t>(num_blocks, int64_t{1} << 30);
  const int64_t pool_tokens = num_blocks * options.block_size;
  const int64_t model_len =
      config.max_position_embeddings > 0 ? config.max_position_embeddings : int64_t{1} << 20;
  int64_t max_model_len = options.max_model_len;
  if (max_model_len > 0) {
    if (max_model_len > model_len) {
      return InvalidArgument("max_model_len: " + std::to_string(max_model_len) +
                             " exceeds the model's context of " + std::to_string(model_len));
    }
    if (max_model_len > pool_tokens) {
      return ResourceExhausted("max_model_len: " + std::to_string(max_model_len) +
                               " tokens do not fit in the KV pool of " +
                               std::to_string(pool_tokens) +
                               " tokens; give the KV cache more memory or lower max_model_len");
    }
  } else {
    max_model_len = std::min(model_len, pool_tokens);
    if (max_model_len < model_len) {
      LOG(INFO) << "max_model_len capped at " << max_model_len << " (the KV pool's size; the model"
                << " allows " << model_len << ")";
    }
  }
  if (!options.scheduler.enable_chunked_prefill &&
      options.scheduler.max_num_batched_tokens < max_model_len) {
    return InvalidArgument(
        "max_num_batched_tokens: without chunked prefill it must cover max_model_len (" +
        std::to_string(max_model_len) + ")");
  }

  if (options.swap_space_bytes < 0) {
    return InvalidArgument("swap_space: must be >= 0 bytes, got " +
                           std::to_string(options.swap_space_bytes));
  }
  const int64_t num_host_blocks = std::min<int64_t>(
      options.swap_space_bytes / runner->KvBlockBytes(options.block_size), int64_t{1} << 30);

  std::unique_ptr<Engine> engine(new Engine());
  engine->options_ = options;
  KILN_RETURN_IF_ERROR(
      runner->AllocateKvCache(static_cast<int32_t>(num_blocks), options.block_size));
  KILN_RETURN_IF_ERROR(
      runner->AllocateSwapSpace(static_cast<int32_t>(num_host_blocks))
          .WithContext("swap space of " + std::to_string(options.swap_space_bytes >> 20) +
                       " MiB (lower it, or set it to 0 to recompute preempted requests)"));
  engine->runner_ = std::move(runner);
  engine->max_model_len_ = static_cast<int32_t>(max_model_len);
  engine->kv_ = std::make_unique<KvCacheManager>(KvCacheOptions{
      .num_blocks = static_cast<int32_t>(num_blocks),
      .block_size = options.block_size,
      .enable_prefix_caching = options.enable_prefix_caching,
      .num_host_blocks = static_cast<int32_t>(num_host_blocks),
  });
  engine->scheduler_ =
      std::make_unique<Scheduler>(options.scheduler, engine->kv_.get(), engine->max_model_len_);
  engine->scheduler_->set_eos_token_ids(options.eos_token_ids.empty() ? config.eos_token_ids
                                                                      : options.eos_token_ids);
  engine->stats_.num_kv_blocks = static_cast<int32_t>(num_blocks);
  engine->stats_.num_host_kv_blocks = static_cast<int32_t>(num_host_blocks);
  engine->async_ = options.async_scheduling.value_or(engine->runner_->OverlapsHost());
  LOG(INFO) << "KV cache: " << num_blocks << " blocks of " << options.block_size << " tokens ("
            << pool_tokens << " tokens, "
            << (num_blocks * engine->runner_->KvBlockBytes(options.block_size) >> 20) << " MiB) on "
            << engine->runner_->name() << "; max_model_len " << max_model_len
            << (engine->async_ ? "; async scheduling" : "");
  if (num_host_blocks > 0) {
    LOG(INFO) << "swap space: " << num_host_blocks << " blocks ("
              << (num_host_blocks * engine->runner_->KvBlockBytes(options.block_size) >> 20)
              << " MiB of host memory) for preempted requests";
  }
  return engine;
}

Engine::~Engine() {
  // The runner may still be writing into request memory the batch points at.
  if (in_flight_.has_value()) runner_->Wait();
}

Status Engine::AddRequest(EngineRequest request) {
  KILN_RETURN_IF_ERROR(ValidateRequest(request));
  if (scheduler_->Find(request.id) != nullptr) {
    return InvalidArgument("request id " + std::to_string(request.id) + " is already in use");
  }
  scheduler_->Add(std::move(request));
  return Status::Ok();
}

Status Engine::ValidateRequest(const EngineRequest& request) const {
  const int32_t vocab_size = runner_->config().vocab_size;
  KILN_RETURN_IF_ERROR(request.params.Validate(vocab_size));
  const auto& prompt = request.prompt_token_ids;
  if (prompt.empty()) return InvalidArgument("prompt: must contain at least one token");
  if (static_cast<int64_t>(prompt.size()) >= max_model_len_) {
    return InvalidArgument("prompt: " + std::to_string(prompt.size()) +
                           " tokens leave no room to generate within max_model_len " +
                           std::to_string(max_model_len_));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return InvalidArgument("prompt: token " + std::to_string(prompt[i]) + " at position " +
                             std::to_string(i) + " is outside the vocabulary of " +
                             std::to_string(vocab_size));
    }
  }
  return Status::Ok();
}

bool Engine::Abort(RequestId id) {
  const Request* r = scheduler_->Finish(id, FinishReason::kAbort);
  if (r == nullptr) return false;
  aborted_.push_back(MakeOutput(const_cast<Request*>(r)));
  return true;
}

bool Engine::HasWork() const {
  return scheduler_->HasWork() || !aborted_.empty() || in_flight_.has_value();
}

RequestOutput Engine::MakeOutput(Request* r) {
  RequestOutput out;
  out.id = r->id;
  out.num_prompt_tokens = r->num_prompt_tokens;
  out.num_cached_tokens = r->num_cached_tokens;
  out.first_scheduled_time = r->first_scheduled_time;
  const auto output = r->output();
  const int32_t num_known = r->num_known_output_tokens();  // placeholders are not output
  out.new_token_ids.assign(output.begin() + r->num_reported_output_tokens,
                           output.begin() + num_known);
  if (r->wants_logprobs) {
    out.new_logprobs.assign(r->output_logprobs.begin() + r->num_reported_output_tokens,
                            r->output_logprobs.end());
  }
  r->num_reported_output_tokens = num_known;
  if (r->wants_prompt_logprobs) {
    const int32_t num_prompt_logprobs = static_cast<int32_t>(r->prompt_logprobs.size());
    if (num_prompt_logprobs > r->num_reported_prompt_logprobs) {
      out.new_prompt_logprobs.assign(r->prompt_logprobs.begin() + r->num_reported_prompt_logprobs,
                                     r->prompt_logprobs.end());
      r->num_reported_prompt_logprobs = num_prompt_logprobs;
    }
  }
  if (r->is_finished()) {
    out.finished = true;
    out.finish_reason = r->finish_reason;
    out.stop_token_id = r->stop_token_id;
  }
  return out;
}

void Engine::Launch(const ScheduledBatch& batch) {
  const StepInputs inputs = BuildStepInputs(batch, *kv_);
  scheduler_->Commit(batch);
  runner_->Launch(inputs);
}

std::vector<RequestOutput> Engine::Step() {
  std::vector<RequestOutput> outputs = std::move(aborted_);
  aborted_.clear();
  outputs.reserve(outputs.size() + scheduler_->num_running() + 1);
  StepStats& s = stats_.last_step;
  s = StepStats();
  LapTimer timer;
  ScheduledBatch batch;
  StepResult result;
  if (!async_) {
    batch = scheduler_->Schedule();
    timer.Lap(&s.schedule_us);
    const StepInputs inputs = BuildStepInputs(batch, *kv_);
    scheduler_->Commit(batch);
    timer.Lap(&s.build_us);
    if (!batch.empty()) result = runner_->Execute(inputs);
    timer.Lap(&s.execute_us);
  } else {
    // The batch whose result this step applies: launched by the previous Step(), or now.
    if (in_flight_.has_value()) {
      batch = std::move(*in_flight_);
      in_flight_.reset();
    } else {
      batch = scheduler_->Schedule();
      if (!batch.empty()) Launch(batch);
    }
    if (!batch.empty()) {
      ScheduledBatch next = scheduler_->Schedule(/*ahead=*/true);
      if (!next.empty()) {
        Launch(next);
        in_flight_ = std::move(next);
        s.launched_ahead = true;
      }
    }
    timer.Lap(&s.schedule_us);  // scheduling, building and launching: the host's share
    if (!batch.empty()) result = runner_->Wait();
    timer.Lap(&s.execute_us);
  }
  for (Request* r : scheduler_->Update(batch, result)) outputs.push_back(MakeOutput(r));
  timer.Lap(&s.update_us);

  // Bookkeeping for stats; nothing below changes what the step did.
  s.num_seqs = static_cast<int32_t>(batch.seqs.size());
  s.num_batched_tokens = batch.num_batched_tokens;
  s.num_decode_seqs = static_cast<int32_t>(
      std::count_if(batch.seqs.begin(), batch.seqs.end(), [](const ScheduledSeq& q) {
        return q.num_new_tokens == 1 && q.num_computed_tokens >= q.request->num_prompt_tokens;
      }));
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  ++stats_.num_steps;
  stats_.num_prompt_tokens += s.num_batched_tokens - s.num_decode_seqs;
  for (const RequestOutput& o : outputs) stats_.num_generated_tokens += o.new_token_ids.size();
  stats_.num_preemptions += static_cast<int64_t>(batch.preempted.size());
  stats_.total_bookkeeping_us += s.bookkeeping_us();
  stats_.total_execute_us += s.execute_us;
  stats_.num_steps_ahead += s.launched_ahead ? 1 : 0;
  if (options_.check_invariants) {
    kv_->CheckInvariants();
    scheduler_->CheckInvariants();
  }
  return outputs;
}

const EngineStats& Engine::stats() {
  stats_.kv = kv_->stats();
  stats_.num_swap_preemptions = scheduler_->stats().num_swap_preemptions;
  stats_.num_free_host_kv_blocks = kv_->NumFreeHostBlocks();
  stats_.num_free_kv_blocks = kv_->NumFreeBlocks();
  return stats_;
}

}  // namespace kiln
