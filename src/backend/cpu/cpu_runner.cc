#include "backend/cpu/cpu_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/sampler.h"
#include "backend/cpu/thread_pool.h"
#include "core/buffer.h"
#include "core/check.h"
#include "core/logging.h"

namespace kiln {
namespace {

using cpu::WeightView;

const float* OrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// One output the step must produce from a row of logits.
struct LogitsJob {
  int32_t seq;
  int32_t target_index;  // index into prompt_logprob_targets, or -1 for the sampled token
  int64_t logits_row;
};

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(ModelConfig config, cpu::CpuWeights weights, std::vector<float> inv_freq,
            int num_threads, KvCacheDType kv_cache_dtype, ActivationObserver* observer)
      : config_(std::move(config)),
        weights_(std::move(weights)),
        inv_freq_(std::move(inv_freq)),
        num_threads_(num_threads),
        kv_fp8_(kv_cache_dtype == KvCacheDType::kFp8E4M3),
        observer_(observer) {}

  const ModelConfig& config() const override { return config_; }
  std::string name() const override { return "cpu"; }

  int64_t KvBlockBytes(int32_t block_size) const override {
    return 2 * int64_t{config_.num_layers} * block_size * config_.kv_size() * KvElementBytes();
  }

  Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override;
  Status AllocateSwapSpace(int32_t num_blocks) override;
  StepResult Execute(const StepInputs& inputs) override;

 private:
  int64_t KvElementBytes() const { return kv_fp8_ ? 1 : static_cast<int64_t>(sizeof(float)); }
  void CheckInputs(const StepInputs& in) const;
  // The step's swap copies (StepInputs::swap_out, then swap_in).
  void SwapBlocks(const StepInputs& in);
  void RunLayer(int layer, const StepInputs& in);
  // Hands [rows, cols] contiguous f32 inputs of a linear layer to the observer, if any.
  void Observe(int layer, ActivationObserver::Site site, const float* x, int64_t rows,
               int64_t cols) {
    if (observer_ != nullptr) observer_->ObserveLinearInput(layer, site, x, rows, cols, cols);
  }
  std::vector<float> ComputeLogits(const std::vector<int64_t>& token_rows);

  const ModelConfig config_;
  const cpu::CpuWeights weights_;
  const std::vector<float> inv_freq_;  // [head_dim / 2]
  const int num_threads_;
  const bool kv_fp8_;  // the cache holds e4m3 codes (scales: CpuLayerWeights::k_scale, v_scale)
  ActivationObserver* const observer_;  // may be null

  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  // [num_layers, num_blocks, block_size, num_kv_heads, head_dim] each, f32 or e4m3.
  HostBuffer k_cache_;
  HostBuffer v_cache_;
  // [num_host_blocks][num_layers][K, V][block_size, num_kv_heads, head_dim]: a host block is
  // one contiguous KvBlockBytes() span.
  HostBuffer swap_;
  int32_t num_host_blocks_ = 0;

  // Activations of the current step, reused across steps.
  std::vector<float> hidden_;   // [num_tokens, hidden] the residual stream
  std::vector<float> normed_;   // [num_tokens, hidden]
  std::vector<float> qkv_;      // [num_tokens, q_size + 2 * kv_size]
  std::vector<float> attn_;     // [num_tokens, q_size]
  std::vector<float> gate_up_;  // [num_tokens, 2 * intermediate]
  std::vector<float> act_;      // [num_tokens, intermediate]
  std::vector<float> cos_;      // [num_tokens, head_dim / 2]
  std::vector<float> sin_;      // [num_tokens, head_dim / 2]
};

Status CpuRunner::AllocateKvCache(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return InvalidArgument("KV cache needs num_blocks > 0 and block_size > 0, got " +
                           std::to_string(num_blocks) + " and " + std::to_string(block_size));
  }
  k_cache_ = HostBuffer();
  v_cache_ = HostBuffer();
  num_blocks_ = 0;
  block_size_ = 0;
  const int64_t pool_bytes = KvBlockBytes(block_size) / 2;  // one of K, V, per block
  if (pool_bytes > std::numeric_limits<int64_t>::max() / num_blocks) {
    return ResourceExhausted("KV cache of " + std::to_string(num_blocks) + " blocks is too large");
  }
  auto k = HostBuffer::Allocate(static_cast<size_t>(pool_bytes * num_blocks));
  if (!k.ok()) return k.status().WithContext("allocating the CPU KV cache (K)");
  auto v = HostBuffer::Allocate(static_cast<size_t>(pool_bytes * num_blocks));
  if (!v.ok()) return v.status().WithContext("allocating the CPU KV cache (V)");
  k_cache_ = std::move(*k);
  v_cache_ = std::move(*v);
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return Status::Ok();
}

Status CpuRunner::AllocateSwapSpace(int32_t num_blocks) {
  CHECK_GT(block_size_, 0) << "AllocateSwapSpace before AllocateKvCache";
  swap_ = HostBuffer();
  num_host_blocks_ = 0;
  if (num_blocks <= 0) return Status::Ok();
  auto swap = HostBuffer::Allocate(static_cast<size_t>(KvBlockBytes(block_size_)) * num_blocks);
  if (!swap.ok()) return swap.status().WithContext("allocating the CPU swap space");
  swap_ = std::move(*swap);
  num_host_blocks_ = num_blocks;
  return Status::Ok();
}

void CpuRunner::SwapBlocks(const StepInputs& in) {
  const size_t chunk = static_cast<size_t>(KvBlockBytes(block_size_)) / (2 * config_.num_layers);
  const size_t layer_bytes = chunk * num_blocks_;
  auto* k = static_cast<uint8_t*>(k_cache_.data());
  auto* v = static_cast<uint8_t*>(v_cache_.data());
  auto* swap = static_cast<uint8_t*>(swap_.data());
  // Device block b of layer l, K or V, and host block h's copy of it.
  auto each_chunk = [&](const BlockCopy& c, bool to_host) {
    CHECK(c.device_block >= 0 && c.device_block < num_blocks_ && c.host_block >= 0 &&
          c.host_block < num_host_blocks_)
        << "swap copy " << c.device_block << " <-> " << c.host_block;
    uint8_t* host = swap + static_cast<size_t>(c.host_block) * 2 * config_.num_layers * chunk;
    for (int l = 0; l < config_.num_layers; ++l) {
      uint8_t* pools[2] = {k + l * layer_bytes + c.device_block * chunk,
                           v + l * layer_bytes + c.device_block * chunk};
      for (uint8_t* dev : pools) {
        if (to_host) {
          std::memcpy(host, dev, chunk);
        } else {
          std::memcpy(dev, host, chunk);
        }
        host += chunk;
      }
    }
  };
  for (const BlockCopy& c : in.swap_out) each_chunk(c, /*to_host=*/true);
  for (const BlockCopy& c : in.swap_in) each_chunk(c, /*to_host=*/false);
}

void CpuRunner::CheckInputs(const StepInputs& in) const {
  CHECK(num_blocks_ > 0) << "Execute before AllocateKvCache";
  const int32_t num_tokens = in.num_tokens();
  const int32_t num_seqs = in.num_seqs();
  CHECK_EQ(in.positions.size(), in.token_ids.size());
  CHECK_EQ(in.slot_mapping.size(), in.token_ids.size());
  CHECK_EQ(in.cu_seqlens.size(), static_cast<size_t>(num_seqs) + 1);
  CHECK_EQ(in.seq_lens.size(), static_cast<size_t>(num_seqs));
  CHECK_EQ(in.block_tables.size(), static_cast<size_t>(num_seqs) * in.max_blocks_per_seq);
  CHECK_EQ(in.cu_seqlens[0], 0);
  CHECK_EQ(in.cu_seqlens[num_seqs], num_tokens);
  for (int32_t t : in.token_ids) CHECK(t >= 0 && t < config_.vocab_size) << "token id " << t;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const StepSequence& seq = in.seqs[s];
    CHECK_EQ(in.cu_seqlens[s + 1] - in.cu_seqlens[s], seq.num_new_tokens) << "sequence " << s;
    CHECK_EQ(in.seq_lens[s], seq.num_computed_tokens + seq.num_new_tokens) << "sequence " << s;
    CHECK(seq.num_computed_tokens >= 0 && seq.num_new_tokens >= 0);
    CHECK(!seq.do_sample || seq.num_new_tokens > 0) << "sequence " << s << " samples no token";
    CHECK_LE(seq.prompt_logprob_targets.size(), static_cast<size_t>(seq.num_new_tokens));
    for (int32_t id : seq.prompt_logprob_targets) CHECK(id >= 0 && id < config_.vocab_size);
    CHECK_LE(in.seq_lens[s], int64_t{in.max_blocks_per_seq} * block_size_) << "sequence " << s;
    const int32_t* table = in.block_tables.data() + int64_t{s} * in.max_blocks_per_seq;
    const int32_t num_used_blocks = (in.seq_lens[s] + block_size_ - 1) / block_size_;
    for (int32_t b = 0; b < num_used_blocks; ++b) {
      CHECK(table[b] >= 0 && table[b] < num_blocks_) << "sequence " << s << " block " << b;
    }
    for (int32_t t = in.cu_seqlens[s]; t < in.cu_seqlens[s + 1]; ++t) {
      const int32_t pos = seq.num_computed_tokens + (t - in.cu_seqlens[s]);
      CHECK_EQ(in.positions[t], pos) << "token " << t;
      const int64_t slot = int64_t{table[pos / block_size_]} * block_size_ + pos % block_size_;
      CHECK_EQ(in.slot_mapping[t], slot) << "token " << t << " (slot_mapping vs block table)";
    }
  }
}

void CpuRunner::RunLayer(int layer, const StepInputs& in) {
  const ModelConfig& c = config_;
  const cpu::CpuLayerWeights& w = weights_.layers[layer];
  const int64_t num_tokens = in.num_tokens();
  const int64_t hidden = c.hidden_size;
  const int64_t q_size = c.q_size();
  const int64_t kv_size = c.kv_size();
  const int64_t qkv_width = q_size + 2 * kv_size;
  const int64_t inter = c.intermediate_size;
  const int nt = num_threads_;

  // Attention block: h += o_proj(attention(rope(qkv_proj(rms_norm(h))))).
  cpu::RmsNorm(hidden_.data(), hidden, w.input_norm.data(), num_tokens, hidden, c.rms_norm_eps,
               normed_.data(), hidden, nt);
  Observe(layer, ActivationObserver::Site::kQkv, normed_.data(), num_tokens, hidden);
  cpu::Linear(normed_.data(), hidden, num_tokens, w.qkv.view(), OrNull(w.qkv_bias), qkv_.data(),
              qkv_width, /*accumulate=*/false, nt);
  float* q = qkv_.data();
  float* k = q + q_size;
  float* v = k + kv_size;
  cpu::ApplyRope(q, qkv_width, num_tokens, c.num_heads, c.head_dim, cos_.data(), sin_.data());
  cpu::ApplyRope(k, qkv_width, num_tokens, c.num_kv_heads, c.head_dim, cos_.data(), sin_.data());
  const int64_t layer_bytes = int64_t{num_blocks_} * block_size_ * kv_size * KvElementBytes();
  uint8_t* k_cache = static_cast<uint8_t*>(k_cache_.data()) + layer * layer_bytes;
  uint8_t* v_cache = static_cast<uint8_t*>(v_cache_.data()) + layer * layer_bytes;
  if (observer_ != nullptr) observer_->ObserveKv(layer, k, v, num_tokens, kv_size, qkv_width);
  cpu::PagedAttentionArgs args;
  if (kv_fp8_) {
    cpu::StoreKvFp8(k, qkv_width, v, qkv_width, in.slot_mapping.data(), num_tokens, kv_size,
                    w.k_scale, w.v_scale, k_cache, v_cache);
    args.k_cache_fp8 = k_cache;
    args.v_cache_fp8 = v_cache;
    args.k_scale = w.k_scale;
    args.v_scale = w.v_scale;
  } else {
    auto* k_f32 = reinterpret_cast<float*>(k_cache);
    auto* v_f32 = reinterpret_cast<float*>(v_cache);
    cpu::StoreKv(k, qkv_width, v, qkv_width, in.slot_mapping.data(), num_tokens, kv_size, k_f32,
                 v_f32);
    args.k_cache = k_f32;
    args.v_cache = v_f32;
  }
  args.q = q;
  args.ldq = qkv_width;
  args.positions = in.positions.data();
  args.cu_seqlens = in.cu_seqlens.data();
  args.block_tables = in.block_tables.data();
  args.num_seqs = in.num_seqs();
  args.max_blocks_per_seq = in.max_blocks_per_seq;
  args.block_size = block_size_;
  args.num_heads = c.num_heads;
  args.num_kv_heads = c.num_kv_heads;
  args.head_dim = c.head_dim;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  args.out = attn_.data();
  args.ldo = q_size;
  cpu::PagedAttention(args, nt);
  Observe(layer, ActivationObserver::Site::kO, attn_.data(), num_tokens, q_size);
  cpu::Linear(attn_.data(), q_size, num_tokens, w.o.view(), OrNull(w.o_bias), hidden_.data(),
              hidden, /*accumulate=*/true, nt);

  // MLP block: h += down_proj(silu(gate_proj(x)) * up_proj(x)), x = rms_norm(h).
  cpu::RmsNorm(hidden_.data(), hidden, w.post_attention_norm.data(), num_tokens, hidden,
               c.rms_norm_eps, normed_.data(), hidden, nt);
  Observe(layer, ActivationObserver::Site::kGateUp, normed_.data(), num_tokens, hidden);
  cpu::Linear(normed_.data(), hidden, num_tokens, w.gate_up.view(), OrNull(w.gate_up_bias),
              gate_up_.data(), 2 * inter, /*accumulate=*/false, nt);
  cpu::SiluMul(gate_up_.data(), 2 * inter, num_tokens, inter, act_.data(), inter, nt);
  Observe(layer, ActivationObserver::Site::kDown, act_.data(), num_tokens, inter);
  cpu::Linear(act_.data(), inter, num_tokens, w.down.view(), OrNull(w.down_bias), hidden_.data(),
              hidden, /*accumulate=*/true, nt);
}

std::vector<float> CpuRunner::ComputeLogits(const std::vector<int64_t>& token_rows) {
  const int64_t hidden = config_.hidden_size;
  const int64_t num_rows = static_cast<int64_t>(token_rows.size());
  std::vector<float> gathered(num_rows * hidden);
  for (int64_t r = 0; r < num_rows; ++r) {
    std::copy_n(hidden_.data() + token_rows[r] * hidden, hidden, gathered.data() + r * hidden);
  }
  cpu::RmsNorm(gathered.data(), hidden, weights_.final_norm.data(), num_rows, hidden,
               config_.rms_norm_eps, gathered.data(), hidden, num_threads_);
  const WeightView out = weights_.output().view();
  std::vector<float> logits(num_rows * out.rows);
  cpu::Linear(gathered.data(), hidden, num_rows, out, nullptr, logits.data(), out.rows,
              /*accumulate=*/false, num_threads_);
  return logits;
}

StepResult CpuRunner::Execute(const StepInputs& in) {
  CheckInputs(in);
  SwapBlocks(in);
  const ModelConfig& c = config_;
  const int64_t num_tokens = in.num_tokens();
  const int64_t hidden = c.hidden_size;
  const int half_dim = c.head_dim / 2;
  StepResult result;
  result.seqs.resize(in.num_seqs());
  if (num_tokens == 0) return result;

  hidden_.resize(num_tokens * hidden);
  normed_.resize(num_tokens * hidden);
  qkv_.resize(num_tokens * (c.q_size() + 2 * c.kv_size()));
  attn_.resize(num_tokens * c.q_size());
  gate_up_.resize(num_tokens * 2 * c.intermediate_size);
  act_.resize(num_tokens * c.intermediate_size);
  cos_.resize(num_tokens * half_dim);
  sin_.resize(num_tokens * half_dim);

  const WeightView embedding = weights_.embedding.view();
  for (int64_t t = 0; t < num_tokens; ++t) {
    cpu::DecodeRows(embedding, in.token_ids[t], 1, hidden_.data() + t * hidden);
  }
  cpu::RopeCosSin(in.positions.data(), num_tokens, inv_freq_.data(), half_dim, cos_.data(),
                  sin_.data());
  for (int layer = 0; layer < c.num_layers; ++layer) RunLayer(layer, in);
  if (observer_ != nullptr && observer_->wants_lm_head_input()) {
    cpu::RmsNorm(hidden_.data(), hidden, weights_.final_norm.data(), num_tokens, hidden,
                 c.rms_norm_eps, normed_.data(), hidden, num_threads_);
    observer_->ObserveLmHeadInput(normed_.data(), num_tokens, hidden, hidden);
  }

  // Logits only for the rows some output needs; a row wanted twice is computed once.
  std::vector<LogitsJob> jobs;
  std::vector<int64_t> token_rows;
  std::vector<int64_t> row_of_token(num_tokens, -1);
  auto row_for = [&](int64_t token) {
    if (row_of_token[token] < 0) {
      row_of_token[token] = static_cast<int64_t>(token_rows.size());
      token_rows.push_back(token);
    }
    return row_of_token[token];
  };
  for (int32_t s = 0; s < in.num_seqs(); ++s) {
    const StepSequence& seq = in.seqs[s];
    const int32_t num_targets = static_cast<int32_t>(seq.prompt_logprob_targets.size());
    result.seqs[s].prompt_logprobs.resize(num_targets);
    for (int32_t i = 0; i < num_targets; ++i) {
      jobs.push_back({s, i, row_for(in.cu_seqlens[s] + i)});
    }
    if (seq.do_sample) jobs.push_back({s, -1, row_for(in.cu_seqlens[s + 1] - 1)});
  }
  if (jobs.empty()) return result;
  const std::vector<float> logits = ComputeLogits(token_rows);
  const int64_t vocab = weights_.output().rows;

  // Sample and Score are pure functions of one row: any thread, any order, same results.
  cpu::ParallelFor(
      static_cast<int64_t>(jobs.size()), num_threads_, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          const LogitsJob& job = jobs[j];
          const StepSequence& seq = in.seqs[job.seq];
          const std::span<const float> row(logits.data() + job.logits_row * vocab, vocab);
          SequenceResult& out = result.seqs[job.seq];
          if (job.target_index < 0) {
            out.sampled = cpu::Sample(row, seq.sampling);
          } else {
            out.prompt_logprobs[job.target_index] = cpu::Score(
                row, seq.prompt_logprob_targets[job.target_index], seq.num_prompt_top_logprobs);
          }
        }
      });
  return result;
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> CreateCpuRunner(const Checkpoint& ckpt,
                                                     const CpuRunnerOptions& options) {
  const ModelConfig& config = ckpt.config();
  KILN_RETURN_IF_ERROR(config.Validate().WithContext(ckpt.path()));
  if (options.num_threads < 0) {
    return InvalidArgument("CpuRunnerOptions.num_threads must be >= 0 (0 = all cores), got " +
                           std::to_string(options.num_threads));
  }
  auto inv_freq = cpu::RopeInvFreq(config.head_dim, config.rope_theta, config.rope_scaling);
  if (!inv_freq.ok()) return inv_freq.status().WithContext(ckpt.path());
  if (config.sliding_window && *config.sliding_window < config.max_position_embeddings) {
    LOG(WARNING) << ckpt.path() << ": sliding_window " << *config.sliding_window
                 << " is not applied by the CPU backend; attention over longer contexts will "
                    "differ from the reference";
  }
  const CheckpointQuantization& pre = ckpt.quantization();
  if (pre.method == QuantMethod::kFp8) {
    LOG(INFO) << ckpt.path() << ": FP8 checkpoint (" << pre.format << ", "
              << (pre.per_channel ? "per-channel" : "per-tensor")
              << " weight scales): its e4m3 linear layers run W8A8 with "
              << (pre.static_activations ? "its static per-tensor activation scales"
                                         : "per-token activation scales");
  }
  if (pre.method == QuantMethod::kInt8) {
    LOG(INFO) << ckpt.path() << ": INT8 checkpoint (" << pre.format
              << "): its int8 linear layers run W8A8 with per-token activation scales";
  }
  KILN_ASSIGN_OR_RETURN(
      cpu::CpuWeights weights,
      cpu::LoadCpuWeights(ckpt, options.dequantize_weights_at_load, options.quantization));
  return std::unique_ptr<ModelRunner>(new CpuRunner(config, std::move(weights),
                                                    std::move(*inv_freq), options.num_threads,
                                                    options.kv_cache_dtype, options.observer));
}

}  // namespace kiln
