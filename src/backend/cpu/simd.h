// The vectorized inner loops of the CPU ops (cpu_ops.h), once per instruction set, chosen at
// run time. All of them compute the same float operations in the same order (the 16-lane order
// of cpu_ops.h, explicit fused multiply-adds), so their results are bitwise identical; only the
// speed differs. Internal to the CPU backend; tests use SimdKernelsFor to compare them.
//
//   isa      needs                      tile (x rows x w rows per register block)
//   avx512   AVX-512F, FMA, F16C        4 x 4 (16 zmm accumulators)
//   avx2     AVX2, FMA, F16C            1 x 4 (8 ymm pairs)
//   generic  any C++ (std::fma)         1 x 1
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cpu/cpu_ops.h"

namespace kiln::cpu::internal {

enum class SimdIsa : uint8_t { kGeneric, kAvx2, kAvx512 };

// One (token, head) of PagedAttention (cpu_ops.h).
struct AttendArgs {
  const float* q = nullptr;              // [head_dim]
  const float* k_cache = nullptr;        // [num_slots, kv_width], offset to this head's kv head
  const float* v_cache = nullptr;        // same
  const int32_t* block_table = nullptr;  // the sequence's blocks
  int32_t block_size = 0;
  int64_t kv_width = 0;  // floats per slot: num_kv_heads * head_dim
  int32_t head_dim = 0;
  int64_t context = 0;  // positions 0 .. context - 1
  float scale = 1.0f;
  float* probs = nullptr;  // scratch [context]
  float* out = nullptr;    // [head_dim]
};

struct SimdKernels {
  std::string_view name;  // "avx512", "avx2", "generic"
  // Dot in the 16-lane order.
  float (*dot)(const float* a, const float* b, int64_t n);
  // DecodeRows (cpu_ops.h).
  void (*decode_rows)(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out);
  // The Linear of cpu_ops.h for the f32 weight rows w[0, num_cols) (row stride ldw, k columns):
  // y[m, c] = (accumulate ? y[m, c] : 0) + (dot(x[m], w[c]) + (bias ? bias[c] : 0)).
  void (*linear_block)(const float* x, int64_t ldx, int64_t num_rows, int64_t k, const float* w,
                       int64_t ldw, int64_t num_cols, const float* bias, float* y, int64_t ldy,
                       bool accumulate);
  // PagedAttention (cpu_ops.h) for one (token, head).
  void (*attend)(const AttendArgs& args);
};

// The fastest kernels this CPU runs (checked once).
const SimdKernels& BestSimdKernels();
// The kernels for `isa`, or nullptr when this build or this CPU lacks it.
const SimdKernels* SimdKernelsFor(SimdIsa isa);

// Per-ISA tables (simd_*.cc); the x86 ones exist only in x86-64 builds.
const SimdKernels& GenericKernels();
const SimdKernels& Avx2Kernels();
const SimdKernels& Avx512Kernels();

}  // namespace kiln::cpu::internal
