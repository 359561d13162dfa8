// cuda_bench: the CUDA backend's figures (issue "CUDA backend"), each beside its yardstick
// measured in the same run on the same device:
//   yardsticks: device copy bandwidth (read + write bytes of a 2 GiB device-to-device copy) and
//               cuBLASLt bf16 GEMM TFLOP/s at 8192^3;
//   1. batch-1 decode (prompt 128, 256 new tokens): tok/s against the bandwidth roofline (bytes
//      per token = every weight but the embedding table, plus the KV read);
//   2. prefill of one 4,096-token prompt: TTFT and TFLOP/s (2 * params * tokens + causal
//      attention) against the GEMM peak;
//   3. decode steps at batch 64 and 256 with 1,024-token contexts: bandwidth (weights + KV read)
//      against the copy bandwidth;
//   4. offline throughput: N requests of I in / O out tokens, ignore_eos (default 1,000 x
//      1,000 / 1,000);
//   6. start-up to ready, with its breakdown (open + tokenizer, weight upload, graph capture).
// (Figure 5, HF transformers on the same GPU, is bench/cuda_hf_baseline.py.)
//
//   build/bench/cuda_bench --model DIR [--json F] [--skip-offline] [--sections 1235]
//                          [--profile-ops]  (per-op device time of the decode steps; no graphs)
//                          [--max-num-seqs N (256)] [--max-num-batched-tokens N (8192)]
//                          [--gpu-memory-utilization F (0.9)] [--capacity-policy P]
//                          [--block-size N (16)] [--swap-space SIZE (4GiB; 0 = recompute)]
//                          [--offline-requests N] [--offline-in N] [--offline-out N]
//                          [--no-async-scheduling]  (schedule after each step's result)
//                          [--dtype auto|bfloat16|float16] [-q|--quantization fp8|...]
//                          [--kv-cache-dtype auto|fp8]
//                          [--fp32-residual]  (FP8: no 24-bit residual stream, CudaRunnerOptions)
//                          [--no-rope-q-codes]  (fp8 cache: RoPE writes q back in T)
//                          [--no-fused-gate-up]  (FP8: cuBLASLt's gate_up, then SiluMulFp8)
//                          [--fused-decode]  (FP8 batch 1: every layer in one kernel)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "core/buffer.h"
#include "core/units.h"
#include "cuda_yardstick.h"
#include "engine/llm.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;
using bench::Clock;
using bench::Seconds;

double Median(const std::vector<double>& v) { return bench::MedianOf(v); }

// cuBLASLt bf16 GEMM at 8192^3 through kiln's Gemm (tuned), FLOP/s (median of 20).
double GemmPeak() {
  const int64_t n = 8192;
  auto gemm = cuda::Gemm::Create();
  BENCH_CHECK(gemm.ok());
  DeviceBuffer x = DeviceBuffer::Allocate(n * n * 2).value();
  DeviceBuffer w = DeviceBuffer::Allocate(n * n * 2).value();
  DeviceBuffer out = DeviceBuffer::Allocate(n * n * 2).value();
  // Random-looking bf16 bits in [0.5, 2): timing on zeros flatters the tensor cores.
  std::vector<uint16_t> host(n * n);
  std::mt19937 rng(1);
  for (uint16_t& v : host) v = static_cast<uint16_t>(0x3f00 + (rng() & 0xff));
  BENCH_CHECK(x.CopyFromHost(host.data(), host.size() * 2).ok());
  BENCH_CHECK(w.CopyFromHost(host.data(), host.size() * 2).ok());
  cuda::GemmShape shape{n, n, n, n, n, false, false};
  BENCH_CHECK((*gemm)->Tune(shape, 8, nullptr).ok());
  const double seconds = bench::MedianEventSeconds(5, 20, [&] {
    BENCH_CHECK((*gemm)
                    ->Linear(static_cast<const __nv_bfloat16*>(x.data()), n, n,
                             static_cast<const __nv_bfloat16*>(w.data()), n, n, nullptr, out.data(),
                             n, false, nullptr)
                    .ok());
  });
  return 2.0 * n * n * n / seconds;
}

std::vector<int32_t> RandomPrompt(std::mt19937& rng, int32_t len, int32_t vocab) {
  std::vector<int32_t> ids(len);
  for (int32_t& id : ids) id = std::uniform_int_distribution<int32_t>(3, vocab - 1)(rng);
  return ids;
}

struct Timeline {
  std::map<RequestId, double> first_token;  // seconds since start
  std::map<RequestId, double> finish;
  int64_t generated = 0;
  std::vector<double> decode_step_seconds;          // steps in which every sequence decoded
  std::vector<double> decode_step_gpu_seconds;      // their device time (CUDA events)
  std::vector<double> decode_step_bookkeeping_us;   // their schedule + build + update
  std::map<std::string, double> decode_op_seconds;  // their device time per op (--profile-ops)
  // Every step, for the offline breakdown: decode-only steps (every sequence computes one
  // token) against steps that carry prompt tokens.
  int64_t decode_only_steps = 0, mixed_steps = 0;
  double decode_only_seconds = 0, mixed_seconds = 0;
  int64_t decode_only_seqs = 0;     // summed batch sizes of the decode-only steps
  int64_t mixed_prompt_tokens = 0;  // tokens of mixed steps beyond one per sequence
  std::map<std::string, double> decode_only_op_seconds;  // --profile-ops, decode-only steps
  std::map<std::string, double> mixed_op_seconds;        // --profile-ops, steps with prompts
  double total_seconds = 0;
};

// Adds the requests and steps the engine until all finish.
// decode_step_seconds collects the steps in which all `prompts` decode together.
Timeline RunEngine(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                   int32_t max_tokens, RequestId first_id) {
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.id = first_id + static_cast<RequestId>(i);
    r.prompt_token_ids = prompts[i];
    r.params = params;
    r.seed = i;
    const Status st = engine.AddRequest(std::move(r));
    BENCH_CHECK(st.ok());
  }
  Timeline t;
  const auto start = Clock::now();
  auto gpu_seconds = [&] {
    auto report = GetCudaMemoryReport(engine.runner());
    return report.ok() ? report->gpu_step_seconds : 0.0;
  };
  auto op_seconds = [&] {
    auto report = GetCudaMemoryReport(engine.runner());
    return report.ok() ? report->op_seconds : std::map<std::string, double>();
  };
  while (engine.HasWork()) {
    const auto s0 = Clock::now();
    const double gpu0 = gpu_seconds();
    const std::map<std::string, double> ops0 = op_seconds();
    std::vector<RequestOutput> outputs = engine.Step();
    const double now = Seconds(start, Clock::now());
    const StepStats& step = engine.stats().last_step;
    const double step_seconds = Seconds(s0, Clock::now());
    // This step's device seconds per op (--profile-ops), added to `into`.
    const std::map<std::string, double> ops1 = op_seconds();
    auto add_step_ops = [&](std::map<std::string, double>& into) {
      for (const auto& [op, seconds] : ops1) {
        into[op] += seconds - (ops0.contains(op) ? ops0.at(op) : 0.0);
      }
    };
    if (step.num_decode_seqs == step.num_seqs) {
      add_step_ops(t.decode_only_op_seconds);
      ++t.decode_only_steps;
      t.decode_only_seconds += step_seconds;
      t.decode_only_seqs += step.num_seqs;
    } else {
      add_step_ops(t.mixed_op_seconds);
      ++t.mixed_steps;
      t.mixed_seconds += step_seconds;
      t.mixed_prompt_tokens += step.num_batched_tokens - step.num_decode_seqs;
    }
    if (step.num_seqs == static_cast<int32_t>(prompts.size()) &&
        step.num_decode_seqs == step.num_seqs) {
      t.decode_step_seconds.push_back(step_seconds);
      t.decode_step_gpu_seconds.push_back(gpu_seconds() - gpu0);
      t.decode_step_bookkeeping_us.push_back(step.bookkeeping_us());
      add_step_ops(t.decode_op_seconds);
    }
    for (const RequestOutput& o : outputs) {
      if (!o.new_token_ids.empty() && !t.first_token.contains(o.id)) t.first_token[o.id] = now;
      t.generated += static_cast<int64_t>(o.new_token_ids.size());
      if (o.finished) t.finish[o.id] = now;
    }
  }
  t.total_seconds = Seconds(start, Clock::now());
  return t;
}

// Per-op device time of the decode steps of `t` (--profile-ops), as ms per step.
Json OpBreakdown(const Timeline& t, const char* label) {
  Json ops;
  if (t.decode_op_seconds.empty() || t.decode_step_seconds.empty()) return ops;
  const double steps = static_cast<double>(t.decode_step_seconds.size());
  double total = 0;
  for (const auto& [op, seconds] : t.decode_op_seconds) total += seconds;
  std::printf("   %s, device ms per decode step by op (kernels launched one by one):\n", label);
  for (const auto& [op, seconds] : t.decode_op_seconds) {
    ops[op] = seconds / steps * 1e3;
    std::printf("     %-20s %8.3f ms  %5.1f %%\n", op.c_str(), seconds / steps * 1e3,
                100 * seconds / total);
  }
  return ops;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;
  std::string model, json_path;
  bool skip_offline = false;
  std::string sections = "123456";  // which figures to measure (start-up is always measured)
  bool profile_ops = false;
  int max_num_seqs = 256, max_num_batched_tokens = 8192, block_size = 16;
  float gpu_memory_utilization = 0.9f;
  std::string capacity_policy = "max_utilization";
  std::string swap_space;  // "" = the engine's default
  int offline_requests = 1000, offline_in = 1000, offline_out = 1000;
  std::optional<bool> async_scheduling;
  std::string dtype = "auto";                // unset: the engine's default (on for CUDA)
  std::string quantization, kv_cache_dtype;  // "": the engine's defaults
  bool fp32_residual = false;
  bool no_rope_q_codes = false;
  bool no_fused_gate_up = false;
  bool fused_decode = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cuda_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") {
      model = next();
    } else if (a == "--json") {
      json_path = next();
    } else if (a == "--max-num-seqs") {
      max_num_seqs = std::stoi(next());
    } else if (a == "--max-num-batched-tokens") {
      max_num_batched_tokens = std::stoi(next());
    } else if (a == "--block-size") {
      block_size = std::stoi(next());
    } else if (a == "--swap-space") {
      swap_space = next();
    } else if (a == "--capacity-policy") {
      capacity_policy = next();
    } else if (a == "--gpu-memory-utilization") {
      gpu_memory_utilization = std::stof(next());
    } else if (a == "--profile-ops") {
      profile_ops = true;
    } else if (a == "--sections") {
      sections = next();
    } else if (a == "--dtype") {
      dtype = next();
    } else if (a == "-q" || a == "--quantization") {
      quantization = next();
    } else if (a == "--kv-cache-dtype") {
      kv_cache_dtype = next();
    } else if (a == "--fp32-residual") {
      fp32_residual = true;
    } else if (a == "--no-rope-q-codes") {
      no_rope_q_codes = true;
    } else if (a == "--no-fused-gate-up") {
      no_fused_gate_up = true;
    } else if (a == "--fused-decode") {
      fused_decode = true;
    } else if (a == "--no-async-scheduling") {
      async_scheduling = false;
    } else if (a == "--skip-offline") {
      skip_offline = true;
    } else if (a == "--offline-requests") {
      offline_requests = std::stoi(next());
    } else if (a == "--offline-in") {
      offline_in = std::stoi(next());
    } else if (a == "--offline-out") {
      offline_out = std::stoi(next());
    } else {
      std::fprintf(stderr, "usage: cuda_bench --model DIR [--json F] [--skip-offline]\n");
      return 2;
    }
  }
  if (model.empty() || !HasCudaDevice()) {
    std::fprintf(stderr, "cuda_bench: needs --model and a CUDA device\n");
    return 2;
  }
  Json out;
  auto info = GetCudaDeviceInfo(0);
  out["device"] = info.ok() ? info->name : "?";
  const double copy_bw = bench::DeviceCopyBandwidth();
  const double gemm_peak = GemmPeak();
  out["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  out["gemm_bf16_8192_tflops"] = gemm_peak / 1e12;
  std::printf("yardsticks: copy %.0f GB/s, cuBLASLt bf16 8192^3 %.0f TFLOP/s\n", copy_bw / 1e9,
              gemm_peak / 1e12);

  // 6. Start-up.
  LlmOptions options;
  options.device = "cuda";
  options.profile_cuda_ops = profile_ops;
  options.engine.scheduler.max_num_seqs = max_num_seqs;
  options.gpu_memory_utilization = gpu_memory_utilization;
  options.engine.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  options.engine.async_scheduling = async_scheduling;
  options.dtype = dtype;
  if (!quantization.empty()) options.quantization = quantization;
  if (!kv_cache_dtype.empty()) options.kv_cache_dtype = kv_cache_dtype;
  options.residual_24bit = !fp32_residual;
  options.rope_q_codes = !no_rope_q_codes;
  options.fused_gate_up = !no_fused_gate_up;
  options.fused_decode = fused_decode;
  auto policy = ParseCapacityPolicy(capacity_policy);
  if (!policy.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", policy.status().ToString().c_str());
    return 2;
  }
  options.engine.scheduler.capacity_policy = *policy;
  options.engine.max_model_len = 8192;
  options.engine.block_size = block_size;
  if (swap_space == "0") {
    options.swap_space_bytes = 0;
  } else if (!swap_space.empty()) {
    auto bytes = ParseByteSize(swap_space);
    if (!bytes.ok()) {
      std::fprintf(stderr, "cuda_bench: --swap-space: %s\n", bytes.status().ToString().c_str());
      return 2;
    }
    options.swap_space_bytes = *bytes;
  }
  const auto t0 = Clock::now();
  auto created = LLM::Create(model, options);
  const double startup = Seconds(t0, Clock::now());
  if (!created.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", created.status().ToString().c_str());
    return 1;
  }
  LLM& llm = **created;
  Engine& engine = llm.engine();
  const ModelConfig& c = llm.model_config();
  auto memory = GetCudaMemoryReport(engine.runner());
  BENCH_CHECK(memory.ok());
  out["dtype"] = DTypeName(memory->dtype);
  out["async_scheduling"] = engine.async_scheduling();
  out["startup"] = {{"seconds", startup},
                    {"upload_seconds", memory->upload_seconds},
                    {"graph_capture_seconds", memory->graph_capture_seconds},
                    {"gemm_tune_seconds", memory->gemm_tune_seconds},
                    {"weight_bytes", memory->weight_bytes},
                    {"kv_cache_bytes", memory->kv_cache_bytes}};
  std::printf("start-up %.2f s (upload %.2f s, graph capture %.2f s); weights %.2f GB\n", startup,
              memory->upload_seconds, memory->graph_capture_seconds, memory->weight_bytes / 1e9);

  const double embed_bytes = 2.0 * c.vocab_size * c.hidden_size;
  const double weight_bytes_read = memory->weight_bytes - (c.tie_word_embeddings ? 0 : embed_bytes);
  const double kv_bytes_per_token = c.KvBytesPerToken(DType::kBF16);
  const double params = static_cast<double>(c.NumParameters()) - c.vocab_size * 1.0 * c.hidden_size;
  std::mt19937 rng(7);
  RequestId next_id = 1;

  auto want = [&](char section) { return sections.find(section) != std::string::npos; };
  if (skip_offline)
    sections.erase(std::remove(sections.begin(), sections.end(), '4'), sections.end());
  // 1. Batch-1 decode.
  if (want('1')) {
    auto t = RunEngine(engine, {RandomPrompt(rng, 128, c.vocab_size)}, 256, next_id++);
    const double decode_s = t.finish.begin()->second - t.first_token.begin()->second;
    const double tok_s = 255 / decode_s;
    const double bytes = weight_bytes_read + kv_bytes_per_token * (128 + 128);
    const double roofline = copy_bw / bytes;
    const double gpu = Median(t.decode_step_gpu_seconds);
    out["decode_batch1"] = {{"tok_s", tok_s},
                            {"step_ms", Median(t.decode_step_seconds) * 1e3},
                            {"gpu_ms", gpu * 1e3},
                            {"gpu_fraction", 1 / (gpu * roofline)},
                            {"bookkeeping_us", Median(t.decode_step_bookkeeping_us)},
                            {"roofline_tok_s", roofline},
                            {"fraction", tok_s / roofline},
                            {"ttft_s", t.first_token.begin()->second},
                            {"end_to_end_tok_s", 256 / t.total_seconds}};
    std::printf(
        "1. batch-1 decode: %.1f tok/s, roofline %.1f tok/s (%.1f %%); device %.3f ms per "
        "token (%.1f %%), engine bookkeeping %.0f us\n",
        tok_s, roofline, 100 * tok_s / roofline, gpu * 1e3, 100 / (gpu * roofline),
        Median(t.decode_step_bookkeeping_us));
    if (profile_ops) out["decode_batch1"]["op_ms"] = OpBreakdown(t, "batch 1");
  }
  // 2. Prefill 4,096.
  if (want('2')) {
    std::vector<double> ttfts;
    for (int rep = 0; rep < 3; ++rep) {
      auto t = RunEngine(engine, {RandomPrompt(rng, 4096, c.vocab_size)}, 1, next_id++);
      ttfts.push_back(t.first_token.begin()->second);
    }
    const double ttft = Median(ttfts);
    const double tokens = 4096;
    const double flops =
        2 * params * tokens + 2.0 * tokens * tokens * c.num_heads * c.head_dim * c.num_layers;
    out["prefill_4096"] = {{"ttft_s", ttft},
                           {"tflops", flops / ttft / 1e12},
                           {"fraction_of_gemm_peak", flops / ttft / gemm_peak}};
    std::printf("2. prefill 4096: TTFT %.1f ms, %.0f TFLOP/s (%.1f %% of GEMM peak)\n", ttft * 1e3,
                flops / ttft / 1e12, 100 * flops / ttft / gemm_peak);
  }
  // 3. Decode steps at batch 64 / 256, 1,024-token contexts.
  for (int batch : {64, 256}) {
    if (!want('3')) break;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < batch; ++i) prompts.push_back(RandomPrompt(rng, 1016, c.vocab_size));
    // Enough new tokens that the first prompts are still decoding when the last finishes its
    // (chunked) prefill: 8,192 prompt tokens per step.
    auto t = RunEngine(engine, prompts, 16 + batch * 1016 / 8192, next_id);
    next_id += batch;
    if (t.decode_step_seconds.empty()) {
      std::printf("3. decode batch %d: no step had every sequence decoding\n", batch);
      continue;
    }
    const double step = Median(t.decode_step_seconds);
    const double bytes = weight_bytes_read + kv_bytes_per_token * batch * 1024.0;
    const double gpu = Median(t.decode_step_gpu_seconds);
    out["decode_batch" + std::to_string(batch)] = {
        {"step_ms", step * 1e3},
        {"tok_s", batch / step},
        {"bandwidth_gb_s", bytes / step / 1e9},
        {"fraction_of_copy", bytes / step / copy_bw},
        {"gpu_ms", gpu * 1e3},
        {"gpu_fraction_of_copy", bytes / gpu / copy_bw},
        {"bookkeeping_us", Median(t.decode_step_bookkeeping_us)}};
    std::printf(
        "3. decode batch %d ctx 1024: step %.2f ms, %.0f tok/s, %.0f GB/s (%.1f %% of copy); "
        "device %.2f ms (%.1f %%), engine bookkeeping %.0f us\n",
        batch, step * 1e3, batch / step, bytes / step / 1e9, 100 * bytes / step / copy_bw,
        gpu * 1e3, 100 * bytes / gpu / copy_bw, Median(t.decode_step_bookkeeping_us));
    if (profile_ops) {
      out["decode_batch" + std::to_string(batch)]["op_ms"] =
          OpBreakdown(t, ("batch " + std::to_string(batch)).c_str());
    }
  }
  // 5 (kiln's side). Batch 64, 1,024-token prompts, 256 new tokens, end to end as HF generate.
  if (want('5')) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 64; ++i) prompts.push_back(RandomPrompt(rng, 1024, c.vocab_size));
    auto t = RunEngine(engine, prompts, 256, next_id);
    next_id += 64;
    out["batch64_prompt1024_gen256"] = {{"seconds", t.total_seconds},
                                        {"output_tok_s", t.generated / t.total_seconds}};
    std::printf("5. batch 64 x (1024 in, 256 out): %.0f output tok/s end to end\n",
                t.generated / t.total_seconds);
  }
  // 4. Offline throughput.
  if (want('4')) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < offline_requests; ++i) {
      prompts.push_back(RandomPrompt(rng, offline_in, c.vocab_size));
    }
    auto t = RunEngine(engine, prompts, offline_out, next_id);
    next_id += offline_requests;
    const double tok_s = t.generated / t.total_seconds;
    const EngineStats& stats = engine.stats();
    const double mean_batch = t.decode_only_steps > 0
                                  ? static_cast<double>(t.decode_only_seqs) / t.decode_only_steps
                                  : 0.0;
    out["offline"] = {{"requests", offline_requests},
                      {"input_len", offline_in},
                      {"max_num_seqs", max_num_seqs},
                      {"preemptions", stats.num_preemptions},
                      {"swap_preemptions", stats.num_swap_preemptions},
                      {"swap_space_blocks", stats.num_host_kv_blocks},
                      {"swapped_out_blocks", stats.kv.num_swapped_out_blocks},
                      {"capacity_policy", capacity_policy},
                      {"max_num_batched_tokens", max_num_batched_tokens},
                      {"gpu_memory_utilization", gpu_memory_utilization},
                      {"output_len", offline_out},
                      {"seconds", t.total_seconds},
                      {"output_tok_s", tok_s},
                      {"trtllm_published_h100_fp16", 7055},
                      {"ratio_to_trtllm", tok_s / 7055},
                      {"block_size", block_size},
                      {"steps",
                       {{"decode_only", t.decode_only_steps},
                        {"decode_only_seconds", t.decode_only_seconds},
                        {"decode_only_mean_batch", mean_batch},
                        {"mixed", t.mixed_steps},
                        {"mixed_seconds", t.mixed_seconds},
                        {"mixed_prompt_tokens", t.mixed_prompt_tokens}}}};
    if (!t.decode_only_op_seconds.empty()) {
      Json decode_ops, mixed_ops;
      std::printf(
          "   device seconds by op (kernels one by one): decode-only steps, with prompts\n");
      for (const auto& [op, seconds] : t.decode_only_op_seconds) {
        const double mixed = t.mixed_op_seconds.contains(op) ? t.mixed_op_seconds.at(op) : 0.0;
        decode_ops[op] = seconds;
        mixed_ops[op] = mixed;
        std::printf("     %-20s %8.2f s %8.2f s\n", op.c_str(), seconds, mixed);
      }
      out["offline"]["decode_only_op_seconds"] = decode_ops;
      out["offline"]["mixed_op_seconds"] = mixed_ops;
    }
    std::printf(
        "4. offline %d x %d/%d: %.0f output tok/s in %.1f s (TensorRT-LLM published 7055 "
        "on H100 FP16: %.2fx)\n",
        offline_requests, offline_in, offline_out, tok_s, t.total_seconds, tok_s / 7055);
    std::printf(
        "   decode-only steps %ld (%.1f s, mean batch %.1f); steps with prompt tokens %ld (%.1f s, "
        "%ld prompt tokens)\n",
        static_cast<long>(t.decode_only_steps), t.decode_only_seconds, mean_batch,
        static_cast<long>(t.mixed_steps), t.mixed_seconds,
        static_cast<long>(t.mixed_prompt_tokens));
    std::printf("   preemptions %ld (%ld swapped to host, %ld blocks out; swap space %d blocks)\n",
                static_cast<long>(stats.num_preemptions),
                static_cast<long>(stats.num_swap_preemptions),
                static_cast<long>(stats.kv.num_swapped_out_blocks), stats.num_host_kv_blocks);
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
