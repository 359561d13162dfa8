// Published Llama-family shapes by name, and JSON shape files, for `kiln synth` and tests.
//
// A preset is the model's config.json as its authors published it (shapes, rope, norms, special
// token ids), so a checkpoint built from it has exactly the published parameter count:
//
//   name            params         published config it follows
//   llama-3.1-8b    8,030,261,248  meta-llama/Llama-3.1-8B-Instruct
//   llama-3.1-70b  70,553,706,496  meta-llama/Llama-3.1-70B-Instruct
//   mistral-7b      7,248,023,552  mistralai/Mistral-7B-Instruct-v0.3
//   qwen2-7b        7,615,616,512  Qwen/Qwen2-7B-Instruct
//   smollm2-135m      134,515,008  HuggingFaceTB/SmolLM2-135M-Instruct
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/config.h"

namespace kiln {

// The preset names, in the order above.
std::span<const std::string_view> PresetNames();
// The same, joined for messages: "llama-3.1-8b, llama-3.1-70b, ...".
std::string PresetNameList();

// The config of preset `name` (exact, case-sensitive). Unknown names give InvalidArgument
// listing the known ones. The returned config passes Validate().
Result<ModelConfig> PresetConfig(std::string_view name);

// Parses a shape file (its text; `source`, the path, prefixes error messages). Two forms:
//
//  1. An HF config.json-like object, parsed by ParseHfConfig (model_type and the sizes are
//     required there):
//       {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, ...}
//  2. A preset plus overrides: {"preset": "llama-3.1-8b", "num_hidden_layers": 4}. The preset's
//     config.json (ToHfConfigJson) is merge-patched (RFC 7386) with the other keys, then parsed
//     by ParseHfConfig; a null value removes a key (e.g. "rope_scaling": null). When the
//     overrides change hidden_size or num_attention_heads but not head_dim, head_dim is derived
//     again (hidden_size / num_attention_heads) instead of kept from the preset.
//
// Errors: InvalidArgument for malformed JSON, an unknown preset or a non-string "preset"; any
// error of ParseHfConfig (which validates the result).
Result<ModelConfig> ShapeFromJson(std::string_view json_text, std::string_view source);

}  // namespace kiln
