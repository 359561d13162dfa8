// Attention over the paged KV cache (DESIGN.md §4): chunked-prefill / mixed attention and the
// decode fast path. Raw device pointers + sizes + strides + stream; no engine types.
//
// Activations are bf16 or fp16 (T: Q and out share it); the cache holds K and V either in T or in
// float8 e4m3 (the FP8 KV cache, model/quantization.h: stored = e4m3(value / scale), one fp32 scale
// per layer for K and one for V). Each launcher has an overload per (T, cache type), one kernel
// body behind all four. Scores, softmax and accumulation are fp32. An fp8 tile is converted to T
// exactly (every e4m3 value is a normal bf16 / fp16 number) before the tensor-core products, and
// the scales never enter the inner loops: scores = q . k_stored * (scale * k_scale), and
// out = (sum_j p_j v_stored_j / l) * v_scale. So an fp8 cache gives what a T cache holding the
// dequantized values e4m3 * scale would give, up to fp32 rounding.
//
// One layer's cache is two arrays, K and V, each [num_blocks, num_kv_heads, block_size, head_dim]
// (a block holds one kv head's block_size tokens contiguously, 4 KiB at 16 x 128 in bf16, 2 KiB in
// fp8). Position
// p of sequence s lives in block block_tables[s * max_blocks_per_seq + p / block_size] at offset
// p % block_size. Query head h reads kv head h / (num_heads / num_kv_heads) (GQA).
//
// Every function returns the launch status (cudaGetLastError after the launches); they never
// synchronize or allocate, so they can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace kiln::kernels {

// One layer's paged cache. T is the activation type (__nv_bfloat16 or __half), C the cache's
// element type: T, or __nv_fp8_e4m3 (PagedKvCacheFp8T).
template <typename T, typename C = T>
struct PagedKvCacheT {
  const C* k = nullptr;  // [num_blocks, num_kv_heads, block_size, head_dim]
  const C* v = nullptr;  // same
  int32_t num_blocks = 0;
  int32_t block_size = 16;                // a multiple of 16 (16, 32, 64)
  const int32_t* block_tables = nullptr;  // device [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  // Dequantization scales of an fp8 cache (K = e4m3 * k_scale, V = e4m3 * v_scale): finite and
  // positive. A T cache holds the values themselves: both must be 1.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};
using PagedKvCache = PagedKvCacheT<__nv_bfloat16>;
template <typename T>
using PagedKvCacheFp8T = PagedKvCacheT<T, __nv_fp8_e4m3>;

struct AttentionDims {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // divides num_heads
  int32_t head_dim = 0;      // 64 or 128
  float scale = 1.0f;        // softmax scale, head_dim^-0.5 for Llama
};

// Causal attention for sequences with any number of query tokens (prefill, chunked prefill,
// decode). Sequence s owns query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]); they are its last
// q_len positions: row i sits at position seq_lens[s] - q_len + i and attends to positions
// 0 ..= that position, whose K/V are already in the cache.
//   q:   [num_tokens, num_heads, head_dim], q_stride elements between tokens
//   out: [num_tokens, num_heads, head_dim], out_stride elements between tokens
// cu_seqlens_q and seq_lens are device arrays; max_q_len (host) bounds every q_len (it sizes the
// grid). Rows of sequences with seq_lens[s] == 0 are left untouched.
cudaError_t PagedPrefillAttention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& kv,
                                  const int32_t* cu_seqlens_q, const int32_t* seq_lens,
                                  int32_t num_seqs, int32_t max_q_len, const AttentionDims& dims,
                                  __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream);
cudaError_t PagedPrefillAttention(const __half* q, int64_t q_stride,
                                  const PagedKvCacheT<__half>& kv, const int32_t* cu_seqlens_q,
                                  const int32_t* seq_lens, int32_t num_seqs, int32_t max_q_len,
                                  const AttentionDims& dims, __half* out, int64_t out_stride,
                                  cudaStream_t stream);

// Q as the e4m3 prefill kernel would make it, made ahead by RopeStoreKv (kernels/elementwise.h
// RopeKvArgsT::q_codes): each (token, head) row's codes e4m3(q * (448 / amax)) and its scale
// amax / 448, the kernel's own rounding of the T row (StageQE4m3), so the results are the same
// bits. The kernel then loads 1 byte a Q element instead of 2 and skips the rounding, and RoPE
// writes the codes instead of the T row back: 8 KiB less a token of the 8B. Rows indexed like q's
// (by token of the step). Only where PrefillTakesQCodes says so; codes null: q is read.
struct PrefillQCodes {
  const __nv_fp8_e4m3* codes = nullptr;  // [tokens, num_heads * head_dim], 16-byte aligned
  const float* scales = nullptr;         // [tokens, num_heads]
};

// The same over an fp8 cache, Q optionally as codes.
cudaError_t PagedPrefillAttention(const __nv_bfloat16* q, int64_t q_stride,
                                  const PagedKvCacheFp8T<__nv_bfloat16>& kv,
                                  const int32_t* cu_seqlens_q, const int32_t* seq_lens,
                                  int32_t num_seqs, int32_t max_q_len, const AttentionDims& dims,
                                  __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream,
                                  const PrefillQCodes& q_codes = {});
cudaError_t PagedPrefillAttention(const __half* q, int64_t q_stride,
                                  const PagedKvCacheFp8T<__half>& kv, const int32_t* cu_seqlens_q,
                                  const int32_t* seq_lens, int32_t num_seqs, int32_t max_q_len,
                                  const AttentionDims& dims, __half* out, int64_t out_stride,
                                  cudaStream_t stream, const PrefillQCodes& q_codes = {});

// Which kernel PagedPrefillAttention takes at head_dim 128 on a GPU of compute capability 9.0
// (H100, H200) when the build holds sm_90a code: kAuto picks the wgmma kernel
// (attention_prefill_sm90.cu), with e4m3 mma's over an fp8 cache (kWgmmaE4m3), kWgmma16Bit the
// wgmma kernel with 16-bit mma's whatever the cache (fp16 over an fp8 one), kMmaSync the
// mma.sync kernel every other GPU and head_dim 64 run. They compute the same attention within
// the tolerances of attention_test (wider for e4m3: Q and P rounded to e4m3); tests and
// attention_bench compare them. Process-wide; set it while no other thread launches attention.
enum class PrefillKernel { kAuto, kMmaSync, kWgmma16Bit, kWgmmaE4m3 };
void SetPrefillKernel(PrefillKernel kernel);
// True when the current device runs the wgmma kernel (and so kWgmmaE4m3 over an fp8 cache at
// head_dim 128): compute capability 9.0 and a build with sm_90a code.
bool PrefillWgmmaAvailable();
// True when PagedPrefillAttention over an fp8 cache takes PrefillQCodes on the current device
// with these dims and the current PrefillKernel: the e4m3 wgmma kernel at head_dim 128.
bool PrefillTakesQCodes(const AttentionDims& dims);

// Bytes of the split-K scratch PagedDecodeAttention needs for up to max_num_seqs sequences of up
// to max_seq_len positions: the same for every activation and cache type (the scratch is fp32,
// and the size is the largest any of them needs).
size_t PagedDecodeWorkspaceBytes(int32_t max_num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims);

// One query token per sequence (row s of q is sequence s, at position seq_lens[s] - 1),
// split-K over the context for long sequences, each K/V tile loaded once for all query heads of
// its kv head. Graph-capturable: per-step data (seq_lens, block tables) is read from device
// memory; num_seqs and max_seq_len are fixed per captured graph (pass the padded batch size and
// the context limit; padding rows have seq_lens[s] == 0 and are left untouched).
// num_splits > 0 forces the number of context splits per sequence (benchmarks; the workspace
// must then hold PagedDecodeWorkspaceBytesForSplits); 0 lets the kernel choose from num_seqs and
// max_seq_len.
cudaError_t PagedDecodeAttention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& kv,
                                 const int32_t* seq_lens, int32_t num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims, void* workspace, size_t workspace_bytes,
                                 __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream,
                                 int32_t num_splits = 0);
cudaError_t PagedDecodeAttention(const __half* q, int64_t q_stride, const PagedKvCacheT<__half>& kv,
                                 const int32_t* seq_lens, int32_t num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims, void* workspace, size_t workspace_bytes,
                                 __half* out, int64_t out_stride, cudaStream_t stream,
                                 int32_t num_splits = 0);
// The same over an fp8 cache.
cudaError_t PagedDecodeAttention(const __nv_bfloat16* q, int64_t q_stride,
                                 const PagedKvCacheFp8T<__nv_bfloat16>& kv, const int32_t* seq_lens,
                                 int32_t num_seqs, int32_t max_seq_len, const AttentionDims& dims,
                                 void* workspace, size_t workspace_bytes, __nv_bfloat16* out,
                                 int64_t out_stride, cudaStream_t stream, int32_t num_splits = 0);
cudaError_t PagedDecodeAttention(const __half* q, int64_t q_stride,
                                 const PagedKvCacheFp8T<__half>& kv, const int32_t* seq_lens,
                                 int32_t num_seqs, int32_t max_seq_len, const AttentionDims& dims,
                                 void* workspace, size_t workspace_bytes, __half* out,
                                 int64_t out_stride, cudaStream_t stream, int32_t num_splits = 0);

// Bytes of the split-K scratch for num_seqs sequences at a forced num_splits.
size_t PagedDecodeWorkspaceBytesForSplits(int32_t num_seqs, int32_t num_splits,
                                          const AttentionDims& dims);

}  // namespace kiln::kernels
