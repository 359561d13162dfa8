#include "core/dtype.h"

#include <array>
#include <cctype>
#include <limits>
#include <string>

namespace kiln {
namespace {

constexpr std::array<DTypeInfo, kNumDTypes> kInfos = {{
    {"f32", 1, 4, true, false},
    {"f16", 1, 2, true, false},
    {"bf16", 1, 2, true, false},
    {"fp8_e4m3", 1, 1, true, false},
    {"fp8_e5m2", 1, 1, true, false},
    {"f64", 1, 8, true, false},
    {"i8", 1, 1, false, false},
    {"i16", 1, 2, false, false},
    {"i32", 1, 4, false, false},
    {"i64", 1, 8, false, false},
    {"u8", 1, 1, false, false},
    {"bool", 1, 1, false, false},
    {"i4", 2, 1, false, false},
    // GGUF blocks: 32 elements, or 256 for the K-quants (ggml-common.h layouts).
    {"q4_0", 32, 18, false, true},    // f16 d + 16 B of nibbles
    {"q4_1", 32, 20, false, true},    // f16 d, f16 m + 16 B
    {"q5_0", 32, 22, false, true},    // f16 d + 4 B high bits + 16 B
    {"q5_1", 32, 24, false, true},    // f16 d, f16 m + 4 B + 16 B
    {"q8_0", 32, 34, false, true},    // f16 d + 32 int8
    {"q8_1", 32, 36, false, true},    // f16 d, f16 s + 32 int8
    {"q2_k", 256, 84, false, true},   // 16 B scales + 64 B quants + f16 d, dmin
    {"q3_k", 256, 110, false, true},  // 32 B hmask + 64 B quants + 12 B scales + f16 d
    {"q4_k", 256, 144, false, true},  // f16 d, dmin + 12 B scales + 128 B quants
    {"q5_k", 256, 176, false, true},  // f16 d, dmin + 12 B scales + 32 B qh + 128 B quants
    {"q6_k", 256, 210, false, true},  // 128 B ql + 64 B qh + 16 int8 scales + f16 d
    {"q8_k", 256, 292, false, true},  // f32 d + 256 int8 + 16 int16 sums
}};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const DTypeInfo& GetDTypeInfo(DType dtype) {
  const int i = static_cast<int>(dtype);
  CHECK(i >= 0 && i < kNumDTypes) << "invalid DType " << i;
  return kInfos[i];
}

Result<DType> ParseDType(std::string_view name) {
  const std::string n = Lower(name);
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfos[i].name == n) return static_cast<DType>(i);
  }
  struct Alias {
    std::string_view alias;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kF32},    {"fp32", DType::kF32},
      {"float", DType::kF32},      {"float16", DType::kF16},
      {"fp16", DType::kF16},       {"half", DType::kF16},
      {"bfloat16", DType::kBF16},  {"f8_e4m3", DType::kF8E4M3},
      {"fp8", DType::kF8E4M3},     {"float8_e4m3fn", DType::kF8E4M3},
      {"f8_e5m2", DType::kF8E5M2}, {"float8_e5m2", DType::kF8E5M2},
      {"float64", DType::kF64},    {"int8", DType::kI8},
      {"int4", DType::kI4},        {"int32", DType::kI32},
      {"int64", DType::kI64},      {"uint8", DType::kU8},
  };
  for (const Alias& a : kAliases) {
    if (a.alias == n) return a.dtype;
  }
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "'; expected one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, i8, i4, "
                         "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, ...");
}

Result<int64_t> DTypeByteSize(DType dtype, int64_t num_elements) {
  const DTypeInfo& info = GetDTypeInfo(dtype);
  if (num_elements < 0) {
    return InvalidArgument("negative element count " + std::to_string(num_elements));
  }
  if (num_elements % info.block_size != 0) {
    return InvalidArgument(std::to_string(num_elements) + " elements is not a multiple of the " +
                           std::string(info.name) + " block size " +
                           std::to_string(info.block_size));
  }
  const int64_t blocks = num_elements / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) {
    return OutOfRange(std::to_string(num_elements) + " " + std::string(info.name) +
                      " elements overflow a 64-bit byte count");
  }
  return blocks * info.block_bytes;
}

}  // namespace kiln
