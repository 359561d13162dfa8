// Internal to Checkpoint::OpenHfDirectory: reading the FP8 pre-quantization of an HF checkpoint.
//
// Three producers write FP8 checkpoints that vLLM serves; kiln reads all three
// (docs/quantization.md, "Pre-quantized checkpoints"):
//
//   format              declared in                            weight scale        input scale
//   fp8 (AutoFP8)       config.json quantization_config        [] or [1]           [] or [1]
//                       {"quant_method": "fp8", "activation_scheme": "static"|"dynamic"}
//   compressed-tensors  config.json quantization_config        [out, 1] (channel)  [] or [1]
//   (llm-compressor)    {"quant_method": "compressed-tensors",  or [] / [1]         (static only)
//                        "config_groups": {...: {"weights": {"type": "float", "num_bits": 8,
//                        "strategy": "channel"|"tensor"}, "input_activations": ...}}}
//   modelopt            config.json {"quant_method": "modelopt", "quant_algo": "FP8"} or
//                       hf_quant_config.json {"quantization": {"quant_algo": "FP8"}}
//                                                              []                  []
//
// compressed-tensors also writes INT8 W8A8 checkpoints ("format": "int-quantized", config groups
// of type int, num_bits 8, symmetric; llm-compressor's W8A8 / SmoothQuant): they open as
// QuantMethod::kInt8, their I8 linear weights with `P.weight_scale` exactly as e4m3 ones.
//
// Every e4m3 linear weight `P.weight` comes with `P.weight_scale` (f32, bf16 or f16; value =
// e4m3 * scale) and, for static activations, `P.input_scale`. Calibrated KV cache scales are
// per layer: `self_attn.k_scale` / `v_scale` (compressed-tensors, vLLM), `self_attn.k_proj.k_scale`
// / `v_proj.v_scale` (ModelOpt), `self_attn.{k,v}_proj.output_scale` (older compressed-tensors)
// or one `self_attn.kv_scale` for both (deprecated).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace kiln::internal {

// The quantization `dir` declares: config.json's quantization_config, else hf_quant_config.json;
// method kNone when neither exists. Errors: Unsupported for a method or scheme kiln cannot run
// (naming it and the file), Corrupt for a malformed declaration.
Result<CheckpointQuantization> ReadCheckpointQuantization(const std::string& dir);

// A tensor of the checkpoint, and the file that holds it.
struct TensorRef {
  const SafetensorsTensor* tensor = nullptr;
  std::string file;
};
using TensorLookup = std::function<std::optional<TensorRef>(const std::string& name)>;

// Attaches each e4m3 weight's scale (Weight::row_scales) and static input scale
// (Weight::input_scale; an int8 weight's is only checked), reads the
// KV cache scales (`kv`, empty when the checkpoint has none), records in `quantization` whether
// scales are per channel and activations static, and adds the name of every scale tensor it
// consumed to `used`. Errors name the file and the tensor: NotFound for an e4m3 weight
// without its weight_scale, Corrupt for a scale of the wrong shape or dtype or a value that is
// not finite and positive, KV scales on some layers only, or a scale on a weight that is not
// e4m3; Unsupported for e4m3 weights in a checkpoint that declares no FP8 quantization, and an
// e4m3 embedding.
Status AttachFp8Scales(CheckpointQuantization* quantization, int num_layers,
                       const TensorLookup& find, std::vector<Weight>* weights,
                       std::vector<KvCacheScales>* kv, std::set<std::string>* used);

}  // namespace kiln::internal
