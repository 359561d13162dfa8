// Weight upload for the CUDA runner (cuda_runner.cc): host bytes streamed into device memory,
// 16-bit conversion of stored weights, and the W4A16 parts repacked into the kernels' layout in
// the row order the runner's one-token epilogues need. Internal to src/backend/cuda.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/gemm.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/status.h"
#include "model/checkpoint.h"

namespace kiln::cuda {

// Streams host bytes into device memory through two pinned buffers: copying one chunk into
// pinned memory (split over threads: one thread cannot read the page cache at PCIe speed)
// overlaps the DMA of the previous chunk. Plain cudaMemcpy from pageable memory stages
// through a small driver buffer and serializes both halves.
class Uploader {
 public:
  static constexpr size_t kChunk = size_t{64} << 20;
  static constexpr int kThreads = 4;

  // on_bytes (may be empty) hears of every chunk sent.
  Uploader(cudaStream_t stream, std::function<void(int64_t)> on_bytes)
      : stream_(stream), on_bytes_(std::move(on_bytes)) {}
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  Status Init();
  // Enqueues the copy of `bytes` from host `src` to device `dst` on the stream; `src` may be
  // reused once this returns.
  Status Upload(const void* src, size_t bytes, void* dst);
  // Waits for every copy.
  Status Finish();

 private:
  static void ParallelCopy(uint8_t* dst, const uint8_t* src, size_t n);

  cudaStream_t stream_;
  std::function<void(int64_t)> on_bytes_;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
};

// A stored weight of another dtype as `dtype`'s bits (kBF16 or kF16), converted in chunks of
// whole blocks on several threads (one thread took ~50 s for the 16 GB of an 8B bf16 checkpoint
// in fp16).
Status ToActivation(const Weight& w, DType dtype, std::vector<uint16_t>& out);

// Where the rows of one part of a fused W4A16 matrix go on the device. The kernels compute on
// whatever order the rows have; the runner picks orders that put the values a one-token
// epilogue pairs into one 16-row tile (kernels::W4GemmArgsT::silu_mul and rope):
// - kAsIs: the part's rows at [row, row + rows), as stored;
// - kGateRuns / kUpRuns: gate resp. up of gate_up in kernels::GateUpLayout::kRunsOf8 (row r of
//   the part at 16 (r / 8) + r % 8, resp. + 8; `row` is not used);
// - kRopePairs: q or k heads of head_dim rows each, from RoPE's half-split pair order (i and
//   i + head_dim / 2) into the interleaved one (2 i and 2 i + 1), within [row, row + rows). The
//   caller then runs RoPE interleaved; q . k is the same sum in another order.
enum class W4RowOrder { kAsIs, kGateRuns, kUpRuns, kRopePairs };

// Device-to-device copy of a part's `rows` rows of row_bytes each (in stored order, at src) to
// their places in the fused matrix at dst (its row 0) as `order` says. On `stream`.
// InvalidArgument unless rows is a multiple of 8 (runs) resp. of an even head_dim (kRopePairs).
Status PlaceRows(const void* src, void* dst, int64_t row, int64_t rows, int64_t row_bytes,
                 W4RowOrder order, int64_t head_dim, cudaStream_t stream);

// One part of a W4A16 linear layer (rows [row, row + rows) of the fused matrix, fused_rows in
// all, `cols` inputs): the checkpoint's packed codes, fp16 scales and int8 zeros go through
// `staging` into `w`'s layout (kernels::W4RepackCodes / W4RepackScales for the activation type,
// bf16 or not), its rows placed as `order` says. kAsIs and kRopePairs parts are repacked at
// once; a kGateRuns part waits in `staging` for its kUpRuns part (uploaded next, with the same
// staging), which repacks both. With act-order every part of a fused matrix must share one
// column order; `perms` keeps the first part's, per matrix. `staging` holds at least
// 2 * fused_rows * cols bytes (else Internal). A kGateRuns part must be followed by its
// kUpRuns part: the caller uploads gate then up.
Status UploadW4Part(const Checkpoint& ckpt, Uploader& uploader, const std::string& name,
                    const W4Weight& w, int64_t fused_rows, int64_t row, int64_t rows, int64_t cols,
                    W4RowOrder order, int64_t head_dim, bool bf16, DeviceBuffer& staging,
                    std::map<const int32_t*, std::vector<int32_t>>& perms, cudaStream_t stream);

}  // namespace kiln::cuda
