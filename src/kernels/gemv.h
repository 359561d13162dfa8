// Skinny linear layers: out[m, n] = x[m, :] . w[n, :] (+ bias[n]) for a handful of rows m
// (batch-1..8 decode), where a GEMM library's tiles are mostly idle and the layer is a pure
// stream over the weight matrix. Raw device pointers + sizes + strides + stream; no engine types.
// Activations and weights are bf16 or fp16 (GemvArgsT<T>: x, w, bias and a non-fp32 out share
// T; one kernel body behind both overloads).
//
// Each warp owns output columns n (one row of w), streams that row once with 16-byte
// evict-first loads, multiplies it with every x row (x stays in L1/L2) and reduces across the
// warp; fp32 accumulation, one rounding to the output type. Graph-capturable; never
// synchronizes.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kiln::kernels {

// Rows of x one launch handles; callers with more rows use a GEMM.
inline constexpr int32_t kGemvMaxRows = 8;

// T is __nv_bfloat16 or __half.
template <typename T>
struct GemvArgsT {
  const T* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  int32_t m = 0;         // 1 ..= kGemvMaxRows
  const T* w = nullptr;  // [n, k] contiguous
  int64_t n = 0;
  int64_t k = 0;
  const T* bias = nullptr;  // [n] or null
  void* out = nullptr;      // [m, n], row stride ldo; T, or fp32 when out_f32
  int64_t ldo = 0;
  bool out_f32 = false;
  // A hint (dtype_internal::PrefetchL2 in kernels/dtype_traits.cuh): bytes the stream reads
  // next, e.g. the next linear layer's weights, for L2 to fetch while this kernel runs. Null:
  // none. REQUIRES: 16-byte aligned, prefetch_bytes a multiple of 16.
  const void* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
};
using GemvArgs = GemvArgsT<__nv_bfloat16>;

// Whether Gemv handles these operands: 1 <= m <= kGemvMaxRows, k and ldx multiples of 8 and
// x / w 16-byte aligned (the vector loads).
bool GemvSupported(const GemvArgs& args);
bool GemvSupported(const GemvArgsT<__half>& args);

// REQUIRES: GemvSupported(args). Returns the launch status.
cudaError_t Gemv(const GemvArgs& args, cudaStream_t stream);
cudaError_t Gemv(const GemvArgsT<__half>& args, cudaStream_t stream);

}  // namespace kiln::kernels
