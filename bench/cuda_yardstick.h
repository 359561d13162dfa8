// The bandwidth yardstick of the CUDA benchmarks: read + write bytes per second of a 2 GiB
// device-to-device copy (median of 10 after 3 warm-ups), measured in the benchmark's own run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace kiln::bench {

inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

inline double DeviceCopyBandwidth() {
  const size_t n = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess ||
      cudaMemset(a, 1, n) != cudaSuccess) {
    std::fprintf(stderr, "copy bandwidth: cannot allocate 2 x 2 GiB\n");
    std::exit(1);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> times;
  for (int i = 0; i < 13; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 3) times.push_back(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * n / MedianOf(times);
}

}  // namespace kiln::bench
