// cpu_forward_bench: decode speed of the CPU backend (CpuRunner) on a real model, batch 1 and
// batch B, against the memory-bandwidth roofline measured in the same run.
//
// usage: cpu_forward_bench [MODEL] [--threads N] [--prompt 128] [--decode 64] [--batch 16]
//                          [--f32] [--fp8] [--kv-fp8]
//
// MODEL defaults to $KILN_DEFAULT_MODEL (scripts/fetch-default-model). Batch 1: one sequence
// prefilled with a `prompt`-token prompt, then `decode` greedy single-token steps through the
// paged cache (block size 16). Batch B: B sequences, each prefilled the same way (different
// prompts), then `decode` steps of B tokens. Decode tok/s = generated tokens / wall time of the
// decode steps. Yardstick: a decode step must read every weight matrix once (as held: the
// checkpoint's stored bytes, or f32 with --f32; the layers' linear matrices at 1 byte and a
// float32 scale per row with --fp8, FP8 W8A8), so bytes / (measured read bandwidth) is the
// fastest step this machine's memory allows. --kv-fp8: the KV cache in e4m3.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cpu/thread_pool.h"
#include "model/checkpoint.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Best-of-3 read bandwidth over a 1 GiB buffer with `threads` threads, GB/s (16 independent
// lane sums, so the loop vectorizes and memory, not the adder, is the limit).
double ReadBandwidth(int threads) {
  const int64_t n = int64_t{1} << 28;
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::vector<float> totals(threads);
    kiln::cpu::ParallelFor(threads, threads, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float acc[16] = {};
        for (int64_t i = n / threads * t; i < n / threads * (t + 1); i += 16) {
          for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
        }
        for (float a : acc) totals[t] += a;
      }
    });
    float total = 0;
    for (float t : totals) total += t;
    const double s = Seconds(t0);
    if (total < 0) std::printf("impossible\n");
    best = std::max(best, n * sizeof(float) / s / 1e9);
  }
  return best;
}

// The engine's bookkeeping for the benchmark's sequences: contiguous block ranges.
struct Seq {
  std::vector<int32_t> tokens;
  int32_t num_computed = 0;
  int32_t first_block = 0;
};

constexpr int32_t kBlockSize = 16;

kiln::StepInputs MakeStep(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts,
                          int32_t blocks_per_seq) {
  kiln::StepInputs in;
  in.cu_seqlens.push_back(0);
  in.max_blocks_per_seq = blocks_per_seq;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Seq& s = *seqs[i];
    for (int32_t p = s.num_computed; p < s.num_computed + counts[i]; ++p) {
      in.token_ids.push_back(s.tokens[p]);
      in.positions.push_back(p);
      in.slot_mapping.push_back(int64_t{s.first_block} * kBlockSize + p);
    }
    in.cu_seqlens.push_back(in.num_tokens());
    in.seq_lens.push_back(s.num_computed + counts[i]);
    for (int32_t b = 0; b < blocks_per_seq; ++b) in.block_tables.push_back(s.first_block + b);
    kiln::StepSequence step;
    step.num_computed_tokens = s.num_computed;
    step.num_new_tokens = counts[i];
    step.do_sample = true;
    in.seqs.push_back(step);
  }
  return in;
}

void Advance(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts,
             const kiln::StepResult& r) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->num_computed += counts[i];
    seqs[i]->tokens.push_back(r.seqs[i].sampled.token_id);
  }
}

struct Figures {
  double prefill_s = 0;  // per sequence
  double decode_s = 0;
  int decode_tokens = 0;
};

// Prefills each of `seqs` alone, then runs `decode` steps over all of them together.
Figures Run(kiln::ModelRunner* runner, const std::vector<Seq*>& seqs, int decode,
            int32_t blocks_per_seq) {
  Figures f;
  for (Seq* s : seqs) {
    const std::vector<int32_t> count = {static_cast<int32_t>(s->tokens.size())};
    const auto t0 = Clock::now();
    const kiln::StepResult r = runner->Execute(MakeStep({s}, count, blocks_per_seq));
    f.prefill_s += Seconds(t0) / seqs.size();
    Advance({s}, count, r);
  }
  const std::vector<int32_t> ones(seqs.size(), 1);
  const auto t0 = Clock::now();
  for (int i = 0; i < decode; ++i) {
    Advance(seqs, ones, runner->Execute(MakeStep(seqs, ones, blocks_per_seq)));
  }
  f.decode_s = Seconds(t0);
  f.decode_tokens = decode * static_cast<int>(seqs.size());
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = std::getenv("KILN_DEFAULT_MODEL") ? std::getenv("KILN_DEFAULT_MODEL") : "";
  int threads = 0, prompt = 128, decode = 64, batch = 16;
  bool f32 = false, fp8 = false, kv_fp8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--threads") {
      threads = next();
    } else if (a == "--prompt") {
      prompt = next();
    } else if (a == "--decode") {
      decode = next();
    } else if (a == "--batch") {
      batch = next();
    } else if (a == "--f32") {
      f32 = true;
    } else if (a == "--fp8") {
      fp8 = true;
    } else if (a == "--kv-fp8") {
      kv_fp8 = true;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    } else {
      model = a;
    }
  }
  if (model.empty() || prompt < 1 || decode < 1 || batch < 1) {
    std::fprintf(stderr,
                 "usage: %s [MODEL] [--threads N] [--prompt 128] [--decode 64] [--batch 16] "
                 "[--f32] [--fp8] [--kv-fp8]\n(MODEL defaults to $KILN_DEFAULT_MODEL)\n",
                 argv[0]);
    return 2;
  }
  auto t_load = Clock::now();
  auto ckpt = kiln::Checkpoint::Open(model);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  kiln::CpuRunnerOptions options;
  options.num_threads = threads;
  options.dequantize_weights_at_load = f32;
  if (fp8) options.quantization = kiln::QuantMethod::kFp8;
  if (kv_fp8) options.kv_cache_dtype = kiln::KvCacheDType::kFp8E4M3;
  auto runner = kiln::CreateCpuRunner(*ckpt, options);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n", runner.status().ToString().c_str());
    return 1;
  }
  const double load_s = Seconds(t_load);
  const int32_t blocks_per_seq = (prompt + decode + 1 + kBlockSize - 1) / kBlockSize;
  if (!(*runner)->AllocateKvCache(blocks_per_seq * (batch + 1), kBlockSize).ok()) return 1;
  const int num_threads = threads > 0 ? threads : kiln::cpu::DefaultNumThreads();
  const int vocab = ckpt->config().vocab_size;

  std::vector<Seq> seqs(batch + 1);
  for (int s = 0; s <= batch; ++s) {
    seqs[s].first_block = s * blocks_per_seq;
    for (int i = 0; i < prompt; ++i) {
      seqs[s].tokens.push_back(
          static_cast<int32_t>((uint64_t{7919} * (i + 1) + 104729 * s) % (vocab - 1)));
    }
  }
  const Figures one = Run(runner->get(), {&seqs[0]}, decode, blocks_per_seq);
  std::vector<Seq*> group;
  for (int s = 1; s <= batch; ++s) group.push_back(&seqs[s]);
  const Figures many = Run(runner->get(), group, decode, blocks_per_seq);

  // Bytes a decode step reads: every matrix once, as held; the embedding matrix too when tied
  // (it is the lm_head).
  int64_t matrix_bytes = 0;
  for (const kiln::Weight& w : ckpt->weights()) {
    if (w.shape.ndim() != 2) continue;
    if (fp8 && w.name.starts_with("model.layers.")) {
      matrix_bytes += w.shape.numel() + w.shape[0] * 4;
    } else {
      matrix_bytes += f32 ? w.shape.numel() * 4 : w.nbytes;
    }
  }
  const double bandwidth = ReadBandwidth(num_threads);
  const double roofline_tok_s = bandwidth * 1e9 / matrix_bytes;
  const double tok_s_1 = one.decode_tokens / one.decode_s;
  const double tok_s_b = many.decode_tokens / many.decode_s;

  std::printf(
      "{\"bench\": \"cpu_forward\", \"model\": \"%s\", \"threads\": %d, \"weights\": \"%s\", "
      "\"matrix_bytes\": %lld, \"read_bandwidth_gb_s\": %.2f, \"load_s\": %.3f, "
      "\"prompt_tokens\": %d, \"prefill_tok_s\": %.1f, \"decode_steps\": %d, "
      "\"batch1_decode_tok_s\": %.2f, \"batch1_step_ms\": %.2f, \"batch\": %d, "
      "\"batch_decode_tok_s\": %.2f, \"batch_step_ms\": %.2f, "
      "\"roofline_batch1_tok_s\": %.1f}\n",
      ckpt->name().c_str(), num_threads,
      fp8 ? (kv_fp8 ? "fp8 w8a8, fp8 kv" : "fp8 w8a8") : (f32 ? "f32" : "as stored"),
      static_cast<long long>(matrix_bytes), bandwidth, load_s, prompt, prompt / one.prefill_s,
      decode, tok_s_1, 1e3 * one.decode_s / decode, batch, tok_s_b, 1e3 * many.decode_s / decode,
      roofline_tok_s);
  std::printf("\n%-34s %12s\n", "cpu_forward_bench", "value");
  std::printf("%-34s %12s\n", "model", ckpt->name().c_str());
  std::printf("%-34s %12d\n", "threads", num_threads);
  std::printf("%-34s %12.1f\n", "weight matrices read / step (MB)", matrix_bytes / 1e6);
  std::printf("%-34s %12.2f\n", "measured read bandwidth (GB/s)", bandwidth);
  std::printf("%-34s %12.1f\n", "prefill (tok/s, 1 seq)", prompt / one.prefill_s);
  std::printf("%-34s %12.2f\n", "batch 1 decode (tok/s)", tok_s_1);
  std::printf("%-34s %12.2f\n", "batch 1 step (ms)", 1e3 * one.decode_s / decode);
  std::printf("%-34s %12.1f\n", "batch 1 roofline (tok/s)", roofline_tok_s);
  std::printf("%-34s %12.2f\n", ("batch " + std::to_string(batch) + " decode (tok/s)").c_str(),
              tok_s_b);
  std::printf("%-34s %12.2f\n", ("batch " + std::to_string(batch) + " step (ms)").c_str(),
              1e3 * many.decode_s / decode);
  return 0;
}
