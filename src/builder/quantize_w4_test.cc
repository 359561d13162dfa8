#include "builder/quantize_w4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/synth.h"
#include "builder/test_util.h"
#include "model/test_util.h"

namespace kiln {
namespace {

std::vector<float> Normal(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Dequantizes codes + params into [n, k] in input-channel order.
std::vector<double> Dequant(const internal::W4Codes& q, int64_t n, int64_t k) {
  const int64_t groups = k / q.params.group_size;
  std::vector<double> w(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t g = r * groups + j / q.params.group_size;
      const int64_t ch = q.params.perm.empty() ? j : q.params.perm[j];
      w[r * k + ch] =
          (q.codes[r * k + j] - q.params.zeros[g]) * double{F16ToF32(q.params.scales[g])};
    }
  }
  return w;
}

// ||x (w - wq)^T||^2 for x [m, k].
double OutputError(const std::vector<float>& x, int64_t m, const std::vector<float>& w,
                   const std::vector<double>& wq, int64_t n, int64_t k) {
  double e = 0;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double d = 0;
      for (int64_t c = 0; c < k; ++c) d += x[t * k + c] * (w[r * k + c] - wq[r * k + c]);
      e += d * d;
    }
  }
  return e;
}

TEST(QuantizeW4Test, UpperCholeskyOfInverse) {
  const int64_t k = 37;
  const std::vector<float> x = Normal(80 * k, 1);
  std::vector<double> a(k * k, 0.0);
  for (int64_t t = 0; t < 80; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) a[i * k + j] += double{x[t * k + i]} * x[t * k + j];
    }
  }
  std::vector<double> u = a;
  ASSERT_TRUE(internal::UpperCholeskyOfInverse(u, k));
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_GT(u[i * k + i], 0);
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ(u[i * k + j], 0) << i << "," << j;
  }
  // U^T U a = I.
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double utu = 0;
        for (int64_t q = 0; q < k; ++q) utu += u[q * k + i] * u[q * k + p];
        s += utu * a[p * k + j];
      }
      EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-8) << i << "," << j;
    }
  }
  std::vector<double> indefinite(k * k, 0.0);
  indefinite[0] = -1;
  EXPECT_FALSE(internal::UpperCholeskyOfInverse(indefinite, k));
}

TEST(QuantizeW4Test, RtnRoundsEachValueWithinHalfAStep) {
  const int64_t n = 7, k = 96;
  const std::vector<float> w = Normal(n * k, 2, 0.05f);
  const internal::W4Codes q = internal::Rtn(w.data(), n, k, 32);
  ASSERT_EQ(q.params.scales.size(), static_cast<size_t>(n * 3));
  const std::vector<double> d = Dequant(q, n, k);
  for (int64_t i = 0; i < n * k; ++i) {
    const double s = F16ToF32(q.params.scales[(i / k) * 3 + (i % k) / 32]);
    EXPECT_LE(std::abs(d[i] - w[i]), 0.5 * s * 1.01 + 1e-6) << i;
    EXPECT_GE(q.codes[i], -8);
    EXPECT_LE(q.codes[i], 7);
  }
  for (int8_t z : q.params.zeros) {
    EXPECT_GE(z, -8);
    EXPECT_LE(z, 7);
  }
}

// m rows of k correlated, unevenly scaled inputs: shared factors, and every 16th channel an
// outlier.
std::vector<float> CorrelatedInputs(int64_t m, int64_t k) {
  const std::vector<float> x = Normal(m * k, 3);
  const std::vector<float> mix = Normal(k * k, 4, 0.2f);
  std::vector<float> xc(m * k, 0.0f);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t c = 0; c < k; ++c) {
      float s = x[t * k + c];
      for (int64_t p = 0; p < 8; ++p) s += mix[c * k + p] * x[t * k + p];
      xc[t * k + c] = s * (c % 16 == 0 ? 8.0f : 1.0f);
    }
  }
  return xc;
}

// GPTQ's H = 2 X^T X of x [m, k].
std::vector<double> Hessian(const std::vector<float>& x, int64_t m, int64_t k) {
  std::vector<double> h(k * k, 0.0);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) h[i * k + j] += 2.0 * x[t * k + i] * x[t * k + j];
    }
  }
  return h;
}

// GPTQ minimizes the layer's output error on its calibration inputs: with correlated, unevenly
// scaled inputs it must beat RTN clearly, with and without act-order.
TEST(QuantizeW4Test, GptqBeatsRtnOnTheCalibrationOutputs) {
  const int64_t n = 24, k = 128, m = 512;
  const std::vector<float> xc = CorrelatedInputs(m, k);
  const std::vector<float> w = Normal(n * k, 5, 0.05f);
  const std::vector<double> h = Hessian(xc, m, k);
  const double rtn = OutputError(xc, m, w, Dequant(internal::Rtn(w.data(), n, k, 32), n, k), n, k);
  for (bool act_order : {false, true}) {
    std::vector<float> wg = w;
    const internal::W4Codes q = internal::Gptq(wg, n, k, h, 32, act_order, 0.01, 2);
    ASSERT_EQ(q.params.perm.size(), act_order ? static_cast<size_t>(k) : 0u);
    const double gptq = OutputError(xc, m, w, Dequant(q, n, k), n, k);
    EXPECT_LT(gptq, 0.8 * rtn) << "act_order " << act_order << ": gptq " << gptq << " rtn " << rtn;
  }
}

// The FP8 variant (GptqFp8): codes in input-channel order, row scales of the original rows,
// every value within e4m3's range; with a diagonal Hessian no error feeds into other columns,
// so it is round to nearest exactly (act-order's permutation undone); with correlated inputs
// it beats round to nearest on the calibration outputs.
TEST(QuantizeW4Test, GptqFp8IsNearestWithADiagonalHessianAndBeatsItOtherwise) {
  const int64_t n = 24, k = 128, m = 512;
  const std::vector<float> w = Normal(n * k, 5, 0.05f);
  std::vector<uint8_t> nearest(n * k);
  std::vector<float> nearest_scales(n);
  for (int64_t r = 0; r < n; ++r) {
    nearest_scales[r] = QuantizeRowFp8(w.data() + r * k, k, nearest.data() + r * k);
  }
  auto dequant = [&](const std::vector<uint8_t>& codes, const std::vector<float>& scales) {
    std::vector<double> d(n * k);
    for (int64_t i = 0; i < n * k; ++i) d[i] = double{F8E4M3ToF32(codes[i])} * scales[i / k];
    return d;
  };
  std::vector<double> diagonal(k * k, 0.0);
  for (int64_t i = 0; i < k; ++i) diagonal[i * k + i] = 1.0 + (i * 37 % 11);
  for (bool act_order : {false, true}) {
    std::vector<float> wg = w;
    const internal::Fp8Codes q = internal::GptqFp8(wg, n, k, diagonal, act_order, 0.01, 2);
    EXPECT_EQ(q.row_scales, nearest_scales);
    EXPECT_EQ(q.codes, nearest) << "act_order " << act_order;
  }

  const std::vector<float> xc = CorrelatedInputs(m, k);
  const std::vector<double> h = Hessian(xc, m, k);
  const double rtn = OutputError(xc, m, w, dequant(nearest, nearest_scales), n, k);
  for (bool act_order : {false, true}) {
    std::vector<float> wg = w;
    const internal::Fp8Codes q = internal::GptqFp8(wg, n, k, h, act_order, 0.01, 2);
    EXPECT_EQ(q.row_scales, nearest_scales);
    for (uint8_t c : q.codes) ASSERT_LE(c & 0x7f, 0x7e) << "NaN code";
    const double gptq = OutputError(xc, m, w, dequant(q.codes, q.row_scales), n, k);
    std::printf("fp8 output error, act_order %d: gptq %.4g, nearest %.4g\n", act_order, gptq, rtn);
    EXPECT_LT(gptq, 0.8 * rtn) << "act_order " << act_order;
  }
}

class QuantizeW4ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions o;
    o.output_dir = dir_.path();
    o.dtype = DType::kF16;
    o.seed = 3;
    ModelConfig config = testing::TinyLlamaConfig();
    config.vocab_size = 320;  // the synthetic tokenizer's bytes and specials
    const Status written = WriteSyntheticCheckpoint(config, o);
    ASSERT_TRUE(written.ok()) << written.ToString();
    auto ckpt = Checkpoint::Open(dir_.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ckpt_ = std::make_unique<Checkpoint>(std::move(ckpt).value());
    for (uint32_t s = 0; s < 4; ++s) calib_.push_back(testing::RandomTokenIds(40, s, 319));
  }
  testing::ScopedTempDir dir_{"quantize_w4"};
  std::unique_ptr<Checkpoint> ckpt_;
  std::vector<std::vector<int32_t>> calib_;
};

TEST_F(QuantizeW4ModelTest, EveryAlgorithmQuantizesEveryLinearWeight) {
  for (W4Algorithm a : {W4Algorithm::kRtn, W4Algorithm::kAwq, W4Algorithm::kGptq}) {
    W4Options o;
    o.algorithm = a;
    o.group_size = 32;
    o.awq_sample_rows = 64;
    auto q = QuantizeW4(*ckpt_, o, calib_);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    int linear = 0, norms = 0;
    for (const QuantizedTensor& t : q->tensors) {
      const Weight* src = ckpt_->Find(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      EXPECT_EQ(t.shape, src->shape) << t.name;
      if (t.dtype == DType::kI4) {
        ++linear;
        ASSERT_TRUE(t.w4.has_value());
        EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.shape.numel() / 2));
        EXPECT_EQ(t.w4->scales.size(), static_cast<size_t>(t.shape[0] * t.shape[1] / 32));
        EXPECT_EQ(t.w4->perm.empty(), a != W4Algorithm::kGptq) << t.name;
      } else {
        ++norms;
        EXPECT_EQ(t.dtype, DType::kF32);
        EXPECT_TRUE(t.name.ends_with("layernorm.weight")) << t.name;
      }
    }
    EXPECT_EQ(linear, 7 * 2) << W4AlgorithmName(a);
    EXPECT_EQ(norms, a == W4Algorithm::kAwq ? 4 : 0) << W4AlgorithmName(a);
  }
}

// FP8 GPTQ of a whole model: every linear weight e4m3 with row scales, static input scales
// when asked (the calibrated maximum of the site's input), no calibration refused.
TEST_F(QuantizeW4ModelTest, Fp8GptqQuantizesEveryLinearWeight) {
  Fp8GptqOptions o;
  o.static_activations = true;
  auto q = QuantizeFp8Gptq(*ckpt_, o, calib_);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->method, QuantMethod::kFp8);
  ASSERT_EQ(q->tensors.size(), 7u * 2u);
  for (const QuantizedTensor& t : q->tensors) {
    EXPECT_EQ(t.dtype, DType::kF8E4M3) << t.name;
    EXPECT_EQ(t.shape, ckpt_->Find(t.name)->shape) << t.name;
    EXPECT_EQ(t.row_scales.size(), static_cast<size_t>(t.shape[0])) << t.name;
    EXPECT_GT(t.input_scale, kFp8MinScale) << t.name;
  }
  EXPECT_EQ(q->Find("model.layers.1.self_attn.q_proj.weight")->input_scale,
            q->Find("model.layers.1.self_attn.v_proj.weight")->input_scale);
  EXPECT_EQ(QuantizeFp8Gptq(*ckpt_, o, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(QuantizeW4ModelTest, RejectsAGroupSizeThatDoesNotDivideTheInput) {
  W4Options o;
  o.group_size = 64;  // intermediate 96
  auto q = QuantizeW4(*ckpt_, o, calib_);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("mlp.down_proj.weight"), std::string::npos)
      << q.status().ToString();
  o.algorithm = W4Algorithm::kGptq;
  o.group_size = 32;
  auto no_calib = QuantizeW4(*ckpt_, o, {});
  EXPECT_EQ(no_calib.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
