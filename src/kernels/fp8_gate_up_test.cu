// kernels::Fp8GateUpSilu (label gpu; sm_90a builds on a compute capability 9.0 device, else
// skipped with the reason) against the unfused kernels it replaces, bit for bit: with e4m3 codes
// of small integers every fp32 sum is exact whatever order the tensor cores add in, so the
// unscaled sums are known on the host (rounded to bf16 as Fp8GemmUnscaled writes them), and
//   out == SiluMul(ApplyFp8Scales(sums))                       (the bf16 products)
//   QuantizeRowsFp8(out) == SiluMulFp8(sums, scales)           (codes and row scales; also with
//                                                               a static scale)
// Shapes: one to several token tiles with a partial last one, 1-8 column tiles, k of 1-32
// blocks, more tiles than SMs (the persistent loop), a bias, a padded output stride (padding
// left untouched).
#include "kernels/fp8_gate_up.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/quant.h"
#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

using bf16 = __nv_bfloat16;

// e4m3 codes of -2, -1, 0, 0, 1, 2 (half a code's products are zero).
uint8_t SmallIntCode(std::mt19937& rng) {
  static constexpr uint8_t kCodes[] = {0xc0, 0xb8, 0x00, 0x00, 0x38, 0x40};
  return kCodes[rng() % 6];
}
template <typename T>
void ExpectSame(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << +got[i] << ", want " << +want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

Fp8GateUpSiluArgs ValidArgs(const void* x, const void* w, const float* row, const float* col,
                            void* out) {
  Fp8GateUpSiluArgs a;
  a.x = static_cast<const __nv_fp8_e4m3*>(x);
  a.m = 5;
  a.k = 256;
  a.w = static_cast<const __nv_fp8_e4m3*>(w);
  a.dim = 128;
  a.scales = {row, col, nullptr};
  a.out = static_cast<bf16*>(out);
  a.ldo = 128;
  return a;
}

TEST(Fp8GateUpSiluGpu, EqualsGemmThenSiluMulBitForBit) {
  REQUIRE_GPU();
  {
    Dev<uint8_t> x(5 * 256), w(256 * 256);
    Dev<float> row(5), col(256);
    Dev<uint16_t> out(5 * 128);
    if (!Fp8GateUpSiluSupported(ValidArgs(x.ptr, w.ptr, row.ptr, col.ptr, out.ptr))) {
      GTEST_SKIP() << "Fp8GateUpSilu needs an sm_90a build on a compute capability 9.0 device";
    }
  }
  // (m, k, dim, bias, output padding): 2,200 x 1,024 is 18 x 8 = 144 tiles, more than an H100's
  // 132 SMs.
  for (const auto [m, k, dim, with_bias, pad] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, bool, int64_t>>{
           {1, 128, 128, false, 0},
           {130, 256, 256, true, 8},
           {300, 512, 384, false, 0},
           {77, 4096, 128, true, 0},
           {2200, 256, 1024, false, 16}}) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " dim=" << dim
                                    << " bias=" << with_bias << " pad=" << pad);
    std::mt19937 rng(static_cast<uint32_t>(m * 7 + k * 3 + dim));
    std::uniform_real_distribution<float> scale(0.004f, 0.012f);
    std::vector<uint8_t> x(m * k), w(2 * dim * k);
    for (auto& c : x) c = SmallIntCode(rng);
    for (auto& c : w) c = SmallIntCode(rng);
    std::vector<float> rows(m), cols(2 * dim);
    for (auto& s : rows) s = scale(rng);
    for (auto& s : cols) s = scale(rng) * 30.0f;
    std::vector<uint16_t> bias(2 * dim);
    for (auto& b : bias) b = Format<bf16>::FromF32(scale(rng) * 100.0f - 0.8f);
    // The unscaled sums as Fp8GemmUnscaled writes them: exact, rounded to bf16.
    std::vector<uint16_t> sums(m * 2 * dim);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t n = 0; n < 2 * dim; ++n) {
        float s = 0.0f;
        for (int64_t i = 0; i < k; ++i) s += F8E4M3ToF32(x[r * k + i]) * F8E4M3ToF32(w[n * k + i]);
        sums[r * 2 * dim + n] = Format<bf16>::FromF32(s);
      }
    }
    Dev<uint8_t> dx(x.size()), dw(w.size());
    Dev<float> drow(m), dcol(2 * dim), dstatic(1);
    Dev<uint16_t> dbias(bias.size()), dsums(sums.size()), dscaled(sums.size());
    dx.Upload(x);
    dw.Upload(w);
    drow.Upload(rows);
    dcol.Upload(cols);
    dstatic.Upload({0.02f});
    dbias.Upload(bias);
    dsums.Upload(sums);
    const bf16* b = with_bias ? As<bf16>(dbias.ptr) : nullptr;
    const Fp8InputScales scales{drow.ptr, dcol.ptr, b};

    // The unfused kernels: the bf16 products, and SiluMulFp8's codes and scales.
    Dev<uint16_t> want(m * dim);
    CUDA_OK(ApplyFp8Scales(As<bf16>(dsums.ptr), 2 * dim, m, 2 * dim, drow.ptr, dcol.ptr, b,
                           As<bf16>(dscaled.ptr), nullptr));
    CUDA_OK(SiluMul(As<bf16>(dscaled.ptr), 2 * dim, m, dim, As<bf16>(want.ptr), dim, nullptr));

    const int64_t ldo = dim + pad;
    Dev<uint16_t> got(m * ldo);
    got.Upload(std::vector<uint16_t>(m * ldo, kPoison));
    Fp8GateUpSiluArgs a;
    a.x = reinterpret_cast<const __nv_fp8_e4m3*>(dx.ptr);
    a.m = m;
    a.k = k;
    a.w = reinterpret_cast<const __nv_fp8_e4m3*>(dw.ptr);
    a.dim = dim;
    a.scales = scales;
    a.out = As<bf16>(got.ptr);
    a.ldo = ldo;
    ASSERT_TRUE(Fp8GateUpSiluSupported(a));
    CUDA_OK(Fp8GateUpSilu(a, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> out = got.Download(m * ldo);
    std::vector<uint16_t> body(m * dim), padding;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < ldo; ++c) {
        (c < dim ? body[r * dim + c] : padding.emplace_back()) = out[r * ldo + c];
      }
    }
    ExpectSame(body, want.Download(m * dim), "products");
    ExpectSame(padding, std::vector<uint16_t>(padding.size(), kPoison), "padding");

    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message() << "static=" << static_scale);
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      Dev<uint8_t> q_a(m * dim), q_b(m * dim);
      Dev<float> s_a(m), s_b(m);
      auto* qa = reinterpret_cast<__nv_fp8_e4m3*>(q_a.ptr);
      auto* qb = reinterpret_cast<__nv_fp8_e4m3*>(q_b.ptr);
      CUDA_OK(SiluMulFp8(As<bf16>(dsums.ptr), 2 * dim, m, dim, qa, dim, s_a.ptr, sscale, nullptr,
                         scales));
      CUDA_OK(static_scale
                  ? QuantizeRowsFp8Static(As<bf16>(got.ptr), ldo, m, dim, sscale, qb, dim, s_b.ptr,
                                          nullptr)
                  : QuantizeRowsFp8(As<bf16>(got.ptr), ldo, m, dim, qb, dim, s_b.ptr, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      ExpectSame(q_b.Download(m * dim), q_a.Download(m * dim), "codes");
      ExpectSame(s_b.Download(m), s_a.Download(m), "scales");
    }
  }
}

TEST(Fp8GateUpSiluGpu, RejectsWhatItCannotDo) {
  REQUIRE_GPU();
  Dev<uint8_t> x(5 * 256 + 16), w(256 * 256);
  Dev<float> row(5), col(256);
  Dev<uint16_t> out(5 * 256);
  const Fp8GateUpSiluArgs ok = ValidArgs(x.ptr, w.ptr, row.ptr, col.ptr, out.ptr);
  if (!Fp8GateUpSiluSupported(ok)) {
    GTEST_SKIP() << "Fp8GateUpSilu needs an sm_90a build on a compute capability 9.0 device";
  }
  auto rejected = [&](Fp8GateUpSiluArgs a, const char* what) {
    EXPECT_FALSE(Fp8GateUpSiluSupported(a)) << what;
    EXPECT_EQ(Fp8GateUpSilu(a, nullptr), cudaErrorInvalidValue) << what;
  };
  Fp8GateUpSiluArgs a = ok;
  a.k = 192;
  rejected(a, "k not a multiple of 128");
  a = ok;
  a.dim = 64;
  a.ldo = 64;
  rejected(a, "dim not a multiple of 128");
  a = ok;
  a.x = reinterpret_cast<const __nv_fp8_e4m3*>(x.ptr + 8);
  rejected(a, "x not 16-byte aligned");
  a = ok;
  a.ldo = 127;
  rejected(a, "ldo below dim");
  a = ok;
  a.scales.row = nullptr;
  rejected(a, "no row scales");
  a = ok;
  a.scales.col = nullptr;
  rejected(a, "no column scales");
  a = ok;
  a.m = 0;
  EXPECT_EQ(Fp8GateUpSilu(a, nullptr), cudaSuccess) << "no rows: nothing to do";
}

}  // namespace
}  // namespace kiln::kernels
