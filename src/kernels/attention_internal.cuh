// What the paged attention kernels of attention.cu and the Hopper prefill kernel of
// attention_prefill_sm90.cu share: the launch parameters, the cache addressing, and the entry
// points of the sm_90a kernel (built only when the build targets sm_90a; see
// PrefillSm90Built).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention.h"

namespace kiln::kernels::attention_internal {

// What both kernels read: the contract's pointers and strides, plus derived constants.
template <typename T, typename C>
struct AttentionParams {
  const T* q;
  int64_t q_stride;
  const C* k;
  const C* v;
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  int32_t block_size;
  int32_t block_shift;  // log2(block_size), or -1 when it is not a power of two
  const int32_t* seq_lens;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t group;     // num_heads / num_kv_heads
  float scale_log2;  // softmax scale * k_scale * log2(e): the kernels work in exp2
  float v_scale;     // multiplies 1 / l
  T* out;
  int64_t out_stride;
};

template <typename T, typename C>
struct PrefillParams : AttentionParams<T, C> {
  const int32_t* cu_seqlens_q;
  PrefillQCodes q_codes;  // the sm_90a e4m3 kernel only (PrefillTakesQCodes)
};

// Element offset of position `pos` of kv head `kv_head` in the cache, for a sequence's table row.
// block_shift is log2(block_size) when that is a power of two (every supported size in practice),
// else -1: a run-time division costs ~20 instructions per K/V row, a shift one.
__device__ __forceinline__ int64_t CacheOffset(const int32_t* table, int32_t block_size,
                                               int32_t block_shift, int32_t num_kv_heads,
                                               int32_t kv_head, int pos, int head_dim) {
  const int index = block_shift >= 0 ? pos >> block_shift : pos / block_size;
  const int offset = block_shift >= 0 ? pos & (block_size - 1) : pos % block_size;
  const int64_t block = table[index];
  return ((block * num_kv_heads + kv_head) * block_size + offset) * head_dim;
}

// One prefill CTA's share of the work: packed query rows [row0, row0 + rows) (row m = token
// m / group, head kv_head * group + m % group) of one kv head of one sequence, heaviest row tiles
// first (under the causal mask their work is the largest), and the keys [0, key_end) they read.
struct PrefillTile {
  bool empty;  // an empty sequence, or a row tile past its rows: nothing to do
  int kv_head;
  int q_begin;  // the sequence's first query token
  int q_len;
  int num_rows;  // q_len * group
  int row0;
  int ctx_off;  // position of query row 0
  int min_pos;  // keys past this need the causal mask
  int key_end;
  const int32_t* table;  // the sequence's block-table row

  // Element offset of position `pos` of this kv head in p's cache (CacheOffset).
  template <typename P>
  __device__ __forceinline__ int64_t KeyOffset(const P& p, int pos, int head_dim) const {
    return CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, kv_head, pos, head_dim);
  }

  // Element offset of elements dim .. of packed row m in q or out (rows `stride` apart).
  __device__ __forceinline__ int64_t RowOffset(int m, int group, int64_t stride, int head_dim,
                                               int dim) const {
    return (q_begin + m / group) * stride + (kv_head * group + m % group) * head_dim + dim;
  }
};

template <typename T, typename C>
__device__ __forceinline__ PrefillTile GetPrefillTile(const PrefillParams<T, C>& p, int rows) {
  PrefillTile w;
  const int seq = blockIdx.z;
  w.kv_head = blockIdx.y;
  const int seq_len = p.seq_lens[seq];
  w.q_begin = p.cu_seqlens_q[seq];
  w.q_len = p.cu_seqlens_q[seq + 1] - w.q_begin;
  w.num_rows = w.q_len * p.group;
  w.row0 = (gridDim.x - 1 - blockIdx.x) * rows;
  w.empty = seq_len <= 0 || w.row0 >= w.num_rows;
  w.ctx_off = seq_len - w.q_len;
  w.min_pos = w.ctx_off + w.row0 / p.group;
  w.key_end = w.ctx_off + min(w.q_len - 1, (w.row0 + rows - 1) / p.group) + 1;
  w.table = p.block_tables + int64_t{seq} * p.max_blocks_per_seq;
  return w;
}

// A T pair as an fp16 pair, rounded to nearest, saturating at +-65504 (bf16 values in
// [2^-14, 65504] are exact; fp16 passes through).
template <typename T>
__device__ __forceinline__ uint32_t PairToHalf2(uint32_t x) {
  if constexpr (std::is_same_v<T, __half>) {
    return x;
  } else {
    const float lo = __uint_as_float(x << 16);
    const float hi = __uint_as_float(x & 0xffff0000u);
    uint32_t r;
    asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
}

// ---- Hopper (sm_90a) prefill, attention_prefill_sm90.cu --------------------------------------

// True when this build holds the wgmma prefill kernel's sm_90a code (CMAKE_CUDA_ARCHITECTURES
// names 90a); the launcher then takes it on devices of compute capability 9.0 at head_dim 128.
bool PrefillSm90Built();

// Lets (T, C)'s sm_90a prefill kernel take its dynamic shared memory (once per device).
template <typename T, typename C>
cudaError_t SetUpPrefillSm90();

// Launches the sm_90a prefill kernel (head_dim 128) over num_seqs sequences of up to max_q_len
// query tokens; p as PagedPrefillKernel takes it. REQUIRES: PrefillSm90Built(), a device of
// compute capability 9.0, SetUpPrefillSm90<T, C>() done, the arguments validated by the caller.
// e4m3_math (fp8 caches only): the e4m3 mma kernel (Q quantized per row, P in e4m3), else
// 16-bit mma's (fp16 over an fp8 cache).
template <typename T, typename C>
cudaError_t LaunchPrefillSm90(const PrefillParams<T, C>& p, int32_t max_q_len, int32_t num_seqs,
                              bool e4m3_math, cudaStream_t stream);

}  // namespace kiln::kernels::attention_internal
