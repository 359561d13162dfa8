// The CPU backend on the default model (SmolLM2-135M-Instruct Q4_1 GGUF) against HF transformers'
// float32 eager forward pass, recorded by make_golden.py into smollm2/golden.json (README.md):
//   * at every position of 5 prompts (1 to 512 tokens), each of HF's top-20 tokens has a
//     logprob within 1e-3 of kiln's (obtained through prompt logprobs of one prefill step);
//   * 64 greedy tokens decoded one step at a time through the paged KV cache equal HF's
//     generate(do_sample=False) tokens exactly.
// KILN_DEFAULT_MODEL must name the GGUF (scripts/test sets it); otherwise the test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "model/checkpoint.h"

namespace kiln {
namespace {

constexpr double kTolerance = 1e-3;
constexpr int32_t kBlockSize = 16;
// kiln's alternatives returned per position; HF's top-20 must all be among them.
constexpr int32_t kNumAlternatives = 64;

nlohmann::json LoadGolden() {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/golden.json");
  EXPECT_TRUE(in.good()) << "cannot read " << KILN_GOLDEN_DIR << "/golden.json";
  return nlohmann::json::parse(in);
}

// One sequence on a contiguous run of blocks, stepped like the engine would.
class Sequence {
 public:
  Sequence(ModelRunner* runner, std::vector<int32_t> tokens, int32_t num_blocks)
      : runner_(runner), tokens_(std::move(tokens)), num_blocks_(num_blocks) {}

  // Runs tokens [num_computed, size) as one step, greedy-samples the next token (appended) and,
  // when `score_prompt`, scores every next token that is already known.
  StepResult Step(bool score_prompt) {
    StepInputs in;
    const int32_t n = static_cast<int32_t>(tokens_.size()) - num_computed_;
    for (int32_t p = num_computed_; p < num_computed_ + n; ++p) {
      in.token_ids.push_back(tokens_[p]);
      in.positions.push_back(p);
      in.slot_mapping.push_back(p);  // blocks 0, 1, 2, ... in order
    }
    in.cu_seqlens = {0, n};
    in.seq_lens = {num_computed_ + n};
    in.max_blocks_per_seq = num_blocks_;
    for (int32_t b = 0; b < num_blocks_; ++b) in.block_tables.push_back(b);
    StepSequence seq;
    seq.num_computed_tokens = num_computed_;
    seq.num_new_tokens = n;
    seq.do_sample = true;
    seq.sampling.num_top_logprobs = kNumAlternatives;
    targets_.assign(tokens_.begin() + num_computed_ + 1, tokens_.end());
    if (score_prompt) {
      seq.prompt_logprob_targets = targets_;
      seq.num_prompt_top_logprobs = kNumAlternatives;
    }
    in.seqs.push_back(seq);
    StepResult result = runner_->Execute(in);
    num_computed_ += n;
    tokens_.push_back(result.seqs[0].sampled.token_id);
    return result;
  }

 private:
  ModelRunner* runner_;
  std::vector<int32_t> tokens_;
  int32_t num_computed_ = 0;
  int32_t num_blocks_;
  std::vector<int32_t> targets_;
};

TEST(GoldenLogitsTest, DefaultModelMatchesTransformers) {
  const char* path = std::getenv("KILN_DEFAULT_MODEL");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP()
        << "KILN_DEFAULT_MODEL not set; scripts/test sets it (scripts/fetch-default-model)";
  }
  const nlohmann::json golden = LoadGolden();
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->config().num_layers, golden["config"]["num_hidden_layers"].get<int>());
  ASSERT_EQ(ckpt->config().vocab_size, golden["config"]["vocab_size"].get<int>());
  auto runner = CreateCpuRunner(*ckpt, {});
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  const int num_greedy = golden["num_greedy"].get<int>();
  const int32_t max_tokens = 512 + num_greedy;
  const int32_t num_blocks = (max_tokens + kBlockSize - 1) / kBlockSize;
  ASSERT_TRUE((*runner)->AllocateKvCache(num_blocks, kBlockSize).ok());

  double max_delta = 0;
  for (const nlohmann::json& prompt : golden["prompts"]) {
    const std::string name = prompt["name"].get<std::string>();
    const auto ids = prompt["token_ids"].get<std::vector<int32_t>>();
    const auto top_ids = prompt["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_lps = prompt["top_logprobs"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(top_ids.size(), ids.size()) << name;

    Sequence seq(runner->get(), ids, num_blocks);
    const StepResult prefill = seq.Step(/*score_prompt=*/true);
    const SequenceResult& r = prefill.seqs[0];
    ASSERT_EQ(r.prompt_logprobs.size(), ids.size() - 1) << name;
    double prompt_max_delta = 0;
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const ScoredToken& scored = pos + 1 < ids.size() ? r.prompt_logprobs[pos] : r.sampled;
      std::map<int32_t, float> kiln;
      for (const TokenLogprob& lp : scored.top_logprobs) kiln[lp.token_id] = lp.logprob;
      for (size_t i = 0; i < top_ids[pos].size(); ++i) {
        auto it = kiln.find(top_ids[pos][i]);
        ASSERT_NE(it, kiln.end()) << name << " position " << pos << ": HF's top-" << i + 1
                                  << " token " << top_ids[pos][i] << " is not in kiln's top "
                                  << kNumAlternatives;
        const double delta = std::abs(it->second - top_lps[pos][i]);
        prompt_max_delta = std::max(prompt_max_delta, delta);
        EXPECT_LE(delta, kTolerance) << name << " position " << pos << " token " << it->first
                                     << ": kiln " << it->second << " HF " << top_lps[pos][i];
      }
    }
    max_delta = std::max(max_delta, prompt_max_delta);

    const auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> greedy = {r.sampled.token_id};
    while (static_cast<int>(greedy.size()) < num_greedy) {
      greedy.push_back(seq.Step(/*score_prompt=*/false).seqs[0].sampled.token_id);
    }
    EXPECT_EQ(greedy, want) << name;
    std::printf(
        "%-12s %4zu prompt tokens: max |logprob delta| over HF's top-20 = %.3g; %d greedy "
        "tokens %s\n",
        name.c_str(), ids.size(), prompt_max_delta, num_greedy,
        greedy == want ? "identical" : "DIFFER");
  }
  std::printf("overall max |logprob delta| = %.3g (tolerance %.0e)\n", max_delta, kTolerance);
}

}  // namespace
}  // namespace kiln
