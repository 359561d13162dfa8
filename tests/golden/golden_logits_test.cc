// The CPU backend on the default model (SmolLM2-135M-Instruct Q4_1 GGUF) against HF transformers'
// float32 eager forward pass, recorded by make_golden.py into smollm2/golden.json (README.md):
//   * at every position of 5 prompts (1 to 512 tokens), each of HF's top-20 tokens has a
//     logprob within 1e-3 of kiln's (obtained through prompt logprobs of one prefill step);
//   * 64 greedy tokens decoded one step at a time through the paged KV cache equal HF's
//     generate(do_sample=False) tokens exactly, alone and with all five prompts in one batch
//     (prefilled in chunks of 1, 7 or 64 tokens while the others decode).
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

// Sequences stepped as the engine would, each on its own contiguous run of blocks.
class Batch {
 public:
  Batch(ModelRunner* runner, int32_t blocks_per_seq)
      : runner_(runner), blocks_per_seq_(blocks_per_seq) {}

  int Add(std::vector<int32_t> prompt) {
    seqs_.push_back({std::move(prompt), 0, {}});
    return static_cast<int>(seqs_.size()) - 1;
  }
  const std::vector<int32_t>& tokens(int seq) const { return seqs_[seq].tokens; }
  int32_t num_pending(int seq) const {
    return static_cast<int32_t>(seqs_[seq].tokens.size()) - seqs_[seq].num_computed;
  }

  struct Work {
    int seq;
    int32_t num_tokens;  // <= num_pending(seq); greedy-samples when it reaches the end
    bool score_prompt;   // prompt logprobs of every next token already known
  };

  // One step over `work`; appends each sampled token to its sequence.
  StepResult Step(const std::vector<Work>& work) {
    StepInputs in;
    in.cu_seqlens.push_back(0);
    in.max_blocks_per_seq = blocks_per_seq_;
    for (const Work& w : work) {
      Seq& s = seqs_[w.seq];
      for (int32_t p = s.num_computed; p < s.num_computed + w.num_tokens; ++p) {
        in.token_ids.push_back(s.tokens[p]);
        in.positions.push_back(p);
        in.slot_mapping.push_back(int64_t{w.seq} * blocks_per_seq_ * kBlockSize + p);
      }
      in.cu_seqlens.push_back(in.num_tokens());
      in.seq_lens.push_back(s.num_computed + w.num_tokens);
      for (int32_t b = 0; b < blocks_per_seq_; ++b) {
        in.block_tables.push_back(w.seq * blocks_per_seq_ + b);
      }
      StepSequence seq;
      seq.num_computed_tokens = s.num_computed;
      seq.num_new_tokens = w.num_tokens;
      seq.do_sample = w.num_tokens == num_pending(w.seq);
      seq.sampling.num_top_logprobs = kNumAlternatives;
      if (w.score_prompt) {
        s.targets.assign(s.tokens.begin() + s.num_computed + 1,
                         s.tokens.begin() +
                             std::min<size_t>(s.tokens.size(), s.num_computed + w.num_tokens + 1));
        seq.prompt_logprob_targets = s.targets;
        seq.num_prompt_top_logprobs = kNumAlternatives;
      }
      in.seqs.push_back(seq);
    }
    StepResult result = runner_->Execute(in);
    for (size_t i = 0; i < work.size(); ++i) {
      Seq& s = seqs_[work[i].seq];
      s.num_computed += work[i].num_tokens;
      if (in.seqs[i].do_sample) s.tokens.push_back(result.seqs[i].sampled.token_id);
    }
    return result;
  }

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    int32_t num_computed;
    std::vector<int32_t> targets;  // outlives Execute
  };
  ModelRunner* runner_;
  int32_t blocks_per_seq_;
  std::vector<Seq> seqs_;
};

struct Fixture {
  nlohmann::json golden;
  std::unique_ptr<ModelRunner> runner;
  int num_greedy = 0;
  int32_t blocks_per_seq = 0;
};

// Loads the golden file and the default model, with a KV pool for `num_seqs` sequences; false
// (with the reason in `skip`) when KILN_DEFAULT_MODEL is unset.
bool Load(int num_seqs, Fixture* f, std::string* skip) {
  const char* path = std::getenv("KILN_DEFAULT_MODEL");
  if (path == nullptr || *path == '\0') {
    *skip = "KILN_DEFAULT_MODEL not set; scripts/test sets it (scripts/fetch-default-model)";
    return false;
  }
  f->golden = LoadGolden();
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return false;
  EXPECT_EQ(ckpt->config().num_layers, f->golden["config"]["num_hidden_layers"].get<int>());
  EXPECT_EQ(ckpt->config().vocab_size, f->golden["config"]["vocab_size"].get<int>());
  auto runner = CreateCpuRunner(*ckpt, {});
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return false;
  f->runner = std::move(runner).value();
  f->num_greedy = f->golden["num_greedy"].get<int>();
  f->blocks_per_seq = (512 + f->num_greedy + kBlockSize - 1) / kBlockSize;
  EXPECT_TRUE(f->runner->AllocateKvCache(num_seqs * f->blocks_per_seq, kBlockSize).ok());
  return true;
}

TEST(GoldenLogitsTest, DefaultModelMatchesTransformers) {
  Fixture f;
  std::string skip;
  if (!Load(1, &f, &skip)) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    return;
  }
  double max_delta = 0;
  for (const nlohmann::json& prompt : f.golden["prompts"]) {
    const std::string name = prompt["name"].get<std::string>();
    const auto ids = prompt["token_ids"].get<std::vector<int32_t>>();
    const auto top_ids = prompt["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_lps = prompt["top_logprobs"].get<std::vector<std::vector<double>>>();
    ASSERT_EQ(top_ids.size(), ids.size()) << name;

    Batch batch(f.runner.get(), f.blocks_per_seq);
    const int seq = batch.Add(ids);
    const StepResult prefill = batch.Step({{seq, static_cast<int32_t>(ids.size()), true}});
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

    while (batch.tokens(seq).size() < ids.size() + f.num_greedy) batch.Step({{seq, 1, false}});
    const std::vector<int32_t> greedy(batch.tokens(seq).begin() + ids.size(),
                                      batch.tokens(seq).end());
    const auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy, want) << name;
    std::printf(
        "%-12s %4zu prompt tokens: max |logprob delta| over HF's top-20 = %.3g; %d greedy "
        "tokens %s\n",
        name.c_str(), ids.size(), prompt_max_delta, f.num_greedy,
        greedy == want ? "identical" : "DIFFER");
  }
  std::printf("overall max |logprob delta| = %.3g (tolerance %.0e)\n", max_delta, kTolerance);
}

// The five prompts in one batch, prefilled in chunks of 1, 7 and 64 tokens while the others
// already decode, then decoded together: every sequence's greedy tokens are still HF's.
TEST(GoldenLogitsTest, BatchedChunkedDecodeGivesTheSameTokens) {
  Fixture f;
  std::string skip;
  const int num_prompts = 5;
  if (!Load(num_prompts, &f, &skip)) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    return;
  }
  ASSERT_EQ(f.golden["prompts"].size(), static_cast<size_t>(num_prompts));
  const int32_t chunk[num_prompts] = {1, 7, 64, 7, 64};
  Batch batch(f.runner.get(), f.blocks_per_seq);
  std::vector<size_t> prompt_len;
  for (const nlohmann::json& prompt : f.golden["prompts"]) {
    const auto ids = prompt["token_ids"].get<std::vector<int32_t>>();
    prompt_len.push_back(ids.size());
    batch.Add(ids);
  }
  for (;;) {
    std::vector<Batch::Work> work;
    for (int s = 0; s < num_prompts; ++s) {
      if (batch.tokens(s).size() >= prompt_len[s] + f.num_greedy) continue;
      work.push_back({s, std::min(chunk[s], batch.num_pending(s)), false});
    }
    if (work.empty()) break;
    batch.Step(work);
  }
  for (int s = 0; s < num_prompts; ++s) {
    const nlohmann::json& prompt = f.golden["prompts"][s];
    const std::vector<int32_t> greedy(batch.tokens(s).begin() + prompt_len[s],
                                      batch.tokens(s).end());
    EXPECT_EQ(greedy, prompt["greedy_ids"].get<std::vector<int32_t>>())
        << prompt["name"].get<std::string>() << " (chunk " << chunk[s] << ")";
  }
}

}  // namespace
}  // namespace kiln
