// Portable kernels (simd.h): 16 lanes as a plain array, std::fma per lane (correctly rounded,
// like the hardware instruction), weight rows decoded by DequantizeToF32 itself. The slowest
// implementation and the most obviously correct one; the x86 ones must match it bitwise.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"
#include "core/check.h"
#include "model/dequant.h"

namespace kiln::cpu::internal {
namespace {

struct Vec {
  float v[16];

  static Vec Zero() { return Vec{}; }
  static Vec Load(const float* p) {
    Vec out;
    std::memcpy(out.v, p, sizeof(out.v));
    return out;
  }
  static Vec LoadPartial(const float* p, int n) {
    Vec out{};
    std::memcpy(out.v, p, n * sizeof(float));
    return out;
  }
  static Vec Fma(Vec a, Vec b, Vec c) {
    Vec out;
    for (int l = 0; l < 16; ++l) out.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return out;
  }
  static Vec Mul(Vec a, Vec b) {
    Vec out;
    for (int l = 0; l < 16; ++l) out.v[l] = a.v[l] * b.v[l];
    return out;
  }
  static Vec Add(Vec a, Vec b) {
    Vec out;
    for (int l = 0; l < 16; ++l) out.v[l] = a.v[l] + b.v[l];
    return out;
  }
  static Vec Set1(float x) {
    Vec out;
    for (float& l : out.v) l = x;
    return out;
  }
  void Store(float* p) const { std::memcpy(p, v, sizeof(v)); }
  static float Reduce(Vec a) {
    float s8[8], s4[4], s2[2];
    for (int l = 0; l < 8; ++l) s8[l] = a.v[l] + a.v[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
  }
};

constexpr int kTileRows = 1;
constexpr int kTileCols = 1;

void DecodeRowsGeneric(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out) {
  const int64_t row_bytes = WeightRowBytes(w.format, w.cols);
  if (w.format == WeightFormat::kF8E4M3) {
    const float* table = F8E4M3Table();
    const uint8_t* src = w.data + row_begin * row_bytes;
    for (int64_t i = 0; i < num_rows * w.cols; ++i) out[i] = table[src[i]];
    return;
  }
  const DType dtype = WeightFormatDType(w.format);
  for (int64_t r = 0; r < num_rows; ++r) {
    const Status status = DequantizeToF32(dtype, w.data + (row_begin + r) * row_bytes, row_bytes,
                                          w.cols, out + r * w.cols);
    CHECK(status.ok()) << status.ToString();
  }
}

}  // namespace
}  // namespace kiln::cpu::internal

#include "backend/cpu/simd_impl.h"  // NOLINT(build/include_order)

namespace kiln::cpu::internal {

const SimdKernels& GenericKernels() {
  static const SimdKernels kKernels{"generic", &DotImpl, &DecodeRowsGeneric, &LinearBlockImpl,
                                    &AttendImpl};
  return kKernels;
}

}  // namespace kiln::cpu::internal
