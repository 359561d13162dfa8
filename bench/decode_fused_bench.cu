// kernels::FusedDecode alone on Llama-3.1-8B shapes (32 layers; e4m3 weights as Gaussian codes,
// a bf16 cache of --context positions): microseconds a launch, the weights' GB/s against the
// device-to-device copy bandwidth measured in the same run, and what each part costs (runs with
// the dot products, the grid barriers, attention or the copies skipped: wrong results, real
// timing; "dot products only" is the consumers' pace with no DRAM at all). With
// --trace, CTA 0's phase boundaries (%globaltimer) averaged over layers 1 .. n-2.
//
//   decode_fused_bench [--context N (256)] [--iterations N (50)] [--json F]
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "kernels/decode_fused.h"
#include "kernels/quant.h"

namespace kiln::bench {
namespace {

#define CHECK_CUDA(x) BENCH_CHECK((x) == cudaSuccess)

template <typename T>
T* Alloc(int64_t n) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  CHECK_CUDA(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

template <typename T>
T* Upload(const std::vector<T>& h) {
  T* p = Alloc<T>(static_cast<int64_t>(h.size()));
  CHECK_CUDA(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Device-to-device copy bandwidth (bytes read + written a second) over a 1 GiB buffer.
double CopyBandwidth() {
  const int64_t bytes = int64_t{1} << 30;
  auto* a = Alloc<uint8_t>(bytes);
  auto* b = Alloc<uint8_t>(bytes);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  CHECK_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * 10 * static_cast<double>(bytes) / (ms * 1e-3);
}

int Main(int argc, char** argv) {
  int context = 256, iterations = 50;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--context" && i + 1 < argc) {
      context = std::atoi(argv[++i]);
    } else if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: decode_fused_bench [--context N] [--iterations N] [--json F]\n");
      return 2;
    }
  }
  constexpr int kLayers = 32, kHidden = 4096, kInter = 14336, kHeads = 32, kKv = 8, kHd = 128;
  constexpr int kBlock = 16;
  const int64_t q = int64_t{kHeads} * kHd, kv = int64_t{kKv} * kHd, qkv_rows = q + 2 * kv;
  const int blocks = context / kBlock + 1;
  std::vector<kernels::FusedDecodeLayer> layers(kLayers);
  const std::vector<__nv_bfloat16> ones(kHidden, __float2bfloat16(1.0f));
  int64_t weight_bytes = 0;
  auto weight = [&](int64_t rows, int64_t k, uint64_t seed, const float** scale) {
    auto* w = Alloc<__nv_fp8_e4m3>(rows * k);
    CHECK_CUDA(kernels::FillGaussianE4m3(w, rows * k, seed, 1.0f, nullptr));
    *scale = Upload(std::vector<float>(rows, 0.01f));
    weight_bytes += rows * k;
    return w;
  };
  for (int i = 0; i < kLayers; ++i) {
    kernels::FusedDecodeLayer& l = layers[i];
    l.input_norm = Upload(ones);
    l.post_norm = Upload(ones);
    l.qkv = weight(qkv_rows, kHidden, 4 * i, &l.qkv_scale);
    l.o = weight(kHidden, q, 4 * i + 1, &l.o_scale);
    l.gate_up = weight(2 * kInter, kHidden, 4 * i + 2, &l.gate_up_scale);
    l.down = weight(kHidden, kInter, 4 * i + 3, &l.down_scale);
    l.k_cache = Alloc<__nv_bfloat16>(int64_t{blocks} * kKv * kBlock * kHd);
    l.v_cache = Alloc<__nv_bfloat16>(int64_t{blocks} * kKv * kBlock * kHd);
  }
  std::vector<float> inv_freq(kHd / 2);
  for (int i = 0; i < kHd / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / kHd);
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  kernels::FusedDecodeArgs a;
  a.layers = Upload(layers);
  a.num_layers = kLayers;
  a.hidden = kHidden;
  a.intermediate = kInter;
  a.num_heads = kHeads;
  a.num_kv_heads = kKv;
  a.head_dim = kHd;
  a.attn_scale = 1.0f / std::sqrt(static_cast<float>(kHd));
  a.inv_freq = Upload(inv_freq);
  a.position = Upload(std::vector<int32_t>{context - 1});
  a.slot = Upload(std::vector<int64_t>{context - 1});
  a.seq_len = Upload(std::vector<int32_t>{context});
  a.block_table = Upload(table);
  a.block_size = kBlock;
  a.delta = Upload(std::vector<__nv_bfloat16>(kHidden, __float2bfloat16(0.5f)));
  a.residual = Alloc<float>(kHidden);
  a.qkv_out = Alloc<__nv_bfloat16>(qkv_rows);
  a.attn_out = Alloc<__nv_bfloat16>(q);
  a.act_out = Alloc<__nv_bfloat16>(kInter);
  a.partials = Alloc<float>(kernels::FusedDecodeWorkspaceBytes(kHeads, kHd) / sizeof(float));
  a.sync = Alloc<uint32_t>(kernels::FusedDecodeSyncBytes(kKv) / sizeof(uint32_t));
  if (!kernels::FusedDecodeSupported(a)) {
    std::fprintf(stderr, "decode_fused_bench: FusedDecode does not run on this device/build\n");
    return 1;
  }
  const double copy_bw = CopyBandwidth();
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  nlohmann::json out;
  out["context"] = context;
  out["weight_bytes"] = weight_bytes;
  out["copy_gb_s"] = copy_bw * 1e-9;
  std::printf("weights %.1f MB, copy bandwidth %.0f GB/s, context %d\n", weight_bytes * 1e-6,
              copy_bw * 1e-9, context);
  std::printf("%-34s %10s %8s %10s\n", "variant", "us", "GB/s", "% of copy");
  const std::vector<std::pair<uint32_t, const char*>> variants = {
      {0, "full"},
      {kernels::kFusedDecodeSkipAttention, "no attention"},
      {kernels::kFusedDecodeSkipGridSync, "no grid barriers"},
      {kernels::kFusedDecodeSkipDot, "no dot products"},
      {kernels::kFusedDecodeSkipDot | kernels::kFusedDecodeSkipGridSync |
           kernels::kFusedDecodeSkipAttention,
       "weights streamed only"},
      {kernels::kFusedDecodeSkipCopy, "no copies (stale stages)"},
      {kernels::kFusedDecodeSkipCopy | kernels::kFusedDecodeSkipGridSync |
           kernels::kFusedDecodeSkipAttention,
       "dot products only"},
      {kernels::kFusedDecodeSkipRing | kernels::kFusedDecodeSkipGridSync |
           kernels::kFusedDecodeSkipAttention,
       "dot products, no stage waits"},
      {kernels::kFusedDecodeSkipRing | kernels::kFusedDecodeSkipDot |
           kernels::kFusedDecodeSkipGridSync | kernels::kFusedDecodeSkipAttention,
       "consumers' loop only"},
  };
  for (const auto& [debug, name] : variants) {
    a.debug = debug;
    for (int i = 0; i < 5; ++i) CHECK_CUDA(kernels::FusedDecode(a, nullptr));
    CHECK_CUDA(cudaEventRecord(e0));
    for (int i = 0; i < iterations; ++i) CHECK_CUDA(kernels::FusedDecode(a, nullptr));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / iterations;
    const double gbs = weight_bytes / (us * 1e-6) * 1e-9;
    std::printf("%-34s %10.1f %8.0f %9.1f%%\n", name, us, gbs, 100.0 * gbs * 1e9 / copy_bw);
    out["variants"][name] = {{"us", us}, {"gb_s", gbs}};
  }
  std::vector<uint64_t> trace(kernels::FusedDecodeTraceWords(kLayers));
  a.trace = Alloc<uint64_t>(static_cast<int64_t>(trace.size()));
  const char* names[] = {"norm",    "qkv",  "barrier", "attention",
                         "barrier", "o",    "barrier", "norm + gate + up",
                         "barrier", "down", "barrier"};
  // CTA 0's phases in one launch of `debug`'s variant, under out["trace_us"][key].
  auto trace_variant = [&](uint32_t debug, const std::string& key) {
    a.debug = debug;
    CHECK_CUDA(kernels::FusedDecode(a, nullptr));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(
        cudaMemcpy(trace.data(), a.trace, trace.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    std::printf("CTA 0 phases (%s), us (mean over layers 1..%d):\n", key.c_str(), kLayers - 2);
    double layer_us = 0;
    for (int p = 0; p + 1 < kernels::kFusedDecodeTracePoints - 1; ++p) {
      double sum = 0;
      for (int l = 1; l + 1 < kLayers; ++l) {
        const uint64_t* t = trace.data() + l * kernels::kFusedDecodeTracePoints;
        sum += (static_cast<double>(t[p + 1]) - static_cast<double>(t[p])) * 1e-3;
      }
      const double mean = sum / (kLayers - 2);
      layer_us += mean;
      std::printf("  %-18s %7.2f\n", names[p], mean);
      out["trace_us"][key][names[p]] = mean;
    }
    double lead = 0;
    for (int l = 1; l + 1 < kLayers; ++l) {
      const uint64_t* t = trace.data() + l * kernels::kFusedDecodeTracePoints;
      lead += (static_cast<double>(t[kernels::kFusedDecodeTracePoints - 1]) - t[0]) * 1e-3;
    }
    // The SM's clock over layers 1 .. n-2 (consumer thread 0's points 0 of layers 1 and n-1).
    const int64_t half = int64_t{kLayers} * kernels::kFusedDecodeTracePoints;
    const int64_t p0 = kernels::kFusedDecodeTracePoints, p1 = (kLayers - 1) * p0;
    const double mhz = static_cast<double>(trace[half + p1] - trace[half + p0]) /
                       (static_cast<double>(trace[p1] - trace[p0]) * 1e-3);
    // (No producer in the variants that skip the ring: its points are left from an earlier run.)
    const bool produced = (debug & kernels::kFusedDecodeSkipRing) == 0;
    std::printf(
        "  layer %.2f us; producer issued the layer's last copy %s us after its start;"
        " SM clock %.0f MHz\n",
        layer_us, produced ? std::to_string(lead / (kLayers - 2)).c_str() : "n/a", mhz);
    out["trace_us"][key]["sm_clock_mhz"] = mhz;
    out["trace_us"][key]["layer"] = layer_us;
    if (produced) out["trace_us"][key]["producer_last_copy_after_start"] = lead / (kLayers - 2);
  };
  trace_variant(0, "full");
  trace_variant(kernels::kFusedDecodeSkipCopy | kernels::kFusedDecodeSkipGridSync |
                    kernels::kFusedDecodeSkipAttention,
                "dot products only");
  trace_variant(kernels::kFusedDecodeSkipRing | kernels::kFusedDecodeSkipGridSync |
                    kernels::kFusedDecodeSkipAttention,
                "dot products, no stage waits");
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
