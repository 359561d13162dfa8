// kernels::Gemv against its CPU twin cpu::Linear (bf16 or fp16 values widened to f32, label
// gpu); every case runs in both element types. Operands, comparison and tolerance (fp32 sums in
// different orders, plus half an ulp of bf16 resp. fp16 for those outputs):
// kernels/linear_test_util.cuh.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/gemv.h"
#include "kernels/linear_test_util.cuh"
#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

template <typename T>
void RunCase(const LinearCase& c, uint32_t seed) {
  CheckLinear<T>(c, seed, [](const GemvArgsT<T>& a) {
    ASSERT_TRUE(GemvSupported(a));
    CUDA_OK(Gemv(a, nullptr));
  });
}

KILN_ELEMENT_TYPED_TEST_SUITE(GemvGpu);

TYPED_TEST(GemvGpu, MatchesCpuLinearOnOddShapes) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (int32_t m = 1; m <= kGemvMaxRows; ++m) {
    for (int64_t n : {1, 7, 83, 769, 5125}) {
      for (int64_t k : {8, 576, 584, 4096}) RunCase<TypeParam>({m, n, k}, seed++);
    }
  }
}

TYPED_TEST(GemvGpu, StridesBiasAndFp32Output) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (int32_t m : {1, 3, 8}) {
    RunCase<TypeParam>({m, 769, 584, /*ldx_pad=*/24, /*ldo_pad=*/5, /*bias=*/true,
                        /*out_f32=*/false},
                       seed++);
    RunCase<TypeParam>({m, 83, 4096, 8, 1, false, true}, seed++);
    RunCase<TypeParam>({m, 5125, 14336, 0, 3, true, true}, seed++);
    // lm_head-like: many columns, fp32 logits.
    RunCase<TypeParam>({m, 49152, 576, 0, 0, false, true}, seed++);
  }
}

// The L2 hint (GemvArgsT::prefetch) changes no result, whatever its size against the grid's
// slices: less than one slice per block, uneven slices, more than the grid covers at once.
TYPED_TEST(GemvGpu, L2PrefetchHintChangesNoResult) {
  REQUIRE_GPU();
  Dev<uint8_t> next(size_t{3} << 20);
  uint32_t seed = 200;
  for (int64_t bytes : {int64_t{16}, int64_t{4096 + 16}, int64_t{3} << 20}) {
    SCOPED_TRACE(testing::Message() << "prefetch_bytes=" << bytes);
    CheckLinear<TypeParam>({1, 769, 584}, seed++, [&](const GemvArgsT<TypeParam>& a) {
      GemvArgsT<TypeParam> hinted = a;
      hinted.prefetch = next.ptr;
      hinted.prefetch_bytes = bytes;
      ASSERT_TRUE(GemvSupported(hinted));
      CUDA_OK(Gemv(hinted, nullptr));
    });
  }
}

TYPED_TEST(GemvGpu, RejectsOperandsItCannotLoad) {
  GemvArgsT<TypeParam> a;
  a.m = 1;
  a.n = 16;
  a.k = 12;  // not a multiple of 8
  a.ldx = 16;
  alignas(16) static const TypeParam buffer[64] = {};
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
