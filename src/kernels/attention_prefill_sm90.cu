// Causal paged prefill attention on Hopper (sm_90a, head_dim 128): FlashAttention-2's algorithm
// (online softmax over K/V tiles, P reused from the S accumulators) on warpgroup tensor-core
// instructions (wgmma.mma_async, attention_wgmma.cuh) instead of mma.sync. Same contract,
// parameters and row packing as PagedPrefillKernel (attention.cu), which every other GPU, head_dim
// 64 and SetPrefillKernel(kMmaSync) still take.
//
// A CTA (384 threads) takes 128 packed query rows (row m = token * group + head in group) of one
// kv head of one sequence, heaviest row tiles first (the causal work grows with the index):
// FlashAttention-3's warp specialization without its ping-pong. A producer warpgroup fills the
// K/V stages and signals each on an mbarrier (full); two consumer warpgroups of 64 rows
// (WarpgroupAttention) take the tiles one at a time and each consumer warp releases a stage on
// another mbarrier (empty) after its P V. No CTA-wide barrier after the start.
//
// Two kinds of mma (SmemLayout):
// - 16-bit (T cache: T; fp8 cache with PrefillKernel::kWgmma16Bit: fp16, one cvt a pair of codes,
//   Q rounded to fp16 once with satfinite, P in fp16, as the fp8 decode kernel does).
//   smem   Q [128 rows] and K, V [128 keys] tiles, each [2][128][64] with the 128-byte swizzle
//          (32 KiB); Q and three [K, V] stages: 225 KiB, 1 CTA an SM
//   fill   T cache: the producer's cp.async straight into the swizzled stage, completion counted
//          on the full barrier (cp.async.mbarrier.arrive.noinc). fp8 cache: the producer loads
//          the codes into registers (before it waits for the stage to be free), converts them
//          (cvt e4m3x2 -> f16x2, exact) and stores them swizzled.
//   S      = Q K^T    per warpgroup m64n128k16 x 8 (k = head dims), A = Q and B = K from shared
//                     memory (both K-major); fp32 accumulators, 64 a thread
//   O     += P V      m64n128k16 x 8 (k = keys), A = P from registers (the S accumulators rounded
//                     to the mma type), B = V from the same swizzled [key][dim] layout read
//                     MN-major (transposed)
// - e4m3 (fp8 cache, the default): the codes as they are, Q rounded to e4m3 with a scale a row
//   (StageQE4m3), P scaled by 2^8 and rounded to e4m3.
//   smem   Q codes [128 rows][128 bytes], K [128 keys][128 bytes] and V transposed [128 dims]
//          [128 keys] (8-bit wgmma reads K-major operands only), 128-byte swizzle; four stages
//   fill   K by cp.async as above, V through the producer's registers and byte permutes
//          (ProduceE4m3Tiles), its keys in the order of P's registers
//   S      m64n128k32 x 4, A = Q and B = K from shared memory
//   O     += P V      m64n128k32 x 4, A = P from registers, B = V^T from shared memory
// Both: keys past the CTA's last position are zeros (a masked key's V must be finite: 0 * NaN
// would poison O); mask key > the row's position -> -inf (tiles past the CTA's first row's
// position only); softmax fp32, log2 domain, SoftmaxRowStep (the mma.sync kernels' step, same
// layout per warp); out = O / l (x v_scale) -> T through the warpgroup's own Q rows, 16-byte
// stores. Scales as in attention.cu: k_scale (and e4m3 Q's row scale) in the rows' scale_log2,
// v_scale in 1 / l.
//
// Napkin math (H100 SXM, dense fp16 wgmma ~990 TFLOP/s = 4,096 FLOP a clock an SM): a 128 x 128
// tile of one CTA is 2 x 128 x 128 x 128 x 2 = 8.4 MFLOP, 2,048 clocks of tensor time; its
// softmax 16,384 exp2 on 16 SFU lanes an SM, ~1,024 clocks. Measured: docs/kernels.md "Prefill
// on Hopper".

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <type_traits>

#include "kernels/attention_internal.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_wgmma.cuh"
#include "kernels/dtype_traits.cuh"

namespace kiln::kernels::attention_internal {
namespace {

using dtype_internal::E4m3x4;
using dtype_internal::E4m3x8ToVec8;
using dtype_internal::FloatsToPair;
using dtype_internal::PackPair;
using dtype_internal::Pair;
using Fp8 = __nv_fp8_e4m3;

constexpr int kHeadDim = 128;
constexpr int kRows = 128;  // packed query rows a CTA (two warpgroups of 64)
// [[maybe_unused]]: only the sm_90a bodies read these (other architectures compile them empty).
[[maybe_unused]] constexpr int kTileN = 128;         // keys a K/V tile
constexpr uint32_t kTileBytes = 128 * kHeadDim * 2;  // one [2][128][64] 16-bit tile: 32 KiB
[[maybe_unused]] constexpr uint32_t kBlockBytes = 128 * 128;  // one of its two column blocks

// Two consumer warpgroups and the producer warpgroup. Registers: launched at 168 a thread (384
// threads); setmaxnreg gives the consumers 200 and the producer 96 over an fp8 cache with fp16
// mma's (the producer holds codes), 200 and 104 with e4m3 mma's (16 keys' V codes), 232 and 40
// over a T cache. A register-file quarter holds one warp of each warpgroup: 2 x consumer +
// producer stays at 504 of its 512 (at 2 x 200 + 112 = 512 the consumers' setmaxnreg.inc never
// returned). (A producer warp at 288 threads could not launch with the consumers' ~210: three
// warps share a quarter, so ptxas caps them at 168.)
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kProducerThread0 = 256;
template <typename C>
constexpr int kConsumerRegisters = std::is_same_v<C, Fp8> ? 200 : 232;
template <typename C, bool kE4m3>
constexpr int kProducerRegisters = kE4m3                    ? 104
                                   : std::is_same_v<C, Fp8> ? 96
                                                            : 40;

// Shared memory of the two kinds of mma operand: 16-bit (K and V tiles of 32 KiB a stage, three
// stages) or e4m3 (the fp8 cache's codes as they are: a K tile [128 keys][128 bytes] and V
// transposed, [128 dims][128 keys], 16 KiB each, four stages). Both start with the 32 KiB Q
// region (the e4m3 Q codes take its first half; the output goes through all of it), then the
// stages, the mbarriers (full[stage], empty[stage]) and, for e4m3, Q's row scales.
template <bool kE4m3>
struct SmemLayout {
  static constexpr int kStages = kE4m3 ? 4 : 3;
  static constexpr uint32_t kHalfStage = kE4m3 ? kTileBytes / 2 : kTileBytes;  // K, or V
  static constexpr uint32_t kBarrierOffset = kTileBytes + 2 * kStages * kHalfStage;
  static constexpr uint32_t kQScaleOffset = kBarrierOffset + 2 * kStages * sizeof(uint64_t);
  static constexpr size_t kBytes = kQScaleOffset + (kE4m3 ? kRows * sizeof(float) : 0) + 1024;
};

// Warpgroup wg's 64 Q rows of the CTA -> shared memory as M (zeros past w.num_rows), thread
// `index` of its 128. Thread chunks run down 8 rows first, so a 16-byte store phase lands on 8
// distinct swizzled chunks.
template <typename M, typename T, typename C>
__device__ __forceinline__ void StageQ(const PrefillParams<T, C>& p, const PrefillTile& w,
                                       unsigned char* smem, int index, int wg) {
#pragma unroll
  for (int i = 0; i < 64 * 16 / 128; ++i) {
    const int c = index + 128 * i;
    const int r = wg * 64 + (c & 7) + 8 * (c >> 7);
    const int ch = (c >> 3) & 15;
    const int m = w.row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < w.num_rows) {
      v = *reinterpret_cast<const uint4*>(p.q +
                                          w.RowOffset(m, p.group, p.q_stride, kHeadDim, ch * 8));
      if constexpr (!std::is_same_v<M, T>) {
        v = make_uint4(PairToHalf2<T>(v.x), PairToHalf2<T>(v.y), PairToHalf2<T>(v.z),
                       PairToHalf2<T>(v.w));
      }
    }
    *reinterpret_cast<uint4*>(smem + SwizzledOffset<kRows>(r, ch)) = v;
  }
}

// Warpgroup wg's 64 Q rows of the CTA as e4m3 codes with a scale a row, thread `index` of its 128
// (two a row, 64 elements each): codes = e4m3(q * 448 / amax) into shared memory rows of 128
// bytes (128-byte swizzle), the row's scale amax / 448 into q_scale[row] (1 for an all-zero row
// and for rows past w.num_rows, whose codes are zeros).
// With p.q_codes, the codes and scales RoPE made the same way are copied instead.
template <typename T, typename C>
__device__ __forceinline__ void StageQE4m3(const PrefillParams<T, C>& p, const PrefillTile& w,
                                           unsigned char* smem, float* q_scale, int index, int wg) {
  const int r = wg * 64 + index / 2;
  const int half = index % 2;
  const int m = w.row0 + r;
  if (p.q_codes.codes != nullptr) {
    uint4 code[4] = {};
    float scale = 1.0f;
    if (m < w.num_rows) {
      const int64_t row = w.RowOffset(m, p.group, int64_t{p.num_heads} * kHeadDim, kHeadDim, 0);
      const uint4* src = reinterpret_cast<const uint4*>(p.q_codes.codes + row + 64 * half);
#pragma unroll
      for (int c = 0; c < 4; ++c) code[c] = src[c];
      scale = p.q_codes.scales[row / kHeadDim];
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      *reinterpret_cast<uint4*>(smem + SwizzledOffset<kRows>(r, 4 * half + c)) = code[c];
    }
    if (half == 0) q_scale[r] = scale;
    return;
  }
  float v[64];
  float amax = 0.0f;
  if (m < w.num_rows) {
    const T* row = p.q + w.RowOffset(m, p.group, p.q_stride, kHeadDim, 64 * half);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint4 x = *reinterpret_cast<const uint4*>(row + 8 * i);
      const uint32_t words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f =
            dtype_internal::PairToFloat2<T>(*reinterpret_cast<const Pair<T>*>(&words[j]));
        v[8 * i + 2 * j] = f.x;
        v[8 * i + 2 * j + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float inv = amax > 0.0f ? dtype_internal::kFp8Max / amax : 1.0f;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    uint32_t code[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float* x = v + 16 * c + 4 * j;
      code[j] = E4m3x4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    }
    *reinterpret_cast<uint4*>(smem + SwizzledOffset<kRows>(r, 4 * half + c)) =
        make_uint4(code[0], code[1], code[2], code[3]);
  }
  if (half == 0) q_scale[r] = amax > 0.0f ? amax / dtype_internal::kFp8Max : 1.0f;
}

// One consumer warpgroup's 64 rows: the accumulators and the online-softmax state, and the steps
// of a K/V tile. M: the mma's operand type (Fp8: e4m3 codes, P scaled by 2^8 before it is
// rounded to e4m3 so that small weights stay normal numbers).
template <typename M>
struct WarpgroupAttention {
  static constexpr bool kE4m3 = std::is_same_v<M, Fp8>;
  static constexpr int kKSteps = kE4m3 ? kTileN / 32 : kTileN / 16;  // P V's k-steps a tile
  using PFragment = uint32_t[kKSteps][4];

  float o[16][4];
  float s[16][4];
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  float scale_log2[2];  // the rows' score factor (log2 domain; e4m3: times Q's row scale)
  int max_pos[2];
  uint32_t q_wg;  // this warpgroup's 64 rows in each column block of the Q tile
  int wg, warp, g, t;

  // Rows past the sequence's last token borrow its position; they are computed, never stored.
  // q_scale: the e4m3 Q rows' scales (StageQE4m3), else unused.
  __device__ __forceinline__ WarpgroupAttention(const PrefillTile& w, int group, uint32_t q_tile,
                                                int tid, float score_scale_log2,
                                                const float* q_scale)
      : q_wg(q_tile + (tid / 128) * 64 * 128),
        wg(tid / 128),
        warp((tid / 32) % 4),
        g((tid % 32) / 4),
        t(tid % 4) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wg * 64 + warp * 16 + g + 8 * r;
      max_pos[r] = w.ctx_off + min((w.row0 + row) / group, w.q_len - 1);
      scale_log2[r] = score_scale_log2;
      if constexpr (kE4m3) scale_log2[r] *= q_scale[row];
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  }

  // S = Q K^T of the K tile at k_tile over the head dims (8 k16 or 4 e4m3 k32 steps), committed.
  __device__ __forceinline__ void IssueS(uint32_t k_tile) {
    FenceAccumulators(s);
    WgmmaFence();
    if constexpr (kE4m3) {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        WgmmaSSE4m3(s, SmemDescSw128(q_wg + kk * 32, 0, 1024),
                    SmemDescSw128(k_tile + kk * 32, 0, 1024), kk > 0);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const uint32_t k_off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
        WgmmaSS<M>(s, SmemDescSw128(q_wg + k_off, 0, 1024), SmemDescSw128(k_tile + k_off, 0, 1024),
                   kk > 0);
      }
    }
    WgmmaCommit();
  }

  // The online-softmax step on S of `tile` (its wgmma's done): masks, updates the row maxima and
  // sums, leaves the factor O must take before the tile's P V in alpha and P in `out`. e4m3: P's
  // register for k positions 4 t .. 4 t + 3 of a 16-key group holds keys 2 t, 2 t + 1, 8 + 2 t,
  // 9 + 2 t (the S accumulators the thread has); the producer stores V's keys in that order.
  __device__ __forceinline__ void Softmax(const PrefillTile& w, int tile, float (&alpha)[2],
                                          PFragment& out) {
    FenceAccumulators(s);
    const int key0 = tile * kTileN;
    if (key0 + kTileN - 1 > w.min_pos) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (key0 + 8 * j + 2 * t + (c & 1) > max_pos[c >> 1]) s[j][c] = -INFINITY;
        }
      }
    }
    if constexpr (kE4m3) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        alpha[r] = SoftmaxRowStep<16, 8>(s, r, scale_log2[r], row_max[r], row_sum[r]);
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const float(&a)[4] = s[4 * kk];
        const float(&b)[4] = s[4 * kk + 1];
        const float(&c)[4] = s[4 * kk + 2];
        const float(&d)[4] = s[4 * kk + 3];
        out[kk][0] = E4m3x4(a[0], a[1], b[0], b[1]);
        out[kk][1] = E4m3x4(a[2], a[3], b[2], b[3]);
        out[kk][2] = E4m3x4(c[0], c[1], d[0], d[1]);
        out[kk][3] = E4m3x4(c[2], c[3], d[2], d[3]);
      }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        alpha[r] = SoftmaxRowStep(s, r, scale_log2[r], row_max[r], row_sum[r]);
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        out[kk][0] = PackPair<M>(s[2 * kk][0], s[2 * kk][1]);
        out[kk][1] = PackPair<M>(s[2 * kk][2], s[2 * kk][3]);
        out[kk][2] = PackPair<M>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        out[kk][3] = PackPair<M>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    }
  }

  // O += P V of the V tile at v_tile (P in pv) over its keys, committed: 16-bit V read MN-major
  // from its [key][dim] tile, e4m3 V K-major from its transposed [dim][key] tile.
  __device__ __forceinline__ void IssuePv(uint32_t v_tile, const PFragment& pv) {
    FenceAccumulators(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      if constexpr (kE4m3) {
        WgmmaRSE4m3(o, pv[kk], SmemDescSw128(v_tile + kk * 32, 0, 1024));
      } else {
        WgmmaRSTransB<M>(o, pv[kk], SmemDescSw128(v_tile + kk * 2048, kBlockBytes, 1024));
      }
    }
    WgmmaCommit();
  }

  // O's rows times the softmax step's factors (no wgmma on O in flight).
  __device__ __forceinline__ void Rescale(const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
  }

  // O / l -> T into this warpgroup's Q rows (only its own wgmma's read them; all are done), then
  // 16-byte coalesced stores.
  template <typename T, typename C>
  __device__ __forceinline__ void Store(const PrefillParams<T, C>& p, const PrefillTile& w,
                                        unsigned char* smem, int tid) {
    float inv_l[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv_l[r] = l > 0.0f ? p.v_scale / l : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wg * 64 + warp * 16 + g + 8 * r;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        *reinterpret_cast<Pair<T>*>(smem + SwizzledOffset<kRows>(row, j) + 4 * t) =
            FloatsToPair<T>(o[j][2 * r] * inv_l[r], o[j][2 * r + 1] * inv_l[r]);
      }
    }
    NamedBarrierSync(1 + wg, 128);
#pragma unroll
    for (int i = 0; i < 64 * 16 / 128; ++i) {
      const int c = tid % 128 + 128 * i;
      const int row = wg * 64 + c / 16;
      const int ch = c % 16;
      const int m = w.row0 + row;
      if (m >= w.num_rows) continue;
      *reinterpret_cast<uint4*>(p.out + w.RowOffset(m, p.group, p.out_stride, kHeadDim, ch * 8)) =
          *reinterpret_cast<const uint4*>(smem + SwizzledOffset<kRows>(row, ch));
    }
  }
};

// Shared memory rounded up to the swizzle's 1,024-byte period: (its address, its pointer).
[[maybe_unused]] __device__ __forceinline__ uint32_t AlignedSmem(unsigned char* raw,
                                                                 unsigned char** aligned) {
  const uint32_t raw_addr = SmemAddr(raw);
  const uint32_t base = (raw_addr + 1023) & ~1023u;
  *aligned = raw + (base - raw_addr);
  return base;
}

// Element offset in p's cache of key group index % 8 of tile `tile` (keys 16 (index % 8) .. + 15:
// one cache block holds the whole group, block sizes being multiples of 16, so its positions are
// head_dim elements apart), 0 for a group past w.key_end (not read). The producers look a
// group up once a tile and hand it around the warp: lane g % 8 holds group g's offset (the block
// table lookups, one a key, were the e4m3 producer's bottleneck: docs/kernels.md).
template <typename P>
__device__ __forceinline__ int64_t GroupOffset(const P& p, const PrefillTile& w, int tile,
                                               int index) {
  const int pos = tile * kTileN + 16 * (index % 8);
  return pos < w.key_end ? w.KeyOffset(p, pos, kHeadDim) : 0;
}

// The fp8 cache's producer warpgroup (thread `index` of 128): tile after tile, once the
// consumers have released its stage (tile - 3 done), each thread loads its 8 K and 8 V chunks of
// 16 codes in two halves (8 loads in flight), converts them (cvt e4m3x2 -> f16x2, exact) and
// stores them swizzled; keys past w.key_end are zeros (a masked key's V must be finite: 0 * NaN
// would poison O). Then it arrives on the stage's full barrier. Chunk c: key 2 (c / 16) +
// (c / 4) % 2, codes 16 (c % 4 + 4 ((c / 8) % 2)) .. + 15, so that a quarter-warp's two 16-byte
// stores a chunk hit 8 distinct swizzled chunks.
template <typename T>
__device__ __forceinline__ void ProduceFp8Tiles(const PrefillParams<T, Fp8>& p,
                                                const PrefillTile& w, int num_tiles,
                                                unsigned char* smem, uint32_t full, uint32_t empty,
                                                int index) {
#ifdef KILN_WGMMA
  constexpr int kStages = SmemLayout<false>::kStages;
  // Chunk c = index + 128 (4 half + j) is in key group 4 half + j, row (of 16) and chunk:
  const int row = 2 * (index >> 4) + ((index >> 2) & 1);
  const int chunk = (index & 3) + 4 * ((index >> 3) & 1);
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    const int64_t group = GroupOffset(p, w, tile, index);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint4 codes[2][4];
      // chunks[j] is the same for every j; written as the one constant it compiled to another
      // schedule that measured 5-12 % slower (session 27, results call K), so it stays per j.
      int keys[4], chunks[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t g = __shfl_sync(0xffffffffu, group, 4 * half + j);
        keys[j] = 16 * (4 * half + j) + row;
        chunks[j] = chunk;
        const int pos = tile * kTileN + keys[j];
        codes[0][j] = codes[1][j] = make_uint4(0, 0, 0, 0);
        if (pos < w.key_end) {
          const int64_t off = g + row * kHeadDim + chunk * 16;
          codes[0][j] = __ldg(reinterpret_cast<const uint4*>(p.k + off));
          codes[1][j] = __ldg(reinterpret_cast<const uint4*>(p.v + off));
        }
      }
      // The loads are in flight while the stage's last readers finish.
      if (half == 0 && tile >= kStages) {
        MbarrierWait(empty + 8 * stage, ((tile / kStages) & 1) ^ 1);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int which = 0; which < 2; ++which) {
          unsigned char* dst = smem + kTileBytes * (1 + 2 * stage + which);
          const uint4 c = codes[which][j];
          *reinterpret_cast<uint4*>(dst + SwizzledOffset<kTileN>(keys[j], 2 * chunks[j])) =
              E4m3x8ToVec8<__half>(make_uint2(c.x, c.y));
          *reinterpret_cast<uint4*>(dst + SwizzledOffset<kTileN>(keys[j], 2 * chunks[j] + 1)) =
              E4m3x8ToVec8<__half>(make_uint2(c.z, c.w));
        }
      }
    }
    FenceProxyAsync();  // the stores are visible to the consumers' wgmma's
    MbarrierArrive(full + 8 * stage);
  }
#endif
}

// The T cache's producer warpgroup (thread `index` of 128): tile after tile, once the consumers
// have released its stage, each thread copies its 16 K and 16 V chunks of 16 bytes with cp.async
// straight into the swizzled stage (zeros past w.key_end); the stage's full barrier counts the
// thread's arrival when its copies have landed (cp.async.mbarrier.arrive.noinc).
template <typename T>
__device__ __forceinline__ void ProduceTiles(const PrefillParams<T, T>& p, const PrefillTile& w,
                                             int num_tiles, uint32_t base, uint32_t full,
                                             uint32_t empty, int index) {
#ifdef KILN_WGMMA
  constexpr int kStages = SmemLayout<false>::kStages;
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    if (tile >= kStages) MbarrierWait(empty + 8 * stage, ((tile / kStages) & 1) ^ 1);
    const uint32_t k_tile = base + kTileBytes * (1 + 2 * stage);
    const int64_t group = GroupOffset(p, w, tile, index);
#pragma unroll 4
    for (int i = 0; i < kTileN * 16 / 128; ++i) {
      // Chunk index + 128 i: key 8 i + index % 8 (group i / 2), 16-byte chunk index / 8.
      const int64_t g = __shfl_sync(0xffffffffu, group, i / 2);
      const int key = 8 * i + (index & 7);
      const int ch = index >> 3;
      const int pos = tile * kTileN + key;
      const bool valid = pos < w.key_end;
      const int64_t off = valid ? g + (key % 16) * kHeadDim + ch * 8 : 0;
      const uint32_t s = SwizzledOffset<kTileN>(key, ch);
      CpAsync16(k_tile + s, p.k + off, valid);
      CpAsync16(k_tile + kTileBytes + s, p.v + off, valid);
    }
    CpAsyncArrive(full + 8 * stage);
  }
#endif
}

// The fp8 cache's producer for e4m3 mma's (thread `index` of 128), stage after stage of
// SmemLayout<true>: K's codes go in as they are (cp.async, 8 16-byte chunks a thread, counted on
// the full barrier as the T producer's), V's are transposed through registers. A tile is 8
// groups of 16 keys, each group inside one cache block (block sizes are multiples of 16), so
// 2 KiB contiguous per kv head: thread (kb = index % 8, db = index / 8) looks up group kb's
// address once (lane kb of each warp then hands it to the others for K's copies), loads 8 codes
// (dims 8 db ..) of the group's 16 keys, transposes them with byte permutes and stores dim rows
// of 16 keys in the order the consumers' P fragments take them (WarpgroupAttention::Softmax):
// position 4 q + i of the group holds key 2 q, 2 q + 1, 8 + 2 q, 9 + 2 q for i = 0..3. A
// quarter-warp's 16-byte stores are the 8 key groups of one dim row: 8 distinct swizzled chunks.
// Keys past w.key_end are zeros. The next tile's V loads go out as soon as this tile's are
// stored, so they are in flight while the producer waits for its stage. Two arrivals a thread
// on the full barrier (expected: 256).
template <typename T>
__device__ __forceinline__ void ProduceE4m3Tiles(const PrefillParams<T, Fp8>& p,
                                                 const PrefillTile& w, int num_tiles,
                                                 unsigned char* smem, uint32_t base, uint32_t full,
                                                 uint32_t empty, int index) {
#ifdef KILN_WGMMA
  using L = SmemLayout<true>;
  const int kb = index % 8;
  const int db = index / 8;
  uint2 v[16];
  auto load_v = [&](int tile, int64_t group) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = make_uint2(0, 0);
      if (tile * kTileN + 16 * kb + i < w.key_end) {
        v[i] = __ldg(reinterpret_cast<const uint2*>(p.v + group + i * kHeadDim + 8 * db));
      }
    }
  };
  int64_t group = GroupOffset(p, w, 0, index);
  load_v(0, group);
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % L::kStages;
    if (tile >= L::kStages) MbarrierWait(empty + 8 * stage, ((tile / L::kStages) & 1) ^ 1);
    const uint32_t k_tile = base + kTileBytes + 2 * stage * L::kHalfStage;
#pragma unroll
    for (int i = 0; i < kTileN * 8 / 128; ++i) {
      // Chunk index + 128 i: key 16 i + index / 8 (group i), 16-byte chunk index % 8.
      const int64_t g = __shfl_sync(0xffffffffu, group, i);
      const int key = 16 * i + index / 8;
      const bool valid = tile * kTileN + key < w.key_end;
      const int64_t off = valid ? g + (index / 8) * kHeadDim + (index % 8) * 16 : 0;
      CpAsync16(k_tile + SwizzledOffset<kTileN>(key, index % 8), p.k + off, valid);
    }
    CpAsyncArrive(full + 8 * stage);
    unsigned char* vt = smem + kTileBytes + (2 * stage + 1) * L::kHalfStage;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // out[b][q]: dim 8 db + 4 h + b, positions 4 q .. 4 q + 3 of the key group.
      uint32_t out[4][4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        auto word = [&](int key) { return h == 0 ? v[key].x : v[key].y; };
        const uint32_t a = word(2 * q), b = word(2 * q + 1), c = word(8 + 2 * q),
                       d = word(9 + 2 * q);
        const uint32_t ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);
        const uint32_t cd_lo = __byte_perm(c, d, 0x5140), cd_hi = __byte_perm(c, d, 0x7362);
        out[0][q] = __byte_perm(ab_lo, cd_lo, 0x5410);
        out[1][q] = __byte_perm(ab_lo, cd_lo, 0x7632);
        out[2][q] = __byte_perm(ab_hi, cd_hi, 0x5410);
        out[3][q] = __byte_perm(ab_hi, cd_hi, 0x7632);
      }
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        *reinterpret_cast<uint4*>(vt + SwizzledOffset<kHeadDim>(8 * db + 4 * h + b, kb)) =
            make_uint4(out[b][0], out[b][1], out[b][2], out[b][3]);
      }
    }
    FenceProxyAsync();  // the stores are visible to the consumers' wgmma's
    MbarrierArrive(full + 8 * stage);
    if (tile + 1 < num_tiles) {
      group = GroupOffset(p, w, tile + 1, index);
      load_v(tile + 1, group);
    }
  }
#endif
}

// kE4m3: the fp8 cache's codes straight into e4m3 mma's (C = Fp8 only), else 16-bit mma's.
template <typename T, typename C, bool kE4m3>
__global__ void __launch_bounds__(kThreads, 1) PagedPrefillSm90Kernel(const PrefillParams<T, C> p) {
#ifdef KILN_WGMMA
  constexpr bool kFp8 = std::is_same_v<C, Fp8>;
  static_assert(kFp8 || !kE4m3, "e4m3 mma's read an fp8 cache");
  // The mma's operand type.
  using M = std::conditional_t<kE4m3, Fp8, std::conditional_t<kFp8, __half, T>>;
  using L = SmemLayout<kE4m3>;
  constexpr int kStages = L::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem;
  const uint32_t base = AlignedSmem(smem_raw, &smem);
  const uint32_t full = base + L::kBarrierOffset;  // full[stage], then empty[stage]
  const uint32_t empty = full + 8 * kStages;
  float* q_scale = reinterpret_cast<float*>(smem + L::kQScaleOffset);
  auto kv_tile = [&](int tile, int which) {
    return base + kTileBytes + (2 * (tile % kStages) + which) * L::kHalfStage;
  };

  const PrefillTile w = GetPrefillTile(p, kRows);
  if (w.empty) return;
  const int num_tiles = (w.key_end + kTileN - 1) / kTileN;
  const int tid = threadIdx.x;
  if (tid < kStages) {
    MbarrierInit(full + 8 * tid, kE4m3 ? 256 : 128);  // the producer's threads (e4m3: twice)
    MbarrierInit(empty + 8 * tid, 8);                 // the consumer warps
    FenceMbarrierInit();
  }
  __syncthreads();
  if (tid >= kProducerThread0) {
    SetMaxRegisters<false, kProducerRegisters<C, kE4m3>>();
    if constexpr (kE4m3) {
      ProduceE4m3Tiles(p, w, num_tiles, smem, base, full, empty, tid - kProducerThread0);
    } else if constexpr (kFp8) {
      ProduceFp8Tiles(p, w, num_tiles, smem, full, empty, tid - kProducerThread0);
    } else {
      ProduceTiles(p, w, num_tiles, base, full, empty, tid - kProducerThread0);
    }
    return;
  }
  SetMaxRegisters<true, kConsumerRegisters<C>>();

  // A consumer warpgroup: its own Q rows, then tile after tile, one at a time; each warp
  // releases a stage once its P V is done. (Ping-pong between the two warpgroups, and S of the
  // next tile issued with P V of this one, were no faster: docs/kernels.md.)
  const int wg = tid / 128;
  if constexpr (kE4m3) {
    StageQE4m3(p, w, smem, q_scale, tid % 128, wg);
  } else {
    StageQ<M>(p, w, smem, tid % 128, wg);
  }
  FenceProxyAsync();
  NamedBarrierSync(1 + wg, 128);
  WarpgroupAttention<M> a(w, p.group, base, tid, p.scale_log2, q_scale);
  typename WarpgroupAttention<M>::PFragment pf;
  for (int tile = 0; tile < num_tiles; ++tile) {
    MbarrierWait(full + 8 * (tile % kStages), (tile / kStages) & 1);
    // The producer's cp.async writes (T: K and V, e4m3: K), for the wgmma's.
    if constexpr (!kFp8 || kE4m3) FenceProxyAsync();
    a.IssueS(kv_tile(tile, 0));
    WgmmaWait<0>();
    float alpha[2];
    a.Softmax(w, tile, alpha, pf);
    a.Rescale(alpha);
    a.IssuePv(kv_tile(tile, 1), pf);
    WgmmaWait<0>();
    FenceAccumulators(a.o);
    __syncwarp();
    if (tid % 32 == 0) MbarrierArrive(empty + 8 * (tile % kStages));
  }
  a.Store(p, w, smem, tid);
#endif
}

}  // namespace

bool PrefillSm90Built() {
#ifdef KILN_SM90A
  return true;
#else
  return false;
#endif
}

template <typename T, typename C>
cudaError_t SetUpPrefillSm90() {
  cudaError_t e = cudaFuncSetAttribute(PagedPrefillSm90Kernel<T, C, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(SmemLayout<false>::kBytes));
  if constexpr (std::is_same_v<C, Fp8>) {
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(PagedPrefillSm90Kernel<T, C, true>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(SmemLayout<true>::kBytes));
    }
  }
  return e;
}

template <typename T, typename C>
cudaError_t LaunchPrefillSm90(const PrefillParams<T, C>& p, int32_t max_q_len, int32_t num_seqs,
                              bool e4m3_math, cudaStream_t stream) {
  const int64_t row_tiles = (int64_t{max_q_len} * p.group + kRows - 1) / kRows;
  if (row_tiles > 0x7fffffff || p.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), p.num_kv_heads, num_seqs);
  if constexpr (std::is_same_v<C, Fp8>) {
    if (e4m3_math) {
      PagedPrefillSm90Kernel<T, C, true><<<grid, kThreads, SmemLayout<true>::kBytes, stream>>>(p);
      return cudaGetLastError();
    }
  }
  PagedPrefillSm90Kernel<T, C, false><<<grid, kThreads, SmemLayout<false>::kBytes, stream>>>(p);
  return cudaGetLastError();
}

#define KILN_PREFILL_SM90(T, C)                                                                    \
  template cudaError_t SetUpPrefillSm90<T, C>();                                                   \
  template cudaError_t LaunchPrefillSm90<T, C>(const PrefillParams<T, C>&, int32_t, int32_t, bool, \
                                               cudaStream_t);
KILN_PREFILL_SM90(__nv_bfloat16, __nv_bfloat16)
KILN_PREFILL_SM90(__half, __half)
KILN_PREFILL_SM90(__nv_bfloat16, __nv_fp8_e4m3)
KILN_PREFILL_SM90(__half, __nv_fp8_e4m3)
#undef KILN_PREFILL_SM90

}  // namespace kiln::kernels::attention_internal
