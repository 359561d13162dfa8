#include "model/weights.h"

namespace kiln {

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  std::vector<WeightSpec> w;
  w.reserve(4 + static_cast<size_t>(c.num_layers) * 16);
  w.push_back({"model.embed_tokens.weight", Shape{c.vocab_size, h}, false});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.push_back({p + "input_layernorm.weight", Shape{h}, true});
    w.push_back({p + "self_attn.q_proj.weight", Shape{c.q_size(), h}, false});
    w.push_back({p + "self_attn.k_proj.weight", Shape{c.kv_size(), h}, false});
    w.push_back({p + "self_attn.v_proj.weight", Shape{c.kv_size(), h}, false});
    if (c.qkv_bias) {
      w.push_back({p + "self_attn.q_proj.bias", Shape{c.q_size()}, false});
      w.push_back({p + "self_attn.k_proj.bias", Shape{c.kv_size()}, false});
      w.push_back({p + "self_attn.v_proj.bias", Shape{c.kv_size()}, false});
    }
    w.push_back({p + "self_attn.o_proj.weight", Shape{h, c.q_size()}, false});
    if (c.o_bias) w.push_back({p + "self_attn.o_proj.bias", Shape{h}, false});
    w.push_back({p + "post_attention_layernorm.weight", Shape{h}, true});
    w.push_back({p + "mlp.gate_proj.weight", Shape{inter, h}, false});
    w.push_back({p + "mlp.up_proj.weight", Shape{inter, h}, false});
    w.push_back({p + "mlp.down_proj.weight", Shape{h, inter}, false});
    if (c.mlp_bias) {
      w.push_back({p + "mlp.gate_proj.bias", Shape{inter}, false});
      w.push_back({p + "mlp.up_proj.bias", Shape{inter}, false});
      w.push_back({p + "mlp.down_proj.bias", Shape{h}, false});
    }
  }
  w.push_back({"model.norm.weight", Shape{h}, true});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", Shape{c.vocab_size, h}, false});
  return w;
}

}  // namespace kiln
