#include "kernels/quant.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/dtype_traits.cuh"
#include "kernels/gemv.h"

namespace kiln::kernels {
namespace {

using dtype_internal::DispatchRows;
using dtype_internal::FromFloat;
using dtype_internal::Load8;
using dtype_internal::PairToFloat2;
using dtype_internal::ToFloat;

// model/quantization.h (kept in step by quant_test against the CPU reference).
constexpr float kFp8Max = 448.0f;
constexpr float kFp8MinScale = 1.0f / (kFp8Max * 512.0f);

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

constexpr int kQuantThreads = 256;

// One block per row: the row's amax (8 values per thread per pass), then the quantized row. The
// second pass re-reads the row from L1/L2 (a row is at most a few tens of KiB).
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    QuantizeRowsKernel(const T* __restrict__ x, int64_t ldx, int64_t cols,
                       __nv_fp8_e4m3* __restrict__ out, int64_t ldo, float* __restrict__ scales) {
  __shared__ float partial[kQuantThreads / 32];
  const T* row = x + blockIdx.x * ldx;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x * 8; c < cols; c += kQuantThreads * 8) {
    float v[8];
    Load8(row + c, v);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  }
  amax = WarpMax(amax);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, partial[w]);
  const float scale = fmaxf(amax / kFp8Max, kFp8MinScale);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  __nv_fp8_e4m3* dst = out + blockIdx.x * ldo;
  for (int64_t c = threadIdx.x * 8; c < cols; c += kQuantThreads * 8) {
    float v[8];
    Load8(row + c, v);
    uint2 packed;
    auto* p = reinterpret_cast<__nv_fp8x2_storage_t*>(&packed);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // x / scale as IEEE division, the CPU reference's arithmetic.
      const float2 pair = make_float2(__fdiv_rn(v[2 * e], scale), __fdiv_rn(v[2 * e + 1], scale));
      p[e] = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
    }
    *reinterpret_cast<uint2*>(dst + c) = packed;
  }
}

template <typename T>
cudaError_t LaunchQuantize(const T* x, int64_t ldx, int64_t rows, int64_t cols, __nv_fp8_e4m3* out,
                           int64_t ldo, float* scales, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (cols % 8 != 0 || ldx % 8 != 0 || ldo % 8 != 0) return cudaErrorInvalidValue;
  QuantizeRowsKernel<T>
      <<<static_cast<unsigned>(rows), kQuantThreads, 0, stream>>>(x, ldx, cols, out, ldo, scales);
  return cudaGetLastError();
}

// ---- FP8 GEMM epilogue ----------------------------------------------------------------------

// One thread per element (coalesced 2-byte accesses; any width and stride).
template <typename T>
__global__ void ApplyScalesKernel(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                                  const float* __restrict__ row_scale,
                                  const float* __restrict__ col_scale, const T* __restrict__ bias,
                                  T* out) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (c >= cols) return;
  float v = __bfloat162float(y[r * ld + c]) * row_scale[r] * col_scale[c];
  if (bias != nullptr) v += ToFloat(bias[c]);
  out[r * ld + c] = FromFloat<T>(v);
}

template <typename T>
cudaError_t LaunchApplyScales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                              const float* row_scale, const float* col_scale, const T* bias, T* out,
                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows > 65535) return cudaErrorInvalidValue;  // grid.y
  constexpr int kBlock = 256;
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock), static_cast<unsigned>(rows));
  ApplyScalesKernel<T>
      <<<grid, kBlock, 0, stream>>>(y, ld, rows, cols, row_scale, col_scale, bias, out);
  return cudaGetLastError();
}

// ---- W8A16 GEMV ----------------------------------------------------------------------------

constexpr int kWarps = 8;  // warps (output columns) per block
// 16-byte weight loads in flight per lane (8, a whole 4,096-wide row at once, measured 4-15 %
// slower on the H100: gemv_bench --fp8).
constexpr int kUnroll = 4;

// 16 e4m3 weights (one 16-byte load) against 16 activations (two 16-byte loads), in fp32.
template <typename T>
__device__ __forceinline__ float Dot16(const uint4& w, const uint4& x0, const uint4& x1) {
  const auto* wp = reinterpret_cast<const __nv_fp8x2_storage_t*>(&w);
  const auto* xa = reinterpret_cast<const dtype_internal::Pair<T>*>(&x0);
  const auto* xb = reinterpret_cast<const dtype_internal::Pair<T>*>(&x1);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    // e4m3 -> f16 is exact (fp16 holds every e4m3 value).
    const __half2 wh = __half2(__nv_cvt_fp8x2_to_halfraw2(wp[i], __NV_E4M3));
    const float2 wf = __half22float2(wh);
    const float2 xf = PairToFloat2<T>(i < 4 ? xa[i] : xb[i - 4]);
    s = fmaf(wf.x, xf.x, s);
    s = fmaf(wf.y, xf.y, s);
  }
  return s;
}

__device__ __forceinline__ void StoreOut(float v, float* out) { *out = v; }
template <typename T>
__device__ __forceinline__ void StoreOut(float v, T* out) {
  *out = FromFloat<T>(v);
}

template <int M, typename T, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    GemvFp8Kernel(const T* __restrict__ x, int64_t ldx, const __nv_fp8_e4m3* __restrict__ w,
                  const float* __restrict__ w_scale, int64_t n, int64_t k,
                  const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo) {
  const int lane = threadIdx.x % 32;
  const int64_t col = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (col >= n) return;
  const int64_t chunks = k / 16;  // 16 elements per 16-byte load
  const uint4* wr = reinterpret_cast<const uint4*>(w + col * k);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int64_t base = lane; base < chunks; base += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32;
      wv[u] = c < chunks ? __ldcs(wr + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32;
      if (c >= chunks) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4* xr = reinterpret_cast<const uint4*>(x + m * ldx) + 2 * c;
        acc[m] += Dot16<T>(wv[u], __ldg(xr), __ldg(xr + 1));
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
  }
  if (lane == 0) {
    const float s = w_scale[col];
    const float b = bias != nullptr ? ToFloat(bias[col]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) StoreOut(acc[m] * s + b, out + m * ldo + col);
  }
}

template <int M, typename T>
cudaError_t LaunchGemvFp8M(const GemvFp8ArgsT<T>& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.n + kWarps - 1) / kWarps));
  if (a.out_f32) {
    GemvFp8Kernel<M, T, float><<<grid, kWarps * 32, 0, stream>>>(
        a.x, a.ldx, a.w, a.w_scale, a.n, a.k, a.bias, static_cast<float*>(a.out), a.ldo);
  } else {
    GemvFp8Kernel<M, T, T><<<grid, kWarps * 32, 0, stream>>>(a.x, a.ldx, a.w, a.w_scale, a.n, a.k,
                                                             a.bias, static_cast<T*>(a.out), a.ldo);
  }
  return cudaGetLastError();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
bool Supported(const GemvFp8ArgsT<T>& a) {
  return a.m >= 1 && a.m <= kGemvMaxRows && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.ldx % 8 == 0 &&
         Aligned16(a.x) && Aligned16(a.w) && a.w_scale != nullptr;
}

template <typename T>
cudaError_t LaunchGemvFp8(const GemvFp8ArgsT<T>& a, cudaStream_t stream) {
  if (!Supported(a)) return cudaErrorInvalidValue;
  return DispatchRows(a.m, [&]<int M>() { return LaunchGemvFp8M<M>(a, stream); });
}

}  // namespace

cudaError_t QuantizeRowsFp8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}
cudaError_t QuantizeRowsFp8(const __half* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}

cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchApplyScales(y, ld, rows, cols, row_scale, col_scale, bias, out, stream);
}
cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale, const __half* bias,
                           __half* out, cudaStream_t stream) {
  return LaunchApplyScales(y, ld, rows, cols, row_scale, col_scale, bias, out, stream);
}

bool GemvFp8Supported(const GemvFp8ArgsT<__nv_bfloat16>& a) { return Supported(a); }
bool GemvFp8Supported(const GemvFp8ArgsT<__half>& a) { return Supported(a); }
cudaError_t GemvFp8(const GemvFp8ArgsT<__nv_bfloat16>& a, cudaStream_t stream) {
  return LaunchGemvFp8(a, stream);
}
cudaError_t GemvFp8(const GemvFp8ArgsT<__half>& a, cudaStream_t stream) {
  return LaunchGemvFp8(a, stream);
}

}  // namespace kiln::kernels
