// silu_fp8_bench: kernels::SiluMulFp8 (the down projection's input of an FP8 model) on its own,
// Llama-3.1-8B's intermediate size (14,336), at prompt-step and decode row counts, with the FP8
// gate_up GEMM's scales fused into it (Fp8InputScales, as the runner calls it from 48 rows) and
// without, against the copy bandwidth measured in the same run (bytes: gate_up in, codes and
// row scales out). The last line is a checksum of both outputs at the largest row count, to
// compare two builds of the kernel bit for bit.
//
//   build/bench/silu_fp8_bench [--json F]
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cuda_yardstick.h"
#include "kernels/elementwise.h"

namespace kiln::bench {
namespace {

#define CUDA_CHECK(expr) BENCH_CHECK((expr) == cudaSuccess)

// FNV-1a over bytes.
uint64_t Fnv(uint64_t h, const void* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

int Main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: silu_fp8_bench [--json F]\n");
      return 2;
    }
  }
  constexpr int32_t kDim = 14336;
  constexpr int64_t kMaxRows = 16384;
  __nv_bfloat16* gate_up = nullptr;
  __nv_fp8_e4m3* out = nullptr;
  float *out_scales = nullptr, *row_scales = nullptr, *col_scales = nullptr;
  CUDA_CHECK(cudaMalloc(&gate_up, kMaxRows * 2 * kDim * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&out, kMaxRows * kDim));
  CUDA_CHECK(cudaMalloc(&out_scales, kMaxRows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&row_scales, kMaxRows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&col_scales, 2 * kDim * sizeof(float)));
  // Random bf16 sums of both signs in [1, 4) (the unscaled GEMM output's scale), random scales.
  std::mt19937 rng(1);
  std::vector<uint16_t> sums(kMaxRows * 2 * kDim);
  for (uint16_t& v : sums) v = static_cast<uint16_t>(0x3f80 + (rng() & 0xff) + ((rng() & 1) << 15));
  std::vector<float> rows(kMaxRows), cols(2 * kDim);
  for (float& v : rows) v = 0.01f + static_cast<float>(rng() % 1000) * 1e-5f;
  for (float& v : cols) v = 0.001f + static_cast<float>(rng() % 1000) * 1e-6f;
  CUDA_CHECK(cudaMemcpy(gate_up, sums.data(), sums.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(row_scales, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(col_scales, cols.data(), cols.size() * 4, cudaMemcpyHostToDevice));
  const kernels::Fp8InputScales scales{row_scales, col_scales, nullptr};

  const double copy_bw = DeviceCopyBandwidth();
  nlohmann::ordered_json json;
  json["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  std::printf("copy bandwidth %.0f GB/s\n%8s %14s %8s %14s %8s\n", copy_bw / 1e9, "rows",
              "scaled us", "% copy", "unscaled us", "% copy");
  for (const int64_t m : {kMaxRows, int64_t{4096}, int64_t{256}, int64_t{64}}) {
    auto run = [&](bool scaled) {
      return MedianEventSeconds(3, 20, [&] {
        CUDA_CHECK(kernels::SiluMulFp8(gate_up, 2 * kDim, static_cast<int32_t>(m), kDim, out, kDim,
                                       out_scales, nullptr, nullptr,
                                       scaled ? scales : kernels::Fp8InputScales{}));
      });
    };
    const double scaled = run(true), unscaled = run(false);
    const double bytes = static_cast<double>(m) * (2.0 * kDim * 2 + kDim + 4);
    json["rows"].push_back({{"rows", m},
                            {"scaled_us", scaled * 1e6},
                            {"scaled_fraction_of_copy", bytes / scaled / copy_bw},
                            {"unscaled_us", unscaled * 1e6},
                            {"unscaled_fraction_of_copy", bytes / unscaled / copy_bw}});
    std::printf("%8ld %14.1f %7.0f%% %14.1f %7.0f%%\n", static_cast<long>(m), scaled * 1e6,
                100 * bytes / scaled / copy_bw, unscaled * 1e6, 100 * bytes / unscaled / copy_bw);
  }
  uint64_t hash = 1469598103934665603ull;
  std::vector<uint8_t> codes(kMaxRows * kDim);
  std::vector<float> out_rows(kMaxRows);
  for (const bool scaled : {true, false}) {
    CUDA_CHECK(kernels::SiluMulFp8(gate_up, 2 * kDim, kMaxRows, kDim, out, kDim, out_scales,
                                   nullptr, nullptr, scaled ? scales : kernels::Fp8InputScales{}));
    CUDA_CHECK(cudaMemcpy(codes.data(), out, codes.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(
        cudaMemcpy(out_rows.data(), out_scales, out_rows.size() * 4, cudaMemcpyDeviceToHost));
    hash = Fnv(Fnv(hash, codes.data(), codes.size()), out_rows.data(), out_rows.size() * 4);
  }
  char hex[20];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  json["checksum"] = hex;
  std::printf("checksum %s\n", hex);
  if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << "\n";
  for (void* p :
       {static_cast<void*>(gate_up), static_cast<void*>(out), static_cast<void*>(out_scales),
        static_cast<void*>(row_scales), static_cast<void*>(col_scales)}) {
    cudaFree(p);
  }
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
