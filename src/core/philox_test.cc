#include "core/philox.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln {
namespace {

void ExpectBlock(const Philox4x32Block& got, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  EXPECT_EQ(got.w[0], w0);
  EXPECT_EQ(got.w[1], w1);
  EXPECT_EQ(got.w[2], w2);
  EXPECT_EQ(got.w[3], w3);
}

// The known-answer vectors published with Random123 (kat_vectors, "philox4x32 10").
TEST(Philox4x32Test, Random123KnownAnswers) {
  ExpectBlock(Philox4x32({{0, 0, 0, 0}}, {{0, 0}}), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu,
              0x9b00dbd8u);
  ExpectBlock(Philox4x32({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                         {{0xffffffffu, 0xffffffffu}}),
              0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
  // The digits of pi.
  ExpectBlock(Philox4x32({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                         {{0xa4093822u, 0x299f31d0u}}),
              0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox4x32Test, SamplerRandomWordsLayout) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t position = 0x85a308d3243f6a88ull;
  const Philox4x32Block direct =
      Philox4x32({{7, 0x243f6a88u, 0x85a308d3u, 0}}, {{0xa4093822u, 0x299f31d0u}});
  const Philox4x32Block via = SamplerRandomWords(seed, position, 7);
  ExpectBlock(via, direct.w[0], direct.w[1], direct.w[2], direct.w[3]);
}

TEST(UniformFloatTest, EndpointsAreExact) {
  EXPECT_EQ(UniformFloat(0), std::ldexp(1.0f, -24));
  EXPECT_EQ(UniformFloat(0xffu), std::ldexp(1.0f, -24));  // the low 8 bits are dropped
  EXPECT_EQ(UniformFloat(0x100u), std::ldexp(2.0f, -24));
  EXPECT_EQ(UniformFloat(0x80000000u), 0.5f + std::ldexp(1.0f, -24));
  EXPECT_EQ(UniformFloat(0xffffffffu), 1.0f);
  EXPECT_EQ(UniformFloat(0xfffffeffu), 1.0f - std::ldexp(1.0f, -24));
}

TEST(UniformFloatTest, MeanOfManyDrawsIsOneHalf) {
  double sum = 0.0;
  const int n = 1 << 16;
  for (int i = 0; i < n / 4; ++i) {
    const Philox4x32Block b = Philox4x32({{static_cast<uint32_t>(i), 0, 0, 0}}, {{42, 0}});
    for (uint32_t w : b.w) {
      const float u = UniformFloat(w);
      ASSERT_GT(u, 0.0f);
      ASSERT_LE(u, 1.0f);
      sum += u;
    }
  }
  // Standard error of the mean: sqrt(1/12 / n) ~ 0.0011; allow 5 of them.
  EXPECT_NEAR(sum / n, 0.5, 0.0057);
}

}  // namespace
}  // namespace kiln
