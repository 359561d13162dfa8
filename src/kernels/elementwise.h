// The small fused kernels of the Llama forward pass (DESIGN.md §4). Raw device pointers + sizes
// + strides + stream; no engine types. bf16 activations, fp32 arithmetic inside each kernel.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kiln::kernels {}  // namespace kiln::kernels
