// cuda::Gemm against its CPU twin cpu::Linear (label gpu), with bf16 and with fp16 operands, on
// both of its paths: kernels::Gemv (m <= gemv_max_rows) and cuBLASLt (larger m), with bias,
// strides and fp32 output as the runner uses them. Also: the plan cache keeps one shape's two
// dtypes apart, and Tune takes weights of the shape's dtype only. Operands, comparison and
// tolerance (fp32 sums in different orders, plus half an ulp of bf16 resp. fp16 for those
// outputs, and on the cuBLASLt path with a bias half an ulp more: its BIAS epilogue rounds
// before it adds): kernels/linear_test_util.cuh.
#include "backend/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/fp8_test_util.cuh"
#include "kernels/linear_test_util.cuh"
#include "kernels/test_util.cuh"

namespace kiln::cuda {
namespace {

using kernels::As;
using kernels::CheckLinear;
using kernels::Dev;
using kernels::Format;
using kernels::LinearCase;

std::unique_ptr<Gemm> NewGemm() {
  Result<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  EXPECT_TRUE(gemm.ok()) << gemm.status().ToString();
  return gemm.ok() ? std::move(gemm).value() : nullptr;
}

template <typename T>
void RunLinear(Gemm& gemm, const LinearCase& c, uint32_t seed) {
  CheckLinear<T>(
      c, seed,
      [&](const kernels::GemvArgsT<T>& a) {
        const Status st =
            gemm.Linear(a.x, a.ldx, a.m, a.w, a.n, a.k, a.bias, a.out, a.ldo, a.out_f32, nullptr);
        ASSERT_TRUE(st.ok()) << st.ToString();
      },
      /*bias_rounded_after=*/c.m > gemm.gemv_max_rows());
}

KILN_ELEMENT_TYPED_TEST_SUITE(GemmGpu);

TYPED_TEST(GemmGpu, LinearOnBothPaths) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  uint32_t seed = 1;
  // m 1 and 2: kernels::Gemv (kGemvDefaultRows); 17 and 64: cuBLASLt.
  for (int32_t m : {1, 2, 17, 64}) {
    // qkv-like: bias, x inside a wider row, padded output rows.
    RunLinear<TypeParam>(*gemm, {m, 769, 584, 24, 5, /*bias=*/true, /*out_f32=*/false}, seed++);
    RunLinear<TypeParam>(*gemm, {m, 576, 1536, 0, 0, false, false}, seed++);
    // lm_head-like: fp32 logits.
    RunLinear<TypeParam>(*gemm, {m, 5125, 576, 0, 3, false, true}, seed++);
  }
}

TYPED_TEST(GemmGpu, TunedPlanComputesTheSame) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  const GemmShape shape{64, 769, 584, 584, 769, false, true, Format<TypeParam>::kDType};
  const Status tuned = gemm->Tune(shape, 4, nullptr);  // on scratch weights of shape.dtype
  ASSERT_TRUE(tuned.ok()) << tuned.ToString();
  RunLinear<TypeParam>(*gemm, {64, 769, 584, 0, 0, true, false}, 20);
}

TEST(GemmDtypesGpu, OneShapeInBothDtypes) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  // The same GemmShape but for the dtype, on one Gemm: each dtype needs its own cuBLASLt plan.
  const LinearCase c{64, 83, 576, 0, 0, true, false};
  RunLinear<__nv_bfloat16>(*gemm, c, 10);
  RunLinear<__half>(*gemm, c, 11);
  RunLinear<__nv_bfloat16>(*gemm, c, 12);
}

TEST(GemmDtypesGpu, TuneTakesWeightsOfTheShapesDtype) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  Dev<uint16_t> w(64 * 256);
  const __nv_bfloat16* bf16_w[] = {As<__nv_bfloat16>(w.ptr)};
  const __half* f16_w[] = {As<__half>(w.ptr)};
  GemmShape shape{32, 64, 256, 256, 64};
  EXPECT_TRUE(gemm->Tune(shape, 2, nullptr, std::span<const __nv_bfloat16* const>(bf16_w)).ok());
  EXPECT_EQ(gemm->Tune(shape, 2, nullptr, std::span<const __half* const>(f16_w)).code(),
            StatusCode::kInvalidArgument);
  shape.dtype = DType::kF16;
  EXPECT_TRUE(gemm->Tune(shape, 2, nullptr, std::span<const __half* const>(f16_w)).ok());
  EXPECT_EQ(gemm->Tune(shape, 2, nullptr, std::span<const __nv_bfloat16* const>(bf16_w)).code(),
            StatusCode::kInvalidArgument);
  shape.dtype = DType::kF32;
  EXPECT_EQ(gemm->Tune(shape, 2, nullptr).code(), StatusCode::kUnsupported);
}

// LinearFp8 on both paths: kernels::GemvFp8 (W8A16) up to fp8_gemv_max_rows, then per-token
// quantization + the e4m3 cuBLASLt GEMM into bf16 + kernels::ApplyFp8Scales (W8A8);
// kernels/fp8_test_util.cuh has the reference and tolerance, to which the GEMM path adds the
// bf16 rounding of the unscaled sums (half an ulp of bf16: 2^-8 of the sum).
template <typename T>
void RunLinearFp8(Gemm& gemm, const LinearCase& c, uint32_t seed) {
  const bool w8a8 = c.m > gemm.fp8_gemv_max_rows();
  Dev<uint8_t> xq(c.m * c.k);
  Dev<float> sx(c.m);
  kernels::CheckFp8Linear<T>(c, seed, w8a8, [&](const kernels::Fp8Operands& o) {
    const Status st =
        gemm.LinearFp8(static_cast<const T*>(o.x), o.ldx, o.m, Fp8Weight{o.w, o.w_scale}, o.n, o.k,
                       static_cast<const T*>(o.bias), o.out, o.ldo, o.out_f32,
                       Fp8Scratch{reinterpret_cast<__nv_fp8_e4m3*>(xq.ptr), sx.ptr}, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  });
}

TYPED_TEST(GemmGpu, LinearFp8OnBothPaths) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  uint32_t seed = 100;
  for (int32_t m : {1, 4, 5, 17, 64, 300}) {
    RunLinearFp8<TypeParam>(*gemm, {m, 784, 592, 24, 8, /*bias=*/true, /*out_f32=*/false}, seed++);
    RunLinearFp8<TypeParam>(*gemm, {m, 576, 1536, 0, 0, false, false}, seed++);
    RunLinearFp8<TypeParam>(*gemm, {m, 4096, 4096, 0, 0, false, false}, seed++);
  }
  // fp32 output: GEMV rows only.
  RunLinearFp8<TypeParam>(*gemm, {2, 5125, 576, 0, 3, false, true}, seed++);
  Dev<uint8_t> buf(64 * 64 * 4);
  const Status st = gemm->LinearFp8(
      As<TypeParam>(reinterpret_cast<uint16_t*>(buf.ptr)), 64, 64,
      Fp8Weight{reinterpret_cast<const __nv_fp8_e4m3*>(buf.ptr), reinterpret_cast<float*>(buf.ptr)},
      64, 64, nullptr, buf.ptr, 64, /*out_f32=*/true,
      Fp8Scratch{reinterpret_cast<__nv_fp8_e4m3*>(buf.ptr), reinterpret_cast<float*>(buf.ptr)},
      nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.ToString();
  // cuBLASLt's FP8 GEMMs want n and the output stride in multiples of 16 resp. 8 elements.
  const Status odd = gemm->LinearFp8(
      As<TypeParam>(reinterpret_cast<uint16_t*>(buf.ptr)), 64, 64,
      Fp8Weight{reinterpret_cast<const __nv_fp8_e4m3*>(buf.ptr), reinterpret_cast<float*>(buf.ptr)},
      40, 64, nullptr, buf.ptr, 40, /*out_f32=*/false,
      Fp8Scratch{reinterpret_cast<__nv_fp8_e4m3*>(buf.ptr), reinterpret_cast<float*>(buf.ptr)},
      nullptr);
  EXPECT_EQ(odd.code(), StatusCode::kUnsupported) << odd.ToString();
}

// Fast accumulation (Gemm::set_fp8_fast_accum: no periodic promotion of the tensor cores'
// partial sums to fp32) keeps the W8A8 path within the same bound, 2^-12 of the products'
// magnitude sum, up to Llama-8B's down projection depth (k = 14,336).
TYPED_TEST(GemmGpu, LinearFp8WithFastAccumulationStaysWithinTheBound) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  gemm->set_fp8_fast_accum(true);
  uint32_t seed = 300;
  for (int32_t m : {17, 300}) {
    RunLinearFp8<TypeParam>(*gemm, {m, 784, 592, 0, 8, /*bias=*/true, /*out_f32=*/false}, seed++);
    RunLinearFp8<TypeParam>(*gemm, {m, 256, 4096, 0, 0, false, false}, seed++);
    RunLinearFp8<TypeParam>(*gemm, {m, 128, 14336, 0, 0, false, false}, seed++);
  }
}

TYPED_TEST(GemmGpu, TunedFp8PlanComputesTheSame) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  GemmShape shape{64, 784, 592, 592, 784, false, false, Format<TypeParam>::kDType};
  shape.fp8 = true;
  Dev<uint8_t> w(784 * 592);
  const __nv_fp8_e4m3* weights[] = {reinterpret_cast<const __nv_fp8_e4m3*>(w.ptr)};
  const Status tuned =
      gemm->Tune(shape, 4, nullptr, std::span<const __nv_fp8_e4m3* const>(weights));
  ASSERT_TRUE(tuned.ok()) << tuned.ToString();
  RunLinearFp8<TypeParam>(*gemm, {64, 784, 592, 0, 0, true, false}, 20);
  // 16-bit weights for an FP8 shape are refused.
  const TypeParam* wrong[] = {reinterpret_cast<const TypeParam*>(w.ptr)};
  EXPECT_EQ(gemm->Tune(shape, 2, nullptr, std::span<const TypeParam* const>(wrong)).code(),
            StatusCode::kInvalidArgument);
}

// TuneFp8Prompt's choice (timed briefly here) runs every FP8 GEMM of kFp8PromptRows rows or
// more of its (n, k, dtype), and computes the same within the bound; it travels through a GEMM
// table (TunedGemms at the m it was timed at, ImportTuned into another Gemm).
TYPED_TEST(GemmGpu, Fp8PromptAlgoComputesTheSame) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  constexpr int64_t m = Gemm::kFp8PromptRows, n = 256, k = 592;
  const DType dtype = Format<TypeParam>::kDType;
  Dev<uint8_t> w(n * k), x(m * k), out(m * n * 2);
  const __nv_fp8_e4m3* weights[] = {reinterpret_cast<const __nv_fp8_e4m3*>(w.ptr)};
  Gemm::Fp8PromptTuning t;
  t.m = m;
  t.n = n;
  t.k = k;
  t.dtype = dtype;
  t.candidates = 4;
  t.seconds = 0.01;
  t.x = reinterpret_cast<__nv_fp8_e4m3*>(x.ptr);
  t.out = out.ptr;
  EXPECT_FALSE(gemm->HasFp8PromptAlgo(n, k, dtype));
  const Status tuned =
      gemm->TuneFp8Prompt(t, nullptr, std::span<const __nv_fp8_e4m3* const>(weights));
  ASSERT_TRUE(tuned.ok()) << tuned.ToString();
  EXPECT_TRUE(gemm->HasFp8PromptAlgo(n, k, dtype));
  RunLinearFp8<TypeParam>(*gemm, {m + 17, n, k, 0, 0, /*bias=*/true, /*out_f32=*/false}, 40);
  RunLinearFp8<TypeParam>(*gemm, {300, n, k, 0, 0, false, false}, 41);  // below: the heuristic

  int found = 0;
  std::unique_ptr<Gemm> other = NewGemm();
  ASSERT_NE(other, nullptr);
  for (const TunedGemm& e : gemm->TunedGemms()) {
    if (!e.shape.fp8 || e.shape.m != m || e.shape.n != n || e.shape.k != k) continue;
    ++found;
    Result<bool> adopted = other->ImportTuned(e);
    ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
    EXPECT_TRUE(*adopted);
  }
  EXPECT_EQ(found, 1);
  EXPECT_TRUE(other->HasFp8PromptAlgo(n, k, dtype));
  RunLinearFp8<TypeParam>(*other, {m + 1, n, k, 0, 0, false, false}, 42);

  // Fewer rows than a prompt step's, no weights, or no scratch: refused.
  Gemm::Fp8PromptTuning small = t;
  small.m = Gemm::kFp8PromptRows - 16;
  small.n = 512;
  EXPECT_EQ(
      gemm->TuneFp8Prompt(small, nullptr, std::span<const __nv_fp8_e4m3* const>(weights)).code(),
      StatusCode::kInvalidArgument);
  Gemm::Fp8PromptTuning bare = t;
  bare.n = 512;
  EXPECT_EQ(gemm->TuneFp8Prompt(bare, nullptr, {}).code(), StatusCode::kInvalidArgument);
  bare.x = nullptr;
  EXPECT_EQ(
      gemm->TuneFp8Prompt(bare, nullptr, std::span<const __nv_fp8_e4m3* const>(weights)).code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(gemm->HasFp8PromptAlgo(512, k, dtype));
}

}  // namespace
}  // namespace kiln::cuda
