#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(SelectChatTemplate, String) {
  auto t = SelectChatTemplate(R"({"chat_template": "{{ x }}"})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "{{ x }}");
}

}  // namespace
}  // namespace kiln
