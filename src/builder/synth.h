// Synthetic HF checkpoints: deterministic random weights in any Llama-family shape, written as
// a directory that HF transformers (LlamaForCausalLM.from_pretrained, AutoTokenizer) and kiln
// load like a downloaded model:
//
//   config.json                      ToHfConfigJson(config), torch_dtype = the chosen dtype
//   generation_config.json           bos / eos ids
//   model.safetensors                one shard, or
//   model-0000k-of-0000N.safetensors + model.safetensors.index.json
//   tokenizer.json                   a synthetic byte-level BPE (synth_tokenizer.h)
//   tokenizer_config.json, special_tokens_map.json
//
// Weights (every tensor of ExpectedWeights(config), in that order):
//   RMSNorm scales              exactly 1.0
//   everything else (embedding, projections, lm_head, biases)
//                               normal(0, stddev), stddev 0.02 by default (normal_fill.h)
// With unit norms and std 0.02 every linear layer maps an RMS-normalised input to outputs of
// std ~0.02 * sqrt(fan_in) (1.3 for 4096), so the residual stream grows only like sqrt(layers)
// and logits stay O(1): bf16/f16 activations stay finite over arbitrarily long generations.
// Biases are drawn like weights (not zero) so that bias paths are exercised by comparisons.
//
// Determinism: the bytes are a function of (config, dtype, seed, stddev) only. Each tensor has
// its own counter-based stream keyed by (seed, tensor name), so neither the thread count nor
// the shard size nor --num-layers changes any value of a tensor that is written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "builder/safetensors_writer.h"
#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"

namespace kiln {

// What to do when the output directory already has something in it.
enum class OverwritePolicy : uint8_t {
  // Fail (InvalidArgument) when the directory exists and is not empty. The default: a typo in
  // --out must never clobber a real model.
  kRefuseNonEmpty,
  // (--force) Delete the checkpoint files already there (*.safetensors,
  // model.safetensors.index.json, config.json, generation_config.json, tokenizer.json,
  // tokenizer_config.json, special_tokens_map.json) and write the new ones; other files stay.
  kReplaceCheckpoint,
};

struct SynthOptions {
  // Where to write; created (with its parents) when missing. Required.
  std::string output_dir;
  // Weight dtype: kBF16 (default) or kF16. Also the config's torch_dtype.
  DType dtype = DType::kBF16;
  // Seed of every tensor's stream; the same seed gives the same bytes.
  uint64_t seed = 0;
  // Standard deviation of the normal weights and biases. Larger values make activations grow
  // faster with depth; 0.02 is the usual HF initializer_range.
  float stddev = 0.02f;
  // Maximum data bytes per safetensors shard (default HF's 5 GB). Smaller shards mean more
  // files; one file when the whole model fits.
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  // Worker threads generating and writing weights; <= 0 means hardware_concurrency(). The
  // output does not depend on it.
  int num_threads = 0;
  OverwritePolicy overwrite = OverwritePolicy::kRefuseNonEmpty;
  // false: write only the config and tokenizer files (no safetensors), for tests and inspection.
  bool write_weights = true;
  // Optional: called on the calling thread about twice a second while weights are written,
  // and once at the end, with the weight bytes written so far and in total.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

// Figures about a finished write.
struct SynthStats {
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;  // tensor data, all shards (0 without weights)
  int num_shards = 0;
  int num_threads = 0;
  double weight_seconds = 0;  // wall time spent generating and writing the shards
};

// Writes the synthetic checkpoint of `config` (its dtype is replaced by options.dtype) into
// options.output_dir. config.json is written last, so an interrupted run never leaves a
// directory that looks complete.
//
// Errors: InvalidArgument for bad options (no output dir, a dtype other than bf16/f16, stddev
// not positive and finite, a non-empty directory without kReplaceCheckpoint, an output path
// that is a file), or a config that fails Validate() or is too small for the tokenizer;
// ResourceExhausted when the file system has less free space than the checkpoint needs
// (checked before anything is written; the message gives both sizes); IoError naming the file
// for any failed create or write (shards written so far are removed).
// `stats`, when not null, is filled on success.
Status WriteSyntheticCheckpoint(const ModelConfig& config, const SynthOptions& options,
                                SynthStats* stats = nullptr);

}  // namespace kiln
