// Exact tests of the scheduler's decisions: token counts per request per step, order,
// preemption victims, capacity policies, aborts.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kiln {
namespace {

constexpr int32_t kToken = 5;  // every sampled token (never an eos)

EngineRequest Req(RequestId id, int32_t prompt_len, int32_t max_tokens = 4, int priority = 0) {
  EngineRequest r;
  r.id = id;
  r.prompt_token_ids.resize(prompt_len);
  std::iota(r.prompt_token_ids.begin(), r.prompt_token_ids.end(), 100 * static_cast<int>(id));
  r.params.max_tokens = max_tokens;
  r.params.priority = priority;
  return r;
}

// {id: num_new_tokens} of a batch, in batch order.
std::vector<std::pair<RequestId, int32_t>> Shares(const ScheduledBatch& b) {
  std::vector<std::pair<RequestId, int32_t>> out;
  for (const ScheduledSeq& s : b.seqs) out.push_back({s.request->id, s.num_new_tokens});
  return out;
}

// Applies a batch as if every sampling step produced kToken.
std::vector<Request*> Apply(Scheduler& s, const ScheduledBatch& b) {
  StepResult result;
  result.seqs.resize(b.seqs.size());
  for (SequenceResult& r : result.seqs) r.sampled.token_id = kToken;
  s.Commit(b);
  return s.Update(b, result);
}

using Shares_t = std::vector<std::pair<RequestId, int32_t>>;

struct Fixture {
  explicit Fixture(SchedulerOptions o, int32_t num_blocks = 64, int32_t block_size = 4,
                   int32_t num_host_blocks = 0)
      : kv(KvCacheOptions{num_blocks, block_size, true, 64, num_host_blocks}), sched(o, &kv, 1024) {
    sched.set_eos_token_ids({0});
  }
  ScheduledBatch Step() {
    ScheduledBatch b = sched.Schedule();
    last = Shares(b);
    Apply(sched, b);
    kv.CheckInvariants();
    sched.CheckInvariants();
    return b;
  }
  KvCacheManager kv;
  Scheduler sched;
  Shares_t last;
};

const SchedulerOptions kGreedy = {.capacity_policy = CapacityPolicy::kMaxUtilization};

// Two 7-token prompts with 6 new tokens each in a pool of 4 blocks of 4: the third step is the
// first decode that needs a third block for request 1, so request 2 (the later arrival) is
// preempted there. Returns that step's batch.
ScheduledBatch RunToPreemption(Fixture& f) {
  f.sched.Add(Req(1, 7, 6));
  f.sched.Add(Req(2, 7, 6));
  f.Step();
  f.Step();
  return f.Step();
}

TEST(SchedulerTest, ChunkedPrefillWithinTheTokenBudget) {
  Fixture f({.max_num_batched_tokens = 10});
  f.sched.Add(Req(1, 25));
  f.sched.Add(Req(2, 4));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 10}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 10}}));
  f.Step();  // the rest of 1's prompt, then 2 fits in what is left
  EXPECT_EQ(f.last, (Shares_t{{1, 5}, {2, 4}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));
  EXPECT_EQ(f.sched.Find(1)->num_output_tokens(), 2);
}

TEST(SchedulerTest, PrefillChunkCapLetsPromptsAdvanceTogether) {
  Fixture f({.max_num_batched_tokens = 100, .max_prefill_chunk_tokens = 3});
  f.sched.Add(Req(1, 7));
  f.sched.Add(Req(2, 2));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 3}, {2, 2}}));
  f.Step();  // 2 decodes first; 1 continues its prompt 3 at a time
  EXPECT_EQ(f.last, (Shares_t{{2, 1}, {1, 3}}));
  f.Step();  // 1's last prompt token needs one token like a decode: running order again
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));
}

TEST(SchedulerTest, DecodesGoBeforeRunningPrefills) {
  Fixture f({.max_num_batched_tokens = 8});
  f.sched.Add(Req(1, 3, 10));
  f.Step();  // 1 prefills (3), nothing else waiting
  f.sched.Add(Req(2, 20, 10));
  f.Step();  // 1 decodes first, 2 takes the remaining 7
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 7}}));
  f.Step();  // 2 is now a running prefill: still after 1's decode
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 7}}));
}

TEST(SchedulerTest, NoChunkingAdmitsOnlyWholePrompts) {
  Fixture f({.max_num_batched_tokens = 10, .enable_chunked_prefill = false});
  f.sched.Add(Req(1, 6));
  f.sched.Add(Req(2, 6));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 6}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 6}}));
}

TEST(SchedulerTest, MaxNumSeqsLimitsRunningRequests) {
  Fixture f({.max_num_seqs = 2});
  f.sched.Add(Req(1, 2, 2));
  f.sched.Add(Req(2, 2, 3));
  f.sched.Add(Req(3, 2, 2));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 2}, {2, 2}}));
  f.Step();  // 1 finishes (2 tokens)
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));
  EXPECT_EQ(f.sched.num_running(), 1);
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{2, 1}, {3, 2}}));
}

TEST(SchedulerTest, PriorityPolicyOrdersTheWaitingQueue) {
  Fixture f({.max_num_seqs = 1, .scheduling_policy = SchedulingPolicy::kPriority});
  f.sched.Add(Req(1, 2, 1, /*priority=*/5));
  f.sched.Add(Req(2, 2, 1, /*priority=*/-1));
  f.sched.Add(Req(3, 2, 1, /*priority=*/0));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{2, 2}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{3, 2}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 2}}));
}

TEST(SchedulerTest, MaxUtilizationPreemptsTheLatestArrival) {
  // 4 blocks of 4 tokens: two 7-token prompts take 2 blocks each; the first decode that needs
  // a third block for request 1 preempts request 2 (the later arrival).
  Fixture f(kGreedy, /*num_blocks=*/4, /*block_size=*/4);
  f.sched.Add(Req(1, 7, 6));
  f.sched.Add(Req(2, 7, 6));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 7}, {2, 7}}));
  EXPECT_EQ(f.kv.NumFreeBlocks(), 0);
  ScheduledBatch b = f.Step();  // 1 decodes position 7 (fits block 1); 2 likewise
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));
  b = f.Step();  // position 8 needs a new block for each: 2 is preempted for 1
  EXPECT_EQ(f.last, (Shares_t{{1, 1}}));
  EXPECT_EQ(b.preempted, (std::vector<RequestId>{2}));
  const Request* r2 = f.sched.Find(2);
  EXPECT_EQ(r2->status, RequestStatus::kWaiting);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(r2->num_output_tokens(), 2);  // kept: recomputed later, not regenerated
  EXPECT_EQ(r2->num_preemptions, 1);
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 1);
  EXPECT_EQ(f.kv.NumFreeBlocks(), 4);
}

TEST(SchedulerTest, PreemptionSwapsToHostWhenItHasRoom) {
  // As above, with 4 host blocks: request 2's 8 computed tokens (2 blocks) go to the host and
  // come back when request 1 ends; it resumes with a decode, nothing recomputed.
  Fixture f(kGreedy, /*num_blocks=*/4, /*block_size=*/4, /*num_host_blocks=*/4);
  ScheduledBatch b = RunToPreemption(f);
  EXPECT_EQ(f.last, (Shares_t{{1, 1}}));
  EXPECT_EQ(b.preempted, (std::vector<RequestId>{2}));
  ASSERT_EQ(b.swap_out.size(), 2u);
  EXPECT_TRUE(b.swap_in.empty());
  const Request* r2 = f.sched.Find(2);
  EXPECT_EQ(r2->status, RequestStatus::kSwapped);
  EXPECT_EQ(r2->num_computed_tokens, 8);
  EXPECT_EQ(r2->num_output_tokens(), 2);
  EXPECT_EQ(f.kv.NumFreeHostBlocks(), 2);
  EXPECT_EQ(f.sched.num_waiting(), 1);
  int resumed_at = -1;
  for (int step = 0; f.sched.HasWork(); ++step) {
    b = f.Step();
    if (!b.swap_in.empty()) {
      EXPECT_EQ(resumed_at, -1) << "swapped in twice";
      resumed_at = step;
      EXPECT_EQ(f.last, (Shares_t{{2, 1}}));  // a decode: its 8 tokens came back
      ASSERT_EQ(b.swap_in.size(), 2u);
      EXPECT_EQ(f.kv.NumFreeHostBlocks(), 4);
    }
  }
  EXPECT_GE(resumed_at, 0) << "request 2 never came back";
  EXPECT_EQ(f.sched.stats().num_preemptions, 1);
  EXPECT_EQ(f.sched.stats().num_swap_preemptions, 1);
  EXPECT_EQ(f.kv.stats().num_swapped_out_blocks, 2);
  EXPECT_EQ(f.kv.stats().num_swapped_in_blocks, 2);
  EXPECT_EQ(f.kv.NumFreeBlocks(), 4);
}

TEST(SchedulerTest, SwapInUsesTheHostBlocksOfTheSwapOut) {
  Fixture f(kGreedy, 4, 4, 4);
  const ScheduledBatch out = RunToPreemption(f);
  ASSERT_EQ(out.swap_out.size(), 2u);
  while (f.sched.HasWork()) {
    const ScheduledBatch in = f.Step();
    if (in.swap_in.empty()) continue;
    ASSERT_EQ(in.swap_in.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(in.swap_in[i].host_block, out.swap_out[i].host_block) << "block " << i;
      EXPECT_EQ(in.swap_in[i].device_block, in.seqs[0].block_table[i]) << "block " << i;
    }
  }
}

TEST(SchedulerTest, PreemptionRecomputesWhenTheHostIsFull) {
  Fixture f(kGreedy, 4, 4, /*num_host_blocks=*/1);  // request 2 needs 2
  const ScheduledBatch b = RunToPreemption(f);
  EXPECT_EQ(b.preempted, (std::vector<RequestId>{2}));
  EXPECT_TRUE(b.swap_out.empty());
  EXPECT_EQ(f.sched.Find(2)->status, RequestStatus::kWaiting);
  EXPECT_EQ(f.sched.Find(2)->num_computed_tokens, 0);
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 1);
  EXPECT_EQ(f.sched.stats().num_swap_preemptions, 0);
}

TEST(SchedulerTest, FinishingASwappedRequestFreesItsHostBlocks) {
  Fixture f(kGreedy, 4, 4, 4);
  RunToPreemption(f);
  ASSERT_NE(f.sched.Find(2), nullptr);
  ASSERT_EQ(f.sched.Find(2)->status, RequestStatus::kSwapped);
  EXPECT_NE(f.sched.Finish(2, FinishReason::kAbort), nullptr);
  EXPECT_EQ(f.kv.NumFreeHostBlocks(), 4);
  EXPECT_EQ(f.sched.num_waiting(), 0);
  f.sched.CheckInvariants();
  while (f.sched.HasWork()) f.Step();
}

TEST(SchedulerTest, GuaranteedNoEvictAdmitsOnlyWhatFitsAndNeverPreempts) {
  // Each request may reach 7 + 6 - 1 = 12 computed tokens = 3 blocks; 5 blocks hold one.
  Fixture f({.capacity_policy = CapacityPolicy::kGuaranteedNoEvict}, 5, 4);
  f.sched.Add(Req(1, 7, 6));
  f.sched.Add(Req(2, 7, 6));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 7}}));
  while (f.sched.Find(1) != nullptr && !f.sched.Find(1)->is_finished()) {
    f.Step();
    EXPECT_EQ(f.last.front().first, 1);
  }
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{2, 7}}));
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 0);
}

TEST(SchedulerTest, AutoReservesTheWorstCaseOfRequestsThatSetMaxTokens) {
  // As guaranteed_no_evict: each may reach 12 computed tokens = 3 blocks; 5 blocks hold one.
  Fixture f({}, 5, 4);
  ASSERT_EQ(SchedulerOptions{}.capacity_policy, CapacityPolicy::kAuto);
  f.sched.Add(Req(1, 7, 6));
  f.sched.Add(Req(2, 7, 6));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 7}}));
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 0);
}

TEST(SchedulerTest, AutoAdmitsDefaultMaxTokensIntoWhatTheReservationsLeave) {
  // Request 1 (7 + 6 chosen) holds 2 blocks and reserves a third: of the 3 free blocks, 2 are
  // left, too few for request 2's 9-token prompt (3 blocks) even without reserving its future.
  Fixture f({}, 5, 4);
  f.sched.Add(Req(1, 7, 6));
  EngineRequest greedy = Req(2, 9, 6);
  greedy.max_tokens_is_default = true;
  f.sched.Add(std::move(greedy));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 7}}));
  while (!f.sched.Find(1)->is_finished()) {
    f.Step();
    EXPECT_EQ(f.last.front().first, 1);
  }
  // Only once 1 is done and its blocks are free.
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{2, 9}}));
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 0);
}

TEST(SchedulerTest, AutoAdmitsAGreedyPrefixHitAsMaxUtilizationDoes) {
  // 4 blocks of 4. Request 1 (9-token prompt, default max_tokens) holds 3; request 2 has the
  // same prompt: its first 8 tokens are cached blocks of request 1, so it needs one new block,
  // the last free one, and is admitted with nothing reserved.
  Fixture f({}, 4, 4);
  EngineRequest a = Req(1, 9, 2);
  a.max_tokens_is_default = true;
  EngineRequest b = Req(2, 9, 2);
  b.prompt_token_ids = a.prompt_token_ids;
  b.max_tokens_is_default = true;
  f.sched.Add(std::move(a));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 9}}));
  f.sched.Add(std::move(b));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));  // 2's 8 cached tokens count as computed
  while (f.sched.HasWork()) f.Step();
}

TEST(SchedulerTest, AutoPreemptsAGreedyRequestBeforeAReservingOne) {
  // 4 blocks of 4. Request 1 (7-token prompt, default max_tokens) is admitted on its 2 blocks;
  // request 2 (3 + 6 chosen, worst case 8 tokens = 2 blocks) fits the 2 left. In step 3 request
  // 1 takes the last free block and request 2 needs a second one: the victim is request 1,
  // although it arrived first (max_utilization would take request 2).
  Fixture f({}, 4, 4);
  EngineRequest greedy = Req(1, 7, 6);
  greedy.max_tokens_is_default = true;
  f.sched.Add(std::move(greedy));
  f.sched.Add(Req(2, 3, 6));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 7}, {2, 3}}));
  f.Step();
  EXPECT_EQ(f.last, (Shares_t{{1, 1}, {2, 1}}));
  ScheduledBatch b = f.Step();
  EXPECT_EQ(b.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(f.last, (Shares_t{{2, 1}}));
  while (f.sched.HasWork()) f.Step();
  EXPECT_EQ(f.sched.stats().num_preemptions, 1);
}

TEST(SchedulerTest, FinishFreesBlocksWhereverTheRequestIs) {
  Fixture f({.max_num_seqs = 1});
  f.sched.Add(Req(1, 9, 100));
  f.sched.Add(Req(2, 9, 100));
  f.Step();
  EXPECT_EQ(f.kv.NumFreeBlocks(), 64 - 3);
  const Request* waiting = f.sched.Finish(2, FinishReason::kAbort);
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->finish_reason, FinishReason::kAbort);
  const Request* running = f.sched.Finish(1, FinishReason::kAbort);
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(f.sched.Finish(1, FinishReason::kAbort), nullptr);   // already finished
  EXPECT_EQ(f.sched.Finish(42, FinishReason::kAbort), nullptr);  // unknown
  EXPECT_EQ(f.kv.NumFreeBlocks(), 64);
  EXPECT_FALSE(f.sched.HasWork());
  f.sched.CheckInvariants();
}

TEST(SchedulerTest, StopsOnEosStopIdsAndLength) {
  Fixture f({});
  EngineRequest a = Req(1, 3, 10);
  a.params.stop_token_ids = {kToken};
  f.sched.Add(std::move(a));
  f.sched.Add(Req(2, 3, 2));
  f.Step();
  const Request* r1 = f.sched.Find(1);
  EXPECT_EQ(r1->finish_reason, FinishReason::kStop);
  EXPECT_EQ(r1->stop_token_id, kToken);
  f.Step();
  EXPECT_EQ(f.sched.Find(2)->finish_reason, FinishReason::kLength);
  EXPECT_EQ(f.sched.Find(2)->num_output_tokens(), 2);
}

TEST(SchedulerTest, PrefixHitCountsAsComputed) {
  Fixture f({});
  f.sched.Add(Req(1, 10, 1));
  f.Step();  // computes 10, caches blocks [0,4) and [4,8)
  EngineRequest b = Req(2, 10, 1);
  const auto prompt = f.sched.Find(1)->prompt();
  b.prompt_token_ids.assign(prompt.begin(), prompt.end());
  f.sched.Add(std::move(b));
  ScheduledBatch batch = f.Step();
  EXPECT_EQ(f.last, (Shares_t{{2, 2}}));  // 8 tokens came from the cache
}

TEST(PolicyNamesTest, ParseAndReject) {
  EXPECT_EQ(*ParseSchedulingPolicy("priority"), SchedulingPolicy::kPriority);
  EXPECT_EQ(*ParseCapacityPolicy("guaranteed_no_evict"), CapacityPolicy::kGuaranteedNoEvict);
  EXPECT_EQ(*ParseCapacityPolicy("auto"), CapacityPolicy::kAuto);
  EXPECT_FALSE(ParseSchedulingPolicy("lifo").ok());
  EXPECT_FALSE(ParseCapacityPolicy("").ok());
}

}  // namespace
}  // namespace kiln
