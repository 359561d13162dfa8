// Mutation test: randomly corrupted safetensors files must give a Status, never a crash.
// CI runs this under AddressSanitizer and UndefinedBehaviorSanitizer (scripts/test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

using testing::MakeTempDir;
using testing::MakeTensor;
using testing::SafetensorsBytes;
using testing::TestTensor;
using testing::WriteFile;

// Replacements that target the parser's arithmetic and type checks.
const char* const kTokens[] = {"0",
                               "1",
                               "-1",
                               "18446744073709551615",
                               "18446744073709551616",
                               "9223372036854775807",
                               "4294967296",
                               "1e309",
                               "0.5",
                               "\"\"",
                               "null",
                               "[]",
                               "{}",
                               "[0]",
                               "[0,0,0]",
                               "true",
                               "\"BF16\"",
                               "\"F8_E4M3\"",
                               "\"I4\"",
                               "\"\\u0000\"",
                               "\"\\ud800\""};

std::string Mutate(const std::string& valid, std::mt19937_64& rng) {
  std::string s = valid;
  const size_t header_end = 8 + (static_cast<uint8_t>(s[0]) | (static_cast<uint8_t>(s[1]) << 8));
  auto pick = [&](size_t lo, size_t hi) {
    return lo + static_cast<size_t>(rng() % std::max<size_t>(1, hi - lo));
  };
  const int kinds = 8;
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int r = 0; r < rounds && !s.empty(); ++r) {
    switch (rng() % kinds) {
      case 0: {  // flip a bit anywhere in the header (length field included)
        const size_t i = pick(0, std::min(header_end, s.size()));
        s[i] = static_cast<char>(s[i] ^ (1 << (rng() % 8)));
        break;
      }
      case 1: {  // replace a number or token in the JSON with a hostile one
        const size_t i = pick(8, std::min(header_end, s.size()));
        size_t j = i;
        while (j < s.size() && j < header_end &&
               (std::isdigit(static_cast<unsigned char>(s[j])) ||
                std::isalpha(static_cast<unsigned char>(s[j])) || s[j] == '_' || s[j] == '"')) {
          ++j;
        }
        s.replace(i, j - i, kTokens[rng() % std::size(kTokens)]);
        break;
      }
      case 2:  // truncate
        s.resize(pick(0, s.size()));
        break;
      case 3: {  // overwrite the header length
        const uint64_t lens[] = {
            0,    1, 7, s.size(), s.size() - 8, s.size() - 7, ~0ull, 1ull << 40, header_end - 9,
            rng()};
        const uint64_t len = lens[rng() % std::size(lens)];
        for (int k = 0; k < 8 && k < static_cast<int>(s.size()); ++k) {
          s[k] = static_cast<char>((len >> (8 * k)) & 0xff);
        }
        break;
      }
      case 4: {  // delete a span of the header
        const size_t i = pick(8, std::min(header_end, s.size()));
        s.erase(i, std::min<size_t>(1 + rng() % 16, s.size() - i));
        break;
      }
      case 5: {  // duplicate a span of the header
        const size_t i = pick(8, std::min(header_end, s.size()));
        const std::string span = s.substr(i, 1 + rng() % 32);
        s.insert(pick(8, std::min(header_end, s.size())), span);
        break;
      }
      case 6:  // random byte in the header
        s[pick(8, std::min(header_end, s.size()))] = static_cast<char>(rng() & 0xff);
        break;
      case 7:  // append garbage
        s.append(1 + rng() % 64, static_cast<char>(rng() & 0xff));
        break;
    }
  }
  return s;
}

// Reads every byte of every tensor so that an out-of-range view would fault here.
uint64_t Touch(const SafetensorsFile& f) {
  uint64_t sum = 0;
  for (const SafetensorsTensor& t : f.tensors()) {
    for (int64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  }
  return sum;
}

TEST(SafetensorsMutation, CorruptFilesNeverCrash) {
  const ModelConfig config = testing::TinyLlamaConfig();
  std::vector<TestTensor> tensors;
  uint32_t seed = 1;
  for (const WeightSpec& w : ExpectedWeights(config)) {
    if (tensors.size() == 6) break;
    tensors.push_back(MakeTensor(w.name, DType::kBF16, w.shape, seed++));
  }
  tensors.push_back(MakeTensor("f8", DType::kF8E4M3, Shape{3, 5}, seed++));
  tensors.push_back(MakeTensor("scalar", DType::kF32, Shape{}, seed++));
  const std::string valid = SafetensorsBytes(tensors);

  const std::string dir = MakeTempDir("st_mutation");
  std::mt19937_64 rng(20261122);
  constexpr int kCases = 10000;
  int ok = 0, failed = 0;
  uint64_t checksum = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string path = dir + "/m.safetensors";
    WriteFile(path, Mutate(valid, rng));
    auto f = SafetensorsFile::Open(path);
    if (f.ok()) {
      ++ok;
      checksum += Touch(*f);
    } else {
      ++failed;
      ASSERT_FALSE(f.status().message().empty());
      ASSERT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
    }
  }
  std::printf("safetensors mutation: %d cases, %d opened, %d rejected (checksum %llu)\n", kCases,
              ok, failed, static_cast<unsigned long long>(checksum));
  EXPECT_GT(failed, kCases / 2);  // the mutations really do corrupt
}

// The same through Checkpoint::Open: a corrupted shard of a whole checkpoint directory.
TEST(SafetensorsMutation, CorruptCheckpointShardsNeverCrash) {
  const ModelConfig config = testing::TinyLlamaConfig();
  const std::string dir = MakeTempDir("ckpt_mutation");
  testing::WriteTinyCheckpoint(dir, config, 1);
  const std::string shard = dir + "/model.safetensors";
  std::string valid;
  {
    std::ifstream in(shard, std::ios::binary);
    valid.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937_64 rng(7);
  int rejected = 0;
  constexpr int kCases = 2000;
  for (int i = 0; i < kCases; ++i) {
    WriteFile(shard, Mutate(valid, rng));
    auto ckpt = Checkpoint::Open(dir);
    if (!ckpt.ok()) {
      ++rejected;
      continue;
    }
    uint64_t sum = 0;
    for (const Weight& w : ckpt->weights()) {
      for (int64_t b = 0; b < w.nbytes; ++b) sum += w.data[b];
    }
    ASSERT_EQ(ckpt->NumStoredParameters(), config.NumParameters());
  }
  EXPECT_GT(rejected, kCases / 2);
}

}  // namespace
}  // namespace kiln
