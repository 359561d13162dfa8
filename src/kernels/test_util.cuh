// Helpers shared by the kernel tests (label gpu): CUDA return-code checks, a scoped device array,
// the poison written into outputs before a launch, the skip when no GPU is visible, the element
// types (bf16, fp16) every kernel test runs in, and the host side of the FP8 KV cache's codes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

#define REQUIRE_GPU() \
  if (!::kiln::HasCudaDevice()) GTEST_SKIP() << ::kiln::kernels::kNoGpu

namespace kiln::kernels {

inline constexpr const char* kNoGpu = "no CUDA device visible (this test runs on the GPU machine)";

// A NaN in bf16 and in fp16: an output element still holding it after a launch was never written.
inline constexpr uint16_t kPoison = 0xffff;

// The e4m3 NaN: the kernels never store it (they saturate), so an fp8 cache entry still holding
// it was never written.
inline constexpr uint8_t kPoisonFp8 = 0x7f;

// The e4m3 code the kernels store for x: kiln::F32ToF8E4M3's (round to nearest even), except
// that |x| beyond 448 saturates to +-448 (the kernels' __NV_SATFINITE), where F32ToF8E4M3 gives
// NaN from 480 on (PyTorch's cast).
inline uint8_t E4m3Sat(float x) {
  if (std::fabs(x) > 448.0f) return std::signbit(x) ? 0xfe : 0x7e;
  return F32ToF8E4M3(x);
}

// A device array freed on scope exit.
template <typename T>
struct Dev {
  T* ptr = nullptr;
  explicit Dev(size_t n) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void Upload(const std::vector<T>& h) {
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// bf16 and fp16 arrays live in the tests as their bit patterns (uint16_t); Format<T> converts
// them on the host with core/dtype.h, rounding to nearest even as the kernels' _rn intrinsics.
// The two formats differ (8 vs 11 significant bits, 8 vs 5 exponent bits), so a kernel of one
// type that converted or computed in the other fails the comparisons.
template <typename T>
struct Format;

template <>
struct Format<__nv_bfloat16> {
  static constexpr DType kDType = DType::kBF16;
  static float ToF32(uint16_t b) { return BF16ToF32(b); }
  static uint16_t FromF32(float f) { return F32ToBF16(f); }
};

template <>
struct Format<__half> {
  static constexpr DType kDType = DType::kF16;
  static float ToF32(uint16_t b) { return F16ToF32(b); }
  static uint16_t FromF32(float f) { return F32ToF16(f); }
};

template <typename T>
T* As(uint16_t* p) {
  return reinterpret_cast<T*>(p);
}

// The element types of the typed kernel tests, named "bf16" and "f16" in test names.
using ElementTypes = ::testing::Types<__nv_bfloat16, __half>;
struct ElementTypeName {
  template <typename T>
  static std::string GetName(int) {
    return std::string(DTypeName(Format<T>::kDType));
  }
};

// Declares the typed test suite `name` over ElementTypes: its TYPED_TESTs run once per type, as
// name/bf16 and name/f16, with the type as TypeParam.
#define KILN_ELEMENT_TYPED_TEST_SUITE(name) \
  template <typename T>                     \
  class name : public ::testing::Test {};   \
  TYPED_TEST_SUITE(name, ::kiln::kernels::ElementTypes, ::kiln::kernels::ElementTypeName)

}  // namespace kiln::kernels
