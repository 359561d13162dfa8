// ModelConfig and GenerationConfig from GGUF metadata (llama.cpp's key names).
//
//   general.architecture                 "llama" or "qwen2" (others: Unsupported)
//   {arch}.block_count                   num_layers
//   {arch}.embedding_length              hidden_size
//   {arch}.feed_forward_length           intermediate_size
//   {arch}.attention.head_count          num_heads
//   {arch}.attention.head_count_kv       num_kv_heads (default: num_heads)
//   {arch}.attention.key_length          head_dim (default: hidden_size / num_heads)
//   {arch}.context_length                max_position_embeddings
//   {arch}.attention.layer_norm_rms_epsilon, {arch}.rope.freq_base,
//   {arch}.rope.scaling.{type,factor,original_context_length}, {arch}.attention.sliding_window
//   {arch}.vocab_size, else the length of tokenizer.ggml.tokens, else token_embd rows
//   tokenizer.ggml.{bos,eos,padding}_token_id
// The embeddings are tied when the file has no output.weight. Qwen2 has q/k/v biases.
#pragma once

#include "model/config.h"
#include "model/gguf.h"

namespace kiln {

// Errors name the file and the key: NotFound for a missing required key, Corrupt for a key of
// the wrong type or value, Unsupported for other architectures.
Result<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf);

// Token ids from the tokenizer metadata; empty fields when absent.
GenerationConfig GenerationConfigFromGguf(const GgufFile& gguf);

}  // namespace kiln
