// ModelConfig: the shape and hyper-parameters of a Llama-family decoder, whichever file it came
// from (HF config.json, GGUF metadata, an engine directory). Everything downstream (weight
// loading, memory planning, kernels) reads this struct, never the source file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

// The architecture families kiln implements. Llama 2/3/3.1, SmolLM and Mistral share one
// forward pass; Qwen2 adds biases on the q/k/v projections.
enum class ModelFamily : uint8_t { kLlama, kMistral, kQwen2 };
std::string_view ModelFamilyName(ModelFamily family);  // "llama", "mistral", "qwen2"

struct RopeScaling {
  enum class Type : uint8_t { kNone, kLinear, kDynamic, kLlama3, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;  // linear / dynamic / llama3 / yarn scale factor
  // llama3: frequencies below low_freq_factor and above high_freq_factor wavelengths thresholds.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: the context length the model was pre-trained with (0 = not given).
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn mscale override; default 0.1*ln(factor)+1
};
std::string_view RopeScalingTypeName(RopeScaling::Type type);  // "none", "linear", ...

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  std::string architecture;  // HF class (e.g. "LlamaForCausalLM"), or the GGUF architecture

  int num_layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless the checkpoint says otherwise
  int vocab_size = 0;
  int64_t max_position_embeddings = 0;

  float rms_norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;

  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // biases on q/k/v projections (Qwen2; Llama with attention_bias)
  bool o_bias = false;    // bias on the output projection (Llama with attention_bias)
  bool mlp_bias = false;  // biases on gate/up/down (Llama with mlp_bias)
  // Sliding-window attention size when the checkpoint enables it; recorded, not yet applied
  // by any backend (Mistral v0.1; Qwen2 only when use_sliding_window is true).
  std::optional<int64_t> sliding_window;

  DType dtype = DType::kBF16;  // the checkpoint's declared torch dtype
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  // The per-layer widths derived from the fields above.
  int64_t q_size() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_size() const { return int64_t{num_kv_heads} * head_dim; }

  // Checks that the fields describe a buildable model: positive sizes, heads dividing evenly,
  // num_heads a multiple of num_kv_heads. The message names the offending field.
  Status Validate() const;

  // Parameters implied by the shapes (embedding, every layer, final norm, lm_head if untied).
  int64_t NumParameters() const;

  // Bytes of K and V cache for one token across all layers, for a KV cache in `kv_dtype`.
  int64_t KvBytesPerToken(DType kv_dtype) const;
};

// Parses an HF config.json (its text). `source` (the file path) prefixes every error message.
// Supports model_type llama, mistral, qwen2; rope_scaling (or transformers 5's
// rope_parameters) of type linear, dynamic, llama3, yarn; tie_word_embeddings;
// attention_bias/mlp_bias; sliding_window; torch_dtype/dtype; bos/eos (int or list).
Result<ModelConfig> ParseHfConfig(std::string_view json_text, std::string_view source);
// Reads and parses `path` (an HF config.json).
Result<ModelConfig> LoadHfConfig(const std::string& path);
// Writes the config.json that HF transformers' LlamaForCausalLM / MistralForCausalLM /
// Qwen2ForCausalLM loads back into the same ModelConfig (pretty-printed JSON text).
std::string ToHfConfigJson(const ModelConfig& config);

// generation_config.json: the defaults a checkpoint suggests for sampling.
struct GenerationConfig {
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;
  std::optional<int> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
};
Result<GenerationConfig> ParseGenerationConfig(std::string_view json_text, std::string_view source);
Result<GenerationConfig> LoadGenerationConfig(const std::string& path);
std::string ToGenerationConfigJson(const GenerationConfig& config);

// Reads a whole small file (a JSON config) into a string. NotFound / IoError name the path.
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace kiln
