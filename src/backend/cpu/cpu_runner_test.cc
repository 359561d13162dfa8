// CpuRunner on tiny synthetic checkpoints (kiln_builder): the forward pass against a naive
// double-precision transformer written here, and the invariances the engine relies on: a
// sequence's results are bitwise the same prefilled whole, in chunks of 1, 3 or 7, or token by
// token; alone or in a batch with others at different stages; with any thread count; with
// weights decoded on the fly or dequantized at load.
#include "backend/cpu/cpu_runner.h"
#include "model/test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "builder/synth.h"
#include "model/dequant.h"

namespace kiln {
namespace {

// A fresh directory under the test temp dir named after the running test, removed at the end.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& stem) {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("kiln_" + stem + "_" + test + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

constexpr int kVocab = 320;

ModelConfig BaseConfig() {
  ModelConfig c = kiln::testing::TinyLlamaConfig();  // 2 layers, hidden 64, 4 heads, 2 kv heads
  c.vocab_size = kVocab;  // room for the synthetic tokenizer's 256 bytes + specials
  c.rope_theta = 10000.0;
  c.bos_token_id = 300;
  c.eos_token_ids = {301};
  return c;
}

// The variants every test runs on.
enum class Variant { kLlamaTied, kQwen2Bias, kLlama3RopeAllBiases };

std::string VariantName(Variant v) {
  switch (v) {
    case Variant::kLlamaTied:
      return "LlamaTied";
    case Variant::kQwen2Bias:
      return "Qwen2Bias";
    case Variant::kLlama3RopeAllBiases:
      return "Llama3RopeAllBiases";
  }
  return "?";
}

void PrintTo(Variant v, std::ostream* os) { *os << VariantName(v); }

ModelConfig VariantConfig(Variant v) {
  ModelConfig c = BaseConfig();
  switch (v) {
    case Variant::kLlamaTied:
      c.tie_word_embeddings = true;
      break;
    case Variant::kQwen2Bias:
      c.family = ModelFamily::kQwen2;
      c.architecture = "Qwen2ForCausalLM";
      c.qkv_bias = true;
      break;
    case Variant::kLlama3RopeAllBiases:
      c.rope_theta = 500000.0;
      c.rope_scaling.type = RopeScaling::Type::kLlama3;
      c.rope_scaling.factor = 8.0;
      c.rope_scaling.low_freq_factor = 1.0;
      c.rope_scaling.high_freq_factor = 4.0;
      c.rope_scaling.original_max_position_embeddings = 64;  // small: every band is exercised
      c.qkv_bias = c.o_bias = c.mlp_bias = true;
      break;
  }
  return c;
}

Checkpoint WriteAndOpen(const ModelConfig& config, const std::string& dir, DType dtype) {
  SynthOptions options;
  options.output_dir = dir;
  options.dtype = dtype;
  options.seed = 7;
  options.stddev = 0.08f;  // peakier distributions than the default 0.02
  options.num_threads = 1;
  const Status status = WriteSyntheticCheckpoint(config, options);
  EXPECT_TRUE(status.ok()) << status.ToString();
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return std::move(ckpt).value();
}

std::unique_ptr<ModelRunner> MakeRunner(const Checkpoint& ckpt, CpuRunnerOptions options = {}) {
  auto runner = CreateCpuRunner(ckpt, options);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  EXPECT_TRUE((*runner)->AllocateKvCache(/*num_blocks=*/64, /*block_size=*/4).ok());
  return std::move(runner).value();
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
  return kiln::testing::RandomTokenIds(n, seed, 299);
}

// The engine's side of a step, minimally: sequences with their tokens and block tables, blocks
// handed out from a shuffled free list.
class Harness {
 public:
  explicit Harness(ModelRunner* runner, uint32_t seed = 1) : runner_(runner) {
    free_blocks_.resize(64);
    std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), std::mt19937(seed));
  }

  int AddSequence(std::vector<int32_t> prompt) {
    seqs_.push_back({std::move(prompt), 0, {}, {}});
    return static_cast<int>(seqs_.size()) - 1;
  }

  struct Work {
    int seq;
    int32_t num_tokens;
    bool sample;           // greedy, with the full distribution as top logprobs
    bool prompt_logprobs;  // score every new token's successor that is already known
  };

  // Runs one step; appends each sampled token to its sequence.
  StepResult Step(const std::vector<Work>& work) {
    StepInputs in;
    in.cu_seqlens.push_back(0);
    int32_t max_blocks = 0;
    for (const Work& w : work) {
      Seq& s = seqs_[w.seq];
      const int32_t end = s.num_computed + w.num_tokens;
      while (static_cast<int32_t>(s.blocks.size()) * kBlockSize < end) {
        s.blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      }
      max_blocks = std::max(max_blocks, static_cast<int32_t>(s.blocks.size()));
    }
    in.max_blocks_per_seq = max_blocks;
    for (const Work& w : work) {
      Seq& s = seqs_[w.seq];
      for (int32_t p = s.num_computed; p < s.num_computed + w.num_tokens; ++p) {
        in.token_ids.push_back(s.tokens.at(p));
        in.positions.push_back(p);
        in.slot_mapping.push_back(int64_t{s.blocks[p / kBlockSize]} * kBlockSize + p % kBlockSize);
      }
      in.cu_seqlens.push_back(in.num_tokens());
      in.seq_lens.push_back(s.num_computed + w.num_tokens);
      for (int32_t b = 0; b < max_blocks; ++b) {
        in.block_tables.push_back(b < static_cast<int32_t>(s.blocks.size()) ? s.blocks[b] : -1);
      }
      StepSequence seq;
      seq.num_computed_tokens = s.num_computed;
      seq.num_new_tokens = w.num_tokens;
      seq.do_sample = w.sample;
      seq.sampling.num_top_logprobs = kVocab;
      s.targets.clear();
      if (w.prompt_logprobs) {
        for (int32_t p = s.num_computed + 1;
             p <= s.num_computed + w.num_tokens && p < static_cast<int32_t>(s.tokens.size()); ++p) {
          s.targets.push_back(s.tokens[p]);
        }
        seq.prompt_logprob_targets = s.targets;
        seq.num_prompt_top_logprobs = kVocab;
      }
      in.seqs.push_back(seq);
    }
    StepResult result = runner_->Execute(in);
    for (size_t i = 0; i < work.size(); ++i) {
      Seq& s = seqs_[work[i].seq];
      s.num_computed += work[i].num_tokens;
      if (work[i].sample) s.tokens.push_back(result.seqs[i].sampled.token_id);
    }
    return result;
  }

  const std::vector<int32_t>& tokens(int seq) const { return seqs_[seq].tokens; }

 private:
  static constexpr int32_t kBlockSize = 4;
  struct Seq {
    std::vector<int32_t> tokens;
    int32_t num_computed;
    std::vector<int32_t> blocks;
    std::vector<int32_t> targets;  // outlives Execute
  };
  ModelRunner* runner_;
  std::vector<int32_t> free_blocks_;
  std::vector<Seq> seqs_;
};

// Bitwise equality of two scored tokens, alternatives included.
void ExpectSame(const ScoredToken& a, const ScoredToken& b, const std::string& what) {
  EXPECT_EQ(a.token_id, b.token_id) << what;
  EXPECT_EQ(std::memcmp(&a.logprob, &b.logprob, sizeof(float)), 0) << what;
  EXPECT_EQ(a.rank, b.rank) << what;
  ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size()) << what;
  for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
    EXPECT_EQ(a.top_logprobs[i].token_id, b.top_logprobs[i].token_id) << what << " alt " << i;
    EXPECT_EQ(std::memcmp(&a.top_logprobs[i].logprob, &b.top_logprobs[i].logprob, 4), 0)
        << what << " alt " << i;
  }
}

// What one sequence produced over its whole schedule.
struct Trace {
  std::vector<ScoredToken> prompt_logprobs;
  std::vector<ScoredToken> sampled;
};

void ExpectSameTrace(const Trace& a, const Trace& b, const std::string& what) {
  ASSERT_EQ(a.prompt_logprobs.size(), b.prompt_logprobs.size()) << what;
  ASSERT_EQ(a.sampled.size(), b.sampled.size()) << what;
  for (size_t i = 0; i < a.prompt_logprobs.size(); ++i) {
    ExpectSame(a.prompt_logprobs[i], b.prompt_logprobs[i], what + " prompt " + std::to_string(i));
  }
  for (size_t i = 0; i < a.sampled.size(); ++i) {
    ExpectSame(a.sampled[i], b.sampled[i], what + " sampled " + std::to_string(i));
  }
}

void Append(const SequenceResult& r, bool sampled, Trace* trace) {
  for (const ScoredToken& t : r.prompt_logprobs) trace->prompt_logprobs.push_back(t);
  if (sampled) trace->sampled.push_back(r.sampled);
}

class CpuRunnerTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<ScopedTempDir>("cpu_runner");
    ckpt_ = std::make_unique<Checkpoint>(
        WriteAndOpen(VariantConfig(GetParam()), dir_->path(), DType::kBF16));
  }
  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<Checkpoint> ckpt_;
};

// Prefill in chunks of `chunk` (with prompt logprobs), then `num_decode` greedy decode steps.
Trace RunChunked(ModelRunner* runner, const std::vector<int32_t>& prompt, int32_t chunk,
                 int num_decode) {
  Harness h(runner, /*seed=*/chunk);
  const int s = h.AddSequence(prompt);
  Trace trace;
  const int32_t n = static_cast<int32_t>(prompt.size());
  for (int32_t done = 0; done < n;) {
    const int32_t take = std::min(chunk, n - done);
    done += take;
    Append(h.Step({{s, take, done == n, true}}).seqs[0], done == n, &trace);
  }
  for (int i = 0; i < num_decode; ++i) Append(h.Step({{s, 1, true, false}}).seqs[0], true, &trace);
  return trace;
}

TEST_P(CpuRunnerTest, ChunkedPrefillAndDecodeAreBitwiseIdentical) {
  auto runner = MakeRunner(*ckpt_);
  const std::vector<int32_t> prompt = RandomTokens(23, 3);
  const Trace whole = RunChunked(runner.get(), prompt, 23, 8);
  ASSERT_EQ(whole.prompt_logprobs.size(), 22u);
  ASSERT_EQ(whole.sampled.size(), 9u);
  for (int32_t chunk : {1, 3, 7}) {
    ExpectSameTrace(RunChunked(runner.get(), prompt, chunk, 8), whole,
                    "chunk " + std::to_string(chunk));
  }
}

TEST_P(CpuRunnerTest, BatchedSequencesMatchTheirRunsAlone) {
  // Five sequences, each with its own prefill chunking, starting at different steps so that
  // every batch mixes prefill chunks, last chunks and decodes.
  struct Plan {
    std::vector<int32_t> prompt;
    std::vector<int32_t> chunks;
    int start_step;
  };
  const std::vector<Plan> plans = {
      {RandomTokens(1, 10), {1}, 0},      {RandomTokens(5, 11), {2, 3}, 0},
      {RandomTokens(12, 12), {12}, 1},    {RandomTokens(30, 13), {7, 7, 7, 9}, 2},
      {RandomTokens(17, 14), {1, 16}, 3},
  };
  constexpr int kDecodeSteps = 5;
  auto steps_of = [&](const Plan& p) { return static_cast<int>(p.chunks.size()) + kDecodeSteps; };
  auto work_of = [&](const Plan& p, int seq, int i) {
    if (i < static_cast<int>(p.chunks.size())) {
      return Harness::Work{seq, p.chunks[i], i + 1 == static_cast<int>(p.chunks.size()), true};
    }
    return Harness::Work{seq, 1, true, false};
  };
  CpuRunnerOptions one_thread;
  one_thread.num_threads = 1;
  auto alone_runner = MakeRunner(*ckpt_, one_thread);
  std::vector<Trace> alone(plans.size());
  for (size_t s = 0; s < plans.size(); ++s) {
    Harness h(alone_runner.get(), 100 + s);
    const int id = h.AddSequence(plans[s].prompt);
    for (int i = 0; i < steps_of(plans[s]); ++i) {
      const Harness::Work w = work_of(plans[s], id, i);
      Append(h.Step({w}).seqs[0], w.sample, &alone[s]);
    }
  }
  CpuRunnerOptions two_threads;
  two_threads.num_threads = 2;
  auto batch_runner = MakeRunner(*ckpt_, two_threads);
  Harness h(batch_runner.get(), 999);
  std::vector<Trace> batched(plans.size());
  for (const Plan& p : plans) h.AddSequence(p.prompt);
  for (int step = 0;; ++step) {
    std::vector<Harness::Work> work;
    for (size_t s = 0; s < plans.size(); ++s) {
      const int i = step - plans[s].start_step;
      if (i >= 0 && i < steps_of(plans[s])) work.push_back(work_of(plans[s], s, i));
    }
    if (work.empty()) break;
    const StepResult r = h.Step(work);
    for (size_t j = 0; j < work.size(); ++j)
      Append(r.seqs[j], work[j].sample, &batched[work[j].seq]);
  }
  for (size_t s = 0; s < plans.size(); ++s) {
    ExpectSameTrace(batched[s], alone[s], "sequence " + std::to_string(s));
  }
}

TEST_P(CpuRunnerTest, WeightStorageDoesNotChangeABit) {
  const std::vector<int32_t> prompt = RandomTokens(9, 4);
  auto decoded = MakeRunner(*ckpt_);
  CpuRunnerOptions f32;
  f32.dequantize_weights_at_load = true;
  auto dequantized = MakeRunner(*ckpt_, f32);
  ExpectSameTrace(RunChunked(dequantized.get(), prompt, 4, 3),
                  RunChunked(decoded.get(), prompt, 4, 3),
                  "bf16 decoded on the fly vs f32 at load");
}

// ---- Against a naive transformer ---------------------------------------------------------------

std::vector<double> Load(const Checkpoint& ckpt, const std::string& name) {
  const Weight* w = ckpt.Find(name);
  EXPECT_NE(w, nullptr) << name;
  std::vector<float> f(w->shape.numel());
  EXPECT_TRUE(DequantizeToF32(w->dtype, w->data, w->nbytes, f.size(), f.data()).ok());
  return std::vector<double>(f.begin(), f.end());
}

// y = W x (+ b) for W [out, in].
std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x,
                           const std::vector<double>* b) {
  const size_t out = w.size() / x.size();
  std::vector<double> y(out);
  for (size_t o = 0; o < out; ++o) {
    double acc = b ? (*b)[o] : 0.0;
    for (size_t i = 0; i < x.size(); ++i) acc += w[o * x.size() + i] * x[i];
    y[o] = acc;
  }
  return y;
}

std::vector<double> RmsNormRef(const std::vector<double>& x, const std::vector<double>& w,
                               double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * inv;
  return y;
}

// log_softmax of the logits at every position of `tokens`, in double, straight from the HF
// definitions (full causal attention, no cache).
std::vector<std::vector<double>> NaiveLogprobs(const Checkpoint& ckpt,
                                               const std::vector<int32_t>& tokens) {
  const ModelConfig& c = ckpt.config();
  const int n = static_cast<int>(tokens.size()), hd = c.head_dim, half = hd / 2;
  const std::vector<float> inv_freq =
      cpu::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling).value();
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const double angle = pos * double{inv_freq[i]};
        const double a = v[h * hd + i], b = v[h * hd + i + half];
        v[h * hd + i] = a * std::cos(angle) - b * std::sin(angle);
        v[h * hd + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  };
  const std::vector<double> embed = Load(ckpt, "model.embed_tokens.weight");
  std::vector<std::vector<double>> h(n);
  for (int t = 0; t < n; ++t) {
    h[t].assign(embed.begin() + int64_t{tokens[t]} * c.hidden_size,
                embed.begin() + int64_t{tokens[t] + 1} * c.hidden_size);
  }
  auto maybe = [&](bool present, const std::string& name) {
    return present ? Load(ckpt, name) : std::vector<double>();
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto wq = Load(ckpt, p + "self_attn.q_proj.weight"),
               wk = Load(ckpt, p + "self_attn.k_proj.weight"),
               wv = Load(ckpt, p + "self_attn.v_proj.weight"),
               wo = Load(ckpt, p + "self_attn.o_proj.weight");
    const auto bq = maybe(c.qkv_bias, p + "self_attn.q_proj.bias"),
               bk = maybe(c.qkv_bias, p + "self_attn.k_proj.bias"),
               bv = maybe(c.qkv_bias, p + "self_attn.v_proj.bias"),
               bo = maybe(c.o_bias, p + "self_attn.o_proj.bias");
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      const auto x = RmsNormRef(h[t], Load(ckpt, p + "input_layernorm.weight"), c.rms_norm_eps);
      q[t] = MatVec(wq, x, c.qkv_bias ? &bq : nullptr);
      k[t] = MatVec(wk, x, c.qkv_bias ? &bk : nullptr);
      v[t] = MatVec(wv, x, c.qkv_bias ? &bv : nullptr);
      rope(q[t], c.num_heads, t);
      rope(k[t], c.num_kv_heads, t);
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> attn(c.q_size());
      for (int hh = 0; hh < c.num_heads; ++hh) {
        const int g = hh / (c.num_heads / c.num_kv_heads);
        std::vector<double> s(t + 1);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[j][g * hd + i];
          mx = std::max(mx, s[j] = d / std::sqrt(static_cast<double>(hd)));
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < hd; ++i) attn[hh * hd + i] += s[j] / sum * v[j][g * hd + i];
        }
      }
      const auto o = MatVec(wo, attn, c.o_bias ? &bo : nullptr);
      for (int i = 0; i < c.hidden_size; ++i) h[t][i] += o[i];
    }
    const auto wg = Load(ckpt, p + "mlp.gate_proj.weight"),
               wu = Load(ckpt, p + "mlp.up_proj.weight"),
               wd = Load(ckpt, p + "mlp.down_proj.weight");
    const auto bg = maybe(c.mlp_bias, p + "mlp.gate_proj.bias"),
               bu = maybe(c.mlp_bias, p + "mlp.up_proj.bias"),
               bd = maybe(c.mlp_bias, p + "mlp.down_proj.bias");
    for (int t = 0; t < n; ++t) {
      const auto x =
          RmsNormRef(h[t], Load(ckpt, p + "post_attention_layernorm.weight"), c.rms_norm_eps);
      auto g = MatVec(wg, x, c.mlp_bias ? &bg : nullptr);
      const auto u = MatVec(wu, x, c.mlp_bias ? &bu : nullptr);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const auto d = MatVec(wd, g, c.mlp_bias ? &bd : nullptr);
      for (int i = 0; i < c.hidden_size; ++i) h[t][i] += d[i];
    }
  }
  const auto lm =
      Load(ckpt, c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const auto norm = Load(ckpt, "model.norm.weight");
  std::vector<std::vector<double>> out(n);
  for (int t = 0; t < n; ++t) {
    out[t] = MatVec(lm, RmsNormRef(h[t], norm, c.rms_norm_eps), nullptr);
    double mx = -INFINITY, sum = 0;
    for (double x : out[t]) mx = std::max(mx, x);
    for (double x : out[t]) sum += std::exp(x - mx);
    for (double& x : out[t]) x = x - mx - std::log(sum);
  }
  return out;
}

TEST_P(CpuRunnerTest, MatchesANaiveDoublePrecisionForwardPass) {
  auto runner = MakeRunner(*ckpt_);
  const std::vector<int32_t> prompt = RandomTokens(14, 5);
  Harness h(runner.get());
  const int s = h.AddSequence(prompt);
  const StepResult r = h.Step({{s, 14, true, true}});
  const auto want = NaiveLogprobs(*ckpt_, prompt);
  double max_diff = 0;
  for (int t = 0; t < 14; ++t) {
    const ScoredToken& got = t < 13 ? r.seqs[0].prompt_logprobs[t] : r.seqs[0].sampled;
    ASSERT_EQ(got.top_logprobs.size(), static_cast<size_t>(kVocab));
    for (const TokenLogprob& lp : got.top_logprobs) {
      max_diff = std::max(max_diff, std::abs(lp.logprob - want[t][lp.token_id]));
    }
    const auto best = std::max_element(want[t].begin(), want[t].end()) - want[t].begin();
    EXPECT_EQ(got.top_logprobs[0].token_id, best) << "position " << t;
  }
  std::printf("max |logprob - naive double| = %.3g\n", max_diff);
  EXPECT_LT(max_diff, 2e-5);
}

// ---- FP8
// -----------------------------------------------------------------------------------------

CpuRunnerOptions Fp8Options(bool weights, bool kv_cache) {
  CpuRunnerOptions o;
  if (weights) o.quantization = QuantMethod::kFp8;
  if (kv_cache) o.kv_cache_dtype = KvCacheDType::kFp8E4M3;
  return o;
}

// W8A8 scales each token by its own amax and the FP8 cache is a function of each K/V element, so
// FP8 keeps every invariance the f32 runner has; fp8 matrices ignore dequantize_weights_at_load.
TEST_P(CpuRunnerTest, Fp8KeepsChunkingInvarianceAndIgnoresDequantizeAtLoad) {
  const std::vector<int32_t> prompt = RandomTokens(23, 3);
  auto fp8 = MakeRunner(*ckpt_, Fp8Options(true, true));
  const Trace whole = RunChunked(fp8.get(), prompt, 23, 6);
  for (int32_t chunk : {1, 7}) {
    ExpectSameTrace(RunChunked(fp8.get(), prompt, chunk, 6), whole,
                    "fp8 chunk " + std::to_string(chunk));
  }
  CpuRunnerOptions f32 = Fp8Options(true, true);
  f32.dequantize_weights_at_load = true;
  f32.num_threads = 1;
  auto dequantized = MakeRunner(*ckpt_, f32);
  ExpectSameTrace(RunChunked(dequantized.get(), prompt, 23, 6), whole,
                  "fp8 with dequantize_weights_at_load, 1 thread");
}

// Each FP8 option changes the logprobs, but a little: measured 0.17-0.26 (W8A8) and 0.05-0.08
// (KV) here, where a scale applied twice, left out or taken from the wrong row moves them by
// whole units. (Random weights leave near-ties between the top logits, so the top-1 is no
// criterion here; engine/quantization_model_test checks it on the real model.)
TEST_P(CpuRunnerTest, Fp8StaysNearTheNaiveDoublePrecisionForwardPass) {
  const std::vector<int32_t> prompt = RandomTokens(14, 5);
  const auto want = NaiveLogprobs(*ckpt_, prompt);
  for (const auto& [name, options] :
       {std::pair{"W8A8", Fp8Options(true, false)}, std::pair{"KV", Fp8Options(false, true)}}) {
    auto runner = MakeRunner(*ckpt_, options);
    Harness h(runner.get());
    const int s = h.AddSequence(prompt);
    const StepResult r = h.Step({{s, 14, true, true}});
    double max_diff = 0;
    for (int t = 0; t < 14; ++t) {
      const ScoredToken& got = t < 13 ? r.seqs[0].prompt_logprobs[t] : r.seqs[0].sampled;
      for (const TokenLogprob& lp : got.top_logprobs) {
        max_diff = std::max(max_diff, std::abs(lp.logprob - want[t][lp.token_id]));
      }
    }
    std::printf("fp8 %s: max |logprob - naive double| = %.3g\n", name, max_diff);
    EXPECT_GT(max_diff, 1e-3) << name << ": FP8 changed nothing";
    EXPECT_LT(max_diff, 0.5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuRunnerTest,
                         ::testing::Values(Variant::kLlamaTied, Variant::kQwen2Bias,
                                           Variant::kLlama3RopeAllBiases),
                         [](const auto& info) { return VariantName(info.param); });

// ---- Creation and the KV pool ------------------------------------------------------------------

TEST(CpuRunnerCreateTest, KvBlockBytesAndAllocation) {
  ScopedTempDir dir("cpu_runner_kv");
  const Checkpoint ckpt = WriteAndOpen(BaseConfig(), dir.path(), DType::kF16);
  auto runner = CreateCpuRunner(ckpt, {});
  ASSERT_TRUE(runner.ok());
  EXPECT_EQ((*runner)->name(), "cpu");
  // K and V, 2 layers, 16 tokens, 2 kv heads x 16 dims, f32.
  EXPECT_EQ((*runner)->KvBlockBytes(16), 2 * 2 * 16 * 32 * 4);
  EXPECT_EQ((*runner)->AllocateKvCache(0, 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*runner)->AllocateKvCache(8, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*runner)->AllocateKvCache(8, 16).ok());
  EXPECT_EQ((*runner)->config().hidden_size, 64);
}

// Records what the forward pass shows an ActivationObserver.
class RecordingObserver final : public ActivationObserver {
 public:
  struct Call {
    int layer;
    int site;  // Site, or -1 for ObserveKv
    int64_t rows, cols;
    double mean_square;  // over every observed element
  };
  void ObserveLinearInput(int layer, Site site, const float* x, int64_t rows, int64_t cols,
                          int64_t ld) override {
    calls.push_back({layer, static_cast<int>(site), rows, cols, MeanSquare(x, rows, cols, ld)});
  }
  void ObserveKv(int layer, const float* k, const float* v, int64_t rows, int64_t kv_size,
                 int64_t ld) override {
    calls.push_back({layer, -1, rows, kv_size, MeanSquare(k, rows, kv_size, ld)});
    EXPECT_NE(k, v);
  }
  std::vector<Call> calls;

 private:
  static double MeanSquare(const float* x, int64_t rows, int64_t cols, int64_t ld) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) sum += double{x[r * ld + c]} * x[r * ld + c];
    }
    return sum / static_cast<double>(rows * cols);
  }
};

TEST(CpuRunnerCreateTest, ObserverSeesEveryLinearInputAndKvWithoutChangingResults) {
  ScopedTempDir dir("cpu_runner_observer");
  const ModelConfig config = BaseConfig();
  const Checkpoint ckpt = WriteAndOpen(config, dir.path(), DType::kF16);
  RecordingObserver observer;
  CpuRunnerOptions observed;
  observed.observer = &observer;
  auto plain_runner = MakeRunner(ckpt);
  auto observed_runner = MakeRunner(ckpt, observed);
  Harness plain(plain_runner.get()), watched(observed_runner.get());
  const std::vector<int32_t> prompt = RandomTokens(9, 3);
  plain.AddSequence(prompt);
  watched.AddSequence(prompt);
  const StepResult a = plain.Step({{0, 9, true, false}});
  const StepResult b = watched.Step({{0, 9, true, false}});
  ExpectSame(a.seqs[0].sampled, b.seqs[0].sampled, "observed run");

  // Per layer: qkv input, K/V, o input, gate_up input, down input; each with all 9 tokens.
  ASSERT_EQ(observer.calls.size(), 5u * config.num_layers);
  const int kKv = -1, kQkv = 0, kO = 1, kGateUp = 2, kDown = 3;
  const int expected_sites[] = {kQkv, kKv, kO, kGateUp, kDown};
  const int64_t expected_cols[] = {config.hidden_size, config.kv_size(), config.q_size(),
                                   config.hidden_size, config.intermediate_size};
  for (size_t i = 0; i < observer.calls.size(); ++i) {
    const RecordingObserver::Call& call = observer.calls[i];
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_EQ(call.layer, static_cast<int>(i / 5));
    EXPECT_EQ(call.site, expected_sites[i % 5]);
    EXPECT_EQ(call.rows, 9);
    EXPECT_EQ(call.cols, expected_cols[i % 5]);
    EXPECT_GT(call.mean_square, 0.0);
    // The synthetic norm scales are 1, so rms_norm's outputs have a mean square of
    // ms / (ms + eps): within 0.5 % of 1 for rows whose own mean square ms is >= 0.002 (the
    // embedding rows' is about 0.08^2).
    if (call.site == kQkv || call.site == kGateUp) {
      EXPECT_NEAR(call.mean_square, 1.0, 5e-3);
    }
  }
}

TEST(CpuRunnerCreateTest, Fp8KvBlockIsAQuarterOfF32) {
  ScopedTempDir dir("cpu_runner_kv_fp8");
  const Checkpoint ckpt = WriteAndOpen(BaseConfig(), dir.path(), DType::kF16);
  auto f32 = CreateCpuRunner(ckpt, {});
  auto fp8 = CreateCpuRunner(ckpt, Fp8Options(false, true));
  ASSERT_TRUE(f32.ok() && fp8.ok());
  EXPECT_EQ((*fp8)->KvBlockBytes(16), 2 * 2 * 16 * 32);  // 1 byte per element
  EXPECT_EQ((*fp8)->KvBlockBytes(16) * 4, (*f32)->KvBlockBytes(16));
  EXPECT_TRUE((*fp8)->AllocateKvCache(8, 16).ok());
  EXPECT_TRUE((*fp8)->AllocateSwapSpace(3).ok());
}

// One sequence's step over an explicit block table.
StepInputs OneSequenceStep(const std::vector<int32_t>& tokens, int32_t num_computed,
                           const std::vector<int32_t>& blocks, int32_t block_size) {
  StepInputs in;
  const int32_t n = static_cast<int32_t>(tokens.size()) - num_computed;
  for (int32_t p = num_computed; p < num_computed + n; ++p) {
    in.token_ids.push_back(tokens[p]);
    in.positions.push_back(p);
    in.slot_mapping.push_back(int64_t{blocks[p / block_size]} * block_size + p % block_size);
  }
  in.cu_seqlens = {0, n};
  in.seq_lens = {num_computed + n};
  in.block_tables = blocks;
  in.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
  StepSequence seq;
  seq.num_computed_tokens = num_computed;
  seq.num_new_tokens = n;
  seq.do_sample = true;
  seq.sampling.num_top_logprobs = kVocab;
  in.seqs = {seq};
  return in;
}

// Swap to host copies whole e4m3 blocks: a sequence swapped out, its blocks overwritten by
// another sequence and swapped back in elsewhere decodes exactly as if undisturbed.
TEST(CpuRunnerCreateTest, Fp8KvCacheSurvivesSwapOutAndIn) {
  ScopedTempDir dir("cpu_runner_swap_fp8");
  const Checkpoint ckpt = WriteAndOpen(BaseConfig(), dir.path(), DType::kBF16);
  constexpr int32_t kBlock = 4;
  std::vector<int32_t> a = RandomTokens(8, 21);
  const std::vector<int32_t> b = RandomTokens(8, 22);

  auto plain = CreateCpuRunner(ckpt, Fp8Options(true, true));
  ASSERT_TRUE(plain.ok() && (*plain)->AllocateKvCache(8, kBlock).ok());
  const int32_t next =
      (*plain)->Execute(OneSequenceStep(a, 0, {0, 1}, kBlock)).seqs[0].sampled.token_id;
  a.push_back(next);
  const ScoredToken want =
      (*plain)->Execute(OneSequenceStep(a, 8, {0, 1, 2}, kBlock)).seqs[0].sampled;

  auto swapped = CreateCpuRunner(ckpt, Fp8Options(true, true));
  ASSERT_TRUE(swapped.ok() && (*swapped)->AllocateKvCache(8, kBlock).ok());
  ASSERT_TRUE((*swapped)->AllocateSwapSpace(4).ok());
  std::vector<int32_t> a_prompt(a.begin(), a.begin() + 8);
  EXPECT_EQ(
      (*swapped)->Execute(OneSequenceStep(a_prompt, 0, {0, 1}, kBlock)).seqs[0].sampled.token_id,
      next);
  StepInputs evict = OneSequenceStep(b, 0, {0, 1}, kBlock);  // b reuses a's blocks
  evict.swap_out = {{0, 3}, {1, 0}};
  (*swapped)->Execute(evict);
  StepInputs resume = OneSequenceStep(a, 8, {5, 2, 7}, kBlock);
  resume.swap_in = {{5, 3}, {2, 0}};
  const ScoredToken got = (*swapped)->Execute(resume).seqs[0].sampled;
  ExpectSame(got, want, "after swap out and in");
}

TEST(CpuRunnerCreateTest, RejectsRopeScalingItDoesNotImplement) {
  for (RopeScaling::Type type : {RopeScaling::Type::kDynamic, RopeScaling::Type::kYarn}) {
    ScopedTempDir dir("cpu_runner_rope_" + std::string(RopeScalingTypeName(type)));
    ModelConfig config = BaseConfig();
    config.rope_scaling.type = type;
    config.rope_scaling.factor = 2.0;
    config.rope_scaling.original_max_position_embeddings = 128;
    const Checkpoint ckpt = WriteAndOpen(config, dir.path(), DType::kBF16);
    auto runner = CreateCpuRunner(ckpt, {});
    ASSERT_FALSE(runner.ok());
    EXPECT_EQ(runner.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(runner.status().message().find(RopeScalingTypeName(type)), std::string::npos)
        << runner.status().message();
  }
  ScopedTempDir dir("cpu_runner_threads");
  const Checkpoint ckpt = WriteAndOpen(BaseConfig(), dir.path(), DType::kBF16);
  CpuRunnerOptions bad;
  bad.num_threads = -1;
  EXPECT_EQ(CreateCpuRunner(ckpt, bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
