// Element types: scalars (f32, f16, bf16, fp8, integers), packed int4, and GGUF block types.
//
// A dtype is stored in "blocks": block_size elements take block_bytes bytes. Scalars have
// block_size 1; packed int4 stores 2 elements in 1 byte; GGUF block types store 32 or 256
// elements with their own scales (layouts in docs/formats.md and src/model/dequant.h).
//
// The scalar conversions below round to nearest, ties to even, and follow PyTorch (c10) for the
// special values: f32 -> fp8 e4m3fn gives NaN (0x7f) for |x| >= 480 (this format has no
// infinity), f32 -> fp8 e5m2 gives infinity for |x| >= 61440 and NaN for NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/status.h"

namespace kiln {

enum class DType : uint8_t {
  // Scalars.
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // e4m3fn: bias 7, no infinity, 0x7f/0xff are NaN, max 448
  kF8E5M2,  // bias 15, IEEE-like with infinity, max 57344
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
  // Packed: two signed 4-bit values per byte, element 2i in the low nibble.
  kI4,
  // GGUF (ggml) block types.
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ8_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
};

inline constexpr int kNumDTypes = static_cast<int>(DType::kQ8_K) + 1;

struct DTypeInfo {
  std::string_view name;  // lower case: "f32", "bf16", "q4_k", ...
  int block_size;         // elements per block
  int block_bytes;        // bytes per block
  bool is_float;          // a scalar floating-point type
  bool is_block_quant;    // a GGUF block type with in-block scales
};

const DTypeInfo& GetDTypeInfo(DType dtype);
inline std::string_view DTypeName(DType dtype) { return GetDTypeInfo(dtype).name; }

// Parses a kiln dtype name (case-insensitive): "f32", "bf16", "fp8_e4m3", "q4_k", ...
// Also accepts the aliases "float32", "float16", "half", "bfloat16", "fp16", "fp32",
// "f8_e4m3", "float8_e4m3fn", "int8", "int4".
Result<DType> ParseDType(std::string_view name);

// Bytes taken by `num_elements` elements. Fails when num_elements is negative, not a multiple
// of the dtype's block size, or the byte count overflows int64.
Result<int64_t> DTypeByteSize(DType dtype, int64_t num_elements);

// ---- Scalar conversions (bit patterns in, bit patterns out) --------------------------------

inline uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace internal {

// Rounds a finite, non-negative f32 bit pattern to a float format with E exponent bits,
// M mantissa bits and exponent bias B, ties to even. Values past the largest finite number
// round into the all-ones exponent, which the callers turn into infinity or NaN.
template <int M, int B>
constexpr uint32_t RoundF32ToSmallFloat(uint32_t x) {
  const int32_t e32 = static_cast<int32_t>(x >> 23);
  const uint32_t mant = x & 0x7fffffu;
  const int32_t min_normal_e32 = 127 - B + 1;
  if (e32 < min_normal_e32) {
    // Subnormal (or zero) in the target: count units of 2^(1-B-M).
    if (e32 == 0) return 0;  // f32 subnormals are far below any target's smallest subnormal
    const uint32_t m = mant | 0x800000u;
    const int32_t shift = 151 - B - M - e32;
    if (shift > 24) return 0;  // below half a unit
    const uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    return r + ((rem > half || (rem == half && (r & 1))) ? 1 : 0);
  }
  constexpr int kDrop = 23 - M;
  const uint32_t r = (static_cast<uint32_t>(e32 - 127 + B) << M) | (mant >> kDrop);
  const uint32_t rem = x & ((1u << kDrop) - 1);
  constexpr uint32_t kHalf = 1u << (kDrop - 1);
  return r + ((rem > kHalf || (rem == kHalf && (r & 1))) ? 1 : 0);
}

}  // namespace internal

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int32_t e = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --e;
      }
      bits = sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // infinity, or NaN with its payload
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return F32FromBits(bits);
}

inline uint16_t F32ToF16(float f) {
  const uint32_t bits = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((x >> 13) & 0x3ffu);  // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  return sign | static_cast<uint16_t>(internal::RoundF32ToSmallFloat<10, 15>(x));
}

inline float BF16ToF32(uint16_t b) { return F32FromBits(static_cast<uint32_t>(b) << 16); }

inline uint16_t F32ToBF16(float f) {
  const uint32_t bits = F32Bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float F8E4M3ToF32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t man = v & 0x7u;
  if (exp == 0xf && man == 0x7) return F32FromBits(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    // Subnormal: man * 2^-9, exact in f32.
    const float mag = static_cast<float>(man) * (1.0f / 512.0f);
    return F32FromBits(sign | F32Bits(mag));
  }
  return F32FromBits(sign | ((exp + 120) << 23) | (man << 20));
}

inline uint8_t F32ToF8E4M3(float f) {
  const uint32_t bits = F32Bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x >= 0x43f00000u) return sign | 0x7fu;  // NaN, infinity and |x| >= 480 -> NaN
  return sign | static_cast<uint8_t>(internal::RoundF32ToSmallFloat<3, 7>(x));
}

inline float F8E5M2ToF32(uint8_t v) { return F16ToF32(static_cast<uint16_t>(v) << 8); }

inline uint8_t F32ToF8E5M2(float f) {
  const uint32_t bits = F32Bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (x >= 0x47800000u) return sign | 0x7cu;  // |x| >= 65536 (and infinity) -> infinity
  return sign | static_cast<uint8_t>(internal::RoundF32ToSmallFloat<2, 15>(x));
}

// Packed int4 (DType::kI4): two signed 4-bit values in [-8, 7] per byte, element 2i in the low
// nibble and element 2i+1 in the high nibble (two's complement), as AWQ/GPTQ-style kernels read
// them.
inline uint8_t PackI4(int lo, int hi) {
  DCHECK(lo >= -8 && lo <= 7 && hi >= -8 && hi <= 7);
  return static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
}
inline int UnpackI4Low(uint8_t b) { return static_cast<int>(static_cast<int8_t>(b << 4) >> 4); }
inline int UnpackI4High(uint8_t b) { return static_cast<int>(static_cast<int8_t>(b) >> 4); }

}  // namespace kiln
