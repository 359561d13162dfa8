// The flags that load a model and size its engine, shared by the commands that run one
// (`kiln generate`, `kiln serve`), so that both spell and check them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/llm.h"

namespace kiln::cli {

struct EngineFlags {
  std::string model;
  std::string device = "auto";
  int32_t threads = 0;
  std::string kv_cache_memory;  // "" = automatic (1 GiB on CPU; CUDA: gpu_memory_utilization)
  std::string swap_space;       // "" = automatic (CUDA: 4 GiB, CPU: none); "0" = none
  float gpu_memory_utilization = 0.9f;
  bool no_cuda_graphs = false;
  bool no_pdl = false;
  std::string l2_prefetch;  // --l2-prefetch: a byte size, empty = the runner's default
  bool no_fused_quant = false;
  bool no_fp8_fast_accum = false;
  bool no_e4m3_prefill_attention = false;
  bool fp32_residual = false;
  bool no_rope_q_codes = false;
  bool no_fused_gate_up = false;
  bool no_gemv_silu = false;
  bool no_gemv_rope = false;
  bool no_gemv_persistent = false;
  bool no_gemv_norm = false;
  int32_t fp8_gemv_max_rows = -1;  // --fp8-gemv-max-rows: -1 = the runner's default
  bool fused_decode = false;
  int32_t block_size = 16;
  int32_t max_num_seqs = 0;  // 0 = AutomaticMaxNumSeqs
  int32_t max_num_batched_tokens = 2048;
  int32_t max_prefill_chunk_tokens = 0;
  int32_t max_model_len = 0;
  bool no_prefix_caching = false;
  bool no_async_scheduling = false;
  std::string dtype = "auto";
  std::string quantization = "none";
  std::string verify_key;
  std::string kv_cache_dtype = "auto";
  std::string scheduling_policy = "fcfs";
  std::string capacity_policy = "auto";
  std::string chat_template;
};

// Adds `model` (positional or --model, required) and the engine flags to `cmd`; `flags` must
// outlive the parse.
void AddEngineFlags(CLI::App* cmd, EngineFlags* flags);

// The LlmOptions the flags describe. Errors: kInvalidArgument naming the flag (a bad size or
// policy name).
Result<LlmOptions> ToLlmOptions(const EngineFlags& flags);

}  // namespace kiln::cli
