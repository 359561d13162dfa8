#include "builder/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "builder/normal_fill.h"
#include "builder/presets.h"
#include "builder/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ParsedSafetensors;
using testing::ParseSafetensors;
using testing::ReadFile;
using testing::ScopedTempDir;

// A small Qwen2-family shape (so q/k/v biases are present) with an untied lm_head.
ModelConfig TinyConfig() {
  ModelConfig c;
  c.family = ModelFamily::kQwen2;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 400;
  c.max_position_embeddings = 256;
  c.qkv_bias = true;
  c.bos_token_id = 300;
  c.eos_token_ids = {302};
  return c;
}

SynthOptions Options(const std::string& dir) {
  SynthOptions o;
  o.output_dir = dir;
  o.seed = 42;
  o.num_threads = 2;
  return o;
}

// Reads back every shard of the checkpoint in `dir` and checks it against `config` the way a
// loader would: names, shapes, dtypes, contiguous in-bounds offsets, file sizes, the index.
// Returns the data of every tensor by name.
std::map<std::string, std::string> ReadBack(const std::string& dir, const ModelConfig& config,
                                            const char* st_dtype, int expected_shards) {
  std::map<std::string, std::string> data;
  const int elem_bytes = std::string(st_dtype) == "F32" ? 4 : 2;
  std::vector<std::string> files;
  json index;
  if (expected_shards == 1) {
    files.push_back("model.safetensors");
    EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  } else {
    index = json::parse(ReadFile(dir + "/model.safetensors.index.json"));
    std::set<std::string> names;
    for (const auto& [name, file] : index["weight_map"].items()) names.insert(file);
    files.assign(names.begin(), names.end());
    EXPECT_EQ(files.size(), static_cast<size_t>(expected_shards));
    char first[64];
    std::snprintf(first, sizeof(first), "model-00001-of-%05d.safetensors", expected_shards);
    EXPECT_EQ(files[0], first);
  }
  int64_t total = 0;
  for (const std::string& file : files) {
    const std::string bytes = ReadFile(dir + "/" + file);
    const ParsedSafetensors st = ParseSafetensors(bytes);
    EXPECT_EQ((8 + st.header_len) % 8, 0u) << file;
    EXPECT_EQ(st.header["__metadata__"]["format"], "pt");
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& [name, info] : st.header.items()) {
      if (name == "__metadata__") continue;
      EXPECT_EQ(info["dtype"], st_dtype) << name;
      const int64_t begin = info["data_offsets"][0];
      const int64_t end = info["data_offsets"][1];
      int64_t numel = 1;
      for (int64_t d : info["shape"]) numel *= d;
      EXPECT_EQ(end - begin, numel * elem_bytes) << name;
      ranges.emplace_back(begin, end);
      data[name] = st.data.substr(begin, end - begin);
      if (expected_shards > 1) {
        EXPECT_EQ(index["weight_map"][name], file) << name;
      }
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (const auto& [begin, end] : ranges) {
      EXPECT_EQ(begin, at) << file << ": offsets not contiguous";
      at = end;
    }
    EXPECT_EQ(at, static_cast<int64_t>(st.data.size())) << file << ": data size";
    total += at;
  }
  if (expected_shards > 1) {
    EXPECT_EQ(index["metadata"]["total_size"], total);
  }

  // Every expected weight, with its shape, and nothing else.
  const std::vector<WeightSpec> specs = ExpectedWeights(config);
  EXPECT_EQ(data.size(), specs.size());
  for (const WeightSpec& w : specs) {
    EXPECT_TRUE(data.count(w.name)) << w.name;
    EXPECT_EQ(static_cast<int64_t>(data[w.name].size()), w.shape.numel() * elem_bytes) << w.name;
  }
  EXPECT_EQ(total, config.NumParameters() * elem_bytes);
  return data;
}

TEST(Synth, TinyCheckpointReadsBack) {
  ScopedTempDir dir("synth");
  const ModelConfig config = TinyConfig();
  SynthOptions o = Options(dir.path());
  o.max_shard_bytes = 40000;  // several shards
  SynthStats stats;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o, &stats).ok());
  EXPECT_EQ(stats.num_parameters, config.NumParameters());
  EXPECT_EQ(stats.weight_bytes, config.NumParameters() * 2);
  EXPECT_GT(stats.num_shards, 2);

  auto data = ReadBack(dir.path(), config, "BF16", stats.num_shards);
  // Norms are exactly 1; weights and biases follow the documented streams.
  const std::string& norm = data["model.layers.1.input_layernorm.weight"];
  for (size_t i = 0; i < norm.size(); i += 2) {
    ASSERT_EQ(static_cast<uint8_t>(norm[i]) | (static_cast<uint8_t>(norm[i + 1]) << 8), 0x3f80);
  }
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.bias", "lm_head.weight"}) {
    std::string expected(data[name].size(), '\0');
    FillNormal(TensorStreamKey(42, name), 0, expected.size() / 2, 0.02f, DType::kBF16,
               expected.data());
    EXPECT_EQ(data[name], expected) << name;
  }

  // config.json parses back to the same model; the tokenizer files are there.
  auto back = LoadHfConfig(dir.file("config.json"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->NumParameters(), config.NumParameters());
  EXPECT_EQ(back->dtype, DType::kBF16);
  EXPECT_EQ(*back->bos_token_id, 300);
  auto gen = LoadGenerationConfig(dir.file("generation_config.json"));
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->eos_token_ids, std::vector<int>{302});
  const json tok = json::parse(ReadFile(dir.file("tokenizer.json")));
  EXPECT_EQ(tok["model"]["vocab"].size(), 400u);
  EXPECT_EQ(json::parse(ReadFile(dir.file("tokenizer_config.json")))["eos_token"], "<|im_end|>");
  EXPECT_TRUE(fs::exists(dir.file("special_tokens_map.json")));
}

TEST(Synth, F16SingleFileTiedEmbeddings) {
  ScopedTempDir dir("synth_f16");
  ModelConfig config = TinyConfig();
  config.family = ModelFamily::kLlama;
  config.qkv_bias = false;
  config.tie_word_embeddings = true;
  SynthOptions o = Options(dir.path());
  o.dtype = DType::kF16;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o).ok());
  auto data = ReadBack(dir.path(), config, "F16", 1);
  EXPECT_FALSE(data.count("lm_head.weight"));
  EXPECT_EQ(LoadHfConfig(dir.file("config.json"))->dtype, DType::kF16);
}

TEST(Synth, SameBytesWhateverTheThreadCount) {
  ScopedTempDir a("synth_t1");
  ScopedTempDir b("synth_t5");
  ModelConfig config = TinyConfig();
  config.vocab_size = 70000;  // embed + lm_head over several 2M-element chunks
  SynthOptions o = Options(a.path());
  o.num_threads = 1;
  o.max_shard_bytes = 10'000'000;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o).ok());
  o.output_dir = b.path();
  o.num_threads = 5;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o).ok());
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json", "tokenizer.json", "config.json"}) {
    const std::string bytes = ReadFile(a.file(f));
    EXPECT_FALSE(bytes.empty()) << f;
    EXPECT_TRUE(bytes == ReadFile(b.file(f))) << f;
  }
}

TEST(Synth, CutDepthKeepsLayerValues) {
  ScopedTempDir a("synth_d2");
  ScopedTempDir b("synth_d1");
  ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, Options(a.path())).ok());
  config.num_layers = 1;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, Options(b.path())).ok());
  auto two = ReadBack(a.path(), TinyConfig(), "BF16", 1);
  auto one = ReadBack(b.path(), config, "BF16", 1);
  for (const auto& [name, bytes] : one) EXPECT_TRUE(bytes == two[name]) << name;
}

TEST(Synth, RefusesNonEmptyDirectoryUnlessForced) {
  ScopedTempDir dir("synth_force");
  const ModelConfig config = TinyConfig();
  SynthOptions o = Options(dir.path());
  o.max_shard_bytes = 40000;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o).ok());

  Status s = WriteSyntheticCheckpoint(config, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--force"), std::string::npos) << s.ToString();

  // --force with one shard now: the old shards and index go, unrelated files stay.
  { std::ofstream(dir.file("notes.txt")) << "keep me"; }
  o.max_shard_bytes = kDefaultMaxShardBytes;
  o.overwrite = OverwritePolicy::kReplaceCheckpoint;
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, o).ok());
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{
                       "config.json", "generation_config.json", "model.safetensors", "notes.txt",
                       "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}));

  // A file where the directory should be.
  o.output_dir = dir.file("notes.txt");
  EXPECT_EQ(WriteSyntheticCheckpoint(config, o).code(), StatusCode::kInvalidArgument);
}

TEST(Synth, ChecksFreeSpaceBeforeWriting) {
  ScopedTempDir dir("synth_space");
  ModelConfig config = TinyConfig();
  config.hidden_size = 1 << 20;  // ~100 TB of weights
  config.intermediate_size = 1 << 22;
  config.num_heads = 8192;
  config.num_kv_heads = 8192;
  config.head_dim = 128;
  config.num_layers = 1;
  Status s = WriteSyntheticCheckpoint(config, Options(dir.path()));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("free"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(dir.path()));  // nothing created
}

TEST(Synth, ConfigAndTokenizerOnly) {
  ScopedTempDir dir("synth_nw");
  auto config = PresetConfig("llama-3.1-8b");
  ASSERT_TRUE(config.ok());
  SynthOptions o = Options(dir.path());
  o.write_weights = false;
  SynthStats stats;
  ASSERT_TRUE(WriteSyntheticCheckpoint(*config, o, &stats).ok());
  EXPECT_EQ(stats.weight_bytes, 0);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  EXPECT_EQ(LoadHfConfig(dir.file("config.json"))->NumParameters(), 8'030'261'248);
}

TEST(Synth, RejectsBadOptions) {
  const ModelConfig config = TinyConfig();
  SynthOptions o = Options("");
  EXPECT_EQ(WriteSyntheticCheckpoint(config, o).code(), StatusCode::kInvalidArgument);
  ScopedTempDir dir("synth_bad");
  o.output_dir = dir.path();
  o.dtype = DType::kF32;
  EXPECT_EQ(WriteSyntheticCheckpoint(config, o).code(), StatusCode::kInvalidArgument);
  o.dtype = DType::kBF16;
  o.stddev = 0;
  EXPECT_EQ(WriteSyntheticCheckpoint(config, o).code(), StatusCode::kInvalidArgument);
  o.stddev = 0.02f;
  ModelConfig bad = config;
  bad.num_kv_heads = 3;
  EXPECT_EQ(WriteSyntheticCheckpoint(bad, o).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path()));  // nothing created for invalid input
}

}  // namespace
}  // namespace kiln
