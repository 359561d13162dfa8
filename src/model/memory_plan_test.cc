#include "model/memory_plan.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

ModelConfig Llama8B() {
  ModelConfig c;
  c.num_layers = 32;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  return c;
}

TEST(MemoryPlan, Llama8BOnAn80GBGpu) {
  const ModelConfig c = Llama8B();
  MemoryPlanOptions o;
  o.gpu_memory_bytes = 80'000'000'000;
  o.max_model_len = 8192;
  auto p = PlanMemory(c, 2 * c.NumParameters(), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->usable_bytes, 72'000'000'000);
  EXPECT_EQ(p->kv_bytes_per_token, 131072);
  EXPECT_EQ(p->kv_pool_bytes,
            p->usable_bytes - p->weight_bytes - p->workspace_bytes - p->runtime_reserve_bytes);
  EXPECT_EQ(p->kv_tokens, p->kv_blocks * 16);
  EXPECT_EQ(p->kv_blocks, p->kv_pool_bytes / (131072 * 16));
  EXPECT_GT(p->kv_tokens, 400'000);  // ~55 GB of KV at 128 KiB/token
  EXPECT_LT(p->kv_tokens, 450'000);
  EXPECT_DOUBLE_EQ(p->max_concurrency, p->kv_tokens / 8192.0);
  EXPECT_TRUE(p->fits);

  o.kv_dtype = DType::kF8E4M3;  // fp8 KV holds twice the tokens
  auto p8 = PlanMemory(c, 2 * c.NumParameters(), o);
  EXPECT_NEAR(static_cast<double>(p8->kv_tokens) / p->kv_tokens, 2.0, 1e-4);
}

TEST(MemoryPlan, DoesNotFitAndBadOptions) {
  const ModelConfig c = Llama8B();
  MemoryPlanOptions o;
  o.gpu_memory_bytes = 16'000'000'000;  // 16 GB of weights alone do not fit
  auto p = PlanMemory(c, 2 * c.NumParameters(), o);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_EQ(p->kv_tokens, 0);
  EXPECT_EQ(p->max_model_len, 131072);  // default: the model's context

  o.gpu_memory_utilization = 1.5;
  EXPECT_NE(PlanMemory(c, 0, o).status().message().find("--gpu-memory-utilization"),
            std::string::npos);
  o.gpu_memory_utilization = 0.9;
  o.max_model_len = 200000;
  EXPECT_NE(PlanMemory(c, 0, o).status().message().find("max_position_embeddings"),
            std::string::npos);
  o.max_model_len = 0;
  o.gpu_memory_bytes = 0;
  EXPECT_FALSE(PlanMemory(c, 0, o).ok());
}

}  // namespace
}  // namespace kiln
