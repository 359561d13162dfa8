// Calibration (builder/calibration.h): reading --calib files (text, JSONL, gzip, the default
// Jargon File), cutting token samples, and the statistics of a run on a synthetic model checked
// against the same maxima computed here from the weights.
#include "builder/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "builder/quantize_test_util.h"
#include "engine/tokenizer_loader.h"
#include "model/dequant.h"
#include "model/quantization.h"
#include "model/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::MakeTempDir;
using testing::WriteFile;

std::string SynthModel() {
  static const std::string dir = testing::WriteTinySynthModel("calib_model", 3);
  return dir;
}

TEST(CalibrationTextTest, PlainTextIsOneText) {
  const std::string dir = MakeTempDir("calib_text");
  WriteFile(dir + "/a.txt", "Hello world.\n{\"text\": \"not JSONL\"}\n");
  auto texts = ReadCalibrationTexts(dir + "/a.txt");
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  ASSERT_EQ(texts->size(), 1u);
  EXPECT_EQ((*texts)[0], "Hello world.\n{\"text\": \"not JSONL\"}\n");
}

TEST(CalibrationTextTest, JsonlHasOneTextPerLineAndRejectsOtherShapesWithFileAndLine) {
  const std::string dir = MakeTempDir("calib_jsonl");
  WriteFile(dir + "/a.jsonl", "{\"text\": \"one\", \"id\": 1}\n\n  \n{\"text\": \"two\"}\n");
  auto texts = ReadCalibrationTexts(dir + "/a.jsonl");
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  EXPECT_EQ(*texts, (std::vector<std::string>{"one", "two"}));

  const std::pair<const char*, const char*> bad[] = {
      {"{\"text\": \"ok\"}\n[1, 2]\n", ":2: expected an object"},
      {"{\"text\": \"ok\"}\n\n{\"text\": 3}\n", ":3: expected an object with a \"text\" string"},
      {"{\"content\": \"x\"}\n", ":1: expected an object"},
      {"{\"text\": \"x\"\n", ":1: not valid JSON"},
  };
  for (const auto& [content, message] : bad) {
    WriteFile(dir + "/b.jsonl", content);
    auto r = ReadCalibrationTexts(dir + "/b.jsonl");
    ASSERT_FALSE(r.ok()) << content;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(dir + "/b.jsonl" + message), std::string::npos)
        << r.status().ToString();
  }
  WriteFile(dir + "/empty.jsonl", "\n{\"text\": \"\"}\n");
  auto empty = ReadCalibrationTexts(dir + "/empty.jsonl");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("holds no text"), std::string::npos);
  auto missing = ReadCalibrationTexts(dir + "/nope.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir + "/nope.txt"), std::string::npos);
}

TEST(CalibrationTextTest, DefaultJargonFileIsGunzipped) {
  if (!fs::exists(kDefaultCalibrationFile)) {
    GTEST_SKIP() << kDefaultCalibrationFile << " is missing (scripts/setup installs jargon-text)";
  }
  auto texts = ReadCalibrationTexts(kDefaultCalibrationFile);
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  ASSERT_EQ(texts->size(), 1u);
  EXPECT_GT((*texts)[0].size(), 1'000'000u);
  EXPECT_NE((*texts)[0].find("The Jargon File"), std::string::npos);
  // Plain text under a .gz name: zlib's gzread passes data without a gzip header through as
  // it is, so the text is read, not garbage.
  const std::string dir = MakeTempDir("calib_gz");
  WriteFile(dir + "/plain.txt.gz", "plain text");
  auto plain = ReadCalibrationTexts(dir + "/plain.txt.gz");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)[0], "plain text");
}

TEST(CalibrationSamplesTest, EvenlySpacedSamplesStartWithBos) {
  auto tok = LoadTokenizer(SynthModel());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const Tokenizer& t = *tok->tokenizer;
  ASSERT_EQ(t.bos_id(), 300);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i) + " ";
  const std::vector<int32_t> stream = t.Encode(text, false, false);
  ASSERT_GT(stream.size(), 100u);
  auto samples = MakeCalibrationSamples(t, {text}, 4, 17);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 4u);
  const int64_t total = static_cast<int64_t>(stream.size());
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t>& s = (*samples)[i];
    ASSERT_EQ(s.size(), 17u);
    EXPECT_EQ(s[0], 300);
    const int64_t start = (total - 16) * i / 3;
    EXPECT_TRUE(std::equal(s.begin() + 1, s.end(), stream.begin() + start)) << "sample " << i;
  }
  EXPECT_EQ((*samples)[3].back(), stream.back());  // the last sample ends the text

  auto too_short = MakeCalibrationSamples(t, {"word0"}, 4, 512);
  ASSERT_FALSE(too_short.ok());
  EXPECT_NE(too_short.status().message().find("fewer than one sample of 511"), std::string::npos)
      << too_short.status().ToString();
  EXPECT_FALSE(MakeCalibrationSamples(t, {text}, 0, 16).ok());
  EXPECT_FALSE(MakeCalibrationSamples(t, {text}, 4, 1).ok());
}

// The qkv input of layer 0 is input_layernorm(embedding(token)), computable here from the
// weights: the observed per-channel maxima must be those of the sample tokens' rows.
TEST(CalibrateTest, StatisticsMatchTheWeightsAndDoNotDependOnThreads) {
  auto ckpt = Checkpoint::Open(SynthModel());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const ModelConfig& c = ckpt->config();
  const std::vector<std::vector<int32_t>> samples = {testing::RandomTokenIds(40, 1, 299),
                                                     testing::RandomTokenIds(23, 2, 299)};
  CalibrationOptions options;
  options.num_threads = 1;
  int calls = 0;
  options.progress = [&](int32_t done, int32_t total) {
    ++calls;
    EXPECT_EQ(total, 2);
    EXPECT_EQ(done, calls);
  };
  auto stats = CalibrateSamples(*ckpt, samples, options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(stats->num_tokens, 63);
  ASSERT_EQ(stats->layers.size(), static_cast<size_t>(c.num_layers));
  for (const LayerCalibration& l : stats->layers) {
    EXPECT_EQ(l.channel_absmax[0].size(), static_cast<size_t>(c.hidden_size));
    EXPECT_EQ(l.channel_absmax[1].size(), static_cast<size_t>(c.q_size()));
    EXPECT_EQ(l.channel_absmax[2].size(), static_cast<size_t>(c.hidden_size));
    EXPECT_EQ(l.channel_absmax[3].size(), static_cast<size_t>(c.intermediate_size));
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(l.tensor_absmax[s],
                *std::max_element(l.channel_absmax[s].begin(), l.channel_absmax[s].end()));
      EXPECT_GT(l.tensor_absmax[s], 0.0f);
    }
    EXPECT_GT(l.k_absmax, 0.0f);
    EXPECT_GT(l.v_absmax, 0.0f);
  }
  const std::vector<KvCacheScales> kv = stats->KvScales();
  ASSERT_EQ(kv.size(), static_cast<size_t>(c.num_layers));
  EXPECT_EQ(kv[1].k_scale, stats->layers[1].k_absmax / 448.0f);
  EXPECT_EQ(kv[1].v_scale, stats->layers[1].v_absmax / 448.0f);

  const Weight* embed = ckpt->Find("model.embed_tokens.weight");
  const Weight* norm = ckpt->Find("model.layers.0.input_layernorm.weight");
  std::vector<float> e(embed->shape.numel()), w(norm->shape.numel());
  ASSERT_TRUE(DequantizeToF32(embed->dtype, embed->data, embed->nbytes, e.size(), e.data()).ok());
  ASSERT_TRUE(DequantizeToF32(norm->dtype, norm->data, norm->nbytes, w.size(), w.data()).ok());
  std::vector<double> want(c.hidden_size, 0.0);
  for (const auto& sample : samples) {
    for (int32_t id : sample) {
      const float* row = e.data() + int64_t{id} * c.hidden_size;
      double sq = 0;
      for (int j = 0; j < c.hidden_size; ++j) sq += double{row[j]} * row[j];
      const double inv = 1.0 / std::sqrt(sq / c.hidden_size + c.rms_norm_eps);
      for (int j = 0; j < c.hidden_size; ++j) {
        want[j] = std::max(want[j], std::abs(w[j] * row[j] * inv));
      }
    }
  }
  for (int j = 0; j < c.hidden_size; ++j) {
    EXPECT_NEAR(stats->layers[0].channel_absmax[0][j], want[j], 1e-5 * want[j]) << j;
  }

  options.num_threads = 2;
  options.progress = nullptr;
  auto again = CalibrateSamples(*ckpt, samples, options);
  ASSERT_TRUE(again.ok());
  for (int l = 0; l < c.num_layers; ++l) {
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(again->layers[l].channel_absmax[s], stats->layers[l].channel_absmax[s]);
    }
    EXPECT_EQ(again->layers[l].k_absmax, stats->layers[l].k_absmax);
  }
}

TEST(CalibrateTest, FromAFileWithTheModelsTokenizerAndBadInput) {
  auto ckpt = Checkpoint::Open(SynthModel());
  ASSERT_TRUE(ckpt.ok());
  const std::string dir = MakeTempDir("calib_run");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "The quick brown fox " + std::to_string(i) + ". ";
  WriteFile(dir + "/c.jsonl", "{\"text\": \"" + text + "\"}\n{\"text\": \"" + text + "\"}\n");
  CalibrationOptions options;
  options.calib_file = dir + "/c.jsonl";
  options.num_samples = 3;
  options.seq_len = 32;
  auto stats = Calibrate(*ckpt, options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->num_samples, 3);
  EXPECT_EQ(stats->num_tokens, 96);
  EXPECT_EQ(stats->source, dir + "/c.jsonl");

  options.seq_len = ckpt->config().max_position_embeddings + 1;
  auto too_long = CalibrateSamples(*ckpt, {std::vector<int32_t>(options.seq_len, 5)}, options);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_position_embeddings"), std::string::npos);
  EXPECT_FALSE(CalibrateSamples(*ckpt, {}, options).ok());
}

}  // namespace
}  // namespace kiln
