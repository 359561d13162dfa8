#include "model/quantization.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kiln {

Result<QuantMethod> ParseQuantMethod(std::string_view name) {
  if (name == "none") return QuantMethod::kNone;
  if (name == "fp8") return QuantMethod::kFp8;
  return InvalidArgument("quantization: expected none or fp8, got '" + std::string(name) +
                         "' (int8-sq and w4a16 engines are made with kiln build)");
}

std::string_view QuantMethodName(QuantMethod method) {
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kFp8:
      return "fp8";
    case QuantMethod::kInt8:
      return "int8-sq";
    case QuantMethod::kW4A16:
      return "w4a16";
  }
  return "?";
}

Result<KvCacheDType> ParseKvCacheDType(std::string_view name) {
  if (name == "auto") return KvCacheDType::kAuto;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDType::kFp8E4M3;
  return InvalidArgument("kv-cache-dtype: expected auto, fp8 or fp8_e4m3, got '" +
                         std::string(name) + "'");
}

std::string_view KvCacheDTypeName(KvCacheDType dtype) {
  switch (dtype) {
    case KvCacheDType::kAuto:
      return "auto";
    case KvCacheDType::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "?";
}

namespace {

// F32ToF8E4M3 without branches, so that QuantizeRowFp8's loop vectorizes (the branchy version
// cost ~25 ns per element, a fifth of a prefill's W8A8 Linear); bitwise the same for every input
// (quantization_test checks every e4m3 value, the midpoints between them, their neighbours and
// a million random bit patterns):
//   |x| >= 2^-6 (normal): the f32 bits' exponent and top 3 mantissa bits, rounded to nearest
//                         even by adding 0x7ffff + the kept lsb, rebiased 127 -> 7;
//   |x| < 2^-6 (subnormal): multiples of 2^-9, rounded by the addition |x| + 2^14 (whose ulp is
//                         2^-9), counted in ulps of 2^14;
//   |x| >= 480, infinity, NaN: 0x7f (NaN), as F32ToF8E4M3.
inline uint8_t F32ToE4m3Branchless(float x) {
  const uint32_t bits = F32Bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7fffffffu;
  const uint32_t normal = ((mag + 0x7ffffu + ((mag >> 20) & 1u)) >> 20) - (120u << 3);
  const uint32_t subnormal = F32Bits(F32FromBits(mag) + 16384.0f) - 0x46800000u;
  const uint32_t code = mag >= 0x43f00000u ? 0x7fu : (mag < 0x3c800000u ? subnormal : normal);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

float QuantizeRowFp8(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::abs(x[k]));
  const float scale = Fp8RowScale(amax);
  for (int64_t k = 0; k < n; ++k) q[k] = F32ToE4m3Branchless(x[k] / scale);
  return scale;
}

void QuantizeRowFp8Static(const float* x, int64_t n, float scale, uint8_t* q) {
  for (int64_t k = 0; k < n; ++k) {
    q[k] = F32ToE4m3Branchless(std::clamp(x[k] / scale, -kFp8E4M3Max, kFp8E4M3Max));
  }
}

float QuantizeRowInt8(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::abs(x[k]));
  const float scale = Int8RowScale(amax);
  for (int64_t k = 0; k < n; ++k) {
    // nearbyint: the default rounding mode, to nearest with ties to even (torch.round).
    const float r = std::nearbyint(x[k] / scale);
    q[k] = static_cast<int8_t>(std::clamp(r, -kInt8Max, kInt8Max));
  }
  return scale;
}

}  // namespace kiln
