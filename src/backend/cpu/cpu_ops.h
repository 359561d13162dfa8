// The CPU backend's ops: the numerical reference of the Llama-family forward pass (DESIGN.md §4)
// that the CUDA kernels are compared with. Each op is a plain function over raw pointers and
// sizes; tensors are row-major f32 with the shapes in the trailing comments; an `ld*` argument is
// the distance in floats between consecutive rows. Ops allocate nothing but per-thread scratch
// and run on at most `num_threads` threads of the ParallelFor pool (thread_pool.h; <= 0: every
// core); small ops run on the calling thread alone.
//
// Determinism and batch invariance. Every output element is computed by one thread, and every
// reduction runs in an order fixed by the sizes of that element's own reduction (K of a linear
// layer, head_dim and the context length in attention) — never by the number of rows or tokens
// in the batch, the other rows' values, the thread count or the row's place in the batch. So a
// sequence's logits are bitwise the same alone or batched with others, prefilled whole or in
// chunks. (OpenBLAS's sgemm is not row-invariant across M on this machine's kernels, which is
// why Linear uses its own kernel; cpu_ops_test checks Linear against cblas_sgemm numerically.)
//
// The fixed reduction order of every dot product ("16-lane order"): lane l (0..15) accumulates
// a[k] * b[k] for k = l, l+16, l+32, ... in increasing k with fused multiply-adds (one rounding
// each; a zero-padded tail adds exact zeros), then the lanes are summed as a tree:
//   s8[l] = acc[l] + acc[l+8];  s4[l] = s8[l] + s8[l+4];  s2[l] = s4[l] + s4[l+2];  s2[0] + s2[1].
// The AVX-512, AVX2 and portable implementations (simd.h) all compute exactly this, so results
// are also bitwise identical across CPUs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"

namespace kiln::cpu {

// ---- Weights -----------------------------------------------------------------------------------

// How the rows of a weight matrix are stored. Linear decodes rows on the fly to exactly the f32
// values DequantizeToF32 (model/dequant.h) gives, so the format changes memory traffic, never a
// result. Quantized rows are whole blocks of 32 elements:
//   kQ4_0  18 B: [d f16][16 B nibbles]        y = d * (q - 8)
//   kQ4_1  20 B: [d f16][m f16][16 B nibbles] y = d * q + m
//   kQ8_0  34 B: [d f16][32 x int8]           y = q * d
// (element j in the low nibble of byte j, element j + 16 in its high nibble).
//   kF8E4M3  1 B per element, e4m3fn codes, with one fp32 scale per row (WeightView::row_scales):
//            FP8 W8A8 (model/quantization.h). DecodeRows gives the codes' values; Linear applies
//            the row scales and quantizes its input per row.
//   kI8      1 B per element, int8 codes in [-127, 127], with one fp32 scale per row: INT8 W8A8
//            (SmoothQuant, model/quantization.h). DecodeRows gives the codes' values; Linear
//            quantizes its input per row to int8 and accumulates in int32.
//   kW4      W4A16 (model/quantization.h): packed signed 4-bit codes, cols / 2 bytes per row,
//            with per-(row, group) fp16 scales and int8 zeros and an optional act-order
//            permutation of the columns (WeightView::w4_*). DecodeRows gives the values in
//            input-channel order (the permutation undone); Linear decodes stored columns and
//            gathers its input instead (x[m, perm[j]]), which sums the same products in the
//            stored order.
enum class WeightFormat : uint8_t { kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ8_0, kF8E4M3, kI8, kW4 };

std::string_view WeightFormatName(WeightFormat format);  // "f32", "q4_1", ...
DType WeightFormatDType(WeightFormat format);
// The format that keeps `dtype` as stored, or nullopt when Linear cannot decode it on the fly
// (fp8 tensors too: kF8E4M3 needs row scales, which a plain dtype does not carry).
std::optional<WeightFormat> WeightFormatFor(DType dtype);
// Bytes of one row of `cols` elements. REQUIRES: cols is a multiple of the format's block size.
int64_t WeightRowBytes(WeightFormat format, int64_t cols);

// A read-only view of a row-major [rows, cols] weight matrix (a Linear weight is [out, in]).
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;  // rows * WeightRowBytes(format, cols) bytes, no alignment needed
  const float* row_scales = nullptr;  // [rows]: kF8E4M3 and kI8 only
  // kF8E4M3 only: the static activation scale (Weight::input_scale); 0 = per token, dynamic.
  float input_scale = 0;
  // kW4 only: value[r, j] = (code[r, j] - w4_zeros[r, g]) * f16(w4_scales[r, g]) in fp32 with
  // g = j / w4_group_size; stored column j multiplies input channel w4_perm[j] (identity when
  // w4_perm is null).
  int32_t w4_group_size = 0;
  const uint16_t* w4_scales = nullptr;  // [rows, cols / w4_group_size] fp16 bits
  const int8_t* w4_zeros = nullptr;     // [rows, cols / w4_group_size], each in [-8, 7]
  const int32_t* w4_perm = nullptr;     // [cols] or null
};

// e4m3fn code -> its f32 value (F8E4M3ToF32 of all 256 codes, NaN codes included).
const float* F8E4M3Table();  // [256]

// out[r, :] = row (row_begin + r) of w decoded to f32, for r < num_rows; bitwise
// DequantizeToF32's values (for kF8E4M3 the codes' values, without the row scale).
// REQUIRES: the rows exist.
void DecodeRows(const WeightView& w, int64_t row_begin, int64_t num_rows,
                float* out);  // [num_rows, w.cols]

// ---- Linear algebra ----------------------------------------------------------------------------

// sum_k a[k] * b[k] in the 16-lane order.
float Dot(const float* a, const float* b, int64_t n);

// y[m, n] = (accumulate ? y[m, n] : 0) + (dot(x[m, :], w[n, :]) + (bias ? bias[n] : 0))
// for m < num_rows, n < w.rows; the dot in the 16-lane order over w.cols, the additions in the
// order written (HF's `residual + (x @ W.T + b)`). Threads split the output columns.
// An fp8 weight (kF8E4M3) runs W8A8 as model/quantization.h defines it: each x row is quantized
// on the fly (QuantizeRowFp8: sx[m], xq[m, :]) and
//   y[m, n] = (accumulate ? y[m, n] : 0) + ((dot(xq[m, :], wq[n, :]) * sx[m]) * sw[n] + bias[n])
// with the dot of the e4m3 values in the 16-lane order (each product exact in f32: 4 x 4
// significant bits), each * and + rounded in the order written. With a static scale
// (w.input_scale > 0) every row uses sx[m] = w.input_scale and QuantizeRowFp8Static (values
// past 448 * sx saturate).
// An int8 weight (kI8) runs INT8 W8A8: each x row is quantized on the fly (QuantizeRowInt8:
// sx[m], xq[m, :]) and
//   y[m, n] = (accumulate ? y[m, n] : 0) + ((f32(acc) * sx[m]) * sw[n] + bias[n]),
//   acc = sum_k xq[m, k] * wq[n, k] in int32 (exact, so its order does not matter).
// A W4A16 weight (kW4) decodes a panel of rows to f32 per group ((code - zero) * scale, one
// rounding) and, with a permutation, multiplies them with the gathered input
// xg[m, j] = x[m, perm[j]]: the 16-lane order over the stored columns, so still independent
// of the batch and the threads.
// REQUIRES: y does not overlap x or bias; w.row_scales set for kF8E4M3 and kI8, w.w4_* for
// kW4; for kI8, w.cols < 2^17 (the int32 sum cannot overflow).
void Linear(const float* x, int64_t ldx,  // [num_rows, w.cols]
            int64_t num_rows, const WeightView& w,
            const float* bias,      // [w.rows] or nullptr
            float* y, int64_t ldy,  // [num_rows, w.rows]
            bool accumulate, int num_threads);

// ---- Elementwise and normalization -------------------------------------------------------------

// HF LlamaRMSNorm: out = weight * (x * (1 / sqrt(mean(x^2) + eps))), mean = Dot(x, x) / dim.
// out may equal x.
void RmsNorm(const float* x, int64_t ldx,  // [num_rows, dim]
             const float* weight,          // [dim]
             int64_t num_rows, int64_t dim,
             float eps,                // HF's rms_norm_eps
             float* out, int64_t ldo,  // [num_rows, dim]
             int num_threads);

// out = silu(gate) * up with silu(g) = g / (1 + exp(-g)), HF's act_fn(gate_proj) * up_proj.
void SiluMul(const float* gate_up, int64_t ld,  // [num_rows, 2 * dim]: gate columns, then up
             int64_t num_rows,
             int64_t dim,              // the intermediate size
             float* out, int64_t ldo,  // [num_rows, dim]
             int num_threads);

// ---- Rotary embedding --------------------------------------------------------------------------

// HF's inverse frequencies for one head, [head_dim / 2], in float32 as transformers computes
// them: inv_freq[i] = 1 / theta^(2i / head_dim), then
//   linear: inv_freq / factor;
//   llama3: frequencies with wavelength 2*pi/f above original_max_position_embeddings /
//           low_freq_factor are divided by factor, those below .../ high_freq_factor kept, the
//           ones between interpolated smoothly (_compute_llama3_parameters).
// Unsupported for dynamic (its frequencies depend on the sequence length) and yarn;
// InvalidArgument for an odd head_dim or llama3 without original_max_position_embeddings.
Result<std::vector<float>> RopeInvFreq(int head_dim, double theta, const RopeScaling& scaling);

// The rotation of each token: cos[t, i] = cos(positions[t] * inv_freq[i]), same for sin; the
// angle is the float32 product (as HF's matmul), its cosine and sine rounded from double.
void RopeCosSin(const int32_t* positions,  // [num_tokens]
                int64_t num_tokens,
                const float* inv_freq,  // [half_dim]
                int half_dim,
                float* cos,   // [num_tokens, half_dim]
                float* sin);  // [num_tokens, half_dim]

// Rotates every head of every token in place, HF's rotate_half layout (pairs half a head
// apart): for i < half,
//   x'[i]        = x[i] * cos[i] - x[i + half] * sin[i]
//   x'[i + half] = x[i + half] * cos[i] + x[i] * sin[i]
// each product rounded, then the sum (as q * cos + rotate_half(q) * sin).
void ApplyRope(float* x, int64_t ldx,  // [num_tokens, num_heads, head_dim], row stride ldx
               int64_t num_tokens, int num_heads, int head_dim,
               const float* cos,   // [num_tokens, head_dim / 2]
               const float* sin);  // [num_tokens, head_dim / 2]

// ---- Paged KV cache and attention --------------------------------------------------------------
//
// One layer's cache is two arrays (K and V) of [num_blocks, block_size, num_kv_heads, head_dim];
// token position p of a sequence lives in block block_table[p / block_size] at offset
// p % block_size, i.e. at slot block_id * block_size + offset:
//
//   block_table  [ 7 | 2 | 9 | -1 ... ]       positions 0..15 -> block 7, 16..31 -> block 2, ...
//   k_cache      [block][slot in block][kv head][head_dim]

// k_cache[slot_mapping[t], :, :] = k[t], same for v. REQUIRES: every slot inside the pool.
void StoreKv(const float* k, int64_t ldk,           // [num_tokens, num_kv_heads * head_dim]
             const float* v, int64_t ldv,           // [num_tokens, num_kv_heads * head_dim]
             const int64_t* slot_mapping,           // [num_tokens]
             int64_t num_tokens, int64_t kv_width,  // num_kv_heads * head_dim
             float* k_cache, float* v_cache);       // [num_slots, kv_width] each

// The FP8 KV cache's StoreKv: k_cache[slot_mapping[t], i] = Fp8KvEncode(k[t, i], k_scale)
// (model/quantization.h), same for v with v_scale.
void StoreKvFp8(const float* k, int64_t ldk,           // [num_tokens, kv_width]
                const float* v, int64_t ldv,           // [num_tokens, kv_width]
                const int64_t* slot_mapping,           // [num_tokens]
                int64_t num_tokens, int64_t kv_width,  // num_kv_heads * head_dim
                float k_scale, float v_scale,          // the layer's KV scales
                uint8_t* k_cache, uint8_t* v_cache);   // [num_slots, kv_width] e4m3 each

// Causal grouped-query attention over the paged cache, as HF's eager attention in float32. Token
// t of sequence s (cu_seqlens[s] <= t < cu_seqlens[s+1]) at position p = positions[t], head h,
// reads kv head g = h / (num_heads / num_kv_heads) at positions 0..p of sequence s:
//   score[j] = Dot(q[t, h], k[j, g]) * scale              (16-lane order over head_dim)
//   prob[j]  = exp(score[j] - max) / sum_j' exp(...)      (sum in increasing j)
//   out[t, h] = sum_j prob[j] * v[j, g]                   (increasing j, per element mul then add)
// The K/V of positions 0..p must already be in the cache (StoreKv first). Threads split the
// (token, head) pairs.
// FP8 KV cache (k_cache_fp8 / v_cache_fp8 set, k_cache / v_cache unused): every K element is read
// as F8E4M3ToF32(code) * k_scale (V: v_scale), rounded to f32, and then the same arithmetic runs
// as on an f32 cache holding those values.
struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride ldq
  int64_t ldq = 0;
  const float* k_cache = nullptr;        // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache = nullptr;        // same
  const uint8_t* k_cache_fp8 = nullptr;  // e4m3 codes, same layout (instead of k_cache)
  const uint8_t* v_cache_fp8 = nullptr;  // same (instead of v_cache)
  float k_scale = 1.0f;                  // the layer's scales, fp8 cache only
  float v_scale = 1.0f;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* cu_seqlens = nullptr;    // [num_seqs + 1]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;    // head_dim^-0.5 for Llama
  float* out = nullptr;  // [num_tokens, num_heads, head_dim], row stride ldo
  int64_t ldo = 0;
};
void PagedAttention(const PagedAttentionArgs& args, int num_threads);

}  // namespace kiln::cpu
