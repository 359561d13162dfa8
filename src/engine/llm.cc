#include "engine/llm.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <unistd.h>

#include "backend/cpu/cpu_runner.h"
#ifdef KILN_HAS_CUDA
#include "backend/cuda/cuda_runner.h"
#endif
#include "core/buffer.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/hash.h"
#include "engine/output_processor.h"
#include "model/engine_dir.h"
#include "model/quantization.h"

namespace kiln {

Prompt Prompt::Text(std::string text) {
  Prompt p;
  p.text = std::move(text);
  p.kind = Kind::kText;
  return p;
}

Prompt Prompt::Chat(nlohmann::ordered_json messages) {
  Prompt p;
  p.messages = std::move(messages);
  p.kind = Kind::kChat;
  return p;
}

Prompt Prompt::Tokens(std::vector<int32_t> ids) {
  Prompt p;
  p.token_ids = std::move(ids);
  p.kind = Kind::kTokens;
  return p;
}

uint64_t CompletionSeed(uint64_t seed, int32_t index) {
  if (index == 0) return seed;
  // splitmix64 of (seed, index): distinct, well-mixed streams for the siblings.
  return Mix64(seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1));
}

// KV pool bytes when none were given: 1 GiB on the CPU; on CUDA what is left of
// gpu_memory_utilization of the device once the weights and workspace are in.
Result<int64_t> AutomaticKvCacheBytes(const ModelRunner& runner, const LlmOptions& options) {
  constexpr int64_t kCpuDefault = int64_t{1} << 30;
#ifdef KILN_HAS_CUDA
  auto report = GetCudaMemoryReport(runner);
  if (!report.ok()) return kCpuDefault;  // not a CUDA runner
  const float util = options.gpu_memory_utilization;
  if (!(util > 0.0f && util <= 1.0f)) {
    return InvalidArgument("gpu_memory_utilization: must be in (0, 1], got " +
                           std::to_string(util));
  }
  const int64_t used = report->device_total_bytes - report->device_free_bytes;
  const int64_t budget =
      static_cast<int64_t>(util * static_cast<double>(report->device_total_bytes));
  if (budget <= used) {
    return ResourceExhausted(
        "gpu_memory_utilization: " + std::to_string(util) + " of the device (" +
        std::to_string(budget >> 20) +
        " MiB) leaves no room for the KV cache: " + std::to_string(used >> 20) +
        " MiB are already in use (weights " + std::to_string(report->weight_bytes >> 20) +
        " MiB, workspace " + std::to_string(report->workspace_bytes >> 20) + " MiB)");
  }
  return budget - used;
#else
  (void)runner;
  (void)options;
  return kCpuDefault;
#endif
}

std::string ResolveDevice(const std::string& device) {
  if (device != "auto") return device;
  return HasCudaDevice() ? "cuda:0" : "cpu";
}

bool IsCudaDevice(const std::string& device) {
  return device == "cuda" || device.starts_with("cuda:");
}

// The index a CUDA device name ("cuda" or "cuda:N") names. Errors: kInvalidArgument.
Result<int> CudaDeviceIndex(const std::string& device) {
  if (device == "cuda") return 0;
  const std::string digits = device.substr(5);  // after "cuda:"
  if (digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("device: expected cuda:N, got '" + device + "'");
  }
  return std::stoi(digits);
}

int32_t AutomaticMaxNumSeqs(const std::string& device) {
  constexpr int32_t kDefault = 256, kLargeGpu = 1024;
  constexpr int64_t kLargeGpuBytes = int64_t{70} << 30;
  const std::string resolved = ResolveDevice(device);
  if (!IsCudaDevice(resolved)) return kDefault;
  // A malformed name fails later, where the runner is created, with the message for it.
  auto index = CudaDeviceIndex(resolved);
  if (!index.ok()) return kDefault;
  auto info = GetCudaDeviceInfo(*index);
  return info.ok() && info->total_bytes >= kLargeGpuBytes ? kLargeGpu : kDefault;
}

// LlmOptions::dtype: nullopt for "auto", else f32, f16 or bf16.
Result<std::optional<DType>> ParseComputeDType(const std::string& name) {
  if (name == "auto") return std::optional<DType>();
  auto dtype = ParseDType(name);
  if (!dtype.ok() || (*dtype != DType::kF32 && *dtype != DType::kF16 && *dtype != DType::kBF16)) {
    return InvalidArgument("dtype: expected auto, bfloat16, float16 or float32, got '" + name +
                           "'");
  }
  return std::optional<DType>(*dtype);
}

Result<std::unique_ptr<ModelRunner>> CreateRunner(const Checkpoint& checkpoint,
                                                  const LlmOptions& options) {
  const std::string device = ResolveDevice(options.device);
  KILN_ASSIGN_OR_RETURN(const std::optional<DType> dtype, ParseComputeDType(options.dtype));
  KILN_ASSIGN_OR_RETURN(const QuantMethod quantization, ParseQuantMethod(options.quantization));
  KILN_ASSIGN_OR_RETURN(KvCacheDType kv_cache_dtype, ParseKvCacheDType(options.kv_cache_dtype));
  if (kv_cache_dtype == KvCacheDType::kAuto && checkpoint.engine().has_value()) {
    kv_cache_dtype = checkpoint.engine()->kv_cache_dtype;
  }
  if (device == "cpu") {
    if (dtype.has_value() && *dtype != DType::kF32) {
      return InvalidArgument("dtype: the CPU backend computes in float32; " +
                             std::string(DTypeName(*dtype)) + " needs --device cuda");
    }
    CpuRunnerOptions cpu;
    cpu.num_threads = options.num_threads;
    cpu.quantization = quantization;
    cpu.kv_cache_dtype = kv_cache_dtype;
    return CreateCpuRunner(checkpoint, cpu);
  }
  if (IsCudaDevice(device)) {
#ifdef KILN_HAS_CUDA
    CudaRunnerOptions cuda;
    if (dtype == DType::kF32) {
      return InvalidArgument(
          "dtype: the CUDA backend computes in bfloat16 or float16, not float32");
    }
    cuda.dtype = dtype;
    cuda.quantization = quantization;
    cuda.kv_cache_dtype = kv_cache_dtype;
    KILN_ASSIGN_OR_RETURN(cuda.device, CudaDeviceIndex(device));
    const SchedulerOptions& sched = options.engine.scheduler;
    cuda.max_num_seqs = sched.max_num_seqs;
    cuda.max_num_tokens = sched.max_num_batched_tokens;
    cuda.max_model_len = options.engine.max_model_len;
    cuda.enable_cuda_graphs = options.enable_cuda_graphs && !options.profile_cuda_ops;
    cuda.programmatic_launch = options.programmatic_launch;
    cuda.fuse_activation_quant = options.fuse_activation_quant;
    cuda.fp8_fast_accum = options.fp8_fast_accum;
    cuda.e4m3_prefill_attention = options.e4m3_prefill_attention;
    cuda.residual_24bit = options.residual_24bit;
    cuda.rope_q_codes = options.rope_q_codes;
    cuda.fused_gate_up = options.fused_gate_up;
    cuda.gemv_silu = options.gemv_silu;
    cuda.gemv_rope = options.gemv_rope;
    cuda.gemv_persistent = options.gemv_persistent;
    cuda.gemv_norm = options.gemv_norm;
    if (options.fp8_gemv_max_rows.has_value()) cuda.fp8_gemv_max_rows = *options.fp8_gemv_max_rows;
    cuda.fused_decode = options.fused_decode;
    cuda.profile_ops = options.profile_cuda_ops;
    if (options.l2_prefetch_bytes.has_value()) cuda.l2_prefetch_bytes = *options.l2_prefetch_bytes;
    cuda.upload_progress = options.load_progress;
    return CreateCudaRunner(checkpoint, cuda);
#else
    return Unavailable("device: this kiln was built without CUDA; use --device cpu");
#endif
  }
  return InvalidArgument("device: expected cpu, cuda, cuda:N or auto, got '" + device + "'");
}

Result<std::unique_ptr<LLM>> LLM::Create(const std::string& model, const LlmOptions& given) {
  std::unique_ptr<LLM> llm(new LLM());
  if (!given.verify_key.empty()) {
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    KILN_RETURN_IF_ERROR(VerifyEngine(model, given.verify_key, threads));
  }
  LlmOptions options = given;  // with the automatic choices made
  if (options.engine.scheduler.max_num_seqs == 0) {
    options.engine.scheduler.max_num_seqs = AutomaticMaxNumSeqs(options.device);
  }
  KILN_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(model));
  llm->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  llm->model_name_ = llm->checkpoint_->name();
  KILN_ASSIGN_OR_RETURN(llm->tokenizer_, LoadTokenizer(model, options.tokenizer));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                        CreateRunner(*llm->checkpoint_, options));
  EngineOptions engine_options = options.engine;
  if (options.swap_space_bytes.has_value()) {
    engine_options.swap_space_bytes = *options.swap_space_bytes;
  } else if (runner->name().starts_with("cuda")) {
    const int64_t host_bytes = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGE_SIZE);
    engine_options.swap_space_bytes = std::min(int64_t{4} << 30, host_bytes / 8);
  }
  if (engine_options.num_kv_blocks == 0 && engine_options.kv_cache_memory_bytes == 0) {
    KILN_ASSIGN_OR_RETURN(engine_options.kv_cache_memory_bytes,
                          AutomaticKvCacheBytes(*runner, options));
  }
  // generation_config.json may list more end tokens than config.json (Llama 3.1: eot, eom).
  const auto& generation = llm->checkpoint_->generation_config();
  if (engine_options.eos_token_ids.empty()) {
    engine_options.eos_token_ids = llm->checkpoint_->config().eos_token_ids;
    if (generation.has_value()) {
      for (int id : generation->eos_token_ids) {
        if (std::find(engine_options.eos_token_ids.begin(), engine_options.eos_token_ids.end(),
                      id) == engine_options.eos_token_ids.end()) {
          engine_options.eos_token_ids.push_back(id);
        }
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(llm->engine_, Engine::Create(std::move(runner), engine_options));
  return llm;
}

LLM::~LLM() = default;

std::unique_ptr<Engine> LLM::TakeEngine() {
  CHECK(engine_ != nullptr) << "TakeEngine twice";
  return std::move(engine_);
}

Result<std::vector<int32_t>> LLM::Tokenize(const Prompt& prompt) const {
  std::vector<int32_t> ids;
  switch (prompt.kind) {
    case Prompt::Kind::kText:
      ids = tokenizer_.tokenizer->Encode(prompt.text, /*add_special=*/true,
                                         /*parse_special=*/true);
      break;
    case Prompt::Kind::kChat: {
      KILN_ASSIGN_OR_RETURN(std::string text,
                            ApplyChatTemplate(tokenizer_, prompt.messages, nullptr,
                                              /*add_generation_prompt=*/true));
      // The template writes bos itself (as HF's apply_chat_template).
      ids = tokenizer_.tokenizer->Encode(text, /*add_special=*/false, /*parse_special=*/true);
      break;
    }
    case Prompt::Kind::kTokens:
      ids = prompt.token_ids;
      break;
  }
  if (ids.empty()) return InvalidArgument("prompt: is empty");
  return ids;
}

Result<std::vector<GenerateResult>> LLM::Generate(const std::vector<Prompt>& prompts,
                                                  const SamplingParams& params) {
  KILN_RETURN_IF_ERROR(params.Validate(model_config().vocab_size));
  std::random_device random;
  struct Pending {
    size_t prompt_index;
    int32_t completion_index;
    RequestTextStream stream;
  };
  std::vector<GenerateResult> results(prompts.size());
  std::vector<EngineRequest> requests;
  std::unordered_map<RequestId, Pending> pending;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ids = Tokenize(prompts[i]);
    if (!ids.ok()) {
      return Status(ids.status().code(),
                    "prompts[" + std::to_string(i) + "]: " + ids.status().message());
    }
    results[i].prompt_token_ids = *ids;
    results[i].completions.resize(params.n);
    const uint64_t seed =
        params.seed.has_value() ? *params.seed : (uint64_t{random()} << 32 | uint64_t{random()});
    for (int32_t j = 0; j < params.n; ++j) {
      EngineRequest r;
      r.id = next_id_++;
      r.prompt_token_ids = *ids;
      r.params = params;
      r.seed = CompletionSeed(seed, j);
      r.cache_key.cache_salt = params.cache_salt;
      Status valid = engine_->ValidateRequest(r);
      if (!valid.ok()) {
        return Status(valid.code(), "prompts[" + std::to_string(i) + "]: " + valid.message());
      }
      results[i].completions[j].index = j;
      pending.emplace(r.id, Pending{i, j, RequestTextStream(tokenizer_.tokenizer.get(), params)});
      requests.push_back(std::move(r));
    }
  }
  for (EngineRequest& r : requests) KILN_RETURN_IF_ERROR(engine_->AddRequest(std::move(r)));

  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  while (engine_->HasWork()) {
    for (const RequestOutput& out : engine_->Step()) {
      auto it = pending.find(out.id);
      if (it == pending.end()) continue;  // finished here already (stop string)
      Pending& p = it->second;
      GenerateResult& result = results[p.prompt_index];
      CompletionOutput& c = result.completions[p.completion_index];
      TextDelta delta = p.stream.Process(out);
      if (c.token_ids.empty() && !delta.token_ids.empty()) c.first_token_ms = elapsed_ms();
      c.text += delta.text;
      c.token_ids.insert(c.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
      if (p.completion_index == 0) {
        result.num_cached_tokens = out.num_cached_tokens;
        result.prompt_logprobs.insert(result.prompt_logprobs.end(), delta.prompt_logprobs.begin(),
                                      delta.prompt_logprobs.end());
      }
      if (delta.finished) {
        c.finish_reason = delta.finish_reason.value_or(FinishReason::kStop);
        c.stop_string = delta.stop_string;
        c.stop_token_id = delta.stop_token_id;
        c.finish_ms = elapsed_ms();
        if (delta.needs_abort) engine_->Abort(out.id);
        pending.erase(it);
      }
    }
  }
  CHECK(pending.empty()) << pending.size() << " requests never finished";
  return results;
}

}  // namespace kiln
