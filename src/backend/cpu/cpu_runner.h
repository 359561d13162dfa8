// The CPU ModelRunner: the reference backend (DESIGN.md §4) and the no-GPU fallback. A
// Llama-family forward pass (Llama 2/3/3.1, Mistral, SmolLM, Qwen2) in float32 over the ops of
// cpu_ops.h, one batched pass per step over the flat token array of StepInputs:
//
//   h = embed(token_ids)                                   [num_tokens, hidden]
//   per layer:  x = rms_norm(h);  qkv = x Wqkv^T (+ b);  rope(q, k) at positions
//               store k, v at slot_mapping;  a = paged causal attention(q, cache, block_tables)
//               h += a Wo^T (+ b);  x = rms_norm(h);  h += silu(x Wg^T) * (x Wu^T) Wd^T (+ b)
//   logits = rms_norm(h[rows]) Wlm^T   only for the rows that need them: the last token of each
//            sequence with do_sample, and the first prompt_logprob_targets.size() tokens
//   sampled / scored by kiln::cpu::Sample / Score (sampler.h)
//
// Numerics: weights decode to exactly the f32 values of DequantizeToF32; activations, KV cache
// and accumulation are f32 (unless CpuRunnerOptions asks for FP8 linear layers or KV cache). Every
// reduction has a fixed order (cpu_ops.h), so a sequence's logits are bitwise identical whatever
// else is in the batch, however its prompt is chunked, and whatever num_threads is. Against HF
// transformers (float32, eager attention) the default model's logprobs agree within 1e-3
// (tests/golden).
//
//   KILN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(path));
//   KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, CreateCpuRunner(ckpt, {}));
//   KILN_RETURN_IF_ERROR(runner->AllocateKvCache(num_blocks, 16));
//   StepResult result = runner->Execute(inputs);
//
// The runner copies what it needs: it does not reference the Checkpoint after creation.
#pragma once

#include <memory>

#include "backend/model_runner.h"
#include "core/status.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

// Sees the activations of the CPU forward pass as they are computed: what calibration for
// quantization (kiln build: SmoothQuant, AWQ, GPTQ, FP8 KV cache scales) measures. Called on
// the thread that runs Execute, once per layer and site per step, with every token of the step.
class ActivationObserver {
 public:
  // The inputs of a decoder layer's linear layers (after fusion: one input feeds q, k and v,
  // one feeds gate and up).
  enum class Site : uint8_t { kQkv, kO, kGateUp, kDown };

  virtual ~ActivationObserver() = default;
  // x: [rows, cols] f32, row stride ld; the input of `site`'s linear layer in `layer`.
  virtual void ObserveLinearInput(int layer, Site site, const float* x, int64_t rows, int64_t cols,
                                  int64_t ld) = 0;
  // k, v: [rows, kv_size] f32, row stride ld: the keys (after RoPE) and values the layer stores
  // in the KV cache, before any FP8 encoding.
  virtual void ObserveKv(int layer, const float* k, const float* v, int64_t rows, int64_t kv_size,
                         int64_t ld) = 0;
  // x: [rows, hidden] f32, row stride ld: lm_head's input (the final norm's output) for every
  // token of the step, not only those whose logits the step needs (GPTQ of a 4-bit lm_head).
  // The runner computes it only for an observer that wants_lm_head_input().
  virtual bool wants_lm_head_input() const { return false; }
  virtual void ObserveLmHeadInput(const float* /*x*/, int64_t /*rows*/, int64_t /*cols*/,
                                  int64_t /*ld*/) {}
};

struct CpuRunnerOptions {
  // Threads for the ops of one step (the calling thread included). 0 (default) = every core
  // this process may run on. Results do not depend on it; on a machine shared with other work,
  // fewer threads can be faster.
  int num_threads = 0;
  // false (default): weight matrices stay in their stored format when it is f32, f16, bf16,
  // q4_0, q4_1 or q8_0 and are decoded inside each matrix product (a q4_1 model reads ~7x fewer
  // bytes per token than in f32); other formats are dequantized to f32 at load. true: every
  // matrix is held in f32 (4-7x the memory). The results are bitwise identical either way.
  // FP8 matrices (quantization kFp8) stay FP8 either way.
  bool dequantize_weights_at_load = false;
  // kFp8: the linear layers of every decoder layer (qkv, o, gate_up, down) run FP8 W8A8 as
  // model/quantization.h defines it, their weights quantized per output channel at load
  // (cpu_weights.h); ~1 byte per weight instead of the stored format's (q4_1: 0.625, bf16: 2).
  // Changes the results by the quantization error (docs/quantization.md).
  QuantMethod quantization = QuantMethod::kNone;
  // kFp8E4M3: the KV cache holds e4m3 codes with a per-layer K and V scale (1 byte per element
  // instead of f32's 4; KvBlockBytes reports it). Changes the results by the rounding of K and V.
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  // Not owned; must outlive the runner. Null (default): nothing observes.
  ActivationObserver* observer = nullptr;
};

// Builds a CPU runner for `ckpt`: loads (and, for GGUF llama files, un-permutes) the weights.
// Errors: Unsupported for rope scaling other than none/linear/llama3 (dynamic, yarn) or a dtype
// the CPU cannot decode; InvalidArgument for an invalid config or options.
Result<std::unique_ptr<ModelRunner>> CreateCpuRunner(const Checkpoint& ckpt,
                                                     const CpuRunnerOptions& options);

}  // namespace kiln
