#include "kernels/quant.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "kernels/attention_mma.cuh"
#include "kernels/divide.h"
#include "kernels/dtype_traits.cuh"
#include "kernels/gemv.h"
#include "kernels/launch.cuh"
#include "kernels/launch.h"
#include "kernels/rope_store.cuh"
#include "kernels/w8_dot.cuh"

namespace kiln::kernels {
namespace {

using dtype_internal::DispatchRows;
using dtype_internal::FromFloat;
using dtype_internal::kFp8Max;
using dtype_internal::kFp8MinScale;
using dtype_internal::Load8;
using dtype_internal::LoadChunks;
using dtype_internal::PairToFloat2;
using dtype_internal::ToFloat;

// model/quantization.h (kept in step by quant_test against the CPU reference).
constexpr float kInt8Max = 127.0f;
constexpr float kInt8MinScale = 1.17549435e-38f;  // FLT_MIN

using w8_internal::Dot16;
using w8_internal::kIsInt8;

// Four quotients (x / scale, already divided) as four codes in one word, lowest first: e4m3
// rounds to nearest even (never saturates: |q| <= 448); int8 rounds to nearest even and
// clamps to +-127 (|q| <= 127 by construction: the clamp only guards the rounding of amax / 127).
template <typename Code>
__device__ __forceinline__ uint32_t Encode4(const float (&q)[4]) {
  if constexpr (kIsInt8<Code>) {
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int v = max(-127, min(127, __float2int_rn(q[e])));
      word |= (static_cast<uint32_t>(v) & 0xffu) << (8 * e);
    }
    return word;
  } else {
    const auto lo = __nv_cvt_float2_to_fp8x2(make_float2(q[0], q[1]), __NV_SATFINITE, __NV_E4M3);
    const auto hi = __nv_cvt_float2_to_fp8x2(make_float2(q[2], q[3]), __NV_SATFINITE, __NV_E4M3);
    return uint32_t{lo} | (uint32_t{hi} << 16);
  }
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

constexpr int kQuantThreads = 256;

// The block's row of codes: dst[c] = Encode(row[c] / scale), 8 values per thread per pass.
template <typename T, typename Code>
__device__ __forceinline__ void EncodeRow(const T* row, int64_t cols, float scale, Code* dst) {
  const Divisor d = MakeDivisor(scale);
  WithDivisor(d, [&]<bool kFast>() {
    for (int64_t c = threadIdx.x * 8; c < cols; c += kQuantThreads * 8) {
      float v[8];
      Load8(row + c, v);
      float q[2][4];
#pragma unroll
      for (int e = 0; e < 8; ++e) q[e / 4][e % 4] = DivideRnAs<kFast>(v[e], d);  // the CPU's x / s
      *reinterpret_cast<uint2*>(dst + c) = make_uint2(Encode4<Code>(q[0]), Encode4<Code>(q[1]));
    }
  });
}

// One block per row: the row's amax (8 values per thread per pass), then the quantized row. The
// second pass re-reads the row from L1/L2 (a row is at most a few tens of KiB). static_scale
// (e4m3 only): that scale for every row instead, no amax pass; quotients saturate at +-448.
template <typename T, typename Code>
__global__ void __launch_bounds__(kQuantThreads)
    QuantizeRowsKernel(const T* __restrict__ x, int64_t ldx, int64_t cols, Code* __restrict__ out,
                       int64_t ldo, float* __restrict__ scales,
                       const float* __restrict__ static_scale) {
  __shared__ float partial[kQuantThreads / 32];
  PdlWait();
  PdlLaunchDependents();
  const T* row = x + blockIdx.x * ldx;
  if (static_scale != nullptr) {
    const float scale = *static_scale;
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
    EncodeRow<T, Code>(row, cols, scale, out + blockIdx.x * ldo);
    return;
  }
  float amax = 0.0f;
  for (int64_t c = threadIdx.x * 8; c < cols; c += kQuantThreads * 8) {
    float v[8];
    Load8(row + c, v);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  }
  amax = WarpMax(amax);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, partial[w]);
  const float scale =
      kIsInt8<Code> ? fmaxf(amax / kInt8Max, kInt8MinScale) : fmaxf(amax / kFp8Max, kFp8MinScale);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  EncodeRow<T, Code>(row, cols, scale, out + blockIdx.x * ldo);
}

template <typename T, typename Code>
cudaError_t LaunchQuantize(const T* x, int64_t ldx, int64_t rows, int64_t cols, Code* out,
                           int64_t ldo, float* scales, cudaStream_t stream,
                           const float* static_scale = nullptr) {
  if (rows == 0) return cudaSuccess;
  if (cols % 8 != 0 || ldx % 8 != 0 || ldo % 8 != 0) return cudaErrorInvalidValue;
  return LaunchChained(QuantizeRowsKernel<T, Code>, static_cast<unsigned>(rows), kQuantThreads, 0,
                       stream, x, ldx, cols, out, ldo, scales, static_scale);
}

// ---- FP8 GEMM epilogue ----------------------------------------------------------------------

// One thread per element (coalesced accesses; any width and stride). In: the GEMM's unscaled
// sums (bf16 for FP8, int32 for INT8: exact, converted to fp32 with one rounding past 2^24); Out:
// T or fp32.
__device__ __forceinline__ float SumToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float SumToFloat(int32_t v) { return static_cast<float>(v); }

template <typename In, typename T, typename Out>
__global__ void ApplyScalesKernel(const In* y, int64_t ldy, int64_t cols,
                                  const float* __restrict__ row_scale,
                                  const float* __restrict__ col_scale, const T* __restrict__ bias,
                                  Out* out, int64_t ldo) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (c >= cols) return;
  const float v =
      dtype_internal::Fp8ScaledSum(SumToFloat(y[r * ldy + c]), row_scale[r], col_scale[c],
                                   bias != nullptr ? ToFloat(bias[c]) : 0.0f);
  if constexpr (std::is_same_v<Out, float>) {
    out[r * ldo + c] = v;
  } else {
    out[r * ldo + c] = FromFloat<Out>(v);
  }
}

// ApplyScalesKernel over 8 elements a thread with 16-byte accesses, for widths and strides that
// are multiples of 8 (every FP8 / INT8 GEMM's: their n is a multiple of 16): the scalar kernel's
// 2-byte accesses left a prompt step's pass far below the copy bandwidth. The same arithmetic.
template <typename In, typename T, typename Out>
__global__ void ApplyScalesVec8Kernel(const In* y, int64_t ldy, int64_t cols,
                                      const float* __restrict__ row_scale,
                                      const float* __restrict__ col_scale,
                                      const T* __restrict__ bias, Out* out, int64_t ldo) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t c = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 8;
  const int64_t r = blockIdx.y;
  if (c >= cols) return;
  float v[8], cs[8], b[8] = {};
  Load8(y + r * ldy + c, v);
  Load8(col_scale + c, cs);
  if (bias != nullptr) Load8(bias + c, b);
  const float rs = row_scale[r];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = dtype_internal::Fp8ScaledSum(v[i], rs, cs[i], b[i]);
  dtype_internal::Store8(out + r * ldo + c, v);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename In, typename T, typename Out>
cudaError_t LaunchApplyScales(const In* y, int64_t ldy, int64_t rows, int64_t cols,
                              const float* row_scale, const float* col_scale, const T* bias,
                              Out* out, int64_t ldo, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows > 65535) return cudaErrorInvalidValue;  // grid.y
  constexpr int kBlock = 256;
  if (cols % 8 == 0 && ldy % 8 == 0 && ldo % 8 == 0 && Aligned16(y) && Aligned16(out) &&
      Aligned16(col_scale) && (bias == nullptr || Aligned16(bias))) {
    const int64_t threads = cols / 8;
    const dim3 grid(static_cast<unsigned>((threads + kBlock - 1) / kBlock),
                    static_cast<unsigned>(rows));
    return LaunchChained(ApplyScalesVec8Kernel<In, T, Out>, grid, kBlock, 0, stream, y, ldy, cols,
                         row_scale, col_scale, bias, out, ldo);
  }
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock), static_cast<unsigned>(rows));
  return LaunchChained(ApplyScalesKernel<In, T, Out>, grid, kBlock, 0, stream, y, ldy, cols,
                       row_scale, col_scale, bias, out, ldo);
}

// ---- W8A16 GEMV ----------------------------------------------------------------------------

constexpr int kWarps = 8;  // warps (output columns) per block
// 16-byte weight loads in flight per lane (8, a whole 4,096-wide row at once, measured 4-15 %
// slower on the H100: gemv_bench --fp8).
constexpr int kUnroll = 4;

__device__ __forceinline__ void StoreOut(float v, float* out) { *out = v; }
template <typename T>
__device__ __forceinline__ void StoreOut(float v, T* out) {
  *out = FromFloat<T>(v);
}

// What a W8A16 GEMV block does with its sums: store them (kPlain), SiluMul of gate and up
// (kSiluMul, GemvW8ArgsT::silu_mul) or RoPE and the KV-cache write (kRope, GemvW8ArgsT::rope).
// In the last two, warps 0-3 of a block take the first element of four output pairs (gate j /
// the pair's element i0) and warps 4-7 the second (up j / element i1), so one block holds both
// halves of its outputs; the second warps hand their rounded sums over in shared memory.
enum class Epilogue { kPlain, kSiluMul, kRope };

// RoPE pair j of a qkv row (j < n / 2): its head, its index i within the head, and the head's
// elements it rotates, i0 and i1 (i and i + head_dim / 2, or 2i and 2i + 1 interleaved).
struct RopePairOf {
  int head, i, i0, i1;
  template <typename Rope>
  __device__ __forceinline__ RopePairOf(int64_t j, const Rope& rope) {
    const int half = rope.head_dim / 2;
    head = static_cast<int>(j / half);
    i = static_cast<int>(j % half);
    i0 = rope.interleaved ? 2 * i : i;
    i1 = rope.interleaved ? 2 * i + 1 : i + half;
  }
};

// The outputs one warp of a block computes for one item of the grid: output column `col`'s dot
// product, and for kSiluMul / kRope the pair it belongs to. Past the last pair or column (the
// last item) the warp still streams a row, row 0 (never stored), so that every warp of the block
// reaches the epilogue's barrier and, in the persistent kernel, walks the same items.
template <Epilogue kEpi, typename Rope>
struct GemvW8Item {
  int64_t col, j;
  int head = 0, i = 0, i0 = 0, i1 = 0;
  bool active = true;

  __device__ __forceinline__ GemvW8Item(int64_t item, int warp, int64_t n, const Rope& rope) {
    constexpr int kHalf = kWarps / 2;
    col = item * kWarps + warp;
    j = item * kHalf + warp % kHalf;
    if constexpr (kEpi == Epilogue::kSiluMul) {
      active = j < n;
      col = (active ? j : 0) + (warp < kHalf ? 0 : n);
    } else if constexpr (kEpi == Epilogue::kRope) {
      active = j < n / 2;
      const RopePairOf pair(active ? j : 0, rope);
      head = pair.head;
      i = pair.i;
      i0 = pair.i0;
      i1 = pair.i1;
      col = int64_t{head} * rope.head_dim + (warp < kHalf ? i0 : i1);
    } else {
      active = col < n;
      col = active ? col : 0;
    }
  }
};

// The end of an item: the warp's sums reduced over its lanes, then stored (kPlain) or handed to
// the pair's first warp, which applies SiluMul or RoPE and the KV-cache write. `second` is the
// block's hand-over buffer; the persistent kernel alternates two so that one __syncthreads an
// item suffices.
template <int M, typename T, typename Out, Epilogue kEpi, typename Rope>
__device__ __forceinline__ void FinishGemvW8Item(float (&acc)[M], const GemvW8Item<kEpi, Rope>& it,
                                                 int warp, int lane,
                                                 const float* __restrict__ w_scale,
                                                 const T* __restrict__ bias, Out* __restrict__ out,
                                                 int64_t ldo, const Rope& rope,
                                                 float (&second)[M][kWarps / 2]) {
  constexpr int kHalf = kWarps / 2;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
  }
  const int64_t col = it.col;
  if constexpr (kEpi == Epilogue::kPlain) {
    if (lane == 0 && it.active) {
      const float s = w_scale[col];
      const float b = bias != nullptr ? ToFloat(bias[col]) : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) StoreOut(acc[m] * s + b, out + m * ldo + col);
    }
  } else {
    float v[M];  // lane 0: the T value the plain GEMV would store
    if (lane == 0) {
      const float s = w_scale[col];
      const float b = bias != nullptr ? ToFloat(bias[col]) : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) v[m] = dtype_internal::RoundTo<T>(acc[m] * s + b);
      if (warp >= kHalf) {
#pragma unroll
        for (int m = 0; m < M; ++m) second[m][warp - kHalf] = v[m];
      }
    }
    __syncthreads();
    if (lane == 0 && warp < kHalf && it.active) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float v1 = second[m][warp];
        if constexpr (kEpi == Epilogue::kSiluMul) {
          out[m * ldo + it.j] = FromFloat<T>(dtype_internal::SiluTimesExact<T>(v[m], v1));
        } else {
          // The k and v heads stay in the row as computed (RopeStoreKv writes back q only).
          T* row = out + m * ldo;
          const int64_t base = int64_t{it.head} * rope.head_dim;
          if (it.head >= rope.num_heads) {
            row[base + it.i0] = FromFloat<T>(v[m]);
            row[base + it.i1] = FromFloat<T>(v1);
          }
          const int64_t slot = rope.slot_mapping != nullptr ? rope.slot_mapping[m] : -1;
          rope_internal::RopeStorePair(rope, row, it.head, it.i, it.i0, it.i1,
                                       static_cast<float>(rope.positions[m]), slot, v[m], v1);
        }
      }
    }
  }
}

// One item a block: block b computes outputs [8 b, 8 b + 8) (kPlain) or pairs [4 b, 4 b + 4).
template <int M, typename T, typename Code, typename Out, Epilogue kEpi, typename C = T>
__global__ void __launch_bounds__(kWarps * 32)
    GemvW8Kernel(const T* __restrict__ x, int64_t ldx, const Code* __restrict__ w,
                 const float* __restrict__ w_scale, int64_t n, int64_t k,
                 const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo,
                 const void* prefetch, int64_t prefetch_bytes, RopeKvArgsT<T, C> rope) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const GemvW8Item<kEpi, RopeKvArgsT<T, C>> it(blockIdx.x, warp, n, rope);
  if (kEpi == Epilogue::kPlain && !it.active) return;
  const int64_t chunks = k / 16;  // 16 elements per 16-byte load
  const uint4* wr = reinterpret_cast<const uint4*>(w + it.col * k);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  uint4 wv[kUnroll];
  // As GemvKernel (gemv.cu): the first weight loads go out before PdlWait.
  LoadChunks<kUnroll>(wr, lane, chunks, wv);
  PdlWait();
  PdlLaunchDependents();
  for (int64_t base = lane; base < chunks; base += 32 * kUnroll) {
    if (base != lane) LoadChunks<kUnroll>(wr, base, chunks, wv);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + u * 32;
      if (c >= chunks) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4* xr = reinterpret_cast<const uint4*>(x + m * ldx) + 2 * c;
        acc[m] += Dot16<T, Code>(wv[u], __ldg(xr), __ldg(xr + 1));
      }
    }
  }
  dtype_internal::PrefetchL2(prefetch, prefetch_bytes);  // warp 0 of every block gets here
  __shared__ float second[M][kWarps / 2];
  FinishGemvW8Item<M, T, Out, kEpi>(acc, it, warp, lane, w_scale, bias, out, ldo, rope, second);
}

// The persistent form (GemvW8ArgsT::persistent): at most as many blocks as the SMs hold at once,
// block b taking items b, b + grid, ...; every lane keeps kUnroll 16-byte loads in flight all
// the way through, each chunk's slot refilled with the chunk kUnroll further on as soon as it
// is read, the next item's first chunks included (they overlap this item's reduction and
// epilogue). The same sums in the same order as GemvW8Kernel: the same bits. REQUIRES: k a
// multiple of 16 * 32 * kUnroll (a lane's chunks of a row a multiple of kUnroll).
// At one row it takes 55-62 registers, 4 blocks an SM. Held to 48 (__launch_bounds__(256, 5), 5
// blocks, a few spilled words) the 8B's GEMV chain got slower than the one-item kernel's
// (gemv_bench --chain on an H200: 2.237 vs 2.127 ms), at 4 blocks faster (2.065).
template <int M, typename T, typename Code, typename Out, Epilogue kEpi, typename C = T>
__global__ void __launch_bounds__(kWarps * 32)
    GemvW8PersistentKernel(const T* __restrict__ x, int64_t ldx, const Code* __restrict__ w,
                           const float* __restrict__ w_scale, int64_t n, int64_t k,
                           const T* __restrict__ bias, Out* __restrict__ out, int64_t ldo,
                           const void* prefetch, int64_t prefetch_bytes, RopeKvArgsT<T, C> rope,
                           int64_t items) {
  using Item = GemvW8Item<kEpi, RopeKvArgsT<T, C>>;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int lane_chunks = static_cast<int>(k / 16 / 32);
  const uint4* xl = reinterpret_cast<const uint4*>(x) + 2 * lane;  // lane's first x chunk
  // Only the row pointers live across the streaming; an item's outputs are worked out again
  // at its epilogue (fewer registers: 4 blocks an SM instead of 3).
  auto row = [&](int64_t i) {
    return reinterpret_cast<const uint4*>(w + Item(i, warp, n, rope).col * k) + lane;
  };
  int64_t item = blockIdx.x;
  const uint4* wr = row(item);
  uint4 wv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(wr + 32 * u);
  PdlWait();
  PdlLaunchDependents();
  __shared__ float second[2][M][kWarps / 2];
  for (int parity = 0; item < items; item += gridDim.x, parity ^= 1) {
    const bool has_next = item + gridDim.x < items;
    const uint4* wn = has_next ? row(item + gridDim.x) : wr;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
    for (int base = 0; base < lane_chunks; base += kUnroll) {
      // The slots refill from this row until its last round, then from the next item's row.
      const uint4* src = base + kUnroll < lane_chunks ? wr + 32 * (base + kUnroll) : wn;
      const bool refill = base + kUnroll < lane_chunks || has_next;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint4 cur = wv[u];
        if (refill) wv[u] = __ldcs(src + 32 * u);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4* xr = xl + (m * (ldx / 8) + 64 * (base + u));
          acc[m] += Dot16<T, Code>(cur, __ldg(xr), __ldg(xr + 1));
        }
      }
    }
    if (!has_next) dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
    FinishGemvW8Item<M, T, Out, kEpi>(acc, Item(item, warp, n, rope), warp, lane, w_scale, bias,
                                      out, ldo, rope, second[parity]);
    wr = wn;
  }
}

// ---- One row on the tensor cores (GemvFp8MmaKernel) ----------------------------------------
// GemvW8PersistentKernel turns each e4m3 code and each x element into fp32 and runs one FMA a
// weight: about 58 instructions a lane's 16-byte load (counted from the source), so at one row
// the SMs issue near their limit before DRAM is busy (H200, session 44: the same stream with the
// math replaced by 3 LOPs a load made the FP8 batch-1 step 2.67 -> 2.25 ms, gate_up 33.6 -> 27.3
// us, 4.3 TB/s). Here the codes go to the tensor cores as they are stored: e4m3 -> f16 is exact
// (one cvt a pair), and x is staged once per block as f16 (see below), so a 16-row tile's 64
// columns are 16 cvts, 2 shared loads and 4 mma.m16n8k16 a lane. Lane (g, t) reads 16 bytes of tile
// row g and 16 of row g + 8 at columns 64 c + 16 t ..
// + 15; mma k-step j takes bytes 4 j .. 4 j + 3 of each (slots 2t, 2t + 1: columns 4 j, 4 j + 1;
// slots 2t + 8, 2t + 9: columns 4 j + 2, 4 j + 3), and B the same columns of x, so the row-major
// codes need no repacking. Every B column holds the same x: each lane's D elements 0 and 2 are
// row g's and row g + 8's sums. The rest is W4GemvStreamKernel's stream (w4a16.cu): blocks of
// kW8MmaWarps warps splitting k into runs of column tiles, kW8MmaSlots tiles (2 x 16 bytes each)
// a lane in flight, refilled across row tiles, one reduction in shared memory a row tile.
// It pays only where the row tiles fill the SMs' 3 blocks (MmaTakes). H200, session 44, the 8B's
// batch-1 FP8 step (ms): FMA everywhere 2.662; this form for qkv and gate_up 2.525; for o and
// down too 2.651 (down: 256 row tiles of 28 column tiles a warp, 15.7 -> 26.1 us a layer; o 5.6
// -> 6.5). 4 tiles a lane in flight (80 registers, spills in the RoPE epilogue) instead of 2
// (59-70): 2.600 for qkv and gate_up.
// A tile's rows: 16 consecutive rows (kPlain), gate rows j and up rows n + j for 8 outputs j
// (kSiluMul), or RoPE's pairs (i0, i1) of 8 pair indices (kRope), each pair in one lane.
// x as f16: bf16 -> f16 keeps every bit in f16's normal range; a warp whose run of x reaches
// 2^15 stages x 2^-e instead (a power of two, exact) and scales its sums back by 2^e.
// REQUIRES: m = 1, k a multiple of kW8MmaWarps * kW8MmaSlots * 64 and at most kW8MmaMaxK.
constexpr int kW8MmaWarps = 8;
constexpr int kW8MmaSlots = 2;
constexpr int64_t kW8MmaMaxK = 32768;  // x as f16: 64 KiB a block at most

// Row r (0-15) of row tile `item` (GemvFp8MmaKernel's tile rows above). n: kPlain's rows,
// kSiluMul's outputs (gate's and up's rows each), kRope's rows.
template <Epilogue kEpi, typename Rope>
__device__ __forceinline__ int64_t MmaTileRow(uint32_t item, int r, int64_t n, const Rope& rope) {
  if constexpr (kEpi == Epilogue::kPlain) {
    return int64_t{item} * 16 + r;
  } else if constexpr (kEpi == Epilogue::kSiluMul) {
    return int64_t{item} * 8 + (r % 8) + (r < 8 ? 0 : n);
  } else {
    const RopePairOf pair(int64_t{item} * 8 + (r % 8), rope);
    return int64_t{pair.head} * rope.head_dim + (r < 8 ? pair.i0 : pair.i1);
  }
}

template <typename T, Epilogue kEpi, typename Out, typename C = T>
__global__ void __launch_bounds__(kW8MmaWarps * 32, 3)
    GemvFp8MmaKernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                     const float* __restrict__ w_scale, int64_t n, int64_t k,
                     const T* __restrict__ bias, Out* __restrict__ out, const void* prefetch,
                     int64_t prefetch_bytes, RopeKvArgsT<T, C> rope, uint32_t items) {
  constexpr int kW = kW8MmaWarps;
  constexpr int kSlots = kW8MmaSlots;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t run = static_cast<uint32_t>(k / 64 / kW);  // a warp's column tiles an item
  const uint32_t c_begin = warp * run;
  auto* xs = reinterpret_cast<uint4*>(smem);           // x as f16: 8 words a column tile
  auto* red = reinterpret_cast<float*>(smem + k * 2);  // [2][kW][16]
  // A lane's 16-byte words: wb plus its tile rows' offsets (32 bits: MmaTakes).
  const uint4* wb = reinterpret_cast<const uint4*>(w) + c_begin * 4 + t;
  const uint32_t row_words = static_cast<uint32_t>(k / 16);
  auto row_offset = [&](uint32_t it, int r) {
    return static_cast<uint32_t>(MmaTileRow<kEpi>(it, r, n, rope)) * row_words;
  };
  uint4 wv[kSlots][2];
  uint32_t item = blockIdx.x;
  uint32_t o0 = row_offset(item, g), o1 = row_offset(item, g + 8);
#pragma unroll
  for (int u = 0; u < kSlots; ++u) {  // no earlier kernel's output
    wv[u][0] = __ldcs(wb + (o0 + 4 * u));
    wv[u][1] = __ldcs(wb + (o1 + 4 * u));
  }
  PdlWait();
  PdlLaunchDependents();
  // The warp's run of x: copied raw, then its largest magnitude, then rewritten in place as f16
  // (each lane its own words; the lanes read each other's after the __syncwarp).
  float unscale = 1.0f;
  {
    const uint4* x16 = reinterpret_cast<const uint4*>(x) + c_begin * 8;
    uint4* mine = xs + c_begin * 8;
#pragma unroll 1
    for (uint32_t i = lane; i < run * 8; i += 32) {
      attention_internal::CpAsync16(attention_internal::SmemAddr(mine + i), x16 + i);
    }
    attention_internal::CpAsyncCommit();
    attention_internal::CpAsyncWait<0>();
    float amax = 0.0f;
#pragma unroll 1
    for (uint32_t i = lane; i < run * 8; i += 32) {
      const auto* pairs = reinterpret_cast<const dtype_internal::Pair<T>*>(mine + i);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = PairToFloat2<T>(pairs[q]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    }
    // 2^-e with amax 2^-e < 2^15 (e <= 113 for any finite amax); inf / NaN stay as they are.
    const int e = amax >= 32768.0f && isfinite(amax) ? ilogbf(amax) - 14 : 0;
    const float scale = __int_as_float((127 - e) << 23);
    unscale = __int_as_float((127 + e) << 23);
#pragma unroll 1
    for (uint32_t i = lane; i < run * 8; i += 32) {
      const auto* pairs = reinterpret_cast<const dtype_internal::Pair<T>*>(mine + i);
      uint4 v;
      uint32_t* words = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = PairToFloat2<T>(pairs[q]);
        const __half2 h = __floats2half2_rn(f.x * scale, f.y * scale);
        words[q] = *reinterpret_cast<const uint32_t*>(&h);
      }
      mine[i] = v;
    }
    __syncwarp();
  }
  // e4m3 pair (the low or high 16 bits of v) -> f16 pair.
  auto cvt = [](uint32_t v) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  };
  for (int parity = 0; item < items; item += gridDim.x, parity ^= 1) {
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t r = 0; r < run; r += kSlots) {
      // The slots refill from this row tile until its last round, then from the next one's.
      const bool last = r + kSlots == run;
      uint32_t next_r = r + kSlots;
      if (last) {
        next_r = 0;
        if (item + gridDim.x < items) {
          o0 = row_offset(item + gridDim.x, g);
          o1 = row_offset(item + gridDim.x, g + 8);
        }
      }
      const bool refill = !last || item + gridDim.x < items;
#pragma unroll
      for (int u = 0; u < kSlots; ++u) {
        const uint4 w0 = wv[u][0], w1 = wv[u][1];
        if (refill) {
          wv[u][0] = __ldcs(wb + (o0 + 4 * (next_r + u)));
          wv[u][1] = __ldcs(wb + (o1 + 4 * (next_r + u)));
        }
        const uint4* xp = xs + (c_begin + r + u) * 8 + 2 * t;
        const uint4 xa = xp[0], xb = xp[1];
        const uint32_t* a0 = reinterpret_cast<const uint32_t*>(&w0);
        const uint32_t* a1 = reinterpret_cast<const uint32_t*>(&w1);
        const uint32_t b[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t a[4] = {cvt(a0[j] & 0xffffu), cvt(a1[j] & 0xffffu), cvt(a0[j] >> 16),
                                 cvt(a1[j] >> 16)};
          attention_internal::Mma<__half>(part, a, b[2 * j], b[2 * j + 1]);
        }
      }
    }
    if (item + gridDim.x >= items) dtype_internal::PrefetchL2(prefetch, prefetch_bytes);
    float* rp = red + parity * kW * 16;
    if (t == 0) {
      rp[warp * 16 + g] = part[0] * unscale;
      rp[warp * 16 + g + 8] = part[2] * unscale;
    }
    __syncthreads();
    if (threadIdx.x < 16) {
      float v = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kW; ++wi) v += rp[wi * 16 + threadIdx.x];
      const int64_t row = MmaTileRow<kEpi>(item, threadIdx.x, n, rope);
      v = v * w_scale[row] + (bias != nullptr ? ToFloat(bias[row]) : 0.0f);
      if constexpr (kEpi == Epilogue::kPlain) {
        StoreOut(v, out + row);
      } else {
        // Threads 0-7 the pairs' first elements, 8-15 their second (threads 0-15: lanes 0-15).
        const float mine = dtype_internal::RoundTo<T>(v);
        const float second = __shfl_down_sync(0xffffu, mine, 8, 16);
        const int64_t j = int64_t{item} * 8 + threadIdx.x;
        if (threadIdx.x < 8) {
          if constexpr (kEpi == Epilogue::kSiluMul) {
            out[j] = FromFloat<T>(dtype_internal::SiluTimesExact<T>(mine, second));
          } else {
            const RopePairOf p(j, rope);
            // The k and v heads stay in the row as computed (RopeStoreKv writes back q only).
            if (p.head >= rope.num_heads) {
              out[int64_t{p.head} * rope.head_dim + p.i0] = FromFloat<T>(mine);
              out[int64_t{p.head} * rope.head_dim + p.i1] = FromFloat<T>(second);
            }
            const int64_t slot = rope.slot_mapping != nullptr ? rope.slot_mapping[0] : -1;
            rope_internal::RopeStorePair(rope, out, p.head, p.i, p.i0, p.i1,
                                         static_cast<float>(rope.positions[0]), slot, mine, second);
          }
        }
      }
    }
  }
}

// Whether GemvFp8MmaKernel runs a: one row, persistent and mma set, e4m3 codes, k a multiple of
// 1,024 up to 32,768, whole row tiles (n a multiple of 16; of 8 with silu_mul; head_dim of 16
// with rope), and enough of them to give the SMs 2.5 of its blocks each (measured above: an 8B's
// qkv, 384 row tiles on 132 SMs, and gate_up, 1,792; not o or down, 256).
template <typename Args>
bool MmaTakes(const Args& a) {
  using Code = std::remove_cv_t<std::remove_pointer_t<decltype(a.w)>>;
  if constexpr (!std::is_same_v<Code, __nv_fp8_e4m3>) {
    return false;
  } else {
    const int64_t rows = a.silu_mul ? 2 * a.n : a.n;  // the weight's
    if (!a.mma || !a.persistent || a.m != 1 || a.k > kW8MmaMaxK ||
        a.k % (kW8MmaWarps * kW8MmaSlots * 64) != 0 || rows * (a.k / 16) > 0xffffffffll) {
      return false;
    }
    int64_t tiles = a.n / 16;
    if (a.silu_mul) {
      if (a.n % 8 != 0) return false;
      tiles = a.n / 8;
    } else if (a.rope != nullptr || a.rope_fp8 != nullptr) {
      const int head_dim = a.rope != nullptr ? a.rope->head_dim : a.rope_fp8->head_dim;
      if (head_dim % 16 != 0) return false;
    } else if (a.n % 16 != 0) {
      return false;
    }
    return 2 * tiles >= 5 * int64_t{CurrentDeviceSmCount()};
  }
}

template <typename T, Epilogue kEpi, typename Out, typename C, typename Args>
cudaError_t LaunchGemvFp8Mma(const Args& a, Out* out, const RopeKvArgsT<T, C>& rope,
                             cudaStream_t stream) {
  constexpr auto kernel = GemvFp8MmaKernel<T, kEpi, Out, C>;
  const size_t smem = a.k * 2 + 2 * kW8MmaWarps * 16 * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  // Row tiles: 16 rows (of a.n), 8 gate / up pairs (a.n outputs) or 8 RoPE pairs (a.n / 2).
  const int64_t items = kEpi == Epilogue::kSiluMul ? a.n / 8 : a.n / 16;
  return LaunchChained(kernel, ResidentGrid<kernel, kW8MmaWarps * 32>(items, smem),
                       kW8MmaWarps * 32, smem, stream, a.x, reinterpret_cast<const uint8_t*>(a.w),
                       a.w_scale, a.n, a.k, a.bias, out, a.prefetch, a.prefetch_bytes, rope,
                       static_cast<uint32_t>(items));
}

// Args: GemvFp8ArgsT<T> or GemvInt8ArgsT<T> (the same fields; w's code type differs).
template <int M, typename T, typename Args>
cudaError_t LaunchGemvW8M(const Args& a, cudaStream_t stream) {
  using Code = std::remove_cv_t<std::remove_pointer_t<decltype(a.w)>>;
  // One row only: at 2 rows (70-78 registers, 3 blocks an SM) the 8B's layer took 98.9 us against
  // the one-item kernel's 90.3 (gemv_bench --fp8, H200, sessions 36 and 34).
  const bool persistent = a.persistent && a.k % (16 * 32 * kUnroll) == 0;  // M == 1 below
  auto run = [&]<Epilogue kEpi, typename Out, typename C>(int64_t outputs, int per_block,
                                                          const RopeKvArgsT<T, C>& rope) {
    const int64_t items = (outputs + per_block - 1) / per_block;
    if constexpr (M == 1 && std::is_same_v<Code, __nv_fp8_e4m3>) {
      if (MmaTakes(a)) return LaunchGemvFp8Mma<T, kEpi>(a, static_cast<Out*>(a.out), rope, stream);
    }
    if constexpr (M == 1) {
      if (persistent) {
        constexpr auto kernel = GemvW8PersistentKernel<M, T, Code, Out, kEpi, C>;
        const dim3 grid = ResidentGrid<kernel, kWarps * 32>(items);
        return LaunchChained(kernel, grid, kWarps * 32, 0, stream, a.x, a.ldx, a.w, a.w_scale, a.n,
                             a.k, a.bias, static_cast<Out*>(a.out), a.ldo, a.prefetch,
                             a.prefetch_bytes, rope, items);
      }
    }
    const dim3 grid(static_cast<unsigned>(items));
    return LaunchChained(GemvW8Kernel<M, T, Code, Out, kEpi, C>, grid, kWarps * 32, 0, stream, a.x,
                         a.ldx, a.w, a.w_scale, a.n, a.k, a.bias, static_cast<Out*>(a.out), a.ldo,
                         a.prefetch, a.prefetch_bytes, rope);
  };
  const RopeKvArgsT<T, T> none;
  if (a.silu_mul) return run.template operator()<Epilogue::kSiluMul, T>(a.n, kWarps / 2, none);
  if (a.rope != nullptr)
    return run.template operator()<Epilogue::kRope, T>(a.n / 2, kWarps / 2, *a.rope);
  if (a.rope_fp8 != nullptr) {
    return run.template operator()<Epilogue::kRope, T>(a.n / 2, kWarps / 2, *a.rope_fp8);
  }
  if (a.out_f32) return run.template operator()<Epilogue::kPlain, float>(a.n, kWarps, none);
  return run.template operator()<Epilogue::kPlain, T>(a.n, kWarps, none);
}

// Whether *rope describes the epilogue GemvW8ArgsT::rope can run for a.
template <typename Args, typename Rope>
bool RopeOk(const Args& a, const Rope* rope) {
  if (rope == nullptr) return true;
  return rope_internal::CacheScalesOk(*rope) && rope->head_dim > 0 && rope->head_dim % 2 == 0 &&
         rope->num_heads > 0 && rope->num_kv_heads > 0 &&
         a.n == int64_t{rope->num_heads + 2 * rope->num_kv_heads} * rope->head_dim &&
         rope->num_tokens == a.m && rope->qkv == a.out && rope->ld == a.ldo &&
         rope->positions != nullptr && rope->inv_freq != nullptr && rope->q_codes == nullptr &&
         rope->qkv_scales.row == nullptr && !a.silu_mul && !a.out_f32 &&
         (rope->slot_mapping == nullptr ||
          (rope->k_cache != nullptr && rope->v_cache != nullptr && rope->block_size > 0));
}

template <typename Args>
bool Supported(const Args& a) {
  return a.m >= 1 && a.m <= kGemvMaxRows && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.ldx % 8 == 0 &&
         Aligned16(a.x) && Aligned16(a.w) && a.w_scale != nullptr && !(a.silu_mul && a.out_f32) &&
         (a.rope == nullptr || a.rope_fp8 == nullptr) && RopeOk(a, a.rope) && RopeOk(a, a.rope_fp8);
}

template <typename T, typename Args>
cudaError_t LaunchGemvW8(const Args& a, cudaStream_t stream) {
  if (!Supported(a)) return cudaErrorInvalidValue;
  return DispatchRows(a.m, [&]<int M>() { return LaunchGemvW8M<M, T>(a, stream); });
}

}  // namespace

cudaError_t QuantizeRowsFp8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}
cudaError_t QuantizeRowsFp8(const __half* x, int64_t ldx, int64_t rows, int64_t cols,
                            __nv_fp8_e4m3* out, int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}

cudaError_t QuantizeRowsFp8Static(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                                  const float* scale, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* scales, cudaStream_t stream) {
  if (scale == nullptr) return cudaErrorInvalidValue;
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream, scale);
}
cudaError_t QuantizeRowsFp8Static(const __half* x, int64_t ldx, int64_t rows, int64_t cols,
                                  const float* scale, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* scales, cudaStream_t stream) {
  if (scale == nullptr) return cudaErrorInvalidValue;
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream, scale);
}

cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale,
                           const __nv_bfloat16* bias, __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchApplyScales(y, ld, rows, cols, row_scale, col_scale, bias, out, ld, stream);
}
cudaError_t ApplyFp8Scales(const __nv_bfloat16* y, int64_t ld, int64_t rows, int64_t cols,
                           const float* row_scale, const float* col_scale, const __half* bias,
                           __half* out, cudaStream_t stream) {
  return LaunchApplyScales(y, ld, rows, cols, row_scale, col_scale, bias, out, ld, stream);
}

bool GemvFp8Supported(const GemvFp8ArgsT<__nv_bfloat16>& a) { return Supported(a); }
bool GemvFp8OnTensorCores(const GemvFp8ArgsT<__nv_bfloat16>& a) {
  return Supported(a) && MmaTakes(a);
}
bool GemvFp8OnTensorCores(const GemvFp8ArgsT<__half>& a) { return Supported(a) && MmaTakes(a); }
bool GemvFp8Supported(const GemvFp8ArgsT<__half>& a) { return Supported(a); }
cudaError_t GemvFp8(const GemvFp8ArgsT<__nv_bfloat16>& a, cudaStream_t stream) {
  return LaunchGemvW8<__nv_bfloat16>(a, stream);
}
cudaError_t GemvFp8(const GemvFp8ArgsT<__half>& a, cudaStream_t stream) {
  return LaunchGemvW8<__half>(a, stream);
}

// ---- INT8 ----------------------------------------------------------------------------------

cudaError_t QuantizeRowsInt8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols,
                             int8_t* out, int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}
cudaError_t QuantizeRowsInt8(const __half* x, int64_t ldx, int64_t rows, int64_t cols, int8_t* out,
                             int64_t ldo, float* scales, cudaStream_t stream) {
  return LaunchQuantize(x, ldx, rows, cols, out, ldo, scales, stream);
}

namespace {
template <typename T>
cudaError_t LaunchInt8Scales(const int32_t* acc, int64_t ld_acc, int64_t rows, int64_t cols,
                             const float* row_scale, const float* col_scale, const T* bias,
                             void* out, int64_t ldo, bool out_f32, cudaStream_t stream) {
  if (out_f32) {
    return LaunchApplyScales(acc, ld_acc, rows, cols, row_scale, col_scale, bias,
                             static_cast<float*>(out), ldo, stream);
  }
  return LaunchApplyScales(acc, ld_acc, rows, cols, row_scale, col_scale, bias,
                           static_cast<T*>(out), ldo, stream);
}
}  // namespace

cudaError_t ApplyInt8Scales(const int32_t* acc, int64_t ld_acc, int64_t rows, int64_t cols,
                            const float* row_scale, const float* col_scale,
                            const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                            cudaStream_t stream) {
  return LaunchInt8Scales(acc, ld_acc, rows, cols, row_scale, col_scale, bias, out, ldo, out_f32,
                          stream);
}
cudaError_t ApplyInt8Scales(const int32_t* acc, int64_t ld_acc, int64_t rows, int64_t cols,
                            const float* row_scale, const float* col_scale, const __half* bias,
                            void* out, int64_t ldo, bool out_f32, cudaStream_t stream) {
  return LaunchInt8Scales(acc, ld_acc, rows, cols, row_scale, col_scale, bias, out, ldo, out_f32,
                          stream);
}

bool GemvInt8Supported(const GemvInt8ArgsT<__nv_bfloat16>& a) { return Supported(a); }
bool GemvInt8Supported(const GemvInt8ArgsT<__half>& a) { return Supported(a); }
cudaError_t GemvInt8(const GemvInt8ArgsT<__nv_bfloat16>& a, cudaStream_t stream) {
  return LaunchGemvW8<__nv_bfloat16>(a, stream);
}
cudaError_t GemvInt8(const GemvInt8ArgsT<__half>& a, cudaStream_t stream) {
  return LaunchGemvW8<__half>(a, stream);
}

namespace {

__global__ void FillGaussianE4m3Kernel(__nv_fp8_e4m3* out, int64_t n, uint64_t seed, float sigma) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // splitmix64 of the index, two 24-bit uniforms, Box-Muller.
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u1 = (static_cast<float>(z >> 40) + 1.0f) * 0x1p-24f;  // (0, 1]
    const float u2 = static_cast<float>((z >> 16) & 0xffffff) * 0x1p-24f;
    const float g = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    out[i] = dtype_internal::ToE4m3Sat(g * sigma);
  }
}

}  // namespace

cudaError_t FillGaussianE4m3(__nv_fp8_e4m3* out, int64_t n, uint64_t seed, float sigma,
                             cudaStream_t stream) {
  if (n < 0 || out == nullptr || !(sigma > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  FillGaussianE4m3Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(out, n, seed, sigma);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
