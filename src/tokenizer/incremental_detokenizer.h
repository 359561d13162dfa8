// IncrementalDetokenizer: turns a stream of token ids into text pieces for streaming, such that
//
//   - every piece returned by Add is valid UTF-8 on its own: bytes of a character split across
//     tokens (byte-level BPE, SentencePiece <0xNN>) are held back until it is complete;
//   - the concatenation of all Add results and Finish equals Tokenizer::Decode(all ids) exactly
//     (same special-token skipping, same SentencePiece leading-space strip).
//
// Bytes that can never start or continue a valid character are passed through as they come, since
// Decode returns them too; only an incomplete but still possible trailing sequence is held.
//
// Not thread-safe: one instance per request stream. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kiln {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Text that became complete with `id` (possibly empty).
  std::string Add(int32_t id);

  // Whatever is still held back (an incomplete UTF-8 tail at the end of the stream); resets the
  // stream so the instance can be reused.
  std::string Finish();

  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;  // decoded bytes not yet returned
};

// Length of the longest prefix of `bytes` that does not end inside a character that could still
// be completed by more bytes. A trailing invalid sequence counts as complete.
size_t CompleteUtf8Prefix(std::string_view bytes);

}  // namespace kiln
