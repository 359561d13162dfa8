#include "core/hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace kiln {
namespace {

TEST(Mix64, IsABijectionOnASampleAndAvalanches) {
  EXPECT_EQ(Mix64(0), 0u);  // the finalizer's fixed point; HashCombine adds a constant first
  std::unordered_set<uint64_t> seen;
  for (uint64_t x = 0; x < 100000; ++x) EXPECT_TRUE(seen.insert(Mix64(x)).second) << x;
  // Flipping one input bit flips about half of the output bits.
  int64_t flipped = 0;
  for (uint64_t x = 1; x <= 1000; ++x) {
    for (int bit = 0; bit < 64; ++bit) {
      flipped += __builtin_popcountll(Mix64(x) ^ Mix64(x ^ (uint64_t{1} << bit)));
    }
  }
  const double mean = static_cast<double>(flipped) / (1000 * 64);
  EXPECT_GT(mean, 31.0);
  EXPECT_LT(mean, 33.0);
}

TEST(HashCombine, OrderMatters) {
  EXPECT_NE(HashCombine(HashCombine(0, 1), 2), HashCombine(HashCombine(0, 2), 1));
  EXPECT_NE(HashCombine(0, 0), HashCombine(1, 0));
  EXPECT_NE(HashCombine(0, 0), HashCombine(0, 1));
}

TEST(HashInt32s, EveryValuePositionAndLengthCounts) {
  const std::vector<int32_t> base = {1, 2, 3, 4, 5};
  const uint64_t h = HashInt32s(base);
  EXPECT_EQ(h, HashInt32s(std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_NE(h, HashInt32s(base, /*seed=*/1));
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<int32_t> v = base;
    v[i] = -v[i];
    EXPECT_NE(h, HashInt32s(v)) << i;
  }
  EXPECT_NE(HashInt32s(std::vector<int32_t>{}), HashInt32s(std::vector<int32_t>{0}));
  EXPECT_NE(HashInt32s(std::vector<int32_t>{0}), HashInt32s(std::vector<int32_t>{0, 0}));
  EXPECT_NE(HashInt32s(std::vector<int32_t>{1, 2}), HashInt32s(std::vector<int32_t>{2, 1}));
}

TEST(HashBytes, LengthAndTailBytesCount) {
  EXPECT_NE(HashBytes(""), HashBytes(std::string(1, '\0')));
  EXPECT_NE(HashBytes("a"), HashBytes(std::string("a\0", 2)));
  EXPECT_NE(HashBytes("tenant-a"), HashBytes("tenant-b"));
  EXPECT_NE(HashBytes("0123456789"), HashBytes("0123456788"));
  EXPECT_EQ(HashBytes("0123456789"), HashBytes(std::string("0123456789")));
}

TEST(HashInt32s, NoCollisionsAmongShortSequences) {
  // All sequences of length 0..3 over 40 values: 65,641 distinct hashes expected.
  std::unordered_set<uint64_t> seen;
  int64_t count = 0;
  std::vector<int32_t> v;
  for (int len = 0; len <= 3; ++len) {
    int64_t total = 1;
    for (int i = 0; i < len; ++i) total *= 40;
    for (int64_t code = 0; code < total; ++code) {
      v.clear();
      for (int64_t c = code, i = 0; i < len; ++i, c /= 40)
        v.push_back(static_cast<int32_t>(c % 40));
      seen.insert(HashInt32s(v));
      ++count;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), count);
}

}  // namespace
}  // namespace kiln
