#include "model/quantization.h"

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

float QuantizeRowFp8(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::abs(x[k]));
  const float scale = Fp8RowScale(amax);
  for (int64_t k = 0; k < n; ++k) q[k] = F32ToF8E4M3(x[k] / scale);
  return scale;
}

}  // namespace kiln
