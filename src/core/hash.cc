#include "core/hash.h"

#include <cstring>

namespace kiln {

uint64_t HashBytes(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = HashCombine(h, word);
  }
  if (i < bytes.size()) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, bytes.size() - i);
    h = HashCombine(h, word);
  }
  return HashCombine(h, bytes.size());
}

uint64_t HashInt32s(std::span<const int32_t> values, uint64_t seed) {
  uint64_t h = seed;
  size_t i = 0;
  // Two values per mixing round.
  for (; i + 2 <= values.size(); i += 2) {
    const uint64_t word = uint64_t{static_cast<uint32_t>(values[i])} |
                          uint64_t{static_cast<uint32_t>(values[i + 1])} << 32;
    h = HashCombine(h, word);
  }
  if (i < values.size()) h = HashCombine(h, uint64_t{static_cast<uint32_t>(values[i])});
  return HashCombine(h, values.size());
}

}  // namespace kiln
