// A synthetic byte-level BPE tokenizer whose vocabulary has exactly the model's vocab_size ids,
// so a synthetic checkpoint can be tokenized, served and detokenized end to end.
//
// It is a real, valid HF `tokenizers` file (tokenizer.json), not a meaningful vocabulary:
//
//   ids:  [ special tokens at their config ids (bos, eos, chat tokens) wherever they fall ]
//         every other id, ascending:  256 byte symbols  |  merge results (rank order)
//
//   - The 256 byte symbols are GPT-2's byte-to-unicode alphabet ('!' first, 'Ġ' for space), so
//     any text, in any script, encodes and decodes back exactly (the ByteLevel pre-tokenizer
//     and decoder turn bytes into these symbols and back).
//   - Merges are enumerated in a fixed order: first every root (Ġ, a-z, A-Z) + one lower-case
//     letter ("Ġa", "Ġb", ..., "Za"), then every earlier merge result + one lower-case letter,
//     breadth first ("Ġaa", ...). Both parts of a merge always exist already and every merge
//     makes a new token; the merges carry no statistics of any language.
//   - Special tokens are in the model vocab at their exact ids and listed as added_tokens
//     (special: true), so ids match the config even in the middle of the vocab:
//       bos_token_id 128000 with vocab >= 128256 (Llama 3): Llama 3.1's 256 special tokens at
//         128000..128255 (<|begin_of_text|>, <|end_of_text|>, <|eom_id|>, <|eot_id|>, ...);
//       otherwise ChatML: bos = "<s>" ("<|endoftext|>" for qwen2, or when bos is also an eos
//         id), first eos = "<|im_end|>", further eos ids "<|eos_1|>", ...; "<|im_start|>" and
//         (if no eos has it) "<|im_end|>" take the lowest free ids above bos (Qwen2-7B gets
//         151643 <|endoftext|>, 151644 <|im_start|>, 151645 <|im_end|>, as published);
//       any eos id still without a special token gets "<|eos_k|>" (k = its index in the list).
//   - Chat template: Llama 3's header format for Llama 3 vocabularies, ChatML otherwise.
//   - A bos token is prepended on encode (post_processor, add_bos_token) when the config has
//     one, except for qwen2, which (as published) adds none.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace kiln {

struct SyntheticTokenizer {
  struct Merge {
    int left;    // token id of the left part
    int right;   // token id of the right part
    int result;  // token id of left + right
  };
  // id -> token. Regular tokens are byte-level strings (GPT-2 alphabet, UTF-8); special tokens
  // their literal content.
  std::vector<std::string> tokens;  // [vocab_size]
  std::vector<bool> is_special;     // [vocab_size]
  std::vector<Merge> merges;        // in rank order
  std::optional<int> bos_id;
  std::vector<int> eos_ids;
  std::string bos_token;  // "" when the config has no bos
  std::string eos_token;  // tokenizer_config's eos_token (the end-of-turn token if it is an
                          // eos id, else the first eos); "" when there is none
  bool add_bos_token = false;
  std::string chat_template;  // Jinja
};

// Builds the tokenizer for `config` (deterministic: a function of vocab_size, family and the
// bos/eos ids only). InvalidArgument when vocab_size cannot hold the 256 byte symbols plus the
// special tokens.
// REQUIRES: config.Validate() is OK.
Result<SyntheticTokenizer> BuildSyntheticTokenizer(const ModelConfig& config);

// The files, as text.
std::string TokenizerJson(const SyntheticTokenizer& tokenizer);
std::string TokenizerConfigJson(const SyntheticTokenizer& tokenizer, int64_t model_max_length);
std::string SpecialTokensMapJson(const SyntheticTokenizer& tokenizer);

}  // namespace kiln
