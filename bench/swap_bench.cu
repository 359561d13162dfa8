// swap_bench: the cost of swap-to-host preemption on this machine (docs/benchmarks.md).
//
//   1. pinned host memory: seconds to get N GiB by cudaHostAlloc (mapped), and by mmap + a
//      parallel first touch + cudaHostRegister (mapped) — kiln's way (core/buffer.h
//      PinnedHostBuffer);
//   2. SwapKvBlocks (kernels/kv_swap.h) moving Llama-3.1-8B-shaped blocks (64 planes of 32 KiB)
//      out to mapped host memory and back in, GB/s, against the yardstick of the copy engines:
//      one large cudaMemcpyAsync between device and pinned host memory each way.
//
//   build/bench/swap_bench [--gib N (4)] [--blocks N (512)] [--json F]
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "core/buffer.h"
#include "cuda_yardstick.h"
#include "kernels/kv_swap.h"

namespace kiln::bench {
namespace {

#define CUDA_CHECK(expr) BENCH_CHECK((expr) == cudaSuccess)

int Main(int argc, char** argv) {
  int64_t gib = 4;
  int32_t num_blocks = 512;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gib" && i + 1 < argc) {
      gib = std::stoll(argv[++i]);
    } else if (a == "--blocks" && i + 1 < argc) {
      num_blocks = std::stoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: swap_bench [--gib N] [--blocks N] [--json F]\n");
      return 2;
    }
  }
  BENCH_CHECK(HasCudaDevice());
  nlohmann::json out;
  auto info = GetCudaDeviceInfo(0);
  out["device"] = info.ok() ? info->name : "?";
  const size_t bytes = static_cast<size_t>(gib) << 30;

  // 1. Pinned host memory.
  CUDA_CHECK(cudaFree(nullptr));  // the context, outside the timings
  auto t0 = Clock::now();
  void* host_alloc = nullptr;
  CUDA_CHECK(cudaHostAlloc(&host_alloc, bytes, cudaHostAllocMapped));
  const double host_alloc_s = Seconds(t0, Clock::now());
  CUDA_CHECK(cudaFreeHost(host_alloc));
  t0 = Clock::now();
  auto pinned = PinnedHostBuffer::Allocate(bytes);
  const double register_s = Seconds(t0, Clock::now());
  BENCH_CHECK(pinned.ok());
  out["pinned_gib"] = gib;
  out["cuda_host_alloc_seconds"] = host_alloc_s;
  out["touch_and_register_seconds"] = register_s;
  std::printf(
      "pinned %lld GiB: cudaHostAlloc %.2f s (%.1f GB/s); mmap + touch + register %.2f s "
      "(%.1f GB/s)\n",
      static_cast<long long>(gib), host_alloc_s, bytes / host_alloc_s / 1e9, register_s,
      bytes / register_s / 1e9);

  // 2. Block copies: a pool of 2 * num_blocks 8B-shaped blocks, the first num_blocks swapped.
  constexpr int32_t kPlanes = 64;
  constexpr int64_t kChunk = 32768;
  const int64_t pool_blocks = 2 * int64_t{num_blocks};
  const size_t moved = static_cast<size_t>(num_blocks) * kPlanes * kChunk;
  BENCH_CHECK(moved <= bytes);
  void* pool = nullptr;
  CUDA_CHECK(cudaMalloc(&pool, pool_blocks * kPlanes * kChunk));
  CUDA_CHECK(cudaMemset(pool, 1, pool_blocks * kPlanes * kChunk));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::vector<int32_t> pairs;
  for (int32_t i = 0; i < num_blocks; ++i) {
    pairs.push_back(2 * i);  // every other pool block, as a fragmented pool holds them
    pairs.push_back(i);
  }
  int32_t* dev_pairs = nullptr;
  CUDA_CHECK(cudaMalloc(&dev_pairs, pairs.size() * sizeof(int32_t)));
  CUDA_CHECK(
      cudaMemcpy(dev_pairs, pairs.data(), pairs.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const kernels::KvSwapLayout layout{pool, pool_blocks * kChunk, kPlanes, kChunk,
                                     pinned->device_data()};
  const double out_s = MedianEventSeconds(
      1, 5, [&] { CUDA_CHECK(kernels::SwapKvBlocks(layout, dev_pairs, num_blocks, true, stream)); },
      stream);
  const double in_s = MedianEventSeconds(
      1, 5,
      [&] { CUDA_CHECK(kernels::SwapKvBlocks(layout, dev_pairs, num_blocks, false, stream)); },
      stream);
  const double d2h_s = MedianEventSeconds(
      1, 5,
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(pinned->data(), pool, moved, cudaMemcpyDeviceToHost, stream));
      },
      stream);
  const double h2d_s = MedianEventSeconds(
      1, 5,
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(pool, pinned->data(), moved, cudaMemcpyHostToDevice, stream));
      },
      stream);
  out["swap"] = {{"bytes", moved},
                 {"kernel_out_gb_s", moved / out_s / 1e9},
                 {"kernel_in_gb_s", moved / in_s / 1e9},
                 {"copy_engine_d2h_gb_s", moved / d2h_s / 1e9},
                 {"copy_engine_h2d_gb_s", moved / h2d_s / 1e9}};
  std::printf("\n%-28s %10s %10s\n", "", "out (D2H)", "in (H2D)");
  std::printf("%-28s %8.1f GB/s %6.1f GB/s\n", "SwapKvBlocks (scattered)", moved / out_s / 1e9,
              moved / in_s / 1e9);
  std::printf("%-28s %8.1f GB/s %6.1f GB/s\n", "cudaMemcpyAsync (one span)", moved / d2h_s / 1e9,
              moved / h2d_s / 1e9);
  std::printf("(%zu MiB, %d blocks of %lld KiB)\n", moved >> 20, num_blocks,
              static_cast<long long>(kPlanes * kChunk >> 10));
  cudaFree(dev_pairs);
  cudaFree(pool);
  cudaStreamDestroy(stream);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
