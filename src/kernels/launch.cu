#include "kernels/launch.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace kiln::kernels {
namespace {

std::atomic<bool> programmatic_launch{false};
std::array<std::atomic<int>, 64> sm_counts{};  // per device ordinal; 0: not queried yet

}  // namespace

bool PerDeviceFact::Get(const std::function<bool(int device)>& probe) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 ||
      device >= static_cast<int>(known_.size())) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (known_[device] == 0) known_[device] = probe(device) ? 1 : -1;
  return known_[device] == 1;
}

bool ComputeCapabilityIs(int device, int major, int minor) {
  int got_major = 0, got_minor = 0;
  return cudaDeviceGetAttribute(&got_major, cudaDevAttrComputeCapabilityMajor, device) ==
             cudaSuccess &&
         cudaDeviceGetAttribute(&got_minor, cudaDevAttrComputeCapabilityMinor, device) ==
             cudaSuccess &&
         got_major == major && got_minor == minor;
}

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on, std::memory_order_relaxed); }
bool ProgrammaticLaunch() { return programmatic_launch.load(std::memory_order_relaxed); }

int CurrentDeviceSmCount() {
  constexpr int kFallback = 132;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 ||
      device >= static_cast<int>(sm_counts.size())) {
    return kFallback;
  }
  int sms = sm_counts[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        sms <= 0) {
      sms = kFallback;
    }
    sm_counts[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

}  // namespace kiln::kernels
