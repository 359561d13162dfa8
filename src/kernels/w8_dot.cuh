// The W8A16 dot product of the skinny linear layers (kernels::GemvFp8 / GemvInt8, quant.cu)
// and of FusedDecode (decode_fused.cu), shared so that both sum a row in the same order and give
// the same bits. Internal to src/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/dtype_traits.cuh"

namespace kiln::kernels::w8_internal {

using dtype_internal::PairToFloat2;

// The two codes a row quantizes to: e4m3 (Code = __nv_fp8_e4m3) and int8 (Code = int8_t).
template <typename Code>
constexpr bool kIsInt8 = std::is_same_v<Code, int8_t>;

// Weight codes i and i + 1 (i even) of a 16-byte load, exactly, in fp32.
template <typename Code>
__device__ __forceinline__ float2 CodePair(const uint4& w, int i) {
  if constexpr (kIsInt8<Code>) {
    // Byte b of word ^ 0x80808080 is code + 128; placed as the low mantissa byte of 2^23 it gives
    // 2^23 + code + 128 (one PRMT), minus 2^23 + 128 (one FADD): cheaper than I2F.
    const uint32_t word = reinterpret_cast<const uint32_t*>(&w)[i / 4] ^ 0x80808080u;
    const int b = i % 4;
    constexpr float kBias = 8388608.0f + 128.0f;
    return make_float2(__uint_as_float(__byte_perm(word, 0x4b000000u, 0x7540 + b)) - kBias,
                       __uint_as_float(__byte_perm(word, 0x4b000000u, 0x7540 + b + 1)) - kBias);
  } else {
    // e4m3 -> f16 is exact (fp16 holds every e4m3 value).
    const auto* wp = reinterpret_cast<const __nv_fp8x2_storage_t*>(&w);
    return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(wp[i / 2], __NV_E4M3)));
  }
}

// 16 one-byte weights (one 16-byte load) against 16 activations (two 16-byte loads), in fp32.
template <typename T, typename Code>
__device__ __forceinline__ float Dot16(const uint4& w, const uint4& x0, const uint4& x1) {
  const auto* xa = reinterpret_cast<const dtype_internal::Pair<T>*>(&x0);
  const auto* xb = reinterpret_cast<const dtype_internal::Pair<T>*>(&x1);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 wf = CodePair<Code>(w, 2 * i);
    const float2 xf = PairToFloat2<T>(i < 4 ? xa[i] : xb[i - 4]);
    s = fmaf(wf.x, xf.x, s);
    s = fmaf(wf.y, xf.y, s);
  }
  return s;
}

}  // namespace kiln::kernels::w8_internal
