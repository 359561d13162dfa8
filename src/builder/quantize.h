// What a quantizer hands `kiln build` (builder/engine_writer.h): the tensors it changed, in the
// formats of model/quantization.h, keyed by HF name. Tensors it does not list are written from
// the source checkpoint (converted to the engine's dtype). The quantizers of kiln build take an
// opened Checkpoint (and calibration statistics); their QuantizedModel also feeds an HF
// compressed-tensors export (quantized_checkpoint.h).
//
// Formats (model/quantization.h): INT8 = dtype kI8 [n, k] + row_scales (value = code *
// row_scale); FP8 = kF8E4M3 likewise (+ input_scale when activations are static); W4A16 = dtype kI4
// packed + w4 (quantize_w4.h). Rows are in the SOURCE's order: a GGUF `llama` file's q/k rows stay
// permuted (Checkpoint::qk_rope_layout), and the writers move them, with their row scales, back to
// HF order (per-row quantization commutes with that).
//
// SmoothQuant (Xiao et al. 2023), QuantizeInt8SmoothQuant below. Per decoder layer, for each
// input X of a linear layer with per-channel maxima a_j = max |X[:, j]| (calibration.h) and
// weights W (every matrix that reads X: q, k, v together; gate, up together), moves the
// quantization difficulty from the activations to the weights:
//
//   w_j = max_rows |W[:, j]|      s_j = clamp(a_j^alpha / w_j^(1 - alpha), 1e-5, 1e5)
//   X W^T = (X diag(1/s)) (W diag(s))^T     exactly, before rounding
//
// with 1/s folded into what produces X, so the runtime does nothing new:
//   qkv input   = input_layernorm(h):            norm weight / s,  q, k, v columns * s
//   gate/up in  = post_attention_layernorm(h):   norm weight / s,  gate, up columns * s
//   down input  = silu(gate) * up:               up rows (and bias) / s, down columns * s
//                 (silu(g) * (u / s) = (silu(g) * u) / s: exact)
//   o_proj      left unsmoothed: its input is attention's output, a weighted sum of V rows, so
//               1/s would have to fold into v_proj's rows; with GQA each v head serves several
//               q heads, whose channels would all need the same s (one per kv head channel), so
//               per-channel smoothing of o's input cannot be folded in general.
// Then every layer's q, k, v, o, gate, up, down is quantized to int8 per output channel
// (QuantizeRowInt8: symmetric, scale = amax / 127, round to nearest even). The embedding,
// lm_head and final norm are not touched. alpha = 0 turns smoothing off (s = 1: plain
// per-channel INT8), rather than the formula's s = 1 / w_j, which only flattens the weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "builder/calibration.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

// One tensor of a quantized model, owned.
struct QuantizedTensor {
  std::string name;  // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  DType dtype = DType::kF32;
  Shape shape;                         // row-major
  std::vector<uint8_t> bytes;          // shape.numel() elements of dtype (kI4: packed)
  std::vector<float> row_scales;       // kI8 / kF8E4M3 linear weights: [shape[0]], else empty
  std::optional<Weight::W4Params> w4;  // kI4 linear weights only
  float input_scale = 0;  // kF8E4M3 with static activations: Weight::input_scale; 0 = dynamic
};

struct QuantizedModel {
  QuantMethod method = QuantMethod::kNone;
  // Quantized linear weights and changed non-linear tensors (f32); a tensor of the source
  // checkpoint not listed here is unchanged.
  std::vector<QuantizedTensor> tensors;
  std::vector<KvCacheScales> kv_scales;  // per layer, calibrated; empty = none
  std::string details_json = "{}";       // a JSON object for the manifest: settings, calibration

  const QuantizedTensor* Find(const std::string& name) const;
};

struct SmoothQuantOptions {
  // Migration strength in [0, 1]: 0.5 (default, the paper's choice for most models) balances
  // the two sides' maxima; larger values move more of the activations' range into the weights.
  // 0 = no smoothing (above).
  float alpha = 0.5f;
};

// The smoothing factors s_j of one site (above); a_j or w_j of zero gives s_j = 1.
// REQUIRES: act_absmax.size() == weight_absmax.size().
std::vector<float> SmoothingFactors(const std::vector<float>& act_absmax,
                                    const std::vector<float>& weight_absmax, float alpha);

// INT8 SmoothQuant W8A8 of `ckpt` (method kInt8): the seven linear weights of every layer as
// kI8 + row_scales, the two norm weights of every layer (and up_proj's bias, when the model has
// MLP biases) as f32, and kv_scales = stats.KvScales(). Errors: InvalidArgument for alpha
// outside [0, 1] or stats that do not match the model (layer count, channel widths);
// Unsupported for a checkpoint that is already quantized (FP8 / INT8 / W4A16: quantize the
// original) or a weight dtype that cannot be decoded.
Result<QuantizedModel> QuantizeInt8SmoothQuant(const Checkpoint& ckpt,
                                               const CalibrationStats& stats,
                                               const SmoothQuantOptions& options);

struct Fp8CalibratedOptions {
  // SmoothQuant's migration strength (above) applied before quantizing to e4m3; 0 = none.
  float smoothquant_alpha = 0;
  // Store one calibrated activation scale per linear weight (model/quantization.h, static per
  // tensor): Fp8RowScale of the largest |x| its input reached in calibration (after smoothing:
  // max_j a_j / s_j); the parts of q|k|v and gate|up share their input's. false: per token.
  bool static_activations = false;
};

// FP8 W8A8 of `ckpt` with calibration (kiln build --quant fp8 --activation-scales static and/or
// --smoothquant-alpha; method kFp8): SmoothQuant's folding as above, then the seven linear
// weights of every layer quantized per output channel by QuantizeRowFp8 (kF8E4M3 +
// row_scales, + input_scale when static), the norms (and up_proj's bias) as f32, kv_scales =
// stats.KvScales(). Without smoothing and static scales the weights equal what WriteEngine's own
// FP8 quantization writes. Errors: those of QuantizeInt8SmoothQuant.
Result<QuantizedModel> QuantizeFp8Calibrated(const Checkpoint& ckpt, const CalibrationStats& stats,
                                             const Fp8CalibratedOptions& options);

// SmoothQuant's folding alone (method kNone): the tensors QuantizeInt8SmoothQuant /
// QuantizeFp8Calibrated would quantize, in f32, with the changed norms (and up_proj's bias).
// The model it describes is the source's function exactly before rounding: the unquantized
// reference of a smoothed build. Errors: those of QuantizeInt8SmoothQuant.
Result<QuantizedModel> SmoothQuantFold(const Checkpoint& ckpt, const CalibrationStats& stats,
                                       float alpha);

// The manifest's record of an int8-sq build (QuantizedModel::details_json): alpha, the
// calibration source, samples and tokens.
std::string SmoothQuantDetailsJson(const CalibrationStats& stats,
                                   const SmoothQuantOptions& options);
// Of a calibrated fp8 build: activation scales, smoothing alpha, the calibration.
std::string Fp8CalibratedDetailsJson(const CalibrationStats& stats,
                                     const Fp8CalibratedOptions& options);

}  // namespace kiln
