// Tokenizer: text <-> token ids for byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek, StarCoder,
// Falcon, MPT, ...) and SentencePiece-style BPE (Llama 2, Phi-3) vocabularies.
//
// Encode pipeline:
//
//   text ──► split out added tokens (user-defined always; control/unknown when parse_special)
//        │   leftmost-longest, e.g. "hi<|im_end|>yo" -> ["hi", <|im_end|>, "yo"]
//        ▼
//   each text run ─► NFC (utf8proc) when vocab.normalize_nfc
//   byte-level BPE:  each text run ─► PCRE2 regex pre-tokenizer (UTF + UCP, JIT) ─► words
//                    word bytes ─► GPT-2 byte alphabet ─► merges by rank (cached per word)
//   SentencePiece:   " " prepended to the first run (add_space_prefix), " " -> "▁",
//                    characters merged by highest token score, unknown chars -> <0xNN> bytes
//
// Thread safety: after Create, all const methods may be called from any number of threads (the
// word cache is guarded by a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kiln {

class Tokenizer {
 public:
  // Compiles the pre-tokenizer regexes and indexes the vocab. Errors: kInvalidArgument for a
  // regex PCRE2 rejects (naming it) or a vocab whose arrays disagree in size.
  static Result<std::unique_ptr<Tokenizer>> Create(TokenizerVocab vocab);
  ~Tokenizer();

  // Token ids of `text`. add_special: prepend bos / append eos as the vocab's add_bos/add_eos
  // say. parse_special: control tokens written in the text ("<|im_end|>") become their ids;
  // otherwise they are tokenized as plain text. User-defined (added, non-special) tokens are
  // always matched. Invalid UTF-8 is accepted: its bytes are encoded as bytes.
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // Text of `ids`. skip_special: control and unknown tokens produce nothing. For SentencePiece
  // vocabs with add_space_prefix, the leading space of the first produced piece is removed, so
  // Decode(Encode(s, false, false), false) == s. Ids outside the vocab produce nothing.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const;

  // Appends the bytes of one token to *out as Decode would, given that *at_start tells whether
  // nothing has been produced yet (and is cleared once something is). Decode is this in a loop;
  // IncrementalDetokenizer uses it so both agree byte for byte.
  void AppendPiece(int32_t id, bool skip_special, bool* at_start, std::string* out) const;

  // The vocab text of a token (GPT-2 alphabet / "▁" spaces as stored); "" when out of range.
  const std::string& IdToToken(int32_t id) const;
  // The id whose vocab text is exactly `token`, or -1.
  int32_t TokenToId(std::string_view token) const;

  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  bool is_special(int32_t id) const;  // control or unknown type
  const TokenizerVocab& vocab() const { return vocab_; }

 private:
  struct Impl;
  explicit Tokenizer(TokenizerVocab vocab);

  // Normalizes one text run between added tokens (NFC when the vocab says so), then
  // EncodeNormalized.
  void EncodeText(std::string_view text, bool is_first_run, std::vector<int32_t>* out) const;
  void EncodeNormalized(std::string_view text, bool is_first_run, std::vector<int32_t>* out) const;
  void EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const;
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;

  TokenizerVocab vocab_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
