// The CUDA ModelRunner (DESIGN.md §4): the Llama-family forward pass of backend/cpu/cpu_runner.h
// on one GPU, bf16 or fp16 weights, activations and KV cache (CudaRunnerOptions::dtype) with fp32
// accumulation, an fp32 residual stream and fp32 logits.
//
//   h = embed(token_ids)                                            kernels::EmbeddingLookup
//   per layer:  x = rms_norm(h (+= previous delta))                 kernels::RmsNorm (fused add)
//               qkv = x Wqkv^T (+ b)                                Gemm (cuBLASLt, or Gemv
//                                                                    for a few rows)
//               rope(q, k); k, v -> paged cache                     kernels::RopeStoreKv
//               a = attention: decode rows / prefill rows            kernels::PagedDecodeAttention
//               /
//                                                                    PagedPrefillAttention
//               d = a Wo^T;  x = rms_norm(h += d)                   Gemm, RmsNorm
//               d = silu(x Wg^T) * (x Wu^T) Wd^T                     Gemm, SiluMul, Gemm
//   logits = rms_norm(h + d)[rows] Wlm^T (fp32)                     RmsNorm (row pick), Gemm
//   sample / score the rows
//
// Memory (reported at start-up): the weights, an activation workspace sized for
// max_num_tokens tokens per step, and the KV pool the engine asks for (AllocateKvCache), one
// allocation of [layers][K|V][num_blocks, kv_heads, block_size, head_dim] in the runner's dtype.
//
// Decode steps (every sequence computes one token, no prompt logprobs, at most max_graph_batch
// sequences) replay a CUDA graph captured per padded batch size at AllocateKvCache; other steps
// launch the kernels directly.
//
// GGUF `llama` q/k rows stay in llama.cpp's permuted order and RoPE uses the matching
// interleaved pairs: the attention scores are the same dot products in another order. A W4A16
// checkpoint's q/k rows are put in that order at upload too, and its gate_up rows in runs of 8
// (cuda::W4RowOrder, backend/cuda/weight_upload.h), for the one-token GEMV's epilogues.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backend/model_runner.h"
#include "core/dtype.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

// CudaRunnerOptions::l2_prefetch_bytes's default, the best of 0 / 2 / 4 / 8 / 16 / 32 MiB at
// batch 1 on the H100 (bf16, FP8 and W4A16 8B models; docs/benchmarks.md, session 12): larger
// hints are evicted before their layer runs and cost bandwidth. Not ahead of W4A16 weights in
// one-token steps: since their GEMV streams the row by resident blocks (kernels/w4a16.cu), the
// hint costs the H200's batch-1 step 20 us (docs/benchmarks.md, session 40), while bf16 and FP8
// still gain from it there.
inline constexpr int64_t kDefaultL2PrefetchBytes = int64_t{4} << 20;

struct CudaRunnerOptions {
  int device = 0;
  // Weights, activations and KV cache: DType::kBF16 or kF16. Unset: DefaultGpuDType
  // (model/checkpoint.h).
  std::optional<DType> dtype;
  // kFp8: the linear layers of every decoder layer run FP8 W8A8 (model/quantization.h); the
  // checkpoint's 16-bit weights are quantized at upload. kInt8 / kW4A16 come from a checkpoint
  // whose linear weights are already int8 (+ row scales) resp. packed 4-bit (+ group scales):
  // they run as Gemm::LinearInt8 resp. Gemm::LinearW4 (the W4 codes repacked at upload).
  QuantMethod quantization = QuantMethod::kNone;
  // kFp8E4M3: the KV cache holds e4m3 (half the bytes of bf16 per block).
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  // The most tokens one step carries (the scheduler's max_num_batched_tokens, or more); sizes
  // the activation workspace.
  int32_t max_num_tokens = 8192;
  int32_t max_num_seqs = 256;  // the most sequences one step carries
  int32_t max_model_len = 0;   // 0 = the model's max_position_embeddings
  bool enable_cuda_graphs = true;
  // Launch the step's kernels with programmatic dependent launch (kernels/launch.h) on devices
  // of compute capability 9.0 and later: each kernel's blocks start, and stream their first
  // weights, while the previous kernel finishes. Process-wide while this runner lives.
  bool programmatic_launch = true;
  // FP8 steps of more than Gemm::fp8_gemv_max_rows() tokens: the norms and SiluMul write the
  // next linear layer's e4m3 input and per-token scales (kernels::RmsNormF32ResidualFp8,
  // SiluMulFp8) instead of a T row that Gemm::LinearFp8 quantizes in a pass of its own. The
  // codes are the same either way.
  bool fuse_activation_quant = true;
  // FP8 GEMMs (steps of more rows than the W8A16 GEMV's) accumulate with cuBLASLt's fast
  // accumulation (cuda::Gemm::set_fp8_fast_accum): 2-4 % more offline throughput on an H100,
  // perplexity of the default model within +-0.13 % of the promoted sums' (docs/quantization.md).
  bool fp8_fast_accum = true;
  // Over an fp8 KV cache on Hopper, prompt attention runs e4m3 mma's (kernels::PrefillKernel::
  // kWgmmaE4m3: Q and the softmax weights rounded to e4m3); false: fp16 mma's on the widened
  // codes. Process-wide (kernels::SetPrefillKernel), like programmatic_launch.
  bool e4m3_prefill_attention = true;
  // FP8 steps of kFp8FusedScalesMinRows (48) tokens or more keep the residual stream in 24 bits
  // a value (kernels::RmsNormResidual24Fp8: 16 significant bits, 3 bytes) instead of fp32:
  // the norms move 9 bytes a hidden element instead of 11 (H100, 8B: 15.3 -> 13.4 ms a
  // 15,360-token prompt step; docs/benchmarks.md, session 29).
  bool residual_24bit = true;
  // Over an fp8 KV cache on Hopper (kernels::PrefillTakesQCodes), RoPE hands the prompt rows' q
  // to the e4m3 prefill kernel as the e4m3 codes and row scales that kernel would compute
  // (kernels::PrefillQCodes) instead of writing the T row back: the same bits, 8 KiB less
  // written and read a token of the 8B. false: RoPE writes q back (for A/B benchmarks).
  bool rope_q_codes = true;
  // FP8 prompt steps on Hopper (kernels::Fp8GateUpSilu): the gate_up GEMM computes SiluMul in
  // its epilogue and writes the bf16 products, which QuantizeRowsFp8 turns into down's input;
  // half the bytes of the bf16 gate and up sums are never written or read. false: cuBLASLt's
  // GEMM and SiluMulFp8 (for A/B benchmarks).
  bool fused_gate_up = true;
  // Decode steps whose gate_up runs the W8A16 GEMV (FP8 or INT8 layers, up to
  // fp8_gemv_max_rows / int8_gemv_max_rows tokens), and one-token W4A16 steps whose gate_up
  // runs the streamed GEMV with its norm (gemv_norm): SiluMul in the GEMV's epilogue
  // (cuda::Gemm::GateUpSiluW8, LinearW4Norm with W4Epilogue::silu_mul), one launch and the
  // gate_up row's round trip less a layer, the same bits. false: the GEMV then SiluMul (for A/B
  // benchmarks). W4A16 gate_up rows are stored in runs of 8 either way
  // (kernels::GateUpLayout::kRunsOf8).
  bool gemv_silu = true;
  // The same for qkv: RoPE and the KV-cache write in the qkv GEMV's epilogue
  // (cuda::Gemm::QkvRopeW8, LinearW4Norm with W4Epilogue::rope) instead of kernels::RopeStoreKv,
  // except in steps where RoPE hands prompt rows' q to the prefill kernel as codes
  // (rope_q_codes). The same bits. W4A16 q and k rows are stored in RoPE's interleaved pair
  // order either way (RoPE runs interleaved on them).
  bool gemv_rope = true;
  // The W8A16 GEMVs in their persistent form (cuda::Gemm::set_gemv_persistent): one wave of
  // blocks whose lanes keep their weight loads in flight from one output to the next, the same
  // bits; and FP8's one-row GEMV on the tensor cores where it pays (kernels::GemvW8ArgsT::mma,
  // another summation order). false: a block an 8 outputs (for A/B benchmarks).
  bool gemv_persistent = true;
  // One-token steps of W4A16 layers: the residual RMS norm before qkv and before gate_up made in
  // the prologue of the streamed W4A16 GEMV after it (cuda::Gemm::LinearW4Norm), one launch less
  // each, the same bits. false: kernels::RmsNormF32Residual then the GEMV (for A/B benchmarks).
  bool gemv_norm = true;
  // FP8 steps of up to this many tokens run their linear layers weight-only (W8A16 GEMV), more
  // tokens quantize their activations per token for cuBLASLt (cuda::Gemm::set_fp8_gemv_max_rows;
  // 0: always the latter). -1: cuda::Gemm::kFp8GemvDefaultRows.
  int32_t fp8_gemv_max_rows = -1;
  // Batch-1 decode steps of FP8 models (bf16, every linear layer in e4m3) on Hopper run all
  // decoder layers as one persistent kernel (kernels::FusedDecode) that streams the weights
  // through the norms, attention and the barriers between them. Off by default: on the H100 it
  // is still slower than the kernel-per-op step (docs/benchmarks.md, session 32).
  bool fused_decode = false;
  // Skinny linear layers (decode steps of a few rows) ask L2 for up to this many bytes of the
  // next linear layer's weights as each block's stream ends (cuda::L2Prefetch), so that DRAM
  // streams through the tail and the norms, RoPE, attention and SiluMul between them. 0: none;
  // -1: kDefaultL2PrefetchBytes, except none ahead of W4A16 weights in one-token steps.
  int64_t l2_prefetch_bytes = -1;
  int32_t max_graph_batch = 256;  // decode steps of up to this many sequences replay graphs
  // Time cuBLASLt's candidate algorithms for the decode graphs' linear layers at start-up (on
  // the model's own weights) instead of taking the heuristic's first pick. An engine
  // directory's GEMM table (EngineInfo::gemm_table_path), when it was tuned on this GPU and
  // cuBLASLt, supplies them without timing.
  bool tune_gemms = true;
  // Record CUDA events between the ops of every step and add up device time per op
  // (CudaMemoryReport::op_seconds), for benchmarks. Steps then launch kernels one by one (no
  // graphs), so the figures describe kernels, not the graph replay.
  bool profile_ops = false;
  // Called as weight bytes reach the device (done, total), for a progress bar.
  std::function<void(int64_t done, int64_t total)> upload_progress;
};

struct CudaMemoryReport {
  DType dtype = DType::kBF16;  // the runner's weights, activations and KV cache
  int64_t weight_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t device_total_bytes = 0;
  int64_t device_free_bytes = 0;     // after the allocations above
  double upload_seconds = 0;         // reading, converting and uploading the weights
  double graph_capture_seconds = 0;  // capturing the decode graphs (at AllocateKvCache)
  double gemm_tune_seconds = 0;      // part of graph_capture_seconds: timing GEMM algorithms
  int32_t gemm_table_entries = 0;    // algorithms taken from the engine's GEMM table
  // Device time of the steps so far that sampled on the device (first copy in to last copy
  // back, CUDA events), to set against their wall time: the difference is host work the GPU
  // waited for.
  int64_t timed_steps = 0;
  double gpu_step_seconds = 0;
  // With CudaRunnerOptions::profile_ops: device seconds per op ("qkv", "attention", ...) over
  // the steps so far.
  std::map<std::string, double> op_seconds;
};

// Builds a runner on `options.device`: uploads every weight of `ckpt` in the runner's dtype
// (other dtypes, GGUF blocks included, are converted or dequantized on the way). Errors:
// Unavailable without a CUDA device; Unsupported for a dtype other than bf16/fp16, rope scaling
// other than none/linear/llama3 or head_dim other than 64/128; ResourceExhausted when the
// weights and workspace do not fit; those of the checkpoint reads.
Result<std::unique_ptr<ModelRunner>> CreateCudaRunner(const Checkpoint& ckpt,
                                                      const CudaRunnerOptions& options);

// The GEMM algorithms the runner tuned (or took from its engine's table), as an engine's
// gemm_table.json (backend/cuda/gemm_table.h); `kiln build` writes it. kInvalidArgument when
// `runner` is not a CUDA runner.
Result<std::string> ExportGemmTable(const ModelRunner& runner);

// What a CUDA runner holds now (kInvalidArgument when `runner` is not a CUDA runner).
Result<CudaMemoryReport> GetCudaMemoryReport(const ModelRunner& runner);

}  // namespace kiln
