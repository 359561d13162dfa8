// The accuracy figures of INT8 SmoothQuant and calibrated FP8 KV scales on the CPU
// (docs/quantization.md, "INT8 SmoothQuant"; docs/benchmarks.md): calibrates a model once, then
// for each alpha quantizes it, writes an engine directory (builder/engine_writer.h; with
// --hf-export 1 a compressed-tensors int8 checkpoint, builder/quantized_checkpoint.h) and measures
// its perplexity on a text with the engine's sliding window (eval/perplexity.h), beside the
// unquantized model and its FP8 KV cache with scales 1.0 and calibrated. A benchmark program: it
// prints figures, it never passes or fails.
//
//   int8_sq_bench --model SmolLM2-135M-Instruct.Q4_1.gguf --tokenizer-dir DIR
//       --text /usr/share/common-licenses/GPL-3 [--alphas 0,0.5,0.8] [--samples 32]
//       [--seq-len 512] [--calib FILE] [--window 1024] [--stride 512] [--threads 2]
//       [--work DIR] [--baselines 0|1] [--baseline-ppl X] [--hf-export 0|1]
//
// --tokenizer-dir: with --hf-export, the HF tokenizer files to put into exports of a GGUF model
// (which has no tokenizer.json to copy). NOTE: one made by transformers from the GGUF tokenizes
// GPL-3 into 19 more tokens than the GGUF's own, so its perplexities are not comparable with
// the GGUF's: the engine directories keep the GGUF's tokenizer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "builder/calibration.h"
#include "builder/engine_writer.h"
#include "builder/quantize.h"
#include "builder/quantized_checkpoint.h"
#include "engine/llm.h"
#include "eval/perplexity.h"
#include "model/config.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

double Baseline = 0;  // the "vs" column's reference: the first run, or --baseline-ppl

struct Args {
  std::string model, tokenizer_dir, text, calib, work = "/tmp/int8_sq_bench";
  std::vector<float> alphas = {0.0f, 0.5f, 0.8f};
  int samples = 32, seq_len = 512, window = 1024, stride = 512, threads = 2;
  bool hf_export = false;  // --hf-export 1: compressed-tensors checkpoints instead of engines
  bool baselines = true;   // --baselines 0: skip the unquantized runs
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "int8_sq_bench: %s\n", message.c_str());
  std::exit(1);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Die("missing value after " + flag);
    const std::string v = argv[++i];
    if (flag == "--model")
      a.model = v;
    else if (flag == "--tokenizer-dir")
      a.tokenizer_dir = v;
    else if (flag == "--text")
      a.text = v;
    else if (flag == "--calib")
      a.calib = v;
    else if (flag == "--work")
      a.work = v;
    else if (flag == "--samples")
      a.samples = std::stoi(v);
    else if (flag == "--seq-len")
      a.seq_len = std::stoi(v);
    else if (flag == "--window")
      a.window = std::stoi(v);
    else if (flag == "--stride")
      a.stride = std::stoi(v);
    else if (flag == "--threads")
      a.threads = std::stoi(v);
    else if (flag == "--hf-export")
      a.hf_export = v == "1";
    else if (flag == "--baselines")
      a.baselines = v == "1";
    else if (flag == "--baseline-ppl")
      Baseline = std::stod(v);
    else if (flag == "--alphas") {
      a.alphas.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        a.alphas.push_back(std::stof(v.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      Die("unknown flag " + flag);
    }
  }
  if (a.model.empty() || a.text.empty()) Die("--model and --text are required");
  return a;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

template <typename T>
T Check(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.status().ToString());
  return std::move(r).value();
}

void CopyTokenizer(const Args& a, const std::string& dir) {
  if (a.tokenizer_dir.empty()) return;
  for (const auto& entry : fs::directory_iterator(a.tokenizer_dir)) {
    fs::copy_file(entry.path(), fs::path(dir) / entry.path().filename(),
                  fs::copy_options::skip_existing);
  }
}

// An engine directory (kiln build's format) holding `q`, its other matrices in f32 so that
// only the quantization differs from the unquantized run; the source's own tokenizer.
std::string Export(const Args& a, const Checkpoint& ckpt, const QuantizedModel& q,
                   const std::string& name) {
  const std::string dir = a.work + "/" + name;
  fs::remove_all(dir);
  if (a.hf_export) {
    const Status s = WriteCompressedTensorsCheckpoint(ckpt, q, dir);
    if (!s.ok()) Die("export " + name + ": " + s.ToString());
    CopyTokenizer(a, dir);
    return dir;
  }
  EngineBuildOptions o;
  o.out_dir = dir;
  o.dtype = DType::kF32;
  o.quantization = q.method;
  o.quant_recipe = q.method == QuantMethod::kInt8 ? "int8-sq" : "none";
  o.threads = a.threads;
  const Status s = WriteEngine(ckpt, &q, o);
  if (!s.ok()) Die("engine " + name + ": " + s.ToString());
  return dir;
}

void Measure(const Args& a, const std::string& label, const std::string& model, bool kv_fp8,
             const std::string& text) {
  LlmOptions o;
  o.device = "cpu";
  o.num_threads = a.threads;
  o.kv_cache_dtype = kv_fp8 ? "fp8" : "auto";
  auto llm = Check(LLM::Create(model, o), "load " + model);
  eval::PerplexityOptions p;
  p.window = a.window;
  p.stride = a.stride;
  auto r = Check(eval::EvaluatePerplexity(*llm, text, p), "perplexity of " + label);
  if (Baseline == 0) Baseline = r.perplexity;
  std::printf("| %-44s | %9.3f | %+7.2f %% | %5lld | %6.1f s |\n", label.c_str(), r.perplexity,
              100.0 * (r.perplexity / Baseline - 1.0), static_cast<long long>(r.num_scored),
              r.seconds);
  std::fflush(stdout);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;  // NOLINT(build/namespaces): a benchmark's main
  const Args a = Parse(argc, argv);
  fs::create_directories(a.work);
  const std::string text = Check(ReadTextFile(a.text), "read " + a.text);
  const Checkpoint ckpt = Check(Checkpoint::Open(a.model), "open " + a.model);

  CalibrationOptions c;
  c.calib_file = a.calib;
  c.num_samples = a.samples;
  c.seq_len = a.seq_len;
  c.num_threads = a.threads;
  auto start = std::chrono::steady_clock::now();
  const CalibrationStats stats = Check(Calibrate(ckpt, c), "calibrate");
  std::printf("calibration: %d samples x %d tokens of %s in %.1f s (%d threads)\n", a.samples,
              a.seq_len, stats.source.c_str(), Seconds(start), a.threads);
  for (size_t l = 0; l < stats.layers.size(); l += 10) {
    const LayerCalibration& L = stats.layers[l];
    std::printf(
        "  layer %2zu: amax qkv-in %.2f o-in %.2f gate/up-in %.2f down-in %.2f  k %.2f "
        "v %.2f\n",
        l, L.tensor_absmax[0], L.tensor_absmax[1], L.tensor_absmax[2], L.tensor_absmax[3],
        L.k_absmax, L.v_absmax);
  }

  std::printf("\n| %-44s | %9s | %9s | %5s | %8s |\n", "run", "ppl", "vs f32", "toks", "time");
  std::printf("|---|---:|---:|---:|---:|\n");
  if (a.baselines) {
    Measure(a, "unquantized (Q4_1 decoded to f32)", a.model, false, text);
    Measure(a, "unquantized, FP8 KV scales 1.0", a.model, true, text);
  }
  QuantizedModel kv_only;
  kv_only.method = QuantMethod::kNone;
  kv_only.kv_scales = stats.KvScales();
  const std::string kv_dir = Export(a, ckpt, kv_only, "kv-calibrated");
  Measure(a, "unquantized, FP8 KV calibrated", kv_dir, true, text);
  for (float alpha : a.alphas) {
    start = std::chrono::steady_clock::now();
    SmoothQuantOptions s;
    s.alpha = alpha;
    const QuantizedModel q = Check(QuantizeInt8SmoothQuant(ckpt, stats, s), "quantize");
    char name[64];
    std::snprintf(name, sizeof(name), "int8-sq-alpha-%.2f", alpha);
    const std::string dir = Export(a, ckpt, q, name);
    std::fprintf(stderr, "%s: quantized and exported in %.1f s\n", name, Seconds(start));
    char label[96];
    std::snprintf(label, sizeof(label),
                  alpha == 0 ? "INT8 W8A8, no smoothing (alpha 0)" : "INT8 SmoothQuant alpha %.2f",
                  alpha);
    Measure(a, label, dir, false, text);
    if (alpha == 0.5f) Measure(a, std::string(label) + " + FP8 KV calibrated", dir, true, text);
  }
  return 0;
}
