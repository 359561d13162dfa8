// CPU dequantizers. Each block function mirrors gguf-py's numpy dequantize_blocks (gguf 0.19.0,
// gguf/quants.py) operation by operation, all in float32:
//   - fp16 scales are widened to f32 first (exact), then multiplied by f32 integers;
//   - a product is rounded to f32 before any addition or subtraction (numpy evaluates
//     `d * q + m` as two ufuncs; this file is compiled with -ffp-contract=off so the compiler
//     does not fuse them either);
//   - the sub-block scale is formed first ((d * sc) * q, not d * (sc * q)), as numpy does.
// Element order inside a block follows numpy's reshape/shift pattern; each function says it.
#include "model/dequant.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float Half(const uint8_t* p) { return F16ToF32(Load16(p)); }
inline float F(int v) { return static_cast<float>(v); }

// double -> float, rounding to nearest even like the hardware conversion numpy uses, with
// out-of-range values going to +-infinity explicitly (a plain cast of them is undefined in C++).
inline float F64ToF32(double v) {
  // The smallest magnitude that rounds to infinity: FLT_MAX plus half an ulp (a tie, and
  // FLT_MAX has an odd significand, so ties go up).
  constexpr double kOverflow = 0x1.ffffffp127;
  if (v >= kOverflow) return std::numeric_limits<float>::infinity();
  if (v <= -kOverflow) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// q4_0: [d f16][qs 16 B]. Element j < 16: low nibble of qs[j]; j >= 16: high nibble of qs[j-16].
void BlockQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * F((qs[j] & 0xF) - 8);
    y[j + 16] = d * F((qs[j] >> 4) - 8);
  }
}

// q4_1: [d f16][m f16][qs 16 B], nibble order as q4_0.
void BlockQ4_1(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const float lo = d * F(qs[j] & 0xF);
    const float hi = d * F(qs[j] >> 4);
    y[j] = lo + m;
    y[j + 16] = hi + m;
  }
}

// q5_0: [d f16][qh u32][qs 16 B]. Bit j of qh is bit 4 of element j.
void BlockQ5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = Load32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * F(lo - 16);
    y[j + 16] = d * F(hi - 16);
  }
}

// q5_1: [d f16][m f16][qh u32][qs 16 B].
void BlockQ5_1(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint32_t qh = Load32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    const float plo = d * F(lo);
    const float phi = d * F(hi);
    y[j] = plo + m;
    y[j + 16] = phi + m;
  }
}

// q8_0: [d f16][32 x int8].
void BlockQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = F(qs[j]) * d;
}

// q2_k: [scales 16 B][qs 64 B][d f16][dmin f16]. Element e = 128*h + 32*s + l holds bits
// 2s..2s+1 of qs[32*h + l]; sub-block e/16 uses scales[e/16] (low nibble scale, high min).
void BlockQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = Half(b + 80);
  const float dmin = Half(b + 82);
  float dl[16], ml[16];
  for (int i = 0; i < 16; ++i) {
    dl[i] = d * F(scales[i] & 0xF);
    ml[i] = dmin * F(scales[i] >> 4);
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
    const int q = (qs[32 * h + l] >> (2 * s)) & 3;
    const float p = dl[e >> 4] * F(q);
    y[e] = p - ml[e >> 4];
  }
}

// q3_k: [hmask 32 B][qs 64 B][scales 12 B][d f16]. 16 signed 6-bit scales: the low 4 bits of
// scale i are nibble i/8 of scales[i%8], the high 2 bits are bits 2*(i/4).. of scales[8+i%4].
// Element e = 128*h + 32*s + l: low 2 bits from qs[32*h + l] >> 2s; when bit e/32 of hmask[l]
// is clear, subtract 4.
void BlockQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int lo = (sc[i % 8] >> (4 * (i / 8))) & 0xF;
    const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    dl[i] = d * F((lo | (hi << 4)) - 32);
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
    const int ql = (qs[32 * h + l] >> (2 * s)) & 3;
    const int hbit = (hmask[l] >> (e >> 5)) & 1;
    y[e] = dl[e >> 4] * F(ql - (hbit ? 0 : 4));
  }
}

// The 8 scales and 8 mins (6 bits each) of q4_k / q5_k, packed in 12 bytes:
// sub-block j < 4: sc = s[j] & 63, min = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6
// << 4), min = (s[j+4] >> 4) | (s[j] >> 6 << 4).
void UnpackScaleMinK4(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 2) & 0x30);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
  }
}

// q4_k: [d f16][dmin f16][scales 12 B][qs 128 B]. Sub-block j (32 elements) takes nibble j%2 of
// qs[32*(j/2) + l].
void BlockQ4_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  int sc[8], mn[8];
  UnpackScaleMinK4(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    const float dl = d * F(sc[j]);
    const float ml = dmin * F(mn[j]);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const float p = dl * F((q[l] >> shift) & 0xF);
      y[32 * j + l] = p - ml;
    }
  }
}

// q5_k: [d f16][dmin f16][scales 12 B][qh 32 B][qs 128 B]. As q4_k, plus bit j of qh[l] as
// bit 4 of element l of sub-block j.
void BlockQ5_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  int sc[8], mn[8];
  UnpackScaleMinK4(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    const float dl = d * F(sc[j]);
    const float ml = dmin * F(mn[j]);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
      const float p = dl * F(v);
      y[32 * j + l] = p - ml;
    }
  }
}

// q6_k: [ql 128 B][qh 64 B][scales 16 x int8][d f16]. Element e = 128*h + 64*k + m (m < 64)
// takes nibble k of ql[64*h + m]; writing e = 128*h + 32*s + l, its high 2 bits are bits 2s..
// of qh[32*h + l]. Sub-block e/16 uses scales[e/16].
void BlockQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  float dl[16];
  for (int i = 0; i < 16; ++i) dl[i] = d * F(scales[i]);
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, k = (e >> 6) & 1, m = e & 63, s = (e >> 5) & 3, l = e & 31;
    const int lo = (ql[64 * h + m] >> (4 * k)) & 0xF;
    const int hi = (qh[32 * h + l] >> (2 * s)) & 3;
    y[e] = dl[e >> 4] * F((lo | (hi << 4)) - 32);
  }
}

// f16 -> f32 through a 256 KB table of all 65536 conversions (F16ToF32 branches per value;
// the table is ~4x faster on scalar f16 tensors). Built once, thread-safe.
void RunF16(const uint8_t* src, int64_t n, float* dst) {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t h = 0; h < t.size(); ++h) t[h] = F16ToF32(static_cast<uint16_t>(h));
    return t;
  }();
  for (int64_t i = 0; i < n; ++i) dst[i] = table[Load16(src + 2 * i)];
}

template <int kBlockSize, int kBlockBytes, void (*kBlock)(const uint8_t*, float*)>
void RunBlocks(const uint8_t* src, int64_t num_elements, float* dst) {
  const int64_t num_blocks = num_elements / kBlockSize;
  for (int64_t i = 0; i < num_blocks; ++i) kBlock(src + i * kBlockBytes, dst + i * kBlockSize);
}

// Scalars: element i of type T at src + i*sizeof(T), converted by `convert`.
template <typename T, typename Convert>
void RunScalars(const uint8_t* src, int64_t n, float* dst, Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    dst[i] = convert(v);
  }
}

}  // namespace

bool CanDequantizeToF32(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Status DequantizeToF32(DType dtype, const void* src_void, size_t src_bytes, int64_t num_elements,
                       float* dst) {
  const std::string name(DTypeName(dtype));
  if (!CanDequantizeToF32(dtype)) {
    return Unsupported("dequantizing " + name + " to f32 is not supported on the CPU");
  }
  Result<int64_t> expected = DTypeByteSize(dtype, num_elements);
  if (!expected.ok()) {
    return InvalidArgument("dequantize " + name + ": " + expected.status().message());
  }
  if (static_cast<uint64_t>(*expected) != src_bytes) {
    return InvalidArgument("dequantize " + name + ": " + std::to_string(num_elements) +
                           " elements take " + std::to_string(*expected) + " bytes, got " +
                           std::to_string(src_bytes));
  }
  const auto* src = static_cast<const uint8_t*>(src_void);
  const int64_t n = num_elements;
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, src_bytes);
      break;
    case DType::kF16:
      RunF16(src, n, dst);
      break;
    case DType::kBF16:
      RunScalars<uint16_t>(src, n, dst, BF16ToF32);
      break;
    case DType::kF64:
      RunScalars<double>(src, n, dst, F64ToF32);
      break;
    case DType::kF8E4M3:
      RunScalars<uint8_t>(src, n, dst, F8E4M3ToF32);
      break;
    case DType::kF8E5M2:
      RunScalars<uint8_t>(src, n, dst, F8E5M2ToF32);
      break;
    case DType::kI8:
      RunScalars<int8_t>(src, n, dst, [](int8_t v) { return static_cast<float>(v); });
      break;
    case DType::kI16:
      RunScalars<int16_t>(src, n, dst, [](int16_t v) { return static_cast<float>(v); });
      break;
    case DType::kI32:
      RunScalars<int32_t>(src, n, dst, [](int32_t v) { return static_cast<float>(v); });
      break;
    case DType::kI64:
      RunScalars<int64_t>(src, n, dst, [](int64_t v) { return static_cast<float>(v); });
      break;
    case DType::kQ4_0:
      RunBlocks<32, 18, BlockQ4_0>(src, n, dst);
      break;
    case DType::kQ4_1:
      RunBlocks<32, 20, BlockQ4_1>(src, n, dst);
      break;
    case DType::kQ5_0:
      RunBlocks<32, 22, BlockQ5_0>(src, n, dst);
      break;
    case DType::kQ5_1:
      RunBlocks<32, 24, BlockQ5_1>(src, n, dst);
      break;
    case DType::kQ8_0:
      RunBlocks<32, 34, BlockQ8_0>(src, n, dst);
      break;
    case DType::kQ2_K:
      RunBlocks<256, 84, BlockQ2_K>(src, n, dst);
      break;
    case DType::kQ3_K:
      RunBlocks<256, 110, BlockQ3_K>(src, n, dst);
      break;
    case DType::kQ4_K:
      RunBlocks<256, 144, BlockQ4_K>(src, n, dst);
      break;
    case DType::kQ5_K:
      RunBlocks<256, 176, BlockQ5_K>(src, n, dst);
      break;
    case DType::kQ6_K:
      RunBlocks<256, 210, BlockQ6_K>(src, n, dst);
      break;
    default:
      CHECK(false) << "unreachable: " << name;
  }
  return Status::Ok();
}

}  // namespace kiln
