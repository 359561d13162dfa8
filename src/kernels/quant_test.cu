// kernels::QuantizeRowsFp8 and kernels::GemvFp8 against model/quantization.h's arithmetic on the
// host, and the quantization fused into RmsNorm / SiluMul against the unfused pair (label gpu).
// Quantization is compared bit for bit (the same fp32 division and round-to-nearest-even e4m3
// conversion on both sides); the GEMV as kernels/fp8_test_util.cuh explains.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/fp8_test_util.cuh"
#include "kernels/gemv.h"
#include "kernels/test_util.cuh"
#include "model/quantization.h"

namespace kiln::kernels {
namespace {

KILN_ELEMENT_TYPED_TEST_SUITE(QuantizeRowsFp8Gpu);

TYPED_TEST(QuantizeRowsFp8Gpu, MatchesTheHostBitForBit) {
  REQUIRE_GPU();
  using T = TypeParam;
  // Odd row counts, widths that are not multiples of the block's 2048-element stride, a padded
  // input stride, rows spanning 2^-20 .. 2^10 (tiny rows hit the minimum scale), and a zero row.
  for (const auto [rows, cols, pad] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 8, 0}, {7, 584, 8}, {83, 4096, 0}, {5, 14336, 16}}) {
    SCOPED_TRACE(testing::Message() << "rows=" << rows << " cols=" << cols);
    std::mt19937 rng(static_cast<uint32_t>(rows * cols));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t ldx = cols + pad;
    std::vector<uint16_t> x(rows * ldx);
    std::vector<float> xf(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = r == 2 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r * 7 % 31) - 20);
      for (int64_t c = 0; c < ldx; ++c) {
        x[r * ldx + c] = Format<T>::FromF32(dist(rng) * scale);
        xf[r * ldx + c] = Format<T>::ToF32(x[r * ldx + c]);
      }
    }
    std::vector<uint8_t> want;
    std::vector<float> want_scales;
    QuantizeRowsOnHost(xf, rows, cols, ldx, &want, &want_scales);

    Dev<uint16_t> dx(x.size());
    Dev<uint8_t> dq(rows * cols);
    Dev<float> ds(rows);
    dx.Upload(x);
    dq.Upload(std::vector<uint8_t>(rows * cols, 0x7f));  // NaN in e4m3: never a quantized value
    ds.Upload(std::vector<float>(rows, NAN));
    CUDA_OK(QuantizeRowsFp8(As<T>(dx.ptr), ldx, rows, cols,
                            reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr), cols, ds.ptr, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = dq.Download(rows * cols);
    const std::vector<float> got_scales = ds.Download(rows);
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (got_scales[r] != want_scales[r] && bad++ < 5) {
        ADD_FAILURE() << "scale[" << r << "] = " << got_scales[r] << ", host " << want_scales[r];
      }
      for (int64_t c = 0; c < cols; ++c) {
        if (got[r * cols + c] != want[r * cols + c] && bad++ < 5) {
          ADD_FAILURE() << "q[" << r << ", " << c << "] = " << int{got[r * cols + c]} << ", host "
                        << int{want[r * cols + c]} << " (x = " << xf[r * ldx + c] << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TYPED_TEST(QuantizeRowsFp8Gpu, StaticScaleMatchesTheHostBitForBit) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t rows = 9, cols = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> x(rows * cols);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // Rows 0..8 grow by 4x each: past the calibrated range the later rows saturate.
    x[i] = Format<T>::FromF32(dist(rng) * std::ldexp(1.0f, 2 * static_cast<int>(i / cols) - 8));
    xf[i] = Format<T>::ToF32(x[i]);
  }
  const float scale = 0.01f;  // |x| up to 4.48 fits
  std::vector<uint8_t> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRowFp8Static(xf.data() + r * cols, cols, scale, want.data() + r * cols);
  }
  Dev<uint16_t> dx(x.size());
  Dev<uint8_t> dq(x.size());
  Dev<float> ds(rows), dscale(1);
  dx.Upload(x);
  dscale.Upload({scale});
  CUDA_OK(QuantizeRowsFp8Static(As<T>(dx.ptr), cols, rows, cols, dscale.ptr,
                                reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr), cols, ds.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = dq.Download(x.size());
  int bad = 0, saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    saturated += (want[i] & 0x7f) == 0x7e;
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << "q[" << i << "] = " << int{got[i]} << ", host " << int{want[i]};
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(saturated, 100);  // the case reaches the clamp
  for (float s : ds.Download(rows)) EXPECT_EQ(s, scale);
}

TYPED_TEST(QuantizeRowsFp8Gpu, RejectsWidthsThatAreNotMultiplesOf8) {
  REQUIRE_GPU();
  EXPECT_EQ(QuantizeRowsFp8(static_cast<const TypeParam*>(nullptr), 12, 1, 12, nullptr, 12, nullptr,
                            nullptr),
            cudaErrorInvalidValue);
}

KILN_ELEMENT_TYPED_TEST_SUITE(GemvFp8Gpu);

TYPED_TEST(GemvFp8Gpu, MatchesTheW8A16Formula) {
  REQUIRE_GPU();
  using T = TypeParam;
  uint32_t seed = 1;
  for (int32_t m : {1, 2, 3, 5, 8}) {
    for (const LinearCase& c :
         {LinearCase{m, 769, 592, 24, 5, true, false}, LinearCase{m, 576, 1536, 0, 0, false, false},
          LinearCase{m, 83, 4096, 8, 0, false, true}}) {
      CheckFp8Linear<T>(c, seed++, /*w8a8=*/false, [](const Fp8Operands& o) {
        GemvFp8ArgsT<T> a;
        a.x = static_cast<const T*>(o.x);
        a.ldx = o.ldx;
        a.m = o.m;
        a.w = o.w;
        a.w_scale = o.w_scale;
        a.n = o.n;
        a.k = o.k;
        a.bias = static_cast<const T*>(o.bias);
        a.out = o.out;
        a.ldo = o.ldo;
        a.out_f32 = o.out_f32;
        ASSERT_TRUE(GemvFp8Supported(a));
        CUDA_OK(GemvFp8(a, nullptr));
      });
    }
  }
}

TYPED_TEST(GemvFp8Gpu, SupportedChecksShapes) {
  GemvFp8ArgsT<TypeParam> a;
  alignas(16) static uint8_t buffer[64];
  static float scale[1];
  a.x = reinterpret_cast<const TypeParam*>(buffer);
  a.w = reinterpret_cast<const __nv_fp8_e4m3*>(buffer);
  a.w_scale = scale;
  a.m = 1;
  a.n = 1;
  a.k = 16;
  a.ldx = 16;
  EXPECT_TRUE(GemvFp8Supported(a));
  a.k = 24;  // not a whole 16-byte weight load
  EXPECT_FALSE(GemvFp8Supported(a));
  a.k = 16;
  a.m = kGemvMaxRows + 1;
  EXPECT_FALSE(GemvFp8Supported(a));
  a.m = 1;
  a.w_scale = nullptr;
  EXPECT_FALSE(GemvFp8Supported(a));
}

// The fused activation quantization (kernels/elementwise.h) writes what the unfused pair writes:
// the op's T output, then QuantizeRowsFp8 of it, bit for bit (codes, scales and, for the norm,
// the updated residual stream).
KILN_ELEMENT_TYPED_TEST_SUITE(FusedFp8QuantGpu);

template <typename T>
void ExpectSameBytes(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] differs";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TYPED_TEST(FusedFp8QuantGpu, RmsNormFp8EqualsRmsNormThenQuantize) {
  REQUIRE_GPU();
  using T = TypeParam;
  // dim 576 (SmolLM2: one vector a thread), 4096 (Llama 8B: 2 per thread) and 8200 (6); rows
  // with a zero input, an init (layer 0) step and a row pick.
  for (const auto [rows, dim, init, pick] : std::vector<std::tuple<int32_t, int32_t, bool, bool>>{
           {5, 576, true, false}, {37, 4096, false, false}, {3, 8200, false, true}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "rows=" << rows << " dim=" << dim << " static=" << static_scale);
      std::mt19937 rng(static_cast<uint32_t>(rows * dim));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<uint16_t> x(int64_t{rows} * dim), w(dim);
      std::vector<float> residual(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = Format<T>::FromF32(i / dim == 1 ? 0.0f : dist(rng) * 3.0f);
        residual[i] = dist(rng) * 20.0f;
      }
      for (auto& v : w) v = Format<T>::FromF32(1.0f + 0.1f * dist(rng));
      const int32_t out_rows = pick ? 2 : rows;
      std::vector<int32_t> ids = {2, 0};
      Dev<uint16_t> dx(x.size()), dw(dim), dout(int64_t{out_rows} * dim);
      Dev<float> dres_a(residual.size()), dres_b(residual.size()), ds_a(out_rows), ds_b(out_rows);
      Dev<uint8_t> dq_a(int64_t{out_rows} * dim), dq_b(int64_t{out_rows} * dim);
      Dev<int32_t> dids(ids.size());
      // A static scale small enough that the largest values saturate.
      Dev<float> dstatic(1);
      dstatic.Upload({0.004f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      dx.Upload(x);
      dw.Upload(w);
      dres_a.Upload(residual);
      dres_b.Upload(residual);
      dids.Upload(ids);
      const int32_t* row_ids = pick ? dids.ptr : nullptr;
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      CUDA_OK(RmsNormF32Residual(As<T>(dx.ptr), dim, dres_a.ptr, init, row_ids, out_rows, dim,
                                 As<T>(dw.ptr), 1e-5f, As<T>(dout.ptr), dim, nullptr));
      CUDA_OK(static_scale ? QuantizeRowsFp8Static(As<T>(dout.ptr), dim, out_rows, dim, sscale, q_a,
                                                   dim, ds_a.ptr, nullptr)
                           : QuantizeRowsFp8(As<T>(dout.ptr), dim, out_rows, dim, q_a, dim,
                                             ds_a.ptr, nullptr));
      CUDA_OK(RmsNormF32ResidualFp8(As<T>(dx.ptr), dim, dres_b.ptr, init, row_ids, out_rows, dim,
                                    As<T>(dw.ptr), 1e-5f, q_b, dim, ds_b.ptr, sscale, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const int64_t n = int64_t{out_rows} * dim;
      ExpectSameBytes(dq_b.Download(n), dq_a.Download(n), "codes");
      ExpectSameBytes(ds_b.Download(out_rows), ds_a.Download(out_rows), "scales");
      ExpectSameBytes(dres_b.Download(residual.size()), dres_a.Download(residual.size()),
                      "residual");
    }
  }
}

TYPED_TEST(FusedFp8QuantGpu, SiluMulFp8EqualsSiluMulThenQuantize) {
  REQUIRE_GPU();
  using T = TypeParam;
  for (const auto [rows, dim] :
       std::vector<std::pair<int32_t, int32_t>>{{1, 1536}, {9, 14336}, {4, 2056}, {2, 20480}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "rows=" << rows << " dim=" << dim << " static=" << static_scale);
      std::mt19937 rng(static_cast<uint32_t>(rows + dim));
      std::normal_distribution<float> dist(0.0f, 2.0f);
      std::vector<uint16_t> gate_up(int64_t{rows} * 2 * dim);
      for (auto& v : gate_up) v = Format<T>::FromF32(dist(rng));
      Dev<uint16_t> dgu(gate_up.size()), dact(int64_t{rows} * dim);
      Dev<uint8_t> dq_a(int64_t{rows} * dim), dq_b(int64_t{rows} * dim);
      Dev<float> ds_a(rows), ds_b(rows), dstatic(1);
      dstatic.Upload({0.01f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      dgu.Upload(gate_up);
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      CUDA_OK(SiluMul(As<T>(dgu.ptr), 2 * dim, rows, dim, As<T>(dact.ptr), dim, nullptr));
      CUDA_OK(static_scale
                  ? QuantizeRowsFp8Static(As<T>(dact.ptr), dim, rows, dim, sscale, q_a, dim,
                                          ds_a.ptr, nullptr)
                  : QuantizeRowsFp8(As<T>(dact.ptr), dim, rows, dim, q_a, dim, ds_a.ptr, nullptr));
      CUDA_OK(SiluMulFp8(As<T>(dgu.ptr), 2 * dim, rows, dim, q_b, dim, ds_b.ptr, sscale, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      ExpectSameBytes(dq_b.Download(int64_t{rows} * dim), dq_a.Download(int64_t{rows} * dim),
                      "codes");
      ExpectSameBytes(ds_b.Download(rows), ds_a.Download(rows), "scales");
    }
  }
}

TYPED_TEST(FusedFp8QuantGpu, RejectUnalignedShapes) {
  REQUIRE_GPU();
  using T = TypeParam;
  EXPECT_EQ(
      SiluMulFp8(static_cast<const T*>(nullptr), 24, 1, 12, nullptr, 12, nullptr, nullptr, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(QuantizeRowsFp8Static(static_cast<const T*>(nullptr), 8, 1, 8, nullptr, nullptr, 8,
                                  nullptr, nullptr),
            cudaErrorInvalidValue);  // no scale
  Dev<float> dres(16);
  EXPECT_EQ(RmsNormF32ResidualFp8(static_cast<const T*>(nullptr), 12, dres.ptr, false, nullptr, 1,
                                  12, nullptr, 1e-5f, nullptr, 12, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kiln::kernels
