#include "backend/cpu/sampler.h"

#include <gtest/gtest.h>

namespace kiln::cpu {
namespace {

TEST(ScoreTest, RankAndTopLogprobs) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  ScoredToken s = Score(logits, 2, 3);
  EXPECT_EQ(s.rank, 3);
  ASSERT_EQ(s.top_logprobs.size(), 3u);
  EXPECT_EQ(s.top_logprobs[0].token_id, 1);
  EXPECT_EQ(s.top_logprobs[1].token_id, 3);
  EXPECT_EQ(s.top_logprobs[2].token_id, 2);
}

}  // namespace
}  // namespace kiln::cpu
