// DeviceBuffer on a real GPU (label: gpu; run on the GPU machine).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/buffer.h"

namespace kiln {
namespace {

TEST(DeviceBufferGpu, RoundTripThroughDeviceMemory) {
  if (!HasCudaDevice())
    GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  std::vector<uint32_t> in(1 << 20);
  std::iota(in.begin(), in.end(), 0x9e3779b9u);
  auto dev = DeviceBuffer::Allocate(in.size() * 4);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  ASSERT_TRUE(dev->CopyFromHost(in.data(), in.size() * 4).ok());
  std::vector<uint32_t> out(in.size(), 0);
  ASSERT_TRUE(dev->CopyToHost(out.data(), out.size() * 4).ok());
  EXPECT_EQ(in, out);
  EXPECT_EQ(dev->View(DType::kF32, Shape{1 << 20}).device, Device::kCuda);
}

TEST(DeviceBufferGpu, HugeAllocationIsResourceExhausted) {
  if (!HasCudaDevice())
    GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  auto dev = DeviceBuffer::Allocate(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kResourceExhausted);
  auto ok = DeviceBuffer::Allocate(1024);  // the failure left no sticky error behind
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

}  // namespace
}  // namespace kiln
