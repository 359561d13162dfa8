// Paged attention over the bf16 or fp16 KV cache (attention.h): FlashAttention-2 style prefill
// and a split-K (flash-decoding) decode path. Both use mma.sync m16n8k16 bf16 / fp16 tensor-core
// tiles with fp32 accumulation and an fp32 online softmax (attention_mma.cuh); K/V tiles are
// gathered through the block table with 16-byte cp.async copies into padded shared-memory rows.
// Every kernel is one body templated on the element type T, instantiated for both types; the two
// take the same shared memory, tiles and launch bounds.
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
// Prefill: one CTA of kPrefillWarps warps per (row tile of 16 * kPrefillWarps packed rows, kv head,
// sequence); K/V tiles of 64 keys double-buffered, shared by all warps; heaviest row tiles are
// scheduled first (causal work grows with the tile index). Napkin math, Llama-3.1-8B 4,096-token
// causal prefill: 4 * 32 heads * 128 * 4096^2 / 2 = 137 GFLOP, 0.18 ms at 779 TFLOP/s (wgmma peak);
// mma.sync on Hopper reaches roughly half of that, so ~0.4 ms is the realistic floor.
//
// Decode: one warp per (split, kv head x head chunk, sequence) walks its share of the sequence's
// 16-key tiles with a kDecodeStages-deep cp.async pipeline (each lane has 2 * kDecodeStages - 2
// 16-byte loads of 8 KiB tiles in flight at head_dim 128), then writes (m, l, o / l) partials that
// a second kernel merges. Napkin math, batch 64 x 1,024 tokens, 8 kv heads x 128: 268 MB of K/V,
// 80 us at 3.35 TB/s.
//
// Versions tried are recorded in docs/kernels.md ("Paged attention").
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "core/logging.h"
#include "kernels/attention.h"
#include "kernels/attention_mma.cuh"
#include "kernels/dtype_traits.cuh"

namespace kiln::kernels {
namespace {

using attention_internal::CpAsync16;
using attention_internal::CpAsyncCommit;
using attention_internal::CpAsyncWait;
using attention_internal::kSmemStride;
using attention_internal::LoadQFragments;
using attention_internal::WarpAttendTile;
using attention_internal::WarpState;
using dtype_internal::FloatsToPair;
using dtype_internal::FromFloat;
using dtype_internal::Pair;

constexpr float kLog2e = 1.4426950408889634f;

// 4 warps (64 packed query rows) and two CTAs per SM: as fast as 8 warps and one CTA at head_dim
// 128, 1.35x faster at head_dim 64 (docs/kernels.md).
constexpr int kPrefillWarps = 4;
constexpr int kPrefillTileN = 64;  // keys per K/V tile
constexpr int kDecodeTileN = 16;   // keys per decode tile (never straddles a cache block)
constexpr int kDecodeStages = 4;   // cp.async pipeline depth of one decode warp
constexpr int kDecodeRows = 16;    // query heads per decode warp (the mma M)
constexpr int kMinTilesPerSplit = 2;
constexpr int kMaxSplits = 256;

// What both kernels read: the contract's pointers and strides, plus derived constants.
template <typename T>
struct AttentionParams {
  const T* q;
  int64_t q_stride;
  const T* k;
  const T* v;
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  int32_t block_size;
  int32_t block_shift;  // log2(block_size), or -1 when it is not a power of two
  const int32_t* seq_lens;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t group;     // num_heads / num_kv_heads
  float scale_log2;  // softmax scale * log2(e): the kernels work in exp2
  T* out;
  int64_t out_stride;
};

template <typename T>
struct PrefillParams : AttentionParams<T> {
  const int32_t* cu_seqlens_q;
};

// Q, K and V tiles of 16-bit elements (bf16 and fp16 alike).
template <int kHeadDim>
constexpr size_t PrefillSmemBytes() {
  return sizeof(uint16_t) * kSmemStride<kHeadDim> * (kPrefillWarps * 16 + 2 * 2 * kPrefillTileN);
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

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kPrefillWarps * 32, kPrefillWarps <= 4 ? 2 : 1)
    PagedPrefillKernel(const PrefillParams<T> p) {
  constexpr int kStride = kSmemStride<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kRows = kPrefillWarps * 16;
  constexpr int kThreads = kPrefillWarps * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_smem = reinterpret_cast<T*>(smem_raw);  // [kRows][kStride]
  T* k_smem = q_smem + kRows * kStride;           // [2][kPrefillTileN][kStride]
  T* v_smem = k_smem + 2 * kPrefillTileN * kStride;

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
    for (int c = tid; c < kPrefillTileN * kChunks; c += kThreads) {
      const int r = c / kChunks;
      const int ch = c % kChunks;
      const int key = tile * kPrefillTileN + r;
      const bool valid = key < key_end;
      int64_t off = 0;
      if (valid) {
        off = CacheOffset(table, p.block_size, p.block_shift, p.num_kv_heads, kv_head, key,
                          kHeadDim) +
              ch * 8;
      }
      const int s = (buf * kPrefillTileN + r) * kStride + ch * 8;
      CpAsync16(k_smem + s, p.k + off, valid);
      CpAsync16(v_smem + s, p.v + off, valid);
    }
  };
  load_kv(0, 0);
  CpAsyncCommit();

  const int warp = tid / 32;
  const int lane = tid % 32;
  // Rows past the sequence's last token borrow its position; they are computed, never stored.
  int max_pos[2];
  for (int r = 0; r < 2; ++r) {
    const int m = row0 + warp * 16 + lane / 4 + 8 * r;
    max_pos[r] = ctx_off + min(m / p.group, q_len - 1);
  }
  WarpState<kHeadDim> st;
  st.Init();
  uint32_t qf[kHeadDim / 16][4];
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
    if (tile == 0) LoadQFragments<kHeadDim>(q_smem + warp * 16 * kStride, qf);
    const int key0 = tile * kPrefillTileN;
    WarpAttendTile<kHeadDim, kPrefillTileN>(qf, k_smem + buf * kPrefillTileN * kStride,
                                            v_smem + buf * kPrefillTileN * kStride, p.scale_log2,
                                            key0 + kPrefillTileN - 1 > min_pos, key0, max_pos, st);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  // O / l -> T through this warp's (now unused) Q rows, then 16-byte coalesced stores.
  float inv_l[2];
  st.Finish(inv_l);
  T* o_smem = q_smem + warp * 16 * kStride;
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<Pair<T>*>(o_smem + (g + 8 * r) * kStride + d * 8 + 2 * t) =
          FloatsToPair<T>(st.o[d][2 * r] * inv_l[r], st.o[d][2 * r + 1] * inv_l[r]);
    }
  }
  __syncwarp();
  for (int c = lane; c < 16 * kChunks; c += 32) {
    const int r = c / kChunks;
    const int ch = c % kChunks;
    const int m = row0 + warp * 16 + r;
    if (m >= num_rows) continue;
    const int head = kv_head * p.group + m % p.group;
    *reinterpret_cast<uint4*>(p.out + (q_begin + m / p.group) * p.out_stride + head * kHeadDim +
                              ch * 8) =
        *reinterpret_cast<const uint4*>(o_smem + r * kStride + ch * 8);
  }
}

// ---- Decode --------------------------------------------------------------------------------

template <typename T>
struct DecodeParams : AttentionParams<T> {
  int32_t head_chunks;  // ceil(group / kDecodeRows)
  int32_t num_splits;
  float* partial_ml;  // [num_seqs, num_heads, num_splits, 2]: m (log2 units), l
  float* partial_o;   // [num_seqs, num_heads, num_splits, head_dim]: o / l
};

// The tiles [begin, end) of split `split` for a sequence of seq_len positions: the sequence's
// tiles are dealt evenly over the splits, at least kMinTilesPerSplit each, so short sequences use
// fewer splits. Returns the number of non-empty splits.
__device__ __forceinline__ int SplitRange(int seq_len, int num_splits, int split, int* begin,
                                          int* end) {
  const int num_tiles = (seq_len + kDecodeTileN - 1) / kDecodeTileN;
  const int per_split = max((num_tiles + num_splits - 1) / num_splits, kMinTilesPerSplit);
  *begin = split * per_split;
  *end = min(num_tiles, *begin + per_split);
  return (num_tiles + per_split - 1) / per_split;
}

template <int kHeadDim>
constexpr size_t DecodeSmemBytes() {
  return sizeof(uint16_t) * kSmemStride<kHeadDim> *
         (kDecodeRows + 2 * kDecodeStages * kDecodeTileN);
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(32) PagedDecodeSplitKernel(const DecodeParams<T> p) {
  constexpr int kStride = kSmemStride<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kStageElems = kDecodeTileN * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_smem = reinterpret_cast<T*>(smem_raw);  // [kDecodeRows][kStride]
  T* k_smem = q_smem + kDecodeRows * kStride;     // [kDecodeStages][16][kStride]
  T* v_smem = k_smem + kDecodeStages * kStageElems;

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.head_chunks;
  const int head0 = kv_head * p.group + (blockIdx.y % p.head_chunks) * kDecodeRows;
  const int num_rows = min(kDecodeRows, (kv_head + 1) * p.group - head0);
  const int seq = blockIdx.z;
  const int seq_len = p.seq_lens[seq];
  if (seq_len <= 0) return;  // padding row
  int tile_begin, tile_end;
  SplitRange(seq_len, p.num_splits, split, &tile_begin, &tile_end);
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
    for (int c = lane; c < kDecodeTileN * kChunks; c += 32) {
      const int r = c / kChunks;
      const int ch = c % kChunks;
      const bool valid = key0 + r < seq_len;
      const int64_t off = base + r * kHeadDim + ch * 8;
      const int s = stage * kStageElems + r * kStride + ch * 8;
      CpAsync16(k_smem + s, p.k + (valid ? off : 0), valid);
      CpAsync16(v_smem + s, p.v + (valid ? off : 0), valid);
    }
  };
  // Prologue: tiles 0 .. kDecodeStages - 2 (group 0 also holds Q). Empty groups keep the
  // wait_group count uniform at the tail.
#pragma unroll
  for (int i = 0; i < kDecodeStages - 1; ++i) {
    if (tile_begin + i < tile_end) load_tile(tile_begin + i, i);
    CpAsyncCommit();
  }
  WarpState<kHeadDim> st;
  st.Init();
  uint32_t qf[kHeadDim / 16][4];
  const int max_pos[2] = {seq_len - 1, seq_len - 1};
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int i = tile - tile_begin;
    const int ahead = tile + kDecodeStages - 1;
    if (ahead < tile_end) load_tile(ahead, (i + kDecodeStages - 1) % kDecodeStages);
    CpAsyncCommit();
    CpAsyncWait<kDecodeStages - 1>();
    __syncwarp();
    if (i == 0) LoadQFragments<kHeadDim>(q_smem, qf);
    const int stage = i % kDecodeStages;
    const int key0 = tile * kDecodeTileN;
    WarpAttendTile<kHeadDim, kDecodeTileN>(qf, k_smem + stage * kStageElems,
                                           v_smem + stage * kStageElems, p.scale_log2,
                                           key0 + kDecodeTileN > seq_len, key0, max_pos, st);
    __syncwarp();  // the stage is refilled kDecodeStages - 1 iterations later
  }

  float inv_l[2];
  st.Finish(inv_l);
  const int g = lane / 4;
  const int t = lane % 4;
  if (p.num_splits == 1) {
    // One split: this is the whole softmax; write the output and skip the merge kernel.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      if (row >= num_rows) continue;
      T* o = p.out + int64_t{seq} * p.out_stride + (head0 + row) * kHeadDim;
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        *reinterpret_cast<Pair<T>*>(o + d * 8 + 2 * t) =
            FloatsToPair<T>(st.o[d][2 * r] * inv_l[r], st.o[d][2 * r + 1] * inv_l[r]);
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
          make_float2(st.o[d][2 * r] * inv_l[r], st.o[d][2 * r + 1] * inv_l[r]);
    }
    if (t == 0) *reinterpret_cast<float2*>(p.partial_ml + slot * 2) = make_float2(st.m[r], st.l[r]);
  }
}

// Merges the splits of one (head, sequence): out = sum_j w_j o_j / sum_j w_j with
// w_j = l_j * 2^(m_j - max m). One thread per output element.
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kHeadDim) PagedDecodeReduceKernel(const DecodeParams<T> p) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int seq_len = p.seq_lens[seq];
  if (seq_len <= 0) return;
  int begin, end;
  const int num_active = SplitRange(seq_len, p.num_splits, 0, &begin, &end);
  const int64_t slot0 = (int64_t{seq} * p.num_heads + head) * p.num_splits;
  const float* ml = p.partial_ml + slot0 * 2;
  const float* o = p.partial_o + slot0 * kHeadDim + threadIdx.x;
  float m_max = -INFINITY;
  for (int j = 0; j < num_active; ++j) m_max = fmaxf(m_max, ml[2 * j]);
  float num = 0.0f;
  float den = 0.0f;
  for (int j = 0; j < num_active; ++j) {
    const float w = ml[2 * j + 1] * exp2f(ml[2 * j] - m_max);
    num += w * o[int64_t{j} * kHeadDim];
    den += w;
  }
  p.out[seq * p.out_stride + head * kHeadDim + threadIdx.x] =
      FromFloat<T>(den > 0.0f ? num / den : 0.0f);
}

// ---- Host side -----------------------------------------------------------------------------

// Per-device figures the launchers need, read once (host queries are not stream work, so they
// are safe inside graph capture too, but caching keeps them off the per-layer path).
struct DeviceFigures {
  int num_sms = 0;
  int decode_blocks_per_sm[2] = {0, 0};  // head_dim 64, 128
};

// Lets T's prefill kernels take their dynamic shared memory and reads the resident blocks per SM
// of T's decode kernel (head_dim 64, 128).
template <typename T>
cudaError_t SetUpKernels(int (&decode_blocks_per_sm)[2]) {
  cudaError_t e =
      cudaFuncSetAttribute(PagedPrefillKernel<64, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(PrefillSmemBytes<64>()));
  if (e == cudaSuccess) {
    e = cudaFuncSetAttribute(PagedPrefillKernel<128, T>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(PrefillSmemBytes<128>()));
  }
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &decode_blocks_per_sm[0], PagedDecodeSplitKernel<64, T>, 32, DecodeSmemBytes<64>());
  }
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &decode_blocks_per_sm[1], PagedDecodeSplitKernel<128, T>, 32, DecodeSmemBytes<128>());
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
    int f16_blocks_per_sm[2] = {0, 0};
    cudaError_t e = cudaDeviceGetAttribute(&n.num_sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) e = SetUpKernels<__nv_bfloat16>(n.decode_blocks_per_sm);
    if (e == cudaSuccess) e = SetUpKernels<__half>(f16_blocks_per_sm);
    if (e != cudaSuccess) return e;
    // One split rule for both types (their kernels take the same shared memory, so in practice
    // the same occupancy): the split count, and so PagedDecodeWorkspaceBytes, stay dtype-free.
    for (int i = 0; i < 2; ++i) {
      n.decode_blocks_per_sm[i] = std::min(n.decode_blocks_per_sm[i], f16_blocks_per_sm[i]);
    }
    f = n;
  }
  *out = f;
  return cudaSuccess;
}

bool IsAligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Checks what both launchers assume; logs the reason for a bad argument.
template <typename T>
bool ValidCommon(const char* fn, const T* q, int64_t q_stride, const PagedKvCacheT<T>& kv,
                 const AttentionDims& d, const T* out, int64_t out_stride, int32_t num_seqs) {
  const char* why = nullptr;
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
  }
  if (why) LOG(ERROR) << fn << ": " << why;
  return why == nullptr;
}

int DecodeHeadChunks(const AttentionDims& d) {
  return (d.num_heads / d.num_kv_heads + kDecodeRows - 1) / kDecodeRows;
}

// Splits per sequence: enough warps for about one wave (two waves measured 1.25x slower at
// batch 1 x 32k: every extra split pays its pipeline's start-up latency) of the decode kernel, no
// more splits than kMinTilesPerSplit-tile pieces of the longest sequence. Depends only on
// launch-time constants, so a captured graph replays with the same value the workspace was sized
// for.
int DecodeSplits(int32_t num_seqs, int32_t max_seq_len, const AttentionDims& d,
                 const DeviceFigures& f) {
  const int64_t items = int64_t{num_seqs} * d.num_kv_heads * DecodeHeadChunks(d);
  const int64_t target =
      int64_t{f.num_sms} * std::max(1, f.decode_blocks_per_sm[d.head_dim == 128 ? 1 : 0]);
  const int64_t max_tiles = (int64_t{max_seq_len} + kDecodeTileN - 1) / kDecodeTileN;
  int64_t splits = (target + items - 1) / std::max<int64_t>(items, 1);
  splits = std::min<int64_t>(splits, (max_tiles + kMinTilesPerSplit - 1) / kMinTilesPerSplit);
  return static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxSplits));
}

template <typename T>
void FillCommon(const T* q, int64_t q_stride, const PagedKvCacheT<T>& kv, const int32_t* seq_lens,
                const AttentionDims& dims, T* out, int64_t out_stride, AttentionParams<T>* p) {
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
  p->scale_log2 = dims.scale * kLog2e;
  p->out = out;
  p->out_stride = out_stride;
}

size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

size_t DecodeWorkspaceFor(int32_t num_seqs, int32_t splits, const AttentionDims& d) {
  const size_t slots = size_t(num_seqs) * d.num_heads * splits;
  return AlignUp(slots * 2 * sizeof(float)) + AlignUp(slots * d.head_dim * sizeof(float));
}

// The launchers behind the public overloads (one per element type).

template <typename T>
cudaError_t LaunchPrefill(const T* q, int64_t q_stride, const PagedKvCacheT<T>& kv,
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
  PrefillParams<T> p{};
  FillCommon(q, q_stride, kv, seq_lens, dims, out, out_stride, &p);
  p.cu_seqlens_q = cu_seqlens_q;
  const int64_t row_tiles =
      (int64_t{max_q_len} * p.group + kPrefillWarps * 16 - 1) / (kPrefillWarps * 16);
  if (row_tiles > 0x7fffffff || dims.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), dims.num_kv_heads, num_seqs);
  if (dims.head_dim == 64) {
    PagedPrefillKernel<64, T><<<grid, kPrefillWarps * 32, PrefillSmemBytes<64>(), stream>>>(p);
  } else {
    PagedPrefillKernel<128, T><<<grid, kPrefillWarps * 32, PrefillSmemBytes<128>(), stream>>>(p);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchDecode(const T* q, int64_t q_stride, const PagedKvCacheT<T>& kv,
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
  const int splits = num_splits > 0 ? num_splits : DecodeSplits(num_seqs, max_seq_len, dims, f);
  const size_t need = DecodeWorkspaceFor(num_seqs, splits, dims);
  if (!workspace || workspace_bytes < need || !IsAligned16(workspace)) {
    LOG(ERROR) << "PagedDecodeAttention: the workspace must be 16-byte aligned and hold " << need
               << " bytes (PagedDecodeWorkspaceBytes), got " << workspace_bytes;
    return cudaErrorInvalidValue;
  }
  DecodeParams<T> p{};
  FillCommon(q, q_stride, kv, seq_lens, dims, out, out_stride, &p);
  p.head_chunks = DecodeHeadChunks(dims);
  p.num_splits = splits;
  const size_t slots = size_t(num_seqs) * dims.num_heads * splits;
  p.partial_ml = static_cast<float*>(workspace);
  p.partial_o =
      reinterpret_cast<float*>(static_cast<char*>(workspace) + AlignUp(slots * 2 * sizeof(float)));
  const int64_t y = int64_t{dims.num_kv_heads} * p.head_chunks;
  if (y > 65535) return cudaErrorInvalidValue;
  const dim3 grid(splits, static_cast<unsigned>(y), num_seqs);
  const dim3 reduce_grid(dims.num_heads, num_seqs);
  if (dims.head_dim == 64) {
    PagedDecodeSplitKernel<64, T><<<grid, 32, DecodeSmemBytes<64>(), stream>>>(p);
    if (splits > 1) PagedDecodeReduceKernel<64, T><<<reduce_grid, 64, 0, stream>>>(p);
  } else {
    PagedDecodeSplitKernel<128, T><<<grid, 32, DecodeSmemBytes<128>(), stream>>>(p);
    if (splits > 1) PagedDecodeReduceKernel<128, T><<<reduce_grid, 128, 0, stream>>>(p);
  }
  return cudaGetLastError();
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

size_t PagedDecodeWorkspaceBytes(int32_t max_num_seqs, int32_t max_seq_len,
                                 const AttentionDims& dims) {
  if (max_num_seqs <= 0 || dims.num_kv_heads <= 0 || dims.num_heads <= 0 ||
      dims.num_heads % dims.num_kv_heads != 0) {
    return 0;
  }
  DeviceFigures f;
  if (GetDeviceFigures(&f) != cudaSuccess) return 0;
  // Fewer sequences get more splits each; size for the worst batch size up to the maximum.
  size_t bytes = 0;
  for (int32_t n = 1; n <= max_num_seqs; ++n) {
    bytes = std::max(bytes, DecodeWorkspaceFor(n, DecodeSplits(n, max_seq_len, dims, f), dims));
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

}  // namespace kiln::kernels
