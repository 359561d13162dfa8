#include "builder/presets.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 5> kPresetNames = {"llama-3.1-8b", "llama-3.1-70b",
                                                          "mistral-7b", "qwen2-7b", "smollm2-135m"};

ModelConfig Llama31(int hidden, int intermediate, int layers, int heads) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_heads = heads;
  c.num_kv_heads = 8;
  c.head_dim = hidden / heads;
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = false;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  return c;
}

ModelConfig Mistral7B() {
  ModelConfig c;
  c.family = ModelFamily::kMistral;
  c.architecture = "MistralForCausalLM";
  c.num_layers = 32;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 32768;
  c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 1e6;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

ModelConfig Qwen2_7B() {
  ModelConfig c;
  c.family = ModelFamily::kQwen2;
  c.architecture = "Qwen2ForCausalLM";
  c.num_layers = 28;
  c.hidden_size = 3584;
  c.intermediate_size = 18944;
  c.num_heads = 28;
  c.num_kv_heads = 4;
  c.head_dim = 128;
  c.vocab_size = 152064;
  c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1e6;
  c.qkv_bias = true;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

ModelConfig SmolLM2_135M() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.num_layers = 30;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_dim = 64;
  c.vocab_size = 49152;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 100000.0;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

}  // namespace

std::span<const std::string_view> PresetNames() { return kPresetNames; }

std::string PresetNameList() {
  std::string s;
  for (std::string_view n : kPresetNames) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

Result<ModelConfig> PresetConfig(std::string_view name) {
  ModelConfig c;
  if (name == "llama-3.1-8b") {
    c = Llama31(4096, 14336, 32, 32);
  } else if (name == "llama-3.1-70b") {
    c = Llama31(8192, 28672, 80, 64);
  } else if (name == "mistral-7b") {
    c = Mistral7B();
  } else if (name == "qwen2-7b") {
    c = Qwen2_7B();
  } else if (name == "smollm2-135m") {
    c = SmolLM2_135M();
  } else {
    return InvalidArgument("unknown preset '" + std::string(name) + "'; the presets are " +
                           PresetNameList());
  }
  c.dtype = DType::kBF16;
  CHECK(c.Validate().ok()) << name << ": " << c.Validate().ToString();
  return c;
}

Result<ModelConfig> ShapeFromJson(std::string_view json_text, std::string_view source) {
  json shape = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (shape.is_discarded()) return InvalidArgument(std::string(source) + ": not valid JSON");
  if (!shape.is_object()) {
    return InvalidArgument(std::string(source) + ": expected a JSON object");
  }
  auto preset_it = shape.find("preset");
  if (preset_it == shape.end()) return ParseHfConfig(json_text, source);
  if (!preset_it->is_string()) {
    return InvalidArgument(std::string(source) + ": field 'preset' must be a string, got " +
                           preset_it->dump());
  }
  auto preset = PresetConfig(preset_it->get<std::string>());
  if (!preset.ok()) return preset.status().WithContext(source);
  shape.erase(preset_it);

  json merged = json::parse(ToHfConfigJson(*preset));
  const bool resizes_heads = shape.contains("hidden_size") || shape.contains("num_attention_heads");
  if (resizes_heads && !shape.contains("head_dim")) merged.erase("head_dim");
  merged.merge_patch(shape);
  return ParseHfConfig(merged.dump(), source);
}

}  // namespace kiln
