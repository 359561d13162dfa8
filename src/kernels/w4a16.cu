#include "kernels/w4a16.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/attention_mma.cuh"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/rope_store.cuh"

namespace kiln::kernels {
namespace {

using attention_internal::CpAsync16;
using attention_internal::CpAsyncCommit;
using attention_internal::CpAsyncWait;
using attention_internal::Mma;
using attention_internal::SmemAddr;
using dtype_internal::FromFloat;
using dtype_internal::PackPair;
using dtype_internal::ToFloat;

// The mma computes out^T = W . x^T: a weight tile is the A operand (16 output rows by 16 inputs)
// and 8 tokens of x are the B operand, so a batch of 1..8 rows fills the instruction's n = 8 and
// no row of weights is padded. Within one 64-column tile, mma k-step j (16 columns) takes the
// stored columns 16j .. 16j + 15 in the order below, which puts all the nibbles lane (g, t) needs
// for the 4 k-steps (rows g and g + 8, columns 16j + 4t .. 16j + 4t + 3) into one 16-byte word:
//   word j, bits 4q + 16h: q = 0: (g, 4t + h), q = 1: (g + 8, 4t + h), q = 2: (g, 4t + 2 + h),
//                          q = 3: (g + 8, 4t + 2 + h)          (columns relative to 16j)
// i.e. a_q's pair (PTX fragment layout; mma logical k 2t + h is column 4t + h, 2t + 8 + h is
// column 4t + 2 + h, and B is read in the same order: x columns 16j + 4t .. + 3, 8 bytes).
// Each nibble holds code + 8 (0..15).
// Warps per block: 8, or 16 for a few-row batch on a weight of at most kW4WideMaxRowTiles row
// tiles (w4a16.h), whose blocks alone would leave the SMs half empty.
constexpr int kWarps = 8;
constexpr int kWideWarps = 16;

__device__ __host__ inline int NibbleShift(int q, int h) { return 4 * q + 16 * h; }

__global__ void RepackCodesKernel(const uint8_t* __restrict__ codes, int64_t n, int64_t k,
                                  uint4* __restrict__ tiled) {
  const int64_t chunks = k / kW4TileCols;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // (rb, c, lane)
  if (id >= n / kW4TileRows * chunks * 32) return;
  const int lane = static_cast<int>(id % 32);
  const int64_t c = id / 32 % chunks, rb = id / 32 / chunks;
  const int g = lane / 4, t = lane % 4;
  uint32_t words[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t word = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = rb * kW4TileRows + g + (q & 1) * 8;
        const int64_t col = c * kW4TileCols + 16 * j + 4 * t + (q >> 1) * 2 + h;
        const uint8_t byte = codes[(row * k + col) / 2];
        const uint32_t nibble = col % 2 == 0 ? byte & 0xfu : byte >> 4;  // code & 0xf
        word |= ((nibble ^ 0x8u) & 0xfu) << NibbleShift(q, h);           // code + 8
      }
    }
    words[j] = word;
  }
  tiled[id] = make_uint4(words[0], words[1], words[2], words[3]);
}

// The bits of value 2^e (fp16: 1024 = 0x6400, bf16: 128 = 0x4300) whose last mantissa bits are a
// nibble: OR-ing a nibble u in gives 2^e + u exactly (mantissa step 1).
__host__ __device__ constexpr uint32_t MagicBits(bool bf16) { return bf16 ? 0x4300u : 0x6400u; }

// The high half of a scale word: the activation type's bits of 2^e + 8 + zero (exact), what the
// kernel subtracts from 2^e + (code + 8) to get code - zero.
__host__ __device__ inline uint32_t SubBits(bool bf16, int zero) {
  return static_cast<uint32_t>(static_cast<int>(MagicBits(bf16)) + 8 + zero);
}

__global__ void RepackScalesKernel(const uint16_t* __restrict__ scales,
                                   const int8_t* __restrict__ zeros, int64_t n, int64_t groups,
                                   bool bf16, uint32_t* __restrict__ sz, int64_t ldsz) {
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // (row, group)
  if (id >= n * groups) return;
  const int64_t row = id / groups, g = id % groups;
  const int zero = zeros != nullptr ? zeros[id] : 0;
  sz[g * ldsz + row] = uint32_t{scales[id]} | (SubBits(bf16, zero) << 16);
}

// One thread per 16-byte word of codes (tile row block rb, column tile c, lane): the word's 32
// codes are rows g and g + 8 of the block, columns 16j + 4t .. 16j + 4t + 3 of the tile for
// j = 0..3 (the layout above), so each (row, j) is 4 adjacent outputs: one 8-byte store.
template <typename T>
__global__ void DequantizeKernel(const uint4* __restrict__ tiled, const uint32_t* __restrict__ sz,
                                 int64_t n, int64_t k, int64_t group_size, int64_t rb0,
                                 int64_t num_rb, T* __restrict__ out) {
  const int64_t chunks = k / kW4TileCols;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // (rb - rb0, c, lane)
  if (id >= num_rb * chunks * 32) return;
  const int lane = static_cast<int>(id % 32);
  const int64_t c = id / 32 % chunks, rb = rb0 + id / 32 / chunks;
  const int g = lane / 4, t = lane % 4;
  const uint4 v = tiled[(rb * chunks + c) * 32 + lane];
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  constexpr int kMagic = static_cast<int>(MagicBits(std::is_same_v<T, __nv_bfloat16>));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = rb * kW4TileRows + g + 8 * r;
    T* dst = out + (row - rb0 * kW4TileRows) * k + c * kW4TileCols + 4 * t;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // The 4 columns share a group (groups are multiples of 16 columns).
      const uint32_t word = sz[(c * kW4TileCols + 16 * j) / group_size * n + row];
      const float scale = __half2float(__ushort_as_half(static_cast<uint16_t>(word & 0xffffu)));
      const int offset = static_cast<int>(word >> 16) - kMagic;  // SubBits: 8 + zero
      float w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = r + 2 * (e >> 1), h = e & 1;
        const int nibble = static_cast<int>((words[j] >> NibbleShift(q, h)) & 0xfu);  // code + 8
        w[e] = static_cast<float>(nibble - offset) * scale;
      }
      *reinterpret_cast<uint2*>(dst + 16 * j) =
          make_uint2(PackPair<T>(w[0], w[1]), PackPair<T>(w[2], w[3]));
    }
  }
}

template <typename T>
__global__ void GatherKernel(const T* __restrict__ x, int64_t ldx, int64_t k,
                             const int32_t* __restrict__ perm, T* __restrict__ out) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= k) return;
  out[blockIdx.y * k + j] = x[blockIdx.y * ldx + perm[j]];
}

// MagicBits in both halves.
template <typename T>
constexpr uint32_t kMagicPair = MagicBits(!std::is_same_v<T, __half>) * 0x10001u;

template <typename T>
__device__ __forceinline__ uint32_t SubPair(uint32_t a, uint32_t b) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 r =
        __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// One (row, group) word of W4RepackScales: the scale in fp32 and, as a pair of T, the value to
// subtract from 2^e + (code + 8) to get code - zero (exact: small integers). Two instructions.
__device__ __forceinline__ void DecodeSz(uint32_t word, float& scale, uint32_t& sub) {
  scale = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
  sub = __byte_perm(word, 0, 0x3232);
}

// (v & mask) | bits in one LOP3. Written as C++ with both constants as immediates, the compiler
// emits an AND and an OR (cuobjdump: twice the LOP3s of the dequantization); with bits in a
// register one LOP3 does both.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t AndOr(uint32_t v, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(v), "n"(kMask), "r"(bits));
  return r;
}

// Group gi of a lane's 16-byte code word (the layout above) as mma A fragments: a[jj] for the
// group's kKPG k-steps, and the scales of the lane's rows g and g + 8 (scale words lo and hi).
// kFold false: each element is (code - zero) exactly as T. kFold true (bf16): each element is
// 2^e + (code + 8), one LOP3 (and a shift) per element pair instead of four instructions; the
// caller subtracts FoldedZero times the sum of x.
// One k-step's word of a lane's code word as an mma A fragment (DequantGroup below).
template <typename T, bool kFold>
__device__ __forceinline__ void DequantStep(uint32_t word, const uint32_t (&sub)[2],
                                            uint32_t (&a)[4]) {
  static_assert(!kFold || std::is_same_v<T, __nv_bfloat16>);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t bits = AndOr<0x000f000fu>(word >> (4 * q), kMagicPair<T>);
    a[q] = kFold ? bits : SubPair<T>(bits, sub[q & 1]);
  }
}

template <int kKPG, typename T, bool kFold = false>
__device__ __forceinline__ void DequantGroup(const uint4& wv, int gi, uint32_t lo, uint32_t hi,
                                             float (&scale)[2], uint32_t (&a)[kKPG][4]) {
  uint32_t sub[2];
  DecodeSz(lo, scale[0], sub[0]);
  DecodeSz(hi, scale[1], sub[1]);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&wv);
#pragma unroll
  for (int jj = 0; jj < kKPG; ++jj) DequantStep<T, kFold>(words[gi * kKPG + jj], sub, a[jj]);
}

// What DequantGroup<..., kFold = true> leaves in each element beyond code - zero: 2^e + 8 + zero,
// the bf16 high half of a scale word, read as the top of an fp32. The mma sums
// (2^e + code + 8) x; subtracting this times the sum of x is exact in the operands, one fp32
// rounding.
__device__ __forceinline__ float FoldedZero(uint32_t word) {
  return __uint_as_float(word & 0xffff0000u);
}

// v / d for 0 <= v < 2^31 in three 32-bit instructions (d >= 1 fixed per launch; Granlund and
// Montgomery's round-up method: l = ceil(log2 d), mul = floor(2^32 (2^l - d) / d) + 1,
// v / d = (umulhi(v, mul) + v) >> l). A 64-bit division per tile, and then a 64-bit
// multiply, measured as a large share of the kernel's instructions.
struct FastDiv {
  uint32_t mul = 0;
  int shift = 0;
  static FastDiv For(uint32_t d) {
    int l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    FastDiv f;
    f.shift = l;
    f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
    return f;
  }
  __device__ __forceinline__ uint32_t Div(uint32_t v) const {
    return (__umulhi(v, mul) + v) >> shift;
  }
};

__device__ __forceinline__ void Store(float v, float* out) { *out = v; }
template <typename T>
__device__ __forceinline__ void Store(float v, T* out) {
  *out = FromFloat<T>(v);
}

// kTT: 8-token tiles (m <= 8 * kTT); kRB: 16-row tiles per block (they share x's fragments);
// kKPG: mma k-steps per scale group within a 64-column tile (4: groups of 64 or more);
// kU: 64-column tiles in flight per warp; kW: warps per block. The block's kW warps split the k
// dimension (tile c goes to warp c % kW) and sum their partial outputs in shared memory at the
// end.
// Per group: partial = sum over the group's k-steps of (code - zero) * x (exact operands, fp32
// accumulation), then acc += partial * scale in fp32: the scale is applied once per group, not
// rounded into the weights.
// Measured alternatives (gemv_bench --w4, H100, docs/kernels.md; at m = 1, which W4GemvKernel
// now serves): two register stages, and a cp.async ring of 8 shared-memory stages per warp, were
// no faster.
template <int kTT, int kRB, int kKPG, int kU, int kW, typename T, typename Out>
__global__ void __launch_bounds__(kW * 32)
    W4GemmKernel(const T* __restrict__ x, int64_t ldx, int m, const uint4* __restrict__ w,
                 const uint32_t* __restrict__ sz, FastDiv group_of_tile, int64_t n, int64_t k,
                 const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo,
                 const void* prefetch, int64_t prefetch_bytes) {
  constexpr int kGroups = 4 / kKPG;  // scale groups per 64-column tile
  extern __shared__ float red[];     // [kW][kRB * kTT * 4][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t rb0 = int64_t{blockIdx.x} * kRB;
  // Offsets from the block's bases in 32 bits (one wide multiply-add per address): a weight
  // has fewer than 2^32 16-byte words and scale words (W4GemmSupported), x fewer than 2^31
  // elements.
  const uint32_t chunks = static_cast<uint32_t>(k / kW4TileCols);
  const uint32_t n32 = static_cast<uint32_t>(n), ldx32 = static_cast<uint32_t>(ldx);
  const uint4* wb = w + rb0 * chunks * 32 + lane;
  const uint32_t* szb = sz + rb0 * kW4TileRows + g;
  const T* xb = x + g * ldx32 + 4 * t;  // token g of each 8-token tile
  float acc[kRB][kTT][4];
#pragma unroll
  for (int r = 0; r < kRB; ++r)
#pragma unroll
    for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][tt][i] = 0.0f;

  uint4 wv[kU][kRB];
  uint32_t szv[kU][kRB][kGroups][2];
  // Every load is issued before any is used: the weight stream is the whole cost. A tile past
  // the end reads tile 0 again (in bounds) with scale 0, so it adds nothing, with no branch.
  auto load = [&](uint32_t c0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t c = c0 + u * kW;
      const bool valid = c < chunks;
      const uint32_t cs = valid ? c : 0;
#pragma unroll
      for (int r = 0; r < kRB; ++r) {
        wv[u][r] = __ldcs(wb + (r * chunks + cs) * 32);
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          // Groups of 16 / 32 columns: several per tile, no division.
          const uint32_t grp = kKPG == 4 ? group_of_tile.Div(cs) : cs * kGroups + gi;
          const uint32_t* p = szb + (grp * n32 + r * kW4TileRows);
          const uint32_t lo = __ldg(p), hi = __ldg(p + 8);
          szv[u][r][gi][0] = valid ? lo : 0u;
          szv[u][r][gi][1] = valid ? hi : 0u;
        }
      }
    }
  };
  // The first tiles go out before PdlWait (launch.cuh): weights are no earlier kernel's output.
  load(warp);
  PdlWait();
  PdlLaunchDependents();
  for (uint32_t c0 = warp; c0 < chunks; c0 += kW * kU) {
    if (c0 != static_cast<uint32_t>(warp)) load(c0);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      // Past the end: x read at tile 0 (in bounds), weighed by scale 0.
      const uint32_t c = c0 + u * kW < chunks ? c0 + u * kW : 0;
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) {
        float scale[kRB][2];
        uint32_t a[kRB][kKPG][4];
#pragma unroll
        for (int r = 0; r < kRB; ++r) {
          DequantGroup<kKPG, T>(wv[u][r], gi, szv[u][r][gi][0], szv[u][r][gi][1], scale[r], a[r]);
        }
#pragma unroll
        for (int tt = 0; tt < kTT; ++tt) {
          const bool live = tt * 8 + g < m;
          const T* xr = xb + (tt * 8 * ldx32 + c * kW4TileCols + gi * kKPG * 16);
          float part[kRB][4];
#pragma unroll
          for (int r = 0; r < kRB; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) part[r][i] = 0.0f;
#pragma unroll
          for (int jj = 0; jj < kKPG; ++jj) {
            const uint2 b =
                live ? __ldg(reinterpret_cast<const uint2*>(xr + jj * 16)) : make_uint2(0, 0);
#pragma unroll
            for (int r = 0; r < kRB; ++r) Mma<T>(part[r], a[r][jj], b.x, b.y);
          }
#pragma unroll
          for (int r = 0; r < kRB; ++r) {
            acc[r][tt][0] = fmaf(part[r][0], scale[r][0], acc[r][tt][0]);
            acc[r][tt][1] = fmaf(part[r][1], scale[r][0], acc[r][tt][1]);
            acc[r][tt][2] = fmaf(part[r][2], scale[r][1], acc[r][tt][2]);
            acc[r][tt][3] = fmaf(part[r][3], scale[r][1], acc[r][tt][3]);
          }
        }
      }
    }
  }

  dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
  constexpr int kE = kRB * kTT * 4;  // accumulators per lane
#pragma unroll
  for (int r = 0; r < kRB; ++r)
#pragma unroll
    for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        red[(warp * kE + (r * kTT + tt) * 4 + i) * 32 + lane] = acc[r][tt][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < kE * 32; idx += kW * 32) {
    float v = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kW; ++wi) v += red[wi * kE * 32 + idx];
    const int e = idx / 32, l = idx % 32;
    const int r = e / (kTT * 4), tt = e / 4 % kTT, i = e % 4;
    const int token = tt * 8 + 2 * (l % 4) + (i & 1);
    const int64_t row = (rb0 + r) * kW4TileRows + l / 4 + (i >> 1) * 8;
    if (token < m) {
      if (bias != nullptr) v += ToFloat(bias[row]);
      Store(v, out + token * ldo + row);
    }
  }
}

// Launches W4GemmKernel or W4GemvKernel (the same parameters) with fp32 or T output.
template <typename T, typename KernelF32, typename KernelT>
cudaError_t LaunchRows(const W4GemmArgsT<T>& a, KernelF32 kernel_f32, KernelT kernel_t, dim3 grid,
                       int threads, size_t smem, cudaStream_t stream) {
  const auto* w = reinterpret_cast<const uint4*>(a.w);
  // kKPG == 4 (groups of 64 columns or more): a tile's group is its index / (group / 64).
  const FastDiv group_of_tile =
      FastDiv::For(static_cast<uint32_t>(std::max<int64_t>(a.group_size / 64, 1)));
  auto launch = [&](auto kernel, auto* out) {
    if (smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return e;
    }
    return LaunchChained(kernel, grid, threads, smem, stream, a.x, a.ldx, a.m, w, a.sz,
                         group_of_tile, a.n, a.k, a.bias, out, a.ldo, a.prefetch, a.prefetch_bytes);
  };
  if (a.out_f32) return launch(kernel_f32, static_cast<float*>(a.out));
  return launch(kernel_t, static_cast<T*>(a.out));
}

template <int kTT, int kRB, int kKPG, int kU, int kW = kWarps, typename T>
cudaError_t LaunchW4(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  return LaunchRows(a, W4GemmKernel<kTT, kRB, kKPG, kU, kW, T, float>,
                    W4GemmKernel<kTT, kRB, kKPG, kU, kW, T, T>,
                    dim3(static_cast<unsigned>(a.n / kW4TileRows / kRB)), kW * 32,
                    size_t{kW} * kRB * kTT * 4 * 32 * sizeof(float), stream);
}

// ---- One token tile (W4GemvKernel): 1-8 rows ----------------------------------------------------
// W4GemmKernel with one token tile and one row tile per block, trimmed where a batch of 1-8 spends
// its instructions (measured at 1 row, ncu + cuobjdump, gate_up of an 8B Llama: 129 instructions
// per lane's 16-byte code word, of them 34 LOP3s and 16 HADD2s dequantizing and ~30 computing
// per-tile addresses and bounds; here 74, static count):
// * bf16: the zero point folded out of the dequantization (DequantGroup's kFold), the sums of x
//   per token from one more mma per k-step with A all ones;
// * each warp takes a run of consecutive column tiles, kU at a time: a step's addresses are one
//   base and immediate offsets, and only the run's last, partial step checks bounds;
// * token rows past m read row m - 1 again (their outputs are never stored) instead of
//   predicated loads and zeroing.
// Fewer instructions did not make it much faster alone (ncu: the schedulers still find no warp
// ready 58 % of cycles, mostly waiting on global loads); two tiles in flight per warp (kU 2,
// fewer registers, more warps per SM) did, end to end. A cp.async ring per lane (4 or 8 stages,
// the bytes in flight in shared memory instead of registers) was slower (docs/benchmarks.md).
template <int kKPG, int kU, int kW, typename T, typename Out>
__global__ void __launch_bounds__(kW * 32)
    W4GemvKernel(const T* __restrict__ x, int64_t ldx, int m, const uint4* __restrict__ w,
                 const uint32_t* __restrict__ sz, FastDiv group_of_tile, int64_t n, int64_t k,
                 const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo,
                 const void* prefetch, int64_t prefetch_bytes) {
  constexpr int kGroups = 4 / kKPG;  // scale groups per 64-column tile
  extern __shared__ float red[];     // [kW][4][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t rt = blockIdx.x;  // the block's row tile
  // 32-bit offsets (W4GemmSupported bounds them); each base one wide multiply-add.
  const uint32_t chunks = static_cast<uint32_t>(k / kW4TileCols);
  const uint32_t per_warp = (chunks + kW - 1) / kW;
  const uint32_t c_begin = min(warp * per_warp, chunks);
  const uint32_t c_end = min(c_begin + per_warp, chunks);
  const uint32_t n_bytes = static_cast<uint32_t>(n) * 4;  // one scale group's row of words
  const uint4* wb = w + rt * chunks * 32 + lane;
  const char* szb = reinterpret_cast<const char*>(sz + rt * kW4TileRows + g);
  const T* xt = x + (static_cast<uint32_t>(min(g, m - 1)) * static_cast<uint32_t>(ldx) + 4 * t);
  constexpr bool kFold = std::is_same_v<T, __nv_bfloat16>;
  const uint32_t ones[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  uint4 wv[kU];
  uint32_t szv[kU][kGroups][2];
  // Every load of a step is issued before any is used. kCheck (the run's last, partial step): a
  // tile past the run reads the run's first tile again (in bounds) with scale 0, adding nothing.
  auto load = [&](uint32_t c0, auto check) {
    constexpr bool kCheck = decltype(check)::value;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const bool valid = !kCheck || c0 + u < c_end;
      const uint32_t cs = valid ? c0 + u : c_begin;
      wv[u] = __ldcs(kCheck ? wb + cs * 32 : wb + c0 * 32 + u * 32);
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) {
        // Groups of 16 / 32 columns: several per tile, no division.
        const uint32_t grp = kKPG == 4 ? group_of_tile.Div(cs) : cs * kGroups + gi;
        const auto* p = reinterpret_cast<const uint32_t*>(szb + uint64_t{grp} * n_bytes);
        const uint32_t lo = __ldg(p), hi = __ldg(p + 8);
        szv[u][gi][0] = valid ? lo : 0u;
        szv[u][gi][1] = valid ? hi : 0u;
      }
    }
  };
  auto compute = [&](uint32_t c0, auto check) {
    constexpr bool kCheck = decltype(check)::value;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint32_t c = !kCheck || c0 + u < c_end ? c0 + u : c_begin;
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) {
        float scale[2];
        uint32_t a[kKPG][4];
        DequantGroup<kKPG, T, kFold>(wv[u], gi, szv[u][gi][0], szv[u][gi][1], scale, a);
        const float zc[2] = {FoldedZero(szv[u][gi][0]), FoldedZero(szv[u][gi][1])};
        const T* xr = kCheck ? xt + (c * kW4TileCols + gi * kKPG * 16)
                             : xt + (c0 * kW4TileCols + (u * 4 + gi * kKPG) * 16);
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int jj = 0; jj < kKPG; ++jj) {
          const uint2 b = __ldg(reinterpret_cast<const uint2*>(xr + jj * 16));
          Mma<T>(part, a[jj], b.x, b.y);
          if constexpr (kFold) Mma<T>(sx, ones, b.x, b.y);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = kFold ? fmaf(-zc[i / 2], sx[i], part[i]) : part[i];
          acc[i] = fmaf(p, scale[i / 2], acc[i]);
        }
      }
    }
  };
  using Full = std::false_type;
  using Partial = std::true_type;
  // The first tiles go out before PdlWait (launch.cuh): weights are no earlier kernel's output.
  const bool first_full = c_begin + kU <= c_end;
  if (first_full) {
    load(c_begin, Full{});
  } else if (c_begin < c_end) {
    load(c_begin, Partial{});
  }
  PdlWait();
  PdlLaunchDependents();
  uint32_t c0 = c_begin;
  if (first_full) {
    for (;;) {
      compute(c0, Full{});
      c0 += kU;
      if (c0 + kU > c_end) break;
      load(c0, Full{});
    }
    if (c0 < c_end) load(c0, Partial{});
  }
  if (c0 < c_end) compute(c0, Partial{});

  dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
#pragma unroll
  for (int i = 0; i < 4; ++i) red[(warp * 4 + i) * 32 + lane] = acc[i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < 4 * 32; idx += kW * 32) {
    float v = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kW; ++wi) v += red[wi * 4 * 32 + idx];
    const int i = idx / 32, l = idx % 32;
    const int token = 2 * (l % 4) + (i & 1);
    const uint32_t row = rt * kW4TileRows + l / 4 + (i >> 1) * 8;
    if (token < m) {
      if (bias != nullptr) v += ToFloat(bias[row]);
      Store(v, out + token * ldo + row);
    }
  }
}

template <int kKPG, int kU, int kW, typename T>
cudaError_t LaunchW4Gemv(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  return LaunchRows(a, W4GemvKernel<kKPG, kU, kW, T, float>, W4GemvKernel<kKPG, kU, kW, T, T>,
                    dim3(static_cast<unsigned>(a.n / kW4TileRows)), kW * 32,
                    size_t{kW} * 4 * 32 * sizeof(float), stream);
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---- One row, streamed (W4GemvStreamKernel) ----------------------------------------------------
// W4GemvKernel at m = 1 loads kU tiles, waits for them, dequantizes and multiplies, and only then
// issues the next loads, so a lane has nothing in flight while it computes, and its block's
// k-split run is a few tiles long (8 for k = 4,096): most of a block's life is ramp-up and
// tail. Here, as GemvW8PersistentKernel does for the FP8 rows (quant.cu):
// * at most as many blocks as the SMs hold at once; block b takes row tiles b, b + grid, ...;
//   warp w always takes the same run of column tiles, so a lane's tiles form one
//   sequence across the block's row tiles;
// * each lane keeps kSlots 16-byte code words (and their scale words) in flight all the way: a
//   slot is refilled with the tile kSlots further on as soon as it is read, the next row tile's
//   first tiles included (they overlap this one's reduction);
// * each warp stages the x of its own column tiles once in shared memory, in the order the lanes
//   read it (two 16-byte reads a tile; copied raw with cp.async, then permuted in place), and for
//   bf16 x's sum over each tile, which replaces the ones-mma that W4GemvKernel runs per k-step to
//   fold the zero point out;
// * a k-step's codes are dequantized next to its mma, and the tile's scale applied once.
// Only the output's first column is a token: every lane's B columns hold the same x, so every
// lane's D elements 0 and 2 (its part[0] / part[2]) are row g's and row g + 8's sums.
// H200 (docs/benchmarks.md, session 39): the 8B's four layers 47.7 against 55.5 us, the W4A16
// batch-1 decode step 2.169 -> 1.947 ms. Staging all of x per block behind a block barrier, with
// the tile sums one serial warp reduction after another, made o / down slower (7.9 / 18.0 us
// against 6.4 / 13.9); shared-memory stages filled by bulk copies (cp.async.bulk, 3 or 4 rounds
// a warp in flight) instead of the register slots were slower too (58.3 / 56.8 us). Session 41:
// an even share of all items' rounds a block (row tiles split over blocks, partial sums handed
// on through flags: down on 396 blocks walking 5 rounds instead of 256 walking 7) made down
// 12.66 -> 16.91 us and the step 1.906 -> 1.975 ms (patch in bench/results/2026-12-03-s41-h200/).
// REQUIRES: m = 1; groups of 1, 2 or a multiple of 4 column tiles (kTpg below); k a multiple of
// kWarps * kSlots * 64 (a warp's run a multiple of kSlots).
constexpr int kStreamSlots = 4;
// 78-80 registers, 3 blocks an SM. Held to 64 (4 blocks) the 8B's four layers took 50.8 against
// 47.7 us (gemv_bench --w4, H200, session 39): more warps, but more instructions each.
constexpr int kStreamMinBlocks = 3;
// x and its tile sums in shared memory: at most 66 KB a block (three blocks an SM still fit).
constexpr int64_t kStreamMaxK = 32768;

// What the streamed row does with a row tile's 16 sums (W4GemmArgsT): store them (kPlain), or
// run the layer after it on them, whose pairs of values the runner's row order put in one tile:
// SiluMul of gate rows 0-7 and up rows 8-15 (kSiluMul), or RoPE of rows 2i and 2i + 1 and the
// KV-cache write (kRope).
enum class StreamEpi { kPlain, kSiluMul, kRope };

// kTpg: column tiles per scale group, 1 or 2 (groups of 64 / 128), or 4 for groups of any
// multiple of 4 tiles (a round's kSlots = 4 tiles share one group: kSlots, c_begin and the run
// offsets are multiples of 4). kNormVecs > 0: x is the residual norm's output (W4NormArgsT),
// made by the whole block in the prologue (k = 2,048 kNormVecs; norm_row.cuh) instead of read:
// one more block barrier, one kernel fewer in the layer. kEpi: the epilogue; C: kRope's cache
// element type.
template <int kSlots, int kTpg, int kNormVecs, StreamEpi kEpi, typename T, typename Out,
          typename C = T, int kW = kWarps>
__global__ void __launch_bounds__(kW * 32, kSlots == kStreamSlots ? kStreamMinBlocks : 2)
    W4GemvStreamKernel(const T* __restrict__ x, const uint4* __restrict__ w,
                       const uint32_t* __restrict__ sz, FastDiv group_of_tile, int64_t n, int64_t k,
                       const T* __restrict__ bias, Out* __restrict__ out, const void* prefetch,
                       int64_t prefetch_bytes, uint32_t items, W4NormArgsT<T> norm,
                       RopeKvArgsT<T, C> rope) {
  static_assert(kNormVecs == 0 || kW * 32 == norm_internal::kNormRowThreads);
  static_assert(kSlots % kTpg == 0);
  static_assert(kEpi == StreamEpi::kPlain || std::is_same_v<Out, T>);
  constexpr int kGroups = kSlots / kTpg;  // scale groups a round
  constexpr bool kFold = std::is_same_v<T, __nv_bfloat16>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t chunks = static_cast<uint32_t>(k / kW4TileCols);  // column tiles
  const uint32_t run = chunks / kW;                                // a warp's tiles an item
  const uint32_t c_begin = warp * run;
  // x as the lanes read it: tile c, lane column t, k-steps 0-3 (8 bytes each) -> [c][t][4].
  auto* xs = reinterpret_cast<uint2*>(smem);
  auto* xsum = reinterpret_cast<float*>(smem + k * sizeof(T));  // [chunks]
  auto* red = xsum + chunks;                                    // [2][kW][16]
  float* norm_partial = red + 2 * kW * 16;                      // [kW] (kNormVecs > 0)
  const uint32_t n_words = static_cast<uint32_t>(n);            // one scale group's row of words
  const uint32_t* szl = sz + g;
  const uint4* wb = w + c_begin * 32 + lane;
  const uint32_t item_words = chunks * 32;  // 16-byte words of one row tile

  uint4 wv[kSlots];
  uint32_t szv[kGroups][2];
  // A round's tiles: run offsets r .. r + kSlots - 1 of row tile `item`. Its code words are one
  // base plus immediate offsets; its scale words (rows g and g + 8) one base per scale group.
  auto round_codes = [&](uint32_t item, uint32_t r) { return wb + (item * item_words + r * 32); };
  auto round_scales = [&](uint32_t item, uint32_t r) {
    const uint32_t c0 = c_begin + r;
    const uint32_t grp = kTpg == 4 ? group_of_tile.Div(c0) : c0 / kTpg;
    return szl + (uint64_t{grp} * n_words + item * kW4TileRows);
  };
  auto load = [&](int u, const uint4* codes, const uint32_t* scales) {
    wv[u] = __ldcs(codes + u * 32);
    if (u % kTpg == 0) {
      const uint32_t* p = scales + (u / kTpg) * uint64_t{n_words};
      szv[u / kTpg][0] = __ldg(p);
      szv[u / kTpg][1] = __ldg(p + 8);
    }
  };
  uint32_t item = blockIdx.x;
  {
    const uint4* codes = round_codes(item, 0);
    const uint32_t* scales = round_scales(item, 0);
#pragma unroll
    for (int u = 0; u < kSlots; ++u) load(u, codes, scales);  // no earlier kernel's output
  }
  PdlWait();
  PdlLaunchDependents();
  // Piece p of column tile c of x (16 bytes: elements 64 c + 8 p .. + 7) into shared memory as
  // the lanes read it: k-step p / 2, lane columns 2 (p % 2) and 2 (p % 2) + 1; and for bf16 each
  // tile's sum, over the 8 adjacent lanes holding its pieces (every lane of the warp calls this
  // together).
  auto stage = [&](uint32_t c, uint32_t p, const uint4 v) {
    const uint32_t j = p / 2, t0 = 2 * (p % 2);
    xs[(c * 4 + t0) * 4 + j] = make_uint2(v.x, v.y);
    xs[(c * 4 + t0 + 1) * 4 + j] = make_uint2(v.z, v.w);
    if constexpr (kFold) {
      const auto* pairs = reinterpret_cast<const dtype_internal::Pair<T>*>(&v);
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = dtype_internal::PairToFloat2<T>(pairs[q]);
        s += f.x + f.y;
      }
      for (int offset = 1; offset < 8; offset <<= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
      if (p == 0) xsum[c] = s;
    }
  };
  if constexpr (kNormVecs > 0) {
    // The block makes all of x, thread t its pieces t + 256 j, as the norm kernel would.
    dtype_internal::Vec8<T> y[kNormVecs];
    norm_internal::ResidualNormRow<kNormVecs>(norm.delta, norm.residual, norm.init,
                                              blockIdx.x == 0 ? norm.residual_out : nullptr,
                                              norm.weight, norm.eps, norm_partial, y);
#pragma unroll
    for (int j = 0; j < kNormVecs; ++j) {
      const uint32_t i = threadIdx.x + j * kW * 32;
      stage(i / 8, i % 8, *reinterpret_cast<const uint4*>(&y[j]));
    }
    __syncthreads();
  } else {
    // The warp stages its own tiles' x (no block barrier). Every 16-byte piece is first copied
    // raw to its tile's place in xs, all at once (cp.async, no registers): one round trip to L2
    // instead of one for every 32 pieces, which made 7 in a row before down's first tile at
    // k = 14,336 (H200, session 41: down 12.66 -> 12.46 us, gemv_bench --w4). Then the pieces are
    // permuted in place 4 tiles (32 pieces) at a time: each lane reads its piece, the warp syncs,
    // each writes it where the lanes read it. run * 8 is a multiple of 32.
    const uint4* x16 = reinterpret_cast<const uint4*>(x) + c_begin * 8;
    uint4* raw = reinterpret_cast<uint4*>(xs) + c_begin * 8;  // tile c: xs[16 c .. 16 c + 15]
#pragma unroll 1
    for (uint32_t i = lane; i < run * 8; i += 32) CpAsync16(SmemAddr(raw + i), x16 + i);
    CpAsyncCommit();
    CpAsyncWait<0>();
    __syncwarp();
#pragma unroll 1
    for (uint32_t i = lane; i < run * 8; i += 32) {
      const uint4 v = raw[i];
      __syncwarp();
      stage(c_begin + i / 8, i % 8, v);
    }
    __syncwarp();
  }

  for (int parity = 0; item < items; item += gridDim.x, parity ^= 1) {
    float acc[2] = {0.0f, 0.0f};  // rows g and g + 8
    for (uint32_t r = 0; r < run; r += kSlots) {
      // The slots refill from this run until its last round, then from the next row tile's.
      const bool last = r + kSlots == run;
      const uint32_t next_item = last ? item + gridDim.x : item;
      const uint32_t next_r = last ? 0 : r + kSlots;
      const bool refill = next_item < items;
      const uint4* codes = round_codes(next_item, next_r);
      const uint32_t* scales = round_scales(next_item, next_r);
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int u = 0; u < kSlots; ++u) {
        const uint4 cur = wv[u];
        if (u % kTpg == 0) lo = szv[u / kTpg][0], hi = szv[u / kTpg][1];
        if (refill) load(u, codes, scales);
        const uint32_t c = c_begin + r + u;
        // DequantGroup one k-step at a time, next to its mma (fewer registers live).
        float scale[2];
        uint32_t sub[2];
        DecodeSz(lo, scale[0], sub[0]);
        DecodeSz(hi, scale[1], sub[1]);
        const uint32_t* words = reinterpret_cast<const uint32_t*>(&cur);
        const uint2* xl = xs + (c * 4 + t) * 4;
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[4];
          DequantStep<T, kFold>(words[j], sub, a);
          const uint2 b = xl[j];
          Mma<T>(part, a, b.x, b.y);
        }
        if constexpr (kFold) {
          const float sx = xsum[c];
          acc[0] = fmaf(fmaf(-FoldedZero(lo), sx, part[0]), scale[0], acc[0]);
          acc[1] = fmaf(fmaf(-FoldedZero(hi), sx, part[2]), scale[1], acc[1]);
        } else {
          acc[0] = fmaf(part[0], scale[0], acc[0]);
          acc[1] = fmaf(part[2], scale[1], acc[1]);
        }
      }
    }
    if (item + gridDim.x >= items) dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
    // The warps' partial sums of rows g and g + 8 (lanes t = 0 hold them as every lane does).
    float* rp = red + parity * kW * 16;
    if (t == 0) {
      rp[warp * 16 + g] = acc[0];
      rp[warp * 16 + g + 8] = acc[1];
    }
    __syncthreads();
    if (threadIdx.x < 16) {
      float v = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kW; ++wi) v += rp[wi * 16 + threadIdx.x];
      const uint32_t row = item * kW4TileRows + threadIdx.x;
      if (bias != nullptr) v += ToFloat(bias[row]);
      if constexpr (kEpi == StreamEpi::kPlain) {
        Store(v, out + row);
      } else {
        // The T value the plain layer stores, and its pair's (threads 0-15 are lanes 0-15).
        const float mine = dtype_internal::RoundTo<T>(v);
        if constexpr (kEpi == StreamEpi::kSiluMul) {
          // Rows 0-7: gate 8 item .. + 7; rows 8-15: up of the same (GateUpLayout::kRunsOf8).
          static_assert(2 * kGateUpRun == kW4TileRows);
          const float up = __shfl_down_sync(0xffffu, mine, kGateUpRun, 16);
          if (threadIdx.x < kGateUpRun) {
            out[item * kGateUpRun + threadIdx.x] =
                FromFloat<T>(dtype_internal::SiluTimesExact<T>(mine, up));
          }
        } else {
          // Rows 2i and 2i + 1 of a head: RoPE's pair i (interleaved); k and v heads also stay
          // in the row as computed, as kernels::RopeStoreKv leaves them.
          const float second = __shfl_down_sync(0xffffu, mine, 1, 16);
          const int head = static_cast<int>(row) / rope.head_dim;
          const int i0 = static_cast<int>(row) % rope.head_dim;
          if (head >= rope.num_heads) out[row] = FromFloat<T>(mine);
          if (threadIdx.x % 2 == 0) {
            const int64_t slot = rope.slot_mapping != nullptr ? rope.slot_mapping[0] : -1;
            rope_internal::RopeStorePair(rope, out, head, i0 / 2, i0, i0 + 1,
                                         static_cast<float>(rope.positions[0]), slot, mine, second);
          }
        }
      }
    }
  }
}

// Whether W4GemvStreamKernel takes a launch by default (or when a.kernel asks for it).
template <typename T>
bool StreamSupported(const W4GemmArgsT<T>& a) {
  const int64_t tiles_per_group = a.group_size / kW4TileCols;
  return a.m == 1 && a.group_size % kW4TileCols == 0 &&
         (tiles_per_group <= 2 || tiles_per_group % kStreamSlots == 0) &&
         a.k % (kWarps * kStreamSlots * kW4TileCols) == 0 && a.k <= kStreamMaxK &&
         (a.norm.weight != nullptr || Aligned(a.x, 16));
}

// The wide form (w4a16.h, W4GemmArgsT::kernel 4): kWideSlots = 8 code words a lane in flight
// instead of 4, at 123-128 registers, so 2 blocks an SM instead of 3. It pays where the weight
// has at most 2 row tiles an SM (every block then holds one row tile, 2 an SM, either way) and
// rows long enough for 2 rounds of 8 a warp: down of an 8B (256 row tiles of k = 14,336), which
// streamed its 114 KiB a block 16 KiB a round trip at a time (H200, session 43: 13.8 -> 10.8 us
// exposed a layer, the W4A16 batch-1 step 1.776 -> 1.699 ms). Not o (k = 4,096: one round;
// session 40 measured a one-round wide o slower) nor anything with the norm in its prologue.
constexpr int kWideSlots = 8;

// Warps a block of the wide form: 8, or 7 where 8 do not cut the row's column tiles into whole
// rounds (k = 14,336: 224 tiles = 7 warps x 4 rounds of 8); 0 where neither gives 2 rounds.
template <typename T>
int WideWarps(const W4GemmArgsT<T>& a) {
  const int64_t chunks = a.k / kW4TileCols;
  for (int w : {8, 7}) {
    if (chunks % (int64_t{w} * kWideSlots) == 0 && chunks / w >= 2 * kWideSlots) return w;
  }
  return 0;
}

// Whether the wide form takes a (a.kernel 4), or takes it by default (a.kernel 0: also groups of
// 128 and at most 2 row tiles an SM).
template <typename T>
bool WideSupported(const W4GemmArgsT<T>& a) {
  const bool shape = StreamSupported(a) && a.norm.weight == nullptr && !a.silu_mul &&
                     a.rope == nullptr && a.rope_fp8 == nullptr &&
                     (a.group_size == kW4TileCols || a.group_size == 2 * kW4TileCols) &&
                     WideWarps(a) > 0;
  // By default groups of 128 only: with groups of 64 the bf16 instance spills (128 registers,
  // 48 bytes), and neither was measured.
  return shape && (a.kernel == 4 || (a.group_size == 2 * kW4TileCols &&
                                     a.n / kW4TileRows <= 2 * int64_t{CurrentDeviceSmCount()}));
}

// The norm in the prologue (kNormVecs = k / 2,048: 1, 2 or 4): groups of 64 or 128 columns only
// (fewer kernel instances), T out.
template <typename T>
bool NormSupported(const W4GemmArgsT<T>& a) {
  const W4NormArgsT<T>& nm = a.norm;
  const int64_t vecs = a.k / norm_internal::kNormRowDimPerVec;
  return a.kernel != 1 && a.kernel != 2 && a.warps == 0 && a.row_tiles == 0 && StreamSupported(a) &&
         (a.group_size == kW4TileCols || a.group_size == 2 * kW4TileCols) &&
         a.k % norm_internal::kNormRowDimPerVec == 0 && (vecs == 1 || vecs == 2 || vecs == 4) &&
         !a.out_f32 && nm.weight != nullptr && Aligned(nm.weight, 16) && nm.delta != nullptr &&
         Aligned(nm.delta, 16) &&
         (nm.init || (nm.residual != nullptr && Aligned(nm.residual, 16))) &&
         nm.residual_out != nullptr && Aligned(nm.residual_out, 16) &&
         nm.residual_out != nm.residual;
}

// The epilogue a launch asks for (W4GemmArgsT::silu_mul, rope, rope_fp8).
template <typename T>
StreamEpi EpiOf(const W4GemmArgsT<T>& a) {
  return a.silu_mul                                   ? StreamEpi::kSiluMul
         : a.rope != nullptr || a.rope_fp8 != nullptr ? StreamEpi::kRope
                                                      : StreamEpi::kPlain;
}

// Whether a's epilogue is one the streamed row with its norm takes: at most one, with its
// shape (w4a16.h, W4GemmArgsT::silu_mul and rope).
template <typename T>
bool EpiSupported(const W4GemmArgsT<T>& a) {
  const int asked = int{a.silu_mul} + int{a.rope != nullptr} + int{a.rope_fp8 != nullptr};
  if (asked == 0) return true;
  if (asked > 1 || a.norm.weight == nullptr || a.out_f32 || a.m != 1) return false;
  if (a.silu_mul) return true;  // n is a multiple of 16: whole runs of gate and up
  auto rope_ok = [&](const auto& r) {
    return r.qkv == a.out && r.num_tokens == 1 && r.positions != nullptr && r.inv_freq != nullptr &&
           r.interleaved && r.head_dim > 0 && r.head_dim % kW4TileRows == 0 && r.num_heads > 0 &&
           r.num_kv_heads > 0 && int64_t{r.num_heads + 2 * r.num_kv_heads} * r.head_dim == a.n &&
           r.q_codes == nullptr && r.qkv_scales.row == nullptr && r.qkv_scales.col == nullptr &&
           r.block_size > 0 &&
           (r.slot_mapping == nullptr || (r.k_cache != nullptr && r.v_cache != nullptr)) &&
           rope_internal::CacheScalesOk(r);
  };
  return a.rope != nullptr ? rope_ok(*a.rope) : rope_ok(*a.rope_fp8);
}

// kSlots code words a lane in flight, kW warps a block: kStreamSlots and kWarps, or the wide
// form's kWideSlots and WideWarps.
template <int kTpg, int kNormVecs, StreamEpi kEpi = StreamEpi::kPlain, int kSlots = kStreamSlots,
          int kW = kWarps, typename T, typename Out, typename C = T>
cudaError_t LaunchW4Stream(const W4GemmArgsT<T>& a, Out* out, cudaStream_t stream,
                           const RopeKvArgsT<T, C>& rope = {}) {
  constexpr auto kernel = W4GemvStreamKernel<kSlots, kTpg, kNormVecs, kEpi, T, Out, C, kW>;
  const int64_t chunks = a.k / kW4TileCols;
  const size_t smem = a.k * sizeof(T) + chunks * sizeof(float) + 2 * kW * 16 * sizeof(float) +
                      (kNormVecs > 0 ? kW * sizeof(float) : 0);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t items = a.n / kW4TileRows;
  const FastDiv group_of_tile = FastDiv::For(static_cast<uint32_t>(a.group_size / kW4TileCols));
  return LaunchChained(kernel, ResidentGrid<kernel, kW * 32>(items, smem), kW * 32, smem, stream,
                       a.x, reinterpret_cast<const uint4*>(a.w), a.sz, group_of_tile, a.n, a.k,
                       a.bias, out, a.prefetch, a.prefetch_bytes, static_cast<uint32_t>(items),
                       a.norm, rope);
}

// The wide form of the plain streamed row (WideSupported), with kW warps (WideWarps).
template <int kTpg, int kW, typename T, typename Out>
cudaError_t LaunchW4StreamWide(const W4GemmArgsT<T>& a, Out* out, cudaStream_t stream) {
  return LaunchW4Stream<kTpg, 0, StreamEpi::kPlain, kWideSlots, kW>(a, out, stream);
}

// The streamed row with its norm in the prologue (kNormVecs) and a's epilogue.
template <int kTpg, int kNormVecs, typename T>
cudaError_t LaunchW4StreamNorm(const W4GemmArgsT<T>& a, T* out, cudaStream_t stream) {
  switch (EpiOf(a)) {
    case StreamEpi::kSiluMul:
      return LaunchW4Stream<kTpg, kNormVecs, StreamEpi::kSiluMul>(a, out, stream);
    case StreamEpi::kRope:
      return a.rope != nullptr
                 ? LaunchW4Stream<kTpg, kNormVecs, StreamEpi::kRope>(a, out, stream, *a.rope)
                 : LaunchW4Stream<kTpg, kNormVecs, StreamEpi::kRope>(a, out, stream, *a.rope_fp8);
    default:
      return LaunchW4Stream<kTpg, kNormVecs>(a, out, stream);
  }
}

template <typename T, typename Out>
cudaError_t DispatchW4Stream(const W4GemmArgsT<T>& a, Out* out, cudaStream_t stream) {
  if (a.kernel == 4 || (a.kernel == 0 && WideSupported(a))) {
    const bool g64 = a.group_size == kW4TileCols;
    if (WideWarps(a) == 8) {
      return g64 ? LaunchW4StreamWide<1, 8>(a, out, stream)
                 : LaunchW4StreamWide<2, 8>(a, out, stream);
    }
    return g64 ? LaunchW4StreamWide<1, 7>(a, out, stream)
               : LaunchW4StreamWide<2, 7>(a, out, stream);
  }
  static_assert(kStreamSlots == 4);
  if constexpr (std::is_same_v<Out, T>) {
    if (a.norm.weight != nullptr) {  // NormSupported (Supported checked it)
      const bool g64 = a.group_size == kW4TileCols;
      switch (a.k / norm_internal::kNormRowDimPerVec) {
        case 1:
          return g64 ? LaunchW4StreamNorm<1, 1>(a, out, stream)
                     : LaunchW4StreamNorm<2, 1>(a, out, stream);
        case 2:
          return g64 ? LaunchW4StreamNorm<1, 2>(a, out, stream)
                     : LaunchW4StreamNorm<2, 2>(a, out, stream);
        default:
          return g64 ? LaunchW4StreamNorm<1, 4>(a, out, stream)
                     : LaunchW4StreamNorm<2, 4>(a, out, stream);
      }
    }
  }
  if (a.group_size == kW4TileCols) return LaunchW4Stream<1, 0>(a, out, stream);
  if (a.group_size == 2 * kW4TileCols) return LaunchW4Stream<2, 0>(a, out, stream);
  return LaunchW4Stream<4, 0>(a, out, stream);
}

// ---- Block tiles (W4GemmTileKernel) -------------------------------------------------------------
// W4GemmKernel gives a block 16 or 32 weight rows and lets its warps split k, so every block reads
// all of x: 4 m / 32 times the weight's own bytes from L2 (8x at m = 64), through 8-byte loads
// that each feed one or two mmas, and each warp's mmas of a token tile form a dependent chain
// (a warp issues in order). Measured (gemv_bench --w4, H100): from 17 rows this kernel is
// faster, 1.3-2x at 32-64 rows; up to 16 rows W4GemmKernel stays faster. Here a block owns
// kTileRowTiles row tiles (256 rows), two per warp; x's 64-column tile is staged once per block in
// shared memory and read by all 8 warps, so x costs m / 64 of the weight's bytes. Codes, scale
// words and x go through one cp.async ring of kTileStages stages. A weight of few rows (o and down
// of an 8B Llama: 16 blocks) would leave most SMs idle, so blocks also split k (split-K, grid.y):
// each writes its fp32 partial sums to a scratch, and the last block of a row range to finish (an
// atomic counter per range, reset by that block for the next launch) adds them in split order
// (deterministic: the same bits whichever block finishes last), adds the bias, and stores through
// shared memory (a warp writes 32 adjacent outputs of a token at once). The per-group arithmetic is
// W4GemmKernel's.
constexpr int kTileWarps = 8;
constexpr int kTileRB = 2;                                    // row tiles per warp
constexpr int kTileRowTiles = kTileWarps * kTileRB;           // per block
constexpr int kXStride = static_cast<int>(kW4TileCols) + 16;  // elements: rows 8 banks apart
static_assert(kTileRowTiles * kW4TileRows == kW4BlockTileRows);

// A lane holds kTT x 2 x 4 partial sums of the current scale group in registers as well as the
// totals (the mmas of one k-step must be independent: a warp issues in order, and each mma's
// result feeds the next k-step's). Up to 32 rows (kTT 4) that fits 128 registers and two blocks
// share an SM (measured faster end to end at 25-32 rows than one, though slower per layer
// alone); beyond, one block per SM with a deeper ring.
template <int kTT, int kKPG>
struct TileLayout {
  static constexpr int kBlocksPerSm = kTT <= 4 ? 2 : 1;
  static constexpr int kTileStages = kTT <= 4 ? 4 : 6;
  static constexpr int kGroups = 4 / kKPG;
  static constexpr int kWBytes = kTileRowTiles * 32 * 16;
  static constexpr int kXBytes = kTT * 8 * kXStride * 2;
  static constexpr int kSzBytes = kGroups * kTileRowTiles * static_cast<int>(kW4TileRows) * 4;
  static constexpr int kStageBytes = kWBytes + kXBytes + kSzBytes;
  // The output staging after the ring: per warp, a float per (token, row) of its 32 rows.
  static constexpr int kOutStride = kTileRB * static_cast<int>(kW4TileRows) + 1;
  static constexpr int kOutBytes = kTileWarps * kTT * 8 * kOutStride * 4;
  static constexpr int kBytes = std::max(kTileStages * kStageBytes, kOutBytes);
  static constexpr int kAcc = kTileRB * kTT * 4;  // accumulators per thread
};

template <int kTT, int kKPG, typename T, typename Out>
__global__ void __launch_bounds__(kTileWarps * 32, (TileLayout<kTT, kKPG>::kBlocksPerSm))
    W4GemmTileKernel(const T* __restrict__ x, int64_t ldx, int m, const uint4* __restrict__ w,
                     const uint32_t* __restrict__ sz, FastDiv group_of_tile, int64_t n, int64_t k,
                     const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo,
                     float* __restrict__ partials, uint32_t* __restrict__ counters,
                     const void* prefetch, int64_t prefetch_bytes) {
  using L = TileLayout<kTT, kKPG>;
  constexpr int kGroups = L::kGroups, kTileStages = L::kTileStages;
  constexpr int kThreads = kTileWarps * 32;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ bool last_split;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // 32-bit offsets as in W4GemmKernel (W4GemmSupported bounds them).
  const uint32_t chunks = static_cast<uint32_t>(k / kW4TileCols);
  const uint32_t n32 = static_cast<uint32_t>(n), ldx32 = static_cast<uint32_t>(ldx);
  const uint32_t last_tile = n32 / kW4TileRows - 1;
  const uint32_t rt0 = blockIdx.x * kTileRowTiles;
  const uint32_t splits = gridDim.y, split = blockIdx.y;
  const uint32_t c_begin = static_cast<uint32_t>(uint64_t{split} * chunks / splits);
  const int steps =
      static_cast<int>(static_cast<uint32_t>(uint64_t{split + 1} * chunks / splits) - c_begin);

  // Each thread's copies of a stage, offsets fixed for the launch (a chunk adds its column
  // stride): two 16-byte pieces of codes, at most one of scale words, kXCopies of x. Computed
  // per chunk, the addresses took a third of the loop's instructions (cuobjdump, 64 rows).
  constexpr int kWCopies = kTileRowTiles * 32 / kThreads;
  constexpr int kSzCopies = kGroups * kTileRowTiles * 4;
  constexpr int kXPieces = kTT * 8 * 8;
  constexpr int kXCopies = (kXPieces + kThreads - 1) / kThreads;
  static_assert(kWCopies * kThreads == kTileRowTiles * 32 && kSzCopies <= kThreads);
  const uint32_t smem0 = SmemAddr(smem);
  // Row tiles past n copy the last tile again; their outputs are never stored.
  uint32_t w_off[kWCopies];
#pragma unroll
  for (int j = 0; j < kWCopies; ++j) {
    const int i = tid + j * kThreads;
    w_off[j] = min(rt0 + i / 32, last_tile) * chunks * 32 + i % 32;
  }
  // Scale words of the block's 256 rows, 4 rows per copy, group-major.
  const int sz_q = tid % (kTileRowTiles * 4);
  const uint32_t sz_off = min(rt0 + sz_q / 4, last_tile) * kW4TileRows + (sz_q % 4) * 4 +
                          (kKPG == 4 ? 0u : tid / (kTileRowTiles * 4) * n32);
  // Token rows past m copy row m - 1 again: each output column of the mma depends on its own
  // token only, and those columns are never stored.
  uint32_t x_off[kXCopies], x_dst[kXCopies];
#pragma unroll
  for (int j = 0; j < kXCopies; ++j) {
    const int i = tid + j * kThreads, row = i / 8, piece = i % 8;
    x_off[j] = static_cast<uint32_t>(min(row, m - 1)) * ldx32 + piece * 8;
    x_dst[j] = L::kWBytes + (row * kXStride + piece * 8) * 2;
  }
  auto load_weights = [&](int stage, uint32_t c) {
    const uint32_t base = smem0 + stage * L::kStageBytes;
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
      CpAsync16(base + (tid + j * kThreads) * 16, w + (w_off[j] + c * 32));
    }
    if (kSzCopies == kThreads || tid < kSzCopies) {
      const uint32_t grp = kKPG == 4 ? group_of_tile.Div(c) : c * kGroups;
      CpAsync16(base + L::kWBytes + L::kXBytes + tid * 16, sz + (grp * n32 + sz_off));
    }
  };
  auto load_x = [&](int stage, uint32_t c) {
    const uint32_t base = smem0 + stage * L::kStageBytes;
#pragma unroll
    for (int j = 0; j < kXCopies; ++j) {
      if (kXPieces % kThreads == 0 || tid + j * kThreads < kXPieces) {
        CpAsync16(base + x_dst[j], x + (x_off[j] + c * kW4TileCols));
      }
    }
  };

  float acc[kTileRB][kTT][4] = {};
  // The mma sums of the current scale group, scaled into acc when the group ends: per group
  // within a column tile (group 16 / 32), or once per group across the tiles it spans
  // (group >= 128: one scaling per group, not per tile).
  float part[kTileRB][kTT][4] = {};

  // The weights of the first stages go out before PdlWait (no earlier kernel writes them); the
  // first commit group then holds them all, which only makes its wait a little longer.
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < steps) load_weights(s, c_begin + s);
  }
  PdlWait();
  PdlLaunchDependents();
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < steps) load_x(s, c_begin + s);
    CpAsyncCommit();
  }
  for (int i = 0; i < steps; ++i) {
    CpAsyncWait<kTileStages - 2>();
    __syncthreads();  // stage i landed for all; stage i - 1 is free to refill
    const uint32_t c = c_begin + i;
    // This tile's codes and scale words first: issued after the next stage's copies, these
    // reads waited on the copies' registers (ncu: the loop's most stalled instruction).
    const uint8_t* base = smem + (i % kTileStages) * L::kStageBytes;
    const T* xs = reinterpret_cast<const T*>(base + L::kWBytes) + g * kXStride + 4 * t;
    const uint32_t* szs = reinterpret_cast<const uint32_t*>(base + L::kWBytes + L::kXBytes) +
                          warp * kTileRB * kW4TileRows + g;
    uint4 wv[kTileRB];
    uint32_t szw[kTileRB][kGroups][2];
#pragma unroll
    for (int r = 0; r < kTileRB; ++r) {
      wv[r] = reinterpret_cast<const uint4*>(base)[(warp * kTileRB + r) * 32 + lane];
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) {
        const uint32_t* s = szs + gi * kTileRowTiles * kW4TileRows + r * kW4TileRows;
        szw[r][gi][0] = s[0];
        szw[r][gi][1] = s[8];
      }
    }
    const int next = i + kTileStages - 1;
    if (next < steps) {
      load_weights(next % kTileStages, c_begin + next);
      load_x(next % kTileStages, c_begin + next);
    }
    CpAsyncCommit();
    // Whether this tile ends its scale group (always where a group fits in a tile).
    const bool group_ends =
        kKPG < 4 || i == steps - 1 || group_of_tile.Div(c + 1) != group_of_tile.Div(c);
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) {
      float scale[kTileRB][2];
      uint32_t a[kTileRB][kKPG][4];
#pragma unroll
      for (int r = 0; r < kTileRB; ++r) {
        DequantGroup<kKPG, T>(wv[r], gi, szw[r][gi][0], szw[r][gi][1], scale[r], a[r]);
      }
      // k-step outermost: the kTT x kTileRB mmas of a step are independent.
#pragma unroll
      for (int jj = 0; jj < kKPG; ++jj) {
        uint2 b[kTT];
#pragma unroll
        for (int tt = 0; tt < kTT; ++tt) {
          b[tt] = *reinterpret_cast<const uint2*>(xs + tt * 8 * kXStride + (gi * kKPG + jj) * 16);
        }
#pragma unroll
        for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
          for (int r = 0; r < kTileRB; ++r) Mma<T>(part[r][tt], a[r][jj], b[tt].x, b[tt].y);
      }
      if (group_ends) {
#pragma unroll
        for (int r = 0; r < kTileRB; ++r)
#pragma unroll
          for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[r][tt][e] = fmaf(part[r][tt][e], scale[r][e / 2], acc[r][tt][e]);
              part[r][tt][e] = 0.0f;
            }
      }
    }
  }

  if (blockIdx.y == 0) dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
  if (splits > 1) {
    // Partial sums: thread-major per block, so both the writes and the last block's reads are
    // coalesced. The last block reads its own back too: its registers are then free to hold
    // kSplitBatch splits x kSumChunk values in flight (one L2 round trip per batch, not per
    // value).
    const size_t block_floats = size_t{L::kAcc} * kThreads;
    float* mine = partials + (size_t{split} * gridDim.x + blockIdx.x) * block_floats + tid;
#pragma unroll
    for (int r = 0; r < kTileRB; ++r)
#pragma unroll
      for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          __stcg(mine + ((r * kTT + tt) * 4 + i) * kThreads, acc[r][tt][i]);
    __threadfence();
    __syncthreads();
    if (tid == 0) last_split = atomicAdd(counters + blockIdx.x, 1u) == splits - 1;
    __syncthreads();
    if (!last_split) return;
    __threadfence();
    constexpr int kSumChunk = L::kAcc % 16 == 0 ? 16 : 8, kSplitBatch = 4;
    static_assert(L::kAcc % kSumChunk == 0);
    const float* column = partials + size_t{blockIdx.x} * block_floats + tid;
    const size_t split_floats = size_t{gridDim.x} * block_floats;
#pragma unroll
    for (int e0 = 0; e0 < L::kAcc; e0 += kSumChunk) {
      float sum[kSumChunk];
#pragma unroll
      for (int e = 0; e < kSumChunk; ++e) sum[e] = 0.0f;
      for (uint32_t s0 = 0; s0 < splits; s0 += kSplitBatch) {
        float v[kSplitBatch][kSumChunk];
#pragma unroll
        for (int u = 0; u < kSplitBatch; ++u) {
          const uint32_t s = min(s0 + u, splits - 1);
#pragma unroll
          for (int e = 0; e < kSumChunk; ++e) {
            v[u][e] = __ldcg(column + s * split_floats + (e0 + e) * kThreads);
          }
        }
        // In split order, whichever block is last: the same bits every launch.
#pragma unroll
        for (int u = 0; u < kSplitBatch; ++u) {
          if (s0 + u < splits) {
#pragma unroll
            for (int e = 0; e < kSumChunk; ++e) sum[e] += v[u][e];
          }
        }
      }
#pragma unroll
      for (int e = 0; e < kSumChunk; ++e) {
        const int f = e0 + e;  // acc's row-major index, as written above
        acc[f / (kTT * 4)][f / 4 % kTT][f % 4] = sum[e];
      }
    }
    if (tid == 0) counters[blockIdx.x] = 0;  // ready for the next launch
  }

  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the ring
  float* os = reinterpret_cast<float*>(smem) + warp * (kTT * 8 * L::kOutStride);
#pragma unroll
  for (int r = 0; r < kTileRB; ++r)
#pragma unroll
    for (int tt = 0; tt < kTT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int token = tt * 8 + 2 * t + (i & 1), row = r * kW4TileRows + g + (i >> 1) * 8;
        os[token * L::kOutStride + row] = acc[r][tt][i];
      }
  __syncwarp();
  const uint32_t row = (rt0 + warp * kTileRB) * kW4TileRows + lane;
  if (row >= n32) return;
  const float b = bias != nullptr ? ToFloat(bias[row]) : 0.0f;
  for (int token = 0; token < m; ++token) {
    float v = os[token * L::kOutStride + lane];
    if (bias != nullptr) v += b;
    Store(v, out + token * ldo + row);
  }
}

// Splits of k for the block-tile kernel: enough blocks to fill every SM once (kBlocksPerSm),
// each split at least 4 column tiles (256 columns), within the caller's scratch.
template <int kTT, int kKPG, typename T>
int TileSplits(const W4GemmArgsT<T>& a, int64_t blocks_n) {
  const int64_t chunks = a.k / kW4TileCols;
  int64_t s = a.splits > 0
                  ? a.splits
                  : TileLayout<kTT, kKPG>::kBlocksPerSm * CurrentDeviceSmCount() / blocks_n;
  s = std::min<int64_t>({s, chunks / 4, 65535});
  if (a.split_partials == nullptr || a.split_counters == nullptr ||
      blocks_n > a.split_counter_count) {
    return 1;
  }
  const int64_t per_split = blocks_n * TileLayout<kTT, kKPG>::kAcc * kTileWarps * 32 * 4;
  s = std::min<int64_t>(s, a.split_partial_bytes / per_split);
  return static_cast<int>(std::max<int64_t>(s, 1));
}

template <int kTT, int kKPG, typename T>
cudaError_t LaunchW4Tiles(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  using L = TileLayout<kTT, kKPG>;
  const int64_t blocks_n = (a.n / kW4TileRows + kTileRowTiles - 1) / kTileRowTiles;
  const int splits = TileSplits<kTT, kKPG>(a, blocks_n);
  const dim3 grid(static_cast<unsigned>(blocks_n), static_cast<unsigned>(splits));
  const auto* w = reinterpret_cast<const uint4*>(a.w);
  const FastDiv group_of_tile =
      FastDiv::For(static_cast<uint32_t>(std::max<int64_t>(a.group_size / 64, 1)));
  auto launch = [&](auto kernel, auto* out) {
    if (L::kBytes > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
      if (e != cudaSuccess) return e;
    }
    return LaunchChained(kernel, grid, kTileWarps * 32, L::kBytes, stream, a.x, a.ldx, a.m, w, a.sz,
                         group_of_tile, a.n, a.k, a.bias, out, a.ldo, a.split_partials,
                         a.split_counters, a.prefetch, a.prefetch_bytes);
  };
  if (a.out_f32) {
    return launch(W4GemmTileKernel<kTT, kKPG, T, float>, static_cast<float*>(a.out));
  }
  return launch(W4GemmTileKernel<kTT, kKPG, T, T>, static_cast<T*>(a.out));
}

template <int kKPG, typename T>
cudaError_t DispatchW4Tiles(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  if (a.m <= 16) return LaunchW4Tiles<2, kKPG>(a, stream);
  if (a.m <= 24) return LaunchW4Tiles<3, kKPG>(a, stream);
  if (a.m <= 32) return LaunchW4Tiles<4, kKPG>(a, stream);
  if (a.m <= 48) return LaunchW4Tiles<6, kKPG>(a, stream);
  return LaunchW4Tiles<8, kKPG>(a, stream);
}

// What the block-tile kernel adds to W4GemmSupported: 16-byte copies of x and of scale words.
template <typename T>
bool TilesSupported(const W4GemmArgsT<T>& a) {
  return a.ldx % 8 == 0 && Aligned(a.x, 16) && Aligned(a.sz, 16);
}

// Rows -> (token tiles, row tiles per block, tiles in flight per warp, warps per block); then
// the group size's kKPG. Two row tiles per block share each x fragment (halving x's re-reads
// from L1/L2) at the cost of registers: measured faster from 9 rows on, slower up to 8
// (gemv_bench --w4, H100). Up to 8 rows a weight of at most kW4WideMaxRowTiles row tiles runs
// 16-warp blocks. a.row_tiles / a.warps override the choice (benchmarks, tests).
template <int kKPG, typename T>
cudaError_t DispatchW4Rows(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  const bool pairs =
      a.n % (2 * kW4TileRows) == 0 && (a.row_tiles == 2 || (a.row_tiles == 0 && a.m > 8));
  if (a.m <= 8) {
    if constexpr (kKPG == 4) {
      const bool by_default = a.kernel == 0 && a.warps == 0 && a.row_tiles == 0;
      if (a.kernel == 3 || a.kernel == 4 || (by_default && StreamSupported(a))) {
        return a.out_f32 ? DispatchW4Stream(a, static_cast<float*>(a.out), stream)
                         : DispatchW4Stream(a, static_cast<T*>(a.out), stream);
      }
    }
    if (pairs) return LaunchW4<1, 2, kKPG, 2>(a, stream);
    const bool wide = a.warps == 16 || (a.warps == 0 && a.n / kW4TileRows <= kW4WideMaxRowTiles);
    return wide ? LaunchW4Gemv<kKPG, 2, kWideWarps>(a, stream)
                : LaunchW4Gemv<kKPG, 2, kWarps>(a, stream);
  }
  if (a.m <= 16) {
    return pairs ? LaunchW4<2, 2, kKPG, 2>(a, stream) : LaunchW4<2, 1, kKPG, 4>(a, stream);
  }
  if (a.m <= 32) {
    return pairs ? LaunchW4<4, 2, kKPG, 2>(a, stream) : LaunchW4<4, 1, kKPG, 2>(a, stream);
  }
  return pairs ? LaunchW4<8, 2, kKPG, 1>(a, stream) : LaunchW4<8, 1, kKPG, 2>(a, stream);
}

// The kernel a launch runs: a.kernel, or by default the block tiles from kW4TileMinRows rows
// where their alignment holds.
template <typename T>
bool UseTiles(const W4GemmArgsT<T>& a) {
  return a.kernel == 2 || (a.kernel == 0 && a.m >= kW4TileMinRows && TilesSupported(a));
}

template <typename T>
bool Supported(const W4GemmArgsT<T>& a) {
  // The kernels' 32-bit offsets: weight words, scale words, x elements.
  constexpr int64_t kU32 = int64_t{1} << 32;
  return W4ShapeSupported(a.n, a.k, a.group_size) && a.m >= 1 && a.m <= kW4GemmMaxRows &&
         a.ldx % 4 == 0 && Aligned(a.x, 8) && Aligned(a.w, 16) && a.sz != nullptr &&
         a.out != nullptr && a.n / kW4TileRows * (a.k / kW4TileCols) * 32 < kU32 &&
         a.k / a.group_size * a.n < kU32 && int64_t{a.m} * a.ldx < kU32 / 2 && a.kernel >= 0 &&
         a.kernel <= 4 && (a.kernel != 2 || TilesSupported(a)) &&
         (a.kernel != 3 || StreamSupported(a)) && (a.kernel != 4 || WideSupported(a)) &&
         a.splits >= 0 && (a.norm.weight == nullptr || NormSupported(a)) && EpiSupported(a);
}

template <typename T>
cudaError_t LaunchW4Gemm(const W4GemmArgsT<T>& a, cudaStream_t stream) {
  if (!Supported(a)) return cudaErrorInvalidValue;
  if (UseTiles(a)) {
    if (a.group_size == 16) return DispatchW4Tiles<1>(a, stream);
    if (a.group_size == 32) return DispatchW4Tiles<2>(a, stream);
    return DispatchW4Tiles<4>(a, stream);
  }
  if (a.group_size == 16) return DispatchW4Rows<1>(a, stream);
  if (a.group_size == 32) return DispatchW4Rows<2>(a, stream);
  return DispatchW4Rows<4>(a, stream);
}

template <typename T>
cudaError_t LaunchGather(const T* x, int64_t ldx, int64_t m, int64_t k, const int32_t* perm, T* out,
                         cudaStream_t stream) {
  if (m == 0 || k == 0) return cudaSuccess;
  if (m > 65535) return cudaErrorInvalidValue;  // grid.y
  constexpr int kBlock = 256;
  const dim3 grid(static_cast<unsigned>((k + kBlock - 1) / kBlock), static_cast<unsigned>(m));
  return LaunchChained(GatherKernel<T>, grid, kBlock, 0, stream, x, ldx, k, perm, out);
}

template <typename T>
cudaError_t LaunchDequantize(const uint8_t* tiled, const uint32_t* sz, int64_t n, int64_t k,
                             int64_t group_size, int64_t row0, int64_t rows, T* out,
                             cudaStream_t stream) {
  if (!W4ShapeSupported(n, k, group_size) || row0 < 0 || rows < 0 || row0 % kW4TileRows != 0 ||
      rows % kW4TileRows != 0 || row0 + rows > n || !Aligned(tiled, 16) || !Aligned(out, 8) ||
      sz == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const int64_t threads = rows / kW4TileRows * (k / kW4TileCols) * 32;
  constexpr int kBlock = 256;
  const int64_t blocks = (threads + kBlock - 1) / kBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  DequantizeKernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      reinterpret_cast<const uint4*>(tiled), sz, n, k, group_size, row0 / kW4TileRows,
      rows / kW4TileRows, out);
  return cudaGetLastError();
}

}  // namespace

bool W4ShapeSupported(int64_t n, int64_t k, int64_t group_size) {
  return n > 0 && k > 0 && n % kW4TileRows == 0 && k % kW4TileCols == 0 && group_size > 0 &&
         group_size % 16 == 0 && k % group_size == 0 &&
         (group_size % kW4TileCols == 0 || group_size == 16 || group_size == 32);
}

cudaError_t W4RepackCodes(const uint8_t* codes, int64_t n, int64_t k, uint8_t* tiled,
                          cudaStream_t stream) {
  if (!W4ShapeSupported(n, k, kW4TileCols) || !Aligned(tiled, 16)) return cudaErrorInvalidValue;
  const int64_t threads = n / kW4TileRows * (k / kW4TileCols) * 32;
  constexpr int kBlock = 256;
  RepackCodesKernel<<<static_cast<unsigned>((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      codes, n, k, reinterpret_cast<uint4*>(tiled));
  return cudaGetLastError();
}

cudaError_t W4RepackScales(const uint16_t* scales, const int8_t* zeros, int64_t n, int64_t groups,
                           bool bf16, uint32_t* sz, int64_t ldsz, cudaStream_t stream) {
  if (n * groups == 0) return cudaSuccess;
  if (ldsz < n) return cudaErrorInvalidValue;
  constexpr int kBlock = 256;
  RepackScalesKernel<<<static_cast<unsigned>((n * groups + kBlock - 1) / kBlock), kBlock, 0,
                       stream>>>(scales, zeros, n, groups, bf16, sz, ldsz);
  return cudaGetLastError();
}

cudaError_t W4GatherColumns(const __nv_bfloat16* x, int64_t ldx, int64_t m, int64_t k,
                            const int32_t* perm, __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchGather(x, ldx, m, k, perm, out, stream);
}
cudaError_t W4GatherColumns(const __half* x, int64_t ldx, int64_t m, int64_t k, const int32_t* perm,
                            __half* out, cudaStream_t stream) {
  return LaunchGather(x, ldx, m, k, perm, out, stream);
}

cudaError_t W4Dequantize(const uint8_t* tiled, const uint32_t* sz, int64_t n, int64_t k,
                         int64_t group_size, int64_t row0, int64_t rows, __nv_bfloat16* out,
                         cudaStream_t stream) {
  return LaunchDequantize(tiled, sz, n, k, group_size, row0, rows, out, stream);
}
cudaError_t W4Dequantize(const uint8_t* tiled, const uint32_t* sz, int64_t n, int64_t k,
                         int64_t group_size, int64_t row0, int64_t rows, __half* out,
                         cudaStream_t stream) {
  return LaunchDequantize(tiled, sz, n, k, group_size, row0, rows, out, stream);
}

bool W4GemmSupported(const W4GemmArgsT<__nv_bfloat16>& a) { return Supported(a); }
bool W4GemmSupported(const W4GemmArgsT<__half>& a) { return Supported(a); }
bool W4NormSupported(const W4GemmArgsT<__nv_bfloat16>& a) {
  return a.norm.weight != nullptr && Supported(a);
}
bool W4NormSupported(const W4GemmArgsT<__half>& a) {
  return a.norm.weight != nullptr && Supported(a);
}
cudaError_t W4Gemm(const W4GemmArgsT<__nv_bfloat16>& a, cudaStream_t stream) {
  return LaunchW4Gemm(a, stream);
}
cudaError_t W4Gemm(const W4GemmArgsT<__half>& a, cudaStream_t stream) {
  return LaunchW4Gemm(a, stream);
}

}  // namespace kiln::kernels
