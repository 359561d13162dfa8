// kiln synth: writes a synthetic HF checkpoint (random weights in a published or custom
// Llama-family shape); see docs/synth.md and builder/synth.h. On failure it prints
// "kiln synth: error: <message>" and exits 1 (cli::Fail).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "builder/presets.h"
#include "builder/synth.h"
#include "cli/command.h"
#include "core/dtype.h"
#include "core/units.h"

namespace kiln::cli {
namespace {

struct SynthFlags {
  std::string preset;
  std::string shape_file;
  std::string out;
  int num_layers = 0;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  float stddev = 0.02f;
  std::string max_shard_size = "5GB";
  int threads = 0;
  bool force = false;
  bool no_weights = false;
};

Result<ModelConfig> ResolveShape(const SynthFlags& f) {
  if (f.preset.empty() == f.shape_file.empty()) {
    return InvalidArgument("give exactly one of --preset NAME (" + PresetNameList() +
                           ") or --shape FILE.json");
  }
  ModelConfig config;
  if (!f.preset.empty()) {
    KILN_ASSIGN_OR_RETURN(config, PresetConfig(f.preset));
  } else {
    KILN_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(f.shape_file));
    KILN_ASSIGN_OR_RETURN(config, ShapeFromJson(text, f.shape_file));
  }
  if (f.num_layers != 0) {
    if (f.num_layers < 0) return InvalidArgument("--num-layers must be positive");
    config.num_layers = f.num_layers;
  }
  return config;
}

Result<SynthOptions> ResolveOptions(const SynthFlags& f) {
  SynthOptions o;
  o.output_dir = f.out;
  KILN_ASSIGN_OR_RETURN(o.dtype, ParseDType(f.dtype));
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    return InvalidArgument("--dtype must be bf16 or f16, got " + f.dtype);
  }
  o.seed = f.seed;
  o.stddev = f.stddev;
  KILN_ASSIGN_OR_RETURN(o.max_shard_bytes, ParseByteSize(f.max_shard_size));
  o.num_threads = f.threads;
  o.overwrite = f.force ? OverwritePolicy::kReplaceCheckpoint : OverwritePolicy::kRefuseNonEmpty;
  o.write_weights = !f.no_weights;
  if (::isatty(STDERR_FILENO)) {
    o.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\r  %.2f / %.2f GB (%d%%)", done / 1e9, total / 1e9,
                   total > 0 ? static_cast<int>(100 * done / total) : 100);
      if (done == total) std::fputc('\n', stderr);
    };
  }
  return o;
}

Status RunSynth(const SynthFlags& f) {
  KILN_ASSIGN_OR_RETURN(const ModelConfig config, ResolveShape(f));
  KILN_ASSIGN_OR_RETURN(const SynthOptions options, ResolveOptions(f));
  const std::string name = f.preset.empty() ? f.shape_file : f.preset;
  std::printf("kiln synth: %s, %d layer%s, %.3f B parameters, %s -> %s\n", name.c_str(),
              config.num_layers, config.num_layers == 1 ? "" : "s", config.NumParameters() / 1e9,
              std::string(DTypeName(options.dtype)).c_str(), options.output_dir.c_str());
  std::fflush(stdout);
  SynthStats stats;
  KILN_RETURN_IF_ERROR(WriteSyntheticCheckpoint(config, options, &stats));
  if (options.write_weights) {
    const double secs = stats.weight_seconds;
    std::printf("wrote %.2f GB of weights in %d shard%s in %.1f s (%.2f GB/s, %d thread%s)\n",
                stats.weight_bytes / 1e9, stats.num_shards, stats.num_shards == 1 ? "" : "s", secs,
                secs > 0 ? stats.weight_bytes / 1e9 / secs : 0.0, stats.num_threads,
                stats.num_threads == 1 ? "" : "s");
  } else {
    std::printf("wrote the config and tokenizer files (no weights)\n");
  }
  return Status::Ok();
}

}  // namespace

void AddSynthCommand(CLI::App& app) {
  auto flags = std::make_shared<SynthFlags>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write an HF checkpoint with deterministic random weights in a Llama-family shape");
  auto* preset = cmd->add_option("--preset", flags->preset, "Published shape: " + PresetNameList());
  auto* shape = cmd->add_option("--shape", flags->shape_file,
                                "JSON shape: an HF config.json, or {\"preset\": NAME, overrides}");
  preset->excludes(shape);
  cmd->add_option("--out", flags->out, "Output directory (created if missing)")->required();
  cmd->add_option("--num-layers", flags->num_layers, "Override the number of layers (cut depth)");
  cmd->add_option("--dtype", flags->dtype, "Weight dtype: bf16 or f16")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Random seed")->capture_default_str();
  cmd->add_option("--std", flags->stddev, "Standard deviation of the weights")
      ->capture_default_str();
  cmd->add_option("--max-shard-size", flags->max_shard_size,
                  "Largest safetensors shard, e.g. 5GB, 500MB, 2GiB")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "Worker threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("--force", flags->force,
                "Replace the checkpoint files in a non-empty output directory");
  cmd->add_flag("--no-weights", flags->no_weights,
                "Write only config.json, generation_config.json and the tokenizer files");
  cmd->callback([flags] {
    const Status s = RunSynth(*flags);
    if (!s.ok()) Fail("synth", s);
  });
}

}  // namespace kiln::cli
