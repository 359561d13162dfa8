#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(SelectChatTemplate, SingleString) {
  auto t = SelectChatTemplate(R"({"chat_template": "{{ x }}"})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "{{ x }}");
  EXPECT_EQ(SelectChatTemplate(R"({"chat_template": "a"})", "tool_use").status().code(),
            StatusCode::kNotFound);
}

TEST(SelectChatTemplate, NamedList) {
  const char* config = R"({"chat_template": [{"name": "default", "template": "D"},
                                               {"name": "tool_use", "template": "T"}]})";
  EXPECT_EQ(*SelectChatTemplate(config), "D");
  EXPECT_EQ(*SelectChatTemplate(config, "default"), "D");
  EXPECT_EQ(*SelectChatTemplate(config, "tool_use"), "T");
  auto missing = SelectChatTemplate(config, "rag");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tool_use"), std::string::npos);
}

TEST(SelectChatTemplate, ListWithoutDefaultNeedsAName) {
  const char* config = R"({"chat_template": [{"name": "rag", "template": "R"}]})";
  EXPECT_EQ(SelectChatTemplate(config).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*SelectChatTemplate(config, "rag"), "R");
}

TEST(SelectChatTemplate, Errors) {
  EXPECT_EQ(SelectChatTemplate("{not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectChatTemplate(R"({"bos_token": "<s>"})").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(SelectChatTemplate(R"({"chat_template": 3})").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, RendersAConversation) {
  auto t = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{{ eos_token }}"
      "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "user", "content": " hi "}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  auto got = t->Render(ctx);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "<s><|user|>hi</s><|assistant|>");
  EXPECT_EQ(t->Render(nlohmann::ordered_json::array()).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
