// A step's inputs moved from the runner's pinned host block to their device arrays by one kernel
// (docs/kernels.md, "Step input upload"), instead of one cudaMemcpyAsync per array: each copy or
// launch adds its own start-up gap (~40 us of idle GPU between two batch-1 decode graphs on the
// H200 for ~11 us of copies). The host block is pinned memory mapped into the device's address
// space (cudaHostAllocMapped; its device address from cudaHostGetDevicePointer), so the kernel
// reads it directly over PCIe / C2C. The same launch replaces a token id standing for the previous
// step's sampled token (async scheduling) by that token.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/sampling.h"

namespace kiln::kernels {

// One array to copy: num_rows rows of row_bytes each, row r read at src + r * src_stride and
// written at dst + r * dst_stride (a plain copy: one row).
struct UploadJob {
  const void* src = nullptr;  // device-visible: mapped pinned host memory (or device memory)
  void* dst = nullptr;        // device memory
  int64_t row_bytes = 0;      // 0: nothing to copy
  int32_t num_rows = 1;
  int64_t src_stride = 0;  // bytes; used when num_rows > 1, then >= row_bytes
  int64_t dst_stride = 0;  // bytes; used when num_rows > 1, then >= row_bytes
};

inline constexpr int32_t kMaxUploadJobs = 16;

// Async scheduling: job `job` (or none, -1) carries int32 token ids, of which one < 0 stands for
// the token the previous step sampled into row -1 - id of `previous` (still on the device). The
// kernel writes previous[-1 - id].token_id in its place (ResolvePreviousTokens' rule).
struct TokenResolve {
  int32_t job = -1;
  const SampledToken* previous = nullptr;  // device [rows of the previous step]
};

// Copies jobs[0, num_jobs) and resolves `resolve`'s tokens, in one launch on `stream` (none when
// there is nothing to copy). Not graph-captured by the runner, but capturable. Asynchronous: the
// caller keeps the sources unchanged until the stream has passed the launch.
// Returns cudaErrorInvalidValue, launching nothing, when num_jobs is outside [0, kMaxUploadJobs],
// a job with bytes has a null pointer, negative sizes, or rows that overlap (stride < row_bytes),
// the resolve job is out of range, not 4-byte aligned or without `previous`, or the jobs copy 1
// GiB or more together; else the launch's status. Never synchronizes.
// REQUIRES: no two jobs write the same bytes; no job's source is another job's destination.
cudaError_t UploadStepInputs(const UploadJob* jobs, int32_t num_jobs, const TokenResolve& resolve,
                             cudaStream_t stream);

}  // namespace kiln::kernels
