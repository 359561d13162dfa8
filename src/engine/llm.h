// LLM: the offline API (vLLM's `LLM(...).generate(prompts, SamplingParams)`): load a model, then
// generate for a list of prompts on the caller's thread, all prompts batched together.
//
//   KILN_ASSIGN_OR_RETURN(std::unique_ptr<LLM> llm, LLM::Create("/models/smollm2.gguf", {}));
//   SamplingParams params;
//   params.temperature = 0;
//   params.max_tokens = 64;
//   KILN_ASSIGN_OR_RETURN(auto results, llm->Generate({Prompt::Text("Hello")}, params));
//   std::cout << results[0].completions[0].text;
//
// Thread safety: one thread at a time (Generate runs the engine to completion).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"
#include "engine/tokenizer_loader.h"
#include "model/checkpoint.h"

namespace kiln {

struct LlmOptions {
  // engine.scheduler.max_num_seqs 0 = automatic (AutomaticMaxNumSeqs).
  EngineOptions engine;
  // Where the model runs: "cpu" (the reference backend), "cuda" / "cuda:N" (kiln built with
  // CUDA and a GPU present) or "auto" (CUDA when possible, else CPU).
  std::string device = "auto";
  int32_t num_threads = 0;  // CPU backend threads; 0 = all cores
  // Weights, activations and KV cache (vLLM's --dtype): "auto" (CUDA: fp16 for GGUF and float16
  // checkpoints, else bf16; CPU: fp32), "bfloat16", "float16" (CUDA), "float32" (CPU).
  std::string dtype = "auto";
  // vLLM's --quantization: "none" (the checkpoint's weights as they are) or "fp8" (FP8 W8A8: the
  // decoder layers' linear weights quantized to e4m3 per output channel at load, activations
  // per token on the fly; model/quantization.h, docs/quantization.md). int8-sq and w4a16 engines
  // come from `kiln build`.
  std::string quantization = "none";
  // vLLM's --kv-cache-dtype: "auto" (the compute dtype; for an engine directory, the KV cache
  // it was built for) or "fp8" / "fp8_e4m3" (e4m3 with a per-layer K and V scale: a quarter of
  // the CPU's f32 bytes per block, half of bf16's).
  std::string kv_cache_dtype = "auto";
  // A PEM Ed25519 public key: the model must be an engine directory signed by its private key
  // (kiln build --sign), with every file as signed; checked before anything is loaded.
  std::string verify_key;
  // Called as the weights reach the device (done, total bytes), for a progress bar (CUDA).
  std::function<void(int64_t done, int64_t total)> load_progress;
  // CUDA: the share of the device's memory kiln may hold (weights, workspace, KV cache) when
  // engine.kv_cache_memory_bytes is 0 (automatic) and engine.num_kv_blocks is 0.
  float gpu_memory_utilization = 0.9f;
  // Host memory for swap-to-host preemption (engine.swap_space_bytes). Unset: 4 GiB (at most an
  // eighth of the host's memory) on CUDA, where recomputing a long request costs a prefill, and
  // none on the CPU, where the KV pool is host memory already.
  std::optional<int64_t> swap_space_bytes;
  bool enable_cuda_graphs = true;  // CUDA: replay captured graphs for decode steps
  // CUDA: programmatic dependent launch where the device has it (CudaRunnerOptions).
  bool programmatic_launch = true;
  // CUDA FP8: quantize activations inside the norms / SiluMul (CudaRunnerOptions).
  bool fuse_activation_quant = true;
  // CUDA FP8: cuBLASLt's fast accumulation in the FP8 GEMMs (CudaRunnerOptions).
  bool fp8_fast_accum = true;
  // CUDA, fp8 KV cache on Hopper: e4m3 mma's in prompt attention (CudaRunnerOptions).
  bool e4m3_prefill_attention = true;
  // CUDA FP8: the prompt steps' residual stream in 24 bits instead of fp32 (CudaRunnerOptions).
  bool residual_24bit = true;
  // CUDA, fp8 KV cache on Hopper: RoPE writes prompt rows' Q as e4m3 codes (CudaRunnerOptions).
  bool rope_q_codes = true;
  // CUDA, FP8 prompt steps on Hopper: SiluMul in the gate_up GEMM's epilogue (CudaRunnerOptions).
  bool fused_gate_up = true;
  // CUDA, W8A16 decode rows and one-token W4A16 steps: SiluMul in the gate_up GEMV's epilogue
  // (CudaRunnerOptions).
  bool gemv_silu = true;
  // CUDA, the same steps: RoPE and the KV write in the qkv GEMV's epilogue (the same).
  bool gemv_rope = true;
  // CUDA, W8A16 decode rows: the GEMVs in their persistent form (CudaRunnerOptions).
  bool gemv_persistent = true;
  // CUDA, one-token W4A16 decode steps: the norms in the GEMVs' prologues (CudaRunnerOptions).
  bool gemv_norm = true;
  // CUDA, FP8 decode rows: the most tokens the W8A16 GEMV takes (CudaRunnerOptions); unset: the
  // runner's default.
  std::optional<int32_t> fp8_gemv_max_rows;
  // CUDA, FP8 batch-1 decode on Hopper: every decoder layer in one kernel (CudaRunnerOptions;
  // experimental, off by default).
  bool fused_decode = false;
  // CUDA: bytes of the next linear layer's weights each decode linear layer asks L2 for
  // (CudaRunnerOptions::l2_prefetch_bytes); unset: the runner's default.
  std::optional<int64_t> l2_prefetch_bytes;
  // CUDA: device time per op for benchmarks (CudaMemoryReport::op_seconds); no graphs.
  bool profile_cuda_ops = false;
  TokenizerLoadOptions tokenizer;
};

// A prompt: text (tokenized with the model's tokenizer, bos added as the model wants), chat
// messages (rendered with its chat template, generation prompt added) or token ids.
struct Prompt {
  std::string text;
  nlohmann::ordered_json messages;  // a JSON list of {"role", "content"} when chat
  std::vector<int32_t> token_ids;
  enum class Kind : uint8_t { kText, kChat, kTokens } kind = Kind::kText;

  static Prompt Text(std::string text);
  static Prompt Chat(nlohmann::ordered_json messages);
  static Prompt Tokens(std::vector<int32_t> ids);
};

struct CompletionOutput {
  int32_t index = 0;  // among the prompt's n completions
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<ScoredToken> logprobs;  // per token, when params.logprobs
  FinishReason finish_reason = FinishReason::kLength;
  std::optional<std::string> stop_string;  // the stop string that ended it
  int32_t stop_token_id = -1;              // the eos / stop token that ended it
  double first_token_ms = 0;               // from Generate() start to its first token
  double finish_ms = 0;                    // from Generate() start to its end
};

struct GenerateResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<ScoredToken> prompt_logprobs;   // prompt_token_ids[1:] each, when asked for
  int32_t num_cached_tokens = 0;              // prompt tokens served by the prefix cache
  std::vector<CompletionOutput> completions;  // params.n of them
};

class LLM {
 public:
  // Opens the checkpoint (HF directory or GGUF), its tokenizer, the backend, and the engine.
  static Result<std::unique_ptr<LLM>> Create(const std::string& model, const LlmOptions& options);
  ~LLM();

  // Turns a prompt into token ids. Errors: kInvalidArgument for an empty prompt or chat
  // messages the template rejects; kNotFound for chat without a template.
  Result<std::vector<int32_t>> Tokenize(const Prompt& prompt) const;

  // Generates for every prompt; all are validated before any runs (kInvalidArgument names the
  // prompt index and the field). Seeds: params.seed when given (completion j of a prompt uses a
  // seed derived from (seed, j)), else a random one per completion.
  Result<std::vector<GenerateResult>> Generate(const std::vector<Prompt>& prompts,
                                               const SamplingParams& params);

  // Hands the engine to another owner (an Executor, for `kiln serve`). The LLM must outlive it:
  // the backend reads the weights this LLM's checkpoint maps. Afterwards only tokenizer(),
  // model_name(), checkpoint() and Tokenize() may be called.
  std::unique_ptr<Engine> TakeEngine();

  Engine& engine() { return *engine_; }
  const LoadedTokenizer& tokenizer() const { return tokenizer_; }
  const ModelConfig& model_config() const { return engine_->model_config(); }
  const std::string& model_name() const { return model_name_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

 private:
  LLM() = default;
  std::unique_ptr<Checkpoint> checkpoint_;  // the backend may read its mapped weights
  LoadedTokenizer tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::string model_name_;
  RequestId next_id_ = 1;
};

// The seed of completion `index` of a request seeded with `seed` (index 0 keeps `seed`).
uint64_t CompletionSeed(uint64_t seed, int32_t index);

// Creates the runner options.device names, sized for options.engine. Errors: kInvalidArgument
// for an unknown device, kUnavailable for "cuda" without a GPU or without CUDA in this build,
// and those of the backend.
Result<std::unique_ptr<ModelRunner>> CreateRunner(const Checkpoint& checkpoint,
                                                  const LlmOptions& options);

// The device "auto" resolves to: "cuda:0" when kiln has CUDA and a GPU is visible, else "cpu".
std::string ResolveDevice(const std::string& device);

// The requests running at once when none were asked for (vLLM's rule): 1024 on a GPU with
// 70 GiB of memory or more, where the KV pool holds that many short sequences and a step of
// 1024 decodes still costs little more than one of 256; 256 elsewhere (smaller GPUs, CPU).
int32_t AutomaticMaxNumSeqs(const std::string& device);

}  // namespace kiln
