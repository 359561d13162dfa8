// The check shared by the linear-layer tests (kernels/gemv_test.cu, backend/cuda/gemm_test.cc):
// random operands of type T (bf16 or fp16), the launch under test, and the comparison with the
// CPU twin cpu::Linear on the same values widened to f32.
//
// Tolerance: both sums are fp32 over the same products (exact in fp32: 8 + 8, resp. 11 + 11
// significant bits), in different orders (e.g. the GEMV: per-lane strided partial sums, then a
// warp tree; the CPU: 16 lanes). Each order's error is within k * 2^-24 * sum|x * w| (the
// standard bound, far above typical), so fp32 outputs are compared within
// 2 * k * 2^-24 * sum|x*w| + 1e-6. bf16 / fp16 outputs additionally round once, by at most half
// an ulp: 2^-8 |y| in bf16 (8 significant bits), 2^-11 |y| in fp16 (11), added on top. The fp16
// bound is 8x tighter, so where k is small enough for the fp32 term not to dominate (k <= ~600
// here), an fp16 output rounded through bf16 (up to 2^-8 |y|) fails it. With bias_rounded_after
// (cuBLASLt's BIAS epilogue into a bf16 / fp16 output: it rounds x . w^T before adding the bias
// and rounds the sum again; measured on the H100 in bf16 at k = 576..584: about 2 % of
// outputs beyond the single rounding, the largest seen 1.28 ulps of y), half an ulp of x . w^T,
// 2^-8 resp. 2^-11 |y - bias|, is added as well.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "kernels/gemv.h"
#include "kernels/test_util.cuh"

namespace kiln::kernels {

struct LinearCase {
  int32_t m;
  int64_t n, k;
  int64_t ldx_pad = 0, ldo_pad = 0;  // extra elements per row
  bool bias = false;
  bool out_f32 = false;
  float x_scale = 1.0f;  // x's spread (CheckFp8Linear): normal values times this
};

// log2 of half an ulp of T relative to the value: the output rounding's bound.
template <typename T>
inline constexpr int kHalfUlpLog2 = std::is_same_v<T, __half> ? -11 : -8;

// Uploads random operands of type T for case c (normal values, seeded), runs launch(operands)
// (the operands as GemvArgsT holds them: out poisoned with NaN, row padding included) and
// expects out to match cpu::Linear within the tolerance above and the padding to be untouched.
template <typename T, typename Launch>
void CheckLinear(const LinearCase& c, uint32_t seed, Launch launch,
                 bool bias_rounded_after = false) {
  SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << " m=" << c.m << " n=" << c.n
                                  << " k=" << c.k << " ldx+=" << c.ldx_pad << " ldo+=" << c.ldo_pad
                                  << " bias=" << c.bias << " f32=" << c.out_f32);
  std::mt19937 rng(seed);
  const int64_t ldx = c.k + c.ldx_pad, ldo = c.n + c.ldo_pad;
  auto random = [&](size_t n) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> v(n);
    for (uint16_t& e : v) e = Format<T>::FromF32(dist(rng));
    return v;
  };
  auto widen = [](const std::vector<uint16_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = Format<T>::ToF32(v[i]);
    return f;
  };
  const std::vector<uint16_t> x = random(c.m * ldx), w = random(c.n * c.k), bias = random(c.n);
  const size_t out_elem = c.out_f32 ? 4 : 2, out_bytes = c.m * ldo * out_elem;

  // The output as bytes (T or fp32), poisoned with 0xff: NaN in every type, so an element never
  // written shows.
  Dev<uint16_t> dx(x.size()), dw(w.size()), db(bias.size());
  Dev<uint8_t> dout(out_bytes);
  dx.Upload(x);
  dw.Upload(w);
  db.Upload(bias);
  dout.Upload(std::vector<uint8_t>(out_bytes, 0xff));

  GemvArgsT<T> a;
  a.x = As<T>(dx.ptr);
  a.ldx = ldx;
  a.m = c.m;
  a.w = As<T>(dw.ptr);
  a.n = c.n;
  a.k = c.k;
  a.bias = c.bias ? As<T>(db.ptr) : nullptr;
  a.out = dout.ptr;
  a.ldo = ldo;
  a.out_f32 = c.out_f32;
  launch(a);
  if (testing::Test::HasFatalFailure()) return;
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out = dout.Download(out_bytes);

  const std::vector<float> xf = widen(x), wf = widen(w), bf = widen(bias);
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
        got = Format<T>::ToF32(reinterpret_cast<const uint16_t*>(out.data())[at]);
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
      if (!c.out_f32) {
        tol += std::ldexp(std::fabs(ref), kHalfUlpLog2<T>);
        if (c.bias && bias_rounded_after)
          tol += std::ldexp(std::fabs(ref - bf[n]), kHalfUlpLog2<T>);
      }
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "out[" << m << ", " << n << "] = " << got << ", CPU " << ref
                      << ", tolerance " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace kiln::kernels
