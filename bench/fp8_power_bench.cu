// FP8 prompt-step GEMMs under the power cap: cuBLASLt's heuristic candidates for the
// Llama-3.1-8B layers at m rows (the e4m3 GEMM of Gemm::Fp8GemmUnscaled: e4m3 operands, bf16
// unscaled sums, fast accumulation), each run back to back for --seconds on Gaussian data
// (kernels::FillGaussianE4m3: signs and exponents spread as in real weights and activations), so
// that the GPU sits at its power limit as it does through a prompt step. A short burst on
// constant data (what Gemm::Tune times) ranks kernels by their speed at the top clock; sustained
// on real-looking data the clock drops to what the power limit allows, and the ranking is by
// energy per product. Gemm::TuneFp8Prompt ranks the engine's candidates this way at start-up.
//
//   fp8_power_bench [--rows M] [--seconds S] [--candidates N] [--json F]
//
// Prints, per layer and candidate: the kernel's tile / stages / cluster (cuBLASLt's config
// attributes), TFLOP/s in a burst of 8 on constant data, and TFLOP/s sustained on Gaussian
// data (log nvidia-smi's clocks beside it to see the cap).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "kernels/quant.h"

namespace kiln::bench {
namespace {

// A benchmark has no result once its setup failed (bench_util.h).
#define CHECK_CUDA(x) BENCH_CHECK((x) == cudaSuccess)
#define CHECK_LT(x) BENCH_CHECK((x) == CUBLAS_STATUS_SUCCESS)

struct Layer {
  const char* name;
  int64_t n, k;
};
constexpr Layer kLayers[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

int ConfigAttr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return -1;
  }
  return static_cast<int>(v);
}

}  // namespace

int Main(int argc, char** argv) {
  int64_t m = 16384;
  double seconds = 1.0;
  int candidates = 16;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) {
      m = std::atoll(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--candidates" && i + 1 < argc) {
      candidates = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: fp8_power_bench [--rows M] [--seconds S] [--candidates N] [--json F]\n");
      return 2;
    }
  }
  if (m < 1 || m > 65536 || seconds <= 0 || candidates < 1 || candidates > 64) {
    std::fprintf(stderr, "fp8_power_bench: --rows 1..65536, --seconds > 0, --candidates 1..64\n");
    return 2;
  }
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t{32} << 20;
  void *ws, *x, *w, *xc, *wc, *d;
  int64_t max_k = 14336, max_n = 28672;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  CHECK_CUDA(cudaMalloc(&x, m * max_k));
  CHECK_CUDA(cudaMalloc(&xc, m * max_k));
  CHECK_CUDA(cudaMalloc(&w, max_n * 4096));  // the largest n * k: gate_up's, = down's * 2
  CHECK_CUDA(cudaMalloc(&wc, max_n * 4096));
  CHECK_CUDA(cudaMalloc(&d, m * max_n * 2));
  // sigma 448 / 4.5: a row's amax near 448, as per-row scaling makes it; constant: 0x3c (1.5).
  CHECK_CUDA(kernels::FillGaussianE4m3(static_cast<__nv_fp8_e4m3*>(x), m * max_k, 1, 448.0f / 4.5f,
                                       nullptr));
  CHECK_CUDA(kernels::FillGaussianE4m3(static_cast<__nv_fp8_e4m3*>(w), max_n * 4096, 2,
                                       448.0f / 4.5f, nullptr));
  CHECK_CUDA(cudaMemset(xc, 0x3c, m * max_k));
  CHECK_CUDA(cudaMemset(wc, 0x3c, max_n * 4096));
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));

  nlohmann::json out;
  out["rows"] = m;
  out["seconds"] = seconds;
  std::printf("m = %ld, %.2f s sustained per candidate\n%-8s %3s %5s %6s %7s %5s %12s %14s\n",
              static_cast<long>(m), seconds, "layer", "#", "tile", "stages", "cluster", "splitk",
              "burst const", "sustained gauss");
  for (const Layer& l : kLayers) {
    cublasLtMatmulDesc_t desc;
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int8_t on = 1;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, 1));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t la, lb, ld;
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, l.k, l.n, l.k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, l.k, m, l.k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, l.n, m, l.n));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t cands[64] = {};
    int found = 0;
    CHECK_LT(
        cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, candidates, cands, &found));
    const double flops = 2.0 * m * l.n * l.k;
    const float alpha = 1.0f, beta = 0.0f;
    for (int c = 0; c < found; ++c) {
      const cublasLtMatmulAlgo_t& algo = cands[c].algo;
      auto run = [&](const void* a_ptr, const void* b_ptr) {
        return cublasLtMatmul(lt, desc, &alpha, a_ptr, la, b_ptr, lb, &beta, d, ld, d, ld, &algo,
                              ws, ws_bytes, nullptr) == CUBLAS_STATUS_SUCCESS;
      };
      if (!run(wc, xc)) continue;
      CHECK_CUDA(cudaDeviceSynchronize());
      // Burst: 8 runs on constant data after a pause (as Gemm::Tune times them).
      CHECK_CUDA(cudaEventRecord(e0));
      for (int i = 0; i < 8; ++i) run(wc, xc);
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float burst_ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&burst_ms, e0, e1));
      // Sustained: Gaussian data for `seconds`, timed over the second half.
      const Clock::time_point start = Clock::now();
      while (Seconds(start, Clock::now()) < seconds / 2) {
        for (int i = 0; i < 4; ++i) run(w, x);
        CHECK_CUDA(cudaDeviceSynchronize());
      }
      int iters = 0;
      CHECK_CUDA(cudaEventRecord(e0));
      while (Seconds(start, Clock::now()) < seconds) {
        for (int i = 0; i < 4; ++i) run(w, x);
        iters += 4;
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
      }
      float sus_ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&sus_ms, e0, e1));
      const double burst_tf = flops / (burst_ms / 8 * 1e-3) / 1e12;
      const double sus_tf = flops / (sus_ms / iters * 1e-3) / 1e12;
      const int tile = ConfigAttr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
      const int stages = ConfigAttr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
      const int cluster = ConfigAttr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
      const int splitk = ConfigAttr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
      const int algo_id = ConfigAttr(algo, CUBLASLT_ALGO_CONFIG_ID);
      std::printf("%-8s %3d %5d %6d %7d %5d %12.0f %14.0f\n", l.name, c, tile, stages, cluster,
                  splitk, burst_tf, sus_tf);
      std::fflush(stdout);
      nlohmann::json row;
      row["layer"] = l.name;
      row["index"] = c;
      row["algo_id"] = algo_id;
      row["tile_id"] = tile;
      row["stages_id"] = stages;
      row["cluster_shape_id"] = cluster;
      row["splitk"] = splitk;
      row["burst_const_tflops"] = burst_tf;
      row["sustained_gauss_tflops"] = sus_tf;
      row["sustained_ms"] = sus_ms / iters;
      out["candidates"].push_back(row);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
