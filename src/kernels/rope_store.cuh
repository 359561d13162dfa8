// One (head, pair) of a decode row's RoPE and KV-cache write (kernels::RopeStoreKv's scalar
// kernel, elementwise.cu, and the qkv GEMVs' epilogues, quant.cu: GemvW8ArgsT::rope, and
// w4a16.cu: W4GemmArgsT::rope), shared so that they give the same bits. Internal to src/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "kernels/dtype_traits.cuh"
#include "kernels/elementwise.h"

namespace kiln::kernels::rope_internal {

// Whether a's cache scales are ones RopeStoreKv takes: finite and positive for an e4m3 cache, 1
// for a T cache.
template <typename T, typename C>
inline bool CacheScalesOk(const RopeKvArgsT<T, C>& a) {
  return dtype_internal::kIsFp8<C> ? std::isfinite(a.k_scale) && std::isfinite(a.v_scale) &&
                                         a.k_scale > 0.0f && a.v_scale > 0.0f
                                   : a.k_scale == 1.0f && a.v_scale == 1.0f;
}

// The cache row that k or v head `head` of a fused qkv row (head >= num_heads) goes to for the
// token in cache slot `slot`, and that cache's fp8 scale (1 for a T cache).
template <typename T, typename C>
__device__ __forceinline__ C* KvCacheRow(const RopeKvArgsT<T, C>& a, int head, int64_t slot,
                                         float* scale) {
  const bool is_k = head < a.num_heads + a.num_kv_heads;
  const int kv_head = head - a.num_heads - (is_k ? 0 : a.num_kv_heads);
  const int64_t block = slot / a.block_size, offset = slot % a.block_size;
  *scale = is_k ? a.k_scale : a.v_scale;
  C* cache = is_k ? a.k_cache : a.v_cache;
  return cache + ((block * a.num_kv_heads + kv_head) * a.block_size + offset) * a.head_dim;
}

// Pair i of head `head` (elements i0 and i1 of the head: 2 i and 2 i + 1 interleaved, else i and
// i + head_dim / 2) of a token at position pos whose qkv row is `row`, given the pair's T values
// x0 and x1 as floats: q and k heads rotated, q heads written back into row, k and v heads into
// the cache at `slot` (none when slot < 0), as e4m3 codes of the T value over the cache's scale
// (a true division: one rounding of the exact quotient, the host's F32ToF8E4M3(round_T(x) /
// scale)) or as T.
template <typename T, typename C>
__device__ __forceinline__ void RopeStorePair(const RopeKvArgsT<T, C>& a, T* row, int head, int i,
                                              int i0, int i1, float pos, int64_t slot, float x0,
                                              float x1) {
  using dtype_internal::FromFloat;
  using dtype_internal::RoundTo;
  if (head < a.num_heads + a.num_kv_heads) {
    float s, c;
    sincosf(pos * a.inv_freq[i], &s, &c);
    dtype_internal::RotatePair(c, s, x0, x1);
  }
  if (head < a.num_heads) {
    T* h = row + int64_t{head} * a.head_dim;
    h[i0] = FromFloat<T>(x0);
    h[i1] = FromFloat<T>(x1);
  } else if (slot >= 0) {
    float scale;
    C* dst = KvCacheRow(a, head, slot, &scale);
    if constexpr (dtype_internal::kIsFp8<C>) {
      dst[i0] = dtype_internal::ToE4m3Sat(__fdiv_rn(RoundTo<T>(x0), scale));
      dst[i1] = dtype_internal::ToE4m3Sat(__fdiv_rn(RoundTo<T>(x1), scale));
    } else {
      dst[i0] = FromFloat<T>(x0);
      dst[i1] = FromFloat<T>(x1);
    }
  }
}

}  // namespace kiln::kernels::rope_internal
