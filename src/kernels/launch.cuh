// Launching a kernel with programmatic dependent launch (kernels/launch.h), and the two device
// calls such a kernel makes. Internal to src/kernels (not a public header).
//
// A kernel launched by LaunchChained may have its blocks scheduled while the previous kernel in
// the stream is still running, so it MUST call PdlWait() before it reads anything an earlier
// kernel wrote or writes anything an earlier kernel reads; PdlWait returns once every earlier
// kernel of the stream has completed and its writes are visible. Before it, a kernel may only
// read what no kernel of the step writes: weights, scales. Each kernel calls
// PdlLaunchDependents() right after its PdlWait, which lets the next chained kernel be
// scheduled: at most two kernels overlap, the running one and the next one waiting (a block
// only triggers once its own wait is over). Both calls are no-ops when the kernel was launched
// the ordinary way, and compile to nothing before sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

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

}  // namespace kiln::kernels
