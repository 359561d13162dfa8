#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace kiln {
namespace {

float Bits(uint32_t u) { return F32FromBits(u); }

TEST(DType, InfoAndParse) {
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(GetDTypeInfo(DType::kQ4_K).block_size, 256);
  EXPECT_EQ(GetDTypeInfo(DType::kQ4_K).block_bytes, 144);
  EXPECT_EQ(GetDTypeInfo(DType::kQ6_K).block_bytes, 210);
  EXPECT_EQ(GetDTypeInfo(DType::kQ4_1).block_bytes, 20);
  EXPECT_EQ(*ParseDType("BFloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("q4_k"), DType::kQ4_K);
  EXPECT_EQ(*ParseDType("float8_e4m3fn"), DType::kF8E4M3);
  auto bad = ParseDType("f12");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f12"), std::string::npos);
}

TEST(DType, ByteSize) {
  EXPECT_EQ(*DTypeByteSize(DType::kBF16, 10), 20);
  EXPECT_EQ(*DTypeByteSize(DType::kI4, 10), 5);
  EXPECT_EQ(*DTypeByteSize(DType::kQ8_0, 64), 68);
  EXPECT_EQ(*DTypeByteSize(DType::kQ2_K, 512), 168);
  EXPECT_FALSE(DTypeByteSize(DType::kI4, 3).ok());
  EXPECT_FALSE(DTypeByteSize(DType::kQ4_0, 33).ok());
  EXPECT_FALSE(DTypeByteSize(DType::kF32, -1).ok());
  EXPECT_EQ(DTypeByteSize(DType::kF64, std::numeric_limits<int64_t>::max()).status().code(),
            StatusCode::kOutOfRange);
}

TEST(DType, BF16ExactPatterns) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToBF16(Bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(F32ToBF16(Bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBF16(Bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(F32ToBF16(Bits(0x7f7fffff)), 0x7f80);  // max float rounds to infinity
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBF16(Bits(0x7f800001)), 0x7fc0);  // signalling NaN becomes quiet NaN
  EXPECT_EQ(F32ToBF16(Bits(0x00010000)), 0x0001);  // f32 subnormal keeps its top bits
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32Bits(BF16ToF32(0xff80)), 0xff800000u);
}

TEST(DType, BF16RoundTripEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = BF16ToF32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(f))));
    } else {
      EXPECT_EQ(F32ToBF16(f), h) << std::hex << b;
    }
  }
}

TEST(DType, F16ExactPatterns) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: even
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -24)), 0x0002);  // tie 1.5 units: to even 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16(Bits(0x3f801000)), 0x3c00);       // tie below: even
  EXPECT_EQ(F32ToF16(Bits(0x3f803000)), 0x3c02);       // tie: odd rounds up
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0xfc00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
}

TEST(DType, F16RoundTripEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = F16ToF32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << std::hex << b;
  }
}

#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
// The compiler's own _Float16 conversion is an independent reference for rounding.
TEST(DType, F16MatchesCompilerConversion) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> dist;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = dist(rng);
    const float f = Bits(u);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(F32ToF16(f), hb) << std::hex << u;
  }
}
#endif

TEST(DType, F8E4M3ExactPatterns) {
  EXPECT_EQ(F32ToF8E4M3(1.0f), 0x38);
  EXPECT_EQ(F32ToF8E4M3(-2.0f), 0xc0);
  EXPECT_EQ(F32ToF8E4M3(448.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(464.0f), 0x7e);  // tie between 448 and (NaN) 480: even
  EXPECT_EQ(F32ToF8E4M3(470.0f), 0x7f);  // rounds into the NaN pattern, as c10 does
  EXPECT_EQ(F32ToF8E4M3(480.0f), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(-1e9f), 0xff);
  EXPECT_EQ(F32ToF8E4M3(std::numeric_limits<float>::infinity()), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.0f, -10)), 0x00);  // tie with zero
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 units: to even
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(F32ToF8E4M3(1.0625f), 0x38);                // tie: even
  EXPECT_EQ(F32ToF8E4M3(1.1875f), 0x3a);                // tie: odd rounds up
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(F8E4M3ToF32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  EXPECT_FALSE(std::isinf(F8E4M3ToF32(0x78)));  // 0x78 is 256, not infinity
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);
}

TEST(DType, F8E5M2ExactPatterns) {
  EXPECT_EQ(F32ToF8E5M2(1.0f), 0x3c);
  EXPECT_EQ(F32ToF8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(F32ToF8E5M2(61439.0f), 0x7b);
  EXPECT_EQ(F32ToF8E5M2(61440.0f), 0x7c);  // tie with the next power: odd 0x7b rounds up
  EXPECT_EQ(F32ToF8E5M2(1e9f), 0x7c);
  EXPECT_EQ(F32ToF8E5M2(-std::numeric_limits<float>::infinity()), 0xfc);
  EXPECT_EQ(F32ToF8E5M2(std::nanf("")), 0x7f);
  EXPECT_EQ(F32ToF8E5M2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(F32ToF8E5M2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(F8E5M2ToF32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(F8E5M2ToF32(0x7c)));
}

TEST(DType, F8RoundTripEveryPattern) {
  for (uint32_t b = 0; b < 256; ++b) {
    const uint8_t v = static_cast<uint8_t>(b);
    const float a = F8E4M3ToF32(v);
    if (!std::isnan(a)) {
      EXPECT_EQ(F32ToF8E4M3(a), v) << std::hex << b;
    }
    const float c = F8E5M2ToF32(v);
    if (!std::isnan(c)) {
      EXPECT_EQ(F32ToF8E5M2(c), v) << std::hex << b;
    }
  }
}

// Every f32 between two adjacent fp8 values rounds to the nearer one (ties to even).
TEST(DType, F8E4M3RoundsToNearest) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-464.0f, 464.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = dist(rng);
    const uint8_t q = F32ToF8E4M3(x);
    const float y = F8E4M3ToF32(q);
    ASSERT_FALSE(std::isnan(y)) << x;
    // No other finite e4m3 value is strictly closer.
    for (uint32_t b = 0; b < 256; ++b) {
      const float z = F8E4M3ToF32(static_cast<uint8_t>(b));
      if (std::isnan(z)) continue;
      ASSERT_LE(std::fabs(y - x), std::fabs(z - x)) << x << " -> " << y << " but " << z;
    }
  }
}

TEST(DType, PackedInt4) {
  EXPECT_EQ(PackI4(1, -1), 0xf1);
  EXPECT_EQ(PackI4(-8, 7), 0x78);
  for (int lo = -8; lo <= 7; ++lo) {
    for (int hi = -8; hi <= 7; ++hi) {
      const uint8_t b = PackI4(lo, hi);
      ASSERT_EQ(UnpackI4Low(b), lo);
      ASSERT_EQ(UnpackI4High(b), hi);
    }
  }
}

}  // namespace
}  // namespace kiln
