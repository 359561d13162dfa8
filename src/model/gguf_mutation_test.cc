// Randomized robustness test: small valid GGUF images, randomly corrupted with a fixed seed,
// must either open (and then hold only in-bounds tensors that dequantize without fault) or fail
// with a Status that names the file. Run under -DKILN_SANITIZE=ON in CI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/dequant.h"
#include "model/gguf.h"
#include "model/gguf_test_util.h"

namespace kiln {
namespace {

using testing::Array;
using testing::Bytes;
using testing::Filler;
using testing::GgufBuilder;
using testing::Nested;
using testing::NumArray;
using testing::Scalar;
using testing::Str;
using testing::StrArray;

constexpr int kNumCases = 12000;
constexpr int kPathEvery = 8;  // every 8th case goes through the path-based GgufFile::Open
constexpr uint64_t kSeed = 0x6b696c6e;

struct Base {
  Bytes bytes;
  std::vector<std::pair<size_t, int>> fields;  // header field positions and widths (4 or 8)
};

// Tensor `name` of `ggml_type` with ne, filled with deterministic bytes.
void AddTensor(GgufBuilder* b, const std::string& name, uint32_t ggml_type,
               std::vector<uint64_t> ne, uint32_t seed) {
  const GgmlTypeInfo* info = GetGgmlTypeInfo(ggml_type);
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  b->Tensor(name, std::move(ne), ggml_type, Filler(n / info->block_size * info->block_bytes, seed));
}

std::vector<Base> MakeBases() {
  std::vector<Base> bases;
  auto add = [&](GgufBuilder& b) {
    Bytes bytes = b.Build();
    bases.push_back({std::move(bytes), b.fields});
  };
  {  // Every value type, nested arrays, every supported tensor type and one it cannot load.
    GgufBuilder b;
    b.Kv("general.architecture", Str("llama"))
        .Kv("u8", Scalar<uint8_t>(GgufType::kUint8, 7))
        .Kv("i8", Scalar<int8_t>(GgufType::kInt8, -7))
        .Kv("u16", Scalar<uint16_t>(GgufType::kUint16, 700))
        .Kv("i16", Scalar<int16_t>(GgufType::kInt16, -700))
        .Kv("u32", Scalar<uint32_t>(GgufType::kUint32, 70000))
        .Kv("i32", Scalar<int32_t>(GgufType::kInt32, -70000))
        .Kv("f32", Scalar<float>(GgufType::kFloat32, 0.25f))
        .Kv("bool", Scalar<uint8_t>(GgufType::kBool, 1))
        .Kv("u64", Scalar<uint64_t>(GgufType::kUint64, 1ull << 40))
        .Kv("i64", Scalar<int64_t>(GgufType::kInt64, -(1ll << 40)))
        .Kv("f64", Scalar<double>(GgufType::kFloat64, 1e100))
        .Kv("tokens", StrArray({"<s>", "</s>", "hello", ""}))
        .Kv("scores", NumArray<float>(GgufType::kFloat32, {0.f, -1.f, -2.5f, 3.f}))
        .Kv("types", NumArray<int32_t>(GgufType::kInt32, {1, 3, 1, 1}))
        .Kv("flags", NumArray<uint8_t>(GgufType::kBool, {0, 1}))
        .Kv("wide", NumArray<uint64_t>(GgufType::kUint64, {1, ~0ull}))
        .Kv("nested", Array(GgufType::kArray, {NumArray<int16_t>(GgufType::kInt16, {1, 2}),
                                               StrArray({"x"}), Array(GgufType::kArray, {})}))
        .Kv("deep", Nested(GgufFile::kMaxArrayDepth));
    uint32_t seed = 1;
    AddTensor(&b, "f32", 0, {3, 2}, seed++);
    AddTensor(&b, "f16", 1, {8}, seed++);
    AddTensor(&b, "bf16", 30, {4, 2}, seed++);
    AddTensor(&b, "q4_0", 2, {32, 2}, seed++);
    AddTensor(&b, "q4_1", 3, {64}, seed++);
    AddTensor(&b, "q5_0", 6, {32}, seed++);
    AddTensor(&b, "q5_1", 7, {32, 1, 1}, seed++);
    AddTensor(&b, "q8_0", 8, {64, 2}, seed++);
    AddTensor(&b, "q2_k", 10, {256}, seed++);
    AddTensor(&b, "q3_k", 11, {256}, seed++);
    AddTensor(&b, "q4_k", 12, {256, 2}, seed++);
    AddTensor(&b, "q5_k", 13, {256}, seed++);
    AddTensor(&b, "q6_k", 14, {256}, seed++);
    AddTensor(&b, "i8", 24, {16}, seed++);
    AddTensor(&b, "i16", 25, {4}, seed++);
    AddTensor(&b, "i32", 26, {4}, seed++);
    AddTensor(&b, "i64", 27, {2}, seed++);
    AddTensor(&b, "f64", 28, {2}, seed++);
    AddTensor(&b, "iq4_nl", 20, {32}, seed++);
    AddTensor(&b, "empty", 0, {0, 3}, seed++);
    add(b);
  }
  {  // v2, alignment 64.
    GgufBuilder b;
    b.version = 2;
    b.alignment = 64;
    b.Kv("general.alignment", Scalar<uint32_t>(GgufType::kUint32, 64))
        .Kv("name", Str("v2"))
        .Kv("dims", NumArray<uint32_t>(GgufType::kUint32, {64, 32}));
    AddTensor(&b, "a", 8, {32, 3}, 50);
    AddTensor(&b, "b", 12, {256}, 51);
    AddTensor(&b, "c", 1, {5, 3, 2, 1}, 52);
    add(b);
  }
  {  // Alignment 1: no padding at all.
    GgufBuilder b;
    b.alignment = 1;
    b.Kv("general.alignment", Scalar<uint8_t>(GgufType::kUint8, 1))
        .Kv("x", Array(GgufType::kArray, {StrArray({"a", "bc"}), StrArray({"def"})}));
    AddTensor(&b, "q6", 14, {256}, 60);
    AddTensor(&b, "q5", 7, {32}, 61);
    AddTensor(&b, "f", 0, {1}, 62);
    add(b);
  }
  {  // Tensors only.
    GgufBuilder b;
    AddTensor(&b, "w", 3, {32, 4}, 70);
    add(b);
  }
  {  // Metadata only.
    GgufBuilder b;
    b.Kv("k", StrArray({"only", "metadata"})).Kv("d", Nested(3));
    add(b);
  }
  return bases;
}

uint64_t Extreme(std::mt19937_64& rng, uint64_t current) {
  static constexpr uint64_t kValues[] = {
      0,          1,          2,          3,          4,
      5,          8,          9,          12,         13,
      31,         32,         33,         255,        256,
      0x7fff,     0xffff,     0x7fffffff, 0x80000000, 0xffffffff,
      1ull << 32, 1ull << 60, 1ull << 62, 1ull << 63, (1ull << 63) - 1,
      ~0ull,      ~0ull - 31};
  switch (rng() % 4) {
    case 0:
      return current + 1;
    case 1:
      return current - 1;
    case 2:
      return rng();
    default:
      return kValues[rng() % std::size(kValues)];
  }
}

void Overwrite(Bytes* b, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width && at + i < b->size(); ++i)
    (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t Load(const Bytes& b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width && at + i < b.size(); ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

void Mutate(std::mt19937_64& rng, const Base& base, Bytes* b) {
  if (b->empty()) return;
  auto pos = [&] { return static_cast<size_t>(rng() % b->size()); };
  switch (rng() % 9) {
    case 0:  // flip a bit
      (*b)[pos()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte
      (*b)[pos()] = static_cast<uint8_t>(rng() % 3 == 0 ? 0xff : rng());
      break;
    case 2:
    case 3: {  // overwrite a header field (count, length, type, dim, offset) with an extreme
      const auto& [at, width] = base.fields[rng() % base.fields.size()];
      if (at < b->size()) Overwrite(b, at, Extreme(rng, Load(*b, at, width)), width);
      break;
    }
    case 4: {  // overwrite a u32/u64 anywhere
      const int width = rng() % 2 ? 4 : 8;
      const size_t at = pos();
      Overwrite(b, at, Extreme(rng, Load(*b, at, width)), width);
      break;
    }
    case 5:  // truncate
      b->resize(pos());
      break;
    case 6: {  // insert random bytes
      const size_t at = pos();
      Bytes ins(1 + rng() % 16);
      for (uint8_t& x : ins) x = static_cast<uint8_t>(rng());
      b->insert(b->begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    case 7: {  // delete a range
      const size_t at = pos();
      const size_t n = std::min<size_t>(1 + rng() % 32, b->size() - at);
      b->erase(b->begin() + static_cast<std::ptrdiff_t>(at),
               b->begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    default: {  // duplicate a region elsewhere
      const size_t from = pos();
      const size_t n = std::min<size_t>(1 + rng() % 64, b->size() - from);
      const Bytes region(b->begin() + static_cast<std::ptrdiff_t>(from),
                         b->begin() + static_cast<std::ptrdiff_t>(from + n));
      b->insert(b->begin() + static_cast<std::ptrdiff_t>(pos()), region.begin(), region.end());
      break;
    }
  }
}

// Reads everything an accepted file offers, checking the documented invariants.
void CheckAccepted(const GgufFile& f, const uint8_t* base, size_t size) {
  for (const GgufKeyValue& kv : f.metadata()) {
    (void)kv.value.ToString();
    (void)kv.value.TypeString();
    (void)f.GetInt(kv.key);
    (void)f.GetUint32(kv.key);
    (void)f.GetFloat(kv.key);
    (void)f.GetBool(kv.key);
    (void)f.GetString(kv.key);
    (void)f.GetStringArray(kv.key);
    (void)f.GetIntArray(kv.key);
    (void)f.GetFloatArray(kv.key);
    ASSERT_EQ(f.Find(kv.key), &kv.value);
  }
  ASSERT_EQ(f.data_offset() % f.alignment(), 0u);
  for (const GgufTensor& t : f.tensors()) {
    ASSERT_EQ(f.FindTensor(t.name), &t);
    ASSERT_LE(t.file_offset, size);
    ASSERT_LE(t.num_bytes, size - t.file_offset) << t.name;
    ASSERT_EQ(t.data, base + t.file_offset);
    ASSERT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_EQ(t.shape.numel(), t.num_elements);
    Result<DType> dtype = f.TensorDType(t);
    if (!dtype.ok() || !CanDequantizeToF32(*dtype)) continue;
    std::vector<float> out(static_cast<size_t>(t.num_elements));
    Status s = DequantizeToF32(*dtype, t.data, t.num_bytes, t.num_elements, out.data());
    ASSERT_TRUE(s.ok()) << t.name << ": " << s.ToString();
  }
}

TEST(GgufMutation, RandomCorruptionsNeverCrash) {
  const std::vector<Base> bases = MakeBases();
  const std::string path =
      ::testing::TempDir() + "kiln_gguf_mutation_" + std::to_string(::getpid()) + ".gguf";
  for (const Base& b : bases) {  // the unmutated images are valid
    Result<GgufFile> f = GgufFile::OpenFromBytes(b.bytes, "base");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
  }

  std::mt19937_64 rng(kSeed);
  std::map<StatusCode, int> outcomes;
  int num_path_cases = 0;
  for (int i = 0; i < kNumCases; ++i) {
    const Base& base = bases[rng() % bases.size()];
    Bytes bytes = base.bytes;
    const int num_mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < num_mutations; ++m) Mutate(rng, base, &bytes);

    // An exactly sized heap copy, so AddressSanitizer flags any read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
    std::copy(bytes.begin(), bytes.end(), exact.get());
    const std::string name = "case" + std::to_string(i) + ".gguf";
    const bool via_path = i % kPathEvery == 0;
    Result<GgufFile> f =
        via_path ? (testing::WriteFile(path, bytes) ? GgufFile::Open(path)
                                                    : Result<GgufFile>(IoError("write")))
                 : GgufFile::OpenFromBytes({exact.get(), bytes.size()}, name);
    num_path_cases += via_path;
    outcomes[f.status().code()]++;
    if (f.ok()) {
      ASSERT_EQ(f->file_bytes().size(), bytes.size());
      if (!via_path) {
        ASSERT_EQ(f->file_bytes().data(), exact.get());
      }
      ASSERT_NO_FATAL_FAILURE(CheckAccepted(*f, f->file_bytes().data(), bytes.size()))
          << "case " << i;
    } else {
      const std::string prefix = (via_path ? path : name) + ": ";
      ASSERT_EQ(f.status().message().rfind(prefix, 0), 0u)
          << "case " << i << ": " << f.status().ToString();
    }
  }
  ::unlink(path.c_str());
  std::cout << kNumCases << " mutated files (" << num_path_cases << " through GgufFile::Open):";
  for (const auto& [code, n] : outcomes) std::cout << " " << StatusCodeName(code) << "=" << n;
  std::cout << "\n";
  EXPECT_GT(outcomes[StatusCode::kOk], kNumCases / 50);      // mutations that keep it valid
  EXPECT_GT(outcomes[StatusCode::kCorrupt], kNumCases / 2);  // and plenty that are caught
}

}  // namespace
}  // namespace kiln
