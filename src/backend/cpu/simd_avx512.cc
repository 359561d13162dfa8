// AVX-512 kernels (simd.h): 16 lanes in one zmm register, a 4 x 4 register block of dots in
// Linear (16 zmm accumulators, 4 weight rows and one x row loaded per 16-column step), weight
// rows decoded 16 or 32 elements per instruction sequence.
//
// Exactness of the decoders (checked bitwise against DequantizeToF32 in cpu_ops_test): f16 ->
// f32 and bf16 -> f32 are exact; d * q for an f16 scale d (11 significant bits) and a 4- or 8-bit
// integer q is exact in f32, so the one rounding of fma(d, q, m) equals dequant.cc's
// round(round(d * q) + m) for q4_1, and the plain products of q4_0 / q8_0 need no rounding.
// GCC 12 warns about the deliberately undefined lanes inside its own AVX-512 intrinsics when
// they are compiled under `#pragma GCC target` (GCC bug 105593, fixed in 12.3 / 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"
#include "core/dtype.h"

// Everything from here to the pop is compiled for AVX-512 (the rest of kiln is not).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

namespace kiln::cpu::internal {
namespace {

struct Vec {
  __m512 v;

  static Vec Zero() { return {_mm512_setzero_ps()}; }
  static Vec Load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Vec LoadPartial(const float* p, int n) {
    return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p)};
  }
  static Vec Fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec Mul(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
  static Vec Add(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  static Vec Set1(float x) { return {_mm512_set1_ps(x)}; }
  void Store(float* p) const { _mm512_storeu_ps(p, v); }
  static float Reduce(Vec a) {
    const __m256 lo = _mm512_castps512_ps256(a.v);
    // Lanes 8..15 moved down (0xEE selects 128-bit quarters 2, 3, 2, 3).
    const __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(a.v, a.v, 0xEE));
    const __m256 s8 = _mm256_add_ps(lo, hi);  // lanes l + (l + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [s4[0] + s4[2], s4[1] + s4[3]]
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
  }
};

constexpr int kTileRows = 4;
constexpr int kTileCols = 4;

// A block's fp16 scale d broadcast to 16 lanes, widened by the F16C instruction (exact, like
// F16ToF32, whose bit manipulation dominated the decode).
inline __m512 BroadcastHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(h)));
}

// q4_1's adjacent fp16 d and m: one 32-bit broadcast and one conversion give [d, m, d, m, ...],
// then d and m are spread within each 128-bit lane (half the shuffle-port work of two scalars).
inline void BroadcastHalfPair(const uint8_t* p, __m512* d, __m512* m) {
  int32_t dm;
  std::memcpy(&dm, p, 4);
  const __m512 both = _mm512_cvtph_ps(_mm256_set1_epi32(dm));
  *d = _mm512_permute_ps(both, 0x00);
  *m = _mm512_permute_ps(both, 0x55);
}

inline __m512 NibblesLo(__m512i q) {
  return _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0xF)));
}
inline __m512 NibblesHi(__m512i q) { return _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)); }
inline __m512i Bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Sixteen e4m3 codes p[0..16) to f32, exactly F8E4M3ToF32, by the fp16 route of simd_avx2.cc's
// DecodeE4m3x8 (magnitude bits into an fp16's, widened, times 2^8; NaN codes blended in).
inline __m512 DecodeE4m3x16(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
  const __m256i half =
      _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                      _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
  const __mmask16 is_nan =
      _mm512_cmpeq_epi32_mask(_mm512_cvtepu16_epi32(mag), _mm512_set1_epi32(0x7f));
  const __m512 nan = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)),
                      _mm512_set1_epi32(0x7fc00000)));
  return _mm512_mask_blend_ps(is_nan, v, nan);
}

void DecodeRow(WeightFormat format, const uint8_t* src, int64_t cols, float* y) {
  switch (format) {
    case WeightFormat::kF32:
      std::memcpy(y, src, cols * sizeof(float));
      return;
    case WeightFormat::kBF16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 16 <= cols; i += 16) {
        const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
      }
      for (; i < cols; ++i) y[i] = BF16ToF32(s[i]);
      return;
    }
    case WeightFormat::kF16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 16 <= cols; i += 16) {
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + i))));
      }
      for (; i < cols; ++i) y[i] = F16ToF32(s[i]);
      return;
    }
    case WeightFormat::kQ4_0:
      for (int64_t b = 0; b < cols / 32; ++b, src += 18, y += 32) {
        const __m512 d = BroadcastHalf(src);
        const __m512i q = Bytes16(src + 2);
        const __m512i eight = _mm512_set1_epi32(8);
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, _mm512_set1_epi32(0xF)), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
        _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)));
      }
      return;
    case WeightFormat::kQ4_1:
      for (int64_t b = 0; b < cols / 32; ++b, src += 20, y += 32) {
        __m512 d, m;
        BroadcastHalfPair(src, &d, &m);
        const __m512i q = Bytes16(src + 4);
        _mm512_storeu_ps(y, _mm512_fmadd_ps(d, NibblesLo(q), m));
        _mm512_storeu_ps(y + 16, _mm512_fmadd_ps(d, NibblesHi(q), m));
      }
      return;
    case WeightFormat::kQ8_0:
      for (int64_t b = 0; b < cols / 32; ++b, src += 34, y += 32) {
        const __m512 d = BroadcastHalf(src);
        const __m128i* q = reinterpret_cast<const __m128i*>(src + 2);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)));
        _mm512_storeu_ps(y, _mm512_mul_ps(lo, d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(hi, d));
      }
      return;
    case WeightFormat::kF8E4M3: {
      int64_t i = 0;
      for (; i + 16 <= cols; i += 16) _mm512_storeu_ps(y + i, DecodeE4m3x16(src + i));
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

void DecodeRowsAvx512(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out) {
  const int64_t row_bytes = WeightRowBytes(w.format, w.cols);
  for (int64_t r = 0; r < num_rows; ++r) {
    DecodeRow(w.format, w.data + (row_begin + r) * row_bytes, w.cols, out + r * w.cols);
  }
}

}  // namespace
}  // namespace kiln::cpu::internal

#include "backend/cpu/simd_impl.h"  // NOLINT(build/include_order): compiled for AVX-512 here

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kiln::cpu::internal {

const SimdKernels& Avx512Kernels() {
  static const SimdKernels kKernels{"avx512", &DotImpl, &DecodeRowsAvx512, &LinearBlockImpl,
                                    &AttendImpl};
  return kKernels;
}

}  // namespace kiln::cpu::internal
