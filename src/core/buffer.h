// Owning buffers: HostBuffer (aligned host memory), DeviceBuffer (CUDA device memory) and
// PinnedHostBuffer (page-locked host memory the device addresses directly).
// Buffers always own their bytes and free them on destruction; they are move-only. Views
// (TensorView) into them never own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

class HostBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  HostBuffer() = default;
  // Allocates `nbytes` bytes aligned to kAlignment, zero-filled. Fails with ResourceExhausted.
  static Result<HostBuffer> Allocate(size_t nbytes);

  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  TensorView View(DType dtype, Shape shape) const;  // CHECKs that the view fits

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Device memory from cudaMalloc on the current device. In a build without CUDA, Allocate
// returns Unsupported.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> Allocate(size_t nbytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  TensorView View(DType dtype, Shape shape) const;

  // Synchronous copies; `nbytes` must fit in this buffer (CHECKed). CUDA failures are returned.
  Status CopyFromHost(const void* src, size_t nbytes);
  Status CopyToHost(void* dst, size_t nbytes) const;

 private:
  void Release();
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory mapped into the device's address space (large: the swap space of
// swap-to-host preemption). Allocate maps anonymous pages, touches them from several threads
// and registers them with CUDA: cudaHostAlloc zeroes and pins gigabytes from one thread, at
// ~1 GB/s (bench/swap_bench). In a build without CUDA, Allocate returns Unsupported.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  static Result<PinnedHostBuffer> Allocate(size_t nbytes);

  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  void* data() const { return data_; }                // the host's address
  void* device_data() const { return device_data_; }  // the same bytes as a device addresses them
  size_t size() const { return size_; }

 private:
  void Release();
  void* data_ = nullptr;
  void* device_data_ = nullptr;
  size_t size_ = 0;
};

// True when kiln was built with CUDA and at least one device is visible.
bool HasCudaDevice();

struct CudaDeviceInfo {
  std::string name;        // "NVIDIA H200"
  int64_t total_bytes;     // device memory
  int64_t free_bytes;      // free now (after this process's own allocations)
  int compute_capability;  // 90 for sm_90
};
// Describes CUDA device `device`. Unavailable without CUDA or without a visible device.
Result<CudaDeviceInfo> GetCudaDeviceInfo(int device = 0);

}  // namespace kiln
