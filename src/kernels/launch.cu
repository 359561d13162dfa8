#include "kernels/launch.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace kiln::kernels {
namespace {

std::atomic<bool> programmatic_launch{false};
std::array<std::atomic<int>, 64> sm_counts{};  // per device ordinal; 0: not queried yet

}  // namespace

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
