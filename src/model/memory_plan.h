// Memory planning: how a GPU's memory splits into weights, activation workspace and KV cache,
// and what that buys in KV tokens and concurrent requests. Used by `kiln inspect` now and by the
// CUDA runner to size its KV pool.
//
//   usable     = gpu_memory * gpu_memory_utilization
//   kv_pool    = usable - weights - workspace - runtime_reserve
//   kv_tokens  = floor(kv_pool / kv_bytes_per_token / block_size) * block_size
//   max_concurrency = kv_tokens / max_model_len     (requests that can all be at full length)
//
// The workspace is an estimate until the CUDA runner measures its own (DESIGN.md §4): the
// activations of one step of max_num_batched_tokens tokens in f32 plus the f32 logits of
// max_num_seqs rows.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace kiln {

struct MemoryPlanOptions {
  // Total GPU memory in bytes (from --gpu-memory or the device).
  int64_t gpu_memory_bytes = 0;
  // Fraction of gpu_memory kiln may use, as vLLM's --gpu-memory-utilization. Default 0.9.
  double gpu_memory_utilization = 0.9;
  // The longest request (prompt + output) to plan for; 0 = the model's max_position_embeddings.
  int64_t max_model_len = 0;
  // Tokens per KV block (the paged cache's page size).
  int block_size = 16;
  // Element type of the KV cache: bf16 (default) or fp8_e4m3 (halves KV bytes).
  DType kv_dtype = DType::kBF16;
  // Tokens in one forward step (prefill chunk budget); sets the activation workspace.
  int64_t max_num_batched_tokens = 8192;
  // Requests in one step; sets the logits workspace.
  int64_t max_num_seqs = 256;
  // CUDA context, cuBLAS workspaces and graph pools: held back from the KV pool.
  int64_t runtime_reserve_bytes = int64_t{1} << 30;
};

struct MemoryPlan {
  int64_t usable_bytes = 0;
  int64_t weight_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t runtime_reserve_bytes = 0;
  int64_t kv_pool_bytes = 0;  // may be <= 0: the model does not fit
  int64_t kv_bytes_per_token = 0;
  int64_t max_model_len = 0;
  int64_t kv_tokens = 0;
  int64_t kv_blocks = 0;
  double max_concurrency = 0;  // kv_tokens / max_model_len
  bool fits = false;           // at least one request of max_model_len fits
};

// `weight_bytes` is what the weights take on the GPU (the runtime dtype, not the file's).
// Fails with InvalidArgument naming the option when an option is out of range.
Result<MemoryPlan> PlanMemory(const ModelConfig& config, int64_t weight_bytes,
                              const MemoryPlanOptions& options);

}  // namespace kiln
