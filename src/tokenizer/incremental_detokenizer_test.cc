#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln {
namespace {

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80             ? 1
               : (b & 0xE0) == 0xC0 ? 2
               : (b & 0xF0) == 0xE0 ? 3
               : (b & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(CompleteUtf8PrefixTest, HoldsOnlyIncompleteTails) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2\x96"), 1u);      // 2 of 3 bytes of "▁"
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2\x96\x81"), 4u);  // complete
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);      // invalid: passed through
  EXPECT_EQ(CompleteUtf8Prefix("a\xC0"), 2u);      // overlong lead can never complete
  EXPECT_EQ(CompleteUtf8Prefix("a\xE0\x80"), 3u);  // E0 80 is overlong
  EXPECT_EQ(CompleteUtf8Prefix("\x80\x80"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

// A vocab of the 256 single-byte SentencePiece tokens plus a few words, to make pieces that
// split characters.
std::unique_ptr<Tokenizer> ByteTokenizer() {
  GgufTokenizerFields f;
  f.model = "llama";
  f.tokens = {"<unk>", "<s>", "</s>"};
  f.token_type = {2, 3, 3};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    f.tokens.push_back(name);
    f.token_type.push_back(6);
  }
  for (const char* w : {"\xE2\x96\x81hi", "\xE2\x96\x81", "h", "i"}) {
    f.tokens.push_back(w);
    f.token_type.push_back(1);
  }
  f.scores.assign(f.tokens.size(), 0.0);
  f.bos_id = 1;
  f.eos_id = 2;
  f.unk_id = 0;
  auto v = VocabFromGgufMetadata(f);
  CHECK(v.ok()) << v.status().ToString();
  auto t = Tokenizer::Create(std::move(v).value());
  CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(IncrementalDetokenizerTest, StreamEqualsDecodeAndNeverSplitsCharacters) {
  auto tok = ByteTokenizer();
  const std::string text = " hi \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87 hi";
  std::vector<int32_t> ids = tok->Encode(text, true, false);
  ASSERT_EQ(ids.front(), 1);  // bos (SPM default add_bos)
  for (bool skip : {false, true}) {
    std::string full = tok->Decode(ids, skip);
    IncrementalDetokenizer detok(tok.get(), skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = detok.Add(id);
      EXPECT_TRUE(IsValidUtf8(piece)) << "piece splits a character";
      streamed += piece;
    }
    streamed += detok.Finish();
    EXPECT_EQ(streamed, full);
  }
  EXPECT_EQ(tok->Decode(ids, true), text);
  EXPECT_EQ(tok->Decode(ids, false), "<s> " + text);  // the prefix space stays after <s>
}

TEST(IncrementalDetokenizerTest, RandomByteStreams) {
  auto tok = ByteTokenizer();
  std::mt19937 rng(1234);
  const std::vector<std::string> chars = {
      "a", " ", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xFF", "\x80"};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    int len = static_cast<int>(rng() % 20);
    for (int i = 0; i < len; ++i) text += chars[rng() % chars.size()];
    std::vector<int32_t> ids = tok->Encode(text, false, false);
    // Sprinkle control tokens in at random places.
    for (int k = 0; k < 2 && !ids.empty(); ++k) ids.insert(ids.begin() + rng() % ids.size(), 2);
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok.get(), skip);
      std::string streamed;
      // With skip=false an inserted </s> may cut a character in two, and Decode has those
      // broken bytes too; with skip=true every piece must be valid.
      bool text_valid = skip && IsValidUtf8(text);
      for (int32_t id : ids) {
        std::string piece = detok.Add(id);
        if (text_valid) {
          EXPECT_TRUE(IsValidUtf8(piece));
        }
        streamed += piece;
      }
      streamed += detok.Finish();
      EXPECT_EQ(streamed, tok->Decode(ids, skip)) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace kiln
