// CPU dequantization of GGUF (ggml) block types and scalar dtypes to float32.
//
// Exactness contract: for f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k
// and q6_k the output is bit-for-bit what the `gguf` Python package (0.19.0) returns from
// gguf.quants.dequantize(data, qtype): the same float32 operations in the same order (fp16
// scales widened to f32 exactly, no fused multiply-adds; dequant.cc is compiled with
// -ffp-contract=off). NaN payloads in f16/bf16/f32 data are kept. For i8, i16, i32, i64 and
// f64 the output equals numpy's astype(np.float32) (round to nearest even); fp8 uses the
// conversions of core/dtype.h. tests/model/make_gguf_reference.py records the reference.
//
// NOTE: most products here are exact in f32 (an fp16 scale has an 11-bit significand, the
// integers at most 8 bits), so the roundings that matter are the final `+ m` / `- dmin*min`
// and the three-factor product of q6_k; operation order is still kept identical everywhere.
//
// Block layouts (ggml-common.h; d, dmin, m are fp16 unless noted, q = the quantized integer):
//   q4_0  [d][16 B: elem j low nibble, elem j+16 high]           y = d * (q - 8)
//   q4_1  [d][m][16 B as q4_0]                                   y = d * q + m
//   q5_0  [d][u32 qh: bit j = high bit of elem j][16 B]          y = d * (q - 16)
//   q5_1  [d][m][u32 qh][16 B]                                   y = d * q + m
//   q8_0  [d][32 x int8]                                         y = q * d
//   q2_k  [16 B scales: lo nibble sc, hi nibble min][64 B 2-bit q][d][dmin]
//                                                                y = (d*sc) * q - (dmin*min)
//   q3_k  [32 B hmask][64 B 2-bit q][12 B 6-bit scales][d]       y = (d*(sc-32)) * (q - 4*!h)
//   q4_k  [d][dmin][12 B 6-bit sc/min pairs][128 B nibbles]      y = (d*sc) * q - (dmin*min)
//   q5_k  [d][dmin][12 B][32 B qh][128 B nibbles]                y = (d*sc) * q - (dmin*min)
//   q6_k  [128 B low nibbles][64 B high 2 bits][16 x int8 sc][d] y = (d*sc) * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

// Whether DequantizeToF32 handles `dtype`: f32, f16, bf16, f64, fp8_e4m3, fp8_e5m2, i8, i16,
// i32, i64, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k. Not: q8_1, q8_k (ggml
// intermediate types, never stored in model files), i4, u8, bool.
bool CanDequantizeToF32(DType dtype);

// Writes num_elements float32 values decoded from `src` (src_bytes bytes of `dtype`, in ggml's
// layout, elements in order) to dst.
//
// Returns InvalidArgument when num_elements is negative or not a multiple of the dtype's block
// size, or src_bytes differs from the exact byte size of num_elements elements; Unsupported
// when !CanDequantizeToF32(dtype). dst is untouched on failure.
// REQUIRES: dst holds num_elements floats and does not overlap src. src needs no alignment.
// Thread-safe (no state).
Status DequantizeToF32(DType dtype, const void* src, size_t src_bytes, int64_t num_elements,
                       float* dst);

}  // namespace kiln
