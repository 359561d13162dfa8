// 64-bit non-cryptographic hashing for in-memory tables (e.g. the prefix cache's block hashes).
//
//   uint64_t h = HashInt32s(token_ids, /*seed=*/parent_hash);
//   h = HashCombine(h, HashBytes(cache_salt));
//
// Mixing is splitmix64's finalizer (a bijection on 64 bits with full avalanche). The values are
// not stable across kiln versions and not collision-resistant against an adversary: never
// persist them, and never trust a match without comparing the keys themselves.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kiln {

// A bijective 64-bit mix: every input bit flips each output bit with probability about 1/2.
constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Folds `value` into `seed`; order matters: HashCombine(HashCombine(s, a), b) differs from
// HashCombine(HashCombine(s, b), a). For a fixed seed it is a bijection of value, and vice versa.
constexpr uint64_t HashCombine(uint64_t seed, uint64_t value) {
  return Mix64(seed ^ Mix64(value + 0x9e3779b97f4a7c15ULL));
}

// Hash of a byte string (its length included, so "a" and "a\0" differ).
uint64_t HashBytes(std::string_view bytes, uint64_t seed = 0);

// Hash of a sequence of 32-bit integers (its length included).
uint64_t HashInt32s(std::span<const int32_t> values, uint64_t seed = 0);

}  // namespace kiln
