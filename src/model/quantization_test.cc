// The quantization names and the FP8 row arithmetic of model/quantization.h.
#include "model/quantization.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kiln {
namespace {

TEST(QuantizationTest, ParsesMethodsAndRejectsOthersNamingTheChoices) {
  EXPECT_EQ(*ParseQuantMethod("none"), QuantMethod::kNone);
  EXPECT_EQ(*ParseQuantMethod("fp8"), QuantMethod::kFp8);
  for (const char* bad : {"", "FP8", "int8-sq", "w4a16", "fp8 "}) {
    auto parsed = ParseQuantMethod(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("none or fp8"), std::string::npos);
    EXPECT_NE(parsed.status().message().find("kiln build"), std::string::npos);
  }
  EXPECT_EQ(QuantMethodName(QuantMethod::kNone), "none");
  EXPECT_EQ(QuantMethodName(QuantMethod::kFp8), "fp8");
}

TEST(QuantizationTest, ParsesKvCacheDTypes) {
  EXPECT_EQ(*ParseKvCacheDType("auto"), KvCacheDType::kAuto);
  EXPECT_EQ(*ParseKvCacheDType("fp8"), KvCacheDType::kFp8E4M3);
  EXPECT_EQ(*ParseKvCacheDType("fp8_e4m3"), KvCacheDType::kFp8E4M3);
  for (const char* bad : {"", "fp8_e5m2", "bf16", "int8"}) {
    auto parsed = ParseKvCacheDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("auto, fp8 or fp8_e4m3"), std::string::npos);
  }
  EXPECT_EQ(KvCacheDTypeName(KvCacheDType::kAuto), "auto");
  EXPECT_EQ(KvCacheDTypeName(KvCacheDType::kFp8E4M3), "fp8_e4m3");
}

TEST(QuantizationTest, RowScaleMapsTheAmaxTo448AndHasAFloor) {
  EXPECT_EQ(Fp8RowScale(448.0f), 1.0f);
  EXPECT_EQ(Fp8RowScale(896.0f), 2.0f);
  EXPECT_EQ(Fp8RowScale(3.5f), 3.5f / 448.0f);
  EXPECT_EQ(Fp8RowScale(0.0f), kFp8MinScale);
  EXPECT_EQ(Fp8RowScale(1e-9f), kFp8MinScale);
  EXPECT_EQ(kFp8MinScale, 1.0f / 229376.0f);
}

// Half an e4m3 ulp: 3 mantissa bits, so 2^-4 of the value's power of two in the normal range
// (|x / s| >= 2^-6), and half the subnormal step 2^-9 below it, times the scale.
TEST(QuantizationTest, QuantizeThenDequantizeIsWithinHalfAnUlp) {
  std::mt19937 rng(11);
  for (int64_t n : {1, 7, 83, 769}) {
    for (float stddev : {1e-3f, 1.0f, 300.0f}) {
      std::normal_distribution<float> dist(0.0f, stddev);
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      if (n > 2) x[n / 2] = 0.0f;
      std::vector<uint8_t> q(n);
      const float s = QuantizeRowFp8(x.data(), n, q.data());
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::abs(v));
      EXPECT_EQ(s, Fp8RowScale(amax));
      for (int64_t k = 0; k < n; ++k) {
        const float y = F8E4M3ToF32(q[k]);
        ASSERT_FALSE(std::isnan(y)) << "code " << int{q[k]} << " never saturates";
        EXPECT_LE(std::abs(y), kFp8E4M3Max);
        const double scaled = static_cast<double>(x[k]) / s;
        const double err = std::abs(static_cast<double>(y) - scaled);
        const double bound =
            std::abs(scaled) >= 1.0 / 64 ? std::ldexp(std::abs(scaled), -4) : std::ldexp(1.0, -10);
        // 1e-6 relative: x / s rounds once in fp32 before the e4m3 rounding.
        EXPECT_LE(err, bound * (1 + 1e-6) + 1e-7 * std::abs(scaled))
            << "n " << n << " k " << k << " x " << x[k] << " code " << int{q[k]};
        EXPECT_EQ(q[k], F32ToF8E4M3(x[k] / s));
      }
      // The row's largest element lands on e4m3's largest value, unless the row is so small
      // (amax < 448 * kFp8MinScale = 1/512) that the scale's floor holds it.
      for (int64_t k = 0; k < n; ++k) {
        if (std::abs(x[k]) == amax && s > kFp8MinScale) {
          EXPECT_EQ(std::abs(F8E4M3ToF32(q[k])), 448.0f);
        }
      }
    }
  }
}

// QuantizeRowFp8 converts with its own branchless routine: it must give F32ToF8E4M3's code for
// every value it can meet, |x / s| <= 448. A row whose largest value is 448 has scale exactly 1,
// so x / s = x.
TEST(QuantizationTest, QuantizeRowCodesAreF32ToF8E4M3ForEveryValue) {
  std::vector<float> values;
  for (int code = 0; code < 0x7f; ++code) {
    const float v = F8E4M3ToF32(static_cast<uint8_t>(code));
    const float next = code + 1 < 0x7f ? F8E4M3ToF32(static_cast<uint8_t>(code + 1)) : 480.0f;
    const float mid = (v + next) / 2;  // exact: both have few significant bits
    for (float c : {v, mid}) {
      for (float x : {c, std::nextafter(c, 0.0f), std::nextafter(c, 1e9f)}) {
        if (x <= 448.0f) values.push_back(x);
      }
    }
  }
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0x43e00000u);  // every f32 in [0, 448]
  for (int i = 0; i < 1000000; ++i) values.push_back(F32FromBits(bits(rng)));
  values.push_back(1e-30f);
  values.push_back(0.0f);
  std::vector<float> row;
  for (float v : values) {
    row.push_back(v);
    row.push_back(-v);
  }
  row.push_back(448.0f);
  std::vector<uint8_t> q(row.size());
  ASSERT_EQ(QuantizeRowFp8(row.data(), static_cast<int64_t>(row.size()), q.data()), 1.0f);
  int mismatches = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (q[i] != F32ToF8E4M3(row[i]) && ++mismatches <= 5) {
      ADD_FAILURE() << "x = " << row[i] << " (bits 0x" << std::hex << F32Bits(row[i])
                    << "): code 0x" << int{q[i]} << ", F32ToF8E4M3 0x" << int{F32ToF8E4M3(row[i])};
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(QuantizationTest, AllZeroRowHasTheFloorScaleAndZeroCodes) {
  std::vector<float> x(37, 0.0f);
  x[3] = -0.0f;
  std::vector<uint8_t> q(37, 0xAA);
  EXPECT_EQ(QuantizeRowFp8(x.data(), 37, q.data()), kFp8MinScale);
  for (int k = 0; k < 37; ++k) EXPECT_EQ(F8E4M3ToF32(q[k]), 0.0f) << k;
}

TEST(QuantizationTest, Int8RowMapsTheAmaxTo127AndRoundsToNearestEven) {
  // amax 127: scale exactly 1, so the codes are the values rounded, ties to even.
  const std::vector<float> x = {127.0f, 2.5f, -0.5f, 1.5f, -126.6f, 3.49f, -127.0f, 0.0f};
  std::vector<int8_t> q(x.size());
  EXPECT_EQ(QuantizeRowInt8(x.data(), x.size(), q.data()), 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 2, 0, 2, -127, 3, -127, 0}));
  // An all-zero row: the floor scale (a normal float), codes 0.
  std::vector<float> zeros(9, 0.0f);
  std::vector<int8_t> qz(9, 5);
  EXPECT_EQ(QuantizeRowInt8(zeros.data(), 9, qz.data()), kInt8MinScale);
  EXPECT_EQ(qz, std::vector<int8_t>(9, 0));
  EXPECT_EQ(Int8RowScale(254.0f), 2.0f);
}

TEST(QuantizationTest, Int8QuantizeThenDequantizeIsWithinHalfAStep) {
  std::mt19937 rng(5);
  for (float magnitude : {1e-3f, 1.0f, 300.0f}) {
    std::normal_distribution<float> dist(0.0f, magnitude);
    for (int n : {1, 7, 769}) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      std::vector<int8_t> q(n);
      const float s = QuantizeRowInt8(x.data(), n, q.data());
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::abs(v));
      EXPECT_EQ(s, amax / 127.0f);
      bool hit = false;
      for (int k = 0; k < n; ++k) {
        ASSERT_LE(std::abs(q[k]), 127);
        // half a step, plus the fp32 quotient's rounding (<= 128 ulps of 2^-24 relative)
        EXPECT_LE(std::abs(static_cast<double>(q[k]) * s - x[k]), s * (0.5 + 1e-5)) << k;
        hit |= std::abs(q[k]) == 127;
      }
      EXPECT_TRUE(hit) << "the amax element lands on +-127";
    }
  }
}

TEST(QuantizationTest, KvEncodeDividesAndSaturates) {
  EXPECT_EQ(F8E4M3ToF32(Fp8KvEncode(3.0f, 1.0f)), 3.0f);
  EXPECT_EQ(F8E4M3ToF32(Fp8KvEncode(3.0f, 0.5f)), 6.0f);
  EXPECT_EQ(F8E4M3ToF32(Fp8KvEncode(1000.0f, 1.0f)), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(Fp8KvEncode(-1e30f, 1.0f)), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(Fp8KvEncode(0.3f, 1.0f)), F8E4M3ToF32(F32ToF8E4M3(0.3f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(Fp8KvEncode(NAN, 1.0f))));
}

// The static (calibrated) scale: the same codes as the KV cache's encoding, element by
// element, over values inside, at and past the scale's range, including subnormal quotients.
TEST(QuantizationTest, StaticRowIsFp8KvEncodeAndSaturates) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-3000.0f, 3000.0f);
  std::vector<float> row = {0.0f, 448.0f * 0.5f, 448.1f * 0.5f, -1e30f, 1e-9f, 3e-3f, -0.007f};
  for (int i = 0; i < 100000; ++i) row.push_back(wide(rng) * (i % 3 == 0 ? 1e-4f : 1.0f));
  for (float scale : {0.5f, 1.0f, 3.7f, kFp8MinScale}) {
    std::vector<uint8_t> q(row.size());
    QuantizeRowFp8Static(row.data(), static_cast<int64_t>(row.size()), scale, q.data());
    int saturated = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      ASSERT_EQ(q[i], Fp8KvEncode(row[i], scale)) << "x = " << row[i] << " scale " << scale;
      saturated += std::abs(row[i] / scale) > kFp8E4M3Max;
      if (std::abs(row[i] / scale) >= kFp8E4M3Max) {
        ASSERT_EQ(std::abs(F8E4M3ToF32(q[i])), kFp8E4M3Max) << row[i];
      }
    }
    EXPECT_GT(saturated, 0) << scale;
  }
}

}  // namespace
}  // namespace kiln
