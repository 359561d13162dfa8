#include "builder/calibration.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#if KILN_HAS_ZLIB
#include <zlib.h>
#endif

#include "engine/tokenizer_loader.h"
#include "model/quantization.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Site = ActivationObserver::Site;

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open the calibration file");
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Internal(path + ": read error");
  return out.str();
}

Result<std::string> Gunzip(const std::string& path) {
#if KILN_HAS_ZLIB
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound(path + ": cannot open the calibration file");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = Z_OK;
  const char* message = gzerror(f, &err);
  const std::string error = n < 0 ? std::string(message) : std::string();
  gzclose(f);
  if (n < 0) return InvalidArgument(path + ": not a valid gzip file (" + error + ")");
  return out;
#else
  return Unsupported(path +
                     ": kiln was built without zlib, so it cannot read .gz files; "
                     "gunzip it and pass the text with --calib");
#endif
}

// The per-layer maxima of calibration (calibration.h).
class MaxObserver : public ActivationObserver {
 public:
  explicit MaxObserver(std::vector<LayerCalibration>* layers) : layers_(layers) {}

  void ObserveLinearInput(int layer, Site site, const float* x, int64_t rows, int64_t cols,
                          int64_t ld) override {
    LayerCalibration& l = (*layers_)[layer];
    const int s = static_cast<int>(site);
    std::vector<float>& channel = l.channel_absmax[s];
    if (channel.empty()) channel.assign(cols, 0.0f);
    CHECK_EQ(static_cast<int64_t>(channel.size()), cols);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * ld;
      for (int64_t j = 0; j < cols; ++j) channel[j] = std::max(channel[j], std::abs(xr[j]));
    }
    l.tensor_absmax[s] =
        std::max(l.tensor_absmax[s], *std::max_element(channel.begin(), channel.end()));
  }

  void ObserveKv(int layer, const float* k, const float* v, int64_t rows, int64_t kv_size,
                 int64_t ld) override {
    LayerCalibration& l = (*layers_)[layer];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kv_size; ++j) {
        l.k_absmax = std::max(l.k_absmax, std::abs(k[r * ld + j]));
        l.v_absmax = std::max(l.v_absmax, std::abs(v[r * ld + j]));
      }
    }
  }

 private:
  std::vector<LayerCalibration>* layers_;
};

}  // namespace

std::vector<KvCacheScales> CalibrationStats::KvScales() const {
  std::vector<KvCacheScales> scales;
  for (const LayerCalibration& l : layers) {
    scales.push_back({Fp8RowScale(l.k_absmax), Fp8RowScale(l.v_absmax)});
  }
  return scales;
}

Result<std::vector<std::string>> ReadCalibrationTexts(const std::string& path) {
  std::string name = path;
  if (!fs::exists(path)) {
    if (path == kDefaultCalibrationFile) {
      return NotFound(path +
                      " (the default calibration text, the Jargon File) is missing: install "
                      "Debian's jargon-text package (sudo apt-get install jargon-text) or pass "
                      "--calib FILE (plain text, or JSONL with a \"text\" per line)");
    }
    return NotFound(path + ": calibration file not found");
  }
  std::string content;
  if (name.ends_with(".gz")) {
    KILN_ASSIGN_OR_RETURN(content, Gunzip(path));
    name.resize(name.size() - 3);
  } else {
    KILN_ASSIGN_OR_RETURN(content, ReadWholeFile(path));
  }
  std::vector<std::string> texts;
  if (name.ends_with(".jsonl")) {
    std::istringstream lines(content);
    std::string line;
    for (int64_t number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(number) + ": ";
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return InvalidArgument(where + "not valid JSON");
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        return InvalidArgument(where + "expected an object with a \"text\" string, got " +
                               j.dump().substr(0, 80));
      }
      texts.push_back(j["text"].get<std::string>());
    }
  } else {
    texts.push_back(std::move(content));
  }
  bool any = false;
  for (const std::string& t : texts) any |= !t.empty();
  if (!any) return InvalidArgument(path + ": the calibration file holds no text");
  return texts;
}

Result<std::vector<std::vector<int32_t>>> MakeCalibrationSamples(
    const Tokenizer& tokenizer, const std::vector<std::string>& texts, int32_t num_samples,
    int32_t seq_len) {
  if (num_samples < 1) {
    return InvalidArgument("calibration samples: must be >= 1, got " + std::to_string(num_samples));
  }
  if (seq_len < 2) {
    return InvalidArgument("calibration sequence length: must be >= 2, got " +
                           std::to_string(seq_len));
  }
  std::vector<int32_t> stream;
  for (const std::string& text : texts) {
    // NOTE: parse_special off: the file is data, special-token strings in it are plain text.
    std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special=*/false,
                                                /*parse_special=*/false);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  const int32_t bos = tokenizer.bos_id();
  const int64_t body = bos >= 0 ? seq_len - 1 : seq_len;
  const int64_t total = static_cast<int64_t>(stream.size());
  if (total < body) {
    return InvalidArgument("the calibration text has " + std::to_string(total) +
                           " tokens, fewer than one sample of " + std::to_string(body) +
                           "; use a longer --calib file or a smaller sequence length");
  }
  // Starts evenly spaced over [0, total - body]: disjoint windows when the text holds them all.
  std::vector<std::vector<int32_t>> samples;
  for (int32_t i = 0; i < num_samples; ++i) {
    const int64_t start = num_samples == 1 ? 0 : (total - body) * i / (num_samples - 1);
    std::vector<int32_t> sample;
    if (bos >= 0) sample.push_back(bos);
    sample.insert(sample.end(), stream.begin() + start, stream.begin() + start + body);
    samples.push_back(std::move(sample));
  }
  return samples;
}

Status RunCalibrationPass(const Checkpoint& ckpt, const std::vector<std::vector<int32_t>>& samples,
                          ActivationObserver* observer, int num_threads,
                          const std::function<void(int32_t, int32_t)>& progress) {
  CpuRunnerOptions runner_options;
  runner_options.num_threads = num_threads;
  runner_options.observer = observer;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, CreateCpuRunner(ckpt, runner_options));
  constexpr int32_t kBlockSize = 16;
  size_t longest = 1;
  for (const auto& s : samples) longest = std::max(longest, s.size());
  KILN_RETURN_IF_ERROR(runner->AllocateKvCache(
      static_cast<int32_t>((longest + kBlockSize - 1) / kBlockSize), kBlockSize));
  for (size_t i = 0; i < samples.size(); ++i) {
    // One sequence prefilled whole; no token is sampled or scored, so no logits are computed.
    const int32_t n = static_cast<int32_t>(samples[i].size());
    if (n > 0) runner->Execute(SingleSequenceStep(samples[i], 0, n, kBlockSize));
    if (progress) progress(static_cast<int32_t>(i + 1), static_cast<int32_t>(samples.size()));
  }
  return Status::Ok();
}

Result<CalibrationStats> CalibrateSamples(const Checkpoint& ckpt,
                                          const std::vector<std::vector<int32_t>>& samples,
                                          const CalibrationOptions& options) {
  if (samples.empty()) return InvalidArgument("calibration: no samples");
  const ModelConfig& config = ckpt.config();
  size_t longest = 0;
  for (const auto& s : samples) longest = std::max(longest, s.size());
  if (longest == 0) return InvalidArgument("calibration: an empty sample");
  if (static_cast<int64_t>(longest) > config.max_position_embeddings) {
    return InvalidArgument("calibration: samples of " + std::to_string(longest) +
                           " tokens exceed the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings) +
                           "; use a smaller sequence length");
  }
  CalibrationStats stats;
  stats.layers.resize(config.num_layers);
  MaxObserver observer(&stats.layers);
  KILN_RETURN_IF_ERROR(
      RunCalibrationPass(ckpt, samples, &observer, options.num_threads, options.progress));
  for (const std::vector<int32_t>& sample : samples) {
    stats.num_tokens += static_cast<int64_t>(sample.size());
    ++stats.num_samples;
  }
  return stats;
}

Result<CalibrationStats> Calibrate(const Checkpoint& ckpt, const CalibrationOptions& options) {
  const std::string file =
      options.calib_file.empty() ? kDefaultCalibrationFile : options.calib_file;
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCalibrationTexts(file));
  KILN_ASSIGN_OR_RETURN(LoadedTokenizer tokenizer, LoadTokenizer(ckpt.path()));
  KILN_ASSIGN_OR_RETURN(
      std::vector<std::vector<int32_t>> samples,
      MakeCalibrationSamples(*tokenizer.tokenizer, texts, options.num_samples, options.seq_len));
  KILN_ASSIGN_OR_RETURN(CalibrationStats stats, CalibrateSamples(ckpt, samples, options));
  stats.source = file;
  return stats;
}

}  // namespace kiln
