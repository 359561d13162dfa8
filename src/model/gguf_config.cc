#include "model/gguf_config.h"

#include <limits>

namespace kiln {
namespace {

// Reads an optional integer key into `out`, range-checked into int.
template <typename T>
Status OptionalInt(const GgufFile& f, const std::string& key, T* out) {
  if (!f.Has(key)) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v < 0 || v > std::numeric_limits<T>::max()) {
    return Corrupt(f.path() + ": metadata '" + key + "' = " + std::to_string(v) +
                   " is out of range");
  }
  *out = static_cast<T>(v);
  return Status::Ok();
}

template <typename T>
Status RequiredInt(const GgufFile& f, const std::string& key, T* out) {
  if (!f.Has(key)) {
    return NotFound(f.path() + ": metadata key '" + key + "' is missing");
  }
  return OptionalInt(f, key, out);
}

}  // namespace

Result<ModelConfig> ModelConfigFromGguf(const GgufFile& f) {
  KILN_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  ModelConfig c;
  if (arch == "llama") {
    c.family = ModelFamily::kLlama;
  } else if (arch == "qwen2") {
    c.family = ModelFamily::kQwen2;
    c.qkv_bias = true;
  } else {
    return Unsupported(f.path() + ": GGUF architecture '" + arch +
                       "' is not supported; kiln reads llama and qwen2 GGUF files");
  }
  c.architecture = arch;
  const std::string p = arch + ".";
  KILN_RETURN_IF_ERROR(RequiredInt(f, p + "block_count", &c.num_layers));
  KILN_RETURN_IF_ERROR(RequiredInt(f, p + "embedding_length", &c.hidden_size));
  KILN_RETURN_IF_ERROR(RequiredInt(f, p + "feed_forward_length", &c.intermediate_size));
  KILN_RETURN_IF_ERROR(RequiredInt(f, p + "attention.head_count", &c.num_heads));
  c.num_kv_heads = c.num_heads;
  KILN_RETURN_IF_ERROR(OptionalInt(f, p + "attention.head_count_kv", &c.num_kv_heads));
  if (c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  KILN_RETURN_IF_ERROR(OptionalInt(f, p + "attention.key_length", &c.head_dim));
  c.max_position_embeddings = 2048;
  KILN_RETURN_IF_ERROR(OptionalInt(f, p + "context_length", &c.max_position_embeddings));
  if (f.Has(p + "attention.layer_norm_rms_epsilon")) {
    KILN_ASSIGN_OR_RETURN(double eps, f.GetFloat(p + "attention.layer_norm_rms_epsilon"));
    c.rms_norm_eps = static_cast<float>(eps);
  }
  if (f.Has(p + "rope.freq_base")) {
    KILN_ASSIGN_OR_RETURN(c.rope_theta, f.GetFloat(p + "rope.freq_base"));
  }
  if (f.Has(p + "rope.scaling.type")) {
    KILN_ASSIGN_OR_RETURN(std::string type, f.GetString(p + "rope.scaling.type"));
    if (type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
    } else if (type == "yarn") {
      c.rope_scaling.type = RopeScaling::Type::kYarn;
    } else if (type != "none") {
      return Unsupported(f.path() + ": rope.scaling.type '" + type + "' is not supported");
    }
    if (f.Has(p + "rope.scaling.factor")) {
      KILN_ASSIGN_OR_RETURN(c.rope_scaling.factor, f.GetFloat(p + "rope.scaling.factor"));
    }
    KILN_RETURN_IF_ERROR(OptionalInt(f, p + "rope.scaling.original_context_length",
                                     &c.rope_scaling.original_max_position_embeddings));
  }
  int64_t window = 0;
  KILN_RETURN_IF_ERROR(OptionalInt(f, p + "attention.sliding_window", &window));
  if (window > 0) c.sliding_window = window;

  if (f.Has(p + "vocab_size")) {
    KILN_RETURN_IF_ERROR(OptionalInt(f, p + "vocab_size", &c.vocab_size));
  } else if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
             tokens != nullptr && tokens->AsArray() != nullptr) {
    c.vocab_size = static_cast<int>(
        std::min<size_t>(tokens->AsArray()->size(), std::numeric_limits<int>::max()));
  } else if (const GgufTensor* emb = f.FindTensor("token_embd.weight");
             emb != nullptr && emb->shape.ndim() == 2) {
    c.vocab_size =
        static_cast<int>(std::min<int64_t>(emb->shape[0], std::numeric_limits<int>::max()));
  }
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  const GgufTensor* q_bias = f.FindTensor("blk.0.attn_q.bias");
  if (q_bias != nullptr) c.qkv_bias = true;
  if (f.FindTensor("blk.0.attn_output.bias") != nullptr) c.o_bias = true;
  if (f.FindTensor("blk.0.ffn_gate.bias") != nullptr) c.mlp_bias = true;

  // GGUF declares no compute dtype; the CUDA backend runs GGUF files in fp16 (DefaultGpuDType).
  c.dtype = DType::kBF16;
  const GenerationConfig g = GenerationConfigFromGguf(f);
  c.bos_token_id = g.bos_token_id;
  c.eos_token_ids = g.eos_token_ids;
  Status s = c.Validate();
  if (!s.ok()) return Corrupt(f.path() + ": metadata describes an invalid model: " + s.message());
  return c;
}

GenerationConfig GenerationConfigFromGguf(const GgufFile& f) {
  GenerationConfig g;
  auto id = [&](const char* key) -> std::optional<int> {
    auto v = f.GetInt(key);
    if (!v.ok() || *v < 0 || *v > std::numeric_limits<int>::max()) return std::nullopt;
    return static_cast<int>(*v);
  };
  g.bos_token_id = id("tokenizer.ggml.bos_token_id");
  if (auto eos = id("tokenizer.ggml.eos_token_id")) g.eos_token_ids = {*eos};
  if (auto eot = id("tokenizer.ggml.eot_token_id");
      eot && (g.eos_token_ids.empty() || g.eos_token_ids[0] != *eot)) {
    g.eos_token_ids.push_back(*eot);
  }
  g.pad_token_id = id("tokenizer.ggml.padding_token_id");
  return g;
}

}  // namespace kiln
