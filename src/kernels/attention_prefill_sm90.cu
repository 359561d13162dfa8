// Causal paged prefill attention on Hopper (sm_90a, head_dim 128): FlashAttention-2's algorithm
// (online softmax over K/V tiles, P reused from the S accumulators) on warpgroup tensor-core
// instructions (wgmma.mma_async, attention_wgmma.cuh) instead of mma.sync. Same contract,
// parameters and row packing as PagedPrefillKernel (attention.cu), which every other GPU, head_dim
// 64 and SetPrefillKernel(kMmaSync) still take.
//
// A CTA (384 threads) takes 128 packed query rows (row m = token * group + head in group) of one
// kv head of one sequence, heaviest row tiles first (the causal work grows with the index):
// FlashAttention-3's warp specialization without its ping-pong. A producer warpgroup fills three
// K/V stages and signals each on an mbarrier (full); two consumer warpgroups of 64 rows
// (WarpgroupAttention) take the tiles one at a time and each consumer warp releases a stage on
// another mbarrier (empty) after its P V. No CTA-wide barrier after the start.
//
//   smem   Q [128 rows] and K, V [128 keys] tiles of 16-bit elements, each [2][128][64] with the
//          128-byte swizzle (32 KiB); Q and three [K, V] stages: 225 KiB, 1 CTA an SM
//   fill   T cache: the producer's cp.async straight into the swizzled stage, completion counted
//          on the full barrier (cp.async.mbarrier.arrive.noinc). fp8 cache: the producer loads
//          the codes into registers (before it waits for the stage to be free), converts them
//          (cvt e4m3x2 -> f16x2, exact) and stores them swizzled. Keys past the CTA's last
//          position are zeros (a masked key's V must be finite: 0 * NaN would poison O).
//   S      = Q K^T    per warpgroup m64n128k16 x 8 (k = head dims), A = Q and B = K from shared
//                     memory (both K-major); fp32 accumulators, 64 a thread
//   mask   key > the row's position -> -inf (tiles past the CTA's first row's position only)
//   softmax fp32, log2 domain, SoftmaxRowStep (the mma.sync kernels' step, same layout per warp)
//   O     += P V      m64n128k16 x 8 (k = keys), A = P from registers (the S accumulators rounded
//                     to the mma type), B = V from the same swizzled [key][dim] layout read
//                     MN-major (transposed)
//   out    O / l (x v_scale) -> T through the warpgroup's own Q rows, 16-byte stores
//
// Types: the mma runs in T over a T cache; over an fp8 cache it runs in fp16 whatever T is (one
// cvt a pair of codes; Q rounded to fp16 once with satfinite, P in fp16), as the fp8 decode
// kernel does (docs/kernels.md "Decode over the fp8 cache without a T tile"). Scales as in
// attention.cu: k_scale in scale_log2, v_scale in 1 / l.
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

// Two consumer warpgroups and the producer warpgroup; Q, three 16-bit [K, V] stages, then the
// mbarriers (full[3], empty[3]): 225 KiB. Registers: launched at 168 a thread (384 threads),
// setmaxnreg gives the consumers 208 and the producer 88 over an fp8 cache (the producer holds
// codes), 232 and 40 over a T cache: a register-file quarter holds one warp of each warpgroup,
// 2 x 208 x 32 + 88 x 32 = 16,128 of its 16,384. (A producer warp at 288 threads could not
// launch with the consumers' ~210: three warps share a quarter, so ptxas caps them at 168.)
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kProducerThread0 = 256;
template <typename C>
constexpr int kConsumerRegisters = std::is_same_v<C, Fp8> ? 208 : 232;
template <typename C>
constexpr int kProducerRegisters = std::is_same_v<C, Fp8> ? 88 : 40;
[[maybe_unused]] constexpr int kStages = 3;
[[maybe_unused]] constexpr uint32_t kBarrierOffset = (1 + 2 * kStages) * kTileBytes;
constexpr size_t kSmemBytes = kBarrierOffset + 2 * kStages * sizeof(uint64_t) + 1024;

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

// One consumer warpgroup's 64 rows: the accumulators and the online-softmax state, and the steps
// of a K/V tile. M: the mma's operand type.
template <typename M>
struct WarpgroupAttention {
  float o[16][4];
  float s[16][4];
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  int max_pos[2];
  uint32_t q_wg;  // this warpgroup's 64 rows in each column block of the Q tile
  int wg, warp, g, t;

  // Rows past the sequence's last token borrow its position; they are computed, never stored.
  __device__ __forceinline__ WarpgroupAttention(const PrefillTile& w, int group, uint32_t q_tile,
                                                int tid)
      : q_wg(q_tile + (tid / 128) * 64 * 128),
        wg(tid / 128),
        warp((tid / 32) % 4),
        g((tid % 32) / 4),
        t(tid % 4) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int m = w.row0 + wg * 64 + warp * 16 + g + 8 * r;
      max_pos[r] = w.ctx_off + min(m / group, w.q_len - 1);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  }

  // S = Q K^T of the K tile at k_tile over the 8 k16 steps of the head dims, committed.
  __device__ __forceinline__ void IssueS(uint32_t k_tile) {
    FenceAccumulators(s);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t k_off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
      WgmmaSS<M>(s, SmemDescSw128(q_wg + k_off, 0, 1024), SmemDescSw128(k_tile + k_off, 0, 1024),
                 kk > 0);
    }
    WgmmaCommit();
  }

  // The online-softmax step on S of `tile` (its wgmma's done): masks, updates the row maxima and
  // sums, leaves the factor O must take before the tile's P V in alpha and P in `out`.
  __device__ __forceinline__ void Softmax(const PrefillTile& w, int tile, float scale_log2,
                                          float (&alpha)[2], uint32_t (&out)[kTileN / 16][4]) {
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
#pragma unroll
    for (int r = 0; r < 2; ++r) alpha[r] = SoftmaxRowStep(s, r, scale_log2, row_max[r], row_sum[r]);
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      out[kk][0] = PackPair<M>(s[2 * kk][0], s[2 * kk][1]);
      out[kk][1] = PackPair<M>(s[2 * kk][2], s[2 * kk][3]);
      out[kk][2] = PackPair<M>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      out[kk][3] = PackPair<M>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }

  // O += P V of the V tile at v_tile (P in pv) over the 8 k16 steps of its keys, committed.
  __device__ __forceinline__ void IssuePv(uint32_t v_tile, const uint32_t (&pv)[kTileN / 16][4]) {
    FenceAccumulators(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      WgmmaRSTransB<M>(o, pv[kk], SmemDescSw128(v_tile + kk * 2048, kBlockBytes, 1024));
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
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint4 codes[2][4];
      int keys[4], chunks[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = index + 128 * (4 * half + j);
        keys[j] = 2 * (c >> 4) + ((c >> 2) & 1);
        chunks[j] = (c & 3) + 4 * ((c >> 3) & 1);
        const int pos = tile * kTileN + keys[j];
        codes[0][j] = codes[1][j] = make_uint4(0, 0, 0, 0);
        if (pos < w.key_end) {
          const int64_t off = w.KeyOffset(p, pos, kHeadDim) + chunks[j] * 16;
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
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    if (tile >= kStages) MbarrierWait(empty + 8 * stage, ((tile / kStages) & 1) ^ 1);
    const uint32_t k_tile = base + kTileBytes * (1 + 2 * stage);
#pragma unroll 4
    for (int i = 0; i < kTileN * 16 / 128; ++i) {
      const int c = index + 128 * i;
      const int key = (c & 7) + 8 * (c >> 7);
      const int ch = (c >> 3) & 15;
      const int pos = tile * kTileN + key;
      const bool valid = pos < w.key_end;
      const int64_t off = valid ? w.KeyOffset(p, pos, kHeadDim) + ch * 8 : 0;
      const uint32_t s = SwizzledOffset<kTileN>(key, ch);
      CpAsync16(k_tile + s, p.k + off, valid);
      CpAsync16(k_tile + kTileBytes + s, p.v + off, valid);
    }
    CpAsyncArrive(full + 8 * stage);
  }
#endif
}

template <typename T, typename C>
__global__ void __launch_bounds__(kThreads, 1) PagedPrefillSm90Kernel(const PrefillParams<T, C> p) {
#ifdef KILN_WGMMA
  constexpr bool kFp8 = std::is_same_v<C, Fp8>;
  using M = std::conditional_t<kFp8, __half, T>;  // the mma's operand type
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem;
  const uint32_t base = AlignedSmem(smem_raw, &smem);
  const uint32_t full = base + kBarrierOffset;  // full[stage], then empty[stage]
  const uint32_t empty = full + 8 * kStages;
  auto kv_tile = [&](int tile, int which) {
    return base + kTileBytes * (1 + 2 * (tile % kStages) + which);
  };

  const PrefillTile w = GetPrefillTile(p, kRows);
  if (w.empty) return;
  const int num_tiles = (w.key_end + kTileN - 1) / kTileN;
  const int tid = threadIdx.x;
  if (tid < kStages) {
    MbarrierInit(full + 8 * tid, 128);  // the producer's threads
    MbarrierInit(empty + 8 * tid, 8);   // the consumer warps
    FenceMbarrierInit();
  }
  __syncthreads();
  if (tid >= kProducerThread0) {
    SetMaxRegisters<false, kProducerRegisters<C>>();
    if constexpr (kFp8) {
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
  StageQ<M>(p, w, smem, tid % 128, wg);
  FenceProxyAsync();
  NamedBarrierSync(1 + wg, 128);
  WarpgroupAttention<M> a(w, p.group, base, tid);
  uint32_t pf[kTileN / 16][4];
  for (int tile = 0; tile < num_tiles; ++tile) {
    MbarrierWait(full + 8 * (tile % kStages), (tile / kStages) & 1);
    if constexpr (!kFp8) FenceProxyAsync();  // the producer's cp.async writes, for the wgmma's
    a.IssueS(kv_tile(tile, 0));
    WgmmaWait<0>();
    float alpha[2];
    a.Softmax(w, tile, p.scale_log2, alpha, pf);
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
  return cudaFuncSetAttribute(PagedPrefillSm90Kernel<T, C>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(kSmemBytes));
}

template <typename T, typename C>
cudaError_t LaunchPrefillSm90(const PrefillParams<T, C>& p, int32_t max_q_len, int32_t num_seqs,
                              cudaStream_t stream) {
  const int64_t row_tiles = (int64_t{max_q_len} * p.group + kRows - 1) / kRows;
  if (row_tiles > 0x7fffffff || p.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), p.num_kv_heads, num_seqs);
  PagedPrefillSm90Kernel<T, C><<<grid, kThreads, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

#define KILN_PREFILL_SM90(T, C)                                                              \
  template cudaError_t SetUpPrefillSm90<T, C>();                                             \
  template cudaError_t LaunchPrefillSm90<T, C>(const PrefillParams<T, C>&, int32_t, int32_t, \
                                               cudaStream_t);
KILN_PREFILL_SM90(__nv_bfloat16, __nv_bfloat16)
KILN_PREFILL_SM90(__half, __half)
KILN_PREFILL_SM90(__nv_bfloat16, __nv_fp8_e4m3)
KILN_PREFILL_SM90(__half, __nv_fp8_e4m3)
#undef KILN_PREFILL_SM90

}  // namespace kiln::kernels::attention_internal
