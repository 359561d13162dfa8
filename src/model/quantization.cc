#include "model/quantization.h"

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

}  // namespace kiln
