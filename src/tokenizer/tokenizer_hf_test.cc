// kiln's tokenizer against HF `tokenizers` on > 1 MB of varied text. The reference directory
// (KILN_HF_REF_DIR) is written by tests/tokenizer/make_hf_reference.py: tokenizer.json files
// saved by HF itself and the ids HF gives for every corpus chunk.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kiln {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class HfCompareTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCompareTest, SameIdsAsHfTokenizers) {
  const char* env = std::getenv("KILN_HF_REF_DIR");
  const std::string dir = env == nullptr ? "" : env;
  if (dir.empty() || !std::filesystem::exists(dir + "/corpus.jsonl")) {
    GTEST_SKIP() << "no HF reference at '" << dir << "' (run make_hf_reference.py)";
  }
  const std::string path = dir + "/" + GetParam() + ".tokenizer.json";
  Result<TokenizerVocab> vocab = VocabFromTokenizerJson(ReadAll(path), path);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();

  std::ifstream corpus(dir + "/corpus.jsonl");
  size_t num_chunks = 0, num_equal = 0, num_bytes = 0, num_failures = 0;
  for (std::string line; std::getline(corpus, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    std::string text = j.at("text").get<std::string>();
    std::vector<int32_t> want = j.at("ids").at(GetParam()).get<std::vector<int32_t>>();
    std::vector<int32_t> got = (*tok)->Encode(text, false, false);
    ++num_chunks;
    num_bytes += text.size();
    if (got == want) {
      ++num_equal;
    } else if (++num_failures <= 5) {
      ADD_FAILURE() << GetParam() << ": ids differ for \"" << text << "\"";
    }
    EXPECT_EQ((*tok)->Decode(got, false), text);
  }
  EXPECT_EQ(num_equal, num_chunks);
  std::printf("[ hf       ] %-13s %zu/%zu chunks equal (%zu bytes)\n", GetParam().c_str(),
              num_equal, num_chunks, num_bytes);
}

TEST(HfCompareTest, PostProcessorAddsBos) {
  const char* env = std::getenv("KILN_HF_REF_DIR");
  const std::string dir = env == nullptr ? "" : env;
  const std::string path = dir + "/qwen2_regex.tokenizer.json";
  if (dir.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "no HF reference";
  Result<TokenizerVocab> vocab = VocabFromTokenizerJson(ReadAll(path), path);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_TRUE(vocab->add_bos);
  EXPECT_EQ(vocab->bos_id, 50256);
  auto tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("hi", true, false).front(), 50256);
  EXPECT_EQ((*tok)->Encode("a<|endoftext|>", false, true).back(), 50256);
}

INSTANTIATE_TEST_SUITE_P(Cases, HfCompareTest,
                         ::testing::Values("gpt2", "llama3_regex", "qwen2_regex"));

}  // namespace
}  // namespace kiln
