#include "model/memory_plan.h"

#include <algorithm>

namespace kiln {

Result<MemoryPlan> PlanMemory(const ModelConfig& config, int64_t weight_bytes,
                              const MemoryPlanOptions& o) {
  if (o.gpu_memory_bytes <= 0) return InvalidArgument("--gpu-memory must be positive");
  if (!(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1)) {
    return InvalidArgument("--gpu-memory-utilization must be in (0, 1], got " +
                           std::to_string(o.gpu_memory_utilization));
  }
  if (o.block_size <= 0) return InvalidArgument("--block-size must be positive");
  if (o.max_model_len < 0) return InvalidArgument("--max-model-len must not be negative");
  if (o.max_num_batched_tokens <= 0 || o.max_num_seqs <= 0) {
    return InvalidArgument("--max-num-batched-tokens and --max-num-seqs must be positive");
  }
  MemoryPlan p;
  p.max_model_len = o.max_model_len > 0 ? o.max_model_len : config.max_position_embeddings;
  if (p.max_model_len > config.max_position_embeddings) {
    return InvalidArgument("--max-model-len " + std::to_string(p.max_model_len) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings));
  }
  p.usable_bytes =
      static_cast<int64_t>(static_cast<double>(o.gpu_memory_bytes) * o.gpu_memory_utilization);
  p.weight_bytes = weight_bytes;
  // Per token of a step, in f32: residual + normed input, q/k/v, attention output, gate/up/act.
  const int64_t per_token = 4 * (3 * int64_t{config.hidden_size} + config.q_size() +
                                 2 * config.kv_size() + 3 * int64_t{config.intermediate_size});
  const int64_t logits = 4 * int64_t{config.vocab_size} * o.max_num_seqs;
  p.workspace_bytes = per_token * o.max_num_batched_tokens + logits;
  p.runtime_reserve_bytes = o.runtime_reserve_bytes;
  p.kv_pool_bytes = p.usable_bytes - p.weight_bytes - p.workspace_bytes - p.runtime_reserve_bytes;
  p.kv_bytes_per_token = config.KvBytesPerToken(o.kv_dtype);
  if (p.kv_pool_bytes > 0) {
    p.kv_blocks = p.kv_pool_bytes / (p.kv_bytes_per_token * o.block_size);
    p.kv_tokens = p.kv_blocks * o.block_size;
  }
  p.max_concurrency = static_cast<double>(p.kv_tokens) / static_cast<double>(p.max_model_len);
  p.fits = p.kv_tokens >= p.max_model_len;
  return p;
}

}  // namespace kiln
