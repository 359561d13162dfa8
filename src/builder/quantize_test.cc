// INT8 SmoothQuant (builder/quantize.h) end to end on synthetic bf16 models: calibrate,
// quantize, export as a compressed-tensors int8 checkpoint (quantized_checkpoint.h), open it with
// Checkpoint::Open and run it on the CPU runner against the unquantized model. Also the
// smoothing factors, the exactness of the folding, and the int8 checkpoint's error cases.
#include "builder/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "builder/calibration.h"
#include "builder/quantize_test_util.h"
#include "builder/quantized_checkpoint.h"
#include "model/dequant.h"
#include "model/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Site = ActivationObserver::Site;

// A synthetic bf16 model; `outlier` multiplies input_layernorm's weight of channel 5 and
// post_attention_layernorm's of channel 9 in every layer, giving the activation outlier
// channels SmoothQuant exists for.
std::string SynthModel(const std::string& stem, float outlier, bool mlp_bias = false) {
  const std::string dir = testing::WriteTinySynthModel(stem, 7, mlp_bias);
  if (outlier != 1.0f) {
    // Rewrite the norm weights in place (bf16 in model.safetensors): 1 everywhere, the outlier
    // channel `outlier`.
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok());
    for (const Weight& w : ckpt->weights()) {
      const bool in = w.name.ends_with("input_layernorm.weight");
      const bool post = w.name.ends_with("post_attention_layernorm.weight");
      if (!in && !post) continue;
      EXPECT_EQ(w.dtype, DType::kBF16);
      std::vector<uint16_t> values(w.shape.numel(), F32ToBF16(1.0f));
      values[in ? 5 : 9] = F32ToBF16(outlier);
      std::fstream f(w.file, std::ios::in | std::ios::out | std::ios::binary);
      // The tensor's offset in its file, from the safetensors header.
      std::ifstream in_file(w.file, std::ios::binary);
      uint64_t header = 0;
      in_file.read(reinterpret_cast<char*>(&header), 8);
      std::string head(header, '\0');
      in_file.read(head.data(), header);
      const json j = json::parse(head);
      const int64_t begin =
          8 + static_cast<int64_t>(header) + j[w.source_name]["data_offsets"][0].get<int64_t>();
      f.seekp(begin);
      f.write(reinterpret_cast<const char*>(values.data()), values.size() * 2);
    }
  }
  return dir;
}

CalibrationStats CalibrateOn(const Checkpoint& ckpt) {
  std::vector<std::vector<int32_t>> samples;
  for (uint32_t s = 0; s < 4; ++s) samples.push_back(testing::RandomTokenIds(48, 100 + s, 299));
  CalibrationOptions options;
  options.num_threads = 1;
  auto stats = CalibrateSamples(ckpt, samples, options);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  return std::move(stats).value();
}

std::string Export(const Checkpoint& src, const QuantizedModel& q, const std::string& stem) {
  const std::string dir = testing::MakeTempDir(stem);
  fs::remove_all(dir);
  const Status s = WriteCompressedTensorsCheckpoint(src, q, dir, /*max_shard_bytes=*/64 << 10);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

// The logprob of every next token of `tokens` (one prefill), with the options.
std::vector<float> PromptLogprobs(const std::string& dir, const std::vector<int32_t>& tokens,
                                  CpuRunnerOptions options = {}, int chunk = 0) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  options.num_threads = options.num_threads == 0 ? 1 : options.num_threads;
  auto runner = CreateCpuRunner(*ckpt, options);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  constexpr int32_t kBlock = 4;
  const int32_t n = static_cast<int32_t>(tokens.size());
  EXPECT_TRUE((*runner)->AllocateKvCache((n + kBlock - 1) / kBlock, kBlock).ok());
  std::vector<float> out;
  if (chunk == 0) chunk = n;
  for (int32_t done = 0; done < n;) {
    const int32_t take = std::min(chunk, n - done);
    StepInputs in = SingleSequenceStep(tokens, done, done + take, kBlock);
    StepSequence& seq = in.seqs[0];
    const int32_t targets = std::min(take, n - 1 - done);
    seq.prompt_logprob_targets = std::span<const int32_t>(tokens.data() + done + 1, targets);
    const StepResult r = (*runner)->Execute(in);
    for (const ScoredToken& t : r.seqs[0].prompt_logprobs) out.push_back(t.logprob);
    done += take;
  }
  return out;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double{std::abs(a[i] - b[i])});
  return m;
}

TEST(SmoothingFactorsTest, BalancesMaximaClampsAndLeavesDeadChannels) {
  const std::vector<float> a = {16.0f, 1.0f, 0.0f, 4.0f, 1e12f};
  const std::vector<float> w = {1.0f, 4.0f, 2.0f, 0.0f, 1e-12f};
  const std::vector<float> s = SmoothingFactors(a, w, 0.5f);
  EXPECT_FLOAT_EQ(s[0], 4.0f);  // sqrt(16) / sqrt(1): both maxima become 4
  EXPECT_FLOAT_EQ(s[1], 0.5f);  // sqrt(1) / sqrt(4)
  EXPECT_EQ(s[2], 1.0f);        // a dead activation channel
  EXPECT_EQ(s[3], 1.0f);        // a dead weight column
  EXPECT_EQ(s[4], 1e5f);        // clamped
  EXPECT_EQ(SmoothingFactors(a, w, 0.0f), std::vector<float>(5, 1.0f));
  const std::vector<float> s1 = SmoothingFactors(a, w, 1.0f);
  EXPECT_FLOAT_EQ(s1[0], 16.0f);  // alpha 1: all of the activation's range moves
}

// Folding is exact before rounding: norm'[j] * W'[r, j] = norm[j] * W[r, j], so dequantized
// it agrees within half a step of W' row r times norm'[j]; and the outlier channel's maximum
// is divided by s.
TEST(SmoothQuantTest, FoldsTheFactorsIntoTheNormsAndWeights) {
  const std::string dir = SynthModel("sq_fold", 30.0f);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  EXPECT_GT(stats.layers[0].channel_absmax[0][5], 5 * stats.layers[0].channel_absmax[0][6]);
  auto q = QuantizeInt8SmoothQuant(*ckpt, stats, {});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->method, QuantMethod::kInt8);
  EXPECT_EQ(q->tensors.size(), 2u * 9u);
  ASSERT_EQ(q->kv_scales.size(), 2u);
  EXPECT_EQ(q->kv_scales[0].k_scale, stats.KvScales()[0].k_scale);

  auto f32 = [&](const std::string& name) {
    const Weight* w = ckpt->Find(name);
    std::vector<float> v(w->shape.numel());
    EXPECT_TRUE(DequantizeToF32(w->dtype, w->data, w->nbytes, v.size(), v.data()).ok());
    return v;
  };
  const int64_t hidden = ckpt->config().hidden_size;
  for (const char* proj : {"self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj"}) {
    const bool attn = std::string(proj).starts_with("self_attn");
    const std::string norm = std::string("model.layers.1.") +
                             (attn ? "input_layernorm" : "post_attention_layernorm") + ".weight";
    const std::vector<float> n0 = f32(norm),
                             w0 = f32(std::string("model.layers.1.") + proj + ".weight");
    const QuantizedTensor* nq = q->Find(norm);
    const QuantizedTensor* wq = q->Find(std::string("model.layers.1.") + proj + ".weight");
    ASSERT_NE(nq, nullptr);
    ASSERT_NE(wq, nullptr);
    ASSERT_EQ(wq->dtype, DType::kI8);
    const auto* n1 = reinterpret_cast<const float*>(nq->bytes.data());
    const auto* codes = reinterpret_cast<const int8_t*>(wq->bytes.data());
    const int64_t rows = wq->shape[0];
    ASSERT_EQ(wq->row_scales.size(), static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < hidden; ++j) {
        const double want = double{n0[j]} * w0[r * hidden + j];
        const double got = double{n1[j]} * codes[r * hidden + j] * wq->row_scales[r];
        ASSERT_LE(std::abs(got - want), std::abs(n1[j]) * wq->row_scales[r] * 0.5001 + 1e-9)
            << proj << " row " << r << " col " << j;
      }
    }
    // The outlier channel (5 for attention, 9 for the MLP) is scaled down the most.
    const int outlier = attn ? 5 : 9;
    EXPECT_LT(n1[outlier] / n0[outlier], n1[outlier == 5 ? 6 : 10] / n0[outlier == 5 ? 6 : 10]);
  }
  // alpha 0: nothing smoothed, the norms are the originals.
  auto plain = QuantizeInt8SmoothQuant(*ckpt, stats, {0.0f});
  ASSERT_TRUE(plain.ok());
  const QuantizedTensor* n = plain->Find("model.layers.0.input_layernorm.weight");
  EXPECT_EQ(std::vector<float>(reinterpret_cast<const float*>(n->bytes.data()),
                               reinterpret_cast<const float*>(n->bytes.data()) + hidden),
            f32("model.layers.0.input_layernorm.weight"));
}

// The exported checkpoint opens as INT8 and runs; its logprobs stay near the unquantized
// model's, and with outlier channels SmoothQuant (alpha 0.5) is closer than plain INT8.
TEST(SmoothQuantTest, ExportedCheckpointRunsNearTheUnquantizedModel) {
  const std::string dir = SynthModel("sq_e2e", 30.0f, /*mlp_bias=*/true);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  auto sq = QuantizeInt8SmoothQuant(*ckpt, stats, {0.5f});
  auto plain = QuantizeInt8SmoothQuant(*ckpt, stats, {0.0f});
  ASSERT_TRUE(sq.ok() && plain.ok());
  ASSERT_NE(sq->Find("model.layers.0.mlp.up_proj.bias"), nullptr);
  const std::string sq_dir = Export(*ckpt, *sq, "sq_e2e_sq");
  const std::string plain_dir = Export(*ckpt, *plain, "sq_e2e_plain");
  EXPECT_TRUE(fs::exists(sq_dir + "/model.safetensors.index.json"));  // several shards
  EXPECT_TRUE(fs::exists(sq_dir + "/tokenizer.json"));

  auto opened = Checkpoint::Open(sq_dir);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->quantization().method, QuantMethod::kInt8);
  EXPECT_EQ(opened->quantization().format, "compressed-tensors");
  EXPECT_TRUE(opened->quantization().per_channel);
  const Weight* w = opened->Find("model.layers.1.mlp.down_proj.weight");
  ASSERT_EQ(w->dtype, DType::kI8);
  EXPECT_EQ(w->row_scales, sq->Find("model.layers.1.mlp.down_proj.weight")->row_scales);
  ASSERT_EQ(opened->kv_cache_scales().size(), 2u);
  EXPECT_EQ(opened->kv_cache_scales()[1].v_scale, stats.KvScales()[1].v_scale);

  const std::vector<int32_t> tokens = testing::RandomTokenIds(40, 9, 299);
  const std::vector<float> ref = PromptLogprobs(dir, tokens);
  const std::vector<float> got_sq = PromptLogprobs(sq_dir, tokens);
  const std::vector<float> got_plain = PromptLogprobs(plain_dir, tokens);
  const double err_sq = MaxAbsDiff(got_sq, ref), err_plain = MaxAbsDiff(got_plain, ref);
  std::printf("max |dlogprob| vs bf16: int8-sq %.4f, int8 without smoothing %.4f\n", err_sq,
              err_plain);
  EXPECT_GT(err_sq, 0.0);  // quantized: not the same model
  EXPECT_LT(err_sq, 0.5);
  EXPECT_LT(err_sq, err_plain);

  // The CPU backend's invariants hold: chunked prefill bitwise equals the whole, threads do not
  // matter, --quantization fp8 does not requantize int8 weights, f32-at-load changes nothing.
  CpuRunnerOptions two;
  two.num_threads = 2;
  EXPECT_EQ(PromptLogprobs(sq_dir, tokens, two, 7), got_sq);
  CpuRunnerOptions fp8;
  fp8.quantization = QuantMethod::kFp8;
  fp8.dequantize_weights_at_load = true;
  EXPECT_EQ(PromptLogprobs(sq_dir, tokens, fp8), got_sq);
  // The calibrated FP8 KV cache runs and changes the result by the cache's rounding only.
  CpuRunnerOptions kv;
  kv.kv_cache_dtype = KvCacheDType::kFp8E4M3;
  const double err_kv = MaxAbsDiff(PromptLogprobs(sq_dir, tokens, kv), got_sq);
  EXPECT_GT(err_kv, 0.0);
  EXPECT_LT(err_kv, 0.5);
}

TEST(Int8CheckpointTest, MalformedAndUnsupportedVariantsSayWhat) {
  const std::string dir = SynthModel("sq_bad_src", 1.0f);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  auto q = QuantizeInt8SmoothQuant(*ckpt, stats, {});
  ASSERT_TRUE(q.ok());

  auto open_with = [&](const std::string& stem, auto edit) {
    const std::string out = Export(*ckpt, *q, stem);
    std::ifstream in(out + "/config.json");
    json config = json::parse(in);
    edit(config);
    EXPECT_TRUE(WriteTextFile(out + "/config.json", config.dump(2)).ok());
    return Checkpoint::Open(out);
  };
  auto asym = open_with("sq_bad_asym", [](json& c) {
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  });
  ASSERT_FALSE(asym.ok());
  EXPECT_EQ(asym.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(asym.status().message().find("asymmetric"), std::string::npos);
  auto group = open_with("sq_bad_group", [](json& c) {
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  });
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("strategy 'group'"), std::string::npos);
  auto four = open_with("sq_bad_bits", [](json& c) {
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  });
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().message().find("num_bits 4"), std::string::npos);
  // int8 weights declared as FP8: refused by dtype, naming the format that would carry them.
  auto as_fp8 = open_with("sq_bad_fp8", [](json& c) {
    c["quantization_config"] = json::parse(testing::CompressedTensorsFp8Config());
  });
  ASSERT_FALSE(as_fp8.ok());
  EXPECT_NE(as_fp8.status().message().find("has dtype i8"), std::string::npos)
      << as_fp8.status().ToString();
  // No quantization_config at all: int8 weights are refused by dtype.
  auto none = open_with("sq_bad_none", [](json& c) { c.erase("quantization_config"); });
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(none.status().message().find("int-quantized"), std::string::npos);

  // A quantized source is refused; so are bad options and mismatched statistics.
  const std::string out = Export(*ckpt, *q, "sq_requant");
  auto again = Checkpoint::Open(out);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(QuantizeInt8SmoothQuant(*again, stats, {}).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(QuantizeInt8SmoothQuant(*ckpt, stats, {1.5f}).status().code(),
            StatusCode::kInvalidArgument);
  CalibrationStats short_stats = stats;
  short_stats.layers.pop_back();
  EXPECT_EQ(QuantizeInt8SmoothQuant(*ckpt, short_stats, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(WriteCompressedTensorsCheckpoint(*ckpt, *q, out).ok());  // not empty
}

}  // namespace
}  // namespace kiln
