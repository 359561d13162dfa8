// FP8 (e4m3fn) and INT8 quantization and weight-only FP8 / INT8 linear layers
// (model/quantization.h has the arithmetic; the CPU backend is its reference). Raw device pointers
// + sizes + strides + stream; no engine types. Activations are bf16 or fp16 (an overload per type,
// one kernel body behind both). Every function returns the launch status and never synchronizes
// (graph-capturable).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/elementwise.h"

namespace kiln::kernels {

// Per-row quantization: scales[r] = Fp8RowScale(max_c |x[r, c]|) and
// out[r, c] = e4m3(x[r, c] / scales[r]) (round to nearest even; |x / scale| <= 448 so nothing
// saturates). For activations one row is one token (dynamic per-token scales); for a weight
// matrix [out, in] one row is one output channel (static per-channel scales, at load).
// x: [rows, cols] with row stride ldx; out: [rows, cols] with row stride ldo; scales: [rows].
// REQUIRES: cols, ldx and ldo multiples of 8; x and out 16-byte aligned.
cudaError_t QuantizeRowsFp8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream);
cudaError_t QuantizeRowsFp8(const __half* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream);

// Static per-tensor activation quantization (model/quantization.h, QuantizeRowFp8Static): one
// calibrated scale for every row, read from the device scalar `scale`; scales[r] = *scale and
// out[r, c] = e4m3(clamp(x[r, c] / *scale, -448, 448)) (past the calibrated range a value
// saturates). The same shapes and alignment as QuantizeRowsFp8.
cudaError_t QuantizeRowsFp8Static(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                                  const float* scale, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* scales, cudaStream_t stream);
cudaError_t QuantizeRowsFp8Static(const __half* x, int64_t ldx, int64_t rows, int64_t cols,
                                  const float* scale, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* scales, cudaStream_t stream);

// The epilogue of an FP8 GEMM that wrote unscaled sums y[m, n] = sum_k xq[m, k] * wq[n, k] in
// bf16: out[m, n] = y[m, n] * row_scale[m] * col_scale[n] (+ bias[n]) in T (fp32 arithmetic, one
// rounding). out may be y itself (in place: each element is read, then written, by one thread).
// y and out: [rows, cols] with row stride ld; rows <= 65535.
cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, cudaStream_t stream);
cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale, const __half* bias,
                           __half* out, cudaStream_t stream);

// n e4m3 codes of a normal distribution N(0, sigma^2) (saturating at +-448), a pure function of
// (seed, index): stand-in activations with the spread of signs and exponents of real ones, for
// timing FP8 GEMMs at the power limit (cuda::Gemm::TuneFp8Prompt), where the bits decide the
// energy a product takes (constant codes run ~15 % faster there than Gaussian ones).
cudaError_t FillGaussianE4m3(__nv_fp8_e4m3* out, int64_t n, uint64_t seed, float sigma,
                             cudaStream_t stream);

// Weight-only FP8 skinny linear layer (W8A16, batch-1..8 decode): out[m, n] =
// (sum_k x[m, k] * e4m3(w[n, k])) * w_scale[n] (+ bias[n]), fp32 accumulation, one rounding to
// the output type (T, or fp32 with out_f32). The weight stream is half of a bf16 GEMV's: each
// warp owns output columns and streams its row of w in 16-byte (16-element) loads.
// Code: the weight's one-byte code type, __nv_fp8_e4m3 (GemvFp8ArgsT) or int8_t (GemvInt8ArgsT).
template <typename T, typename Code>
struct GemvW8ArgsT {
  const T* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  int32_t m = 0;                   // 1 ..= kGemvMaxRows (gemv.h)
  const Code* w = nullptr;         // [n, k] contiguous
  const float* w_scale = nullptr;  // [n]
  int64_t n = 0;
  int64_t k = 0;
  const T* bias = nullptr;  // [n] or null
  void* out = nullptr;      // [m, n], row stride ldo
  int64_t ldo = 0;
  bool out_f32 = false;
  // A hint (dtype_internal::PrefetchL2 in kernels/dtype_traits.cuh): bytes the stream reads
  // next, e.g. the next linear layer's weights, for L2 to fetch while this kernel runs. Null:
  // none. REQUIRES: 16-byte aligned, prefetch_bytes a multiple of 16.
  const void* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
  // A fused gate_up projection with SiluMul in the epilogue: w and w_scale (and bias) hold 2 n
  // rows, gate's n then up's n, and out[m, j] = silu(gate_j) * up_j for j < n, each of gate_j
  // and up_j first rounded to T as the plain GEMV would store it, then as kernels::SiluMul
  // computes it: the bits of the GEMV over 2 n rows followed by SiluMul, without the gate_up
  // row in memory or SiluMul's launch. REQUIRES: !out_f32.
  bool silu_mul = false;
  // A fused qkv projection with the decode rows' RoPE and KV-cache write in the epilogue: w
  // holds (num_heads + 2 num_kv_heads) * head_dim rows (n), row r of x is token r of *rope
  // (its positions, slot_mapping, inv_freq, caches and their scales), and out = rope->qkv gets
  // what the GEMV followed by kernels::RopeStoreKv leaves there (q heads rotated, k and v heads
  // as computed), the caches what RopeStoreKv writes, bit for bit, without the launch. At most
  // one of rope (a T cache) and rope_fp8 (an e4m3 cache); host pointers, read at the launch.
  // REQUIRES: !out_f32, !silu_mul, rope->num_tokens == m, rope->qkv == out, rope->ld == ldo, no
  // q_codes and no qkv_scales, the cache scales RopeStoreKv accepts, head_dim even.
  const RopeKvArgsT<T, T>* rope = nullptr;
  const RopeKvArgsT<T, __nv_fp8_e4m3>* rope_fp8 = nullptr;
  // At most as many blocks as the SMs hold at once, each walking several blocks' worth of
  // outputs with its weight loads kept in flight across them (docs/kernels.md, "W8A16 GEMV");
  // the same bits. Taken at m = 1 where k is a multiple of 2,048, else ignored.
  bool persistent = false;
  // With persistent, at one row on e4m3 codes: the tensor-core form where it pays
  // (GemvFp8OnTensorCores; docs/kernels.md, "W8A16 GEMV on the tensor cores"). Its sums run in
  // another order: not the one-item kernel's bits, within the fp32 sum's error bound.
  bool mma = true;
};
template <typename T>
using GemvFp8ArgsT = GemvW8ArgsT<T, __nv_fp8_e4m3>;

// Whether GemvFp8 handles these operands: 1 <= m <= kGemvMaxRows, k a multiple of 16, ldx a
// multiple of 8, x and w 16-byte aligned, T output with silu_mul.
bool GemvFp8Supported(const GemvFp8ArgsT<__nv_bfloat16>& args);
bool GemvFp8Supported(const GemvFp8ArgsT<__half>& args);

// Whether GemvFp8 runs args on the tensor cores (GemvW8ArgsT::mma): one row, persistent, k a
// multiple of 1,024 up to 32,768, whole 16-row tiles (n a multiple of 16; of 8 with silu_mul;
// head_dim of 16 with rope), and at least 2.5 tiles an SM (the current device's).
bool GemvFp8OnTensorCores(const GemvFp8ArgsT<__nv_bfloat16>& args);
bool GemvFp8OnTensorCores(const GemvFp8ArgsT<__half>& args);

// REQUIRES: GemvFp8Supported(args).
cudaError_t GemvFp8(const GemvFp8ArgsT<__nv_bfloat16>& args, cudaStream_t stream);
cudaError_t GemvFp8(const GemvFp8ArgsT<__half>& args, cudaStream_t stream);

// ---- INT8 (SmoothQuant W8A8, model/quantization.h) -------------------------------------------

// Per-row int8 quantization: scales[r] = max(amax_r / 127, FLT_MIN) and
// out[r, c] = round-to-nearest-even(x[r, c] / scales[r]) (IEEE fp32 division) clamped to +-127:
// bit-exact with the CPU reference (QuantizeRowInt8). Same layout and requirements as
// QuantizeRowsFp8.
cudaError_t QuantizeRowsInt8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                             int8_t* out, int64_t ldo, float* scales, cudaStream_t stream);
cudaError_t QuantizeRowsInt8(const __half* x, int64_t ldx, int64_t rows, int64_t cols, int8_t* out,
                             int64_t ldo, float* scales, cudaStream_t stream);

// The epilogue of an int8 x int8 -> int32 GEMM: out[m, n] = acc[m, n] * row_scale[m] *
// col_scale[n] (+ bias[n]) in fp32, one rounding to T (or none: out_f32). acc: [rows, cols] with
// row stride ld_acc; out: [rows, cols] with row stride ldo; rows <= 65535.
cudaError_t ApplyInt8Scales(const int32_t* acc, int64_t ld_acc, int64_t rows, int64_t cols,
                            const float* row_scale, const float* col_scale,
                            const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                            cudaStream_t stream);
cudaError_t ApplyInt8Scales(const int32_t* acc, int64_t ld_acc, int64_t rows, int64_t cols,
                            const float* row_scale, const float* col_scale, const __half* bias,
                            void* out, int64_t ldo, bool out_f32, cudaStream_t stream);

// Weight-only INT8 skinny linear layer (W8A16): GemvFp8 with int8 weight codes,
// out[m, n] = (sum_k x[m, k] * w[n, k]) * w_scale[n] (+ bias[n]). Same kernel body, same
// requirements (GemvInt8Supported).
template <typename T>
using GemvInt8ArgsT = GemvW8ArgsT<T, int8_t>;

bool GemvInt8Supported(const GemvInt8ArgsT<__nv_bfloat16>& args);
bool GemvInt8Supported(const GemvInt8ArgsT<__half>& args);
cudaError_t GemvInt8(const GemvInt8ArgsT<__nv_bfloat16>& args, cudaStream_t stream);
cudaError_t GemvInt8(const GemvInt8ArgsT<__half>& args, cudaStream_t stream);

}  // namespace kiln::kernels
