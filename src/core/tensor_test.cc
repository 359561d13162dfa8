#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/mapped_file.h"

namespace kiln {
namespace {

TEST(Shape, Basics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  EXPECT_EQ(Shape().numel(), 1);
  EXPECT_TRUE((Shape{2, 3} == Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3} == Shape{3, 2}));
  std::vector<int64_t> seven(7, 1);
  EXPECT_FALSE(Shape::FromRange(seven).ok());
  std::vector<int64_t> neg{2, -1};
  EXPECT_FALSE(Shape::FromRange(neg).ok());
}

TEST(TensorView, ContiguousStrides) {
  std::vector<float> data(24);
  TensorView v = TensorView::Contiguous(data.data(), DType::kF32, Shape{2, 3, 4});
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.nbytes(), 96);
  v.strides[1] = 8;  // a view of every other row of a wider tensor
  EXPECT_FALSE(v.is_contiguous());
}

TEST(HostBuffer, AllocateAlignedZeroedAndMove) {
  auto b = HostBuffer::Allocate(100);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % HostBuffer::kAlignment, 0u);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(static_cast<uint8_t*>(b->data())[i], 0);
  HostBuffer moved = std::move(*b);
  EXPECT_EQ(moved.size(), 100u);
  EXPECT_EQ(b->data(), nullptr);
  TensorView v = moved.View(DType::kBF16, Shape{5, 10});
  EXPECT_EQ(v.nbytes(), 100);
}

TEST(HostBufferDeathTest, ViewLargerThanBufferAborts) {
  auto b = HostBuffer::Allocate(10);
  EXPECT_DEATH((void)b->View(DType::kF32, Shape{3}), "exceeds the buffer");
}

TEST(DeviceBuffer, WithoutCudaIsAClearError) {
  if (HasCudaDevice()) GTEST_SKIP() << "a GPU is present; core_gpu_test covers DeviceBuffer";
  auto b = DeviceBuffer::Allocate(16);
#ifdef KILN_HAS_CUDA
  EXPECT_FALSE(b.ok());  // built with CUDA but no device: cudaMalloc fails
#else
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
#endif
}

TEST(MappedFile, MapsAndReportsMissing) {
  const std::string path = ::testing::TempDir() + "/kiln_mapped_file_test.bin";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite("hello", 1, 5, f);
  std::fclose(f);
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ(std::memcmp(m->data(), "hello", 5), 0);
  auto missing = MappedFile::Open(path + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(".missing"), std::string::npos);
  auto dir = MappedFile::Open(::testing::TempDir());
  EXPECT_EQ(dir.status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace kiln
