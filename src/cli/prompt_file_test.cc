#include "cli/prompt_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace kiln::cli {
namespace {

std::string WriteTemp(const std::string& name, const std::string& contents) {
  const std::string path =
      ::testing::TempDir() + "/kiln_prompt_file_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(PromptFileTest, TextLinesSkipBlankLinesAndDropCarriageReturns) {
  const std::string path = WriteTemp("a.txt", "first prompt\n\n  \nsecond {\"x\": 1}\r\nthird");
  auto prompts = ReadPromptFile(path, {});
  ASSERT_TRUE(prompts.ok()) << prompts.status().ToString();
  ASSERT_EQ(prompts->size(), 3u);
  EXPECT_EQ((*prompts)[0].kind, Prompt::Kind::kText);
  EXPECT_EQ((*prompts)[0].text, "first prompt");
  EXPECT_EQ((*prompts)[1].text, "second {\"x\": 1}");  // text format: JSON-looking text is text
  EXPECT_EQ((*prompts)[2].text, "third");
}

TEST(PromptFileTest, JsonlByExtensionHoldsTheThreePromptKinds) {
  const std::string path = WriteTemp(
      "b.jsonl",
      "{\"prompt\": \"hi\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n"
      "{\"prompt_token_ids\": [1, 2, 3]}\n");
  auto prompts = ReadPromptFile(path, {});
  ASSERT_TRUE(prompts.ok()) << prompts.status().ToString();
  ASSERT_EQ(prompts->size(), 3u);
  EXPECT_EQ((*prompts)[0].kind, Prompt::Kind::kText);
  EXPECT_EQ((*prompts)[0].text, "hi");
  EXPECT_EQ((*prompts)[1].kind, Prompt::Kind::kChat);
  EXPECT_EQ((*prompts)[1].messages[0]["content"], "yo");
  EXPECT_EQ((*prompts)[2].kind, Prompt::Kind::kTokens);
  EXPECT_EQ((*prompts)[2].token_ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(PromptFileTest, ChatWrapsTextPromptsAfterTheSystemMessage) {
  const std::string path = WriteTemp("c.txt", "question\n");
  auto prompts = ReadPromptFile(path, {PromptFileFormat::kText, /*chat=*/true, "be brief"});
  ASSERT_TRUE(prompts.ok());
  ASSERT_EQ(prompts->size(), 1u);
  const Prompt& p = (*prompts)[0];
  ASSERT_EQ(p.kind, Prompt::Kind::kChat);
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[0]["role"], "system");
  EXPECT_EQ(p.messages[0]["content"], "be brief");
  EXPECT_EQ(p.messages[1]["role"], "user");
  EXPECT_EQ(p.messages[1]["content"], "question");
}

TEST(PromptFileTest, MalformedJsonlLineIsNamedWithItsLineNumber) {
  const std::string path = WriteTemp("d.txt", "{\"prompt\": \"ok\"}\n\n[1, 2]\n");
  auto prompts = ReadPromptFile(path, {PromptFileFormat::kJsonl, false, ""});
  ASSERT_FALSE(prompts.ok());
  EXPECT_EQ(prompts.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(prompts.status().message().find(path + ":3: not a JSON object"), std::string::npos)
      << prompts.status().message();
  const std::string no_key = WriteTemp("e.jsonl", "{\"text\": \"hi\"}\n");
  auto missing_key = ReadPromptFile(no_key, {});
  ASSERT_FALSE(missing_key.ok());
  EXPECT_NE(missing_key.status().message().find(no_key + ":1: expected a \"prompt\""),
            std::string::npos);
}

TEST(PromptFileTest, MissingFileIsNotFoundAndEmptyFileHasNoPrompts) {
  auto missing = ReadPromptFile(::testing::TempDir() + "/kiln_no_such_prompts.txt", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  auto empty = ReadPromptFile(WriteTemp("f.jsonl", "\n \n"), {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(PromptFileTest, FormatNames) {
  EXPECT_EQ(*ParsePromptFileFormat("auto"), PromptFileFormat::kAuto);
  EXPECT_EQ(*ParsePromptFileFormat("text"), PromptFileFormat::kText);
  EXPECT_EQ(*ParsePromptFileFormat("jsonl"), PromptFileFormat::kJsonl);
  auto bad = ParsePromptFileFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'csv'"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cli
