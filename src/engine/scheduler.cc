#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace kiln {

Result<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "priority") return SchedulingPolicy::kPriority;
  return InvalidArgument("scheduling policy: expected fcfs or priority, got '" + std::string(name) +
                         "'");
}

Result<CapacityPolicy> ParseCapacityPolicy(std::string_view name) {
  if (name == "max_utilization") return CapacityPolicy::kMaxUtilization;
  if (name == "guaranteed_no_evict") return CapacityPolicy::kGuaranteedNoEvict;
  if (name == "auto") return CapacityPolicy::kAuto;
  return InvalidArgument(
      "capacity policy: expected auto, max_utilization or guaranteed_no_evict, got '" +
      std::string(name) + "'");
}

Scheduler::Scheduler(const SchedulerOptions& options, KvCacheManager* kv, int32_t max_model_len)
    : options_(options), kv_(kv), max_model_len_(max_model_len) {
  CHECK(options_.max_num_batched_tokens > 0 && options_.max_num_seqs > 0);
}

Scheduler::~Scheduler() = default;

bool Scheduler::ComesBefore(const Request& a, const Request& b) const {
  if (options_.scheduling_policy == SchedulingPolicy::kPriority &&
      a.params.priority != b.params.priority) {
    return a.params.priority < b.params.priority;
  }
  return a.arrival_order < b.arrival_order;
}

void Scheduler::InsertWaiting(Request* r, bool at_front) {
  if (options_.scheduling_policy == SchedulingPolicy::kFcfs) {
    // FCFS: a preempted request resumes before anything that has not started yet.
    if (at_front) {
      waiting_.push_front(r);
    } else {
      waiting_.push_back(r);
    }
    return;
  }
  auto it =
      std::upper_bound(waiting_.begin(), waiting_.end(), r,
                       [this](const Request* x, const Request* y) { return ComesBefore(*x, *y); });
  waiting_.insert(it, r);
}

void Scheduler::Add(EngineRequest request) {
  CHECK(!request.prompt_token_ids.empty());
  CHECK(static_cast<int64_t>(request.prompt_token_ids.size()) < max_model_len_);
  const RequestId id = request.id;
  auto r = std::make_unique<Request>(std::move(request), next_arrival_++, max_model_len_);
  r->SetStopTokens(eos_token_ids_);
  Request* raw = r.get();
  CHECK(requests_.emplace(id, std::move(r)).second) << "duplicate request id " << id;
  InsertWaiting(raw, /*at_front=*/false);
}

const Request* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::Release(Request* r) {
  kv_->Free(r->id);
  if (r->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->status == RequestStatus::kWaiting || r->status == RequestStatus::kSwapped) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  }
  r->status = RequestStatus::kFinished;
  finished_.push_back(r->id);
}

const Request* Scheduler::Finish(RequestId id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->is_finished()) return nullptr;
  Request* r = it->second.get();
  r->finish_reason = reason;
  r->DropPendingTokens();
  Release(r);
  return r;
}

void Scheduler::Preempt(Request* r, ScheduledBatch* batch) {
  CHECK(r->status == RequestStatus::kRunning);
  // Swap when the host space has room; there is nothing to keep before the first token.
  const bool swapped =
      r->num_computed_tokens > 0 && kv_->SwapOut(r->id, r->num_computed_tokens, &batch->swap_out);
  if (!swapped) kv_->Free(r->id);
  running_.erase(std::find(running_.begin(), running_.end(), r));
  // Already scheduled in this step (a decode scheduled before a later request ran out of
  // blocks): take it back out and return its tokens to the budget.
  auto seq = std::find_if(batch->seqs.begin(), batch->seqs.end(),
                          [r](const ScheduledSeq& s) { return s.request == r; });
  if (seq != batch->seqs.end()) {
    batch->num_batched_tokens -= seq->num_new_tokens;
    batch->seqs.erase(seq);
  }
  if (swapped) {
    r->status = RequestStatus::kSwapped;
    ++stats_.num_swap_preemptions;
  } else {
    r->status = RequestStatus::kWaiting;
    r->num_computed_tokens = 0;
    r->num_cached_tokens = 0;
    // NOTE: recomputation yields the same prompt logprobs (the forward is batch-invariant); they
    // are recomputed rather than tracked through partial chunks.
    r->prompt_logprobs.clear();
  }
  ++r->num_preemptions;
  ++stats_.num_preemptions;
  batch->preempted.push_back(r->id);
  InsertWaiting(r, /*at_front=*/true);
}

std::optional<std::span<const int32_t>> Scheduler::AllocateRunning(Request* r, int32_t num_tokens,
                                                                   ScheduledBatch* batch) {
  while (true) {
    std::optional<std::span<const int32_t>> table = kv_->Allocate(r->id, num_tokens);
    if (table.has_value()) return table;
    CHECK(options_.capacity_policy != CapacityPolicy::kGuaranteedNoEvict)
        << "guaranteed_no_evict admitted more than the KV pool holds";
    // The victim is whoever comes last in policy order (possibly r itself), among the requests
    // without a reservation when there are any.
    Request* victim = nullptr;
    for (Request* x : running_) {
      if (victim == nullptr || (Reserves(*victim) && !Reserves(*x)) ||
          (Reserves(*victim) == Reserves(*x) && ComesBefore(*victim, *x))) {
        victim = x;
      }
    }
    Preempt(victim, batch);
    if (victim == r) return std::nullopt;
  }
}

bool Scheduler::Reserves(const Request& r) const {
  switch (options_.capacity_policy) {
    case CapacityPolicy::kMaxUtilization:
      return false;
    case CapacityPolicy::kGuaranteedNoEvict:
      return true;
    case CapacityPolicy::kAuto:
      return !r.max_tokens_is_default;
  }
  return false;
}

int32_t Scheduler::WorstCaseBlocks(const Request& r) const {
  // The last sampled token's K/V is never computed.
  return kv_->NumBlocksFor(r.max_num_tokens - 1);
}

bool Scheduler::FitsReservations(const Request& r, int32_t num_tokens) const {
  if (options_.capacity_policy == CapacityPolicy::kMaxUtilization) return true;
  int64_t reserved = 0;  // blocks the running reservations may still take
  for (const Request* x : running_) {
    if (!Reserves(*x)) continue;
    reserved += std::max<int64_t>(
        0, WorstCaseBlocks(*x) - static_cast<int64_t>(kv_->BlockTable(x->id).size()));
  }
  // A greedy request with nothing reserved is admitted as under max_utilization: on what the
  // allocation finds (its prefix-cache hit included).
  if (!Reserves(r) && reserved == 0) return true;
  // NOTE: counts r's prefix-cache hit as new blocks (an evictable hit leaves the free queue
  // too), so a shared prefix under-admits rather than overcommits.
  const int32_t wanted = Reserves(r) ? WorstCaseBlocks(r) : kv_->NumBlocksFor(num_tokens);
  return reserved + wanted <= kv_->NumFreeBlocks();
}

ScheduledBatch Scheduler::Schedule(bool ahead) {
  for (RequestId id : retired_) requests_.erase(id);
  retired_ = std::move(finished_);
  finished_.clear();

  ScheduledBatch batch;
  auto budget = [&] { return options_.max_num_batched_tokens - batch.num_batched_tokens; };
  auto chunk = [&](int32_t remaining) {
    int32_t n = std::min(remaining, budget());
    if (options_.max_prefill_chunk_tokens > 0 && options_.enable_chunked_prefill) {
      n = std::min(n, options_.max_prefill_chunk_tokens);
    }
    return n;
  };

  // 1 + 2: running requests, decodes before prefill chunks.
  std::vector<Request*> order;
  order.reserve(running_.size());
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens == 1) order.push_back(r);
  }
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens > 1) order.push_back(r);
  }
  auto wait_for_update = [&batch] {
    // Blocks given to the requests before stay theirs; they need them next step anyway.
    batch.seqs.clear();
    batch.num_batched_tokens = 0;
    return batch;
  };
  for (Request* r : order) {
    if (r->status != RequestStatus::kRunning) continue;  // preempted by an earlier one
    if (budget() <= 0) break;
    if (ahead && r->num_pending_tokens > 0) {
      if (r->num_tokens() >= r->max_num_tokens) continue;  // the launched step ends it
      if (r->uses_penalties()) return wait_for_update();
    }
    const int32_t num_new = chunk(r->num_tokens() - r->num_computed_tokens);
    const int32_t num_tokens = r->num_computed_tokens + num_new;
    std::optional<std::span<const int32_t>> table;
    if (ahead) {
      table = kv_->Allocate(r->id, num_tokens);
      if (!table.has_value()) return wait_for_update();  // only a preemption would make room
    } else {
      table = AllocateRunning(r, num_tokens, &batch);
      if (!table.has_value()) continue;
    }
    batch.seqs.push_back(
        {r, r->num_computed_tokens, num_new, num_tokens == r->num_tokens(), *table});
    batch.num_batched_tokens += num_new;
  }

  // 3: admissions, in policy order; none in a step that had to preempt (no room).
  while (!waiting_.empty() && batch.preempted.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_num_seqs && budget() > 0) {
    Request* r = waiting_.front();
    // A swapped-out request resumes where it stopped, its blocks copied back from the host;
    // any other starts from its prefix-cache hit.
    const bool swapped = r->status == RequestStatus::kSwapped;
    PrefixHit hit;
    // NOTE: requests asking for prompt logprobs compute their whole prompt (a cached prefix
    // has no logits).
    if (!swapped && !r->wants_prompt_logprobs) {
      hit = kv_->FindCachedPrefix(r->token_ids, r->cache_key);
    }
    const int32_t num_computed = swapped ? r->num_computed_tokens : hit.num_tokens;
    const int32_t remaining = r->num_tokens() - num_computed;
    const int32_t num_new = chunk(remaining);
    if (!options_.enable_chunked_prefill && num_new < remaining) break;
    if (!FitsReservations(*r, num_computed + num_new)) break;
    auto table = swapped ? kv_->SwapIn(r->id, num_computed + num_new, &batch.swap_in)
                         : kv_->Allocate(r->id, num_computed + num_new, &hit);
    if (!table.has_value()) break;
    waiting_.pop_front();
    // Token spans handed to a launched step point into token_ids: it must never reallocate.
    r->token_ids.reserve(r->max_num_tokens);
    r->status = RequestStatus::kRunning;
    if (!swapped) r->num_computed_tokens = r->num_cached_tokens = hit.num_tokens;
    if (r->first_scheduled_time == std::chrono::steady_clock::time_point{}) {
      r->first_scheduled_time = std::chrono::steady_clock::now();
    }
    running_.push_back(r);
    batch.seqs.push_back(
        {r, num_computed, num_new, num_computed + num_new == r->num_tokens(), *table});
    batch.num_batched_tokens += num_new;
  }
  CHECK(!batch.seqs.empty() || (batch.swap_out.empty() && batch.swap_in.empty()))
      << "a batch of block copies without sequences";
  stats_.num_running = num_running();
  stats_.num_waiting = num_waiting();
  return batch;
}

void Scheduler::CheckStop(Request* r, int32_t token, int32_t length) {
  // stop_token_ids = eos (unless ignore_eos) + the request's stop ids.
  const auto& stops = r->stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    r->finish_reason = FinishReason::kStop;
    r->stop_token_id = token;
  } else if (length >= r->max_num_tokens) {
    r->finish_reason = FinishReason::kLength;
  }
}

void Scheduler::Commit(const ScheduledBatch& batch) {
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ScheduledSeq& s = batch.seqs[i];
    Request* r = s.request;
    CHECK_EQ(r->num_computed_tokens, s.num_computed_tokens) << "request " << r->id;
    r->num_computed_tokens += s.num_new_tokens;
    if (s.samples) {
      CHECK_LT(r->num_tokens(), r->max_num_tokens) << "request " << r->id;
      r->token_ids.push_back(PreviousStepToken(static_cast<int32_t>(i)));
      ++r->num_pending_tokens;
    }
  }
}

std::vector<Request*> Scheduler::Update(const ScheduledBatch& batch, const StepResult& result) {
  CHECK_EQ(batch.seqs.size(), result.seqs.size());
  std::vector<Request*> outputs;
  outputs.reserve(batch.seqs.size());
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ScheduledSeq& s = batch.seqs[i];
    Request* r = s.request;
    // Finished (a stop token, an abort) after this batch was launched: its work is dropped.
    if (r->is_finished()) continue;
    const SequenceResult& res = result.seqs[i];
    const int32_t num_computed = s.num_computed_tokens + s.num_new_tokens;
    bool has_output = !res.prompt_logprobs.empty();
    if (has_output) {
      r->prompt_logprobs.insert(r->prompt_logprobs.end(), res.prompt_logprobs.begin(),
                                res.prompt_logprobs.end());
    }
    if (s.samples) {
      CHECK_GT(r->num_pending_tokens, 0) << "request " << r->id;
      const int32_t index = r->num_tokens() - r->num_pending_tokens;  // the oldest placeholder
      --r->num_pending_tokens;
      const int32_t token = res.sampled.token_id;
      r->token_ids[index] = token;
      if (r->wants_logprobs) r->output_logprobs.push_back(res.sampled);
      CheckStop(r, token, index + 1);
      has_output = true;
    }
    // Only a step that completes a block has anything to cache (one decode step in block_size).
    // Its blocks hold real tokens only: placeholders sit at num_computed and beyond.
    const int32_t block_size = kv_->block_size();
    if (num_computed / block_size > s.num_computed_tokens / block_size) {
      kv_->CacheFullBlocks(r->id, r->token_ids, num_computed, r->cache_key);
    }
    if (r->finish_reason.has_value()) {
      r->DropPendingTokens();
      Release(r);
    }
    if (has_output) outputs.push_back(r);
  }
  return outputs;
}

void Scheduler::CheckInvariants() const {
  size_t num_running = 0, num_waiting = 0;
  for (const auto& [id, r] : requests_) {
    CHECK_EQ(id, r->id);
    if (r->status == RequestStatus::kRunning) {
      ++num_running;
      CHECK(std::find(running_.begin(), running_.end(), r.get()) != running_.end());
      CHECK(r->num_computed_tokens < r->num_tokens()) << "request " << id;
      CHECK(static_cast<int32_t>(kv_->BlockTable(id).size()) >=
            kv_->NumBlocksFor(r->num_computed_tokens))
          << "request " << id << " lacks blocks for its computed tokens";
    } else if (r->status == RequestStatus::kWaiting) {
      ++num_waiting;
      CHECK_EQ(r->num_computed_tokens, 0);
      CHECK(kv_->BlockTable(id).empty()) << "waiting request " << id << " holds blocks";
      CHECK(kv_->HostBlockTable(id).empty()) << "waiting request " << id << " holds host blocks";
    } else if (r->status == RequestStatus::kSwapped) {
      ++num_waiting;
      CHECK(std::find(waiting_.begin(), waiting_.end(), r.get()) != waiting_.end());
      CHECK(kv_->BlockTable(id).empty()) << "swapped request " << id << " holds device blocks";
      CHECK(r->num_computed_tokens > 0 && r->num_computed_tokens < r->num_tokens())
          << "swapped request " << id;
      CHECK_EQ(static_cast<int32_t>(kv_->HostBlockTable(id).size()),
               kv_->NumBlocksFor(r->num_computed_tokens))
          << "swapped request " << id << " host blocks vs computed tokens";
    } else {
      CHECK(kv_->BlockTable(id).empty() && kv_->HostBlockTable(id).empty())
          << "finished request " << id << " holds blocks";
    }
  }
  CHECK_EQ(num_running, running_.size());
  CHECK_EQ(num_waiting, waiting_.size());
  CHECK(static_cast<int32_t>(running_.size()) <= options_.max_num_seqs);
  for (size_t i = 1; i < waiting_.size(); ++i) {
    if (options_.scheduling_policy == SchedulingPolicy::kPriority) {
      CHECK(!ComesBefore(*waiting_[i], *waiting_[i - 1])) << "waiting queue out of order";
    }
  }
}

}  // namespace kiln
