// Linear layers on cuBLASLt (DESIGN.md §4: GEMMs through cuBLASLt unless a kernel of ours is
// measured faster): out[m, n] = x[m, k] . w[n, k]^T (+ bias[n]), row-major, bf16 operands with
// fp32 accumulation, bf16 or fp32 output.
//
// Up to gemv_max_rows() rows (batch-1..few decode) go to kernels::Gemv, a weight stream that
// cuBLASLt's tiles do not match at these sizes (bench/gemv_bench measures both). Larger shapes
// use cuBLASLt; the algorithm of each shape is chosen once and cached: by default the
// heuristic's first pick; Tune() instead times the heuristic's top candidates on the device and
// keeps the fastest (what `kiln build` will record per engine).
//
// Thread safety: one thread (the runner's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/buffer.h"
#include "core/status.h"

namespace kiln::cuda {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldo = 0;  // row strides of x and out, in elements
  bool out_f32 = false;
  bool bias = false;
  auto Key() const { return std::tie(m, n, k, ldx, ldo, out_f32, bias); }
  bool operator<(const GemmShape& o) const { return Key() < o.Key(); }
};

class Gemm {
 public:
  static constexpr int32_t kGemvDefaultRows = 2;

  // workspace_bytes: cuBLASLt scratch (32 MiB is plenty on Hopper).
  static Result<std::unique_ptr<Gemm>> Create(size_t workspace_bytes = 32 << 20);
  ~Gemm();

  // out = x . w^T (+ bias). x: [m, k] stride ldx; w: [n, k] contiguous; out: [m, n] stride ldo,
  // bf16 or (out_f32) fp32; bias: [n] bf16 or null. Graph-capturable once the shape's algorithm
  // is cached (the first call of a shape may query cuBLASLt's heuristic on the host).
  Status Linear(const __nv_bfloat16* x, int64_t ldx, int64_t m, const __nv_bfloat16* w, int64_t n,
                int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                cudaStream_t stream);

  // Times up to `candidates` heuristic algorithms for `shape` and caches the fastest. The runs
  // cycle through `weights` (each [n, k]; e.g. one layer's matrix per layer) so that no run
  // finds its weights in L2, as in a forward pass; with none given, scratch copies are made.
  // Synchronizes the stream.
  Status Tune(const GemmShape& shape, int candidates, cudaStream_t stream,
              std::span<const __nv_bfloat16* const> weights = {});

  // Shapes with at most this many rows use kernels::Gemv (0: never). Default kGemvDefaultRows.
  void set_gemv_max_rows(int32_t rows) { gemv_max_rows_ = rows; }
  int32_t gemv_max_rows() const { return gemv_max_rows_; }

 private:
  struct Plan;
  Gemm() = default;
  Result<Plan*> GetPlan(const GemmShape& shape, int candidates);

  int32_t gemv_max_rows_ = kGemvDefaultRows;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<GemmShape, std::unique_ptr<Plan>> plans_;
};

}  // namespace kiln::cuda
