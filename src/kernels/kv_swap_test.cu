// SwapKvBlocks against a host-side model of the pool and the swap space: odd plane counts and
// chunk sizes, copy lists in device memory and in mapped host memory, untouched blocks left
// alone. Exact comparisons: the kernel moves bytes.
#include "kernels/kv_swap.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

// Pinned host memory mapped into the device's address space (core/buffer.h), as the runner's.
PinnedHostBuffer Pinned(size_t bytes) {
  auto b = PinnedHostBuffer::Allocate(bytes);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(b).value() : PinnedHostBuffer();
}

struct Shape {
  int32_t num_planes;
  int32_t num_blocks;       // in the pool
  int32_t num_host_blocks;  // in the swap space
  int64_t chunk_bytes;
  int64_t plane_pad;  // bytes between planes beyond num_blocks chunks (a strided pool)
};

void RunRoundTrip(const Shape& s, bool pairs_in_host_memory) {
  const int64_t plane_stride = s.num_blocks * s.chunk_bytes + s.plane_pad;
  const size_t pool_bytes = static_cast<size_t>(plane_stride) * s.num_planes;
  const size_t host_bytes = static_cast<size_t>(s.num_host_blocks) * s.num_planes * s.chunk_bytes;
  std::vector<uint8_t> pool(pool_bytes);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<uint8_t>((i * 131 + 7) >> 3);
  Dev<uint8_t> dev_pool(pool_bytes);
  dev_pool.Upload(pool);
  const PinnedHostBuffer swap = Pinned(host_bytes);
  ASSERT_NE(swap.data(), nullptr);
  auto* swap_host = static_cast<uint8_t*>(swap.data());
  std::memset(swap_host, 0xab, host_bytes);
  const KvSwapLayout layout{dev_pool.ptr, plane_stride, s.num_planes, s.chunk_bytes,
                            swap.device_data()};

  auto chunk_of_pool = [&](std::vector<uint8_t>& p, int32_t block, int32_t plane) {
    return p.data() + plane * plane_stride + block * s.chunk_bytes;
  };
  auto chunk_of_host = [&](int32_t block, int32_t plane) {
    return swap_host + (int64_t{block} * s.num_planes + plane) * s.chunk_bytes;
  };
  // Out: device blocks 1, last, 2 -> host blocks last, 0, 3 (out of order on both sides).
  const int32_t last = s.num_blocks - 1, host_last = s.num_host_blocks - 1;
  ASSERT_GE(s.num_blocks, 6);
  ASSERT_GE(s.num_host_blocks, 5) << "host blocks 0, 3 and the last must differ";
  std::vector<int32_t> out_pairs = {1, host_last, last, 0, 2, 3};
  // In: host blocks last, 0, 3 -> device blocks 4, 0, 5 (as a swapped-in table would get them).
  std::vector<int32_t> in_pairs = {4, host_last, 0, 0, 5, 3};

  Dev<int32_t> dev_pairs(out_pairs.size());
  const PinnedHostBuffer host_pairs = Pinned(out_pairs.size() * sizeof(int32_t));
  auto run = [&](const std::vector<int32_t>& pairs, bool to_host) {
    const int32_t* p = dev_pairs.ptr;
    if (pairs_in_host_memory) {
      std::memcpy(host_pairs.data(), pairs.data(), pairs.size() * sizeof(int32_t));
      p = static_cast<const int32_t*>(host_pairs.device_data());
    } else {
      dev_pairs.Upload(pairs);
    }
    CUDA_OK(SwapKvBlocks(layout, p, static_cast<int32_t>(pairs.size() / 2), to_host, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  };

  run(out_pairs, /*to_host=*/true);
  for (size_t i = 0; i < out_pairs.size(); i += 2) {
    for (int32_t plane = 0; plane < s.num_planes; ++plane) {
      ASSERT_EQ(std::memcmp(chunk_of_host(out_pairs[i + 1], plane),
                            chunk_of_pool(pool, out_pairs[i], plane), s.chunk_bytes),
                0)
          << "swap-out of device block " << out_pairs[i] << " plane " << plane;
    }
  }
  // Host blocks not written keep their fill.
  for (int32_t h = 1; h < host_last; ++h) {
    if (h == 3) continue;
    for (int64_t i = 0; i < s.num_planes * s.chunk_bytes; ++i) {
      ASSERT_EQ(chunk_of_host(h, 0)[i], 0xab) << "host block " << h << " written";
    }
  }
  // The pool itself is unchanged by a swap-out.
  ASSERT_EQ(dev_pool.Download(pool_bytes), pool);

  run(in_pairs, /*to_host=*/false);
  std::vector<uint8_t> expect = pool;
  for (size_t i = 0; i < in_pairs.size(); i += 2) {
    const int32_t from = out_pairs[i];  // the device block whose copy host block in_pairs[i+1] is
    for (int32_t plane = 0; plane < s.num_planes; ++plane) {
      std::memcpy(chunk_of_pool(expect, in_pairs[i], plane), chunk_of_pool(pool, from, plane),
                  s.chunk_bytes);
    }
  }
  std::vector<uint8_t> got = dev_pool.Download(pool_bytes);
  for (int32_t plane = 0; plane < s.num_planes; ++plane) {
    for (int32_t b = 0; b < s.num_blocks; ++b) {
      ASSERT_EQ(
          std::memcmp(chunk_of_pool(got, b, plane), chunk_of_pool(expect, b, plane), s.chunk_bytes),
          0)
          << "device block " << b << " plane " << plane;
    }
  }
  // The padding between planes is never touched.
  ASSERT_EQ(got, expect);
}

TEST(SwapKvBlocksGpu, RoundTripOddShapes) {
  REQUIRE_GPU();
  // 7 planes (not a K/V pair count: the kernel does not care), 37 16-byte vectors per chunk
  // (fewer than one CTA's unrolled sweep), padded planes.
  for (bool host_pairs : {false, true}) {
    SCOPED_TRACE(host_pairs ? "pairs in mapped host memory" : "pairs in device memory");
    RunRoundTrip({7, 9, 5, 37 * 16, 48}, host_pairs);
  }
  // A Llama-3.1-8B-like block (64 planes of 32 KiB: 16 tokens x 8 heads x 128 x bf16), and one
  // whose chunk is not a multiple of the unrolled sweep (83 vectors beyond it).
  RunRoundTrip({64, 11, 6, 32768, 0}, /*pairs_in_host_memory=*/false);
  RunRoundTrip({3, 6, 5, (4 * 256 + 83) * 16, 16}, /*pairs_in_host_memory=*/true);
  // An FP8 KV cache's block moves as bytes like any other: SmolLM2-135M's (60 planes of 3 KiB:
  // 16 tokens x 3 heads x 64 x 1 byte, 192 vectors, under one CTA's sweep) and the smallest one
  // (1 kv head x 64 x 16 tokens: 1 KiB). Only the layout's byte counts depend on the cache type.
  RunRoundTrip({60, 7, 5, 16 * 3 * 64, 0}, /*pairs_in_host_memory=*/true);
  RunRoundTrip({4, 6, 5, 16 * 64, 32}, /*pairs_in_host_memory=*/false);
}

TEST(SwapKvBlocksGpu, RejectsBadLayouts) {
  REQUIRE_GPU();
  Dev<uint8_t> pool(4096);
  Dev<int32_t> pairs(2);
  const KvSwapLayout good{pool.ptr, 1024, 2, 512, pool.ptr};
  EXPECT_EQ(SwapKvBlocks(good, pairs.ptr, 0, true, nullptr), cudaSuccess);  // nothing to do
  KvSwapLayout odd_chunk = good;
  odd_chunk.chunk_bytes = 520;
  EXPECT_EQ(SwapKvBlocks(odd_chunk, pairs.ptr, 1, true, nullptr), cudaErrorInvalidValue);
  KvSwapLayout misaligned = good;
  misaligned.host = pool.ptr + 8;
  EXPECT_EQ(SwapKvBlocks(misaligned, pairs.ptr, 1, false, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SwapKvBlocks(good, nullptr, 1, true, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SwapKvBlocks(good, pairs.ptr, -1, true, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kiln::kernels
