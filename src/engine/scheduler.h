// Scheduler: decides, each step, how many tokens every request computes (DESIGN.md §3).
//
// There are no prefill and decode phases: a request has num_tokens (prompt + output) and
// num_computed_tokens, and a step gives it num_new_tokens so that the second catches up with the
// first. A decode is 1 new token, a prefill chunk is many, a prefix-cache hit counts as computed.
//
// Schedule(), in order, inside max_num_batched_tokens and max_num_seqs:
//   1. running decodes (requests needing exactly one token) — first, so that a long prefill never
//      stalls the requests already streaming (chunked prefill protects decodes);
//   2. running prefills (chunked to what is left of the token budget);
//   3. waiting requests in policy order (FCFS: arrival; priority: (priority, arrival)), each with
//      its prefix-cache hit, while a seat, tokens and blocks are left. The queue head blocks the
//      rest (no overtaking), so order is kept.
// Async scheduling: Schedule(ahead = true) plans step N+1 while step N still runs. Commit(N) has
// counted N's tokens as computed and put a placeholder where N samples; the ahead batch never
// preempts, skips requests that N finishes by length, and comes back empty ("do it after N")
// where it would need what N decides: blocks that only a preemption frees, or penalties over the
// token N is sampling. A request N stops (stop token, abort) may still be in N+1; its result is
// dropped.
//
// When a running request's blocks cannot grow:
//   max_utilization:      preempt the running request that comes last in policy order and retry.
//                         The victim goes back to the front of the waiting queue. When the swap
//                         space has room its computed blocks are swapped out to host memory
//                         (kSwapped: it resumes where it stopped, its blocks copied back in);
//                         otherwise they are freed and it is recomputed from its first token.
//   guaranteed_no_evict:  cannot happen: a request is admitted only when the worst case of every
//                         running request plus its own fits in the pool.
//   auto (the default):   a request whose max_tokens the caller chose reserves its worst case
//                         as under guaranteed_no_evict; one left at the server's default
//                         (EngineRequest::max_tokens_is_default: the room left in the context)
//                         is admitted greedily into what the reservations leave. Only those
//                         greedy requests can make the pool run out; the victim is then the
//                         last of them in policy order (a reserving request only when none
//                         runs), handled as under max_utilization.
//
// Thread safety: none; lives on the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/step.h"
#include "core/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace kiln {

enum class SchedulingPolicy : uint8_t {
  kFcfs,      // first come, first served
  kPriority,  // smaller SamplingParams::priority first, then arrival
};
enum class CapacityPolicy : uint8_t {
  kMaxUtilization,     // admit greedily; preempt (swap or recompute) when blocks run out
  kGuaranteedNoEvict,  // admit only when the worst case fits; never preempt
  kAuto,  // guaranteed_no_evict for requests with a chosen max_tokens, max_utilization for others
};
Result<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name);  // "fcfs", "priority"
Result<CapacityPolicy> ParseCapacityPolicy(std::string_view name);      // "auto", ...

struct SchedulerOptions {
  // Tokens one step computes at most (all requests together). Larger = better prefill
  // throughput, longer steps (and so higher inter-token latency for running decodes).
  int32_t max_num_batched_tokens = 2048;
  // Requests running at once. Bounded by KV blocks in practice.
  int32_t max_num_seqs = 256;
  // Split long prompts over several steps. Off: a prompt is admitted only when all of it fits
  // in one step's budget (so max_num_batched_tokens must cover the longest prompt).
  bool enable_chunked_prefill = true;
  // The most prompt tokens one request computes in one step (0 = no cap beyond the budget), as
  // vLLM's long_prefill_token_threshold: a small cap lets many prompts advance together and
  // keeps long prompts from monopolising steps. Only with chunked prefill.
  int32_t max_prefill_chunk_tokens = 0;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  CapacityPolicy capacity_policy = CapacityPolicy::kAuto;
};

// One request's share of a step.
struct ScheduledSeq {
  Request* request = nullptr;
  int32_t num_computed_tokens = 0;  // before this step
  int32_t num_new_tokens = 0;
  bool samples = false;  // the step reaches the end of the known tokens and samples the next
  // The request's block table after this step's allocation (valid until the next Schedule()).
  std::span<const int32_t> block_table;
};

struct ScheduledBatch {
  std::vector<ScheduledSeq> seqs;    // decodes first, then prefills, then new admissions
  std::vector<RequestId> preempted;  // preempted during this Schedule()
  // Block copies the step runs before its forward pass (StepInputs::swap_out / swap_in). A batch
  // with copies always has sequences: a preemption leaves at least the request it made room for.
  std::vector<BlockCopy> swap_out;
  std::vector<BlockCopy> swap_in;
  int32_t num_batched_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

struct SchedulerStats {
  int64_t num_preemptions = 0;
  int64_t num_swap_preemptions = 0;  // of which swapped to host (the rest recompute)
  int32_t num_running = 0;
  int32_t num_waiting = 0;
};

class Scheduler {
 public:
  // `kv` must outlive the scheduler. max_model_len caps every request's length.
  Scheduler(const SchedulerOptions& options, KvCacheManager* kv, int32_t max_model_len);
  ~Scheduler();

  // Takes a new request into the waiting queue.
  // REQUIRES: unique id; 1 <= prompt length < max_model_len (validated at the edge).
  void Add(EngineRequest request);

  // Finishes request `id` with `reason` wherever it is (waiting or running) and frees its blocks.
  // Returns the request, or nullptr for an unknown or already finished id. A finished request
  // lives on until the second Schedule() after its finish, so that a batch launched before it
  // finished can still be updated.
  const Request* Finish(RequestId id, FinishReason reason);

  // The next step's batch. ahead: the previous batch is committed but not yet updated (see
  // above); an empty batch then means "schedule after the update".
  ScheduledBatch Schedule(bool ahead = false);

  // Counts a scheduled batch as launched: advances num_computed_tokens and appends a placeholder
  // (PreviousStepToken of its place in the batch) for every token the batch samples. Call once
  // per batch, after building its inputs, before the next Schedule().
  void Commit(const ScheduledBatch& batch);

  // Applies a committed batch's result: fills its placeholders with the sampled tokens, appends
  // logprobs, checks stop tokens and lengths, caches newly full blocks, frees finished requests.
  // Returns the requests that produced output this step (new tokens, prompt logprobs or a
  // finish); the pointers stay valid until the next Schedule().
  std::vector<Request*> Update(const ScheduledBatch& batch, const StepResult& result);

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const Request* Find(RequestId id) const;
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerOptions& options() const { return options_; }

  // Eos token ids that finish a request (unless ignore_eos) — from the model's config.
  void set_eos_token_ids(std::vector<int32_t> ids) { eos_token_ids_ = std::move(ids); }

  // Checks that queues, statuses and block tables agree (aborts through CHECK otherwise).
  void CheckInvariants() const;

 private:
  bool ComesBefore(const Request& a, const Request& b) const;  // policy order
  void InsertWaiting(Request* r, bool at_front);
  // Grows r's blocks to cover num_tokens, preempting others (max_utilization) when needed.
  // Returns false when r itself had to be preempted (or there is no room at all).
  std::optional<std::span<const int32_t>> AllocateRunning(Request* r, int32_t num_tokens,
                                                          ScheduledBatch* batch);
  void Preempt(Request* r, ScheduledBatch* batch);
  // Whether r holds a reservation for its worst case (capacity policy and r's max_tokens).
  bool Reserves(const Request& r) const;
  int32_t WorstCaseBlocks(const Request& r) const;
  // Whether admitting r with num_tokens computed after its first step keeps every reservation
  // (the running reserving requests' worst cases, and r's own if it reserves) inside the pool.
  bool FitsReservations(const Request& r, int32_t num_tokens) const;
  // Sets r's finish reason when `token` (making r `length` tokens long) stops it.
  void CheckStop(Request* r, int32_t token, int32_t length);
  void Release(Request* r);  // frees blocks, removes from queues

  SchedulerOptions options_;
  KvCacheManager* kv_;
  int32_t max_model_len_;
  std::vector<int32_t> eos_token_ids_;
  int64_t next_arrival_ = 0;

  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // admission order
  std::deque<Request*> waiting_;   // policy order (front = next)
  // Finished since the last Schedule(), and in the Schedule() before: destroyed a Schedule()
  // later, once no launched batch can still name them.
  std::vector<RequestId> finished_, retired_;
  SchedulerStats stats_;
};

}  // namespace kiln
