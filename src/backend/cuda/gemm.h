// Linear layers on cuBLASLt (DESIGN.md §4: GEMMs through cuBLASLt unless a kernel of ours is
// measured faster): out[m, n] = x[m, k] . w[n, k]^T (+ bias[n]), row-major, bf16 or fp16
// operands (x, w and bias of one type, an overload per type) with fp32 accumulation, output in
// the operands' type or fp32.
//
// Up to gemv_max_rows() rows (batch-1..few decode) go to kernels::Gemv, a weight stream that
// cuBLASLt's tiles do not match at these sizes (bench/gemv_bench measures both). Larger shapes
// use cuBLASLt; the algorithm of each shape is chosen once and cached: by default the
// heuristic's first pick; Tune() instead times the heuristic's top candidates on the device and
// keeps the fastest (what `kiln build` will record per engine).
//
// Thread safety: one thread (the runner's).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/elementwise.h"
#include "kernels/w4a16.h"

namespace kiln::cuda {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldo = 0;  // row strides of x and out, in elements
  bool out_f32 = false;
  bool bias = false;
  DType dtype = DType::kBF16;  // of x, w, bias and (unless out_f32) out: kBF16 or kF16
  // FP8 W8A8: x and w are e4m3 with per-row scales (LinearFp8); dtype is then the type of the
  // bias and the output.
  bool fp8 = false;
  // INT8 W8A8: x and w are int8 with per-row scales (LinearInt8), the GEMM writes int32 sums.
  bool int8 = false;
  auto Key() const { return std::tie(m, n, k, ldx, ldo, out_f32, bias, dtype, fp8, int8); }
  bool operator<(const GemmShape& o) const { return Key() < o.Key(); }
};

// An FP8 weight (model/quantization.h): e4m3 [n, k] with a per-output-channel scale [n].
struct Fp8Weight {
  const __nv_fp8_e4m3* w = nullptr;
  const float* scale = nullptr;
  // A device scalar, the layer's static (calibrated) activation scale: the GEMM rows quantize
  // x with it (kernels::QuantizeRowsFp8Static) instead of per token. Null: per token.
  const float* input_scale = nullptr;
};

// Where LinearFp8 quantizes its input: room for m rows of k e4m3 values and m scales.
struct Fp8Scratch {
  __nv_fp8_e4m3* x = nullptr;
  float* scale = nullptr;
};

// A hint for the skinny linear paths (kernels::Gemv, GemvFp8 / GemvInt8, W4Gemm): bytes the
// step reads next, e.g. the next linear layer's weights, for L2 to fetch while this layer runs
// (kernels/dtype_traits.cuh, PrefetchL2). The cuBLASLt paths ignore it. p 16-byte aligned; bytes
// are rounded down to a multiple of 16.
struct L2Prefetch {
  const void* p = nullptr;
  int64_t bytes = 0;
};

// A tuned algorithm for one shape, as an engine's gemm_table.json stores it.
struct TunedGemm {
  GemmShape shape;
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t's opaque words
};

// A W4A16 weight (model/quantization.h) in the layout of kernels/w4a16.h, made at upload by
// kernels::W4RepackCodes and W4RepackScales from the canonical packed codes, scales and zeros.
struct W4Weight {
  const uint8_t* tiled = nullptr;  // n * k / 2 bytes
  const uint32_t* sz = nullptr;    // [k / group_size, n]
  const int32_t* perm =
      nullptr;  // [k] (act-order: stored column j is input channel perm[j]) or null
  int64_t group_size = 0;
};
// The layer a one-token W4A16 GEMV with its norm may run in its epilogue (Gemm::LinearW4Norm;
// kernels::W4GemmArgsT's fields of the same names, with the row orders they need): at most one.
template <typename T>
struct W4Epilogue {
  bool silu_mul = false;
  const kernels::RopeKvArgsT<T, T>* rope = nullptr;
  const kernels::RopeKvArgsT<T, __nv_fp8_e4m3>* rope_fp8 = nullptr;
};

// What Gemm::LinearW4 may work in (each optional): `gathered`, room for m * k elements of x's
// type (act-order: x's columns gathered in stored order); `dequant`, dequant_bytes of room for
// T weights (the many-row path: at least kernels::kW4TileRows rows of k; 16-byte aligned).
// `split_*`, the split-K room of kernels::W4Gemm's block tiles (kernels::W4GemmArgsT: fp32
// partial sums and a counter per 256 weight rows, zero before the first call; without them k is
// not split, which leaves most SMs idle on weights of few rows).
struct W4Scratch {
  void* gathered = nullptr;
  void* dequant = nullptr;
  size_t dequant_bytes = 0;
  float* split_partials = nullptr;
  size_t split_partial_bytes = 0;
  uint32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
};

// An INT8 weight (model/quantization.h): int8 codes [n, k] with a per-output-channel scale [n].
struct Int8Weight {
  const int8_t* w = nullptr;
  const float* scale = nullptr;
};

// Where LinearInt8 quantizes its input and keeps the GEMM's sums: m * k codes, m scales and
// m * n int32 sums.
struct Int8Scratch {
  int8_t* x = nullptr;
  float* scale = nullptr;
  int32_t* acc = nullptr;
};

class Gemm {
 public:
  static constexpr int32_t kGemvDefaultRows = 2;
  static constexpr int32_t kFp8GemvDefaultRows = 3;
  static constexpr int32_t kInt8GemvDefaultRows = 3;
  static constexpr int32_t kW4GemmDefaultRows = 64;  // kernels::kW4GemmMaxRows (gemm_w4.cc)
  // The dequantization scratch the CUDA runner gives LinearW4 (at most; less for a smaller
  // model): 8,192 rows of a k = 4,096 weight in bf16, so each slice's GEMM stays large.
  static constexpr size_t kW4DequantDefaultBytes = size_t{64} << 20;
  // The split-K scratch the CUDA runner gives LinearW4: partial sums for two blocks per SM of a
  // 132-SM H100 at 64 rows (264 blocks of 256 weight rows x 64 tokens in fp32 is 16.5 MiB; a
  // launch splits less where they do not fit), and counters for weights of up to 1,024 x 256
  // rows.
  static constexpr size_t kW4SplitDefaultBytes = size_t{16} << 20;
  static constexpr int64_t kW4SplitDefaultCounters = 1024;

  // workspace_bytes: cuBLASLt scratch (32 MiB is plenty on Hopper).
  static Result<std::unique_ptr<Gemm>> Create(size_t workspace_bytes = 32 << 20);
  ~Gemm();

  // out = x . w^T (+ bias). x: [m, k] stride ldx; w: [n, k] contiguous; out: [m, n] stride ldo,
  // of x's type (bf16 or fp16) or (out_f32) fp32; bias: [n] of x's type, or null. The plan is
  // cached per GemmShape, dtype included. Graph-capturable once the shape's algorithm is cached
  // (the first call of a shape may query cuBLASLt's heuristic on the host).
  // NOTE: on the cuBLASLt path (m > gemv_max_rows()) with a bias and a bf16 / fp16 output, the
  // BIAS epilogue rounds x . w^T to the output type before adding the bias and rounds again
  // (measured on the H100 in bf16: about 2 % of outputs beyond half an ulp of the exact sum, the
  // largest seen 1.3 ulps; gemm_test.cc); Gemv rounds once.
  Status Linear(const __nv_bfloat16* x, int64_t ldx, int64_t m, const __nv_bfloat16* w, int64_t n,
                int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                cudaStream_t stream, L2Prefetch prefetch = {});
  Status Linear(const __half* x, int64_t ldx, int64_t m, const __half* w, int64_t n, int64_t k,
                const __half* bias, void* out, int64_t ldo, bool out_f32, cudaStream_t stream,
                L2Prefetch prefetch = {});

  // FP8 linear layer (model/quantization.h): out = x . w^T (+ bias) with w e4m3 per channel.
  // Up to fp8_gemv_max_rows() rows: weight-only (W8A16) kernels::GemvFp8 on x as it is.
  // More rows: x is quantized per token into `scratch` (kernels::QuantizeRowsFp8), an e4m3 x
  // e4m3 cuBLASLt GEMM (fp32 accumulation) writes the unscaled sums in bf16 into `out`, and
  // kernels::ApplyFp8Scales scales them (and adds the bias) in place: cuBLASLt has no
  // per-row/per-column operand scales on Hopper. out: x's type, or fp32 (out_f32; GEMV rows
  // only). Unsupported (GEMM rows): out_f32, k or n not a multiple of 16, ldo not a multiple of 8.
  Status LinearFp8(const __nv_bfloat16* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n,
                   int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                   Fp8Scratch scratch, cudaStream_t stream, L2Prefetch prefetch = {});
  Status LinearFp8(const __half* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                   const __half* bias, void* out, int64_t ldo, bool out_f32, Fp8Scratch scratch,
                   cudaStream_t stream, L2Prefetch prefetch = {});

  // LinearFp8's GEMM rows for an input already quantized per token: xq [m, k] e4m3, contiguous,
  // and its scales [m], as kernels::QuantizeRowsFp8 writes them (the runner fuses that into the
  // op before: kernels::RmsNormF32ResidualFp8, SiluMulFp8). The e4m3 cuBLASLt GEMM and
  // kernels::ApplyFp8Scales for any m >= 1; out in the bias's type. The same requirements as
  // LinearFp8's GEMM rows.
  Status LinearFp8Quantized(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m, Fp8Weight w,
                            int64_t n, int64_t k, const __nv_bfloat16* bias, __nv_bfloat16* out,
                            int64_t ldo, cudaStream_t stream);
  Status LinearFp8Quantized(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m, Fp8Weight w,
                            int64_t n, int64_t k, const __half* bias, __half* out, int64_t ldo,
                            cudaStream_t stream);

  // LinearFp8Quantized without its scale pass: the e4m3 GEMM's unscaled sums, in bf16, into out,
  // for a consumer that scales them as it reads them (kernels::Fp8InputScales with row =
  // x_scales, col = w.scale and the layer's bias): the layer's output is then
  // ApplyFp8Scales(out) bit for bit. For bf16 models (the shape's dtype is bf16, as
  // LinearFp8Quantized's for them).
  Status Fp8GemmUnscaled(const __nv_fp8_e4m3* xq, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                         __nv_bfloat16* out, int64_t ldo, cudaStream_t stream);

  // W4A16 linear layer (model/quantization.h, kernels/w4a16.h): out = x . w^T (+ bias).
  // Up to w4_gemm_max_rows() rows: w dequantized in registers (kernels::W4Gemm, tensor cores,
  // fp32 accumulation, exact products; from kernels::kW4TileMinRows rows its block tiles, k split
  // across blocks when scratch.split_* is given), one launch per kernels::kW4GemmMaxRows rows. More
  // rows with a scratch.dequant: w dequantized to x's type (one rounding per weight) slice by slice
  // into it (kernels::W4Dequantize), each slice a cuBLASLt GEMM as Linear's; without one, the
  // W4Gemm launches go on (each streams the weights again). With act-order (w.perm) x's
  // columns are first gathered into scratch.gathered (required then). out: x's type or fp32.
  // Unsupported: shapes outside kernels::W4ShapeSupported.
  Status LinearW4(const __nv_bfloat16* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n,
                  int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                  const W4Scratch& scratch, cudaStream_t stream, L2Prefetch prefetch = {});
  Status LinearW4(const __half* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n, int64_t k,
                  const __half* bias, void* out, int64_t ldo, bool out_f32,
                  const W4Scratch& scratch, cudaStream_t stream, L2Prefetch prefetch = {});

  // One token's residual RMS norm and the W4A16 linear layer after it as one launch: out =
  // rms_norm(residual + delta) * norm.weight . w^T (+ bias), the norm made in the GEMV's
  // prologue (kernels::W4NormArgsT: the bits of kernels::RmsNormF32Residual then LinearW4), and
  // norm.residual_out = residual + delta. Returns false and launches nothing where the kernel
  // does not take it (kernels::W4NormSupported: k of 2,048 / 4,096 / 8,192, groups of 64 or 128,
  // no act-order); the caller then runs the norm and LinearW4. T: __nv_bfloat16 or __half
  // (instantiated in gemm_w4.cc). With epi's silu_mul, rope or rope_fp8, the layer after it
  // too (kernels::W4GemmArgsT: out gets SiluMul's n / 2 products, or is rope's qkv row); false
  // also where the kernel does not take that epilogue.
  template <typename T>
  Result<bool> LinearW4Norm(const kernels::W4NormArgsT<T>& norm, const W4Weight& w, int64_t n,
                            int64_t k, const T* bias, T* out, cudaStream_t stream,
                            L2Prefetch prefetch = {}, const W4Epilogue<T>& epi = {});

  // INT8 W8A8 linear layer (model/quantization.h): up to int8_gemv_max_rows() rows, weight-only
  // kernels::GemvInt8 on x as it is (W8A16); more rows: x quantized per token into `scratch`
  // (kernels::QuantizeRowsInt8, bit-exact with the CPU's), an int8 x int8 -> int32 cuBLASLt GEMM
  // (exact sums) into scratch.acc, and kernels::ApplyInt8Scales (acc * sx[m] * sw[n] + bias) into
  // out, of x's type or fp32. Unsupported (GEMM rows): k or n not a multiple of 16.
  Status LinearInt8(const __nv_bfloat16* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n,
                    int64_t k, const __nv_bfloat16* bias, void* out, int64_t ldo, bool out_f32,
                    Int8Scratch scratch, cudaStream_t stream, L2Prefetch prefetch = {});
  Status LinearInt8(const __half* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n, int64_t k,
                    const __half* bias, void* out, int64_t ldo, bool out_f32, Int8Scratch scratch,
                    cudaStream_t stream, L2Prefetch prefetch = {});

  // LinearFp8 / LinearInt8 of a fused gate_up weight (w: [2 dim, k], gate's rows then up's,
  // bias [2 dim] or null) followed by kernels::SiluMul, as one W8A16 GEMV with SiluMul in its
  // epilogue (kernels::GemvW8ArgsT::silu_mul): out [m, dim] with row stride ldo, the bits of the
  // two ops. Returns false and launches nothing where the linear layer would not run the GEMV
  // (more rows than fp8_gemv_max_rows() / int8_gemv_max_rows(), or operands it refuses); the
  // caller then runs the layer and SiluMul. T: __nv_bfloat16 or __half; W: Fp8Weight or
  // Int8Weight (instantiated in gemm.cc).
  template <typename T, typename W>
  Result<bool> GateUpSiluW8(const T* x, int64_t ldx, int64_t m, W w, int64_t dim, int64_t k,
                            const T* bias, T* out, int64_t ldo, cudaStream_t stream,
                            L2Prefetch prefetch = {});
  // LinearFp8 / LinearInt8 of a fused qkv weight (w: [n, k], n = (num_heads + 2 num_kv_heads)
  // * head_dim) followed by the decode rows' kernels::RopeStoreKv(rope), as one W8A16 GEMV with
  // RoPE and the KV-cache write in its epilogue (kernels::GemvW8ArgsT::rope): x's m rows are
  // rope's tokens, the output goes to rope.qkv (row stride rope.ld), the bits of the two ops.
  // False and nothing launched as GateUpSiluW8, also where the epilogue does not take rope (q
  // codes, input scales). C: T or __nv_fp8_e4m3, the cache's element type.
  template <typename T, typename W, typename C>
  Result<bool> QkvRopeW8(const T* x, int64_t ldx, int64_t m, W w, int64_t n, int64_t k,
                         const T* bias, const kernels::RopeKvArgsT<T, C>& rope, cudaStream_t stream,
                         L2Prefetch prefetch = {});

  // Times up to `candidates` heuristic algorithms for `shape` and caches the fastest. The runs
  // cycle through `weights` (each [n, k]; e.g. one layer's matrix per layer) so that no run
  // finds its weights in L2, as in a forward pass; with none given, scratch copies of
  // shape.dtype are made. Returns InvalidArgument when weights are given in a type other than
  // shape.dtype. Synchronizes the stream.
  Status Tune(const GemmShape& shape, int candidates, cudaStream_t stream,
              std::span<const __nv_bfloat16* const> weights = {});
  Status Tune(const GemmShape& shape, int candidates, cudaStream_t stream,
              std::span<const __half* const> weights);
  // The same for an FP8 shape (shape.fp8), cycling through e4m3 weights.
  Status Tune(const GemmShape& shape, int candidates, cudaStream_t stream,
              std::span<const __nv_fp8_e4m3* const> weights);
  // The same for an INT8 shape (shape.int8), cycling through int8 weights.
  Status Tune(const GemmShape& shape, int candidates, cudaStream_t stream,
              std::span<const int8_t* const> weights);

  // FP8 GEMMs of at least kFp8PromptRows rows (prompt steps) run, whatever their m, the
  // algorithm TuneFp8Prompt chose for their (n, k, dtype), when it chose one; else the
  // heuristic's pick. A prompt step's GEMMs run at the GPU's power limit (an H100 at 700 W
  // drops its SM clock from 1,980 to ~1,400 MHz through one), where the fastest kernel is the
  // one that spends the least energy per product, not the one that is fastest at the top clock
  // (what the heuristic and Tune's short bursts rank by).
  static constexpr int64_t kFp8PromptRows = 4096;
  // The rows CudaRunner times prompt GEMMs at when its steps hold as many tokens.
  static constexpr int64_t kFp8PromptTuneRows = 16384;
  struct Fp8PromptTuning {
    int64_t m = kFp8PromptTuneRows, n = 0, k = 0;  // m >= kFp8PromptRows
    DType dtype = DType::kBF16;                    // the model's (Fp8GemmUnscaled's plans)
    int candidates = 8;
    double seconds = 0.1;        // each candidate's run
    __nv_fp8_e4m3* x = nullptr;  // scratch of m * k codes (overwritten)
    void* out = nullptr;         // scratch of m * n bf16
  };
  // Times up to t.candidates heuristic algorithms of the FP8 shape (t.m, t.n, t.k)
  // (Fp8GemmUnscaled's) back to back for t.seconds each on Gaussian e4m3 activations
  // (kernels::FillGaussianE4m3) and `weights` (cycled, as Tune), after running the heuristic's
  // pick as long to bring the GPU to its power limit; ranks them by the mean time of the last
  // two thirds of each run and keeps the fastest for every FP8 shape of (n, k, dtype) with
  // kFp8PromptRows rows or more. Returns at once when (n, k, dtype) has a choice already
  // (ImportTuned). InvalidArgument without weights or scratch. Synchronizes the stream.
  Status TuneFp8Prompt(const Fp8PromptTuning& t, cudaStream_t stream,
                       std::span<const __nv_fp8_e4m3* const> weights);
  bool HasFp8PromptAlgo(int64_t n, int64_t k, DType dtype) const {
    return fp8_prompt_algos_.count({n, k, dtype}) > 0;
  }

  // The algorithms Tune() chose (or ImportTuned adopted), for an engine's GEMM table; those of
  // TuneFp8Prompt as FP8 entries at the m they were timed at.
  std::vector<TunedGemm> TunedGemms() const;
  // Adopts a table entry as `shape`'s algorithm, so that Tune() of the shape then returns at
  // once; an FP8 entry of kFp8PromptRows rows or more as TuneFp8Prompt's choice for its
  // (n, k, dtype). false (nothing changes) when cuBLASLt rejects the algorithm here
  // (cublasLtMatmulAlgoCheck: another GPU or cuBLASLt version); the caller then tunes.
  Result<bool> ImportTuned(const TunedGemm& tuned);

  // Shapes with at most this many rows use kernels::Gemv (0: never). Default kGemvDefaultRows.
  void set_gemv_max_rows(int32_t rows) { gemv_max_rows_ = rows; }
  int32_t gemv_max_rows() const { return gemv_max_rows_; }
  // The same for LinearFp8 (kernels::GemvFp8). Default kFp8GemvDefaultRows.
  void set_fp8_gemv_max_rows(int32_t rows) { fp8_gemv_max_rows_ = rows; }
  int32_t fp8_gemv_max_rows() const { return fp8_gemv_max_rows_; }
  // The same for LinearInt8 (kernels::GemvInt8). Default kInt8GemvDefaultRows.
  void set_int8_gemv_max_rows(int32_t rows) { int8_gemv_max_rows_ = rows; }
  int32_t int8_gemv_max_rows() const { return int8_gemv_max_rows_; }
  // The W8A16 GEMVs (GemvFp8 / GemvInt8) in their persistent forms
  // (kernels::GemvW8ArgsT::persistent, and for FP8 at one row mma). Default on.
  void set_gemv_persistent(bool on) { gemv_persistent_ = on; }
  bool gemv_persistent() const { return gemv_persistent_; }
  // FP8 GEMMs with cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM): the tensor
  // cores' partial sums are not periodically promoted to fp32, which is faster and less exact
  // (docs/quantization.md measures both). Set before the first FP8 plan is made (plans are
  // cached per shape). Default off.
  void set_fp8_fast_accum(bool on) { fp8_fast_accum_ = on; }
  bool fp8_fast_accum() const { return fp8_fast_accum_; }
  // The most rows LinearW4 runs on kernels::W4Gemm when given a dequantization scratch.
  // Default kernels::kW4GemmMaxRows (one launch; beyond it the weights would stream again).
  void set_w4_gemm_max_rows(int32_t rows) { w4_gemm_max_rows_ = rows; }
  int32_t w4_gemm_max_rows() const { return w4_gemm_max_rows_; }

 private:
  struct Plan;
  Gemm() = default;
  Result<Plan*> GetPlan(const GemmShape& shape, int candidates);
  // The body of both Linear overloads; T is __nv_bfloat16 or __half.
  template <typename T>
  Status LinearOf(const T* x, int64_t ldx, int64_t m, const T* w, int64_t n, int64_t k,
                  const T* bias, void* out, int64_t ldo, bool out_f32, cudaStream_t stream,
                  L2Prefetch prefetch);
  template <typename T>
  Status LinearFp8Of(const T* x, int64_t ldx, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                     const T* bias, void* out, int64_t ldo, bool out_f32, Fp8Scratch scratch,
                     cudaStream_t stream, L2Prefetch prefetch);
  template <typename T>
  Status LinearFp8QuantizedOf(const __nv_fp8_e4m3* xq, const float* x_scales, int64_t m,
                              Fp8Weight w, int64_t n, int64_t k, const T* bias, T* out, int64_t ldo,
                              cudaStream_t stream);
  Status Fp8GemmUnscaledOf(const __nv_fp8_e4m3* xq, int64_t m, Fp8Weight w, int64_t n, int64_t k,
                           void* out, int64_t ldo, DType dtype, cudaStream_t stream);
  template <typename T>
  Status LinearW4Of(const T* x, int64_t ldx, int64_t m, const W4Weight& w, int64_t n, int64_t k,
                    const T* bias, void* out, int64_t ldo, bool out_f32, const W4Scratch& scratch,
                    cudaStream_t stream, L2Prefetch prefetch);
  template <typename T>
  Status LinearInt8Of(const T* x, int64_t ldx, int64_t m, Int8Weight w, int64_t n, int64_t k,
                      const T* bias, void* out, int64_t ldo, bool out_f32, Int8Scratch scratch,
                      cudaStream_t stream, L2Prefetch prefetch);
  // Launches the W8A16 GEMV g (kernels::GemvFp8 or GemvInt8 by its code type) if the linear
  // layer of w's format would run it for m rows and the kernel takes g; whether it did.
  template <typename G>
  Result<bool> MaybeGemvW8(G g, int64_t m, cudaStream_t stream);
  // Whether cuBLASLt runs `algo` for plan's shape here, within the workspace.
  bool AlgoFits(const Plan& plan, const cublasLtMatmulAlgo_t& algo);
  // Records a TuneFp8Prompt choice; drops the cached plans it applies to.
  void AdoptFp8PromptAlgo(int64_t m, int64_t n, int64_t k, DType dtype,
                          const std::array<uint64_t, 8>& algo);
  // The body of both Tune overloads; `weights` are of shape.dtype (may be empty).
  Status TuneWith(const GemmShape& shape, int candidates, cudaStream_t stream,
                  std::vector<const void*> weights);

  int32_t gemv_max_rows_ = kGemvDefaultRows;
  int32_t fp8_gemv_max_rows_ = kFp8GemvDefaultRows;
  int32_t int8_gemv_max_rows_ = kInt8GemvDefaultRows;
  bool fp8_fast_accum_ = false;
  bool gemv_persistent_ = true;
  int32_t w4_gemm_max_rows_ = kW4GemmDefaultRows;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<GemmShape, std::unique_ptr<Plan>> plans_;
  // TuneFp8Prompt's choices by (n, k, dtype): the m timed and cublasLtMatmulAlgo_t's words.
  struct PromptChoice {
    int64_t m = 0;
    std::array<uint64_t, 8> algo{};
  };
  std::map<std::tuple<int64_t, int64_t, DType>, PromptChoice> fp8_prompt_algos_;
};

}  // namespace kiln::cuda
