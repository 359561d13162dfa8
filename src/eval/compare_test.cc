// The compare metrics on hand-made runs (KL terms worked out on paper), and RunComparison on
// tiny random-weight checkpoints: a model against itself passes with KL exactly 0; against a
// model with other weights it fails.
#include "eval/compare.h"

#include <gtest/gtest.h>

#include <cmath>

#include "eval/test_model.h"

namespace kiln::eval {
namespace {

std::vector<TokenLogprob> Dist(std::vector<std::pair<int32_t, double>> probs) {
  std::vector<TokenLogprob> out;
  for (auto [id, p] : probs) out.push_back({id, static_cast<float>(std::log(p))});
  return out;
}

TEST(TopKKlTest, IdenticalListsGiveExactlyZero) {
  const auto a = Dist({{7, 0.5}, {3, 0.2}, {9, 0.1}});
  const KlTerm t = TopKKl(a, a, 3);
  EXPECT_EQ(t.kl, 0.0);
  EXPECT_TRUE(t.exact);
}

TEST(TopKKlTest, SharedTokensAndTheRestBucket) {
  // p = {1: .5, 2: .3, rest: .2}, q = {1: .4, 2: .4, rest: .2}.
  const KlTerm t = TopKKl(Dist({{1, 0.5}, {2, 0.3}}), Dist({{2, 0.4}, {1, 0.4}}), 2);
  const double want = 0.5 * std::log(0.5 / 0.4) + 0.3 * std::log(0.3 / 0.4);
  EXPECT_NEAR(t.kl, want, 1e-7);
  EXPECT_TRUE(t.exact);
}

TEST(TopKKlTest, TokenMissingFromBsListGetsAShareOfItsLeftoverMass) {
  // B lists {1: .7, 2: .2}: .1 left over, least listed .2; token 3 (A's second) is missing, so
  // q(3) = min(.2, .1 / 1) = .1 and q(rest) = 1 - .7 - .1 = .2; p(rest) = 1 - .6 - .3 = .1.
  const KlTerm t = TopKKl(Dist({{1, 0.6}, {3, 0.3}}), Dist({{1, 0.7}, {2, 0.2}}), 2);
  const double want =
      0.6 * std::log(0.6 / 0.7) + 0.3 * std::log(0.3 / 0.1) + 0.1 * std::log(0.1 / 0.2);
  EXPECT_NEAR(t.kl, want, 1e-7);
  EXPECT_FALSE(t.exact);
  // The share is capped at B's least listed probability: B lists {1: .5, 2: .05}, .45 left over,
  // two of A's tokens missing: each gets min(.05, .225) = .05.
  const KlTerm capped =
      TopKKl(Dist({{1, 0.4}, {3, 0.3}, {4, 0.2}}), Dist({{1, 0.5}, {2, 0.05}}), 3);
  const double q_rest = 1 - 0.5 - 0.05 - 0.05;
  const double want_capped = 0.4 * std::log(0.4 / 0.5) + 0.3 * std::log(0.3 / 0.05) +
                             0.2 * std::log(0.2 / 0.05) + 0.1 * std::log(0.1 / q_rest);
  EXPECT_NEAR(capped.kl, want_capped, 1e-6);
}

TEST(TopKKlTest, OnlyTheFirstKOfAsListAreTheSupport) {
  // k = 1: support {1}; p = {1: .5, rest: .5}, q = {1: .25, rest: .75}; A's second token and
  // B's disagreement about it fall into "rest".
  const KlTerm t = TopKKl(Dist({{1, 0.5}, {2, 0.4}}), Dist({{2, 0.7}, {1, 0.25}}), 1);
  EXPECT_NEAR(t.kl, 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75), 1e-7);
  EXPECT_TRUE(t.exact);
}

TEST(DistributeTest, PercentilesInterpolateBetweenRanks) {
  const Distribution d = Distribute({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.min, 1);
  EXPECT_DOUBLE_EQ(d.max, 4);
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.p10, 1.3);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
  EXPECT_EQ(Distribute({}).count, 0);
  EXPECT_DOUBLE_EQ(Distribute({5}).p90, 5);
}

// A hand-made side: outputs with one-hot-ish distributions whose argmax is `top`.
SideOutput Output(std::vector<int32_t> tokens, std::vector<int32_t> tops, double p_top) {
  SideOutput o;
  o.token_ids = std::move(tokens);
  for (int32_t top : tops) o.dists.push_back(Dist({{top, p_top}, {top + 1, 1 - p_top - 0.01}}));
  return o;
}

TEST(CompareTest, MetricsOfHandMadeRuns) {
  // Prompt 0: identical. Prompt 1: B differs at token 2. Prompt 2: B stops after 1 token (a
  // prefix of A's). KL is scored on A's 3 + 4 + 3 positions.
  SideRun a, b;
  a.outputs = {Output({5, 6, 7}, {5, 6, 7}, 0.9), Output({1, 2, 3, 4}, {1, 2, 3, 4}, 0.9),
               Output({8, 9, 10}, {8, 9, 10}, 0.9)};
  b.outputs = {Output({5, 6, 7}, {5, 6, 7}, 0.9), Output({1, 2, 9, 9}, {1, 2, 9, 4}, 0.9),
               Output({8}, {8, 9, 10}, 0.8)};
  CompareOptions o;
  o.max_tokens = 4;
  o.kl_top_k = 2;
  o.min_exact_match = 0.3;
  const CompareReport r = Compare(a, b, o);
  EXPECT_EQ(r.num_prompts, 3);
  EXPECT_EQ(r.num_exact_match, 1);
  EXPECT_DOUBLE_EQ(r.exact_match_rate, 1.0 / 3);
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0].first_divergence, -1);
  EXPECT_EQ(r.prompts[1].first_divergence, 2);
  EXPECT_EQ(r.prompts[2].first_divergence, 1);
  EXPECT_EQ(r.first_divergence.count, 2);
  EXPECT_DOUBLE_EQ(r.first_divergence.mean, 1.5);
  ASSERT_EQ(r.divergence_histogram.size(), 3u);  // [0,1) [1,2) [2,4)
  EXPECT_EQ(r.divergence_histogram[0].count, 0);
  EXPECT_EQ(r.divergence_histogram[1].count, 1);
  EXPECT_EQ(r.divergence_histogram[2].lo, 2);
  EXPECT_EQ(r.divergence_histogram[2].hi, 4);
  EXPECT_EQ(r.divergence_histogram[2].count, 1);
  EXPECT_EQ(r.num_positions, 10);
  // Prompt 0 has KL 0; prompt 1 only at position 2 (B's top is 9, A's token 3 missing).
  EXPECT_EQ(r.prompts[0].mean_kl, 0.0);
  EXPECT_EQ(r.prompts[1].num_top1_agree, 3);
  EXPECT_GT(r.prompts[1].max_kl, 0.0);
  EXPECT_EQ(r.prompts[1].max_kl, r.prompts[1].mean_kl * 4);
  EXPECT_DOUBLE_EQ(r.top1_agreement, 9.0 / 10);
  EXPECT_DOUBLE_EQ(r.top1_self_agreement, 1.0);
  EXPECT_DOUBLE_EQ(r.kl_exact_fraction, 9.0 / 10);
  EXPECT_TRUE(r.exact_match_passed);
  EXPECT_TRUE(r.kl_passed);
  EXPECT_TRUE(r.passed);
  // Thresholds.
  o.min_exact_match = 0.5;
  EXPECT_FALSE(Compare(a, b, o).passed);
  o.min_exact_match = 0.0;
  o.max_mean_kl = r.kl.mean;
  EXPECT_TRUE(Compare(a, b, o).passed);
  o.max_mean_kl = r.kl.mean * 0.99;
  const CompareReport tight = Compare(a, b, o);
  EXPECT_FALSE(tight.kl_passed);
  EXPECT_FALSE(tight.passed);
}

TEST(CompareTest, OptionsAreValidated) {
  CompareOptions o;
  EXPECT_TRUE(ValidateCompareOptions(o).ok());
  o.max_tokens = 0;
  EXPECT_NE(ValidateCompareOptions(o).message().find("max_tokens"), std::string::npos);
  o = {};
  o.kl_top_k = 21;
  EXPECT_NE(ValidateCompareOptions(o).message().find("kl_top_k"), std::string::npos);
  o = {};
  o.min_exact_match = 1.5;
  EXPECT_NE(ValidateCompareOptions(o).message().find("min_exact_match"), std::string::npos);
  o = {};
  o.max_mean_kl = -1;
  EXPECT_NE(ValidateCompareOptions(o).message().find("max_mean_kl"), std::string::npos);
  o.max_mean_kl = std::nan("");
  EXPECT_FALSE(ValidateCompareOptions(o).ok());
}

std::vector<Prompt> SomePrompts() {
  return {Prompt::Text("the first prompt"), Prompt::Text("a second, longer prompt with words"),
          Prompt::Tokens({300, 17, 99, 4})};
}

LlmFactory Tiny(uint64_t seed, int32_t vocab_size = 320) {
  return [seed, vocab_size]() -> Result<std::unique_ptr<LLM>> {
    return LLM::Create(testing::TinyCheckpoint(seed, vocab_size), testing::TinyLlmOptions());
  };
}

TEST(RunComparisonTest, AModelAgainstItselfMatchesExactlyWithZeroKl) {
  CompareOptions o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  o.min_exact_match = 1.0;
  o.max_mean_kl = 0.0;
  std::vector<std::string> lines;
  auto run = RunComparison(Tiny(1), Tiny(1), SomePrompts(), o,
                           [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const CompareReport& r = run->report;
  EXPECT_EQ(r.num_exact_match, 3);
  EXPECT_EQ(r.exact_match_rate, 1.0);
  EXPECT_EQ(r.num_positions, 36);
  EXPECT_EQ(r.kl.max, 0.0);
  EXPECT_EQ(r.kl_exact_fraction, 1.0);
  EXPECT_EQ(r.top1_agreement, 1.0);
  EXPECT_EQ(r.top1_self_agreement, 1.0);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(lines.size(), 4u);  // A loading, A done, B loading, B done
  // Each position's distribution has the engine's 20 alternatives, A's token among them.
  for (const SideOutput& out : run->a.outputs) {
    ASSERT_EQ(out.token_ids.size(), 12u);
    ASSERT_EQ(out.dists.size(), 12u);
    for (size_t t = 0; t < 12; ++t) {
      ASSERT_EQ(out.dists[t].size(), static_cast<size_t>(kCompareTopLogprobs));
      EXPECT_EQ(out.dists[t][0].token_id, out.token_ids[t]);  // greedy = argmax
    }
  }
}

TEST(RunComparisonTest, ScoringMatchesTheGenerationLogprobs) {
  // The scored distribution at each position is the one greedy generation saw: the top-20 of
  // the teacher-forced rescoring equal the logprobs the engine reported while generating.
  auto llm = testing::MakeTinyLlm(1);
  ASSERT_NE(llm, nullptr);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = kCompareTopLogprobs;
  auto generated = llm->Generate({Prompt::Tokens({300, 17, 99, 4})}, p);
  ASSERT_TRUE(generated.ok());
  CompareOptions o;
  o.max_tokens = 6;
  o.ignore_eos = true;
  auto side = RunSide(*llm, {{300, 17, 99, 4}}, nullptr, o);
  ASSERT_TRUE(side.ok()) << side.status().ToString();
  const CompletionOutput& c = (*generated)[0].completions[0];
  ASSERT_EQ(side->outputs[0].token_ids, c.token_ids);
  for (size_t t = 0; t < 6; ++t) {
    ASSERT_EQ(side->outputs[0].dists[t].size(), c.logprobs[t].top_logprobs.size());
    for (size_t j = 0; j < c.logprobs[t].top_logprobs.size(); ++j) {
      EXPECT_EQ(side->outputs[0].dists[t][j].token_id, c.logprobs[t].top_logprobs[j].token_id);
      EXPECT_NEAR(side->outputs[0].dists[t][j].logprob, c.logprobs[t].top_logprobs[j].logprob,
                  1e-5);
    }
  }
}

TEST(RunComparisonTest, OtherWeightsFail) {
  CompareOptions o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  auto run = RunComparison(Tiny(1), Tiny(2), SomePrompts(), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const CompareReport& r = run->report;
  EXPECT_LT(r.exact_match_rate, 0.9);
  EXPECT_GT(r.kl.mean, 0.01);
  EXPECT_LT(r.top1_agreement, 0.5);
  EXPECT_FALSE(r.exact_match_passed);
  EXPECT_FALSE(r.passed);
}

TEST(RunComparisonTest, BadInputIsNamed) {
  CompareOptions o;
  o.max_tokens = 2;
  auto none = RunComparison(Tiny(1), Tiny(1), {}, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no prompts"), std::string::npos);
  auto vocab = RunComparison(Tiny(1), Tiny(1, 384), SomePrompts(), o);
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("different vocabularies (320 and 384"), std::string::npos)
      << vocab.status().message();
  auto bad_id = RunComparison(Tiny(1), Tiny(1), {Prompt::Tokens({1, 999})}, o);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.status().message().rfind("A: ", 0), 0u) << bad_id.status().message();
  auto missing = RunComparison(
      Tiny(1),
      []() -> Result<std::unique_ptr<LLM>> {
        return LLM::Create("/no/such/model", testing::TinyLlmOptions());
      },
      SomePrompts(), o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().rfind("B: ", 0), 0u) << missing.status().message();
}

}  // namespace
}  // namespace kiln::eval
