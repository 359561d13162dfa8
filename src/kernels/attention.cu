// Paged attention over the bf16, fp16 or fp8 (e4m3) KV cache (attention.h): FlashAttention-2
// style prefill and a split-K (flash-decoding) decode path. Both use mma.sync m16n8k16 bf16 / fp16
// tensor-core tiles with fp32 accumulation and an fp32 online softmax (attention_mma.cuh); K/V
// tiles are gathered through the block table with 16-byte cp.async copies into padded
// shared-memory rows. Every kernel is one body templated on the activation type T and the cache
// element type C (T or __nv_fp8_e4m3), instantiated for all four pairs; bf16 and fp16 take the
// same shared memory, tiles and launch bounds.
//
// FP8 cache: the cp.async copies land in unpadded fp8 staging tiles (half the bytes: 16 keys x
// 128 dims is 2 KiB), and each K/V tile is converted once, by all threads of the CTA, into a T
// tile of the same padded layout a T cache uses (exact: every e4m3 value is a normal bf16 / fp16
// number), which the unchanged tensor-core step then reads. The staging tiles are the pipeline's
// buffers, so one T tile (no double buffer) suffices. The scales are folded outside the loops:
// k_scale into the softmax scale, v_scale into the final 1 / l.
//
// Layout assumed: q/out rows 16-byte aligned (pointers and strides multiples of 8 elements), cache
// [num_blocks, num_kv_heads, block_size, head_dim] so one kv head's 16 consecutive positions are
// 16 * head_dim contiguous elements; block_size a multiple of 16, so a 16-key tile never straddles
// two cache blocks.
//
// GQA: both kernels pack the query heads of one kv head into the rows of one tile, row
// m = token * group + head_in_group, so every K/V tile is read once per kv head, not once per
// query head (4x fewer K/V bytes for Llama-3.1-8B).
//
// Prefill: one CTA of kPrefillWarps<head_dim> warps per (row tile of 16 or 32 packed rows a warp,
// kv head, sequence); K/V tiles of 64 keys double-buffered, shared by all warps; heaviest row tiles
// are scheduled first (causal work grows with the tile index). Napkin math, Llama-3.1-8B
// 4,096-token causal prefill: 4 * 32 heads * 128 * 4096^2 / 2 = 137 GFLOP, 0.18 ms at 779 TFLOP/s
// (wgmma peak); mma.sync on Hopper reaches roughly half of that, so ~0.4 ms is the realistic floor.
//
// Decode: one warp per (split, kv head x head chunk, sequence) walks its share of the sequence's
// 16-key tiles with a kDecodeStages-deep cp.async pipeline (fp8: kDecodeStagesFp8, all in flight
// during the tensor-core step; bf16 / fp16: each lane has 2 * kDecodeStages - 2
// 16-byte loads of 8 KiB tiles in flight at head_dim 128), then writes (m, l, o / l) partials that
// a second kernel merges. Napkin math, batch 64 x 1,024 tokens, 8 kv heads x 128: 268 MB of K/V,
// 80 us at 3.35 TB/s; 134 MB, 40 us, from an fp8 cache (whose conversion adds ~300 instructions
// a lane per 16-key tile at bf16, ~100 at fp16, to the ~200 of the tensor-core step).
//
// Versions tried are recorded in docs/kernels.md ("Paged attention").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "core/logging.h"
#include "kernels/attention.h"
#include "kernels/attention_mma.cuh"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.cuh"

namespace kiln::kernels {
namespace {

using attention_internal::CpAsync16;
using attention_internal::CpAsyncCommit;
using attention_internal::CpAsyncWait;
using attention_internal::kSmemStride;
using attention_internal::Ldmatrix4;
using attention_internal::LoadQFragments;
using attention_internal::WarpAttendTile;
using attention_internal::WarpAttendTileM;
using attention_internal::WarpState;
using dtype_internal::E4m3x8ToVec8;
using dtype_internal::FloatsToPair;
using dtype_internal::FromFloat;
using dtype_internal::kIsFp8;
using dtype_internal::Pair;

constexpr float kLog2e = 1.4426950408889634f;

// Prefill warps a CTA. head_dim 64: 4 (two CTAs an SM), 1.35x faster than 8 with one row tile a
// warp (docs/kernels.md); head_dim 128: 8 (one CTA an SM), which shares each K/V tile and its
// FP8 conversion among twice the rows (H100, attention_bench: 1 x 4,096 causal 0.93x, 512 new on
// 3,584 cached 0.85-0.87x the time of 4 warps).
template <int kHeadDim>
inline constexpr int kPrefillWarps = kHeadDim == 128 ? 8 : 4;
constexpr int kPrefillTileN = 64;  // keys per K/V tile
constexpr int kDecodeTileN = 16;   // keys per decode tile (never straddles a cache block)
constexpr int kDecodeStages = 4;   // cp.async pipeline depth of one decode warp
// The fp8 cache's depth. Its warps also convert every tile, so they are bound by their own
// latency rather than by bytes in flight: fewer stages leave room for more warps an SM, which
// won (H100, head_dim 128: 2 stages, 16.5 KiB a CTA, 12 CTAs an SM by registers, beat 4 stages /
// 8 CTAs by 1.2x at batch 64 and matched it at 256; 8 stages / 5 CTAs ran 1.6x slower).
constexpr int kDecodeStagesFp8 = 2;
constexpr int kDecodeRows = 16;  // query heads per decode warp (the mma M)
constexpr int kMinTilesPerSplit = 2;
constexpr int kMaxReduceHeads = 8;  // heads a merge CTA takes
constexpr int kMaxSplits = 256;

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
};

// Converts one K/V tile of fp8 staging rows, [K, V][kKeys][kHeadDim] bytes, into T tiles
// [kKeys][kSmemStride] (k_dst, v_dst), all kThreads threads of the caller taking part (the
// caller synchronizes before and after). Each thread takes 8 codes a step: an 8-byte load and
// one 16-byte store, so a quarter warp reads and writes 128 contiguous bytes (no bank conflicts).
template <int kHeadDim, int kKeys, int kThreads, typename T>
__device__ __forceinline__ void ConvertFp8Tile(const uint8_t* src, T* k_dst, T* v_dst, int tid) {
  constexpr int kGroups = kHeadDim / 8;  // 8-code groups a row
  constexpr int kPerHalf = kKeys * kGroups / kThreads;
  static_assert(kKeys * kGroups % kThreads == 0, "every thread converts whole K and V steps");
#pragma unroll
  for (int j = 0; j < 2 * kPerHalf; ++j) {
    const int i = (j % kPerHalf) * kThreads + tid;  // the group within K (or V)
    T* dst = j < kPerHalf ? k_dst : v_dst;
    const uint2 x =
        *reinterpret_cast<const uint2*>(src + (j < kPerHalf ? 0 : kKeys * kHeadDim) + i * 8);
    *reinterpret_cast<uint4*>(dst + (i / kGroups) * kSmemStride<kHeadDim> + (i % kGroups) * 8) =
        E4m3x8ToVec8<T>(x);
  }
}

// Q, K and V tiles of 16-bit elements (bf16 and fp16 alike). A T cache double-buffers the K/V
// tiles (the cp.async targets); an fp8 cache has one T tile each and double-buffered fp8 staging
// tiles ([2][K, V][kPrefillTileN][kHeadDim] bytes): 83 KiB against 85 KiB at head_dim 128.
template <int kHeadDim, typename C, int kM>
constexpr size_t PrefillSmemBytes() {
  constexpr size_t tiles = kIsFp8<C> ? 2 : 2 * 2;
  constexpr size_t staging = kIsFp8<C> ? 2 * 2 * kPrefillTileN * kHeadDim : 0;
  return sizeof(uint16_t) * kSmemStride<kHeadDim> *
             (kPrefillWarps<kHeadDim> * 16 * kM + tiles * kPrefillTileN) +
         staging;
}

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

int32_t BlockShift(int32_t block_size) {
  return (block_size & (block_size - 1)) == 0 ? __builtin_ctz(block_size) : -1;
}

template <int kHeadDim, int kM, typename T, typename C>
__global__ void __launch_bounds__(kPrefillWarps<kHeadDim> * 32,
                                  kPrefillWarps<kHeadDim> <= 4 ? 2 : 1)
    PagedPrefillKernel(const PrefillParams<T, C> p) {
  constexpr bool kFp8 = kIsFp8<C>;
  constexpr int kStride = kSmemStride<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;                         // 16-byte chunks per row of T
  constexpr int kCacheChunks = kHeadDim * int{sizeof(C)} / 16;  // per cache row
  constexpr int kChunkElems = 16 / int{sizeof(C)};
  constexpr int kWarpRows = 16 * kM;
  constexpr int kRows = kPrefillWarps<kHeadDim> * kWarpRows;
  constexpr int kThreads = kPrefillWarps<kHeadDim> * 32;
  constexpr int kTileBufs = kFp8 ? 1 : 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_smem = reinterpret_cast<T*>(smem_raw);  // [kRows][kStride]
  T* k_smem = q_smem + kRows * kStride;           // [kTileBufs][kPrefillTileN][kStride]
  T* v_smem = k_smem + kTileBufs * kPrefillTileN * kStride;
  // fp8 only: [2 buffers][K, V][kPrefillTileN][kHeadDim] codes, the cp.async targets.
  auto* staging = reinterpret_cast<uint8_t*>(v_smem + kTileBufs * kPrefillTileN * kStride);

  const int seq = blockIdx.z;
  const int kv_head = blockIdx.y;
  const int seq_len = p.seq_lens[seq];
  const int q_begin = p.cu_seqlens_q[seq];
  const int q_len = p.cu_seqlens_q[seq + 1] - q_begin;
  const int num_rows = q_len * p.group;
  // Heaviest (last) row tiles first: under the causal mask their work is the largest.
  const int row0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  if (seq_len <= 0 || row0 >= num_rows) return;
  const int ctx_off = seq_len - q_len;  // position of query row 0
  const int last_token = min(q_len - 1, (row0 + kRows - 1) / p.group);
  const int min_pos = ctx_off + row0 / p.group;  // keys past this need the mask
  const int key_end = ctx_off + last_token + 1;  // keys [0, key_end) are read
  const int num_tiles = (key_end + kPrefillTileN - 1) / kPrefillTileN;
  const int32_t* table = p.block_tables + int64_t{seq} * p.max_blocks_per_seq;
  const int tid = threadIdx.x;

  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const int m = row0 + r;
    const bool valid = m < num_rows;
    const T* src = p.q;
    if (valid) {
      const int head = kv_head * p.group + m % p.group;
      src = p.q + (q_begin + m / p.group) * p.q_stride + head * kHeadDim + ch * 8;
    }
    CpAsync16(q_smem + r * kStride + ch * 8, src, valid);
  }
  auto load_kv = [&](int tile, int buf) {
    for (int c = tid; c < kPrefillTileN * kCacheChunks; c += kThreads) {
      const int r = c / kCacheChunks;
      const int ch = c % kCacheChunks;
      const int key = tile * kPrefillTileN + r;
      const bool valid = key < key_end;
      int64_t off = 0;
      if (valid) {
        off = CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, kv_head, key,
                          kHeadDim) +
              ch * kChunkElems;
      }
      if constexpr (kFp8) {
        uint8_t* s = staging + (buf * 2 * kPrefillTileN + r) * kHeadDim + ch * 16;
        CpAsync16(s, p.k + off, valid);
        CpAsync16(s + kPrefillTileN * kHeadDim, p.v + off, valid);
      } else {
        const int s = (buf * kPrefillTileN + r) * kStride + ch * 8;
        CpAsync16(k_smem + s, p.k + off, valid);
        CpAsync16(v_smem + s, p.v + off, valid);
      }
    }
  };
  load_kv(0, 0);
  CpAsyncCommit();

  const int warp = tid / 32;
  const int lane = tid % 32;
  // Rows past the sequence's last token borrow its position; they are computed, never stored.
  int max_pos[2 * kM];
  for (int i = 0; i < 2 * kM; ++i) {
    const int m = row0 + warp * kWarpRows + (i / 2) * 16 + lane / 4 + 8 * (i % 2);
    max_pos[i] = ctx_off + min(m / p.group, q_len - 1);
  }
  WarpState<kHeadDim, kM> st;
  st.Init();
  // One row tile: Q's fragments in registers; two: reloaded from shared memory (WarpAttendTileM).
  const T* warp_q = q_smem + warp * kWarpRows * kStride;
  uint32_t qf[kM == 1 ? kHeadDim / 16 : 1][4];
  const int q_row = (lane & 7) + (((lane >> 3) & 1) << 3);
  const int q_col = (lane >> 4) << 3;
  auto q_frag = [&](int kk, int mi, uint32_t(&a)[4]) {
    if constexpr (kM == 1) {
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = qf[kk][e];
    } else {
      Ldmatrix4(a, warp_q + (mi * 16 + q_row) * kStride + kk * 16 + q_col);
    }
  };
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < num_tiles) {
      load_kv(tile + 1, buf ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const T* k_tile = k_smem + buf * kPrefillTileN * kStride;
    const T* v_tile = v_smem + buf * kPrefillTileN * kStride;
    if constexpr (kFp8) {
      ConvertFp8Tile<kHeadDim, kPrefillTileN, kThreads>(
          staging + buf * 2 * kPrefillTileN * kHeadDim, k_smem, v_smem, tid);
      __syncthreads();
      k_tile = k_smem;
      v_tile = v_smem;
    }
    if constexpr (kM == 1) {
      if (tile == 0) LoadQFragments<kHeadDim>(warp_q, qf);
    }
    const int key0 = tile * kPrefillTileN;
    WarpAttendTileM<kHeadDim, kPrefillTileN, kM>(q_frag, k_tile, v_tile, p.scale_log2,
                                                 key0 + kPrefillTileN - 1 > min_pos, key0, max_pos,
                                                 st);
    __syncthreads();  // the next iteration's copy (fp8: conversion) overwrites this buffer
  }

  // O / l -> T through this warp's (now unused) Q rows, then 16-byte coalesced stores.
  float inv_l[2 * kM];
  st.Finish(inv_l);
  for (float& v : inv_l) v *= p.v_scale;
  T* o_smem = q_smem + warp * kWarpRows * kStride;
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int i = 0; i < 2 * kM; ++i) {
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      const float* o = st.o[i / 2][d];
      *reinterpret_cast<Pair<T>*>(o_smem + ((i / 2) * 16 + g + 8 * (i % 2)) * kStride + d * 8 +
                                  2 * t) =
          FloatsToPair<T>(o[2 * (i % 2)] * inv_l[i], o[2 * (i % 2) + 1] * inv_l[i]);
    }
  }
  __syncwarp();
  for (int c = lane; c < kWarpRows * kChunks; c += 32) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const int m = row0 + warp * kWarpRows + r;
    if (m >= num_rows) continue;
    const int head = kv_head * p.group + m % p.group;
    *reinterpret_cast<uint4*>(p.out + (q_begin + m / p.group) * p.out_stride + head * kHeadDim +
                              ch * 8) =
        *reinterpret_cast<const uint4*>(o_smem + r * kStride + ch * 8);
  }
}

// ---- Decode --------------------------------------------------------------------------------

template <typename T, typename C>
struct DecodeParams : AttentionParams<T, C> {
  int32_t head_chunks;  // ceil(group / kDecodeRows)
  int32_t num_splits;
  int32_t min_tiles;        // the fewest tiles a split takes (SplitRange)
  int32_t one_split_below;  // sequences of fewer tiles take one split (SplitRange)
  float* partial_ml;        // [num_seqs, num_heads, num_splits, 2]: m (log2 units), l
  float* partial_o;         // [num_seqs, num_heads, num_splits, head_dim]: o / l
};

// The tiles [begin, end) of split `split` for a sequence of seq_len > 0 positions: the
// sequence's tiles are dealt evenly over the splits, at least p.min_tiles each, so short
// sequences use fewer splits, and one split below p.one_split_below tiles. Returns the number of
// non-empty splits.
template <typename P>
__device__ __forceinline__ int SplitRange(int seq_len, const P& p, int split, int* begin,
                                          int* end) {
  const int num_tiles = (seq_len + kDecodeTileN - 1) / kDecodeTileN;
  const int per_split = num_tiles < p.one_split_below
                            ? num_tiles
                            : max((num_tiles + p.num_splits - 1) / p.num_splits, p.min_tiles);
  *begin = split * per_split;
  *end = min(num_tiles, *begin + per_split);
  return (num_tiles + per_split - 1) / per_split;
}

// A T cache: Q rows and kDecodeStages K and V tiles of T (39 KiB at head_dim 128). An fp8 cache:
// one K and one V tile of T (Q's rows, read once, are the K tile's space) and kDecodeStagesFp8
// stages of codes ([K, V][16][kHeadDim] bytes each): 16.5 KiB at head_dim 128.
template <int kHeadDim, typename C>
constexpr size_t DecodeSmemBytes() {
  static_assert(kDecodeRows == kDecodeTileN, "Q's rows fill the K tile's space");
  if constexpr (kIsFp8<C>) {
    return sizeof(uint16_t) * kSmemStride<kHeadDim> * 2 * kDecodeTileN +
           kDecodeStagesFp8 * 2 * kDecodeTileN * kHeadDim;
  } else {
    return sizeof(uint16_t) * kSmemStride<kHeadDim> *
           (kDecodeRows + 2 * kDecodeStages * kDecodeTileN);
  }
}

template <int kHeadDim, typename T, typename C>
__global__ void __launch_bounds__(32) PagedDecodeSplitKernel(const DecodeParams<T, C> p) {
  PdlWait();
  PdlLaunchDependents();
  constexpr bool kFp8 = kIsFp8<C>;
  constexpr int kStride = kSmemStride<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kCacheChunks = kHeadDim * int{sizeof(C)} / 16;
  constexpr int kChunkElems = 16 / int{sizeof(C)};
  constexpr int kStageElems = kDecodeTileN * kStride;
  constexpr int kStages = kFp8 ? kDecodeStagesFp8 : kDecodeStages;
  constexpr int kTileBufs = kFp8 ? 1 : kStages;
  constexpr int kStageCodes = 2 * kDecodeTileN * kHeadDim;  // fp8: one stage, K then V
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_smem = reinterpret_cast<T*>(smem_raw);            // [kDecodeRows][kStride]
  T* k_smem = q_smem + (kFp8 ? 0 : kDecodeRows * kStride);  // [kTileBufs][16][kStride]
  T* v_smem = k_smem + kTileBufs * kStageElems;
  // fp8 only: [kStages][K, V][16][kHeadDim] codes, the cp.async targets.
  auto* staging = reinterpret_cast<uint8_t*>(v_smem + kTileBufs * kStageElems);

  // Grid (splits, kv heads x chunks, sequences): a sequence's splits are scheduled together. With
  // balancing splits (one_split_below > 0) the split is the slowest index instead, (kv heads x
  // chunks, sequences, splits): every sequence's first split is scheduled before any second one,
  // so the CTAs of splits the short sequences do not use (they return at once) come last, behind
  // the work (attention_bench --engine-like, batch 256 of 128-256 positions: 72 against 87 us;
  // 1,000-2,000 positions: 328 against 318 us).
  const bool split_slowest = p.one_split_below > 0;
  const int split = split_slowest ? blockIdx.z : blockIdx.x;
  const int head_index = split_slowest ? blockIdx.x : blockIdx.y;
  const int kv_head = head_index / p.head_chunks;
  const int head0 = kv_head * p.group + (head_index % p.head_chunks) * kDecodeRows;
  const int num_rows = min(kDecodeRows, (kv_head + 1) * p.group - head0);
  const int seq = split_slowest ? blockIdx.y : blockIdx.z;
  const int seq_len = p.seq_lens[seq];
  if (seq_len <= 0) return;  // padding row
  int tile_begin, tile_end;
  const int num_active = SplitRange(seq_len, p, split, &tile_begin, &tile_end);
  if (tile_begin >= tile_end) return;
  const int lane = threadIdx.x;
  const int32_t* table = p.block_tables + int64_t{seq} * p.max_blocks_per_seq;

  for (int c = lane; c < kDecodeRows * kChunks; c += 32) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const bool valid = r < num_rows;
    const T* src = valid ? p.q + seq * p.q_stride + (head0 + r) * kHeadDim + ch * 8 : p.q;
    CpAsync16(q_smem + r * kStride + ch * 8, src, valid);
  }
  // A 16-key tile lies inside one cache block: one table read, 16 * kHeadDim contiguous elements.
  auto load_tile = [&](int tile, int stage) {
    const int key0 = tile * kDecodeTileN;
    const int64_t base =
        CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, kv_head, key0, kHeadDim);
#pragma unroll
    for (int c = lane; c < kDecodeTileN * kCacheChunks; c += 32) {
      const int r = c / kCacheChunks;
      const int ch = c % kCacheChunks;
      const bool valid = key0 + r < seq_len;
      const int64_t off = valid ? base + r * kHeadDim + ch * kChunkElems : 0;
      if constexpr (kFp8) {
        uint8_t* s = staging + stage * kStageCodes + r * kHeadDim + ch * 16;
        CpAsync16(s, p.k + off, valid);
        CpAsync16(s + kDecodeTileN * kHeadDim, p.v + off, valid);
      } else {
        const int s = stage * kStageElems + r * kStride + ch * 8;
        CpAsync16(k_smem + s, p.k + off, valid);
        CpAsync16(v_smem + s, p.v + off, valid);
      }
    }
  };
  // Prologue (group 0 also holds Q; empty groups keep the wait_group count uniform at the tail).
  // A T cache: tiles 0 .. kStages - 2, and each iteration first refills the stage the previous
  // one read. fp8: tiles 0 .. kStages - 1, and each iteration refills its own stage as soon as
  // it is converted, so all kStages tiles are in flight during the tensor-core step.
  constexpr int kLead = kFp8 ? kStages : kStages - 1;
#pragma unroll
  for (int i = 0; i < kLead; ++i) {
    if (tile_begin + i < tile_end) load_tile(tile_begin + i, i);
    CpAsyncCommit();
  }
  WarpState<kHeadDim> st;
  st.Init();
  uint32_t qf[kHeadDim / 16][4];
  const int max_pos[2] = {seq_len - 1, seq_len - 1};
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int i = tile - tile_begin;
    const int stage = i % kStages;
    if constexpr (!kFp8) {
      const int ahead = tile + kStages - 1;
      if (ahead < tile_end) load_tile(ahead, (i + kStages - 1) % kStages);
      CpAsyncCommit();
    }
    CpAsyncWait<kStages - 1>();  // tile i's group (kStages + i groups committed)
    __syncwarp();
    if (i == 0) LoadQFragments<kHeadDim>(q_smem, qf);
    const T* k_tile = k_smem + stage * kStageElems;
    const T* v_tile = v_smem + stage * kStageElems;
    if constexpr (kFp8) {
      if (i == 0) __syncwarp();  // Q's rows are read before the K tile overwrites them
      ConvertFp8Tile<kHeadDim, kDecodeTileN, 32>(staging + stage * kStageCodes, k_smem, v_smem,
                                                 lane);
      __syncwarp();  // the T tiles are written, the stage is read
      if (tile + kStages < tile_end) load_tile(tile + kStages, stage);
      CpAsyncCommit();
      k_tile = k_smem;
      v_tile = v_smem;
    }
    const int key0 = tile * kDecodeTileN;
    WarpAttendTile<kHeadDim, kDecodeTileN>(qf, k_tile, v_tile, p.scale_log2,
                                           key0 + kDecodeTileN > seq_len, key0, max_pos, st);
    // A T cache: the stage is refilled kStages - 1 iterations later; fp8: the T tiles next one.
    __syncwarp();
  }

  float inv_l[2];
  st.Finish(inv_l);
  inv_l[0] *= p.v_scale;
  inv_l[1] *= p.v_scale;
  const int g = lane / 4;
  const int t = lane % 4;
  if (num_active == 1) {
    // One split: this is the whole softmax; write the output (the merge kernel skips the
    // sequence, or is not launched).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      if (row >= num_rows) continue;
      T* o = p.out + int64_t{seq} * p.out_stride + (head0 + row) * kHeadDim;
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        *reinterpret_cast<Pair<T>*>(o + d * 8 + 2 * t) =
            FloatsToPair<T>(st.o[0][d][2 * r] * inv_l[r], st.o[0][d][2 * r + 1] * inv_l[r]);
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= num_rows) continue;
    const int64_t slot = (int64_t{seq} * p.num_heads + head0 + row) * p.num_splits + split;
    float* o = p.partial_o + slot * kHeadDim;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<float2*>(o + d * 8 + 2 * t) =
          make_float2(st.o[0][d][2 * r] * inv_l[r], st.o[0][d][2 * r + 1] * inv_l[r]);
    }
    if (t == 0) *reinterpret_cast<float2*>(p.partial_ml + slot * 2) = make_float2(st.m[r], st.l[r]);
  }
}

// Merges the splits of the heads of a sequence that has more than one: out = sum_j w_j o_j /
// sum_j w_j with w_j = l_j * 2^(m_j - max m). One thread per output element, blockDim.x /
// kHeadDim heads a CTA (up to kMaxReduceHeads: fewer CTAs to schedule where most sequences
// return at once).
template <int kHeadDim, typename T, typename C>
__global__ void __launch_bounds__(kMaxReduceHeads* kHeadDim)
    PagedDecodeReduceKernel(const DecodeParams<T, C> p) {
  PdlWait();
  PdlLaunchDependents();
  const int head = blockIdx.x * (blockDim.x / kHeadDim) + threadIdx.x / kHeadDim;
  const int dim = threadIdx.x % kHeadDim;
  const int seq = blockIdx.y;
  const int seq_len = p.seq_lens[seq];
  if (seq_len <= 0) return;
  int begin, end;
  const int num_active = SplitRange(seq_len, p, 0, &begin, &end);
  if (num_active <= 1) return;  // the split kernel wrote the output
  const int64_t slot0 = (int64_t{seq} * p.num_heads + head) * p.num_splits;
  const float* ml = p.partial_ml + slot0 * 2;
  const float* o = p.partial_o + slot0 * kHeadDim + dim;
  float m_max = -INFINITY;
  for (int j = 0; j < num_active; ++j) m_max = fmaxf(m_max, ml[2 * j]);
  float num = 0.0f;
  float den = 0.0f;
  for (int j = 0; j < num_active; ++j) {
    const float w = ml[2 * j + 1] * exp2f(ml[2 * j] - m_max);
    num += w * o[int64_t{j} * kHeadDim];
    den += w;
  }
  p.out[seq * p.out_stride + head * kHeadDim + dim] = FromFloat<T>(den > 0.0f ? num / den : 0.0f);
}

// ---- Host side -----------------------------------------------------------------------------

// Per-device figures the launchers need, read once (host queries are not stream work, so they
// are safe inside graph capture too, but caching keeps them off the per-layer path).
// The cache kinds whose decode kernels differ in shared memory (so in occupancy and splits).
enum CacheKind { kCacheT = 0, kCacheFp8 = 1 };

template <typename C>
constexpr CacheKind KindOf() {
  return kIsFp8<C> ? kCacheFp8 : kCacheT;
}

struct DeviceFigures {
  int num_sms = 0;
  int decode_blocks_per_sm[2][2] = {};  // [cache kind][head_dim 64, 128]
};

// Lets (T, C)'s prefill kernels take their dynamic shared memory and reads the resident blocks
// per SM of its decode kernel (head_dim 64, 128).
template <typename T, typename C>
cudaError_t SetUpKernels(int (&decode_blocks_per_sm)[2]) {
  cudaError_t e = cudaSuccess;
  auto set_prefill_smem = [&]<int kHeadDim, int kM>() {
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(PagedPrefillKernel<kHeadDim, kM, T, C>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(PrefillSmemBytes<kHeadDim, C, kM>()));
    }
  };
  set_prefill_smem.template operator()<64, 1>();
  set_prefill_smem.template operator()<64, 2>();
  set_prefill_smem.template operator()<128, 1>();
  set_prefill_smem.template operator()<128, 2>();
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &decode_blocks_per_sm[0], PagedDecodeSplitKernel<64, T, C>, 32, DecodeSmemBytes<64, C>());
  }
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &decode_blocks_per_sm[1], PagedDecodeSplitKernel<128, T, C>, 32, DecodeSmemBytes<128, C>());
  }
  return e;
}

// Sets up T's kernels over both cache kinds; blocks[kind][hd] becomes the smaller of its value
// and T's.
template <typename T>
cudaError_t SetUpType(int (&blocks)[2][2]) {
  int t_cache[2] = {0, 0}, fp8_cache[2] = {0, 0};
  cudaError_t e = SetUpKernels<T, T>(t_cache);
  if (e == cudaSuccess) e = SetUpKernels<T, __nv_fp8_e4m3>(fp8_cache);
  for (int i = 0; i < 2; ++i) {
    blocks[kCacheT][i] = std::min(blocks[kCacheT][i], t_cache[i]);
    blocks[kCacheFp8][i] = std::min(blocks[kCacheFp8][i], fp8_cache[i]);
  }
  return e;
}

cudaError_t GetDeviceFigures(DeviceFigures* out) {
  static std::mutex mu;
  static std::array<DeviceFigures, 64> cache{};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 0 || device >= static_cast<int>(cache.size())) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(mu);
  DeviceFigures& f = cache[device];
  if (f.num_sms == 0) {
    DeviceFigures n;
    for (auto& kind : n.decode_blocks_per_sm) kind[0] = kind[1] = 1 << 20;
    cudaError_t e = cudaDeviceGetAttribute(&n.num_sms, cudaDevAttrMultiProcessorCount, device);
    // One split rule for bf16 and fp16 (their kernels take the same shared memory, so in practice
    // the same occupancy); the fp8 cache's decode kernel takes less shared memory, so more of its
    // CTAs fit an SM and it gets its own. PagedDecodeWorkspaceBytes takes the larger need.
    if (e == cudaSuccess) e = SetUpType<__nv_bfloat16>(n.decode_blocks_per_sm);
    if (e == cudaSuccess) e = SetUpType<__half>(n.decode_blocks_per_sm);
    if (e != cudaSuccess) return e;
    f = n;
  }
  *out = f;
  return cudaSuccess;
}

bool IsAligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Checks what both launchers assume; logs the reason for a bad argument.
template <typename T, typename C>
bool ValidCommon(const char* fn, const T* q, int64_t q_stride, const PagedKvCacheT<T, C>& kv,
                 const AttentionDims& d, const T* out, int64_t out_stride, int32_t num_seqs) {
  const char* why = nullptr;
  const bool scales_ok = kIsFp8<C> ? std::isfinite(kv.k_scale) && std::isfinite(kv.v_scale) &&
                                         kv.k_scale > 0.0f && kv.v_scale > 0.0f
                                   : kv.k_scale == 1.0f && kv.v_scale == 1.0f;
  if (d.head_dim != 64 && d.head_dim != 128) {
    why = "head_dim must be 64 or 128";
  } else if (d.num_heads <= 0 || d.num_kv_heads <= 0 || d.num_heads % d.num_kv_heads != 0) {
    why = "num_kv_heads must be positive and divide num_heads";
  } else if (kv.block_size <= 0 || kv.block_size % 16 != 0) {
    why = "block_size must be a positive multiple of 16";
  } else if (num_seqs < 0 || num_seqs > 65535) {
    why = "num_seqs must be in [0, 65535]";
  } else if (num_seqs > 0 && (!q || !out || !kv.k || !kv.v || !kv.block_tables)) {
    why = "q, out, the cache and the block table must be non-null";
  } else if (!IsAligned16(q) || !IsAligned16(out) || !IsAligned16(kv.k) || !IsAligned16(kv.v)) {
    why = "q, out and the cache must be 16-byte aligned";
  } else if (q_stride % 8 != 0 || out_stride % 8 != 0 ||
             q_stride < int64_t{d.num_heads} * d.head_dim ||
             out_stride < int64_t{d.num_heads} * d.head_dim) {
    why = "q_stride and out_stride must be multiples of 8 and at least num_heads * head_dim";
  } else if (kv.max_blocks_per_seq <= 0) {
    why = "max_blocks_per_seq must be positive";
  } else if (!scales_ok) {
    why = kIsFp8<C> ? "an fp8 cache's k_scale and v_scale must be finite and positive"
                    : "a bf16 / fp16 cache's k_scale and v_scale must be 1 (it is not quantized)";
  }
  if (why) LOG(ERROR) << fn << ": " << why;
  return why == nullptr;
}

int DecodeHeadChunks(const AttentionDims& d) {
  return (d.num_heads / d.num_kv_heads + kDecodeRows - 1) / kDecodeRows;
}

// Splits per sequence: as many as keep the decode kernel's warps within one wave (two waves
// measured 1.25x slower at batch 1 x 32k: every extra split pays its pipeline's start-up latency;
// rounding up to just over one wave, as before, left the second wave's few warps running alone:
// H100, batch 64 x 1,024 / 4,096, 1.07-1.24x slower than rounding down, bf16 and fp8 caches
// alike), no more splits than kMinTilesPerSplit-tile pieces of the longest sequence, at least
// one.
// An fp8 cache whose batch leaves that rule at one split (more than half a wave of items) takes
// about kFp8BalanceWaves waves instead: its warps are bound by their own latency, not by DRAM,
// so a CTA's time follows its sequence's length, and one or two waves of sequences of unequal
// lengths end with a few long CTAs running alone (H100, attention_bench --engine-like, 1,000-2,000
// positions, one split against this rule: batch 128 214 vs 173 us (8 splits), 256 397 vs 327
// (4), 512 669 vs 636 (2); equal lengths, batch 256 x 1,024: 231 vs 225). Those splits take at
// least kFp8BalanceMinTiles tiles, and sequences under kFp8BalanceOneSplitBelow tiles (512
// positions) one split, with the split index slowest in the grid (PagedDecodeSplitKernel): split
// short sequences, or their unused splits' CTAs between the working ones, were slower (batch 256
// of 128-256 positions: 67 us with one split, 71-87 us in the variants tried, 72 now; the engine's
// batch-128 decode step of such lengths 5.39 ms with one split, up to 6.36 in those variants,
// 5.42 now; docs/benchmarks.md, session 20). A bf16 / fp16 cache's kernel streams at ~90 % of
// copy bandwidth with one split already and keeps the rule above (more splits: no gain at
// 256-512 sequences, 13 % slower at 128-256 positions).
// Depends only on launch-time constants, so a captured graph replays with the same value the
// workspace was sized for.
constexpr int kFp8BalanceWaves = 5;
constexpr int kFp8BalanceMinTiles = 8;
constexpr int kFp8BalanceOneSplitBelow = 32;

struct DecodeSplit {
  int splits = 1;
  int min_tiles = kMinTilesPerSplit;  // DecodeParams::min_tiles
  int one_split_below = 0;            // DecodeParams::one_split_below
};

DecodeSplit DecodeSplits(int32_t num_seqs, int32_t max_seq_len, const AttentionDims& d,
                         const DeviceFigures& f, CacheKind kind) {
  const int64_t items =
      std::max<int64_t>(int64_t{num_seqs} * d.num_kv_heads * DecodeHeadChunks(d), 1);
  const int64_t target =
      int64_t{f.num_sms} * std::max(1, f.decode_blocks_per_sm[kind][d.head_dim == 128 ? 1 : 0]);
  const int64_t max_tiles = (int64_t{max_seq_len} + kDecodeTileN - 1) / kDecodeTileN;
  int64_t splits = target / items;
  DecodeSplit r;
  if (kind == kCacheFp8 && splits <= 1) {
    splits = (kFp8BalanceWaves * target + items / 2) / items;  // rounded to nearest
    r.min_tiles = kFp8BalanceMinTiles;
    r.one_split_below = kFp8BalanceOneSplitBelow;
  }
  splits = std::min<int64_t>(splits, (max_tiles + r.min_tiles - 1) / r.min_tiles);
  r.splits = static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxSplits));
  return r;
}

template <typename T, typename C>
void FillCommon(const T* q, int64_t q_stride, const PagedKvCacheT<T, C>& kv,
                const int32_t* seq_lens, const AttentionDims& dims, T* out, int64_t out_stride,
                AttentionParams<T, C>* p) {
  p->q = q;
  p->q_stride = q_stride;
  p->k = kv.k;
  p->v = kv.v;
  p->block_tables = kv.block_tables;
  p->max_blocks_per_seq = kv.max_blocks_per_seq;
  p->block_size = kv.block_size;
  p->block_shift = BlockShift(kv.block_size);
  p->seq_lens = seq_lens;
  p->num_heads = dims.num_heads;
  p->num_kv_heads = dims.num_kv_heads;
  p->group = dims.num_heads / dims.num_kv_heads;
  p->scale_log2 = dims.scale * kv.k_scale * kLog2e;
  p->v_scale = kv.v_scale;
  p->out = out;
  p->out_stride = out_stride;
}

size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

size_t DecodeWorkspaceFor(int32_t num_seqs, int32_t splits, const AttentionDims& d) {
  const size_t slots = size_t(num_seqs) * d.num_heads * splits;
  return AlignUp(slots * 2 * sizeof(float)) + AlignUp(slots * d.head_dim * sizeof(float));
}

// The launchers behind the public overloads (one per element type).

template <typename T, typename C>
cudaError_t LaunchPrefill(const T* q, int64_t q_stride, const PagedKvCacheT<T, C>& kv,
                          const int32_t* cu_seqlens_q, const int32_t* seq_lens, int32_t num_seqs,
                          int32_t max_q_len, const AttentionDims& dims, T* out, int64_t out_stride,
                          cudaStream_t stream) {
  if (!ValidCommon("PagedPrefillAttention", q, q_stride, kv, dims, out, out_stride, num_seqs)) {
    return cudaErrorInvalidValue;
  }
  if (max_q_len < 0 || (num_seqs > 0 && (!cu_seqlens_q || !seq_lens))) {
    LOG(ERROR) << "PagedPrefillAttention: max_q_len must be >= 0 and cu_seqlens_q, seq_lens "
                  "non-null";
    return cudaErrorInvalidValue;
  }
  if (num_seqs == 0 || max_q_len == 0) return cudaSuccess;
  DeviceFigures f;
  if (cudaError_t e = GetDeviceFigures(&f); e != cudaSuccess) return e;
  PrefillParams<T, C> p{};
  FillCommon(q, q_stride, kv, seq_lens, dims, out, out_stride, &p);
  p.cu_seqlens_q = cu_seqlens_q;
  // Two row tiles a warp (WarpAttendTileM) when that grid still makes two waves of resident CTAs:
  // half the shared-memory reads per FLOP and half the FP8 conversions per row; each row's
  // arithmetic is the same, so the outputs are bitwise those of one row tile. Fewer, larger CTAs
  // left SMs idle (H100, 512 new tokens on 3,584 cached, 8 kv heads, 4 warps: 128 CTAs of two
  // tiles, 1.13x slower than 256 of one).
  const int warps = dims.head_dim == 128 ? kPrefillWarps<128> : kPrefillWarps<64>;
  const int64_t rows = int64_t{max_q_len} * p.group;
  const int64_t two_tile_rows = int64_t{warps} * 16 * 2;
  const int64_t resident = warps <= 4 ? 2 : 1;  // CTAs an SM (the kernel's launch bounds)
  const bool two = (rows + two_tile_rows - 1) / two_tile_rows * dims.num_kv_heads * num_seqs >=
                   2 * resident * f.num_sms;
  const int64_t tile_rows = two ? two_tile_rows : two_tile_rows / 2;
  const int64_t row_tiles = (rows + tile_rows - 1) / tile_rows;
  if (row_tiles > 0x7fffffff || dims.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), dims.num_kv_heads, num_seqs);
  auto launch = [&]<int kHeadDim, int kM>() {
    PagedPrefillKernel<kHeadDim, kM, T, C>
        <<<grid, kPrefillWarps<kHeadDim> * 32, PrefillSmemBytes<kHeadDim, C, kM>(), stream>>>(p);
  };
  if (dims.head_dim == 64) {
    two ? launch.template operator()<64, 2>() : launch.template operator()<64, 1>();
  } else {
    two ? launch.template operator()<128, 2>() : launch.template operator()<128, 1>();
  }
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t LaunchDecode(const T* q, int64_t q_stride, const PagedKvCacheT<T, C>& kv,
                         const int32_t* seq_lens, int32_t num_seqs, int32_t max_seq_len,
                         const AttentionDims& dims, void* workspace, size_t workspace_bytes, T* out,
                         int64_t out_stride, cudaStream_t stream, int32_t num_splits) {
  if (!ValidCommon("PagedDecodeAttention", q, q_stride, kv, dims, out, out_stride, num_seqs)) {
    return cudaErrorInvalidValue;
  }
  if (num_seqs == 0) return cudaSuccess;
  if (max_seq_len <= 0 || !seq_lens ||
      int64_t{max_seq_len} > int64_t{kv.max_blocks_per_seq} * kv.block_size) {
    LOG(ERROR) << "PagedDecodeAttention: max_seq_len must be in [1, max_blocks_per_seq * "
                  "block_size] and seq_lens non-null";
    return cudaErrorInvalidValue;
  }
  DeviceFigures f;
  if (cudaError_t e = GetDeviceFigures(&f); e != cudaSuccess) return e;
  if (num_splits < 0 || num_splits > kMaxSplits) return cudaErrorInvalidValue;
  const DecodeSplit split = num_splits > 0
                                ? DecodeSplit{num_splits, kMinTilesPerSplit}
                                : DecodeSplits(num_seqs, max_seq_len, dims, f, KindOf<C>());
  const int splits = split.splits;
  const size_t need = DecodeWorkspaceFor(num_seqs, splits, dims);
  if (!workspace || workspace_bytes < need || !IsAligned16(workspace)) {
    LOG(ERROR) << "PagedDecodeAttention: the workspace must be 16-byte aligned and hold " << need
               << " bytes (PagedDecodeWorkspaceBytes), got " << workspace_bytes;
    return cudaErrorInvalidValue;
  }
  DecodeParams<T, C> p{};
  FillCommon(q, q_stride, kv, seq_lens, dims, out, out_stride, &p);
  p.head_chunks = DecodeHeadChunks(dims);
  p.num_splits = splits;
  p.min_tiles = split.min_tiles;
  p.one_split_below = split.one_split_below;
  const size_t slots = size_t(num_seqs) * dims.num_heads * splits;
  p.partial_ml = static_cast<float*>(workspace);
  p.partial_o =
      reinterpret_cast<float*>(static_cast<char*>(workspace) + AlignUp(slots * 2 * sizeof(float)));
  const int64_t head_items = int64_t{dims.num_kv_heads} * p.head_chunks;
  if (head_items > 65535) return cudaErrorInvalidValue;
  const unsigned h = static_cast<unsigned>(head_items);
  const dim3 grid = p.one_split_below > 0 ? dim3(h, num_seqs, splits)   // split slowest
                                          : dim3(splits, h, num_seqs);  // a sequence's together
  // Merge CTAs of several heads only with balancing splits, where most CTAs of short sequences
  // return at once; otherwise one head a CTA, whose small CTAs fit beside the split kernel's
  // last ones (8 heads a CTA: engine decode step at batch 64 +0.8 %).
  int reduce_heads = p.one_split_below > 0 ? kMaxReduceHeads : 1;
  while (dims.num_heads % reduce_heads != 0) reduce_heads /= 2;
  const dim3 reduce_grid(dims.num_heads / reduce_heads, num_seqs);
  auto launch = [&]<int kHeadDim>() {
    cudaError_t e = LaunchChained(PagedDecodeSplitKernel<kHeadDim, T, C>, grid, 32,
                                  DecodeSmemBytes<kHeadDim, C>(), stream, p);
    if (e == cudaSuccess && splits > 1) {
      e = LaunchChained(PagedDecodeReduceKernel<kHeadDim, T, C>, reduce_grid,
                        reduce_heads * kHeadDim, 0, stream, p);
    }
    return e;
  };
  return dims.head_dim == 64 ? launch.template operator()<64>() : launch.template operator()<128>();
}

}  // namespace

cudaError_t PagedPrefillAttention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& kv,
                                  const int32_t* cu_seqlens_q, const int32_t* seq_lens,
                                  int32_t num_seqs, int32_t max_q_len, const AttentionDims& dims,
                                  __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream);
}
cudaError_t PagedPrefillAttention(const __half* q, int64_t q_stride,
                                  const PagedKvCacheT<__half>& kv, const int32_t* cu_seqlens_q,
                                  const int32_t* seq_lens, int32_t num_seqs, int32_t max_q_len,
                                  const AttentionDims& dims, __half* out, int64_t out_stride,
                                  cudaStream_t stream) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream);
}

cudaError_t PagedPrefillAttention(const __nv_bfloat16* q, int64_t q_stride,
                                  const PagedKvCacheFp8T<__nv_bfloat16>& kv,
                                  const int32_t* cu_seqlens_q, const int32_t* seq_lens,
                                  int32_t num_seqs, int32_t max_q_len, const AttentionDims& dims,
                                  __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream);
}
cudaError_t PagedPrefillAttention(const __half* q, int64_t q_stride,
                                  const PagedKvCacheFp8T<__half>& kv, const int32_t* cu_seqlens_q,
                                  const int32_t* seq_lens, int32_t num_seqs, int32_t max_q_len,
                                  const AttentionDims& dims, __half* out, int64_t out_stride,
                                  cudaStream_t stream) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream);
}

size_t PagedDecodeWorkspaceBytes(int32_t max_num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims) {
  if (max_num_seqs <= 0 || dims.num_kv_heads <= 0 || dims.num_heads <= 0 ||
      dims.num_heads % dims.num_kv_heads != 0) {
    return 0;
  }
  DeviceFigures f;
  if (GetDeviceFigures(&f) != cudaSuccess) return 0;
  // Fewer sequences get more splits each; size for the worst batch size up to the maximum, and
  // for the cache kind that splits more.
  size_t bytes = 0;
  for (int32_t n = 1; n <= max_num_seqs; ++n) {
    for (CacheKind kind : {kCacheT, kCacheFp8}) {
      bytes = std::max(
          bytes, DecodeWorkspaceFor(n, DecodeSplits(n, max_seq_len, dims, f, kind).splits, dims));
    }
  }
  return bytes;
}

size_t PagedDecodeWorkspaceBytesForSplits(int32_t num_seqs, int32_t num_splits,
                                          const AttentionDims& dims) {
  return DecodeWorkspaceFor(num_seqs, num_splits, dims);
}

cudaError_t PagedDecodeAttention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& kv,
                                 const int32_t* seq_lens, int32_t num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims, void* workspace, size_t workspace_bytes,
                                 __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream,
                                 int32_t num_splits) {
  return LaunchDecode(q, q_stride, kv, seq_lens, num_seqs, max_seq_len, dims, workspace,
                      workspace_bytes, out, out_stride, stream, num_splits);
}
cudaError_t PagedDecodeAttention(const __half* q, int64_t q_stride, const PagedKvCacheT<__half>& kv,
                                 const int32_t* seq_lens, int32_t num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims, void* workspace, size_t workspace_bytes,
                                 __half* out, int64_t out_stride, cudaStream_t stream,
                                 int32_t num_splits) {
  return LaunchDecode(q, q_stride, kv, seq_lens, num_seqs, max_seq_len, dims, workspace,
                      workspace_bytes, out, out_stride, stream, num_splits);
}

cudaError_t PagedDecodeAttention(const __nv_bfloat16* q, int64_t q_stride,
                                 const PagedKvCacheFp8T<__nv_bfloat16>& kv, const int32_t* seq_lens,
                                 int32_t num_seqs, int32_t max_seq_len, const AttentionDims& dims,
                                 void* workspace, size_t workspace_bytes, __nv_bfloat16* out,
                                 int64_t out_stride, cudaStream_t stream, int32_t num_splits) {
  return LaunchDecode(q, q_stride, kv, seq_lens, num_seqs, max_seq_len, dims, workspace,
                      workspace_bytes, out, out_stride, stream, num_splits);
}
cudaError_t PagedDecodeAttention(const __half* q, int64_t q_stride,
                                 const PagedKvCacheFp8T<__half>& kv, const int32_t* seq_lens,
                                 int32_t num_seqs, int32_t max_seq_len, const AttentionDims& dims,
                                 void* workspace, size_t workspace_bytes, __half* out,
                                 int64_t out_stride, cudaStream_t stream, int32_t num_splits) {
  return LaunchDecode(q, q_stride, kv, seq_lens, num_seqs, max_seq_len, dims, workspace,
                      workspace_bytes, out, out_stride, stream, num_splits);
}

}  // namespace kiln::kernels
