// Swap-to-host preemption's copies (DESIGN.md §3): whole KV blocks moved between the paged pool on
// the device and a swap space in pinned host memory mapped into the device's address space
// (cudaHostAllocMapped), by one kernel per direction. A kernel rather than the copy engines: a
// block is 2 * num_layers chunks scattered over the pool's planes (one cudaMemcpyAsync per chunk
// would cost the host microseconds each), and the kernel runs in stream order with the steps.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace kiln::kernels {

// Where the blocks live. Pool: num_planes planes (the runner's: layer l's K is plane 2l, its V
// plane 2l + 1) at pool + p * plane_stride; block b's chunk of a plane is the chunk_bytes at
// b * chunk_bytes. Host: block h is the num_planes chunks, in plane order, at
// host + h * num_planes * chunk_bytes (a device pointer to mapped pinned memory).
struct KvSwapLayout {
  void* pool = nullptr;
  int64_t plane_stride = 0;  // bytes
  int32_t num_planes = 0;
  int64_t chunk_bytes = 0;  // a multiple of 16
  void* host = nullptr;
};

// For each i < num_copies, copies (device block pairs[2i], host block pairs[2i + 1]): to the host
// (to_host) or from it. `pairs` must be readable by the device (device or mapped memory).
// REQUIRES: pool, host and plane_stride 16-byte aligned; ids inside the pool and swap space;
// no two copies write the same block.
cudaError_t SwapKvBlocks(const KvSwapLayout& layout, const int32_t* pairs, int32_t num_copies,
                         bool to_host, cudaStream_t stream);

}  // namespace kiln::kernels
