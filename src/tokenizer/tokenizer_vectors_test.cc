// Reference vectors: llama.cpp's vocab-only GGUFs with ids produced by HF `transformers`
// (see ../shared/testdata/README.md). Every string must encode to exactly the HF ids, decode back
// to itself, and stream through IncrementalDetokenizer to the same text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer_loader.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kiln {
namespace {

std::string VectorsDir() {
  const char* env = std::getenv("KILN_TESTDATA");
  return env == nullptr ? "" : std::string(env) + "/tokenizer-vectors";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  for (size_t next; (next = s.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    parts.push_back(s.substr(pos, next - pos));
  }
  parts.push_back(s.substr(pos));
  return parts;
}

class VocabVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectorsTest, MatchesHfIds) {
  const std::string dir = VectorsDir();
  const std::string base = dir + "/ggml-vocab-" + GetParam() + ".gguf";
  if (dir.empty() || !std::filesystem::exists(base + ".inp")) {
    GTEST_SKIP() << "no test vectors at " << base << ".inp (set KILN_TESTDATA)";
  }
  Result<GgufTokenizerFields> fields = ReadGgufTokenizerFields(base);
  ASSERT_TRUE(fields.ok()) << fields.status().ToString();
  Result<TokenizerVocab> vocab = VocabFromGgufMetadata(*fields);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::Create(std::move(vocab).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();

  std::vector<std::string> inputs = SplitOn(ReadAll(base + ".inp"), "\n__ggml_vocab_test__\n");
  std::string out_text = ReadAll(base + ".out");
  if (!out_text.empty() && out_text.back() == '\n') out_text.pop_back();
  std::vector<std::string> lines = SplitOn(out_text, "\n");
  // The .inp ends with a separator line followed by nothing.
  if (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  ASSERT_EQ(inputs.size(), lines.size());

  int num_encode_ok = 0, num_decode_ok = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream ls(lines[i]);
    for (int32_t id; ls >> id;) want.push_back(id);
    std::vector<int32_t> got = (*tok)->Encode(inputs[i], false, false);
    if (got == want) {
      ++num_encode_ok;
    } else {
      std::ostringstream g;
      for (int32_t id : got) g << id << ' ';
      ADD_FAILURE() << GetParam() << " string " << i << " \"" << inputs[i] << "\"\n  want "
                    << lines[i] << "\n  got  " << g.str();
    }
    std::string decoded = (*tok)->Decode(got, false);
    if (decoded == inputs[i]) {
      ++num_decode_ok;
    } else {
      ADD_FAILURE() << GetParam() << " string " << i << " decodes to \"" << decoded << "\", want \""
                    << inputs[i] << "\"";
    }
    IncrementalDetokenizer detok(tok->get(), false);
    std::string streamed;
    for (int32_t id : got) streamed += detok.Add(id);
    streamed += detok.Finish();
    EXPECT_EQ(streamed, decoded) << GetParam() << " string " << i;
  }
  std::printf("[ vectors  ] %-15s encode %d/%zu, decode %d/%zu\n", GetParam().c_str(),
              num_encode_ok, inputs.size(), num_decode_ok, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabVectorsTest,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-coder",
                                           "deepseek-llm", "falcon", "mpt", "refact", "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kiln
