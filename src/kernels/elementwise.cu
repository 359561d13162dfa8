#include "kernels/elementwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/divide.h"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.cuh"
#include "kernels/rope_store.cuh"

namespace kiln::kernels {
namespace {

using bf16 = __nv_bfloat16;
using dtype_internal::FromFloat;
using dtype_internal::kFp8Max;
using dtype_internal::kFp8MinScale;
using dtype_internal::kIsFp8;
using dtype_internal::PairToFloat2;
using dtype_internal::RotatePair;
using dtype_internal::RoundTo;
using dtype_internal::Silu;
using dtype_internal::SiluTimesExact;
using dtype_internal::ToFloat;
using dtype_internal::Vec8;
using rope_internal::KvCacheRow;

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {  // of magnitudes (>= 0), whose identity is 0
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op>
__device__ inline float WarpReduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// op over the block (0 is op's identity); every thread gets the result. REQUIRES: blockDim.x a
// multiple of 32, <= 1024.
template <typename Op>
__device__ float BlockReduce(float v, Op op) {
  __shared__ float partial[32];
  __shared__ float total;
  v = WarpReduce(v, op);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
    s = WarpReduce(s, op);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}
__device__ float BlockSum(float v) { return BlockReduce(v, SumOp{}); }

// The per-row e4m3 quantization of kernels::QuantizeRowsFp8 for a row this block holds: the
// scale from the block's amax (or the static scale, when given: QuantizeRowsFp8Static; thread 0
// stores it), then each thread's codes of y / scale (saturating, for the static scale).
__device__ __forceinline__ float Fp8RowScale(float thread_amax, const float* static_scale,
                                             float* scale_out) {
  if (static_scale != nullptr) {  // uniform over the block
    const float scale = *static_scale;
    if (threadIdx.x == 0) *scale_out = scale;
    return scale;
  }
  const float amax = BlockReduce(thread_amax, MaxOp{});
  const float scale = fmaxf(amax / kFp8Max, kFp8MinScale);
  if (threadIdx.x == 0) *scale_out = scale;
  return scale;
}
// The codes of y / scale (the CPU's IEEE quotient, QuantizeRowFp8, exactly: kernels/divide.h),
// saturating, two a conversion. kFast: scale.fast (WithDivisor).
template <bool kFast>
__device__ __forceinline__ void StoreFp8x8(__nv_fp8_e4m3* p, const float (&y)[8],
                                           const Divisor& scale) {
  uint32_t word[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    const float2 q =
        make_float2(DivideRnAs<kFast>(y[e], scale), DivideRnAs<kFast>(y[e + 1], scale));
    word[e / 4] |= uint32_t{__nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3)}
                   << (8 * (e % 4));
  }
  *reinterpret_cast<uint2*>(p) = make_uint2(word[0], word[1]);
}

template <typename T>
__global__ void EmbeddingKernel(const int32_t* ids, const T* table, int32_t hidden, T* out) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = ids[blockIdx.x];
  const T* src = table + row * hidden;
  T* dst = out + int64_t{blockIdx.x} * hidden;
  if (hidden % 8 == 0) {
    for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) {
      reinterpret_cast<Vec8<T>*>(dst)[i] = reinterpret_cast<const Vec8<T>*>(src)[i];
    }
  } else {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

// Residual streams: the activation type T (HF's model in T: the sum is rounded before it is
// normalized), fp32 (the sum keeps 24 bits), or Residual24 (16 significant bits in 3 bytes,
// RmsNormResidual24Fp8). Load/store 8 values as floats.
template <typename T>
__device__ __forceinline__ float RoundSum(float v, const T*) {
  return RoundTo<T>(v);
}
__device__ __forceinline__ float RoundSum(float v, const float*) { return v; }

// The 24-bit stream's element type: a tag, since a value is split over two planes of the row
// (elementwise.h, Residual24Bytes): its high 16 bits in the row's first 2 ldx bytes, its low
// byte (bits 8..15 of the fp32 value) in the next ldx bytes.
struct Residual24 {
  uint8_t byte;
};

// v with the low 8 bits of its significand rounded off, to nearest even (a carry into the
// exponent is the correct rounding; past the largest finite value it gives infinity). A NaN
// stays a NaN (quieted: its payload may sit in the dropped bits).
__device__ __forceinline__ float Round24(float v) {
  const uint32_t u = __float_as_uint(v);
  const uint32_t r = (u + 0x7fu + ((u >> 8) & 1u)) & 0xffffff00u;
  return __uint_as_float(v != v ? (u | 0x00400000u) & 0xffffff00u : r);
}
__device__ __forceinline__ float RoundSum(float v, const Residual24*) { return Round24(v); }

// The residual row of `row`: rows of ldx elements (3 ldx bytes for Residual24).
template <typename R>
__device__ __forceinline__ R* ResidualRow(R* residual, int64_t row, int64_t ldx) {
  return residual + row * ldx;
}
__device__ __forceinline__ Residual24* ResidualRow(Residual24* residual, int64_t row, int64_t ldx) {
  return residual + 3 * row * ldx;
}
template <typename T>
__device__ __forceinline__ void Store(T* p, float v) {
  *p = FromFloat<T>(v);
}
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
template <typename T>
__device__ __forceinline__ float Load(const T* p) {
  return ToFloat(*p);
}
__device__ __forceinline__ float Load(const float* p) { return *p; }

using dtype_internal::Load8;
using dtype_internal::Pack8;
using dtype_internal::Store8;
using dtype_internal::Unpack8;

// Elements 8 i .. 8 i + 7 of residual row rr (ResidualRow), as floats: Load8 / Store8, or the
// two planes of a Residual24 row (16 bytes of high halves, 8 low bytes; a value is its high half
// then its low byte then a zero byte, four byte permutes and two shifts for four values).
template <typename R>
__device__ __forceinline__ void LoadResidual8(const R* rr, int64_t /*ldx*/, int i, float (&v)[8]) {
  Load8(rr + 8 * i, v);
}
__device__ __forceinline__ void LoadResidual8(const Residual24* rr, int64_t ldx, int i,
                                              float (&v)[8]) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(rr);
  const uint4 hi = *reinterpret_cast<const uint4*>(bytes + 16 * i);
  const uint2 lo = *reinterpret_cast<const uint2*>(bytes + 2 * ldx + 8 * i);
  const uint32_t h[4] = {hi.x, hi.y, hi.z, hi.w}, l[2] = {lo.x, lo.y};
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    // l8: [0, l0, l1, l2], l16: [l2, l3, 0, 0] (bytes from the lowest)
    const uint32_t l8 = l[q] << 8, l16 = l[q] >> 16;
    v[4 * q] = __uint_as_float(__byte_perm(h[2 * q], l8, 0x1054));
    v[4 * q + 1] = __uint_as_float(__byte_perm(h[2 * q], l8, 0x3264));
    v[4 * q + 2] = __uint_as_float(__byte_perm(h[2 * q + 1], l8, 0x1074));
    v[4 * q + 3] = __uint_as_float(__byte_perm(h[2 * q + 1], l16, 0x3256));
  }
}
template <typename R>
__device__ __forceinline__ void StoreResidual8(R* rr, int64_t /*ldx*/, int i, const float (&v)[8]) {
  Store8(rr + 8 * i, v);
}
// REQUIRES: v already Round24's (its low bytes are zero).
__device__ __forceinline__ void StoreResidual8(Residual24* rr, int64_t ldx, int i,
                                               const float (&v)[8]) {
  auto* bytes = reinterpret_cast<uint8_t*>(rr);
  uint32_t u[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) u[e] = __float_as_uint(v[e]);
  uint4 hi;
  hi.x = __byte_perm(u[0], u[1], 0x7632);
  hi.y = __byte_perm(u[2], u[3], 0x7632);
  hi.z = __byte_perm(u[4], u[5], 0x7632);
  hi.w = __byte_perm(u[6], u[7], 0x7632);
  uint2 lo;
  lo.x = __byte_perm(__byte_perm(u[0], u[1], 0x0051), __byte_perm(u[2], u[3], 0x0051), 0x5410);
  lo.y = __byte_perm(__byte_perm(u[4], u[5], 0x0051), __byte_perm(u[6], u[7], 0x0051), 0x5410);
  *reinterpret_cast<uint4*>(bytes + 16 * i) = hi;
  *reinterpret_cast<uint2*>(bytes + 2 * ldx + 8 * i) = lo;
}

// 8 elements widened to float as Unpack8 does, bf16 pairs with one integer op an element
// (the low half shifted up, the high half masked) where __bfloat1622float2 takes two for the
// high half. The same values. Here rather than in dtype_traits' Unpack8, which the attention
// kernels share: their register budgets and schedules were tuned on its current SASS.
template <typename T>
__device__ __forceinline__ void Widen8(const Vec8<T>& b, float (&v)[8]) {
  if constexpr (std::is_same_v<T, bf16>) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(&b.h[e]);
      v[2 * e] = __uint_as_float(w << 16);
      v[2 * e + 1] = __uint_as_float(w & 0xffff0000u);
    }
  } else {
    Unpack8(b, v);
  }
}

// v[e] = RoundTo<T>(v[e]), two elements a conversion (one packing cvt instead of two single
// ones: the conversions' pipe, a quarter of the FP32 rate, bounded SiluMulFp8 at the clocks of
// a power-capped prompt step). The same values.
template <typename T>
__device__ __forceinline__ void RoundPairs(float (&v)[8]) {
  const Vec8<T> b = Pack8<T>(v);
  Widen8<T>(b, v);
}

// Input columns c .. c + 7 of a row whose row scale is rs, scaled in place as Fp8InputScales
// says (dtype_internal::Fp8ScaledSum, rounded to bf16). The column scales and bias are loaded
// here, where they are used, not with the row: held in registers for a whole row they would
// double a thread's registers. Without a bias the sum still adds +0, as ApplyFp8Scales does
// (-0 becomes +0).
__device__ __forceinline__ void ScaleInput8(const Fp8InputScales& s, float rs, int64_t c,
                                            float (&v)[8]) {
  float col[8];
  Load8(s.col + c, col);
  if (s.bias != nullptr) {
    float bias[8];
    Load8(s.bias + c, bias);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = dtype_internal::Fp8ScaledSum(v[e], rs, col[e], bias[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = dtype_internal::Fp8ScaledSum(v[e], rs, col[e], 0.0f);
  }
  RoundPairs<bf16>(v);
}

// Which residual update a norm does.
struct NormResidual {
  bool add = false;   // normalize residual + x (else x alone)
  bool init = false;  // with add: the residual is taken as 0 (the embeddings of layer 0)
};

constexpr int kNormThreads = 256;
constexpr int kNormMaxDim = 12288;

// One block per row, any dim and stride: two passes over global memory (the second re-reads the
// row from L2; the row is not parked in shared memory, which would take 48 KiB of fp32 at the
// largest dim). The summed row is stored back into the residual unless rows are picked. R: the
// residual stream's type, T or float.
template <typename T, typename R>
__global__ void RmsNormKernel(const T* x, int64_t ldx, R* residual, NormResidual mode,
                              const int32_t* row_ids, int32_t dim, const T* weight, float eps,
                              T* out, int64_t ldo) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = row_ids != nullptr ? row_ids[blockIdx.x] : blockIdx.x;
  const T* xr = x + row * ldx;
  R* rr = mode.add ? residual + row * ldx : nullptr;
  const bool store = rr != nullptr && row_ids == nullptr;
  auto value = [&](int i) {
    float v = ToFloat(xr[i]);
    if (rr != nullptr) v = RoundSum((mode.init ? 0.0f : Load(rr + i)) + v, rr);
    return v;
  };
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = value(i);
    if (store) Store(rr + i, v);
    sum_sq += v * v;
  }
  const float inv = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  T* o = out + int64_t{blockIdx.x} * ldo;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    // Each thread re-reads only elements it wrote itself: no barrier needed.
    const float v = store ? Load(rr + i) : value(i);
    // HF: the normalized row is cast back to the model's dtype, then multiplied by the weight.
    const float normed = RoundTo<T>(v * inv);
    o[i] = FromFloat<T>(normed * ToFloat(weight[i]));
  }
}

// The vectorized twin of RmsNormKernel (same roundings): each thread keeps kVecs pieces of 8
// elements in registers and issues every load (x, residual, weight) before the first use, so a
// row costs about one memory latency; at batch 1 the scalar loop is a chain of dependent loads
// (~13 us a call, 64 calls a token on an 8B model).
// REQUIRES: dim and ldx, ldo multiples of 8, pointers 16-byte aligned, dim <= 8 * kVecs *
// blockDim.
// O: T, or __nv_fp8_e4m3 with out_scales (RmsNormF32ResidualFp8: the row rounded to T, then
// quantized as QuantizeRowsFp8 quantizes it). kScaled: x is an FP8 GEMM's unscaled output,
// scaled by xs as it is read (Fp8InputScales; T is bf16).
template <int kVecs, bool kScaled, typename T, typename R, typename O>
__global__ void RmsNormVecKernel(const T* x, int64_t ldx, R* residual, NormResidual mode,
                                 const int32_t* row_ids, int32_t dim, const T* weight, float eps,
                                 O* out, int64_t ldo, float* out_scales, const float* static_scale,
                                 Fp8InputScales xs) {
  static_assert(!kScaled || std::is_same_v<T, bf16>);
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = row_ids != nullptr ? row_ids[blockIdx.x] : blockIdx.x;
  const int nvec = dim / 8;
  const T* xr = x + row * ldx;
  R* rr = mode.add ? ResidualRow(residual, row, ldx) : nullptr;
  float v[kVecs][8], r[kVecs][8];
  Vec8<T> wv[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < nvec) {
      Load8(xr + 8 * i, v[j]);
      if (rr != nullptr && !mode.init) LoadResidual8(rr, ldx, i, r[j]);
      wv[j] = reinterpret_cast<const Vec8<T>*>(weight)[i];
    }
  }
  const float rs = kScaled ? xs.row[row] : 0.0f;
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= nvec) continue;
    if constexpr (kScaled) ScaleInput8(xs, rs, 8 * i, v[j]);
    if (rr != nullptr) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = RoundSum((mode.init ? 0.0f : r[j][e]) + v[j][e], rr);
      if (row_ids == nullptr) StoreResidual8(rr, ldx, i, v[j]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sum_sq += v[j][e] * v[j][e];
  }
  const float inv = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  O* o = out + int64_t{blockIdx.x} * ldo;
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= nvec) continue;
    float(&y)[8] = v[j];  // the normalized row replaces the sum (kept for the FP8 pass)
    // HF: the normalized row is cast back to the model's dtype, then multiplied by the weight.
    // Rounded in pairs (RoundPairs: one packing cvt for two values instead of a conversion a
    // value; the same values, fewer instructions, no time change measured on its own).
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] *= inv;
    RoundPairs<T>(y);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 w = PairToFloat2<T>(wv[j].h[e]);
      y[2 * e] *= w.x;
      y[2 * e + 1] *= w.y;
    }
    if constexpr (std::is_same_v<O, T>) {
      Store8(o + 8 * i, y);
    } else {
      // The row's amax over the unrounded values, rounded once (as SiluMulFp8's); the values
      // rounded as QuantizeRowsFp8 would read them back.
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(y[e]));
      RoundPairs<T>(y);
    }
  }
  if constexpr (!std::is_same_v<O, T>) {
    amax = RoundTo<T>(amax);
    const Divisor scale = MakeDivisor(Fp8RowScale(amax, static_scale, out_scales + blockIdx.x));
    WithDivisor(scale, [&]<bool kFast>() {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < nvec) StoreFp8x8<kFast>(o + 8 * i, v[j], scale);
      }
    });
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether s can scale a T input (Fp8InputScales): none asked for, or bf16 with 16-byte aligned
// vectors.
template <typename T>
bool InputScalesOk(const Fp8InputScales& s) {
  if (s.row == nullptr) return true;
  return std::is_same_v<T, bf16> && s.col != nullptr && Aligned16(s.col) &&
         (s.bias == nullptr || Aligned16(s.bias));
}

// O: T, or __nv_fp8_e4m3 with out_scales (the vectorized kernel only).
template <typename T, typename R, typename O = T>
cudaError_t LaunchRmsNorm(const T* x, int64_t ldx, R* residual, NormResidual mode,
                          const int32_t* row_ids, int32_t num_rows, int32_t dim, const T* weight,
                          float eps, O* out, int64_t ldo, cudaStream_t stream,
                          float* out_scales = nullptr, const float* static_scale = nullptr,
                          const Fp8InputScales& x_scales = {}) {
  constexpr bool kFp8Out = !std::is_same_v<O, T>;
  constexpr bool k24 = std::is_same_v<R, Residual24>;
  if (num_rows == 0) return cudaSuccess;
  if (dim <= 0 || dim > kNormMaxDim) return cudaErrorInvalidValue;
  const bool out_aligned = kFp8Out ? reinterpret_cast<uintptr_t>(out) % 8 == 0 : Aligned16(out);
  // A Residual24 row's planes start 16-byte aligned when ldx is a multiple of 16.
  const bool vec = dim % 8 == 0 && ldx % (k24 ? 16 : 8) == 0 && ldo % 8 == 0 && Aligned16(x) &&
                   out_aligned && Aligned16(weight) && (residual == nullptr || Aligned16(residual));
  if ((kFp8Out || k24) && (!vec || (kFp8Out && out_scales == nullptr))) {
    return cudaErrorInvalidValue;
  }
  const bool scaled = x_scales.row != nullptr;
  if (scaled && (!vec || !InputScalesOk<T>(x_scales) || out_scales == x_scales.row)) {
    return cudaErrorInvalidValue;
  }
  if constexpr (!kFp8Out && !k24) {
    if (!vec) {
      return LaunchChained(RmsNormKernel<T, R>, num_rows, kNormThreads, 0, stream, x, ldx, residual,
                           mode, row_ids, dim, weight, eps, out, ldo);
    }
  }
  const int nvec = dim / 8;
  const int threads = nvec <= 128 ? 128 : kNormThreads;
  const int vecs = (nvec + threads - 1) / threads;  // <= 6 for dim <= kNormMaxDim
  auto launch = [&]<int kVecs>() {
    auto run = [&](auto kernel) {
      return LaunchChained(kernel, num_rows, threads, 0, stream, x, ldx, residual, mode, row_ids,
                           dim, weight, eps, out, ldo, out_scales, static_scale, x_scales);
    };
    // Only bf16 has the scaled instance (InputScalesOk).
    if constexpr (std::is_same_v<T, bf16>) {
      if (scaled) return run(RmsNormVecKernel<kVecs, true, T, R, O>);
    }
    return run(RmsNormVecKernel<kVecs, false, T, R, O>);
  };
  switch (vecs) {
    case 1:
      return launch.template operator()<1>();
    case 2:
      return launch.template operator()<2>();
    case 3:
      return launch.template operator()<3>();
    case 4:
      return launch.template operator()<4>();
    default:
      return launch.template operator()<6>();
  }
}

// Blocks of one token's (head, pair) work items: one item per thread, so a decode step's few
// tokens still spread over several SMs instead of looping inside one block.
constexpr int kRopeThreads = 128;

// kScaled: qkv holds the unscaled sums, scaled by a.qkv_scales as they are read (T is bf16).
// Both kernels take tokens token0 + blockIdx.x (the decode rows and the prompt rows of a step go
// in two launches when the prompt rows' q becomes codes: RopeKvArgsT::q_codes).
template <bool kScaled, typename T, typename C>
__global__ void RopeStoreKvKernel(RopeKvArgsT<T, C> a, int32_t token0) {
  static_assert(!kScaled || std::is_same_v<T, bf16>);
  const int t = token0 + blockIdx.x;
  const int half = a.head_dim / 2;
  const int total_heads = a.num_heads + 2 * a.num_kv_heads;
  // Step inputs, no kernel's output (launch.cuh): read before PdlWait, overlapping their round
  // trip with the kernel before.
  const float pos = static_cast<float>(a.positions[t]);
  const int64_t slot = a.slot_mapping != nullptr ? a.slot_mapping[t] : -1;
  PdlWait();
  PdlLaunchDependents();
  T* row = a.qkv + int64_t{t} * a.ld;
  // One thread per (head, pair) for q and k heads, per element pair for v heads.
  for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < total_heads * half;
       idx += gridDim.y * blockDim.x) {
    const int head = idx / half;
    const int i = idx % half;
    T* h = row + int64_t{head} * a.head_dim;
    const int i0 = a.interleaved ? 2 * i : i;
    const int i1 = a.interleaved ? 2 * i + 1 : i + half;
    float x0 = ToFloat(h[i0]);
    float x1 = ToFloat(h[i1]);
    if constexpr (kScaled) {
      const Fp8InputScales& qs = a.qkv_scales;
      const float rs = qs.row[t];
      const int64_t c0 = int64_t{head} * a.head_dim + i0, c1 = int64_t{head} * a.head_dim + i1;
      const float b0 = qs.bias != nullptr ? ToFloat(qs.bias[c0]) : 0.0f;
      const float b1 = qs.bias != nullptr ? ToFloat(qs.bias[c1]) : 0.0f;
      x0 = RoundTo<T>(dtype_internal::Fp8ScaledSum(x0, rs, qs.col[c0], b0));
      x1 = RoundTo<T>(dtype_internal::Fp8ScaledSum(x1, rs, qs.col[c1], b1));
    }
    rope_internal::RopeStorePair(a, row, head, i, i0, i1, pos, slot, x0, x1);
  }
}

// RopeStoreKvKernel over 8 pairs a thread: two 16-byte loads of qkv (the pairs' first and
// second elements: i and i + half, or 16 interleaved elements), 16-byte (T cache) or 8-byte
// (e4m3) stores, and cos / sin of the token's pos * inv_freq computed once per block into shared
// memory rather than once per head. The same arithmetic per pair as the scalar kernel. Its
// 2-byte accesses and per-pair sincosf reached ~30 % of the copy bandwidth on prompt steps.
// REQUIRES: head_dim a multiple of 16, at most 2 * kRopeVecMaxHalf; qkv and ld 16-byte aligned.
constexpr int kRopeVecMaxHalf = 256;
// Fewer tokens take the one-pair-a-thread kernel: its 8x the blocks start the work sooner, which
// the batch-1 decode step shows (H100, Llama-3.1-8B FP8: 3.484 ms, 3.490 with 8 pairs a thread).
constexpr int kRopeVecMinTokens = 16;

// Eight floats times inv as e4m3 codes, x[0] at the lowest address: the e4m3 prefill kernel's
// rounding of its Q rows (dtype_internal::E4m3x4 of each product).
__device__ __forceinline__ uint2 E4m3x8Times(const float (&x)[8], float inv) {
  return make_uint2(dtype_internal::E4m3x4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv),
                    dtype_internal::E4m3x4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv));
}

// kQCodes: the q heads go to a.q_codes as e4m3 codes (RopeKvArgsT; head_dim 128, so a head's 8
// pieces are 8 neighbouring lanes, whose amax three shuffles combine).
template <bool kScaled, bool kInterleaved, bool kQCodes, typename T, typename C>
__global__ void RopeStoreKvVec8Kernel(RopeKvArgsT<T, C> a, int32_t token0) {
  static_assert(!kScaled || std::is_same_v<T, bf16>);
  __shared__ float cos_t[kRopeVecMaxHalf], sin_t[kRopeVecMaxHalf];
  PdlWait();
  PdlLaunchDependents();
  const int t = token0 + blockIdx.x;
  const int half = a.head_dim / 2;
  const int vecs = half / 8;  // 8-pair pieces a head
  const int total_heads = a.num_heads + 2 * a.num_kv_heads;
  const float pos = static_cast<float>(a.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    sincosf(pos * a.inv_freq[i], &sin_t[i], &cos_t[i]);
  __syncthreads();
  const int64_t slot = a.slot_mapping != nullptr ? a.slot_mapping[t] : -1;
  T* row = a.qkv + int64_t{t} * a.ld;
  for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < total_heads * vecs;
       idx += gridDim.y * blockDim.x) {
    const int head = idx / vecs;
    const int v = idx % vecs;
    // x: the first 16 bytes, y: the second; pair e is (x[e], y[e]), or interleaved
    // (z(2e), z(2e + 1)) of z = x then y.
    const int off_x = kInterleaved ? 16 * v : 8 * v;
    const int off_y = kInterleaved ? 16 * v + 8 : half + 8 * v;
    T* h = row + int64_t{head} * a.head_dim;
    float x[8], y[8];
    auto z = [&](int j) -> float& { return j < 8 ? x[j] : y[j - 8]; };
    Load8(h + off_x, x);
    Load8(h + off_y, y);
    if constexpr (kScaled) {
      const float rs = a.qkv_scales.row[t];
      ScaleInput8(a.qkv_scales, rs, int64_t{head} * a.head_dim + off_x, x);
      ScaleInput8(a.qkv_scales, rs, int64_t{head} * a.head_dim + off_y, y);
    }
    if (head < a.num_heads + a.num_kv_heads) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int j0 = kInterleaved ? 2 * e : e, j1 = kInterleaved ? 2 * e + 1 : 8 + e;
        const float c = cos_t[8 * v + e], s = sin_t[8 * v + e];
        RotatePair(c, s, z(j0), z(j1));
      }
    }
    if constexpr (kQCodes) {
      // Every lane of the warp's active groups takes part in the shuffles (a group of 8 lanes is
      // one head; the items end on a multiple of 8).
      float amax = 0.0f;
      if (head < a.num_heads) {
        RoundPairs<T>(x);
        RoundPairs<T>(y);
#pragma unroll
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fmaxf(fabsf(x[e]), fabsf(y[e])));
      }
      const unsigned lanes = __activemask();
      amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, 2));
      amax = fmaxf(amax, __shfl_xor_sync(lanes, amax, 4));
      if (head < a.num_heads) {
        const float inv = amax > 0.0f ? kFp8Max / amax : 1.0f;
        __nv_fp8_e4m3* codes =
            a.q_codes + int64_t{t} * a.num_heads * a.head_dim + int64_t{head} * a.head_dim;
        *reinterpret_cast<uint2*>(codes + off_x) = E4m3x8Times(x, inv);
        *reinterpret_cast<uint2*>(codes + off_y) = E4m3x8Times(y, inv);
        if (v == 0) {
          a.q_code_scales[int64_t{t} * a.num_heads + head] = amax > 0.0f ? amax / kFp8Max : 1.0f;
        }
        continue;
      }
    }
    if (head < a.num_heads) {
      Store8(h + off_x, x);
      Store8(h + off_y, y);
    } else if (slot >= 0) {
      float scale;
      C* dst = KvCacheRow(a, head, slot, &scale);
      if constexpr (kIsFp8<C>) {
        // RoundTo<T> then the IEEE quotient, as the scalar kernel.
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = RoundTo<T>(x[e]), y[e] = RoundTo<T>(y[e]);
        const Divisor d = MakeDivisor(scale);
        WithDivisor(d, [&]<bool kFast>() {
          StoreFp8x8<kFast>(dst + off_x, x, d);
          StoreFp8x8<kFast>(dst + off_y, y, d);
        });
      } else {
        Store8(dst + off_x, x);
        Store8(dst + off_y, y);
      }
    }
  }
}

// silu(g) * u at HF's rounding points: act_fn(gate) is rounded to the model's dtype before the
// product with up.
template <typename T>
__device__ __forceinline__ T SiluTimes(T g, T u) {
  return FromFloat<T>(SiluTimesExact<T>(ToFloat(g), ToFloat(u)));
}

// Rows on the grid's x (up to 2^31 - 1; y stops at 65535), column blocks on y.
template <typename T>
__global__ void SiluMulKernel(const T* gate_up, int64_t ld, int32_t dim, T* out, int64_t ldo) {
  PdlWait();
  PdlLaunchDependents();
  const T* g = gate_up + int64_t{blockIdx.x} * ld;
  const T* u = g + dim;
  T* o = out + int64_t{blockIdx.x} * ldo;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < dim; i += gridDim.y * blockDim.x) {
    o[i] = SiluTimes(g[i], u[i]);
  }
}

// SiluMulKernel over 8 elements a thread (16-byte loads and stores), for rows whose dim and
// strides are multiples of 8: the scalar kernel's 2-byte accesses reached ~40 % of the copy
// bandwidth on prefill-sized inputs.
// kRuns: gate_up in GateUpLayout::kRunsOf8 (piece c of gate and of up side by side).
template <bool kRuns, typename T>
__global__ void SiluMulVec8Kernel(const T* gate_up, int64_t ld, int32_t dim, T* out, int64_t ldo) {
  PdlWait();
  PdlLaunchDependents();
  const auto* row = reinterpret_cast<const uint4*>(gate_up + int64_t{blockIdx.x} * ld);
  const auto* u =
      kRuns ? row + 1 : reinterpret_cast<const uint4*>(gate_up + int64_t{blockIdx.x} * ld + dim);
  auto* o = reinterpret_cast<uint4*>(out + int64_t{blockIdx.x} * ldo);
  constexpr int kStep = kRuns ? 2 : 1;  // 16-byte pieces from one gate piece to the next
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < dim / 8; c += gridDim.y * blockDim.x) {
    const uint4 gv = row[kStep * c];
    const uint4 uv = u[kStep * c];
    const T* ge = reinterpret_cast<const T*>(&gv);
    const T* ue = reinterpret_cast<const T*>(&uv);
    uint4 ov;
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = SiluTimes(ge[k], ue[k]);
    o[c] = ov;
  }
}

// SiluMulVec8Kernel's row quantized to e4m3 (SiluMulFp8): one block per row, each thread
// keeping its kVecs pieces of 8 products in registers, as pairs of T (they are T values),
// between the amax and the codes (a second pass over the row would miss L2 on prompt steps: a
// CTA's row is up to 64 KiB of gate_up). REQUIRES: dim / 8 <= kVecs * blockDim.x. kScaled:
// gate_up holds the unscaled sums, scaled by gs as they are read (T is bf16).
template <int kVecs, bool kScaled, typename T>
__global__ void SiluMulFp8Kernel(const T* gate_up, int64_t ld, int32_t dim, __nv_fp8_e4m3* out,
                                 int64_t ldo, float* out_scales, const float* static_scale,
                                 Fp8InputScales gs) {
  static_assert(!kScaled || std::is_same_v<T, bf16>);
  PdlWait();
  PdlLaunchDependents();
  const T* g = gate_up + int64_t{blockIdx.x} * ld;
  const T* u = g + dim;
  __nv_fp8_e4m3* o = out + int64_t{blockIdx.x} * ldo;
  const int nvec = dim / 8;
  Vec8<T> gv[kVecs], uv[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < nvec) {
      gv[j] = reinterpret_cast<const Vec8<T>*>(g)[i];
      uv[j] = reinterpret_cast<const Vec8<T>*>(u)[i];
    }
  }
  const float rs = kScaled ? gs.row[blockIdx.x] : 0.0f;
  // The row's amax over the unrounded products, rounded once: rounding to nearest is monotonic
  // and odd, so max |round(p)| = round(max |p|), the amax of the rounded products.
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= nvec) continue;
    float gf[8], uf[8];
    Widen8(gv[j], gf);
    Widen8(uv[j], uf);
    if constexpr (kScaled) {
      ScaleInput8(gs, rs, 8 * i, gf);
      ScaleInput8(gs, rs, dim + 8 * i, uf);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) gf[e] = Silu(gf[e]);
    RoundPairs<T>(gf);  // HF's act_fn output
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      gf[e] *= uf[e];
      amax = fmaxf(amax, fabsf(gf[e]));
    }
    gv[j] = Pack8<T>(gf);  // the products, rounded, replace the gate values
  }
  amax = RoundTo<T>(amax);
  const Divisor scale = MakeDivisor(Fp8RowScale(amax, static_scale, out_scales + blockIdx.x));
  WithDivisor(scale, [&]<bool kFast>() {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i >= nvec) continue;
      float y[8];
      Widen8(gv[j], y);
      StoreFp8x8<kFast>(o + 8 * i, y, scale);
    }
  });
}

template <typename T>
__global__ void FloatToKernel(const float* in, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = FromFloat<T>(in[i]);
  }
}

// The launchers behind the public overloads (one per activation type).

template <typename T>
cudaError_t LaunchEmbedding(const int32_t* ids, int32_t num_tokens, const T* table, int32_t hidden,
                            T* out, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  return LaunchChained(EmbeddingKernel<T>, num_tokens, 128, 0, stream, ids, table, hidden, out);
}

// O: T, or __nv_fp8_e4m3 with out_scales.
template <typename T, typename O>
cudaError_t LaunchRmsNormF32Residual(const T* x, int64_t ldx, float* residual, bool init,
                                     const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                     const T* weight, float eps, O* out, int64_t ldo,
                                     cudaStream_t stream, float* out_scales = nullptr,
                                     const float* static_scale = nullptr,
                                     const Fp8InputScales& x_scales = {}) {
  if (residual == nullptr || (init && row_ids != nullptr)) return cudaErrorInvalidValue;
  return LaunchRmsNorm(x, ldx, residual, NormResidual{true, init}, row_ids, num_rows, dim, weight,
                       eps, out, ldo, stream, out_scales, static_scale, x_scales);
}

// Over the 24-bit stream (RmsNormResidual24 / RmsNormResidual24Fp8).
template <typename T, typename O>
cudaError_t LaunchRmsNormResidual24(const T* x, int64_t ldx, void* residual, bool init,
                                    const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                    const T* weight, float eps, O* out, int64_t ldo,
                                    cudaStream_t stream, float* out_scales = nullptr,
                                    const float* static_scale = nullptr,
                                    const Fp8InputScales& x_scales = {}) {
  if (residual == nullptr || (init && row_ids != nullptr)) return cudaErrorInvalidValue;
  return LaunchRmsNorm(x, ldx, static_cast<Residual24*>(residual), NormResidual{true, init},
                       row_ids, num_rows, dim, weight, eps, out, ldo, stream, out_scales,
                       static_scale, x_scales);
}

template <typename T, typename C>
cudaError_t LaunchRopeStoreKv(const RopeKvArgsT<T, C>& args, cudaStream_t stream) {
  if (!rope_internal::CacheScalesOk(args) || !InputScalesOk<T>(args.qkv_scales)) {
    return cudaErrorInvalidValue;
  }
  if (args.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int total_heads = args.num_heads + 2 * args.num_kv_heads;
  const bool aligned = args.head_dim % 16 == 0 && args.head_dim / 2 <= kRopeVecMaxHalf &&
                       args.ld % 8 == 0 && Aligned16(args.qkv) && Aligned16(args.k_cache) &&
                       Aligned16(args.v_cache) && Aligned16(args.qkv_scales.col) &&
                       Aligned16(args.qkv_scales.bias);
  const bool codes = args.q_codes != nullptr;
  if (codes && (!kIsFp8<C> || args.head_dim != 128 || !aligned || !Aligned16(args.q_codes) ||
                args.q_code_scales == nullptr || args.q_tokens < 0)) {
    return cudaErrorInvalidValue;
  }
  // Tokens [token0, token0 + count); q as codes (kQCodes).
  auto launch = [&](int32_t token0, int32_t count, bool q_codes) -> cudaError_t {
    if (count == 0) return cudaSuccess;
    if ((count >= kRopeVecMinTokens && aligned) || q_codes) {
      const int items = total_heads * (args.head_dim / 16);
      const dim3 grid(count, (items + kRopeThreads - 1) / kRopeThreads);
      auto run = [&]<bool kScaled, bool kQCodes>() {
        return args.interleaved
                   ? LaunchChained(RopeStoreKvVec8Kernel<kScaled, true, kQCodes, T, C>, grid,
                                   kRopeThreads, 0, stream, args, token0)
                   : LaunchChained(RopeStoreKvVec8Kernel<kScaled, false, kQCodes, T, C>, grid,
                                   kRopeThreads, 0, stream, args, token0);
      };
      auto run_scaled = [&]<bool kQCodes>() {
        if constexpr (std::is_same_v<T, bf16>) {
          if (args.qkv_scales.row != nullptr) return run.template operator()<true, kQCodes>();
        }
        return run.template operator()<false, kQCodes>();
      };
      if constexpr (kIsFp8<C>) {
        if (q_codes) return run_scaled.template operator()<true>();
      }
      return run_scaled.template operator()<false>();
    }
    const int items = total_heads * (args.head_dim / 2);
    const dim3 grid(count, (items + kRopeThreads - 1) / kRopeThreads);
    if constexpr (std::is_same_v<T, bf16>) {
      if (args.qkv_scales.row != nullptr) {
        return LaunchChained(RopeStoreKvKernel<true, T, C>, grid, kRopeThreads, 0, stream, args,
                             token0);
      }
    }
    return LaunchChained(RopeStoreKvKernel<false, T, C>, grid, kRopeThreads, 0, stream, args,
                         token0);
  };
  const int32_t q_tokens = codes ? std::min(args.q_tokens, args.num_tokens) : args.num_tokens;
  if (cudaError_t e = launch(0, q_tokens, false); e != cudaSuccess) return e;
  return launch(q_tokens, args.num_tokens - q_tokens, true);
}

template <typename T>
cudaError_t LaunchSiluMul(const T* gate_up, int64_t ld, int32_t num_rows, int32_t dim, T* out,
                          int64_t ldo, cudaStream_t stream, GateUpLayout layout) {
  const bool vec8 =
      dim % 8 == 0 && ld % 8 == 0 && ldo % 8 == 0 && Aligned16(gate_up) && Aligned16(out);
  const bool runs = layout == GateUpLayout::kRunsOf8;
  if (runs && !vec8) return cudaErrorInvalidValue;
  if (num_rows == 0) return cudaSuccess;
  const int threads = 256;
  if (vec8) {
    const dim3 grid(num_rows, (dim / 8 + threads - 1) / threads);
    return runs ? LaunchChained(SiluMulVec8Kernel<true, T>, grid, threads, 0, stream, gate_up, ld,
                                dim, out, ldo)
                : LaunchChained(SiluMulVec8Kernel<false, T>, grid, threads, 0, stream, gate_up, ld,
                                dim, out, ldo);
  }
  const dim3 grid(num_rows, (dim + threads - 1) / threads);
  return LaunchChained(SiluMulKernel<T>, grid, threads, 0, stream, gate_up, ld, dim, out, ldo);
}

// SiluMulFp8's pieces of 8 values a thread, at most (fewer for short rows): the block takes
// dim / 8 / kSiluFp8MaxVecs threads. H100, 16,384 rows of 14,336, scaled inputs: 4 pieces (448
// threads, 60 registers, two blocks an SM) 670 us, 8 (224 threads) 862 us, 2 (896) 858 us;
// the kernel before (256 threads of 7 pieces held in float) 829 us.
constexpr int kSiluFp8MaxVecs = 4;

template <typename T>
cudaError_t LaunchSiluMulFp8(const T* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                             __nv_fp8_e4m3* out, int64_t ldo, float* out_scales,
                             const float* static_scale, cudaStream_t stream,
                             const Fp8InputScales& gs) {
  if (num_rows == 0) return cudaSuccess;
  if (dim % 8 != 0 || ld % 8 != 0 || ldo % 8 != 0 || !Aligned16(gate_up) ||
      reinterpret_cast<uintptr_t>(out) % 8 != 0 || out_scales == nullptr || !InputScalesOk<T>(gs) ||
      (gs.row != nullptr && out_scales == gs.row)) {
    return cudaErrorInvalidValue;
  }
  // 8 to 8 * kSiluFp8MaxVecs values a thread in registers; dim up to 8 * kSiluFp8MaxVecs * 1024.
  const int nvec = dim / 8;
  int threads = (nvec + kSiluFp8MaxVecs - 1) / kSiluFp8MaxVecs;
  threads = std::clamp((threads + 31) / 32 * 32, 128, 1024);
  const int vecs = (nvec + threads - 1) / threads;
  if (vecs > 8) return cudaErrorInvalidValue;
  auto launch = [&]<int kVecs>() {
    auto run = [&](auto kernel) {
      return LaunchChained(kernel, num_rows, threads, 0, stream, gate_up, ld, dim, out, ldo,
                           out_scales, static_scale, gs);
    };
    // Only bf16 has the scaled instance (InputScalesOk).
    if constexpr (std::is_same_v<T, bf16>) {
      if (gs.row != nullptr) return run(SiluMulFp8Kernel<kVecs, true, T>);
    }
    return run(SiluMulFp8Kernel<kVecs, false, T>);
  };
  if (vecs <= 1) return launch.template operator()<1>();
  if (vecs <= 2) return launch.template operator()<2>();
  if (vecs <= 4) return launch.template operator()<4>();
  return launch.template operator()<8>();
}

template <typename T>
cudaError_t LaunchFloatTo(const float* in, int64_t n, T* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  FloatToKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(in, n,
                                                                                            out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t EmbeddingLookup(const int32_t* ids, int32_t num_tokens, const bf16* table,
                            int32_t hidden, bf16* out, cudaStream_t stream) {
  return LaunchEmbedding(ids, num_tokens, table, hidden, out, stream);
}
cudaError_t EmbeddingLookup(const int32_t* ids, int32_t num_tokens, const __half* table,
                            int32_t hidden, __half* out, cudaStream_t stream) {
  return LaunchEmbedding(ids, num_tokens, table, hidden, out, stream);
}

cudaError_t RmsNorm(const bf16* x, int64_t ldx, bf16* residual, const int32_t* row_ids,
                    int32_t num_rows, int32_t dim, const bf16* weight, float eps, bf16* out,
                    int64_t ldo, cudaStream_t stream) {
  return LaunchRmsNorm(x, ldx, residual, NormResidual{residual != nullptr, false}, row_ids,
                       num_rows, dim, weight, eps, out, ldo, stream);
}
cudaError_t RmsNorm(const __half* x, int64_t ldx, __half* residual, const int32_t* row_ids,
                    int32_t num_rows, int32_t dim, const __half* weight, float eps, __half* out,
                    int64_t ldo, cudaStream_t stream) {
  return LaunchRmsNorm(x, ldx, residual, NormResidual{residual != nullptr, false}, row_ids,
                       num_rows, dim, weight, eps, out, ldo, stream);
}

cudaError_t RmsNormF32Residual(const bf16* x, int64_t ldx, float* residual, bool init,
                               const int32_t* row_ids, int32_t num_rows, int32_t dim,
                               const bf16* weight, float eps, bf16* out, int64_t ldo,
                               cudaStream_t stream) {
  return LaunchRmsNormF32Residual(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                  ldo, stream);
}
cudaError_t RmsNormF32Residual(const __half* x, int64_t ldx, float* residual, bool init,
                               const int32_t* row_ids, int32_t num_rows, int32_t dim,
                               const __half* weight, float eps, __half* out, int64_t ldo,
                               cudaStream_t stream) {
  return LaunchRmsNormF32Residual(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                  ldo, stream);
}

cudaError_t RmsNormF32ResidualFp8(const bf16* x, int64_t ldx, float* residual, bool init,
                                  const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                  const bf16* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* out_scales, const float* static_scale, cudaStream_t stream,
                                  const Fp8InputScales& x_scales) {
  return LaunchRmsNormF32Residual(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                  ldo, stream, out_scales, static_scale, x_scales);
}
cudaError_t RmsNormF32ResidualFp8(const __half* x, int64_t ldx, float* residual, bool init,
                                  const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                  const __half* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                  float* out_scales, const float* static_scale, cudaStream_t stream,
                                  const Fp8InputScales& x_scales) {
  return LaunchRmsNormF32Residual(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                  ldo, stream, out_scales, static_scale, x_scales);
}

cudaError_t RmsNormResidual24(const bf16* x, int64_t ldx, void* residual, bool init,
                              const int32_t* row_ids, int32_t num_rows, int32_t dim,
                              const bf16* weight, float eps, bf16* out, int64_t ldo,
                              cudaStream_t stream) {
  return LaunchRmsNormResidual24(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                 ldo, stream);
}
cudaError_t RmsNormResidual24(const __half* x, int64_t ldx, void* residual, bool init,
                              const int32_t* row_ids, int32_t num_rows, int32_t dim,
                              const __half* weight, float eps, __half* out, int64_t ldo,
                              cudaStream_t stream) {
  return LaunchRmsNormResidual24(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                 ldo, stream);
}

cudaError_t RmsNormResidual24Fp8(const bf16* x, int64_t ldx, void* residual, bool init,
                                 const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                 const bf16* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                 float* out_scales, const float* static_scale, cudaStream_t stream,
                                 const Fp8InputScales& x_scales) {
  return LaunchRmsNormResidual24(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                 ldo, stream, out_scales, static_scale, x_scales);
}
cudaError_t RmsNormResidual24Fp8(const __half* x, int64_t ldx, void* residual, bool init,
                                 const int32_t* row_ids, int32_t num_rows, int32_t dim,
                                 const __half* weight, float eps, __nv_fp8_e4m3* out, int64_t ldo,
                                 float* out_scales, const float* static_scale, cudaStream_t stream,
                                 const Fp8InputScales& x_scales) {
  return LaunchRmsNormResidual24(x, ldx, residual, init, row_ids, num_rows, dim, weight, eps, out,
                                 ldo, stream, out_scales, static_scale, x_scales);
}

cudaError_t RopeStoreKv(const RopeKvArgs& args, cudaStream_t stream) {
  return LaunchRopeStoreKv(args, stream);
}
cudaError_t RopeStoreKv(const RopeKvArgsT<__half>& args, cudaStream_t stream) {
  return LaunchRopeStoreKv(args, stream);
}
cudaError_t RopeStoreKv(const RopeKvArgsFp8T<bf16>& args, cudaStream_t stream) {
  return LaunchRopeStoreKv(args, stream);
}
cudaError_t RopeStoreKv(const RopeKvArgsFp8T<__half>& args, cudaStream_t stream) {
  return LaunchRopeStoreKv(args, stream);
}

cudaError_t SiluMul(const bf16* gate_up, int64_t ld, int32_t num_rows, int32_t dim, bf16* out,
                    int64_t ldo, cudaStream_t stream, GateUpLayout layout) {
  return LaunchSiluMul(gate_up, ld, num_rows, dim, out, ldo, stream, layout);
}
cudaError_t SiluMul(const __half* gate_up, int64_t ld, int32_t num_rows, int32_t dim, __half* out,
                    int64_t ldo, cudaStream_t stream, GateUpLayout layout) {
  return LaunchSiluMul(gate_up, ld, num_rows, dim, out, ldo, stream, layout);
}

cudaError_t SiluMulFp8(const bf16* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                       __nv_fp8_e4m3* out, int64_t ldo, float* out_scales,
                       const float* static_scale, cudaStream_t stream,
                       const Fp8InputScales& gate_up_scales) {
  return LaunchSiluMulFp8(gate_up, ld, num_rows, dim, out, ldo, out_scales, static_scale, stream,
                          gate_up_scales);
}
cudaError_t SiluMulFp8(const __half* gate_up, int64_t ld, int32_t num_rows, int32_t dim,
                       __nv_fp8_e4m3* out, int64_t ldo, float* out_scales,
                       const float* static_scale, cudaStream_t stream,
                       const Fp8InputScales& gate_up_scales) {
  return LaunchSiluMulFp8(gate_up, ld, num_rows, dim, out, ldo, out_scales, static_scale, stream,
                          gate_up_scales);
}

cudaError_t FloatToBf16(const float* in, int64_t n, bf16* out, cudaStream_t stream) {
  return LaunchFloatTo(in, n, out, stream);
}
cudaError_t FloatToHalf(const float* in, int64_t n, __half* out, cudaStream_t stream) {
  return LaunchFloatTo(in, n, out, stream);
}

}  // namespace kiln::kernels
