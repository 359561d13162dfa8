#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/regex_splitter.h"
#include "tokenizer/vocab.h"

namespace kiln {
namespace {

TEST(RegexSplitterTest, Gpt2SplitsWordsAndKeepsEverything) {
  auto pre = PreTokenizerForGgufPre("gpt-2");
  ASSERT_TRUE(pre.ok());
  auto s = RegexSplitter::Create(pre->regexes);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string_view> pieces;
  (*s)->Split("Hello world's  123 \xC3\xA9t\xC3\xA9!!", &pieces);
  std::vector<std::string_view> want = {"Hello", " world", "'s", " ", " 123", " \xC3\xA9t\xC3\xA9",
                                        "!!"};
  EXPECT_EQ(pieces, want);
}

TEST(RegexSplitterTest, InvalidUtf8StaysInGaps) {
  auto s = RegexSplitter::Create({R"(\p{L}+)"});
  ASSERT_TRUE(s.ok());
  std::vector<std::string_view> pieces;
  (*s)->Split(
      "ab\xFF"
      "cd",
      &pieces);
  std::vector<std::string_view> want = {"ab", "\xFF", "cd"};
  EXPECT_EQ(pieces, want);
}

TEST(RegexSplitterTest, BadRegexIsAnError) {
  auto s = RegexSplitter::Create({"(unclosed"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

TEST(VocabTest, UnknownPreIsUnsupported) {
  EXPECT_EQ(PreTokenizerForGgufPre("no-such-pre").status().code(), StatusCode::kUnsupported);
}

// A tiny byte-level BPE vocab: the 256 GPT-2 byte symbols, then merges "h e", "he l", "l o",
// "hel lo" and a control token.
TokenizerVocab TinyBpeVocab() {
  GgufTokenizerFields f;
  f.model = "gpt2";
  f.pre = "gpt-2";
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    f.tokens.push_back(s);
  }
  for (const char* t : {"he", "hel", "lo", "hello", "<|end|>"}) f.tokens.push_back(t);
  f.merges = {"h e", "he l", "l o", "hel lo"};
  f.token_type.assign(f.tokens.size(), 1);
  f.token_type.back() = 3;
  f.eos_id = static_cast<int64_t>(f.tokens.size()) - 1;
  f.add_eos = 1;
  auto v = VocabFromGgufMetadata(f);
  CHECK(v.ok()) << v.status().ToString();
  return std::move(v).value();
}

TEST(TokenizerTest, BpeMergesByRank) {
  auto t = Tokenizer::Create(TinyBpeVocab());
  ASSERT_TRUE(t.ok());
  const Tokenizer& tok = **t;
  int32_t hello = tok.TokenToId("hello");
  EXPECT_EQ(tok.Encode("hello", false, false), std::vector<int32_t>{hello});
  // "hell": h+e -> he, he+l -> hel, then a lone l.
  EXPECT_EQ(tok.Encode("hell", false, false),
            (std::vector<int32_t>{tok.TokenToId("hel"), 'l' - 0}));
  EXPECT_EQ(tok.Decode(tok.Encode("hello hello\n\xF0\x9F\x98\x80", false, false), false),
            "hello hello\n\xF0\x9F\x98\x80");
}

TEST(TokenizerTest, SpecialTokensOnlyWhenParsed) {
  auto t = Tokenizer::Create(TinyBpeVocab());
  ASSERT_TRUE(t.ok());
  const Tokenizer& tok = **t;
  int32_t end = tok.TokenToId("<|end|>");
  std::vector<int32_t> parsed = tok.Encode("hello<|end|>", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{tok.TokenToId("hello"), end}));
  std::vector<int32_t> plain = tok.Encode("hello<|end|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(tok.Decode(parsed, false), "hello<|end|>");
  EXPECT_EQ(tok.Decode(parsed, true), "hello");
  // add_special appends eos (add_eos) and no bos (none).
  EXPECT_EQ(tok.Encode("hello", true, false).back(), end);
}

}  // namespace
}  // namespace kiln
