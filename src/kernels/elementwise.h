// The small fused kernels of the Llama forward pass (DESIGN.md §4). Raw device pointers + sizes
// + strides + stream; no engine types. Activations are bf16 or fp16 (each function has an
// overload per type, one kernel body behind both), arithmetic inside each kernel fp32; where a
// comment below says "rounded", the value is rounded to the activation type (round to nearest
// even), as HF's model in that dtype does. Every function returns the launch status and never
// synchronizes (graph-capturable).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace kiln::kernels {

// The unscaled output of an FP8 GEMM (cuda::Gemm::Fp8GemmUnscaled: e4m3 x e4m3 sums in bf16),
// scaled by the consumer as it reads it, instead of in a kernels::ApplyFp8Scales pass of its own:
// input[r, c] = round_bf16(y[r, c] * row[r] * col[c] (+ bias[c])), the bits ApplyFp8Scales
// would have written (dtype_internal::Fp8ScaledSum). row null: the input is used as it is. Only
// bf16 activations (an fp16 model's unscaled sums are bf16 all the same, not its T): the fp16
// overloads refuse a non-null row with cudaErrorInvalidValue.
struct Fp8InputScales {
  const float* row = nullptr;           // [input rows]: the GEMM input's per-token scales
  const float* col = nullptr;           // [input width]: the weight's per-channel scales
  const __nv_bfloat16* bias = nullptr;  // [input width] or null
};

// out[t, :] = table[ids[t], :] for t < num_tokens. REQUIRES: ids < the table's rows.
cudaError_t EmbeddingLookup(const int32_t* ids, int32_t num_tokens, const __nv_bfloat16* table,
                            int32_t hidden, __nv_bfloat16* out, cudaStream_t stream);
cudaError_t EmbeddingLookup(const int32_t* ids, int32_t num_tokens, const __half* table,
                            int32_t hidden, __half* out, cudaStream_t stream);

// RMSNorm of rows as HF's LlamaRMSNorm in bf16 / fp16: y = round(x * rsqrt(mean(x^2) + eps)) * w.
// With `residual` (may be null): the norm of residual[t] + x[t] (the sum rounded, as HF adds in
// the model's dtype), and the sum is stored back into residual. row_ids (may be null) picks input
// rows: output row i normalizes row row_ids[i] (the logits rows of a step); the sum is then not
// stored. x/residual [*, dim] with row stride ldx; out [num_rows, dim] with row stride ldo;
// dim <= 12288.
cudaError_t RmsNorm(const __nv_bfloat16* x, int64_t ldx, __nv_bfloat16* residual,
                    const int32_t* row_ids, int32_t num_rows, int32_t dim,
                    const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int64_t ldo,
                    cudaStream_t stream);
cudaError_t RmsNorm(const __half* x, int64_t ldx, __half* residual, const int32_t* row_ids,
                    int32_t num_rows, int32_t dim, const __half* weight, float eps, __half* out,
                    int64_t ldo, cudaStream_t stream);

// RmsNorm over an fp32 residual stream: residual[t] = residual[t] + x[t] in fp32 (no rounding:
// the stream keeps 24 bits where HF's bf16 model keeps 8 (fp16: 11), which decides the error of
// models with outlier channels; the CPU backend's stream is fp32 too), then out as RmsNorm's (the
// normalized row rounded, times the weight, rounded). init: the residual is taken as 0,
// so it becomes x (layer 0's embeddings). row_ids picks rows as RmsNorm does (the sum is then
// not stored; not with init). residual rows share x's stride ldx.
cudaError_t RmsNormF32Residual(const __nv_bfloat16* x, int64_t ldx, float* residual, bool init,
                               const int32_t* row_ids, int32_t num_rows, int32_t dim,
                               const __nv_bfloat16* weight, float eps, __nv_bfloat16* out,
                               int64_t ldo, cudaStream_t stream);
cudaError_t RmsNormF32Residual(const __half* x, int64_t ldx, float* residual, bool init,
                               const int32_t* row_ids, int32_t num_rows, int32_t dim,
                               const __half* weight, float eps, __half* out, int64_t ldo,
                               cudaStream_t stream);

// The FP8 linear layers' activation quantization (kernels/quant.h QuantizeRowsFp8) fused into
// the op before them: the same output row (rounded to T), quantized per row to e4m3 exactly as
// QuantizeRowsFp8 quantizes it (scale = max(amax / 448, 1 / (448 * 512)), codes e4m3(v / scale)
// rounded to nearest even), written as out [num_rows, dim] e4m3 (row stride ldo) and
// out_scales [num_rows]; the row in T is not stored. static_scale: null, or a device scalar, the
// layer's static activation scale (QuantizeRowsFp8Static's quantization instead).
// x_scales: x is an FP8 GEMM's unscaled output (Fp8InputScales; the previous o / down
// projection's), scaled here as it is read; x_scales.row is indexed by x's row (row_ids' pick).
// cudaErrorInvalidValue unless dim, ldx and ldo are multiples of 8 and x, weight, residual are
// 16-byte and out 8-byte aligned, and x_scales' vectors 16-byte aligned.
cudaError_t RmsNormF32ResidualFp8(const __nv_bfloat16* x, int64_t ldx, float* residual, bool init,
                                  const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                  const __nv_bfloat16* weight, float eps, __nv_fp8_e4m3* out,
                                  int64_t ldo, float* out_scales, const float* static_scale,
                                  cudaStream_t stream, const Fp8InputScales& x_scales = {});
cudaError_t RmsNormF32ResidualFp8(const __half* x, int64_t ldx, float* residual, bool init,
                                  const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                  const __half* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* out_scales, const float* static_scale, cudaStream_t stream,
                                  const Fp8InputScales& x_scales = {});

// The residual stream in 24 bits, for the FP8 prompt steps (cuda::CudaRunner): each value is
// the fp32 sum with the lowest 8 bits of its significand rounded off to nearest even (16
// significant bits: a relative step of 2^-16, where HF's bf16 stream has 2^-8 and fp16 2^-11),
// stored in 3 bytes instead of 4. A row of the stream is its [ldx] high 16-bit halves, then its
// [ldx] low bytes (bits 8..15 of each value): Residual24Bytes(rows, ldx) in all. The norms read
// and write the stream once a layer each, which on an FP8 prompt step is ~7 % of its device
// time (docs/kernels.md).
constexpr int64_t Residual24Bytes(int64_t rows, int64_t ldx) { return 3 * rows * ldx; }

// RmsNormF32Residual and RmsNormF32ResidualFp8 over the 24-bit stream: residual[t] =
// round24(residual[t] + x[t]) (the fp32 sum, rounded as above), normalized and written as they
// write it; with init the stream starts as x (a T value is exact in 24 bits). residual rows
// share x's stride ldx. cudaErrorInvalidValue unless dim and ldo are multiples of 8, ldx of 16,
// x, weight, residual 16-byte and out 16-byte (T) / 8-byte (e4m3) aligned (no scalar fallback).
cudaError_t RmsNormResidual24(const __nv_bfloat16* x, int64_t ldx, void* residual, bool init,
                              const int32_t* row_ids, int32_t num_rows, int32_t dim,
                              const __nv_bfloat16* weight, float eps, __nv_bfloat16* out,
                              int64_t ldo, cudaStream_t stream);
cudaError_t RmsNormResidual24(const __half* x, int64_t ldx, void* residual, bool init,
                              const int32_t* row_ids, int32_t num_rows, int32_t dim,
                              const __half* weight, float eps, __half* out, int64_t ldo,
                              cudaStream_t stream);
cudaError_t RmsNormResidual24Fp8(const __nv_bfloat16* x, int64_t ldx, void* residual, bool init,
                                 const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                 const __nv_bfloat16* weight, float eps, __nv_fp8_e4m3* out,
                                 int64_t ldo, float* out_scales, const float* static_scale,
                                 cudaStream_t stream, const Fp8InputScales& x_scales = {});
cudaError_t RmsNormResidual24Fp8(const __half* x, int64_t ldx, void* residual, bool init,
                                 const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                 const __half* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                 float* out_scales, const float* static_scale, cudaStream_t stream,
                                 const Fp8InputScales& x_scales = {});

// Rotary embedding fused with the KV-cache write. qkv: [num_tokens, (num_heads + 2 *
// num_kv_heads) * head_dim] rows (q heads, then k heads, then v heads), row stride ld. Rotates the
// q heads in place and writes the rotated k heads and the v heads of token t to cache slot
// slot_mapping[t] (block slot / block_size, offset slot % block_size) of the
// [num_blocks, num_kv_heads, block_size, head_dim] caches; a slot < 0 (a padding row) is not
// written. The angle of pair i is positions[t] * inv_freq[i] in fp32 (inv_freq is
// kiln::cpu::RopeInvFreq's, so linear and llama3 scaling are in it). interleaved = false: HF's
// rotate_half layout (pairs half a head apart, "neox"); true: adjacent pairs ("gpt-j"). T is the
// activation type (__nv_bfloat16 or __half); the rotated values are rounded to T once. C is the
// cache's element type: T (the values are stored), or __nv_fp8_e4m3 (RopeKvArgsFp8T, the FP8 KV
// cache of model/quantization.h): k is stored as e4m3(round_T(rotated k) / k_scale) and v as
// e4m3(v / v_scale), rounded to nearest even; a quotient beyond +-448 (a value beyond
// 448 * scale) saturates to +-448, never NaN, so an uncalibrated outlier is clipped, not lost.
// qkv_scales: qkv holds the FP8 qkv projection's unscaled output (Fp8InputScales, rows indexed by
// token, columns by the qkv row's element): each value is scaled as it is read, the rotated q
// heads are written back scaled (the k and v heads in qkv stay unscaled: attention reads them
// from the cache). q_codes (fp8 caches; head_dim 128): the q heads of tokens from q_tokens on (a
// step's prompt rows; the decode rows come first) are not written back but handed to the e4m3
// prefill kernel as what it would make of them (kernels/attention.h PrefillQCodes): each
// (token, head) row, rotated and rounded to T, as codes e4m3(x * (448 / amax)) (cvt.rn.satfinite)
// in q_codes[t * num_heads * head_dim + head * head_dim ..] and its scale amax / 448 (1 for an
// all-zero row) in q_code_scales[t * num_heads + head].
template <typename T, typename C = T>
struct RopeKvArgsT {
  T* qkv = nullptr;
  int64_t ld = 0;
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  const float* inv_freq = nullptr;  // device [head_dim / 2]
  bool interleaved = false;
  C* k_cache = nullptr;
  C* v_cache = nullptr;
  int32_t block_size = 16;
  // An fp8 cache's quantization scales (finite, positive); a T cache's must be 1.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  Fp8InputScales qkv_scales;         // 16-byte aligned vectors
  __nv_fp8_e4m3* q_codes = nullptr;  // 16-byte aligned; null: every q head written back
  float* q_code_scales = nullptr;
  int32_t q_tokens = 0;
};
using RopeKvArgs = RopeKvArgsT<__nv_bfloat16>;
template <typename T>
using RopeKvArgsFp8T = RopeKvArgsT<T, __nv_fp8_e4m3>;
// cudaErrorInvalidValue for an odd head_dim, scales as above, or q_codes where it cannot write
// them (a T cache, head_dim other than 128, unaligned rows, no q_code_scales, q_tokens < 0).
cudaError_t RopeStoreKv(const RopeKvArgs& args, cudaStream_t stream);
cudaError_t RopeStoreKv(const RopeKvArgsT<__half>& args, cudaStream_t stream);
cudaError_t RopeStoreKv(const RopeKvArgsFp8T<__nv_bfloat16>& args, cudaStream_t stream);
cudaError_t RopeStoreKv(const RopeKvArgsFp8T<__half>& args, cudaStream_t stream);

// Where gate and up lie in a gate_up row of 2 * dim values: gate then up (kHalves, the fused
// projection's natural order), or alternating runs of kGateUpRun (kRunsOf8: gate 0-7, up 0-7,
// gate 8-15, up 8-15, ...), the order in which the CUDA runner stores a W4A16 gate_up's rows so
// that the one-token GEMV finds gate j and up j in one 16-row tile (W4GemmArgsT::silu_mul).
enum class GateUpLayout { kHalves, kRunsOf8 };
inline constexpr int32_t kGateUpRun = 8;

// out[t, i] = silu(gate[t, i]) * up[t, i], with gate_up rows of stride ld laid out as `layout`
// says; silu(gate) rounded (HF's act_fn output), each product computed in fp32 and rounded once.
// kRunsOf8 needs dim, ld and ldo multiples of 8 and 16-byte aligned rows (else
// cudaErrorInvalidValue).
cudaError_t SiluMul(const __nv_bfloat16* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                    __nv_bfloat16* out, int64_t ldo, cudaStream_t stream,
                    GateUpLayout layout = GateUpLayout::kHalves);
cudaError_t SiluMul(const __half* gate_up, int64_t ld, int32_t num_rows, int32_t dim, __half* out,
                    int64_t ldo, cudaStream_t stream, GateUpLayout layout = GateUpLayout::kHalves);

// SiluMul's output quantized per row to e4m3 as RmsNormF32ResidualFp8's (the down projection's
// input). The same alignment requirements (gate_up 16-byte aligned, ld a multiple of 8), and
// dim <= 65,536. gate_up_scales: gate_up is the FP8 gate_up projection's unscaled output
// (Fp8InputScales over its 2 * dim columns), scaled as it is read. out_scales must not be
// gate_up_scales.row.
cudaError_t SiluMulFp8(const __nv_bfloat16* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                       __nv_fp8_e4m3* out, int64_t ldo, float* out_scales,
                       const float* static_scale, cudaStream_t stream,
                       const Fp8InputScales& gate_up_scales = {});
cudaError_t SiluMulFp8(const __half* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                       __nv_fp8_e4m3* out, int64_t ldo, float* out_scales,
                       const float* static_scale, cudaStream_t stream,
                       const Fp8InputScales& gate_up_scales = {});

// Converts n floats to bf16, resp. fp16 (round to nearest even; fp16 overflows to infinity past
// 65504), for weight upload.
cudaError_t FloatToBf16(const float* in, int64_t n, __nv_bfloat16* out, cudaStream_t stream);
cudaError_t FloatToHalf(const float* in, int64_t n, __half* out, cudaStream_t stream);

}  // namespace kiln::kernels
