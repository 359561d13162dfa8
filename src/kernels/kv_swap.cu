#include "kernels/kv_swap.h"

namespace kiln::kernels {
namespace {

constexpr int kSwapThreads = 256;

// One CTA per (copy, plane): a chunk of chunk_bytes in 16-byte vectors, several loads in flight
// per thread (the far side is PCIe).
__global__ void __launch_bounds__(kSwapThreads)
    SwapKvBlocksKernel(const KvSwapLayout layout, const int32_t* pairs, bool to_host) {
  const int64_t copy = blockIdx.x;
  const int32_t plane = blockIdx.y;
  const int32_t device_block = pairs[2 * copy];
  const int32_t host_block = pairs[2 * copy + 1];
  auto* dev =
      reinterpret_cast<uint4*>(static_cast<uint8_t*>(layout.pool) + plane * layout.plane_stride +
                               device_block * layout.chunk_bytes);
  auto* host = reinterpret_cast<uint4*>(static_cast<uint8_t*>(layout.host) +
                                        (int64_t{host_block} * layout.num_planes + plane) *
                                            layout.chunk_bytes);
  const uint4* src = to_host ? dev : host;
  uint4* dst = to_host ? host : dev;
  const int64_t n = layout.chunk_bytes / 16;
  constexpr int kUnroll = 4;
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kSwapThreads < n; i += kUnroll * kSwapThreads) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * kSwapThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * kSwapThreads] = v[u];
  }
  for (; i < n; i += kSwapThreads) dst[i] = src[i];
}

}  // namespace

cudaError_t SwapKvBlocks(const KvSwapLayout& layout, const int32_t* pairs, int32_t num_copies,
                         bool to_host, cudaStream_t stream) {
  if (num_copies == 0) return cudaSuccess;
  if (num_copies < 0 || layout.num_planes <= 0 || layout.num_planes > 65535 ||
      layout.chunk_bytes <= 0 || layout.chunk_bytes % 16 != 0 || layout.plane_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(layout.pool) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(layout.host) % 16 != 0 || pairs == nullptr) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(num_copies), static_cast<unsigned>(layout.num_planes));
  SwapKvBlocksKernel<<<grid, kSwapThreads, 0, stream>>>(layout, pairs, to_host);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
