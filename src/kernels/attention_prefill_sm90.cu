// Causal paged prefill attention on Hopper (sm_90a, head_dim 128): FlashAttention-2's algorithm
// (online softmax over K/V tiles, P reused from the S accumulators) on warpgroup tensor-core
// instructions (wgmma.mma_async, attention_wgmma.cuh) instead of mma.sync. Same contract,
// parameters and row packing as PagedPrefillKernel (attention.cu), which every other GPU, head_dim
// 64 and SetPrefillKernel(kMmaSync) still take.
//
// CTA = 2 warpgroups (256 threads), 128 packed query rows (row m = token * group + head in group),
// one kv head of one sequence; heaviest row tiles first (the causal work grows with the index).
//
//   smem   Q [128 rows] and K, V [128 keys] tiles of 16-bit elements, each [2][128][64] with the
//          128-byte swizzle (32 KiB): three K/V buffers over a T cache (225 KiB), two over an
//          fp8 cache (161 KiB); 1 CTA an SM
//   S      = Q K^T    per warpgroup m64n128k16 x 8 (k = head dims), A = Q and B = K from shared
//                     memory (both K-major); fp32 accumulators, 64 a thread
//   mask   key > the row's position -> -inf (tiles past the CTA's first row's position only)
//   softmax fp32, log2 domain, SoftmaxRowStep (the mma.sync kernels' step, same layout per warp)
//   O     += P V      m64n128k16 x 8 (k = keys), A = P from registers (the S accumulators rounded
//                     to the mma type), B = V from the same swizzled [key][dim] layout read
//                     MN-major (transposed)
//   out    O / l (x v_scale) -> T through the warpgroup's own Q rows, 16-byte stores
//
// Two loops. T cache: S of tile t + 1 and P V of tile t are issued together and tile t + 1's
// softmax runs while P V computes (FlashAttention-3's overlap inside a warpgroup; O's rescale
// waits for the P V); tile t + 2 is copied with cp.async meanwhile. fp8 cache: one tile at a
// time, the next tile's codes loaded into registers at the start of an iteration and converted
// (cvt e4m3x2 -> f16x2, exact) into the other buffer while P V runs; the overlapped loop was
// slower there (docs/kernels.md).
//
// Types: the mma runs in T over a T cache; over an fp8 cache it runs in fp16 whatever T is (one
// cvt a pair of codes; Q rounded to fp16 once with satfinite, P in fp16), as the fp8 decode
// kernel does (docs/kernels.md "Decode over the fp8 cache without a T tile"). Scales as in
// attention.cu: k_scale in scale_log2, v_scale in 1 / l.
//
// Napkin math (H100 SXM, dense fp16 wgmma ~990 TFLOP/s = 4,096 FLOP a clock an SM): a 128 x 128
// tile of one CTA is 2 x 128 x 128 x 128 x 2 = 8.4 MFLOP, 2,048 clocks of tensor time; its
// softmax 16,384 exp2 on 16 SFU lanes an SM, ~1,024 clocks. Measured (attention_bench --prefill,
// H100): 250-300 TFLOP/s, 1.0-1.5x the mma.sync kernel; Nsight Compute on 8 x 2,048: tensor pipe
// 29 % busy, 1.3 instructions a cycle an SM, 8 warps an SM: latency-bound. What is left is
// FlashAttention-3's structure: a producer warp with TMA copies and mbarriers instead of the
// consumers' loads and CTA-wide barriers, ping-pong between the two warpgroups.

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
using dtype_internal::kIsFp8;
using dtype_internal::PackPair;
using dtype_internal::Pair;

constexpr int kHeadDim = 128;
constexpr int kRows = 128;  // packed query rows a CTA (two warpgroups of 64)
// [[maybe_unused]]: only the sm_90a body reads these two (other architectures compile it empty).
[[maybe_unused]] constexpr int kTileN = 128;  // keys a K/V tile
constexpr int kThreads = 256;
constexpr uint32_t kTileBytes = 128 * kHeadDim * 2;  // one [2][128][64] 16-bit tile: 32 KiB
[[maybe_unused]] constexpr uint32_t kBlockBytes = 128 * 128;  // one of its two column blocks
// K/V tile buffers: three for a T cache (the overlapped loop), two for an fp8 cache.
template <typename C>
constexpr int kBufs = kIsFp8<C> ? 2 : 3;
// Q, then [buffer][K, V]; the start rounded up to the swizzle's 1,024-byte period: 225 KiB (T
// cache) or 161 KiB (fp8).
template <typename C>
constexpr size_t kSmemBytes = (1 + 2 * kBufs<C>)*size_t{kTileBytes} + 1024;

template <typename T, typename C>
__global__ void __launch_bounds__(kThreads, 1) PagedPrefillSm90Kernel(const PrefillParams<T, C> p) {
#ifdef KILN_WGMMA
  constexpr bool kFp8 = kIsFp8<C>;
  using M = std::conditional_t<kFp8, __half, T>;  // the mma's operand type
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = SmemAddr(smem_raw);
  const uint32_t base = (raw_addr + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw_addr);
  auto kv_offset = [](int buf, int which) { return kTileBytes * (1 + 2 * buf + which); };

  const PrefillTile w = GetPrefillTile(p, kRows);
  if (w.empty) return;
  const int num_tiles = (w.key_end + kTileN - 1) / kTileN;
  const int tid = threadIdx.x;

  // Q rows -> shared memory as M (zeros past w.num_rows). Thread chunks run down 8 rows first, so
  // a 16-byte store phase lands on 8 distinct swizzled chunks.
#pragma unroll
  for (int i = 0; i < kRows * 16 / kThreads; ++i) {
    const int c = tid + kThreads * i;
    const int r = (c & 7) + 8 * (c >> 7);
    const int ch = (c >> 3) & 15;
    const int m = w.row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < w.num_rows) {
      v = *reinterpret_cast<const uint4*>(p.q +
                                          w.RowOffset(m, p.group, p.q_stride, kHeadDim, ch * 8));
      if constexpr (kFp8) {
        v = make_uint4(PairToHalf2<T>(v.x), PairToHalf2<T>(v.y), PairToHalf2<T>(v.z),
                       PairToHalf2<T>(v.w));
      }
    }
    *reinterpret_cast<uint4*>(smem + SwizzledOffset<kRows>(r, ch)) = v;
  }

  // fp8 cache: one tile's codes in registers. Chunk c = tid + 256 i of K (codes[i]) and of V
  // (codes[4 + i]) is key (c & 7) + 8 (c >> 6), codes 16 ((c >> 3) & 7) .. + 15; keys past
  // w.key_end are zeros (a masked key's V must be finite: 0 * NaN would poison O).
  uint4 codes[kFp8 ? 8 : 1];
  auto load_codes = [&](int tile) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = tid + kThreads * i;
      const int pos = tile * kTileN + (c & 7) + 8 * (c >> 6);
      codes[i] = codes[4 + i] = make_uint4(0, 0, 0, 0);
      if (pos < w.key_end) {
        const int64_t off = w.KeyOffset(p, pos, kHeadDim) + ((c >> 3) & 7) * 16;
        codes[i] = __ldg(reinterpret_cast<const uint4*>(p.k + off));
        codes[4 + i] = __ldg(reinterpret_cast<const uint4*>(p.v + off));
      }
    }
  };
  auto store_codes = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = tid + kThreads * (i % 4);
      const int key = (c & 7) + 8 * (c >> 6);
      const int ch = 2 * ((c >> 3) & 7);
      unsigned char* tile = smem + kv_offset(buf, i / 4);
      *reinterpret_cast<uint4*>(tile + SwizzledOffset<kTileN>(key, ch)) =
          E4m3x8ToVec8<__half>(make_uint2(codes[i].x, codes[i].y));
      *reinterpret_cast<uint4*>(tile + SwizzledOffset<kTileN>(key, ch + 1)) =
          E4m3x8ToVec8<__half>(make_uint2(codes[i].z, codes[i].w));
    }
  };
  // T cache: cp.async straight into the swizzled tiles, zero-filled past w.key_end.
  auto load_async = [&](int tile, int buf) {
#pragma unroll
    for (int i = 0; i < kTileN * 16 / kThreads; ++i) {
      const int c = tid + kThreads * i;
      const int key = (c & 7) + 8 * (c >> 7);
      const int ch = (c >> 3) & 15;
      const int pos = tile * kTileN + key;
      const bool valid = pos < w.key_end;
      int64_t off = 0;
      if (valid) {
        off = w.KeyOffset(p, pos, kHeadDim) + ch * 8;
      }
      const uint32_t s = base + SwizzledOffset<kTileN>(key, ch);
      CpAsync16(s + kv_offset(buf, 0), p.k + off, valid);
      CpAsync16(s + kv_offset(buf, 1), p.v + off, valid);
    }
  };

  const int wg = tid / 128;
  const int warp = (tid / 32) % 4;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // Rows past the sequence's last token borrow its position; they are computed, never stored.
  int max_pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = w.row0 + wg * 64 + warp * 16 + g + 8 * r;
    max_pos[r] = w.ctx_off + min(m / p.group, w.q_len - 1);
  }
  float o[16][4];
  float s[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  uint32_t pf[kTileN / 16][4];                 // P of an even tile, as the P V wgmma's A fragments
  const uint32_t q_wg = base + wg * 64 * 128;  // this warpgroup's 64 rows in each column block

  // S = Q K^T of `tile` (in its buffer) over the 8 k16 steps of the head dims, committed.
  auto issue_s = [&](int tile) {
    const uint32_t k_tile = base + kv_offset(tile % kBufs<C>, 0);
    FenceAccumulators(s);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t k_off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
      WgmmaSS<M>(s, SmemDescSw128(q_wg + k_off, 0, 1024), SmemDescSw128(k_tile + k_off, 0, 1024),
                 kk > 0);
    }
    WgmmaCommit();
  };
  // The online-softmax step on S of `tile` (its wgmma's done): masks, updates the row maxima and
  // sums, leaves the factor O must take before the tile's P V in alpha and P in `out`.
  auto softmax = [&](int tile, float(&alpha)[2], uint32_t(&out)[kTileN / 16][4]) {
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
    for (int r = 0; r < 2; ++r) {
      alpha[r] = SoftmaxRowStep(s, r, p.scale_log2, row_max[r], row_sum[r]);
    }
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      out[kk][0] = PackPair<M>(s[2 * kk][0], s[2 * kk][1]);
      out[kk][1] = PackPair<M>(s[2 * kk][2], s[2 * kk][3]);
      out[kk][2] = PackPair<M>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      out[kk][3] = PackPair<M>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  // O += P V of `tile` (P in pv) over the 8 k16 steps of its keys, committed.
  auto issue_pv = [&](int tile, const uint32_t(&pv)[kTileN / 16][4]) {
    const uint32_t v_tile = base + kv_offset(tile % kBufs<C>, 1);
    FenceAccumulators(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      WgmmaRSTransB<M>(o, pv[kk], SmemDescSw128(v_tile + kk * 2048, kBlockBytes, 1024));
    }
    WgmmaCommit();
  };
  // O's rows times the softmax step's factors (no wgmma on O in flight).
  auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
  };

  if constexpr (kFp8) {
    // fp8 cache: one tile at a time. The next tile's codes are loaded at the start of an
    // iteration and converted into the other buffer while this tile's P V runs. (The overlapped
    // loop below was slower here, 1.00-1.07x against 1.07-1.53x of the mma.sync kernel: its
    // conversion could not start early enough to hide the loads; docs/kernels.md.)
    load_codes(0);
    store_codes(0);
    FenceProxyAsync();
    __syncthreads();
    for (int tile = 0; tile < num_tiles; ++tile) {
      const bool next = tile + 1 < num_tiles;
      if (next) load_codes(tile + 1);
      issue_s(tile);
      WgmmaWait<0>();
      float alpha[2];
      softmax(tile, alpha, pf);
      rescale(alpha);
      issue_pv(tile, pf);
      if (next) store_codes((tile + 1) % kBufs<C>);
      WgmmaWait<0>();
      FenceAccumulators(o);
      FenceProxyAsync();
      __syncthreads();  // the next tile is in its buffer; this one is free for the one after
    }
  } else {
    // T cache: tiles 0 and 1 in their buffers; tile 2 is requested in the first iteration.
    load_async(0, 0);
    if (num_tiles > 1) load_async(1, 1);
    CpAsyncCommit();
    CpAsyncWait<0>();
    FenceProxyAsync();
    __syncthreads();
    {
      float alpha[2];  // O is still zero
      issue_s(0);
      WgmmaWait<0>();
      softmax(0, alpha, pf);
    }

    // Each tile's P V runs while the next tile's S is softmaxed (FlashAttention-3's overlap inside
    // a warpgroup); O's rescale by that step's alpha waits for the P V. Three buffers: the tile
    // written during an iteration (tile + 2) is the one whose readers finished before the last
    // barrier. P alternates between two arrays (a copy from one to the other would make ptxas
    // serialize the wgmma's).
    auto step = [&](int tile, const uint32_t(&pv)[kTileN / 16][4],
                    uint32_t(&pv_next)[kTileN / 16][4]) {
      if (tile + 2 < num_tiles) {
        load_async(tile + 2, (tile + 2) % kBufs<C>);
        CpAsyncCommit();
      }
      issue_s(tile + 1);
      issue_pv(tile, pv);
      float alpha[2];
      WgmmaWait<1>();
      softmax(tile + 1, alpha, pv_next);
      WgmmaWait<0>();
      FenceAccumulators(o);
      rescale(alpha);
      CpAsyncWait<0>();
      FenceProxyAsync();
      __syncthreads();  // tile + 2 is in its buffer; every warpgroup is done with tile's
    };
    uint32_t pf_odd[kTileN / 16][4];
    for (int tile = 0; tile + 1 < num_tiles; tile += 2) {
      step(tile, pf, pf_odd);
      if (tile + 2 < num_tiles) step(tile + 1, pf_odd, pf);
    }
    if ((num_tiles - 1) % 2 == 0) {
      issue_pv(num_tiles - 1, pf);
    } else {
      issue_pv(num_tiles - 1, pf_odd);
    }
    WgmmaWait<0>();
    FenceAccumulators(o);
  }

  // O / l -> T into this warpgroup's Q rows (only its own wgmma's read them), then 16-byte
  // coalesced stores.
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
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
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
                              static_cast<int>(kSmemBytes<C>));
}

template <typename T, typename C>
cudaError_t LaunchPrefillSm90(const PrefillParams<T, C>& p, int32_t max_q_len, int32_t num_seqs,
                              cudaStream_t stream) {
  const int64_t row_tiles = (int64_t{max_q_len} * p.group + kRows - 1) / kRows;
  if (row_tiles > 0x7fffffff || p.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), p.num_kv_heads, num_seqs);
  PagedPrefillSm90Kernel<T, C><<<grid, kThreads, kSmemBytes<C>, stream>>>(p);
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
