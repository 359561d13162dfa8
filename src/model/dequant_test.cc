// Bit-exact dequantization against gguf-py's numpy reference (label: model).
//
// KILN_GGUF_REF_DIR: written by tests/model/make_gguf_reference.py (the CTest fixture
// gguf_reference_setup runs it). KILN_DEFAULT_MODEL: the SmolLM2-135M-Instruct Q4_1 GGUF.
#include "model/dequant.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Hex(const uint8_t* p, size_t n) {
  std::ostringstream os;
  for (size_t i = 0; i < n; ++i) os << std::hex << std::setw(2) << std::setfill('0') << int{p[i]};
  return os.str();
}

std::string Sha256(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  CHECK(EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) == 1);
  return Hex(md, len);
}

std::string FloatDesc(float f) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g (0x%08x)", static_cast<double>(f), F32Bits(f));
  return buf;
}

// Compares bit patterns; on the first mismatch explains it with the block's raw bytes.
::testing::AssertionResult BitEqual(const std::vector<float>& got, const std::vector<float>& want,
                                    const GgufTensor& t) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (F32Bits(got[i]) != F32Bits(want[i])) {
      const GgmlTypeInfo* info = GetGgmlTypeInfo(t.ggml_type);
      const size_t block = i / info->block_size;
      return ::testing::AssertionFailure()
             << t.name << " (" << t.type_name << "): first mismatch at element " << i << " (block "
             << block << ", element " << i % info->block_size << " in it): kiln "
             << FloatDesc(got[i]) << ", gguf-py " << FloatDesc(want[i]) << "; block bytes "
             << Hex(t.data + block * info->block_bytes, info->block_bytes);
    }
  }
  return ::testing::AssertionSuccess();
}

Result<std::vector<float>> Dequantize(const GgufFile& f, const GgufTensor& t) {
  KILN_ASSIGN_OR_RETURN(DType dtype, f.TensorDType(t));
  std::vector<float> out(static_cast<size_t>(t.num_elements));
  KILN_RETURN_IF_ERROR(DequantizeToF32(dtype, t.data, t.num_bytes, t.num_elements, out.data()));
  return out;
}

const char* RefDir() { return std::getenv("KILN_GGUF_REF_DIR"); }

TEST(DequantReference, BitExactWithGgufPy) {
  const char* dir = RefDir();
  if (dir == nullptr) {
    GTEST_SKIP() << "KILN_GGUF_REF_DIR not set; run through ctest (fixture gguf_reference_setup)"
                    " or run tests/model/make_gguf_reference.py DIR and set it";
  }
  std::ifstream manifest_file(fs::path(dir) / "manifest.json");
  ASSERT_TRUE(manifest_file) << dir << "/manifest.json missing: did gguf_reference_setup run?";
  const json manifest = json::parse(manifest_file);
  std::set<std::string> types;
  int num_tensors = 0;
  for (const json& file : manifest.at("files")) {
    const std::string path = (fs::path(dir) / file.at("gguf").get<std::string>()).string();
    Result<GgufFile> f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(f->tensors().size(), file.at("tensors").size()) << path;
    for (const json& entry : file.at("tensors")) {
      const std::string name = entry.at("name");
      SCOPED_TRACE(path + " / " + name);
      Result<const GgufTensor*> t = f->GetTensor(name);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_EQ((*t)->type_name, file.at("type").get<std::string>());
      // numpy's shape is kiln's row-major shape: GGUF ne reversed.
      Result<Shape> shape = Shape::FromRange(entry.at("shape").get<std::vector<int64_t>>());
      ASSERT_TRUE(shape.ok());
      EXPECT_EQ((*t)->shape, *shape) << (*t)->shape.ToString();

      std::ifstream ref_file(fs::path(dir) / entry.at("ref").get<std::string>(), std::ios::binary);
      ASSERT_TRUE(ref_file);
      std::vector<float> want(static_cast<size_t>((*t)->num_elements));
      ref_file.read(reinterpret_cast<char*>(want.data()),
                    static_cast<std::streamsize>(want.size() * sizeof(float)));
      ASSERT_EQ(ref_file.gcount(), static_cast<std::streamsize>(want.size() * sizeof(float)));

      Result<std::vector<float>> got = Dequantize(*f, **t);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(BitEqual(*got, want, **t));
      types.insert(std::string((*t)->type_name));
      ++num_tensors;
    }
  }
  for (const char* required : {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
                               "q3_k", "q4_k", "q5_k", "q6_k"}) {
    EXPECT_TRUE(types.count(required)) << "the reference has no " << required << " tensor";
  }
  std::cout << "compared " << num_tensors << " tensors of " << types.size()
            << " types bit for bit with gguf " << manifest.value("gguf_version", "?") << "\n";
}

TEST(DequantReference, DefaultModelBitExactAndMetadata) {
  const char* model = std::getenv("KILN_DEFAULT_MODEL");
  if (model == nullptr || !fs::exists(model)) {
    GTEST_SKIP() << "KILN_DEFAULT_MODEL not set; scripts/test sets it after fetching the "
                    "default model";
  }
  Result<GgufFile> f = GgufFile::Open(model);
  ASSERT_TRUE(f.ok()) << f.status().ToString();

  // Metadata.
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f->GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count"), 9);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count_kv"), 3);
  Result<std::vector<std::string>> tokens = f->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->size(), 49152u);
  const GgufTensor* embd = f->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(*f->TensorDType(*embd), DType::kQ8_0);
  EXPECT_EQ(embd->shape, (Shape{49152, 576}));

  // Dequantize every tensor and time it.
  std::vector<std::vector<float>> outputs;
  int64_t num_elements = 0;
  std::set<std::string> types;
  const auto start = std::chrono::steady_clock::now();
  for (const GgufTensor& t : f->tensors()) {
    Result<std::vector<float>> out = Dequantize(*f, t);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    outputs.push_back(std::move(out).value());
    num_elements += t.num_elements;
    types.insert(std::string(t.type_name));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "dequantized " << f->tensors().size() << " tensors (" << num_elements
            << " elements, types";
  for (const std::string& ty : types) std::cout << " " << ty;
  std::cout << ") in " << seconds * 1e3 << " ms single-threaded: " << num_elements / seconds / 1e6
            << " M elements/s, " << num_elements * 4 / seconds / 1e9 << " GB/s of f32 written\n";

  // Compare with the numpy digests.
  const char* dir = RefDir();
  ASSERT_NE(dir, nullptr) << "KILN_GGUF_REF_DIR not set";
  std::ifstream digests_file(fs::path(dir) / "model_sha256.json");
  ASSERT_TRUE(digests_file) << dir << "/model_sha256.json missing: rerun gguf_reference_setup "
                            << "with KILN_DEFAULT_MODEL set (tests/model/make_gguf_reference.py "
                            << "--model PATH)";
  const json digests = json::parse(digests_file);
  ASSERT_EQ(digests.at("file_size").get<uint64_t>(), f->file_size())
      << "the digests were made from another file: " << digests.at("model");
  std::span<const uint8_t> whole = f->file_bytes();
  ASSERT_EQ(digests.at("file_sha256").get<std::string>(), Sha256(whole.data(), whole.size()))
      << "the digests were made from another file: " << digests.at("model");
  const json& want = digests.at("tensors");
  ASSERT_EQ(want.size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const GgufTensor& t = f->tensors()[i];
    ASSERT_TRUE(want.contains(t.name)) << t.name;
    EXPECT_EQ(want[t.name].at("type").get<std::string>(), t.type_name) << t.name;
    EXPECT_EQ(want[t.name].at("num_elements").get<int64_t>(), t.num_elements) << t.name;
    EXPECT_EQ(want[t.name].at("sha256").get<std::string>(),
              Sha256(outputs[i].data(), outputs[i].size() * sizeof(float)))
        << t.name << " (" << t.type_name << ", shape " << t.shape.ToString() << ")";
  }
}

// ---- Self-contained checks ----------------------------------------------------------------------

TEST(Dequant, RejectsWrongSizes) {
  std::vector<uint8_t> src(2 * 34);
  std::vector<float> dst(64);
  EXPECT_TRUE(DequantizeToF32(DType::kQ8_0, src.data(), 68, 64, dst.data()).ok());
  Status s = DequantizeToF32(DType::kQ8_0, src.data(), 67, 64, dst.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "dequantize q8_0: 64 elements take 68 bytes, got 67");
  EXPECT_EQ(DequantizeToF32(DType::kQ8_0, src.data(), 68, 63, dst.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeToF32(DType::kQ8_0, src.data(), 68, -32, dst.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeToF32(DType::kF32, src.data(), 68, int64_t{1} << 62, dst.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(DequantizeToF32(DType::kQ4_K, nullptr, 0, 0, nullptr).ok());
}

TEST(Dequant, UnsupportedTypes) {
  std::vector<uint8_t> src(292);
  std::vector<float> dst(256);
  for (DType d : {DType::kQ8_K, DType::kQ8_1, DType::kI4, DType::kU8, DType::kBool}) {
    EXPECT_FALSE(CanDequantizeToF32(d));
    Status s = DequantizeToF32(d, src.data(), 0, 0, dst.data());
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << DTypeName(d);
    EXPECT_NE(s.message().find(DTypeName(d)), std::string::npos);
  }
}

TEST(Dequant, HandBuiltBlocks) {
  // q8_0: d = 0.5 (fp16 0x3800), q = -3, 0, 7, ...
  std::vector<uint8_t> q8(34, 0);
  q8[0] = 0x00;
  q8[1] = 0x38;
  q8[2] = static_cast<uint8_t>(-3);
  q8[4] = 7;
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeToF32(DType::kQ8_0, q8.data(), 34, 32, y.data()).ok());
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 3.5f);
  // q4_1: d = 2, m = -1 (fp16 0x4000, 0xbc00); byte 0 = 0x5a: element 0 = 10, element 16 = 5.
  std::vector<uint8_t> q41(20, 0);
  q41[1] = 0x40;
  q41[3] = 0xbc;
  q41[4] = 0x5a;
  ASSERT_TRUE(DequantizeToF32(DType::kQ4_1, q41.data(), 20, 32, y.data()).ok());
  EXPECT_EQ(y[0], 19.0f);
  EXPECT_EQ(y[16], 9.0f);
  EXPECT_EQ(y[1], -1.0f);
  // Scalars.
  const int8_t i8[2] = {-128, 127};
  ASSERT_TRUE(DequantizeToF32(DType::kI8, i8, 2, 2, y.data()).ok());
  EXPECT_EQ(y[0], -128.0f);
  EXPECT_EQ(y[1], 127.0f);
  const double f64[3] = {1e300, -1e300, 0.1};
  ASSERT_TRUE(DequantizeToF32(DType::kF64, f64, 24, 3, y.data()).ok());
  EXPECT_EQ(y[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[2], 0.1f);
  const uint8_t f8[2] = {0x38, 0x7f};  // e4m3: 1.0 and NaN
  ASSERT_TRUE(DequantizeToF32(DType::kF8E4M3, f8, 2, 2, y.data()).ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[1]));
}

}  // namespace
}  // namespace kiln
