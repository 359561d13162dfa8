#include "builder/quantize_w4.h"

#include "builder/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "builder/calibration.h"
#include "core/logging.h"
#include "model/dequant.h"

namespace kiln {
namespace {

using Site = ActivationObserver::Site;

constexpr int kMaxQ = 15;  // unsigned 4-bit codes 0..15, stored as code - 8

// y [m, n] = x [m, k] w [n, k]^T in f32 (the CPU backend's Linear).
void MatMulT(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y,
             int threads) {
  cpu::WeightView view{cpu::WeightFormat::kF32, n, k, reinterpret_cast<const uint8_t*>(w), nullptr};
  cpu::Linear(x, k, m, view, nullptr, y, n, /*accumulate=*/false, threads);
}

struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
};

Result<Matrix> LoadF32(const Checkpoint& ckpt, const std::string& name) {
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": weight '" + name + "' is missing");
  if (w->w4.has_value() || w->dtype == DType::kI4) {
    return InvalidArgument(ckpt.path() + ": '" + name +
                           "' is already W4A16; quantize from an unquantized checkpoint");
  }
  Matrix m;
  m.rows = w->shape.ndim() >= 2 ? w->shape[0] : 1;
  m.cols = w->shape.numel() / m.rows;
  m.data.resize(m.rows * m.cols);
  KILN_RETURN_IF_ERROR(DequantizeToF32(w->dtype, w->data, w->nbytes, m.rows * m.cols, m.data.data())
                           .WithContext(w->file + ": tensor '" + w->source_name + "'"));
  if (!w->row_scales.empty()) {
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t c = 0; c < m.cols; ++c) m.data[r * m.cols + c] *= w->row_scales[r];
    }
  }
  return m;
}

// Stacks the rows of `parts` (same cols).
Matrix StackRows(const std::vector<Matrix>& parts) {
  Matrix out{0, parts[0].cols, {}};
  for (const Matrix& p : parts) {
    out.rows += p.rows;
    out.data.insert(out.data.end(), p.data.begin(), p.data.end());
  }
  return out;
}

// The group parameters of min/max RTN over `size` values: fp16 scale s, unsigned zero z.
struct GroupParams {
  uint16_t scale_bits;
  float scale;
  int zero;  // 0..15
};

GroupParams FindParams(const float* w, int64_t size) {
  float lo = w[0];
  float hi = w[0];
  for (int64_t i = 1; i < size; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  float scale = (hi - lo) / kMaxQ;
  if (!(scale > 1e-8f)) {
    // A constant group: any scale reproduces it when the value is a code times the scale.
    const float amax = std::max(std::abs(lo), std::abs(hi));
    scale = amax > 0 ? amax / 7 : 1.0f;
  }
  GroupParams p;
  p.scale_bits = F32ToF16(scale);
  p.scale = F16ToF32(p.scale_bits);
  if (!(p.scale > 0)) {  // underflow to zero: the smallest normal fp16
    p.scale_bits = 0x0400;
    p.scale = F16ToF32(p.scale_bits);
  }
  p.zero = static_cast<int>(std::clamp(std::nearbyint(-lo / p.scale), 0.0f, float{kMaxQ}));
  return p;
}

inline int QuantizeValue(float x, const GroupParams& p) {
  return static_cast<int>(
      std::clamp(std::nearbyint(x / p.scale) + static_cast<float>(p.zero), 0.0f, float{kMaxQ}));
}

inline float Dequantize(int q, const GroupParams& p) {
  return static_cast<float>(q - p.zero) * p.scale;
}

// Quantizes then dequantizes every group of every row of w [n, k] in place (AWQ's search).
void FakeQuantize(float* w, int64_t n, int64_t k, int32_t group) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; c += group) {
      float* g = w + r * k + c;
      const GroupParams p = FindParams(g, group);
      for (int32_t i = 0; i < group; ++i) g[i] = Dequantize(QuantizeValue(g[i], p), p);
    }
  }
}

Status CheckGroup(const Checkpoint& ckpt, const std::string& name, int64_t k, int32_t group) {
  if (group < 2 || group % 2 != 0 || k % group != 0) {
    return InvalidArgument(
        ckpt.path() + ": tensor '" + name + "' has input size " + std::to_string(k) +
        ", which group size " + std::to_string(group) +
        " does not divide (W4A16 needs an even group size that divides every linear layer's "
        "input size; e.g. --group-size 64 for hidden size 576)");
  }
  return Status::Ok();
}

// lm_head's source: its own weight, or a tied model's embedding (the same matrix).
std::string LmHeadSource(const Checkpoint& ckpt) {
  return ckpt.config().tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

// lm_head in W4A16: the group size divides the hidden size, and the vocab size is a multiple of
// 16 (the CUDA W4A16 kernels' row tile, kernels/w4a16.h: an engine should run on either
// backend; padding the vocab would change the logits' shape every consumer sees).
Status CheckLmHead(const Checkpoint& ckpt, int32_t group) {
  const std::string name = LmHeadSource(ckpt);
  const Weight* w = ckpt.Find(name);
  if (w == nullptr) return NotFound(ckpt.path() + ": '" + name + "' is missing");
  constexpr int64_t kRowTile = 16;
  if (w->shape[0] % kRowTile != 0) {
    return InvalidArgument(ckpt.path() + ": lm_head (" + name + ") has shape " +
                           w->shape.ToString() + "; --quantize-lm-head needs a vocab size that " +
                           "is a multiple of 16 (the W4A16 GEMM's row tile), not " +
                           std::to_string(w->shape[0]));
  }
  return CheckGroup(ckpt, "lm_head.weight", w->shape[1], group);
}

std::vector<uint8_t> PackCodes(const std::vector<int8_t>& codes) {
  std::vector<uint8_t> bytes(codes.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = PackI4(codes[2 * i], codes[2 * i + 1]);
  return bytes;
}

// Splits a fused site's codes/params back into its parts (rows `part_rows` each).
void EmitParts(const internal::W4Codes& q, int64_t k, const std::vector<std::string>& names,
               const std::vector<int64_t>& part_rows, QuantizedModel* out) {
  const int64_t groups = k / q.params.group_size;
  int64_t r0 = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t n = part_rows[i];
    QuantizedTensor t;
    t.name = names[i];
    t.dtype = DType::kI4;
    t.shape = Shape({n, k});
    std::vector<int8_t> codes(q.codes.begin() + r0 * k, q.codes.begin() + (r0 + n) * k);
    t.bytes = PackCodes(codes);
    Weight::W4Params p;
    p.group_size = q.params.group_size;
    p.scales.assign(q.params.scales.begin() + r0 * groups,
                    q.params.scales.begin() + (r0 + n) * groups);
    p.zeros.assign(q.params.zeros.begin() + r0 * groups,
                   q.params.zeros.begin() + (r0 + n) * groups);
    p.perm = q.params.perm;
    t.w4 = std::move(p);
    out->tensors.push_back(std::move(t));
    r0 += n;
  }
}

// GPTQ's H = 2 X^T X / N of a site's observed inputs.
std::vector<double> Hessian(const W4SiteStats& st) {
  std::vector<double> h(st.gram.size());
  for (size_t j = 0; j < h.size(); ++j) h[j] = 2 * st.gram[j] / st.rows_seen;
  return h;
}

QuantizedTensor F32Tensor(const std::string& name, const std::vector<float>& values) {
  QuantizedTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = Shape({static_cast<int64_t>(values.size())});
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// Sum of squared differences of a [m, n] and b.
double SquaredError(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    e += d * d;
  }
  return e;
}

// ---- AWQ ---------------------------------------------------------------------------------------

// The per-input-channel scale AWQ picks for weight w [n, k] whose inputs are `stats`: the
// alpha of the grid with the smallest output error on the sampled rows (alpha 0 is s = 1,
// plain RTN, so the search never does worse than RTN on those rows).
std::vector<float> SearchAwqScale(const Matrix& w, const W4SiteStats& stats, int32_t group,
                                  int32_t grid, int threads, float* best_alpha) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  const int64_t m = stats.num_samples;
  std::vector<float> mean(k);
  for (int64_t c = 0; c < k; ++c) {
    mean[c] = static_cast<float>(stats.abs_sum[c] / std::max<int64_t>(stats.rows_seen, 1));
  }
  std::vector<float> ref(m * n);
  MatMulT(stats.samples.data(), m, w.data.data(), n, k, ref.data(), threads);
  std::vector<float> best(k, 1.0f);
  double best_err = INFINITY;
  *best_alpha = 0;
  std::vector<float> s(k), wq(n * k), out(m * n);
  for (int32_t step = 0; step < grid; ++step) {
    const float alpha = static_cast<float>(step) / grid;
    float lo = INFINITY, hi = 0;
    for (int64_t c = 0; c < k; ++c) {
      s[c] = std::max(std::pow(std::max(mean[c], 1e-4f), alpha), 1e-4f);
      lo = std::min(lo, s[c]);
      hi = std::max(hi, s[c]);
    }
    const float norm = std::sqrt(lo * hi);
    for (float& v : s) v /= norm;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) wq[r * k + c] = w.data[r * k + c] * s[c];
    }
    FakeQuantize(wq.data(), n, k, group);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) wq[r * k + c] /= s[c];
    }
    MatMulT(stats.samples.data(), m, wq.data(), n, k, out.data(), threads);
    const double err = SquaredError(out, ref);
    if (err < best_err) {
      best_err = err;
      best = s;
      *best_alpha = alpha;
    }
  }
  return best;
}

// AWQ's clipping search: per (row, group), the clip ratio (1, 0.95, ..., 0.55) of max|w| whose
// quantization gives the smallest error of the group's partial output on the sampled inputs x
// [m, k]. Clips w in place.
void SearchAwqClip(Matrix& w, const float* x, int64_t m, int32_t group, int threads) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  constexpr int kSteps = 10;  // AutoAWQ: n_grid 20, max_shrink 0.5
  std::vector<float> xg(m * group), d(n * group), e(m * n);
  std::vector<float> best_err(n), best_ratio(n), amax(n), clipped(group);
  for (int64_t c0 = 0; c0 < k; c0 += group) {
    for (int64_t t = 0; t < m; ++t) {
      std::copy(x + t * k + c0, x + t * k + c0 + group, xg.data() + t * group);
    }
    for (int64_t r = 0; r < n; ++r) {
      float a = 0;
      for (int32_t i = 0; i < group; ++i) a = std::max(a, std::abs(w.data[r * k + c0 + i]));
      amax[r] = a;
      best_err[r] = INFINITY;
      best_ratio[r] = 1;
    }
    for (int step = 0; step < kSteps; ++step) {
      const float ratio = 1.0f - static_cast<float>(step) / 20;
      for (int64_t r = 0; r < n; ++r) {
        const float* g = w.data.data() + r * k + c0;
        const float limit = amax[r] * ratio;
        for (int32_t i = 0; i < group; ++i) clipped[i] = std::clamp(g[i], -limit, limit);
        const GroupParams p = FindParams(clipped.data(), group);
        for (int32_t i = 0; i < group; ++i) {
          d[r * group + i] = g[i] - Dequantize(QuantizeValue(clipped[i], p), p);
        }
      }
      MatMulT(xg.data(), m, d.data(), n, group, e.data(), threads);
      for (int64_t r = 0; r < n; ++r) {
        double err = 0;
        for (int64_t t = 0; t < m; ++t) err += static_cast<double>(e[t * n + r]) * e[t * n + r];
        if (err < best_err[r]) {
          best_err[r] = static_cast<float>(err);
          best_ratio[r] = ratio;
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const float limit = amax[r] * best_ratio[r];
      for (int32_t i = 0; i < group; ++i) {
        float& v = w.data[r * k + c0 + i];
        v = std::clamp(v, -limit, limit);
      }
    }
  }
}

// The sampled inputs divided by s (what the scaled weight sees).
std::vector<float> ScaledSamples(const W4SiteStats& stats, const std::vector<float>& s) {
  std::vector<float> x(stats.samples);
  for (int64_t t = 0; t < stats.num_samples; ++t) {
    for (int64_t c = 0; c < stats.cols; ++c) x[t * stats.cols + c] /= s[c];
  }
  return x;
}

void ScaleColumns(Matrix& w, const std::vector<float>& s) {
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) w.data[r * w.cols + c] *= s[c];
  }
}

}  // namespace

std::string_view W4AlgorithmName(W4Algorithm algorithm) {
  switch (algorithm) {
    case W4Algorithm::kRtn:
      return "rtn";
    case W4Algorithm::kAwq:
      return "awq";
    case W4Algorithm::kGptq:
      return "gptq";
  }
  return "unknown";
}

// ---- Calibration -------------------------------------------------------------------------------

W4Calibrator::W4Calibrator(int num_layers, bool gram, int64_t sample_stride, int64_t max_samples,
                           int num_threads, bool lm_head)
    : gram_(gram),
      lm_head_(lm_head),
      sample_stride_(std::max<int64_t>(sample_stride, 1)),
      max_samples_(max_samples),
      num_threads_(num_threads),
      sites_(num_layers * 4) {}

void W4Calibrator::ObserveLinearInput(int layer, Site site, const float* x, int64_t rows,
                                      int64_t cols, int64_t ld) {
  Accumulate(sites_[layer * 4 + static_cast<int>(site)], x, rows, cols, ld);
}

void W4Calibrator::ObserveLmHeadInput(const float* x, int64_t rows, int64_t cols, int64_t ld) {
  if (lm_head_) Accumulate(lm_head_stats_, x, rows, cols, ld);
}

void W4Calibrator::Accumulate(W4SiteStats& s, const float* x, int64_t rows, int64_t cols,
                              int64_t ld) {
  if (s.cols == 0) {
    s.cols = cols;
    s.abs_sum.assign(cols, 0.0);
    if (gram_) s.gram.assign(cols * cols, 0.0);
  }
  CHECK_EQ(s.cols, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    for (int64_t c = 0; c < cols; ++c) {
      s.abs_sum[c] += std::abs(xr[c]);
      s.absmax = std::max(s.absmax, std::abs(xr[c]));
    }
    if ((s.rows_seen + r) % sample_stride_ == 0 && s.num_samples < max_samples_) {
      s.samples.insert(s.samples.end(), xr, xr + cols);
      ++s.num_samples;
    }
  }
  s.rows_seen += rows;
  if (gram_) {
    // X^T X as the product of X^T with itself (f32 over this step's rows, then summed in f64).
    std::vector<float> xt(cols * rows), g(cols * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * ld + c];
    }
    MatMulT(xt.data(), cols, xt.data(), cols, rows, g.data(), num_threads_);
    for (int64_t i = 0; i < cols * cols; ++i) s.gram[i] += g[i];
  }
}

// ---- Algorithms --------------------------------------------------------------------------------

namespace internal {

std::pair<uint16_t, int8_t> QuantizeGroupRtn(const float* w, int64_t size, int8_t* codes) {
  const GroupParams p = FindParams(w, size);
  for (int64_t i = 0; i < size; ++i) codes[i] = static_cast<int8_t>(QuantizeValue(w[i], p) - 8);
  return {p.scale_bits, static_cast<int8_t>(p.zero - 8)};
}

W4Codes Rtn(const float* w, int64_t n, int64_t k, int32_t group) {
  W4Codes out;
  out.codes.resize(n * k);
  out.params.group_size = group;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; c += group) {
      auto [scale, zero] = QuantizeGroupRtn(w + r * k + c, group, out.codes.data() + r * k + c);
      out.params.scales.push_back(scale);
      out.params.zeros.push_back(zero);
    }
  }
  return out;
}

bool UpperCholeskyOfInverse(std::vector<double>& a, int64_t k) {
  // With J the reversal, J a J = L L^T (Cholesky), so a = V V^T with V = J L J upper, and
  // a^-1 = V^-T V^-1: U = V^-1 = J L^-1 J is the upper factor. Two k^3 / 3 steps instead of
  // Cholesky, inverse and Cholesky again.
  std::vector<double> l(k * k, 0.0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double s = a[(k - 1 - i) * k + (k - 1 - j)];
      const double* li = l.data() + i * k;
      const double* lj = l.data() + j * k;
      for (int64_t p = 0; p < j; ++p) s -= li[p] * lj[p];
      if (i == j) {
        if (!(s > 0)) return false;
        l[i * k + i] = std::sqrt(s);
      } else {
        l[i * k + j] = s / l[j * k + j];
      }
    }
  }
  // M = L^-1, row by row: M[i] = (e_i - sum_{p<i} L[i][p] M[p]) / L[i][i].
  std::vector<double> inv(k * k, 0.0);
  for (int64_t i = 0; i < k; ++i) {
    double* mi = inv.data() + i * k;
    mi[i] = 1.0;
    for (int64_t p = 0; p < i; ++p) {
      const double f = l[i * k + p];
      const double* mp = inv.data() + p * k;
      for (int64_t j = 0; j <= p; ++j) mi[j] -= f * mp[j];
    }
    const double d = l[i * k + i];
    for (int64_t j = 0; j <= i; ++j) mi[j] /= d;
  }
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) a[i * k + j] = inv[(k - 1 - i) * k + (k - 1 - j)];
  }
  return true;
}

namespace {

// GPTQ's column loop over w [n, k] (modified: ends as the dequantized weight) with Hessian h
// [k, k], whatever the number format: row r calls start(r, col, values, group) when it reaches
// the first column of each group of `group` columns (values: the group's current weights, the
// earlier columns' errors fed back) and round(r, col, x), which returns the value x rounds to
// and records its code. Rows run on several threads (each row on one). With act_order the
// columns are processed, and passed on, in the order of decreasing diag(h): the returned
// permutation (stored column j = input channel perm[j]), else empty.
template <typename Start, typename Round>
std::vector<int32_t> GptqColumns(std::vector<float>& w, int64_t n, int64_t k, std::vector<double> h,
                                 int32_t group, bool act_order, double damp, int num_threads,
                                 const Start& start, const Round& round) {
  for (int64_t i = 0; i < k; ++i) {
    if (h[i * k + i] == 0) {  // a channel never active: its weights do not matter
      h[i * k + i] = 1;
      for (int64_t r = 0; r < n; ++r) w[r * k + i] = 0;
    }
  }
  std::vector<int32_t> perm;
  if (act_order) {
    perm.resize(k);
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int32_t a, int32_t b) { return h[a * k + a] > h[b * k + b]; });
    std::vector<float> wp(n * k);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) wp[r * k + j] = w[r * k + perm[j]];
    }
    w = std::move(wp);
    std::vector<double> hp(k * k);
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) hp[i * k + j] = h[int64_t{perm[i]} * k + perm[j]];
    }
    h = std::move(hp);
  }
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) mean_diag += h[i * k + i];
  mean_diag /= k;
  std::vector<double> u;
  for (double d = damp;; d *= 10) {  // more dampening if rounding left H indefinite
    u = h;
    for (int64_t i = 0; i < k; ++i) u[i * k + i] += d * mean_diag;
    if (internal::UpperCholeskyOfInverse(u, k)) break;
    LOG(WARNING) << "GPTQ: H + " << d << " * mean(diag) is not positive definite; dampening more";
  }
  std::vector<float> hinv(u.begin(), u.end());

  // Blocks of whole groups, about 128 columns: a group's parameters come from its columns as
  // updated by the blocks before (the block's own columns are current when it starts).
  const int64_t block = group >= 128 ? group : group * (128 / group);
  std::vector<float> err(n * block), update;
  for (int64_t i1 = 0; i1 < k; i1 += block) {
    const int64_t i2 = std::min(i1 + block, k);
    const int64_t cnt = i2 - i1;
    cpu::ParallelFor(n, num_threads, [&](int64_t r_begin, int64_t r_end) {
      for (int64_t r = r_begin; r < r_end; ++r) {
        float* wr = w.data() + r * k;
        for (int64_t i = 0; i < cnt; ++i) {
          const int64_t col = i1 + i;
          if (col % group == 0 || i == 0) start(r, col, wr + (col / group) * group, group);
          const float x = wr[col];
          const float e = (x - round(r, col, x)) / hinv[col * k + col];
          const float* hrow = hinv.data() + col * k;
          for (int64_t j = col + 1; j < i2; ++j) wr[j] -= e * hrow[j];
          err[r * cnt + i] = e;
        }
      }
    });
    const int64_t rest = k - i2;
    if (rest > 0) {
      // w[:, i2:] -= err [n, cnt] hinv[i1:i2, i2:]
      std::vector<float> ht(rest * cnt);
      for (int64_t i = 0; i < cnt; ++i) {
        for (int64_t j = 0; j < rest; ++j) ht[j * cnt + i] = hinv[(i1 + i) * k + i2 + j];
      }
      update.resize(n * rest);
      MatMulT(err.data(), n, ht.data(), rest, cnt, update.data(), num_threads);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < rest; ++j) w[r * k + i2 + j] -= update[r * rest + j];
      }
    }
  }
  return perm;
}

}  // namespace

W4Codes Gptq(std::vector<float>& w, int64_t n, int64_t k, std::vector<double> h, int32_t group,
             bool act_order, double damp, int num_threads) {
  W4Codes out;
  out.codes.resize(n * k);
  const int64_t groups = k / group;
  out.params.group_size = group;
  out.params.scales.resize(n * groups);
  out.params.zeros.resize(n * groups);
  std::vector<GroupParams> current(n);  // each row's group being quantized
  out.params.perm = GptqColumns(
      w, n, k, std::move(h), group, act_order, damp, num_threads,
      [&](int64_t r, int64_t col, const float* values, int64_t size) {
        const GroupParams p = FindParams(values, size);
        current[r] = p;
        out.params.scales[r * groups + col / group] = p.scale_bits;
        out.params.zeros[r * groups + col / group] = static_cast<int8_t>(p.zero - 8);
      },
      [&](int64_t r, int64_t col, float x) {
        const int q = QuantizeValue(x, current[r]);
        out.codes[r * k + col] = static_cast<int8_t>(q - 8);
        return Dequantize(q, current[r]);
      });
  return out;
}

Fp8Codes GptqFp8(std::vector<float>& w, int64_t n, int64_t k, std::vector<double> h, bool act_order,
                 double damp, int num_threads) {
  Fp8Codes out;
  std::vector<uint8_t> codes(n * k);
  out.row_scales.resize(n);
  // One group of the whole row: its scale is the original row's (no error fed back yet), and an
  // error pushed past it saturates.
  const std::vector<int32_t> perm = GptqColumns(
      w, n, k, std::move(h), static_cast<int32_t>(k), act_order, damp, num_threads,
      [&](int64_t r, int64_t, const float* values, int64_t size) {
        float amax = 0;
        for (int64_t i = 0; i < size; ++i) amax = std::max(amax, std::abs(values[i]));
        out.row_scales[r] = Fp8RowScale(amax);
      },
      [&](int64_t r, int64_t col, float x) {
        const uint8_t code = Fp8KvEncode(x, out.row_scales[r]);
        codes[r * k + col] = code;
        return F8E4M3ToF32(code) * out.row_scales[r];
      });
  if (perm.empty()) {
    out.codes = std::move(codes);
  } else {  // FP8 rows have no permutation: the codes go back to input-channel order
    out.codes.resize(n * k);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) out.codes[r * k + perm[j]] = codes[r * k + j];
    }
  }
  return out;
}

}  // namespace internal

// ---- The model ---------------------------------------------------------------------------------

Result<QuantizedModel> QuantizeW4(const Checkpoint& ckpt, const W4Options& options,
                                  const std::vector<std::vector<int32_t>>& calibration) {
  const ModelConfig& c = ckpt.config();
  const int32_t g = options.group_size;
  // Group sizes first: a bad one fails before any calibration work.
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* name :
         {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"}) {
      const Weight* w = ckpt.Find(p + name + ".weight");
      if (w == nullptr) return NotFound(ckpt.path() + ": '" + p + name + ".weight' is missing");
      KILN_RETURN_IF_ERROR(CheckGroup(ckpt, w->name, w->shape[1], g));
    }
  }
  if (options.quantize_lm_head) KILN_RETURN_IF_ERROR(CheckLmHead(ckpt, g));
  const bool calibrated = options.algorithm != W4Algorithm::kRtn;
  std::unique_ptr<W4Calibrator> calib;
  if (calibrated) {
    int64_t total = 0;
    for (const auto& s : calibration) total += static_cast<int64_t>(s.size());
    if (total == 0) {
      return InvalidArgument(std::string(W4AlgorithmName(options.algorithm)) +
                             " needs calibration tokens (--calib)");
    }
    const int64_t samples = options.awq_sample_rows;
    calib = std::make_unique<W4Calibrator>(c.num_layers, options.algorithm == W4Algorithm::kGptq,
                                           std::max<int64_t>(total / samples, 1), samples,
                                           options.num_threads, options.quantize_lm_head);
    KILN_RETURN_IF_ERROR(RunCalibrationPass(ckpt, calibration, calib.get(), options.num_threads));
  }
  QuantizedModel out;
  out.method = QuantMethod::kW4A16;
  const int threads = options.num_threads;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    struct SiteSpec {
      Site site;
      std::vector<std::string> parts;
    };
    // Down before gate/up: AWQ folds down's scale into the up_proj rows before they quantize.
    const SiteSpec sites[] = {
        {Site::kQkv, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {Site::kO, {"self_attn.o_proj"}},
        {Site::kDown, {"mlp.down_proj"}},
        {Site::kGateUp, {"mlp.gate_proj", "mlp.up_proj"}},
    };
    std::vector<float> up_row_scale;  // AWQ: 1 / s of the down site, per up_proj row
    for (const SiteSpec& spec : sites) {
      std::vector<Matrix> parts;
      std::vector<std::string> names;
      std::vector<int64_t> rows;
      for (const std::string& part : spec.parts) {
        names.push_back(p + part + ".weight");
        KILN_ASSIGN_OR_RETURN(Matrix m, LoadF32(ckpt, names.back()));
        if (part == "mlp.up_proj" && !up_row_scale.empty()) {
          for (int64_t r = 0; r < m.rows; ++r) {
            for (int64_t col = 0; col < m.cols; ++col) m.data[r * m.cols + col] *= up_row_scale[r];
          }
        }
        rows.push_back(m.rows);
        parts.push_back(std::move(m));
      }
      Matrix w = StackRows(parts);
      parts.clear();
      internal::W4Codes q;
      if (options.algorithm == W4Algorithm::kRtn) {
        q = internal::Rtn(w.data.data(), w.rows, w.cols, g);
      } else if (options.algorithm == W4Algorithm::kGptq) {
        const W4SiteStats& st = calib->stats(i, spec.site);
        if (st.cols != w.cols) return Internal("calibration did not observe " + names[0]);
        q = internal::Gptq(w.data, w.rows, w.cols, Hessian(st), g, options.act_order,
                           options.gptq_damp, threads);
      } else {
        const W4SiteStats& st = calib->stats(i, spec.site);
        if (st.cols != w.cols) return Internal("calibration did not observe " + names[0]);
        std::vector<float> s(w.cols, 1.0f);
        float alpha = 0;
        if (spec.site != Site::kO) {
          s = SearchAwqScale(w, st, g, options.awq_grid, threads, &alpha);
          ScaleColumns(w, s);
        }
        if (options.awq_clip) {
          const std::vector<float> x = ScaledSamples(st, s);
          // Not q and k (AutoAWQ: their error is softmax-amplified, clipping them hurts).
          const int64_t skip = spec.site == Site::kQkv ? rows[0] + rows[1] : 0;
          Matrix tail{w.rows - skip, w.cols,
                      std::vector<float>(w.data.begin() + skip * w.cols, w.data.end())};
          SearchAwqClip(tail, x.data(), st.num_samples, g, threads);
          std::copy(tail.data.begin(), tail.data.end(), w.data.begin() + skip * w.cols);
        }
        q = internal::Rtn(w.data.data(), w.rows, w.cols, g);
        // 1/s folds into what makes the input.
        if (spec.site == Site::kQkv || spec.site == Site::kGateUp) {
          const std::string norm =
              p + (spec.site == Site::kQkv ? "input_layernorm.weight"
                                           : "post_attention_layernorm.weight");
          KILN_ASSIGN_OR_RETURN(Matrix nw, LoadF32(ckpt, norm));
          for (int64_t col = 0; col < w.cols; ++col) nw.data[col] /= s[col];
          out.tensors.push_back(F32Tensor(norm, nw.data));
        } else if (spec.site == Site::kDown) {
          up_row_scale.resize(w.cols);
          for (int64_t col = 0; col < w.cols; ++col) up_row_scale[col] = 1.0f / s[col];
        }
        LOG(INFO) << names[0] << ": AWQ alpha " << alpha;
      }
      EmitParts(q, w.cols, names, rows, &out);
    }
  }
  if (options.quantize_lm_head) {
    // lm_head reads one input, the final norm's output, observed in calibration: GPTQ with its
    // Hessian (no act-order: a permutation of its own would make lm_head's GEMM gather x once
    // more), or AWQ's scale and clip search with 1/s folded into the final norm (which feeds
    // nothing else: a tied model's embedding lookup does not pass through it), or RTN.
    KILN_ASSIGN_OR_RETURN(Matrix w, LoadF32(ckpt, LmHeadSource(ckpt)));
    internal::W4Codes q;
    if (options.algorithm == W4Algorithm::kRtn) {
      q = internal::Rtn(w.data.data(), w.rows, w.cols, g);
    } else {
      const W4SiteStats& st = calib->lm_head_stats();
      if (st.cols != w.cols) return Internal("calibration did not observe lm_head's input");
      if (options.algorithm == W4Algorithm::kGptq) {
        q = internal::Gptq(w.data, w.rows, w.cols, Hessian(st), g, /*act_order=*/false,
                           options.gptq_damp, threads);
      } else {
        float alpha = 0;
        const std::vector<float> s = SearchAwqScale(w, st, g, options.awq_grid, threads, &alpha);
        ScaleColumns(w, s);
        if (options.awq_clip) {
          SearchAwqClip(w, ScaledSamples(st, s).data(), st.num_samples, g, threads);
        }
        q = internal::Rtn(w.data.data(), w.rows, w.cols, g);
        KILN_ASSIGN_OR_RETURN(Matrix norm, LoadF32(ckpt, "model.norm.weight"));
        for (int64_t col = 0; col < w.cols; ++col) norm.data[col] /= s[col];
        out.tensors.push_back(F32Tensor("model.norm.weight", norm.data));
        LOG(INFO) << "lm_head.weight: AWQ alpha " << alpha;
      }
    }
    EmitParts(q, w.cols, {"lm_head.weight"}, {w.rows}, &out);
  }
  return out;
}

Result<QuantizedModel> QuantizeFp8Gptq(const Checkpoint& ckpt, const Fp8GptqOptions& options,
                                       const std::vector<std::vector<int32_t>>& calibration) {
  if (ckpt.quantization().method != QuantMethod::kNone) {
    return Unsupported(ckpt.path() + ": is already quantized (" +
                       std::string(QuantMethodName(ckpt.quantization().method)) +
                       "); build FP8 GPTQ from the unquantized model");
  }
  int64_t total = 0;
  for (const auto& s : calibration) total += static_cast<int64_t>(s.size());
  if (total == 0) return InvalidArgument("fp8 gptq needs calibration tokens (--calib)");
  const ModelConfig& c = ckpt.config();
  W4Calibrator calib(c.num_layers, /*gram=*/true, total, /*max_samples=*/0, options.num_threads);
  KILN_RETURN_IF_ERROR(RunCalibrationPass(ckpt, calibration, &calib, options.num_threads));
  QuantizedModel out;
  out.method = QuantMethod::kFp8;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::pair<Site, std::vector<std::string>> sites[] = {
        {Site::kQkv, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {Site::kO, {"self_attn.o_proj"}},
        {Site::kGateUp, {"mlp.gate_proj", "mlp.up_proj"}},
        {Site::kDown, {"mlp.down_proj"}},
    };
    for (const auto& [site, parts] : sites) {
      std::vector<Matrix> loaded;
      for (const std::string& part : parts) {
        KILN_ASSIGN_OR_RETURN(Matrix m, LoadF32(ckpt, p + part + ".weight"));
        loaded.push_back(std::move(m));
      }
      Matrix w = StackRows(loaded);
      const W4SiteStats& st = calib.stats(i, site);
      if (st.cols != w.cols) return Internal("calibration did not observe " + p + parts[0]);
      const internal::Fp8Codes q =
          internal::GptqFp8(w.data, w.rows, w.cols, Hessian(st), options.act_order, options.damp,
                            options.num_threads);
      int64_t r0 = 0;
      for (size_t j = 0; j < parts.size(); ++j) {
        const int64_t n = loaded[j].rows;
        QuantizedTensor t;
        t.name = p + parts[j] + ".weight";
        t.dtype = DType::kF8E4M3;
        t.shape = Shape({n, w.cols});
        t.bytes.assign(q.codes.begin() + r0 * w.cols, q.codes.begin() + (r0 + n) * w.cols);
        t.row_scales.assign(q.row_scales.begin() + r0, q.row_scales.begin() + r0 + n);
        if (options.static_activations) t.input_scale = Fp8RowScale(st.absmax);
        out.tensors.push_back(std::move(t));
        r0 += n;
      }
    }
  }
  return out;
}

}  // namespace kiln
