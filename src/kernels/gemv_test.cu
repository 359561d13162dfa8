// kernels::Gemv against its CPU twin cpu::Linear (bf16 values widened to f32, label gpu).
//
// Tolerance: both sums are fp32 over the same bf16 products, in different orders (the GPU:
// per-lane strided partial sums, then a warp tree; the CPU: 16 lanes). Each order's error is
// within k * 2^-24 * sum|x * w| (the standard bound, far above typical), so fp32 outputs are
// compared within 2 * k * 2^-24 * sum|x*w| + 1e-6; bf16 outputs additionally round once
// (half an ulp, 2^-9 relative), where a sum near a rounding boundary can land one bf16 ulp
// away, so they get one ulp (2^-8 |y|) on top.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "kernels/gemv.h"
#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = F32ToBF16(dist(rng));
  return v;
}

std::vector<float> Widen(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = BF16ToF32(v[i]);
  return f;
}

struct Case {
  int32_t m;
  int64_t n, k;
  int64_t ldx_pad = 0, ldo_pad = 0;  // extra elements per row
  bool bias = false;
  bool out_f32 = false;
};

void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k
                                  << " ldx+=" << c.ldx_pad << " ldo+=" << c.ldo_pad
                                  << " bias=" << c.bias << " f32=" << c.out_f32);
  std::mt19937 rng(seed);
  const int64_t ldx = c.k + c.ldx_pad, ldo = c.n + c.ldo_pad;
  const std::vector<uint16_t> x = RandomBf16(c.m * ldx, rng), w = RandomBf16(c.n * c.k, rng);
  const std::vector<uint16_t> bias = RandomBf16(c.n, rng);
  const size_t out_elem = c.out_f32 ? 4 : 2, out_bytes = c.m * ldo * out_elem;

  // The output as bytes (bf16 or fp32), poisoned with 0xff: NaN in both types, so an element
  // never written shows.
  Dev<uint16_t> dx(x.size()), dw(w.size()), db(bias.size());
  Dev<uint8_t> dout(out_bytes);
  dx.Upload(x);
  dw.Upload(w);
  db.Upload(bias);
  dout.Upload(std::vector<uint8_t>(out_bytes, 0xff));

  GemvArgs a;
  a.x = AsBf16(dx.ptr);
  a.ldx = ldx;
  a.m = c.m;
  a.w = AsBf16(dw.ptr);
  a.n = c.n;
  a.k = c.k;
  a.bias = c.bias ? AsBf16(db.ptr) : nullptr;
  a.out = dout.ptr;
  a.ldo = ldo;
  a.out_f32 = c.out_f32;
  ASSERT_TRUE(GemvSupported(a));
  CUDA_OK(Gemv(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out = dout.Download(out_bytes);

  const std::vector<float> xf = Widen(x), wf = Widen(w), bf = Widen(bias);
  std::vector<float> want(c.m * c.n);
  cpu::WeightView view{cpu::WeightFormat::kF32, c.n, c.k,
                       reinterpret_cast<const uint8_t*>(wf.data())};
  cpu::Linear(xf.data(), ldx, c.m, view, c.bias ? bf.data() : nullptr, want.data(), c.n, false, 1);

  int64_t bad = 0;
  for (int32_t m = 0; m < c.m; ++m) {
    for (int64_t n = 0; n < ldo; ++n) {
      const size_t at = m * ldo + n;
      float got;
      if (c.out_f32) {
        got = reinterpret_cast<const float*>(out.data())[at];
      } else {
        got = BF16ToF32(reinterpret_cast<const uint16_t*>(out.data())[at]);
      }
      if (n >= c.n) {  // row padding: never written
        if (!std::isnan(got) && bad++ < 5)
          ADD_FAILURE() << "padding written at m=" << m << " n=" << n;
        continue;
      }
      double magnitude = c.bias ? std::fabs(bf[n]) : 0.0;
      for (int64_t k = 0; k < c.k; ++k) magnitude += std::fabs(xf[m * ldx + k] * wf[n * c.k + k]);
      const float ref = want[m * c.n + n];
      double tol = 2.0 * c.k * std::ldexp(1.0, -24) * magnitude + 1e-6;
      if (!c.out_f32) tol += std::ldexp(std::fabs(ref), -8);
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "out[" << m << ", " << n << "] = " << got << ", CPU " << ref
                      << ", tolerance " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Gemv, MatchesCpuLinearOnOddShapes) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (int32_t m = 1; m <= kGemvMaxRows; ++m) {
    for (int64_t n : {1, 7, 83, 769, 5125}) {
      for (int64_t k : {8, 576, 584, 4096}) RunCase({m, n, k}, seed++);
    }
  }
}

TEST(Gemv, StridesBiasAndFp32Output) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (int32_t m : {1, 3, 8}) {
    RunCase({m, 769, 584, /*ldx_pad=*/24, /*ldo_pad=*/5, /*bias=*/true, /*out_f32=*/false}, seed++);
    RunCase({m, 83, 4096, 8, 1, false, true}, seed++);
    RunCase({m, 5125, 14336, 0, 3, true, true}, seed++);
    // lm_head-like: many columns, fp32 logits.
    RunCase({m, 49152, 576, 0, 0, false, true}, seed++);
  }
}

TEST(Gemv, RejectsOperandsItCannotLoad) {
  GemvArgs a;
  a.m = 1;
  a.n = 16;
  a.k = 12;  // not a multiple of 8
  a.ldx = 16;
  alignas(16) static const __nv_bfloat16 buffer[64] = {};
  a.x = buffer;
  a.w = buffer;
  EXPECT_FALSE(GemvSupported(a));
  a.k = 16;
  EXPECT_TRUE(GemvSupported(a));
  a.x = buffer + 1;  // not 16-byte aligned
  EXPECT_FALSE(GemvSupported(a));
  a.x = buffer;
  a.m = kGemvMaxRows + 1;
  EXPECT_FALSE(GemvSupported(a));
  EXPECT_EQ(Gemv(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kiln::kernels
