// kiln build --quantize-lm-head (W4Options::quantize_lm_head, builder/quantize_w4.h): lm_head
// becomes a W4A16 tensor of its own, for untied and tied (SmolLM2-shaped) synthetic models; the
// engine is untied with the embedding kept 16-bit; the manifest says so; and the CPU runner's
// logits on such an engine are the final hidden state times the dequantized 4-bit lm_head,
// computed here from the stored codes, scales and zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "builder/calibration.h"
#include "builder/engine_writer.h"
#include "builder/quantize_w4.h"
#include "builder/synth.h"
#include "builder/test_util.h"
#include "model/dequant.h"
#include "model/engine_dir.h"
#include "model/test_util.h"

namespace kiln {
namespace {

using testing::ReadFile;
using testing::ScopedTempDir;

constexpr int32_t kGroup = 32;

// The model tests' tiny Llama, with room for the synthetic tokenizer's ids (>= 320).
ModelConfig SmallLlama(bool tied, int32_t vocab = 400) {
  ModelConfig c = testing::TinyLlamaConfig();
  c.vocab_size = vocab;
  c.tie_word_embeddings = tied;
  return c;
}

Checkpoint Open(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return std::move(ckpt).value();
}

Checkpoint Synth(const std::string& dir, const ModelConfig& config) {
  SynthOptions o;
  o.output_dir = dir;
  o.seed = 9;
  o.stddev = 0.08f;
  o.num_threads = 1;
  const Status s = WriteSyntheticCheckpoint(config, o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return Open(dir);
}

std::vector<float> DecodeF32(const Weight& w) {
  std::vector<float> out(w.shape.numel());
  EXPECT_TRUE(DequantizeToF32(w.dtype, w.data, w.nbytes, w.shape.numel(), out.data()).ok());
  return out;
}

// Row r, column c of a W4A16 weight without act-order: (code - zero) * scale of its group,
// read from the packed bytes (low nibble first) here rather than by the CPU backend's decoder.
double W4Value(const Weight& w, int64_t r, int64_t c) {
  const int64_t k = w.shape[1];
  const int64_t i = r * k + c;
  const uint8_t byte = w.data[i / 2];
  const int code = i % 2 == 0 ? UnpackI4Low(byte) : UnpackI4High(byte);
  const int64_t g = r * (k / w.w4->group_size) + c / w.w4->group_size;
  return (code - w.w4->zeros[g]) * double{F16ToF32(w.w4->scales[g])};
}

Result<QuantizedModel> Quantize(const Checkpoint& src, W4Algorithm algorithm, bool lm_head,
                                const std::vector<std::vector<int32_t>>& calib = {}) {
  W4Options o;
  o.algorithm = algorithm;
  o.group_size = kGroup;
  o.quantize_lm_head = lm_head;
  return QuantizeW4(src, o, calib);
}

Result<QuantizedModel> QuantizeRtn(const Checkpoint& src, bool lm_head) {
  return Quantize(src, W4Algorithm::kRtn, lm_head);
}

Status Build(const Checkpoint& src, const QuantizedModel& q, const std::string& out) {
  EngineBuildOptions o;
  o.out_dir = out;
  o.quantization = QuantMethod::kW4A16;
  o.quant_recipe = "w4a16-rtn";
  o.threads = 2;
  return WriteEngine(src, &q, o);
}

// The logprobs of every token after the last of `tokens`, indexed by token id.
std::vector<float> NextTokenLogprobs(const Checkpoint& ckpt, const std::vector<int32_t>& tokens) {
  auto runner = CreateCpuRunner(ckpt, {});
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  const int32_t n = static_cast<int32_t>(tokens.size());
  EXPECT_TRUE((*runner)->AllocateKvCache((n + 15) / 16, 16).ok());
  StepInputs in = SingleSequenceStep(tokens, 0, n, 16);
  in.seqs[0].do_sample = true;
  in.seqs[0].sampling.num_top_logprobs = ckpt.config().vocab_size;
  const StepResult r = (*runner)->Execute(in);
  std::vector<float> out(ckpt.config().vocab_size, NAN);
  for (const TokenLogprob& t : r.seqs[0].sampled.top_logprobs) out[t.token_id] = t.logprob;
  return out;
}

class LmHeadW4Test : public ::testing::TestWithParam<bool> {
 protected:
  bool tied() const { return GetParam(); }
};

// The quantizer's lm_head (from the embedding when tied): kI4 with the build's group size, no
// act-order even with GPTQ's; RTN's values within half a step (and fp16's rounding of the
// scale) of the source's.
TEST_P(LmHeadW4Test, QuantizerWritesLmHeadAsW4WithoutActOrder) {
  ScopedTempDir dir("lm_head_src");
  const Checkpoint src = Synth(dir.path(), SmallLlama(tied()));
  const Weight* source = src.Find(tied() ? "model.embed_tokens.weight" : "lm_head.weight");
  ASSERT_NE(source, nullptr);
  const std::vector<float> values = DecodeF32(*source);
  std::vector<std::vector<int32_t>> calib;
  for (uint32_t s = 0; s < 3; ++s) calib.push_back(testing::RandomTokenIds(32, s, 399));
  for (W4Algorithm a : {W4Algorithm::kRtn, W4Algorithm::kGptq}) {
    SCOPED_TRACE(W4AlgorithmName(a));
    auto q = Quantize(src, a, true, calib);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    const QuantizedTensor* head = q->Find("lm_head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->dtype, DType::kI4);
    EXPECT_EQ(head->shape, Shape({400, 64}));
    ASSERT_TRUE(head->w4.has_value());
    EXPECT_EQ(head->w4->group_size, kGroup);
    EXPECT_TRUE(head->w4->perm.empty());
    // (the layers keep GPTQ's act-order)
    EXPECT_EQ(!q->Find("model.layers.0.self_attn.q_proj.weight")->w4->perm.empty(),
              a == W4Algorithm::kGptq);
    ASSERT_EQ(head->bytes.size(), 400u * 64 / 2);
    if (a == W4Algorithm::kGptq) continue;  // its error feedback moves values (next test)
    for (int64_t i = 0; i < 400 * 64; ++i) {
      const int code =
          i % 2 == 0 ? UnpackI4Low(head->bytes[i / 2]) : UnpackI4High(head->bytes[i / 2]);
      const int64_t g = (i / 64) * 2 + (i % 64) / kGroup;
      const double scale = F16ToF32(head->w4->scales[g]);
      const double value = (code - head->w4->zeros[g]) * scale;
      // Half a step, plus what the fp16 rounding of scale = (max - min) / 15 (relative 2^-11)
      // moves the group's extremes over 15 steps.
      ASSERT_LE(std::abs(value - values[i]), (0.5 + 16 * 0x1p-11) * scale) << "element " << i;
    }
  }
  // Without the option nothing else changes and there is no lm_head.
  auto plain = QuantizeRtn(src, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Find("lm_head.weight"), nullptr);
  EXPECT_EQ(plain->tensors.size() + 1, QuantizeRtn(src, true)->tensors.size());
}

// w4a16-gptq's and -awq's lm_head come from the final norm's outputs: on those inputs (observed
// here by a calibrator of our own) their output error is below RTN's. AWQ's effective weight is
// its dequantized one times the change of the final norm it folded 1/s into.
TEST_P(LmHeadW4Test, GptqAndAwqLmHeadsBeatRtnOnTheirCalibrationInputs) {
  ScopedTempDir dir("lm_head_src");
  const Checkpoint src = Synth(dir.path(), SmallLlama(tied()));
  std::vector<std::vector<int32_t>> calib;
  for (uint32_t s = 0; s < 4; ++s) calib.push_back(testing::RandomTokenIds(40, s, 399));
  W4Calibrator observed(2, /*gram=*/false, /*sample_stride=*/1, /*max_samples=*/1 << 20, 1,
                        /*lm_head=*/true);
  ASSERT_TRUE(RunCalibrationPass(src, calib, &observed, 1).ok());
  const W4SiteStats& x = observed.lm_head_stats();
  ASSERT_EQ(x.num_samples, 160);
  ASSERT_EQ(x.cols, 64);
  const std::vector<float> w =
      DecodeF32(*src.Find(tied() ? "model.embed_tokens.weight" : "lm_head.weight"));
  const std::vector<float> norm = DecodeF32(*src.Find("model.norm.weight"));
  auto output_error = [&](const QuantizedModel& q) {
    const QuantizedTensor& t = *q.Find("lm_head.weight");
    std::vector<float> column_factor(64, 1.0f);  // AWQ: new norm / old norm
    if (const QuantizedTensor* n = q.Find("model.norm.weight")) {
      const auto* folded = reinterpret_cast<const float*>(n->bytes.data());
      for (int64_t c = 0; c < 64; ++c) column_factor[c] = folded[c] / norm[c];
    }
    double e = 0;
    for (int64_t r = 0; r < 400; ++r) {
      std::vector<double> d(64);
      for (int64_t c = 0; c < 64; ++c) {
        const int64_t i = r * 64 + c;
        const int code = i % 2 == 0 ? UnpackI4Low(t.bytes[i / 2]) : UnpackI4High(t.bytes[i / 2]);
        const int64_t g = r * 2 + c / kGroup;
        const double wq = (code - t.w4->zeros[g]) * double{F16ToF32(t.w4->scales[g])};
        d[c] = w[i] - wq * column_factor[c];
      }
      for (int64_t m = 0; m < x.num_samples; ++m) {
        double y = 0;
        for (int64_t c = 0; c < 64; ++c) y += x.samples[m * 64 + c] * d[c];
        e += y * y;
      }
    }
    return e;
  };
  auto rtn = QuantizeRtn(src, true);
  ASSERT_TRUE(rtn.ok());
  EXPECT_EQ(rtn->Find("model.norm.weight"), nullptr);
  const double e_rtn = output_error(*rtn);
  for (W4Algorithm a : {W4Algorithm::kGptq, W4Algorithm::kAwq}) {
    auto q = Quantize(src, a, true, calib);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ(q->Find("model.norm.weight") != nullptr, a == W4Algorithm::kAwq);
    const double e = output_error(*q);
    std::printf("lm_head output error on the calibration inputs: %s %.4g, rtn %.4g\n",
                std::string(W4AlgorithmName(a)).c_str(), e, e_rtn);
    EXPECT_LT(e, 0.9 * e_rtn) << W4AlgorithmName(a);
  }
}

// The engine: untied config, the 16-bit embedding as stored, lm_head.weight kI4, the manifest's
// quantized_lm_head; its CPU logits are x . dequant(W4 lm_head)^T with x the final norm's output.
TEST_P(LmHeadW4Test, EngineRunsTheW4LmHeadOnTheCpu) {
  ScopedTempDir src_dir("lm_head_src"), out_dir("lm_head_engine"), probe_dir("lm_head_probe");
  const Checkpoint src = Synth(src_dir.path(), SmallLlama(tied()));
  auto q = QuantizeRtn(src, true);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_TRUE(Build(src, *q, out_dir.path()).ok());
  const Checkpoint engine = Open(out_dir.path());
  EXPECT_FALSE(engine.config().tie_word_embeddings);
  ASSERT_TRUE(engine.engine().has_value());
  EXPECT_TRUE(engine.engine()->quantized_lm_head);
  auto manifest = ParseEngineManifest(ReadFile(out_dir.file("kiln-engine.json")), "m");
  ASSERT_TRUE(manifest.ok());
  EXPECT_TRUE(manifest->quantized_lm_head);
  const Weight* head = engine.Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  ASSERT_EQ(head->dtype, DType::kI4);
  ASSERT_TRUE(head->w4.has_value());
  EXPECT_EQ(head->w4->group_size, kGroup);
  EXPECT_TRUE(head->w4->perm.empty());
  const Weight* embedding = engine.Find("model.embed_tokens.weight");
  const Weight* src_embedding = src.Find("model.embed_tokens.weight");
  ASSERT_EQ(embedding->dtype, DType::kBF16);
  ASSERT_EQ(embedding->nbytes, src_embedding->nbytes);
  EXPECT_EQ(std::memcmp(embedding->data, src_embedding->data, embedding->nbytes), 0);

  // The probe: the same engine with an f32 lm_head whose first 64 rows are the identity and the
  // rest zero, so that logit i < 64 is x_i and every other logit is 0: x_i = lp_i - lp_399.
  const int64_t vocab = 400, hidden = 64;
  QuantizedModel probe = *q;
  QuantizedTensor* probe_head = nullptr;
  for (QuantizedTensor& t : probe.tensors) {
    if (t.name == "lm_head.weight") probe_head = &t;
  }
  ASSERT_NE(probe_head, nullptr);
  std::vector<float> identity(vocab * hidden, 0.0f);
  for (int64_t i = 0; i < hidden; ++i) identity[i * hidden + i] = 1.0f;
  *probe_head = QuantizedTensor{"lm_head.weight", DType::kF32, Shape({vocab, hidden}), {}, {}, {}};
  probe_head->bytes.resize(identity.size() * sizeof(float));
  std::memcpy(probe_head->bytes.data(), identity.data(), probe_head->bytes.size());
  ASSERT_TRUE(Build(src, probe, probe_dir.path()).ok());
  const Checkpoint probe_engine = Open(probe_dir.path());
  EXPECT_FALSE(probe_engine.engine()->quantized_lm_head);

  const std::vector<int32_t> tokens = testing::RandomTokenIds(23, 7, 399);
  const std::vector<float> lp = NextTokenLogprobs(engine, tokens);
  const std::vector<float> lp_probe = NextTokenLogprobs(probe_engine, tokens);
  std::vector<double> x(hidden);
  double x_err = 0;  // |error| of each recovered x_i: two f32 roundings of a logprob
  for (int64_t i = 0; i < hidden; ++i) {
    x[i] = double{lp_probe[i]} - lp_probe[vocab - 1];
    x_err = std::max(x_err, 0x1p-24 * (std::abs(lp_probe[i]) + std::abs(lp_probe[vocab - 1])));
  }
  // Logit differences against token 0 (log-softmax's constant cancels). Bound: the CPU's f32 dot
  // products of k = 64 terms, each value (code - zero) * scale exact in f32, err <= (k + 1) u
  // sum |x_i w_i| per logit (u = 2^-24, any summation order); x's error times sum |w|; and
  // one f32 rounding of each of the two logprobs.
  double max_ratio = 0;
  std::vector<double> logit(vocab), abs_sum(vocab), w_sum(vocab);
  for (int64_t r = 0; r < vocab; ++r) {
    for (int64_t c = 0; c < hidden; ++c) {
      const double w = W4Value(*head, r, c);
      logit[r] += x[c] * w;
      abs_sum[r] += std::abs(x[c] * w);
      w_sum[r] += std::abs(w);
    }
  }
  for (int64_t r = 1; r < vocab; ++r) {
    const double want = logit[r] - logit[0];
    const double got = double{lp[r]} - lp[0];
    const double bound = 65 * 0x1p-24 * (abs_sum[r] + abs_sum[0]) + x_err * (w_sum[r] + w_sum[0]) +
                         0x1p-24 * (std::abs(lp[r]) + std::abs(lp[0]));
    ASSERT_LE(std::abs(got - want), bound) << "token " << r << ": " << got << " vs " << want;
    max_ratio = std::max(max_ratio, std::abs(got - want) / bound);
  }
  std::printf("logit differences: worst error %.2f of the bound\n", max_ratio);
}

INSTANTIATE_TEST_SUITE_P(Tied, LmHeadW4Test, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Tied" : "Untied";
                         });

// A vocab that is not a multiple of 16 is refused before any work, naming lm_head and its shape.
TEST(LmHeadW4ErrorTest, VocabNotAMultipleOf16IsRefused) {
  ScopedTempDir dir("lm_head_vocab");
  const Checkpoint src = Synth(dir.path(), SmallLlama(/*tied=*/true, /*vocab=*/408));
  auto q = QuantizeRtn(src, true);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("lm_head"), std::string::npos) << q.status().ToString();
  EXPECT_NE(q.status().message().find("[408, 64]"), std::string::npos) << q.status().ToString();
  EXPECT_TRUE(QuantizeRtn(src, false).ok());
}

// The manifest's flag must agree with the tensor; engines without the field load as before.
TEST(LmHeadW4ErrorTest, ManifestFlagMustMatchTheTensor) {
  ScopedTempDir src_dir("lm_head_src"), out_dir("lm_head_engine");
  const Checkpoint src = Synth(src_dir.path(), SmallLlama(/*tied=*/false));
  auto q = QuantizeRtn(src, false);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(Build(src, *q, out_dir.path()).ok());
  const std::string path = out_dir.file("kiln-engine.json");
  const std::string good = ReadFile(path);
  EXPECT_EQ(good.find("quantized_lm_head"), std::string::npos);  // absent when false
  EXPECT_FALSE(Open(out_dir.path()).engine()->quantized_lm_head);
  std::string lying = good;
  lying.replace(lying.find("\"quant_recipe\""), 14,
                "\"quantized_lm_head\": true, \"quant_recipe\"");
  std::ofstream(path, std::ios::trunc) << lying;
  const Status s = Checkpoint::Open(out_dir.path()).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("quantized_lm_head"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace kiln
