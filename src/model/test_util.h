// Test helpers: build small safetensors files and HF checkpoint directories in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/config.h"

namespace kiln::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors dtype string, "BF16"
  std::vector<int64_t> shape;
  std::string data;  // raw bytes
};

// A tensor filled with bytes derived from `seed`, sized for `dtype` and `shape`.
TestTensor MakeTensor(const std::string& name, DType dtype, const Shape& shape, uint32_t seed);

// Serializes tensors (in order, contiguous) into safetensors bytes.
std::string SafetensorsBytes(const std::vector<TestTensor>& tensors);

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& stem);
void WriteFile(const std::string& path, const std::string& bytes);

// Writes config.json and the expected weights of `config` as bf16 into `dir`, in
// `num_shards` shards (with model.safetensors.index.json when > 1).
void WriteTinyCheckpoint(const std::string& dir, const ModelConfig& config, int num_shards);

// A small valid Llama config (2 layers, hidden 64, 4 heads, 2 kv heads, vocab 128).
ModelConfig TinyLlamaConfig();

// `n` token ids uniform in [0, max_id], from `seed`.
std::vector<int32_t> RandomTokenIds(int n, uint32_t seed, int32_t max_id);

// The quantization_config (JSON text) of an llm-compressor FP8-Dynamic checkpoint:
// compressed-tensors, per-channel e4m3 weights, per-token dynamic e4m3 activations.
std::string CompressedTensorsFp8Config();

}  // namespace kiln::testing
