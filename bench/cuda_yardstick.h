// Timing on the device for the CUDA benchmarks, and their bandwidth yardstick: read + write bytes
// per second of a 2 GiB device-to-device copy, measured in the benchmark's own run.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "bench_util.h"

namespace kiln::bench {

// Median device seconds of `repeats` calls of fn() (after `warmup` untimed ones), each between
// two CUDA events on `stream`.
template <typename Fn>
double MedianEventSeconds(int warmup, int repeats, Fn fn, cudaStream_t stream = nullptr) {
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess);
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    cudaEventRecord(e0, stream);
    fn();
    cudaEventRecord(e1, stream);
    BENCH_CHECK(cudaEventSynchronize(e1) == cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= warmup) times.push_back(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return MedianOf(times);
}

inline double DeviceCopyBandwidth() {
  const size_t n = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess);
  BENCH_CHECK(cudaMemset(a, 1, n) == cudaSuccess);
  const double seconds =
      MedianEventSeconds(3, 10, [&] { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * n / seconds;
}

}  // namespace kiln::bench
