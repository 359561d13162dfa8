// Launching a kernel with programmatic dependent launch (kernels/launch.h), and the two device
// calls such a kernel makes. Internal to src/kernels (not a public header).
//
// A kernel launched by LaunchChained may have its blocks scheduled while the previous kernel in
// the stream is still running, so it MUST call PdlWait() before it reads anything an earlier
// kernel wrote or writes anything an earlier kernel reads; PdlWait returns once every earlier
// kernel of the stream has completed and its writes are visible. Before it, a kernel may only
// read what no kernel that can still be running writes: weights, scales, the step's inputs
// (positions, sequence lengths, block tables: written by UploadStepInputs or copies, launched the
// ordinary way before the step's first chained kernel, so finished before it starts), the KV
// cache's positions before each sequence's newest (written by earlier steps and the step's
// swap-in copies, before its first chained kernel; RoPE writes only the newest). Each kernel
// calls PdlLaunchDependents() right after its PdlWait, which lets the next chained kernel be
// scheduled: at most two kernels overlap, the running one and the next one waiting (a block only
// triggers once its own wait is over). So every block reaches PdlWait before it exits, an early
// return too: a grid whose blocks all left without waiting could complete before the kernel before
// it, and the next kernel's PdlWait, which waits for this grid, would not cover that one. In a
// kernel launched the ordinary way PdlWait returns at once (it has nothing to wait for), while
// PdlLaunchDependents still lets a chained kernel after it be scheduled early (that kernel's own
// PdlWait then waits for it); both compile to nothing before sm_90.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/launch.h"

namespace kiln::kernels {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// ProgrammaticLaunch() is on. The kernel must follow the rules above.
template <typename... Params, typename... Args>
cudaError_t LaunchChained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = ProgrammaticLaunch() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The grid of a persistent kernel (blocks walking items b, b + grid, ...): as many blocks of
// kThreads threads and `smem` bytes of dynamic shared memory as the SMs hold at once, then as few
// as keep every block's item count (the rounded-up share) the same, so the last items do not run
// alone. The occupancy is queried once per shared-memory size (a host call kept off the launch
// path); a failed query counts as one block an SM.
template <auto kKernel, int kThreads>
dim3 ResidentGrid(int64_t items, size_t smem = 0) {
  static std::mutex mu;
  static std::vector<std::pair<size_t, int>> known;  // (smem, blocks an SM)
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = std::find_if(known.begin(), known.end(),
                                 [&](const std::pair<size_t, int>& e) { return e.first == smem; });
    if (it != known.end()) {
      per_sm = it->second;
    } else {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads, smem) !=
          cudaSuccess) {
        (void)cudaGetLastError();
        per_sm = 1;
      }
      per_sm = std::max(per_sm, 1);
      known.emplace_back(smem, per_sm);
    }
  }
  const int64_t slots = int64_t{per_sm} * CurrentDeviceSmCount();
  const int64_t per = (items + slots - 1) / slots;
  return dim3(static_cast<unsigned>((items + per - 1) / per));
}

}  // namespace kiln::kernels
