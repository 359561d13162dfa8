// AVX2 kernels (simd.h): the 16 lanes as two ymm registers (lanes 0-7 and 8-15), a 1 x 4
// register block in Linear (8 ymm accumulators). Same arithmetic as simd_avx512.cc, lane by lane,
// so the results are bitwise the same; the decoders' exactness argument is the one given there.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"
#include "core/dtype.h"

// Everything from here to the pop is compiled for AVX2 + FMA + F16C.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace kiln::cpu::internal {
namespace {

struct Vec {
  __m256 lo;  // lanes 0..7
  __m256 hi;  // lanes 8..15

  static Vec Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec Load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec LoadPartial(const float* p, int n) {
    alignas(32) float tmp[16] = {};
    std::memcpy(tmp, p, n * sizeof(float));
    return {_mm256_load_ps(tmp), _mm256_load_ps(tmp + 8)};
  }
  static Vec Fma(Vec a, Vec b, Vec c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec Mul(Vec a, Vec b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static Vec Add(Vec a, Vec b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static Vec Set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  void Store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  static float Reduce(Vec a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);  // lanes l + (l + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [s4[0] + s4[2], s4[1] + s4[3]]
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
  }
};

constexpr int kTileRows = 1;
constexpr int kTileCols = 4;

// A block's fp16 scale d broadcast to 8 lanes, widened by the F16C instruction (exact, like
// F16ToF32, whose bit manipulation dominated the decode).
inline __m256 BroadcastHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(h)));
}

// Bytes p[0..8) and p[8..16) widened to int32.
inline __m256i Bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i SBytes8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Eight e4m3 codes p[0..8) to f32, exactly F8E4M3ToF32: the 7 magnitude bits shifted into an
// fp16's exponent and mantissa (eeee.mmm -> 0eeee.mmm0000000) give the value / 256 for normal and
// subnormal codes alike (fp16's bias is 8 more than e4m3's), widened exactly by F16C and scaled
// by 2^8 exactly; the NaN codes (magnitude 0x7f) are blended in as F8E4M3ToF32's NaN.
inline __m256 DecodeE4m3x8(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
  const __m128i half = _mm_or_si128(_mm_slli_epi16(mag, 7),
                                    _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(256.0f));
  const __m256 is_nan =
      _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f))));
  const __m256 nan = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                  _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_blendv_ps(v, nan, is_nan);
}

void DecodeRow(WeightFormat format, const uint8_t* src, int64_t cols, float* y) {
  const __m256i low4 = _mm256_set1_epi32(0xF);
  switch (format) {
    case WeightFormat::kF32:
      std::memcpy(y, src, cols * sizeof(float));
      return;
    case WeightFormat::kBF16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
      }
      for (; i < cols; ++i) y[i] = BF16ToF32(s[i]);
      return;
    }
    case WeightFormat::kF16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
      }
      for (; i < cols; ++i) y[i] = F16ToF32(s[i]);
      return;
    }
    case WeightFormat::kQ4_0:
      for (int64_t b = 0; b < cols / 32; ++b, src += 18, y += 32) {
        const __m256 d = BroadcastHalf(src);
        const __m256i eight = _mm256_set1_epi32(8);
        for (int h = 0; h < 2; ++h) {  // bytes 8h .. 8h + 7: elements 8h.. and 16 + 8h..
          const __m256i q = Bytes8(src + 2 + 8 * h);
          const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, low4), eight);
          const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
          _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
          _mm256_storeu_ps(y + 16 + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
        }
      }
      return;
    case WeightFormat::kQ4_1:
      for (int64_t b = 0; b < cols / 32; ++b, src += 20, y += 32) {
        const __m256 d = BroadcastHalf(src);
        const __m256 m = BroadcastHalf(src + 2);
        for (int h = 0; h < 2; ++h) {
          const __m256i q = Bytes8(src + 4 + 8 * h);
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(q, low4));
          const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
          _mm256_storeu_ps(y + 8 * h, _mm256_fmadd_ps(d, lo, m));
          _mm256_storeu_ps(y + 16 + 8 * h, _mm256_fmadd_ps(d, hi, m));
        }
      }
      return;
    case WeightFormat::kQ8_0:
      for (int64_t b = 0; b < cols / 32; ++b, src += 34, y += 32) {
        const __m256 d = BroadcastHalf(src);
        for (int h = 0; h < 4; ++h) {
          const __m256 q = _mm256_cvtepi32_ps(SBytes8(src + 2 + 8 * h));
          _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(q, d));
        }
      }
      return;
    case WeightFormat::kF8E4M3: {
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(y + i, DecodeE4m3x8(src + i));
      for (; i < cols; ++i) y[i] = F8E4M3ToF32(src[i]);
      return;
    }
    case WeightFormat::kI8: {
      const auto* q = reinterpret_cast<const int8_t*>(src);
      for (int64_t i = 0; i < cols; ++i) y[i] = static_cast<float>(q[i]);
      return;
    }
    case WeightFormat::kW4:  // needs its group parameters: cpu_ops.cc decodes it
      CHECK(false) << "w4a16 rows are decoded by cpu_ops.cc";
      return;
  }
}

void DecodeRowsAvx2(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out) {
  const int64_t row_bytes = WeightRowBytes(w.format, w.cols);
  for (int64_t r = 0; r < num_rows; ++r) {
    DecodeRow(w.format, w.data + (row_begin + r) * row_bytes, w.cols, out + r * w.cols);
  }
}

}  // namespace
}  // namespace kiln::cpu::internal

#include "backend/cpu/simd_impl.h"  // NOLINT(build/include_order): compiled for AVX2 here

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kiln::cpu::internal {

const SimdKernels& Avx2Kernels() {
  static const SimdKernels kKernels{"avx2", &DotImpl, &DecodeRowsAvx2, &LinearBlockImpl,
                                    &AttendImpl};
  return kKernels;
}

}  // namespace kiln::cpu::internal
