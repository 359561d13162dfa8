#include "builder/synth_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "builder/presets.h"

namespace kiln {
namespace {

using nlohmann::json;

ModelConfig Preset(std::string_view name) {
  auto c = PresetConfig(name);
  CHECK(c.ok());
  return *c;
}

// Checks the invariants every synthetic tokenizer must hold.
void CheckInvariants(const ModelConfig& c, const SyntheticTokenizer& t) {
  ASSERT_EQ(t.tokens.size(), static_cast<size_t>(c.vocab_size));
  ASSERT_EQ(t.is_special.size(), t.tokens.size());
  const std::set<std::string> unique(t.tokens.begin(), t.tokens.end());
  EXPECT_EQ(unique.size(), t.tokens.size()) << "duplicate tokens";
  if (c.bos_token_id) {
    EXPECT_TRUE(t.is_special[*c.bos_token_id]);
  }
  for (int id : c.eos_token_ids) EXPECT_TRUE(t.is_special[id]) << id;

  // The first 256 regular ids hold the byte symbols, one per byte, '!' first.
  std::vector<int> regular;
  for (int id = 0; id < c.vocab_size; ++id) {
    if (!t.is_special[id]) regular.push_back(id);
  }
  ASSERT_GE(regular.size(), 256u);
  EXPECT_EQ(t.tokens[regular[0]], "!");
  EXPECT_EQ(t.tokens[regular[255]], "\xc5\x83");  // U+0143: byte 0xad, the last non-printable
  // Every other regular id is a merge result, in rank order; both parts existed before.
  ASSERT_EQ(t.merges.size(), regular.size() - 256);
  std::vector<bool> exists(c.vocab_size, false);
  for (int i = 0; i < 256; ++i) exists[regular[i]] = true;
  for (size_t m = 0; m < t.merges.size(); ++m) {
    const auto& merge = t.merges[m];
    ASSERT_EQ(merge.result, regular[256 + m]);
    ASSERT_TRUE(exists[merge.left] && exists[merge.right]) << "merge " << m;
    ASSERT_EQ(t.tokens[merge.result], t.tokens[merge.left] + t.tokens[merge.right]);
    exists[merge.result] = true;
  }
}

TEST(SyntheticTokenizer, Llama3SpecialTokens) {
  const ModelConfig c = Preset("llama-3.1-8b");
  auto t = BuildSyntheticTokenizer(c);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  CheckInvariants(c, *t);
  EXPECT_EQ(t->tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(t->tokens[128001], "<|end_of_text|>");
  EXPECT_EQ(t->tokens[128008], "<|eom_id|>");
  EXPECT_EQ(t->tokens[128009], "<|eot_id|>");
  EXPECT_EQ(t->tokens[128255], "<|reserved_special_token_247|>");
  EXPECT_FALSE(t->is_special[127999]);
  EXPECT_EQ(t->merges.size(), 128000u - 256u);
  EXPECT_EQ(t->bos_token, "<|begin_of_text|>");
  EXPECT_EQ(t->eos_token, "<|eot_id|>");
  EXPECT_TRUE(t->add_bos_token);
  EXPECT_NE(t->chat_template.find("<|start_header_id|>"), std::string::npos);
}

TEST(SyntheticTokenizer, Llama3WithCustomEos) {
  ModelConfig c = Preset("llama-3.1-8b");
  c.eos_token_ids = {5, 128001};
  auto t = BuildSyntheticTokenizer(c);
  ASSERT_TRUE(t.ok());
  CheckInvariants(c, *t);
  EXPECT_EQ(t->tokens[5], "<|eos_0|>");
  EXPECT_EQ(t->eos_token, "<|eos_0|>");  // no <|eot_id|> among the eos ids: the first one
  EXPECT_EQ(t->merges.size(), 128000u - 256u - 1u);
}

TEST(SyntheticTokenizer, Qwen2ChatMlAtPublishedIds) {
  const ModelConfig c = Preset("qwen2-7b");
  auto t = BuildSyntheticTokenizer(c);
  ASSERT_TRUE(t.ok());
  CheckInvariants(c, *t);
  EXPECT_EQ(t->tokens[151643], "<|endoftext|>");
  EXPECT_EQ(t->tokens[151644], "<|im_start|>");
  EXPECT_EQ(t->tokens[151645], "<|im_end|>");
  EXPECT_EQ(t->merges.size(), 152064u - 256u - 3u);  // specials in the middle; merges around
  EXPECT_FALSE(t->is_special[152063]);
  EXPECT_EQ(t->eos_token, "<|im_end|>");
  EXPECT_FALSE(t->add_bos_token);
  EXPECT_NE(t->chat_template.find("<|im_start|>"), std::string::npos);
}

TEST(SyntheticTokenizer, SmallIdsAndSharedBosEos) {
  const ModelConfig smol = Preset("smollm2-135m");
  auto t = BuildSyntheticTokenizer(smol);
  ASSERT_TRUE(t.ok());
  CheckInvariants(smol, *t);
  EXPECT_EQ(t->tokens[1], "<s>");
  EXPECT_EQ(t->tokens[2], "<|im_end|>");
  EXPECT_EQ(t->tokens[3], "<|im_start|>");
  EXPECT_EQ(t->tokens[0], "!");

  ModelConfig shared = smol;
  shared.bos_token_id = 0;
  shared.eos_token_ids = {0, 5};
  auto s = BuildSyntheticTokenizer(shared);
  ASSERT_TRUE(s.ok());
  CheckInvariants(shared, *s);
  EXPECT_EQ(s->tokens[0], "<|endoftext|>");
  EXPECT_EQ(s->tokens[5], "<|eos_1|>");
  EXPECT_EQ(s->tokens[1], "<|im_start|>");
  EXPECT_EQ(s->tokens[2], "<|im_end|>");
  EXPECT_EQ(s->eos_token, "<|endoftext|>");

  ModelConfig none = smol;
  none.bos_token_id.reset();
  none.eos_token_ids.clear();
  auto n = BuildSyntheticTokenizer(none);
  ASSERT_TRUE(n.ok());
  CheckInvariants(none, *n);
  EXPECT_EQ(n->tokens[0], "<|im_start|>");
  EXPECT_TRUE(n->bos_token.empty());
  EXPECT_TRUE(n->eos_token.empty());
  EXPECT_FALSE(n->add_bos_token);
}

TEST(SyntheticTokenizer, TooSmallVocab) {
  ModelConfig c = Preset("smollm2-135m");
  c.vocab_size = 258;
  auto t = BuildSyntheticTokenizer(c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("vocab_size 258"), std::string::npos);
  c.vocab_size = 259;  // 256 bytes + 3 specials, no merges
  auto ok = BuildSyntheticTokenizer(c);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->merges.empty());
}

TEST(SyntheticTokenizer, JsonFilesAreConsistent) {
  const ModelConfig c = Preset("mistral-7b");
  auto t = BuildSyntheticTokenizer(c);
  ASSERT_TRUE(t.ok());
  const json tok = json::parse(TokenizerJson(*t));
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["ignore_merges"], false);
  EXPECT_EQ(tok["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");
  const json& vocab = tok["model"]["vocab"];
  ASSERT_EQ(vocab.size(), 32768u);
  for (int id = 0; id < c.vocab_size; ++id) ASSERT_EQ(vocab[t->tokens[id]], id);
  ASSERT_EQ(tok["model"]["merges"].size(), t->merges.size());
  EXPECT_EQ(tok["model"]["merges"][0], "\xc4\xa0 a");  // "Ġ a"
  EXPECT_EQ(tok["added_tokens"].size(), 3u);
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<s>");
  EXPECT_EQ(tok["added_tokens"][0]["id"], 1);
  EXPECT_EQ(tok["added_tokens"][0]["special"], true);
  EXPECT_EQ(tok["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");

  const json cfg = json::parse(TokenizerConfigJson(*t, 32768));
  EXPECT_EQ(cfg["bos_token"], "<s>");
  EXPECT_EQ(cfg["eos_token"], "<|im_end|>");
  EXPECT_EQ(cfg["model_max_length"], 32768);
  EXPECT_EQ(cfg["add_bos_token"], true);
  EXPECT_EQ(cfg["added_tokens_decoder"]["2"]["content"], "<|im_end|>");
  EXPECT_TRUE(cfg["chat_template"].is_string());

  const json map = json::parse(SpecialTokensMapJson(*t));
  EXPECT_EQ(map["bos_token"]["content"], "<s>");
  EXPECT_EQ(map["eos_token"]["content"], "<|im_end|>");
}

}  // namespace
}  // namespace kiln
