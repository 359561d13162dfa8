// kiln build: writes an engine directory (docs/engine-format.md, builder/engine_writer.h) from a
// checkpoint: weights converted, quantized and fused once, the GEMM algorithms tuned on this
// GPU when there is one, optionally signed. Runtime limits (batch, context, KV size, scheduling)
// stay options of serve / generate: nothing here needs a rebuild to change them.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "builder/calibration.h"
#include "builder/engine_writer.h"
#include "builder/quantize.h"
#include "builder/quantize_w4.h"
#include "cli/command.h"
#include "core/buffer.h"
#include "core/crypto.h"
#include "engine/tokenizer_loader.h"
#include "model/checkpoint.h"
#include "model/engine_dir.h"
#include "model/quantization.h"
#ifdef KILN_HAS_CUDA
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#endif

namespace kiln::cli {
namespace {

struct BuildFlags {
  std::string model;
  std::string out;
  std::string quant = "none";
  std::string kv_cache_dtype = "auto";
  std::string dtype = "auto";
  std::string calib;
  float smoothquant_alpha = 0.5f;
  bool smoothquant_alpha_given = false;  // fp8 smooths only when asked
  std::string activation_scales;         // fp8: "static" or "dynamic" (the default, "")
  std::string weight_rounding;           // fp8: "nearest" (the default, "") or "gptq"
  std::string unquantized_layers;        // comma-separated layer indices, negative from the end
  int group_size = 128;
  bool no_act_order = false;
  bool quantize_lm_head = false;  // w4a16-*: lm_head in W4A16 too
  int calib_samples = CalibrationOptions().num_samples;
  int calib_seq_len = CalibrationOptions().seq_len;
  std::string sign;
  std::string tune = "auto";
  int device = 0;
  int threads = 0;
  bool force = false;
};

// What --quant names: the runtime method and, for the calibrated ones, the quantizer.
struct Recipe {
  QuantMethod method = QuantMethod::kNone;
  std::string name;
};

Result<Recipe> ParseRecipe(const std::string& name) {
  if (name == "none") return Recipe{QuantMethod::kNone, name};
  if (name == "fp8") return Recipe{QuantMethod::kFp8, name};
  if (name == "int8-sq") return Recipe{QuantMethod::kInt8, name};
  if (name == "w4a16-rtn" || name == "w4a16-awq" || name == "w4a16-gptq") {
    return Recipe{QuantMethod::kW4A16, name};
  }
  return InvalidArgument(
      "--quant: expected none, fp8, int8-sq, w4a16-rtn, w4a16-awq or "
      "w4a16-gptq, got '" +
      name + "'");
}

// --unquantized-layers: comma-separated indices, -1 the last layer. Errors: InvalidArgument
// naming the item that is not an integer, or the layer outside the model.
Result<std::vector<int>> ParseLayerList(const std::string& text, int num_layers) {
  std::vector<int> out;
  size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    char* stop = nullptr;
    const long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0') {
      return InvalidArgument("--unquantized-layers: '" + item +
                             "' is not a layer index (e.g. 29 or -1 for the last)");
    }
    const long layer = v < 0 ? num_layers + v : v;
    if (layer < 0 || layer >= num_layers) {
      return InvalidArgument("--unquantized-layers: layer " + item + " is outside the model's " +
                             std::to_string(num_layers) + " layers");
    }
    if (std::find(out.begin(), out.end(), layer) == out.end())
      out.push_back(static_cast<int>(layer));
    begin = end + 1;
  }
  return out;
}

// Flag combinations, checked before the model is opened.
Status CheckQuantFlags(const Recipe& recipe, const BuildFlags& f) {
  if (!f.activation_scales.empty()) {
    if (recipe.method != QuantMethod::kFp8) {
      return InvalidArgument("--activation-scales: only --quant fp8 has a choice of activation " +
                             std::string("scales (--quant ") + recipe.name +
                             (recipe.method == QuantMethod::kInt8
                                  ? " quantizes activations per token)"
                                  : " does not quantize activations)"));
    }
    if (f.activation_scales != "static" && f.activation_scales != "dynamic") {
      return InvalidArgument("--activation-scales: expected static or dynamic, got '" +
                             f.activation_scales + "'");
    }
  }
  if (!f.weight_rounding.empty()) {
    if (recipe.method != QuantMethod::kFp8) {
      return InvalidArgument("--weight-rounding: only --quant fp8 has a choice (use --quant " +
                             std::string("w4a16-gptq for 4-bit GPTQ)"));
    }
    if (f.weight_rounding != "nearest" && f.weight_rounding != "gptq") {
      return InvalidArgument("--weight-rounding: expected nearest or gptq, got '" +
                             f.weight_rounding + "'");
    }
    if (f.weight_rounding == "gptq" && f.smoothquant_alpha_given) {
      return InvalidArgument(
          "--weight-rounding gptq: not combined with --smoothquant-alpha (choose one)");
    }
  }
  if (f.quantize_lm_head && recipe.method != QuantMethod::kW4A16) {
    return InvalidArgument("--quantize-lm-head: only --quant w4a16-rtn, w4a16-awq and w4a16-gptq " +
                           std::string("quantize lm_head (--quant ") + recipe.name +
                           " keeps it in --dtype)");
  }
  if (!f.unquantized_layers.empty()) {
    if (recipe.method == QuantMethod::kNone) {
      return InvalidArgument("--unquantized-layers: --quant none quantizes no layer");
    }
    // The syntax now (any count of layers); the range once the model is open.
    KILN_RETURN_IF_ERROR(ParseLayerList(f.unquantized_layers, 1 << 20).status());
  }
  if (f.smoothquant_alpha_given) {
    if (recipe.name != "int8-sq" && recipe.name != "fp8") {
      return InvalidArgument("--smoothquant-alpha: only --quant int8-sq and fp8 smooth, not " +
                             recipe.name);
    }
    if (!(f.smoothquant_alpha >= 0.0f && f.smoothquant_alpha <= 1.0f)) {
      return InvalidArgument("--smoothquant-alpha: must be in [0, 1], got " +
                             std::to_string(f.smoothquant_alpha));
    }
  }
  return Status::Ok();
}

// Calibration on --calib (builder/calibration.h), with progress on stdout.
Result<CalibrationStats> CalibrateForBuild(const Checkpoint& ckpt, const BuildFlags& f) {
  CalibrationOptions c;
  c.calib_file = f.calib;
  c.num_samples = f.calib_samples;
  c.seq_len = f.calib_seq_len;
  c.num_threads = f.threads;
  c.progress = [](int32_t done, int32_t total) {
    std::printf("\r  calibrating: %d / %d samples", done, total);
    if (done == total) std::printf("\n");
    std::fflush(stdout);
  };
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(CalibrationStats stats, Calibrate(ckpt, c));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  calibrated on %lld tokens of %s in %.1f s\n",
              static_cast<long long>(stats.num_tokens), stats.source.c_str(), seconds);
  return stats;
}

// int8-sq: calibration, then SmoothQuant (quantize.h).
Result<std::optional<QuantizedModel>> RunSmoothQuant(const Checkpoint& ckpt, const BuildFlags& f) {
  KILN_ASSIGN_OR_RETURN(CalibrationStats stats, CalibrateForBuild(ckpt, f));
  SmoothQuantOptions s;
  s.alpha = f.smoothquant_alpha;
  KILN_ASSIGN_OR_RETURN(QuantizedModel q, QuantizeInt8SmoothQuant(ckpt, stats, s));
  q.details_json = SmoothQuantDetailsJson(stats, s);
  return std::optional<QuantizedModel>(std::move(q));
}

// The calibration samples of --calib (or the default text), cut as --calib-samples x
// --calib-seq-len, and the file they came from.
Result<std::pair<std::vector<std::vector<int32_t>>, std::string>> CalibrationSamplesForBuild(
    const Checkpoint& ckpt, const BuildFlags& f) {
  std::string source = f.calib.empty() ? std::string(kDefaultCalibrationFile) : f.calib;
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCalibrationTexts(source));
  KILN_ASSIGN_OR_RETURN(LoadedTokenizer tok, LoadTokenizer(ckpt.path()));
  KILN_ASSIGN_OR_RETURN(
      std::vector<std::vector<int32_t>> samples,
      MakeCalibrationSamples(*tok.tokenizer, texts, f.calib_samples, f.calib_seq_len));
  return std::make_pair(std::move(samples), std::move(source));
}

// fp8 --weight-rounding gptq (builder/quantize_w4.h QuantizeFp8Gptq).
Result<std::optional<QuantizedModel>> RunFp8Gptq(const Checkpoint& ckpt, const BuildFlags& f) {
  KILN_ASSIGN_OR_RETURN(auto calibration, CalibrationSamplesForBuild(ckpt, f));
  Fp8GptqOptions o;
  o.static_activations = f.activation_scales == "static";
  o.num_threads = f.threads;
  std::printf("  calibrating fp8 gptq on %zu samples of %d tokens from %s\n",
              calibration.first.size(), f.calib_seq_len, calibration.second.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(QuantizedModel q, QuantizeFp8Gptq(ckpt, o, calibration.first));
  std::printf("  quantized (fp8, gptq%s) in %.1f s\n", o.act_order ? ", act-order" : "",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  nlohmann::ordered_json details = {
      {"algorithm", "gptq-fp8"},
      {"activation_scales", o.static_activations ? "static" : "dynamic"},
      {"act_order", o.act_order},
      {"calibration",
       {{"source", calibration.second},
        {"samples", calibration.first.size()},
        {"seq_len", f.calib_seq_len}}}};
  q.details_json = details.dump();
  return std::optional<QuantizedModel>(std::move(q));
}

// fp8 with static activation scales and / or smoothing: calibration, then
// QuantizeFp8Calibrated; plain fp8 (dynamic, unsmoothed) is WriteEngine's own, nullopt here.
Result<std::optional<QuantizedModel>> RunFp8(const Checkpoint& ckpt, const BuildFlags& f) {
  if (f.weight_rounding == "gptq") return RunFp8Gptq(ckpt, f);
  Fp8CalibratedOptions o;
  o.static_activations = f.activation_scales == "static";
  o.smoothquant_alpha = f.smoothquant_alpha_given ? f.smoothquant_alpha : 0.0f;
  if (!o.static_activations && o.smoothquant_alpha == 0.0f) {
    if (!f.calib.empty()) {
      return InvalidArgument(
          "--calib: --quant fp8 calibrates only with --activation-scales static, "
          "--smoothquant-alpha or --weight-rounding gptq");
    }
    return std::optional<QuantizedModel>();
  }
  KILN_ASSIGN_OR_RETURN(CalibrationStats stats, CalibrateForBuild(ckpt, f));
  KILN_ASSIGN_OR_RETURN(QuantizedModel q, QuantizeFp8Calibrated(ckpt, stats, o));
  q.details_json = Fp8CalibratedDetailsJson(stats, o);
  return std::optional<QuantizedModel>(std::move(q));
}

// w4a16-*: round to nearest, or AWQ / GPTQ on calibration samples (builder/quantize_w4.h).
Result<std::optional<QuantizedModel>> RunW4(const Checkpoint& ckpt, const Recipe& recipe,
                                            const BuildFlags& f) {
  W4Options o;
  o.algorithm = recipe.name == "w4a16-awq"    ? W4Algorithm::kAwq
                : recipe.name == "w4a16-gptq" ? W4Algorithm::kGptq
                                              : W4Algorithm::kRtn;
  o.group_size = f.group_size;
  o.act_order = !f.no_act_order;
  o.quantize_lm_head = f.quantize_lm_head;
  o.num_threads = f.threads;
  std::vector<std::vector<int32_t>> samples;
  std::string calib_source;
  if (o.algorithm == W4Algorithm::kRtn) {
    if (!f.calib.empty()) return InvalidArgument("--calib: w4a16-rtn does not calibrate");
  } else {
    KILN_ASSIGN_OR_RETURN(auto calibration, CalibrationSamplesForBuild(ckpt, f));
    samples = std::move(calibration.first);
    calib_source = std::move(calibration.second);
    std::printf("  calibrating %s on %zu samples of %d tokens from %s\n",
                std::string(W4AlgorithmName(o.algorithm)).c_str(), samples.size(), f.calib_seq_len,
                calib_source.c_str());
    std::fflush(stdout);
  }
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(QuantizedModel q, QuantizeW4(ckpt, o, samples));
  std::printf("  quantized (%s, group size %d%s%s) in %.1f s\n",
              std::string(W4AlgorithmName(o.algorithm)).c_str(), o.group_size,
              o.algorithm == W4Algorithm::kGptq && o.act_order ? ", act-order" : "",
              o.quantize_lm_head ? ", lm_head too" : "",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  nlohmann::ordered_json details = {
      {"algorithm", W4AlgorithmName(o.algorithm)},
      {"group_size", o.group_size},
      {"act_order", o.algorithm == W4Algorithm::kGptq && o.act_order}};
  if (o.quantize_lm_head) {
    details["lm_head"] = {{"algorithm", W4AlgorithmName(o.algorithm)},
                          {"group_size", o.group_size},
                          {"act_order", false}};
  }
  if (!samples.empty()) {
    details["calibration"] = {
        {"source", calib_source}, {"samples", samples.size()}, {"seq_len", f.calib_seq_len}};
  }
  q.details_json = details.dump();
  return std::optional<QuantizedModel>(std::move(q));
}

// The quantizer of a calibrated recipe (int8-sq, w4a16-*, fp8 with static scales or
// smoothing), run on --calib (or the default calibration text); nullopt for the recipes
// WriteEngine applies itself (none, plain fp8).
Result<std::optional<QuantizedModel>> RunQuantizer(const Checkpoint& ckpt, const Recipe& recipe,
                                                   const BuildFlags& f) {
  if (recipe.method == QuantMethod::kFp8) return RunFp8(ckpt, f);
  if (recipe.method == QuantMethod::kNone) {
    if (!f.calib.empty()) {
      return InvalidArgument("--calib: --quant " + recipe.name +
                             " does not calibrate (int8-sq, w4a16-awq/gptq and fp8 with "
                             "static activation scales or smoothing do)");
    }
    return std::optional<QuantizedModel>();
  }
  if (recipe.name == "int8-sq") return RunSmoothQuant(ckpt, f);
  return RunW4(ckpt, recipe, f);
}

#ifdef KILN_HAS_CUDA
// Tunes the decode GEMMs of the engine at `dir` on the GPU and stores the table in the engine.
Status TuneOnGpu(const std::string& dir, int device) {
  KILN_ASSIGN_OR_RETURN(Checkpoint engine, Checkpoint::Open(dir));
  CudaRunnerOptions options;
  options.device = device;
  options.tune_gemms = true;
  // An FP8 engine's prompt GEMMs are timed at kFp8PromptTuneRows rows (cuda::Gemm::
  // TuneFp8Prompt, in the runner's workspace: steps of as many tokens), and serve with any step
  // budget of 4,096 tokens or more. Other engines keep the default workspace.
  if (engine.quantization().method == QuantMethod::kFp8) {
    options.max_num_tokens = std::max<int32_t>(
        options.max_num_tokens, static_cast<int32_t>(cuda::Gemm::kFp8PromptTuneRows));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, CreateCudaRunner(engine, options));
  // Capturing the decode graphs tunes every linear shape they run (CudaRunnerOptions), and an
  // FP8 engine's prompt GEMMs after them.
  const int32_t blocks = options.max_num_seqs * 2 + 16;
  KILN_RETURN_IF_ERROR(runner->AllocateKvCache(blocks, 16));
  KILN_ASSIGN_OR_RETURN(std::string table, ExportGemmTable(*runner));
  KILN_ASSIGN_OR_RETURN(CudaMemoryReport report, GetCudaMemoryReport(*runner));
  std::printf("  tuned the GEMMs on cuda:%d in %.2f s\n", device, report.gemm_tune_seconds);
  return WriteEngineGemmTable(dir, table);
}
#endif

Status RunBuild(const BuildFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const Recipe recipe, ParseRecipe(f.quant));
  KILN_RETURN_IF_ERROR(CheckQuantFlags(recipe, f));
  KILN_ASSIGN_OR_RETURN(const KvCacheDType kv_cache_dtype, ParseKvCacheDType(f.kv_cache_dtype));
  EngineBuildOptions o;
  o.out_dir = f.out;
  o.overwrite = f.force;
  o.quantization = recipe.method;
  o.quant_recipe = recipe.name;
  o.kv_cache_dtype = kv_cache_dtype;
  o.threads = f.threads;
  o.kiln_version = KILN_VERSION;
  if (f.dtype != "auto") {
    auto dtype = ParseDType(f.dtype);
    if (!dtype.ok() || (*dtype != DType::kBF16 && *dtype != DType::kF16 && *dtype != DType::kF32)) {
      return InvalidArgument("--dtype: expected auto, bfloat16, float16 or float32, got '" +
                             f.dtype + "'");
    }
    o.dtype = *dtype;
  }
  if (f.tune != "auto" && f.tune != "on" && f.tune != "off") {
    return InvalidArgument("--tune: expected auto, on or off, got '" + f.tune + "'");
  }
  // A bad key fails now, not after the build.
  if (!f.sign.empty()) KILN_RETURN_IF_ERROR(Ed25519Sign(f.sign, "").status().WithContext("--sign"));
  if (std::filesystem::path(f.out).lexically_normal() ==
      std::filesystem::path(f.model).lexically_normal()) {
    return InvalidArgument("--out must differ from --model");
  }

  KILN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(f.model));
  std::printf("kiln build: %s (%s, %.3f B parameters) -> %s, quantization %s\n", f.model.c_str(),
              std::string(CheckpointFormatName(ckpt.format())).c_str(),
              ckpt.config().NumParameters() / 1e9, f.out.c_str(), recipe.name.c_str());
  std::fflush(stdout);
  KILN_ASSIGN_OR_RETURN(o.unquantized_layers,
                        ParseLayerList(f.unquantized_layers, ckpt.config().num_layers));
  KILN_ASSIGN_OR_RETURN(std::optional<QuantizedModel> quantized, RunQuantizer(ckpt, recipe, f));
  auto bar = ByteProgressBar("  weights");
  o.progress = [&](std::string_view stage, int64_t done, int64_t total) {
    if (stage == "weights") bar(done, total);
  };
  KILN_RETURN_IF_ERROR(WriteEngine(ckpt, quantized ? &*quantized : nullptr, o));

  const bool gpu = HasCudaDevice();
  if (f.tune == "on" && !gpu) {
    return Unavailable("--tune on: no CUDA device here (this kiln " +
#ifdef KILN_HAS_CUDA
                       std::string("has CUDA but finds no GPU") +
#else
                       std::string("was built without CUDA") +
#endif
                       "); build with --tune off, or on the GPU that will serve the engine");
  }
#ifdef KILN_HAS_CUDA
  if (gpu && f.tune != "off") KILN_RETURN_IF_ERROR(TuneOnGpu(f.out, f.device));
#endif
  if (!gpu || f.tune == "off") {
    std::printf(
        "  no GEMM table: serve tunes the GEMMs at start-up (build on the serving GPU "
        "to store them)\n");
  }
  if (!f.sign.empty()) {
    KILN_RETURN_IF_ERROR(SignEngine(f.out, f.sign));
    std::printf("  signed with %s -> %s\n", f.sign.c_str(),
                std::string(kEngineSignatureFile).c_str());
  }
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(f.out)) {
    if (entry.is_regular_file()) bytes += static_cast<int64_t>(entry.file_size());
  }
  std::printf("  wrote %s (%s) in %.1f s\n", f.out.c_str(), FormatBytes(bytes).c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

}  // namespace

void AddBuildCommand(CLI::App& app) {
  auto flags = std::make_shared<BuildFlags>();
  CLI::App* cmd = app.add_subcommand(
      "build",
      "write an engine directory: weights converted, quantized and fused once, GEMMs "
      "tuned on this GPU (docs/engine-format.md)");
  cmd->add_option("model,--model", flags->model, "HF checkpoint directory, .gguf file or engine")
      ->required();
  cmd->add_option("--out", flags->out, "the engine directory to write")->required();
  cmd->add_option("--quant", flags->quant,
                  "none, fp8 (W8A8 e4m3), int8-sq (SmoothQuant W8A8), w4a16-rtn, w4a16-awq or "
                  "w4a16-gptq (docs/quantization.md)");
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "the KV cache the engine runs with by default: auto or fp8");
  cmd->add_option("--dtype", flags->dtype,
                  "of the unquantized matrices: auto (bfloat16; float16 for GGUF and float16 "
                  "checkpoints), bfloat16, float16 or float32");
  cmd->add_option("--calib", flags->calib,
                  "calibration text (plain text or JSONL with a \"text\" field) for int8-sq and "
                  "w4a16-awq/gptq; default: the Jargon File (Debian jargon-text)");
  CLI::Option* alpha = cmd->add_option(
      "--smoothquant-alpha", flags->smoothquant_alpha,
      "int8-sq: migration strength in [0, 1] (default 0.5; 0 = no smoothing); fp8: smooth "
      "with this strength before quantizing (default: no smoothing)");
  cmd->add_option("--weight-rounding", flags->weight_rounding,
                  "fp8: nearest (default) or gptq (error feedback through the calibration "
                  "inputs' Hessian, from --calib)");
  cmd->add_option("--unquantized-layers", flags->unquantized_layers,
                  "decoder layers kept in --dtype, comma-separated (-1 = the last; e.g. "
                  "--quant fp8 --unquantized-layers -1)");
  cmd->add_option("--activation-scales", flags->activation_scales,
                  "fp8: dynamic (per token, the default) or static (one calibrated scale per "
                  "linear layer, from --calib)");
  cmd->add_option("--group-size", flags->group_size,
                  "w4a16-*: input columns per scale and zero (default 128; must divide every "
                  "linear layer's input size)");
  cmd->add_flag("--quantize-lm-head", flags->quantize_lm_head,
                "w4a16-*: lm_head in 4 bits too, by the same method (--group-size, no "
                "act-order; a tied embedding stays 16-bit for the lookup)");
  cmd->add_flag("--no-act-order", flags->no_act_order,
                "w4a16-gptq: quantize columns in their order, not by decreasing Hessian diagonal");
  cmd->add_option("--calib-samples", flags->calib_samples,
                  "calibration sequences (default " + std::to_string(flags->calib_samples) + ")");
  cmd->add_option(
      "--calib-seq-len", flags->calib_seq_len,
      "tokens per calibration sequence (default " + std::to_string(flags->calib_seq_len) + ")");
  cmd->add_option("--sign", flags->sign,
                  "PEM Ed25519 private key: sign the engine (serve --verify-key checks it)");
  cmd->add_option("--tune", flags->tune,
                  "store tuned GEMM algorithms: auto (when a GPU is present), on, off");
  cmd->add_option("--device", flags->device, "CUDA device to tune on");
  cmd->add_option("--threads", flags->threads, "conversion threads (0 = all cores)");
  cmd->add_flag("--force", flags->force, "replace an existing engine at --out");
  cmd->callback([flags, alpha] {
    flags->smoothquant_alpha_given = alpha->count() > 0;
    const Status s = RunBuild(*flags);
    if (!s.ok()) Fail("build", s);
  });
}

}  // namespace kiln::cli
