// Paged attention over the bf16, fp16 or fp8 (e4m3) KV cache (attention.h): FlashAttention-2
// style prefill and a split-K (flash-decoding) decode path. Both use mma.sync m16n8k16 bf16 / fp16
// tensor-core tiles with fp32 accumulation and an fp32 online softmax (attention_mma.cuh); K/V
// tiles are gathered through the block table with 16-byte cp.async copies into shared memory.
// Every kernel is one body templated on the activation type T and, for prefill, the cache element
// type C (T or __nv_fp8_e4m3), instantiated for all four pairs; bf16 and fp16 take the same
// shared memory, tiles and launch bounds.
//
// FP8 cache, prefill: the cp.async copies land in unpadded fp8 staging tiles (half the bytes: 16
// keys x 128 dims is 2 KiB), and each K/V tile is converted once, by all threads of the CTA, into
// a T tile of the same padded layout a T cache uses (exact: every e4m3 value is a normal bf16 /
// fp16 number), which the unchanged tensor-core step then reads. FP8 cache, decode
// (PagedDecodeFp8Kernel): each lane converts exactly the codes of its own mma fragments, read
// from the staging tiles, into fp16 registers, and the products run in fp16 (see there). The
// scales are folded outside the loops: k_scale into the softmax scale, v_scale into the final
// 1 / l.
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
// 16-key tiles with a cp.async pipeline (T cache: kDecodeStages deep, each lane with 2 *
// kDecodeStages - 2 16-byte loads of 8 KiB tiles in flight at head_dim 128; fp8:
// kDecodeStagesFp8 tiles of 4 KiB, all in flight during the tensor-core step), then writes
// (m, l, o / l) partials that a second kernel merges (a sequence with one split writes its
// output directly). Napkin math, batch 64 x 1,024 tokens, 8 kv heads x 128: 268 MB of K/V, 80 us
// at 3.35 TB/s; 134 MB, 40 us, from an fp8 cache.
//
// Versions tried are recorded in docs/kernels.md ("Paged attention").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>

#include "core/logging.h"
#include "kernels/attention.h"
#include "kernels/attention_internal.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.cuh"

namespace kiln::kernels {
namespace {

using attention_internal::AttentionParams;
using attention_internal::CacheOffset;
using attention_internal::CpAsync16;
using attention_internal::CpAsyncCommit;
using attention_internal::CpAsyncWait;
using attention_internal::GetPrefillTile;
using attention_internal::kSmemStride;
using attention_internal::Ldmatrix4;
using attention_internal::LdShared;
using attention_internal::LoadQFragments;
using attention_internal::Mma;
using attention_internal::PairToHalf2;
using attention_internal::PrefillParams;
using attention_internal::PrefillTile;
using attention_internal::SoftmaxRowStep;
using attention_internal::WarpAttendTile;
using attention_internal::WarpAttendTileM;
using attention_internal::WarpState;
using dtype_internal::E4m3x2ToPair;
using dtype_internal::E4m3x8ToVec8;
using dtype_internal::FloatsToPair;
using dtype_internal::FromFloat;
using dtype_internal::kIsFp8;
using dtype_internal::PackPair;
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
constexpr int kDecodeRows = 16;    // query heads per decode warp (the mma M)
constexpr int kMinTilesPerSplit = 2;
constexpr int kMaxSplits = 256;

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

  const PrefillTile w = GetPrefillTile(p, kRows);
  if (w.empty) return;
  const int num_tiles = (w.key_end + kPrefillTileN - 1) / kPrefillTileN;
  const int tid = threadIdx.x;

  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const int m = w.row0 + r;
    const bool valid = m < w.num_rows;
    const T* src = p.q;
    if (valid) {
      src = p.q + w.RowOffset(m, p.group, p.q_stride, kHeadDim, ch * 8);
    }
    CpAsync16(q_smem + r * kStride + ch * 8, src, valid);
  }
  auto load_kv = [&](int tile, int buf) {
    for (int c = tid; c < kPrefillTileN * kCacheChunks; c += kThreads) {
      const int r = c / kCacheChunks;
      const int ch = c % kCacheChunks;
      const int key = tile * kPrefillTileN + r;
      const bool valid = key < w.key_end;
      int64_t off = 0;
      if (valid) {
        off = w.KeyOffset(p, key, kHeadDim) + ch * kChunkElems;
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
    const int m = w.row0 + warp * kWarpRows + (i / 2) * 16 + lane / 4 + 8 * (i % 2);
    max_pos[i] = w.ctx_off + min(m / p.group, w.q_len - 1);
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
                                                 key0 + kPrefillTileN - 1 > w.min_pos, key0,
                                                 max_pos, st);
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
    const int m = w.row0 + warp * kWarpRows + r;
    if (m >= w.num_rows) continue;
    *reinterpret_cast<uint4*>(p.out + w.RowOffset(m, p.group, p.out_stride, kHeadDim, ch * 8)) =
        *reinterpret_cast<const uint4*>(o_smem + r * kStride + ch * 8);
  }
}

// ---- Decode --------------------------------------------------------------------------------

template <typename T, typename C>
struct DecodeParams : AttentionParams<T, C> {
  int32_t head_chunks;  // ceil(group / kDecodeRows)
  int32_t num_splits;
  float* partial_ml;  // [num_seqs, num_heads, num_splits, 2]: m (log2 units), l
  float* partial_o;   // [num_seqs, num_heads, num_splits, head_dim]: o / l
};

// The tiles [begin, end) of split `split` for a sequence of seq_len > 0 positions: the
// sequence's tiles are dealt evenly over the splits, at least kMinTilesPerSplit each, so short
// sequences use fewer splits. Returns the number of non-empty splits.
__device__ __forceinline__ int SplitRange(int seq_len, int num_splits, int split, int* begin,
                                          int* end) {
  const int num_tiles = (seq_len + kDecodeTileN - 1) / kDecodeTileN;
  const int per_split = max((num_tiles + num_splits - 1) / num_splits, kMinTilesPerSplit);
  *begin = split * per_split;
  *end = min(num_tiles, *begin + per_split);
  return (num_tiles + per_split - 1) / per_split;
}

// What one decode CTA works on: its split, its query heads [head0, head0 + num_rows) of kv head
// kv_head, and its tiles [tile_begin, tile_end) of sequence seq (num_active splits of it are
// non-empty).
struct DecodeItem {
  int split, kv_head, head0, num_rows, seq, seq_len, tile_begin, tile_end, num_active;
};

// This CTA's item, from the grid (splits, kv heads x head chunks, sequences); false when it has
// nothing to do (a padding row, or a split past the sequence's tiles).
template <typename P>
__device__ __forceinline__ bool GetDecodeItem(const P& p, DecodeItem* it) {
  it->split = blockIdx.x;
  it->kv_head = blockIdx.y / p.head_chunks;
  it->head0 = it->kv_head * p.group + (blockIdx.y % p.head_chunks) * kDecodeRows;
  it->num_rows = min(kDecodeRows, (it->kv_head + 1) * p.group - it->head0);
  it->seq = blockIdx.z;
  it->seq_len = p.seq_lens[it->seq];
  if (it->seq_len <= 0) return false;  // padding row
  it->num_active = SplitRange(it->seq_len, p.num_splits, it->split, &it->tile_begin, &it->tile_end);
  return it->tile_begin < it->tile_end;
}

// The sequence's cached positions before the newest one (seq_len - 1) are no kernel's output in
// this step: RoPE writes only the newest (launch.cuh). So a decode CTA issues its prologue's
// tiles 0 .. stages - 1 (load_tile(tile, stage), one cp.async group each) before PdlWait, which
// overlaps their DRAM latency with the kernel before it, all but the one holding the newest
// position. Returns that tile's prologue index, or -1; the caller loads it after PdlWait, in a
// group of its own, and waits for that group before the loop.
template <typename LoadTile>
__device__ __forceinline__ int PrologueBeforeWait(const DecodeItem& it, int stages,
                                                  LoadTile load_tile) {
  const int newest_tile = (it.seq_len - 1) / kDecodeTileN;
  int deferred = -1;
  for (int i = 0; i < stages; ++i) {
    const int tile = it.tile_begin + i;
    if (tile == newest_tile && tile < it.tile_end) {
      deferred = i;
    } else if (tile < it.tile_end) {
      load_tile(tile, i);
    }
    CpAsyncCommit();
  }
  return deferred;
}

// Q rows and kDecodeStages K and V tiles of T (39 KiB at head_dim 128).
template <int kHeadDim>
constexpr size_t DecodeSmemBytes() {
  return sizeof(uint16_t) * kSmemStride<kHeadDim> *
         (kDecodeRows + 2 * kDecodeStages * kDecodeTileN);
}

// Decode over a bf16 / fp16 cache (T = C).
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(32) PagedDecodeSplitKernel(const DecodeParams<T, T> p) {
  constexpr int kStride = kSmemStride<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kStageElems = kDecodeTileN * kStride;
  constexpr int kStages = kDecodeStages;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_smem = reinterpret_cast<T*>(smem_raw);  // [kDecodeRows][kStride]
  T* k_smem = q_smem + kDecodeRows * kStride;     // [kStages][16][kStride]
  T* v_smem = k_smem + kStages * kStageElems;

  DecodeItem it;
  const bool has_item = GetDecodeItem(p, &it);
  const int lane = threadIdx.x;
  const int32_t* table = p.block_tables + int64_t{it.seq} * p.max_blocks_per_seq;
  // A 16-key tile lies inside one cache block: one table read, 16 * kHeadDim contiguous elements.
  auto load_tile = [&](int tile, int stage) {
    const int key0 = tile * kDecodeTileN;
    const int64_t base =
        CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, it.kv_head, key0, kHeadDim);
#pragma unroll
    for (int c = lane; c < kDecodeTileN * kChunks; c += 32) {
      const int r = c / kChunks;
      const int ch = c % kChunks;
      const bool valid = key0 + r < it.seq_len;
      const int64_t off = valid ? base + r * kHeadDim + ch * 8 : 0;
      const int s = stage * kStageElems + r * kStride + ch * 8;
      CpAsync16(k_smem + s, p.k + off, valid);
      CpAsync16(v_smem + s, p.v + off, valid);
    }
  };
  // Prologue: tiles 0 .. kStages - 2 (empty groups keep the wait_group count uniform at the
  // tail); each iteration first refills the stage the previous one read. They go out before
  // PdlWait (PrologueBeforeWait), but for the tile of the newest position; Q and that tile after.
  const int newest = has_item ? PrologueBeforeWait(it, kStages - 1, load_tile) : -1;
  PdlWait();
  PdlLaunchDependents();
  if (!has_item) return;
  for (int c = lane; c < kDecodeRows * kChunks; c += 32) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const bool valid = r < it.num_rows;
    const T* src = valid ? p.q + it.seq * p.q_stride + (it.head0 + r) * kHeadDim + ch * 8 : p.q;
    CpAsync16(q_smem + r * kStride + ch * 8, src, valid);
  }
  if (newest >= 0) load_tile(it.tile_begin + newest, newest);
  CpAsyncCommit();
  CpAsyncWait<0>();  // Q (the loop's waits count the prologue's groups only)
  WarpState<kHeadDim> st;
  st.Init();
  uint32_t qf[kHeadDim / 16][4];
  const int max_pos[2] = {it.seq_len - 1, it.seq_len - 1};
  for (int tile = it.tile_begin; tile < it.tile_end; ++tile) {
    const int i = tile - it.tile_begin;
    const int stage = i % kStages;
    const int ahead = tile + kStages - 1;
    if (ahead < it.tile_end) load_tile(ahead, (i + kStages - 1) % kStages);
    CpAsyncCommit();
    // Tile i's group: i + 1 (kStages + i + 1 groups committed: the prologue's kStages - 1, Q's,
    // then one an iteration; tiles 0 .. kStages - 2 are in groups 0 .. kStages - 2).
    CpAsyncWait<kStages - 1>();
    __syncwarp();
    if (i == 0) LoadQFragments<kHeadDim>(q_smem, qf);
    const int key0 = tile * kDecodeTileN;
    WarpAttendTile<kHeadDim, kDecodeTileN>(qf, k_smem + stage * kStageElems,
                                           v_smem + stage * kStageElems, p.scale_log2,
                                           key0 + kDecodeTileN > it.seq_len, key0, max_pos, st);
    __syncwarp();  // the stage is refilled kStages - 1 iterations later
  }

  float inv_l[2];
  st.Finish(inv_l);
  const int g = lane / 4;
  const int t = lane % 4;
  if (it.num_active == 1) {
    // One split: this is the whole softmax; write the output (the merge kernel skips the
    // sequence, or is not launched).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      if (row >= it.num_rows) continue;
      T* o = p.out + int64_t{it.seq} * p.out_stride + (it.head0 + row) * kHeadDim;
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
    if (row >= it.num_rows) continue;
    const int64_t slot = (int64_t{it.seq} * p.num_heads + it.head0 + row) * p.num_splits + it.split;
    float* o = p.partial_o + slot * kHeadDim;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<float2*>(o + d * 8 + 2 * t) =
          make_float2(st.o[0][d][2 * r] * inv_l[r], st.o[0][d][2 * r + 1] * inv_l[r]);
    }
    if (t == 0) *reinterpret_cast<float2*>(p.partial_ml + slot * 2) = make_float2(st.m[r], st.l[r]);
  }
}

// ---- Decode over an fp8 cache --------------------------------------------------------------
//
// The codes never pass through a T tile: each lane reads from the staging tiles exactly the codes
// of its own mma fragments and turns each pair into an fp16 pair with one cvt (exact: every
// finite e4m3 value is a normal fp16 number), and the products run as fp16 mma's whatever T is (Q
// rounded to fp16 once, saturating; P in fp16, 3 more bits than bf16). With g = lane / 4 and
// t = lane % 4:
// - S = Q K^T as in the T kernel (heads are the M rows g and g + 8, keys the N columns), but
//   with the head dims permuted alike in Q and K so that lane (g, t) holds the dims
//   kKeyBytes t + 4 kk + 0..3 of k step kk: its K codes of a key are the kKeyBytes contiguous
//   bytes at kKeyBytes t (32 at head_dim 128).
// - Keys permuted: S's column c = 8 j + 2 u + x (n tile j, x = 0, 1) is key 4 u + 2 j + x of the
//   tile, so lane (g, t)'s P values are keys 4 t .. 4 t + 3 of head g.
// - O^T = V^T P^T (dims are the M rows, heads the N columns): S's C fragment of head g is P^T's
//   B fragment as it stands, the 8 heads of a group fill N (no zero rows: half the mma's and
//   accumulators of O = P V), and V^T's A fragment wants, for lane (g, t), keys 4 t .. 4 t + 3
//   at dims kDimBytes g + 2 mt + 0..1 of m tile mt (output dims permuted): the kDimBytes
//   contiguous bytes at kDimBytes g of V rows 4 t .. 4 t + 3 (16 at head_dim 128), which two
//   byte permutes a word turn into the key pairs.
// Lane (g, t) ends with heads 2 t and 2 t + 1 at the contiguous dims [kDimBytes g,
// kDimBytes (g + 1)). The staging tiles' 16-byte chunks are XOR-swizzled by row
// (Fp8ChunkSwizzle) so that both reads are free of bank conflicts at head_dim 128.

// K or V codes of one lane: kKeyBytes a key of K (its dims), kDimBytes a row of V.
template <int kHeadDim>
inline constexpr int kKeyBytes = kHeadDim / 4;
template <int kHeadDim>
inline constexpr int kDimBytes = kHeadDim / 8;
// Stages of 16 K and 16 V rows of codes (4 KiB at head_dim 128) a decode warp keeps in flight.
constexpr int kDecodeStagesFp8 = 2;

template <int kHeadDim>
constexpr size_t DecodeSmemBytesFp8() {
  return size_t{kDecodeStagesFp8} * 2 * kDecodeTileN * kHeadDim;
}

// The chunk slot of 16-byte chunk `chunk` of staging row `row` (rows of kHeadDim codes) is
// chunk ^ Fp8ChunkSwizzle(row). At head_dim 128 the 8 lanes of a 16-byte shared load phase read
// K rows 4 u + 2 j + {0, 1} at chunks 2 t + h, or V rows 4 t + i at chunk g: this swizzle puts the
// 8 on 8 distinct chunk slots, i.e. 32 distinct banks. (head_dim 64: the K reads are
// conflict-free anyway, the V reads take two passes.)
template <int kHeadDim>
__device__ __forceinline__ int Fp8ChunkSwizzle(int row) {
  return kHeadDim == 128 ? ((row >> 2) << 1) | (row & 1) : (row >> 2) & 3;
}

// Bytes of words a and b interleaved: (a.b0, b.b0, a.b1, b.b1) for kSel 0, (a.b2, b.b2, a.b3,
// b.b3) for kSel 1.
template <int kSel>
__device__ __forceinline__ uint32_t InterleaveBytes(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "n"(kSel == 0 ? 0x5140 : 0x7362));
  return r;
}

// Two e4m3 codes (x's low 16 bits, the lower code first) as an fp16 pair: one cvt.
__device__ __forceinline__ uint32_t CodesToHalf2(uint32_t x) { return E4m3x2ToPair<__half>(x); }

// kUpper: the warp's heads fill rows g + 8 too (a head chunk of more than 8); otherwise Q's rows
// g + 8 are zeros and only one N tile of heads is computed.
template <int kHeadDim, typename T, bool kUpper>
__global__ void __launch_bounds__(32, kUpper ? 12 : 16)
    PagedDecodeFp8Kernel(const DecodeParams<T, __nv_fp8_e4m3> p) {
  constexpr int kKeyB = kKeyBytes<kHeadDim>;
  constexpr int kDimB = kDimBytes<kHeadDim>;
  constexpr int kRowChunks = kHeadDim / 16;
  constexpr int kTileBytes = kDecodeTileN * kHeadDim;  // K or V codes of one tile
  constexpr int kStages = kDecodeStagesFp8;
  constexpr int kHeadTiles = kUpper ? 2 : 1;                 // N tiles of 8 heads in O^T
  constexpr int kDimTiles = kHeadDim / 16;                   // M tiles of 16 dims in O^T
  extern __shared__ __align__(16) unsigned char smem_raw[];  // [kStages][K, V][16][kHeadDim]

  DecodeItem it;
  const bool has_item = GetDecodeItem(p, &it);
  const int lane = threadIdx.x;
  const int g = lane / 4;
  const int t = lane % 4;
  const int32_t* table = p.block_tables + int64_t{it.seq} * p.max_blocks_per_seq;
  const uint32_t smem = attention_internal::SmemAddr(smem_raw);

  auto load_tile = [&](int tile, int stage) {
    const int key0 = tile * kDecodeTileN;
    const int64_t base =
        CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, it.kv_head, key0, kHeadDim);
    static_assert(kDecodeTileN * kRowChunks % 32 == 0, "whole chunks a lane");
#pragma unroll
    for (int i = 0; i < kDecodeTileN * kRowChunks / 32; ++i) {
      const int c = 32 * i + lane;
      const int r = c / kRowChunks;
      const int ch = c % kRowChunks;
      const bool valid = key0 + r < it.seq_len;
      const int64_t off = valid ? base + c * 16 : 0;
      const uint32_t s =
          smem + stage * 2 * kTileBytes + r * kHeadDim + (ch ^ Fp8ChunkSwizzle<kHeadDim>(r)) * 16;
      CpAsync16(s, p.k + off, valid);
      CpAsync16(s + kTileBytes, p.v + off, valid);
    }
  };
  // The prologue's tiles before PdlWait but the newest position's (PrologueBeforeWait).
  const int newest = has_item ? PrologueBeforeWait(it, kStages, load_tile) : -1;
  PdlWait();
  PdlLaunchDependents();
  if (!has_item) return;
  if (newest >= 0) {
    load_tile(it.tile_begin + newest, newest);
    CpAsyncCommit();
    CpAsyncWait<0>();  // the loop's waits count the prologue's groups only
  }

  // Q rows g and g + 8 (zeros past num_rows), dims [kKeyB t, kKeyB (t + 1)) as fp16 pairs.
  uint32_t q[2][kKeyB / 2] = {};
#pragma unroll
  for (int r = 0; r < kHeadTiles; ++r) {
    const int row = g + 8 * r;
    if (row >= it.num_rows) continue;
    const uint4* src = reinterpret_cast<const uint4*>(p.q + it.seq * p.q_stride +
                                                      (it.head0 + row) * kHeadDim + kKeyB * t);
#pragma unroll
    for (int v = 0; v < kKeyB / 8; ++v) {
      const uint4 x = src[v];
      q[r][4 * v + 0] = PairToHalf2<T>(x.x);
      q[r][4 * v + 1] = PairToHalf2<T>(x.y);
      q[r][4 * v + 2] = PairToHalf2<T>(x.z);
      q[r][4 * v + 3] = PairToHalf2<T>(x.w);
    }
  }

  // o[n][mt]: O^T's tile of dims (m tile mt) x heads 8 n .. 8 n + 7.
  float o[kHeadTiles][kDimTiles][4] = {};
  float m[2] = {-INFINITY, -INFINITY};  // of heads g and g + 8 (log2 units)
  float l[2] = {0.0f, 0.0f};
  // This lane's K rows: S's column g of n tiles 0 and 1.
  const int key_row[2] = {4 * (g >> 1) + (g & 1), 4 * (g >> 1) + 2 + (g & 1)};
  for (int tile = it.tile_begin; tile < it.tile_end; ++tile) {
    const int stage = (tile - it.tile_begin) % kStages;
    // This tile's group (kStages + i groups committed, one more after a deferred newest tile,
    // which was waited for before the loop).
    CpAsyncWait<kStages - 1>();
    __syncwarp();
    const uint32_t k_base = smem + stage * 2 * kTileBytes;
    const uint32_t v_base = k_base + kTileBytes;
    uint32_t kw[2][kKeyB / 4];  // codes of K rows key_row[j], dims [kKeyB t, ...)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = key_row[j];
#pragma unroll
      for (int h = 0; h < kKeyB / 16; ++h) {
        const int ch = (kKeyB / 16) * t + h;
        LdShared<16>(k_base + row * kHeadDim + (ch ^ Fp8ChunkSwizzle<kHeadDim>(row)) * 16,
                     &kw[j][4 * h]);
      }
    }
    // S = Q K^T (fp16 mma): k step kk takes pairs 2 kk, 2 kk + 1 of the lane's dims.
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t a[4] = {q[0][2 * kk], q[1][2 * kk], q[0][2 * kk + 1], q[1][2 * kk + 1]};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        Mma<__half>(s[j], a, CodesToHalf2(kw[j][kk]), CodesToHalf2(kw[j][kk] >> 16));
      }
    }
    uint32_t vw[4][kDimB / 4];  // codes of V rows 4 t + i, dims [kDimB g, ...)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 4 * t + i;
      const int byte = kDimB * g;
      LdShared<kDimB>(
          v_base + row * kHeadDim + ((byte / 16) ^ Fp8ChunkSwizzle<kHeadDim>(row)) * 16 + byte % 16,
          vw[i]);
    }
    __syncwarp();  // every lane has read the stage: refill it
    if (tile + kStages < it.tile_end) load_tile(tile + kStages, stage);
    CpAsyncCommit();
    const int key0 = tile * kDecodeTileN;
    if (key0 + kDecodeTileN > it.seq_len) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (key0 + 4 * t + 2 * j + (c & 1) >= it.seq_len) s[j][c] = -INFINITY;
        }
      }
    }
    bool grew = false;
    float alpha[2];
#pragma unroll
    for (int r = 0; r < kHeadTiles; ++r) {
      const float m_old = m[r];
      alpha[r] = SoftmaxRowStep(s, r, p.scale_log2, m[r], l[r]);
      grew |= m[r] != m_old;
    }
    // O is rescaled only when some head's maximum grew (after the first tiles, rarely). Lane
    // (g, t)'s columns are heads 2 t and 2 t + 1 (+ 8 n), whose factors lanes 8 t and 8 t + 4 hold.
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int n = 0; n < kHeadTiles; ++n) {
        const float a0 = __shfl_sync(0xffffffffu, alpha[n], 8 * t);
        const float a1 = __shfl_sync(0xffffffffu, alpha[n], 8 * t + 4);
#pragma unroll
        for (auto& c : o[n]) {
          c[0] *= a0;
          c[1] *= a1;
          c[2] *= a0;
          c[3] *= a1;
        }
      }
    }

    // O^T += V^T P^T (fp16 mma): P^T's B fragment is S's C fragment of heads g (+ 8); V^T's A
    // fragment of m tile mt is byte 2 mt (dim row g) and 2 mt + 1 (row g + 8) of the lane's V
    // codes, keys (4 t, 4 t + 1) in a0 / a1 and (4 t + 2, 4 t + 3) in a2 / a3.
    uint32_t pb[kHeadTiles][2];
#pragma unroll
    for (int n = 0; n < kHeadTiles; ++n) {
      pb[n][0] = PackPair<__half>(s[0][2 * n], s[0][2 * n + 1]);
      pb[n][1] = PackPair<__half>(s[1][2 * n], s[1][2 * n + 1]);
    }
#pragma unroll
    for (int w = 0; w < kDimB / 4; ++w) {
      const uint32_t lo01 = InterleaveBytes<0>(vw[0][w], vw[1][w]);
      const uint32_t hi01 = InterleaveBytes<1>(vw[0][w], vw[1][w]);
      const uint32_t lo23 = InterleaveBytes<0>(vw[2][w], vw[3][w]);
      const uint32_t hi23 = InterleaveBytes<1>(vw[2][w], vw[3][w]);
      const uint32_t a_lo[4] = {CodesToHalf2(lo01), CodesToHalf2(lo01 >> 16), CodesToHalf2(lo23),
                                CodesToHalf2(lo23 >> 16)};
      const uint32_t a_hi[4] = {CodesToHalf2(hi01), CodesToHalf2(hi01 >> 16), CodesToHalf2(hi23),
                                CodesToHalf2(hi23 >> 16)};
#pragma unroll
      for (int n = 0; n < kHeadTiles; ++n) {
        Mma<__half>(o[n][2 * w], a_lo, pb[n][0], pb[n][1]);
        Mma<__half>(o[n][2 * w + 1], a_hi, pb[n][0], pb[n][1]);
      }
    }
  }

  // l of heads g (+ 8) summed over the quad; lane (g, t) writes heads 8 n + 2 t + e (e = 0, 1):
  // o[n][mt][e] is dim kDimB g + 2 mt, o[n][mt][2 + e] dim kDimB g + 2 mt + 1.
#pragma unroll
  for (int n = 0; n < kHeadTiles; ++n) {
    l[n] += __shfl_xor_sync(0xffffffffu, l[n], 1);
    l[n] += __shfl_xor_sync(0xffffffffu, l[n], 2);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float head_l = __shfl_sync(0xffffffffu, l[n], 8 * t + 4 * e);
      const float head_m = __shfl_sync(0xffffffffu, m[n], 8 * t + 4 * e);
      const int row = 8 * n + 2 * t + e;
      if (row >= it.num_rows) continue;
      const float inv_l = (head_l > 0.0f ? 1.0f / head_l : 0.0f) * p.v_scale;
      const int64_t head = it.head0 + row;
      const float(&c)[kDimTiles][4] = o[n];
      if (it.num_active == 1) {
        T* out = p.out + int64_t{it.seq} * p.out_stride + head * kHeadDim + kDimB * g;
#pragma unroll
        for (int v = 0; v < kDimB / 8; ++v) {
          uint4 x;
          uint32_t* w = &x.x;
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            w[u] = PackPair<T>(c[4 * v + u][e] * inv_l, c[4 * v + u][2 + e] * inv_l);
          }
          *reinterpret_cast<uint4*>(out + 8 * v) = x;
        }
        continue;
      }
      const int64_t slot = (int64_t{it.seq} * p.num_heads + head) * p.num_splits + it.split;
      float* out = p.partial_o + slot * kHeadDim + kDimB * g;
#pragma unroll
      for (int v = 0; v < kDimB / 4; ++v) {
        *reinterpret_cast<float4*>(out + 4 * v) =
            make_float4(c[2 * v][e] * inv_l, c[2 * v][2 + e] * inv_l, c[2 * v + 1][e] * inv_l,
                        c[2 * v + 1][2 + e] * inv_l);
      }
      if (g == 0) {
        *reinterpret_cast<float2*>(p.partial_ml + slot * 2) = make_float2(head_m, head_l);
      }
    }
  }
}

// Splits whose partials a merge thread loads in one batch (registers: 16 (m, l) pairs and 16
// outputs). H200, session 42: the batch-1 W4A16 step's merge 3.07 -> 2.48 us a layer, the step
// 1.853 -> 1.807 ms. Merging in the split kernel's last CTA instead (sessions 13 and 42: one warp
// merging after an arrival counter) was slower: attention 7.33 -> 8.53 us a layer.
constexpr int kReduceBatch = 16;

// Merges the splits of the heads of a sequence that has more than one: out = sum_j w_j o_j /
// sum_j w_j with w_j = l_j * 2^(m_j - max m). One thread per output element, a head a CTA.
template <int kHeadDim, typename T, typename C>
__global__ void __launch_bounds__(kHeadDim) PagedDecodeReduceKernel(const DecodeParams<T, C> p) {
  const int head = blockIdx.x;
  const int dim = threadIdx.x;
  const int seq = blockIdx.y;
  // A step input, no kernel's output (launch.cuh): read before PdlWait. Every block still waits
  // before it exits, so that this kernel completes only after the split kernel did.
  const int seq_len = p.seq_lens[seq];
  int begin, end;
  const int num_active = seq_len > 0 ? SplitRange(seq_len, p.num_splits, 0, &begin, &end) : 0;
  PdlWait();
  PdlLaunchDependents();
  if (num_active <= 1) return;  // a padding row, or the split kernel wrote the output
  const int64_t slot0 = (int64_t{seq} * p.num_heads + head) * p.num_splits;
  const float* ml = p.partial_ml + slot0 * 2;
  const float* o = p.partial_o + slot0 * kHeadDim + dim;
  float m_max = -INFINITY;
  float num = 0.0f;
  float den = 0.0f;
  if (num_active <= kReduceBatch) {
    // Every split's (m, l) and o loaded at once: one round trip to L2, where the loops below
    // take about one per 4 splits, twice (8 splits: a batch-1 step at 256 positions). The same
    // arithmetic in the same order.
    float2 mlv[kReduceBatch];
    float ov[kReduceBatch];
#pragma unroll
    for (int j = 0; j < kReduceBatch; ++j) {
      if (j < num_active) {
        mlv[j] = reinterpret_cast<const float2*>(ml)[j];
        ov[j] = o[int64_t{j} * kHeadDim];
      }
    }
#pragma unroll
    for (int j = 0; j < kReduceBatch; ++j) {
      if (j < num_active) m_max = fmaxf(m_max, mlv[j].x);
    }
#pragma unroll
    for (int j = 0; j < kReduceBatch; ++j) {
      if (j < num_active) {
        const float w = mlv[j].y * exp2f(mlv[j].x - m_max);
        num += w * ov[j];
        den += w;
      }
    }
  } else {
    for (int j = 0; j < num_active; ++j) m_max = fmaxf(m_max, ml[2 * j]);
    for (int j = 0; j < num_active; ++j) {
      const float w = ml[2 * j + 1] * exp2f(ml[2 * j] - m_max);
      num += w * o[int64_t{j} * kHeadDim];
      den += w;
    }
  }
  p.out[seq * p.out_stride + head * kHeadDim + dim] = FromFloat<T>(den > 0.0f ? num / den : 0.0f);
}

// ---- Host side -----------------------------------------------------------------------------

// Per-device figures the launchers need, read once (host queries are not stream work, so they
// are safe inside graph capture too, but caching keeps them off the per-layer path).
// The cache kinds whose decode kernels differ in shared memory (so in occupancy and splits).
// The decode kernels whose occupancy (so whose split counts) differ: the T cache's, and the fp8
// cache's two variants (PagedDecodeFp8Kernel's kUpper: head chunks of more than 8 heads).
enum CacheKind { kCacheT = 0, kCacheFp8 = 1, kCacheFp8Upper = 2, kNumCacheKinds = 3 };

bool Fp8Upper(const AttentionDims& d) {
  return std::min(d.num_heads / d.num_kv_heads, kDecodeRows) > 8;
}

template <typename C>
CacheKind KindOf(const AttentionDims& d) {
  return !kIsFp8<C> ? kCacheT : Fp8Upper(d) ? kCacheFp8Upper : kCacheFp8;
}

struct DeviceFigures {
  int num_sms = 0;
  // The wgmma prefill kernel (attention_prefill_sm90.cu) runs here: an sm_90a build on a device
  // of compute capability 9.0.
  bool has_sm90_prefill = false;
  int decode_blocks_per_sm[kNumCacheKinds][2] = {};  // [cache kind][head_dim 64, 128]
};

// Lets (T, C)'s prefill kernels take their dynamic shared memory, and lowers blocks[kind][hd] to
// the resident CTAs an SM of (T, C)'s decode kernels (head_dim 64, 128).
template <typename T, typename C>
cudaError_t SetUpKernels(int (&blocks)[kNumCacheKinds][2], bool sm90_prefill) {
  cudaError_t e = sm90_prefill ? attention_internal::SetUpPrefillSm90<T, C>() : cudaSuccess;
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
  auto occupancy = [&]<typename Kernel>(Kernel kernel, size_t smem, int* out) {
    int n = 0;
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 32, smem);
    *out = std::min(*out, n);
  };
  auto decode_blocks = [&]<int kHeadDim>(int hd) {
    if constexpr (kIsFp8<C>) {
      occupancy(PagedDecodeFp8Kernel<kHeadDim, T, false>, DecodeSmemBytesFp8<kHeadDim>(),
                &blocks[kCacheFp8][hd]);
      occupancy(PagedDecodeFp8Kernel<kHeadDim, T, true>, DecodeSmemBytesFp8<kHeadDim>(),
                &blocks[kCacheFp8Upper][hd]);
    } else {
      occupancy(PagedDecodeSplitKernel<kHeadDim, T>, DecodeSmemBytes<kHeadDim>(),
                &blocks[kCacheT][hd]);
    }
  };
  decode_blocks.template operator()<64>(0);
  decode_blocks.template operator()<128>(1);
  return e;
}

// Sets up T's kernels over both cache element types.
template <typename T>
cudaError_t SetUpType(int (&blocks)[kNumCacheKinds][2], bool sm90_prefill) {
  cudaError_t e = SetUpKernels<T, T>(blocks, sm90_prefill);
  return e == cudaSuccess ? SetUpKernels<T, __nv_fp8_e4m3>(blocks, sm90_prefill) : e;
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
    int major = 0;
    int minor = 0;
    if (e == cudaSuccess) {
      e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (e == cudaSuccess) {
      e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    n.has_sm90_prefill = attention_internal::PrefillSm90Built() && major == 9 && minor == 0;
    // Each decode kernel kind gets its own occupancy (the fewer CTAs of its bf16 and fp16
    // instantiations, in practice the same): the T cache's kernel (39 KiB of shared memory at
    // head_dim 128: 5 CTAs an SM on an H100), the fp8 cache's (16, or 12 with more than 8 heads a
    // warp). PagedDecodeWorkspaceBytes takes the largest need.
    if (e == cudaSuccess) e = SetUpType<__nv_bfloat16>(n.decode_blocks_per_sm, n.has_sm90_prefill);
    if (e == cudaSuccess) e = SetUpType<__half>(n.decode_blocks_per_sm, n.has_sm90_prefill);
    if (e != cudaSuccess) return e;
    f = n;
  }
  *out = f;
  return cudaSuccess;
}

std::atomic<PrefillKernel> g_prefill_kernel{PrefillKernel::kAuto};

// PrefillTakesQCodes for a kernel choice and the device's figures.
bool TakesQCodes(PrefillKernel kernel, const AttentionDims& dims, const DeviceFigures& f) {
  return (kernel == PrefillKernel::kAuto || kernel == PrefillKernel::kWgmmaE4m3) &&
         dims.head_dim == 128 && f.has_sm90_prefill;
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
// one. Both kernels stream near the read bandwidth with one split once a batch fills a wave: the
// fp8 kernel's "balancing splits" of sessions 20-23 (about 5 waves of splits where this rule gives
// one, for a kernel then bound by its warps' latency) lost to this rule with the session-24 kernel
// (H100, attention_bench --engine-like, 1,000-2,000 positions: batch 256 272 vs 298 us, 512 549 vs
// 578, 128 144 vs 155; offline FP8 1000/1000 15,126 vs 14,695 tok/s; docs/benchmarks.md).
// Depends only on launch-time constants, so a captured graph replays with the same value the
// workspace was sized for.
int DecodeSplits(int32_t num_seqs, int32_t max_seq_len, const AttentionDims& d,
                 const DeviceFigures& f, CacheKind kind) {
  const int64_t items =
      std::max<int64_t>(int64_t{num_seqs} * d.num_kv_heads * DecodeHeadChunks(d), 1);
  const int64_t target =
      int64_t{f.num_sms} * std::max(1, f.decode_blocks_per_sm[kind][d.head_dim == 128 ? 1 : 0]);
  const int64_t max_tiles = (int64_t{max_seq_len} + kDecodeTileN - 1) / kDecodeTileN;
  const int64_t splits =
      std::min<int64_t>(target / items, (max_tiles + kMinTilesPerSplit - 1) / kMinTilesPerSplit);
  return static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxSplits));
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
                          cudaStream_t stream, const PrefillQCodes& q_codes = {}) {
  if (!ValidCommon("PagedPrefillAttention", q, q_stride, kv, dims, out, out_stride, num_seqs)) {
    return cudaErrorInvalidValue;
  }
  if (max_q_len < 0 || (num_seqs > 0 && (!cu_seqlens_q || !seq_lens))) {
    LOG(ERROR) << "PagedPrefillAttention: max_q_len must be >= 0 and cu_seqlens_q, seq_lens "
                  "non-null";
    return cudaErrorInvalidValue;
  }
  DeviceFigures f;
  if (cudaError_t e = GetDeviceFigures(&f); e != cudaSuccess) return e;
  const PrefillKernel kernel = g_prefill_kernel.load(std::memory_order_relaxed);
  if (q_codes.codes != nullptr && (!kIsFp8<C> || !TakesQCodes(kernel, dims, f) ||
                                   q_codes.scales == nullptr || !IsAligned16(q_codes.codes))) {
    LOG(ERROR) << "PagedPrefillAttention: Q codes are read only by the e4m3 wgmma kernel "
                  "(PrefillTakesQCodes), 16-byte aligned, with their scales";
    return cudaErrorInvalidValue;
  }
  if (num_seqs == 0 || max_q_len == 0) return cudaSuccess;
  PrefillParams<T, C> p{};
  FillCommon(q, q_stride, kv, seq_lens, dims, out, out_stride, &p);
  p.cu_seqlens_q = cu_seqlens_q;
  p.q_codes = q_codes;
  if (dims.head_dim == 128 && f.has_sm90_prefill && kernel != PrefillKernel::kMmaSync) {
    const bool e4m3 = kIsFp8<C> && kernel != PrefillKernel::kWgmma16Bit;
    return attention_internal::LaunchPrefillSm90(p, max_q_len, num_seqs, e4m3, stream);
  }
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
  const int splits =
      num_splits > 0 ? num_splits : DecodeSplits(num_seqs, max_seq_len, dims, f, KindOf<C>(dims));
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
  const size_t slots = size_t(num_seqs) * dims.num_heads * splits;
  p.partial_ml = static_cast<float*>(workspace);
  p.partial_o =
      reinterpret_cast<float*>(static_cast<char*>(workspace) + AlignUp(slots * 2 * sizeof(float)));
  const int64_t head_items = int64_t{dims.num_kv_heads} * p.head_chunks;
  if (head_items > 65535) return cudaErrorInvalidValue;
  const dim3 grid(splits, static_cast<unsigned>(head_items), num_seqs);
  const dim3 reduce_grid(dims.num_heads, num_seqs);
  auto launch = [&]<int kHeadDim>() {
    cudaError_t e = cudaSuccess;
    if constexpr (kIsFp8<C>) {
      // Rows g + 8 of the warp's tile hold heads only where a head chunk has more than 8.
      e = Fp8Upper(dims) ? LaunchChained(PagedDecodeFp8Kernel<kHeadDim, T, true>, grid, 32,
                                         DecodeSmemBytesFp8<kHeadDim>(), stream, p)
                         : LaunchChained(PagedDecodeFp8Kernel<kHeadDim, T, false>, grid, 32,
                                         DecodeSmemBytesFp8<kHeadDim>(), stream, p);
    } else {
      e = LaunchChained(PagedDecodeSplitKernel<kHeadDim, T>, grid, 32, DecodeSmemBytes<kHeadDim>(),
                        stream, p);
    }
    if (e == cudaSuccess && splits > 1) {
      e = LaunchChained(PagedDecodeReduceKernel<kHeadDim, T, C>, reduce_grid, kHeadDim, 0, stream,
                        p);
    }
    return e;
  };
  return dims.head_dim == 64 ? launch.template operator()<64>() : launch.template operator()<128>();
}

}  // namespace

void SetPrefillKernel(PrefillKernel kernel) {
  g_prefill_kernel.store(kernel, std::memory_order_relaxed);
}

bool PrefillWgmmaAvailable() {
  DeviceFigures f;
  return GetDeviceFigures(&f) == cudaSuccess && f.has_sm90_prefill;
}

bool PrefillTakesQCodes(const AttentionDims& dims) {
  DeviceFigures f;
  return GetDeviceFigures(&f) == cudaSuccess &&
         TakesQCodes(g_prefill_kernel.load(std::memory_order_relaxed), dims, f);
}

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
                                  __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream,
                                  const PrefillQCodes& q_codes) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream, q_codes);
}
cudaError_t PagedPrefillAttention(const __half* q, int64_t q_stride,
                                  const PagedKvCacheFp8T<__half>& kv, const int32_t* cu_seqlens_q,
                                  const int32_t* seq_lens, int32_t num_seqs, int32_t max_q_len,
                                  const AttentionDims& dims, __half* out, int64_t out_stride,
                                  cudaStream_t stream, const PrefillQCodes& q_codes) {
  return LaunchPrefill(q, q_stride, kv, cu_seqlens_q, seq_lens, num_seqs, max_q_len, dims, out,
                       out_stride, stream, q_codes);
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
    for (CacheKind kind : {kCacheT, KindOf<__nv_fp8_e4m3>(dims)}) {
      bytes =
          std::max(bytes, DecodeWorkspaceFor(n, DecodeSplits(n, max_seq_len, dims, f, kind), dims));
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
