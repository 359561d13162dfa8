#include "backend/cuda/weight_upload.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "kernels/elementwise.h"
#include "kernels/w4a16.h"
#include "model/dequant.h"

namespace kiln::cuda {
namespace {

int64_t AlignUp(int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

Uploader::~Uploader() {
  for (int b = 0; b < 2; ++b) {
    if (done_[b] != nullptr) {
      cudaEventSynchronize(done_[b]);
      cudaEventDestroy(done_[b]);
    }
    if (pinned_[b] != nullptr) cudaFreeHost(pinned_[b]);
  }
}

Status Uploader::Init() {
  for (int b = 0; b < 2; ++b) {
    KILN_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(reinterpret_cast<void**>(&pinned_[b]), kChunk, cudaHostAllocDefault));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_[b], cudaEventDisableTiming));
  }
  return Status::Ok();
}

Status Uploader::Upload(const void* src, size_t bytes, void* dst) {
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst);
  for (size_t at = 0; at < bytes; at += kChunk) {
    const size_t n = std::min(kChunk, bytes - at);
    uint8_t* buffer = pinned_[next_];
    KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_[next_]));  // its last DMA is over
    ParallelCopy(buffer, from + at, n);
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to + at, buffer, n, cudaMemcpyHostToDevice, stream_));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_[next_], stream_));
    next_ ^= 1;
    if (on_bytes_) on_bytes_(static_cast<int64_t>(n));
  }
  return Status::Ok();
}

Status Uploader::Finish() {
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

void Uploader::ParallelCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n < (size_t{4} << 20)) {
    std::memcpy(dst, src, n);
    return;
  }
  const size_t part = (n + kThreads - 1) / kThreads;
  std::vector<std::thread> threads;
  for (int t = 1; t < kThreads; ++t) {
    const size_t begin = std::min(n, t * part), end = std::min(n, begin + part);
    threads.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  std::memcpy(dst, src, std::min(n, part));
  for (std::thread& th : threads) th.join();
}

Status ToActivation(const Weight& w, DType dtype, std::vector<uint16_t>& out) {
  const int64_t n = w.shape.numel();
  if (!CanDequantizeToF32(w.dtype)) {
    return Unsupported(w.file + ": tensor " + w.source_name + " has dtype " +
                       std::string(DTypeName(w.dtype)) + ", which the CUDA backend cannot load");
  }
  const DTypeInfo& info = GetDTypeInfo(w.dtype);
  if (n % info.block_size != 0 ||
      static_cast<int64_t>(w.nbytes) != n / info.block_size * info.block_bytes) {
    return InvalidArgument(w.file + ": tensor " + w.source_name + " holds " +
                           std::to_string(w.nbytes) + " bytes, not the size of " +
                           std::to_string(n) + " " + std::string(DTypeName(w.dtype)) + " values");
  }
  out.resize(n);
  const int64_t chunk = int64_t{info.block_size} * std::max(1, (1 << 16) / info.block_size);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  const int num_threads = static_cast<int>(std::min<int64_t>(
      num_chunks, std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8)));
  std::atomic<int64_t> next{0};
  std::vector<Status> errors(num_threads);
  auto work = [&](int t) {
    std::vector<float> f32(chunk);
    for (int64_t c = next++; c < num_chunks; c = next++) {
      const int64_t begin = c * chunk, count = std::min(chunk, n - begin);
      const auto* src =
          static_cast<const uint8_t*>(w.data) + begin / info.block_size * info.block_bytes;
      errors[t] = DequantizeToF32(w.dtype, src, count / info.block_size * info.block_bytes, count,
                                  f32.data());
      if (!errors[t].ok()) return;
      for (int64_t i = 0; i < count; ++i) {
        out[begin + i] = dtype == DType::kF16 ? F32ToF16(f32[i]) : F32ToBF16(f32[i]);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < num_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& th : threads) th.join();
  for (const Status& e : errors) KILN_RETURN_IF_ERROR(e);
  return Status::Ok();
}

Status PlaceRows(const void* src, void* dst, int64_t row, int64_t rows, int64_t row_bytes,
                 W4RowOrder order, int64_t head_dim, cudaStream_t stream) {
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst);
  const auto rb = static_cast<size_t>(row_bytes);
  switch (order) {
    case W4RowOrder::kAsIs:
      KILN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(to + row * rb, from, rows * rb, cudaMemcpyDeviceToDevice, stream));
      return Status::Ok();
    case W4RowOrder::kGateRuns:
    case W4RowOrder::kUpRuns: {
      constexpr int64_t kRun = kernels::kGateUpRun;
      if (rows % kRun != 0) {
        return InvalidArgument("PlaceRows: " + std::to_string(rows) +
                               " rows are no whole runs of 8 (gate_up in runs of 8)");
      }
      const size_t first = order == W4RowOrder::kUpRuns ? kRun * rb : 0;
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(to + first, 2 * kRun * rb, from, kRun * rb,
                                                  kRun * rb, rows / kRun, cudaMemcpyDeviceToDevice,
                                                  stream));
      return Status::Ok();
    }
    case W4RowOrder::kRopePairs: {
      if (head_dim <= 0 || head_dim % 2 != 0 || rows % head_dim != 0) {
        return InvalidArgument("PlaceRows: " + std::to_string(rows) +
                               " rows are no whole heads of " + std::to_string(head_dim) +
                               " rows (RoPE pairs need an even head_dim)");
      }
      const int64_t half = head_dim / 2;
      for (int64_t head = 0; head < rows / head_dim; ++head) {
        const uint8_t* h = from + head * head_dim * rb;
        uint8_t* d = to + (row + head * head_dim) * rb;
        // Row i of the head to 2 i, row half + i to 2 i + 1.
        for (int64_t second = 0; second < 2; ++second) {
          KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(d + second * rb, 2 * rb,
                                                      h + second * half * rb, rb, rb, half,
                                                      cudaMemcpyDeviceToDevice, stream));
        }
      }
      return Status::Ok();
    }
  }
  return InvalidArgument("PlaceRows: unknown row order");
}

Status UploadW4Part(const Checkpoint& ckpt, Uploader& uploader, const std::string& name,
                    const W4Weight& lw, int64_t fused_rows, int64_t row, int64_t rows, int64_t cols,
                    W4RowOrder order, int64_t head_dim, bool bf16, DeviceBuffer& staging,
                    std::map<const int32_t*, std::vector<int32_t>>& perms, cudaStream_t stream) {
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": missing tensor " + name);
  const int64_t g = lw.group_size, groups = cols / g;
  if (w->dtype != DType::kI4 || !w->w4.has_value() || w->nbytes != rows * cols / 2 ||
      w->w4->group_size != g || static_cast<int64_t>(w->w4->scales.size()) != rows * groups ||
      (!w->w4->zeros.empty() && static_cast<int64_t>(w->w4->zeros.size()) != rows * groups) ||
      static_cast<int64_t>(w->w4->perm.size()) != (lw.perm != nullptr ? cols : 0)) {
    return InvalidArgument(w->file + ": tensor " + w->source_name + " is not a packed 4-bit " +
                           std::to_string(rows) + " x " + std::to_string(cols) +
                           " weight with group size " + std::to_string(g) +
                           (lw.perm != nullptr ? " and act-order" : " without act-order") +
                           ", as the checkpoint's first layer is");
  }
  // The part as stored at the start of `staging`; a placed order builds the fused matrix's
  // canonical codes, scales and zeros (all rows) in the second half, and repacks from there.
  auto* base = static_cast<uint8_t*>(staging.data());
  const int64_t codes_bytes = AlignUp(rows * cols / 2), scale_bytes = AlignUp(rows * groups * 2);
  auto* scales = reinterpret_cast<uint16_t*>(base + codes_bytes);
  auto* zeros = reinterpret_cast<int8_t*>(base + codes_bytes + scale_bytes);
  KILN_RETURN_IF_ERROR(uploader.Upload(w->data, w->nbytes, base));
  KILN_RETURN_IF_ERROR(uploader.Upload(w->w4->scales.data(), rows * groups * 2, scales));
  const bool has_zeros = !w->w4->zeros.empty();
  if (has_zeros) KILN_RETURN_IF_ERROR(uploader.Upload(w->w4->zeros.data(), rows * groups, zeros));
  auto* tiled = const_cast<uint8_t*>(lw.tiled);
  auto* sz = const_cast<uint32_t*>(lw.sz);
  if (order == W4RowOrder::kAsIs) {
    KILN_CUDA_RETURN_IF_ERROR(
        kernels::W4RepackCodes(base, rows, cols, tiled + row * cols / 2, stream));
    KILN_CUDA_RETURN_IF_ERROR(kernels::W4RepackScales(scales, has_zeros ? zeros : nullptr, rows,
                                                      groups, bf16, sz + row, fused_rows, stream));
  } else {
    const int64_t fused_codes = AlignUp(fused_rows * cols / 2);
    const int64_t fused_scales = AlignUp(fused_rows * groups * 2);
    const int64_t placed_at = AlignUp(static_cast<int64_t>(staging.size()) / 2);
    if (placed_at < codes_bytes + scale_bytes + AlignUp(rows * groups) ||
        placed_at + fused_codes + fused_scales + fused_rows * groups >
            static_cast<int64_t>(staging.size())) {
      return Internal("UploadW4Part: the staging buffer is too small for " + name);
    }
    auto* f_codes = base + placed_at;
    auto* f_scales = f_codes + fused_codes;
    auto* f_zeros = f_scales + fused_scales;
    // A part without zero points (symmetric) places zeros of 0, so that a fused matrix whose
    // parts differ is still repacked right.
    if (!has_zeros) KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(zeros, 0, rows * groups, stream));
    KILN_RETURN_IF_ERROR(PlaceRows(base, f_codes, row, rows, cols / 2, order, head_dim, stream));
    KILN_RETURN_IF_ERROR(
        PlaceRows(scales, f_scales, row, rows, groups * 2, order, head_dim, stream));
    KILN_RETURN_IF_ERROR(PlaceRows(zeros, f_zeros, row, rows, groups, order, head_dim, stream));
    if (order == W4RowOrder::kRopePairs) {
      KILN_CUDA_RETURN_IF_ERROR(kernels::W4RepackCodes(f_codes + row * cols / 2, rows, cols,
                                                       tiled + row * cols / 2, stream));
      KILN_CUDA_RETURN_IF_ERROR(
          kernels::W4RepackScales(reinterpret_cast<const uint16_t*>(f_scales) + row * groups,
                                  reinterpret_cast<const int8_t*>(f_zeros) + row * groups, rows,
                                  groups, bf16, sz + row, fused_rows, stream));
    } else if (order == W4RowOrder::kUpRuns) {  // gate's rows are in place: repack all
      KILN_CUDA_RETURN_IF_ERROR(kernels::W4RepackCodes(f_codes, fused_rows, cols, tiled, stream));
      KILN_CUDA_RETURN_IF_ERROR(kernels::W4RepackScales(
          reinterpret_cast<const uint16_t*>(f_scales), reinterpret_cast<const int8_t*>(f_zeros),
          fused_rows, groups, bf16, sz, fused_rows, stream));
    }
  }
  if (lw.perm == nullptr) return Status::Ok();
  auto [it, first] = perms.try_emplace(lw.perm, w->w4->perm);
  if (first) {
    return uploader.Upload(w->w4->perm.data(), cols * sizeof(int32_t),
                           const_cast<int32_t*>(lw.perm));
  }
  if (it->second != w->w4->perm) {
    return Unsupported(w->file + ": tensor " + w->source_name +
                       " orders its input columns (act-order) unlike the other parts of its "
                       "fused matrix (q/k/v or gate/up); the CUDA W4A16 path needs one order "
                       "per fused matrix");
  }
  return Status::Ok();
}

}  // namespace kiln::cuda
