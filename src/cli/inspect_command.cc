// kiln inspect MODEL: what a checkpoint is and how it fits on a GPU.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/buffer.h"
#include "core/units.h"
#include "model/checkpoint.h"
#include "model/memory_plan.h"
#include "model/quantization.h"

namespace kiln::cli {
namespace {

struct InspectOptions {
  std::string model;
  std::string gpu_memory;  // "80GB"; empty = the real GPU when present
  double gpu_memory_utilization = 0.9;
  int64_t max_model_len = 0;
  std::string kv_cache_dtype = "auto";  // auto: the checkpoint's GPU compute dtype
  std::string quantization = "none";    // fp8: the layers' linear weights at 1 byte
  int block_size = 16;
  bool json = false;
};

// A decoder layer's linear weight (q/k/v/o, gate/up/down): what --quantization fp8 quantizes.
bool IsLayerLinear(const Weight& w) {
  return w.name.starts_with("model.layers.") && w.name.ends_with("_proj.weight");
}

// Bytes the weights take on the GPU: kiln serves f32/f16/bf16 and GGUF-quantized weights in a
// 16-bit type (DefaultGpuDType; GGUF blocks are dequantized on upload) and keeps fp8 weights in
// fp8. --quantization fp8 holds the layers' linear weights in fp8 with an fp32 scale per row.
int64_t RuntimeWeightBytes(const Checkpoint& ckpt, QuantMethod quantization) {
  int64_t bytes = 0;
  for (const Weight& w : ckpt.weights()) {
    if (quantization == QuantMethod::kFp8 && IsLayerLinear(w)) {
      bytes += w.shape.numel() + w.shape[0] * int64_t{sizeof(float)};
      continue;
    }
    const bool fp8 = w.dtype == DType::kF8E4M3 || w.dtype == DType::kF8E5M2;
    bytes += w.shape.numel() * (fp8 ? 1 : 2);
  }
  return bytes;
}

// How a pre-quantized checkpoint's activations are quantized: an FP8 one's static input scales
// are used (model/quantization.h), an INT8 one's are not (kiln quantizes int8 per token).
std::string ActivationScalesNote(const CheckpointQuantization& pre) {
  if (!pre.static_activations) return "";
  return pre.method == QuantMethod::kFp8 ? ", static activation scales"
                                         : ", per-token activations (static input scales unused)";
}

void Print(const char* key, const std::string& value) {
  std::printf("%-22s %s\n", key, value.c_str());
}

void Run(const InspectOptions& o) {
  auto opened = Checkpoint::Open(o.model);
  if (!opened.ok()) Fail("inspect", opened.status());
  const Checkpoint& ckpt = *opened;
  const ModelConfig& c = ckpt.config();

  const DType compute_dtype = DefaultGpuDType(ckpt);
  Result<DType> kv_dtype =
      o.kv_cache_dtype == "auto" ? Result<DType>(compute_dtype) : ParseDType(o.kv_cache_dtype);
  if (!kv_dtype.ok() ||
      (*kv_dtype != DType::kBF16 && *kv_dtype != DType::kF16 && *kv_dtype != DType::kF8E4M3)) {
    Fail("inspect",
         InvalidArgument("--kv-cache-dtype must be auto, bf16, f16, fp8 or fp8_e4m3, got '" +
                         o.kv_cache_dtype + "'"));
  }
  auto quantization = ParseQuantMethod(o.quantization);
  if (!quantization.ok()) Fail("inspect", quantization.status());

  // Memory plan: for --gpu-memory, else for the GPU of this machine, else none.
  MemoryPlanOptions mo;
  mo.gpu_memory_utilization = o.gpu_memory_utilization;
  mo.max_model_len = o.max_model_len;
  mo.kv_dtype = *kv_dtype;
  mo.block_size = o.block_size;
  std::string gpu_source;
  if (!o.gpu_memory.empty()) {
    auto bytes = ParseByteSize(o.gpu_memory);
    if (!bytes.ok()) Fail("inspect", bytes.status().WithContext("--gpu-memory"));
    mo.gpu_memory_bytes = *bytes;
    gpu_source = "--gpu-memory " + o.gpu_memory;
  } else if (auto gpu = GetCudaDeviceInfo(0); gpu.ok()) {
    mo.gpu_memory_bytes = gpu->total_bytes;
    gpu_source = gpu->name + " (" + FormatBytes(gpu->total_bytes) + ")";
  }
  std::optional<MemoryPlan> plan;
  const int64_t runtime_weight_bytes = RuntimeWeightBytes(ckpt, *quantization);
  if (mo.gpu_memory_bytes > 0) {
    auto p = PlanMemory(c, runtime_weight_bytes, mo);
    if (!p.ok()) Fail("inspect", p.status());
    plan = *p;
  } else if (o.max_model_len > c.max_position_embeddings) {
    Fail("inspect", InvalidArgument("--max-model-len exceeds the model's context length " +
                                    std::to_string(c.max_position_embeddings)));
  }

  const int64_t kv_per_token = c.KvBytesPerToken(*kv_dtype);
  if (o.json) {
    nlohmann::json j;
    j["model"] = ckpt.path();
    j["name"] = ckpt.name();
    j["format"] = CheckpointFormatName(ckpt.format());
    j["family"] = ModelFamilyName(c.family);
    j["architecture"] = c.architecture;
    j["num_layers"] = c.num_layers;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_heads"] = c.num_heads;
    j["num_kv_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = RopeScalingTypeName(c.rope_scaling.type);
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["qkv_bias"] = c.qkv_bias;
    j["sliding_window"] = c.sliding_window ? nlohmann::json(*c.sliding_window) : nullptr;
    j["num_parameters"] = ckpt.NumStoredParameters();
    j["weight_bytes"] = ckpt.WeightBytes();
    for (auto& [dtype, bytes] : ckpt.WeightBytesByDType()) {
      j["weight_bytes_by_dtype"][std::string(DTypeName(dtype))] = bytes;
    }
    j["runtime_weight_bytes"] = runtime_weight_bytes;
    j["quantization"] = QuantMethodName(*quantization);
    const CheckpointQuantization& pre = ckpt.quantization();
    if (pre.method != QuantMethod::kNone) {
      j["checkpoint_quantization"] = {{"method", QuantMethodName(pre.method)},
                                      {"format", pre.format},
                                      {"per_channel", pre.per_channel},
                                      {"static_activations", pre.static_activations},
                                      {"kv_cache_scales", !ckpt.kv_cache_scales().empty()}};
    }
    if (const auto& engine = ckpt.engine()) {
      j["engine"] = {{"quant_recipe", engine->quant_recipe},
                     {"quantized_lm_head", engine->quantized_lm_head},
                     {"kv_cache_dtype", KvCacheDTypeName(engine->kv_cache_dtype)},
                     {"gemm_table", engine->gemm_table_path}};
    }
    j["compute_dtype"] = DTypeName(compute_dtype);
    j["kv_cache_dtype"] = DTypeName(*kv_dtype);
    j["kv_bytes_per_token"] = kv_per_token;
    if (plan) {
      j["memory_plan"] = {{"gpu", gpu_source},
                          {"gpu_memory_bytes", mo.gpu_memory_bytes},
                          {"gpu_memory_utilization", mo.gpu_memory_utilization},
                          {"usable_bytes", plan->usable_bytes},
                          {"weight_bytes", plan->weight_bytes},
                          {"workspace_bytes", plan->workspace_bytes},
                          {"runtime_reserve_bytes", plan->runtime_reserve_bytes},
                          {"kv_pool_bytes", plan->kv_pool_bytes},
                          {"max_model_len", plan->max_model_len},
                          {"block_size", mo.block_size},
                          {"kv_blocks", plan->kv_blocks},
                          {"kv_tokens", plan->kv_tokens},
                          {"max_concurrency", plan->max_concurrency},
                          {"fits", plan->fits}};
    } else {
      j["memory_plan"] = nullptr;
    }
    std::cout << j.dump(2) << std::endl;
    return;
  }

  Print("model", ckpt.path());
  Print("name", ckpt.name());
  Print("format", std::string(CheckpointFormatName(ckpt.format())));
  if (const auto& engine = ckpt.engine()) {
    Print("engine",
          "built with --quant " + engine->quant_recipe +
              (engine->quantized_lm_head ? " --quantize-lm-head" : "") + ", KV cache " +
              std::string(KvCacheDTypeName(engine->kv_cache_dtype)) + " by default, " +
              (engine->gemm_table_path.empty() ? "no GEMM table"
                                               : "GEMM table " + engine->gemm_table_path));
  }
  const std::string family(ModelFamilyName(c.family));
  Print("architecture", family + (c.architecture.empty() || c.architecture == family
                                      ? ""
                                      : " (" + c.architecture + ")"));
  Print("layers", std::to_string(c.num_layers));
  Print("hidden size", std::to_string(c.hidden_size));
  Print("intermediate size", std::to_string(c.intermediate_size));
  Print("attention heads", std::to_string(c.num_heads));
  Print("kv heads", std::to_string(c.num_kv_heads) + " (GQA group " +
                        std::to_string(c.num_heads / c.num_kv_heads) + ")");
  Print("head dim", std::to_string(c.head_dim));
  Print("vocab", std::to_string(c.vocab_size));
  std::string ctx = std::to_string(c.max_position_embeddings) + " (rope theta " +
                    std::to_string(static_cast<int64_t>(c.rope_theta)) + ", scaling " +
                    std::string(RopeScalingTypeName(c.rope_scaling.type));
  if (c.rope_scaling.type != RopeScaling::Type::kNone) {
    char f[32];
    std::snprintf(f, sizeof(f), " x%g", c.rope_scaling.factor);
    ctx += f;
  }
  Print("context length", ctx + ")");
  if (c.sliding_window) Print("sliding window", std::to_string(*c.sliding_window));
  Print("tied embeddings", c.tie_word_embeddings ? "yes" : "no");
  if (c.qkv_bias) Print("qkv bias", "yes");
  char params[64];
  std::snprintf(params, sizeof(params), "%.2f M", ckpt.NumStoredParameters() / 1e6);
  Print("parameters", std::string(params) + " (" + FormatCount(ckpt.NumStoredParameters()) + ")");
  std::string by_dtype;
  for (auto& [dtype, bytes] : ckpt.WeightBytesByDType()) {
    if (!by_dtype.empty()) by_dtype += ", ";
    by_dtype += std::string(DTypeName(dtype)) + " " + FormatBytes(bytes);
  }
  Print("weights (stored)", FormatBytes(ckpt.WeightBytes()) + ": " + by_dtype);
  if (const CheckpointQuantization& pre = ckpt.quantization(); pre.method != QuantMethod::kNone) {
    Print("pre-quantized", std::string(QuantMethodName(pre.method)) + " (" + pre.format + ", " +
                               (pre.per_channel ? "per-channel" : "per-tensor") + " weight scales" +
                               ActivationScalesNote(pre) +
                               (ckpt.kv_cache_scales().empty() ? "" : ", calibrated KV scales") +
                               ")");
  }
  Print("weights (on GPU)",
        FormatBytes(runtime_weight_bytes) + " (" + std::string(DTypeName(compute_dtype)) +
            (*quantization == QuantMethod::kFp8 ? "; linear layers fp8 (--quantization fp8)"
                                                : "; fp8 stays fp8") +
            ")");
  Print("KV cache per token",
        FormatCount(kv_per_token) + " B in " + std::string(DTypeName(*kv_dtype)) + " (2 x " +
            std::to_string(c.num_layers) + " layers x " + std::to_string(c.num_kv_heads) +
            " heads x " + std::to_string(c.head_dim) + " x " +
            std::to_string(GetDTypeInfo(*kv_dtype).block_bytes) + " B)");
  if (!plan) {
    std::printf(
        "\nmemory plan: no GPU found; pass --gpu-memory 80GB (for example) to plan for one\n");
    return;
  }
  std::printf("\nmemory plan for %s, utilization %.2f, max-model-len %lld:\n", gpu_source.c_str(),
              mo.gpu_memory_utilization, static_cast<long long>(plan->max_model_len));
  Print("  usable", FormatBytes(plan->usable_bytes));
  Print("  weights", FormatBytes(plan->weight_bytes));
  Print("  workspace (est.)", FormatBytes(plan->workspace_bytes));
  Print("  runtime reserve", FormatBytes(plan->runtime_reserve_bytes));
  Print("  KV pool", FormatBytes(plan->kv_pool_bytes));
  Print("  KV tokens", FormatCount(plan->kv_tokens) + " (" + FormatCount(plan->kv_blocks) +
                           " blocks of " + std::to_string(mo.block_size) + ")");
  char conc[64];
  std::snprintf(conc, sizeof(conc), "%.2f", plan->max_concurrency);
  Print("  max concurrency",
        std::string(conc) + " requests of " + std::to_string(plan->max_model_len) + " tokens");
  if (!plan->fits) {
    std::printf(
        "  warning: not even one request of %lld tokens fits; lower --max-model-len or "
        "use a larger GPU\n",
        static_cast<long long>(plan->max_model_len));
  }
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Describe a model (HF directory or GGUF file) and plan its GPU memory");
  cmd->add_option("model,--model", opts->model, "HF checkpoint directory or .gguf file")
      ->required();
  cmd->add_option("--gpu-memory", opts->gpu_memory,
                  "GPU memory to plan for, e.g. 80GB or 141GiB (default: this machine's GPU)");
  cmd->add_option("--gpu-memory-utilization", opts->gpu_memory_utilization,
                  "fraction of GPU memory kiln may use")
      ->capture_default_str();
  cmd->add_option("--max-model-len", opts->max_model_len,
                  "longest request to plan for (default: the model's context length)");
  cmd->add_option("--kv-cache-dtype", opts->kv_cache_dtype,
                  "auto (the checkpoint's GPU compute dtype), bf16, f16, fp8 or fp8_e4m3")
      ->capture_default_str();
  cmd->add_option("-q,--quantization", opts->quantization,
                  "none or fp8: plan for the decoder layers' linear weights in fp8 (1 byte and "
                  "a float32 scale per row)")
      ->capture_default_str();
  cmd->add_option("--block-size", opts->block_size, "tokens per KV block")->capture_default_str();
  cmd->add_flag("--json", opts->json, "print JSON instead of a table");
  cmd->callback([opts] { Run(*opts); });
}

}  // namespace kiln::cli
