// The FP8 gate_up projection of a prompt step, two ways, under the power cap: what the engine ran
// before (Gemm::Fp8GemmUnscaled, cuBLASLt with the algorithm Gemm::TuneFp8Prompt picks, writing
// the unscaled gate and up sums in bf16, then kernels::SiluMulFp8) against kernels::Fp8GateUpSilu
// (SiluMul in the GEMM's epilogue, bf16 products) then kernels::QuantizeRowsFp8. Llama-3.1-8B
// shapes (k 4,096, intermediate 14,336) on Gaussian e4m3 codes (FillGaussianE4m3, as
// TuneFp8Prompt: real-looking bits set the energy a product takes). Each variant runs back to
// back for --seconds, twice, alternating, after a warm-up that brings the GPU to its power limit;
// a figure is the mean time a call over the last two thirds of a run.
//
//   gate_up_bench [--rows M] [--seconds S] [--json F]
//
// Also prints how the two paths' e4m3 outputs (the down projection's input) compare: the
// fraction of codes and row scales that are the same bits, and the largest code difference.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/gemm.h"
#include "bench_util.h"
#include "core/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/fp8_gate_up.h"
#include "kernels/quant.h"

namespace kiln::bench {
namespace {

#define CHECK_CUDA(x) BENCH_CHECK((x) == cudaSuccess)

// Fills n floats uniform in [lo, hi) on the device.
void FillUniform(float* d, int64_t n, float lo, float hi, uint32_t seed) {
  std::vector<float> h(n);
  uint32_t s = seed;
  for (auto& v : h) {
    s = s * 1664525u + 1013904223u;
    v = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.0f;
  }
  CHECK_CUDA(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

// Mean seconds a call of fn over the last two thirds of `seconds` of back-to-back calls.
double Sustained(const std::function<void()>& fn, double seconds, cudaStream_t stream) {
  std::vector<cudaEvent_t> events;
  const auto start = Clock::now();
  while (Seconds(start, Clock::now()) < seconds) {
    for (int i = 0; i < 8; ++i) {
      cudaEvent_t e;
      CHECK_CUDA(cudaEventCreate(&e));
      CHECK_CUDA(cudaEventRecord(e, stream));
      events.push_back(e);
      fn();
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  cudaEvent_t last;
  CHECK_CUDA(cudaEventCreate(&last));
  CHECK_CUDA(cudaEventRecord(last, stream));
  events.push_back(last);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const size_t first = events.size() / 3;
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, events[first], events.back()));
  const double per_call = ms * 1e-3 / static_cast<double>(events.size() - 1 - first);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return per_call;
}

}  // namespace

int Main(int argc, char** argv) {
  int64_t m = 15360;
  double seconds = 2.0;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) {
      m = std::atoll(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: gate_up_bench [--rows M] [--seconds S] [--json F]\n");
      return 2;
    }
  }
  if (m < 4096 || m > 65536 || seconds <= 0) {
    std::fprintf(stderr, "gate_up_bench: --rows 4096..65536 (prompt steps), --seconds > 0\n");
    return 2;
  }
  constexpr int64_t k = 4096, dim = 14336, n = 2 * dim;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  __nv_fp8_e4m3 *x, *w, *q_a, *q_b;
  __nv_bfloat16 *y, *h;
  float *rows, *cols, *s_a, *s_b;
  CHECK_CUDA(cudaMalloc(&x, m * k));
  CHECK_CUDA(cudaMalloc(&w, n * k));
  CHECK_CUDA(cudaMalloc(&q_a, m * dim));
  CHECK_CUDA(cudaMalloc(&q_b, m * dim));
  CHECK_CUDA(cudaMalloc(&y, m * n * 2));
  CHECK_CUDA(cudaMalloc(&h, m * dim * 2));
  CHECK_CUDA(cudaMalloc(&rows, m * 4));
  CHECK_CUDA(cudaMalloc(&cols, n * 4));
  CHECK_CUDA(cudaMalloc(&s_a, m * 4));
  CHECK_CUDA(cudaMalloc(&s_b, m * 4));
  // sigma 448 / 4.5: a row's amax near 448, as per-row scaling makes it. The scales put gate
  // and up near N(0, 2^2), where silu bends.
  CHECK_CUDA(kernels::FillGaussianE4m3(x, m * k, 1, 448.0f / 4.5f, stream));
  CHECK_CUDA(kernels::FillGaussianE4m3(w, n * k, 2, 448.0f / 4.5f, stream));
  FillUniform(rows, m, 1e-3f, 2e-3f, 3);
  FillUniform(cols, n, 1.5e-3f, 3e-3f, 4);
  auto gemm_or = cuda::Gemm::Create();
  BENCH_CHECK(gemm_or.ok());
  cuda::Gemm& gemm = **gemm_or;
  const cuda::Fp8Weight weight{w, nullptr, nullptr};
  {
    cuda::Gemm::Fp8PromptTuning t;
    t.m = m;
    t.n = n;
    t.k = k;
    t.x = q_a;  // scratch: overwritten with Gaussian codes (m * dim >= m * k)
    t.out = y;
    const __nv_fp8_e4m3* weights[] = {w};
    BENCH_CHECK(gemm.TuneFp8Prompt(t, stream, weights).ok());
  }
  const kernels::Fp8InputScales scales{rows, cols, nullptr};
  kernels::Fp8GateUpSiluArgs args;
  args.x = x;
  args.m = m;
  args.k = k;
  args.w = w;
  args.dim = dim;
  args.scales = scales;
  args.out = h;
  args.ldo = dim;
  BENCH_CHECK(kernels::Fp8GateUpSiluSupported(args));

  auto cublas_gemm = [&] {
    BENCH_CHECK(gemm.Fp8GemmUnscaled(x, m, weight, n, k, y, n, stream).ok());
  };
  auto before = [&] {
    cublas_gemm();
    CHECK_CUDA(kernels::SiluMulFp8(y, n, static_cast<int32_t>(m), dim, q_a, dim, s_a, nullptr,
                                   stream, scales));
  };
  auto fused_gemm = [&] { CHECK_CUDA(kernels::Fp8GateUpSilu(args, stream)); };
  auto fused = [&] {
    fused_gemm();
    CHECK_CUDA(kernels::QuantizeRowsFp8(h, dim, m, dim, q_b, dim, s_b, stream));
  };

  // The two paths' outputs.
  before();
  fused();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint8_t> ca(m * dim), cb(m * dim);
  std::vector<float> sa(m), sb(m);
  CHECK_CUDA(cudaMemcpy(ca.data(), q_a, ca.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(cb.data(), q_b, cb.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(sa.data(), s_a, m * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(sb.data(), s_b, m * 4, cudaMemcpyDeviceToHost));
  int64_t same_codes = 0, same_scales = 0;
  double max_diff = 0.0, sum_sq_diff = 0.0, sum_sq = 0.0;
  for (int64_t r = 0; r < m; ++r) {
    same_scales += sa[r] == sb[r];
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t i = r * dim + c;
      same_codes += ca[i] == cb[i];
      const double va = F8E4M3ToF32(ca[i]) * sa[r], vb = F8E4M3ToF32(cb[i]) * sb[r];
      max_diff = std::max(max_diff, std::fabs(va - vb));
      sum_sq_diff += (va - vb) * (va - vb);
      sum_sq += va * va;
    }
  }

  // Against the exact sums (double, from the codes) of the first kExactRows rows: each path's
  // products (cuBLASLt's bf16 sums through the same epilogue arithmetic on the host, and
  // Fp8GateUpSilu's output) against those of the exact sums: the accumulators' precision.
  constexpr int64_t kExactRows = 8;
  std::vector<uint8_t> xs(kExactRows * k), ws(n * k);
  std::vector<uint16_t> ys(kExactRows * n), hs(kExactRows * dim);
  std::vector<float> rs(kExactRows), cs(n);
  CHECK_CUDA(cudaMemcpy(xs.data(), x, xs.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(ws.data(), w, ws.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(rs.data(), rows, kExactRows * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(cs.data(), cols, n * 4, cudaMemcpyDeviceToHost));
  cublas_gemm();
  CHECK_CUDA(kernels::Fp8GateUpSilu(args, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(ys.data(), y, ys.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hs.data(), h, hs.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> lut(256);
  for (int c = 0; c < 256; ++c) lut[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
  auto bf = [](double v) { return BF16ToF32(F32ToBF16(static_cast<float>(v))); };
  auto product = [&](double gy, double uy, int64_t r, int64_t c) {
    const double g = bf(bf(gy) * rs[r] * cs[c]), u = bf(bf(uy) * rs[r] * cs[dim + c]);
    return bf(bf(g / (1.0 + std::exp(-g))) * u);
  };
  double err_lt = 0.0, err_ours = 0.0, err_sums = 0.0, ref_sq = 0.0, sums_sq = 0.0;
  // And the down projection's input each path hands on (codes times row scale) against the
  // exact products: the e4m3 rounding that follows either way, next to the sums' error.
  double code_err_lt = 0.0, code_err_ours = 0.0;
  for (int64_t r = 0; r < kExactRows; ++r) {
    std::vector<double> exact(n);
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += double{lut[xs[r * k + i]]} * lut[ws[j * k + i]];
      exact[j] = acc;
      const double d = BF16ToF32(ys[r * n + j]) - acc;
      err_sums += d * d;
      sums_sq += acc * acc;
    }
    for (int64_t c = 0; c < dim; ++c) {
      const double want = product(exact[c], exact[dim + c], r, c);
      const double lt = product(BF16ToF32(ys[r * n + c]), BF16ToF32(ys[r * n + dim + c]), r, c);
      const double ours = BF16ToF32(hs[r * dim + c]);
      const double dq_lt = double{lut[ca[r * dim + c]]} * sa[r];
      const double dq_ours = double{lut[cb[r * dim + c]]} * sb[r];
      code_err_lt += (dq_lt - want) * (dq_lt - want);
      code_err_ours += (dq_ours - want) * (dq_ours - want);
      err_lt += (lt - want) * (lt - want);
      err_ours += (ours - want) * (ours - want);
      ref_sq += want * want;
    }
  }

  nlohmann::json out;
  out["exact_rows"] = kExactRows;
  out["cublaslt_sums_rel_rms_err"] = std::sqrt(err_sums / sums_sq);
  out["cublaslt_products_rel_rms_err"] = std::sqrt(err_lt / ref_sq);
  out["fused_products_rel_rms_err"] = std::sqrt(err_ours / ref_sq);
  out["cublaslt_codes_rel_rms_err"] = std::sqrt(code_err_lt / ref_sq);
  out["fused_codes_rel_rms_err"] = std::sqrt(code_err_ours / ref_sq);
  std::printf(
      "against exact sums (%ld rows): cuBLASLt's bf16 sums rel. RMS err %.3g; products "
      "rel. RMS err: cuBLASLt path %.3g, Fp8GateUpSilu %.3g\n",
      static_cast<long>(kExactRows), out["cublaslt_sums_rel_rms_err"].get<double>(),
      out["cublaslt_products_rel_rms_err"].get<double>(),
      out["fused_products_rel_rms_err"].get<double>());
  std::printf(
      "down's e4m3 input against the exact products: rel. RMS err cuBLASLt path %.4g, "
      "Fp8GateUpSilu %.4g\n",
      out["cublaslt_codes_rel_rms_err"].get<double>(),
      out["fused_codes_rel_rms_err"].get<double>());
  out["rows"] = m;
  out["k"] = k;
  out["intermediate"] = dim;
  out["seconds"] = seconds;
  out["same_codes"] = static_cast<double>(same_codes) / static_cast<double>(m * dim);
  out["same_row_scales"] = static_cast<double>(same_scales) / static_cast<double>(m);
  out["max_abs_diff"] = max_diff;
  out["rel_rms_diff"] = std::sqrt(sum_sq_diff / std::max(sum_sq, 1e-30));
  std::printf("m = %ld, k = %ld, intermediate = %ld, %.1f s a run\n", static_cast<long>(m),
              static_cast<long>(k), static_cast<long>(dim), seconds);
  std::printf(
      "outputs: %.6f of codes and %.6f of row scales the same bits; max |diff| %.3g, "
      "relative RMS diff %.3g\n",
      out["same_codes"].get<double>(), out["same_row_scales"].get<double>(), max_diff,
      out["rel_rms_diff"].get<double>());

  Sustained(before, seconds, stream);  // to the power limit
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  struct Variant {
    const char* name;
    std::function<void()> fn;
  };
  const Variant variants[] = {{"cublaslt_gemm+silu_mul_fp8", before},
                              {"fp8_gate_up_silu+quantize", fused},
                              {"cublaslt_gemm", cublas_gemm},
                              {"fp8_gate_up_silu", fused_gemm}};
  std::printf("%-28s %10s %10s %10s\n", "variant", "run 1 ms", "run 2 ms", "GEMM TF/s");
  for (int pair = 0; pair < 2; ++pair) {
    double t[2][2];
    for (int round = 0; round < 2; ++round) {
      for (int v = 0; v < 2; ++v)
        t[v][round] = Sustained(variants[2 * pair + v].fn, seconds, stream);
    }
    for (int v = 0; v < 2; ++v) {
      const Variant& var = variants[2 * pair + v];
      const double best = std::min(t[v][0], t[v][1]);
      out["variants"][var.name] = {{"ms", {t[v][0] * 1e3, t[v][1] * 1e3}},
                                   {"tflops", flops / best * 1e-12}};
      std::printf("%-28s %10.3f %10.3f %10.1f\n", var.name, t[v][0] * 1e3, t[v][1] * 1e3,
                  flops / best * 1e-12);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
