// The check shared by the FP8 linear-layer tests (kernels/quant_test.cu, backend/cuda/
// gemm_test.cc): random activations of type T (bf16 or fp16) and a random weight quantized per
// output channel on the host exactly as model/quantization.h says, the launch under test, and the
// comparison with that header's formula computed on the host in double:
//   W8A16 (GEMV rows): out = (sum_k x * wq) * sw (+ bias)
//   W8A8 (GEMM rows):  out = (sum_k xq * wq) * sx * sw (+ bias), xq, sx quantized on the host
//
// Tolerance: the products are exact in fp32 (e4m3 has 4 significant bits, bf16 8, fp16 11), so
// the GEMV's error is the fp32 sum's (2 k 2^-24 sum|x wq| sw, as linear_test_util.cuh). Hopper's
// FP8 tensor cores add products at reduced precision inside each k-chunk before cuBLASLt
// promotes the chunk to fp32, so the W8A8 bound is relative to the magnitude sum at 2^-12 (about
// 13 significant bits of the accumulator), plus half a bf16 ulp of the sum: the GEMM writes its
// unscaled sums in bf16 before kernels::ApplyFp8Scales scales them. Either output then rounds
// once to T (half an ulp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/linear_test_util.cuh"
#include "kernels/test_util.cuh"
#include "model/quantization.h"

namespace kiln::kernels {

// Row-wise host quantization (model/quantization.h): codes [rows, cols] and scales [rows].
inline void QuantizeRowsOnHost(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld,
                               std::vector<uint8_t>* codes, std::vector<float>* scales) {
  codes->assign(rows * cols, 0);
  scales->assign(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(v[r * ld + c]));
    const float s = Fp8RowScale(amax);
    (*scales)[r] = s;
    for (int64_t c = 0; c < cols; ++c) (*codes)[r * cols + c] = F32ToF8E4M3(v[r * ld + c] / s);
  }
}

struct Fp8Operands {
  const void* x;  // T [m, ldx]
  int64_t ldx;
  int32_t m;
  const __nv_fp8_e4m3* w;  // [n, k]
  const float* w_scale;    // [n]
  int64_t n, k;
  const void* bias;  // T [n] or null
  void* out;         // T or fp32 [m, ldo]
  int64_t ldo;
  bool out_f32;
};

// launch(Fp8Operands) runs the layer; w8a8 picks the reference formula.
template <typename T, typename Launch>
void CheckFp8Linear(const LinearCase& c, uint32_t seed, bool w8a8, Launch launch) {
  SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << (w8a8 ? " W8A8" : " W8A16")
                                  << " m=" << c.m << " n=" << c.n << " k=" << c.k << " ldx+="
                                  << c.ldx_pad << " ldo+=" << c.ldo_pad << " bias=" << c.bias
                                  << " f32=" << c.out_f32 << " x_scale=" << c.x_scale);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t ldx = c.k + c.ldx_pad, ldo = c.n + c.ldo_pad;
  std::vector<uint16_t> x(c.m * ldx), bias(c.n);
  std::vector<float> xf(x.size()), bf(c.n), wf(c.n * c.k);
  for (size_t i = 0; i < x.size(); ++i)
    xf[i] = Format<T>::ToF32(x[i] = Format<T>::FromF32(dist(rng) * c.x_scale));
  for (int64_t i = 0; i < c.n; ++i)
    bf[i] = Format<T>::ToF32(bias[i] = Format<T>::FromF32(dist(rng)));
  // Per-channel spread, as real weights have: rows scaled 2^-6 .. 2^2.
  for (int64_t n = 0; n < c.n; ++n) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(n % 9) - 6);
    for (int64_t k = 0; k < c.k; ++k) wf[n * c.k + k] = dist(rng) * row_scale;
  }
  std::vector<uint8_t> wq;
  std::vector<float> sw;
  QuantizeRowsOnHost(wf, c.n, c.k, c.k, &wq, &sw);
  std::vector<uint8_t> xq;
  std::vector<float> sx;
  QuantizeRowsOnHost(xf, c.m, c.k, ldx, &xq, &sx);

  const size_t out_elem = c.out_f32 ? 4 : 2, out_bytes = c.m * ldo * out_elem;
  Dev<uint16_t> dx(x.size()), db(bias.size());
  Dev<uint8_t> dw(wq.size()), dout(out_bytes);
  Dev<float> ds(sw.size());
  dx.Upload(x);
  db.Upload(bias);
  dw.Upload(wq);
  ds.Upload(sw);
  dout.Upload(std::vector<uint8_t>(out_bytes, 0xff));
  launch(Fp8Operands{dx.ptr, ldx, c.m, reinterpret_cast<const __nv_fp8_e4m3*>(dw.ptr), ds.ptr, c.n,
                     c.k, c.bias ? db.ptr : nullptr, dout.ptr, ldo, c.out_f32});
  if (testing::Test::HasFatalFailure()) return;
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out = dout.Download(out_bytes);

  int64_t bad = 0;
  for (int32_t m = 0; m < c.m; ++m) {
    for (int64_t n = 0; n < ldo; ++n) {
      const size_t at = m * ldo + n;
      const float got = c.out_f32
                            ? reinterpret_cast<const float*>(out.data())[at]
                            : Format<T>::ToF32(reinterpret_cast<const uint16_t*>(out.data())[at]);
      if (n >= c.n) {
        if (!std::isnan(got) && bad++ < 5) ADD_FAILURE() << "padding written at " << m << "," << n;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double a = w8a8 ? F8E4M3ToF32(xq[m * c.k + k]) * double{sx[m]} : xf[m * ldx + k];
        const double p = a * F8E4M3ToF32(wq[n * c.k + k]) * sw[n];
        sum += p;
        magnitude += std::fabs(p);
      }
      const double b = c.bias ? bf[n] : 0.0;
      const double ref = sum + b;
      double tol = w8a8 ? std::ldexp(magnitude, -12) + std::ldexp(std::fabs(sum), -8)
                        : 2.0 * c.k * std::ldexp(1.0, -24) * magnitude;
      tol += 1e-6;
      if (!c.out_f32) tol += std::ldexp(std::fabs(ref), kHalfUlpLog2<T>);
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "out[" << m << ", " << n << "] = " << got << ", reference " << ref
                      << ", tolerance " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace kiln::kernels
