// The activation element types of the kernels, bf16 (__nv_bfloat16) and fp16 (__half), behind
// one interface, so that each kernel has one body templated on its element type T and is
// explicitly instantiated for both. Internal to src/kernels (not a public header).
//
// Every conversion from float rounds to nearest even (the _rn intrinsics), so a kernel rounds
// at the same points to whichever type it runs in; arithmetic stays fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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

}  // namespace kiln::kernels::dtype_internal
