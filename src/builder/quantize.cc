#include "builder/quantize.h"

#include <algorithm>
#include <array>
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

QuantizedTensor F32Tensor(const std::string& name, const std::vector<float>& v) {
  QuantizedTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = Shape{static_cast<int64_t>(v.size())};
  t.bytes.resize(v.size() * sizeof(float));
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// Each row quantized per output channel: kInt8 by QuantizeRowInt8, kFp8 by QuantizeRowFp8;
// kNone: the f32 matrix.
QuantizedTensor QuantizeRows(const std::string& name, Matrix& m, QuantMethod method) {
  if (method == QuantMethod::kNone) {
    QuantizedTensor t = F32Tensor(name, m.values);
    t.shape = Shape{m.rows, m.cols};
    return t;
  }
  CHECK(method == QuantMethod::kInt8 || method == QuantMethod::kFp8);
  const bool fp8 = method == QuantMethod::kFp8;
  QuantizedTensor t;
  t.name = name;
  t.dtype = fp8 ? DType::kF8E4M3 : DType::kI8;
  t.shape = Shape{m.rows, m.cols};
  t.bytes.resize(m.rows * m.cols);
  t.row_scales.resize(m.rows);
  uint8_t* codes = t.bytes.data();
  cpu::ParallelFor(m.rows, 0, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* row = codes + r * m.cols;
      t.row_scales[r] = fp8 ? QuantizeRowFp8(m.row(r), m.cols, row)
                            : QuantizeRowInt8(m.row(r), m.cols, reinterpret_cast<int8_t*>(row));
    }
  });
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

namespace {

// One decoder layer's tensors after SmoothQuant's folding (alpha 0: as stored), and the
// largest magnitude each of its linear inputs reached in calibration, smoothing included.
struct SmoothedLayer {
  Matrix q, k, v, o, gate, up, down, input_norm, post_norm;
  std::optional<Matrix> up_bias;  // when the model has MLP biases
  std::array<float, LayerCalibration::kNumSites> input_absmax{};
};

// max_j a[j] / s[j]: the per-tensor maximum of an input whose channel j is divided by s[j].
float SmoothedAbsMax(const std::vector<float>& channel_absmax, const std::vector<float>& s) {
  float out = 0;
  for (size_t j = 0; j < s.size(); ++j) out = std::max(out, channel_absmax[j] / s[j]);
  return out;
}

Result<SmoothedLayer> SmoothLayer(const Checkpoint& ckpt, const CalibrationStats& stats, int i,
                                  float alpha) {
  const ModelConfig& c = ckpt.config();
  KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kQkv, c.hidden_size, "qkv input"));
  KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kGateUp, c.hidden_size, "gate/up input"));
  KILN_RETURN_IF_ERROR(CheckSite(stats, i, Site::kDown, c.intermediate_size, "down_proj input"));
  const LayerCalibration& cal = stats.layers[i];
  const std::string p = "model.layers." + std::to_string(i) + ".";
  const std::string attn = p + "self_attn.";
  const std::string mlp = p + "mlp.";
  SmoothedLayer l;
  KILN_ASSIGN_OR_RETURN(l.q, LoadF32(ckpt, attn + "q_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.k, LoadF32(ckpt, attn + "k_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.v, LoadF32(ckpt, attn + "v_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.o, LoadF32(ckpt, attn + "o_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.gate, LoadF32(ckpt, mlp + "gate_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.up, LoadF32(ckpt, mlp + "up_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.down, LoadF32(ckpt, mlp + "down_proj.weight"));
  KILN_ASSIGN_OR_RETURN(l.input_norm, LoadF32(ckpt, p + "input_layernorm.weight"));
  KILN_ASSIGN_OR_RETURN(l.post_norm, LoadF32(ckpt, p + "post_attention_layernorm.weight"));

  // All three factors come from the original weights, before any folding.
  auto channels = [&](Site site) -> const std::vector<float>& {
    return cal.channel_absmax[static_cast<int>(site)];
  };
  const std::vector<float> s_qkv =
      SmoothingFactors(channels(Site::kQkv), ColumnAbsMax({&l.q, &l.k, &l.v}), alpha);
  const std::vector<float> s_gate_up =
      SmoothingFactors(channels(Site::kGateUp), ColumnAbsMax({&l.gate, &l.up}), alpha);
  const std::vector<float> s_down =
      SmoothingFactors(channels(Site::kDown), ColumnAbsMax({&l.down}), alpha);

  for (int64_t j = 0; j < c.hidden_size; ++j) {
    l.input_norm.values[j] /= s_qkv[j];
    l.post_norm.values[j] /= s_gate_up[j];
  }
  for (Matrix* m : {&l.q, &l.k, &l.v}) ScaleColumns(s_qkv, m);
  for (Matrix* m : {&l.gate, &l.up}) ScaleColumns(s_gate_up, m);
  for (int64_t r = 0; r < l.up.rows; ++r) {
    float* w = l.up.row(r);
    for (int64_t j = 0; j < l.up.cols; ++j) w[j] /= s_down[r];
  }
  ScaleColumns(s_down, &l.down);
  if (c.mlp_bias) {
    KILN_ASSIGN_OR_RETURN(l.up_bias, LoadF32(ckpt, mlp + "up_proj.bias"));
    for (int64_t r = 0; r < l.up_bias->cols; ++r) l.up_bias->values[r] /= s_down[r];
  }
  l.input_absmax[static_cast<int>(Site::kQkv)] = SmoothedAbsMax(channels(Site::kQkv), s_qkv);
  l.input_absmax[static_cast<int>(Site::kO)] = cal.tensor_absmax[static_cast<int>(Site::kO)];
  l.input_absmax[static_cast<int>(Site::kGateUp)] =
      SmoothedAbsMax(channels(Site::kGateUp), s_gate_up);
  l.input_absmax[static_cast<int>(Site::kDown)] = SmoothedAbsMax(channels(Site::kDown), s_down);
  return l;
}

// SmoothQuant's folding with `alpha`, then every layer's linear weights quantized per output
// channel to `method` (kInt8 or kFp8; with static_activations, FP8 weights get their input's
// calibrated scale).
Result<QuantizedModel> QuantizeSmoothed(const Checkpoint& ckpt, const CalibrationStats& stats,
                                        float alpha, QuantMethod method, bool static_activations,
                                        const char* recipe) {
  if (!(alpha >= 0.0f && alpha <= 1.0f)) {
    return InvalidArgument("smoothquant-alpha: must be in [0, 1], got " + std::to_string(alpha));
  }
  if (ckpt.quantization().method != QuantMethod::kNone) {
    return Unsupported(ckpt.path() + ": is already quantized (" +
                       std::string(QuantMethodName(ckpt.quantization().method)) + "); build " +
                       recipe + " from the unquantized model");
  }
  const ModelConfig& c = ckpt.config();
  if (static_cast<int>(stats.layers.size()) != c.num_layers) {
    return InvalidArgument("calibration statistics cover " + std::to_string(stats.layers.size()) +
                           " layers, the model has " + std::to_string(c.num_layers));
  }
  QuantizedModel out;
  out.method = method;
  for (int i = 0; i < c.num_layers; ++i) {
    KILN_ASSIGN_OR_RETURN(SmoothedLayer l, SmoothLayer(ckpt, stats, i, alpha));
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string attn = p + "self_attn.";
    const std::string mlp = p + "mlp.";
    if (l.up_bias) out.tensors.push_back(F32Tensor(mlp + "up_proj.bias", l.up_bias->values));
    out.tensors.push_back(F32Tensor(p + "input_layernorm.weight", l.input_norm.values));
    out.tensors.push_back(F32Tensor(p + "post_attention_layernorm.weight", l.post_norm.values));
    const std::pair<const char*, Matrix*> linears[] = {
        {"self_attn.q_proj.weight", &l.q}, {"self_attn.k_proj.weight", &l.k},
        {"self_attn.v_proj.weight", &l.v}, {"self_attn.o_proj.weight", &l.o},
        {"mlp.gate_proj.weight", &l.gate}, {"mlp.up_proj.weight", &l.up},
        {"mlp.down_proj.weight", &l.down}};
    const Site sites[] = {Site::kQkv,    Site::kQkv,    Site::kQkv, Site::kO,
                          Site::kGateUp, Site::kGateUp, Site::kDown};
    for (size_t j = 0; j < std::size(linears); ++j) {
      QuantizedTensor t = QuantizeRows(p + linears[j].first, *linears[j].second, method);
      if (static_activations) {
        t.input_scale = Fp8RowScale(l.input_absmax[static_cast<int>(sites[j])]);
      }
      out.tensors.push_back(std::move(t));
    }
  }
  out.kv_scales = stats.KvScales();
  return out;
}

}  // namespace

Result<QuantizedModel> QuantizeInt8SmoothQuant(const Checkpoint& ckpt,
                                               const CalibrationStats& stats,
                                               const SmoothQuantOptions& options) {
  return QuantizeSmoothed(ckpt, stats, options.alpha, QuantMethod::kInt8,
                          /*static_activations=*/false, "INT8 SmoothQuant");
}

Result<QuantizedModel> SmoothQuantFold(const Checkpoint& ckpt, const CalibrationStats& stats,
                                       float alpha) {
  return QuantizeSmoothed(ckpt, stats, alpha, QuantMethod::kNone, /*static_activations=*/false,
                          "a smoothed model");
}

Result<QuantizedModel> QuantizeFp8Calibrated(const Checkpoint& ckpt, const CalibrationStats& stats,
                                             const Fp8CalibratedOptions& options) {
  return QuantizeSmoothed(ckpt, stats, options.smoothquant_alpha, QuantMethod::kFp8,
                          options.static_activations, "FP8");
}

namespace {

nlohmann::json CalibrationJson(const CalibrationStats& stats) {
  return {{"source", stats.source},
          {"num_samples", stats.num_samples},
          {"num_tokens", stats.num_tokens}};
}

}  // namespace

std::string SmoothQuantDetailsJson(const CalibrationStats& stats,
                                   const SmoothQuantOptions& options) {
  nlohmann::json j = {{"algorithm", "smoothquant"},
                      {"alpha", options.alpha},
                      {"calibration", CalibrationJson(stats)},
                      {"o_proj_smoothed", false}};
  return j.dump();
}

std::string Fp8CalibratedDetailsJson(const CalibrationStats& stats,
                                     const Fp8CalibratedOptions& options) {
  nlohmann::json j = {{"algorithm", options.smoothquant_alpha > 0 ? "smoothquant-fp8" : "fp8"},
                      {"activation_scales", options.static_activations ? "static" : "dynamic"},
                      {"smoothquant_alpha", options.smoothquant_alpha},
                      {"calibration", CalibrationJson(stats)},
                      {"o_proj_smoothed", false}};
  return j.dump();
}

}  // namespace kiln
