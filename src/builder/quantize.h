// What a quantizer hands `kiln build` (builder/engine_writer.h): the tensors it changed, in the
// formats of model/quantization.h, keyed by HF name. Tensors it does not list are written from
// the source checkpoint (converted to the engine's dtype).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

struct QuantizedTensor {
  std::string name;  // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;          // shape.numel() values of dtype
  std::vector<float> row_scales;       // [rows] for kF8E4M3 / kI8, else empty
  std::optional<Weight::W4Params> w4;  // for kI4
};

struct QuantizedModel {
  QuantMethod method = QuantMethod::kNone;
  std::vector<QuantizedTensor> tensors;
  std::vector<KvCacheScales> kv_scales;  // per layer, calibrated; empty = none
  std::string details_json = "{}";       // a JSON object for the manifest: settings, calibration
};

}  // namespace kiln
