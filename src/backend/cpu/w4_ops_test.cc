// The CPU backend's W4A16 weights (cpu_ops.h WeightFormat::kW4): DecodeRows and Linear against
// a naive double-precision dequantization of the same codes, on shapes that are not multiples
// of the kernels' tiles, with and without an act-order permutation; and batch / thread
// invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_weights.h"
#include "core/dtype.h"

namespace kiln::cpu {
namespace {

struct W4Matrix {
  int64_t n = 0;
  int64_t k = 0;
  int group = 0;
  std::vector<int> codes;  // [n, k] in [-8, 7], stored column order
  OwnedWeight owned;
};

// Random codes, scales and zeros; packed by hand (element 2i low nibble).
W4Matrix MakeW4(int64_t n, int64_t k, int group, bool act_order, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(-8, 7);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  W4Matrix m;
  m.n = n;
  m.k = k;
  m.group = group;
  m.codes.resize(n * k);
  for (int& c : m.codes) c = code(rng);
  OwnedWeight& w = m.owned;
  w.format = WeightFormat::kW4;
  w.rows = n;
  w.cols = k;
  w.bytes.assign(n * k / 2, 0);
  for (int64_t i = 0; i < n * k; i += 2) w.bytes[i / 2] = PackI4(m.codes[i], m.codes[i + 1]);
  w.w4.group_size = group;
  for (int64_t i = 0; i < n * (k / group); ++i) {
    w.w4.scales.push_back(F32ToF16(scale(rng)));
    w.w4.zeros.push_back(static_cast<int8_t>(code(rng)));
  }
  if (act_order) {
    w.w4.perm.resize(k);
    std::iota(w.w4.perm.begin(), w.w4.perm.end(), 0);
    std::shuffle(w.w4.perm.begin(), w.w4.perm.end(), rng);
  }
  return m;
}

// The weight in input-channel order, in double.
std::vector<double> Reference(const W4Matrix& m) {
  std::vector<double> w(m.n * m.k);
  const int64_t groups = m.k / m.group;
  for (int64_t r = 0; r < m.n; ++r) {
    for (int64_t j = 0; j < m.k; ++j) {
      const double s = F16ToF32(m.owned.w4.scales[r * groups + j / m.group]);
      const double z = m.owned.w4.zeros[r * groups + j / m.group];
      const int64_t channel = m.owned.w4.perm.empty() ? j : m.owned.w4.perm[j];
      w[r * m.k + channel] = (m.codes[r * m.k + j] - z) * s;
    }
  }
  return w;
}

std::vector<float> RandomVector(int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = d(rng);
  return v;
}

struct Shape3 {
  int64_t n, k;
  int group;
  bool act_order;
};

class W4OpsTest : public ::testing::TestWithParam<Shape3> {};

TEST_P(W4OpsTest, DecodeRowsIsTheExactDequantization) {
  const Shape3 s = GetParam();
  const W4Matrix m = MakeW4(s.n, s.k, s.group, s.act_order, 7);
  const std::vector<double> ref = Reference(m);
  std::vector<float> out(s.n * s.k, -1.0f);
  DecodeRows(m.owned.view(), 0, s.n, out.data());
  for (int64_t i = 0; i < s.n * s.k; ++i) {
    // (code - zero) is an exact small integer, so its product with the fp16 scale rounds once.
    ASSERT_EQ(out[i], static_cast<float>(ref[i])) << "element " << i;
  }
  // A row range in the middle decodes the same rows.
  if (s.n > 3) {
    std::vector<float> mid(2 * s.k);
    DecodeRows(m.owned.view(), 1, 2, mid.data());
    EXPECT_TRUE(std::equal(mid.begin(), mid.end(), out.begin() + s.k));
  }
}

TEST_P(W4OpsTest, LinearMatchesTheDoubleReference) {
  const Shape3 s = GetParam();
  const W4Matrix m = MakeW4(s.n, s.k, s.group, s.act_order, 11);
  const std::vector<double> ref = Reference(m);
  const int64_t rows = 5;
  const std::vector<float> x = RandomVector(rows * s.k, 3);
  const std::vector<float> bias = RandomVector(s.n, 4);
  std::vector<float> y(rows * s.n);
  Linear(x.data(), s.k, rows, m.owned.view(), bias.data(), y.data(), s.n, false, 2);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < s.n; ++c) {
      double want = bias[c];
      double mag = 0;
      for (int64_t j = 0; j < s.k; ++j) {
        want += static_cast<double>(x[r * s.k + j]) * ref[c * s.k + j];
        mag += std::abs(static_cast<double>(x[r * s.k + j]) * ref[c * s.k + j]);
      }
      ASSERT_NEAR(y[r * s.n + c], want, 1e-5 * (mag + 1)) << "row " << r << " col " << c;
    }
  }
}

TEST_P(W4OpsTest, LinearIsBatchAndThreadInvariant) {
  const Shape3 s = GetParam();
  const W4Matrix m = MakeW4(s.n, s.k, s.group, s.act_order, 13);
  const int64_t rows = 9;
  const std::vector<float> x = RandomVector(rows * s.k, 5);
  std::vector<float> batched(rows * s.n);
  Linear(x.data(), s.k, rows, m.owned.view(), nullptr, batched.data(), s.n, false, 2);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> alone(s.n);
    Linear(x.data() + r * s.k, s.k, 1, m.owned.view(), nullptr, alone.data(), s.n, false, 1);
    ASSERT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + r * s.n)) << "row " << r;
  }
  // The same as the f32 weight that DecodeRows gives: the format changes no result.
  OwnedWeight f32{WeightFormat::kF32, s.n, s.k, {}, {}, {}};
  f32.bytes.resize(s.n * s.k * sizeof(float));
  DecodeRows(m.owned.view(), 0, s.n, reinterpret_cast<float*>(f32.bytes.data()));
  if (!s.act_order) {
    std::vector<float> y32(rows * s.n);
    Linear(x.data(), s.k, rows, f32.view(), nullptr, y32.data(), s.n, false, 2);
    EXPECT_EQ(y32, batched);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, W4OpsTest,
                         ::testing::Values(Shape3{1, 2, 2, false}, Shape3{19, 96, 32, false},
                                           Shape3{19, 96, 32, true}, Shape3{37, 576, 64, true},
                                           Shape3{33, 384, 128, false}, Shape3{17, 384, 128, true},
                                           Shape3{5, 30, 6, true}));

}  // namespace
}  // namespace kiln::cpu
