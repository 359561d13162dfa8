#include "builder/safetensors_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "builder/test_util.h"

namespace kiln {
namespace {

using nlohmann::json;
using testing::ParseSafetensors;
using testing::ReadFile;
using testing::ScopedTempDir;

// 3 tensors: 1000 + 600 + 40 bytes.
std::vector<SafetensorsTensorSpec> ThreeTensors() {
  return {{"b.weight", DType::kBF16, Shape{10, 50}},
          {"a.weight", DType::kF32, Shape{150}},
          {"c.bias", DType::kF16, Shape{2, 2, 5}}};
}

TEST(SafetensorsLayout, OneShardWhenItFits) {
  const auto tensors = ThreeTensors();
  auto layout = PlanSafetensorsShards(tensors, kDefaultMaxShardBytes);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->shards.size(), 1u);
  EXPECT_EQ(layout->shards[0].file_name, "model.safetensors");
  EXPECT_EQ(layout->total_size, 1640);
  const std::string& prefix = layout->shards[0].prefix;
  EXPECT_EQ(prefix.size() % 8, 0u);
  EXPECT_EQ(layout->shards[0].file_size, static_cast<int64_t>(prefix.size()) + 1640);
  // Data in list order, right after the prefix.
  EXPECT_EQ(layout->placements[0].file_offset, static_cast<int64_t>(prefix.size()));
  EXPECT_EQ(layout->placements[1].file_offset, static_cast<int64_t>(prefix.size()) + 1000);
  EXPECT_EQ(layout->placements[2].file_offset, static_cast<int64_t>(prefix.size()) + 1600);

  auto parsed = ParseSafetensors(prefix);
  EXPECT_EQ(8 + parsed.header_len, prefix.size());
  EXPECT_EQ(parsed.header["__metadata__"], json({{"format", "pt"}}));
  EXPECT_EQ(parsed.header["b.weight"]["dtype"], "BF16");
  EXPECT_EQ(parsed.header["b.weight"]["shape"], json({10, 50}));
  EXPECT_EQ(parsed.header["b.weight"]["data_offsets"], json({0, 1000}));
  EXPECT_EQ(parsed.header["a.weight"]["dtype"], "F32");
  EXPECT_EQ(parsed.header["a.weight"]["data_offsets"], json({1000, 1600}));
  EXPECT_EQ(parsed.header["c.bias"]["dtype"], "F16");
  EXPECT_EQ(parsed.header["c.bias"]["shape"], json({2, 2, 5}));
  EXPECT_EQ(parsed.header["c.bias"]["data_offsets"], json({1600, 1640}));
}

TEST(SafetensorsLayout, ShardsLikeTransformers) {
  const auto tensors = ThreeTensors();
  // 1000 fits; +600 would exceed 1200 -> new shard; 600 + 40 fits.
  auto layout = PlanSafetensorsShards(tensors, 1200);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->shards.size(), 2u);
  EXPECT_EQ(layout->shards[0].file_name, "model-00001-of-00002.safetensors");
  EXPECT_EQ(layout->shards[1].file_name, "model-00002-of-00002.safetensors");
  EXPECT_EQ(layout->shards[0].tensors, std::vector<int>({0}));
  EXPECT_EQ(layout->shards[1].tensors, std::vector<int>({1, 2}));
  EXPECT_EQ(layout->placements[2].shard, 1);

  // A tensor over the limit gets a shard of its own.
  auto small = PlanSafetensorsShards(tensors, 100);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->shards.size(), 3u);

  const json index = json::parse(SafetensorsIndexJson(*layout, tensors));
  EXPECT_EQ(index["metadata"]["total_size"], 1640);
  EXPECT_EQ(index["weight_map"], json({{"a.weight", "model-00002-of-00002.safetensors"},
                                       {"b.weight", "model-00001-of-00002.safetensors"},
                                       {"c.bias", "model-00002-of-00002.safetensors"}}));
}

TEST(SafetensorsLayout, RejectsBadInput) {
  std::vector<SafetensorsTensorSpec> dup = {{"x", DType::kBF16, Shape{2}},
                                            {"x", DType::kBF16, Shape{2}}};
  EXPECT_EQ(PlanSafetensorsShards(dup, 100).status().code(), StatusCode::kInvalidArgument);
  std::vector<SafetensorsTensorSpec> q = {{"x", DType::kQ4_K, Shape{256}}};
  EXPECT_EQ(PlanSafetensorsShards(q, 100).status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(PlanSafetensorsShards(ThreeTensors(), 0).ok());
  EXPECT_FALSE(PlanSafetensorsShards({}, 100).ok());
}

TEST(SafetensorsWriter, WritesShardsAndIndex) {
  ScopedTempDir dir("st");
  std::filesystem::create_directories(dir.path());
  const auto tensors = ThreeTensors();
  auto layout = PlanSafetensorsShards(tensors, 1200);
  ASSERT_TRUE(layout.ok());
  auto writer = SafetensorsWriter::Create(dir.path(), *layout, tensors);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  // Fill every tensor with its index + 1, in two halves, second half first.
  for (int t = 0; t < 3; ++t) {
    const int64_t n = layout->placements[t].nbytes;
    const std::string bytes(n, static_cast<char>(t + 1));
    ASSERT_TRUE(writer->WriteTensorBytes(t, n / 2, bytes.data(), n - n / 2).ok());
    ASSERT_TRUE(writer->WriteTensorBytes(t, 0, bytes.data(), n / 2).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());

  auto shard0 = ParseSafetensors(ReadFile(dir.file("model-00001-of-00002.safetensors")));
  EXPECT_EQ(shard0.data, std::string(1000, '\1'));
  EXPECT_EQ(shard0.header.size(), 2u);  // __metadata__ + b.weight
  auto shard1 = ParseSafetensors(ReadFile(dir.file("model-00002-of-00002.safetensors")));
  EXPECT_EQ(shard1.data, std::string(600, '\2') + std::string(40, '\3'));
  EXPECT_EQ(shard1.header["c.bias"]["data_offsets"], json({600, 640}));
  EXPECT_EQ(ReadFile(dir.file("model.safetensors.index.json")),
            SafetensorsIndexJson(*layout, tensors));
}

TEST(SafetensorsWriter, SingleFileHasNoIndex) {
  ScopedTempDir dir("st1");
  std::filesystem::create_directories(dir.path());
  const auto tensors = ThreeTensors();
  auto layout = PlanSafetensorsShards(tensors, kDefaultMaxShardBytes);
  ASSERT_TRUE(layout.ok());
  auto writer = SafetensorsWriter::Create(dir.path(), *layout, tensors);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  // Unwritten data reads back as zeros (the file was pre-sized).
  EXPECT_EQ(ParseSafetensors(ReadFile(dir.file("model.safetensors"))).data,
            std::string(1640, '\0'));
}

TEST(SafetensorsWriter, CreateFailsInMissingDirectory) {
  ScopedTempDir dir("missing");
  const auto tensors = ThreeTensors();
  auto layout = PlanSafetensorsShards(tensors, kDefaultMaxShardBytes);
  ASSERT_TRUE(layout.ok());
  auto writer = SafetensorsWriter::Create(dir.path(), *layout, tensors);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kIoError);
  EXPECT_NE(writer.status().message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace kiln
