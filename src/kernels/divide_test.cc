// kernels/divide.h on the CPU: DivideRn against the IEEE division y / d, bit for bit where the
// header promises it (quotients in [2^-40, 2^100], zeros, infinities, NaN), within 2 ulps and
// with the quotient's sign elsewhere. The kernels run the same header (fp32 products and FMAs
// round alike on both sides), so this is the proof of the quantization kernels' exactness; the
// GPU tests (quant_test, elementwise_test) compare their codes to the CPU's as well.
#include "kernels/divide.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace kiln::kernels {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// A positive float with exponent in [lo, hi] and a random mantissa.
float RandomPositive(std::mt19937& rng, int lo, int hi) {
  const int e = lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1));
  return std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffffu) * 0x1p-23f, e);
}

// Distance in ulps between two finite floats of one sign (or zeros).
int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const int64_t m = Bits(f) & 0x7fffffffu;
    return std::signbit(f) ? -m : m;
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Counts mismatches (and reports the first few) of DivideRn against y / d for exact cases.
struct Checker {
  int64_t checked = 0;
  int64_t mismatches = 0;

  void Exact(float y, float d) {
    const Divisor v = MakeDivisor(d);
    const float got = DivideRn(y, v);
    const float want = y / d;
    ++checked;
    const bool same = std::isnan(want) ? std::isnan(got) : Bits(got) == Bits(want);
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << std::hexfloat << y << " / " << d << ": got " << got << ", want " << want;
    }
  }
};

TEST(DivideRnTest, MatchesTheDivisionOnRandomOperands) {
  std::mt19937 rng(1);
  Checker c;
  for (int i = 0; i < 4'000'000; ++i) {
    const float d = RandomPositive(rng, -64, 63);
    // A quotient exponent in the exact range, y from it (any sign).
    const int qe = -40 + static_cast<int>(rng() % 140);
    const float q = RandomPositive(rng, qe, qe);
    float y = q * d;
    if (!std::isfinite(y) || std::fabs(y) < std::numeric_limits<float>::min()) continue;
    if (rng() & 1) y = -y;
    const float quotient = std::fabs(y / d);
    if (quotient < 0x1p-40f || quotient > 0x1p100f) continue;
    c.Exact(y, d);
  }
  EXPECT_GT(c.checked, 3'000'000);
  EXPECT_EQ(c.mismatches, 0);
}

// Every seventh mantissa of y in four binades (quotients near 2^-9, e4m3's smallest code, near
// 1, 16 and 256) against divisors chosen to make hard quotients: mantissas next to 1 and 2
// (reciprocals on either side of a power of two), quantization scales as the kernels make them
// (amax / 448, the minimum scale), the ends of the fast range, and random ones.
TEST(DivideRnTest, MatchesTheDivisionForEveryMantissa) {
  std::mt19937 rng(2);
  const float divisors[] = {1.0f,
                            F(0x3f800001u),
                            F(0x3fffffffu),
                            F(0x3f7fffffu),
                            3.0f,
                            0.1f,
                            7.0f / 448.0f,
                            1.0f / (448.0f * 512.0f),
                            0x1p-64f,
                            F(0x5f7fffffu),  // just below 2^64
                            RandomPositive(rng, -20, 20),
                            RandomPositive(rng, -20, 20)};
  Checker c;
  for (const float d : divisors) {
    for (const int k : {-9, 0, 4, 8}) {
      const int e = std::ilogb(d) + k;
      for (uint32_t m = 0; m < (1u << 23); m += 7) {
        c.Exact(std::ldexp(1.0f + static_cast<float>(m) * 0x1p-23f, e), d);
      }
    }
  }
  EXPECT_EQ(c.mismatches, 0) << "of " << c.checked;
}

TEST(DivideRnTest, SpecialValuesAreTheDivisions) {
  Checker c;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float d : {1.0f, 0.003f, 1e-30f, 1e30f, 0x1p-64f, 0x1p64f, 0x1p-65f, 0x1p65f}) {
    for (const float y : {0.0f, -0.0f, inf, -inf, nan, 1.0f, -448.0f, 3e38f, -3e38f}) {
      const Divisor v = MakeDivisor(d);
      const float want = y / d;
      const float got = DivideRn(y, v);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << y << " / " << d;
      } else if (std::isinf(want) || want == 0.0f ||
                 (std::fabs(want) >= 0x1p-40f && std::fabs(want) <= 0x1p100f)) {
        EXPECT_EQ(Bits(got), Bits(want)) << std::hexfloat << y << " / " << d;
      } else if (std::fabs(want) < 0x1p-40f) {
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << y << " / " << d;
        EXPECT_LE(UlpDistance(got, want), 2) << std::hexfloat << y << " / " << d;
      } else {
        // Beyond 2^100 the product may overflow where the quotient does not: the same sign,
        // and huge either way.
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << y << " / " << d;
        EXPECT_GT(std::fabs(got), 0x1p100f) << y << " / " << d;
      }
    }
  }
  // Outside the fast range the division itself: bitwise everywhere.
  for (const float d : {0x1p-65f, 0x1p65f, std::numeric_limits<float>::min(), 0.0f, inf}) {
    for (const float y : {1.0f, -3.5f, 1e-30f, 0.0f}) c.Exact(y, d);
  }
  EXPECT_EQ(c.mismatches, 0);
}

TEST(DivideRnTest, TinyQuotientsKeepTheirSignWithinTwoUlps) {
  std::mt19937 rng(3);
  for (int i = 0; i < 200'000; ++i) {
    const float d = RandomPositive(rng, -10, 63);
    float y = RandomPositive(rng, -149 + 23, -40 + std::ilogb(d));
    if (rng() & 1) y = -y;
    const float want = y / d;
    if (std::fabs(want) >= 0x1p-40f) continue;
    const float got = DivideRn(y, MakeDivisor(d));
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hexfloat << y << " / " << d;
    ASSERT_LE(UlpDistance(got, want), 2) << std::hexfloat << y << " / " << d;
  }
}

}  // namespace
}  // namespace kiln::kernels
