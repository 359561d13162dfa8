// The CPU ops (cpu_ops.h): thread partitioning and the plain scalar ops here, the vectorized
// dot products and weight decoders in simd_*.cc. Compiled with -ffp-contract=off, so every
// product and sum written here is rounded on its own, whatever the compiler vectorizes.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "backend/cpu/simd.h"
#include "backend/cpu/thread_pool.h"
#include "core/check.h"
#include "model/quantization.h"

namespace kiln::cpu {
namespace {

// Threads for a loop of `num_items` independent items worth `work` float operations in all: one
// thread when the work (under ~50 us on one core) would not pay for waking the others, which on
// a busy machine can mean waiting a scheduler time slice at the barrier.
int ThreadsFor(int num_threads, int64_t num_items, int64_t work) {
  const int max_threads = num_threads > 0 ? num_threads : DefaultNumThreads();
  if (work < (int64_t{1} << 17)) return 1;
  return static_cast<int>(std::clamp<int64_t>(num_items, 1, max_threads));
}

}  // namespace

// ---- Weights -----------------------------------------------------------------------------------

std::string_view WeightFormatName(WeightFormat format) {
  if (format == WeightFormat::kW4) return "w4a16";
  return DTypeName(WeightFormatDType(format));
}

DType WeightFormatDType(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return DType::kF32;
    case WeightFormat::kF16:
      return DType::kF16;
    case WeightFormat::kBF16:
      return DType::kBF16;
    case WeightFormat::kQ4_0:
      return DType::kQ4_0;
    case WeightFormat::kQ4_1:
      return DType::kQ4_1;
    case WeightFormat::kQ8_0:
      return DType::kQ8_0;
    case WeightFormat::kF8E4M3:
      return DType::kF8E4M3;
    case WeightFormat::kW4:
      return DType::kI4;
    case WeightFormat::kI8:
      return DType::kI8;
  }
  CHECK(false) << "unreachable";
  return DType::kF32;
}

std::optional<WeightFormat> WeightFormatFor(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return WeightFormat::kF32;
    case DType::kF16:
      return WeightFormat::kF16;
    case DType::kBF16:
      return WeightFormat::kBF16;
    case DType::kQ4_0:
      return WeightFormat::kQ4_0;
    case DType::kQ4_1:
      return WeightFormat::kQ4_1;
    case DType::kQ8_0:
      return WeightFormat::kQ8_0;
    default:
      return std::nullopt;
  }
}

int64_t WeightRowBytes(WeightFormat format, int64_t cols) {
  const DTypeInfo& info = GetDTypeInfo(WeightFormatDType(format));
  CHECK_EQ(cols % info.block_size, 0) << "a row of " << WeightFormatName(format);
  return cols / info.block_size * info.block_bytes;
}

const float* F8E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int code = 0; code < 256; ++code) t[code] = F8E4M3ToF32(static_cast<uint8_t>(code));
    return t;
  }();
  return table.data();
}

namespace {

// W4A16 rows (cpu_ops.h kW4) to f32: out[r, j] (stored_order) or out[r, perm[j]] =
// (code - zero) * scale. Each group's 16 possible values are computed once (the same single
// rounding of the same product), then every code looks its value up.
void DecodeW4Rows(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out,
                  bool stored_order) {
  CHECK(w.w4_scales != nullptr && w.w4_zeros != nullptr && w.w4_group_size > 0 &&
        w.cols % w.w4_group_size == 0 && w.cols % 2 == 0)
      << "a w4a16 weight without its group parameters";
  const int64_t k = w.cols;
  const int64_t g = w.w4_group_size;
  const int64_t groups = k / g;
  const int32_t* perm = stored_order ? nullptr : w.w4_perm;
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t row = row_begin + r;
    const uint8_t* codes = w.data + row * (k / 2);
    float* o = out + r * k;
    for (int64_t gi = 0; gi < groups; ++gi) {
      const float scale = F16ToF32(w.w4_scales[row * groups + gi]);
      const int zero = w.w4_zeros[row * groups + gi];
      float lut[16];  // indexed by the nibble: codes 0..7, then -8..-1
      for (int q = 0; q < 16; ++q) lut[q] = static_cast<float>((q < 8 ? q : q - 16) - zero) * scale;
      for (int64_t c = gi * g; c < (gi + 1) * g; ++c) {
        const uint8_t byte = codes[c / 2];
        const float v = lut[c % 2 == 0 ? (byte & 0xf) : (byte >> 4)];
        o[perm != nullptr ? perm[c] : c] = v;
      }
    }
  }
}

}  // namespace

void DecodeRows(const WeightView& w, int64_t row_begin, int64_t num_rows, float* out) {
  CHECK(row_begin >= 0 && num_rows >= 0 && row_begin + num_rows <= w.rows);
  if (w.format == WeightFormat::kW4) {
    DecodeW4Rows(w, row_begin, num_rows, out, /*stored_order=*/false);
    return;
  }
  internal::BestSimdKernels().decode_rows(w, row_begin, num_rows, out);
}

// ---- Linear algebra ----------------------------------------------------------------------------

float Dot(const float* a, const float* b, int64_t n) {
  return internal::BestSimdKernels().dot(a, b, n);
}

namespace {

// Linear's W8A8 path (cpu_ops.h): the x rows quantized once, then the same panels as the f32
// path with the e4m3 values of both sides, the scales and bias applied per output element.
void LinearFp8(const float* x, int64_t ldx, int64_t num_rows, const WeightView& w,
               const float* bias, float* y, int64_t ldy, bool accumulate, int num_threads) {
  CHECK(w.row_scales != nullptr) << "an fp8 weight without row scales";
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int64_t k = w.cols;
  const int64_t n = w.rows;
  const float* table = F8E4M3Table();
  // Per token, dynamic (or one static scale): xq holds the e4m3 values (codes decoded,
  // unscaled), sx the scales.
  thread_local std::vector<float> xq;
  thread_local std::vector<float> sx;
  thread_local std::vector<uint8_t> codes;
  xq.resize(num_rows * k);
  sx.resize(num_rows);
  codes.resize(k);
  for (int64_t m = 0; m < num_rows; ++m) {
    if (w.input_scale > 0) {
      sx[m] = w.input_scale;
      QuantizeRowFp8Static(x + m * ldx, k, w.input_scale, codes.data());
    } else {
      sx[m] = QuantizeRowFp8(x + m * ldx, k, codes.data());
    }
    for (int64_t i = 0; i < k; ++i) xq[m * k + i] = table[codes[i]];
  }
  constexpr int64_t kPanel = 16;
  const int64_t num_panels = (n + kPanel - 1) / kPanel;
  const int threads = ThreadsFor(num_threads, num_panels, num_rows * n * k);
  const float* xq_data = xq.data();
  const float* sx_data = sx.data();
  ParallelFor(num_panels, threads, [&](int64_t p_begin, int64_t p_end) {
    thread_local std::vector<float> panel;
    thread_local std::vector<float> dots;
    if (panel.size() < static_cast<size_t>(kPanel * k)) panel.resize(kPanel * k);
    if (dots.size() < static_cast<size_t>(kPanel * num_rows)) dots.resize(kPanel * num_rows);
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kPanel;
      const int64_t cols = std::min(kPanel, n - n0);
      kernels.decode_rows(w, n0, cols, panel.data());
      kernels.linear_block(xq_data, k, num_rows, k, panel.data(), k, cols, nullptr, dots.data(),
                           cols, /*accumulate=*/false);
      for (int64_t m = 0; m < num_rows; ++m) {
        float* ym = y + m * ldy + n0;
        const float* dm = dots.data() + m * cols;
        for (int64_t c = 0; c < cols; ++c) {
          float v = dm[c] * sx_data[m] * w.row_scales[n0 + c];
          if (bias != nullptr) v = v + bias[n0 + c];
          if (accumulate) v = ym[c] + v;
          ym[c] = v;
        }
      }
    }
  });
}

// Linear's W4A16 path (cpu_ops.h): the input gathered once into stored-column order (when
// the weight has an act-order permutation), then the f32 path over panels decoded in stored
// order.
void LinearW4(const float* x, int64_t ldx, int64_t num_rows, const WeightView& w, const float* bias,
              float* y, int64_t ldy, bool accumulate, int num_threads) {
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int64_t k = w.cols;
  const int64_t n = w.rows;
  thread_local std::vector<float> gathered;
  if (w.w4_perm != nullptr) {
    gathered.resize(num_rows * k);
    for (int64_t m = 0; m < num_rows; ++m) {
      const float* xm = x + m * ldx;
      float* gm = gathered.data() + m * k;
      for (int64_t j = 0; j < k; ++j) gm[j] = xm[w.w4_perm[j]];
    }
    x = gathered.data();
    ldx = k;
  }
  constexpr int64_t kPanel = 16;
  const int64_t num_panels = (n + kPanel - 1) / kPanel;
  const int threads = ThreadsFor(num_threads, num_panels, num_rows * n * k);
  ParallelFor(num_panels, threads, [&](int64_t p_begin, int64_t p_end) {
    thread_local std::vector<float> panel;
    if (panel.size() < static_cast<size_t>(kPanel * k)) panel.resize(kPanel * k);
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kPanel;
      const int64_t cols = std::min(kPanel, n - n0);
      DecodeW4Rows(w, n0, cols, panel.data(), /*stored_order=*/true);
      kernels.linear_block(x, ldx, num_rows, k, panel.data(), k, cols, bias ? bias + n0 : nullptr,
                           y + n0, ldy, accumulate);
    }
  });
}

// sum_k a[k] * b[k] of int8 codes, exactly (|a * b| <= 2^14, k < 2^17). Integer sums are
// exact in any order, so the compiler's vectorization (an AVX2 clone where the CPU has it)
// cannot change a bit.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
int32_t
DotInt8(const int8_t* a, const int8_t* b, int64_t k) {
  int32_t acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += int32_t{a[i]} * int32_t{b[i]};
  return acc;
}

// Linear's INT8 W8A8 path (cpu_ops.h): the x rows quantized once, then per output element an
// exact int32 dot, converted and scaled.
void LinearInt8(const float* x, int64_t ldx, int64_t num_rows, const WeightView& w,
                const float* bias, float* y, int64_t ldy, bool accumulate, int num_threads) {
  CHECK(w.row_scales != nullptr) << "an int8 weight without row scales";
  CHECK_LT(w.cols, int64_t{1} << 17) << "int8 dot products this long could overflow int32";
  const int64_t k = w.cols;
  const int64_t n = w.rows;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> sx;
  xq.resize(num_rows * k);
  sx.resize(num_rows);
  for (int64_t m = 0; m < num_rows; ++m) sx[m] = QuantizeRowInt8(x + m * ldx, k, xq.data() + m * k);
  // Output columns in panels of 16 weight rows (16 x k bytes stay in L1/L2 while every x row
  // passes over them).
  constexpr int64_t kPanel = 16;
  const int64_t num_panels = (n + kPanel - 1) / kPanel;
  const int threads = ThreadsFor(num_threads, num_panels, num_rows * n * k);
  const int8_t* xq_data = xq.data();
  const float* sx_data = sx.data();
  const auto* wq = reinterpret_cast<const int8_t*>(w.data);
  ParallelFor(num_panels, threads, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kPanel;
      const int64_t cols = std::min(kPanel, n - n0);
      for (int64_t m = 0; m < num_rows; ++m) {
        float* ym = y + m * ldy + n0;
        for (int64_t c = 0; c < cols; ++c) {
          const int32_t acc = DotInt8(xq_data + m * k, wq + (n0 + c) * k, k);
          float v = static_cast<float>(acc) * sx_data[m] * w.row_scales[n0 + c];
          if (bias != nullptr) v = v + bias[n0 + c];
          if (accumulate) v = ym[c] + v;
          ym[c] = v;
        }
      }
    }
  });
}

}  // namespace

void Linear(const float* x, int64_t ldx, int64_t num_rows, const WeightView& w, const float* bias,
            float* y, int64_t ldy, bool accumulate, int num_threads) {
  if (num_rows == 0 || w.rows == 0) return;
  if (w.format == WeightFormat::kF8E4M3) {
    LinearFp8(x, ldx, num_rows, w, bias, y, ldy, accumulate, num_threads);
    return;
  }
  if (w.format == WeightFormat::kI8) {
    LinearInt8(x, ldx, num_rows, w, bias, y, ldy, accumulate, num_threads);
    return;
  }
  if (w.format == WeightFormat::kW4) {
    LinearW4(x, ldx, num_rows, w, bias, y, ldy, accumulate, num_threads);
    return;
  }
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int64_t k = w.cols;
  const int64_t n = w.rows;
  // Output columns are split in panels of kPanel weight rows; a thread decodes a panel into its
  // scratch (an f32 weight is read in place) and multiplies every x row with it.
  constexpr int64_t kPanel = 16;
  const int64_t num_panels = (n + kPanel - 1) / kPanel;
  const bool decode = w.format != WeightFormat::kF32;
  const int threads = ThreadsFor(num_threads, num_panels, num_rows * n * k);
  ParallelFor(num_panels, threads, [&](int64_t p_begin, int64_t p_end) {
    thread_local std::vector<float> panel;
    if (decode && panel.size() < static_cast<size_t>(kPanel * k)) panel.resize(kPanel * k);
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t n0 = p * kPanel;
      const int64_t cols = std::min(kPanel, n - n0);
      const float* wp = reinterpret_cast<const float*>(w.data) + n0 * k;
      if (decode) {
        kernels.decode_rows(w, n0, cols, panel.data());
        wp = panel.data();
      }
      kernels.linear_block(x, ldx, num_rows, k, wp, k, cols, bias ? bias + n0 : nullptr, y + n0,
                           ldy, accumulate);
    }
  });
}

// ---- Elementwise and normalization -------------------------------------------------------------

void RmsNorm(const float* x, int64_t ldx, const float* weight, int64_t num_rows, int64_t dim,
             float eps, float* out, int64_t ldo, int num_threads) {
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int threads = ThreadsFor(num_threads, num_rows, num_rows * dim * 4);
  ParallelFor(num_rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * ldx;
      float* o = out + r * ldo;
      const float mean_sq = kernels.dot(xr, xr, dim) / static_cast<float>(dim);
      const float inv_rms = 1.0f / std::sqrt(mean_sq + eps);
      for (int64_t i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv_rms);
    }
  });
}

void SiluMul(const float* gate_up, int64_t ld, int64_t num_rows, int64_t dim, float* out,
             int64_t ldo, int num_threads) {
  const int threads = ThreadsFor(num_threads, num_rows, num_rows * dim * 16);
  ParallelFor(num_rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up + r * ld;
      const float* u = g + dim;
      float* o = out + r * ldo;
      for (int64_t i = 0; i < dim; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

// ---- Rotary embedding --------------------------------------------------------------------------

Result<std::vector<float>> RopeInvFreq(int head_dim, double theta, const RopeScaling& scaling) {
  using Type = RopeScaling::Type;
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return InvalidArgument("rotary embedding needs an even head_dim, got " +
                           std::to_string(head_dim));
  }
  if (scaling.type == Type::kDynamic || scaling.type == Type::kYarn) {
    return Unsupported(
        "rope_scaling type '" + std::string(RopeScalingTypeName(scaling.type)) +
        "' is not implemented by kiln's backends (supported: none, linear, llama3); dynamic NTK "
        "changes the frequencies with the sequence length and yarn rescales attention");
  }
  if (scaling.type == Type::kLlama3 && scaling.original_max_position_embeddings <= 0) {
    return InvalidArgument("llama3 rope_scaling needs original_max_position_embeddings");
  }
  if ((scaling.type == Type::kLinear || scaling.type == Type::kLlama3) && !(scaling.factor > 0)) {
    return InvalidArgument("rope_scaling factor must be positive");
  }
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const double base = static_cast<float>(theta);
  for (int i = 0; i < half; ++i) {
    // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / power;
  }
  if (scaling.type == Type::kLinear) {
    for (float& f : inv_freq) f = static_cast<float>(f / scaling.factor);
  } else if (scaling.type == Type::kLlama3) {
    // transformers' _compute_llama3_parameters, evaluated in double and rounded once.
    const double factor = scaling.factor;
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / scaling.low_freq_factor;
    const double high_freq_wavelen = old_len / scaling.high_freq_factor;
    for (float& f : inv_freq) {
      const double freq = f;
      const double wavelen = 2 * std::numbers::pi / freq;
      double scaled = wavelen > low_freq_wavelen ? freq / factor : freq;
      if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
        const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = static_cast<float>(scaled);
    }
  }
  return inv_freq;
}

void RopeCosSin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int half_dim,
                float* cos, float* sin) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < half_dim; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos[t * half_dim + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half_dim + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void ApplyRope(float* x, int64_t ldx, int64_t num_tokens, int num_heads, int head_dim,
               const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + t * ldx + int64_t{h} * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

// ---- Paged KV cache and attention --------------------------------------------------------------

void StoreKv(const float* k, int64_t ldk, const float* v, int64_t ldv, const int64_t* slot_mapping,
             int64_t num_tokens, int64_t kv_width, float* k_cache, float* v_cache) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    std::copy(k + t * ldk, k + t * ldk + kv_width, k_cache + slot * kv_width);
    std::copy(v + t * ldv, v + t * ldv + kv_width, v_cache + slot * kv_width);
  }
}

void StoreKvFp8(const float* k, int64_t ldk, const float* v, int64_t ldv,
                const int64_t* slot_mapping, int64_t num_tokens, int64_t kv_width, float k_scale,
                float v_scale, uint8_t* k_cache, uint8_t* v_cache) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    uint8_t* kc = k_cache + slot_mapping[t] * kv_width;
    uint8_t* vc = v_cache + slot_mapping[t] * kv_width;
    for (int64_t i = 0; i < kv_width; ++i) {
      kc[i] = Fp8KvEncode(k[t * ldk + i], k_scale);
      vc[i] = Fp8KvEncode(v[t * ldv + i], v_scale);
    }
  }
}

namespace {

// PagedAttention over an FP8 cache: per (token, kv head), the context's K and V rows of that kv
// head are decoded once into contiguous f32 scratch ([context, head_dim], a single "block"), and
// the group's query heads attend over it with the f32 kernel: the same arithmetic as an f32 cache
// holding the decoded values.
void PagedAttentionFp8(const PagedAttentionArgs& a, const std::vector<int32_t>& token_seq,
                       int threads) {
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_width = int64_t{a.num_kv_heads} * a.head_dim;
  const int64_t num_tokens = static_cast<int64_t>(token_seq.size());
  const float* table = F8E4M3Table();
  ParallelFor(num_tokens * a.num_kv_heads, threads, [&](int64_t item_begin, int64_t item_end) {
    thread_local std::vector<float> probs;
    thread_local std::vector<float> keys;
    thread_local std::vector<float> values;
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t t = item / a.num_kv_heads;
      const int g = static_cast<int>(item % a.num_kv_heads);
      const int64_t context = int64_t{a.positions[t]} + 1;
      const int32_t* table_row = a.block_tables + int64_t{token_seq[t]} * a.max_blocks_per_seq;
      if (probs.size() < static_cast<size_t>(context)) probs.resize(context);
      if (keys.size() < static_cast<size_t>(context * a.head_dim)) {
        keys.resize(context * a.head_dim);
        values.resize(context * a.head_dim);
      }
      for (int64_t j = 0; j < context; ++j) {
        const int64_t slot = int64_t{table_row[j / a.block_size]} * a.block_size + j % a.block_size;
        const uint8_t* kc = a.k_cache_fp8 + slot * kv_width + int64_t{g} * a.head_dim;
        const uint8_t* vc = a.v_cache_fp8 + slot * kv_width + int64_t{g} * a.head_dim;
        float* kd = keys.data() + j * a.head_dim;
        float* vd = values.data() + j * a.head_dim;
        for (int d = 0; d < a.head_dim; ++d) {
          kd[d] = table[kc[d]] * a.k_scale;
          vd[d] = table[vc[d]] * a.v_scale;
        }
      }
      static constexpr int32_t kOneBlock = 0;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        internal::AttendArgs args;
        args.q = a.q + t * a.ldq + int64_t{h} * a.head_dim;
        args.k_cache = keys.data();
        args.v_cache = values.data();
        args.block_table = &kOneBlock;
        args.block_size = static_cast<int32_t>(context);
        args.kv_width = a.head_dim;
        args.head_dim = a.head_dim;
        args.context = context;
        args.scale = a.scale;
        args.probs = probs.data();
        args.out = a.out + t * a.ldo + int64_t{h} * a.head_dim;
        kernels.attend(args);
      }
    }
  });
}

}  // namespace

void PagedAttention(const PagedAttentionArgs& a, int num_threads) {
  CHECK(a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0);
  CHECK((a.k_cache_fp8 == nullptr) == (a.v_cache_fp8 == nullptr));
  const internal::SimdKernels& kernels = internal::BestSimdKernels();
  const int64_t num_tokens = a.cu_seqlens[a.num_seqs];
  std::vector<int32_t> token_seq(num_tokens);
  int64_t work = 0;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    for (int32_t t = a.cu_seqlens[s]; t < a.cu_seqlens[s + 1]; ++t) {
      token_seq[t] = s;
      work += int64_t{a.positions[t] + 1} * a.num_heads * a.head_dim * 4;
    }
  }
  if (a.k_cache_fp8 != nullptr) {
    // The decode costs about what the attention does: count it twice.
    PagedAttentionFp8(a, token_seq, ThreadsFor(num_threads, num_tokens * a.num_kv_heads, 2 * work));
    return;
  }
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_width = int64_t{a.num_kv_heads} * a.head_dim;
  const int64_t num_items = num_tokens * a.num_heads;
  const int threads = ThreadsFor(num_threads, num_items, work);
  ParallelFor(num_items, threads, [&](int64_t item_begin, int64_t item_end) {
    thread_local std::vector<float> probs;
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t t = item / a.num_heads;
      const int h = static_cast<int>(item % a.num_heads);
      internal::AttendArgs args;
      args.q = a.q + t * a.ldq + int64_t{h} * a.head_dim;
      args.k_cache = a.k_cache + int64_t{h / group} * a.head_dim;
      args.v_cache = a.v_cache + int64_t{h / group} * a.head_dim;
      args.block_table = a.block_tables + int64_t{token_seq[t]} * a.max_blocks_per_seq;
      args.block_size = a.block_size;
      args.kv_width = kv_width;
      args.head_dim = a.head_dim;
      args.context = int64_t{a.positions[t]} + 1;
      args.scale = a.scale;
      if (probs.size() < static_cast<size_t>(args.context)) probs.resize(args.context);
      args.probs = probs.data();
      args.out = a.out + t * a.ldo + int64_t{h} * a.head_dim;
      kernels.attend(args);
    }
  });
}

namespace internal {

const SimdKernels* SimdKernelsFor(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kGeneric:
      return &GenericKernels();
#if defined(KILN_CPU_X86)
    case SimdIsa::kAvx2:
      if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          __builtin_cpu_supports("f16c")) {
        return &Avx2Kernels();
      }
      return nullptr;
    case SimdIsa::kAvx512:
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
          __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        return &Avx512Kernels();
      }
      return nullptr;
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

const SimdKernels& BestSimdKernels() {
  static const SimdKernels* const best = [] {
    for (SimdIsa isa : {SimdIsa::kAvx512, SimdIsa::kAvx2}) {
      if (const SimdKernels* k = SimdKernelsFor(isa)) return k;
    }
    return &GenericKernels();
  }();
  return *best;
}

}  // namespace internal
}  // namespace kiln::cpu
