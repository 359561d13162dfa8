// The sliding-window arithmetic, and perplexity on a tiny random-weight checkpoint checked
// against the same figures computed by hand from the engine's prompt logprobs.
#include "eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eval/test_model.h"

namespace kiln::eval {
namespace {

TEST(PlanWindowsTest, TheHeaderExample) {
  auto w = PlanWindows(10, 4, 2);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 4u);
  const int32_t want[4][3] = {{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*w)[i].begin, want[i][0]) << i;
    EXPECT_EQ((*w)[i].end, want[i][1]) << i;
    EXPECT_EQ((*w)[i].score_begin, want[i][2]) << i;
  }
}

TEST(PlanWindowsTest, ShortTextIsOneWindowScoringAllButTheFirstToken) {
  auto w = PlanWindows(5, 1024, 512);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0].begin, 0);
  EXPECT_EQ((*w)[0].end, 5);
  EXPECT_EQ((*w)[0].score_begin, 1);
}

// Every combination of small sizes: with stride < window each token 1..N-1 is scored exactly
// once and token 0 never; with stride == window the windows are disjoint chunks whose first
// token is not scored. Windows never exceed `window`, start at multiples of the stride, and
// after the first every scored token has at least window - stride tokens before it in its
// window (all of them when the window is cut by the text's end).
TEST(PlanWindowsTest, EveryTokenScoredOnceForAllSmallSizes) {
  for (int32_t n = 2; n <= 40; ++n) {
    for (int32_t window = 2; window <= 12; ++window) {
      for (int32_t stride = 1; stride <= window; ++stride) {
        SCOPED_TRACE(::testing::Message()
                     << "n " << n << " window " << window << " stride " << stride);
        auto w = PlanWindows(n, window, stride);
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        std::vector<int> times(n, 0);
        std::vector<bool> is_chunk_start(n, false);
        for (size_t i = 0; i < w->size(); ++i) {
          const Window& x = (*w)[i];
          ASSERT_EQ(x.begin % stride, 0);
          ASSERT_LE(x.num_tokens(), window);
          ASSERT_LT(x.begin, x.score_begin);
          ASSERT_LE(x.score_begin, x.end);
          ASSERT_GT(x.num_scored(), 0);
          if (i == 0) {
            EXPECT_EQ(x.begin, 0);
            EXPECT_EQ(x.score_begin, 1);
          } else if (stride < window) {
            EXPECT_GE(x.score_begin - x.begin, std::min(window - stride, x.end - x.begin - 1));
          }
          is_chunk_start[x.begin] = true;
          for (int32_t t = x.score_begin; t < x.end; ++t) ++times[t];
        }
        // The last window reaches the end, unless all it would hold is a 1-token tail chunk
        // (nothing to score).
        const bool tail_of_one = stride == window && n % window == 1;
        EXPECT_EQ(w->back().end, tail_of_one ? n - 1 : n);
        EXPECT_EQ(times[0], 0);
        for (int32_t t = 1; t < n; ++t) {
          const int want = stride == window && t % window == 0 ? 0 : 1;
          ASSERT_EQ(times[t], want) << "token " << t;
        }
      }
    }
  }
}

TEST(PlanWindowsTest, BadSizesAreRefused) {
  EXPECT_NE(PlanWindows(1, 4, 2).status().message().find("at least 2 tokens"), std::string::npos);
  EXPECT_NE(PlanWindows(0, 4, 2).status().message().find("at least 2 tokens"), std::string::npos);
  EXPECT_NE(PlanWindows(10, 1, 1).status().message().find("window"), std::string::npos);
  EXPECT_NE(PlanWindows(10, 4, 0).status().message().find("stride"), std::string::npos);
  EXPECT_NE(PlanWindows(10, 4, 5).status().message().find("stride"), std::string::npos);
  EXPECT_EQ(PlanWindows(10, 4, 5).status().code(), StatusCode::kInvalidArgument);
}

class PerplexityModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    llm_ = testing::MakeTinyLlm(1);
    ASSERT_NE(llm_, nullptr);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int32_t> token(0, 299);
    for (int i = 0; i < 90; ++i) ids_.push_back(token(rng));
  }

  // -logprob of every prompt token after the first, each prompt run on its own.
  std::vector<double> PromptNll(const std::vector<int32_t>& prompt) {
    std::vector<double> nll;
    const std::vector<ScoredToken> scored = testing::PromptLogprobs(*llm_, prompt);
    EXPECT_EQ(scored.size() + 1, prompt.size());
    for (size_t k = 0; k < scored.size(); ++k) {
      EXPECT_EQ(scored[k].token_id, prompt[k + 1]);
      nll.push_back(-static_cast<double>(scored[k].logprob));
    }
    return nll;
  }

  std::unique_ptr<LLM> llm_;
  std::vector<int32_t> ids_;
};

TEST_F(PerplexityModelTest, StrideEqualToWindowIsTheSumOverDisjointChunks) {
  PerplexityOptions o;
  o.window = 32;
  o.stride = 32;
  o.windows_per_call = 2;  // several Generate calls, some windows batched together
  auto r = EvaluatePerplexityOfTokens(*llm_, ids_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // By hand: chunks [0,32), [32,64), [64,90), each scored alone, its first token unscored.
  double total = 0;
  int64_t count = 0;
  for (int32_t begin = 0; begin < 90; begin += 32) {
    const int32_t end = std::min(begin + 32, 90);
    for (double x : PromptNll({ids_.begin() + begin, ids_.begin() + end})) {
      total += x;
      ++count;
    }
  }
  EXPECT_EQ(r->num_windows, 3);
  EXPECT_EQ(r->num_scored, 90 - 3);
  EXPECT_EQ(r->num_scored, count);
  EXPECT_EQ(r->num_computed, 90);
  // The CPU backend's rows do not depend on the batch around them: the same bits.
  EXPECT_EQ(r->total_nll, total);
  EXPECT_DOUBLE_EQ(r->mean_nll, total / count);
  EXPECT_DOUBLE_EQ(r->perplexity, std::exp(total / count));
}

TEST_F(PerplexityModelTest, OverlappingWindowsCountOnlyTheirNewTokens) {
  PerplexityOptions o;
  o.window = 40;
  o.stride = 25;
  auto r = EvaluatePerplexityOfTokens(*llm_, ids_, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // By hand, HF's loop: windows [0,40) [25,65) [50,90); each scores from the previous end.
  double total = 0;
  int32_t prev_end = 0;
  for (int32_t begin = 0; begin < 90; begin += 25) {
    const int32_t end = std::min(begin + 40, 90);
    const std::vector<double> nll = PromptNll({ids_.begin() + begin, ids_.begin() + end});
    // nll[k] scores token begin + k + 1.
    for (int32_t t = std::max(prev_end, begin + 1); t < end; ++t) total += nll[t - begin - 1];
    prev_end = end;
    if (end == 90) break;
  }
  EXPECT_EQ(r->num_windows, 3);
  EXPECT_EQ(r->num_scored, 89);
  EXPECT_EQ(r->num_computed, 40 + 40 + 40);
  EXPECT_EQ(r->total_nll, total);
  // More context than disjoint chunks of 25 for the same tokens: a different figure.
  o.window = 25;
  o.stride = 25;
  auto chunks = EvaluatePerplexityOfTokens(*llm_, ids_, o);
  ASSERT_TRUE(chunks.ok());
  EXPECT_NE(chunks->total_nll, r->total_nll);
}

TEST_F(PerplexityModelTest, DefaultsFollowTheEngine) {
  auto r = EvaluatePerplexityOfTokens(*llm_, ids_, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->window, 255);  // min(1024, max_model_len 256 - 1)
  EXPECT_EQ(r->stride, 127);
  EXPECT_EQ(r->num_windows, 1);
  EXPECT_EQ(r->num_scored, 89);
}

TEST_F(PerplexityModelTest, TextIsTokenizedOnceWithBosAndTruncatedByMaxTokens) {
  const std::string text = "the quick brown fox jumps over the lazy dog, again and again";
  const std::vector<int32_t> ids =
      llm_->tokenizer().tokenizer->Encode(text, /*add_special=*/true, /*parse_special=*/false);
  PerplexityOptions o;
  o.window = 8;
  o.stride = 4;
  auto r = EvaluatePerplexity(*llm_, text, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(r->has_bos, ids[0] == 300);
  EXPECT_EQ(r->num_bytes, static_cast<int64_t>(text.size()));
  EXPECT_DOUBLE_EQ(r->bits_per_byte, r->total_nll / std::log(2.0) / text.size());
  auto by_ids = EvaluatePerplexityOfTokens(*llm_, ids, o);
  ASSERT_TRUE(by_ids.ok());
  EXPECT_EQ(by_ids->total_nll, r->total_nll);

  o.max_tokens = 10;
  auto cut = EvaluatePerplexity(*llm_, text, o);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->num_tokens, 10);
  EXPECT_EQ(cut->num_scored, 9);
  auto first10 = EvaluatePerplexityOfTokens(*llm_, {ids.begin(), ids.begin() + 10}, o);
  EXPECT_EQ(first10->total_nll, cut->total_nll);
}

TEST_F(PerplexityModelTest, BadInputIsRefused) {
  PerplexityOptions o;
  o.window = 256;  // max_model_len is 256: a prompt may hold 255 tokens
  auto too_long = EvaluatePerplexityOfTokens(*llm_, ids_, o);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("max_model_len 256"), std::string::npos)
      << too_long.status().message();
  o.window = 255;
  EXPECT_TRUE(EvaluatePerplexityOfTokens(*llm_, ids_, o).ok());
  o.window = 16;
  o.stride = 17;
  EXPECT_NE(EvaluatePerplexityOfTokens(*llm_, ids_, o).status().message().find("stride"),
            std::string::npos);
  o.stride = -1;
  EXPECT_FALSE(EvaluatePerplexityOfTokens(*llm_, ids_, o).ok());
  o.stride = 0;
  o.window = -3;
  EXPECT_FALSE(EvaluatePerplexityOfTokens(*llm_, ids_, o).ok());
  o.window = 0;
  const std::vector<int32_t> one = {5};
  EXPECT_NE(EvaluatePerplexityOfTokens(*llm_, one, o).status().message().find("at least 2"),
            std::string::npos);
  o.max_tokens = -1;
  EXPECT_FALSE(EvaluatePerplexity(*llm_, "some text", o).ok());
}

}  // namespace
}  // namespace kiln::eval
