// kiln eval on the real default model (SmolLM2-135M, CPU backend). The prompt logprobs that
// perplexity sums are pinned against HF transformers' golden logprobs (tests/golden: a reference
// nobody here wrote); perplexity tells repeated text from random tokens; compare passes for the
// model against itself and fails against random weights of the same shape and vocabulary.
// Skipped without KILN_DEFAULT_MODEL (scripts/test sets it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "builder/engine_writer.h"
#include "builder/presets.h"
#include "builder/quantize_w4.h"
#include "builder/synth.h"
#include "eval/compare.h"
#include "eval/perplexity.h"
#include "eval/test_model.h"

namespace kiln::eval {
namespace {

class EvalModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* model = std::getenv("KILN_DEFAULT_MODEL");
    if (model == nullptr) GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set (scripts/test sets it)";
    model_ = model;
  }

  static LlmOptions Options() {
    LlmOptions o;
    o.device = "cpu";
    o.engine.max_model_len = 1024;
    o.engine.kv_cache_memory_bytes = int64_t{256} << 20;
    return o;
  }

  std::unique_ptr<LLM> Make() {
    auto llm = LLM::Create(model_, Options());
    EXPECT_TRUE(llm.ok()) << llm.status().ToString();
    return llm.ok() ? std::move(*llm) : nullptr;
  }

  std::string model_;
};

nlohmann::json Golden() {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/golden.json");
  EXPECT_TRUE(in.good()) << KILN_GOLDEN_DIR;
  return nlohmann::json::parse(in);
}

// prompt_logprobs[i] is the logprob of token i + 1 given tokens 0..i: the token it names is the
// actual next token, and where HF's top-20 at position i holds that token, its logprob agrees
// with HF's (the golden test's tolerance). Perplexity over the prompt is exactly their sum.
TEST_F(EvalModelTest, PromptLogprobsScoreTheActualNextTokenAsHfDoes) {
  std::unique_ptr<LLM> llm = Make();
  ASSERT_NE(llm, nullptr);
  const nlohmann::json golden = Golden();
  int num_compared = 0;
  double max_diff = 0;
  for (const nlohmann::json& g : golden["prompts"]) {
    const std::string name = g["name"];
    if (name != "chat" && name != "recipe" && name != "ledger_200") continue;
    SCOPED_TRACE(name);
    const std::vector<int32_t> ids = g["token_ids"];
    const std::vector<ScoredToken> scored = testing::PromptLogprobs(*llm, ids);
    ASSERT_EQ(scored.size(), ids.size() - 1);
    double kiln_nll = 0, kiln_nll_where_hf = 0, hf_nll = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      ASSERT_EQ(scored[i].token_id, ids[i + 1]) << "position " << i;
      kiln_nll -= scored[i].logprob;
      const std::vector<int32_t> top_ids = g["top_ids"][i];
      for (size_t j = 0; j < top_ids.size(); ++j) {
        if (top_ids[j] != ids[i + 1]) continue;
        const double hf = g["top_logprobs"][i][j];
        EXPECT_NEAR(scored[i].logprob, hf, 1e-3) << "position " << i;
        max_diff = std::max(max_diff, std::fabs(scored[i].logprob - hf));
        kiln_nll_where_hf -= scored[i].logprob;
        hf_nll -= hf;
        ++num_compared;
      }
    }
    EXPECT_NEAR(kiln_nll_where_hf, hf_nll, 1e-2);
    PerplexityOptions o;
    o.window = static_cast<int32_t>(ids.size());
    o.stride = o.window;
    auto ppl = EvaluatePerplexityOfTokens(*llm, ids, o);
    ASSERT_TRUE(ppl.ok()) << ppl.status().ToString();
    EXPECT_EQ(ppl->num_scored, static_cast<int64_t>(ids.size()) - 1);
    EXPECT_NEAR(ppl->total_nll, kiln_nll, 1e-9 * kiln_nll);
  }
  EXPECT_EQ(num_compared, 26 + 60 + 131);  // the golden file's next tokens inside its top-20
  std::printf("prompt logprobs vs HF: %d positions, max |diff| %.2e\n", num_compared, max_diff);
}

TEST_F(EvalModelTest, RepeatedTextHasFarLowerPerplexityThanRandomTokens) {
  std::unique_ptr<LLM> llm = Make();
  ASSERT_NE(llm, nullptr);
  std::string paragraph =
      "The old lighthouse keeper kept a ledger of every ship that passed the point, with the "
      "weather, the hour and the colour of its sails. ";
  std::string text;
  for (int i = 0; i < 4; ++i) text += paragraph;
  PerplexityOptions o;
  o.window = 64;
  o.stride = 32;
  auto repeated = EvaluatePerplexity(*llm, text, o);
  ASSERT_TRUE(repeated.ok()) << repeated.status().ToString();
  EXPECT_EQ(repeated->num_tokens, 113);  // [0,64) [32,96) [64,113)
  EXPECT_EQ(repeated->num_windows, 3);
  EXPECT_EQ(repeated->num_scored, repeated->num_tokens - 1);
  EXPECT_GT(repeated->bits_per_byte, 0.0);

  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(0, llm->model_config().vocab_size - 1);
  std::vector<int32_t> random(repeated->num_tokens);
  for (int32_t& t : random) t = token(rng);
  auto noise = EvaluatePerplexityOfTokens(*llm, random, o);
  ASSERT_TRUE(noise.ok()) << noise.status().ToString();
  std::printf("perplexity: repeated text %.3f, random tokens %.1f (%lld tokens each)\n",
              repeated->perplexity, noise->perplexity,
              static_cast<long long>(repeated->num_tokens));
  EXPECT_LT(repeated->perplexity, 10.0);
  EXPECT_GT(noise->perplexity, 1000.0);
}

std::vector<Prompt> Prompts() {
  return {Prompt::Text("The capital of France is"),
          Prompt::Text("Here is a short recipe for bread:"),
          Prompt::Chat(nlohmann::ordered_json::parse(
              R"([{"role": "user", "content": "Name three colours."}])"))};
}

TEST_F(EvalModelTest, CompareWithItselfPasses) {
  CompareOptions o;
  o.max_tokens = 8;
  o.min_exact_match = 1.0;
  o.max_mean_kl = 0.0;
  auto make = [this]() { return LLM::Create(model_, Options()); };
  auto run = RunComparison(make, make, Prompts(), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->report.exact_match_rate, 1.0);
  EXPECT_EQ(run->report.kl.max, 0.0);
  EXPECT_EQ(run->report.top1_agreement, 1.0);
  EXPECT_TRUE(run->report.passed);
}

TEST_F(EvalModelTest, CompareAgainstRandomWeightsFails) {
  // B: the same shape and vocabulary (the smollm2-135m preset), one layer of random weights.
  const std::string dir =
      ::testing::TempDir() + "/kiln_eval_random_smollm2_" + std::to_string(::getpid());
  auto config = PresetConfig("smollm2-135m");
  ASSERT_TRUE(config.ok());
  config->num_layers = 1;
  SynthOptions synth;
  synth.output_dir = dir;
  synth.overwrite = OverwritePolicy::kReplaceCheckpoint;
  ASSERT_TRUE(WriteSyntheticCheckpoint(*config, synth).ok());
  CompareOptions o;
  o.max_tokens = 8;
  o.ignore_eos = true;
  auto run = RunComparison([this]() { return LLM::Create(model_, Options()); },
                           [&]() { return LLM::Create(dir, Options()); }, Prompts(), o);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->report.num_exact_match, 0);
  EXPECT_LT(run->report.top1_agreement, 0.2);
  EXPECT_GT(run->report.kl.mean, 1.0);
  EXPECT_FALSE(run->report.passed);
}

// kiln build --quant w4a16-rtn --group-size 64, with and without --quantize-lm-head: the 4-bit
// lm_head engine (its own lm_head of the tied model) loads, generates, and its perplexity stays
// within 1.5x of the engine whose lm_head is the 16-bit embedding (this text: 55.4 and 64.9;
// docs/quantization.md, "4-bit lm_head", has GPL-3's), and it is not the same model.
TEST_F(EvalModelTest, W4EngineWithQuantizedLmHeadGeneratesAndKeepsPerplexity) {
  auto ckpt = Checkpoint::Open(model_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_TRUE(ckpt->config().tie_word_embeddings);
  std::string paragraph =
      "The old lighthouse keeper kept a ledger of every ship that passed the point, with the "
      "weather, the hour and the colour of its sails. In winter the ledger grew thin; in summer "
      "he filled a page a day, and his daughter copied the best entries into a second book. ";
  double ppl[2] = {0, 0};
  for (bool lm_head : {false, true}) {
    SCOPED_TRACE(lm_head ? "4-bit lm_head" : "16-bit lm_head");
    const std::string dir = ::testing::TempDir() + "/kiln_eval_w4_lm_head_" +
                            std::to_string(lm_head) + "_" + std::to_string(::getpid());
    W4Options w4;
    w4.group_size = 64;
    w4.quantize_lm_head = lm_head;
    auto q = QuantizeW4(*ckpt, w4, {});
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EngineBuildOptions o;
    o.out_dir = dir;
    o.overwrite = true;
    o.quantization = QuantMethod::kW4A16;
    o.quant_recipe = "w4a16-rtn";
    const Status written = WriteEngine(*ckpt, &*q, o);
    ASSERT_TRUE(written.ok()) << written.ToString();
    {
      auto llm = LLM::Create(dir, Options());
      ASSERT_TRUE(llm.ok()) << llm.status().ToString();
      EXPECT_EQ((*llm)->model_config().tie_word_embeddings, !lm_head);
      SamplingParams greedy;
      greedy.temperature = 0;
      greedy.max_tokens = 8;
      greedy.ignore_eos = true;
      auto out = (*llm)->Generate({Prompt::Text("The capital of France is")}, greedy);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ((*out)[0].completions[0].token_ids.size(), 8u);
      std::printf("%s: '%s'\n", lm_head ? "4-bit lm_head" : "16-bit lm_head",
                  (*out)[0].completions[0].text.c_str());
      PerplexityOptions p;
      p.window = 64;
      p.stride = 32;
      auto r = EvaluatePerplexity(**llm, paragraph + paragraph, p);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ppl[lm_head] = r->perplexity;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::printf("w4a16-rtn perplexity: 16-bit lm_head %.4f, 4-bit lm_head %.4f\n", ppl[0], ppl[1]);
  EXPECT_LT(ppl[1], 1.5 * ppl[0]);
  EXPECT_NE(ppl[1], ppl[0]);
}

}  // namespace
}  // namespace kiln::eval
