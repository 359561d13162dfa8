#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/config.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::MakeTempDir;
using testing::TinyLlamaConfig;
using testing::WriteFile;
using testing::WriteTinyCheckpoint;

TEST(Checkpoint, OpensSingleFileHfDirectory) {
  const std::string dir = MakeTempDir("ckpt_single");
  ModelConfig c = TinyLlamaConfig();
  WriteTinyCheckpoint(dir, c, 1);
  WriteFile(dir + "/generation_config.json", R"({"temperature": 0.7, "eos_token_id": 2})");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->format(), CheckpointFormat::kHfDirectory);
  EXPECT_EQ(ckpt->config().num_layers, 2);
  EXPECT_EQ(ckpt->weights().size(), ExpectedWeights(c).size());
  EXPECT_EQ(ckpt->NumStoredParameters(), c.NumParameters());
  EXPECT_EQ(ckpt->WeightBytes(), 2 * c.NumParameters());
  EXPECT_EQ(ckpt->WeightBytesByDType().at(DType::kBF16), 2 * c.NumParameters());
  EXPECT_EQ(*ckpt->generation_config()->temperature, 0.7);
  EXPECT_EQ(ckpt->qk_rope_layout(), QkRopeLayout::kHalfSplit);
  const Weight* q = ckpt->Find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (Shape{64, 64}));
  EXPECT_TRUE(q->file.ends_with("model.safetensors"));
}

TEST(Checkpoint, DefaultGpuDTypeFollowsTheDeclaredDtype) {
  // float16 checkpoints run in fp16; bfloat16 and float32 ones (fp16 may not hold their range)
  // in bf16.
  const std::pair<DType, DType> cases[] = {
      {DType::kBF16, DType::kBF16}, {DType::kF16, DType::kF16}, {DType::kF32, DType::kBF16}};
  for (const auto& [declared, expected] : cases) {
    const std::string dir = MakeTempDir("ckpt_dtype");
    ModelConfig c = TinyLlamaConfig();
    c.dtype = declared;
    WriteTinyCheckpoint(dir, c, 1);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ(DefaultGpuDType(*ckpt), expected) << DTypeName(declared);
  }
}

TEST(Checkpoint, OpensShardedDirectoryAndMovesSafely) {
  const std::string dir = MakeTempDir("ckpt_sharded");
  ModelConfig c = TinyLlamaConfig();
  c.tie_word_embeddings = true;
  WriteTinyCheckpoint(dir, c, 3);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  Checkpoint moved = std::move(ckpt).value();
  EXPECT_EQ(moved.Find("lm_head.weight"), nullptr);
  const Weight* down = moved.Find("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_TRUE(down->file.ends_with("model-00003-of-00003.safetensors"));
  EXPECT_EQ(down->shape, (Shape{64, 96}));
  volatile uint8_t sum = 0;  // the view still points at mapped memory after the move
  for (int64_t i = 0; i < down->nbytes; ++i) sum = sum + down->data[i];
  (void)sum;
}

// Each case breaks one thing in an otherwise valid checkpoint and expects an error naming it.
TEST(Checkpoint, BadCheckpointsNameTheFileAndTensor) {
  ModelConfig c = TinyLlamaConfig();
  struct Case {
    std::string what;
    std::function<void(const std::string&)> breaker;
    StatusCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"no config", [](const std::string& d) { fs::remove(d + "/config.json"); },
       StatusCode::kNotFound, "config.json: missing"},
      {"missing shard",
       [](const std::string& d) { fs::remove(d + "/model-00002-of-00002.safetensors"); },
       StatusCode::kNotFound, "model-00002-of-00002.safetensors"},
      {"truncated shard",
       [](const std::string& d) { fs::resize_file(d + "/model-00001-of-00002.safetensors", 100); },
       StatusCode::kCorrupt, "model-00001-of-00002.safetensors"},
      {"shape contradicts config",
       [&](const std::string& d) {
         ModelConfig wider = c;
         wider.intermediate_size = 128;
         WriteFile(d + "/config.json", ToHfConfigJson(wider));
       },
       StatusCode::kCorrupt, "'model.layers.0.mlp.gate_proj.weight' has shape [96, 64]"},
      {"missing weight",
       [&](const std::string& d) {
         ModelConfig deeper = c;
         deeper.num_layers = 3;
         WriteFile(d + "/config.json", ToHfConfigJson(deeper));
       },
       StatusCode::kNotFound, "model.layers.2.input_layernorm.weight"},
      {"index points at a shard without the tensor",
       [](const std::string& d) {
         WriteFile(d + "/model.safetensors.index.json",
                   R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
       },
       StatusCode::kNotFound, "model.norm.weight"},
      {"index escapes the directory",
       [](const std::string& d) {
         WriteFile(d + "/model.safetensors.index.json",
                   R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})");
       },
       StatusCode::kCorrupt, "../x.safetensors"},
      {"unsupported architecture",
       [](const std::string& d) {
         WriteFile(d + "/config.json", R"({"model_type": "mamba", "num_hidden_layers": 2})");
       },
       StatusCode::kUnsupported, "mamba"},
  };
  for (const Case& tc : cases) {
    const std::string dir = MakeTempDir("ckpt_bad");
    WriteTinyCheckpoint(dir, c, 2);
    tc.breaker(dir);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok()) << tc.what;
    EXPECT_EQ(ckpt.status().code(), tc.code) << tc.what << ": " << ckpt.status().ToString();
    EXPECT_NE(ckpt.status().message().find(tc.needle), std::string::npos)
        << tc.what << ": " << ckpt.status().ToString();
  }
}

TEST(Checkpoint, RejectsWhatIsNotACheckpoint) {
  const std::string dir = MakeTempDir("ckpt_not");
  EXPECT_EQ(Checkpoint::Open(dir + "/nope").status().code(), StatusCode::kNotFound);
  WriteFile(dir + "/config.json", ToHfConfigJson(TinyLlamaConfig()));
  auto empty = Checkpoint::Open(dir);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find("model.safetensors"), std::string::npos);
  WriteFile(dir + "/pytorch_model.bin", "x");
  EXPECT_EQ(Checkpoint::Open(dir).status().code(), StatusCode::kUnsupported);
  WriteFile(dir + "/notes.txt", "hello");
  auto txt = Checkpoint::Open(dir + "/notes.txt");
  EXPECT_EQ(txt.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(txt.status().message().find("bad magic"), std::string::npos);
  auto config = Checkpoint::Open(dir + "/config.json");
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("pass the checkpoint directory"), std::string::npos);
}

}  // namespace
}  // namespace kiln
