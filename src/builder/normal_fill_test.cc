#include "builder/normal_fill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln {
namespace {

std::vector<uint16_t> Bf16(uint64_t key, int64_t first, int64_t count, float stddev = 0.02f) {
  std::vector<uint16_t> v(count);
  FillNormal(key, first, count, stddev, DType::kBF16, v.data());
  return v;
}

TEST(NormalFill, AnyChunkingGivesTheSameValues) {
  const uint64_t key = TensorStreamKey(7, "model.layers.0.mlp.up_proj.weight");
  const int64_t n = 100001;  // odd, so chunks start and end mid-pair
  const std::vector<uint16_t> whole = Bf16(key, 0, n);
  std::vector<uint16_t> pieces(n);
  const int64_t steps[] = {1, 2, 3, 4096, 7777, 1, 12345};  // cycled through
  for (int64_t first = 0, k = 0; first < n; ++k) {
    const int64_t count = std::min(steps[k % 7], n - first);
    FillNormal(key, first, count, 0.02f, DType::kBF16, pieces.data() + first);
    first += count;
  }
  EXPECT_EQ(whole, pieces);
  // A range taken alone equals the same range of the whole.
  EXPECT_EQ(Bf16(key, 333, 1000), std::vector<uint16_t>(whole.begin() + 333, whole.begin() + 1333));
}

TEST(NormalFill, PinnedValues) {
  // These bits define the checkpoints `kiln synth` writes; a change here changes every
  // synthetic checkpoint, so it must be deliberate.
  const std::vector<uint16_t> v = Bf16(TensorStreamKey(0, "model.embed_tokens.weight"), 0, 4);
  const std::vector<uint16_t> expected = {0x3be3, 0x3d35, 0x3c34, 0xbcc2};
  EXPECT_EQ(v, expected);
}

TEST(NormalFill, Bf16StatisticsMatchNormal) {
  const int64_t n = 1 << 20;
  const float stddev = 0.02f;
  const std::vector<uint16_t> v = Bf16(TensorStreamKey(3, "w"), 0, n, stddev);
  double sum = 0;
  double sum2 = 0;
  double max_abs = 0;
  int64_t within_1sd = 0;
  for (uint16_t b : v) {
    const double x = BF16ToF32(b);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum2 += x * x;
    max_abs = std::max(max_abs, std::abs(x));
    within_1sd += std::abs(x) < stddev;
  }
  const double mean = sum / n;
  const double sd = std::sqrt(sum2 / n - mean * mean);
  // Standard errors on 1M samples: mean 0.02/1024 = 2e-5, std 0.02/sqrt(2M) = 1.4e-5.
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(sd, stddev, 1e-4);
  EXPECT_NEAR(static_cast<double>(within_1sd) / n, 0.6827, 0.003);
  EXPECT_LT(max_abs, 5.8 * stddev);  // tails cut at sqrt(48 ln 2) sigma
  EXPECT_GT(max_abs, 4.0 * stddev);
}

TEST(NormalFill, StreamsDifferBySeedAndName) {
  const int64_t n = 1 << 16;
  const std::vector<uint16_t> a = Bf16(TensorStreamKey(0, "a"), 0, n);
  const std::vector<uint16_t> b = Bf16(TensorStreamKey(1, "a"), 0, n);
  const std::vector<uint16_t> c = Bf16(TensorStreamKey(0, "b"), 0, n);
  double ab = 0;
  double ac = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += BF16ToF32(a[i]) * BF16ToF32(b[i]);
    ac += BF16ToF32(a[i]) * BF16ToF32(c[i]);
  }
  // Correlation of independent streams: ~N(0, 1/sqrt(n)) = 0.004.
  EXPECT_LT(std::abs(ab / n / (0.02 * 0.02)), 0.02);
  EXPECT_LT(std::abs(ac / n / (0.02 * 0.02)), 0.02);
  EXPECT_NE(TensorStreamKey(0, "a"), TensorStreamKey(0, "b"));
}

TEST(NormalFill, F16AndF32AgreeWithBf16) {
  const uint64_t key = TensorStreamKey(5, "x");
  std::vector<float> f32(1000);
  std::vector<uint16_t> f16(1000);
  FillNormal(key, 10, 1000, 0.02f, DType::kF32, f32.data());
  FillNormal(key, 10, 1000, 0.02f, DType::kF16, f16.data());
  const std::vector<uint16_t> bf16 = Bf16(key, 10, 1000);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(f16[i], F32ToF16(f32[i]));
    EXPECT_EQ(bf16[i], F32ToBF16(f32[i]));
  }
}

TEST(NormalFill, Constant) {
  std::vector<uint16_t> v(5);
  FillConstant(1.0f, 5, DType::kBF16, v.data());
  EXPECT_EQ(v, std::vector<uint16_t>(5, 0x3f80));
  FillConstant(1.0f, 5, DType::kF16, v.data());
  EXPECT_EQ(v, std::vector<uint16_t>(5, 0x3c00));
}

}  // namespace
}  // namespace kiln
