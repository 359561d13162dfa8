#include "model/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

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
using testing::TensorSpec;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kIq2Xxs = 16;

std::string TempPath(const std::string& stem) {
  return ::testing::TempDir() + "kiln_gguf_test_" + std::to_string(::getpid()) + "_" + stem +
         ".gguf";
}

// Writes `bytes` to a temp file and opens it through the public path-based entry point.
Result<GgufFile> OpenBytes(const Bytes& bytes, const std::string& stem) {
  const std::string path = TempPath(stem);
  EXPECT_TRUE(testing::WriteFile(path, bytes));
  Result<GgufFile> f = GgufFile::Open(path);
  ::unlink(path.c_str());  // the map stays valid after unlink
  return f;
}

GgufBuilder AllTypes(uint32_t version) {
  GgufBuilder b;
  b.version = version;
  b.Kv("u8", Scalar<uint8_t>(GgufType::kUint8, 200))
      .Kv("i8", Scalar<int8_t>(GgufType::kInt8, -100))
      .Kv("u16", Scalar<uint16_t>(GgufType::kUint16, 60000))
      .Kv("i16", Scalar<int16_t>(GgufType::kInt16, -30000))
      .Kv("u32", Scalar<uint32_t>(GgufType::kUint32, 4000000000u))
      .Kv("i32", Scalar<int32_t>(GgufType::kInt32, -2000000000))
      .Kv("f32", Scalar<float>(GgufType::kFloat32, 1e-5f))
      .Kv("bool", Scalar<uint8_t>(GgufType::kBool, 1))
      .Kv("str", Str("llama"))
      .Kv("u64", Scalar<uint64_t>(GgufType::kUint64, 18446744073709551615ull))
      .Kv("i64", Scalar<int64_t>(GgufType::kInt64, std::numeric_limits<int64_t>::min()))
      .Kv("f64", Scalar<double>(GgufType::kFloat64, 0.1))
      .Kv("arr.u8", NumArray<uint8_t>(GgufType::kUint8, {1, 2, 255}))
      .Kv("arr.i8", NumArray<int8_t>(GgufType::kInt8, {-1, 127}))
      .Kv("arr.u16", NumArray<uint16_t>(GgufType::kUint16, {65535}))
      .Kv("arr.i16", NumArray<int16_t>(GgufType::kInt16, {-32768}))
      .Kv("arr.u32", NumArray<uint32_t>(GgufType::kUint32, {7, 8}))
      .Kv("arr.i32", NumArray<int32_t>(GgufType::kInt32, {1, -2, 3}))
      .Kv("arr.f32", NumArray<float>(GgufType::kFloat32, {0.5f, -2.25f}))
      .Kv("arr.bool", NumArray<uint8_t>(GgufType::kBool, {1, 0, 1}))
      .Kv("arr.str", StrArray({"<s>", "", "hello world"}))
      .Kv("arr.u64", NumArray<uint64_t>(GgufType::kUint64, {1, 18446744073709551615ull}))
      .Kv("arr.i64", NumArray<int64_t>(GgufType::kInt64, {-5}))
      .Kv("arr.f64", NumArray<double>(GgufType::kFloat64, {3.5}))
      .Kv("arr.empty", Array(GgufType::kInt32, {}))
      .Kv("arr.nested", Array(GgufType::kArray, {NumArray<int32_t>(GgufType::kInt32, {1, 2}),
                                                 NumArray<int32_t>(GgufType::kInt32, {3})}))
      .Kv("arr.nested_str", Array(GgufType::kArray, {StrArray({"a", "b"}), StrArray({})}))
      .Kv("arr.deep", Nested(GgufFile::kMaxArrayDepth));
  return b;
}

void CheckAllTypes(const GgufFile& f) {
  EXPECT_EQ(*f.GetInt("u8"), 200);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(*f.GetInt("u16"), 60000);
  EXPECT_EQ(*f.GetInt("i16"), -30000);
  EXPECT_EQ(*f.GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("i32"), -2000000000);
  EXPECT_EQ(*f.GetFloat("f32"), static_cast<double>(1e-5f));
  EXPECT_EQ(*f.GetBool("bool"), true);
  EXPECT_EQ(*f.GetString("str"), "llama");
  EXPECT_EQ(f.Find("u64")->type(), GgufType::kUint64);
  EXPECT_EQ(*f.GetInt("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.GetFloat("f64"), 0.1);
  EXPECT_EQ(*f.GetIntArray("arr.u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(*f.GetIntArray("arr.i8"), (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(*f.GetIntArray("arr.u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(*f.GetIntArray("arr.i16"), (std::vector<int64_t>{-32768}));
  EXPECT_EQ(*f.GetIntArray("arr.u32"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(*f.GetIntArray("arr.i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetFloatArray("arr.f32"), (std::vector<double>{0.5, -2.25}));
  const GgufArray* bools = *f.GetArray("arr.bool");
  ASSERT_EQ(bools->size(), 3u);
  EXPECT_EQ(*bools->BoolAt(0), true);
  EXPECT_EQ(*bools->BoolAt(1), false);
  EXPECT_EQ(*f.GetStringArray("arr.str"), (std::vector<std::string>{"<s>", "", "hello world"}));
  EXPECT_EQ(f.GetIntArray("arr.u64").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*(*f.GetArray("arr.u64"))->IntAt(0), 1);
  EXPECT_EQ(*f.GetIntArray("arr.i64"), (std::vector<int64_t>{-5}));
  EXPECT_EQ(*f.GetFloatArray("arr.f64"), (std::vector<double>{3.5}));
  EXPECT_TRUE(f.GetIntArray("arr.empty")->empty());

  const GgufArray* nested = *f.GetArray("arr.nested");
  EXPECT_EQ(nested->element_type(), GgufType::kArray);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(*nested->ArrayAt(0)->IntAt(1), 2);
  EXPECT_EQ(*nested->ArrayAt(1)->IntAt(0), 3);
  EXPECT_EQ(nested->ArrayAt(2), nullptr);
  EXPECT_EQ(nested->TypeString(), "array<array<int32>>");
  const GgufArray* nested_str = *f.GetArray("arr.nested_str");
  EXPECT_EQ(*nested_str->ArrayAt(0)->StringAt(1), "b");
  EXPECT_EQ(nested_str->ArrayAt(1)->size(), 0u);

  const GgufArray* deep = *f.GetArray("arr.deep");
  for (int i = 1; i < GgufFile::kMaxArrayDepth; ++i) deep = deep->ArrayAt(0);
  EXPECT_EQ(*deep->IntAt(0), 7);

  EXPECT_EQ(f.metadata().size(), 28u);
  EXPECT_EQ(f.metadata()[0].key, "u8");
  EXPECT_EQ(f.metadata()[27].key, "arr.deep");
  EXPECT_TRUE(f.tensors().empty());
}

TEST(Gguf, AllValueTypesV3) {
  Result<GgufFile> f = OpenBytes(AllTypes(3).Build(), "v3");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  CheckAllTypes(*f);
}

TEST(Gguf, AllValueTypesV2) {
  Result<GgufFile> f = OpenBytes(AllTypes(2).Build(), "v2");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 2u);
  CheckAllTypes(*f);
}

TEST(Gguf, ValueToString) {
  Bytes bytes = AllTypes(3).Build();
  Result<GgufFile> f = GgufFile::OpenFromBytes(bytes, "mem");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Find("str")->ToString(), "\"llama\"");
  EXPECT_EQ(f->Find("u64")->ToString(), "18446744073709551615");
  EXPECT_EQ(f->Find("bool")->ToString(), "true");
  EXPECT_EQ(f->Find("arr.str")->ToString(2), "[string x 3: \"<s>\", \"\", ...]");
  EXPECT_EQ(f->Find("arr.u64")->ToString(), "[uint64 x 2: 1, 18446744073709551615]");
  EXPECT_EQ(f->Find("arr.nested")->ToString(), "[array x 2: [int32 x 2: 1, 2], [int32 x 1: 3]]");
  EXPECT_EQ(f->Find("arr.nested")->TypeString(), "array<array<int32>>");
}

TEST(Gguf, TypedGetterErrorsNameFileKeyAndTypes) {
  Bytes bytes = AllTypes(3).Build();
  Result<GgufFile> f = GgufFile::OpenFromBytes(bytes, "my.gguf");
  ASSERT_TRUE(f.ok());
  Status s = f->GetInt("str").status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "my.gguf: metadata key 'str' has type string, expected an integer");
  s = f->GetInt("missing").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "my.gguf: metadata key 'missing' not found");
  s = f->GetInt("u64").status();
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("18446744073709551615"), std::string::npos) << s.message();
  EXPECT_EQ(f->GetUint32("i8").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(f->GetFloat("u32").status().message(),
            "my.gguf: metadata key 'u32' has type uint32, expected float32 or float64");
  EXPECT_EQ(f->GetBool("u8").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f->GetString("arr.str").status().message(),
            "my.gguf: metadata key 'arr.str' has type array<string>, expected string");
  EXPECT_EQ(f->GetStringArray("arr.i32").status().message(),
            "my.gguf: metadata key 'arr.i32' has type array<int32>, expected array<string>");
  EXPECT_EQ(f->GetIntArray("arr.f32").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f->GetFloatArray("arr.i32").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f->GetArray("u8").status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(f->Has("arr.deep"));
  EXPECT_FALSE(f->Has("arr"));
}

GgufBuilder WithTensors() {
  GgufBuilder b;
  b.Kv("general.architecture", Str("llama"));
  b.Tensor("a.f32", {3, 2}, kF32, Filler(24, 1));
  b.Tensor("b.q8_0", {64, 2}, kQ8_0, Filler(4 * 34, 2));
  b.Tensor("c.q4_k", {256, 1, 1, 2}, kQ4_K, Filler(2 * 144, 3));
  b.Tensor("d.iq2_xxs", {256}, kIq2Xxs, Filler(66, 4));
  b.Tensor("e.empty", {0, 4}, kF32, {});
  b.Tensor("f.scalar", {}, kF32, Filler(4, 5));
  return b;
}

TEST(Gguf, TensorInfosShapesAndData) {
  GgufBuilder b = WithTensors();
  const Bytes bytes = b.Build();
  const std::string path = TempPath("tensors");
  ASSERT_TRUE(testing::WriteFile(path, bytes));
  Result<GgufFile> f = GgufFile::Open(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 6u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_EQ(f->file_size(), bytes.size());

  const GgufTensor& a = f->tensors()[0];
  EXPECT_EQ(a.name, "a.f32");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (Shape{2, 3}));  // ne reversed
  EXPECT_EQ(a.n_dims, 2);
  EXPECT_EQ(a.num_elements, 6);
  EXPECT_EQ(a.num_bytes, 24u);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.file_offset, f->data_offset());
  EXPECT_EQ(std::memcmp(a.data, bytes.data() + a.file_offset, 24), 0);
  EXPECT_EQ(std::memcmp(a.data, Filler(24, 1).data(), 24), 0);

  const GgufTensor* q8 = *f->GetTensor("b.q8_0");
  EXPECT_EQ(q8->dtype, DType::kQ8_0);
  EXPECT_EQ(q8->type_name, "q8_0");
  EXPECT_EQ(q8->shape, (Shape{2, 64}));
  EXPECT_EQ(q8->num_bytes, 136u);
  EXPECT_EQ(q8->offset, 32u);  // 24 bytes of a.f32, padded to 32
  EXPECT_EQ(std::memcmp(q8->data, Filler(136, 2).data(), 136), 0);

  const GgufTensor* q4k = f->FindTensor("c.q4_k");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->shape, (Shape{2, 1, 1, 256}));
  EXPECT_EQ(q4k->num_bytes, 288u);
  EXPECT_EQ(*f->TensorDType(*q4k), DType::kQ4_K);

  // A type kiln cannot load still opens; asking for its dtype names tensor and type.
  const GgufTensor* iq = f->FindTensor("d.iq2_xxs");
  EXPECT_FALSE(iq->dtype.has_value());
  EXPECT_EQ(iq->num_bytes, 66u);
  Status s = f->TensorDType(*iq).status();
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("d.iq2_xxs"), std::string::npos);
  EXPECT_NE(s.message().find("iq2_xxs (id 16)"), std::string::npos);
  EXPECT_NE(s.message().find(path), std::string::npos);

  const GgufTensor* empty = f->FindTensor("e.empty");
  EXPECT_EQ(empty->num_elements, 0);
  EXPECT_EQ(empty->num_bytes, 0u);
  EXPECT_EQ(empty->shape, (Shape{4, 0}));
  const GgufTensor* scalar = f->FindTensor("f.scalar");
  EXPECT_EQ(scalar->shape.ndim(), 0);
  EXPECT_EQ(scalar->num_elements, 1);

  EXPECT_EQ(f->FindTensor("nope"), nullptr);
  s = f->GetTensor("nope").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(path), std::string::npos);
  EXPECT_NE(s.message().find("'nope'"), std::string::npos);
}

TEST(Gguf, CustomAlignment) {
  for (uint32_t align : {1u, 8u, 64u, 4096u}) {
    GgufBuilder b = WithTensors();
    b.alignment = align;
    b.Kv("general.alignment", Scalar<uint32_t>(GgufType::kUint32, align));
    Bytes bytes = b.Build();
    Result<GgufFile> f = GgufFile::OpenFromBytes(bytes, "aligned.gguf");
    ASSERT_TRUE(f.ok()) << align << ": " << f.status().ToString();
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    for (const GgufTensor& t : f->tensors()) EXPECT_EQ(t.offset % align, 0u) << t.name;
    EXPECT_EQ(std::memcmp(f->FindTensor("b.q8_0")->data, Filler(136, 2).data(), 136), 0);
  }
}

TEST(Gguf, MovedFileKeepsTensorPointers) {
  Result<GgufFile> f = OpenBytes(WithTensors().Build(), "move");
  ASSERT_TRUE(f.ok());
  const uint8_t* before = f->tensors()[1].data;
  GgufFile moved = std::move(f).value();
  EXPECT_EQ(moved.tensors()[1].data, before);
  EXPECT_EQ(std::memcmp(before, Filler(136, 2).data(), 136), 0);
}

TEST(Gguf, MissingAndEmptyFiles) {
  Result<GgufFile> f = GgufFile::Open("/nonexistent/dir/model.gguf");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos);
  f = OpenBytes({}, "empty");
  EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(f.status().message().find("too small"), std::string::npos);
}

// ---- Targeted corruptions ----------------------------------------------------------------------

struct Corruption {
  std::string label;
  std::function<Bytes()> make;
  StatusCode code;
  std::vector<std::string> needles;  // substrings the message must contain
};

void Poke32(Bytes* b, size_t at, uint32_t v) { std::memcpy(b->data() + at, &v, 4); }
void Poke64(Bytes* b, size_t at, uint64_t v) { std::memcpy(b->data() + at, &v, 8); }

// Position of the n-th recorded header field (see GgufBuilder::fields) after building.
size_t FieldAt(GgufBuilder& b, size_t n) {
  b.Build();
  return b.fields.at(n).first;
}

std::vector<Corruption> Corruptions() {
  std::vector<Corruption> c;
  c.push_back({"bad magic",
               [] {
                 Bytes b = WithTensors().Build();
                 b[0] = 'X';
                 return b;
               },
               StatusCode::kCorrupt,
               {"not a GGUF file", "XGUF"}});
  c.push_back({"version 1",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke32(&b, 4, 1);
                 return b;
               },
               StatusCode::kUnsupported,
               {"version 1"}});
  c.push_back({"version 4",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke32(&b, 4, 4);
                 return b;
               },
               StatusCode::kUnsupported,
               {"version 4"}});
  c.push_back({"big endian",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke32(&b, 4, 0x03000000);
                 return b;
               },
               StatusCode::kUnsupported,
               {"big-endian"}});
  c.push_back({"truncated header",
               [] {
                 Bytes b = WithTensors().Build();
                 b.resize(10);
                 return b;
               },
               StatusCode::kCorrupt,
               {"truncated", "tensor count"}});
  c.push_back({"huge tensor count",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke64(&b, 8, 1ull << 60);
                 return b;
               },
               StatusCode::kCorrupt,
               {"tensor count 1152921504606846976"}});
  c.push_back({"huge kv count",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke64(&b, 16, ~0ull);
                 return b;
               },
               StatusCode::kCorrupt,
               {"metadata count 18446744073709551615"}});
  c.push_back({"huge key length",
               [] {
                 Bytes b = WithTensors().Build();
                 Poke64(&b, 24, 1ull << 62);
                 return b;
               },
               StatusCode::kCorrupt,
               {"key of metadata entry 0", "4611686018427387904"}});
  c.push_back({"bad value type",
               [] {
                 GgufBuilder g;
                 g.Kv("k", Scalar<uint8_t>(GgufType::kUint8, 1));
                 Bytes b = g.Build();
                 Poke32(&b, FieldAt(g, 4), 13);
                 return b;
               },
               StatusCode::kCorrupt,
               {"metadata key 'k'", "13"}});
  c.push_back({"bad array element type",
               [] {
                 GgufBuilder g;
                 g.Kv("arr", NumArray<int32_t>(GgufType::kInt32, {1}));
                 Bytes b = g.Build();
                 Poke32(&b, 24 + 8 + 3 + 4, 99);
                 return b;
               },
               StatusCode::kCorrupt,
               {"metadata key 'arr'", "99"}});
  c.push_back({"huge array length",
               [] {
                 GgufBuilder g;
                 g.Kv("tokens", StrArray({"a", "b"}));
                 Bytes b = g.Build();
                 Poke64(&b, 24 + 8 + 6 + 4 + 4, 1ull << 60);
                 return b;
               },
               StatusCode::kCorrupt,
               {"metadata key 'tokens'", "1152921504606846976"}});
  c.push_back({"huge string in array",
               [] {
                 GgufBuilder g;
                 g.Kv("tokens", StrArray({"a", "b"}));
                 Bytes b = g.Build();
                 Poke64(&b, 24 + 8 + 6 + 4 + 4 + 8, 1ull << 40);
                 return b;
               },
               StatusCode::kCorrupt,
               {"metadata key 'tokens' element 0", "1099511627776"}});
  c.push_back(
      {"nesting too deep",
       [] { return GgufBuilder().Kv("deep", Nested(GgufFile::kMaxArrayDepth + 1)).Build(); },
       StatusCode::kCorrupt,
       {"metadata key 'deep'", "nested more than 8"}});
  c.push_back({"bool not 0 or 1",
               [] { return GgufBuilder().Kv("flag", Scalar<uint8_t>(GgufType::kBool, 2)).Build(); },
               StatusCode::kCorrupt,
               {"metadata key 'flag'", "is 2"}});
  c.push_back(
      {"bool array element",
       [] {
         return GgufBuilder().Kv("flags", NumArray<uint8_t>(GgufType::kBool, {0, 1, 7})).Build();
       },
       StatusCode::kCorrupt,
       {"metadata key 'flags'", "element 2", "is 7"}});
  c.push_back(
      {"duplicate key",
       [] {
         return GgufBuilder().Kv("general.name", Str("a")).Kv("general.name", Str("b")).Build();
       },
       StatusCode::kCorrupt,
       {"duplicate metadata key 'general.name'"}});
  c.push_back({"duplicate tensor",
               [] {
                 return GgufBuilder()
                     .Tensor("w", {8}, kF32, Filler(32, 1))
                     .Tensor("w", {8}, kF32, Filler(32, 2))
                     .Build();
               },
               StatusCode::kCorrupt,
               {"duplicate tensor 'w'"}});
  c.push_back({"too many dims",
               [] {
                 return GgufBuilder().Tensor("w5", {1, 1, 1, 1, 1}, kF32, Filler(4, 1)).Build();
               },
               StatusCode::kCorrupt,
               {"tensor 'w5'", "n_dims is 5"}});
  c.push_back({"dim past int64",
               [] { return GgufBuilder().Tensor("big", {1ull << 63}, kF32, {}).Build(); },
               StatusCode::kCorrupt,
               {"tensor 'big'", "9223372036854775808"}});
  c.push_back({"element count overflow",
               [] {
                 return GgufBuilder().Tensor("ovf", {1ull << 32, 1ull << 32}, kF32, {}).Build();
               },
               StatusCode::kCorrupt,
               {"tensor 'ovf'", "overflows int64"}});
  c.push_back({"byte count overflow",
               [] { return GgufBuilder().Tensor("ovf8", {1ull << 62}, kF32, {}).Build(); },
               StatusCode::kCorrupt,
               {"tensor 'ovf8'", "byte size", "overflows"}});
  c.push_back({"ne[0] not a multiple of the block size",
               [] {
                 return GgufBuilder().Tensor("q", {33, 2}, kQ4_0, Filler(36, 1)).Build();
               },
               StatusCode::kCorrupt,
               {"tensor 'q'", "ne[0] = 33", "q4_0 block size 32"}});
  c.push_back({"unknown ggml type",
               [] { return GgufBuilder().Tensor("x", {8}, 99, Filler(32, 1)).Build(); },
               StatusCode::kUnsupported,
               {"tensor 'x'", "ggml type id 99"}});
  c.push_back({"removed ggml type",
               [] { return GgufBuilder().Tensor("x", {32}, 31, Filler(18, 1)).Build(); },
               StatusCode::kUnsupported,
               {"tensor 'x'", "ggml type id 31"}});
  c.push_back({"misaligned offset",
               [] {
                 return GgufBuilder()
                     .Tensor("a", {8}, kF32, Filler(32, 1))
                     .Tensor("b", {8}, kF32, Filler(32, 2), 40)
                     .Build();
               },
               StatusCode::kCorrupt,
               {"tensor 'b'", "offset 40", "alignment 32"}});
  c.push_back({"offset past the end",
               [] {
                 GgufBuilder g;
                 g.Tensor("a", {8}, kF32, Filler(32, 1));
                 Bytes b = g.Build();
                 Poke64(&b, g.fields.back().first, 1ull << 40);
                 return b;
               },
               StatusCode::kCorrupt,
               {"tensor 'a'", "1099511627776", "past the data section"}});
  c.push_back({"offset near 2^64",
               [] {
                 GgufBuilder g;
                 g.Tensor("a", {8}, kF32, Filler(32, 1));
                 Bytes b = g.Build();
                 Poke64(&b, g.fields.back().first, ~0ull - 31);
                 return b;
               },
               StatusCode::kCorrupt,
               {"tensor 'a'"}});
  c.push_back({"truncated data",
               [] {
                 Bytes b = WithTensors().Build();
                 b.resize(b.size() - 100);
                 return b;
               },
               StatusCode::kCorrupt,
               {"past the data section", "truncated"}});
  c.push_back({"truncated before data section",
               [] {
                 GgufBuilder g;
                 g.Tensor("a", {8}, kF32, Filler(32, 1));
                 Bytes b = g.Build();
                 b.resize(g.fields.back().first +
                          8);  // the infos end at byte 57; data starts at 64
                 return b;
               },
               StatusCode::kCorrupt,
               {"data section"}});
  c.push_back({"overlapping tensors",
               [] {
                 return GgufBuilder()
                     .Tensor("a", {16}, kF32, Filler(64, 1))
                     .Tensor("b", {8}, kF32, Filler(32, 2), 32)
                     .Build();
               },
               StatusCode::kCorrupt,
               {"tensor 'a'", "overlaps tensor 'b'"}});
  for (uint32_t bad : {0u, 3u, 48u}) {
    c.push_back({"alignment " + std::to_string(bad),
                 [bad] {
                   GgufBuilder g = WithTensors();
                   g.Kv("general.alignment", Scalar<uint32_t>(GgufType::kUint32, bad));
                   return g.Build();
                 },
                 StatusCode::kCorrupt,
                 {"general.alignment", "= " + std::to_string(bad)}});
  }
  c.push_back({"alignment as string",
               [] {
                 GgufBuilder g = WithTensors();
                 g.Kv("general.alignment", Str("32"));
                 return g.Build();
               },
               StatusCode::kCorrupt,
               {"general.alignment", "type string"}});
  return c;
}

TEST(Gguf, TargetedCorruptions) {
  for (const Corruption& c : Corruptions()) {
    SCOPED_TRACE(c.label);
    Result<GgufFile> f = OpenBytes(c.make(), "corrupt");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), c.code) << f.status().ToString();
    const std::string& msg = f.status().message();
    EXPECT_EQ(msg.rfind(TempPath("corrupt") + ": ", 0), 0u) << msg;
    for (const std::string& needle : c.needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
    }
  }
}

}  // namespace
}  // namespace kiln
