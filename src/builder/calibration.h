// Calibration for quantization (kiln build --calib): runs the unquantized model on the CPU over
// sample text and records, per decoder layer, what the quantizers need (docs/quantization.md,
// "Calibration"):
//
//   site (ActivationObserver::Site)   per input channel          per tensor
//   kQkv     input of q/k/v           max |x[:, j]|  [hidden]    max |x|
//   kO       input of o_proj          max |x[:, j]|  [q_size]    max |x|
//   kGateUp  input of gate/up         max |x[:, j]|  [hidden]    max |x|
//   kDown    input of down_proj       max |x[:, j]|  [inter]     max |x|
//   K, V     stored in the KV cache (after RoPE)                 max |k|, max |v|
//
// over every token of every sample. The per-channel maxima drive SmoothQuant (quantize.h), the
// per-tensor ones a static activation scale, the K/V maxima the FP8 KV cache scales (amax / 448).
//
// The text:
//   --calib FILE   FILE.jsonl: one JSON object per line with a "text" string (blank lines
//                  skipped); any other file: its whole content is one text. A trailing .gz is
//                  gunzipped first (FILE.jsonl.gz is JSONL).
//   (default)      the Jargon File of Debian's jargon-text package (kDefaultCalibrationFile):
//                  plain English prose, no network needed.
// Each text is tokenized without special tokens, the token streams are concatenated, and
// num_samples windows of seq_len - 1 tokens are taken evenly spaced over it (disjoint when the
// text is long enough), each prefixed with the model's bos token when it has one (so that a
// sample starts as every prompt does: bos' activations are the largest of a sequence and must be
// in the statistics) or else seq_len tokens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/status.h"
#include "model/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

inline constexpr char kDefaultCalibrationFile[] = "/usr/share/doc/jargon-text/jargon.txt.gz";

struct CalibrationOptions {
  // The calibration text (above); "" = kDefaultCalibrationFile.
  std::string calib_file;
  // Sequences run, and tokens in each. More tokens give maxima closer to what inference meets
  // (maxima only grow) at a cost linear in num_samples * seq_len (quadratic in seq_len for
  // attention). The defaults (16 k tokens) calibrate the 135M default model in ~20 s on 2 cores.
  int32_t num_samples = 32;
  int32_t seq_len = 512;
  // CPU threads (0 = every core); the statistics do not depend on it.
  int num_threads = 0;
  // Called after each sample with the samples done and in all.
  std::function<void(int32_t done, int32_t total)> progress;
};

// The statistics of one decoder layer.
struct LayerCalibration {
  static constexpr int kNumSites = 4;                        // indexed by ActivationObserver::Site
  std::array<std::vector<float>, kNumSites> channel_absmax;  // [input width of the site]
  std::array<float, kNumSites> tensor_absmax{};
  float k_absmax = 0;
  float v_absmax = 0;
};

struct CalibrationStats {
  std::vector<LayerCalibration> layers;  // [num_layers]
  int32_t num_samples = 0;
  int64_t num_tokens = 0;  // tokens run in all
  std::string source;      // the calibration file used

  // The FP8 KV cache scales: per layer k_scale = Fp8RowScale(k_absmax), v likewise
  // (model/quantization.h: amax / 448, never below kFp8MinScale).
  std::vector<KvCacheScales> KvScales() const;
};

// The texts of a calibration file (above). Errors: NotFound naming the file (for the default
// file: saying to install jargon-text or pass --calib); InvalidArgument "FILE:LINE: ..." for a
// JSONL line that is not an object with a "text" string; InvalidArgument for a file with no
// text; Unsupported for a .gz file when kiln was built without zlib.
Result<std::vector<std::string>> ReadCalibrationTexts(const std::string& path);

// Tokenizes `texts` and cuts the samples (above). Errors: InvalidArgument for num_samples < 1
// or seq_len < 2 (naming the value), or a text too short for one sample (naming both counts).
Result<std::vector<std::vector<int32_t>>> MakeCalibrationSamples(
    const Tokenizer& tokenizer, const std::vector<std::string>& texts, int32_t num_samples,
    int32_t seq_len);

// Runs each sample (one prefill each) through the CPU runner (the unquantized weights as stored,
// f32 KV cache) with `observer` watching; progress (may be empty) hears of each sample. The
// pass both calibrations share (CalibrateSamples below; the W4A16 quantizers' W4Calibrator).
Status RunCalibrationPass(const Checkpoint& ckpt, const std::vector<std::vector<int32_t>>& samples,
                          ActivationObserver* observer, int num_threads,
                          const std::function<void(int32_t done, int32_t total)>& progress = {});

// Runs each sample through the CPU runner (unquantized weights as stored, f32 KV cache) with an
// observer. Errors: those of CreateCpuRunner; InvalidArgument for an empty sample list or a
// sample longer than the model's max_position_embeddings.
Result<CalibrationStats> CalibrateSamples(const Checkpoint& ckpt,
                                          const std::vector<std::vector<int32_t>>& samples,
                                          const CalibrationOptions& options);

// All of it: reads options.calib_file (or the default), tokenizes with the model's own tokenizer
// (LoadTokenizer(ckpt.path())), cuts the samples and runs them.
Result<CalibrationStats> Calibrate(const Checkpoint& ckpt, const CalibrationOptions& options);

}  // namespace kiln
