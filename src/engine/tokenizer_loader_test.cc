#include "engine/tokenizer_loader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// A byte-level BPE tokenizer.json: a few letters, one merge, two special tokens.
constexpr const char* kTokenizerJson = R"({
  "added_tokens": [
    {"id": 0, "content": "<s>", "special": true},
    {"id": 1, "content": "</s>", "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "h": 2, "i": 3, "hi": 4, "Ġ": 5},
            "merges": ["h i"]}
})";

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

class TokenizerLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("kiln_loader_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write("tokenizer.json", kTokenizerJson);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

const Json kMessages = Json::parse(R"([{"role": "user", "content": "hi"}])");

TEST_F(TokenizerLoaderTest, HfDirectoryWithConfig) {
  Json config = {{"bos_token", {{"content", "<s>"}, {"special", true}}},
                 {"eos_token", "</s>"},
                 {"add_bos_token", true},
                 {"chat_template", kTemplate}};
  Write("tokenizer_config.json", config.dump());
  auto t = LoadTokenizer(dir());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
  EXPECT_EQ(t->tokenizer->bos_id(), 0);
  // add_bos_token in the config overrides the (absent) post-processor.
  EXPECT_EQ(t->tokenizer->Encode("hi", true, false), (std::vector<int32_t>{0, 4}));
  auto prompt = ApplyChatTemplate(*t, kMessages, nullptr, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt, "<s>[user]hi</s>[assistant]");
  EXPECT_EQ(t->tokenizer->Encode(*prompt, false, true).front(), 0);
}

TEST_F(TokenizerLoaderTest, ChatTemplateJinjaFileWins) {
  Write("tokenizer_config.json", Json{{"chat_template", "config"}}.dump());
  Write("chat_template.jinja", "jinja file");
  auto t = LoadTokenizer(dir());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*ApplyChatTemplate(*t, kMessages, nullptr, false), "jinja file");
}

TEST_F(TokenizerLoaderTest, NamedTemplateList) {
  Json config = {{"chat_template",
                  Json::array({{{"name", "default"}, {"template", "D"}},
                               {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}})}};
  Write("tokenizer_config.json", config.dump());
  TokenizerLoadOptions opts;
  opts.chat_template_name = "tool_use";
  auto t = LoadTokenizer(dir(), opts);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*ApplyChatTemplate(*t, kMessages, Json::array({1, 2}), false), "T2");
  opts.chat_template_name = "nope";
  auto bad = LoadTokenizer(dir(), opts);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tool_use"), std::string::npos) << bad.status().message();
}

TEST_F(TokenizerLoaderTest, OverrideFileAndExtraKwargs) {
  Write("my.jinja", "{{ messages | length }}{{ greeting }}");
  TokenizerLoadOptions opts;
  opts.chat_template_file = (dir_ / "my.jinja").string();
  auto t = LoadTokenizer(dir(), opts);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*ApplyChatTemplate(*t, kMessages, nullptr, false, Json{{"greeting", "!"}}), "1!");
}

TEST_F(TokenizerLoaderTest, NoTemplateFailsOnlyWhenApplied) {
  auto t = LoadTokenizer(dir());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->chat_template.has_value());
  auto prompt = ApplyChatTemplate(*t, kMessages, nullptr, true);
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().code(), StatusCode::kNotFound);
  EXPECT_NE(prompt.status().message().find("--chat-template"), std::string::npos);
}

TEST_F(TokenizerLoaderTest, BadInputs) {
  Write("tokenizer_config.json", Json{{"chat_template", "{{ raise_exception('no way') }}"}}.dump());
  auto t = LoadTokenizer(dir());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto raised = ApplyChatTemplate(*t, kMessages, nullptr, true);
  ASSERT_FALSE(raised.ok());
  EXPECT_NE(raised.status().message().find("no way"), std::string::npos);
  EXPECT_EQ(ApplyChatTemplate(*t, Json::object(), nullptr, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyChatTemplate(*t, kMessages, Json::object(), true).status().code(),
            StatusCode::kInvalidArgument);

  Write("tokenizer_config.json", "{not json");
  auto bad_config = LoadTokenizer(dir());
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("tokenizer_config.json"), std::string::npos);

  fs::remove(dir_ / "tokenizer.json");
  auto missing = LoadTokenizer(dir());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tokenizer.json"), std::string::npos);
  EXPECT_EQ(LoadTokenizer(dir() + "/nothing").status().code(), StatusCode::kNotFound);
}

TEST(TokenizerLoaderModelTest, DefaultModelGguf) {
  const char* path = std::getenv("KILN_DEFAULT_MODEL");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set";
  auto t = LoadTokenizer(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->bos_token, "<|im_start|>");
  EXPECT_EQ(t->tokenizer->bos_id(), 1);
  EXPECT_EQ(t->eos_token, "<|im_end|>");
  EXPECT_EQ(t->tokenizer->eos_id(), 2);
  ASSERT_TRUE(t->chat_template.has_value());
  const Json messages = Json::parse(R"([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hello!"}])");
  auto prompt = ApplyChatTemplate(*t, messages, nullptr, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\n");
  std::vector<int32_t> ids = t->tokenizer->Encode(*prompt, false, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
}

}  // namespace
}  // namespace kiln
