#include "builder/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "backend/cpu/thread_pool.h"
#include "model/dequant.h"

namespace kiln {
namespace {

using Site = ActivationObserver::Site;

// A [rows, cols] f32 matrix (or a vector: rows 1).
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;
  float* row(int64_t r) { return values.data() + r * cols; }
};

Result<Matrix> LoadF32(const Checkpoint& ckpt, const std::string& name) {
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": weight '" + name + "' is missing");
  if (!CanDequantizeToF32(w->dtype)) {
    return Unsupported(w->file + ": tensor '" + w->source_name + "' has dtype " +
                       std::string(DTypeName(w->dtype)) + ", which kiln cannot decode");
  }
  Matrix m;
  m.rows = w->shape.ndim() >= 2 ? w->shape[0] : 1;
  m.cols = w->shape.numel() / m.rows;
  m.values.resize(w->shape.numel());
  KILN_RETURN_IF_ERROR(
      DequantizeToF32(w->dtype, w->data, w->nbytes, m.values.size(), m.values.data())
          .WithContext(w->file + ": tensor '" + w->source_name + "'"));
  return m;
}

// max over the rows of every matrix of |W[:, j]|.
std::vector<float> ColumnAbsMax(std::initializer_list<Matrix*> matrices) {
  std::vector<float> out((*matrices.begin())->cols, 0.0f);
  for (Matrix* m : matrices) {
    for (int64_t r = 0; r < m->rows; ++r) {
      const float* w = m->row(r);
      for (int64_t j = 0; j < m->cols; ++j) out[j] = std::max(out[j], std::abs(w[j]));
    }
  }
  return out;
}

void ScaleColumns(const std::vector<float>& s, Matrix* m) {
  for (int64_t r = 0; r < m->rows; ++r) {
    float* w = m->row(r);
    for (int64_t j = 0; j < m->cols; ++j) w[j] *= s[j];
  }
}

QuantizedTensor QuantizeInt8(const std::string& name, Matrix& m) {
  QuantizedTensor t;
  t.name = name;
  t.dtype = DType::kI8;
  t.shape = Shape{m.rows, m.cols};
  t.bytes.resize(m.rows * m.cols);
  t.row_scales.resize(m.rows);
  auto* codes = reinterpret_cast<int8_t*>(t.bytes.data());
  cpu::ParallelFor(m.rows, 0, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      t.row_scales[r] = QuantizeRowInt8(m.row(r), m.cols, codes + r * m.cols);
    }
  });
  return t;
}

QuantizedTensor F32Tensor(const std::string& name, const std::vector<float>& v) {
  QuantizedTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = Shape{static_cast<int64_t>(v.size())};
  t.bytes.resize(v.size() * sizeof(float));
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

Status CheckSite(const CalibrationStats& stats, int layer, Site site, int64_t width,
                 const char* what) {
  const size_t got = stats.layers[layer].channel_absmax[static_cast<int>(site)].size();
  if (got != static_cast<size_t>(width)) {
    return InvalidArgument("calibration statistics of layer " + std::to_string(layer) + " have " +
                           std::to_string(got) + " " + what + " channels, the model " +
                           std::to_string(width));
  }
  return Status::Ok();
}

}  // namespace

const QuantizedTensor* QuantizedModel::Find(const std::string& name) const {
  for (const QuantizedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<float> SmoothingFactors(const std::vector<float>& act_absmax,
                                    const std::vector<float>& weight_absmax, float alpha) {
  CHECK_EQ(act_absmax.size(), weight_absmax.size());
  std::vector<float> s(act_absmax.size(), 1.0f);
  if (alpha == 0.0f) return s;
  for (size_t j = 0; j < s.size(); ++j) {
    const double a = act_absmax[j];
    const double w = weight_absmax[j];
    if (!(a > 0) || !(w > 0)) continue;  // a dead channel: nothing to balance
    const double v = std::pow(a, alpha) / std::pow(w, 1.0 - alpha);
    s[j] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
  }
  return s;
}

Result<QuantizedModel> QuantizeInt8SmoothQuant(const Checkpoint& ckpt,
                                               const CalibrationStats& stats,
                                               const SmoothQuantOptions& options) {
  if (!(options.alpha >= 0.0f && options.alpha <= 1.0f)) {
    return InvalidArgument("smoothquant-alpha: must be in [0, 1], got " +
                           std::to_string(options.alpha));
  }
  if (ckpt.quantization().method != QuantMethod::kNone) {
    return Unsupported(ckpt.path() + ": is already quantized (" +
                       std::string(QuantMethodName(ckpt.quantization().method)) +
                       "); build INT8 SmoothQuant from the unquantized model");
  }
  const ModelConfig& c = ckpt.config();
  if (static_cast<int>(stats.layers.size()) != c.num_layers) {
    return InvalidArgument("calibration statistics cover " + std::to_string(stats.layers.size()) +
                           " layers, the model has " + std::to_string(c.num_layers));
  }
  QuantizedModel out;
  out.method = QuantMethod::kInt8;
  for (int i = 0; i < c.num_layers; ++i) {
    KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kQkv, c.hidden_size, "qkv input"));
    KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kGateUp, c.hidden_size, "gate/up input"));
    KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kDown, c.intermediate_size, "down_proj input"));
    const LayerCalibration& cal = stats.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string attn = p + "self_attn.";
    const std::string mlp = p + "mlp.";
    KILN_ASSIGN_OR_RETURN(Matrix q, LoadF32(ckpt, attn + "q_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix k, LoadF32(ckpt, attn + "k_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix v, LoadF32(ckpt, attn + "v_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix o, LoadF32(ckpt, attn + "o_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix gate, LoadF32(ckpt, mlp + "gate_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix up, LoadF32(ckpt, mlp + "up_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix down, LoadF32(ckpt, mlp + "down_proj.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix input_norm, LoadF32(ckpt, p + "input_layernorm.weight"));
    KILN_ASSIGN_OR_RETURN(Matrix post_norm, LoadF32(ckpt, p + "post_attention_layernorm.weight"));

    // All three factors come from the original weights, before any folding.
    const std::vector<float> s_qkv =
        SmoothingFactors(cal.channel_absmax[static_cast<int>(Site::kQkv)],
                         ColumnAbsMax({&q, &k, &v}), options.alpha);
    const std::vector<float> s_gate_up =
        SmoothingFactors(cal.channel_absmax[static_cast<int>(Site::kGateUp)],
                         ColumnAbsMax({&gate, &up}), options.alpha);
    const std::vector<float> s_down = SmoothingFactors(
        cal.channel_absmax[static_cast<int>(Site::kDown)], ColumnAbsMax({&down}), options.alpha);

    for (int64_t j = 0; j < c.hidden_size; ++j) {
      input_norm.values[j] /= s_qkv[j];
      post_norm.values[j] /= s_gate_up[j];
    }
    for (Matrix* m : {&q, &k, &v}) ScaleColumns(s_qkv, m);
    for (Matrix* m : {&gate, &up}) ScaleColumns(s_gate_up, m);
    for (int64_t r = 0; r < up.rows; ++r) {
      float* w = up.row(r);
      for (int64_t j = 0; j < up.cols; ++j) w[j] /= s_down[r];
    }
    ScaleColumns(s_down, &down);
    if (c.mlp_bias) {
      KILN_ASSIGN_OR_RETURN(Matrix up_bias, LoadF32(ckpt, mlp + "up_proj.bias"));
      for (int64_t r = 0; r < up_bias.cols; ++r) up_bias.values[r] /= s_down[r];
      out.tensors.push_back(F32Tensor(mlp + "up_proj.bias", up_bias.values));
    }

    out.tensors.push_back(F32Tensor(p + "input_layernorm.weight", input_norm.values));
    out.tensors.push_back(F32Tensor(p + "post_attention_layernorm.weight", post_norm.values));
    out.tensors.push_back(QuantizeInt8(attn + "q_proj.weight", q));
    out.tensors.push_back(QuantizeInt8(attn + "k_proj.weight", k));
    out.tensors.push_back(QuantizeInt8(attn + "v_proj.weight", v));
    out.tensors.push_back(QuantizeInt8(attn + "o_proj.weight", o));
    out.tensors.push_back(QuantizeInt8(mlp + "gate_proj.weight", gate));
    out.tensors.push_back(QuantizeInt8(mlp + "up_proj.weight", up));
    out.tensors.push_back(QuantizeInt8(mlp + "down_proj.weight", down));
  }
  out.kv_scales = stats.KvScales();
  return out;
}

std::string SmoothQuantDetailsJson(const CalibrationStats& stats,
                                   const SmoothQuantOptions& options) {
  nlohmann::json j = {{"algorithm", "smoothquant"},
                      {"alpha", options.alpha},
                      {"calibration",
                       {{"source", stats.source},
                        {"num_samples", stats.num_samples},
                        {"num_tokens", stats.num_tokens}}},
                      {"o_proj_smoothed", false}};
  return j.dump();
}

}  // namespace kiln
