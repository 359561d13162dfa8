#include "builder/presets.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Presets, PublishedParameterCounts) {
  const struct {
    const char* name;
    int64_t num_parameters;
  } kCases[] = {
      {"llama-3.1-8b", 8'030'261'248}, {"llama-3.1-70b", 70'553'706'496},
      {"mistral-7b", 7'248'023'552},   {"qwen2-7b", 7'615'616'512},
      {"smollm2-135m", 134'515'008},
  };
  ASSERT_EQ(PresetNames().size(), std::size(kCases));
  for (const auto& c : kCases) {
    auto config = PresetConfig(c.name);
    ASSERT_TRUE(config.ok()) << c.name;
    EXPECT_TRUE(config->Validate().ok()) << c.name;
    EXPECT_EQ(config->NumParameters(), c.num_parameters) << c.name;
    EXPECT_EQ(config->dtype, DType::kBF16);
  }
}

TEST(Presets, Llama31Fields) {
  auto c = PresetConfig("llama-3.1-8b");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(*c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_FALSE(c->tie_word_embeddings);

  auto big = PresetConfig("llama-3.1-70b");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->num_layers, 80);
  EXPECT_EQ(big->num_kv_heads, 8);
  EXPECT_EQ(big->vocab_size, 128256);
}

TEST(Presets, OtherFamilies) {
  auto m = PresetConfig("mistral-7b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->family, ModelFamily::kMistral);
  EXPECT_FALSE(m->sliding_window.has_value());
  EXPECT_EQ(m->rope_theta, 1e6);
  EXPECT_EQ(m->vocab_size, 32768);

  auto q = PresetConfig("qwen2-7b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->family, ModelFamily::kQwen2);
  EXPECT_TRUE(q->qkv_bias);
  EXPECT_FLOAT_EQ(q->rms_norm_eps, 1e-6f);
  EXPECT_EQ(*q->bos_token_id, 151643);
  EXPECT_EQ(q->eos_token_ids, (std::vector<int>{151645}));

  auto s = PresetConfig("smollm2-135m");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->tie_word_embeddings);
  EXPECT_EQ(s->head_dim, 64);
  EXPECT_EQ(s->rope_theta, 100000.0);
}

TEST(Presets, RoundTripThroughConfigJson) {
  for (std::string_view name : PresetNames()) {
    auto c = PresetConfig(name);
    ASSERT_TRUE(c.ok());
    auto back = ParseHfConfig(ToHfConfigJson(*c), name);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(ToHfConfigJson(*back), ToHfConfigJson(*c)) << name;
    EXPECT_EQ(back->NumParameters(), c->NumParameters()) << name;
  }
}

TEST(Presets, UnknownNameListsPresets) {
  auto c = PresetConfig("llama-4");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("llama-4"), std::string::npos);
  EXPECT_NE(c.status().message().find("llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2-7b, "
                                      "smollm2-135m"),
            std::string::npos)
      << c.status().message();
}

TEST(ShapeFromJson, PlainHfConfig) {
  auto c = ShapeFromJson(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 1000})",
                         "tiny.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->head_dim, 16);
}

TEST(ShapeFromJson, PresetWithOverrides) {
  auto c = ShapeFromJson(R"({"preset": "llama-3.1-8b", "num_hidden_layers": 4})", "s.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  // embed + lm_head + final norm + 4 of the 32 layers (218,112,000 parameters each).
  EXPECT_EQ(c->NumParameters(), 2 * 525'336'576 + 4096 + 4 * 218'112'000);

  // Changing the width re-derives head_dim; null removes a key.
  auto w = ShapeFromJson(R"({"preset": "llama-3.1-8b", "hidden_size": 2048,
      "num_attention_heads": 32, "rope_scaling": null})",
                         "s.json");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->head_dim, 64);
  EXPECT_EQ(w->rope_scaling.type, RopeScaling::Type::kNone);

  auto h = ShapeFromJson(R"({"preset": "qwen2-7b", "head_dim": 64})", "s.json");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->head_dim, 64);
  EXPECT_TRUE(h->qkv_bias);
}

TEST(ShapeFromJson, Errors) {
  const struct {
    const char* json;
    const char* needle;
  } kCases[] = {
      {"{", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {R"({"preset": 3})", "'preset' must be a string"},
      {R"({"preset": "gpt-5"})", "unknown preset 'gpt-5'"},
      {R"({"preset": "mistral-7b", "num_attention_heads": 6})", "multiple of num_key_value_heads"},
      {R"({"hidden_size": 64})", "model_type"},
  };
  for (const auto& c : kCases) {
    auto r = ShapeFromJson(c.json, "shape.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("shape.json"), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace kiln
