// Gemm::LinearW4 (gemm.h): the W4A16 linear layers on kernels::W4Gemm, or for many rows on
// weights dequantized slice by slice (kernels::W4Dequantize) and cuBLASLt.
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "kernels/w4a16.h"

namespace kiln::cuda {
namespace {

// W4Gemm's arguments for weight w ([n, k]) but x, m and out.
template <typename T>
kernels::W4GemmArgsT<T> W4Args(const W4Weight& w, int64_t n, int64_t k, const T* bias, int64_t ldx,
                               int64_t ldo, L2Prefetch prefetch) {
  kernels::W4GemmArgsT<T> a;
  a.w = w.tiled;
  a.sz = w.sz;
  a.group_size = w.group_size;
  a.n = n;
  a.k = k;
  a.bias = bias;
  a.ldx = ldx;
  a.ldo = ldo;
  a.prefetch = prefetch.p;
  a.prefetch_bytes = prefetch.bytes / 16 * 16;
  return a;
}

}  // namespace

Status Gemm::LinearW4(const __nv_bfloat16* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n,
                      int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                      const W4Scratch& scratch, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearW4Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

Status Gemm::LinearW4(const __half* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n,
                      int64_t k, const __half* bias, void* out, int64_t ldo, bool out_f32,
                      const W4Scratch& scratch, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearW4Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

template <typename T>
Status Gemm::LinearW4Of(const T* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n, int64_t k,
                        const T* bias, void* out, int64_t ldo, bool out_f32,
                        const W4Scratch& scratch, cudaStream_t stream, L2Prefetch prefetch) {
  static_assert(kW4GemmDefaultRows == kernels::kW4GemmMaxRows);
  if (m == 0) return Status::Ok();
  if (!kernels::W4ShapeSupported(n, k, w.group_size)) {
    return Unsupported(
        "Gemm: a W4A16 linear layer needs n a multiple of 16, k of 64 and a group "
        "size of 16, 32 or a multiple of 64 dividing k; got n=" +
        std::to_string(n) + " k=" + std::to_string(k) +
        " group_size=" + std::to_string(w.group_size));
  }
  if (w.perm != nullptr) {
    if (scratch.gathered == nullptr) {
      return InvalidArgument("Gemm::LinearW4: act-order needs a scratch");
    }
    KILN_CUDA_RETURN_IF_ERROR(
        kernels::W4GatherColumns(x, ldx, m, k, w.perm, static_cast<T*>(scratch.gathered), stream));
    x = static_cast<const T*>(scratch.gathered);
    ldx = k;
  }
  const size_t out_elem = out_f32 ? 4 : sizeof(T);
  if (m > w4_gemm_max_rows_ && scratch.dequant != nullptr) {
    // Slices of whole row tiles that fit the scratch; x and the dequantized rows are both in
    // stored column order, so act-order needs nothing more.
    const int64_t fit = static_cast<int64_t>(scratch.dequant_bytes / (k * sizeof(T)));
    const int64_t slice = std::min(n, fit / kernels::kW4TileRows * kernels::kW4TileRows);
    if (slice == 0) {
      return InvalidArgument("Gemm::LinearW4: the dequantization scratch (" +
                             std::to_string(scratch.dequant_bytes) + " bytes) holds fewer than " +
                             std::to_string(kernels::kW4TileRows) +
                             " rows of k=" + std::to_string(k));
    }
    T* wt = static_cast<T*>(scratch.dequant);
    for (int64_t row0 = 0; row0 < n; row0 += slice) {
      const int64_t rows = std::min(slice, n - row0);
      KILN_CUDA_RETURN_IF_ERROR(
          kernels::W4Dequantize(w.tiled, w.sz, n, k, w.group_size, row0, rows, wt, stream));
      KILN_RETURN_IF_ERROR(LinearOf(x, ldx, m, wt, rows, k, bias != nullptr ? bias + row0 : nullptr,
                                    static_cast<char*>(out) + row0 * out_elem, ldo, out_f32, stream,
                                    L2Prefetch{}));
    }
    return Status::Ok();
  }
  kernels::W4GemmArgsT<T> a = W4Args(w, n, k, bias, ldx, ldo, prefetch);
  a.out_f32 = out_f32;
  a.split_partials = scratch.split_partials;
  a.split_partial_bytes = static_cast<int64_t>(scratch.split_partial_bytes);
  a.split_counters = scratch.split_counters;
  a.split_counter_count = scratch.split_counter_count;
  // The hint goes with the first launch only (the others re-read this layer's weights).
  for (int64_t row = 0; row < m; row += kernels::kW4GemmMaxRows) {
    a.x = x + row * ldx;
    a.m = static_cast<int32_t>(std::min<int64_t>(kernels::kW4GemmMaxRows, m - row));
    a.out = static_cast<char*>(out) + row * ldo * out_elem;
    if (!kernels::W4GemmSupported(a)) {
      return InvalidArgument(
          "Gemm::LinearW4: x needs a row stride multiple of 4 and 8-byte "
          "alignment, the weight 16-byte alignment");
    }
    KILN_CUDA_RETURN_IF_ERROR(kernels::W4Gemm(a, stream));
    a.prefetch = nullptr;
    a.prefetch_bytes = 0;
  }
  return Status::Ok();
}

template <typename T>
Result<bool> Gemm::LinearW4Norm(const kernels::W4NormArgsT<T>& norm, const W4Weight& w, int64_t n,
                                int64_t k, const T* bias, T* out, cudaStream_t stream,
                                L2Prefetch prefetch, const W4Epilogue<T>& epi) {
  if (w.perm != nullptr || !kernels::W4ShapeSupported(n, k, w.group_size)) return false;
  kernels::W4GemmArgsT<T> a = W4Args(w, n, k, bias, k, n, prefetch);
  a.m = 1;
  a.out = out;
  a.norm = norm;
  a.silu_mul = epi.silu_mul;
  a.rope = epi.rope;
  a.rope_fp8 = epi.rope_fp8;
  if (!kernels::W4NormSupported(a)) return false;
  KILN_CUDA_RETURN_IF_ERROR(kernels::W4Gemm(a, stream));
  return true;
}

template Result<bool> Gemm::LinearW4Norm(const kernels::W4NormArgsT<__nv_bfloat16>&,
                                         const W4Weight&, int64_t, int64_t, const __nv_bfloat16*,
                                         __nv_bfloat16*, cudaStream_t, L2Prefetch,
                                         const W4Epilogue<__nv_bfloat16>&);
template Result<bool> Gemm::LinearW4Norm(const kernels::W4NormArgsT<__half>&, const W4Weight&,
                                         int64_t, int64_t, const __half*, __half*, cudaStream_t,
                                         L2Prefetch, const W4Epilogue<__half>&);

}  // namespace kiln::cuda
