#include "builder/normal_fill.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/check.h"

// NOTE: only correctly rounded IEEE float operations (+, -, *, /, sqrt) in a fixed order and no
// libm, so the values are the same on every platform. The build compiles this file with
// -ffp-contract=off: contracting a*b+c into an FMA would change the rounding.

namespace kiln {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr float kLn2 = 0.693147180559945309f;
constexpr float kHalfPi = 1.57079632679489662f;

// Pairs generated per block: the hashes are computed first (scalar 64-bit arithmetic), then the
// float math runs over the block in loops the compiler vectorizes.
constexpr int kBlock = 256;

// ln(x) for x in (0, 1], never positive. x = 2^e * m with m in [sqrt(1/2), sqrt(2)), and
// ln(m) = 2 atanh(s) = 2 (s + s^3/3 + ... + s^9/9) with s = (m - 1) / (m + 1), |s| <= 0.172:
// the first omitted term is below 1e-9.
inline float LogUnit(float x) {
  uint32_t ix = std::bit_cast<uint32_t>(x) + (0x3f800000u - 0x3f3504f3u);
  const float e = static_cast<float>(static_cast<int32_t>(ix >> 23) - 0x7f);
  const float m = std::bit_cast<float>((ix & 0x007fffffu) + 0x3f3504f3u);
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  const float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return e * kLn2 + 2.0f * s * series;
}

// Fills z0[j], z1[j] for pairs with random bits hi[j] (24 bits, for the radius) and lo[j]
// (24 bits, for the angle), scaled by stddev.
void BoxMuller(const uint32_t* hi, const uint32_t* lo, int n, float stddev, float* z0, float* z1) {
  for (int j = 0; j < n; ++j) {
    // Radius: u1 = (hi + 1) / 2^24 in (0, 1] (exact in float).
    const float u1 = static_cast<float>(hi[j] + 1) * (1.0f / 16777216.0f);
    const float r = stddev * std::sqrt(-2.0f * LogUnit(u1));
    // Angle: quadrant q (top 2 bits) plus d in [-pi/4, pi/4) (low 22 bits), so that
    // theta = q * pi/2 + d covers a whole turn uniformly.
    const uint32_t q = lo[j] >> 22;
    const float d = (static_cast<float>(lo[j] & 0x3fffffu) * (1.0f / 4194304.0f) - 0.5f) * kHalfPi;
    const float d2 = d * d;
    // Taylor series to d^9 / d^10: the first omitted terms are below 2e-9 for |d| <= pi/4.
    const float s =
        d *
        (1.0f - d2 * (1.0f / 6 - d2 * (1.0f / 120 - d2 * (1.0f / 5040 - d2 * (1.0f / 362880)))));
    const float c =
        1.0f - d2 * (0.5f - d2 * (1.0f / 24 -
                                  d2 * (1.0f / 720 - d2 * (1.0f / 40320 - d2 * (1.0f / 3628800)))));
    // Rotate (cos d, sin d) by q quarter turns.
    const bool odd = (q & 1) != 0;
    const float x = odd ? s : c;
    const float y = odd ? c : s;
    const uint32_t cos_sign = ((q ^ (q >> 1)) & 1) << 31;  // q = 1, 2
    const uint32_t sin_sign = (q >> 1) << 31;              // q = 2, 3
    z0[j] = r * std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ cos_sign);
    z1[j] = r * std::bit_cast<float>(std::bit_cast<uint32_t>(y) ^ sin_sign);
  }
}

struct ToF32 {
  using Bits = float;
  static float Convert(float x) { return x; }
};
struct ToF16 {
  using Bits = uint16_t;
  static uint16_t Convert(float x) { return F32ToF16(x); }
};
struct ToBF16 {
  using Bits = uint16_t;
  static uint16_t Convert(float x) { return F32ToBF16(x); }
};

// Writes elements [first, first + count) of the stream.
template <typename Out>
void FillNormalAs(uint64_t key, int64_t first, int64_t count, float stddev,
                  typename Out::Bits* out) {
  uint32_t hi[kBlock];
  uint32_t lo[kBlock];
  float z0[kBlock];
  float z1[kBlock];
  const int64_t end = first + count;
  for (int64_t pair = first / 2; 2 * pair < end; pair += kBlock) {
    const int n = static_cast<int>(std::min<int64_t>(kBlock, (end + 1) / 2 - pair));
    for (int j = 0; j < n; ++j) {
      const uint64_t bits = SplitMix64Mix(key + (static_cast<uint64_t>(pair + j) + 1) * kGolden);
      hi[j] = static_cast<uint32_t>(bits >> 40);
      lo[j] = static_cast<uint32_t>(bits & 0xffffffu);
    }
    BoxMuller(hi, lo, n, stddev, z0, z1);
    // Elements 2 * pair .. 2 * (pair + n) - 1, clipped to [first, end).
    const int64_t base = 2 * pair;
    int j = 0;
    if (base < first) {  // an odd start takes the second half of its pair
      *out++ = Out::Convert(z1[0]);
      j = 1;
    }
    const int full = static_cast<int>(std::min<int64_t>(n, (end - base) / 2));
    for (; j < full; ++j) {
      out[0] = Out::Convert(z0[j]);
      out[1] = Out::Convert(z1[j]);
      out += 2;
    }
    if (j < n) *out++ = Out::Convert(z0[j]);  // an odd end takes the first half of its pair
  }
}

template <typename Out>
void FillConstantAs(float value, int64_t count, typename Out::Bits* out) {
  const typename Out::Bits v = Out::Convert(value);
  for (int64_t i = 0; i < count; ++i) out[i] = v;
}

}  // namespace

uint64_t TensorStreamKey(uint64_t seed, std::string_view tensor_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (char ch : tensor_name) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001b3ull;  // FNV-1a prime
  }
  return SplitMix64Mix(SplitMix64Mix(seed) ^ h);
}

void FillNormal(uint64_t key, int64_t first, int64_t count, float stddev, DType dtype, void* out) {
  CHECK(first >= 0 && count >= 0) << "first " << first << " count " << count;
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32:
      return FillNormalAs<ToF32>(key, first, count, stddev, static_cast<float*>(out));
    case DType::kF16:
      return FillNormalAs<ToF16>(key, first, count, stddev, static_cast<uint16_t*>(out));
    case DType::kBF16:
      return FillNormalAs<ToBF16>(key, first, count, stddev, static_cast<uint16_t*>(out));
    default:
      CHECK(false) << "FillNormal: unsupported dtype " << DTypeName(dtype);
  }
}

void FillConstant(float value, int64_t count, DType dtype, void* out) {
  switch (dtype) {
    case DType::kF32:
      return FillConstantAs<ToF32>(value, count, static_cast<float*>(out));
    case DType::kF16:
      return FillConstantAs<ToF16>(value, count, static_cast<uint16_t*>(out));
    case DType::kBF16:
      return FillConstantAs<ToBF16>(value, count, static_cast<uint16_t*>(out));
    default:
      CHECK(false) << "FillConstant: unsupported dtype " << DTypeName(dtype);
  }
}

}  // namespace kiln
