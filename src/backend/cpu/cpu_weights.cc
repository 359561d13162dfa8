#include "backend/cpu/cpu_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "backend/cpu/thread_pool.h"
#include "core/logging.h"
#include "model/dequant.h"

namespace kiln::cpu {
namespace {

Result<const Weight*> Find(const Checkpoint& ckpt, const std::string& name) {
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": weight '" + name + "' is missing");
  return w;
}

int64_t NumRows(const Weight& w) { return w.shape.ndim() >= 2 ? w.shape[0] : 1; }

// Dequantizes all of `w` into dst (numel floats), rows split over the threads.
Status DequantizeWeight(const Weight& w, float* dst) {
  if (!CanDequantizeToF32(w.dtype)) {
    return Unsupported(w.file + ": tensor '" + w.source_name + "' has dtype " +
                       std::string(DTypeName(w.dtype)) + ", which the CPU backend cannot decode");
  }
  const int64_t rows = NumRows(w);
  const int64_t cols = w.shape.numel() / rows;
  const int64_t row_bytes = w.nbytes / rows;
  constexpr int64_t kRowsPerChunk = 64;
  const int64_t num_chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<Status> status(num_chunks);
  ParallelFor(num_chunks, 0, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t r0 = c * kRowsPerChunk;
      const int64_t n = std::min(kRowsPerChunk, rows - r0);
      status[c] = DequantizeToF32(w.dtype, w.data + r0 * row_bytes, n * row_bytes, n * cols,
                                  dst + r0 * cols);
    }
  });
  for (const Status& s : status) {
    if (!s.ok()) return s.WithContext(w.file + ": tensor '" + w.source_name + "'");
  }
  return Status::Ok();
}

Result<std::vector<float>> LoadVector(const Checkpoint& ckpt, const std::string& name) {
  KILN_ASSIGN_OR_RETURN(const Weight* w, Find(ckpt, name));
  std::vector<float> out(w->shape.numel());
  KILN_RETURN_IF_ERROR(DequantizeWeight(*w, out.data()));
  return out;
}

// The f32 values of `w` (an fp8 or int8 row's codes times its scale).
OwnedWeight ToF32(const OwnedWeight& w) {
  if (w.format == WeightFormat::kF32) return w;
  OwnedWeight out{WeightFormat::kF32, w.rows, w.cols, {}, {}, {}};
  out.bytes.resize(w.rows * w.cols * sizeof(float));
  auto* f = reinterpret_cast<float*>(out.bytes.data());
  DecodeRows(w.view(), 0, w.rows, f);
  if (w.format == WeightFormat::kF8E4M3 || w.format == WeightFormat::kI8) {
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t c = 0; c < w.cols; ++c) f[r * w.cols + c] *= w.row_scales[r];
    }
  }
  return out;
}

// A W4A16 weight's parameters are consistent with its shape (Linear trusts them).
Status CheckW4(const Weight& w) {
  const Weight::W4Params& p = *w.w4;
  const int64_t n = w.shape[0];
  const int64_t k = w.shape[1];
  const std::string where = w.file + ": w4a16 tensor '" + w.name + "'";
  if (p.group_size <= 0 || k % p.group_size != 0 || k % 2 != 0) {
    return InvalidArgument(where + " of shape " + w.shape.ToString() + " has group size " +
                           std::to_string(p.group_size) +
                           "; the CPU backend needs an even input size that the group size "
                           "divides");
  }
  const size_t groups = static_cast<size_t>(n * (k / p.group_size));
  if (w.nbytes != n * k / 2 || p.scales.size() != groups || p.zeros.size() != groups ||
      (!p.perm.empty() && p.perm.size() != static_cast<size_t>(k))) {
    return Corrupt(where + ": " + std::to_string(w.nbytes) + " code bytes, " +
                   std::to_string(p.scales.size()) + " scales, " + std::to_string(p.zeros.size()) +
                   " zeros, " + std::to_string(p.perm.size()) +
                   " perm entries do not fit its shape " + w.shape.ToString());
  }
  for (int8_t z : p.zeros) {
    if (z < -8 || z > 7) return Corrupt(where + ": a zero point outside [-8, 7]");
  }
  std::vector<bool> seen(k, false);
  for (int32_t c : p.perm) {
    if (c < 0 || c >= k || seen[c]) return Corrupt(where + ": perm is not a permutation of 0..k-1");
    seen[c] = true;
  }
  return Status::Ok();
}

// A [rows, cols] matrix as held: its stored bytes when Linear decodes its dtype (an FP8 or
// INT8 checkpoint's e4m3 / int8 weight with its row scales always), else f32.
Result<OwnedWeight> LoadMatrix(const Checkpoint& ckpt, const std::string& name,
                               bool dequantize_at_load) {
  KILN_ASSIGN_OR_RETURN(const Weight* w, Find(ckpt, name));
  const int64_t rows = w->shape[0];
  const int64_t cols = w->shape[1];
  std::optional<WeightFormat> format = WeightFormatFor(w->dtype);
  OwnedWeight out;
  out.rows = rows;
  out.cols = cols;
  if (w->dtype == DType::kI4 && w->w4.has_value()) {
    KILN_RETURN_IF_ERROR(CheckW4(*w));
    out.format = WeightFormat::kW4;
    out.bytes.assign(w->data, w->data + w->nbytes);
    out.w4 = *w->w4;
  } else if ((w->dtype == DType::kF8E4M3 || w->dtype == DType::kI8) && !w->row_scales.empty()) {
    out.format = w->dtype == DType::kI8 ? WeightFormat::kI8 : WeightFormat::kF8E4M3;
    out.bytes.assign(w->data, w->data + w->nbytes);
    out.row_scales = w->row_scales;
    if (w->dtype == DType::kF8E4M3) out.input_scale = w->input_scale;
  } else if (format && !dequantize_at_load) {
    out.format = *format;
    out.bytes.assign(w->data, w->data + w->nbytes);
  } else {
    out.format = WeightFormat::kF32;
    out.bytes.resize(rows * cols * sizeof(float));
    KILN_RETURN_IF_ERROR(DequantizeWeight(*w, reinterpret_cast<float*>(out.bytes.data())));
  }
  return out;
}

// Rows of `parts` stacked in order; f32 unless every part has the same format (and, for W4A16,
// the same group size and permutation).
OwnedWeight Stack(std::vector<OwnedWeight> parts, const std::string& what) {
  bool same_format = true;
  for (const OwnedWeight& p : parts) same_format &= p.format == parts[0].format;
  if (same_format && parts[0].format == WeightFormat::kW4) {
    for (const OwnedWeight& p : parts) {
      if (p.w4.group_size != parts[0].w4.group_size || p.w4.perm != parts[0].w4.perm) {
        LOG(INFO) << what << ": its w4a16 parts differ in group size or act-order permutation, "
                  << "so the fused matrix is held in f32";
        same_format = false;
        break;
      }
    }
  }
  if (!same_format) {
    for (OwnedWeight& p : parts) p = ToF32(p);
  }
  OwnedWeight out{parts[0].format, 0, parts[0].cols, {}, {}, {}};
  out.w4.group_size = parts[0].w4.group_size;
  out.w4.perm = parts[0].w4.perm;
  // The parts read one input, so kiln build gives them one static scale; a checkpoint whose
  // parts differ gets the largest (vLLM's choice: no part's calibrated range saturates). A part
  // without one (dynamic) makes the fused matrix dynamic.
  bool all_static = true;
  for (const OwnedWeight& p : parts) {
    all_static &= p.input_scale > 0;
    out.input_scale = std::max(out.input_scale, p.input_scale);
  }
  if (!all_static) out.input_scale = 0;
  for (const OwnedWeight& p : parts) {
    CHECK_EQ(p.cols, out.cols);
    out.rows += p.rows;
    out.bytes.insert(out.bytes.end(), p.bytes.begin(), p.bytes.end());
    out.row_scales.insert(out.row_scales.end(), p.row_scales.begin(), p.row_scales.end());
    out.w4.scales.insert(out.w4.scales.end(), p.w4.scales.begin(), p.w4.scales.end());
    out.w4.zeros.insert(out.w4.zeros.end(), p.w4.zeros.begin(), p.w4.zeros.end());
  }
  return out;
}

// Puts GGUF-permuted q/k rows (of a matrix or a bias) back in HF order.
Status Unpermute(const Checkpoint& ckpt, const std::string& name, int64_t num_heads,
                 int64_t head_dim, int64_t rows, int64_t row_bytes, std::vector<uint8_t>* bytes) {
  if (rows != num_heads * head_dim || head_dim % 2 != 0) {
    return InvalidArgument(
        ckpt.path() + ": '" + name + "' has " + std::to_string(rows) +
        " rows, expected heads * head_dim = " + std::to_string(num_heads * head_dim) +
        " to undo llama.cpp's q/k "
        "permutation");
  }
  std::vector<uint8_t> hf(bytes->size());
  UnpermuteQkRows(bytes->data(), num_heads, head_dim, row_bytes, hf.data());
  *bytes = std::move(hf);
  return Status::Ok();
}

void AppendFloats(const std::vector<float>& v, std::vector<float>* out) {
  out->insert(out->end(), v.begin(), v.end());
}

}  // namespace

int64_t CpuWeights::MatrixBytes() const {
  auto bytes = [](const OwnedWeight& w) {
    return static_cast<int64_t>(w.bytes.size() + w.row_scales.size() * sizeof(float) +
                                w.w4.scales.size() * sizeof(uint16_t) + w.w4.zeros.size() +
                                w.w4.perm.size() * sizeof(int32_t));
  };
  int64_t total = bytes(embedding) + bytes(lm_head);
  for (const CpuLayerWeights& l : layers) {
    total += bytes(l.qkv) + bytes(l.o) + bytes(l.gate_up) + bytes(l.down);
  }
  return total;
}

OwnedWeight QuantizeFp8(const OwnedWeight& w) {
  // Pre-quantized weights are never requantized.
  if (w.format == WeightFormat::kF8E4M3 || w.format == WeightFormat::kI8) return w;
  OwnedWeight out{WeightFormat::kF8E4M3, w.rows, w.cols, {}, {}, {}};
  out.bytes.resize(w.rows * w.cols);
  out.row_scales.resize(w.rows);
  const WeightView view = w.view();
  ParallelFor(w.rows, 0, [&](int64_t begin, int64_t end) {
    std::vector<float> row(w.cols);
    for (int64_t r = begin; r < end; ++r) {
      DecodeRows(view, r, 1, row.data());
      out.row_scales[r] = QuantizeRowFp8(row.data(), w.cols, out.bytes.data() + r * w.cols);
    }
  });
  return out;
}

namespace {

// llama.cpp's converter stores row i * half + j of each q/k head (HF: the pair is half a head
// apart) at row 2 * j + i (GGUF: adjacent). Copies every row between the two layouts.
void MoveQkRows(const uint8_t* src, int64_t num_heads, int64_t head_dim, int64_t row_bytes,
                uint8_t* dst, bool to_gguf) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t hf_row = h * head_dim + i * half + j;
        const int64_t gguf_row = h * head_dim + 2 * j + i;
        const int64_t from = to_gguf ? hf_row : gguf_row;
        const int64_t to = to_gguf ? gguf_row : hf_row;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
}

}  // namespace

void PermuteQkRows(const uint8_t* src, int64_t num_heads, int64_t head_dim, int64_t row_bytes,
                   uint8_t* dst) {
  MoveQkRows(src, num_heads, head_dim, row_bytes, dst, /*to_gguf=*/true);
}

void UnpermuteQkRows(const uint8_t* src, int64_t num_heads, int64_t head_dim, int64_t row_bytes,
                     uint8_t* dst) {
  MoveQkRows(src, num_heads, head_dim, row_bytes, dst, /*to_gguf=*/false);
}

Result<CpuWeights> LoadCpuWeights(const Checkpoint& ckpt, bool dequantize_at_load,
                                  QuantMethod quantization) {
  const ModelConfig& c = ckpt.config();
  const bool unpermute = ckpt.qk_rope_layout() == QkRopeLayout::kInterleaved;
  CpuWeights out;
  KILN_ASSIGN_OR_RETURN(out.embedding,
                        LoadMatrix(ckpt, "model.embed_tokens.weight", dequantize_at_load));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    CpuLayerWeights l;
    KILN_ASSIGN_OR_RETURN(l.input_norm, LoadVector(ckpt, p + "input_layernorm.weight"));
    KILN_ASSIGN_OR_RETURN(l.post_attention_norm,
                          LoadVector(ckpt, p + "post_attention_layernorm.weight"));
    if (!ckpt.kv_cache_scales().empty()) {
      l.k_scale = ckpt.kv_cache_scales()[i].k_scale;
      l.v_scale = ckpt.kv_cache_scales()[i].v_scale;
    }

    std::vector<OwnedWeight> qkv(3);
    const char* kQkv[] = {"q_proj", "k_proj", "v_proj"};
    const int64_t heads[] = {c.num_heads, c.num_kv_heads, c.num_kv_heads};
    for (int j = 0; j < 3; ++j) {
      const std::string name = p + "self_attn." + kQkv[j];
      KILN_ASSIGN_OR_RETURN(qkv[j], LoadMatrix(ckpt, name + ".weight", dequantize_at_load));
      if (c.qkv_bias) {
        KILN_ASSIGN_OR_RETURN(std::vector<float> bias, LoadVector(ckpt, name + ".bias"));
        if (unpermute && j < 2) {
          std::vector<uint8_t> bytes(bias.size() * sizeof(float));
          std::memcpy(bytes.data(), bias.data(), bytes.size());
          KILN_RETURN_IF_ERROR(Unpermute(ckpt, name + ".bias", heads[j], c.head_dim,
                                         static_cast<int64_t>(bias.size()), sizeof(float), &bytes));
          std::memcpy(bias.data(), bytes.data(), bytes.size());
        }
        AppendFloats(bias, &l.qkv_bias);
      }
      if (unpermute && j < 2) {
        KILN_RETURN_IF_ERROR(Unpermute(ckpt, name + ".weight", heads[j], c.head_dim, qkv[j].rows,
                                       WeightRowBytes(qkv[j].format, qkv[j].cols), &qkv[j].bytes));
      }
    }
    l.qkv = Stack(std::move(qkv), p + "self_attn.qkv");
    KILN_ASSIGN_OR_RETURN(l.o, LoadMatrix(ckpt, p + "self_attn.o_proj.weight", dequantize_at_load));
    if (c.o_bias) {
      KILN_ASSIGN_OR_RETURN(l.o_bias, LoadVector(ckpt, p + "self_attn.o_proj.bias"));
    }

    std::vector<OwnedWeight> gate_up(2);
    KILN_ASSIGN_OR_RETURN(gate_up[0],
                          LoadMatrix(ckpt, p + "mlp.gate_proj.weight", dequantize_at_load));
    KILN_ASSIGN_OR_RETURN(gate_up[1],
                          LoadMatrix(ckpt, p + "mlp.up_proj.weight", dequantize_at_load));
    l.gate_up = Stack(std::move(gate_up), p + "mlp.gate_up");
    KILN_ASSIGN_OR_RETURN(l.down, LoadMatrix(ckpt, p + "mlp.down_proj.weight", dequantize_at_load));
    if (c.mlp_bias) {
      for (const char* name : {"gate_proj", "up_proj"}) {
        KILN_ASSIGN_OR_RETURN(std::vector<float> bias,
                              LoadVector(ckpt, p + "mlp." + name + ".bias"));
        AppendFloats(bias, &l.gate_up_bias);
      }
      KILN_ASSIGN_OR_RETURN(l.down_bias, LoadVector(ckpt, p + "mlp.down_proj.bias"));
    }
    if (quantization == QuantMethod::kFp8) {
      for (OwnedWeight* m : {&l.qkv, &l.o, &l.gate_up, &l.down}) *m = QuantizeFp8(*m);
    }
    out.layers.push_back(std::move(l));
  }
  KILN_ASSIGN_OR_RETURN(out.final_norm, LoadVector(ckpt, "model.norm.weight"));
  if (!c.tie_word_embeddings) {
    KILN_ASSIGN_OR_RETURN(out.lm_head, LoadMatrix(ckpt, "lm_head.weight", dequantize_at_load));
  }
  return out;
}

}  // namespace kiln::cpu
