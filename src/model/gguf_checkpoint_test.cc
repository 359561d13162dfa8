#include <gtest/gtest.h>

#include <cstdlib>

#include "model/checkpoint.h"
#include "model/gguf_test_util.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

using testing::Bytes;
using testing::Filler;
using testing::GgufBuilder;
using testing::Scalar;
using testing::Str;

constexpr uint32_t kF32 = 0;

// The GGUF name llama.cpp uses for an HF weight name of the tiny model.
std::string GgufName(const std::string& hf) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  for (auto [from, to] : kMap) {
    if (hf.substr(dot + 1) == from) return "blk." + layer + "." + to;
  }
  ADD_FAILURE() << hf;
  return hf;
}

// A tiny llama GGUF (testing::TinyLlamaConfig's shape) with f32 weights.
GgufBuilder TinyLlamaGguf(const std::string& arch = "llama") {
  const ModelConfig c = testing::TinyLlamaConfig();
  GgufBuilder g;
  g.Kv("general.architecture", Str(arch))
      .Kv("general.name", Str("tiny"))
      .Kv(arch + ".block_count", Scalar<uint32_t>(GgufType::kUint32, c.num_layers))
      .Kv(arch + ".embedding_length", Scalar<uint32_t>(GgufType::kUint32, c.hidden_size))
      .Kv(arch + ".feed_forward_length", Scalar<uint32_t>(GgufType::kUint32, c.intermediate_size))
      .Kv(arch + ".attention.head_count", Scalar<uint32_t>(GgufType::kUint32, c.num_heads))
      .Kv(arch + ".attention.head_count_kv", Scalar<uint32_t>(GgufType::kUint32, c.num_kv_heads))
      .Kv(arch + ".context_length", Scalar<uint32_t>(GgufType::kUint32, 256))
      .Kv(arch + ".rope.freq_base", Scalar<float>(GgufType::kFloat32, 100000.0f))
      .Kv(arch + ".attention.layer_norm_rms_epsilon", Scalar<float>(GgufType::kFloat32, 1e-5f))
      .Kv(arch + ".vocab_size", Scalar<uint32_t>(GgufType::kUint32, c.vocab_size))
      .Kv("tokenizer.ggml.bos_token_id", Scalar<uint32_t>(GgufType::kUint32, 1))
      .Kv("tokenizer.ggml.eos_token_id", Scalar<uint32_t>(GgufType::kUint32, 2));
  ModelConfig tied = c;
  tied.tie_word_embeddings = true;
  uint32_t seed = 1;
  for (const WeightSpec& w : ExpectedWeights(tied)) {
    std::vector<uint64_t> ne(w.shape.begin(), w.shape.end());
    std::reverse(ne.begin(), ne.end());
    g.Tensor(GgufName(w.name), ne, kF32, Filler(w.shape.numel() * 4, seed++));
  }
  return g;
}

std::string WriteGguf(GgufBuilder& g) {
  static const std::string dir = testing::MakeTempDir("gguf_ckpt");
  static int n = 0;
  const std::string path = dir + "/m" + std::to_string(n++) + ".gguf";
  EXPECT_TRUE(testing::WriteFile(path, g.Build()));
  return path;
}

TEST(GgufCheckpoint, OpensTinyLlama) {
  GgufBuilder g = TinyLlamaGguf();
  auto ckpt = Checkpoint::Open(WriteGguf(g));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const ModelConfig& c = ckpt->config();
  EXPECT_EQ(ckpt->format(), CheckpointFormat::kGguf);
  EXPECT_EQ(ckpt->name(), "tiny");
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
  EXPECT_EQ(*c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(ckpt->qk_rope_layout(), QkRopeLayout::kInterleaved);
  const Weight* q = ckpt->Find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->source_name, "blk.1.attn_q.weight");
  EXPECT_EQ(q->shape, (Shape{64, 64}));
  EXPECT_EQ(q->dtype, DType::kF32);
  EXPECT_EQ(ckpt->NumStoredParameters(), c.NumParameters());
  EXPECT_EQ(DefaultGpuDType(*ckpt), DType::kF16);  // GGUF runs in fp16 on the GPU
}

TEST(GgufCheckpoint, Qwen2KeepsHalfSplitRopeAndNeedsBiases) {
  GgufBuilder g = TinyLlamaGguf("qwen2");
  auto missing_bias = Checkpoint::Open(WriteGguf(g));
  ASSERT_FALSE(missing_bias.ok());
  EXPECT_EQ(missing_bias.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing_bias.status().message().find("self_attn.q_proj.bias"), std::string::npos);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    g.Tensor(p + "attn_q.bias", {64}, kF32, Filler(256, 9));
    g.Tensor(p + "attn_k.bias", {32}, kF32, Filler(128, 9));
    g.Tensor(p + "attn_v.bias", {32}, kF32, Filler(128, 9));
  }
  auto ckpt = Checkpoint::Open(WriteGguf(g));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->qk_rope_layout(), QkRopeLayout::kHalfSplit);
  EXPECT_TRUE(ckpt->config().qkv_bias);
}

TEST(GgufCheckpoint, BadMetadataAndTensorsNameTheProblem) {
  {
    GgufBuilder g = TinyLlamaGguf("falcon");
    auto r = Checkpoint::Open(WriteGguf(g));
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(r.status().message().find("falcon"), std::string::npos);
  }
  {
    GgufBuilder g = TinyLlamaGguf();
    g.kvs.erase(g.kvs.begin() + 2);  // llama.block_count
    auto r = Checkpoint::Open(WriteGguf(g));
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("llama.block_count"), std::string::npos);
  }
  {
    GgufBuilder g = TinyLlamaGguf();
    g.tensors.pop_back();  // model.norm.weight
    auto r = Checkpoint::Open(WriteGguf(g));
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("model.norm.weight"), std::string::npos);
  }
  {
    GgufBuilder g = TinyLlamaGguf();
    g.tensors[3].ne = {64, 16};  // blk.0.attn_k.weight: 16 rows instead of 32
    g.tensors[3].data.resize(64 * 16 * 4);
    auto r = Checkpoint::Open(WriteGguf(g));
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(r.status().message().find("'blk.0.attn_k.weight' has shape [16, 64]"),
              std::string::npos)
        << r.status().ToString();
  }
  {
    GgufBuilder g = TinyLlamaGguf();
    g.kvs[4].second = Scalar<uint32_t>(GgufType::kUint32, 3);  // 3 heads for hidden 64
    auto r = Checkpoint::Open(WriteGguf(g));
    EXPECT_FALSE(r.ok());
  }
}

// The real default model (KILN_DEFAULT_MODEL, set by scripts/test).
TEST(GgufCheckpoint, DefaultModel) {
  const char* path = std::getenv("KILN_DEFAULT_MODEL");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "KILN_DEFAULT_MODEL not set; scripts/test sets it after fetching the model";
  }
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const ModelConfig& c = ckpt->config();
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(ckpt->NumStoredParameters(), 134515008);  // SmolLM2-135M
  EXPECT_EQ(ckpt->Find("model.embed_tokens.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ(ckpt->Find("model.layers.0.mlp.up_proj.weight")->dtype, DType::kQ4_1);
  EXPECT_EQ(ckpt->Find("model.norm.weight")->dtype, DType::kF32);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
}

}  // namespace
}  // namespace kiln
