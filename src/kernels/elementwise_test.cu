// The elementwise kernels (kernels/elementwise.h) against their CPU twins (label gpu), every case
// in both activation types: bf16 and fp16 (typed tests, named .../bf16 and .../f16).
//
// Inputs are fresh random values of the type T under test; the references run the CPU backend's
// f32 ops (backend/cpu/cpu_ops.h) on exactly those values, and apply on the host the roundings to
// T the kernels make after HF's modules in that dtype (elementwise.h), with kiln::F32ToBF16 /
// F32ToF16: round to nearest even, as __float2bfloat16_rn / __float2half_rn. Outputs are poisoned
// (NaN in both types) before each launch, so an element never written fails; stride padding, the
// q/k/v columns RoPE leaves alone and every KV-cache entry no token of the step owns must keep
// their bits.
//
// Tolerances, per kernel, the same rule for both types (each is a window of values of T, so it
// scales with T's ulp: fp16's is 8x finer than bf16's):
//   - EmbeddingLookup (cpu::DecodeRows of a bf16 / f16 table), FloatToBf16 / FloatToHalf
//     (kiln::F32ToBF16 / F32ToF16; NaN in, any NaN out), RmsNorm's residual sum T(residual + x),
//     RmsNormF32Residual's fp32 sum, RoPE's V heads: bitwise. Each is a copy, or one f32 operation
//     (rounded once the same way) on both sides.
//   - RopeStoreKv q and k heads: the output must be the rounding to T of a value within
//     kRopeErr * (|y0| + |y1|) of the twin's f32 result for the pair (y0, y1). Both sides
//     compute the same f32 angle; cosf/sinf differ by at most 2.5 f32 ulps (CUDA's sincosf is
//     within 2 ulps, cpu::RopeCosSin rounds the double result once), and the products and the sum
//     round differently (the kernel may fuse them): at most ~6e-7 (|x0| + |x1|), and a rotation
//     keeps |x0| + |x1| <= sqrt(2) (|y0| + |y1|). So the output is T(y), except where y lies that
//     close to a rounding tie: there the neighbour (1 ulp) passes too; near a cancellation
//     (|y| << |x|) a few ulps of y, which is the same absolute error.
//   - RmsNorm and SiluMul round twice: the normalized value x * rsqrt(mean(x^2) + eps), resp.
//     silu(gate), is rounded to T and then multiplied by the weight, resp. up (an exact f32
//     product of two values of T: 8 + 8, resp. 11 + 11 significant bits), and rounded again. The
//     first value comes from cpu::RmsNorm (weight 1) resp. cpu::SiluMul (up 1) in f32, and the
//     kernel's f32 value differs from it by the reduction order of the sum of squares and rsqrtf's
//     2 ulps (RmsNorm; typically ~1e-7 relative, kNormRel = 1e-5 allowed), resp. by __expf's
//     documented 2 + 1.16|g| ulps, the sum 1 + e^-g's rounding and the quotient's 2 ulps
//     (__fdividef), 4.5 + 1.16|g| in all (SiluMul; kSiluUlps allows twice 4 + 1.16|g|). The
//     output must lie between the second roundings of the roundings of ref * (1 -/+ rel): bitwise
//     T(T(ref) * w) except where ref sits that close to a tie of T, where the first rounding may
//     go the other way and the output may then differ by up to 2 ulps (1 ulp of the first value,
//     scaled by w, whose product can land a binade lower).
//   - RopeStoreKv into an fp8 cache (RopeKvArgsFp8T, k_scale / v_scale): v codes bitwise
//     E4m3Sat(v / v_scale) (one division and one rounding each side, saturating past 448); k codes
//     must lie between E4m3Sat(lo / k_scale) and E4m3Sat(hi / k_scale), [lo, hi] being the k
//     window above (every value of T the rotated k may round to). e4m3 keeps 4 significant bits
//     to T's 8 / 11, so the T values of one window almost always give one code: the code differs
//     from the nominal E4m3Sat(T(y) / k_scale) only where T(y) and its neighbour straddle a
//     rounding boundary of e4m3, i.e. where the quotient lies on (or, for k_scale != 1, next
//     to) a tie of e4m3, which T's rounding of the rotated value decides; then by one code.
// These windows are far narrower than the gap between the formats, so the fp16 run fails where
// the kernel rounds or converts through bf16 anywhere (FloatToHalf's edges include values that
// round differently in the two, and every random input exercises the other 3 mantissa bits).
// Each run prints how many elements were not bitwise the nominal value and the largest distance
// in ulps of T.
//
// Sanitizers: --gtest_filter='*SmallShapes*' runs every kernel and path at small sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/test_util.cuh"
#include "model/config.h"

namespace kiln::kernels {
namespace {

constexpr float kNormRel = 1e-5f;
constexpr float kRopeErr = 2e-6f;
constexpr float kSiluUlps = 2.0f;  // times 4 + 1.16|g| ulps (__expf, 1 + e^-g, __fdividef)

using Bits = std::vector<uint16_t>;

int CpuThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

template <typename T>
float Val(uint16_t b) {
  return Format<T>::ToF32(b);
}
template <typename T>
uint16_t Round(float f) {
  return Format<T>::FromF32(f);
}

// Random values of type T uniform in [-scale, scale].
template <typename T>
Bits Random(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-scale, scale);
  Bits out(n);
  for (uint16_t& b : out) b = Round<T>(uni(rng));
  return out;
}

// Where a bf16 or fp16 value (both sign-magnitude) sits on the line on which neighbouring values
// differ by 1.
int32_t Ordinal(uint16_t b) {
  return (b & 0x8000u) != 0 ? -static_cast<int32_t>(b & 0x7fffu) : static_cast<int32_t>(b);
}

struct Window {
  float lo, hi;
};

// Every value of type T that rounding once an f32 value within err of ref can give.
template <typename T>
Window RoundedNear(float ref, float err) {
  return {Val<T>(Round<T>(ref - err)), Val<T>(Round<T>(ref + err))};
}

// Every value of type T that rounding a value within rel (relative) of ref to T, multiplying it
// by the T value m (exact in f32) and rounding again can give.
template <typename T>
Window RoundedProduct(float ref, float rel, float m) {
  const Window first = RoundedNear<T>(ref, std::fabs(ref) * rel);
  const float a = Val<T>(Round<T>(first.lo * m)), b = Val<T>(Round<T>(first.hi * m));
  return {std::min(a, b), std::max(a, b)};
}

// Counts one comparison's outcome: elements outside the tolerance (the first few reported),
// elements not bitwise the nominal result, and the largest distance from it in ulps of T.
template <typename T>
class Tally {
 public:
  explicit Tally(std::string what) : what_(std::move(what)) {}
  Tally(const Tally&) = delete;
  Tally& operator=(const Tally&) = delete;

  // got must lie in w; nominal is the twin's value rounded at the kernel's rounding points.
  void Near(uint16_t got, Window w, uint16_t nominal, int64_t row, int64_t col) {
    const float g = Val<T>(got);
    Count(g >= w.lo && g <= w.hi, got, nominal, row, col, w);  // NaN (poison) fails
  }
  void Exact(uint16_t got, uint16_t want, int64_t row, int64_t col) {
    Count(got == want, got, want, row, col, {Val<T>(want), Val<T>(want)});
  }
  // An element the kernel must not write (stride padding, cache entries of other tokens).
  void Kept(uint16_t got, uint16_t before, int64_t row, int64_t col) {
    ++checked_;
    if (got != before && overwritten_++ < 5) {
      ADD_FAILURE() << what_ << " [" << row << ", " << col << "]: overwrote 0x" << std::hex
                    << before << " with 0x" << got;
    }
  }
  ~Tally() {
    EXPECT_EQ(failed_, 0) << what_ << ": elements outside the tolerance";
    EXPECT_EQ(overwritten_, 0) << what_ << ": elements written that must be kept";
    std::printf("  %-4s %-58s %11lld checked, %8lld inexact, max %d ulp\n",
                DTypeName(Format<T>::kDType).data(), what_.c_str(),
                static_cast<long long>(checked_), static_cast<long long>(inexact_), max_ulps_);
  }

 private:
  void Count(bool ok, uint16_t got, uint16_t nominal, int64_t row, int64_t col, Window w) {
    ++checked_;
    if (got != nominal) {
      ++inexact_;
      if (ok) max_ulps_ = std::max(max_ulps_, std::abs(Ordinal(got) - Ordinal(nominal)));
    }
    if (!ok && failed_++ < 5) {
      ADD_FAILURE() << what_ << " [" << row << ", " << col << "]: got " << Val<T>(got) << " (0x"
                    << std::hex << got << std::dec << "), want " << Val<T>(nominal) << " in ["
                    << w.lo << ", " << w.hi << "]";
    }
  }

  std::string what_;
  int64_t checked_ = 0, failed_ = 0, inexact_ = 0, overwritten_ = 0;
  int32_t max_ulps_ = 0;
};

// ---- EmbeddingLookup ---------------------------------------------------------------------------

template <typename T>
void RunEmbedding(int num_tokens, int hidden, int vocab, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  const Bits table = Random<T>(size_t(vocab) * hidden, 3.0f, rng);
  std::vector<int32_t> ids(num_tokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
  ids[0] = vocab - 1;  // the last row, and repeats below
  if (num_tokens > 2) ids[num_tokens - 1] = ids[1] = 0;

  // One poisoned guard row after the output.
  const size_t out_elems = size_t(num_tokens + 1) * hidden;
  Dev<uint16_t> dtable(table.size()), dout(out_elems);
  Dev<int32_t> dids(ids.size());
  dtable.Upload(table);
  dids.Upload(ids);
  dout.Upload(Bits(out_elems, kPoison));
  CUDA_OK(
      EmbeddingLookup(dids.ptr, num_tokens, As<T>(dtable.ptr), hidden, As<T>(dout.ptr), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const Bits out = dout.Download(out_elems);

  const cpu::WeightView view{*cpu::WeightFormatFor(Format<T>::kDType), vocab, hidden,
                             reinterpret_cast<const uint8_t*>(table.data())};
  std::vector<float> row(hidden);
  Tally<T> tally(what);
  for (int t = 0; t < num_tokens; ++t) {
    cpu::DecodeRows(view, ids[t], 1, row.data());
    for (int i = 0; i < hidden; ++i)
      tally.Exact(out[size_t(t) * hidden + i], Round<T>(row[i]), t, i);
  }
  for (int i = 0; i < hidden; ++i) tally.Kept(out[size_t(num_tokens) * hidden + i], kPoison, -1, i);
}

// ---- RmsNorm -----------------------------------------------------------------------------------

struct NormCase {
  int num_rows = 0;  // output rows
  int dim = 0;
  int ldx_pad = 0;  // x and residual rows: stride dim + ldx_pad
  int ldo_pad = 0;
  bool residual = false;
  int num_input_rows = 0;  // > 0: out row i normalizes a random row_ids[i] < num_input_rows
  float eps = 1e-5f;
  bool f32_residual = false;  // RmsNormF32Residual: an fp32 stream, the sum not rounded
  bool init = false;          // with f32_residual: the stream starts as x
};

template <typename T>
void RunRmsNorm(const NormCase& c, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  const bool pick = c.num_input_rows > 0;
  const int in_rows = pick ? c.num_input_rows : c.num_rows;
  const int dim = c.dim;
  const int64_t ldx = dim + c.ldx_pad, ldo = dim + c.ldo_pad;

  // Rows at different magnitudes: on the small ones eps weighs as much as mean(x^2); zero rows
  // normalize to zero. Stride padding is NaN, so reading it would show in the output.
  const float scales[] = {0.0f, 1e-3f, 0.05f, 1.0f, 20.0f};
  Bits x(size_t(in_rows) * ldx, kPoison), res(size_t(in_rows) * ldx, kPoison);
  for (int r = 0; r < in_rows; ++r) {
    const float scale = scales[r % 5 == 0 ? rng() % 5 : 3];
    const Bits xr = Random<T>(dim, scale, rng), rr = Random<T>(dim, 2.0f * scale, rng);
    std::copy(xr.begin(), xr.end(), x.begin() + r * ldx);
    std::copy(rr.begin(), rr.end(), res.begin() + r * ldx);
  }
  const Bits w = Random<T>(dim, 2.0f, rng);
  std::vector<int32_t> row_ids;
  if (pick) {  // a scattered subset in shuffled order
    row_ids.resize(in_rows);
    std::iota(row_ids.begin(), row_ids.end(), 0);
    std::shuffle(row_ids.begin(), row_ids.end(), rng);
    row_ids.resize(c.num_rows);
  }

  // An fp32 stream holds values T cannot: the draws times (1 + u * 2^-10).
  std::vector<float> res32(res.size(), std::numeric_limits<float>::quiet_NaN());
  std::uniform_real_distribution<float> frac(-1.0f, 1.0f);
  for (int r = 0; r < in_rows; ++r) {
    for (int d = 0; d < dim; ++d)
      res32[r * ldx + d] = Val<T>(res[r * ldx + d]) * (1 + frac(rng) / 1024);
  }

  // The rows the kernel normalizes: x, HF's bf16(residual + x), or the fp32 residual + x.
  std::vector<float> h(size_t(c.num_rows) * dim);
  Bits sum(res.size());  // residual + x rounded, where the kernel stores it
  std::vector<float> sum32(res32.size());
  for (int i = 0; i < c.num_rows; ++i) {
    const int64_t r = pick ? row_ids[i] : i;
    for (int d = 0; d < dim; ++d) {
      float v = Val<T>(x[r * ldx + d]);
      if (c.f32_residual) {
        sum32[r * ldx + d] = (c.init ? 0.0f : res32[r * ldx + d]) + v;
        v = sum32[r * ldx + d];
      } else if (c.residual) {
        sum[r * ldx + d] = Round<T>(Val<T>(res[r * ldx + d]) + v);
        v = Val<T>(sum[r * ldx + d]);
      }
      h[size_t(i) * dim + d] = v;
    }
  }
  // The twin with weight 1 gives the normalized row in f32; the weight is applied below at the
  // kernel's rounding point.
  std::vector<float> ones(dim, 1.0f), normed(h.size());
  cpu::RmsNorm(h.data(), dim, ones.data(), c.num_rows, dim, c.eps, normed.data(), dim,
               CpuThreads());

  const size_t out_elems = size_t(c.num_rows) * ldo;
  Dev<uint16_t> dx(x.size()), dres(res.size()), dw(w.size()), dout(out_elems);
  Dev<int32_t> dids(row_ids.size());
  dx.Upload(x);
  dres.Upload(res);
  dw.Upload(w);
  dids.Upload(row_ids);
  dout.Upload(Bits(out_elems, kPoison));
  Dev<float> dres32(c.f32_residual ? res32.size() : 0);
  if (c.f32_residual) {
    dres32.Upload(res32);
    CUDA_OK(RmsNormF32Residual(As<T>(dx.ptr), ldx, dres32.ptr, c.init, pick ? dids.ptr : nullptr,
                               c.num_rows, dim, As<T>(dw.ptr), c.eps, As<T>(dout.ptr), ldo,
                               nullptr));
  } else {
    CUDA_OK(RmsNorm(As<T>(dx.ptr), ldx, c.residual ? As<T>(dres.ptr) : nullptr,
                    pick ? dids.ptr : nullptr, c.num_rows, dim, As<T>(dw.ptr), c.eps,
                    As<T>(dout.ptr), ldo, nullptr));
  }
  CUDA_OK(cudaDeviceSynchronize());
  const Bits out = dout.Download(out_elems), res_after = dres.Download(res.size());

  {
    Tally<T> tally(what);
    for (int i = 0; i < c.num_rows; ++i) {
      for (int d = 0; d < dim; ++d) {
        const float n = normed[size_t(i) * dim + d], wd = Val<T>(w[d]);
        tally.Near(out[i * ldo + d], RoundedProduct<T>(n, kNormRel, wd),
                   Round<T>(Val<T>(Round<T>(n)) * wd), i, d);
      }
      for (int64_t d = dim; d < ldo; ++d) tally.Kept(out[i * ldo + d], kPoison, i, d);
    }
  }
  if (c.f32_residual) {
    // The fp32 sum goes back bit for bit (one IEEE addition each side), except with row_ids.
    const std::vector<float> after = dres32.Download(res32.size());
    int64_t wrong = 0;
    for (int r = 0; r < in_rows; ++r) {
      for (int64_t d = 0; d < ldx; ++d) {
        const size_t k = r * ldx + d;
        const float want = !pick && d < dim ? sum32[k] : res32[k];
        if (std::memcmp(&after[k], &want, sizeof(float)) != 0 && wrong++ < 5) {
          ADD_FAILURE() << what << " fp32 residual [" << r << ", " << d << "]: got " << after[k]
                        << ", want " << want;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << what;
    return;
  }
  if (!c.residual) return;
  // The sum goes back into residual, except with row_ids (the logits rows), where it is kept.
  Tally<T> tally(what + " residual");
  std::vector<bool> stored(in_rows, !pick);
  for (int r = 0; r < in_rows; ++r) {
    for (int64_t d = 0; d < ldx; ++d) {
      const size_t k = r * ldx + d;
      if (stored[r] && d < dim) {
        tally.Exact(res_after[k], sum[k], r, d);
      } else {
        tally.Kept(res_after[k], res[k], r, d);
      }
    }
  }
}

// ---- RopeStoreKv -------------------------------------------------------------------------------

// Where an e4m3 code (sign-magnitude) sits on the line on which neighbouring values differ by 1;
// the NaNs (0x7f, 0xff) land outside every finite code's range (+-126).
int Ordinal8(uint8_t b) { return (b & 0x80u) != 0 ? -(b & 0x7f) : (b & 0x7f); }

// Tally's counterpart for e4m3 codes: codes outside their window, codes not the nominal one (and
// by how many codes at most), codes kept, and how many saturated (+-448).
class CodeTally {
 public:
  explicit CodeTally(std::string what) : what_(std::move(what)) {}
  CodeTally(const CodeTally&) = delete;
  CodeTally& operator=(const CodeTally&) = delete;

  // got must lie between the codes lo and hi (inclusive); nominal is the expected code.
  void Near(uint8_t got, uint8_t lo, uint8_t hi, uint8_t nominal, int64_t row, int64_t col) {
    ++checked_;
    saturated_ += (got & 0x7f) == 0x7e;
    const int g = Ordinal8(got);
    if (got != nominal) {
      ++inexact_;
      max_codes_ = std::max(max_codes_, std::abs(g - Ordinal8(nominal)));
    }
    if ((g < Ordinal8(lo) || g > Ordinal8(hi)) && failed_++ < 5) {
      ADD_FAILURE() << what_ << " [" << row << ", " << col << "]: got code 0x" << std::hex
                    << int{got} << ", want 0x" << int{nominal} << " in [0x" << int{lo} << ", 0x"
                    << int{hi} << "]";
    }
  }
  void Kept(uint8_t got, uint8_t before, int64_t row, int64_t col) {
    ++checked_;
    if (got != before && overwritten_++ < 5) {
      ADD_FAILURE() << what_ << " [" << row << ", " << col << "]: overwrote 0x" << std::hex
                    << int{before} << " with 0x" << int{got};
    }
  }
  int64_t saturated() const { return saturated_; }
  ~CodeTally() {
    EXPECT_EQ(failed_, 0) << what_ << ": codes outside the tolerance";
    EXPECT_EQ(overwritten_, 0) << what_ << ": codes written that must be kept";
    std::printf("  e4m3 %-58s %11lld checked, %8lld inexact, max %d code, %lld saturated\n",
                what_.c_str(), static_cast<long long>(checked_), static_cast<long long>(inexact_),
                max_codes_, static_cast<long long>(saturated_));
  }

 private:
  std::string what_;
  int64_t checked_ = 0, failed_ = 0, inexact_ = 0, overwritten_ = 0, saturated_ = 0;
  int max_codes_ = 0;
};

// An fp8 cache's scales (a T cache's are 1).
struct KvScales {
  float k = 1.0f, v = 1.0f;
};

struct RopeCase {
  int num_heads, num_kv_heads, head_dim, block_size;
  int ld_pad = 0;  // qkv rows inside a wider buffer
  bool interleaved = false;
  double theta = 10000.0;
  RopeScaling scaling;
};

const RopeScaling kLinear4{.type = RopeScaling::Type::kLinear, .factor = 4.0};
// Llama-3.1's.
const RopeScaling kLlama3{.type = RopeScaling::Type::kLlama3,
                          .factor = 8.0,
                          .low_freq_factor = 1.0,
                          .high_freq_factor = 4.0,
                          .original_max_position_embeddings = 8192};

// The partner of element d in its rotation pair.
int Partner(int d, int head_dim, bool interleaved) {
  const int half = head_dim / 2;
  return interleaved ? d ^ 1 : (d < half ? d + half : d - half);
}

// C: the cache's element type, T or __nv_fp8_e4m3 (with scales sc). min_saturated: the fp8 k and
// v codes that must have saturated (a case that exercises it).
template <typename T, typename C = T>
void RunRope(const RopeCase& c, int num_tokens, uint32_t seed, const std::string& what,
             KvScales sc = {}, int64_t min_saturated = 0) {
  constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
  using CacheBits = std::conditional_t<kFp8, uint8_t, uint16_t>;
  constexpr CacheBits kCachePoison = kFp8 ? kPoisonFp8 : kPoison;
  std::mt19937 rng(seed);
  const int nh = c.num_heads, kvh = c.num_kv_heads, hd = c.head_dim, bs = c.block_size;
  const int half = hd / 2, kv_width = kvh * hd;
  const int width = (nh + 2 * kvh) * hd;
  const int64_t ld = width + c.ld_pad;

  // The step's tokens: runs of consecutive positions (sequences, some starting deep into their
  // context, up to Llama-3.1's 128K), with padding rows (slot -1) among them and at the end.
  struct Run {
    int first_token, len, start;
  };
  std::vector<Run> runs;
  std::vector<int32_t> positions(num_tokens, 0);
  std::vector<int64_t> slots(num_tokens, -1);
  int num_blocks_used = 0;
  for (int t = 0; t < num_tokens;) {
    if (num_tokens > 1 && (rng() % 16 == 0 || t == num_tokens - 1)) {
      positions[t++] = static_cast<int32_t>(rng() % 4096);
      continue;
    }
    const int len =
        std::min(num_tokens - t, rng() % 4 == 0 ? 1 : 1 + static_cast<int>(rng() % num_tokens));
    const int start = rng() % 3 == 0 ? 0 : static_cast<int>(rng() % 131000);
    runs.push_back({t, len, start});
    num_blocks_used += (start + len - 1) / bs - start / bs + 1;
    for (int j = 0; j < len; ++j) positions[t + j] = start + j;
    t += len;
  }
  // Each run's blocks come from a shuffled pool with spare blocks: non-contiguous, and blocks
  // nobody writes this step stay as they were.
  const int num_blocks = num_blocks_used + num_blocks_used / 3 + 2;
  std::vector<int64_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  int next = 0;
  for (const Run& r : runs) {
    int64_t block = -1;
    for (int j = 0; j < r.len; ++j) {
      const int p = r.start + j;
      if (j == 0 || p % bs == 0) block = pool[next++];
      slots[r.first_token + j] = block * bs + p % bs;
    }
  }

  // qkv rows random, stride padding NaN; the cache holds other tokens' random entries, and NaN in
  // the slots this step writes.
  Bits qkv(size_t(num_tokens) * ld, kPoison);
  for (int t = 0; t < num_tokens; ++t) {
    const Bits row = Random<T>(width, 2.0f, rng);
    std::copy(row.begin(), row.end(), qkv.begin() + t * ld);
  }
  const size_t cache_elems = size_t(num_blocks) * kvh * bs * hd;
  std::vector<CacheBits> k_cache, v_cache;
  if constexpr (kFp8) {
    // Random finite codes (0x7f and 0xff are the NaNs).
    for (auto* cache : {&k_cache, &v_cache}) {
      cache->resize(cache_elems);
      for (uint8_t& b : *cache) b = static_cast<uint8_t>(rng() % 0x7f) | (rng() % 2 ? 0x80 : 0);
    }
  } else {
    k_cache = Random<T>(cache_elems, 1.0f, rng);
    v_cache = Random<T>(cache_elems, 1.0f, rng);
  }
  auto cache_index = [&](int64_t slot, int head, int d) {
    return ((slot / bs * kvh + head) * bs + slot % bs) * hd + d;
  };
  for (int64_t slot : slots) {
    if (slot < 0) continue;
    for (int head = 0; head < kvh; ++head) {
      for (int d = 0; d < hd; ++d) {
        k_cache[cache_index(slot, head, d)] = v_cache[cache_index(slot, head, d)] = kCachePoison;
      }
    }
  }

  // The twin: rotate the q and k heads (adjacent in a row) in f32. cpu::ApplyRope pairs elements
  // half a head apart; the interleaved layout pairs 2i with 2i + 1 at the same frequency, so its
  // heads are permuted to halves first and back after.
  Result<std::vector<float>> inv_freq = cpu::RopeInvFreq(hd, c.theta, c.scaling);
  ASSERT_TRUE(inv_freq.ok()) << inv_freq.status().ToString();
  std::vector<float> cos(size_t(num_tokens) * half), sin(cos.size());
  cpu::RopeCosSin(positions.data(), num_tokens, inv_freq->data(), half, cos.data(), sin.data());
  std::vector<float> ref(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) ref[i] = Val<T>(qkv[i]);
  auto permute = [&](bool to_halves) {
    std::vector<float> tmp(hd);
    for (int t = 0; t < num_tokens; ++t) {
      for (int head = 0; head < nh + kvh; ++head) {
        float* v = ref.data() + t * ld + head * hd;
        for (int i = 0; i < half; ++i) {
          if (to_halves) {
            tmp[i] = v[2 * i];
            tmp[i + half] = v[2 * i + 1];
          } else {
            tmp[2 * i] = v[i];
            tmp[2 * i + 1] = v[i + half];
          }
        }
        std::copy(tmp.begin(), tmp.end(), v);
      }
    }
  };
  if (c.interleaved) permute(true);
  cpu::ApplyRope(ref.data(), ld, num_tokens, nh + kvh, hd, cos.data(), sin.data());
  if (c.interleaved) permute(false);
  // The cache twin, [num_slots, kv_width] (NaN: not written this step), from the live tokens.
  std::vector<float> k_live, v_live;
  std::vector<int64_t> live_slots;
  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    live_slots.push_back(slots[t]);
    const float* row = ref.data() + t * ld;
    k_live.insert(k_live.end(), row + nh * hd, row + (nh + kvh) * hd);
    v_live.insert(v_live.end(), row + (nh + kvh) * hd, row + width);
  }
  std::vector<float> k_ref(size_t(num_blocks) * bs * kv_width, NAN), v_ref(k_ref.size(), NAN);
  cpu::StoreKv(k_live.data(), kv_width, v_live.data(), kv_width, live_slots.data(),
               static_cast<int64_t>(live_slots.size()), kv_width, k_ref.data(), v_ref.data());

  Dev<uint16_t> dqkv(qkv.size());
  Dev<CacheBits> dk(cache_elems), dv(cache_elems);
  Dev<int32_t> dpos(num_tokens);
  Dev<int64_t> dslots(num_tokens);
  Dev<float> dfreq(half);
  dqkv.Upload(qkv);
  dk.Upload(k_cache);
  dv.Upload(v_cache);
  dpos.Upload(positions);
  dslots.Upload(slots);
  dfreq.Upload(*inv_freq);
  RopeKvArgsT<T, C> a;
  a.qkv = As<T>(dqkv.ptr);
  a.ld = ld;
  a.positions = dpos.ptr;
  a.slot_mapping = dslots.ptr;
  a.num_tokens = num_tokens;
  a.num_heads = nh;
  a.num_kv_heads = kvh;
  a.head_dim = hd;
  a.inv_freq = dfreq.ptr;
  a.interleaved = c.interleaved;
  a.k_cache = reinterpret_cast<C*>(dk.ptr);
  a.v_cache = reinterpret_cast<C*>(dv.ptr);
  a.block_size = bs;
  a.k_scale = sc.k;
  a.v_scale = sc.v;
  CUDA_OK(RopeStoreKv(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const Bits qkv_out = dqkv.Download(qkv.size());
  const std::vector<CacheBits> k_out = dk.Download(cache_elems), v_out = dv.Download(cache_elems);

  // A rotated element against the twin's pair (y0, y1).
  auto rotated = [&](Tally<T>& tally, uint16_t got, const float* head, int d, int64_t row) {
    const float y = head[d],
                err = kRopeErr * (std::fabs(y) + std::fabs(head[Partner(d, hd, c.interleaved)]));
    tally.Near(got, RoundedNear<T>(y, err), Round<T>(y), row, d);
  };
  {
    Tally<T> tally(what + " q (k/v columns kept)");
    for (int t = 0; t < num_tokens; ++t) {
      for (int64_t i = 0; i < ld; ++i) {
        const size_t k = t * ld + i;
        if (i < nh * hd) {
          rotated(tally, qkv_out[k], ref.data() + t * ld + i / hd * hd, i % hd, t);
        } else {
          tally.Kept(qkv_out[k], qkv[k], t, i);
        }
      }
    }
  }
  using CacheTally = std::conditional_t<kFp8, CodeTally, Tally<T>>;
  CacheTally k_tally(what + " k cache"), v_tally(what + " v cache");
  for (int64_t slot = 0; slot < int64_t{num_blocks} * bs; ++slot) {
    for (int head = 0; head < kvh; ++head) {
      const float* k_head = k_ref.data() + slot * kv_width + head * hd;
      const float* v_head = v_ref.data() + slot * kv_width + head * hd;
      for (int d = 0; d < hd; ++d) {
        const int64_t i = cache_index(slot, head, d);
        if (std::isnan(k_head[d])) {
          k_tally.Kept(k_out[i], k_cache[i], slot, head * hd + d);
          v_tally.Kept(v_out[i], v_cache[i], slot, head * hd + d);
        } else if constexpr (kFp8) {
          // The k window's T values, divided by the scale, each rounded to a code.
          const float y = k_head[d];
          const float err =
              kRopeErr * (std::fabs(y) + std::fabs(k_head[Partner(d, hd, c.interleaved)]));
          const Window w = RoundedNear<T>(y, err);
          k_tally.Near(k_out[i], E4m3Sat(w.lo / sc.k), E4m3Sat(w.hi / sc.k),
                       E4m3Sat(Val<T>(Round<T>(y)) / sc.k), slot, head * hd + d);
          // v_head[d] is the T input itself (the twin copies it).
          const uint8_t v_code = E4m3Sat(v_head[d] / sc.v);
          v_tally.Near(v_out[i], v_code, v_code, v_code, slot, head * hd + d);
        } else {
          rotated(k_tally, k_out[i], k_head, d, slot);
          v_tally.Exact(v_out[i], Round<T>(v_head[d]), slot, head * hd + d);
        }
      }
    }
  }
  if constexpr (kFp8) {
    EXPECT_GE(k_tally.saturated() + v_tally.saturated(), min_saturated)
        << what << ": the case was meant to saturate codes";
  }
}

// ---- SiluMul -----------------------------------------------------------------------------------

template <typename T>
void RunSiluMul(int num_rows, int dim, int ld_pad, int ldo_pad, uint32_t seed,
                const std::string& what) {
  std::mt19937 rng(seed);
  const int64_t ld = 2 * int64_t{dim} + ld_pad, ldo = dim + ldo_pad;
  Bits gate_up(size_t(num_rows) * ld, kPoison);
  const float specials[] = {0.0f, -0.0f, 1e-3f, -1e-3f, 20.0f, -20.0f, 16.5f, -16.5f};
  for (int r = 0; r < num_rows; ++r) {
    const Bits g = Random<T>(dim, 8.0f, rng), u = Random<T>(dim, 3.0f, rng);
    std::copy(g.begin(), g.end(), gate_up.begin() + r * ld);
    std::copy(u.begin(), u.end(), gate_up.begin() + r * ld + dim);
    if (rng() % 4 == 0) gate_up[r * ld + rng() % dim] = Round<T>(specials[rng() % 8]);
  }
  // The twin with up = 1 gives silu(gate) in f32; up is applied below at the kernel's rounding
  // point.
  std::vector<float> gate_ones(size_t(num_rows) * 2 * dim, 1.0f), silu(size_t(num_rows) * dim);
  for (int r = 0; r < num_rows; ++r) {
    for (int i = 0; i < dim; ++i) gate_ones[size_t(r) * 2 * dim + i] = Val<T>(gate_up[r * ld + i]);
  }
  cpu::SiluMul(gate_ones.data(), 2 * dim, num_rows, dim, silu.data(), dim, CpuThreads());

  const size_t out_elems = size_t(num_rows) * ldo;
  Dev<uint16_t> din(gate_up.size()), dout(out_elems);
  din.Upload(gate_up);
  dout.Upload(Bits(out_elems, kPoison));
  CUDA_OK(SiluMul(As<T>(din.ptr), ld, num_rows, dim, As<T>(dout.ptr), ldo, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const Bits out = dout.Download(out_elems);

  Tally<T> tally(what);
  for (int r = 0; r < num_rows; ++r) {
    for (int i = 0; i < dim; ++i) {
      const float g = Val<T>(gate_up[r * ld + i]), u = Val<T>(gate_up[r * ld + dim + i]);
      const float s = silu[size_t(r) * dim + i];
      const float rel = kSiluUlps * (4.0f + 1.16f * std::fabs(g)) * 0x1p-23f;
      tally.Near(out[r * ldo + i], RoundedProduct<T>(s, rel, u), Round<T>(Val<T>(Round<T>(s)) * u),
                 r, i);
    }
    for (int64_t i = dim; i < ldo; ++i) tally.Kept(out[r * ldo + i], kPoison, r, i);
  }
}

// ---- FloatToBf16, FloatToHalf -----------------------------------------------------------------

cudaError_t FloatTo(const float* in, int64_t n, __nv_bfloat16* out) {
  return FloatToBf16(in, n, out, nullptr);
}
cudaError_t FloatTo(const float* in, int64_t n, __half* out) {
  return FloatToHalf(in, n, out, nullptr);
}

template <typename T>
void RunFloatTo(int64_t n, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  // Random bit patterns cover every exponent, subnormals, infinities and NaNs; then the ties and
  // edges of the rounding: bf16's, then fp16's (1 + 2^-11 and 1 + 3 * 2^-11: ties to even; 65504,
  // just below 65520, 65520 and -65536: the largest finite and the overflow to infinity; 2^-24,
  // 2^-25, 3 * 2^-26: the smallest subnormal, a tie to 0 and one up; 2^-14 and just below it:
  // the smallest normal and a subnormal tie rounding up to it).
  std::vector<float> in(n);
  for (float& f : in) f = F32FromBits(static_cast<uint32_t>(rng()));
  const uint32_t edges[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f7fffffu, 0xff7fffffu,
      0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00008000u, 0x00018000u, 0x007fffffu,
      0x807fffffu, 0x00000001u, 0x3f7fffffu, 0x7f800001u, 0xc0a08000u, 0x4b800001u, 0x3f801000u,
      0x3f803000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc7800000u, 0x33800000u, 0x33000000u,
      0x33400000u, 0x38800000u, 0x387fc000u};
  for (int64_t i = 0; i < std::ssize(edges) && i < n; ++i)
    in[i * (n / std::ssize(edges) + 1) % n] = F32FromBits(edges[i]);
  // One poisoned guard element after the output.
  Dev<float> din(n);
  Dev<uint16_t> dout(n + 1);
  din.Upload(in);
  dout.Upload(Bits(n + 1, 0x7fa5));
  CUDA_OK(FloatTo(din.ptr, n, As<T>(dout.ptr)));
  CUDA_OK(cudaDeviceSynchronize());
  const Bits out = dout.Download(n + 1);
  Tally<T> tally(what);
  for (int64_t i = 0; i < n; ++i) {
    // A NaN passes as any NaN (the payloads differ); anything else bitwise.
    const bool nan_for_nan = std::isnan(in[i]) && std::isnan(Val<T>(out[i]));
    tally.Exact(out[i], nan_for_nan ? out[i] : Round<T>(in[i]), i, 0);
  }
  tally.Kept(out[n], 0x7fa5, n, 0);
}

// ---- Tests -------------------------------------------------------------------------------------

const int kTokenCounts[] = {1, 7, 83, 769, 5125};

KILN_ELEMENT_TYPED_TEST_SUITE(EmbeddingLookupGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(RmsNormGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(RopeStoreKvGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(SiluMulGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(FloatConversionGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(ElementwiseGpu);

TYPED_TEST(EmbeddingLookupGpu, OddShapes) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (int t : kTokenCounts) {
    for (int hidden : {576, 4096, 5125, 12}) {  // 5125 and 12 take the scalar path
      RunEmbedding<TypeParam>(
          t, hidden, 1237, seed++,
          "embedding t=" + std::to_string(t) + " hidden=" + std::to_string(hidden));
    }
  }
}

TYPED_TEST(RmsNormGpu, OddTokenCountsAndDims) {
  REQUIRE_GPU();
  uint32_t seed = 200;
  for (int t : kTokenCounts) {
    for (int dim : {576, 4096, 5125}) {
      RunRmsNorm<TypeParam>({.num_rows = t, .dim = dim}, seed++,
                            "rmsnorm t=" + std::to_string(t) + " dim=" + std::to_string(dim));
    }
  }
}

TYPED_TEST(RmsNormGpu, StridedAndEps) {
  REQUIRE_GPU();
  // ldx: a row inside a wider buffer, odd strides.
  RunRmsNorm<TypeParam>({.num_rows = 769, .dim = 576, .ldx_pad = 3 * 576 + 5, .ldo_pad = 13}, 300,
                        "rmsnorm t=769 dim=576 ldx+1733 ldo+13");
  RunRmsNorm<TypeParam>({.num_rows = 769, .dim = 5125, .ldx_pad = 11, .ldo_pad = 64, .eps = 1e-6f},
                        301, "rmsnorm t=769 dim=5125 ldx+11 ldo+64 eps=1e-6");
  RunRmsNorm<TypeParam>({.num_rows = 7, .dim = 33, .ldx_pad = 1, .eps = 1e-6f}, 302,
                        "rmsnorm t=7 dim=33 ldx+1 eps=1e-6");
}

TYPED_TEST(RmsNormGpu, ResidualAddInPlace) {
  REQUIRE_GPU();
  uint32_t seed = 400;
  for (int t : {1, 7, 769, 5125}) {
    for (int dim : {576, 4096, 5125}) {
      const int pad = dim == 5125 ? 7 : 0;
      RunRmsNorm<TypeParam>(
          {.num_rows = t, .dim = dim, .ldx_pad = pad, .ldo_pad = pad / 2, .residual = true}, seed++,
          "rmsnorm+residual t=" + std::to_string(t) + " dim=" + std::to_string(dim) +
              (pad ? " strided" : ""));
    }
  }
}

TYPED_TEST(RmsNormGpu, RowIdsPickScatteredRows) {
  REQUIRE_GPU();
  // With residual, as for the logits rows: the sum is normalized but not stored.
  RunRmsNorm<TypeParam>({.num_rows = 83, .dim = 4096, .residual = true, .num_input_rows = 5125},
                        500, "rmsnorm row_ids 83 of 5125 +residual dim=4096");
  RunRmsNorm<TypeParam>({.num_rows = 7,
                         .dim = 5125,
                         .ldx_pad = 5,
                         .ldo_pad = 9,
                         .residual = true,
                         .num_input_rows = 769},
                        501, "rmsnorm row_ids 7 of 769 +residual dim=5125 strided");
  RunRmsNorm<TypeParam>(
      {.num_rows = 769, .dim = 576, .ldx_pad = 5, .ldo_pad = 9, .num_input_rows = 5125}, 502,
      "rmsnorm row_ids 769 of 5125 dim=576 strided");
}

TYPED_TEST(RmsNormGpu, Fp32ResidualStream) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  for (int dim : {576, 4096, 5125}) {
    for (int t : {1, 7, 769}) {
      for (bool init : {false, true}) {
        RunRmsNorm<TypeParam>({.num_rows = t,
                               .dim = dim,
                               .ldx_pad = dim % 8 == 0 ? 8 : 3,
                               .ldo_pad = 5,
                               .f32_residual = true,
                               .init = init},
                              seed++,
                              "rmsnorm f32 residual t=" + std::to_string(t) +
                                  " dim=" + std::to_string(dim) + (init ? " init" : ""));
      }
    }
  }
  // The logits rows: picked, the sum not stored; and the largest dim.
  RunRmsNorm<TypeParam>({.num_rows = 83, .dim = 4096, .num_input_rows = 5125, .f32_residual = true},
                        720, "rmsnorm f32 residual row_ids");
  RunRmsNorm<TypeParam>({.num_rows = 7, .dim = 12288, .f32_residual = true}, 721,
                        "rmsnorm f32 residual dim=12288");
  RunRmsNorm<TypeParam>({.num_rows = 7, .dim = 12287, .ldx_pad = 1, .f32_residual = true}, 722,
                        "rmsnorm f32 residual dim=12287 (scalar path)");
}

TYPED_TEST(RmsNormGpu, MaxDim) {
  REQUIRE_GPU();
  RunRmsNorm<TypeParam>({.num_rows = 83, .dim = 12288}, 600, "rmsnorm t=83 dim=12288");
  RunRmsNorm<TypeParam>({.num_rows = 83, .dim = 12288, .ldx_pad = 1, .residual = true}, 601,
                        "rmsnorm+residual t=83 dim=12288 strided");
}

const RopeCase kSmolRope{9, 3, 64, 16, 0, false, 100000.0, {}};          // SmolLM2-135M
const RopeCase kLlamaRope{32, 8, 128, 16, 0, false, 500000.0, kLlama3};  // Llama-3.1-8B

TYPED_TEST(RopeStoreKvGpu, OddTokenCounts) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  for (RopeCase c : {kSmolRope, kLlamaRope}) {
    for (int t : kTokenCounts) {
      c.block_size = seed % 2 == 0 ? 16 : 32;
      c.interleaved = t == 83 || t == 5125;  // GGUF llama
      c.ld_pad = t == 769 ? 40 : 0;
      RunRope<TypeParam>(c, t, seed++,
                         "rope hd" + std::to_string(c.head_dim) + " " +
                             std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
                             " t=" + std::to_string(t) + " bs" + std::to_string(c.block_size) +
                             (c.interleaved ? " gptj" : " neox"));
    }
  }
}

TYPED_TEST(RopeStoreKvGpu, ScalingsLayoutsAndStrides) {
  REQUIRE_GPU();
  uint32_t seed = 800;
  const RopeScaling scalings[] = {RopeScaling{}, kLinear4, kLlama3};
  const char* names[] = {"none", "linear4", "llama3"};
  for (RopeCase c : {RopeCase{9, 3, 64, 16}, RopeCase{32, 8, 128, 32}, RopeCase{5, 1, 128, 16},
                     RopeCase{6, 6, 64, 32}}) {
    for (int s = 0; s < 3; ++s) {
      for (bool interleaved : {false, true}) {
        c.scaling = scalings[s];
        c.theta = s == 2 ? 500000.0 : 10000.0;
        c.interleaved = interleaved;
        // Odd stride (qkv inside a wider row): the scalar kernel; the other cases take the
        // 8-pair one (RopeStoreKvVec8Kernel).
        c.ld_pad = 2 * c.num_kv_heads * c.head_dim + 3;
        RunRope<TypeParam>(c, 83, seed++,
                           "rope hd" + std::to_string(c.head_dim) + " " +
                               std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
                               " bs" + std::to_string(c.block_size) + " " + names[s] +
                               (interleaved ? " gptj" : " neox") + " strided");
      }
    }
  }
}

KILN_ELEMENT_TYPED_TEST_SUITE(RopeStoreKvFp8Gpu);

using Fp8 = __nv_fp8_e4m3;

// RopeStoreKv's arguments for one token of 3 q heads and 1 kv head, qkv and both caches in buf:
// the argument checks' base case.
template <typename T, typename C = T>
RopeKvArgsT<T, C> OneTokenRopeArgs(uint16_t* buf, const int32_t* positions, const float* inv_freq,
                                   int head_dim) {
  RopeKvArgsT<T, C> a;
  a.qkv = As<T>(buf);
  a.ld = 5 * head_dim;
  a.positions = positions;
  a.num_tokens = 1;
  a.num_heads = 3;
  a.num_kv_heads = 1;
  a.head_dim = head_dim;
  a.inv_freq = inv_freq;
  a.k_cache = a.v_cache = reinterpret_cast<C*>(buf);
  return a;
}

TYPED_TEST(RopeStoreKvFp8Gpu, OddTokenCountsAndScales) {
  REQUIRE_GPU();
  // Scales 1 (codes of the values themselves), 0.05 (codes up to ~56 for |k| <= 2.8) and 3.0
  // (codes below 1: subnormals), on both models' heads, both layouts and block sizes.
  uint32_t seed = 1300;
  const KvScales scales[] = {{1.0f, 1.0f}, {0.05f, 3.0f}, {3.0f, 0.05f}};
  for (RopeCase c : {kSmolRope, kLlamaRope}) {
    for (int t : {1, 7, 83, 769}) {
      const KvScales sc = scales[seed % 3];
      c.block_size = seed % 2 == 0 ? 16 : 32;
      c.interleaved = t == 83;
      c.ld_pad = t == 769 ? 40 : 0;
      char name[160];
      std::snprintf(name, sizeof(name), "rope fp8 hd%d %d/%d t=%d bs%d %s k*%g v*%g", c.head_dim,
                    c.num_heads, c.num_kv_heads, t, c.block_size, c.interleaved ? "gptj" : "neox",
                    sc.k, sc.v);
      RunRope<TypeParam, Fp8>(c, t, seed++, name, sc);
    }
  }
}

TYPED_TEST(RopeStoreKvFp8Gpu, SaturatesBeyond448TimesScale) {
  REQUIRE_GPU();
  // k and v in [-2, 2] (k rotated: up to 2.83) against 448 * 0.004 = 1.79 and 448 * 0.003 =
  // 1.34: a good share of the codes must clip to +-448, none may become NaN.
  RunRope<TypeParam, Fp8>({32, 8, 128, 16, 0, false, 500000.0, kLlama3}, 83, 1320,
                          "rope fp8 saturating k*0.004 v*0.003", {0.004f, 0.003f}, 10000);
}

TYPED_TEST(RopeStoreKvFp8Gpu, RejectsBadScales) {
  REQUIRE_GPU();
  Dev<uint16_t> buf(1 << 16);
  Dev<int32_t> ints(64);
  Dev<float> floats(64);
  buf.Upload(Bits(1 << 16, kPoison));
  RopeKvArgsFp8T<TypeParam> a = OneTokenRopeArgs<TypeParam, Fp8>(buf.ptr, ints.ptr, floats.ptr, 64);
  for (float bad : {0.0f, -0.5f, NAN, INFINITY}) {
    a.k_scale = bad;
    a.v_scale = 1.0f;
    EXPECT_EQ(RopeStoreKv(a, nullptr), cudaErrorInvalidValue) << "k_scale " << bad;
    a.k_scale = 1.0f;
    a.v_scale = bad;
    EXPECT_EQ(RopeStoreKv(a, nullptr), cudaErrorInvalidValue) << "v_scale " << bad;
  }
  // A bf16 / fp16 cache is not quantized.
  RopeKvArgsT<TypeParam> plain = OneTokenRopeArgs<TypeParam>(buf.ptr, ints.ptr, floats.ptr, 64);
  plain.k_scale = 2.0f;
  EXPECT_EQ(RopeStoreKv(plain, nullptr), cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
  const Bits after = buf.Download(1 << 16);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint16_t b) { return b == kPoison; }));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TYPED_TEST(SiluMulGpu, OddShapes) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  for (int t : kTokenCounts) {
    for (int dim : {1536, 5125}) {
      RunSiluMul<TypeParam>(t, dim, 0, 0, seed++,
                            "silu_mul t=" + std::to_string(t) + " dim=" + std::to_string(dim));
    }
  }
  RunSiluMul<TypeParam>(769, 14336, 0, 0, seed++, "silu_mul t=769 dim=14336");
  RunSiluMul<TypeParam>(83, 5125, 77, 5, seed++, "silu_mul t=83 dim=5125 ld+77 ldo+5");
  // The 16-byte path with strides beyond the row (multiples of 8).
  RunSiluMul<TypeParam>(83, 1536, 8, 16, seed++, "silu_mul t=83 dim=1536 ld+8 ldo+16");
  for (int dim : {1, 3, 257}) {
    RunSiluMul<TypeParam>(7, dim, 1, 2, seed++,
                          "silu_mul t=7 dim=" + std::to_string(dim) + " strided");
  }
}

// GateUpLayout::kRunsOf8 (the W4A16 gate_up's row order on the GPU) gives the halves' bits: the
// same gate and up values laid out in runs of 8 (and a row stride past the row), bit for bit
// against the halves layout's products; the poison past dim kept; shapes the 16-byte kernel
// cannot take are refused rather than read in the wrong order.
TYPED_TEST(SiluMulGpu, RunsOf8GiveTheHalvesBits) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937 rng(931);
  for (int dim : {8, 1536, 14336}) {
    SCOPED_TRACE(dim);
    const int rows = 5;
    const int64_t ld = 2 * int64_t{dim} + 16, ldo = dim + 8;
    Bits halves(size_t(rows) * ld, kPoison), runs(size_t(rows) * ld, kPoison);
    for (int r = 0; r < rows; ++r) {
      const Bits g = Random<T>(dim, 8.0f, rng), u = Random<T>(dim, 3.0f, rng);
      for (int i = 0; i < dim; ++i) {
        halves[r * ld + i] = g[i];
        halves[r * ld + dim + i] = u[i];
        const int64_t at = int64_t{i} / kGateUpRun * 2 * kGateUpRun + i % kGateUpRun;
        runs[r * ld + at] = g[i];
        runs[r * ld + at + kGateUpRun] = u[i];
      }
    }
    Dev<uint16_t> d_halves(halves.size()), d_runs(runs.size()), d_want(rows * ldo),
        d_got(rows * ldo);
    d_halves.Upload(halves);
    d_runs.Upload(runs);
    d_want.Upload(Bits(rows * ldo, kPoison));
    d_got.Upload(Bits(rows * ldo, kPoison));
    CUDA_OK(SiluMul(As<T>(d_halves.ptr), ld, rows, dim, As<T>(d_want.ptr), ldo, nullptr));
    CUDA_OK(SiluMul(As<T>(d_runs.ptr), ld, rows, dim, As<T>(d_got.ptr), ldo, nullptr,
                    GateUpLayout::kRunsOf8));
    CUDA_OK(cudaDeviceSynchronize());
    const Bits want = d_want.Download(rows * ldo), got = d_got.Download(rows * ldo);
    EXPECT_EQ(want, got);
    EXPECT_NE(want[0], want[dim / 2]);  // not a trivial output
    for (int r = 0; r < rows; ++r) {
      for (int64_t i = dim; i < ldo; ++i) EXPECT_EQ(got[r * ldo + i], kPoison) << r << " " << i;
    }
  }
  Dev<uint16_t> buf(64);
  EXPECT_EQ(
      SiluMul(As<T>(buf.ptr), 24, 1, 12, As<T>(buf.ptr + 32), 16, nullptr, GateUpLayout::kRunsOf8),
      cudaErrorInvalidValue)
      << "dim 12 is no whole number of runs";
  EXPECT_EQ(
      SiluMul(As<T>(buf.ptr), 20, 1, 8, As<T>(buf.ptr + 32), 8, nullptr, GateUpLayout::kRunsOf8),
      cudaErrorInvalidValue)
      << "ld 20 is not a multiple of 8";
}

TYPED_TEST(FloatConversionGpu, EveryPatternKindAndLength) {
  REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{5125} * 83}) {
    RunFloatTo<TypeParam>(n, 1000 + static_cast<uint32_t>(n), "float_to n=" + std::to_string(n));
  }
  // More than the 65535 blocks of 256 the launch is capped at: the grid-stride loop.
  RunFloatTo<TypeParam>(int64_t{65535} * 256 + 4099, 1001, "float_to n=16.8M (grid-stride)");
}

// More rows than a grid's y (or z) dimension holds.
TYPED_TEST(ElementwiseGpu, RowsBeyond65535) {
  REQUIRE_GPU();
  RunSiluMul<TypeParam>(65537, 8, 0, 0, 1100, "silu_mul t=65537 dim=8");
  RunRmsNorm<TypeParam>({.num_rows = 65537, .dim = 8, .residual = true}, 1101,
                        "rmsnorm+residual t=65537 dim=8");
  RunEmbedding<TypeParam>(65537, 8, 31, 1102, "embedding t=65537 hidden=8");
}

// Every kernel and path at sizes compute-sanitizer (memcheck, racecheck) gets through quickly:
// run with --gtest_filter='*SmallShapes*'.
TYPED_TEST(ElementwiseGpu, SmallShapesForSanitizers) {
  REQUIRE_GPU();
  RunEmbedding<TypeParam>(7, 576, 50, 1200, "small embedding vector path");
  RunEmbedding<TypeParam>(7, 13, 50, 1201, "small embedding scalar path");
  NormCase c{.num_rows = 7, .dim = 577, .ldx_pad = 3, .ldo_pad = 5, .residual = true};
  RunRmsNorm<TypeParam>(c, 1202, "small rmsnorm+residual strided");
  c.num_input_rows = 19;
  RunRmsNorm<TypeParam>(c, 1203, "small rmsnorm row_ids +residual");
  c.residual = false;
  c.dim = 12288;
  RunRmsNorm<TypeParam>(c, 1204, "small rmsnorm row_ids dim=12288");
  RopeCase r{9, 3, 64, 16, 5, false, 10000.0, {}};
  RunRope<TypeParam>(r, 37, 1205, "small rope neox bs16");
  r = {4, 2, 128, 32, 0, true, 500000.0, kLlama3};
  RunRope<TypeParam>(r, 7, 1206, "small rope gptj bs32 llama3");
  RunRope<TypeParam, __nv_fp8_e4m3>(r, 7, 1209, "small rope fp8 gptj bs32 k*0.05 v*3",
                                    {0.05f, 3.0f});
  RunSiluMul<TypeParam>(7, 300, 1, 1, 1207, "small silu_mul");
  RunFloatTo<TypeParam>(1000, 1208, "small float_to");
}

TYPED_TEST(ElementwiseGpu, RejectsBadArgumentsAndSkipsEmptyLaunches) {
  REQUIRE_GPU();
  Dev<uint16_t> buf(1 << 16);
  Dev<int32_t> ints(64);
  Dev<float> floats(64);
  buf.Upload(Bits(1 << 16, kPoison));
  EXPECT_EQ(RmsNorm(As<TypeParam>(buf.ptr), 12289, nullptr, nullptr, 1, 12289,
                    As<TypeParam>(buf.ptr), 1e-5f, As<TypeParam>(buf.ptr), 12289, nullptr),
            cudaErrorInvalidValue);
  RopeKvArgsT<TypeParam> a = OneTokenRopeArgs<TypeParam>(buf.ptr, ints.ptr, floats.ptr, 63);
  EXPECT_EQ(RopeStoreKv(a, nullptr), cudaErrorInvalidValue);
  // Nothing to do: success, and nothing written.
  a.head_dim = 64;
  a.num_tokens = 0;
  EXPECT_EQ(RopeStoreKv(a, nullptr), cudaSuccess);
  EXPECT_EQ(RmsNorm(As<TypeParam>(buf.ptr), 64, nullptr, nullptr, 0, 64, As<TypeParam>(buf.ptr),
                    1e-5f, As<TypeParam>(buf.ptr), 64, nullptr),
            cudaSuccess);
  EXPECT_EQ(SiluMul(As<TypeParam>(buf.ptr), 128, 0, 64, As<TypeParam>(buf.ptr), 64, nullptr),
            cudaSuccess);
  EXPECT_EQ(
      EmbeddingLookup(ints.ptr, 0, As<TypeParam>(buf.ptr), 64, As<TypeParam>(buf.ptr), nullptr),
      cudaSuccess);
  EXPECT_EQ(FloatTo(floats.ptr, 0, As<TypeParam>(buf.ptr)), cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  const Bits after = buf.Download(1 << 16);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint16_t b) { return b == kPoison; }));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace kiln::kernels
