#include "model/test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/check.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kiln::testing {
namespace fs = std::filesystem;

TestTensor MakeTensor(const std::string& name, DType dtype, const Shape& shape, uint32_t seed) {
  TestTensor t;
  t.name = name;
  t.dtype = std::string(*SafetensorsDTypeName(dtype));
  t.shape.assign(shape.begin(), shape.end());
  const int64_t n = *DTypeByteSize(dtype, shape.numel());
  t.data.resize(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : t.data) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x & 0x3f);  // keeps bf16/f16 values small and finite
  }
  return t;
}

std::string SafetensorsBytes(const std::vector<TestTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TestTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  const uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += h;
  for (const TestTensor& t : tensors) out += t.data;
  return out;
}

std::string MakeTempDir(const std::string& stem) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  const fs::path p =
      fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
      ("kiln_test_" + std::to_string(::getpid()) + "_" + stem + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  CHECK(out.good()) << path;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  CHECK(out.good()) << path;
}

void WriteTinyCheckpoint(const std::string& dir, const ModelConfig& config, int num_shards) {
  WriteFile(dir + "/config.json", ToHfConfigJson(config));
  const std::vector<WeightSpec> specs = ExpectedWeights(config);
  std::vector<std::vector<TestTensor>> shards(num_shards);
  uint32_t seed = 1;
  for (size_t i = 0; i < specs.size(); ++i) {
    shards[i * num_shards / specs.size()].push_back(
        MakeTensor(specs[i].name, DType::kBF16, specs[i].shape, seed++));
  }
  if (num_shards == 1) {
    WriteFile(dir + "/model.safetensors", SafetensorsBytes(shards[0]));
    return;
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (int s = 0; s < num_shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, num_shards);
    WriteFile(dir + "/" + name, SafetensorsBytes(shards[s]));
    for (const TestTensor& t : shards[s]) index["weight_map"][t.name] = name;
  }
  WriteFile(dir + "/model.safetensors.index.json", index.dump(2));
}

std::vector<int32_t> RandomTokenIds(int n, uint32_t seed, int32_t max_id) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, max_id);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = dist(rng);
  return out;
}

std::string CompressedTensorsFp8Config() {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized",
             "config_groups": {"group_0": {
               "targets": ["Linear"],
               "weights": {"type": "float", "num_bits": 8, "strategy": "channel",
                           "dynamic": false, "symmetric": true},
               "input_activations": {"type": "float", "num_bits": 8, "strategy": "token",
                                     "dynamic": true, "symmetric": true}}},
             "ignore": ["lm_head"], "quantization_status": "compressed"})";
}

ModelConfig TinyLlamaConfig() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.num_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 128;
  c.max_position_embeddings = 256;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

}  // namespace kiln::testing
