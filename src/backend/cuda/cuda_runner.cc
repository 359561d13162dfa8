#include "backend/cuda/cuda_runner.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/sampler.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_table.h"
#include "backend/cuda/weight_upload.h"
#include "core/buffer.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/logging.h"
#include "kernels/attention.h"
#include "kernels/decode_fused.h"
#include "kernels/elementwise.h"
#include "kernels/fp8_gate_up.h"
#include "kernels/gemv.h"
#include "kernels/kv_swap.h"
#include "kernels/launch.h"
#include "kernels/quant.h"
#include "kernels/sampling.h"
#include "kernels/step_inputs.h"
#include "kernels/w4a16.h"
#include "model/dequant.h"

namespace kiln {
namespace {

// The default of CudaRunnerOptions::fp8_gemv_max_rows for a device. The W8A16 GEMV wins batch-1
// FP8 decode steps everywhere it was measured, but at 2 tokens it loses on the H200 (4.8 TB/s:
// 3.47 ms a step against 3.16-3.20 with W8A8, docs/benchmarks.md, session 38), where the weight
// stream is fast enough for the GEMV's arithmetic to show; the H100 (3.35 TB/s) kept it up to 3
// tokens. So the choice follows the peak DRAM bandwidth.
constexpr double kFp8GemvOneRowBandwidth = 4.0e12;  // bytes/s

Result<int32_t> DefaultFp8GemvMaxRows(int device, double* peak_bandwidth) {
  int mem_khz = 0, bus_bits = 0;
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  KILN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  *peak_bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8;  // double data rate
  return *peak_bandwidth >= kFp8GemvOneRowBandwidth ? 1 : cuda::Gemm::kFp8GemvDefaultRows;
}

constexpr int64_t kAlign = 256;  // bytes; every sub-buffer starts on this boundary
int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Carves sub-buffers out of one allocation: first a sizing pass (base == nullptr), then a
// placing pass over the real base pointer.
class Arena {
 public:
  explicit Arena(uint8_t* base) : base_(base) {}
  template <typename T>
  T* Take(int64_t count) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += AlignUp(count * static_cast<int64_t>(sizeof(T)));
    return p;
  }
  int64_t used() const { return used_; }

 private:
  uint8_t* base_;
  int64_t used_ = 0;
};

// A linear layer's weight: T, or e4m3 with per-channel scales (QuantMethod::kFp8), or int8 with
// per-channel scales (kInt8), or 4-bit codes in the W4A16 kernel's layout (kW4A16).
template <typename T>
struct LinearWeight {
  T* w = nullptr;
  cuda::Fp8Weight fp8;
  cuda::Int8Weight int8;
  cuda::W4Weight w4;
  int64_t rows = 0;  // of the whole (fused) matrix
};

template <typename T>
struct LayerWeights {
  T* input_norm = nullptr;
  LinearWeight<T> qkv;  // [q_size + 2 kv_size, hidden]
  T* qkv_bias = nullptr;
  LinearWeight<T> o;  // [hidden, q_size]
  T* o_bias = nullptr;
  T* post_norm = nullptr;
  LinearWeight<T> gate_up;  // [2 inter, hidden]
  T* gate_up_bias = nullptr;
  LinearWeight<T> down;  // [hidden, inter]
  T* down_bias = nullptr;
};

// Steps of at least this many tokens leave the FP8 GEMMs' scale passes to their consumers
// (EnqueueForward). H100, Llama-3.1-8B FP8 decode steps, fused vs separate passes: +3 % at 16
// rows, +1.7 % at 24, even at 32 and 48, -2.6 % at 64, -8.8 % at 128, -14 % at 256.
constexpr int32_t kFp8FusedScalesMinRows = 48;

// What a consumer of an FP8 GEMM's unscaled sums (Gemm::Fp8GemmUnscaled) scales them by: the
// GEMM input's per-token scales `row`, w's per-channel ones and its bias (bf16 models only).
template <typename T>
kernels::Fp8InputScales ScalesOf(const float* row, const LinearWeight<T>& w, const T* bias) {
  return {row, w.fp8.scale, reinterpret_cast<const __nv_bfloat16*>(bias)};
}

// Per-step inputs: one pinned host block and its device twin with the same layout.
struct StepCapacity {
  int32_t tokens = 0, seqs = 0, rows = 0, max_blocks = 0;
  int32_t bias = 0, banned = 0, penalty_tokens = 0;  // sampler lists, all rows together
};

struct StepArrays {
  int32_t* token_ids;
  int32_t* positions;
  int64_t* slots;
  int32_t* cu_seqlens;
  int32_t* seq_lens;
  int32_t* logit_rows;
  int32_t* block_tables;           // [seqs, max_blocks] (row stride fixed)
  kernels::SamplingRow* sampling;  // [seqs]
  int32_t* bias_ids;
  float* bias_values;
  int32_t* banned_ids;
  int32_t* penalty_tokens;
  int32_t* targets;                // [rows] prompt-logprob targets
  kernels::SampledToken* sampled;  // [rows]

  static StepArrays Place(Arena& a, const StepCapacity& c) {
    StepArrays s;
    s.token_ids = a.Take<int32_t>(c.tokens);
    s.positions = a.Take<int32_t>(c.tokens);
    s.slots = a.Take<int64_t>(c.tokens);
    s.cu_seqlens = a.Take<int32_t>(c.seqs + 1);
    s.seq_lens = a.Take<int32_t>(c.seqs);
    s.logit_rows = a.Take<int32_t>(c.rows);
    s.block_tables = a.Take<int32_t>(int64_t{c.seqs} * c.max_blocks);
    s.sampling = a.Take<kernels::SamplingRow>(c.seqs);
    s.bias_ids = a.Take<int32_t>(c.bias);
    s.bias_values = a.Take<float>(c.bias);
    s.banned_ids = a.Take<int32_t>(c.banned);
    s.penalty_tokens = a.Take<int32_t>(c.penalty_tokens);
    s.targets = a.Take<int32_t>(c.rows);
    s.sampled = a.Take<kernels::SampledToken>(c.rows);
    return s;
  }
};

// Which logits rows a step needs, in order: per sequence, its prompt-logprob rows, then its
// sampled row.
struct LogitRow {
  int32_t seq;
  int32_t token;    // row in the step's flat token array
  int32_t target;   // prompt-logprob target, or -1 for the sampled row
  int32_t num_top;  // alternatives wanted
};

// How many entries of each sampler list a step uses.
struct SamplingCounts {
  int32_t bias = 0, banned = 0, penalty_tokens = 0;
};

ScoredToken ToScored(const kernels::SampledToken& t, int32_t num_top) {
  ScoredToken s;
  s.token_id = t.token_id;
  s.logprob = t.logprob;
  s.rank = t.rank;
  for (int32_t i = 0; i < std::min(t.num_top, num_top); ++i) {
    s.top_logprobs.push_back({t.top_ids[i], t.top_logprobs[i]});
  }
  return s;
}

// What GetCudaMemoryReport reads, whatever the runner's activation type.
class CudaRunnerBase : public ModelRunner {
 public:
  virtual CudaMemoryReport MemoryReport() const = 0;
  virtual Result<std::string> GemmTableJson() const = 0;
};

// T: the activation, weight and KV cache type (__nv_bfloat16 or __half; CudaRunnerOptions::dtype).
template <typename T>
class CudaRunner final : public CudaRunnerBase {
 public:
  CudaRunner(const ModelConfig& config, const CudaRunnerOptions& options)
      : config_(config), options_(options) {}
  ~CudaRunner() override {
    for (auto& [batch, exec] : graphs_) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : mark_events_) cudaEventDestroy(e);
    for (StepSlot& slot : slots_) {
      if (slot.start != nullptr) cudaEventDestroy(slot.start);
      if (slot.end != nullptr) cudaEventDestroy(slot.end);
      if (slot.staging != nullptr) cudaFreeHost(slot.staging);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
  }

  Status Init(const Checkpoint& ckpt);

  const ModelConfig& config() const override { return config_; }
  std::string name() const override { return "cuda:" + std::to_string(options_.device); }
  int64_t KvBlockBytes(int32_t block_size) const override {
    return int64_t{config_.num_layers} * 2 * config_.num_kv_heads * block_size * config_.head_dim *
           KvElementBytes();
  }
  Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override;
  Status AllocateSwapSpace(int32_t num_blocks) override;
  StepResult Execute(const StepInputs& inputs) override;
  void Launch(const StepInputs& inputs) override;
  StepResult Wait() override;
  bool OverlapsHost() const override { return true; }

  CudaMemoryReport MemoryReport() const override;
  Result<std::string> GemmTableJson() const override;

 private:
  Status UploadWeights(const Checkpoint& ckpt);
  // Adopts the algorithms of an engine's GEMM table tuned on this GPU and cuBLASLt (a table
  // from elsewhere is skipped with a warning: the runner then tunes as usual).
  Status ImportGemmTable(const std::string& path);
  Status AllocateWorkspace();
  // Bytes of w4_scratch_.dequant: the largest W4 weight in T, at most
  // cuda::Gemm::kW4DequantDefaultBytes.
  int64_t W4DequantBytes() const;
  // Enqueues the forward pass of `num_tokens` tokens in `num_seqs` sequences (the first
  // num_decode of which have one token each) up to the fp32 logits of `num_rows` rows.
  Status EnqueueForward(int32_t num_tokens, int32_t num_seqs, int32_t num_decode, int32_t max_q_len,
                        int32_t num_rows);
  // forward_tokens: the num_tokens of the EnqueueForward (or captured graph) whose residual
  // stream it reads.
  Status EnqueueLogits(int32_t num_rows, int32_t row_offset, int32_t forward_tokens);
  // Whether a forward pass of num_tokens tokens has the norms and SiluMul write the FP8 layers'
  // e4m3 inputs, also leaves the FP8 GEMMs' scale passes to their consumers, and keeps its
  // residual stream in 24 bits instead of fp32 (EnqueueForward).
  bool FusedFp8(int32_t num_tokens) const;
  bool FusedScales(int32_t num_tokens) const;
  bool FusedGateUp(int32_t num_tokens) const;
  // Fills fused_layers_ and fused_args_ for the current KV cache and step arrays, and sets
  // fused_decode_ where kernels::FusedDecode takes the model (CudaRunnerOptions::fused_decode).
  Status PrepareFusedDecode();
  bool Residual24(int32_t num_tokens) const;
  // Layer i's RoPE + KV write and attention, over a cache of element type C (T or e4m3).
  // qkv_scales: qkv_ holds the FP8 qkv projection's unscaled sums (RopeStoreKv scales them).
  // rope_done: the qkv GEMV's epilogue did RoPE and the KV write (QkvRopeW8).
  template <typename C>
  Status EnqueueAttention(int i, int32_t num_tokens, int32_t num_seqs, int32_t num_decode,
                          int32_t max_q_len, const kernels::Fp8InputScales& qkv_scales,
                          bool rope_done);
  // kernels::RopeStoreKv's arguments for layer i's qkv_ rows of a step of num_tokens tokens
  // (no q codes).
  template <typename C>
  kernels::RopeKvArgsT<T, C> RopeArgs(int i, int32_t num_tokens,
                                      const kernels::Fp8InputScales& qkv_scales) const;
  // Layer i's qkv projection and RoPE + KV write as one W8A16 GEMV (Gemm::QkvRopeW8) from x_
  // into qkv_ and the cache, for FP8 and INT8 layers; false (nothing launched) for other
  // formats and rows the GEMV does not take.
  template <typename C>
  Result<bool> QkvRopeW8(int i, int32_t num_tokens);
  // Whether RoPE hands the prompt rows' q to the e4m3 prefill kernel as codes in a step of
  // num_seqs sequences, num_decode of them decoding (an fp8 cache with q_codes_).
  bool RopeWritesQCodes(int32_t num_seqs, int32_t num_decode) const {
    return fp8_kv() && q_codes_ != nullptr && num_seqs > num_decode;
  }
  // f(w.int8) or f(w.fp8) (a Result<bool>) for a W8A16-capable layer; false for the others.
  template <typename F>
  static Result<bool> OnW8Weight(const LinearWeight<T>& w, F&& f) {
    if (w.w != nullptr || w.w4.tiled != nullptr) return false;
    if (w.int8.w != nullptr) return f(w.int8);
    if (w.fp8.w != nullptr) return f(w.fp8);
    return false;
  }
  bool fp8_kv() const { return options_.kv_cache_dtype == KvCacheDType::kFp8E4M3; }
  int64_t KvElementBytes() const { return fp8_kv() ? 1 : static_cast<int64_t>(sizeof(T)); }
  // out[m, n] = x[m, k] . w^T (+ bias) in the layer's format (Gemm::Linear or LinearFp8).
  Status Linear(const T* x, int64_t m, const LinearWeight<T>& w, int64_t n, int64_t k,
                const T* bias, T* out, cuda::L2Prefetch prefetch = {});
  // The L2 hint for the linear layer a step of `tokens` tokens runs before `next` ([n, k]): the
  // first options_.l2_prefetch_bytes of next's weights (CudaRunnerOptions::l2_prefetch_bytes,
  // whose -1 means kDefaultL2PrefetchBytes but none ahead of W4A16 weights at one token).
  cuda::L2Prefetch PrefetchOf(const LinearWeight<T>& next, int64_t n, int64_t k,
                              int32_t tokens) const;
  // Layer l's gate_up and SiluMul as one W8A16 GEMV (Gemm::GateUpSiluW8) from x_ into act_, for
  // FP8 and INT8 layers; false (nothing launched) for other formats and rows the GEMV does not
  // take.
  Result<bool> GateUpSiluW8(const LayerWeights<T>& l, int32_t num_tokens);
  Status CaptureGraphs();
  // With options_.profile_ops: an event after the op that just ended (`op`), or the step's
  // first mark (op == nullptr). CollectMarks adds the device time between marks to op_seconds_
  // once the stream has synchronized.
  void Mark(const char* op);
  void CollectMarks();
  // Tune() of every linear layer shape a decode graph of `batch` rows runs (cuBLASLt shapes
  // only), cycling through the layers' own weights.
  Status TuneDecodeGemms(int32_t batch);
  // The prompt steps' FP8 GEMMs (Gemm::TuneFp8Prompt), at start-up after the decode graphs'.
  Status TunePromptGemms();
  // The layers' e4m3 weights: qkv, o, gate_up, down (those left in 16 bits skipped).
  std::array<std::vector<const __nv_fp8_e4m3*>, 4> Fp8LayerWeights() const;
  int32_t GraphBatch(int32_t num_seqs) const;
  // Packs the sampler inputs of the sampled rows into `host`; false when they exceed the
  // capacity (the step then samples on the host).
  bool StageSampling(const StepInputs& in, const std::vector<LogitRow>& rows, int32_t num_sampled,
                     int32_t padded_rows, StepArrays& host, SamplingCounts* counts);
  Status EnqueueSampling(int32_t num_rows);
  // Enqueues the step's swap copies (swap_out, then swap_in) through the slot's pair list.
  Status EnqueueSwaps(const StepInputs& in, int slot_index);
  // Enqueues the copies of `jobs` (sources in the slot's staging, by host address) and the
  // resolve of the token ids of job resolve.job (placeholders only among the first num_tokens:
  // padding is 0): one UploadStepInputs launch, or, when the staging is not mapped, one
  // cudaMemcpyAsync per job and ResolvePreviousTokens.
  void EnqueueStepUploads(int slot_index, std::span<kernels::UploadJob> jobs,
                          const kernels::TokenResolve& resolve, int32_t num_tokens);
  void SampleOnHost(const StepInputs& in, const std::vector<LogitRow>& rows, int32_t forward_tokens,
                    StepResult& result);

  ModelConfig config_;
  CudaRunnerOptions options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  bool interleaved_rope_ = false;
  // How gate_up_ holds gate and up: kRunsOf8 for W4A16 weights (their rows are stored so).
  kernels::GateUpLayout gate_up_layout_ = kernels::GateUpLayout::kHalves;

  DeviceBuffer weight_memory_;
  std::vector<LayerWeights<T>> layers_;
  T* embedding_ = nullptr;
  T* final_norm_ = nullptr;
  // T (.w == embedding_ when tied), or W4A16 (.w4) when a w4a16 engine was built with
  // --quantize-lm-head.
  LinearWeight<T> lm_head_;
  float* inv_freq_ = nullptr;

  // Activations, [max_num_tokens, width] each.
  DeviceBuffer workspace_memory_;
  // The residual stream is fp32 (kernels::RmsNormF32Residual), the other activations T.
  float* h_ = nullptr;
  // One-token steps with norms in the W4A16 GEMVs' prologues (options_.gemv_norm) keep the
  // residual stream in h_ and h_alt_ ([hidden]) in turn: such a GEMV reads one while its first
  // block writes the other. residual_: where the step's stream is now (EnqueueLogits reads it).
  float* h_alt_ = nullptr;
  float* residual_ = nullptr;
  T *x_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr, *delta_ = nullptr, *gate_up_ = nullptr,
    *act_ = nullptr, *rows_ = nullptr;
  cuda::Fp8Scratch fp8_scratch_;  // FP8: a linear layer's input quantized per token
  // FP8 with every qkv, gate_up and down weight in e4m3 (a pre-quantized checkpoint may leave
  // layers in T): the norms and SiluMul may write those layers' e4m3 input (EnqueueForward).
  bool fp8_fused_inputs_ = false;
  // fp8_fused_inputs_, bf16, and o in e4m3 too: each FP8 GEMM's scale pass is left to the kernel
  // that reads its output (kernels::Fp8InputScales). Its input scales then alternate between
  // fp8_scratch_.scale (written by the norms: qkv's and gate_up's inputs) and fp8_scales_b_
  // (SiluMul's and o's input quantization: down's and o's inputs), so that no kernel reads the
  // scales it overwrites.
  bool fp8_fused_scales_ = false;
  float* fp8_scales_b_ = nullptr;
  cuda::Int8Scratch int8_scratch_;  // INT8: the same in int8, and the GEMM's int32 sums
  // W4A16: x's columns gathered (act-order), and the weights dequantized slice by slice for
  // steps of more rows than one W4Gemm launch takes (prompts, large decode batches).
  cuda::W4Scratch w4_scratch_;
  int64_t w4_group_size_ = 0;  // W4A16: the checkpoint's group size (one for all layers)
  bool w4_act_order_ = false;
  float* logits_ = nullptr;  // [logit_chunk_, vocab]
  int32_t logit_chunk_ = 0;  // logits rows computed per lm_head pass
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  // Prompt rows' Q as e4m3 codes and row scales from RoPE for the e4m3 prefill kernel
  // (options_.rope_q_codes and kernels::PrefillTakesQCodes): [max_num_tokens, q_size] bytes and
  // [max_num_tokens, num_heads] floats in gate_up_'s memory, which is free from RoPE to the
  // prefill attention (gate_up writes it later in the layer, in stream order).
  __nv_fp8_e4m3* q_codes_ = nullptr;
  float* q_code_scales_ = nullptr;
  // FP8 batch-1 decode steps as one kernel (PrepareFusedDecode): the layers' weights and caches
  // (device array), the kernel's partials and counters (zeroed with the workspace).
  kernels::FusedDecodeLayer* fused_layers_ = nullptr;
  float* fused_partials_ = nullptr;
  uint32_t* fused_sync_ = nullptr;
  kernels::FusedDecodeArgs fused_args_;
  bool fused_decode_ = false;

  DeviceBuffer kv_memory_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  int32_t max_blocks_per_seq_ = 0;
  std::vector<void*> k_cache_, v_cache_;  // per layer; T or e4m3 (fp8_kv())
  // Per layer: an fp8 cache's dequantization scales (model/quantization.h; 1 until calibrated).
  std::vector<float> k_scale_, v_scale_;
  std::vector<KvCacheScales> checkpoint_kv_scales_;  // per layer, or empty
  // Swap space: num_host_blocks_ blocks of pinned, mapped host memory (kernels/kv_swap.h layout).
  PinnedHostBuffer swap_;
  int32_t num_host_blocks_ = 0;

  // Two launched steps can be in flight (async scheduling): each has its own pinned inputs and
  // results (a slot), while the device arrays are shared (the stream orders their use).
  struct StepSlot {
    uint8_t* staging = nullptr;
    // staging as the device addresses it (pinned and mapped: kernels::UploadStepInputs reads it
    // there), or null when it could not be mapped (the step inputs then go by cudaMemcpyAsync).
    uint8_t* staging_dev = nullptr;
    StepArrays host{};
    // The step's swap copies as (device block, host block) pairs, pinned and mapped: the swap
    // kernels read them from here.
    PinnedHostBuffer swap_pairs;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  // A launched step: what Wait needs to finish it.
  struct Pending {
    int slot = 0;
    std::vector<LogitRow> rows;
    int32_t num_sampled = 0;
    bool device_sampling = false;
    std::vector<int32_t> num_top;     // per sequence: sampled alternatives wanted
    std::vector<int32_t> row_of_seq;  // per sequence: its sampled row, -1 when none
    StepResult result;                // filled at launch when sampled on the host
  };
  DeviceBuffer step_memory_;
  int64_t step_bytes_ = 0;
  StepCapacity capacity_;
  StepSlot slots_[2];
  int next_slot_ = 0;
  std::deque<Pending> pending_;
  StepArrays dev_{};
  float* host_logits_ = nullptr;
  DeviceBuffer sampling_workspace_;
  int32_t graph_sampled_rows_ = 0;  // rows the captured graphs sample (their batch size)

  double upload_seconds_ = 0, graph_capture_seconds_ = 0, gemm_tune_seconds_ = 0;
  int32_t gemm_table_entries_ = 0;
  int64_t timed_steps_ = 0;
  std::vector<cudaEvent_t> mark_events_;
  std::vector<const char*> mark_ops_;  // per recorded mark
  std::map<std::string, double> op_seconds_;
  double gpu_step_seconds_ = 0;
  std::vector<int32_t> graph_batches_;
  std::map<int32_t, cudaGraphExec_t> graphs_;
};

// ---- Weights ------------------------------------------------------------------------------

// The kiln DType of an activation type.
template <typename T>
constexpr DType DTypeOf() {
  return std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16;
}

template <typename T>
Status CudaRunner<T>::Init(const Checkpoint& ckpt) {
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  int cc_major = 0;
  KILN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, options_.device));
  kernels::SetProgrammaticLaunch(options_.programmatic_launch && cc_major >= 9);
  KILN_ASSIGN_OR_RETURN(gemm_, cuda::Gemm::Create());
  gemm_->set_fp8_fast_accum(options_.fp8_fast_accum);
  gemm_->set_gemv_persistent(options_.gemv_persistent);
  kernels::SetPrefillKernel(options_.e4m3_prefill_attention ? kernels::PrefillKernel::kAuto
                                                            : kernels::PrefillKernel::kWgmma16Bit);
  for (StepSlot& slot : slots_) {
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&slot.start));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&slot.end));
  }
  if (options_.max_model_len <= 0) {
    options_.max_model_len = static_cast<int32_t>(config_.max_position_embeddings);
  }
  interleaved_rope_ = ckpt.qk_rope_layout() == QkRopeLayout::kInterleaved;
  // A pre-quantized FP8 checkpoint runs as FP8 whatever was asked (its weights are e4m3), and
  // brings its calibrated KV cache scales (used with an FP8 KV cache).
  if (ckpt.quantization().method == QuantMethod::kFp8) options_.quantization = QuantMethod::kFp8;
  // Likewise INT8 (SmoothQuant) and W4A16 checkpoints: their linear weights arrive quantized and
  // run as they are (kiln build writes them; nothing quantizes to these formats at load).
  if (ckpt.quantization().method == QuantMethod::kInt8 ||
      ckpt.quantization().method == QuantMethod::kW4A16) {
    options_.quantization = ckpt.quantization().method;
  }
  if (options_.fp8_gemv_max_rows > kernels::kGemvMaxRows) {
    return InvalidArgument("fp8_gemv_max_rows " + std::to_string(options_.fp8_gemv_max_rows) +
                           ": the W8A16 GEMV takes 0 to " + std::to_string(kernels::kGemvMaxRows) +
                           " tokens");
  }
  if (options_.fp8_gemv_max_rows >= 0) {
    gemm_->set_fp8_gemv_max_rows(options_.fp8_gemv_max_rows);
  } else if (options_.quantization == QuantMethod::kFp8) {
    double bandwidth = 0.0;
    KILN_ASSIGN_OR_RETURN(const int32_t rows, DefaultFp8GemvMaxRows(options_.device, &bandwidth));
    gemm_->set_fp8_gemv_max_rows(rows);
    LOG(INFO) << "FP8 decode: the W8A16 GEMV up to " << rows << " token" << (rows == 1 ? "" : "s")
              << " a step (peak DRAM bandwidth " << bandwidth / 1e12 << " TB/s)";
  }
  checkpoint_kv_scales_ = ckpt.kv_cache_scales();
  if (options_.tune_gemms && ckpt.engine().has_value() && !ckpt.engine()->gemm_table_path.empty()) {
    KILN_RETURN_IF_ERROR(ImportGemmTable(ckpt.engine()->gemm_table_path));
  }
  const auto start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(UploadWeights(ckpt));
  upload_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fp8_fused_inputs_ =
      options_.quantization == QuantMethod::kFp8 && options_.fuse_activation_quant &&
      config_.intermediate_size <= 65536 &&  // kernels::SiluMulFp8's limit
      std::all_of(layers_.begin(), layers_.end(), [](const LayerWeights<T>& l) {
        return l.qkv.fp8.w != nullptr && l.gate_up.fp8.w != nullptr && l.down.fp8.w != nullptr;
      });
  fp8_fused_scales_ = fp8_fused_inputs_ && std::is_same_v<T, __nv_bfloat16> &&
                      std::all_of(layers_.begin(), layers_.end(),
                                  [](const LayerWeights<T>& l) { return l.o.fp8.w != nullptr; });
  return AllocateWorkspace();
}

// A part (rows [row, row + rows) of a fused matrix, or all of one) of an INT8 linear layer: a
// pre-quantized int8 weight (kiln build --quant int8-sq) and its row scales, as they are.
template <typename T>
Status UploadInt8Linear(const Checkpoint& ckpt, cuda::Uploader& uploader, const std::string& name,
                        LinearWeight<T>& lw, int64_t row, int64_t rows, int64_t cols) {
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": missing tensor " + name);
  if (w->dtype != DType::kI8 || static_cast<int64_t>(w->row_scales.size()) != rows ||
      w->nbytes != rows * cols) {
    return InvalidArgument(w->file + ": tensor " + w->source_name + " (" +
                           std::string(DTypeName(w->dtype)) + ", " +
                           std::to_string(w->row_scales.size()) + " row scales) is not an int8 " +
                           std::to_string(rows) + " x " + std::to_string(cols) +
                           " weight with one scale per row, as an int8-sq checkpoint's are");
  }
  KILN_RETURN_IF_ERROR(
      uploader.Upload(w->data, w->nbytes, const_cast<int8_t*>(lw.int8.w) + row * cols));
  return uploader.Upload(w->row_scales.data(), rows * sizeof(float),
                         const_cast<float*>(lw.int8.scale) + row);
}

template <typename T>
Status CudaRunner<T>::ImportGemmTable(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  KILN_ASSIGN_OR_RETURN(cuda::GemmTable table, cuda::ParseGemmTable(text, path));
  KILN_ASSIGN_OR_RETURN(cuda::GemmTable here, cuda::CurrentGemmTable(options_.device, {}));
  if (table.device != here.device || table.cublaslt_version != here.cublaslt_version) {
    LOG(WARNING) << path << ": tuned on " << table.device << " with cuBLASLt "
                 << table.cublaslt_version << "; this is " << here.device << " with cuBLASLt "
                 << here.cublaslt_version << ", so the GEMMs are tuned again at start-up";
    return Status::Ok();
  }
  int rejected = 0;
  for (const cuda::TunedGemm& entry : table.entries) {
    KILN_ASSIGN_OR_RETURN(bool adopted, gemm_->ImportTuned(entry));
    adopted ? ++gemm_table_entries_ : ++rejected;
  }
  if (rejected > 0) {
    LOG(WARNING) << path << ": cuBLASLt rejected " << rejected << " of " << table.entries.size()
                 << " algorithms; those shapes are tuned again";
  }
  return Status::Ok();
}

template <typename T>
Status CudaRunner<T>::UploadWeights(const Checkpoint& ckpt) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  const int64_t qkv_rows = q + 2 * kv;
  const bool fp8 = options_.quantization == QuantMethod::kFp8;
  if (fp8 && (h % 16 != 0 || q % 16 != 0 || kv % 8 != 0 || inter % 16 != 0)) {
    return Unsupported("quantization fp8: " + ckpt.path() + " has hidden_size " +
                       std::to_string(h) + ", q size " + std::to_string(q) + ", kv size " +
                       std::to_string(kv) + " and intermediate_size " + std::to_string(inter) +
                       "; the FP8 GEMMs need multiples of 16 (kv size: of 8)");
  }
  const bool int8 = options_.quantization == QuantMethod::kInt8;
  const bool w4 = options_.quantization == QuantMethod::kW4A16;
  if (int8 && (h % 16 != 0 || q % 16 != 0 || kv % 8 != 0 || inter % 16 != 0)) {
    return Unsupported("quantization int8-sq: " + ckpt.path() + " has hidden_size " +
                       std::to_string(h) + ", q size " + std::to_string(q) + ", kv size " +
                       std::to_string(kv) + " and intermediate_size " + std::to_string(inter) +
                       "; the INT8 GEMMs need multiples of 16 (kv size: of 8)");
  }
  // A w4a16 engine built with --quantize-lm-head has a 4-bit lm_head.weight of its own (its
  // own group size, no act-order).
  const Weight* head = ckpt.Find("lm_head.weight");
  const bool w4_head = w4 && head != nullptr && head->dtype == DType::kI4 && head->w4.has_value();
  if (w4_head && (!head->w4->perm.empty() ||
                  !kernels::W4ShapeSupported(c.vocab_size, h, head->w4->group_size))) {
    return Unsupported(head->file + ": the 4-bit lm_head.weight [" + std::to_string(c.vocab_size) +
                       ", " + std::to_string(h) + "] with group size " +
                       std::to_string(head->w4->group_size) +
                       (head->w4->perm.empty() ? "" : " and act-order") +
                       " does not fit the W4A16 kernels (vocab a multiple of 16, hidden size of "
                       "64, a group size of 16, 32 or a multiple of 64 dividing it, no act-order)");
  }
  if (w4) {
    // One group size and one act-order choice for the whole model, read off its first weight.
    const std::string first = "model.layers.0.self_attn.q_proj.weight";
    const Weight* w = ckpt.Find(first);
    if (w == nullptr || w->dtype != DType::kI4 || !w->w4.has_value()) {
      return InvalidArgument(ckpt.path() + ": a w4a16 checkpoint's linear weights must be packed " +
                             "4-bit with group scales; " + first + " is not");
    }
    w4_group_size_ = w->w4->group_size;
    w4_act_order_ = !w->w4->perm.empty();
    const int64_t g = w4_group_size_;
    if (q % kernels::kW4TileRows != 0 || kv % kernels::kW4TileRows != 0 ||
        !kernels::W4ShapeSupported(qkv_rows, h, g) || !kernels::W4ShapeSupported(h, q, g) ||
        !kernels::W4ShapeSupported(2 * inter, h, g) || !kernels::W4ShapeSupported(h, inter, g)) {
      return Unsupported("quantization w4a16: " + ckpt.path() + " has hidden_size " +
                         std::to_string(h) + ", q size " + std::to_string(q) + ", kv size " +
                         std::to_string(kv) + ", intermediate_size " + std::to_string(inter) +
                         " and group size " + std::to_string(g) +
                         "; the W4A16 kernels need row counts in multiples of 16, input widths "
                         "in multiples of 64 and a group size of 16, 32 or a multiple of 64 "
                         "dividing every input width");
    }
  }
  // A pre-quantized FP8 checkpoint (an engine, or an HF FP8 checkpoint) may leave layers in 16
  // bits (`ignore` lists, kiln build --unquantized-layers): those run in T as on the CPU, not
  // quantized here. `first` is the fused matrix's first part.
  const bool fp8_prequantized = ckpt.quantization().method == QuantMethod::kFp8;
  auto stays_16bit = [&](const std::string& first) {
    const Weight* w = ckpt.Find(first);
    return fp8 && fp8_prequantized && w != nullptr && w->dtype != DType::kF8E4M3;
  };
  // Sizing pass, then the real one.
  auto take_linear = [&](Arena& a, int64_t rows, int64_t cols, const std::string& first) {
    LinearWeight<T> lw;
    lw.rows = rows;
    if (fp8 && !stays_16bit(first)) {
      lw.fp8.w = a.Take<__nv_fp8_e4m3>(rows * cols);
      lw.fp8.scale = a.Take<float>(rows);
      lw.fp8.input_scale = a.Take<float>(1);  // kept only if the weight brings one (below)
    } else if (int8) {
      lw.int8.w = a.Take<int8_t>(rows * cols);
      lw.int8.scale = a.Take<float>(rows);
    } else if (w4) {
      lw.w4.tiled = a.Take<uint8_t>(rows * cols / 2);
      lw.w4.sz = a.Take<uint32_t>(rows * (cols / w4_group_size_));
      lw.w4.perm = w4_act_order_ ? a.Take<int32_t>(cols) : nullptr;
      lw.w4.group_size = w4_group_size_;
    } else {
      lw.w = a.Take<T>(rows * cols);
    }
    return lw;
  };
  auto place = [&](Arena& a) {
    embedding_ = a.Take<T>(int64_t{c.vocab_size} * h);
    layers_.assign(c.num_layers, {});
    for (int i = 0; i < c.num_layers; ++i) {
      LayerWeights<T>& l = layers_[i];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      l.input_norm = a.Take<T>(h);
      l.qkv = take_linear(a, qkv_rows, h, p + "self_attn.q_proj.weight");
      if (c.qkv_bias) l.qkv_bias = a.Take<T>(qkv_rows);
      l.o = take_linear(a, h, q, p + "self_attn.o_proj.weight");
      if (c.o_bias) l.o_bias = a.Take<T>(h);
      l.post_norm = a.Take<T>(h);
      l.gate_up = take_linear(a, 2 * inter, h, p + "mlp.gate_proj.weight");
      if (c.mlp_bias) l.gate_up_bias = a.Take<T>(2 * inter);
      l.down = take_linear(a, h, inter, p + "mlp.down_proj.weight");
      if (c.mlp_bias) l.down_bias = a.Take<T>(h);
    }
    final_norm_ = a.Take<T>(h);
    lm_head_ = {};
    lm_head_.rows = c.vocab_size;
    if (w4_head) {
      lm_head_.w4.tiled = a.Take<uint8_t>(int64_t{c.vocab_size} * h / 2);
      lm_head_.w4.sz = a.Take<uint32_t>(int64_t{c.vocab_size} * (h / head->w4->group_size));
      lm_head_.w4.group_size = head->w4->group_size;
    } else {
      lm_head_.w = c.tie_word_embeddings ? embedding_ : a.Take<T>(int64_t{c.vocab_size} * h);
    }
    inv_freq_ = a.Take<float>(c.head_dim / 2);
  };
  Arena sizing(nullptr);
  place(sizing);
  auto memory = DeviceBuffer::Allocate(sizing.used());
  if (!memory.ok()) {
    return ResourceExhausted("CUDA: the weights of " + ckpt.path() + " need " +
                             std::to_string(sizing.used() >> 20) +
                             " MiB of device memory: " + memory.status().message());
  }
  weight_memory_ = std::move(*memory);
  Arena arena(static_cast<uint8_t*>(weight_memory_.data()));
  place(arena);

  // Progress in the checkpoint's bytes (converted tensors move more or fewer).
  const int64_t total_bytes = ckpt.WeightBytes();
  int64_t sent = 0;
  cuda::Uploader uploader(stream_, [&](int64_t n) {
    sent += n;
    if (options_.upload_progress)
      options_.upload_progress(std::min(sent, total_bytes), total_bytes);
  });
  KILN_RETURN_IF_ERROR(uploader.Init());
  std::vector<uint16_t> values;
  auto upload = [&](const std::string& name, T* dst) -> Status {
    const Weight* w = ckpt.Find(name);
    if (w == nullptr) return NotFound(ckpt.path() + ": missing tensor " + name);
    if (w->dtype == DTypeOf<T>()) {  // straight from the mapped file
      return uploader.Upload(w->data, w->shape.numel() * sizeof(uint16_t), dst);
    }
    KILN_RETURN_IF_ERROR(cuda::ToActivation(*w, DTypeOf<T>(), values));
    return uploader.Upload(values.data(), values.size() * sizeof(uint16_t), dst);
  };
  // A part (rows [row, row + rows) of a fused matrix, or all of one) of a linear layer. FP8: a
  // pre-quantized e4m3 part is uploaded with its scales; another is uploaded in T into
  // `staging` and quantized per output channel (a row of the fused matrix is a row of its part,
  // so per-part and per-fused-matrix quantization are the same).
  std::map<const int32_t*, std::vector<int32_t>> perms;  // W4A16 act-order, per fused matrix
  // FP8: the static activation scale of each fused matrix, the largest of its parts' (they read
  // one input), or 0 once a part has none (the matrix then quantizes per token), as the CPU's.
  std::map<LinearWeight<T>*, float> input_scales;
  DeviceBuffer staging;
  if (fp8 || w4) {
    const int64_t largest = std::max(
        {qkv_rows * h, h * q, 2 * inter * h, h * inter, w4_head ? int64_t{c.vocab_size} * h : 0});
    KILN_ASSIGN_OR_RETURN(staging, DeviceBuffer::Allocate(largest * sizeof(T)));
  }
  // order: a W4A16 part's row order (cuda::W4RowOrder; the other formats keep the stored one).
  auto upload_linear = [&](const std::string& name, LinearWeight<T>& lw, int64_t row, int64_t rows,
                           int64_t cols,
                           cuda::W4RowOrder order = cuda::W4RowOrder::kAsIs) -> Status {
    if (int8) return UploadInt8Linear(ckpt, uploader, name, lw, row, rows, cols);
    if (w4) {
      return cuda::UploadW4Part(ckpt, uploader, name, lw.w4, lw.rows, row, rows, cols, order,
                                c.head_dim, std::is_same_v<T, __nv_bfloat16>, staging, perms,
                                stream_);
    }
    if (lw.w != nullptr) {  // T: not FP8, or a layer an FP8 checkpoint left in 16 bits
      const Weight* w = ckpt.Find(name);
      if (w != nullptr && w->dtype == DType::kF8E4M3) {
        return InvalidArgument(w->file + ": tensor " + w->source_name +
                               " is e4m3 but the first part of its fused matrix is not; the "
                               "parts of q|k|v and of gate|up must be quantized alike");
      }
      return upload(name, lw.w + row * cols);
    }
    auto* w8 = const_cast<__nv_fp8_e4m3*>(lw.fp8.w) + row * cols;
    auto* scale = const_cast<float*>(lw.fp8.scale) + row;
    const Weight* w = ckpt.Find(name);
    if (w != nullptr && w->dtype == DType::kF8E4M3) {
      if (static_cast<int64_t>(w->row_scales.size()) != rows || w->nbytes != rows * cols) {
        return InvalidArgument(w->file + ": tensor " + w->source_name + " has " +
                               std::to_string(w->row_scales.size()) + " scales and " +
                               std::to_string(w->nbytes) + " bytes for " + std::to_string(rows) +
                               " x " + std::to_string(cols) + " e4m3 values");
      }
      auto [it, first] = input_scales.try_emplace(&lw, w->input_scale);
      if (!first) it->second = it->second > 0 ? std::max(it->second, w->input_scale) : 0.0f;
      if (w->input_scale <= 0) it->second = 0;
      KILN_RETURN_IF_ERROR(uploader.Upload(w->data, w->nbytes, w8));
      return uploader.Upload(w->row_scales.data(), rows * sizeof(float), scale);
    }
    input_scales[&lw] = 0;  // quantized here: per token
    KILN_RETURN_IF_ERROR(upload(name, static_cast<T*>(staging.data())));
    KILN_CUDA_RETURN_IF_ERROR(kernels::QuantizeRowsFp8(static_cast<const T*>(staging.data()), cols,
                                                       rows, cols, w8, cols, scale, stream_));
    return Status::Ok();
  };
  // W4A16 rows in the orders of the one-token GEMV's epilogues (cuda::W4RowOrder): gate_up in
  // runs of 8 (SiluMul then reads it as GateUpLayout::kRunsOf8), and the q and k heads of a
  // half-split checkpoint in RoPE's interleaved pair order (RoPE then runs interleaved in every
  // step, and the cache holds K in that order; q . k is the same sum in another order).
  const auto gate_order = w4 ? cuda::W4RowOrder::kGateRuns : cuda::W4RowOrder::kAsIs;
  const auto up_order = w4 ? cuda::W4RowOrder::kUpRuns : cuda::W4RowOrder::kAsIs;
  const auto qk_order =
      w4 && !interleaved_rope_ ? cuda::W4RowOrder::kRopePairs : cuda::W4RowOrder::kAsIs;
  if (w4) {
    gate_up_layout_ = kernels::GateUpLayout::kRunsOf8;
    interleaved_rope_ = true;
  }
  // A bias part in its weight's row order: through `staging` when it moves.
  auto upload_bias = [&](const std::string& name, T* bias, int64_t row, int64_t rows,
                         cuda::W4RowOrder order) -> Status {
    if (order == cuda::W4RowOrder::kAsIs) return upload(name, bias + row);
    auto* part = static_cast<T*>(staging.data());
    KILN_RETURN_IF_ERROR(upload(name, part));
    return cuda::PlaceRows(part, bias, row, rows, sizeof(T), order, c.head_dim, stream_);
  };
  KILN_RETURN_IF_ERROR(upload("model.embed_tokens.weight", embedding_));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights<T>& l = layers_[i];
    KILN_RETURN_IF_ERROR(upload(p + "input_layernorm.weight", l.input_norm));
    KILN_RETURN_IF_ERROR(upload_linear(p + "self_attn.q_proj.weight", l.qkv, 0, q, h, qk_order));
    KILN_RETURN_IF_ERROR(upload_linear(p + "self_attn.k_proj.weight", l.qkv, q, kv, h, qk_order));
    KILN_RETURN_IF_ERROR(upload_linear(p + "self_attn.v_proj.weight", l.qkv, q + kv, kv, h));
    if (c.qkv_bias) {
      KILN_RETURN_IF_ERROR(upload_bias(p + "self_attn.q_proj.bias", l.qkv_bias, 0, q, qk_order));
      KILN_RETURN_IF_ERROR(upload_bias(p + "self_attn.k_proj.bias", l.qkv_bias, q, kv, qk_order));
      KILN_RETURN_IF_ERROR(upload(p + "self_attn.v_proj.bias", l.qkv_bias + q + kv));
    }
    KILN_RETURN_IF_ERROR(upload_linear(p + "self_attn.o_proj.weight", l.o, 0, h, q));
    if (c.o_bias) KILN_RETURN_IF_ERROR(upload(p + "self_attn.o_proj.bias", l.o_bias));
    KILN_RETURN_IF_ERROR(upload(p + "post_attention_layernorm.weight", l.post_norm));
    KILN_RETURN_IF_ERROR(
        upload_linear(p + "mlp.gate_proj.weight", l.gate_up, 0, inter, h, gate_order));
    KILN_RETURN_IF_ERROR(
        upload_linear(p + "mlp.up_proj.weight", l.gate_up, inter, inter, h, up_order));
    KILN_RETURN_IF_ERROR(upload_linear(p + "mlp.down_proj.weight", l.down, 0, h, inter));
    if (c.mlp_bias) {
      KILN_RETURN_IF_ERROR(
          upload_bias(p + "mlp.gate_proj.bias", l.gate_up_bias, 0, inter, gate_order));
      KILN_RETURN_IF_ERROR(
          upload_bias(p + "mlp.up_proj.bias", l.gate_up_bias, inter, inter, up_order));
      KILN_RETURN_IF_ERROR(upload(p + "mlp.down_proj.bias", l.down_bias));
    }
  }
  if (fp8) {
    for (auto& [lw, scale] : input_scales) {
      if (scale > 0) {
        KILN_RETURN_IF_ERROR(
            uploader.Upload(&scale, sizeof(float), const_cast<float*>(lw->fp8.input_scale)));
      } else {
        lw->fp8.input_scale = nullptr;
      }
    }
  }
  KILN_RETURN_IF_ERROR(upload("model.norm.weight", final_norm_));
  if (w4_head) {
    KILN_RETURN_IF_ERROR(
        cuda::UploadW4Part(ckpt, uploader, "lm_head.weight", lm_head_.w4, c.vocab_size, 0,
                           c.vocab_size, h, cuda::W4RowOrder::kAsIs, c.head_dim,
                           std::is_same_v<T, __nv_bfloat16>, staging, perms, stream_));
  } else if (!c.tie_word_embeddings) {
    KILN_RETURN_IF_ERROR(upload("lm_head.weight", lm_head_.w));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<float> inv_freq,
                        cpu::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling));
  KILN_RETURN_IF_ERROR(
      uploader.Upload(inv_freq.data(), inv_freq.size() * sizeof(float), inv_freq_));
  KILN_RETURN_IF_ERROR(uploader.Finish());
  if (options_.upload_progress) options_.upload_progress(total_bytes, total_bytes);
  return Status::Ok();
}

template <typename T>
int64_t CudaRunner<T>::W4DequantBytes() const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  int64_t widest = std::max(
      {(c.q_size() + 2 * c.kv_size()) * h, int64_t{c.q_size()} * h, 2 * inter * h, inter * h});
  if (lm_head_.w4.tiled != nullptr) widest = std::max(widest, int64_t{c.vocab_size} * h);
  return std::min(static_cast<int64_t>(cuda::Gemm::kW4DequantDefaultBytes),
                  widest * static_cast<int64_t>(sizeof(T)));
}

template <typename T>
Status CudaRunner<T>::AllocateWorkspace() {
  const ModelConfig& c = config_;
  const int64_t t = options_.max_num_tokens, h = c.hidden_size;
  const int64_t qkv_rows = c.q_size() + 2 * c.kv_size();
  logit_chunk_ = std::max(1, options_.max_num_seqs);
  kernels::AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.0f};
  attn_workspace_bytes_ =
      kernels::PagedDecodeWorkspaceBytes(options_.max_num_seqs, options_.max_model_len, dims);
  auto place = [&](Arena& a) {
    h_ = a.Take<float>(t * h);
    h_alt_ = a.Take<float>(h);
    residual_ = h_;
    x_ = a.Take<T>(t * h);
    qkv_ = a.Take<T>(t * qkv_rows);
    attn_ = a.Take<T>(t * c.q_size());
    delta_ = a.Take<T>(t * h);
    gate_up_ = a.Take<T>(t * 2 * c.intermediate_size);
    const int64_t code_bytes = t * (c.q_size() + int64_t{c.num_heads} * sizeof(float));
    if (fp8_kv() && options_.rope_q_codes &&
        code_bytes <= t * 2 * c.intermediate_size * int64_t{sizeof(T)} &&
        kernels::PrefillTakesQCodes({c.num_heads, c.num_kv_heads, c.head_dim, 1.0f})) {
      q_codes_ = reinterpret_cast<__nv_fp8_e4m3*>(gate_up_);
      q_code_scales_ = reinterpret_cast<float*>(q_codes_ + t * c.q_size());
    }
    act_ = a.Take<T>(t * c.intermediate_size);
    rows_ = a.Take<T>(int64_t{logit_chunk_} * h);
    if (options_.quantization == QuantMethod::kFp8) {
      fp8_scratch_.x = a.Take<__nv_fp8_e4m3>(
          t * std::max({h, int64_t{c.q_size()}, int64_t{c.intermediate_size}}));
      fp8_scratch_.scale = a.Take<float>(t);
      fp8_scales_b_ = a.Take<float>(t);
    }
    const int64_t widest_in = std::max({h, int64_t{c.q_size()}, int64_t{c.intermediate_size}});
    if (options_.quantization == QuantMethod::kInt8) {
      int8_scratch_.x = a.Take<int8_t>(t * widest_in);
      int8_scratch_.scale = a.Take<float>(t);
      int8_scratch_.acc =
          a.Take<int32_t>(t * std::max({qkv_rows, h, int64_t{2} * c.intermediate_size}));
    }
    if (options_.quantization == QuantMethod::kW4A16 && w4_act_order_) {
      w4_scratch_.gathered = a.Take<T>(t * widest_in);
    }
    if (options_.quantization == QuantMethod::kW4A16 &&
        std::max<int64_t>(t, logit_chunk_) >= kernels::kW4TileMinRows) {
      // Zeroed with the rest of the workspace below, as the counters must start.
      w4_scratch_.split_counter_count = cuda::Gemm::kW4SplitDefaultCounters;
      w4_scratch_.split_counters = a.Take<uint32_t>(w4_scratch_.split_counter_count);
      w4_scratch_.split_partial_bytes = cuda::Gemm::kW4SplitDefaultBytes;
      w4_scratch_.split_partials =
          a.Take<float>(static_cast<int64_t>(w4_scratch_.split_partial_bytes / sizeof(float)));
    }
    if (options_.quantization == QuantMethod::kW4A16 &&
        std::max<int64_t>(t, logit_chunk_) > gemm_->w4_gemm_max_rows()) {
      w4_scratch_.dequant_bytes = W4DequantBytes();
      w4_scratch_.dequant = a.Take<T>(static_cast<int64_t>(w4_scratch_.dequant_bytes / sizeof(T)));
    }
    logits_ = a.Take<float>(int64_t{logit_chunk_} * c.vocab_size);
    attn_workspace_ = a.Take<uint8_t>(static_cast<int64_t>(attn_workspace_bytes_));
    if (options_.quantization == QuantMethod::kFp8 && options_.fused_decode) {
      fused_layers_ = a.Take<kernels::FusedDecodeLayer>(c.num_layers);
      fused_partials_ = a.Take<float>(static_cast<int64_t>(
          kernels::FusedDecodeWorkspaceBytes(c.num_heads, c.head_dim) / sizeof(float)));
      fused_sync_ = a.Take<uint32_t>(
          static_cast<int64_t>(kernels::FusedDecodeSyncBytes(c.num_kv_heads) / sizeof(uint32_t)));
    }
  };
  Arena sizing(nullptr);
  place(sizing);
  auto memory = DeviceBuffer::Allocate(sizing.used());
  if (!memory.ok()) {
    return ResourceExhausted("CUDA: the activation workspace for " + std::to_string(t) +
                             " tokens per step needs " + std::to_string(sizing.used() >> 20) +
                             " MiB: " + memory.status().message() +
                             "; lower --max-num-batched-tokens");
  }
  workspace_memory_ = std::move(*memory);
  Arena arena(static_cast<uint8_t*>(workspace_memory_.data()));
  place(arena);
  // Rows that padding or a partial step never writes still flow through row-independent
  // kernels; zeros keep them finite.
  KILN_CUDA_RETURN_IF_ERROR(cudaMemset(workspace_memory_.data(), 0, workspace_memory_.size()));
  KILN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&host_logits_),
                                          int64_t{logit_chunk_} * c.vocab_size * sizeof(float),
                                          cudaHostAllocDefault));
  return Status::Ok();
}

template <typename T>
Status CudaRunner<T>::AllocateSwapSpace(int32_t num_blocks) {
  CHECK_GT(num_blocks_, 0) << "AllocateSwapSpace before AllocateKvCache";
  CHECK(pending_.empty()) << "AllocateSwapSpace with steps in flight";
  swap_ = PinnedHostBuffer();
  num_host_blocks_ = 0;
  if (num_blocks <= 0) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(swap_, PinnedHostBuffer::Allocate(
                                   static_cast<size_t>(KvBlockBytes(block_size_)) * num_blocks));
  num_host_blocks_ = num_blocks;
  return Status::Ok();
}

template <typename T>
Status CudaRunner<T>::EnqueueSwaps(const StepInputs& in, int slot_index) {
  StepSlot& slot = slots_[slot_index];
  const size_t pair_bytes = 2 * sizeof(int32_t);
  const size_t num_pairs = in.swap_out.size() + in.swap_in.size();
  if (num_pairs * pair_bytes > slot.swap_pairs.size()) {
    // The slot's previous step was waited for: nothing reads the old list.
    slot.swap_pairs = PinnedHostBuffer();
    KILN_ASSIGN_OR_RETURN(slot.swap_pairs, PinnedHostBuffer::Allocate(
                                               std::max<size_t>(num_pairs, 1024) * pair_bytes));
  }
  auto* pairs = static_cast<int32_t*>(slot.swap_pairs.data());
  for (const std::vector<BlockCopy>* list : {&in.swap_out, &in.swap_in}) {
    for (const BlockCopy& c : *list) {
      CHECK(c.device_block >= 0 && c.device_block < num_blocks_ && c.host_block >= 0 &&
            c.host_block < num_host_blocks_)
          << "swap copy " << c.device_block << " <-> " << c.host_block << " outside the pool ("
          << num_blocks_ << ") or swap space (" << num_host_blocks_ << ")";
      *pairs++ = c.device_block;
      *pairs++ = c.host_block;
    }
  }
  const int64_t per_layer =
      int64_t{num_blocks_} * config_.num_kv_heads * block_size_ * config_.head_dim;
  const kernels::KvSwapLayout layout{
      .pool = kv_memory_.data(),
      .plane_stride = per_layer * KvElementBytes(),
      .num_planes = 2 * config_.num_layers,
      .chunk_bytes = KvBlockBytes(block_size_) / (2 * config_.num_layers),
      .host = swap_.device_data(),
  };
  const auto* out_pairs = static_cast<const int32_t*>(slot.swap_pairs.device_data());
  KILN_CUDA_RETURN_IF_ERROR(kernels::SwapKvBlocks(
      layout, out_pairs, static_cast<int32_t>(in.swap_out.size()), /*to_host=*/true, stream_));
  KILN_CUDA_RETURN_IF_ERROR(kernels::SwapKvBlocks(layout, out_pairs + 2 * in.swap_out.size(),
                                                  static_cast<int32_t>(in.swap_in.size()),
                                                  /*to_host=*/false, stream_));
  return Status::Ok();
}

template <typename T>
void CudaRunner<T>::EnqueueStepUploads(int slot_index, std::span<kernels::UploadJob> jobs,
                                       const kernels::TokenResolve& resolve, int32_t num_tokens) {
  const StepSlot& slot = slots_[slot_index];
  if (slot.staging_dev != nullptr) {
    for (kernels::UploadJob& job : jobs) {
      job.src = slot.staging_dev + (static_cast<const uint8_t*>(job.src) - slot.staging);
    }
    const cudaError_t err =
        kernels::UploadStepInputs(jobs.data(), static_cast<int32_t>(jobs.size()), resolve, stream_);
    CHECK(err == cudaSuccess) << "UploadStepInputs: " << cudaGetErrorString(err);
    return;
  }
  for (const kernels::UploadJob& job : jobs) {
    if (job.row_bytes == 0 || job.num_rows == 0) continue;
    const cudaError_t err =
        job.num_rows == 1
            ? cudaMemcpyAsync(job.dst, job.src, job.row_bytes, cudaMemcpyHostToDevice, stream_)
            : cudaMemcpy2DAsync(job.dst, job.dst_stride, job.src, job.src_stride, job.row_bytes,
                                job.num_rows, cudaMemcpyHostToDevice, stream_);
    CHECK(err == cudaSuccess) << "step input copy: " << cudaGetErrorString(err);
  }
  if (resolve.job >= 0) {
    CHECK(kernels::ResolvePreviousTokens(static_cast<int32_t*>(jobs[resolve.job].dst), num_tokens,
                                         resolve.previous, stream_) == cudaSuccess);
  }
}

template <typename T>
Status CudaRunner<T>::AllocateKvCache(int32_t num_blocks, int32_t block_size) {
  if (block_size <= 0 || block_size % 16 != 0) {
    return InvalidArgument("block_size: the CUDA backend needs a multiple of 16, got " +
                           std::to_string(block_size));
  }
  for (auto& [batch, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  kv_memory_ = DeviceBuffer();
  const int64_t per_layer =
      int64_t{num_blocks} * config_.num_kv_heads * block_size * config_.head_dim;
  auto memory = DeviceBuffer::Allocate(KvBlockBytes(block_size) * num_blocks);
  if (!memory.ok()) {
    return ResourceExhausted("CUDA: a KV cache of " + std::to_string(num_blocks) + " blocks (" +
                             std::to_string((KvBlockBytes(block_size) * num_blocks) >> 20) +
                             " MiB) does not fit: " + memory.status().message());
  }
  kv_memory_ = std::move(*memory);
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  k_cache_.resize(config_.num_layers);
  v_cache_.resize(config_.num_layers);
  k_scale_.assign(config_.num_layers, 1.0f);
  v_scale_.assign(config_.num_layers, 1.0f);
  if (static_cast<int32_t>(checkpoint_kv_scales_.size()) == config_.num_layers) {
    for (int i = 0; i < config_.num_layers; ++i) {
      k_scale_[i] = checkpoint_kv_scales_[i].k_scale;
      v_scale_[i] = checkpoint_kv_scales_[i].v_scale;
    }
  }
  auto* base = static_cast<uint8_t*>(kv_memory_.data());
  const int64_t plane_bytes = per_layer * KvElementBytes();
  for (int i = 0; i < config_.num_layers; ++i) {
    k_cache_[i] = base + (2 * i) * plane_bytes;
    v_cache_[i] = base + (2 * i + 1) * plane_bytes;
  }

  // No sequence outgrows the pool: a shorter context bound means fewer decode splits.
  options_.max_model_len = static_cast<int32_t>(
      std::min<int64_t>(options_.max_model_len, int64_t{num_blocks} * block_size));
  // Step arrays sized for the largest step; block tables at a fixed row stride so that a
  // captured graph reads them at the same place every step.
  max_blocks_per_seq_ = (options_.max_model_len + block_size - 1) / block_size;
  StepCapacity& cap = capacity_;
  cap.seqs = options_.max_num_seqs;
  cap.tokens = std::max(options_.max_num_tokens, cap.seqs);
  cap.rows = cap.tokens + cap.seqs;  // prompt-logprob rows and sampled rows
  cap.max_blocks = max_blocks_per_seq_;
  cap.bias = cap.banned = 256 * cap.seqs;
  cap.penalty_tokens = static_cast<int32_t>(
      std::min<int64_t>(int64_t{cap.seqs} * options_.max_model_len, int64_t{1} << 22));
  Arena sizing(nullptr);
  StepArrays::Place(sizing, cap);
  step_bytes_ = sizing.used();
  CHECK(pending_.empty()) << "AllocateKvCache with steps in flight";
  // The step inputs go up by one kernel reading the staging in place (kernels/step_inputs.h):
  // pinned and mapped, at the device address cudaHostGetDevicePointer gives (the host address
  // under unified addressing).
  int can_map = 0;
  KILN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, options_.device));
  bool mapped = can_map != 0;
  for (StepSlot& slot : slots_) {
    if (slot.staging != nullptr) cudaFreeHost(slot.staging);
    KILN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&slot.staging), step_bytes_,
                                            mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
    slot.staging_dev = nullptr;
    if (mapped && cudaHostGetDevicePointer(reinterpret_cast<void**>(&slot.staging_dev),
                                           slot.staging, 0) != cudaSuccess) {
      cudaGetLastError();  // not sticky: the copies below take over
      mapped = false;
    }
    Arena host_arena(slot.staging);
    slot.host = StepArrays::Place(host_arena, cap);
  }
  if (!mapped) {
    for (StepSlot& slot : slots_) slot.staging_dev = nullptr;
  }
  LOG(INFO) << "step inputs: "
            << (mapped ? "one UploadStepInputs kernel a step (mapped pinned staging)"
                       : "one cudaMemcpyAsync per array (pinned staging not mappable)");
  KILN_ASSIGN_OR_RETURN(step_memory_, DeviceBuffer::Allocate(step_bytes_));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemset(step_memory_.data(), 0, step_bytes_));
  Arena dev_arena(static_cast<uint8_t*>(step_memory_.data()));
  dev_ = StepArrays::Place(dev_arena, cap);
  KILN_ASSIGN_OR_RETURN(sampling_workspace_,
                        DeviceBuffer::Allocate(std::max<size_t>(
                            1, kernels::SamplingWorkspaceBytes(cap.seqs, config_.vocab_size))));
  KILN_RETURN_IF_ERROR(PrepareFusedDecode());
  if (options_.enable_cuda_graphs) {
    const auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CaptureGraphs());
    graph_capture_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return Status::Ok();
}

template <typename T>
Result<std::string> CudaRunner<T>::GemmTableJson() const {
  KILN_ASSIGN_OR_RETURN(cuda::GemmTable table,
                        cuda::CurrentGemmTable(options_.device, gemm_->TunedGemms()));
  return cuda::GemmTableToJson(table);
}

template <typename T>
CudaMemoryReport CudaRunner<T>::MemoryReport() const {
  CudaMemoryReport r;
  r.dtype = DTypeOf<T>();
  r.weight_bytes = static_cast<int64_t>(weight_memory_.size());
  r.workspace_bytes = static_cast<int64_t>(workspace_memory_.size() + step_memory_.size() +
                                           sampling_workspace_.size());
  r.kv_cache_bytes = static_cast<int64_t>(kv_memory_.size());
  r.upload_seconds = upload_seconds_;
  r.graph_capture_seconds = graph_capture_seconds_;
  r.gemm_tune_seconds = gemm_tune_seconds_;
  r.gemm_table_entries = gemm_table_entries_;
  r.timed_steps = timed_steps_;
  r.gpu_step_seconds = gpu_step_seconds_;
  r.op_seconds = op_seconds_;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    r.device_total_bytes = static_cast<int64_t>(total_bytes);
    r.device_free_bytes = static_cast<int64_t>(free_bytes);
  }
  return r;
}

// ---- Forward ------------------------------------------------------------------------------

#define KILN_LAUNCH(expr) KILN_CUDA_RETURN_IF_ERROR(expr)

template <typename T>
bool CudaRunner<T>::FusedFp8(int32_t num_tokens) const {
  return fp8_fused_inputs_ && num_tokens > gemm_->fp8_gemv_max_rows();
}

template <typename T>
bool CudaRunner<T>::FusedScales(int32_t num_tokens) const {
  return FusedFp8(num_tokens) && fp8_fused_scales_ && num_tokens >= kFp8FusedScalesMinRows;
}

// Where the stream is 24-bit: the FP8 steps whose activations are e4m3 codes (3 significant
// bits, rounded per token), next to which the stream's 16 bits add no error that shows
// (docs/quantization.md), and whose norms move enough bytes to matter.
// Prompt steps (Gemm::kFp8PromptRows tokens or more, where it was measured: docs/benchmarks.md)
// run gate_up as kernels::Fp8GateUpSilu where the kernel takes the shapes.
template <typename T>
bool CudaRunner<T>::FusedGateUp(int32_t num_tokens) const {
  return options_.fused_gate_up && FusedScales(num_tokens) &&
         num_tokens >= cuda::Gemm::kFp8PromptRows;
}

template <typename T>
Status CudaRunner<T>::PrepareFusedDecode() {
  fused_decode_ = false;
  if (!options_.fused_decode) return Status::Ok();
  // Asked for and not taken: say why once a (re)allocation; the steps run kernel by kernel.
  auto decline = [&](const std::string& why) {
    LOG(WARNING) << "--fused-decode: " << why << "; batch-1 decode steps run kernel by kernel";
    return Status::Ok();
  };
  if (fused_layers_ == nullptr) return decline("it takes FP8 models (--quantization fp8)");
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return decline("kernels::FusedDecode takes bf16 activations, not this model's dtype");
  } else {
    const ModelConfig& c = config_;
    std::vector<kernels::FusedDecodeLayer> layers(c.num_layers);
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights<T>& w = layers_[i];
      // Every linear layer in e4m3 (a pre-quantized checkpoint may leave some in T).
      if (w.qkv.fp8.w == nullptr || w.o.fp8.w == nullptr || w.gate_up.fp8.w == nullptr ||
          w.down.fp8.w == nullptr) {
        return decline("layer " + std::to_string(i) + " keeps a linear layer unquantized");
      }
      kernels::FusedDecodeLayer& f = layers[i];
      f.input_norm = w.input_norm;
      f.post_norm = w.post_norm;
      f.qkv = w.qkv.fp8.w;
      f.qkv_scale = w.qkv.fp8.scale;
      f.qkv_bias = w.qkv_bias;
      f.o = w.o.fp8.w;
      f.o_scale = w.o.fp8.scale;
      f.o_bias = w.o_bias;
      f.gate_up = w.gate_up.fp8.w;
      f.gate_up_scale = w.gate_up.fp8.scale;
      f.gate_up_bias = w.gate_up_bias;
      f.down = w.down.fp8.w;
      f.down_scale = w.down.fp8.scale;
      f.down_bias = w.down_bias;
      f.k_cache = k_cache_[i];
      f.v_cache = v_cache_[i];
      f.k_scale = k_scale_[i];
      f.v_scale = v_scale_[i];
      if (!kernels::FusedDecodeLayerOk(f, fp8_kv())) {
        return decline("layer " + std::to_string(i) +
                       "'s weights or cache scales are not as kernels::FusedDecode takes them");
      }
    }
    kernels::FusedDecodeArgs& a = fused_args_;
    a.layers = fused_layers_;
    a.num_layers = c.num_layers;
    a.hidden = c.hidden_size;
    a.intermediate = c.intermediate_size;
    a.num_heads = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.rms_eps = c.rms_norm_eps;
    a.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.fp8_cache = fp8_kv();
    a.inv_freq = inv_freq_;
    a.interleaved_rope = interleaved_rope_;
    a.position = dev_.positions;
    a.slot = dev_.slots;
    a.seq_len = dev_.seq_lens;
    a.block_table = dev_.block_tables;
    a.block_size = block_size_;
    a.delta = delta_;
    a.residual = h_;
    a.qkv_out = qkv_;
    a.attn_out = attn_;
    a.act_out = act_;
    a.partials = fused_partials_;
    a.sync = fused_sync_;
    if (!kernels::FusedDecodeSupported(a)) {
      return decline(
          "kernels::FusedDecode does not take this model's shapes on this GPU (it needs an sm_90a "
          "build on a compute capability 9.0 GPU, head_dim 64 or 128, up to 8 query heads a kv "
          "head, hidden up to 8,192; docs/kernels.md)");
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(
        fused_layers_, layers.data(), layers.size() * sizeof(layers[0]), cudaMemcpyHostToDevice));
    fused_decode_ = true;
    return Status::Ok();
  }
}

template <typename T>
bool CudaRunner<T>::Residual24(int32_t num_tokens) const {
  return options_.residual_24bit && config_.hidden_size % 16 == 0 && FusedScales(num_tokens);
}

template <typename T>
Status CudaRunner<T>::EnqueueForward(int32_t num_tokens, int32_t num_seqs, int32_t num_decode,
                                     int32_t max_q_len, int32_t num_rows) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  const int64_t qkv_rows = q + 2 * kv;
  const float eps = c.rms_norm_eps;

  residual_ = h_;
  Mark(nullptr);
  KILN_LAUNCH(kernels::EmbeddingLookup(dev_.token_ids, num_tokens, embedding_, c.hidden_size,
                                       delta_, stream_));
  Mark("embedding");
  if (fused_decode_ && num_tokens == 1 && num_seqs == 1 && num_decode == 1) {
    // Every decoder layer in one kernel (PrepareFusedDecode): it leaves h_ and delta_ as the
    // last layer's down leaves them below.
    KILN_LAUNCH(kernels::FusedDecode(fused_args_, stream_));
    Mark("fused_decode");
    KILN_RETURN_IF_ERROR(EnqueueLogits(std::min(num_rows, logit_chunk_), 0, num_tokens));
    Mark("final_norm_lm_head");
    return Status::Ok();
  }
  // FP8 layers past the W8A16 GEMV's rows take e4m3 input quantized per token: the norms and
  // SiluMul write it (and its scales) into fp8_scratch_ themselves, instead of a T row that
  // LinearFp8 would quantize in a pass of its own (the same codes: kernels/elementwise.h).
  const bool fused_fp8 = FusedFp8(num_tokens);
  // And the GEMMs' scale passes fused into the kernels after them (fp8_fused_scales_): qkv's
  // into RopeStoreKv, o's and down's into the next norm, gate_up's into SiluMulFp8; the last
  // down keeps its pass (the final norm reads delta_ as it is). Only from
  // kFp8FusedScalesMinRows tokens: the norms and SiluMul run one block per token, which then
  // also streams the weight's column scales; with few tokens those few blocks are slower than
  // the separate wide passes (measured: docs/benchmarks.md). Both give the same bits.
  const bool fused_scales = FusedScales(num_tokens);
  // The residual stream h_: fp32, or 24 bits a value (kernels::Residual24Bytes) in the steps
  // with fused scales, the prompt steps whose norms' bytes count.
  const bool residual24 = Residual24(num_tokens);
  kernels::Fp8InputScales delta_scales;  // what scales delta_ still needs (none: the embeddings)
  // x_ = rms_norm(h += delta_) (layer 0: h = delta_), or its e4m3 codes when fused_fp8.
  // `next`: the linear layer the norm feeds (its static activation scale, if any).
  auto norm = [&](bool init, const T* weight, const LinearWeight<T>& next) -> cudaError_t {
    if (residual24) {
      return kernels::RmsNormResidual24Fp8(delta_, h, h_, init, nullptr, num_tokens, c.hidden_size,
                                           weight, eps, fp8_scratch_.x, h, fp8_scratch_.scale,
                                           next.fp8.input_scale, stream_, delta_scales);
    }
    if (fused_fp8) {
      return kernels::RmsNormF32ResidualFp8(delta_, h, h_, init, nullptr, num_tokens, c.hidden_size,
                                            weight, eps, fp8_scratch_.x, h, fp8_scratch_.scale,
                                            next.fp8.input_scale, stream_, delta_scales);
    }
    return kernels::RmsNormF32Residual(delta_, h, residual_, init, nullptr, num_tokens,
                                       c.hidden_size, weight, eps, x_, h, stream_);
  };
  // At one token the norm before a W4A16 qkv or gate_up runs in its GEMV's prologue
  // (cuda::Gemm::LinearW4Norm: the same bits, one launch less), writing the residual stream into
  // the other buffer. false: nothing launched; the caller runs `norm` and the layer.
  const bool norm_in_gemv =
      options_.gemv_norm && num_tokens == 1 && !fused_fp8 && !fused_scales && !residual24;
  // epi: the layer after it in the GEMV's epilogue too (cuda::W4Epilogue), its output into
  // epi_out, where the kernel takes it (*epi_done then true; else the GEMV with its norm alone
  // into out, where it takes that).
  auto norm_linear = [&](bool init, const T* weight, const LinearWeight<T>& w, int64_t n, int64_t k,
                         const T* bias, T* out, cuda::L2Prefetch prefetch,
                         const cuda::W4Epilogue<T>& epi = {}, T* epi_out = nullptr,
                         bool* epi_done = nullptr) -> Result<bool> {
    if (!norm_in_gemv || w.w4.tiled == nullptr) return false;
    kernels::W4NormArgsT<T> nm;
    nm.weight = weight;
    nm.delta = delta_;
    nm.residual = residual_;
    nm.residual_out = residual_ == h_ ? h_alt_ : h_;
    nm.eps = eps;
    nm.init = init;
    const bool with_epi = epi.silu_mul || epi.rope != nullptr || epi.rope_fp8 != nullptr;
    if (with_epi) {
      KILN_ASSIGN_OR_RETURN(const bool done, gemm_->LinearW4Norm(nm, w.w4, n, k, bias, epi_out,
                                                                 stream_, prefetch, epi));
      if (done) {
        residual_ = nm.residual_out;
        if (epi_done != nullptr) *epi_done = true;
        return true;
      }
    }
    KILN_ASSIGN_OR_RETURN(const bool done,
                          gemm_->LinearW4Norm(nm, w.w4, n, k, bias, out, stream_, prefetch));
    if (done) residual_ = nm.residual_out;
    return done;
  };
  // A linear layer whose input the norm (or SiluMul) before it wrote: x, or fp8_scratch_.
  auto linear = [&](const T* x, const LinearWeight<T>& w, int64_t n, int64_t k, const T* bias,
                    T* out, cuda::L2Prefetch prefetch) {
    if (fused_fp8) {
      return gemm_->LinearFp8Quantized(fp8_scratch_.x, fp8_scratch_.scale, num_tokens, w.fp8, n, k,
                                       bias, out, n, stream_);
    }
    return Linear(x, num_tokens, w, n, k, bias, out, prefetch);
  };
  // fused_scales: the e4m3 GEMM of fp8_scratch_.x alone, its unscaled sums into out.
  auto unscaled = [&](const LinearWeight<T>& w, int64_t n, int64_t k, T* out) {
    return gemm_->Fp8GemmUnscaled(fp8_scratch_.x, num_tokens, w.fp8, n, k,
                                  reinterpret_cast<__nv_bfloat16*>(out), n, stream_);
  };
  // Each linear layer's L2 hint names the one after it (kernels between them move few bytes).
  // After the last layer's down comes lm_head ([vocab, hidden]).
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights<T>& l = layers_[i];
    // Layer 0 starts the residual stream with the embeddings; later layers first add the
    // previous MLP output. A W4A16 qkv GEMV with its norm also runs RoPE and the KV write
    // (options_.gemv_rope; its q and k rows are in RoPE's interleaved pair order), unless RoPE
    // hands prompt rows' q to the prefill kernel as codes.
    kernels::RopeKvArgsT<T, T> w4_rope;
    kernels::RopeKvArgsT<T, __nv_fp8_e4m3> w4_rope_fp8;
    cuda::W4Epilogue<T> qkv_epi;
    if (options_.gemv_rope && norm_in_gemv && l.qkv.w4.tiled != nullptr &&
        !RopeWritesQCodes(num_seqs, num_decode)) {
      if (fp8_kv()) {
        w4_rope_fp8 = RopeArgs<__nv_fp8_e4m3>(i, num_tokens, {});
        qkv_epi.rope_fp8 = &w4_rope_fp8;
      } else {
        w4_rope = RopeArgs<T>(i, num_tokens, {});
        qkv_epi.rope = &w4_rope;
      }
    }
    bool rope_in_gemv = false;
    KILN_ASSIGN_OR_RETURN(
        const bool qkv_normed,
        norm_linear(/*init=*/i == 0, l.input_norm, l.qkv, qkv_rows, h, l.qkv_bias, qkv_,
                    PrefetchOf(l.o, h, q, num_tokens), qkv_epi, qkv_, &rope_in_gemv));
    if (!qkv_normed) {
      KILN_LAUNCH(norm(/*init=*/i == 0, l.input_norm, l.qkv));
      Mark("rms_norm");
    }
    const bool last = i + 1 == c.num_layers;
    kernels::Fp8InputScales qkv_scales;
    // With RoPE and the KV write in the W8A16 GEMV's epilogue (options_.gemv_rope). Not when
    // RoPE hands prompt rows' q to the prefill kernel as codes (EnqueueAttention).
    if (fused_scales) {
      KILN_RETURN_IF_ERROR(unscaled(l.qkv, qkv_rows, h, qkv_));
      qkv_scales = ScalesOf(fp8_scratch_.scale, l.qkv, l.qkv_bias);
    } else if (!qkv_normed) {
      if (options_.gemv_rope && !fused_fp8 && !RopeWritesQCodes(num_seqs, num_decode)) {
        KILN_ASSIGN_OR_RETURN(rope_in_gemv, fp8_kv() ? QkvRopeW8<__nv_fp8_e4m3>(i, num_tokens)
                                                     : QkvRopeW8<T>(i, num_tokens));
      }
      if (!rope_in_gemv) {
        KILN_RETURN_IF_ERROR(
            linear(x_, l.qkv, qkv_rows, h, l.qkv_bias, qkv_, PrefetchOf(l.o, h, q, num_tokens)));
      }
    }
    Mark("qkv");
    KILN_RETURN_IF_ERROR(fp8_kv()
                             ? EnqueueAttention<__nv_fp8_e4m3>(i, num_tokens, num_seqs, num_decode,
                                                               max_q_len, qkv_scales, rope_in_gemv)
                             : EnqueueAttention<T>(i, num_tokens, num_seqs, num_decode, max_q_len,
                                                   qkv_scales, rope_in_gemv));
    if (fused_scales) {
      // o's input quantized as LinearFp8 would, its scales into fp8_scales_b_.
      KILN_LAUNCH(l.o.fp8.input_scale != nullptr
                      ? kernels::QuantizeRowsFp8Static(attn_, q, num_tokens, q, l.o.fp8.input_scale,
                                                       fp8_scratch_.x, q, fp8_scales_b_, stream_)
                      : kernels::QuantizeRowsFp8(attn_, q, num_tokens, q, fp8_scratch_.x, q,
                                                 fp8_scales_b_, stream_));
      KILN_RETURN_IF_ERROR(unscaled(l.o, h, q, delta_));
      delta_scales = ScalesOf(fp8_scales_b_, l.o, l.o_bias);
    } else {
      KILN_RETURN_IF_ERROR(Linear(attn_, num_tokens, l.o, h, q, l.o_bias, delta_,
                                  PrefetchOf(l.gate_up, 2 * inter, h, num_tokens)));
    }
    Mark("o");
    // With SiluMul in the W8A16 GEMV's epilogue (options_.gemv_silu), or in the W4A16 GEMV's
    // with its norm (gate_up's rows in runs of 8), act_ holds down's input.
    bool silu_in_gemv = false;
    cuda::W4Epilogue<T> gate_up_epi;
    gate_up_epi.silu_mul = options_.gemv_silu && gate_up_layout_ == kernels::GateUpLayout::kRunsOf8;
    KILN_ASSIGN_OR_RETURN(
        const bool gate_up_normed,
        norm_linear(/*init=*/false, l.post_norm, l.gate_up, 2 * inter, h, l.gate_up_bias, gate_up_,
                    PrefetchOf(l.down, h, inter, num_tokens), gate_up_epi, act_, &silu_in_gemv));
    if (!gate_up_normed) {
      KILN_LAUNCH(norm(/*init=*/false, l.post_norm, l.gate_up));
      Mark("rms_norm");
    }
    kernels::Fp8InputScales gate_up_scales;
    // With SiluMul in the GEMM's epilogue (FusedGateUp), act_ holds the bf16 products.
    bool products = false;
    if (fused_scales) {
      gate_up_scales = ScalesOf(fp8_scratch_.scale, l.gate_up, l.gate_up_bias);
      kernels::Fp8GateUpSiluArgs g;
      g.x = fp8_scratch_.x;
      g.m = num_tokens;
      g.k = h;
      g.w = l.gate_up.fp8.w;
      g.dim = inter;
      g.scales = gate_up_scales;
      g.out = reinterpret_cast<__nv_bfloat16*>(act_);
      g.ldo = inter;
      products = FusedGateUp(num_tokens) && kernels::Fp8GateUpSiluSupported(g);
      if (products) {
        KILN_LAUNCH(kernels::Fp8GateUpSilu(g, stream_));
      } else {
        KILN_RETURN_IF_ERROR(unscaled(l.gate_up, 2 * inter, h, gate_up_));
      }
    } else if (!gate_up_normed) {
      if (options_.gemv_silu && !fused_fp8) {
        KILN_ASSIGN_OR_RETURN(silu_in_gemv, GateUpSiluW8(l, num_tokens));
      }
      if (!silu_in_gemv) {
        KILN_RETURN_IF_ERROR(linear(x_, l.gate_up, 2 * inter, h, l.gate_up_bias, gate_up_,
                                    PrefetchOf(l.down, h, inter, num_tokens)));
      }
    }
    Mark("gate_up");
    // down's input scales: where SiluMulFp8 writes them.
    float* down_scales = fused_scales ? fp8_scales_b_ : fp8_scratch_.scale;
    if (products) {
      // down's input: the products quantized per token, the codes SiluMulFp8 would write.
      const auto* act = reinterpret_cast<const __nv_bfloat16*>(act_);
      KILN_LAUNCH(l.down.fp8.input_scale != nullptr
                      ? kernels::QuantizeRowsFp8Static(act, inter, num_tokens, inter,
                                                       l.down.fp8.input_scale, fp8_scratch_.x,
                                                       inter, down_scales, stream_)
                      : kernels::QuantizeRowsFp8(act, inter, num_tokens, inter, fp8_scratch_.x,
                                                 inter, down_scales, stream_));
    } else if (!silu_in_gemv) {
      KILN_LAUNCH(fused_fp8
                      ? kernels::SiluMulFp8(gate_up_, 2 * inter, num_tokens, c.intermediate_size,
                                            fp8_scratch_.x, inter, down_scales,
                                            l.down.fp8.input_scale, stream_, gate_up_scales)
                      : kernels::SiluMul(gate_up_, 2 * inter, num_tokens, c.intermediate_size, act_,
                                         inter, stream_, gate_up_layout_));
    }
    if (products || !silu_in_gemv) Mark("silu_mul");  // a launch of its own
    if (fused_scales && !last) {
      KILN_RETURN_IF_ERROR(unscaled(l.down, h, inter, delta_));
      delta_scales = ScalesOf(down_scales, l.down, l.down_bias);
    } else if (fused_scales) {
      KILN_RETURN_IF_ERROR(gemm_->LinearFp8Quantized(fp8_scratch_.x, down_scales, num_tokens,
                                                     l.down.fp8, h, inter, l.down_bias, delta_, h,
                                                     stream_));
    } else {
      KILN_RETURN_IF_ERROR(linear(act_, l.down, h, inter, l.down_bias, delta_,
                                  last ? PrefetchOf(lm_head_, c.vocab_size, h, num_tokens)
                                       : PrefetchOf(layers_[i + 1].qkv, qkv_rows, h, num_tokens)));
    }
    Mark("down");
  }
  KILN_RETURN_IF_ERROR(EnqueueLogits(std::min(num_rows, logit_chunk_), 0, num_tokens));
  Mark("final_norm_lm_head");
  return Status::Ok();
}

template <typename T>
template <typename C>
kernels::RopeKvArgsT<T, C> CudaRunner<T>::RopeArgs(
    int i, int32_t num_tokens, const kernels::Fp8InputScales& qkv_scales) const {
  const ModelConfig& c = config_;
  const int64_t qkv_rows = c.q_size() + 2 * c.kv_size();
  kernels::RopeKvArgsT<T, C> rope;
  rope.qkv = qkv_;
  rope.ld = qkv_rows;
  rope.positions = dev_.positions;
  rope.slot_mapping = dev_.slots;
  rope.num_tokens = num_tokens;
  rope.num_heads = c.num_heads;
  rope.num_kv_heads = c.num_kv_heads;
  rope.head_dim = c.head_dim;
  rope.inv_freq = inv_freq_;
  rope.interleaved = interleaved_rope_;
  rope.k_cache = static_cast<C*>(k_cache_[i]);
  rope.v_cache = static_cast<C*>(v_cache_[i]);
  rope.block_size = block_size_;
  rope.qkv_scales = qkv_scales;
  if constexpr (!std::is_same_v<C, T>) {
    rope.k_scale = k_scale_[i];
    rope.v_scale = v_scale_[i];
  }
  return rope;
}

template <typename T>
template <typename C>
Result<bool> CudaRunner<T>::QkvRopeW8(int i, int32_t num_tokens) {
  const ModelConfig& c = config_;
  const LayerWeights<T>& l = layers_[i];
  const int64_t h = c.hidden_size, q = c.q_size(), qkv_rows = q + 2 * c.kv_size();
  return OnW8Weight(l.qkv, [&](auto w8) {
    return gemm_->QkvRopeW8(x_, h, num_tokens, w8, qkv_rows, h, l.qkv_bias,
                            RopeArgs<C>(i, num_tokens, {}), stream_,
                            PrefetchOf(l.o, h, q, num_tokens));
  });
}

template <typename T>
template <typename C>
Status CudaRunner<T>::EnqueueAttention(int i, int32_t num_tokens, int32_t num_seqs,
                                       int32_t num_decode, int32_t max_q_len,
                                       const kernels::Fp8InputScales& qkv_scales, bool rope_done) {
  const ModelConfig& c = config_;
  const int64_t q = c.q_size(), qkv_rows = q + 2 * c.kv_size();
  const kernels::AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim,
                                    1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  kernels::RopeKvArgsT<T, C> rope = RopeArgs<C>(i, num_tokens, qkv_scales);
  // Over an fp8 cache RoPE may hand the prompt rows' q (after the decode rows) to the e4m3
  // prefill kernel as its codes (kernels::PrefillQCodes) instead of writing it back.
  kernels::PrefillQCodes q_codes;
  if constexpr (!std::is_same_v<C, T>) {
    if (RopeWritesQCodes(num_seqs, num_decode)) {
      rope.q_codes = q_codes_;
      rope.q_code_scales = q_code_scales_;
      rope.q_tokens = num_decode;
      q_codes = {q_codes_, q_code_scales_};
    }
  }
  if (!rope_done) {
    KILN_LAUNCH(kernels::RopeStoreKv(rope, stream_));
    Mark("rope_kv_write");
  }

  kernels::PagedKvCacheT<T, C> cache;
  cache.k = static_cast<const C*>(k_cache_[i]);
  cache.v = static_cast<const C*>(v_cache_[i]);
  cache.num_blocks = num_blocks_;
  cache.block_size = block_size_;
  cache.max_blocks_per_seq = max_blocks_per_seq_;
  if constexpr (!std::is_same_v<C, T>) {
    cache.k_scale = k_scale_[i];
    cache.v_scale = v_scale_[i];
  }
  if (num_decode > 0) {
    cache.block_tables = dev_.block_tables;
    KILN_LAUNCH(kernels::PagedDecodeAttention(qkv_, qkv_rows, cache, dev_.seq_lens, num_decode,
                                              options_.max_model_len, dims, attn_workspace_,
                                              attn_workspace_bytes_, attn_, q, stream_));
  }
  Mark("decode_attention");
  if (num_seqs > num_decode) {
    cache.block_tables = dev_.block_tables + int64_t{num_decode} * max_blocks_per_seq_;
    if constexpr (std::is_same_v<C, T>) {
      KILN_LAUNCH(kernels::PagedPrefillAttention(
          qkv_, qkv_rows, cache, dev_.cu_seqlens + num_decode, dev_.seq_lens + num_decode,
          num_seqs - num_decode, max_q_len, dims, attn_, q, stream_));
    } else {
      KILN_LAUNCH(kernels::PagedPrefillAttention(
          qkv_, qkv_rows, cache, dev_.cu_seqlens + num_decode, dev_.seq_lens + num_decode,
          num_seqs - num_decode, max_q_len, dims, attn_, q, stream_, q_codes));
    }
  }
  Mark("prefill_attention");
  return Status::Ok();
}

template <typename T>
Result<bool> CudaRunner<T>::GateUpSiluW8(const LayerWeights<T>& l, int32_t num_tokens) {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  return OnW8Weight(l.gate_up, [&](auto w8) {
    return gemm_->GateUpSiluW8(x_, h, num_tokens, w8, inter, h, l.gate_up_bias, act_, inter,
                               stream_, PrefetchOf(l.down, h, inter, num_tokens));
  });
}

// Every activation a linear layer reads or writes is contiguous: its row stride is its width.
template <typename T>
Status CudaRunner<T>::Linear(const T* x, int64_t m, const LinearWeight<T>& w, int64_t n, int64_t k,
                             const T* bias, T* out, cuda::L2Prefetch prefetch) {
  if (w.w != nullptr) {
    return gemm_->Linear(x, k, m, w.w, n, k, bias, out, n, false, stream_, prefetch);
  }
  if (w.int8.w != nullptr) {
    return gemm_->LinearInt8(x, k, m, w.int8, n, k, bias, out, n, false, int8_scratch_, stream_,
                             prefetch);
  }
  if (w.w4.tiled != nullptr) {
    return gemm_->LinearW4(x, k, m, w.w4, n, k, bias, out, n, false, w4_scratch_, stream_,
                           prefetch);
  }
  return gemm_->LinearFp8(x, k, m, w.fp8, n, k, bias, out, n, false, fp8_scratch_, stream_,
                          prefetch);
}

template <typename T>
cuda::L2Prefetch CudaRunner<T>::PrefetchOf(const LinearWeight<T>& next, int64_t n, int64_t k,
                                           int32_t tokens) const {
  cuda::L2Prefetch p;
  if (next.w != nullptr) {
    p = {next.w, n * k * static_cast<int64_t>(sizeof(T))};
  } else if (next.int8.w != nullptr) {
    p = {next.int8.w, n * k};
  } else if (next.w4.tiled != nullptr) {
    p = {next.w4.tiled, n * k / 2};
  } else if (next.fp8.w != nullptr) {
    p = {next.fp8.w, n * k};
  }
  int64_t limit = options_.l2_prefetch_bytes;
  if (limit < 0) limit = next.w4.tiled != nullptr && tokens == 1 ? 0 : kDefaultL2PrefetchBytes;
  p.bytes = std::min(p.bytes, limit);
  return p;
}

// Logits of rows [row_offset, row_offset + num_rows) of the step's logit_rows into logits_.
template <typename T>
Status CudaRunner<T>::EnqueueLogits(int32_t num_rows, int32_t row_offset, int32_t forward_tokens) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  KILN_LAUNCH(Residual24(forward_tokens)
                  ? kernels::RmsNormResidual24(delta_, h, h_, false, dev_.logit_rows + row_offset,
                                               num_rows, c.hidden_size, final_norm_, c.rms_norm_eps,
                                               rows_, h, stream_)
                  : kernels::RmsNormF32Residual(
                        delta_, h, residual_, false, dev_.logit_rows + row_offset, num_rows,
                        c.hidden_size, final_norm_, c.rms_norm_eps, rows_, h, stream_));
  // The next step starts with layer 0's qkv.
  const cuda::L2Prefetch next =
      PrefetchOf(layers_[0].qkv, c.q_size() + 2 * c.kv_size(), h, forward_tokens);
  if (lm_head_.w4.tiled != nullptr) {
    return gemm_->LinearW4(rows_, h, num_rows, lm_head_.w4, c.vocab_size, h, nullptr, logits_,
                           c.vocab_size, true, w4_scratch_, stream_, next);
  }
  return gemm_->Linear(rows_, h, num_rows, lm_head_.w, c.vocab_size, h, nullptr, logits_,
                       c.vocab_size, true, stream_, next);
}

template <typename T>
int32_t CudaRunner<T>::GraphBatch(int32_t num_seqs) const {
  auto it = std::lower_bound(graph_batches_.begin(), graph_batches_.end(), num_seqs);
  return it == graph_batches_.end() ? 0 : *it;
}

template <typename T>
Status CudaRunner<T>::EnqueueSampling(int32_t num_rows) {
  kernels::SamplingInputs in;
  in.logits = logits_;
  in.logits_stride = config_.vocab_size;
  in.num_rows = num_rows;
  in.vocab_size = config_.vocab_size;
  in.rows = dev_.sampling;
  in.bias_ids = dev_.bias_ids;
  in.bias_values = dev_.bias_values;
  in.banned_ids = dev_.banned_ids;
  in.token_ids = dev_.penalty_tokens;
  KILN_LAUNCH(kernels::SampleRows(in, sampling_workspace_.data(), sampling_workspace_.size(),
                                  dev_.sampled, stream_));
  Mark("sampling");
  return Status::Ok();
}

template <typename T>
Status CudaRunner<T>::CaptureGraphs() {
  graph_batches_.clear();
  const int32_t limit =
      std::min({options_.max_graph_batch, options_.max_num_seqs, options_.max_num_tokens});
  for (int32_t b : {1, 2, 4}) {
    if (b <= limit) graph_batches_.push_back(b);
  }
  for (int32_t b = 8; b <= limit; b += 8) graph_batches_.push_back(b);
  // Padding rows: no KV write (slot -1), no attention (seq_lens 0), logits row = itself,
  // greedy sampling.
  std::vector<int64_t> slots(limit, -1);
  std::vector<int32_t> rows(limit);
  for (int32_t i = 0; i < limit; ++i) rows[i] = i;
  std::vector<kernels::SamplingRow> greedy(limit);
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dev_.slots, slots.data(), limit * sizeof(int64_t), cudaMemcpyHostToDevice));
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dev_.logit_rows, rows.data(), limit * sizeof(int32_t), cudaMemcpyHostToDevice));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(
      dev_.sampling, greedy.data(), limit * sizeof(kernels::SamplingRow), cudaMemcpyHostToDevice));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemset(dev_.seq_lens, 0, limit * sizeof(int32_t)));
  if (options_.tune_gemms) {
    const auto start = std::chrono::steady_clock::now();
    for (int32_t b : graph_batches_) KILN_RETURN_IF_ERROR(TuneDecodeGemms(b));
    KILN_RETURN_IF_ERROR(TunePromptGemms());
    gemm_tune_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (int32_t b : graph_batches_) {
    // A plain run first caches every GEMM plan (the heuristic query must not happen mid-capture).
    KILN_RETURN_IF_ERROR(EnqueueForward(b, b, b, 1, b));
    KILN_RETURN_IF_ERROR(EnqueueSampling(b));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    cudaGraph_t graph = nullptr;
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status forward = EnqueueForward(b, b, b, 1, b);
    if (forward.ok()) forward = EnqueueSampling(b);
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    KILN_RETURN_IF_ERROR(forward);
    KILN_CUDA_RETURN_IF_ERROR(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    KILN_CUDA_RETURN_IF_ERROR(inst);
    graphs_[b] = exec;
  }
  return Status::Ok();
}

template <typename T>
void CudaRunner<T>::Mark(const char* op) {
  if (!options_.profile_ops) return;
  if (op == nullptr) mark_ops_.clear();
  if (mark_ops_.size() == mark_events_.size()) {
    cudaEvent_t e = nullptr;
    CHECK(cudaEventCreate(&e) == cudaSuccess);
    mark_events_.push_back(e);
  }
  CHECK(cudaEventRecord(mark_events_[mark_ops_.size()], stream_) == cudaSuccess);
  mark_ops_.push_back(op);
}

template <typename T>
void CudaRunner<T>::CollectMarks() {
  for (size_t i = 1; i < mark_ops_.size(); ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, mark_events_[i - 1], mark_events_[i]) == cudaSuccess) {
      op_seconds_[mark_ops_[i]] += ms / 1e3;
    }
  }
  mark_ops_.clear();
}

template <typename T>
std::array<std::vector<const __nv_fp8_e4m3*>, 4> CudaRunner<T>::Fp8LayerWeights() const {
  std::array<std::vector<const __nv_fp8_e4m3*>, 4> lists;  // qkv, o, gate_up, down
  for (const LayerWeights<T>& l : layers_) {
    const __nv_fp8_e4m3* w[4] = {l.qkv.fp8.w, l.o.fp8.w, l.gate_up.fp8.w, l.down.fp8.w};
    for (int i = 0; i < 4; ++i) {
      if (w[i] != nullptr) lists[i].push_back(w[i]);
    }
  }
  return lists;
}

// The FP8 linear layers' prompt-step GEMMs (Gemm::TuneFp8Prompt: timed at the power limit on
// Gaussian activations), at up to Gemm::kFp8PromptTuneRows rows, when this runner's steps reach
// Gemm::kFp8PromptRows tokens. An engine directory's GEMM table supplies them (ImportGemmTable).
// 8 candidates x 0.1 s for each of the four layers: ~3.6 s of start-up.
template <typename T>
Status CudaRunner<T>::TunePromptGemms() {
  if (options_.quantization != QuantMethod::kFp8 || fp8_scratch_.x == nullptr) {
    return Status::Ok();
  }
  const ModelConfig& c = config_;
  const int64_t m = std::min<int64_t>(options_.max_num_tokens, cuda::Gemm::kFp8PromptTuneRows);
  if (m < cuda::Gemm::kFp8PromptRows) return Status::Ok();
  const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.q_size();
  const int64_t qkv_rows = q + 2 * c.kv_size();
  const auto [qkv, o, gate_up, down] = Fp8LayerWeights();
  const std::tuple<int64_t, int64_t, const std::vector<const __nv_fp8_e4m3*>*> layers[] = {
      {qkv_rows, h, &qkv}, {h, q, &o}, {2 * inter, h, &gate_up}, {h, inter, &down}};
  for (const auto& [n, k, weights] : layers) {
    // The scratch: fp8_scratch_.x holds max_num_tokens rows of the widest k, gate_up_ as many
    // rows of 2 * inter values of T (at least 2 bytes each).
    if (weights->empty() || n > 2 * inter) continue;
    cuda::Gemm::Fp8PromptTuning t;
    t.m = m;
    t.n = n;
    t.k = k;
    t.dtype = DTypeOf<T>();
    t.x = fp8_scratch_.x;
    t.out = gate_up_;
    KILN_RETURN_IF_ERROR(
        gemm_->TuneFp8Prompt(t, stream_, std::span<const __nv_fp8_e4m3* const>(*weights)));
  }
  return Status::Ok();
}

template <typename T>
Status CudaRunner<T>::TuneDecodeGemms(int32_t batch) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size, q = c.q_size();
  const int64_t qkv_rows = q + 2 * c.kv_size();
  constexpr int kCandidates = 6;
  using Shape = cuda::GemmShape;
  using Weights = std::span<const T* const>;
  constexpr DType kType = DTypeOf<T>();
  // INT8 and W4A16 linear layers run the heuristic's pick resp. kernels::W4Gemm (beyond 64
  // rows the heuristic's pick on dequantized slices): only lm_head (bf16 / fp16) is tuned.
  if (options_.quantization != QuantMethod::kNone) {
    if (options_.quantization == QuantMethod::kFp8 && batch > gemm_->fp8_gemv_max_rows()) {
      // The FP8 shapes LinearFp8 runs: x quantized into a contiguous [batch, k] scratch, no bias
      // in the GEMM. Layers a pre-quantized checkpoint left in 16 bits keep the heuristic's pick.
      const auto [qkv, o, gate_up, down] = Fp8LayerWeights();
      auto tune_fp8 = [&](int64_t n, int64_t k, const std::vector<const __nv_fp8_e4m3*>& weights) {
        if (weights.empty()) return Status::Ok();
        Shape s{batch, n, k, k, n, false, false, kType};
        s.fp8 = true;
        return gemm_->Tune(s, kCandidates, stream_, std::span<const __nv_fp8_e4m3* const>(weights));
      };
      KILN_RETURN_IF_ERROR(tune_fp8(qkv_rows, h, qkv));
      KILN_RETURN_IF_ERROR(tune_fp8(h, q, o));
      KILN_RETURN_IF_ERROR(tune_fp8(2 * inter, h, gate_up));
      KILN_RETURN_IF_ERROR(tune_fp8(h, inter, down));
    }
    if (batch <= gemm_->gemv_max_rows() || lm_head_.w == nullptr) return Status::Ok();
    const T* lm_head[] = {lm_head_.w};
    return gemm_->Tune(Shape{batch, c.vocab_size, h, h, c.vocab_size, true, false, kType},
                       kCandidates, stream_, Weights(lm_head));
  }
  if (batch <= gemm_->gemv_max_rows()) return Status::Ok();
  std::vector<const T*> qkv, o, gate_up, down;
  for (const LayerWeights<T>& l : layers_) {
    qkv.push_back(l.qkv.w);
    o.push_back(l.o.w);
    gate_up.push_back(l.gate_up.w);
    down.push_back(l.down.w);
  }
  // The shapes EnqueueForward and EnqueueLogits pass to Gemm::Linear.
  KILN_RETURN_IF_ERROR(gemm_->Tune(Shape{batch, qkv_rows, h, h, qkv_rows, false, c.qkv_bias, kType},
                                   kCandidates, stream_, Weights(qkv)));
  KILN_RETURN_IF_ERROR(gemm_->Tune(Shape{batch, h, q, q, h, false, c.o_bias, kType}, kCandidates,
                                   stream_, Weights(o)));
  KILN_RETURN_IF_ERROR(
      gemm_->Tune(Shape{batch, 2 * inter, h, h, 2 * inter, false, c.mlp_bias, kType}, kCandidates,
                  stream_, Weights(gate_up)));
  KILN_RETURN_IF_ERROR(gemm_->Tune(Shape{batch, h, inter, inter, h, false, c.mlp_bias, kType},
                                   kCandidates, stream_, Weights(down)));
  const T* lm_head[] = {lm_head_.w};
  return gemm_->Tune(Shape{batch, c.vocab_size, h, h, c.vocab_size, true, false, kType},
                     kCandidates, stream_, Weights(lm_head));
}

template <typename T>
bool CudaRunner<T>::StageSampling(const StepInputs& in, const std::vector<LogitRow>& rows,
                                  int32_t num_sampled, int32_t padded_rows, StepArrays& host,
                                  SamplingCounts* counts) {
  *counts = {};
  for (int32_t r = 0; r < padded_rows; ++r) {
    kernels::SamplingRow& row = host.sampling[r];
    row = kernels::SamplingRow();
    if (r >= num_sampled) continue;  // padding: greedy, no lists
    const SamplingSpec& spec = in.seqs[rows[r].seq].sampling;
    if (spec.num_top_logprobs > kernels::kMaxTopLogprobs) return false;
    row.temperature = spec.temperature;
    row.top_p = spec.top_p;
    row.min_p = spec.min_p;
    row.presence_penalty = spec.presence_penalty;
    row.frequency_penalty = spec.frequency_penalty;
    row.repetition_penalty = spec.repetition_penalty;
    row.top_k = spec.top_k;
    row.num_top_logprobs = spec.num_top_logprobs;
    row.seed = spec.seed;
    row.rng_position = static_cast<int32_t>(spec.output_token_ids.size());
    if (counts->bias + static_cast<int64_t>(spec.logit_bias.size()) > capacity_.bias ||
        counts->banned + static_cast<int64_t>(spec.banned_token_ids.size()) > capacity_.banned) {
      return false;
    }
    row.bias_begin = counts->bias;
    for (const auto& [id, bias] : spec.logit_bias) {
      host.bias_ids[counts->bias] = id;
      host.bias_values[counts->bias++] = bias;
    }
    row.bias_end = counts->bias;
    row.banned_begin = counts->banned;
    for (int32_t id : spec.banned_token_ids) host.banned_ids[counts->banned++] = id;
    row.banned_end = counts->banned;
    // The token lists only matter to active penalties.
    const bool repetition = spec.repetition_penalty != 1.0f;
    const bool output_penalties =
        repetition || spec.frequency_penalty != 0.0f || spec.presence_penalty != 0.0f;
    const int64_t need = (repetition ? spec.prompt_token_ids.size() : 0) +
                         (output_penalties ? spec.output_token_ids.size() : 0);
    if (counts->penalty_tokens + need > capacity_.penalty_tokens) return false;
    row.prompt_begin = row.prompt_end = counts->penalty_tokens;
    if (repetition) {
      for (int32_t id : spec.prompt_token_ids) host.penalty_tokens[counts->penalty_tokens++] = id;
      row.prompt_end = counts->penalty_tokens;
    }
    row.output_begin = row.output_end = counts->penalty_tokens;
    if (output_penalties) {
      for (int32_t id : spec.output_token_ids) host.penalty_tokens[counts->penalty_tokens++] = id;
      row.output_end = counts->penalty_tokens;
    }
  }
  return true;
}

template <typename T>
void CudaRunner<T>::SampleOnHost(const StepInputs& in, const std::vector<LogitRow>& rows,
                                 int32_t forward_tokens, StepResult& result) {
  const int64_t vocab = config_.vocab_size;
  for (int32_t begin = 0; begin < static_cast<int32_t>(rows.size()); begin += logit_chunk_) {
    const int32_t n = std::min<int32_t>(logit_chunk_, static_cast<int32_t>(rows.size()) - begin);
    if (begin > 0) {
      const Status st = EnqueueLogits(n, begin, forward_tokens);
      CHECK(st.ok()) << st.ToString();
    }
    CHECK(cudaMemcpyAsync(host_logits_, logits_, n * vocab * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_) == cudaSuccess);
    CHECK(cudaStreamSynchronize(stream_) == cudaSuccess) << "CUDA step failed";
    for (int32_t r = 0; r < n; ++r) {
      const LogitRow& row = rows[begin + r];
      std::span<const float> logits(host_logits_ + r * vocab, vocab);
      if (row.target >= 0) {
        result.seqs[row.seq].prompt_logprobs.push_back(cpu::Score(logits, row.target, row.num_top));
      } else {
        result.seqs[row.seq].sampled = cpu::Sample(logits, in.seqs[row.seq].sampling);
      }
    }
  }
}

template <typename T>
StepResult CudaRunner<T>::Execute(const StepInputs& in) {
  CHECK(pending_.empty()) << "Execute with launched steps not yet waited for";
  Launch(in);
  return Wait();
}

template <typename T>
void CudaRunner<T>::Launch(const StepInputs& in) {
  const int32_t num_tokens = in.num_tokens(), num_seqs = in.num_seqs();
  CHECK_LE(num_tokens, options_.max_num_tokens) << "step larger than the CUDA workspace";
  CHECK_LE(num_seqs, options_.max_num_seqs);
  CHECK_LE(in.max_blocks_per_seq, max_blocks_per_seq_);
  CHECK_LT(pending_.size(), size_t{2}) << "more than two steps launched without a Wait";
  // The slot's previous user was waited for before this launch (at most two in flight).
  Pending p;
  p.slot = next_slot_;
  next_slot_ ^= 1;
  StepSlot& slot = slots_[p.slot];
  StepArrays& host = slot.host;

  // Decode sequences (one new token) lead the batch (the scheduler puts running decodes first).
  // Logits rows: every sampled row first (so they are rows 0.. of the first logits chunk), then
  // the prompt-logprob rows.
  int32_t num_decode = 0, max_q_len = 0;
  bool plain_decode = true;
  std::vector<LogitRow>& rows = p.rows;
  p.num_top.assign(num_seqs, 0);
  p.row_of_seq.assign(num_seqs, -1);
  for (int32_t s = 0; s < num_seqs; ++s) {
    const StepSequence& seq = in.seqs[s];
    const int32_t q_len = in.cu_seqlens[s + 1] - in.cu_seqlens[s];
    max_q_len = std::max(max_q_len, q_len);
    if (q_len == 1 && num_decode == s) ++num_decode;
    if (seq.do_sample) {
      p.row_of_seq[s] = static_cast<int32_t>(rows.size());
      p.num_top[s] = seq.sampling.num_top_logprobs;
      rows.push_back({s, in.cu_seqlens[s + 1] - 1, -1, 0});
    }
    if (!seq.prompt_logprob_targets.empty() || !seq.do_sample) plain_decode = false;
  }
  p.num_sampled = static_cast<int32_t>(rows.size());
  const int32_t num_sampled = p.num_sampled;
  int32_t max_prompt_top = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const StepSequence& seq = in.seqs[s];
    for (size_t i = 0; i < seq.prompt_logprob_targets.size(); ++i) {
      rows.push_back({s, in.cu_seqlens[s] + static_cast<int32_t>(i), seq.prompt_logprob_targets[i],
                      seq.num_prompt_top_logprobs});
      max_prompt_top = std::max(max_prompt_top, seq.num_prompt_top_logprobs);
    }
  }
  const int32_t graph_candidate =
      plain_decode && num_decode == num_seqs && !graphs_.empty() ? GraphBatch(num_seqs) : 0;
  SamplingCounts counts;
  p.device_sampling =
      max_prompt_top <= kernels::kMaxTopLogprobs &&
      StageSampling(in, rows, num_sampled, std::max(graph_candidate, num_sampled), host, &counts);
  const bool device_sampling = p.device_sampling;
  const int32_t graph_batch = device_sampling ? graph_candidate : 0;
  const int32_t padded = graph_batch > 0 ? graph_batch : num_tokens;

  // Stage the inputs in the slot's pinned block, then one kernel copies every array from there
  // (EnqueueStepUploads). A token the previous step is still sampling becomes the index of its
  // row there (resolved on the device), or its value when that step sampled on the host.
  bool resolve_on_device = false;
  for (int32_t i = 0; i < num_tokens; ++i) {
    int32_t token = in.token_ids[i];
    if (IsPreviousStepToken(token)) {
      CHECK(!pending_.empty()) << "PreviousStepToken without a launched step";
      const Pending& previous = pending_.back();
      const int32_t seq = PreviousStepSeq(token);
      CHECK_LT(seq, static_cast<int32_t>(previous.row_of_seq.size()));
      CHECK_GE(previous.row_of_seq[seq], 0) << "the previous step did not sample sequence " << seq;
      if (previous.device_sampling) {
        token = PreviousStepToken(previous.row_of_seq[seq]);
        resolve_on_device = true;
      } else {
        token = previous.result.seqs[seq].sampled.token_id;
      }
    }
    host.token_ids[i] = token;
  }
  std::copy(in.positions.begin(), in.positions.end(), host.positions);
  std::copy(in.slot_mapping.begin(), in.slot_mapping.end(), host.slots);
  std::copy(in.cu_seqlens.begin(), in.cu_seqlens.end(), host.cu_seqlens);
  std::copy(in.seq_lens.begin(), in.seq_lens.end(), host.seq_lens);
  std::copy(in.block_tables.begin(), in.block_tables.end(), host.block_tables);
  for (int32_t i = num_tokens; i < padded; ++i) {
    host.token_ids[i] = 0;
    host.positions[i] = 0;
    host.slots[i] = -1;
    host.seq_lens[i] = 0;
  }
  const int32_t num_rows = std::max(graph_batch, static_cast<int32_t>(rows.size()));
  for (int32_t r = 0; r < num_rows; ++r) {
    const bool real = r < static_cast<int32_t>(rows.size());
    host.logit_rows[r] = real ? rows[r].token : r;
    host.targets[r] = real && rows[r].target >= 0 ? rows[r].target : 0;
  }
  CHECK(cudaEventRecord(slot.start, stream_) == cudaSuccess);
  if (!in.swap_out.empty() || !in.swap_in.empty()) {
    const Status swapped = EnqueueSwaps(in, p.slot);
    CHECK(swapped.ok()) << "swap copies: " << swapped.ToString();
  }
  std::array<kernels::UploadJob, kernels::kMaxUploadJobs> jobs;
  size_t num_jobs = 0;
  auto add = [&](const kernels::UploadJob& job) {
    CHECK_LT(num_jobs, jobs.size());
    jobs[num_jobs++] = job;
  };
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    add({src, dst, static_cast<int64_t>(bytes)});
  };
  copy(dev_.token_ids, host.token_ids, padded * sizeof(int32_t));  // job 0: resolved below
  copy(dev_.positions, host.positions, padded * sizeof(int32_t));
  copy(dev_.slots, host.slots, padded * sizeof(int64_t));
  copy(dev_.cu_seqlens, host.cu_seqlens, (num_seqs + 1) * sizeof(int32_t));
  copy(dev_.seq_lens, host.seq_lens, (graph_batch > 0 ? graph_batch : num_seqs) * sizeof(int32_t));
  copy(dev_.logit_rows, host.logit_rows, num_rows * sizeof(int32_t));
  if (device_sampling) {
    const int32_t sampled_rows = std::max(graph_batch, num_sampled);
    copy(dev_.sampling, host.sampling, sampled_rows * sizeof(kernels::SamplingRow));
    copy(dev_.bias_ids, host.bias_ids, counts.bias * sizeof(int32_t));
    copy(dev_.bias_values, host.bias_values, counts.bias * sizeof(float));
    copy(dev_.banned_ids, host.banned_ids, counts.banned * sizeof(int32_t));
    copy(dev_.penalty_tokens, host.penalty_tokens, counts.penalty_tokens * sizeof(int32_t));
    copy(dev_.targets + num_sampled, host.targets + num_sampled,
         (rows.size() - num_sampled) * sizeof(int32_t));
  }
  if (in.max_blocks_per_seq > 0 && num_seqs > 0) {
    const int64_t row_bytes = in.max_blocks_per_seq * sizeof(int32_t);
    add({host.block_tables, dev_.block_tables, row_bytes, num_seqs, row_bytes,
         static_cast<int64_t>(max_blocks_per_seq_ * sizeof(int32_t))});
  }
  // dev_.sampled still holds the previous step's rows: only this step's sampling rewrites it.
  EnqueueStepUploads(p.slot, std::span(jobs.data(), num_jobs),
                     {resolve_on_device ? 0 : -1, dev_.sampled}, num_tokens);

  p.result.seqs.resize(num_seqs);
  if (graph_batch > 0) {
    CHECK(cudaGraphLaunch(graphs_.at(graph_batch), stream_) == cudaSuccess);
  } else {
    const Status st = EnqueueForward(num_tokens, num_seqs, num_decode, max_q_len,
                                     static_cast<int32_t>(rows.size()));
    CHECK(st.ok()) << st.ToString();
  }
  if (!device_sampling) {
    SampleOnHost(in, rows, padded, p.result);  // synchronizes
  } else {
    // Sampled rows (all in the first logits chunk), then prompt-logprob rows chunk by chunk.
    if (graph_batch == 0 && num_sampled > 0) {
      const Status st = EnqueueSampling(num_sampled);
      CHECK(st.ok()) << st.ToString();
    }
    const int64_t vocab = config_.vocab_size;
    for (int32_t begin = num_sampled; begin < static_cast<int32_t>(rows.size());) {
      // Within the first chunk the prompt rows follow the sampled ones; later chunks start
      // fresh.
      const int32_t chunk_start = begin < logit_chunk_ ? 0 : begin;
      if (chunk_start > 0) {
        const int32_t n =
            std::min<int32_t>(logit_chunk_, static_cast<int32_t>(rows.size()) - begin);
        const Status st = EnqueueLogits(n, begin, padded);
        CHECK(st.ok()) << st.ToString();
      }
      const int32_t chunk_end =
          std::min<int32_t>(chunk_start + logit_chunk_, static_cast<int32_t>(rows.size()));
      const int32_t n = chunk_end - begin;
      CHECK(kernels::ScoreRows(logits_ + (begin - chunk_start) * vocab, vocab, n,
                               config_.vocab_size, dev_.targets + begin, max_prompt_top,
                               dev_.sampled + begin, stream_) == cudaSuccess);
      begin = chunk_end;
    }
    if (!rows.empty()) {
      CHECK(cudaMemcpyAsync(host.sampled, dev_.sampled, rows.size() * sizeof(kernels::SampledToken),
                            cudaMemcpyDeviceToHost, stream_) == cudaSuccess);
    }
  }
  CHECK(cudaEventRecord(slot.end, stream_) == cudaSuccess);
  if (options_.profile_ops) {
    // Marks are added up per step: no two steps' marks may be pending at once.
    CHECK(cudaStreamSynchronize(stream_) == cudaSuccess) << "CUDA step failed";
    CollectMarks();
  }
  pending_.push_back(std::move(p));
}

template <typename T>
StepResult CudaRunner<T>::Wait() {
  CHECK(!pending_.empty()) << "Wait without a launched step";
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  const StepSlot& slot = slots_[p.slot];
  CHECK(cudaEventSynchronize(slot.end) == cudaSuccess) << "CUDA step failed";
  if (!p.device_sampling) return std::move(p.result);
  float gpu_ms = 0;
  if (cudaEventElapsedTime(&gpu_ms, slot.start, slot.end) == cudaSuccess) {
    ++timed_steps_;
    gpu_step_seconds_ += gpu_ms / 1e3;
  }
  for (size_t r = 0; r < p.rows.size(); ++r) {
    const LogitRow& row = p.rows[r];
    if (row.target >= 0) {
      p.result.seqs[row.seq].prompt_logprobs.push_back(ToScored(slot.host.sampled[r], row.num_top));
    } else {
      p.result.seqs[row.seq].sampled = ToScored(slot.host.sampled[r], p.num_top[row.seq]);
    }
  }
  return std::move(p.result);
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> CreateCudaRunner(const Checkpoint& ckpt,
                                                      const CudaRunnerOptions& options) {
  if (!HasCudaDevice()) return Unavailable("CUDA: no device is visible");
  const ModelConfig& c = ckpt.config();
  KILN_RETURN_IF_ERROR(c.Validate());
  if (c.head_dim != 64 && c.head_dim != 128) {
    return Unsupported("CUDA: head_dim " + std::to_string(c.head_dim) +
                       " (the attention kernels handle 64 and 128)");
  }
  if (options.max_num_tokens <= 0 || options.max_num_seqs <= 0) {
    return InvalidArgument("CUDA: max_num_tokens and max_num_seqs must be positive");
  }
  const DType dtype = options.dtype.value_or(DefaultGpuDType(ckpt));
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return Unsupported("CUDA: dtype " + std::string(DTypeName(dtype)) +
                       " (the CUDA backend computes in bfloat16 or float16)");
  }
  std::unique_ptr<CudaRunnerBase> runner;
  if (dtype == DType::kF16) {
    auto r = std::make_unique<CudaRunner<__half>>(c, options);
    KILN_RETURN_IF_ERROR(r->Init(ckpt));
    runner = std::move(r);
  } else {
    auto r = std::make_unique<CudaRunner<__nv_bfloat16>>(c, options);
    KILN_RETURN_IF_ERROR(r->Init(ckpt));
    runner = std::move(r);
  }
  const CudaMemoryReport m = runner->MemoryReport();
  LOG(INFO) << "CUDA runner on device " << options.device << " (" << DTypeName(dtype)
            << "): weights " << (m.weight_bytes >> 20) << " MiB, workspace "
            << (m.workspace_bytes >> 20) << " MiB, " << (m.device_free_bytes >> 20)
            << " MiB free of " << (m.device_total_bytes >> 20);
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

Result<std::string> ExportGemmTable(const ModelRunner& runner) {
  const auto* cuda_runner = dynamic_cast<const CudaRunnerBase*>(&runner);
  if (cuda_runner == nullptr) return InvalidArgument("not a CUDA runner: " + runner.name());
  return cuda_runner->GemmTableJson();
}

Result<CudaMemoryReport> GetCudaMemoryReport(const ModelRunner& runner) {
  const auto* cuda_runner = dynamic_cast<const CudaRunnerBase*>(&runner);
  if (cuda_runner == nullptr) return InvalidArgument("not a CUDA runner: " + runner.name());
  return cuda_runner->MemoryReport();
}

}  // namespace kiln
