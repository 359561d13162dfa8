// The residual RMS norm of one row inside another kernel's prologue, for a block of
// kNormRowThreads threads: what RmsNormVecKernel (elementwise.cu) computes for a 1-row
// RmsNormF32Residual of dim = kVecs * 2,048 (its launch takes 256 threads there, kVecs pieces of
// 8 elements a thread, pieces i = threadIdx.x + 256 j), with the same roundings and the same
// summation order, so its output has the same bits. The kernel that folds the norm in
// (W4GemvStreamKernel, w4a16.cu) reads the row the norm kernel would have written without the
// launch between them (docs/kernels.md, "The norm in the GEMV's prologue").
#pragma once

#include <cstdint>

#include "kernels/dtype_traits.cuh"

namespace kiln::kernels::norm_internal {

inline constexpr int kNormRowThreads = 256;
inline constexpr int kNormRowDimPerVec = 8 * kNormRowThreads;  // 2,048

// The sum of v over the block as elementwise.cu's BlockSum adds it (each warp's xor tree, then
// one over the warps' 8 partials, zeros in the other lanes), every warp taking the second tree
// itself: one barrier. `partial`: kNormRowThreads / 32 floats of shared memory, free until the
// caller's next barrier.
__device__ __forceinline__ float NormRowSum(float v, float* partial) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float s = lane < kNormRowThreads / 32 ? partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

// y[j] = the norm's output pieces i = threadIdx.x + 256 j of the row: sum = residual + delta
// (delta alone with init), y = T(T(sum * rsqrt(mean(sum^2) + eps)) * weight), as
// RmsNormF32Residual writes them; residual_out (non-null in one block only) gets the sums.
// REQUIRES: blockDim.x == kNormRowThreads; 16-byte aligned rows of kVecs * 2,048 elements.
template <int kVecs, typename T>
__device__ __forceinline__ void ResidualNormRow(const T* delta, const float* residual, bool init,
                                                float* residual_out, const T* weight, float eps,
                                                float* partial,
                                                dtype_internal::Vec8<T> (&y)[kVecs]) {
  float v[kVecs][8];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * kNormRowThreads;
    dtype_internal::Load8(delta + 8 * i, v[j]);
    if (!init) {
      float r[8];
      dtype_internal::Load8(residual + 8 * i, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = r[e] + v[j][e];
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = 0.0f + v[j][e];
    }
    if (residual_out != nullptr) dtype_internal::Store8(residual_out + 8 * i, v[j]);
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sum_sq += v[j][e] * v[j][e];
  }
  const float inv =
      rsqrtf(NormRowSum(sum_sq, partial) / static_cast<float>(kVecs * kNormRowDimPerVec) + eps);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * kNormRowThreads;
    const dtype_internal::Vec8<T> w = reinterpret_cast<const dtype_internal::Vec8<T>*>(weight)[i];
    float n[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) n[e] = v[j][e] * inv;
    // HF: the normalized row is cast back to the model's dtype, then multiplied by the weight.
    dtype_internal::Unpack8(dtype_internal::Pack8<T>(n), n);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 wf = dtype_internal::PairToFloat2<T>(w.h[e]);
      n[2 * e] *= wf.x;
      n[2 * e + 1] *= wf.y;
    }
    y[j] = dtype_internal::Pack8<T>(n);
  }
}

}  // namespace kiln::kernels::norm_internal
