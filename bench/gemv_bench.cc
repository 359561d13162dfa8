// gemv_bench: the decode linear layers of a Llama-3.1-8B shape on their own, each next to the
// copy bandwidth measured in the same run.
//   - few rows (m = 1, 2, 4, 8): kernels::Gemv against cuBLASLt's heuristic pick: which one
//     cuda::Gemm should use up to which m (its gemv_max_rows);
//   - decode batches (m = 16, 64, 256): cuBLASLt's heuristic pick against Gemm::Tune's choice;
//   - with --prefill, prompt steps instead (m = 2,048, 8,192, 16,384): the same two in TFLOP/s,
//     on random-looking operands (constant ones flatter the tensor cores), next to the bf16
//     8192^3 GEMM (tuned) of the same run; --prefill --fp8: the e4m3 GEMMs of the FP8 layers
//     alone, heuristic / tuned of 16 / slow accumulation, against the FP8 8192^3 GEMM;
// Achieved bandwidth = (weight + activation bytes) / time; every run reads another copy of the
// weights (16 or more copies, as the 32 layers of a forward pass do), so none comes from L2.
//
//   - with --fp8, the FP8 linear layers (Gemm::LinearFp8, model/quantization.h) against the bf16
//     ones of the same run, m = 1 .. 16,384: the W8A16 GEMV (kernels::GemvFp8) up to 8 rows,
//     and the W8A8 path (per-token quantization + e4m3 cuBLASLt GEMM + scale epilogue, all
//     three timed together) at every m: where LinearFp8 should switch (its fp8_gemv_max_rows),
//     and the speed-up over bf16 (the best of Gemv / tuned cuBLASLt).
//
//   - with --w4 and / or --int8, the decode batches m = 1 .. 64 of the W4A16 layers
//     (Gemm::LinearW4: kernels::W4Gemm on repacked 4-bit weights, group size 128, against its
//     other kernel choice for m, "w4 alt": at 1 row the k-split warps (W4GemvKernel) where the
//     default streams the row (W4GemvStreamKernel), up to 8 rows the other warp count, from 9 rows
//     the k-split warps instead of the block tiles; beyond 64 rows, m = 128 .. 2,048, its
//     dequantize-to-bf16 + cuBLASLt path against the W4Gemm launches of 64 rows each) and of the
//     INT8 ones (Gemm::LinearInt8: the W8A16 GEMV up to 8 rows, and per-token quantization +
//     int8 cuBLASLt GEMM (tuned) + scale epilogue at every m) against the bf16 layers of the
//     same run (the best of Gemv and tuned cuBLASLt), each next to its roofline: the bytes it
//     must move (weights, scales, x, out) over the copy bandwidth.
//
//   - with --chain, the 128 W8A16 GEMVs of a batch-1 FP8 decode step of the 8B alone, in a CUDA
//     graph as the runner replays them (RunChain below).
//
//   build/bench/gemv_bench [--json F] [--prefill [--fp8] | --fp8 | --chain | --w4 [--w4-slice-mib
//   8,16,...]
//                          [--w4-splits 1,2,...] --int8]
//   (--w4-slice-mib: the many-row W4A16 path also with dequantization slices of these sizes;
//   --w4-splits: the block tiles, 9 .. 64 rows, also with these k splits; --rows: only these m,
//   also with --prefill --fp8, e.g. the ~1,000-row eager decode steps)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "core/buffer.h"
#include "cuda_yardstick.h"
#include "kernels/elementwise.h"
#include "kernels/launch.h"
#include "kernels/quant.h"
#include "kernels/w4a16.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;
using bf16 = __nv_bfloat16;

struct Layer {
  const char* name;
  int64_t n, k;
  bool out_f32;
};

// The linear layers of a Llama-3.1-8B decoder layer (hidden 4096, 32 q / 8 kv heads of 128,
// intermediate 14336).
constexpr Layer kLlama8bLayers[] = {{"qkv", 6144, 4096, false},
                                    {"o", 4096, 4096, false},
                                    {"gate_up", 28672, 4096, false},
                                    {"down", 4096, 14336, false}};

// Seconds per call (median of 5 rounds over every weight copy, after one warm-up round that
// also runs the heuristic query).
double TimeLinear(cuda::Gemm& gemm, const std::vector<const bf16*>& weights, const bf16* x,
                  int64_t m, const Layer& l, void* out) {
  const double round = bench::MedianEventSeconds(1, 5, [&] {
    for (const bf16* w : weights) {
      BENCH_CHECK(gemm.Linear(x, l.k, m, w, l.n, l.k, nullptr, out, l.n, l.out_f32, nullptr).ok());
    }
  });
  return round / static_cast<double>(weights.size());
}

// Random-looking bf16 bits in [0.5, 2) (scaled by 2^-6 for activations: ~[0.008, 0.03)).
void FillRandom(DeviceBuffer& b, uint16_t exponent_bits) {
  std::vector<uint16_t> host(b.size() / 2);
  std::mt19937 rng(3);
  for (uint16_t& v : host) v = static_cast<uint16_t>(exponent_bits + (rng() & 0xff));
  BENCH_CHECK(b.CopyFromHost(host.data(), host.size() * 2).ok());
}

// Prompt-step GEMMs: TFLOP/s of cuBLASLt's heuristic pick and of Tune's, against the 8192^3
// GEMM of the same run.
int RunPrefill(const std::string& json_path) {
  Json out;
  const auto& layers = kLlama8bLayers;
  constexpr int64_t kMaxRows = 16384;
  DeviceBuffer x = DeviceBuffer::Allocate(kMaxRows * 14336 * 2).value();
  DeviceBuffer result = DeviceBuffer::Allocate(kMaxRows * 28672 * 2).value();
  FillRandom(x, 0x3c00);
  double peak = 0;
  {
    const Layer square{"8192^3", 8192, 8192, false};
    DeviceBuffer w = DeviceBuffer::Allocate(8192 * 8192 * 2).value();
    FillRandom(w, 0x3f00);
    auto g = cuda::Gemm::Create();
    BENCH_CHECK(g.ok());
    (*g)->set_gemv_max_rows(0);
    const std::vector<const bf16*> weights = {static_cast<const bf16*>(w.data())};
    BENCH_CHECK((*g)->Tune({8192, 8192, 8192, 8192, 8192, false, false}, 8, nullptr, weights).ok());
    peak =
        2.0 * 8192 * 8192 * 8192 /
        TimeLinear(**g, weights, static_cast<const bf16*>(x.data()), 8192, square, result.data());
  }
  out["gemm_bf16_8192_tflops"] = peak / 1e12;
  std::printf("bf16 8192^3 (tuned): %.0f TFLOP/s\n%-8s %6s %14s %14s\n", peak / 1e12, "layer", "m",
              "heuristic", "tuned (of 8)");
  auto heuristic = cuda::Gemm::Create();
  auto tuned = cuda::Gemm::Create();
  BENCH_CHECK(heuristic.ok() && tuned.ok());
  (*heuristic)->set_gemv_max_rows(0);
  (*tuned)->set_gemv_max_rows(0);
  for (const Layer& l : layers) {
    DeviceBuffer w = DeviceBuffer::Allocate(l.n * l.k * 2 * 2).value();
    FillRandom(w, 0x3f00);
    const std::vector<const bf16*> weights = {static_cast<const bf16*>(w.data()),
                                              static_cast<const bf16*>(w.data()) + l.n * l.k};
    const auto* xp = static_cast<const bf16*>(x.data());
    for (int64_t m : {2048, 8192, 16384}) {
      const double flops = 2.0 * m * l.n * l.k;
      const double h = TimeLinear(**heuristic, weights, xp, m, l, result.data());
      const cuda::GemmShape shape{m, l.n, l.k, l.k, l.n, l.out_f32, false};
      BENCH_CHECK((*tuned)->Tune(shape, 8, nullptr, weights).ok());
      const double t = TimeLinear(**tuned, weights, xp, m, l, result.data());
      out["prefill"].push_back({{"layer", l.name},
                                {"m", m},
                                {"heuristic_tflops", flops / h / 1e12},
                                {"tuned_tflops", flops / t / 1e12}});
      std::printf("%-8s %6ld %8.0f (%3.0f%%) %8.0f (%3.0f%%)\n", l.name, static_cast<long>(m),
                  flops / h / 1e12, 100 * flops / h / peak, flops / t / 1e12,
                  100 * flops / t / peak);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// FP8 prompt-step GEMMs (the e4m3 cuBLASLt GEMM alone, Gemm::Fp8GemmUnscaled, as the runner
// calls it from 48 rows): TFLOP/s of cuBLASLt's heuristic pick and of Tune's best of 16, with and
// without fast accumulation, against the FP8 8192^3 GEMM (tuned, fast accumulation) of the run.
int RunPrefillFp8(const std::string& json_path, const std::vector<int>& rows) {
  Json out;
  const auto& layers = kLlama8bLayers;
  constexpr int64_t kMaxRows = 16384;
  constexpr int kCandidates = 16;
  DeviceBuffer x16 = DeviceBuffer::Allocate(kMaxRows * 14336 * 2).value();
  DeviceBuffer xq = DeviceBuffer::Allocate(kMaxRows * 14336).value();
  DeviceBuffer sx = DeviceBuffer::Allocate(kMaxRows * 4).value();
  DeviceBuffer result = DeviceBuffer::Allocate(kMaxRows * 28672 * 2).value();
  FillRandom(x16, 0x3c00);
  BENCH_CHECK(kernels::QuantizeRowsFp8(static_cast<const bf16*>(x16.data()), 14336, kMaxRows, 14336,
                                       static_cast<__nv_fp8_e4m3*>(xq.data()), 14336,
                                       static_cast<float*>(sx.data()), nullptr) == cudaSuccess);
  // e4m3 weights (two copies) quantized from random bf16, per-channel scales.
  struct Fp8Copies {
    DeviceBuffer w, s;
    std::vector<cuda::Fp8Weight> weights;
    std::vector<const __nv_fp8_e4m3*> raw;
  };
  auto make_weights = [](int64_t n, int64_t k) {
    Fp8Copies c;
    DeviceBuffer w16 = DeviceBuffer::Allocate(n * k * 2).value();
    FillRandom(w16, 0x3f00);
    c.w = DeviceBuffer::Allocate(2 * n * k).value();
    c.s = DeviceBuffer::Allocate(2 * n * 4).value();
    for (int i = 0; i < 2; ++i) {
      auto* w8 = static_cast<__nv_fp8_e4m3*>(c.w.data()) + i * n * k;
      auto* s = static_cast<float*>(c.s.data()) + i * n;
      BENCH_CHECK(kernels::QuantizeRowsFp8(static_cast<const bf16*>(w16.data()), k, n, k, w8, k, s,
                                           nullptr) == cudaSuccess);
      c.weights.push_back({w8, s});
      c.raw.push_back(w8);
    }
    return c;
  };
  const auto* xqp = static_cast<const __nv_fp8_e4m3*>(xq.data());
  auto* outp = static_cast<bf16*>(result.data());
  auto time = [&](cuda::Gemm& g, const Fp8Copies& c, int64_t m, int64_t n, int64_t k) {
    const double round = bench::MedianEventSeconds(1, 5, [&] {
      for (const cuda::Fp8Weight& w : c.weights) {
        BENCH_CHECK(g.Fp8GemmUnscaled(xqp, m, w, n, k, outp, n, nullptr).ok());
      }
    });
    return round / static_cast<double>(c.weights.size());
  };
  double peak = 0;
  {
    const Fp8Copies c = make_weights(8192, 8192);
    auto g = cuda::Gemm::Create();
    BENCH_CHECK(g.ok());
    (*g)->set_fp8_fast_accum(true);
    cuda::GemmShape shape{8192, 8192, 8192, 8192, 8192, false, false};
    shape.fp8 = true;
    BENCH_CHECK((*g)->Tune(shape, kCandidates, nullptr, std::span(c.raw)).ok());
    peak = 2.0 * 8192 * 8192 * 8192 / time(**g, c, 8192, 8192, 8192);
  }
  out["gemm_fp8_8192_tflops"] = peak / 1e12;
  std::printf("fp8 8192^3 (tuned, fast accumulation): %.0f TFLOP/s\n%-8s %6s %14s %14s %14s\n",
              peak / 1e12, "layer", "m", "heuristic", "tuned (of 16)", "slow accum");
  for (const Layer& l : layers) {
    const Fp8Copies c = make_weights(l.n, l.k);
    std::vector<int64_t> ms = {2048, 4096, 8192, 16384};
    if (!rows.empty()) ms.assign(rows.begin(), rows.end());
    for (int64_t m : ms) {
      const double flops = 2.0 * m * l.n * l.k;
      double t[3];
      for (int v = 0; v < 3; ++v) {  // heuristic (fast), tuned (fast), tuned (slow accumulation)
        auto g = cuda::Gemm::Create();
        BENCH_CHECK(g.ok());
        (*g)->set_fp8_fast_accum(v < 2);
        if (v > 0) {
          cuda::GemmShape shape{m, l.n, l.k, l.k, l.n, false, false};
          shape.fp8 = true;
          BENCH_CHECK((*g)->Tune(shape, kCandidates, nullptr, std::span(c.raw)).ok());
        }
        t[v] = time(**g, c, m, l.n, l.k);
      }
      out["prefill_fp8"].push_back({{"layer", l.name},
                                    {"m", m},
                                    {"heuristic_tflops", flops / t[0] / 1e12},
                                    {"tuned_tflops", flops / t[1] / 1e12},
                                    {"tuned_slow_accum_tflops", flops / t[2] / 1e12}});
      std::printf("%-8s %6ld", l.name, static_cast<long>(m));
      for (double tv : t)
        std::printf(" %8.0f (%3.0f%%)", flops / tv / 1e12, 100 * flops / tv / peak);
      std::printf("\n");
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// FP8 layers against bf16 ones, weights streamed from HBM as in a forward pass.
int RunFp8(const std::string& json_path) {
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
  Json out;
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  const auto& layers = kLlama8bLayers;
  constexpr int64_t kMaxRows = 16384;
  DeviceBuffer x = DeviceBuffer::Allocate(kMaxRows * 14336 * 2).value();
  DeviceBuffer result = DeviceBuffer::Allocate(kMaxRows * 28672 * 2).value();
  DeviceBuffer xq = DeviceBuffer::Allocate(kMaxRows * 14336).value();
  DeviceBuffer sx = DeviceBuffer::Allocate(kMaxRows * 4).value();
  FillRandom(x, 0x3c00);
  auto bf16_gemm = cuda::Gemm::Create();
  auto fp8_gemm = cuda::Gemm::Create();
  BENCH_CHECK(bf16_gemm.ok() && fp8_gemm.ok());
  const cuda::Fp8Scratch scratch{static_cast<__nv_fp8_e4m3*>(xq.data()),
                                 static_cast<float*>(sx.data())};
  std::printf("%-8s %6s %10s %10s %10s %10s %9s\n", "layer", "m", "bf16 us", "w8a16 us", "w8a8 us",
              "w8a8 TF/s", "speed-up");
  for (const Layer& l : layers) {
    const int64_t bytes16 = l.n * l.k * 2, bytes8 = l.n * l.k;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{2} << 30) / bytes16, 2, 16));
    DeviceBuffer w16 = DeviceBuffer::Allocate(bytes16 * copies).value();
    DeviceBuffer w8 = DeviceBuffer::Allocate(bytes8 * copies).value();
    DeviceBuffer ws = DeviceBuffer::Allocate(l.n * 4 * copies).value();
    FillRandom(w16, 0x3f00);
    for (int i = 0; i < copies; ++i) {  // the FP8 copies quantized from the bf16 ones
      BENCH_CHECK(kernels::QuantizeRowsFp8(
                      static_cast<const bf16*>(w16.data()) + i * l.n * l.k, l.k, l.n, l.k,
                      static_cast<__nv_fp8_e4m3*>(w8.data()) + i * bytes8, l.k,
                      static_cast<float*>(ws.data()) + i * l.n, nullptr) == cudaSuccess);
    }
    std::vector<const bf16*> weights16;
    std::vector<cuda::Fp8Weight> weights8;
    std::vector<const __nv_fp8_e4m3*> raw8;
    for (int i = 0; i < copies; ++i) {
      weights16.push_back(static_cast<const bf16*>(w16.data()) + i * l.n * l.k);
      weights8.push_back({static_cast<const __nv_fp8_e4m3*>(w8.data()) + i * bytes8,
                          static_cast<const float*>(ws.data()) + i * l.n});
      raw8.push_back(weights8.back().w);
    }
    const auto* xp = static_cast<const bf16*>(x.data());
    auto time_fp8 = [&](int64_t m) {
      return bench::MedianEventSeconds(
                 1, 5,
                 [&] {
                   for (const cuda::Fp8Weight& w : weights8) {
                     BENCH_CHECK((*fp8_gemm)
                                     ->LinearFp8(xp, l.k, m, w, l.n, l.k, nullptr, result.data(),
                                                 l.n, false, scratch, nullptr)
                                     .ok());
                   }
                 }) /
             static_cast<double>(weights8.size());
    };
    for (int64_t m : {1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128, 256, 2048, 8192, 16384}) {
      // bf16: the best of Gemv (m <= 8) and tuned cuBLASLt.
      (*bf16_gemm)->set_gemv_max_rows(0);
      const cuda::GemmShape shape16{m, l.n, l.k, l.k, l.n, false, false};
      BENCH_CHECK((*bf16_gemm)->Tune(shape16, 6, nullptr, weights16).ok());
      double t16 = TimeLinear(**bf16_gemm, weights16, xp, m, l, result.data());
      if (m <= 8) {
        (*bf16_gemm)->set_gemv_max_rows(8);
        t16 = std::min(t16, TimeLinear(**bf16_gemm, weights16, xp, m, l, result.data()));
      }
      double gemv8 = 0;
      if (m <= 8) {
        (*fp8_gemm)->set_fp8_gemv_max_rows(8);
        gemv8 = time_fp8(m);
      }
      (*fp8_gemm)->set_fp8_gemv_max_rows(0);
      cuda::GemmShape shape8{m, l.n, l.k, l.k, l.n, false, false};
      shape8.fp8 = true;
      BENCH_CHECK(
          (*fp8_gemm)->Tune(shape8, 6, nullptr, std::span<const __nv_fp8_e4m3* const>(raw8)).ok());
      const double gemm8 = time_fp8(m);
      const double best8 = gemv8 > 0 ? std::min(gemv8, gemm8) : gemm8;
      const double flops = 2.0 * m * l.n * l.k;
      out["fp8"].push_back({{"layer", l.name},
                            {"m", m},
                            {"bf16_us", t16 * 1e6},
                            {"w8a16_gemv_us", gemv8 * 1e6},
                            {"w8a16_gemv_fraction_of_copy",
                             gemv8 > 0 ? (bytes8 + m * l.k * 2.0) / gemv8 / copy_bw : 0.0},
                            {"w8a8_us", gemm8 * 1e6},
                            {"w8a8_tflops", flops / gemm8 / 1e12},
                            {"speedup_over_bf16", t16 / best8}});
      std::printf("%-8s %6ld %10.1f %10s %10.1f %10.0f %8.2fx\n", l.name, static_cast<long>(m),
                  t16 * 1e6, gemv8 > 0 ? std::to_string(gemv8 * 1e6).substr(0, 6).c_str() : "-",
                  gemm8 * 1e6, flops / gemm8 / 1e12, t16 / best8);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// Random bytes (seeded) into a device buffer.
void FillBytes(DeviceBuffer& b, uint32_t seed) {
  std::vector<uint8_t> host(b.size());
  std::mt19937 rng(seed);
  for (uint8_t& v : host) v = static_cast<uint8_t>(rng());
  BENCH_CHECK(b.CopyFromHost(host.data(), host.size()).ok());
}

// `copies` copies of one random W4A16 weight of layer l (group size `group`): codes repacked,
// scales in [0.5, 1) (fp16 0x38xx), zeros random in [-8, 7]; `seed` varies them.
struct W4Copies {
  DeviceBuffer codes, sz;
  std::vector<cuda::W4Weight> weights;
};
W4Copies MakeW4Copies(const Layer& l, int64_t group, int copies, uint32_t seed) {
  const int64_t bytes4 = l.n * l.k / 2, groups = l.k / group;
  DeviceBuffer canon = DeviceBuffer::Allocate(bytes4).value();
  FillBytes(canon, 7 + seed);
  std::vector<uint16_t> sc(l.n * groups);
  std::vector<int8_t> zr(l.n * groups);
  std::mt19937 rng(9 + seed);
  for (uint16_t& v : sc) v = static_cast<uint16_t>(0x3800 + (rng() & 0x3ff));
  for (int8_t& v : zr) v = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
  DeviceBuffer dsc = DeviceBuffer::Allocate(sc.size() * 2).value();
  DeviceBuffer dzr = DeviceBuffer::Allocate(zr.size()).value();
  BENCH_CHECK(dsc.CopyFromHost(sc.data(), sc.size() * 2).ok());
  BENCH_CHECK(dzr.CopyFromHost(zr.data(), zr.size()).ok());
  W4Copies out;
  out.codes = DeviceBuffer::Allocate(bytes4 * copies).value();
  out.sz = DeviceBuffer::Allocate(l.n * groups * 4 * copies).value();
  for (int i = 0; i < copies; ++i) {
    auto* tiled = static_cast<uint8_t*>(out.codes.data()) + i * bytes4;
    auto* sz = static_cast<uint32_t*>(out.sz.data()) + i * l.n * groups;
    BENCH_CHECK(kernels::W4RepackCodes(static_cast<const uint8_t*>(canon.data()), l.n, l.k, tiled,
                                       nullptr) == cudaSuccess);
    BENCH_CHECK(kernels::W4RepackScales(static_cast<const uint16_t*>(dsc.data()),
                                        static_cast<const int8_t*>(dzr.data()), l.n, groups,
                                        /*bf16=*/true, sz, l.n, nullptr) == cudaSuccess);
    out.weights.push_back({tiled, sz, nullptr, group});
  }
  BENCH_CHECK(cudaDeviceSynchronize() == cudaSuccess);  // canon, dsc, dzr are freed on return
  return out;
}

// W4A16 and INT8 layers against bf16 ones at decode batches, weights streamed from HBM.
// slice_mib: more dequantization scratch sizes (MiB, at most the default's) to time the W4A16
// many-row path with, next to the default.
int RunLowbit(const std::string& json_path, bool w4, bool int8, const std::vector<int>& slice_mib,
              const std::vector<int>& w4_splits, std::vector<int> rows) {
  if (rows.empty()) rows = {1, 2, 4, 8, 9, 16, 24, 32, 48, 64, 128, 256, 2048};
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
  Json out;
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  const auto& layers = kLlama8bLayers;
  constexpr int64_t kMaxRows = 2048, kGroup = 128;
  for (const int m : rows) {
    if (m < 1 || m > kMaxRows) {
      std::fprintf(stderr, "gemv_bench: --rows takes 1 .. %ld, got %d\n", long{kMaxRows}, m);
      return 2;
    }
  }
  DeviceBuffer x = DeviceBuffer::Allocate(kMaxRows * 14336 * 2).value();
  DeviceBuffer result = DeviceBuffer::Allocate(kMaxRows * 28672 * 4).value();
  DeviceBuffer xq = DeviceBuffer::Allocate(kMaxRows * 14336).value();
  DeviceBuffer sx = DeviceBuffer::Allocate(kMaxRows * 4).value();
  DeviceBuffer acc = DeviceBuffer::Allocate(kMaxRows * 28672 * 4).value();
  FillRandom(x, 0x3c00);
  auto bf16_gemm = cuda::Gemm::Create();
  auto q_gemm = cuda::Gemm::Create();
  BENCH_CHECK(bf16_gemm.ok() && q_gemm.ok());
  const cuda::Int8Scratch scratch{static_cast<int8_t*>(xq.data()), static_cast<float*>(sx.data()),
                                  static_cast<int32_t*>(acc.data())};
  // The runner's dequantization scratch (W4A16 beyond 64 rows); the "w4 alt" of those rows
  // runs without it (one W4Gemm launch per 64 rows).
  DeviceBuffer dequant = DeviceBuffer::Allocate(cuda::Gemm::kW4DequantDefaultBytes).value();
  DeviceBuffer partials = DeviceBuffer::Allocate(cuda::Gemm::kW4SplitDefaultBytes).value();
  DeviceBuffer counters =
      DeviceBuffer::Allocate(cuda::Gemm::kW4SplitDefaultCounters * sizeof(uint32_t)).value();
  BENCH_CHECK(cudaMemset(counters.data(), 0, counters.size()) == cudaSuccess);
  cuda::W4Scratch w4_scratch;
  w4_scratch.dequant = dequant.data();
  w4_scratch.dequant_bytes = dequant.size();
  w4_scratch.split_partials = static_cast<float*>(partials.data());
  w4_scratch.split_partial_bytes = partials.size();
  w4_scratch.split_counters = static_cast<uint32_t*>(counters.data());
  w4_scratch.split_counter_count = cuda::Gemm::kW4SplitDefaultCounters;
  cuda::W4Scratch w4_no_dequant = w4_scratch;
  w4_no_dequant.dequant = nullptr;
  w4_no_dequant.dequant_bytes = 0;
  std::printf("%-8s %4s %9s %9s %6s %9s %9s %6s %9s %9s %8s\n", "layer", "m", "bf16 us", "w4 us",
              "w4 %bw", "w4 alt", "w8a16 us", "%bw", "w8a8 us", "w4 x", "int8 x");
  // Per token of a Llama-3.1-8B layer at m = 1 (the four linear layers): bf16 vs W4A16.
  std::map<int64_t, std::pair<double, double>> per_layer;
  for (const Layer& l : layers) {
    const int64_t bytes16 = l.n * l.k * 2, bytes4 = l.n * l.k / 2, bytes8 = l.n * l.k;
    const int64_t groups = l.k / kGroup;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{2} << 30) / bytes16, 2, 16));
    DeviceBuffer w16 = DeviceBuffer::Allocate(bytes16 * copies).value();
    FillRandom(w16, 0x3f00);
    std::vector<const bf16*> weights16;
    for (int i = 0; i < copies; ++i) {
      weights16.push_back(static_cast<const bf16*>(w16.data()) + i * l.n * l.k);
    }
    DeviceBuffer w8buf, s8buf;
    W4Copies w4copies;
    std::vector<cuda::Int8Weight> weights8;
    std::vector<const int8_t*> raw8;
    if (w4) w4copies = MakeW4Copies(l, kGroup, copies, 0);
    const std::vector<cuda::W4Weight>& weights4 = w4copies.weights;
    if (int8) {
      w8buf = DeviceBuffer::Allocate(bytes8 * copies).value();
      s8buf = DeviceBuffer::Allocate(l.n * 4 * copies).value();
      FillBytes(w8buf, 13);
      std::vector<float> ones(l.n * copies, 0.01f);
      BENCH_CHECK(s8buf.CopyFromHost(ones.data(), ones.size() * 4).ok());
      for (int i = 0; i < copies; ++i) {
        weights8.push_back({static_cast<const int8_t*>(w8buf.data()) + i * bytes8,
                            static_cast<const float*>(s8buf.data()) + i * l.n});
        raw8.push_back(weights8.back().w);
      }
    }
    const auto* xp = static_cast<const bf16*>(x.data());
    auto per_call = [](double round, size_t calls) { return round / static_cast<double>(calls); };
    for (const int64_t m : rows) {
      (*bf16_gemm)->set_gemv_max_rows(0);
      const cuda::GemmShape shape16{m, l.n, l.k, l.k, l.n, false, false};
      BENCH_CHECK((*bf16_gemm)->Tune(shape16, 6, nullptr, weights16).ok());
      double t16 = TimeLinear(**bf16_gemm, weights16, xp, m, l, result.data());
      if (m <= 8) {
        (*bf16_gemm)->set_gemv_max_rows(8);
        t16 = std::min(t16, TimeLinear(**bf16_gemm, weights16, xp, m, l, result.data()));
      }
      const double act = m * l.k * 2.0 + m * l.n * 2.0;  // x read, out written
      Json row = {{"layer", l.name},
                  {"m", m},
                  {"bf16_us", t16 * 1e6},
                  {"bf16_fraction_of_copy", (bytes16 + act) / t16 / copy_bw}};
      double t4 = 0, gemv8 = 0, gemm8 = 0;
      if (w4) {
        // Gemm::LinearW4 over every weight copy with this scratch, seconds per call.
        auto time_w4 = [&](const cuda::W4Scratch& w4s) {
          return per_call(
              bench::MedianEventSeconds(1, 5,
                                        [&] {
                                          for (const cuda::W4Weight& w : weights4) {
                                            BENCH_CHECK((*q_gemm)
                                                            ->LinearW4(xp, l.k, m, w, l.n, l.k,
                                                                       nullptr, result.data(), l.n,
                                                                       false, w4s, nullptr)
                                                            .ok());
                                          }
                                        }),
              weights4.size());
        };
        t4 = time_w4(w4_scratch);
        const double moved4 = bytes4 + l.n * groups * 4.0 + act;
        // The other kernel choice of kernels::W4Gemm (LinearW4 takes the default for m).
        kernels::W4GemmArgsT<bf16> alt;
        alt.x = xp;
        alt.ldx = l.k;
        alt.m = static_cast<int32_t>(m);
        alt.group_size = kGroup;
        alt.n = l.n;
        alt.k = l.k;
        alt.out = result.data();
        alt.ldo = l.n;
        alt.split_partials = w4_scratch.split_partials;
        alt.split_partial_bytes = static_cast<int64_t>(w4_scratch.split_partial_bytes);
        alt.split_counters = w4_scratch.split_counters;
        alt.split_counter_count = w4_scratch.split_counter_count;
        // m = 1: the k-split warps (W4GemvKernel), where the default streams the row; 2-8: the
        // other warp count per block (default 16 for n <= 4,096, else 8); more: the k-split warps
        // instead of the block tiles.
        const bool alt_k_split = m > 8 || m == 1;
        const bool wide = l.n / kernels::kW4TileRows <= kernels::kW4WideMaxRowTiles;
        alt.kernel = alt_k_split ? 1 : 0;
        alt.warps = alt_k_split ? 0 : (wide ? 8 : 16);
        auto time_direct = [&](kernels::W4GemmArgsT<bf16> args) {
          return per_call(bench::MedianEventSeconds(
                              1, 5,
                              [&] {
                                for (const cuda::W4Weight& w : weights4) {
                                  args.w = w.tiled;
                                  args.sz = w.sz;
                                  BENCH_CHECK(kernels::W4Gemm(args, nullptr) == cudaSuccess);
                                }
                              }),
                          weights4.size());
        };
        const bool many = m > kernels::kW4GemmMaxRows;  // LinearW4 dequantizes: alt = W4Gemm
        const double t4_alt = many ? time_w4(w4_no_dequant) : time_direct(alt);
        row["w4_us"] = t4 * 1e6;
        row["w4_fraction_of_copy"] = moved4 / t4 / copy_bw;
        row["w4_tflops"] = 2.0 * m * l.n * l.k / t4 / 1e12;
        row["bf16_tflops"] = 2.0 * m * l.n * l.k / t16 / 1e12;
        row["w4_other"] = many ? "W4Gemm per 64 rows"
                               : (alt_k_split ? "k-split warps" : (wide ? "8 warps" : "16 warps"));
        row["w4_other_us"] = t4_alt * 1e6;
        row["w4_speedup_over_bf16"] = t16 / t4;
        for (int mib : many ? slice_mib : std::vector<int>{}) {
          cuda::W4Scratch sized = w4_scratch;
          sized.dequant_bytes = std::min(w4_scratch.dequant_bytes, size_t(mib) << 20);
          const double t = time_w4(sized);
          row["w4_us_by_slice_mib"][std::to_string(mib)] = t * 1e6;
          std::printf("  %s m=%ld: W4A16 with %d MiB slices %.1f us\n", l.name,
                      static_cast<long>(m), mib, t * 1e6);
        }
        for (int sp : m > 8 && !many ? w4_splits : std::vector<int>{}) {
          kernels::W4GemmArgsT<bf16> tiles = alt;
          tiles.kernel = 2;
          tiles.splits = sp;
          const double t = time_direct(tiles);
          row["w4_tiles_us_by_splits"][std::to_string(sp)] = t * 1e6;
          std::printf("  %s m=%ld: W4A16 block tiles, %d splits %.1f us\n", l.name,
                      static_cast<long>(m), sp, t * 1e6);
        }
        if (m == 1) per_layer[l.n * 100000 + l.k] = {t16, t4};
      }
      if (int8) {
        auto time8 = [&] {
          return per_call(
              bench::MedianEventSeconds(
                  1, 5,
                  [&] {
                    for (const cuda::Int8Weight& w : weights8) {
                      BENCH_CHECK((*q_gemm)
                                      ->LinearInt8(xp, l.k, m, w, l.n, l.k, nullptr, result.data(),
                                                   l.n, false, scratch, nullptr)
                                      .ok());
                    }
                  }),
              weights8.size());
        };
        if (m <= 8) {
          (*q_gemm)->set_int8_gemv_max_rows(8);
          gemv8 = time8();
          row["w8a16_gemv_us"] = gemv8 * 1e6;
          row["w8a16_fraction_of_copy"] = (bytes8 + l.n * 4.0 + act) / gemv8 / copy_bw;
        }
        (*q_gemm)->set_int8_gemv_max_rows(0);
        cuda::GemmShape shape8{m, l.n, l.k, l.k, l.n, false, false};
        shape8.int8 = true;
        BENCH_CHECK((*q_gemm)->Tune(shape8, 6, nullptr, std::span<const int8_t* const>(raw8)).ok());
        gemm8 = time8();
        row["w8a8_us"] = gemm8 * 1e6;
        row["w8a8_fraction_of_copy"] = (bytes8 + l.n * 4.0 + act) / gemm8 / copy_bw;
        row["int8_speedup_over_bf16"] = t16 / (gemv8 > 0 ? std::min(gemv8, gemm8) : gemm8);
      }
      auto us = [](double t) { return t > 0 ? std::to_string(t * 1e6).substr(0, 7) : "-"; };
      auto pct = [](const Json& r, const char* key) {
        return r.contains(key) ? std::to_string(static_cast<int>(100 * r[key].get<double>())) : "-";
      };
      std::printf(
          "%-8s %4ld %9.1f %9s %6s %9s %9s %6s %9s %8.2fx %7.2fx\n", l.name, static_cast<long>(m),
          t16 * 1e6, us(t4).c_str(), pct(row, "w4_fraction_of_copy").c_str(),
          row.contains("w4_other_us") ? us(row["w4_other_us"].get<double>() / 1e6).c_str() : "-",
          us(gemv8).c_str(), pct(row, "w8a16_fraction_of_copy").c_str(), us(gemm8).c_str(),
          t4 > 0 ? t16 / t4 : 0.0, int8 ? t16 / (gemv8 > 0 ? std::min(gemv8, gemm8) : gemm8) : 0.0);
      out["lowbit"].push_back(row);
    }
  }
  if (w4) {
    double b = 0, q = 0;
    for (const auto& [key, t] : per_layer) {
      b += t.first;
      q += t.second;
    }
    std::printf("8B layer's four linear layers at m = 1: bf16 %.1f us, W4A16 %.1f us (%.2fx)\n",
                b * 1e6, q * 1e6, b / q);
    out["layer_m1_bf16_us"] = b * 1e6;
    out["layer_m1_w4_us"] = q * 1e6;
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// Seconds per replay (median) of the launches `enqueue` makes on `stream`, captured in a graph.
template <typename F>
double TimeGraph(cudaStream_t stream, F enqueue) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  enqueue();
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  const double t = bench::MedianEventSeconds(
      3, 15, [&] { BENCH_CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess); }, stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return t;
}

// A chain variant's line and JSON row: a step's time against the layers' roofline.
Json ChainRow(const char* name, double t, int layers, double roofline) {
  std::printf("%-30s %.3f ms a step, %.1f us a layer, %.1f%% of the copy bandwidth\n", name,
              t * 1e3, t / layers * 1e6, 100 * roofline / t);
  return {{"variant", name},
          {"step_ms", t * 1e3},
          {"layer_us", t / layers * 1e6},
          {"fraction_of_copy", roofline / t}};
}

// --chain: a batch-1 FP8 decode step's linear layers alone. For each of 32 layers with weights of
// their own (Gaussian e4m3 codes), qkv, o, gate_up with SiluMul in its epilogue and down as
// W8A16 GEMVs at m = 1, each asking L2 for the next one's first 4 MiB as the runner does;
// captured in a CUDA graph and replayed, with programmatic dependent launch (the runner's
// default) and without, with SiluMul in a kernel of its own, with the layer's two RMS norms
// between the GEMVs, and with the GEMVs' one-block-an-item form instead of their persistent one
// (Gemm::set_gemv_persistent). Set against the copy
// bandwidth and against `kiln bench latency`'s decode step, it says how much of the step the
// GEMVs take and how much the norms, RoPE, attention and lm_head add.
int RunChain(const std::string& json_path) {
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
  Json out;
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  constexpr int kLayers = 32;
  constexpr int64_t kPrefetch = int64_t{4} << 20;
  const auto& shapes = kLlama8bLayers;  // qkv, o, gate_up, down
  struct Weights {
    DeviceBuffer w, s;
  };
  std::vector<std::array<Weights, 4>> layers(kLayers);
  int64_t layer_bytes = 0;
  for (const Layer& l : shapes) layer_bytes += l.n * l.k;
  for (int i = 0; i < kLayers; ++i) {
    for (int j = 0; j < 4; ++j) {
      const Layer& l = shapes[j];
      Weights& w = layers[i][j];
      w.w = DeviceBuffer::Allocate(l.n * l.k).value();
      w.s = DeviceBuffer::Allocate(l.n * 4).value();
      BENCH_CHECK(kernels::FillGaussianE4m3(static_cast<__nv_fp8_e4m3*>(w.w.data()), l.n * l.k,
                                            1000 * i + j, 64.0f, nullptr) == cudaSuccess);
      const std::vector<float> scales(l.n, 1.0f / 4096);
      BENCH_CHECK(w.s.CopyFromHost(scales.data(), scales.size() * 4).ok());
    }
  }
  auto fp8 = [&](int i, int j) {
    return cuda::Fp8Weight{static_cast<const __nv_fp8_e4m3*>(layers[i][j].w.data()),
                           static_cast<const float*>(layers[i][j].s.data())};
  };
  // The hint for the layer after (i, j): the next one's first 4 MiB.
  auto next = [&](int i, int j) {
    const int ni = j == 3 ? i + 1 : i, nj = (j + 1) % 4;
    if (ni == kLayers) return cuda::L2Prefetch{};
    return cuda::L2Prefetch{layers[ni][nj].w.data(),
                            std::min(kPrefetch, shapes[nj].n * shapes[nj].k)};
  };
  DeviceBuffer x = DeviceBuffer::Allocate(14336 * 2).value();
  DeviceBuffer y = DeviceBuffer::Allocate(28672 * 2).value();
  DeviceBuffer act = DeviceBuffer::Allocate(14336 * 2).value();
  DeviceBuffer residual = DeviceBuffer::Allocate(4096 * 4).value();
  DeviceBuffer norm_weight = DeviceBuffer::Allocate(4096 * 2).value();
  DeviceBuffer normed = DeviceBuffer::Allocate(4096 * 2).value();
  FillRandom(x, 0x3c00);
  FillRandom(norm_weight, 0x3c00);
  BENCH_CHECK(cudaMemset(residual.data(), 0, 4096 * 4) == cudaSuccess);
  FillRandom(act, 0x3c00);
  const auto* xp = static_cast<const bf16*>(x.data());
  auto* yp = static_cast<bf16*>(y.data());
  auto* actp = static_cast<bf16*>(act.data());
  auto gemm = cuda::Gemm::Create();
  BENCH_CHECK(gemm.ok());
  cuda::Gemm& g = **gemm;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  // The 128 (or 160) launches of a step; o and down read x, as the GEMVs' inputs do not change
  // their speed. norms: the runner's two RmsNormF32Residual of a layer (one block at m = 1)
  // before qkv and gate_up, adding o's / down's output into the fp32 residual stream.
  auto* residualp = static_cast<float*>(residual.data());
  auto norm = [&] {
    BENCH_CHECK(kernels::RmsNormF32Residual(yp, 4096, residualp, false, nullptr, 1, 4096,
                                            static_cast<const bf16*>(norm_weight.data()), 1e-5f,
                                            static_cast<bf16*>(normed.data()), 4096,
                                            stream) == cudaSuccess);
  };
  auto step = [&](bool silu_in_gemv, bool norms) {
    for (int i = 0; i < kLayers; ++i) {
      if (norms) norm();
      BENCH_CHECK(g.LinearFp8(xp, 4096, 1, fp8(i, 0), 6144, 4096, nullptr, yp, 6144, false, {},
                              stream, next(i, 0))
                      .ok());
      BENCH_CHECK(g.LinearFp8(xp, 4096, 1, fp8(i, 1), 4096, 4096, nullptr, yp, 4096, false, {},
                              stream, next(i, 1))
                      .ok());
      if (norms) norm();
      if (silu_in_gemv) {
        auto done =
            g.GateUpSiluW8(xp, 4096, 1, fp8(i, 2), 14336, 4096, static_cast<const bf16*>(nullptr),
                           actp, 14336, stream, next(i, 2));
        BENCH_CHECK(done.ok() && *done);
      } else {
        BENCH_CHECK(g.LinearFp8(xp, 4096, 1, fp8(i, 2), 28672, 4096, nullptr, yp, 28672, false, {},
                                stream, next(i, 2))
                        .ok());
        BENCH_CHECK(kernels::SiluMul(yp, 28672, 1, 14336, actp, 14336, stream) == cudaSuccess);
      }
      BENCH_CHECK(g.LinearFp8(actp, 14336, 1, fp8(i, 3), 4096, 14336, nullptr, yp, 4096, false, {},
                              stream, next(i, 3))
                      .ok());
    }
  };
  const double roofline = kLayers * layer_bytes / copy_bw;
  std::printf("%d layers x %.1f MB: roofline %.3f ms at the copy bandwidth\n", kLayers,
              layer_bytes / 1e6, roofline * 1e3);
  out["layer_bytes"] = layer_bytes;
  out["roofline_ms"] = roofline * 1e3;
  struct Variant {
    const char* name;
    bool pdl, silu_in_gemv, norms, persistent;
  };
  for (const Variant v : {Variant{"pdl, SiluMul in gate_up", true, true, false, true},
                          Variant{"pdl, SiluMul apart", true, false, false, true},
                          Variant{"pdl, + the two norms", true, true, true, true},
                          Variant{"no pdl, SiluMul in gate_up", false, true, false, true},
                          Variant{"not persistent, pdl, SiluMul", true, true, false, false},
                          Variant{"not persistent, + norms", true, true, true, false}}) {
    kernels::SetProgrammaticLaunch(v.pdl);
    g.set_gemv_persistent(v.persistent);
    const double t = TimeGraph(stream, [&] { step(v.silu_in_gemv, v.norms); });
    out["chain"].push_back(ChainRow(v.name, t, kLayers, roofline));
  }
  kernels::SetProgrammaticLaunch(true);
  cudaStreamDestroy(stream);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// --chain --w4: the same for a batch-1 W4A16 decode step (group size 128): for each of 32
// layers with weights of their own, qkv, o, gate_up and down through kernels::W4Gemm at m = 1,
// each with the runner's L2 hint for the next one's first 4 MiB; in a CUDA graph, replayed. The
// variants pick the kernel (W4GemmArgsT::kernel: 3 the streamed row, 1 the k-split warps), with
// and without the layer's two RMS norms and SiluMul (the runner's kernels between them; attention
// and RoPE left out), the norms in the qkv and gate_up GEMVs' prologues (the runner's default,
// W4GemmArgsT::norm), without PDL, and without the L2 hints.
int RunChainW4(const std::string& json_path) {
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
  Json out;
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  constexpr int kLayers = 32;
  constexpr int64_t kGroup = 128;
  constexpr int64_t kPrefetch = int64_t{4} << 20;
  const auto& shapes = kLlama8bLayers;  // qkv, o, gate_up, down
  // Per shape, a weight for each layer (its own copy in DRAM).
  std::array<W4Copies, 4> layers;
  int64_t layer_bytes = 0;
  for (int j = 0; j < 4; ++j) {
    const Layer& l = shapes[j];
    layer_bytes += l.n * l.k / 2 + l.n * (l.k / kGroup) * 4;
    layers[j] = MakeW4Copies(l, kGroup, kLayers, j);
  }
  DeviceBuffer x = DeviceBuffer::Allocate(14336 * 2).value();
  DeviceBuffer y = DeviceBuffer::Allocate(28672 * 2).value();
  DeviceBuffer act = DeviceBuffer::Allocate(14336 * 2).value();
  DeviceBuffer residual = DeviceBuffer::Allocate(2 * 4096 * 4).value();
  DeviceBuffer norm_weight = DeviceBuffer::Allocate(4096 * 2).value();
  FillRandom(x, 0x3c00);
  FillRandom(y, 0x3c00);
  FillRandom(norm_weight, 0x3c00);
  FillRandom(act, 0x3c00);
  BENCH_CHECK(cudaMemset(residual.data(), 0, 2 * 4096 * 4) == cudaSuccess);
  auto* residualp = static_cast<float*>(residual.data());
  int parity = 0;  // the fused norms' residual buffer (runner: h_ and h_alt_ in turn)
  auto* xp = static_cast<bf16*>(x.data());
  auto* yp = static_cast<bf16*>(y.data());
  auto* actp = static_cast<bf16*>(act.data());
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  // fused_norm: the norm before qkv / gate_up in the GEMV's prologue (W4GemmArgsT::norm).
  int64_t l2_hint = kPrefetch;
  auto launch = [&](int i, int j, int kernel, const bf16* in, bf16* result, bool fused_norm) {
    const Layer& l = shapes[j];
    kernels::W4GemmArgsT<bf16> a;
    a.x = in;
    a.ldx = l.k;
    a.m = 1;
    a.w = layers[j].weights[i].tiled;
    a.sz = layers[j].weights[i].sz;
    a.group_size = kGroup;
    a.n = l.n;
    a.k = l.k;
    a.out = result;
    a.ldo = l.n;
    a.kernel = kernel;
    if (fused_norm && (j == 0 || j == 2)) {
      a.x = nullptr;
      a.norm.weight = static_cast<const bf16*>(norm_weight.data());
      a.norm.delta = yp;
      a.norm.residual = residualp + parity * 4096;
      a.norm.residual_out = residualp + (1 - parity) * 4096;
      a.norm.eps = 1e-5f;
      parity ^= 1;
    }
    const int ni = j == 3 ? i + 1 : i, nj = (j + 1) % 4;
    if (ni < kLayers) {
      a.prefetch = layers[nj].weights[ni].tiled;
      a.prefetch_bytes = std::min(l2_hint, shapes[nj].n * shapes[nj].k / 2);
    }
    BENCH_CHECK(kernels::W4GemmSupported(a));
    BENCH_CHECK(kernels::W4Gemm(a, stream) == cudaSuccess);
  };
  // norms: the runner's RmsNormF32Residual before qkv and gate_up (o's / down's output added
  // into the fp32 residual stream); SiluMul between gate_up and down.
  auto norm = [&] {
    BENCH_CHECK(kernels::RmsNormF32Residual(yp, 4096, residualp, false, nullptr, 1, 4096,
                                            static_cast<const bf16*>(norm_weight.data()), 1e-5f, xp,
                                            4096, stream) == cudaSuccess);
  };
  struct Variant {
    const char* name;
    std::array<int, 4> kernel;  // qkv, o, gate_up, down
    bool pdl, others, fused_norm = false;
    int64_t l2_hint = kPrefetch;  // bytes of the next layer each GEMV asks L2 for
  };
  const double roofline = kLayers * layer_bytes / copy_bw;
  std::printf("%d layers x %.1f MB: roofline %.3f ms at the copy bandwidth\n", kLayers,
              layer_bytes / 1e6, roofline * 1e3);
  out["layer_bytes"] = layer_bytes;
  out["roofline_ms"] = roofline * 1e3;
  for (const Variant v :
       {Variant{"streamed", {3, 3, 3, 3}, true, false},
        Variant{"k-split warps", {1, 1, 1, 1}, true, false},
        Variant{"streamed, no pdl", {3, 3, 3, 3}, false, false},
        Variant{"streamed + norms, SiluMul", {3, 3, 3, 3}, true, true},
        Variant{"the same, no pdl", {3, 3, 3, 3}, false, true},
        Variant{"k-split + norms, SiluMul", {1, 1, 1, 1}, true, true},
        Variant{"norms in the GEMVs + SiluMul", {3, 3, 3, 3}, true, true, true},
        Variant{"the same, no pdl", {3, 3, 3, 3}, false, true, true},
        Variant{"norms apart, no L2 hint", {3, 3, 3, 3}, true, true, false, 0},
        Variant{"norms in the GEMVs, no L2 hint", {3, 3, 3, 3}, true, true, true, 0}}) {
    kernels::SetProgrammaticLaunch(v.pdl);
    l2_hint = v.l2_hint;
    const double t = TimeGraph(stream, [&] {
      for (int i = 0; i < kLayers; ++i) {
        if (v.others && !v.fused_norm) norm();
        launch(i, 0, v.kernel[0], xp, yp, v.fused_norm);
        launch(i, 1, v.kernel[1], xp, yp, false);
        if (v.others && !v.fused_norm) norm();
        launch(i, 2, v.kernel[2], xp, yp, v.fused_norm);
        if (v.others) {
          BENCH_CHECK(kernels::SiluMul(yp, 28672, 1, 14336, actp, 14336, stream) == cudaSuccess);
        }
        launch(i, 3, v.kernel[3], actp, yp, false);
      }
    });
    Json row = ChainRow(v.name, t, kLayers, roofline);
    row["kernels"] = v.kernel;
    row["pdl"] = v.pdl;
    row["norms_silu"] = v.others;
    row["norms_in_gemvs"] = v.fused_norm;
    row["l2_hint_bytes"] = v.l2_hint;
    out["chain_w4"].push_back(row);
  }
  kernels::SetProgrammaticLaunch(true);
  cudaStreamDestroy(stream);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;
  std::string json_path;
  bool prefill = false, fp8 = false, w4 = false, int8 = false, chain = false;
  std::vector<int> slice_mib, w4_splits, rows;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--prefill") {
      prefill = true;
    } else if (a == "--fp8") {
      fp8 = true;
    } else if (a == "--w4") {
      w4 = true;
    } else if (a == "--chain") {
      chain = true;
    } else if (a == "--int8") {
      int8 = true;
    } else if ((a == "--w4-slice-mib" || a == "--w4-splits" || a == "--rows") && i + 1 < argc) {
      std::vector<int>& values = a == "--w4-splits" ? w4_splits : a == "--rows" ? rows : slice_mib;
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        values.push_back(std::stoi(list.substr(0, comma)));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr,
                   "usage: gemv_bench [--json F] [--prefill [--fp8] | --fp8 | --chain | --w4 "
                   "[--w4-slice-mib 8,16,...] [--w4-splits 1,2,...] --int8 [--rows 1,16,...]]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gemv_bench: needs a CUDA device\n");
    return 2;
  }
  if (prefill && fp8) {
    for (int m : rows) {
      if (m < 1 || m > 16384) {
        std::fprintf(stderr, "gemv_bench: --prefill --fp8 --rows takes 1 .. 16384, got %d\n", m);
        return 2;
      }
    }
    return RunPrefillFp8(json_path, rows);
  }
  if (prefill) return RunPrefill(json_path);
  if (chain && w4) return RunChainW4(json_path);
  if (chain) return RunChain(json_path);
  if (fp8) return RunFp8(json_path);
  if (w4 || int8) return RunLowbit(json_path, w4, int8, slice_mib, w4_splits, rows);
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("copy bandwidth %.0f GB/s\n", copy_bw / 1e9);
  Json out;
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;

  // Llama-3.1-8B: hidden 4096, 32 q / 8 kv heads of 128, intermediate 14336, vocab 128256.
  const Layer layers[] = {{"qkv", 6144, 4096, false},
                          {"o", 4096, 4096, false},
                          {"gate_up", 28672, 4096, false},
                          {"down", 4096, 14336, false},
                          {"lm_head", 128256, 4096, true}};
  constexpr int64_t kMaxRows = 256;
  DeviceBuffer x = DeviceBuffer::Allocate(kMaxRows * 14336 * 2).value();
  DeviceBuffer result = DeviceBuffer::Allocate(kMaxRows * 128256 * 4).value();
  std::vector<uint16_t> host(kMaxRows * 14336);
  std::mt19937 rng(1);
  for (uint16_t& v : host) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff));  // ~[0.0078, 0.016)
  BENCH_CHECK(x.CopyFromHost(host.data(), host.size() * 2).ok());

  auto gemm = cuda::Gemm::Create();
  auto tuned = cuda::Gemm::Create();
  BENCH_CHECK(gemm.ok() && tuned.ok());
  std::printf("%-8s %5s %12s %12s %12s %12s\n", "layer", "m", "gemv GB/s", "cuBLASLt", "tuned",
              "gemv/cublas");
  for (const Layer& l : layers) {
    const int64_t bytes = l.n * l.k * 2;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{4} << 30) / bytes, 1, 16));
    DeviceBuffer w = DeviceBuffer::Allocate(bytes * copies).value();
    BENCH_CHECK(cudaMemset(w.data(), 0x3c, w.size()) == cudaSuccess);
    std::vector<const bf16*> weights;
    for (int i = 0; i < copies; ++i) {
      weights.push_back(static_cast<const bf16*>(w.data()) + i * l.n * l.k);
    }
    const auto* xp = static_cast<const bf16*>(x.data());
    for (int64_t m : {1, 2, 3, 4, 8, 16, 64, 256}) {
      const double moved = bytes + m * l.k * 2.0 + m * l.n * (l.out_f32 ? 4.0 : 2.0);
      Json row = {{"layer", l.name}, {"m", m}, {"n", l.n}, {"k", l.k}};
      (*gemm)->set_gemv_max_rows(0);
      const double cublas = TimeLinear(**gemm, weights, xp, m, l, result.data());
      row["cublaslt_us"] = cublas * 1e6;
      row["cublaslt_fraction_of_copy"] = moved / cublas / copy_bw;
      double gemv = 0, tune = 0;
      if (m <= 8) {
        (*gemm)->set_gemv_max_rows(8);
        gemv = TimeLinear(**gemm, weights, xp, m, l, result.data());
        row["gemv_us"] = gemv * 1e6;
        row["gemv_fraction_of_copy"] = moved / gemv / copy_bw;
      } else {
        (*tuned)->set_gemv_max_rows(0);
        const cuda::GemmShape shape{m, l.n, l.k, l.k, l.n, l.out_f32, false};
        BENCH_CHECK((*tuned)->Tune(shape, 8, nullptr, weights).ok());
        tune = TimeLinear(**tuned, weights, xp, m, l, result.data());
        row["tuned_us"] = tune * 1e6;
        row["tuned_fraction_of_copy"] = moved / tune / copy_bw;
      }
      std::printf("%-8s %5ld %12s %12.0f %12s %12s\n", l.name, static_cast<long>(m),
                  gemv > 0 ? std::to_string(static_cast<int>(moved / gemv / 1e9)).c_str() : "-",
                  moved / cublas / 1e9,
                  tune > 0 ? std::to_string(static_cast<int>(moved / tune / 1e9)).c_str() : "-",
                  gemv > 0 ? std::to_string(cublas / gemv).substr(0, 4).c_str() : "-");
      out["shapes"].push_back(row);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
