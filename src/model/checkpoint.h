// Checkpoint: one model on disk, whatever its format, opened and validated.
//
//   auto ckpt = Checkpoint::Open("/models/Llama-3.1-8B");      // HF directory
//   auto ckpt = Checkpoint::Open("/models/smollm2.Q4_1.gguf");   // GGUF file
//
// Open() reads the config, maps every weight file (no copies) and checks each expected weight
// (ExpectedWeights) is present with the shape the config implies. Weights are exposed under their
// HF names whatever the format, so the rest of kiln has one vocabulary.
//
// Thread safety: immutable after Open(); all accessors may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/quantization.h"

namespace kiln {

enum class CheckpointFormat : uint8_t { kHfDirectory, kGguf, kEngine };
std::string_view CheckpointFormatName(CheckpointFormat format);  // "hf", "gguf", "engine"

// Layout of the q and k projection rows for rotary embeddings. HF checkpoints keep the rotated
// pairs half a head apart (NeoX style); llama.cpp's converter permutes q/k of `llama` GGUF files
// so that pairs are adjacent (GPT-J / Meta style). A backend must apply the matching RoPE (or
// undo the permutation on load).
enum class QkRopeLayout : uint8_t { kHalfSplit, kInterleaved };

struct Weight {
  std::string name;         // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::string source_name;  // the name in the file (differs for GGUF: "blk.0.attn_q.weight")
  std::string file;         // the file holding it
  DType dtype;
  Shape shape;  // row-major
  int64_t nbytes;
  const uint8_t* data;  // valid while the Checkpoint lives
  // A pre-quantized per-channel linear weight, e4m3 (dtype kF8E4M3) or int8 (kI8): its
  // dequantization scales, value[r, c] = code[r, c] * row_scales[r], fp32 [shape[0]] (a
  // per-tensor scale repeated). Empty for every other weight.
  std::vector<float> row_scales;
  // An e4m3 linear weight's static activation scale (model/quantization.h): its input is
  // quantized as e4m3(clamp(x / input_scale, -448, 448)) with this one calibrated scale. 0 =
  // dynamic, per token. From an engine's tensor table (kiln build --activation-scales static)
  // or an FP8 checkpoint's `input_scale` tensor.
  float input_scale = 0;
  // A W4A16 linear weight (dtype kI4, shape [n, k]; the format is model/quantization.h's):
  // present exactly when the weight is one.
  struct W4Params {
    int32_t group_size = 128;
    std::vector<uint16_t> scales;  // fp16 bits, [n, k / group_size]
    std::vector<int8_t> zeros;     // [n, k / group_size], each in [-8, 7]
    std::vector<int32_t> perm;     // [k] (act-order), or empty: stored column j = channel j
  };
  std::optional<W4Params> w4;
};

// How a checkpoint was quantized before kiln saw it (config.json's quantization_config, or
// ModelOpt's hf_quant_config.json); docs/quantization.md, "Pre-quantized checkpoints".
struct CheckpointQuantization {
  QuantMethod method = QuantMethod::kNone;  // kFp8: the layers' linear weights are e4m3 + scales
  std::string format;                       // "fp8", "compressed-tensors", "modelopt"; "" = none
  std::string config_file;                  // where it was declared
  bool per_channel = false;                 // weight scales per output channel, else per tensor
  // input_scale tensors present: the FP8 weights carry static activation scales
  // (Weight::input_scale).
  bool static_activations = false;
};

// The FP8 KV cache scales of one layer: stored K = e4m3(k / k_scale), V likewise.
struct KvCacheScales {
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// What a kiln engine directory (model/engine_dir.h) adds to a checkpoint.
struct EngineInfo {
  std::string quant_recipe;    // what `kiln build --quant` was: "none", "fp8", "w4a16-gptq", ...
  DType dtype = DType::kBF16;  // of its unquantized matrices: the runtime's compute type
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;  // the KV cache it was built for
  std::string gemm_table_path;  // tuned cuBLASLt algorithms, or "" when none were tuned
  // lm_head.weight is W4A16 (kiln build --quantize-lm-head; config untied). Runners can also
  // tell by its dtype (kI4 with Weight::w4), as for an HF W4 checkpoint's quantized lm_head.
  bool quantized_lm_head = false;
};

class Checkpoint {
 public:
  // Opens an HF checkpoint directory (config.json + model.safetensors or
  // model.safetensors.index.json + shards), a GGUF file or a kiln engine directory
  // (kiln-engine.json; model/engine_dir.h). Every failure names the file and,
  // where one is involved, the tensor: NotFound for missing files or weights, Corrupt for
  // malformed files or shapes that contradict the config, Unsupported for architectures and
  // dtypes kiln does not handle. An FP8 checkpoint (vLLM "fp8", compressed-tensors, ModelOpt)
  // has each e4m3 linear weight's scale tensor checked (shape, dtype, finite and positive) and
  // attached (Weight::row_scales), its static input scales checked and attached
  // (Weight::input_scale), and its KV scales read.
  static Result<Checkpoint> Open(const std::string& path);

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  CheckpointFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  // From generation_config.json (HF) or the GGUF tokenizer metadata; absent if neither exists.
  const std::optional<GenerationConfig>& generation_config() const { return generation_config_; }
  QkRopeLayout qk_rope_layout() const { return qk_rope_layout_; }
  // A human-readable model name (GGUF general.name, else the directory name).
  const std::string& name() const { return name_; }

  // Pre-quantization (FP8 checkpoints); method kNone for a plain checkpoint and for GGUF.
  const CheckpointQuantization& quantization() const { return quantization_; }
  // Per layer, from the checkpoint's k_scale / v_scale tensors (calibrated FP8 KV cache
  // scales); empty when it has none.
  const std::vector<KvCacheScales>& kv_cache_scales() const { return kv_cache_scales_; }
  // Set for an engine directory (format kEngine).
  const std::optional<EngineInfo>& engine() const { return engine_; }

  // Expected weights in ExpectedWeights() order.
  const std::vector<Weight>& weights() const { return weights_; }
  const Weight* Find(std::string_view hf_name) const;

  // Sum of the stored bytes of all weights, and per dtype.
  int64_t WeightBytes() const;
  std::map<DType, int64_t> WeightBytesByDType() const;
  // Elements actually stored (equals config().NumParameters() for a valid checkpoint).
  int64_t NumStoredParameters() const;

 private:
  Checkpoint();
  struct Files;  // the mapped files (safetensors shards or the GGUF file)

  CheckpointFormat format_ = CheckpointFormat::kHfDirectory;
  std::string path_;
  std::string name_;
  ModelConfig config_;
  std::optional<GenerationConfig> generation_config_;
  QkRopeLayout qk_rope_layout_ = QkRopeLayout::kHalfSplit;
  std::vector<Weight> weights_;
  CheckpointQuantization quantization_;
  std::vector<KvCacheScales> kv_cache_scales_;
  std::optional<EngineInfo> engine_;
  std::unique_ptr<Files> files_;

  static Result<Checkpoint> OpenHfDirectory(const std::string& dir);
  static Result<Checkpoint> OpenGguf(const std::string& file);
  static Result<Checkpoint> OpenEngine(const std::string& dir);  // engine_dir.cc
};

// The 16-bit type kiln's GPU backend computes `ckpt` in unless told otherwise (vLLM's --dtype
// auto): fp16 for GGUF files (their blocks' scales are fp16, llama.cpp computes in fp16, and fp16
// keeps 3 more bits of each dequantized weight than bf16) and
// for checkpoints declared float16; bf16 otherwise (bfloat16, and float32 checkpoints, whose
// range fp16 may not hold). Also the KV cache's type. `kiln inspect` reports it.
DType DefaultGpuDType(const Checkpoint& ckpt);

}  // namespace kiln
