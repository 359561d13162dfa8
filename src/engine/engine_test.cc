// The engine end to end over FakeRunner (a model that is a pure function of the token sequence
// read back through the paged cache): batch invariance, prefix caching, preemption, aborts,
// logprobs, and a randomized run against the trivially correct reference, each with and without
// async scheduling (FakeRunner runs the default ModelRunner::Launch/Wait, which resolve
// PreviousStepToken placeholders on the host).
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "backend/cpu/sampler.h"
#include "engine/fake_runner.h"

namespace kiln {
namespace {

using testing::FakeLogits;
using testing::FakeRunner;

constexpr int32_t kVocab = 97;
constexpr int32_t kEos = 3;

struct Finished {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kAbort;
  std::vector<ScoredToken> logprobs;
  std::vector<ScoredToken> prompt_logprobs;
};

// The trivially correct model: generate from the full sequence, no cache, no batch.
Finished Reference(const EngineRequest& r, int32_t max_model_len) {
  const SamplingParams& p = r.params;
  std::vector<int32_t> seq = r.prompt_token_ids;
  const int32_t prompt_len = static_cast<int32_t>(seq.size());
  const int32_t max_len = std::min(prompt_len + p.max_tokens, max_model_len);
  std::vector<int32_t> banned = p.ignore_eos ? std::vector<int32_t>{} : std::vector{kEos};
  banned.insert(banned.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  Finished f;
  if (p.prompt_logprobs.has_value()) {
    for (int32_t i = 1; i < prompt_len; ++i) {
      f.prompt_logprobs.push_back(
          cpu::Score(FakeLogits(std::span(seq).first(i), kVocab), seq[i], *p.prompt_logprobs));
    }
  }
  while (true) {
    SamplingSpec spec;
    spec.temperature = p.temperature;
    spec.top_k = std::max(p.top_k, 0);
    spec.top_p = p.top_p;
    spec.min_p = p.min_p;
    spec.presence_penalty = p.presence_penalty;
    spec.frequency_penalty = p.frequency_penalty;
    spec.repetition_penalty = p.repetition_penalty;
    spec.seed = r.seed;
    spec.num_top_logprobs = p.logprobs.value_or(0);
    spec.logit_bias = p.logit_bias;
    const int32_t num_out = static_cast<int32_t>(seq.size()) - prompt_len;
    if (num_out < p.min_tokens) spec.banned_token_ids = banned;
    spec.prompt_token_ids = std::span(seq).first(prompt_len);
    spec.output_token_ids = std::span(seq).subspan(prompt_len);
    ScoredToken t = cpu::Sample(FakeLogits(seq, kVocab), spec);
    seq.push_back(t.token_id);
    f.tokens.push_back(t.token_id);
    if (p.logprobs.has_value()) f.logprobs.push_back(t);
    const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token_id) !=
                         p.stop_token_ids.end();
    if ((t.token_id == kEos && !p.ignore_eos) || stop_id) {
      f.reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int32_t>(seq.size()) >= max_len) {
      f.reason = FinishReason::kLength;
      break;
    }
  }
  return f;
}

std::unique_ptr<Engine> MakeEngine(EngineOptions o) {
  o.check_invariants = true;
  auto engine = Engine::Create(std::make_unique<FakeRunner>(kVocab, kEos), o);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(*engine);
}

// Runs the engine until idle, collecting each request's outputs.
std::map<RequestId, Finished> Drain(Engine& engine) {
  std::map<RequestId, Finished> out;
  while (engine.HasWork()) {
    for (const RequestOutput& o : engine.Step()) {
      Finished& f = out[o.id];
      f.tokens.insert(f.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      f.logprobs.insert(f.logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
      f.prompt_logprobs.insert(f.prompt_logprobs.end(), o.new_prompt_logprobs.begin(),
                               o.new_prompt_logprobs.end());
      if (o.finished) f.reason = *o.finish_reason;
    }
  }
  return out;
}

EngineRequest RandomRequest(RequestId id, std::mt19937_64& rng, bool sampled,
                            const std::vector<int32_t>& shared_prefix) {
  EngineRequest r;
  r.id = id;
  const int32_t prefix = std::uniform_int_distribution<int32_t>(0, 1)(rng)
                             ? static_cast<int32_t>(shared_prefix.size())
                             : 0;
  r.prompt_token_ids.assign(shared_prefix.begin(), shared_prefix.begin() + prefix);
  const int32_t len = std::uniform_int_distribution<int32_t>(1, 70)(rng);
  for (int32_t i = 0; i < len; ++i) {
    r.prompt_token_ids.push_back(std::uniform_int_distribution<int32_t>(4, kVocab - 1)(rng));
  }
  r.params.max_tokens = std::uniform_int_distribution<int32_t>(1, 40)(rng);
  r.params.temperature = sampled ? 0.9f : 0.0f;
  r.params.top_k = sampled ? 20 : 0;
  r.seed = rng();
  return r;
}

void ExpectSame(const Finished& got, const Finished& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.reason, want.reason) << what;
}

TEST(EngineTest, GreedyAndSeededOutputsAreBatchInvariant) {
  std::mt19937_64 rng(7);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = std::uniform_int_distribution<int32_t>(4, kVocab - 1)(rng);
  EngineRequest greedy = RandomRequest(1, rng, false, shared);
  greedy.params.max_tokens = 48;
  greedy.params.ignore_eos = true;
  EngineRequest seeded = RandomRequest(2, rng, true, shared);
  seeded.params.max_tokens = 48;
  seeded.params.ignore_eos = true;
  std::vector<EngineRequest> others;
  for (int i = 0; i < 16; ++i) others.push_back(RandomRequest(100 + i, rng, i % 2, shared));

  const Finished want_greedy = Reference(greedy, 4096);
  const Finished want_seeded = Reference(seeded, 4096);
  ASSERT_EQ(want_greedy.tokens.size(), 48u);

  struct Setup {
    std::string name;
    int32_t chunk;  // max_num_batched_tokens
    int32_t num_blocks;
    bool prefix_caching;
    bool warm_cache;          // run the requests once first so the second run hits the cache
    int32_t swap_blocks = 0;  // host swap space, in blocks (0: preemption recomputes)
  };
  for (const Setup& s : std::vector<Setup>{{"chunk 1", 1, 1024, true, false},
                                           {"chunk 7", 7, 1024, true, false},
                                           {"chunk 64", 64, 1024, true, false},
                                           {"no prefix cache", 64, 1024, false, false},
                                           {"prefix hits", 64, 1024, true, true},
                                           {"preemption (tiny pool)", 64, 40, true, false},
                                           {"preemption, swapped", 64, 40, true, false, 64},
                                           {"preemption, some swapped", 7, 40, true, false, 6}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool batched = variant % 2 == 1, async = variant >= 2;
      EngineOptions o;
      o.async_scheduling = async;
      o.block_size = 4;
      o.num_kv_blocks = s.num_blocks;
      o.enable_prefix_caching = s.prefix_caching;
      o.scheduler.max_num_batched_tokens = s.chunk;
      // Admit greedily, so that the tiny pool preempts (auto would reserve the worst cases).
      o.scheduler.capacity_policy = CapacityPolicy::kMaxUtilization;
      o.swap_space_bytes = int64_t{s.swap_blocks} * FakeRunner(kVocab, kEos).KvBlockBytes(4);
      std::unique_ptr<Engine> engine = MakeEngine(o);
      const std::string what =
          s.name + (batched ? ", batched" : ", alone") + (async ? ", async" : "");
      auto submit = [&](RequestId offset) {
        for (const EngineRequest& base : {greedy, seeded}) {
          EngineRequest r = base;
          r.id += offset;
          ASSERT_TRUE(engine->AddRequest(r).ok());
        }
        if (!batched) return;
        for (const EngineRequest& base : others) {
          EngineRequest r = base;
          r.id += offset;
          ASSERT_TRUE(engine->AddRequest(r).ok());
        }
      };
      RequestId offset = 0;
      if (s.warm_cache) {
        submit(offset);
        Drain(*engine);
        offset = 1000;
      }
      submit(offset);
      std::map<RequestId, Finished> got = Drain(*engine);
      ExpectSame(got[1 + offset], want_greedy, what + ": greedy");
      ExpectSame(got[2 + offset], want_seeded, what + ": seeded");
      if (batched) {
        for (const EngineRequest& r : others) {
          ExpectSame(got[r.id + offset], Reference(r, 4096), what + ": other request");
        }
      }
      if (s.warm_cache) {
        EXPECT_GT(engine->stats().kv.num_hit_tokens, 0) << what;
      }
      if (s.num_blocks == 40 && batched) {
        EXPECT_GT(engine->stats().num_preemptions, 0) << what;
        if (s.swap_blocks > 0) {
          EXPECT_GT(engine->stats().num_swap_preemptions, 0) << what;
          EXPECT_EQ(engine->stats().kv.num_swapped_in_blocks,
                    engine->stats().kv.num_swapped_out_blocks)
              << what;
        } else {
          EXPECT_EQ(engine->stats().num_swap_preemptions, 0) << what;
        }
        if (s.swap_blocks == 6) {  // too small for every victim: some recompute
          EXPECT_LT(engine->stats().num_swap_preemptions, engine->stats().num_preemptions) << what;
        }
      }
      if (async) {
        EXPECT_GT(engine->stats().num_steps_ahead, 0) << what;
      }
      EXPECT_EQ(engine->stats().num_free_kv_blocks, s.num_blocks) << what;
    }
  }
}

class EngineAsyncTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Sync, EngineAsyncTest, ::testing::Values(false));
INSTANTIATE_TEST_SUITE_P(Async, EngineAsyncTest, ::testing::Values(true));

TEST_P(EngineAsyncTest, LogprobsAndPromptLogprobsMatchTheReference) {
  EngineOptions o;
  o.async_scheduling = GetParam();
  o.block_size = 4;
  o.num_kv_blocks = 256;
  o.scheduler.max_num_batched_tokens = 5;  // prompt logprobs across chunks
  std::unique_ptr<Engine> engine = MakeEngine(o);
  EngineRequest r;
  r.id = 9;
  r.prompt_token_ids = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
  r.params.max_tokens = 6;
  r.params.temperature = 0;
  r.params.logprobs = 3;
  r.params.prompt_logprobs = 2;
  ASSERT_TRUE(engine->AddRequest(r).ok());
  Finished got = Drain(*engine)[9];
  Finished want = Reference(r, 4096);
  ASSERT_EQ(got.prompt_logprobs.size(), 11u);
  ASSERT_EQ(got.logprobs.size(), got.tokens.size());
  for (size_t i = 0; i < want.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(got.prompt_logprobs[i].token_id, want.prompt_logprobs[i].token_id);
    EXPECT_EQ(got.prompt_logprobs[i].logprob, want.prompt_logprobs[i].logprob);
    EXPECT_EQ(got.prompt_logprobs[i].rank, want.prompt_logprobs[i].rank);
    ASSERT_EQ(got.prompt_logprobs[i].top_logprobs.size(), 2u);
  }
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    EXPECT_EQ(got.logprobs[i].logprob, want.logprobs[i].logprob);
    EXPECT_EQ(got.logprobs[i].top_logprobs.size(), 3u);
    EXPECT_EQ(got.logprobs[i].rank, 1);  // greedy picks the best raw token (no penalties)
  }
}

TEST(EngineTest, RejectsInvalidRequestsNamingTheField) {
  EngineOptions o;
  o.num_kv_blocks = 64;
  o.max_model_len = 100;
  std::unique_ptr<Engine> engine = MakeEngine(o);
  EngineRequest r;
  r.id = 1;
  EXPECT_NE(engine->AddRequest(r).message().find("prompt"), std::string::npos);
  r.prompt_token_ids = {1, kVocab};
  EXPECT_NE(engine->AddRequest(r).message().find("outside the vocabulary"), std::string::npos);
  r.prompt_token_ids.assign(100, 5);
  EXPECT_NE(engine->AddRequest(r).message().find("max_model_len"), std::string::npos);
  r.prompt_token_ids = {5};
  r.params.temperature = -1;
  EXPECT_EQ(engine->AddRequest(r).message().rfind("temperature", 0), 0u);
  r.params.temperature = 0;
  EXPECT_TRUE(engine->AddRequest(r).ok());
  EXPECT_FALSE(engine->AddRequest(r).ok());  // duplicate id
}

TEST(EngineTest, CreateRejectsAPoolSmallerThanMaxModelLen) {
  EngineOptions o;
  o.num_kv_blocks = 2;
  o.block_size = 16;
  o.max_model_len = 100;
  auto engine = Engine::Create(std::make_unique<FakeRunner>(kVocab, kEos), o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kResourceExhausted);
}

TEST_P(EngineAsyncTest, AbortReportsAndFreesEverything) {
  EngineOptions o;
  o.async_scheduling = GetParam();
  o.block_size = 4;
  o.num_kv_blocks = 64;
  std::unique_ptr<Engine> engine = MakeEngine(o);
  for (RequestId id = 1; id <= 3; ++id) {
    EngineRequest r;
    r.id = id;
    r.prompt_token_ids.assign(10, 7);
    r.params.max_tokens = 100;
    r.params.ignore_eos = true;
    ASSERT_TRUE(engine->AddRequest(r).ok());
  }
  engine->Step();
  EXPECT_TRUE(engine->Abort(2));
  EXPECT_FALSE(engine->Abort(2));
  std::vector<RequestOutput> out = engine->Step();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].id, 2);
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(out[0].finish_reason, FinishReason::kAbort);
  for (const RequestOutput& o : out) {
    for (int32_t t : o.new_token_ids) EXPECT_GE(t, 0) << "a placeholder was output";
  }
  EXPECT_TRUE(engine->Abort(1));
  EXPECT_TRUE(engine->Abort(3));
  Drain(*engine);
  EXPECT_EQ(engine->stats().num_free_kv_blocks, 64);
}

// LevelDB-style: random adds, aborts and steps against the reference, invariants after every
// step (EngineOptions::check_invariants), no leaked block at the end.
TEST_P(EngineAsyncTest, RandomOperationsAgainstTheReference) {
  int64_t num_ops = 0;
  for (uint64_t seed : {1, 2, 3, 4}) {
    std::mt19937_64 rng(seed);
    EngineOptions o;
    o.async_scheduling = GetParam();
    o.block_size = 1 + static_cast<int32_t>(seed % 3) * 3;  // 1, 4, 7... : 4, 7, 1
    o.num_kv_blocks = 400 / o.block_size + 20;
    o.scheduler.max_num_batched_tokens = 16 + static_cast<int32_t>(seed) * 20;
    o.scheduler.max_num_seqs = 12;
    o.scheduler.scheduling_policy =
        seed == 2 ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
    o.scheduler.capacity_policy = seed == 3   ? CapacityPolicy::kGuaranteedNoEvict
                                  : seed == 4 ? CapacityPolicy::kAuto
                                              : CapacityPolicy::kMaxUtilization;
    o.max_model_len = 200;
    // Seeds 1 and 2 swap preempted requests to host memory (seed 2's space fits few of them);
    // seed 3 never preempts; seed 4 recomputes the greedy requests it preempts.
    const int64_t block_bytes = FakeRunner(kVocab, kEos).KvBlockBytes(o.block_size);
    o.swap_space_bytes = seed == 1 ? 200 * block_bytes : seed == 2 ? 12 * block_bytes : 0;
    std::unique_ptr<Engine> engine = MakeEngine(o);
    std::vector<int32_t> shared(30);
    for (int32_t& t : shared) t = std::uniform_int_distribution<int32_t>(4, kVocab - 1)(rng);
    std::map<RequestId, EngineRequest> live;
    std::map<RequestId, Finished> got;
    std::set<RequestId> aborted;
    RequestId next = 1;
    for (int op = 0; op < 35000; ++op, ++num_ops) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind < 3) {
        EngineRequest r = RandomRequest(next++, rng, kind == 0, shared);
        r.params.priority = std::uniform_int_distribution<int>(-2, 2)(rng);
        // Penalties read the token a launched step is still sampling: async falls back to sync.
        if (std::uniform_int_distribution<int>(0, 7)(rng) == 0) r.params.frequency_penalty = 0.5f;
        r.max_tokens_is_default = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
        ASSERT_TRUE(engine->AddRequest(r).ok());
        live[r.id] = r;
      } else if (kind == 3 && !live.empty()) {
        auto it =
            std::next(live.begin(), std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
        if (engine->Abort(it->first)) aborted.insert(it->first);
      } else {
        for (const RequestOutput& out : engine->Step()) {
          Finished& f = got[out.id];
          f.tokens.insert(f.tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
          if (!out.finished) continue;
          f.reason = *out.finish_reason;
          const EngineRequest& r = live.at(out.id);
          const Finished want = Reference(r, o.max_model_len);
          if (f.reason == FinishReason::kAbort) {
            ASSERT_TRUE(aborted.contains(out.id));
            // What an aborted request produced is a prefix of what it would have produced.
            ASSERT_LE(f.tokens.size(), want.tokens.size());
            ASSERT_TRUE(std::equal(f.tokens.begin(), f.tokens.end(), want.tokens.begin()));
          } else {
            ASSERT_EQ(f.tokens, want.tokens) << "request " << out.id << ", seed " << seed;
            ASSERT_EQ(f.reason, want.reason);
          }
          live.erase(out.id);
        }
      }
    }
    for (const auto& [id, r] : live) engine->Abort(id);
    Drain(*engine);
    EXPECT_EQ(engine->stats().num_free_kv_blocks, o.num_kv_blocks) << "leaked blocks";
    if (seed == 4) {
      EXPECT_GT(engine->stats().num_preemptions, 0) << "seed 4";
    }
    if (seed == 1 || seed == 2) {
      EXPECT_GT(engine->stats().num_swap_preemptions, 0) << "seed " << seed;
      // Aborted while swapped out: never swapped back in.
      EXPECT_LE(engine->stats().kv.num_swapped_in_blocks,
                engine->stats().kv.num_swapped_out_blocks);
      EXPECT_EQ(engine->stats().num_free_host_kv_blocks, engine->stats().num_host_kv_blocks)
          << "leaked host blocks";
    }
    EXPECT_FALSE(engine->HasWork());
    if (GetParam()) {  // the async path ran (penalties, tiny pools and idle steps run sync)
      EXPECT_GT(engine->stats().num_steps_ahead, engine->stats().num_steps / 4);
    }
  }
  EXPECT_GE(num_ops, 100000);
}

}  // namespace
}  // namespace kiln
