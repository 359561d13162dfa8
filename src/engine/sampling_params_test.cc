#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

namespace kiln {
namespace {

constexpr int32_t kVocab = 1000;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The message of Validate() after `edit` changes the defaults; "" when it passes.
std::string Error(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams params;
  edit(params);
  const Status status = params.Validate(kVocab);
  if (status.ok()) return "";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  return status.message();
}

TEST(SamplingParamsTest, DefaultsPass) {
  EXPECT_TRUE(SamplingParams().Validate(kVocab).ok());
  EXPECT_TRUE(SamplingParams().Validate(1).ok());
}

TEST(SamplingParamsTest, EdgesOfEveryRangePass) {
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.n = 128;
              p.temperature = 2.0f;
              p.top_p = 1.0f;
              p.top_k = -1;
              p.min_p = 1.0f;
              p.presence_penalty = -2.0f;
              p.frequency_penalty = 2.0f;
              p.repetition_penalty = 1e-3f;
              p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}};
              p.seed = 0;
              p.max_tokens = 1;
              p.min_tokens = 1;
              p.stop = std::vector<std::string>(16, "x");
              p.stop_token_ids = {0, kVocab - 1};
              p.logprobs = 20;
              p.prompt_logprobs = 0;
            }),
            "");
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.n = 1;
              p.temperature = 0.0f;
              p.top_p = 1e-6f;
              p.top_k = 0;
              p.min_p = 0.0f;
              p.repetition_penalty = 5.0f;
              p.min_tokens = 16;
              p.logprobs = 0;
              p.prompt_logprobs = 20;
            }),
            "");
  EXPECT_EQ(Error([](SamplingParams& p) { p.top_k = 1'000'000; }), "");  // > vocab: no limit
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.n = 4;  // greedy with n > 1: allowed, the completions are identical
              p.temperature = 0.0f;
            }),
            "");
}

TEST(SamplingParamsTest, N) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.n = 0; }), "n: must be in [1, 128], got 0");
  EXPECT_EQ(Error([](SamplingParams& p) { p.n = 129; }), "n: must be in [1, 128], got 129");
}

TEST(SamplingParamsTest, Temperature) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.temperature = 3.0f; }),
            "temperature: must be in [0, 2], got 3");
  EXPECT_EQ(Error([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature: must be in [0, 2], got -0.5");
  EXPECT_EQ(Error([](SamplingParams& p) { p.temperature = kNan; }),
            "temperature: must be in [0, 2], got nan");
  EXPECT_EQ(Error([](SamplingParams& p) { p.temperature = kInf; }),
            "temperature: must be in [0, 2], got inf");
}

TEST(SamplingParamsTest, TopP) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p: must be in (0, 1], got 0");
  EXPECT_EQ(Error([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p: must be in (0, 1], got 1.5");
  EXPECT_EQ(Error([](SamplingParams& p) { p.top_p = kNan; }), "top_p: must be in (0, 1], got nan");
}

TEST(SamplingParamsTest, TopK) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.top_k = -2; }),
            "top_k: must be -1 or 0 (no limit) or a positive count, got -2");
}

TEST(SamplingParamsTest, MinP) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.min_p = -0.1f; }),
            "min_p: must be in [0, 1], got -0.1");
  EXPECT_EQ(Error([](SamplingParams& p) { p.min_p = 1.25f; }),
            "min_p: must be in [0, 1], got 1.25");
}

TEST(SamplingParamsTest, PresenceAndFrequencyPenalties) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
            "presence_penalty: must be in [-2, 2], got 2.5");
  EXPECT_EQ(Error([](SamplingParams& p) { p.presence_penalty = kNan; }),
            "presence_penalty: must be in [-2, 2], got nan");
  EXPECT_EQ(Error([](SamplingParams& p) { p.frequency_penalty = -3.0f; }),
            "frequency_penalty: must be in [-2, 2], got -3");
}

TEST(SamplingParamsTest, RepetitionPenalty) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
            "repetition_penalty: must be > 0 and finite (1 = off), got 0");
  EXPECT_EQ(Error([](SamplingParams& p) { p.repetition_penalty = -1.0f; }),
            "repetition_penalty: must be > 0 and finite (1 = off), got -1");
  EXPECT_EQ(Error([](SamplingParams& p) { p.repetition_penalty = kInf; }),
            "repetition_penalty: must be > 0 and finite (1 = off), got inf");
}

TEST(SamplingParamsTest, LogitBias) {
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.logit_bias = {{5, 1.0f}, {kVocab, 1.0f}};
            }),
            "logit_bias: token id 1000 is out of range [0, 1000)");
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.logit_bias = {{-1, 1.0f}};
            }),
            "logit_bias: token id -1 is out of range [0, 1000)");
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.logit_bias = {{7, 100.5f}};
            }),
            "logit_bias: the bias of token 7 must be in [-100, 100], got 100.5");
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.logit_bias = {{7, kNan}};
            }),
            "logit_bias: the bias of token 7 must be in [-100, 100], got nan");
}

TEST(SamplingParamsTest, MaxAndMinTokens) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.max_tokens = 0; }), "max_tokens: must be >= 1, got 0");
  EXPECT_EQ(Error([](SamplingParams& p) { p.min_tokens = -1; }),
            "min_tokens: must be in [0, max_tokens = 16], got -1");
  EXPECT_EQ(Error([](SamplingParams& p) { p.min_tokens = 17; }),
            "min_tokens: must be in [0, max_tokens = 16], got 17");
}

TEST(SamplingParamsTest, Stop) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); }),
            "stop: at most 16 strings, got 17");
  EXPECT_EQ(Error([](SamplingParams& p) { p.stop = {"a", "", "b"}; }), "stop: string 1 is empty");
}

TEST(SamplingParamsTest, StopTokenIds) {
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.stop_token_ids = {2, 1000};
            }),
            "stop_token_ids: token id 1000 is out of range [0, 1000)");
  EXPECT_EQ(Error([](SamplingParams& p) { p.stop_token_ids = {-5}; }),
            "stop_token_ids: token id -5 is out of range [0, 1000)");
}

TEST(SamplingParamsTest, Logprobs) {
  EXPECT_EQ(Error([](SamplingParams& p) { p.logprobs = 21; }),
            "logprobs: must be in [0, 20], got 21");
  EXPECT_EQ(Error([](SamplingParams& p) { p.logprobs = -1; }),
            "logprobs: must be in [0, 20], got -1");
  EXPECT_EQ(Error([](SamplingParams& p) { p.prompt_logprobs = 100; }),
            "prompt_logprobs: must be in [0, 20], got 100");
}

TEST(SamplingParamsTest, FirstBadFieldIsReported) {
  EXPECT_EQ(Error([](SamplingParams& p) {
              p.top_p = 0.0f;
              p.logprobs = 50;
            }),
            "top_p: must be in (0, 1], got 0");
}

}  // namespace
}  // namespace kiln
