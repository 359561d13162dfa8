// Quantization schemes kiln runs, and the FP8 arithmetic the CPU reference and the CUDA kernels
// share (docs/quantization.md).
//
// FP8 W8A8 (vLLM's and TensorRT-LLM's "fp8"): weights and activations in float8 e4m3fn with fp32
// scales, products accumulated in fp32:
//   weights      per output channel n (a row of the [out, in] matrix), static:
//                  sw[n] = Fp8RowScale(max_k |w[n, k]|),  wq[n, k] = e4m3(w[n, k] / sw[n])
//   activations  per token m (a row of the [tokens, in] input), dynamic (computed every step):
//                  sx[m] = Fp8RowScale(max_k |x[m, k]|),  xq[m, k] = e4m3(x[m, k] / sx[m])
//   out[m, n] = (sum_k xq[m, k] * wq[n, k]) * sx[m] * sw[n]  (+ bias[n])
// e4m3 rounds to nearest even (core/dtype.h F32ToF8E4M3); |x / s| <= 448 by construction, so it
// never saturates.
//   activations  static per tensor (kiln build --activation-scales static, or a pre-quantized
//                checkpoint's input_scale; Weight::input_scale > 0): one calibrated scale s for
//                every token, s = Fp8RowScale(max |x|) over the calibration run at the layer's
//                input (the parts of a fused q|k|v or gate|up share it: they read one input):
//                  xq[m, k] = e4m3(clamp(x[m, k] / s, -448, 448))      (QuantizeRowFp8Static)
//                  out[m, n] = (sum_k xq[m, k] * wq[n, k]) * s * sw[n]  (+ bias[n])
//                A token beyond the calibrated range saturates at +-448 * s (as vLLM's
//                scaled_fp8_conversion) instead of becoming e4m3's NaN.
// Linear layers of a few rows (batch-1..2 decode on CUDA) may skip the
// activation quantization (W8A16: out = (sum_k x[m, k] * wq[n, k]) * sw[n]), which is closer
// to the unquantized model, not further.
// The embedding, the norms and lm_head stay in the compute type (as vLLM and ModelOpt keep them;
// W4A16 below may quantize lm_head on request).
//
// INT8 W8A8 (SmoothQuant): the FP8 scheme with int8 in place of e4m3, after SmoothQuant has
// moved activation outliers into the weights (kiln build, docs/quantization.md):
//   weights      per output channel, static:  sw[n] = Int8RowScale(max_k |w[n, k]|),
//                                             wq[n, k] = round(w[n, k] / sw[n])  in [-127, 127]
//   activations  per token, dynamic:          sx[m], xq[m, k] likewise (QuantizeRowInt8)
//   out[m, n] = (f32(sum_k xq[m, k] * wq[n, k]) * sx[m]) * sw[n]  (+ bias[n])
// round = to nearest, ties to even (torch.round); the sum is exact in int32 (|xq * wq| <= 2^14,
// so any k < 2^17 fits), so only its conversion to f32 and the scaling round.
//
// W4A16 (Weight::w4, model/checkpoint.h): a linear weight [n, k] stored as packed signed 4-bit
// codes (DType::kI4, element (r, c) in byte (r * k + c) / 2, low nibble for even c), in groups
// of group_size consecutive stored columns, each (row, group) with an fp16 scale and an int8 zero
// point in [-8, 7] (0 when symmetric):
//   w[r, c] = (code[r, c] - zero[r, c / group_size]) * scale[r, c / group_size]   (in fp32)
// With act-order (GPTQ desc_act) the stored columns are a permutation of the input channels:
// stored column j multiplies input channel perm[j]. Activations stay in the compute type.
// lm_head may be W4A16 too (kiln build --quantize-lm-head; GPTQModel's quantized lm_head): it is
// then a tensor of its own ("lm_head.weight", never act-order when kiln writes it, the config
// untied) while the embedding stays in the compute type for the lookup.
//
// FP8 KV cache: K and V stored as e4m3 of value / scale (clamped to +-448: Fp8KvEncode) with one
// fp32 scale per layer for K and one for V (1.0 unless calibrated); attention reads
// value = e4m3 * scale.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

enum class QuantMethod : uint8_t {
  kNone,
  kFp8,    // W8A8 e4m3, per-channel weights, per-token dynamic or per-tensor static activations
  kInt8,   // W8A8 int8 (SmoothQuant), per-channel weights, per-token dynamic activations
  kW4A16,  // 4-bit weights in groups along the input (AWQ, GPTQ, round-to-nearest), 16-bit math
};

// "none" / "fp8". Errors: kInvalidArgument naming the accepted values.
Result<QuantMethod> ParseQuantMethod(std::string_view name);
std::string_view QuantMethodName(QuantMethod method);

enum class KvCacheDType : uint8_t {
  kAuto,     // the compute type (bf16 / fp16 on CUDA, f32 on the CPU)
  kFp8E4M3,  // e4m3fn with a per-layer K scale and V scale
};

// "auto" / "fp8" / "fp8_e4m3". Errors: kInvalidArgument naming the accepted values.
Result<KvCacheDType> ParseKvCacheDType(std::string_view name);
std::string_view KvCacheDTypeName(KvCacheDType dtype);  // "auto", "fp8_e4m3"

inline constexpr float kFp8E4M3Max = 448.0f;
// The smallest scale a row gets (vLLM's), so that an all-zero or tiny row divides safely.
inline constexpr float kFp8MinScale = 1.0f / (kFp8E4M3Max * 512.0f);

// The fp32 scale of a row whose largest magnitude is amax.
inline float Fp8RowScale(float amax) { return std::max(amax / kFp8E4M3Max, kFp8MinScale); }

// Quantizes one row of n values (a weight row or a token's activations): returns
// s = Fp8RowScale(max_k |x[k]|) and writes q[k] = F32ToF8E4M3(x[k] / s), the division in fp32.
// Dequantized, F8E4M3ToF32(q[k]) * s is within half an e4m3 ulp of x[k] (relative 2^-4 where
// |x[k] / s| >= 2^-6, the smallest normal; absolute s * 2^-10 below). REQUIRES: x finite.
float QuantizeRowFp8(const float* x, int64_t n, uint8_t* q);  // x [n], q [n]

// Quantizes one row with a fixed (static, calibrated) scale: q[k] = F32ToF8E4M3(clamp(x[k] /
// scale, -448, 448)), the division in fp32; bitwise Fp8KvEncode(x[k], scale) for finite x.
// Values past 448 * scale saturate. REQUIRES: x finite, scale > 0.
void QuantizeRowFp8Static(const float* x, int64_t n, float scale, uint8_t* q);  // x [n], q [n]

inline constexpr float kInt8Max = 127.0f;
// The smallest int8 scale: the smallest normal float, so that an all-zero row divides safely
// (its codes are 0) and every scale is a normal number.
inline constexpr float kInt8MinScale = 1.17549435e-38f;

// The fp32 scale of an int8 row whose largest magnitude is amax.
inline float Int8RowScale(float amax) { return std::max(amax / kInt8Max, kInt8MinScale); }

// Quantizes one row of n values to int8: returns s = Int8RowScale(max_k |x[k]|) and writes
// q[k] = round(x[k] / s) (the division in fp32, ties to even), in [-127, 127] by construction
// (clamped all the same). Dequantized, q[k] * s is within s / 2 of x[k] (plus the quotient's
// rounding). REQUIRES: x finite.
float QuantizeRowInt8(const float* x, int64_t n, int8_t* q);  // x [n], q [n]

// The FP8 KV cache's code of one K or V element: e4m3(value / scale), the quotient clamped to
// [-448, 448] first. Unlike a weight or activation row, whose scale comes from its own amax, a
// KV scale is fixed per layer (1.0 until calibrated), so an outlier past 448 must saturate
// (as vLLM's scaled_fp8_conversion) instead of becoming e4m3's NaN. NaN stays NaN.
inline uint8_t Fp8KvEncode(float value, float scale) {
  const float x = value / scale;
  return F32ToF8E4M3(x < -kFp8E4M3Max ? -kFp8E4M3Max : (x > kFp8E4M3Max ? kFp8E4M3Max : x));
}

}  // namespace kiln
