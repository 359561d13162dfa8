// Batch invariance on the real default model (SmolLM2-135M, CPU backend): a request's greedy
// tokens, and a seeded sampled request's tokens, are identical alone and inside a batch of 16
// random others, with step budgets (chunk sizes) 1, 7 and 64, with prefix-cache hits, and after
// preemption (recompute, and swap to host memory). Skipped without KILN_DEFAULT_MODEL (scripts/test
// sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "core/buffer.h"
#include "engine/llm.h"

namespace kiln {
namespace {

struct Config {
  std::string name;
  int32_t max_prefill_chunk_tokens;  // the chunk size of every prompt
  int32_t num_kv_blocks;             // 0 = default pool
  bool warm_prefix_cache;
  int64_t swap_space_bytes = 0;  // preempted requests swap to host memory (CPU: 0 by default)
};

class EngineModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* model = std::getenv("KILN_DEFAULT_MODEL");
    if (model == nullptr) GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set (scripts/test sets it)";
    model_ = model;
  }

  std::unique_ptr<LLM> Make(const Config& c) {
    LlmOptions o;
    o.device = "cpu";
    o.engine.block_size = 16;
    o.engine.num_kv_blocks = c.num_kv_blocks;
    o.engine.max_model_len = c.num_kv_blocks > 0 ? c.num_kv_blocks * 16 : 2048;
    o.engine.scheduler.max_prefill_chunk_tokens = c.max_prefill_chunk_tokens;
    o.engine.check_invariants = true;
    // Admit greedily, so that the small pools preempt (auto reserves every request's worst case).
    o.engine.scheduler.capacity_policy = CapacityPolicy::kMaxUtilization;
    o.swap_space_bytes = c.swap_space_bytes;
    auto llm = LLM::Create(model_, o);
    EXPECT_TRUE(llm.ok()) << llm.status().ToString();
    return std::move(*llm);
  }

  std::string model_;
};

std::vector<int32_t> Tokens(const GenerateResult& r) { return r.completions[0].token_ids; }

TEST_F(EngineModelTest, GreedyAndSeededTokensAreBatchInvariant) {
  // 40+ tokens, so that two full blocks of 16 can come from the prefix cache.
  const std::string target =
      "The history of the printing press begins in the fifteenth century, when a goldsmith in "
      "Mainz combined movable metal type, oil-based ink and a wooden screw press; the";
  std::vector<Prompt> others;
  std::mt19937 rng(5);
  const char* words[] = {"river", "code", "music", "stone", "light", "market", "cloud", "seed"};
  for (int i = 0; i < 16; ++i) {
    std::string text = "Tell me about";
    const int n = std::uniform_int_distribution<int>(1, 24)(rng);
    for (int w = 0; w < n; ++w) text += std::string(" ") + words[rng() % 8];
    others.push_back(Prompt::Text(text));
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 24;
  greedy.ignore_eos = true;
  SamplingParams seeded = greedy;
  seeded.temperature = 0.8f;
  seeded.top_p = 0.95f;
  seeded.seed = 42;

  // References: alone, one step per whole prompt.
  std::unique_ptr<LLM> ref = Make({"alone", 0, 0, false});
  const auto want_greedy = Tokens((*ref->Generate({Prompt::Text(target)}, greedy))[0]);
  const auto want_seeded = Tokens((*ref->Generate({Prompt::Text(target)}, seeded))[0]);
  ASSERT_EQ(want_greedy.size(), 24u);
  ref.reset();

  std::vector<Prompt> batch = {Prompt::Text(target)};
  batch.insert(batch.end(), others.begin(), others.end());
  for (const Config& c :
       {Config{"chunk 1", 1, 0, false}, Config{"chunk 7", 7, 0, false},
        Config{"chunk 64", 64, 0, false}, Config{"prefix-cache hits", 64, 0, true},
        Config{"preemption (24 blocks)", 64, 24, false},
        Config{"preemption swapped to host (24 blocks)", 64, 24, false, int64_t{256} << 20}}) {
    std::unique_ptr<LLM> llm = Make(c);
    if (c.warm_prefix_cache) {
      ASSERT_TRUE(llm->Generate(batch, greedy).ok());
    }
    auto g = llm->Generate(batch, greedy);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(Tokens((*g)[0]), want_greedy) << c.name << ": greedy";
    if (c.warm_prefix_cache) {
      EXPECT_GT((*g)[0].num_cached_tokens, 0) << c.name;
    }
    auto s = llm->Generate(batch, seeded);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Tokens((*s)[0]), want_seeded) << c.name << ": seeded";
    if (c.num_kv_blocks > 0) {
      EXPECT_GT(llm->engine().stats().num_preemptions, 0) << c.name << ": nothing preempted";
      EXPECT_EQ(llm->engine().stats().num_swap_preemptions > 0, c.swap_space_bytes > 0) << c.name;
    }
    EXPECT_EQ(llm->engine().stats().num_free_kv_blocks, llm->engine().stats().num_kv_blocks);
  }
}

// Needs no model: the automatic seat count off a large GPU.
TEST(AutomaticMaxNumSeqsTest, CpuAndUnknownDevicesGet256) {
  EXPECT_EQ(AutomaticMaxNumSeqs("cpu"), 256);
  EXPECT_EQ(AutomaticMaxNumSeqs("cuda:x"), 256);  // the runner reports the bad name later
  if (!HasCudaDevice()) {
    EXPECT_EQ(AutomaticMaxNumSeqs("auto"), 256);
    EXPECT_EQ(AutomaticMaxNumSeqs("cuda:0"), 256);
  }
}

}  // namespace
}  // namespace kiln
