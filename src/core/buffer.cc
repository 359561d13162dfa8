#include "core/buffer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>

#ifdef KILN_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

TensorView ViewInto(void* data, size_t size, DType dtype, Shape shape, Device device) {
  auto bytes = DTypeByteSize(dtype, shape.numel());
  CHECK(bytes.ok()) << bytes.status().ToString();
  CHECK_LE(static_cast<size_t>(*bytes), size)
      << "view " << shape.ToString() << " " << DTypeName(dtype) << " exceeds the buffer";
  return TensorView::Contiguous(data, dtype, shape, device);
}

}  // namespace

// ---- HostBuffer --------------------------------------------------------------------------------

Result<HostBuffer> HostBuffer::Allocate(size_t nbytes) {
  HostBuffer b;
  if (nbytes == 0) return b;
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  b.data_ = std::aligned_alloc(kAlignment, rounded);
  if (b.data_ == nullptr) {
    return ResourceExhausted("cannot allocate " + std::to_string(nbytes) + " bytes of host memory");
  }
  std::memset(b.data_, 0, rounded);
  b.size_ = nbytes;
  return b;
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { std::free(data_); }

TensorView HostBuffer::View(DType dtype, Shape shape) const {
  return ViewInto(data_, size_, dtype, shape, Device::kHost);
}

// ---- DeviceBuffer ------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

TensorView DeviceBuffer::View(DType dtype, Shape shape) const {
  return ViewInto(data_, size_, dtype, shape, Device::kCuda);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      device_data_(std::exchange(other.device_data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    device_data_ = std::exchange(other.device_data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() { Release(); }

#ifdef KILN_HAS_CUDA

namespace {
Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}
}  // namespace

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t nbytes) {
  DeviceBuffer b;
  if (nbytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.data_, nbytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not affected
    return ResourceExhausted(
        "cannot allocate " + std::to_string(nbytes) +
        " bytes of GPU memory; lower --gpu-memory-utilization or the model size");
  }
  KILN_RETURN_IF_ERROR(CudaStatus(err, "cudaMalloc"));
  b.size_ = nbytes;
  return b;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) {
    const cudaError_t err = cudaFree(data_);
    CHECK(err == cudaSuccess) << "cudaFree: " << cudaGetErrorString(err);
    data_ = nullptr;
    size_ = 0;
  }
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t nbytes) {
  CHECK_LE(nbytes, size_);
  return CudaStatus(cudaMemcpy(data_, src, nbytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

Status DeviceBuffer::CopyToHost(void* dst, size_t nbytes) const {
  CHECK_LE(nbytes, size_);
  return CudaStatus(cudaMemcpy(dst, data_, nbytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t nbytes) {
  PinnedHostBuffer b;
  if (nbytes == 0) return b;
  void* p = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot map " + std::to_string(nbytes >> 20) +
                             " MiB of host memory: " + std::strerror(errno));
  }
  // First touch, in parallel for large buffers: the kernel's page faults bound one thread.
  constexpr size_t kPage = 4096;
  const size_t num_threads = nbytes < (size_t{64} << 20)
                                 ? 1
                                 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  const size_t per_thread = (nbytes / num_threads + kPage - 1) / kPage * kPage;
  auto touch = [p, nbytes](size_t begin, size_t end) {
    for (size_t i = begin; i < std::min(end, nbytes); i += kPage) {
      static_cast<volatile char*>(p)[i] = 0;
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) {
    threads.emplace_back(touch, t * per_thread, (t + 1) * per_thread);
  }
  touch(0, per_thread);
  for (std::thread& t : threads) t.join();
  const cudaError_t err = cudaHostRegister(p, nbytes, cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    munmap(p, nbytes);
    return ResourceExhausted("cannot pin " + std::to_string(nbytes >> 20) +
                             " MiB of host memory: " + cudaGetErrorString(err));
  }
  b.data_ = p;
  b.size_ = nbytes;
  KILN_RETURN_IF_ERROR(
      CudaStatus(cudaHostGetDevicePointer(&b.device_data_, p, 0), "cudaHostGetDevicePointer"));
  return b;
}

void PinnedHostBuffer::Release() {
  if (data_ != nullptr) {
    const cudaError_t err = cudaHostUnregister(data_);
    CHECK(err == cudaSuccess) << "cudaHostUnregister: " << cudaGetErrorString(err);
    munmap(data_, size_);
    data_ = device_data_ = nullptr;
    size_ = 0;
  }
}

bool HasCudaDevice() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

Result<CudaDeviceInfo> GetCudaDeviceInfo(int device) {
  if (!HasCudaDevice()) return Unavailable("no CUDA device is visible");
  cudaDeviceProp prop{};
  KILN_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  KILN_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  size_t free_bytes = 0, total_bytes = 0;
  KILN_RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  return CudaDeviceInfo{prop.name, static_cast<int64_t>(total_bytes),
                        static_cast<int64_t>(free_bytes), prop.major * 10 + prop.minor};
}

#else  // !KILN_HAS_CUDA

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t) {
  return Unsupported(
      "this kiln was built without CUDA (configure with -DKILN_CUDA=ON on a machine "
      "with the CUDA toolkit)");
}
void DeviceBuffer::Release() {}
Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t) {
  return Unsupported("this kiln was built without CUDA");
}
void PinnedHostBuffer::Release() {}
Status DeviceBuffer::CopyFromHost(const void*, size_t) {
  return Unsupported("this kiln was built without CUDA");
}
Status DeviceBuffer::CopyToHost(void*, size_t) const {
  return Unsupported("this kiln was built without CUDA");
}
bool HasCudaDevice() { return false; }
Result<CudaDeviceInfo> GetCudaDeviceInfo(int) {
  return Unavailable("this kiln was built without CUDA");
}

#endif  // KILN_HAS_CUDA

}  // namespace kiln
