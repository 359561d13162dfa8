#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

TEST(Jinja, Smoke) {
  auto t = ChatTemplate::Parse("{{ a }}");
  ASSERT_TRUE(t.ok());
}

}  // namespace
}  // namespace kiln
