// INT8 SmoothQuant (builder/quantize.h) end to end on synthetic bf16 models: calibrate,
// quantize, export as a compressed-tensors int8 checkpoint (quantized_checkpoint.h), open it with
// Checkpoint::Open and run it on the CPU runner against the unquantized model. Also the
// smoothing factors, the exactness of the folding, and the int8 checkpoint's error cases.
// Calibrated FP8 (QuantizeFp8Calibrated: static activation scales, smoothing) written as
// engines, on the synthetic models and (with KILN_DEFAULT_MODEL) the default GGUF model.
#include "builder/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "builder/calibration.h"
#include "builder/engine_writer.h"
#include "builder/quantize_test_util.h"
#include "builder/quantized_checkpoint.h"
#include "engine/tokenizer_loader.h"
#include "model/dequant.h"
#include "model/engine_dir.h"
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

// ---- Calibrated FP8 --------------------------------------------------------------------------

// The f32 values of a weight of `ckpt`.
std::vector<float> F32Of(const Checkpoint& ckpt, const std::string& name) {
  const Weight* w = ckpt.Find(name);
  EXPECT_NE(w, nullptr) << name;
  std::vector<float> v(w->shape.numel());
  EXPECT_TRUE(DequantizeToF32(w->dtype, w->data, w->nbytes, v.size(), v.data()).ok());
  return v;
}

// Writes `q` (or, null, the source alone) as an engine with f32 unquantized matrices.
std::string WriteEngineOf(const Checkpoint& src, const QuantizedModel* q, QuantMethod method,
                          const std::string& stem, DType dtype = DType::kF32,
                          std::vector<int> unquantized_layers = {}) {
  const std::string dir = testing::MakeTempDir(stem);
  EngineBuildOptions o;
  o.unquantized_layers = std::move(unquantized_layers);
  o.out_dir = dir;
  o.overwrite = true;
  o.dtype = dtype;
  o.quantization = method;
  o.quant_recipe = std::string(QuantMethodName(method));
  o.threads = 1;
  const Status s = WriteEngine(src, q, o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

// Each decoder layer's linear weights and the calibration site of their input.
struct LinearSite {
  const char* name;
  Site site;
};
constexpr LinearSite kLinearSites[] = {
    {"self_attn.q_proj.weight", Site::kQkv}, {"self_attn.k_proj.weight", Site::kQkv},
    {"self_attn.v_proj.weight", Site::kQkv}, {"self_attn.o_proj.weight", Site::kO},
    {"mlp.gate_proj.weight", Site::kGateUp}, {"mlp.up_proj.weight", Site::kGateUp},
    {"mlp.down_proj.weight", Site::kDown}};

// The "input_scale" of every tensor in an engine's manifest (absent: 0), by name.
std::map<std::string, float> ManifestInputScales(const std::string& engine_dir) {
  std::ifstream in(engine_dir + "/kiln-engine.json");
  const json m = json::parse(in);
  std::map<std::string, float> out;
  for (const json& t : m["weights"]["tensors"]) {
    out[t["name"].get<std::string>()] = t.value("input_scale", 0.0f);
  }
  return out;
}

// Without smoothing, the static scales are Fp8RowScale of each site's calibrated per-tensor
// maximum (q|k|v and gate|up sharing theirs), carried exactly through the engine's manifest to
// Weight::input_scale; the weights are WriteEngine's own FP8 quantization bitwise; and the CPU
// runs them: the result moves off the dynamic engine's, stays near bf16, and keeps the
// backend's invariants (chunks, threads).
TEST(Fp8CalibratedTest, StaticScalesAreTheCalibratedMaximaAndRunOnTheCpu) {
  const std::string dir = SynthModel("fp8_static", 1.0f);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  auto q = QuantizeFp8Calibrated(*ckpt, stats, {0.0f, true});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->method, QuantMethod::kFp8);
  const std::string static_dir = WriteEngineOf(*ckpt, &*q, QuantMethod::kFp8, "fp8_static_eng");
  const std::string dynamic_dir = WriteEngineOf(*ckpt, nullptr, QuantMethod::kFp8, "fp8_dyn_eng");
  auto engine = Checkpoint::Open(static_dir);
  auto dynamic = Checkpoint::Open(dynamic_dir);
  ASSERT_TRUE(engine.ok() && dynamic.ok()) << engine.status().ToString();
  EXPECT_TRUE(engine->quantization().static_activations);
  EXPECT_FALSE(dynamic->quantization().static_activations);
  const std::map<std::string, float> manifest = ManifestInputScales(static_dir);
  int checked = 0;
  for (int i = 0; i < ckpt->config().num_layers; ++i) {
    for (const LinearSite& l : kLinearSites) {
      const std::string name = "model.layers." + std::to_string(i) + "." + l.name;
      const float want = Fp8RowScale(stats.layers[i].tensor_absmax[static_cast<int>(l.site)]);
      EXPECT_GT(stats.layers[i].tensor_absmax[static_cast<int>(l.site)], 0.0f);
      EXPECT_EQ(q->Find(name)->input_scale, want) << name;
      EXPECT_EQ(manifest.at(name), want) << name;
      const Weight* w = engine->Find(name);
      const Weight* d = dynamic->Find(name);
      ASSERT_EQ(w->dtype, DType::kF8E4M3);
      EXPECT_EQ(w->input_scale, want) << name;
      EXPECT_EQ(d->input_scale, 0.0f) << name;
      EXPECT_EQ(w->row_scales, d->row_scales) << name;
      EXPECT_EQ(std::memcmp(w->data, d->data, w->nbytes), 0) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 7);
  EXPECT_EQ(ManifestInputScales(dynamic_dir).at("model.layers.0.mlp.down_proj.weight"), 0.0f);

  const std::vector<int32_t> tokens = testing::RandomTokenIds(40, 9, 299);
  const std::vector<float> ref = PromptLogprobs(dir, tokens);
  const std::vector<float> got = PromptLogprobs(static_dir, tokens);
  const double vs_dynamic = MaxAbsDiff(got, PromptLogprobs(dynamic_dir, tokens));
  const double vs_bf16 = MaxAbsDiff(got, ref);
  std::printf("static fp8 engine: max |dlogprob| %.4f vs the dynamic one, %.4f vs bf16\n",
              vs_dynamic, vs_bf16);
  EXPECT_GT(vs_dynamic, 0.0) << "the static scales changed nothing";
  EXPECT_LT(vs_bf16, 0.5);
  CpuRunnerOptions two;
  two.num_threads = 2;
  EXPECT_EQ(PromptLogprobs(static_dir, tokens, two, 7), got);

  // A manifest's input_scale must be positive, finite, and on an e4m3 tensor.
  const std::string manifest_path = static_dir + "/kiln-engine.json";
  std::ifstream in(manifest_path);
  const json original = json::parse(in);
  for (const auto& [index, value] : {std::pair<int, float>{-1, -0.5f}, {0, 0.5f}}) {
    json m = original;
    for (json& t : m["weights"]["tensors"]) {
      const bool fp8 = t["dtype"] == "fp8_e4m3";
      if ((index < 0 && fp8) || (index == 0 && !fp8)) {
        t["input_scale"] = value;
        break;
      }
    }
    ASSERT_TRUE(WriteTextFile(manifest_path, m.dump(1)).ok());
    auto bad = Checkpoint::Open(static_dir);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(bad.status().message().find("input_scale must be a finite number > 0"),
              std::string::npos)
        << bad.status().ToString();
  }
}

// SmoothQuant's folding keeps the model: the f32 folded engine runs within float rounding of the
// source. Smoothed then quantized to e4m3, each weight dequantized times its norm is the
// original product within half an e4m3 ulp; the static scales are those of the smoothed inputs
// (max_j a_j / s_j; o_proj's unsmoothed); the engine runs near bf16.
TEST(Fp8CalibratedTest, SmoothedEngineIsTheSameModelQuantized) {
  const std::string dir = SynthModel("fp8_smooth", 30.0f, /*mlp_bias=*/true);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  auto fold = SmoothQuantFold(*ckpt, stats, 0.5f);
  ASSERT_TRUE(fold.ok()) << fold.status().ToString();
  EXPECT_EQ(fold->Find("model.layers.0.self_attn.q_proj.weight")->dtype, DType::kF32);
  const std::vector<int32_t> tokens = testing::RandomTokenIds(40, 9, 299);
  const std::vector<float> ref = PromptLogprobs(dir, tokens);
  const std::string folded = WriteEngineOf(*ckpt, &*fold, QuantMethod::kNone, "fp8_fold_eng");
  const double fold_err = MaxAbsDiff(PromptLogprobs(folded, tokens), ref);
  std::printf("smoothed (alpha 0.5) f32 engine vs the source: max |dlogprob| %.3g\n", fold_err);
  EXPECT_LT(fold_err, 1e-4);

  auto q = QuantizeFp8Calibrated(*ckpt, stats, {0.5f, true});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const int64_t hidden = ckpt->config().hidden_size;
  const std::string p = "model.layers.1.";
  const std::vector<float> n0 = F32Of(*ckpt, p + "input_layernorm.weight");
  const auto* n1 =
      reinterpret_cast<const float*>(q->Find(p + "input_layernorm.weight")->bytes.data());
  std::vector<float> w_absmax(hidden, 0.0f);
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const std::vector<float> w0 = F32Of(*ckpt, p + "self_attn." + proj + ".weight");
    const QuantizedTensor* wq = q->Find(p + "self_attn." + proj + ".weight");
    ASSERT_EQ(wq->dtype, DType::kF8E4M3);
    for (int64_t r = 0; r < wq->shape[0]; ++r) {
      for (int64_t j = 0; j < hidden; ++j) {
        w_absmax[j] = std::max(w_absmax[j], std::abs(w0[r * hidden + j]));
        const double want = double{n0[j]} * w0[r * hidden + j];
        const double got =
            double{n1[j]} * F8E4M3ToF32(wq->bytes[r * hidden + j]) * wq->row_scales[r];
        ASSERT_LE(std::abs(got - want),
                  std::abs(want) * 0.0626 + std::abs(n1[j]) * wq->row_scales[r] * 0x1p-10)
            << proj << " row " << r << " col " << j;
      }
    }
  }
  const std::vector<float>& a = stats.layers[1].channel_absmax[static_cast<int>(Site::kQkv)];
  const std::vector<float> s = SmoothingFactors(a, w_absmax, 0.5f);
  float smoothed = 0;
  for (int64_t j = 0; j < hidden; ++j) smoothed = std::max(smoothed, a[j] / s[j]);
  EXPECT_LT(smoothed, stats.layers[1].tensor_absmax[static_cast<int>(Site::kQkv)]);
  EXPECT_EQ(q->Find(p + "self_attn.k_proj.weight")->input_scale, Fp8RowScale(smoothed));
  EXPECT_EQ(q->Find(p + "self_attn.o_proj.weight")->input_scale,
            Fp8RowScale(stats.layers[1].tensor_absmax[static_cast<int>(Site::kO)]));

  const std::string smoothed_dir = WriteEngineOf(*ckpt, &*q, QuantMethod::kFp8, "fp8_sq_eng");
  auto plain = QuantizeFp8Calibrated(*ckpt, stats, {0.0f, true});
  ASSERT_TRUE(plain.ok());
  const std::string plain_dir = WriteEngineOf(*ckpt, &*plain, QuantMethod::kFp8, "fp8_pl_eng");
  const double err_sq = MaxAbsDiff(PromptLogprobs(smoothed_dir, tokens), ref);
  const double err_plain = MaxAbsDiff(PromptLogprobs(plain_dir, tokens), ref);
  std::printf("static fp8 vs bf16 with outlier channels: smoothed %.4f, not smoothed %.4f\n",
              err_sq, err_plain);
  EXPECT_GT(err_sq, 0.0);
  EXPECT_LT(err_sq, 0.5);
  // Bad options and a quantized source are refused as for INT8.
  EXPECT_EQ(QuantizeFp8Calibrated(*ckpt, stats, {1.5f, false}).status().code(),
            StatusCode::kInvalidArgument);
  auto engine = Checkpoint::Open(smoothed_dir);
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ(QuantizeFp8Calibrated(*engine, stats, {}).status().code(), StatusCode::kUnsupported);
}

// EngineBuildOptions::unquantized_layers: the layer is the source's, every tensor of it (a
// smoothed layer's norms too, no static scales), whether WriteEngine quantizes (plain fp8) or a
// quantizer did; the manifest says which layers; the engine runs, and its other layers are
// those of the fully quantized engine. A layer outside the model is refused.
TEST(Fp8CalibratedTest, UnquantizedLayersAreWrittenAsTheSource) {
  const std::string dir = SynthModel("fp8_keep", 30.0f);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const CalibrationStats stats = CalibrateOn(*ckpt);
  auto q = QuantizeFp8Calibrated(*ckpt, stats, {0.5f, true});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const std::string full = WriteEngineOf(*ckpt, &*q, QuantMethod::kFp8, "fp8_keep_full");
  const std::string plain =
      WriteEngineOf(*ckpt, nullptr, QuantMethod::kFp8, "fp8_keep_plain", DType::kF32, {1});
  const std::string smoothed =
      WriteEngineOf(*ckpt, &*q, QuantMethod::kFp8, "fp8_keep_sq", DType::kF32, {1});
  auto full_engine = Checkpoint::Open(full);
  ASSERT_TRUE(full_engine.ok());
  for (const std::string& engine_dir : {plain, smoothed}) {
    auto engine = Checkpoint::Open(engine_dir);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (const Weight& w : engine->weights()) {
      if (!w.name.starts_with("model.layers.1.")) continue;
      EXPECT_EQ(w.dtype, DType::kF32) << w.name;
      EXPECT_EQ(w.input_scale, 0.0f) << w.name;
      EXPECT_EQ(std::vector<float>(reinterpret_cast<const float*>(w.data),
                                   reinterpret_cast<const float*>(w.data) + w.shape.numel()),
                F32Of(*ckpt, w.name))
          << w.name;
    }
    const Weight* down0 = engine->Find("model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(down0->dtype, DType::kF8E4M3);
    std::ifstream in(engine_dir + "/kiln-engine.json");
    EXPECT_EQ(json::parse(in)["build"]["details"]["unquantized_layers"], json::array({1}));
    EXPECT_EQ(PromptLogprobs(engine_dir, testing::RandomTokenIds(20, 3, 299)).size(), 19u);
  }
  auto smoothed_engine = Checkpoint::Open(smoothed);
  ASSERT_TRUE(smoothed_engine.ok());
  const Weight* a = smoothed_engine->Find("model.layers.0.self_attn.q_proj.weight");
  const Weight* b = full_engine->Find("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(a->input_scale, b->input_scale);
  EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0);

  EngineBuildOptions bad;
  bad.out_dir = testing::MakeTempDir("fp8_keep_bad");
  bad.quantization = QuantMethod::kFp8;
  bad.unquantized_layers = {2};
  const Status s = WriteEngine(*ckpt, nullptr, bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 2 is not one of the model's 2"), std::string::npos)
      << s.ToString();
}

// The default model (a GGUF file, q/k rows permuted by llama.cpp): a static FP8 engine from a
// short calibration stores Fp8RowScale(calibrated maximum) for every linear weight of every
// layer, and runs on the CPU near the unquantized model and off the dynamic FP8 one.
TEST(Fp8CalibratedModelTest, DefaultGgufModelStaticEngine) {
  const char* model = std::getenv("KILN_DEFAULT_MODEL");
  if (model == nullptr) GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set (scripts/test sets it)";
  auto ckpt = Checkpoint::Open(model);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto tok = LoadTokenizer(model);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<std::string> texts = {
      "The printing press spread across Europe within fifty years of its invention, and with it "
      "came cheaper books, wider literacy and a flood of pamphlets, sermons and news sheets. "
      "Scholars could compare identical copies of a text for the first time, which changed how "
      "knowledge was checked, corrected and passed on from one generation to the next."};
  auto samples = MakeCalibrationSamples(*tok->tokenizer, texts, 2, 32);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  CalibrationOptions options;
  options.num_threads = 2;
  auto stats = CalibrateSamples(*ckpt, *samples, options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  auto q = QuantizeFp8Calibrated(*ckpt, *stats, {0.0f, true});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const std::string dir =
      WriteEngineOf(*ckpt, &*q, QuantMethod::kFp8, "fp8_default_eng", DType::kF16);
  const std::map<std::string, float> manifest = ManifestInputScales(dir);
  auto engine = Checkpoint::Open(dir);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int checked = 0;
  for (int i = 0; i < ckpt->config().num_layers; ++i) {
    for (const LinearSite& l : kLinearSites) {
      const std::string name = "model.layers." + std::to_string(i) + "." + l.name;
      const float want = Fp8RowScale(stats->layers[i].tensor_absmax[static_cast<int>(l.site)]);
      EXPECT_EQ(manifest.at(name), want) << name;
      EXPECT_EQ(engine->Find(name)->input_scale, want) << name;
      checked += want > kFp8MinScale;
    }
  }
  EXPECT_EQ(checked, 30 * 7);

  const std::vector<int32_t> ids = tok->tokenizer->Encode(
      "Water boils at a lower temperature on a high mountain because the air pressure is lower.",
      true, true);
  const std::vector<float> ref = PromptLogprobs(model, ids);
  const std::vector<float> got = PromptLogprobs(dir, ids);
  CpuRunnerOptions fp8;
  fp8.quantization = QuantMethod::kFp8;
  const double vs_dynamic = MaxAbsDiff(got, PromptLogprobs(model, ids, fp8));
  const double vs_f32 = MaxAbsDiff(got, ref);
  std::printf("default model, static fp8 engine: max |dlogprob| %.3f vs dynamic fp8, %.3f vs f32\n",
              vs_dynamic, vs_f32);
  EXPECT_GT(vs_dynamic, 0.0);
  EXPECT_LT(vs_f32, 3.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
