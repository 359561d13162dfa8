// Helpers shared by the kernel tests (label gpu): CUDA return-code checks, a scoped device array,
// the bf16 poison written into outputs before a launch, and the skip when no GPU is visible.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

#define REQUIRE_GPU() \
  if (!::kiln::HasCudaDevice()) GTEST_SKIP() << ::kiln::kernels::kNoGpu

namespace kiln::kernels {

inline constexpr const char* kNoGpu = "no CUDA device visible (this test runs on the GPU machine)";

// A bf16 NaN: an output element still holding it after a launch was never written.
inline constexpr uint16_t kPoison = 0xffff;

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

// bf16 arrays live in the tests as their bit patterns (uint16_t).
inline __nv_bfloat16* AsBf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

}  // namespace kiln::kernels
