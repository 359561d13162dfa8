#include "model/safetensors.h"

#include <gtest/gtest.h>

#include "model/test_util.h"

namespace kiln {
namespace {

using testing::MakeTempDir;
using testing::MakeTensor;
using testing::SafetensorsBytes;
using testing::TestTensor;
using testing::WriteFile;

std::string Write(const std::string& bytes) {
  static const std::string dir = MakeTempDir("safetensors");
  static int n = 0;
  const std::string path = dir + "/f" + std::to_string(n++) + ".safetensors";
  WriteFile(path, bytes);
  return path;
}

std::string Header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + data;
}

TEST(Safetensors, ReadsTensorsWithoutCopying) {
  std::vector<TestTensor> ts = {MakeTensor("a", DType::kBF16, Shape{3, 5}, 1),
                                MakeTensor("b", DType::kF32, Shape{7}, 2),
                                MakeTensor("c", DType::kF8E4M3, Shape{2, 2, 2}, 3)};
  const std::string path = Write(SafetensorsBytes(ts));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 3u);
  const SafetensorsTensor* a = f->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(a->shape, (Shape{3, 5}));
  EXPECT_EQ(a->nbytes, 30);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data), 30), ts[0].data);
  const SafetensorsTensor* c = f->Find("c");
  EXPECT_EQ(c->dtype, DType::kF8E4M3);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(c->data), 8), ts[2].data);
  EXPECT_EQ(f->Find("missing"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, ScalarAndEmptyTensors) {
  const std::string path = Write(Header(
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,3],"data_offsets":[4,4]}})",
      std::string(4, '\x01')));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Find("s")->shape.ndim(), 0);
  EXPECT_EQ(f->Find("e")->nbytes, 0);
}

struct Bad {
  std::string bytes;
  StatusCode code;
  std::string needle;
};

TEST(Safetensors, RejectsCorruptFilesWithNamedErrors) {
  const std::string data8(8, '\0');
  const std::vector<Bad> cases = {
      {"abc", StatusCode::kCorrupt, "too short"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), StatusCode::kCorrupt, "exceeds"},
      {Header("{}", "").substr(0, 9), StatusCode::kCorrupt, "runs past the end"},
      {Header("[1,2]", ""), StatusCode::kCorrupt, "not a JSON object"},
      {Header("{\"a\":", ""), StatusCode::kCorrupt, "not a JSON object"},
      {Header(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", data8.substr(0, 6)),
       StatusCode::kCorrupt, "tensor 'w': data_offsets [0,8] lie outside the 6-byte"},
      {Header(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", data8),
       StatusCode::kCorrupt, "needs 12 bytes but data_offsets span 8"},
      {Header(R"({"w":{"dtype":"F8_E8M0","shape":[8],"data_offsets":[0,8]}})", data8),
       StatusCode::kUnsupported, "tensor 'w'"},
      {Header(R"({"w":{"dtype":"BF16","shape":[-2],"data_offsets":[0,8]}})", data8),
       StatusCode::kCorrupt, "not a list of sizes"},
      {Header(R"({"w":{"dtype":"BF16","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
              data8),
       StatusCode::kCorrupt, "overflows"},
      {Header(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[8,0]}})", data8),
       StatusCode::kCorrupt, "lie outside"},
      {Header(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},
                  "v":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}})",
              data8.substr(0, 6)),
       StatusCode::kCorrupt, "overlapping"},
      {Header(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})", data8),
       StatusCode::kCorrupt, "hole"},
      {Header(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", data8),
       StatusCode::kCorrupt, "4 bytes after the last tensor"},
      {Header(R"({"w":{"dtype":"BF16","shape":[4]}})", data8), StatusCode::kCorrupt,
       "data_offsets"},
      {Header(R"({"w":{"shape":[4],"data_offsets":[0,8]}})", data8), StatusCode::kCorrupt, "dtype"},
      {Header(R"({"__metadata__":{"k":1}})", ""), StatusCode::kCorrupt, "__metadata__"},
      {Header(R"({"w":{"dtype":"BF16","shape":[1,1,1,1,1,1,1],"data_offsets":[0,2]}})",
              data8.substr(0, 2)),
       StatusCode::kCorrupt, "dimensions"},
  };
  for (const Bad& b : cases) {
    const std::string path = Write(b.bytes);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << b.needle;
    EXPECT_EQ(f.status().code(), b.code) << f.status().ToString();
    EXPECT_NE(f.status().message().find(b.needle), std::string::npos) << f.status().ToString();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
  }
  EXPECT_EQ(SafetensorsFile::Open("/nonexistent/x.safetensors").status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln
