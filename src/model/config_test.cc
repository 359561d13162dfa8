#include "model/config.h"

#include <gtest/gtest.h>

#include "model/weights.h"

namespace kiln {
namespace {

// Llama-3.1-8B's config.json as published.
constexpr char kLlama31_8B[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr char kQwen2_7B[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
  "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
  "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
  "vocab_size": 152064})";

TEST(ModelConfig, ParsesLlama31) {
  auto c = ParseHfConfig(kLlama31_8B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(*c->bos_token_id, 128000);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->sliding_window.has_value());
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_EQ(c->NumParameters(), 8030261248);  // the published 8.03 B
  // 2 (K, V) * 32 layers * 8 heads * 128 dims * 2 bytes
  EXPECT_EQ(c->KvBytesPerToken(DType::kBF16), 131072);
  EXPECT_EQ(c->KvBytesPerToken(DType::kF8E4M3), 65536);
}

TEST(ModelConfig, ParsesQwen2WithBiasAndDisabledWindow) {
  auto c = ParseHfConfig(kQwen2_7B, "qwen/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kQwen2);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->sliding_window.has_value());  // use_sliding_window is false
  EXPECT_EQ(c->NumParameters(), 7615616512);    // Qwen2-7B's published count
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{151645}));
}

TEST(ModelConfig, MistralWindowAndTransformers5RopeParameters) {
  auto c = ParseHfConfig(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 100, "sliding_window": 4096, "dtype": "float16",
      "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                          "original_max_position_embeddings": 4096}})",
                         "m.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->sliding_window, 4096);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->max_position_embeddings, 2048);  // HF's default when absent
}

TEST(ModelConfig, RoundTripsThroughHfJson) {
  for (const char* text : {kLlama31_8B, kQwen2_7B}) {
    auto a = ParseHfConfig(text, "a.json");
    ASSERT_TRUE(a.ok());
    auto b = ParseHfConfig(ToHfConfigJson(*a), "b.json");
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << ToHfConfigJson(*a);
    EXPECT_EQ(ToHfConfigJson(*a), ToHfConfigJson(*b));
    EXPECT_EQ(a->NumParameters(), b->NumParameters());
    EXPECT_EQ(a->rope_scaling.type, b->rope_scaling.type);
    EXPECT_EQ(a->qkv_bias, b->qkv_bias);
  }
}

struct BadCase {
  const char* json;
  StatusCode code;
  const char* needle;
};

TEST(ModelConfig, RejectsBadInputWithActionableMessages) {
  const BadCase cases[] = {
      {"not json", StatusCode::kInvalidArgument, "not valid JSON"},
      {"[1]", StatusCode::kInvalidArgument, "expected a JSON object"},
      {R"({"num_hidden_layers": 2})", StatusCode::kInvalidArgument, "model_type"},
      {R"({"model_type": "gpt2"})", StatusCode::kUnsupported, "gpt2"},
      {R"({"model_type": "llama", "hidden_size": 64})", StatusCode::kInvalidArgument,
       "num_hidden_layers"},
      {R"({"model_type": "llama", "num_hidden_layers": "2", "hidden_size": 64})",
       StatusCode::kInvalidArgument, "must be an integer"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "intermediate_size": 1, "num_attention_heads": 4, "num_key_value_heads": 3,
           "vocab_size": 10})",
       StatusCode::kInvalidArgument, "multiple of num_key_value_heads"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "intermediate_size": 1, "num_attention_heads": 4, "vocab_size": 10,
           "rope_scaling": {"rope_type": "longrope", "factor": 2}})",
       StatusCode::kUnsupported, "longrope"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "intermediate_size": 1, "num_attention_heads": 4, "vocab_size": 10,
           "eos_token_id": 10})",
       StatusCode::kInvalidArgument, "outside the vocabulary"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "intermediate_size": 1, "num_attention_heads": 4, "vocab_size": 10,
           "hidden_act": "gelu"})",
       StatusCode::kUnsupported, "hidden_act"},
  };
  for (const BadCase& bc : cases) {
    auto c = ParseHfConfig(bc.json, "/ckpt/config.json");
    ASSERT_FALSE(c.ok()) << bc.json;
    EXPECT_EQ(c.status().code(), bc.code) << c.status().ToString();
    EXPECT_NE(c.status().message().find(bc.needle), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find("/ckpt/config.json"), std::string::npos)
        << c.status().ToString();
  }
}

TEST(ModelConfig, ExpectedWeightsOrderAndBiases) {
  auto c = ParseHfConfig(kQwen2_7B, "q.json");
  ASSERT_TRUE(c.ok());
  c->num_layers = 1;
  auto w = ExpectedWeights(*c);
  ASSERT_EQ(w.size(), 15u);  // embed, 12 per layer with 3 biases, norm, lm_head
  EXPECT_EQ(w[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(w[0].shape, (Shape{152064, 3584}));
  EXPECT_EQ(w[5].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(w[6].shape, (Shape{512}));
  EXPECT_EQ(w.back().name, "lm_head.weight");
  EXPECT_TRUE(w[1].is_norm);
}

TEST(GenerationConfig, ParsesAndWrites) {
  auto g = ParseGenerationConfig(
      R"({"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": true, "temperature": 0.6,
          "top_p": 0.9, "top_k": 50, "transformers_version": "4.45"})",
      "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*g->bos_token_id, 1);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(*g->temperature, 0.6);
  EXPECT_EQ(*g->top_k, 50);
  auto back = ParseGenerationConfig(ToGenerationConfigJson(*g), "x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back->top_p, 0.9);
  EXPECT_FALSE(ParseGenerationConfig(R"({"temperature": "hot"})", "g.json").ok());
}

}  // namespace
}  // namespace kiln
