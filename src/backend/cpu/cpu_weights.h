// The weights of a Llama-family model as the CPU forward pass reads them, loaded from a
// Checkpoint (HF directory or GGUF file).
//
// Layout decisions (all exact: none changes a value, only where it lives):
//   * Matrices keep their stored format when Linear can decode it on the fly (f32, f16, bf16,
//     q4_0, q4_1, q8_0; cpu_ops.h WeightFormat), otherwise they are dequantized to f32 once here
//     (DequantizeToF32). Norm scales and biases are always f32.
//   * q, k, v are fused into one [q_size + 2 * kv_size, hidden] matrix (rows q, then k, then v)
//     and gate, up into one [2 * intermediate, hidden] matrix (gate rows, then up rows), so each
//     takes one Linear pass. If the parts differ in format, the fused matrix is f32.
//   * FP8 W8A8 (QuantMethod::kFp8, model/quantization.h) quantizes the fused qkv, o, gate_up and
//     down matrices of every layer to e4m3 rows with one fp32 scale per row, after fusion and
//     un-permutation: a row of a fused matrix is a row (an output channel) of one part, so this
//     is per-channel quantization of each part. The source is each row's f32 decoding (GGUF
//     blocks dequantized first). This one step changes values; embedding, norms, biases and
//     lm_head stay as they are. An FP8 checkpoint's or engine's e4m3 weights
//     (Weight::row_scales) are kept as they are stored, whatever the options, with their static
//     activation scales (Weight::input_scale; the fused matrix takes its parts' largest), and
//     its KV cache scales are the layers'.
//   * W4A16 weights (dtype kI4 with Weight::w4: engine directories, AutoAWQ / GPTQ checkpoints)
//     stay packed (WeightFormat::kW4) whatever the options; so does a 4-bit lm_head (kiln build
//     --quantize-lm-head: its own tensor, the config untied), whose logits Linear computes from
//     the packed codes like any layer's output. Fusing q/k/v or gate/up
//     concatenates their rows, group scales and zeros; the parts must share the group size and
//     the act-order permutation (they read the same input; GPTQ computes one per input when it
//     quantizes from one Hessian per site). Parts that differ are fused as f32 decodings
//     instead (logged).
//   * INT8 W8A8 (SmoothQuant) weights arrive already quantized (kiln build, or a
//     compressed-tensors int8 checkpoint): int8 rows with fp32 row scales (Weight::row_scales)
//     become WeightFormat::kI8 as they are stored, whatever the options.
//   * GGUF `llama` files store q_proj / k_proj rows permuted for llama.cpp's interleaved RoPE
//     (Checkpoint::qk_rope_layout() == kInterleaved). The rows are put back in HF order here
//     (UnpermuteQkRows), so the forward pass has one RoPE: HF's rotate_half.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/status.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln::cpu {

// A weight matrix that owns its bytes.
struct OwnedWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> bytes;     // rows * WeightRowBytes(format, cols)
  std::vector<float> row_scales;  // [rows] for kF8E4M3 and kI8, else empty
  Weight::W4Params w4;            // kW4: group scales, zeros, perm (model/quantization.h)
  float input_scale = 0;          // kF8E4M3: static activation scale; 0 = per token

  WeightView view() const {
    WeightView v{
        format,     rows, cols, bytes.data(), row_scales.empty() ? nullptr : row_scales.data(),
        input_scale};
    if (format == WeightFormat::kW4) {
      v.w4_group_size = w4.group_size;
      v.w4_scales = w4.scales.data();
      v.w4_zeros = w4.zeros.data();
      v.w4_perm = w4.perm.empty() ? nullptr : w4.perm.data();
    }
    return v;
  }
};

struct CpuLayerWeights {
  std::vector<float> input_norm;           // [hidden]
  OwnedWeight qkv;                         // [q_size + 2 * kv_size, hidden]
  std::vector<float> qkv_bias;             // [q_size + 2 * kv_size], or empty
  OwnedWeight o;                           // [hidden, q_size]
  std::vector<float> o_bias;               // [hidden], or empty
  std::vector<float> post_attention_norm;  // [hidden]
  OwnedWeight gate_up;                     // [2 * intermediate, hidden]
  std::vector<float> gate_up_bias;         // [2 * intermediate], or empty
  OwnedWeight down;                        // [hidden, intermediate]
  std::vector<float> down_bias;            // [hidden], or empty
  // The FP8 KV cache's scales of this layer (model/quantization.h): stored K = e4m3(k / k_scale).
  // A calibrated checkpoint's (Checkpoint::kv_cache_scales), else 1.0.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

struct CpuWeights {
  OwnedWeight embedding;  // [vocab, hidden]
  std::vector<CpuLayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  OwnedWeight lm_head;            // [vocab, hidden]; empty (rows == 0) when tied to embedding

  const OwnedWeight& output() const { return lm_head.rows > 0 ? lm_head : embedding; }
  int64_t MatrixBytes() const;  // bytes of all matrices as held, row scales included
};

// Loads every weight of `ckpt`. dequantize_at_load: hold every matrix that is not fp8 in f32
// (more memory and bandwidth, the same results). quantization kFp8: the layers' linear matrices
// in FP8 (above). Errors: Unsupported for a dtype DequantizeToF32 cannot decode;
// InvalidArgument for a GGUF q/k whose row count is not heads * head_dim (a corrupt file).
Result<CpuWeights> LoadCpuWeights(const Checkpoint& ckpt, bool dequantize_at_load,
                                  QuantMethod quantization);

// `w` with every row quantized by QuantizeRowFp8 from its f32 decoding (rows split over the
// threads). An fp8 or int8 `w` is returned as it is.
OwnedWeight QuantizeFp8(const OwnedWeight& w);

// llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute: reshape(heads, 2, head_dim / 2, ...)
// .swapaxes(1, 2)) reorders the rows of each head of head_dim rows so rotary pairs are adjacent:
//
//   GGUF row  h * head_dim + 2 * j + i   =   HF row  h * head_dim + i * head_dim / 2 + j
//   (i in {0, 1}, j < head_dim / 2)          e.g. head_dim 8: GGUF rows 0..7 = HF 0 4 1 5 2 6 3 7
//
// PermuteQkRows maps HF -> GGUF, UnpermuteQkRows GGUF -> HF; a row is row_bytes opaque bytes (a
// quantized row moves whole). REQUIRES: src, dst hold num_heads * head_dim rows; head_dim even;
// no overlap.
void PermuteQkRows(const uint8_t* src, int64_t num_heads, int64_t head_dim, int64_t row_bytes,
                   uint8_t* dst);
void UnpermuteQkRows(const uint8_t* src, int64_t num_heads, int64_t head_dim, int64_t row_bytes,
                     uint8_t* dst);

}  // namespace kiln::cpu
