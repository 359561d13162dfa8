#include "backend/cuda/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"

namespace kiln::cuda {
namespace {

template <typename T>
constexpr DType kDTypeOf = std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16;

// The element type of weights passed to Tune, checked against the shape's.
template <typename T>
Result<std::vector<const void*>> TuneWeights(const GemmShape& s, std::span<const T* const> w) {
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    if (!s.fp8) return InvalidArgument("Gemm::Tune: fp8 weights for a non-FP8 shape");
    return std::vector<const void*>(w.begin(), w.end());
  }
  if constexpr (std::is_same_v<T, int8_t>) {
    if (!s.int8) return InvalidArgument("Gemm::Tune: int8 weights for a non-INT8 shape");
    return std::vector<const void*>(w.begin(), w.end());
  }
  if (!w.empty() && (s.fp8 || s.int8 || s.dtype != kDTypeOf<T>)) {
    return InvalidArgument("Gemm::Tune: " + std::string(DTypeName(kDTypeOf<T>)) +
                           " weights for a " + std::string(DTypeName(s.dtype)) + " shape");
  }
  return std::vector<const void*>(w.begin(), w.end());
}

// The arguments of kernels::GemvFp8 / GemvInt8 (the same fields; w's code type differs).
template <typename Code, typename T>
kernels::GemvW8ArgsT<T, Code> W8GemvArgs(const T* x, int64_t ldx, int64_t m, const Code* w,
                                         const float* w_scale, int64_t n, int64_t k, const T* bias,
                                         void* out, int64_t ldo, bool out_f32,
                                         L2Prefetch prefetch) {
  kernels::GemvW8ArgsT<T, Code> g;
  g.x = x;
  g.ldx = ldx;
  g.m = static_cast<int32_t>(m);
  g.w = w;
  g.w_scale = w_scale;
  g.n = n;
  g.k = k;
  g.bias = bias;
  g.out = out;
  g.ldo = ldo;
  g.out_f32 = out_f32;
  g.prefetch = prefetch.p;
  g.prefetch_bytes = prefetch.bytes / 16 * 16;
  return g;
}

}  // namespace

// Row-major out[m, n] = x[m, k] . w[n, k]^T is, in cuBLASLt's column-major terms,
// D[n, m] = op(A)[n, k] . B[k, m] with A = w seen as a [k, n] matrix (ld k), transposed, and
// B = x seen as [k, m] (ld ldx), D = out seen as [n, m] (ld ldo).
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;  // algo was timed (Tune) or adopted from a table (ImportTuned)

  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

Result<std::unique_ptr<Gemm>> Gemm::Create(size_t workspace_bytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  KILN_ASSIGN_OR_RETURN(gemm->workspace_, DeviceBuffer::Allocate(workspace_bytes));
  return gemm;
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

Result<Gemm::Plan*> Gemm::GetPlan(const GemmShape& s, int num_candidates) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return it->second.get();
  if (s.dtype != DType::kBF16 && s.dtype != DType::kF16) {
    return Unsupported("Gemm: operands must be bf16 or f16, not " +
                       std::string(DTypeName(s.dtype)));
  }
  const cudaDataType_t type = s.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  // FP8: e4m3 operands, the 16-bit type for C, D and the bias. INT8: int8 operands, int32 sums
  // (exact) and int32 alpha / beta.
  const cudaDataType_t operand_type = s.fp8 ? CUDA_R_8F_E4M3 : (s.int8 ? CUDA_R_8I : type);
  if (s.fp8 && s.int8) return InvalidArgument("Gemm: a shape is FP8 or INT8, not both");
  if ((s.fp8 || s.int8) && s.out_f32) {
    return Unsupported("Gemm: an FP8 / INT8 GEMM writes its unscaled sums, not fp32");
  }
  if ((s.fp8 || s.int8) && s.bias) {
    return InvalidArgument(
        "Gemm: an FP8 / INT8 shape has no bias (LinearFp8 / LinearInt8 add it with the scales)");
  }
  auto plan = std::make_unique<Plan>();
  KILN_CUBLAS_RETURN_IF_ERROR(
      s.int8 ? cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I)
             : cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (s.fp8 && fp8_fast_accum_) {
    const int8_t on = 1;
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof(on)));
  }
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (s.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
  }
  // FP8: cuBLASLt on Hopper has no per-row / per-column (outer-vector) operand scales (measured:
  // CUBLAS_STATUS_INVALID_VALUE on the H100 with cuBLAS 13.1), so the GEMM writes the unscaled
  // sums in bf16 (their range: up to 448^2 k, beyond fp16's) and kernels::ApplyFp8Scales
  // scales them (LinearFp8Of).
  const cudaDataType_t out_type =
      s.int8 ? CUDA_R_32I : (s.out_f32 ? CUDA_R_32F : (s.fp8 ? CUDA_R_16BF : type));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, operand_type, s.k, s.n, s.k));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, operand_type, s.k, s.m, s.ldx));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->d, out_type, s.n, s.m, s.ldo));

  cublasLtMatmulPreference_t pref = nullptr;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.size();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  plan->candidates.resize(std::max(1, num_candidates));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->a, plan->b, plan->d, plan->d, pref,
      static_cast<int>(plan->candidates.size()), plan->candidates.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  KILN_CUBLAS_RETURN_IF_ERROR(st);
  if (found == 0) {
    return Unsupported(std::string("cuBLASLt has no ") +
                       (s.fp8    ? "FP8 "
                        : s.int8 ? "INT8 "
                                 : "") +
                       "algorithm for the linear layer m=" + std::to_string(s.m) +
                       " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
  }
  plan->candidates.resize(found);
  plan->algo = plan->candidates[0].algo;
  if (s.fp8 && s.m >= kFp8PromptRows) {
    if (auto it = fp8_prompt_algos_.find({s.n, s.k, s.dtype}); it != fp8_prompt_algos_.end()) {
      cublasLtMatmulAlgo_t algo{};
      std::memcpy(algo.data, it->second.algo.data(), sizeof(algo.data));
      if (AlgoFits(*plan, algo)) plan->algo = algo;
    }
  }
  Plan* raw = plan.get();
  plans_.emplace(s, std::move(plan));
  return raw;
}

Status Gemm::Linear(const __nv_bfloat16* x, int64_t ldx, int64_t m, const __nv_bfloat16* w,
                    int64_t n, int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo,
                    bool out_f32, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearOf(x, ldx, m, w, n, k, bias, out, ldo, out_f32, stream, prefetch);
}

Status Gemm::Linear(const __half* x, int64_t ldx, int64_t m, const __half* w, int64_t n, int64_t k,
                    const __half* bias, void* out, int64_t ldo, bool out_f32, cudaStream_t stream,
                    L2Prefetch prefetch) {
  return LinearOf(x, ldx, m, w, n, k, bias, out, ldo, out_f32, stream, prefetch);
}

template <typename T>
Status Gemm::LinearOf(const T* x, int64_t ldx, int64_t m, const T* w, int64_t n, int64_t k,
                      const T* bias, void* out, int64_t ldo, bool out_f32, cudaStream_t stream,
                      L2Prefetch prefetch) {
  if (m == 0) return Status::Ok();
  if (m <= gemv_max_rows_) {
    kernels::GemvArgsT<T> g;
    g.x = x;
    g.ldx = ldx;
    g.m = static_cast<int32_t>(m);
    g.w = w;
    g.n = n;
    g.k = k;
    g.bias = bias;
    g.out = out;
    g.ldo = ldo;
    g.out_f32 = out_f32;
    g.prefetch = prefetch.p;
    g.prefetch_bytes = prefetch.bytes / 16 * 16;
    if (kernels::GemvSupported(g)) {
      KILN_CUDA_RETURN_IF_ERROR(kernels::Gemv(g, stream));
      return Status::Ok();
    }
  }
  const GemmShape shape{m, n, k, ldx, ldo, out_f32, bias != nullptr, kDTypeOf<T>};
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(shape, 1));
  if (bias != nullptr) {
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, plan->desc, &alpha, w, plan->a, x, plan->b,
                                             &beta, out, plan->d, out, plan->d, &plan->algo,
                                             workspace_.data(), workspace_.size(), stream));
  return Status::Ok();
}

namespace {

// cuBLASLt's FP8 kernels (measured on the H100): k and n multiples of 16, the output stride a
// multiple of 8 elements (16 bytes).
Status CheckFp8GemmShape(int64_t n, int64_t k, int64_t ldo) {
  if (k % 16 == 0 && n % 16 == 0 && ldo % 8 == 0) return Status::Ok();
  return Unsupported(
      "Gemm: an FP8 linear layer needs k and n multiples of 16 and an output stride multiple of "
      "8, got k=" +
      std::to_string(k) + " n=" + std::to_string(n) + " ldo=" + std::to_string(ldo));
}

}  // namespace

Status Gemm::LinearFp8(const __nv_bfloat16* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n,
                       int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                       Fp8Scratch scratch, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearFp8Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

Status Gemm::LinearFp8(const __half* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                       const __half* bias, void* out, int64_t ldo, bool out_f32, Fp8Scratch scratch,
                       cudaStream_t stream, L2Prefetch prefetch) {
  return LinearFp8Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

template <typename T>
Status Gemm::LinearFp8Of(const T* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                         const T* bias, void* out, int64_t ldo, bool out_f32, Fp8Scratch scratch,
                         cudaStream_t stream, L2Prefetch prefetch) {
  if (m == 0) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(const bool done, MaybeGemvW8(W8GemvArgs(x, ldx, m, w.w, w.scale, n, k, bias,
                                                                out, ldo, out_f32, prefetch),
                                                     m, stream));
  if (done) return Status::Ok();
  if (out_f32) {
    return Unsupported(
        "Gemm: an FP8 GEMM writes its unscaled sums, not fp32 (only the GEMV rows "
        "of LinearFp8 write fp32)");
  }
  KILN_RETURN_IF_ERROR(CheckFp8GemmShape(n, k, ldo));
  KILN_CUDA_RETURN_IF_ERROR(
      w.input_scale != nullptr
          ? kernels::QuantizeRowsFp8Static(x, ldx, m, k, w.input_scale, scratch.x, k, scratch.scale,
                                           stream)
          : kernels::QuantizeRowsFp8(x, ldx, m, k, scratch.x, k, scratch.scale, stream));
  return LinearFp8QuantizedOf(scratch.x, scratch.scale, m, w, n, k, bias, static_cast<T*>(out), ldo,
                              stream);
}

Status Gemm::LinearFp8Quantized(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m,
                                Fp8Weight w, int64_t n, int64_t k, const __nv_bfloat16* bias,
                                __nv_bfloat16* out, int64_t ldo, cudaStream_t stream) {
  return LinearFp8QuantizedOf(xq, x_scales, m, w, n, k, bias, out, ldo, stream);
}

Status Gemm::LinearFp8Quantized(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m,
                                Fp8Weight w, int64_t n, int64_t k, const __half* bias, __half* out,
                                int64_t ldo, cudaStream_t stream) {
  return LinearFp8QuantizedOf(xq, x_scales, m, w, n, k, bias, out, ldo, stream);
}

template <typename T>
Status Gemm::LinearFp8QuantizedOf(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m,
                                  Fp8Weight w, int64_t n, int64_t k, const T* bias, T* out,
                                  int64_t ldo, cudaStream_t stream) {
  if (m == 0) return Status::Ok();
  KILN_RETURN_IF_ERROR(Fp8GemmUnscaledOf(xq, m, w, n, k, out, ldo, kDTypeOf<T>, stream));
  // The bias is added with the scales (the shape has none).
  KILN_CUDA_RETURN_IF_ERROR(kernels::ApplyFp8Scales(reinterpret_cast<__nv_bfloat16*>(out), ldo, m,
                                                    n, x_scales, w.scale, bias, out, stream));
  return Status::Ok();
}

Status Gemm::Fp8GemmUnscaled(const __nv_fp8_e4m3* xq, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                             __nv_bfloat16* out, int64_t ldo, cudaStream_t stream) {
  if (m == 0) return Status::Ok();
  return Fp8GemmUnscaledOf(xq, m, w, n, k, out, ldo, DType::kBF16, stream);
}

// The e4m3 GEMM alone, its sums in bf16 into out (an fp16 model's out buffer too); dtype: the
// model's, which keys the plan (the shapes tuned at start-up carry it).
Status Gemm::Fp8GemmUnscaledOf(const __nv_fp8_e4m3* xq, int64_t m, Fp8Weight w, int64_t n,
                               int64_t k, void* out, int64_t ldo, DType dtype,
                               cudaStream_t stream) {
  KILN_RETURN_IF_ERROR(CheckFp8GemmShape(n, k, ldo));
  const GemmShape shape{m, n, k, k, ldo, /*out_f32=*/false, /*bias=*/false, dtype, /*fp8=*/true};
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(shape, 1));
  const float alpha = 1.0f, beta = 0.0f;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, plan->desc, &alpha, w.w, plan->a, xq, plan->b,
                                             &beta, out, plan->d, out, plan->d, &plan->algo,
                                             workspace_.data(), workspace_.size(), stream));
  return Status::Ok();
}

Status Gemm::LinearInt8(const __nv_bfloat16* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n,
                        int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                        Int8Scratch scratch, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearInt8Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

Status Gemm::LinearInt8(const __half* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n, int64_t k,
                        const __half* bias, void* out, int64_t ldo, bool out_f32,
                        Int8Scratch scratch, cudaStream_t stream, L2Prefetch prefetch) {
  return LinearInt8Of(x, ldx, m, w, n, k, bias, out, ldo, out_f32, scratch, stream, prefetch);
}

template <typename T>
Status Gemm::LinearInt8Of(const T* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n, int64_t k,
                          const T* bias, void* out, int64_t ldo, bool out_f32, Int8Scratch scratch,
                          cudaStream_t stream, L2Prefetch prefetch) {
  if (m == 0) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(const bool done, MaybeGemvW8(W8GemvArgs(x, ldx, m, w.w, w.scale, n, k, bias,
                                                                out, ldo, out_f32, prefetch),
                                                     m, stream));
  if (done) return Status::Ok();
  // cuBLASLt's int8 (IMMA) kernels want the "TN" layout (ours) and dimensions in multiples of 4;
  // 16 as for FP8 keeps every operand row 16-byte aligned.
  if (k % 16 != 0 || n % 16 != 0) {
    return Unsupported("Gemm: an INT8 linear layer needs k and n multiples of 16, got k=" +
                       std::to_string(k) + " n=" + std::to_string(n));
  }
  KILN_CUDA_RETURN_IF_ERROR(
      kernels::QuantizeRowsInt8(x, ldx, m, k, scratch.x, k, scratch.scale, stream));
  // The sums go to scratch.acc [m, n]; the bias is added with the scales (the shape has none).
  GemmShape shape{m, n, k, k, n, /*out_f32=*/false, /*bias=*/false, kDTypeOf<T>};
  shape.int8 = true;
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(shape, 1));
  const int32_t alpha = 1, beta = 0;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      handle_, plan->desc, &alpha, w.w, plan->a, scratch.x, plan->b, &beta, scratch.acc, plan->d,
      scratch.acc, plan->d, &plan->algo, workspace_.data(), workspace_.size(), stream));
  KILN_CUDA_RETURN_IF_ERROR(kernels::ApplyInt8Scales(scratch.acc, n, m, n, scratch.scale, w.scale,
                                                     bias, out, ldo, out_f32, stream));
  return Status::Ok();
}

template <typename G>
Result<bool> Gemm::MaybeGemvW8(G g, int64_t m, cudaStream_t stream) {
  g.persistent = gemv_persistent_;
  constexpr bool kInt8 =
      std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(g.w)>>, int8_t>;
  if (m < 1 || m > (kInt8 ? int8_gemv_max_rows_ : fp8_gemv_max_rows_)) return false;
  if constexpr (kInt8) {
    if (!kernels::GemvInt8Supported(g)) return false;
    KILN_CUDA_RETURN_IF_ERROR(kernels::GemvInt8(g, stream));
  } else {
    if (!kernels::GemvFp8Supported(g)) return false;
    KILN_CUDA_RETURN_IF_ERROR(kernels::GemvFp8(g, stream));
  }
  return true;
}

template <typename T, typename W>
Result<bool> Gemm::GateUpSiluW8(const T* x, int64_t ldx, int64_t m, W w, int64_t dim, int64_t k,
                                const T* bias, T* out, int64_t ldo, cudaStream_t stream,
                                L2Prefetch prefetch) {
  auto g = W8GemvArgs(x, ldx, m, w.w, w.scale, dim, k, bias, out, ldo, false, prefetch);
  g.silu_mul = true;
  return MaybeGemvW8(g, m, stream);
}

template <typename T, typename W, typename C>
Result<bool> Gemm::QkvRopeW8(const T* x, int64_t ldx, int64_t m, W w, int64_t n, int64_t k,
                             const T* bias, const kernels::RopeKvArgsT<T, C>& rope,
                             cudaStream_t stream, L2Prefetch prefetch) {
  auto g = W8GemvArgs(x, ldx, m, w.w, w.scale, n, k, bias, rope.qkv, rope.ld, false, prefetch);
  if constexpr (std::is_same_v<C, T>) {
    g.rope = &rope;
  } else {
    g.rope_fp8 = &rope;
  }
  return MaybeGemvW8(g, m, stream);
}

template Result<bool> Gemm::GateUpSiluW8(const __nv_bfloat16*, int64_t, int64_t, Fp8Weight, int64_t,
                                         int64_t, const __nv_bfloat16*, __nv_bfloat16*, int64_t,
                                         cudaStream_t, L2Prefetch);
template Result<bool> Gemm::GateUpSiluW8(const __half*, int64_t, int64_t, Fp8Weight, int64_t,
                                         int64_t, const __half*, __half*, int64_t, cudaStream_t,
                                         L2Prefetch);
template Result<bool> Gemm::GateUpSiluW8(const __nv_bfloat16*, int64_t, int64_t, Int8Weight,
                                         int64_t, int64_t, const __nv_bfloat16*, __nv_bfloat16*,
                                         int64_t, cudaStream_t, L2Prefetch);
template Result<bool> Gemm::GateUpSiluW8(const __half*, int64_t, int64_t, Int8Weight, int64_t,
                                         int64_t, const __half*, __half*, int64_t, cudaStream_t,
                                         L2Prefetch);
#define KILN_QKV_ROPE_W8(T, W, C)                                                                  \
  template Result<bool> Gemm::QkvRopeW8(const T*, int64_t, int64_t, W, int64_t, int64_t, const T*, \
                                        const kernels::RopeKvArgsT<T, C>&, cudaStream_t,           \
                                        L2Prefetch);
KILN_QKV_ROPE_W8(__nv_bfloat16, Fp8Weight, __nv_bfloat16)
KILN_QKV_ROPE_W8(__nv_bfloat16, Fp8Weight, __nv_fp8_e4m3)
KILN_QKV_ROPE_W8(__nv_bfloat16, Int8Weight, __nv_bfloat16)
KILN_QKV_ROPE_W8(__nv_bfloat16, Int8Weight, __nv_fp8_e4m3)
KILN_QKV_ROPE_W8(__half, Fp8Weight, __half)
KILN_QKV_ROPE_W8(__half, Fp8Weight, __nv_fp8_e4m3)
KILN_QKV_ROPE_W8(__half, Int8Weight, __half)
KILN_QKV_ROPE_W8(__half, Int8Weight, __nv_fp8_e4m3)
#undef KILN_QKV_ROPE_W8

Status Gemm::Tune(const GemmShape& s, int num_candidates, cudaStream_t stream,
                  std::span<const __nv_fp8_e4m3* const> weights) {
  KILN_ASSIGN_OR_RETURN(std::vector<const void*> w, TuneWeights(s, weights));
  return TuneWith(s, num_candidates, stream, std::move(w));
}

Status Gemm::Tune(const GemmShape& s, int num_candidates, cudaStream_t stream,
                  std::span<const int8_t* const> weights) {
  KILN_ASSIGN_OR_RETURN(std::vector<const void*> w, TuneWeights(s, weights));
  return TuneWith(s, num_candidates, stream, std::move(w));
}

Status Gemm::Tune(const GemmShape& s, int num_candidates, cudaStream_t stream,
                  std::span<const __nv_bfloat16* const> weights) {
  KILN_ASSIGN_OR_RETURN(std::vector<const void*> w, TuneWeights(s, weights));
  return TuneWith(s, num_candidates, stream, std::move(w));
}

Status Gemm::Tune(const GemmShape& s, int num_candidates, cudaStream_t stream,
                  std::span<const __half* const> weights) {
  KILN_ASSIGN_OR_RETURN(std::vector<const void*> w, TuneWeights(s, weights));
  return TuneWith(s, num_candidates, stream, std::move(w));
}

Status Gemm::TuneWith(const GemmShape& s, int num_candidates, cudaStream_t stream,
                      std::vector<const void*> w) {
  if (auto it = plans_.find(s); it != plans_.end() && it->second->tuned) return Status::Ok();
  plans_.erase(s);
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, num_candidates));
  if (plan->candidates.size() <= 1) return Status::Ok();
  const size_t out_bytes = static_cast<size_t>(s.ldo) * s.m * (s.out_f32 || s.int8 ? 4 : 2);
  const int64_t operand_bytes = s.fp8 || s.int8 ? 1 : 2;
  KILN_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(s.ldx * s.m * 2));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::Allocate(out_bytes));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer bias, DeviceBuffer::Allocate(std::max<int64_t>(s.n, 1) * 2));
  // Small non-zero values (0x3c3c: 0.0115 in bf16; 0x2020: 0.0081 in fp16): timing on zeros
  // flatters some kernels.
  const int fill = s.dtype == DType::kF16 ? 0x20 : 0x3c;
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x.data(), fill, x.size(), stream));
  DeviceBuffer scratch;
  if (w.empty()) {
    // Enough copies to cover 256 MiB, larger than any L2.
    const int64_t bytes = s.n * s.k * operand_bytes;
    const int64_t copies = std::clamp<int64_t>((int64_t{256} << 20) / bytes, 1, 16);
    KILN_ASSIGN_OR_RETURN(scratch, DeviceBuffer::Allocate(bytes * copies));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch.data(), fill, scratch.size(), stream));
    for (int64_t i = 0; i < copies; ++i) {
      w.push_back(static_cast<const char*>(scratch.data()) + i * bytes);
    }
  }
  if (s.bias) {
    const void* bias_ptr = bias.data();
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  cudaEvent_t start, stop;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  // An INT8 plan's alpha and beta are int32 (its scale type).
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  const void* alpha = s.int8 ? static_cast<const void*>(&alpha_i) : &alpha_f;
  const void* beta = s.int8 ? static_cast<const void*>(&beta_i) : &beta_f;
  constexpr int repeats = 8;  // enough to rank candidates; start-up pays for every run
  for (const cublasLtMatmulHeuristicResult_t& c : plan->candidates) {
    if (c.state != CUBLAS_STATUS_SUCCESS) continue;
    constexpr int kWarmup = 2;
    bool ok = true;
    for (int i = 0; i < kWarmup + repeats && ok; ++i) {
      if (i == kWarmup) cudaEventRecord(start, stream);
      ok = cublasLtMatmul(handle_, plan->desc, alpha, w[i % w.size()], plan->a, x.data(), plan->b,
                          beta, out.data(), plan->d, out.data(), plan->d, &c.algo,
                          workspace_.data(), workspace_.size(), stream) == CUBLAS_STATUS_SUCCESS;
    }
    cudaEventRecord(stop, stream);
    KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (ok && ms < best_ms) {
      best_ms = ms;
      plan->algo = c.algo;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  plan->tuned = true;
  return Status::Ok();
}

std::vector<TunedGemm> Gemm::TunedGemms() const {
  std::vector<TunedGemm> out;
  for (const auto& [shape, plan] : plans_) {
    if (!plan->tuned) continue;
    TunedGemm t{shape};
    static_assert(sizeof(plan->algo.data) == sizeof(t.algo));
    std::memcpy(t.algo.data(), plan->algo.data, sizeof(t.algo));
    out.push_back(t);
  }
  for (const auto& [key, choice] : fp8_prompt_algos_) {
    const auto& [n, k, dtype] = key;
    out.push_back(
        TunedGemm{GemmShape{choice.m, n, k, k, n, false, false, dtype, true}, choice.algo});
  }
  return out;
}

bool Gemm::AlgoFits(const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, &algo,
                                 &check) == CUBLAS_STATUS_SUCCESS &&
         check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_.size();
}

Result<bool> Gemm::ImportTuned(const TunedGemm& tuned) {
  const GemmShape& s = tuned.shape;
  const bool prompt = s.fp8 && s.m >= kFp8PromptRows;
  if (prompt) plans_.erase(s);  // made again below without a previous choice
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, 1));
  cublasLtMatmulAlgo_t algo{};
  std::memcpy(algo.data, tuned.algo.data(), sizeof(tuned.algo));
  if (!AlgoFits(*plan, algo)) return false;
  if (prompt) {
    AdoptFp8PromptAlgo(s.m, s.n, s.k, s.dtype, tuned.algo);
    return true;
  }
  plan->algo = algo;
  plan->tuned = true;
  return true;
}

void Gemm::AdoptFp8PromptAlgo(int64_t m, int64_t n, int64_t k, DType dtype,
                              const std::array<uint64_t, 8>& algo) {
  fp8_prompt_algos_[{n, k, dtype}] = {m, algo};
  // Plans made before (the heuristic's pick) are made again with it.
  std::erase_if(plans_, [&](const auto& entry) {
    const GemmShape& p = entry.first;
    return p.fp8 && p.m >= kFp8PromptRows && p.n == n && p.k == k && p.dtype == dtype;
  });
}

Status Gemm::TuneFp8Prompt(const Fp8PromptTuning& t, cudaStream_t stream,
                           std::span<const __nv_fp8_e4m3* const> weights) {
  const int64_t m = t.m, n = t.n, k = t.k;
  if (HasFp8PromptAlgo(n, k, t.dtype)) return Status::Ok();
  if (weights.empty()) return InvalidArgument("Gemm::TuneFp8Prompt: no weights");
  if (!(t.seconds > 0.0) || t.candidates < 1 || m < kFp8PromptRows || t.x == nullptr ||
      t.out == nullptr) {
    return InvalidArgument("Gemm::TuneFp8Prompt: seconds > 0, candidates >= 1, m >= " +
                           std::to_string(kFp8PromptRows) + " and x / out scratch are required");
  }
  KILN_RETURN_IF_ERROR(CheckFp8GemmShape(n, k, n));
  const GemmShape s{m, n, k, k, n, /*out_f32=*/false, /*bias=*/false, t.dtype, /*fp8=*/true};
  plans_.erase(s);
  KILN_ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, t.candidates));
  std::array<uint64_t, 8> best{};
  std::memcpy(best.data(), plan->candidates[0].algo.data, sizeof(best));
  if (plan->candidates.size() > 1) {
    // sigma 448 / 4.5: a row's amax near 448, as per-token scaling makes it.
    KILN_CUDA_RETURN_IF_ERROR(
        kernels::FillGaussianE4m3(t.x, m * k, 0x6b696c6e, 448.0f / 4.5f, stream));
    cudaEvent_t start, stop;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = 0.0f;
    size_t run = 0;
    auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(handle_, plan->desc, &alpha, weights[run++ % weights.size()], plan->a,
                            t.x, plan->b, &beta, t.out, plan->d, t.out, plan->d, &algo,
                            workspace_.data(), workspace_.size(), stream) == CUBLAS_STATUS_SUCCESS;
    };
    // Runs `algo` back to back for `for_seconds`; the mean ms of the runs after the first third
    // (the power limit's clock settles within it), or a negative value when it fails.
    auto sustained_ms = [&](const cublasLtMatmulAlgo_t& algo, double for_seconds) -> float {
      const auto t0 = std::chrono::steady_clock::now();
      auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      bool timing = false;
      int runs = 0;
      while (elapsed() < for_seconds) {
        if (!timing && elapsed() >= for_seconds / 3) {
          timing = true;
          if (cudaEventRecord(start, stream) != cudaSuccess) return -1.0f;
        }
        for (int i = 0; i < 4; ++i) {
          if (!matmul(algo)) return -1.0f;
        }
        if (timing) runs += 4;
        if (cudaEventRecord(stop, stream) != cudaSuccess ||
            cudaEventSynchronize(stop) != cudaSuccess) {
          return -1.0f;
        }
      }
      float ms = 0;
      if (runs == 0 || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) return -1.0f;
      return ms / static_cast<float>(runs);
    };
    sustained_ms(plan->candidates[0].algo, t.seconds);  // to the power limit
    float best_ms = 1e30f;
    for (const cublasLtMatmulHeuristicResult_t& c : plan->candidates) {
      if (c.state != CUBLAS_STATUS_SUCCESS) continue;
      const float ms = sustained_ms(c.algo, t.seconds);
      if (ms > 0 && ms < best_ms) {
        best_ms = ms;
        std::memcpy(best.data(), c.algo.data, sizeof(best));
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  plans_.erase(s);
  AdoptFp8PromptAlgo(m, n, k, t.dtype, best);
  return Status::Ok();
}

}  // namespace kiln::cuda
