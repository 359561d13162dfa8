// The weights a Llama-family checkpoint must hold, named as HF transformers names them
// (`model.layers.{i}.self_attn.q_proj.weight`, ...), with their row-major shapes. This list is
// the single source for checkpoint validation, parameter counting and synthetic checkpoints.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace kiln {

struct WeightSpec {
  std::string name;  // HF name
  Shape shape;       // row-major: a Linear weight is [out_features, in_features]
  bool is_norm;      // an RMSNorm scale (kept in f32 by quantizers, initialised to 1)
};

// Every weight of `config`, in a stable order: embedding, then per layer (input norm, q, k, v,
// o, their biases when present, post-attention norm, gate, up, down), then final norm, then
// lm_head unless the embeddings are tied.
// REQUIRES: config.Validate() is OK.
std::vector<WeightSpec> ExpectedWeights(const ModelConfig& config);

}  // namespace kiln
