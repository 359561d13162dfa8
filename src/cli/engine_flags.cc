#include "cli/engine_flags.h"

#include "core/units.h"
#include "model/quantization.h"

namespace kiln::cli {

void AddEngineFlags(CLI::App* cmd, EngineFlags* f) {
  cmd->add_option("model,--model", f->model,
                  "HF checkpoint directory, .gguf file or kiln engine directory (kiln build)")
      ->required();
  cmd->add_option("--verify-key", f->verify_key,
                  "PEM Ed25519 public key: refuse the model unless it is an engine directory "
                  "signed with its private key (kiln build --sign) and unchanged since");
  cmd->add_option("--chat-template", f->chat_template, "a file that replaces the chat template");
  cmd->add_option("--device", f->device, "cpu, cuda, cuda:N or auto (CUDA when a GPU is present)");
  cmd->add_option("--threads", f->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--dtype", f->dtype,
                  "weights/activations/KV cache: auto (CUDA: float16 for GGUF and float16 "
                  "checkpoints, else bfloat16; CPU: float32), bfloat16, float16, float32 (CPU)");
  cmd->add_option("-q,--quantization", f->quantization,
                  "none or fp8 (FP8 W8A8: linear layers quantized per channel at load, "
                  "activations per token; docs/quantization.md); int8-sq and w4a16 engines "
                  "come from kiln build");
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache element type: auto (the compute dtype), fp8 or fp8_e4m3 (e4m3 with "
                  "per-layer scales; half of bf16's bytes, a quarter of the CPU's float32)");
  cmd->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "KV pool size, e.g. 1GiB (default: 1GiB on CPU; on CUDA what "
                  "--gpu-memory-utilization leaves)");
  cmd->add_option("--swap-space", f->swap_space,
                  "host memory for swapping preempted requests' KV cache out of the pool, e.g. "
                  "8GiB; 0 = recompute them instead (default: 4GiB on CUDA, 0 on CPU)");
  cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "CUDA: share of the device's memory for weights, workspace and KV cache")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--no-cuda-graphs", f->no_cuda_graphs,
                "CUDA: launch every step's kernels instead of replaying captured graphs");
  cmd->add_flag("--no-fused-quant", f->no_fused_quant,
                "CUDA FP8: quantize each linear layer's input in a pass of its own instead of in "
                "the norm / SiluMul before it (the same codes; for measuring the fusion)");
  cmd->add_flag("--no-fp8-fast-accum", f->no_fp8_fast_accum,
                "CUDA FP8: the GEMMs of steps past 3 tokens promote their partial sums to fp32 "
                "periodically (cuBLASLt's default; slower) instead of fast accumulation "
                "(docs/quantization.md)");
  cmd->add_flag("--no-e4m3-prefill-attention", f->no_e4m3_prefill_attention,
                "CUDA, fp8 KV cache on Hopper: prompt attention in fp16 mma's (the fp8 codes "
                "widened) instead of e4m3 ones (Q and the softmax weights rounded to e4m3; faster "
                "prompt steps, docs/quantization.md)");
  cmd->add_flag("--fp32-residual", f->fp32_residual,
                "CUDA FP8: keep the residual stream in fp32 in steps of 48 tokens or more too "
                "(default there: 24 bits a value, 16 significant; fewer bytes in the norms, "
                "docs/quantization.md)");
  cmd->add_flag("--no-fused-gate-up", f->no_fused_gate_up,
                "CUDA, FP8 prompt steps on Hopper: cuBLASLt's gate_up GEMM then SiluMul, instead "
                "of the GEMM with SiluMul in its epilogue (for measuring the fusion)");
  cmd->add_flag("--no-gemv-silu", f->no_gemv_silu,
                "CUDA, FP8 / INT8 decode steps the W8A16 GEMV runs (up to 3 tokens by default) "
                "and one-token W4A16 steps: the gate_up GEMV then SiluMul, "
                "instead of the GEMV with SiluMul in its epilogue (the same bits; for measuring "
                "the fusion)");
  cmd->add_flag("--no-gemv-rope", f->no_gemv_rope,
                "CUDA, FP8 / INT8 decode steps the W8A16 GEMV runs and one-token W4A16 steps: "
                "the qkv GEMV then RoPE and "
                "the KV-cache write, instead of the GEMV doing both in its epilogue (the same "
                "bits; for measuring the fusion)");
  cmd->add_flag("--no-gemv-persistent", f->no_gemv_persistent,
                "CUDA, FP8 / INT8 decode steps the W8A16 GEMV runs: a block an 8 outputs "
                "instead of one wave of blocks that keep their weight loads in flight from one "
                "output to the next (the same bits), nor FP8's one-row GEMV on the tensor cores "
                "(another summation order); for measuring the persistent forms");
  cmd->add_flag("--no-gemv-norm", f->no_gemv_norm,
                "CUDA, one-token W4A16 decode steps: the RMS norms before qkv and gate_up as "
                "kernels of their own, instead of in the prologue of the GEMV after them (the same "
                "bits; for measuring the fusion)");
  cmd->add_option("--fp8-gemv-max-rows", f->fp8_gemv_max_rows,
                  "CUDA, FP8 decode steps: the most tokens whose linear layers run weight-only "
                  "(W8A16 GEMV) before per-token e4m3 activations and cuBLASLt take over (W8A8); "
                  "0 = always W8A8 (default: 1 on GPUs with 4 TB/s of DRAM bandwidth or more, "
                  "else 3; docs/kernels.md)")
      ->check(CLI::Range(0, 8));  // kernels::kGemvMaxRows (not a dependency of the CLI)
  cmd->add_flag("--fused-decode", f->fused_decode,
                "CUDA, FP8 batch-1 decode on Hopper (experimental): every decoder layer in one "
                "persistent kernel instead of a kernel per op; still slower on the H100 "
                "(docs/benchmarks.md)");
  cmd->add_flag("--no-rope-q-codes", f->no_rope_q_codes,
                "CUDA, fp8 KV cache on Hopper: RoPE writes the prompt rows' queries back in the "
                "activation type and prompt attention rounds them to e4m3, instead of RoPE "
                "writing the e4m3 codes (the same codes; for measuring the fusion)");
  cmd->add_flag("--no-pdl", f->no_pdl,
                "CUDA: launch the decode kernels without programmatic dependent launch "
                "(Hopper and later overlap each kernel's start with the previous one's end)");
  cmd->add_option("--l2-prefetch", f->l2_prefetch,
                  "CUDA: bytes of the next linear layer's weights each decode linear layer asks L2 "
                  "to fetch as it ends (default 4MiB, but none ahead of W4A16 weights in "
                  "one-token steps); 0 = none");
  cmd->add_option("--block-size", f->block_size, "tokens per KV block");
  cmd->add_option("--max-num-seqs", f->max_num_seqs,
                  "requests running at once (0 = automatic: 1024 on a GPU with 70 GiB or more, "
                  "else 256)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per step");
  cmd->add_option("--max-prefill-chunk-tokens", f->max_prefill_chunk_tokens,
                  "prompt tokens one request computes per step (0 = no cap)");
  cmd->add_option("--max-model-len", f->max_model_len, "longest sequence (0 = model's)");
  cmd->add_flag("--no-prefix-caching", f->no_prefix_caching, "disable prefix caching");
  cmd->add_flag("--no-async-scheduling", f->no_async_scheduling,
                "CUDA: schedule each step after the previous one's result instead of while the "
                "GPU computes it (same tokens; for measuring the overlap)");
  cmd->add_option("--scheduling-policy", f->scheduling_policy, "fcfs or priority");
  cmd->add_option("--capacity-policy", f->capacity_policy,
                  "auto (reserve the worst case of requests that set max_tokens, admit the rest "
                  "greedily), max_utilization (admit greedily, preempt when the KV cache is "
                  "full) or guaranteed_no_evict (reserve every request's worst case)");
}

Result<LlmOptions> ToLlmOptions(const EngineFlags& f) {
  LlmOptions options;
  options.device = f.device;
  options.num_threads = f.threads;
  options.dtype = f.dtype;
  // Checked here so that a typo fails before the model loads (the messages name the option).
  KILN_RETURN_IF_ERROR(ParseQuantMethod(f.quantization).status());
  KILN_RETURN_IF_ERROR(ParseKvCacheDType(f.kv_cache_dtype).status());
  options.quantization = f.quantization;
  options.kv_cache_dtype = f.kv_cache_dtype;
  options.verify_key = f.verify_key;
  options.tokenizer.chat_template_file = f.chat_template;
  EngineOptions& e = options.engine;
  if (!f.kv_cache_memory.empty()) {
    auto kv_bytes = ParseByteSize(f.kv_cache_memory);
    if (!kv_bytes.ok()) return kv_bytes.status().WithContext("--kv-cache-memory");
    e.kv_cache_memory_bytes = *kv_bytes;
  }
  if (f.swap_space == "0") {
    options.swap_space_bytes = 0;
  } else if (!f.swap_space.empty()) {
    auto swap_bytes = ParseByteSize(f.swap_space);
    if (!swap_bytes.ok()) return swap_bytes.status().WithContext("--swap-space");
    options.swap_space_bytes = *swap_bytes;
  }
  options.gpu_memory_utilization = f.gpu_memory_utilization;
  options.enable_cuda_graphs = !f.no_cuda_graphs;
  options.programmatic_launch = !f.no_pdl;
  options.fp8_fast_accum = !f.no_fp8_fast_accum;
  options.e4m3_prefill_attention = !f.no_e4m3_prefill_attention;
  options.residual_24bit = !f.fp32_residual;
  options.rope_q_codes = !f.no_rope_q_codes;
  options.fused_gate_up = !f.no_fused_gate_up;
  options.gemv_silu = !f.no_gemv_silu;
  options.gemv_rope = !f.no_gemv_rope;
  options.gemv_persistent = !f.no_gemv_persistent;
  options.gemv_norm = !f.no_gemv_norm;
  if (f.fp8_gemv_max_rows >= 0) options.fp8_gemv_max_rows = f.fp8_gemv_max_rows;
  options.fused_decode = f.fused_decode;
  options.fuse_activation_quant = !f.no_fused_quant;
  if (!f.l2_prefetch.empty()) {
    auto bytes = f.l2_prefetch == "0" ? Result<int64_t>(int64_t{0}) : ParseByteSize(f.l2_prefetch);
    if (!bytes.ok()) return bytes.status().WithContext("--l2-prefetch");
    options.l2_prefetch_bytes = *bytes;
  }
  e.block_size = f.block_size;
  e.max_model_len = f.max_model_len;
  e.enable_prefix_caching = !f.no_prefix_caching;
  if (f.no_async_scheduling) e.async_scheduling = false;
  e.scheduler.max_num_seqs = f.max_num_seqs;
  e.scheduler.max_num_batched_tokens = f.max_num_batched_tokens;
  e.scheduler.max_prefill_chunk_tokens = f.max_prefill_chunk_tokens;
  KILN_ASSIGN_OR_RETURN(e.scheduler.scheduling_policy, ParseSchedulingPolicy(f.scheduling_policy));
  KILN_ASSIGN_OR_RETURN(e.scheduler.capacity_policy, ParseCapacityPolicy(f.capacity_policy));
  return options;
}

}  // namespace kiln::cli
