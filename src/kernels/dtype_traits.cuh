// The activation element types of the kernels, bf16 (__nv_bfloat16) and fp16 (__half), behind
// one interface, so that each kernel has one body templated on its element type T and is
// explicitly instantiated for both. Internal to src/kernels (not a public header).
//
// Every conversion from float rounds to nearest even (the _rn intrinsics), so a kernel rounds
// at the same points to whichever type it runs in; arithmetic stays fp32.
//
// The FP8 KV cache's element type, __nv_fp8_e4m3 (e4m3fn: max 448, no infinity), is a storage
// type only: the kernels convert it to T on load (exact) and store e4m3 with saturation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace kiln::kernels::dtype_internal {

template <typename T>
struct Traits;

template <>
struct Traits<__nv_bfloat16> {
  using Pair = __nv_bfloat162;  // two elements, one 32-bit register
  __device__ static float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 FromFloat(float v) { return __float2bfloat16_rn(v); }
  __device__ static float2 PairToFloat2(Pair v) { return __bfloat1622float2(v); }
  __device__ static Pair FloatsToPair(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};

template <>
struct Traits<__half> {
  using Pair = __half2;
  __device__ static float ToFloat(__half v) { return __half2float(v); }
  __device__ static __half FromFloat(float v) { return __float2half_rn(v); }
  __device__ static float2 PairToFloat2(Pair v) { return __half22float2(v); }
  __device__ static Pair FloatsToPair(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};

template <typename T>
using Pair = typename Traits<T>::Pair;

template <typename T>
__device__ __forceinline__ float ToFloat(T v) {
  return Traits<T>::ToFloat(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  return Traits<T>::FromFloat(v);
}

// v rounded to T and widened back: where HF's module casts an fp32 intermediate to the model's
// dtype.
template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  return ToFloat(FromFloat<T>(v));
}

template <typename T>
__device__ __forceinline__ float2 PairToFloat2(Pair<T> v) {
  return Traits<T>::PairToFloat2(v);
}

template <typename T>
__device__ __forceinline__ Pair<T> FloatsToPair(float lo, float hi) {
  return Traits<T>::FloatsToPair(lo, hi);
}

// (lo, hi) rounded to T and packed in one register, lo in the low half: an mma operand.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  const Pair<T> v = FloatsToPair<T>(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 8 elements = one 16-byte access.
template <typename T>
struct alignas(16) Vec8 {
  Pair<T> h[4];
};

// v = the 8 elements of b widened to float, and back (each rounded to T).
template <typename T>
__device__ __forceinline__ void Unpack8(const Vec8<T>& b, float (&v)[8]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = PairToFloat2<T>(b.h[e]);
    v[2 * e] = f.x;
    v[2 * e + 1] = f.y;
  }
}
template <typename T>
__device__ __forceinline__ Vec8<T> Pack8(const float (&v)[8]) {
  Vec8<T> b;
#pragma unroll
  for (int e = 0; e < 4; ++e) b.h[e] = FloatsToPair<T>(v[2 * e], v[2 * e + 1]);
  return b;
}

// v = the 8 elements at p (16-byte aligned), widened to float.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&v)[8]) {
  Unpack8(*reinterpret_cast<const Vec8<T>*>(p), v);
}
// The same for 8 floats (32 bytes, 16-byte aligned), and 8 int32 converted to float (the INT8
// GEMM's exact sums; one rounding past 2^24).
__device__ __forceinline__ void Load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void Load8(const int32_t* p, float (&v)[8]) {
  const int4 a = reinterpret_cast<const int4*>(p)[0], b = reinterpret_cast<const int4*>(p)[1];
  const int32_t e[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(e[i]);
}

// v stored as the 8 elements at p (16-byte aligned): rounded to T, or as floats.
template <typename T>
__device__ __forceinline__ void Store8(T* p, const float (&v)[8]) {
  *reinterpret_cast<Vec8<T>*>(p) = Pack8<T>(v);
}
__device__ __forceinline__ void Store8(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Asks L2 for this block's share of [p, p + bytes): the next linear layer's weights, fetched
// as this block's own stream ends, while the other blocks finish and the small kernels between
// the two layers run, so that DRAM keeps streaming where it would idle (the norms, RoPE, attention
// and SiluMul of a batch-1 decode step move almost no bytes). The blocks of the (1-D) grid split
// the range into 16-byte-aligned slices; on sm_90+ thread 0 issues one bulk prefetch of its block's
// slice, before that every thread prefetches 128-byte lines. A hint: results never depend on it.
// REQUIRES: p 16-byte aligned, bytes a multiple of 16 (or <= 0: nothing).
__device__ __forceinline__ void PrefetchL2(const void* p, int64_t bytes) {
  if (bytes <= 0) return;
  const int64_t slice = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const int64_t begin = int64_t{blockIdx.x} * slice;
  if (begin >= bytes) return;
  const int64_t len = slice < bytes - begin ? slice : bytes - begin;
  const char* base = static_cast<const char*>(p) + begin;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    // evict_last: the lines must outlive the streaming (evict-first) loads around them.
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(base),
                 "r"(static_cast<uint32_t>(len)), "l"(policy)
                 : "memory");
  }
#else
  for (int64_t off = int64_t{threadIdx.x} * 128; off < len; off += int64_t{blockDim.x} * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
  }
#endif
}

// The weight stream of the skinny linear layers (one warp per weight row): wv[u] =
// row[base + 32 u] as 16-byte evict-first loads, zero past `chunks` 16-byte chunks.
template <int kU>
__device__ __forceinline__ void LoadChunks(const uint4* __restrict__ row, int64_t base,
                                           int64_t chunks, uint4 (&wv)[kU]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t c = base + u * 32;
    wv[u] = c < chunks ? __ldcs(row + c) : make_uint4(0, 0, 0, 0);
  }
}

// f.template operator()<M>() for the row count m in 1 ..= 8 (kernels templated on their rows,
// e.g. the skinny linear layers); m > 8 runs the 8-row instance.
template <typename F>
__host__ cudaError_t DispatchRows(int m, F&& f) {
  switch (m) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    case 4:
      return f.template operator()<4>();
    case 5:
      return f.template operator()<5>();
    case 6:
      return f.template operator()<6>();
    case 7:
      return f.template operator()<7>();
    default:
      return f.template operator()<8>();
  }
}

// Whether a cache element type C is the fp8 one (else it is the activation type T).
template <typename C>
inline constexpr bool kIsFp8 = std::is_same_v<C, __nv_fp8_e4m3>;

// Two e4m3 codes (x's low byte is the low element) as a pair of T in one register, exactly.
template <typename T>
__device__ __forceinline__ uint32_t E4m3x2ToPair(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x), __NV_E4M3);
  const uint32_t bits = uint32_t{h.x} | (uint32_t{h.y} << 16);
  if constexpr (std::is_same_v<T, __half>) {
    return bits;
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "T is __nv_bfloat16 or __half");
    // Every finite e4m3 value is a normal fp16 number (2^-9 .. 448) with at most 4 significant
    // bits, so its fp16 magnitude bits shifted right by 3 are the bf16 bits of value * 2^-112
    // (exponent bias 15 vs 127; the 3 bits dropped are zero), still normal; one exact bf16
    // multiply by 2^112 restores the value. Zero stays zero. Three instructions a pair instead of
    // fp16 -> fp32 -> bf16's three conversions. (The e4m3 NaN, never stored by the kernels,
    // comes out as ~1.3e5 rather than NaN.)
    const uint32_t b = ((bits >> 3) & 0x0fff0fffu) | (bits & 0x80008000u);
    constexpr uint32_t kTwoTo112 = 0x77807780u;  // bf16 2^112 twice
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&b),
                                     *reinterpret_cast<const __nv_bfloat162*>(&kTwoTo112));
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Eight e4m3 codes (8 bytes, lowest address first) as eight T (one 16-byte vector).
template <typename T>
__device__ __forceinline__ uint4 E4m3x8ToVec8(uint2 x) {
  return make_uint4(E4m3x2ToPair<T>(x.x & 0xffffu), E4m3x2ToPair<T>(x.x >> 16),
                    E4m3x2ToPair<T>(x.y & 0xffffu), E4m3x2ToPair<T>(x.y >> 16));
}

// The FP8 W8A8 activation scheme's constants (model/quantization.h, kept in step by quant_test
// against the CPU reference): a row's scale is max(amax / kFp8Max, kFp8MinScale).
inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp8MinScale = 1.0f / (kFp8Max * 512.0f);

// An FP8 GEMM's unscaled sum y made the linear layer's output value: y * row_scale *
// col_scale (+ bias) in fp32, each operation rounded on its own (no contraction into an FMA), so
// that kernels::ApplyFp8Scales and the consumers that fuse it (kernels/elementwise.h,
// Fp8InputScales) compute the same bits; the caller rounds the result to T.
__device__ __forceinline__ float Fp8ScaledSum(float y, float row_scale, float col_scale,
                                              float bias) {
  return __fadd_rn(__fmul_rn(__fmul_rn(y, row_scale), col_scale), bias);
}

// Four floats as e4m3 codes in one register (a the lowest byte), rounded to nearest, saturating
// at +-448: how the e4m3 prefill kernel rounds Q rows and P, and how RoPE makes the Q codes it
// hands that kernel (kernels/attention.h PrefillQCodes), so both give the same bytes.
__device__ __forceinline__ uint32_t E4m3x4(float a, float b, float c, float d) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
  return uint32_t{lo} | (uint32_t{hi} << 16);
}

// The e4m3 code of v, rounded to nearest even; |v| beyond 448 saturates to +-448 (never NaN).
__device__ __forceinline__ __nv_fp8_e4m3 ToE4m3Sat(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// silu(x) = x / (1 + e^-x) in five instructions: e^-x as __expf computes it but flushing
// results below 2^-126 to zero (1 + e^-x rounds to 1 either way), and the quotient as
// rcp.approx's product (__fdividef: within 2 ulps; 0 where 1 + e^-x passes 2^126, i.e. x below
// -87.3, where silu is below 1e-36). The IEEE division it replaced cost ~12 instructions with
// its range check, and SiluMulFp8 was bound by its instructions (docs/kernels.md). Shared by
// SiluMul* and Fp8GateUpSilu's epilogue, which must give the same bits.
__device__ __forceinline__ float Silu(float x) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  return __fdividef(x, 1.0f + e);
}

// silu(g) * u at HF's rounding points (act_fn(gate) rounded to the model's dtype before the
// product with up), for g and u already T values held as floats: the product as a float (a T
// value). SiluMul* (elementwise.cu) and FusedDecode.
template <typename T>
__device__ __forceinline__ float SiluTimesExact(float x, float u) {
  return RoundTo<T>(RoundTo<T>(Silu(x)) * u);
}

// (x0, x1) rotated by the angle of (c, s): x0 c - x1 s, x1 c + x0 s, each with one product
// rounded and the other fused, as nvcc contracted the plain expression in the first kernel (so
// the RoPE kernels (elementwise.cu) and FusedDecode give the same bits as it did).
__device__ __forceinline__ void RotatePair(float c, float s, float& x0, float& x1) {
  const float y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  const float y1 = __fmaf_rn(x1, c, __fmul_rn(x0, s));
  x0 = y0;
  x1 = y1;
}

}  // namespace kiln::kernels::dtype_internal
