#include "tokenizer/incremental_detokenizer.h"

#include <utility>

namespace kiln {

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of a character that is still unfinished.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto b = static_cast<unsigned char>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (need > back) {
      // Lead byte with too few continuations so far; hold it unless the lead itself is invalid
      // (0xC0/0xC1 overlongs and > 0xF4 can never complete).
      bool can_complete = b >= 0xC2 && b <= 0xF4;
      if (can_complete && back >= 2) {
        // The second byte narrows the allowed range for E0, ED, F0 and F4.
        auto c = static_cast<unsigned char>(bytes[n - back + 1]);
        if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
            (b == 0xF4 && c > 0x8F)) {
          can_complete = false;
        }
      }
      return can_complete ? n - back : n;
    }
    return n;
  }
  return n;
}

std::string IncrementalDetokenizer::Add(int32_t id) {
  tokenizer_->AppendPiece(id, skip_special_, &at_start_, &pending_);
  size_t ready = CompleteUtf8Prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = std::move(pending_);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace kiln
