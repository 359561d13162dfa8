// Checkpoint::OpenGguf: a GGUF file as a kiln checkpoint. Metadata becomes a ModelConfig, tensor
// names are translated to HF names, and tensors stay in their (possibly quantized) dtypes.
#include <filesystem>
#include <map>

#include "core/logging.h"
#include "model/checkpoint.h"
#include "model/checkpoint_files.h"
#include "model/gguf_config.h"
#include "model/weights.h"

namespace kiln {
namespace {

// "blk.7.attn_q.weight" -> "model.layers.7.self_attn.q_proj.weight"; nullopt for names that are
// not part of the Llama family's weights (e.g. rope_freqs.weight).
std::optional<std::string> GgufToHfName(std::string_view name) {
  static const std::map<std::string_view, std::string_view> kGlobal = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  static const std::map<std::string_view, std::string_view> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (auto it = kGlobal.find(name); it != kGlobal.end()) return std::string(it->second);
  if (!name.starts_with("blk.")) return std::nullopt;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return std::nullopt;
  const std::string_view layer = name.substr(4, dot - 4);
  for (char ch : layer) {
    if (ch < '0' || ch > '9') return std::nullopt;
  }
  auto it = kLayer.find(name.substr(dot + 1));
  if (it == kLayer.end()) return std::nullopt;
  return "model.layers." + std::string(layer) + "." + std::string(it->second);
}

}  // namespace

Result<Checkpoint> Checkpoint::OpenGguf(const std::string& file) {
  Checkpoint ckpt;
  ckpt.format_ = CheckpointFormat::kGguf;
  ckpt.path_ = file;
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(file));
  KILN_ASSIGN_OR_RETURN(ckpt.config_, ModelConfigFromGguf(gguf));
  ckpt.generation_config_ = GenerationConfigFromGguf(gguf);
  // llama.cpp's converter permutes q/k rows of `llama` models into the interleaved layout;
  // qwen2 keeps HF's layout (it uses NeoX-style rope in llama.cpp too).
  ckpt.qk_rope_layout_ = ckpt.config_.family == ModelFamily::kQwen2 ? QkRopeLayout::kHalfSplit
                                                                    : QkRopeLayout::kInterleaved;
  auto name = gguf.GetString("general.name");
  ckpt.name_ = name.ok() ? *name : std::filesystem::path(file).stem().string();

  std::map<std::string, const GgufTensor*> by_hf_name;
  for (const GgufTensor& t : gguf.tensors()) {
    if (auto hf = GgufToHfName(t.name)) by_hf_name[*hf] = &t;
  }
  if (gguf.FindTensor("rope_freqs.weight") != nullptr) {
    LOG(WARNING) << file
                 << ": has rope_freqs.weight (llama3 rope scaling factors); kiln does not "
                    "apply them yet, so positions past the original context will differ";
  }
  for (const WeightSpec& spec : ExpectedWeights(ckpt.config_)) {
    auto it = by_hf_name.find(spec.name);
    if (it == by_hf_name.end()) {
      return NotFound(file + ": tensor for '" + spec.name +
                      "' is missing (the metadata implies it)");
    }
    const GgufTensor& t = *it->second;
    if (!t.dtype) {
      return Unsupported(file + ": tensor '" + t.name + "' has ggml type " +
                         std::string(t.type_name) +
                         ", which kiln cannot dequantize yet (supported: f32, f16, bf16, q4_0, "
                         "q4_1, q5_0, q5_1, q8_0, q2_k..q6_k)");
    }
    if (!(t.shape == spec.shape)) {
      return Corrupt(file + ": tensor '" + t.name + "' has shape " + t.shape.ToString() +
                     " but the metadata implies " + spec.shape.ToString());
    }
    ckpt.weights_.push_back(Weight{spec.name, t.name, file, *t.dtype, t.shape,
                                   static_cast<int64_t>(t.num_bytes), t.data});
  }
  ckpt.files_->gguf.emplace(std::move(gguf));
  return ckpt;
}

}  // namespace kiln
