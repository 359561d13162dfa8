// Writes a kiln engine directory (model/engine_dir.h, docs/engine-format.md) from an opened
// checkpoint: `kiln build`'s last step.
//
//   EngineBuildOptions o;  o.out_dir = "llama-fp8";  o.quantization = QuantMethod::kFp8;
//   KILN_RETURN_IF_ERROR(WriteEngine(ckpt, /*quantized=*/nullptr, o));
//   KILN_RETURN_IF_ERROR(SignEngine("llama-fp8", "key.pem"));
//
// Each tensor is written once, in order: a quantizer's version (QuantizedModel) if it has one;
// else, with quantization kFp8, a decoder layer's linear weight quantized per output channel
// (QuantizeRowFp8 of each row's f32 decoding: what the CPU runner does at load); else the
// source's values converted to the engine dtype (matrices) or f32 (norms and biases), e4m3
// weights of an FP8 checkpoint kept as they are. A weight's static activation scale (the
// quantizer's QuantizedTensor::input_scale, or an FP8 checkpoint's Weight::input_scale) goes
// into its tensor table entry. A GGUF `llama` file's q / k rows are put back
// in HF order (the engine's RoPE layout is always half-split). q|k|v and gate|up are written back
// to back as one fused matrix; each fused group or tensor starts on a 4096-byte boundary. The
// layers of EngineBuildOptions::unquantized_layers are written as the source has them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "builder/quantize.h"
#include "core/status.h"
#include "model/checkpoint.h"
#include "model/engine_dir.h"

namespace kiln {

struct EngineBuildOptions {
  std::string out_dir;
  bool overwrite = false;  // replace an existing engine directory (never another directory)
  // Of the unquantized matrices (embedding, lm_head, and the layers' when not quantized):
  // kBF16, kF16 or kF32. Unset: DefaultGpuDType(source).
  std::optional<DType> dtype;
  // kFp8 quantizes the layers' linear weights here; kInt8 and kW4A16 need `quantized`.
  QuantMethod quantization = QuantMethod::kNone;
  std::string quant_recipe = "none";  // recorded: "fp8", "int8-sq", "w4a16-gptq", ...
  // Decoder layers (0-based) written from the source as if unquantized: their linear weights in
  // the engine dtype, whatever `quantized` holds for them (the layer's every tensor: a smoothed
  // layer's norms too) and whatever `quantization` says. Mixed precision's usual choice, e.g.
  // the last layer. Recorded in the manifest's build.details ("unquantized_layers").
  std::vector<int> unquantized_layers;
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;  // recorded as the runtime default
  int threads = 0;                                    // conversion and digests; 0 = every core
  std::string kiln_version;                           // recorded in the manifest
  // Called as bytes are written ("weights") and hashed ("sha256").
  std::function<void(std::string_view stage, int64_t done, int64_t total)> progress;
};

// Writes the engine. Errors: InvalidArgument for bad options or a quantizer's tensor that does
// not match the model, AlreadyExists-like InvalidArgument when out_dir is a non-empty directory
// that is not an engine (or is one and overwrite is false), IoError naming the file, those of
// decoding the source.
Status WriteEngine(const Checkpoint& source, const QuantizedModel* quantized,
                   const EngineBuildOptions& options);

// Adds (or replaces) the engine's tuned GEMM table, `table_json`, and updates the manifest's
// file list (an existing signature then no longer verifies: sign after this).
Status WriteEngineGemmTable(const std::string& dir, std::string_view table_json);

// Signs the manifest of the engine at `dir` with the Ed25519 private key `private_key_pem`
// (writes kiln-engine.sig).
Status SignEngine(const std::string& dir, const std::string& private_key_pem);

}  // namespace kiln
