// Engine directories (`kiln build`, docs/engine-format.md): a model already converted,
// quantized, fused and tuned, that `Checkpoint::Open` maps and the runners upload as it is.
//
//   DIR/kiln-engine.json     the manifest: magic, format version, build options, tensor table,
//                            sha256 of every other file (EngineManifest below)
//   DIR/kiln-engine.sig      optional: Ed25519 signature of the manifest's bytes (hex)
//   DIR/config.json          the model's config (HF format), generation_config.json if any
//   DIR/weights.bin          every tensor, each fused group (q|k|v, gate|up) contiguous and
//                            4096-byte aligned for direct mmap and upload
//   DIR/tokenizer.json ...   the tokenizer and chat template as an HF directory holds them, or
//                            tokenizer.gguf.json (+ chat_template.jinja) for a GGUF source
//   DIR/gemm_table.json      optional: cuBLASLt algorithms tuned for the model's shapes
//
// The manifest lists every other file's digests, so a signature over the manifest covers the
// whole directory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

inline constexpr std::string_view kEngineManifestFile = "kiln-engine.json";
inline constexpr std::string_view kEngineSignatureFile = "kiln-engine.sig";
inline constexpr std::string_view kEngineWeightsFile = "weights.bin";
inline constexpr std::string_view kEngineGemmTableFile = "gemm_table.json";
inline constexpr std::string_view kEngineGgufTokenizerFile = "tokenizer.gguf.json";
inline constexpr std::string_view kEngineMagic = "kiln-engine";
inline constexpr int kEngineFormatVersion = 1;
inline constexpr int64_t kEngineAlignment = 4096;       // of each tensor or fused group
inline constexpr int64_t kEngineChunkBytes = 64 << 20;  // of the parallel chunk digests

// Bytes [offset, offset + nbytes) of weights.bin.
struct EngineSpan {
  int64_t offset = 0;
  int64_t nbytes = 0;
};

struct EngineTensor {
  std::string name;  // HF name
  DType dtype = DType::kF32;
  Shape shape;
  EngineSpan data;
  std::optional<EngineSpan> row_scales;  // f32 [rows]: e4m3 / int8 weights
  // e4m3 weights only: the static per-tensor activation scale (Weight::input_scale,
  // model/quantization.h); 0 = dynamic per-token scales. Optional in the manifest ("input_scale"
  // is written only when > 0), so engines written before it load unchanged.
  float input_scale = 0;
  struct W4 {
    int32_t group_size = 0;
    EngineSpan scales;               // fp16 [rows, cols / group_size]
    EngineSpan zeros;                // int8 [rows, cols / group_size]
    std::optional<EngineSpan> perm;  // int32 [cols]
  };
  std::optional<W4> w4;  // kI4 weights (model/quantization.h)
};

// Parts stored back to back, forming one fused matrix (rows of the first part, then the next).
struct EngineFusedGroup {
  std::string name;  // e.g. "model.layers.0.self_attn.qkv_proj.weight"
  std::vector<std::string> parts;
  EngineSpan data;
};

struct EngineManifest {
  int format_version = kEngineFormatVersion;
  std::string kiln_version;
  std::string created;  // UTC, ISO 8601
  std::string model_name;
  std::string source_path;
  std::string source_format;  // "hf" / "gguf" / "engine"
  QkRopeLayout qk_rope_layout = QkRopeLayout::kHalfSplit;
  DType dtype = DType::kBF16;  // of the unquantized matrices
  QuantMethod quantization = QuantMethod::kNone;
  std::string quant_recipe = "none";  // what --quant asked: "fp8", "w4a16-gptq", ...
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;  // the runtime default it was built for
  // lm_head.weight is W4A16 (kiln build --quantize-lm-head): then config.json is untied (a tied
  // source's embedding stays 16-bit for the lookup, lm_head is its own tensor). Optional in the
  // manifest (build.quantized_lm_head, absent = false), so older engines load unchanged.
  bool quantized_lm_head = false;
  std::string build_details = "{}";            // JSON object: calibration and quantizer settings
  std::vector<KvCacheScales> kv_cache_scales;  // per layer; empty = 1.0
  std::vector<EngineTensor> tensors;
  std::vector<EngineFusedGroup> fused;
  std::string tokenizer = "hf";  // "hf" (tokenizer.json ...) or "gguf" (tokenizer.gguf.json)
  std::string gemm_table;        // file name, or "" when none was tuned
  std::map<std::string, FileDigest> files;  // every file but the manifest and signature
};

std::string EngineManifestToJson(const EngineManifest& manifest);
// Errors: Corrupt naming `source` for malformed JSON or fields; Unsupported for another magic
// or a newer format version.
Result<EngineManifest> ParseEngineManifest(std::string_view text, const std::string& source);

// Whether `dir` holds a kiln engine (its manifest file exists).
bool IsEngineDirectory(const std::string& dir);

// Checks an engine before it is loaded (`serve --verify-key`): the signature of the manifest
// against `public_key_pem`, then every listed file's size and digests (chunks on `threads`
// threads). Errors: NotFound for an unsigned engine or a missing file, Corrupt for a bad
// signature or a changed file (naming it), those of the key file.
Status VerifyEngine(const std::string& dir, const std::string& public_key_pem, int threads);

}  // namespace kiln
