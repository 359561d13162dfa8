// UploadStepInputs (step_inputs.h): a step's input arrays copied from mapped pinned host memory to
// the device by one launch, token ids of the previous step's samples resolved on the way.
//
// Work split: each job's rows are cut into pieces of `width` bytes (16 when the job's pointers and
// strides allow it, else 8, 4, 2 or 1), the rest of a row (row_bytes % width) into smaller pieces
// (the largest power of two up to width dividing row_bytes: 4 for an int32 array of an odd
// count). Pieces are numbered over all jobs in order; thread t of a grid of T threads moves pieces
// t, t + T, t + 2T, t + 3T: it issues all four loads before its first store, so every load of
// the grid is in flight at once (the far side is PCIe or C2C at ~1-2 us a round trip: a chain of
// dependent reads would pay that per link), and a warp's loads of one job are contiguous. A piece
// of the token job has its < 0 ids replaced before the store, with one more (device) read each.
//
// Napkin math (H200): a batch-1 decode step moves ~0.7 KB (one token, position, slot, sequence
// length and logits row, cu_seqlens, an 80-byte SamplingRow, a block-table row of 4 bytes a
// block): ~45 pieces, one block, i.e. the launch, one PCIe round trip and one device read, a few
// us in all against ~11 us of GPU time and ~40 us of gaps for the separate copies. A prompt step
// of 8,192 tokens moves ~160 KB plus its block tables: ~10,000 pieces in ~10 blocks, ~3 us at
// 50 GB/s on top of the latency.
//
// Versions tried: this one (v1). Measured against the copies it replaced: docs/kernels.md, "Step
// input upload".
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/step_inputs.h"

namespace kiln::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPiecesPerThread = 4;
constexpr int64_t kMaxTotalBytes = int64_t{1} << 30;  // keeps piece indices in int32

// A job as the kernel walks it: row r's pieces are numbered first_piece + r * pieces_per_row + c;
// piece c < body_pieces is the (1 << width_log2) bytes at c << width_log2, the others the
// (1 << tail_log2) bytes after the body.
struct PlannedJob {
  const uint8_t* src;
  uint8_t* dst;
  int64_t src_stride, dst_stride;
  int32_t first_piece;
  int32_t pieces_per_row;
  int32_t body_pieces;
  int32_t width_log2, tail_log2;
};

struct Plan {
  PlannedJob jobs[kMaxUploadJobs];
  int32_t num_jobs;
  int32_t num_pieces;
  int32_t resolve_job;  // -1: none
  const SampledToken* previous;
};

__device__ __forceinline__ uint4 LoadPiece(const uint8_t* p, int32_t log2) {
  uint4 v = make_uint4(0, 0, 0, 0);
  switch (log2) {
    case 4:
      v = *reinterpret_cast<const uint4*>(p);
      break;
    case 3: {
      const uint2 w = *reinterpret_cast<const uint2*>(p);
      v.x = w.x;
      v.y = w.y;
      break;
    }
    case 2:
      v.x = *reinterpret_cast<const uint32_t*>(p);
      break;
    case 1:
      v.x = *reinterpret_cast<const uint16_t*>(p);
      break;
    default:
      v.x = *p;
  }
  return v;
}

__device__ __forceinline__ void StorePiece(uint8_t* p, const uint4& v, int32_t log2) {
  switch (log2) {
    case 4:
      *reinterpret_cast<uint4*>(p) = v;
      break;
    case 3:
      *reinterpret_cast<uint2*>(p) = make_uint2(v.x, v.y);
      break;
    case 2:
      *reinterpret_cast<uint32_t*>(p) = v.x;
      break;
    case 1:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v.x);
      break;
    default:
      *p = static_cast<uint8_t>(v.x);
  }
}

__device__ __forceinline__ void ResolveToken(uint32_t& token, const SampledToken* previous) {
  const int32_t id = static_cast<int32_t>(token);
  if (id < 0) token = static_cast<uint32_t>(previous[-1 - id].token_id);
}

// The token ids of a piece of the resolve job (4, 8 or 16 bytes: the launcher checks).
__device__ __forceinline__ void ResolvePiece(uint4& v, int32_t log2, const SampledToken* previous) {
  ResolveToken(v.x, previous);
  if (log2 >= 3) ResolveToken(v.y, previous);
  if (log2 >= 4) {
    ResolveToken(v.z, previous);
    ResolveToken(v.w, previous);
  }
}

// Launched the ordinary way and never triggering its dependents early: a chained kernel after it
// starts only once every step input is written, which lets every chained kernel of the step read
// them before its own PdlWait (launch.cuh).
__global__ void __launch_bounds__(kThreads) UploadStepInputsKernel(const Plan plan) {
  const int32_t stride = gridDim.x * kThreads;
  const int32_t first = blockIdx.x * kThreads + threadIdx.x;
  uint4 value[kPiecesPerThread];
  uint8_t* dst[kPiecesPerThread];
  int32_t log2[kPiecesPerThread];
  bool resolve[kPiecesPerThread];
#pragma unroll
  for (int k = 0; k < kPiecesPerThread; ++k) {
    const int32_t piece = first + k * stride;
    dst[k] = nullptr;
    if (piece >= plan.num_pieces) continue;
    int32_t j = 0;
    while (j + 1 < plan.num_jobs && piece >= plan.jobs[j + 1].first_piece) ++j;
    const PlannedJob& job = plan.jobs[j];
    const int32_t in_job = piece - job.first_piece;
    const int32_t row = in_job / job.pieces_per_row;
    const int32_t c = in_job - row * job.pieces_per_row;
    int64_t offset;
    if (c < job.body_pieces) {
      log2[k] = job.width_log2;
      offset = int64_t{c} << job.width_log2;
    } else {
      log2[k] = job.tail_log2;
      offset = (int64_t{job.body_pieces} << job.width_log2) +
               (int64_t{c - job.body_pieces} << job.tail_log2);
    }
    value[k] = LoadPiece(job.src + row * job.src_stride + offset, log2[k]);
    dst[k] = job.dst + row * job.dst_stride + offset;
    resolve[k] = j == plan.resolve_job;
  }
#pragma unroll
  for (int k = 0; k < kPiecesPerThread; ++k) {
    if (dst[k] == nullptr) continue;
    if (resolve[k]) ResolvePiece(value[k], log2[k], plan.previous);
    StorePiece(dst[k], value[k], log2[k]);
  }
}

// log2 of the largest power of two up to 16 dividing x.
int32_t AlignmentLog2(uint64_t x) { return std::countr_zero(x | 16); }

}  // namespace

cudaError_t UploadStepInputs(const UploadJob* jobs, int32_t num_jobs, const TokenResolve& resolve,
                             cudaStream_t stream) {
  if (num_jobs < 0 || num_jobs > kMaxUploadJobs || (num_jobs > 0 && jobs == nullptr) ||
      resolve.job < -1 || resolve.job >= num_jobs) {
    return cudaErrorInvalidValue;
  }
  Plan plan{};
  plan.num_jobs = num_jobs;
  plan.resolve_job = resolve.job;
  plan.previous = resolve.previous;
  int64_t pieces = 0, total_bytes = 0;
  for (int32_t i = 0; i < num_jobs; ++i) {
    const UploadJob& job = jobs[i];
    PlannedJob& p = plan.jobs[i];
    p.first_piece = static_cast<int32_t>(pieces);
    p.pieces_per_row = 1;  // never divided by when the job has no pieces
    if (job.row_bytes < 0 || job.num_rows < 0 || job.row_bytes > kMaxTotalBytes) {
      return cudaErrorInvalidValue;
    }
    const int64_t bytes = job.row_bytes * job.num_rows;
    if (bytes == 0) continue;
    total_bytes += bytes;
    if (job.src == nullptr || job.dst == nullptr || total_bytes > kMaxTotalBytes ||
        (job.num_rows > 1 && (job.src_stride < job.row_bytes || job.dst_stride < job.row_bytes))) {
      return cudaErrorInvalidValue;
    }
    uint64_t bits = reinterpret_cast<uintptr_t>(job.src) | reinterpret_cast<uintptr_t>(job.dst);
    if (job.num_rows > 1) bits |= static_cast<uint64_t>(job.src_stride | job.dst_stride);
    p.src = static_cast<const uint8_t*>(job.src);
    p.dst = static_cast<uint8_t*>(job.dst);
    p.src_stride = job.src_stride;
    p.dst_stride = job.dst_stride;
    p.width_log2 = AlignmentLog2(bits);
    p.tail_log2 = std::min(p.width_log2, AlignmentLog2(static_cast<uint64_t>(job.row_bytes)));
    p.body_pieces = static_cast<int32_t>(job.row_bytes >> p.width_log2);
    const int64_t tail_bytes = job.row_bytes & ((int64_t{1} << p.width_log2) - 1);
    p.pieces_per_row = p.body_pieces + static_cast<int32_t>(tail_bytes >> p.tail_log2);
    pieces += int64_t{p.pieces_per_row} * job.num_rows;
    if (i == resolve.job && (resolve.previous == nullptr || p.tail_log2 < 2)) {
      return cudaErrorInvalidValue;  // token ids are whole int32s
    }
  }
  if (pieces == 0) return cudaSuccess;
  plan.num_pieces = static_cast<int32_t>(pieces);
  const int64_t per_block = int64_t{kThreads} * kPiecesPerThread;
  const auto blocks = static_cast<unsigned>((pieces + per_block - 1) / per_block);
  UploadStepInputsKernel<<<blocks, kThreads, 0, stream>>>(plan);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
