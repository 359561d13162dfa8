// TokenizerVocab: the format-independent description of a tokenizer, built from a GGUF file's
// tokenizer.ggml.* metadata or from a HF tokenizer.json, and consumed by Tokenizer.
//
// Builders here validate their input once (ids in range, merge parts present, known pre-tokenizer)
// and answer with a Status naming the field; Tokenizer then assumes a valid vocab.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

enum class TokenizerModel : uint8_t {
  kByteLevelBpe,  // GPT-2 style: regex pre-tokenizer, bytes -> GPT-2 unicode alphabet, merge ranks
  kSentencePieceBpe,  // llama/phi-3 style: "▁" for spaces, merges by score, <0xNN> byte fallback
};

// Token types as GGUF numbers them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: bos/eos/chat markers; only matched in text when parse_special
  kUserDefined = 4,  // added tokens: always matched in text, decoded literally
  kUnused = 5,
  kByte = 6,  // "<0xNN>" byte-fallback tokens (SentencePiece)
};

// How a byte-level BPE vocab splits text into words before merging. Each regex of the list is
// applied in turn to every piece left by the previous ones; matches and the gaps between them
// both become pieces (HF `Split` with behavior "Isolated").
struct PreTokenizer {
  std::string name;                  // tokenizer.ggml.pre, e.g. "gpt-2", "llama-bpe", "qwen2"
  std::vector<std::string> regexes;  // PCRE2 syntax, matched in UTF + UCP mode
  bool ignore_merges = false;        // a word that is itself a token is not merged (Llama 3)
};

struct TokenizerVocab {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens;  // id -> text (byte-level: GPT-2 alphabet; SPM: "▁" spaces)
  std::vector<float> scores;        // id -> score (SPM merge priority); empty = all 0
  std::vector<TokenType> types;     // id -> type; same size as tokens
  // Merges in rank order (rank 0 first): "left right" as token texts.
  std::vector<std::pair<std::string, std::string>> merges;
  PreTokenizer pre;

  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;           // Encode(add_special=true) prepends bos
  bool add_eos = false;           // Encode(add_special=true) appends eos
  bool add_space_prefix = false;  // SPM: a space is prepended to the text (and stripped on decode)
  bool byte_fallback = true;      // SPM: unknown characters become <0xNN> tokens
  // Each text run between added tokens is put in Unicode NFC before pre-tokenizing (HF `NFC`
  // normalizer, Qwen2). Decode then returns the NFC form, not the input.
  bool normalize_nfc = false;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

// Pre-tokenizer regexes for a tokenizer.ggml.pre name, as llama.cpp maps them. Unknown names
// answer kUnsupported naming the value.
Result<PreTokenizer> PreTokenizerForGgufPre(std::string_view pre);

// The tokenizer.ggml.* metadata of a GGUF file, already read (src/model reads GGUF; the
// tokenizer library must not depend on it). Absent keys stay at their defaults.
struct GgufTokenizerFields {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SPM)
  std::string pre;    // tokenizer.ggml.pre; empty = "default"
  std::vector<std::string> tokens;
  std::vector<double> scores;       // may be empty
  std::vector<int64_t> token_type;  // may be empty (all normal)
  std::vector<std::string> merges;  // "left right"; required for gpt2
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  int64_t unk_id = -1;
  int64_t pad_id = -1;
  // -1: key absent (the model's default applies), 0: false, 1: true.
  int add_bos = -1;
  int add_eos = -1;
  int add_space_prefix = -1;
};

// Builds a vocab from GGUF metadata. Errors: kUnsupported for an unknown model or pre, kCorrupt
// for arrays of mismatched sizes, ids out of range or merges naming missing tokens.
Result<TokenizerVocab> VocabFromGgufMetadata(const GgufTokenizerFields& fields);

// Builds a vocab from the text of a HF tokenizer.json (`source` names it in errors). Supports a
// BPE model (vocab + merges as "a b" strings or [a, b] pairs, byte_fallback), added_tokens,
// pre_tokenizer ByteLevel / Split / Sequence / Metaspace / Digits, normalizers Prepend /
// Replace / NFC (applied with utf8proc) and a TemplateProcessing post_processor
// (bos/eos). Errors: kCorrupt for malformed JSON, kUnsupported for other models or components.
Result<TokenizerVocab> VocabFromTokenizerJson(std::string_view text, std::string_view source);

}  // namespace kiln
