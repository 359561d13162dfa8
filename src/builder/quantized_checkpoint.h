// Exports a QuantizedModel as an HF checkpoint directory in the compressed-tensors layout that
// vLLM (and kiln's Checkpoint::Open) load: the portable twin of a kiln engine directory, and
// how the tests run a quantized model end to end.
//
//   config.json      the source's (or, for a GGUF source, ToHfConfigJson of its config) with
//                    quantization_config = {"quant_method": "compressed-tensors",
//                    "format": "int-quantized", "config_groups": {"group_0": {"targets":
//                    ["Linear"], "weights": {int, 8 bits, symmetric, channel},
//                    "input_activations": {int, 8 bits, symmetric, token, dynamic}}},
//                    "ignore": ["lm_head"]}
//   model.safetensors (or shards + index)
//                    P.weight I8 [n, k] + P.weight_scale F32 [n, 1] for each quantized weight,
//                    the QuantizedModel's other tensors (f32) in place of the source's, every
//                    other source tensor as stored (GGUF: decoded to f32; q/k rows, their
//                    scales and biases moved back to HF order), self_attn.k_scale / v_scale
//                    F32 [] per layer when kv_scales is set
//   tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json,
//   chat_template.jinja   copied from an HF source when present (a GGUF source has none to
//                    copy: the export then has no tokenizer, and says so in a warning)
#pragma once

#include <cstdint>
#include <string>

#include "builder/quantize.h"
#include "builder/safetensors_writer.h"
#include "core/status.h"
#include "model/checkpoint.h"

namespace kiln {

// Writes `model` (made from `src`) into `out_dir` (created; must be empty or missing). A model
// of method kNone writes no quantization_config: the source's weights with only its kv_scales
// added (calibrated FP8 KV cache scales for an unquantized model). Errors: InvalidArgument for a
// non-empty out_dir or a method other than kInt8 / kNone; those of the safetensors writer
// (IoError naming the file).
Status WriteCompressedTensorsCheckpoint(const Checkpoint& src, const QuantizedModel& model,
                                        const std::string& out_dir,
                                        int64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace kiln
