// cuda::Gemm's W4A16 and INT8 linear layers (label gpu) against the formulas of
// model/quantization.h evaluated on the host in double (the CPU backend's W4 / INT8 Linear are
// written in parallel; these references are the definitions themselves): LinearW4 on every
// dispatch of kernels::W4Gemm (m 1..64 and beyond, group sizes 16 / 32 / 64 / 128 / k, act-order,
// bias, strides, fp32 output) with the weights repacked on the device; kernels::QuantizeRowsInt8
// bit-exact; LinearInt8 on its W8A16 GEMV rows and its W8A8 cuBLASLt rows. Odd shapes, outputs
// poisoned before each run (padding must stay poisoned), fresh random operands per case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/gemm.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/quant.h"
#include "kernels/test_util.cuh"
#include "kernels/w4a16.h"

namespace kiln::cuda {
namespace {

using kernels::As;
using kernels::Dev;
using kernels::Format;

std::unique_ptr<Gemm> NewGemm() {
  Result<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  EXPECT_TRUE(gemm.ok()) << gemm.status().ToString();
  return gemm.ok() ? std::move(gemm).value() : nullptr;
}

template <typename T>
constexpr int kHalfUlpLog2 = std::is_same_v<T, __half> ? -11 : -8;

// Random x [m, ldx] of T bits (normal values, N(0, 1)).
template <typename T>
std::vector<uint16_t> RandomActivations(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& e : v) e = Format<T>::FromF32(dist(rng));
  return v;
}

// The output (T or fp32 bytes, row stride ldo) as floats; padding columns come back as read.
template <typename T>
float OutAt(const std::vector<uint8_t>& out, bool out_f32, size_t at) {
  if (out_f32) {
    float f;
    std::memcpy(&f, out.data() + at * 4, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, out.data() + at * 2, 2);
  return Format<T>::ToF32(b);
}

// Compares out [m, ldo] with ref [m, n] (double) element-wise within tol[m * n], expects the
// padding columns still poisoned (NaN), and bounds the relative RMS error: a wrong scale, zero or
// column anywhere moves it far more than the rounding does.
template <typename T>
void Compare(const std::vector<uint8_t>& out, bool out_f32, int64_t m, int64_t n, int64_t ldo,
             const std::vector<double>& ref, const std::vector<double>& tol, double rms_bound) {
  int64_t bad = 0;
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < ldo; ++c) {
      const float got = OutAt<T>(out, out_f32, r * ldo + c);
      if (c >= n) {
        if (!std::isnan(got) && bad++ < 5) ADD_FAILURE() << "padding written at " << r << "," << c;
        continue;
      }
      const double want = ref[r * n + c];
      err2 += (got - want) * (got - want);
      ref2 += want * want;
      if (!(std::fabs(got - want) <= tol[r * n + c]) && bad++ < 5) {
        ADD_FAILURE() << "out[" << r << ", " << c << "] = " << got << ", want " << want
                      << ", tolerance " << tol[r * n + c];
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_LE(std::sqrt(err2 / ref2), rms_bound);
}

// ---- W4A16 -----------------------------------------------------------------------------------

struct W4Case {
  int32_t m;
  int64_t n, k, group_size;
  bool act_order = false;
  bool bias = false;
  bool out_f32 = false;
  bool symmetric = false;  // all zeros 0 (uploaded as null zeros)
  int64_t ldx_pad = 0, ldo_pad = 0;
  // Non-zero: kernels::W4Gemm's k-split warps directly with this W4GemmArgsT::row_tiles (the
  // choice LinearW4 does not make for this m; 1 with m <= 8: 8-warp blocks), after
  // kernels::W4GatherColumns where act_order.
  int32_t row_tiles = 0;
  // Non-zero: a dequantization scratch of this many rows of k (LinearW4's many-row path: the
  // weight dequantized to T in slices of at most this many rows, then cuBLASLt).
  int64_t dequant_rows = 0;
  // >= 0: Gemm::set_w4_gemm_max_rows (how many rows still run on W4Gemm given the scratch).
  int32_t max_gemm_rows = -1;
  // The block tiles' split-K: -1, LinearW4 with the split scratch (its default splits); 0,
  // LinearW4 without it (no split); > 0, kernels::W4Gemm's block tiles directly with this many
  // splits.
  int32_t splits = -1;
  // Non-zero: kernels::W4Gemm directly with this W4GemmArgsT::kernel (3: the streamed row, 4: its
  // wide form), after kernels::W4GatherColumns where act_order.
  int32_t kernel = 0;
};

// The split-K scratch every case shares, as the runner's layers do: a counter left non-zero by
// one launch would break the next case; NaN partials show a read of a slot nobody wrote.
struct W4SplitScratch {
  static constexpr int64_t kPartials = int64_t{1} << 20, kCounters = 64;
  Dev<float> partials{kPartials};
  Dev<uint32_t> counters{kCounters};
  W4SplitScratch() {
    partials.Upload(std::vector<float>(kPartials, std::nanf("")));
    counters.Upload(std::vector<uint32_t>(kCounters, 0));
  }
};

// Tolerance: the codes minus zeros and x are exact operands of the bf16 / fp16 tensor-core
// products, summed in fp32 per scale group, scaled in fp32 and summed across groups and warps in
// fp32: each step's error is within a few fp32 ulps of the running magnitude, bounded by
// 4 k 2^-24 sum|x w| (|w| the fp32 dequantized weight); the output then rounds once to T (half
// an ulp of |ref|) and the bias adds one fp32 rounding. The RMS bound (2^-8 relative for a
// 16-bit output, 1e-5 for fp32) is far tighter than any element bound summed, and far looser
// than the rounding's expected 2^-10 resp. 1e-7.
//
// The dequantized path (m > w4_gemm_max_rows with a dequant scratch) rounds each weight to T
// first: every product is then off by up to half an ulp of T relative (2^kHalfUlpLog2 sum|x w|
// in all); cuBLASLt's BIAS epilogue may round a 16-bit output twice (gemm.h), so the output
// allowance is half an ulp of both |sum - bias| and |sum|. Its RMS bound is 2^-7 (the weight
// roundings alone give ~2^-9.5 relative for bf16).
template <typename T>
void RunW4(Gemm& gemm, const W4Case& c, uint32_t seed, W4SplitScratch& split) {
  SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << " m=" << c.m << " n=" << c.n
                                  << " k=" << c.k << " g=" << c.group_size
                                  << " perm=" << c.act_order << " bias=" << c.bias
                                  << " f32=" << c.out_f32 << " dequant_rows=" << c.dequant_rows
                                  << " splits=" << c.splits << " kernel=" << c.kernel);
  gemm.set_w4_gemm_max_rows(c.max_gemm_rows >= 0 ? c.max_gemm_rows : Gemm::kW4GemmDefaultRows);
  const bool dequantized = c.dequant_rows > 0 && c.m > gemm.w4_gemm_max_rows();
  std::mt19937 rng(seed);
  const int64_t groups = c.k / c.group_size, ldx = c.k + c.ldx_pad, ldo = c.n + c.ldo_pad;
  std::uniform_int_distribution<int> code_dist(-8, 7);
  std::uniform_real_distribution<float> scale_dist(0.002f, 0.03f);
  std::vector<int> codes(c.n * c.k);
  for (int& v : codes) v = code_dist(rng);
  std::vector<uint8_t> packed(c.n * c.k / 2);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = PackI4(codes[2 * i], codes[2 * i + 1]);
  std::vector<uint16_t> scales(c.n * groups);
  std::vector<int8_t> zeros(c.n * groups, 0);
  for (uint16_t& s : scales) s = F32ToF16(scale_dist(rng));
  if (!c.symmetric) {
    for (int8_t& z : zeros) z = static_cast<int8_t>(code_dist(rng));
  }
  std::vector<int32_t> perm(c.k);
  std::iota(perm.begin(), perm.end(), 0);
  if (c.act_order) std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<uint16_t> x = RandomActivations<T>(rng, c.m * ldx);
  const std::vector<uint16_t> bias = RandomActivations<T>(rng, c.n);

  Dev<uint8_t> d_packed(packed.size()), d_tiled(packed.size());
  Dev<uint16_t> d_scales(scales.size()), d_x(x.size()), d_bias(bias.size()), d_scratch(c.m * c.k);
  Dev<int8_t> d_zeros(zeros.size());
  Dev<uint32_t> d_sz(scales.size());
  Dev<uint16_t> d_dequant(std::max<int64_t>(c.dequant_rows * c.k, 1));
  // NaN: a slice's GEMM reading a weight the dequantization did not write would show.
  d_dequant.Upload(std::vector<uint16_t>(std::max<int64_t>(c.dequant_rows * c.k, 1), 0xffff));
  Dev<int32_t> d_perm(perm.size());
  const size_t out_bytes = c.m * ldo * (c.out_f32 ? 4 : 2);
  Dev<uint8_t> d_out(out_bytes);
  d_packed.Upload(packed);
  d_scales.Upload(scales);
  d_zeros.Upload(zeros);
  d_perm.Upload(perm);
  d_x.Upload(x);
  d_bias.Upload(bias);
  d_out.Upload(std::vector<uint8_t>(out_bytes, 0xff));
  d_tiled.Upload(std::vector<uint8_t>(packed.size(), 0xa5));  // the repack must write it all
  CUDA_OK(kernels::W4RepackCodes(d_packed.ptr, c.n, c.k, d_tiled.ptr, nullptr));
  CUDA_OK(kernels::W4RepackScales(d_scales.ptr, c.symmetric ? nullptr : d_zeros.ptr, c.n, groups,
                                  std::is_same_v<T, __nv_bfloat16>, d_sz.ptr, c.n, nullptr));
  W4Weight w;
  w.tiled = d_tiled.ptr;
  w.sz = d_sz.ptr;
  w.perm = c.act_order ? d_perm.ptr : nullptr;
  w.group_size = c.group_size;
  if (c.row_tiles == 0 && c.splits <= 0 && c.kernel == 0) {
    W4Scratch scratch;
    scratch.gathered = d_scratch.ptr;
    if (c.splits < 0) {
      scratch.split_partials = split.partials.ptr;
      scratch.split_partial_bytes = W4SplitScratch::kPartials * sizeof(float);
      scratch.split_counters = split.counters.ptr;
      scratch.split_counter_count = W4SplitScratch::kCounters;
    }
    if (c.dequant_rows > 0) {
      scratch.dequant = d_dequant.ptr;
      scratch.dequant_bytes = c.dequant_rows * c.k * sizeof(T);
    }
    const Status st =
        gemm.LinearW4(As<T>(d_x.ptr), ldx, c.m, w, c.n, c.k, c.bias ? As<T>(d_bias.ptr) : nullptr,
                      d_out.ptr, ldo, c.out_f32, scratch, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  } else {
    kernels::W4GemmArgsT<T> a;
    a.x = As<T>(d_x.ptr);
    a.ldx = ldx;
    if (c.act_order) {
      CUDA_OK(
          kernels::W4GatherColumns(a.x, ldx, c.m, c.k, d_perm.ptr, As<T>(d_scratch.ptr), nullptr));
      a.x = As<T>(d_scratch.ptr);
      a.ldx = c.k;
    }
    a.m = c.m;
    a.w = d_tiled.ptr;
    a.sz = d_sz.ptr;
    a.group_size = c.group_size;
    a.n = c.n;
    a.k = c.k;
    a.bias = c.bias ? As<T>(d_bias.ptr) : nullptr;
    a.out = d_out.ptr;
    a.ldo = ldo;
    a.out_f32 = c.out_f32;
    a.row_tiles = c.row_tiles;
    a.kernel = c.kernel != 0 ? c.kernel : c.splits > 0 ? 2 : 1;
    a.splits = std::max(c.splits, 0);
    a.split_partials = split.partials.ptr;
    a.split_partial_bytes = W4SplitScratch::kPartials * sizeof(float);
    a.split_counters = split.counters.ptr;
    a.split_counter_count = W4SplitScratch::kCounters;
    // The other m <= 8 choice of warps per block than LinearW4's (kernels/w4a16.h).
    const bool wide = c.n / kernels::kW4TileRows <= kernels::kW4WideMaxRowTiles;
    a.warps = c.m <= 8 && c.row_tiles == 1 ? (wide ? 8 : 16) : 0;
    ASSERT_TRUE(kernels::W4GemmSupported(a));
    CUDA_OK(kernels::W4Gemm(a, nullptr));
    if (c.splits > 1) {
      // The split sums go in split order whichever block finishes last: a second launch gives
      // the same bits.
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint8_t> first = d_out.Download(out_bytes);
      d_out.Upload(std::vector<uint8_t>(out_bytes, 0xff));
      CUDA_OK(kernels::W4Gemm(a, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(d_out.Download(out_bytes), first) << "split-K output differs between launches";
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out = d_out.Download(out_bytes);

  std::vector<double> ref(c.m * c.n), tol(c.m * c.n);
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t o = 0; o < c.n; ++o) {
      double sum = 0, mag = 0;
      for (int64_t j = 0; j < c.k; ++j) {
        const int64_t g = o * groups + j / c.group_size;
        const float wv =  // model/quantization.h: (code - zero) * scale in fp32
            static_cast<float>(codes[o * c.k + j] - zeros[g]) * F16ToF32(scales[g]);
        const double p = double{Format<T>::ToF32(x[r * ldx + perm[j]])} * wv;
        sum += p;
        mag += std::fabs(p);
      }
      double b = c.bias ? Format<T>::ToF32(bias[o]) : 0.0;
      const double product = sum;
      sum += b;
      ref[r * c.n + o] = sum;
      tol[r * c.n + o] = 4.0 * c.k * std::ldexp(mag, -24) + std::ldexp(std::fabs(b), -23) +
                         (c.out_f32 ? 0.0 : std::ldexp(std::fabs(sum), kHalfUlpLog2<T>)) + 1e-6;
      if (dequantized) {
        tol[r * c.n + o] += std::ldexp(mag, kHalfUlpLog2<T>) +
                            (c.out_f32 ? 0.0 : std::ldexp(std::fabs(product), kHalfUlpLog2<T>));
      }
    }
  }
  const double rms_bound =
      dequantized ? std::ldexp(1.0, -7) : (c.out_f32 ? 1e-5 : std::ldexp(1.0, -8));
  Compare<T>(out, c.out_f32, c.m, c.n, ldo, ref, tol, rms_bound);
}

KILN_ELEMENT_TYPED_TEST_SUITE(GemmW4Gpu);

TYPED_TEST(GemmW4Gpu, EveryDispatchAgainstTheDefinition) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  const W4Case cases[] = {
      // m <= 8 (one token tile), group sizes 128 / 64 / 32 / 16 / per channel.
      {1, 208, 1152, 128, false, true, false},
      {1, 1040, 1152, 128, true, false, false},
      {3, 48, 640, 64, false, true, true, false, 4, 3},
      {7, 64, 576, 32, true, true, false},
      {8, 80, 192, 16, false, false, true},
      {5, 112, 576, 576, true, true, false, true},
      // Warps' runs of column tiles with a partial last step: 5 tiles a warp (8-warp blocks, n past
      // 4,096), 3 a warp (16-warp blocks).
      {1, 4112, 2560, 128, false, true, false},
      {6, 96, 2560, 64, true, false, true},
      // One row streamed (W4GemvStreamKernel, LinearW4's default where k % 2,048 == 0 and the
      // groups are whole 64-column tiles): a block with one row tile, more row tiles than the
      // SMs hold blocks (blocks walk several), groups of 128 / 64 / k, act-order, bias, fp32
      // output, symmetric codes, padded strides.
      {1, 208, 2048, 128, false, true, false},
      {1, 4112, 4096, 128, true, false, true, false, 8, 3},
      {1, 19200, 2048, 64, false, true, false, true},
      {1, 96, 6144, 6144, true, true, true},
      // k = 14,336 (down of an 8B): the wide form by default (7 warps of 8 slots, groups of 128,
      // few row tiles), the plain one with groups of 64 or forced; the wide form forced with
      // groups of 64, and with 8 warps (k = 8,192), act-order and fp32 output.
      {1, 208, 14336, 128, true, true, false},
      {1, 4112, 14336, 64, false, true, true},
      {1, 208, 14336, 128, false, true, false, true, 8, 3, 0, 0, -1, -1, 3},
      {1, 96, 14336, 64, false, true, true, false, 0, 0, 0, 0, -1, -1, 4},
      {1, 112, 8192, 128, true, true, true, false, 8, 0, 0, 0, -1, -1, 4},
      // m <= 16, <= 32 and <= 64, n with and without pairs of row tiles.
      {13, 208, 1152, 128, true, true, true},
      {16, 48, 640, 64, false, true, false, true},
      {17, 96, 1152, 128, true, true, false, false, 4, 5},
      {31, 48, 576, 32, false, false, false},
      {33, 208, 576, 64, true, true, false},
      {64, 96, 1152, 128, true, true, true},
      {61, 80, 640, 16, false, true, false},
      // More than one launch's rows.
      {130, 64, 640, 128, true, true, false},
      // The other choices of each row count: two row tiles up to 8 rows, one beyond; 8 tiles in
      // flight per warp up to 8 rows.
      {1, 96, 1152, 128, true, true, false, false, 0, 0, 2},
      {6, 64, 576, 32, false, true, true, false, 0, 0, 2},
      {9, 64, 640, 16, true, false, false, false, 4, 0, 2},
      {23, 96, 576, 64, true, true, false, false, 0, 0, 1},
      {47, 64, 1152, 128, false, true, true, false, 0, 3, 1},
      {40, 32, 640, 16, true, true, false, false, 0, 0, 2},
      {5, 80, 1152, 128, true, true, false, false, 0, 0, 1},
      {8, 48, 576, 64, false, false, true, true, 4, 2, 1},
      {12, 64, 576, 32, true, true, false, false, 0, 0, 1},
      // The dequantized path: slices of whole row tiles (one, several, a short last one, a
      // scratch larger than the weight), act-order, bias, padded strides, fp32 output, every
      // group kind; and below the row threshold when it is lowered (m = 1: Gemv on the slice).
      {130, 64, 640, 128, true, true, false, false, 0, 0, 0, 64},
      {65, 208, 1152, 128, false, true, false, false, 8, 5, 0, 48},
      {300, 96, 576, 32, true, false, true, false, 0, 0, 0, 32},
      {200, 80, 640, 16, false, true, false, true, 0, 0, 0, 1000},
      {7, 48, 576, 64, true, true, false, false, 0, 0, 0, 16, 0},
      {1, 48, 576, 576, false, true, true, false, 0, 0, 0, 16, 0},
      // The block tiles (forced from 9 rows; the default from kW4TileMinRows): n not a multiple
      // of 256 (a block's last row tiles past n), one and several blocks, every group kind; k
      // split 2..16 ways (the last block of each row range sums the partials), or not at all
      // without the scratch; a padded x stride that is not a multiple of 8 falls back to the
      // k-split warps (above, m = 17).
      {9, 208, 4096, 128, true, true, false, false, 0, 0, 0, 0, -1, 3},
      {24, 528, 2048, 64, false, true, true, false, 8, 0, 0, 0, -1, 5},
      {40, 256, 1152, 32, true, false, false, false, 0, 3, 0, 0, -1, 2},
      {64, 784, 1024, 16, false, true, false, true, 0, 0, 0, 0, -1, 4},
      {57, 512, 4096, 4096, false, true, true, true, 8, 8, 0, 0, -1, 16},
      {33, 1040, 3072, 128, true, true, false, false, 0, 0, 0, 0, -1, 0},
      {16, 96, 2048, 128, false, true, false, false, 0, 0, 0, 0, -1, 8},
      // The block tiles forced at 1-8 rows (token rows past m within the tile), split and not.
      {1, 208, 4096, 128, true, true, false, false, 0, 0, 0, 0, -1, 3},
      {5, 528, 2048, 64, false, false, true, false, 8, 3, 0, 0, -1, 1},
      {8, 96, 1152, 16, true, true, false, true, 0, 0, 0, 0, -1, 4},
      {3, 256, 640, 32, false, true, false, false, 0, 0, 0, 0, -1, 2},
      // Three and six token tiles (18-24 and 33-48 rows), the default splits.
      {21, 784, 2048, 128, true, false, true, false, 0, 0, 0, 0, -1, -1},
      {46, 528, 4096, 64, false, true, false, false, 8, 3, 0, 0, -1, -1},
  };
  W4SplitScratch split;
  uint32_t seed = 11;
  for (const W4Case& c : cases) RunW4<TypeParam>(*gemm, c, seed++, split);
  // The default path (LinearW4 with the split scratch) of the same cases again, after every
  // counter was used: a launch that left one non-zero would fail here.
  for (const W4Case& c : cases) {
    if (c.splits > 0) {
      W4Case d = c;
      d.splits = -1;
      RunW4<TypeParam>(*gemm, d, seed++, split);
    }
  }
}

TEST(GemmW4Gpu, RejectsUnsupportedShapes) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  W4Weight w;
  w.group_size = 128;
  // n not a multiple of 16; k not of 64; a group size of 48.
  EXPECT_EQ(gemm->LinearW4(static_cast<const __nv_bfloat16*>(nullptr), 256, 1, w, 200, 256, nullptr,
                           nullptr, 200, false, W4Scratch{}, nullptr)
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(gemm->LinearW4(static_cast<const __nv_bfloat16*>(nullptr), 160, 1, w, 64, 160, nullptr,
                           nullptr, 64, false, W4Scratch{}, nullptr)
                .code(),
            StatusCode::kUnsupported);
  w.group_size = 48;
  EXPECT_EQ(gemm->LinearW4(static_cast<const __nv_bfloat16*>(nullptr), 192, 1, w, 64, 192, nullptr,
                           nullptr, 64, false, W4Scratch{}, nullptr)
                .code(),
            StatusCode::kUnsupported);
}

// A random one-token W4A16 layer after a residual RMS norm, on the device: the weight (n x k,
// groups of group_size, zero points) repacked, the residual stream of earlier layers (fp32,
// larger than one layer's output), this layer's delta, the norm weight around 1, a bias.
template <typename T>
struct W4NormLayer {
  int64_t n, k;
  Dev<uint8_t> tiled;
  Dev<uint32_t> sz;
  Dev<uint16_t> delta, norm_weight, bias, x;
  Dev<float> residual, residual_in, residual_out;
  std::vector<float> residual_host;
  W4Weight w;

  W4NormLayer(int64_t n_, int64_t k_, int64_t group_size, uint32_t seed)
      : n(n_),
        k(k_),
        tiled(n * k / 2),
        sz(n * (k / group_size)),
        delta(k),
        norm_weight(k),
        bias(n),
        x(k),
        residual(k),
        residual_in(k),
        residual_out(k) {
    std::mt19937 rng(seed);
    const int64_t groups = k / group_size;
    std::uniform_int_distribution<int> byte_dist(0, 255), code_dist(-8, 7);
    std::uniform_real_distribution<float> scale_dist(0.002f, 0.03f), weight_dist(0.5f, 1.5f);
    std::vector<uint8_t> packed(n * k / 2);
    for (uint8_t& b : packed) b = static_cast<uint8_t>(byte_dist(rng));
    std::vector<uint16_t> scales(n * groups);
    std::vector<int8_t> zeros(n * groups);
    for (uint16_t& v : scales) v = F32ToF16(scale_dist(rng));
    for (int8_t& z : zeros) z = static_cast<int8_t>(code_dist(rng));
    std::normal_distribution<float> res_dist(0.0f, 4.0f);
    residual_host.resize(k);
    for (float& v : residual_host) v = res_dist(rng);
    std::vector<uint16_t> weight(k);
    for (uint16_t& v : weight) v = Format<T>::FromF32(weight_dist(rng));
    Dev<uint8_t> d_packed(packed.size());
    Dev<uint16_t> d_scales(scales.size());
    Dev<int8_t> d_zeros(zeros.size());
    d_packed.Upload(packed);
    d_scales.Upload(scales);
    d_zeros.Upload(zeros);
    delta.Upload(RandomActivations<T>(rng, k));
    norm_weight.Upload(weight);
    bias.Upload(RandomActivations<T>(rng, n));
    residual.Upload(residual_host);
    residual_in.Upload(residual_host);
    residual_out.Upload(std::vector<float>(k, NAN));
    EXPECT_EQ(kernels::W4RepackCodes(d_packed.ptr, n, k, tiled.ptr, nullptr), cudaSuccess);
    EXPECT_EQ(kernels::W4RepackScales(d_scales.ptr, d_zeros.ptr, n, groups,
                                      std::is_same_v<T, __nv_bfloat16>, sz.ptr, n, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the staging buffers go out of scope
    w.tiled = tiled.ptr;
    w.sz = sz.ptr;
    w.group_size = group_size;
  }

  // The two launches the fusion replaces: the norm (residual in place) into x, then the layer.
  void Unfused(Gemm& gemm, bool init, const T* bias_ptr, T* out) {
    CUDA_OK(kernels::RmsNormF32Residual(As<T>(delta.ptr), k, residual.ptr, init, nullptr, 1,
                                        static_cast<int32_t>(k), As<T>(norm_weight.ptr), 1e-5f,
                                        As<T>(x.ptr), k, nullptr));
    ASSERT_TRUE(
        gemm.LinearW4(As<T>(x.ptr), k, 1, w, n, k, bias_ptr, out, n, false, W4Scratch{}, nullptr)
            .ok());
  }

  // The fused launch's norm: reads residual_in, writes residual_out.
  kernels::W4NormArgsT<T> Norm(bool init) const {
    kernels::W4NormArgsT<T> nm;
    nm.weight = As<T>(norm_weight.ptr);
    nm.delta = As<T>(delta.ptr);
    nm.residual = residual_in.ptr;
    nm.residual_out = residual_out.ptr;
    nm.eps = 1e-5f;
    nm.init = init;
    return nm;
  }

  // The fused launch left the residual stream the norm leaves, and did not write its input.
  void ExpectResidual() const {
    const std::vector<float> want = residual.Download(k), got = residual_out.Download(k);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), k * sizeof(float)), 0)
        << "residual_out differs from the norm's in-place residual";
    EXPECT_EQ(residual_in.Download(k), residual_host) << "the residual read was written";
  }
};

// want == got bit for bit (T bits or raw bytes), naming the first differences.
template <typename E>
void ExpectSameBits(const std::vector<E>& want, const std::vector<E>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  int64_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i] && differ++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << +got[i] << " against " << +want[i]
                    << " unfused";
    }
  }
  EXPECT_EQ(differ, 0) << what;
}

// The residual RMS norm in the streamed GEMV's prologue (Gemm::LinearW4Norm, the runner's
// one-token W4A16 qkv and gate_up) against kernels::RmsNormF32Residual then Gemm::LinearW4 on
// its output row: the same output bits and the same residual stream, for k of 2,048 / 4,096 /
// 8,192 (1, 2 and 4 pieces a thread), groups of 64 and 128, layer 0's init and the sum, with and
// without a bias, one block and several row tiles a block; and the cases it declines (false,
// nothing launched): act-order, per-channel groups, a k the norm's thread layout does not take,
// the residual written in place.
TYPED_TEST(GemmW4Gpu, NormInThePrologueGivesTheSameBits) {
  using T = TypeParam;
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  struct Case {
    int64_t n, k, group_size;
    bool init, bias;
  };
  uint32_t seed = 71;
  for (const Case& c : {Case{208, 2048, 128, true, false}, Case{4112, 4096, 128, false, true},
                        Case{19200, 4096, 64, false, false}, Case{96, 8192, 128, false, true},
                        Case{1040, 8192, 64, true, true}, Case{6144, 4096, 128, false, false}}) {
    SCOPED_TRACE(testing::Message()
                 << DTypeName(Format<T>::kDType) << " n=" << c.n << " k=" << c.k
                 << " g=" << c.group_size << " init=" << c.init << " bias=" << c.bias);
    W4NormLayer<T> layer(c.n, c.k, c.group_size, seed++);
    Dev<uint16_t> d_out(c.n), d_fused(c.n);
    d_out.Upload(std::vector<uint16_t>(c.n, 0xffff));
    d_fused.Upload(std::vector<uint16_t>(c.n, 0xffff));
    const T* bias_ptr = c.bias ? As<T>(layer.bias.ptr) : nullptr;
    const W4Weight& w = layer.w;
    layer.Unfused(*gemm, c.init, bias_ptr, As<T>(d_out.ptr));
    const kernels::W4NormArgsT<T> nm = layer.Norm(c.init);
    Result<bool> fused = gemm->LinearW4Norm(nm, w, c.n, c.k, bias_ptr, As<T>(d_fused.ptr), nullptr);
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    ASSERT_TRUE(*fused) << "LinearW4Norm declined a shape it takes";
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want = d_out.Download(c.n);
    ExpectSameBits(want, d_fused.Download(c.n), "out");
    // Not a trivial output: the layer's values are spread.
    EXPECT_NE(want[0], want[c.n / 2]);
    layer.ExpectResidual();

    // Declined: act-order, groups of k, k = 6,144 (3 pieces a thread), residual in place.
    W4Weight perm = w;
    Dev<int32_t> d_perm(c.k);
    perm.perm = d_perm.ptr;
    EXPECT_FALSE(*gemm->LinearW4Norm(nm, perm, c.n, c.k, bias_ptr, As<T>(d_fused.ptr), nullptr));
    W4Weight per_channel = w;
    per_channel.group_size = c.k;
    EXPECT_FALSE(
        *gemm->LinearW4Norm(nm, per_channel, c.n, c.k, bias_ptr, As<T>(d_fused.ptr), nullptr));
    EXPECT_FALSE(*gemm->LinearW4Norm(nm, w, c.n, 6144, bias_ptr, As<T>(d_fused.ptr), nullptr));
    kernels::W4NormArgsT<T> in_place = nm;
    in_place.residual_out = layer.residual_in.ptr;
    EXPECT_FALSE(*gemm->LinearW4Norm(in_place, w, c.n, c.k, bias_ptr, As<T>(d_fused.ptr), nullptr));
  }
}

// SiluMul in the epilogue (W4Epilogue::silu_mul, the runner's one-token gate_up, rows in runs of
// 8) against the norm, Gemm::LinearW4, then kernels::SiluMul over its output read as
// GateUpLayout::kRunsOf8: the same products bit for bit and the same residual stream, for the 8B's
// gate_up, a small one with a bias, an odd number of row tiles (n = 48) and groups of 64 and 128;
// nothing written past n / 2; declined without the norm.
TYPED_TEST(GemmW4Gpu, SiluMulInTheEpilogueGivesTheSameBits) {
  using T = TypeParam;
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  struct Case {
    int64_t n, k, group_size;
    bool bias;
  };
  uint32_t seed = 171;
  for (const Case& c : {Case{28672, 4096, 128, false}, Case{2048, 2048, 64, true},
                        Case{48, 8192, 128, true}, Case{17920, 4096, 64, false}}) {
    SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << " n=" << c.n << " k=" << c.k
                                    << " g=" << c.group_size << " bias=" << c.bias);
    const int64_t dim = c.n / 2;
    W4NormLayer<T> layer(c.n, c.k, c.group_size, seed++);
    Dev<uint16_t> d_gate_up(c.n), d_want(dim), d_got(dim + 8);
    d_want.Upload(std::vector<uint16_t>(dim, 0xffff));
    d_got.Upload(std::vector<uint16_t>(dim + 8, 0xffff));
    const T* bias_ptr = c.bias ? As<T>(layer.bias.ptr) : nullptr;
    layer.Unfused(*gemm, false, bias_ptr, As<T>(d_gate_up.ptr));
    CUDA_OK(kernels::SiluMul(As<T>(d_gate_up.ptr), c.n, 1, static_cast<int32_t>(dim),
                             As<T>(d_want.ptr), dim, nullptr, kernels::GateUpLayout::kRunsOf8));
    W4Epilogue<T> epi;
    epi.silu_mul = true;
    Result<bool> fused = gemm->LinearW4Norm(layer.Norm(false), layer.w, c.n, c.k, bias_ptr,
                                            As<T>(d_got.ptr), nullptr, {}, epi);
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    ASSERT_TRUE(*fused) << "LinearW4Norm declined SiluMul on a shape it takes";
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> got = d_got.Download(dim + 8);
    for (int64_t i = dim; i < dim + 8; ++i) EXPECT_EQ(got[i], 0xffff) << "written past n / 2";
    got.resize(dim);
    const std::vector<uint16_t> want = d_want.Download(dim);
    ExpectSameBits(want, got, "products");
    EXPECT_NE(want[0], want[dim / 2]);
    layer.ExpectResidual();
  }
  // No norm: declined.
  W4NormLayer<T> layer(32, 2048, 64, 7);
  Dev<uint16_t> d_out(32);
  kernels::W4GemmArgsT<T> a;
  a.x = As<T>(layer.x.ptr);
  a.ldx = 2048;
  a.m = 1;
  a.w = layer.tiled.ptr;
  a.sz = layer.sz.ptr;
  a.group_size = 64;
  a.n = 32;
  a.k = 2048;
  a.out = d_out.ptr;
  a.ldo = 32;
  a.silu_mul = true;
  EXPECT_FALSE(kernels::W4GemmSupported(a)) << "SiluMul without the norm";
}

// RoPE and the KV-cache write in the epilogue (W4Epilogue::rope / rope_fp8, the runner's
// one-token qkv, its q and k rows in interleaved pair order) against the norm, Gemm::LinearW4,
// then kernels::RopeStoreKv with interleaved pairs: the same qkv row (q rotated, k and v as
// computed) and the same caches byte for byte, over a bf16 / fp16 cache and an e4m3 one,
// head_dim 128, 64 and 96, grouped-query heads, a bias (Qwen's qkv), a position far from 0;
// without a slot (slot -1) only the row. Declined: half-split pairs (a row tile would not hold
// both of a pair), a head_dim not a multiple of 16, two tokens.
TYPED_TEST(GemmW4Gpu, RopeInTheEpilogueGivesTheSameBits) {
  using T = TypeParam;
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  struct Case {
    int heads, kv_heads, head_dim;
    int64_t k, group_size;
    bool bias, fp8;
    int64_t slot;
  };
  constexpr int kBlockSize = 16, kNumBlocks = 4;
  uint32_t seed = 271;
  for (const Case& c :
       {Case{32, 8, 128, 4096, 128, false, false, 53}, Case{32, 8, 128, 4096, 128, false, true, 53},
        Case{8, 2, 64, 2048, 64, true, false, 17}, Case{8, 2, 64, 2048, 64, true, true, 63},
        Case{12, 4, 96, 2048, 128, true, false, 0}, Case{14, 2, 64, 2048, 64, false, false, -1}}) {
    const int64_t n = int64_t{c.heads + 2 * c.kv_heads} * c.head_dim;
    SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << " heads=" << c.heads << "/"
                                    << c.kv_heads << " head_dim=" << c.head_dim << " k=" << c.k
                                    << " fp8=" << c.fp8 << " slot=" << c.slot);
    W4NormLayer<T> layer(n, c.k, c.group_size, seed++);
    std::mt19937 rng(seed * 3);
    // Caches of poison bytes (the same in both runs): only the token's rows may change.
    const size_t elem = c.fp8 ? 1 : 2;
    const size_t cache_bytes = size_t{kNumBlocks} * c.kv_heads * kBlockSize * c.head_dim * elem;
    std::vector<uint8_t> poison(cache_bytes);
    std::uniform_int_distribution<int> byte_dist(0, 255);
    for (uint8_t& b : poison) b = static_cast<uint8_t>(byte_dist(rng) & 0x3f);  // finite codes
    Dev<uint8_t> k_want(cache_bytes), v_want(cache_bytes), k_got(cache_bytes), v_got(cache_bytes);
    for (Dev<uint8_t>* d : {&k_want, &v_want, &k_got, &v_got}) d->Upload(poison);
    std::vector<float> inv_freq(c.head_dim / 2);
    for (int i = 0; i < c.head_dim / 2; ++i) {
      inv_freq[i] = std::pow(500000.0f, -2.0f * i / c.head_dim);
    }
    Dev<float> d_inv_freq(inv_freq.size());
    d_inv_freq.Upload(inv_freq);
    Dev<int32_t> d_pos(1);
    d_pos.Upload({1234});
    Dev<int64_t> d_slot(1);
    d_slot.Upload({c.slot});
    Dev<uint16_t> d_want(n), d_got(n);
    d_want.Upload(std::vector<uint16_t>(n, 0xffff));
    d_got.Upload(std::vector<uint16_t>(n, 0xffff));
    const T* bias_ptr = c.bias ? As<T>(layer.bias.ptr) : nullptr;
    auto args = [&]<typename C>(C*, Dev<uint16_t>& qkv, Dev<uint8_t>& kc, Dev<uint8_t>& vc) {
      kernels::RopeKvArgsT<T, C> r;
      r.qkv = As<T>(qkv.ptr);
      r.ld = n;
      r.positions = d_pos.ptr;
      r.slot_mapping = d_slot.ptr;
      r.num_tokens = 1;
      r.num_heads = c.heads;
      r.num_kv_heads = c.kv_heads;
      r.head_dim = c.head_dim;
      r.inv_freq = d_inv_freq.ptr;
      r.interleaved = true;
      r.k_cache = reinterpret_cast<C*>(kc.ptr);
      r.v_cache = reinterpret_cast<C*>(vc.ptr);
      r.block_size = kBlockSize;
      if constexpr (!std::is_same_v<C, T>) {
        r.k_scale = 0.05f;
        r.v_scale = 0.04f;
      }
      return r;
    };
    layer.Unfused(*gemm, false, bias_ptr, As<T>(d_want.ptr));
    W4Epilogue<T> epi;
    const auto rope_t = args(static_cast<T*>(nullptr), d_want, k_want, v_want);
    const auto rope_f = args(static_cast<__nv_fp8_e4m3*>(nullptr), d_want, k_want, v_want);
    CUDA_OK(c.fp8 ? kernels::RopeStoreKv(rope_f, nullptr) : kernels::RopeStoreKv(rope_t, nullptr));
    const auto fused_t = args(static_cast<T*>(nullptr), d_got, k_got, v_got);
    const auto fused_f = args(static_cast<__nv_fp8_e4m3*>(nullptr), d_got, k_got, v_got);
    if (c.fp8) {
      epi.rope_fp8 = &fused_f;
    } else {
      epi.rope = &fused_t;
    }
    Result<bool> fused = gemm->LinearW4Norm(layer.Norm(false), layer.w, n, c.k, bias_ptr,
                                            As<T>(d_got.ptr), nullptr, {}, epi);
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    ASSERT_TRUE(*fused) << "LinearW4Norm declined RoPE on a shape it takes";
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want = d_want.Download(n);
    ExpectSameBits(want, d_got.Download(n), "qkv");
    ExpectSameBits(k_want.Download(cache_bytes), k_got.Download(cache_bytes), "k cache");
    ExpectSameBits(v_want.Download(cache_bytes), v_got.Download(cache_bytes), "v cache");
    if (c.slot >= 0) {
      EXPECT_NE(k_got.Download(cache_bytes), poison) << "the token's k row was not written";
    }
    layer.ExpectResidual();

    // Declined: half-split pairs; two tokens.
    auto half_split = fused_t;
    half_split.interleaved = false;
    W4Epilogue<T> bad;
    bad.rope = &half_split;
    EXPECT_FALSE(*gemm->LinearW4Norm(layer.Norm(false), layer.w, n, c.k, bias_ptr, As<T>(d_got.ptr),
                                     nullptr, {}, bad));
    auto two = fused_t;
    two.num_tokens = 2;
    bad.rope = &two;
    EXPECT_FALSE(*gemm->LinearW4Norm(layer.Norm(false), layer.w, n, c.k, bias_ptr, As<T>(d_got.ptr),
                                     nullptr, {}, bad));
  }
  // head_dim 24 (heads not whole row tiles): declined.
  const int64_t n = (4 + 2 * 2) * 24;
  W4NormLayer<T> layer(n, 2048, 64, 9);
  Dev<uint16_t> d_out(n);
  Dev<float> d_inv_freq(12);
  Dev<int32_t> d_pos(1);
  kernels::RopeKvArgsT<T, T> r;
  r.qkv = As<T>(d_out.ptr);
  r.ld = n;
  r.positions = d_pos.ptr;
  r.num_tokens = 1;
  r.num_heads = 4;
  r.num_kv_heads = 2;
  r.head_dim = 24;
  r.inv_freq = d_inv_freq.ptr;
  r.interleaved = true;
  W4Epilogue<T> epi;
  epi.rope = &r;
  EXPECT_FALSE(*gemm->LinearW4Norm(layer.Norm(false), layer.w, n, 2048,
                                   static_cast<const T*>(nullptr), As<T>(d_out.ptr), nullptr, {},
                                   epi));
}

// ---- INT8 ------------------------------------------------------------------------------------

// model/quantization.h's QuantizeRowInt8 on one row: s = max(amax / 127, FLT_MIN) and
// q = round-to-nearest-even(x / s) (fp32 division) in [-127, 127].
float QuantizeRowInt8OnHost(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = std::max(amax / 127.0f, FLT_MIN);
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] / s);  // default rounding: to nearest even
    q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
  return s;
}

KILN_ELEMENT_TYPED_TEST_SUITE(Int8Gpu);

TYPED_TEST(Int8Gpu, QuantizeRowsIsBitExact) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937 rng(5);
  const int64_t rows = 7, cols = 776, ldx = cols + 24, ldo = cols + 8;
  std::vector<uint16_t> x = RandomActivations<T>(rng, rows * ldx);
  for (int64_t c = 0; c < cols; ++c) x[2 * ldx + c] = 0;  // an all-zero row: the smallest scale
  // Exact ties: a row whose amax is 127, so that x / s = x, with halves in it.
  for (int64_t c = 0; c < cols; ++c) x[4 * ldx + c] = Format<T>::FromF32((c % 50) - 24.5f);
  x[4 * ldx + 3] = Format<T>::FromF32(127.0f);
  Dev<uint16_t> d_x(x.size());
  Dev<int8_t> d_q(rows * ldo);
  Dev<float> d_s(rows);
  d_x.Upload(x);
  d_q.Upload(std::vector<int8_t>(rows * ldo, static_cast<int8_t>(-128)));  // never a code
  d_s.Upload(std::vector<float>(rows, NAN));
  CUDA_OK(
      kernels::QuantizeRowsInt8(As<T>(d_x.ptr), ldx, rows, cols, d_q.ptr, ldo, d_s.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int8_t> q = d_q.Download(rows * ldo);
  const std::vector<float> s = d_s.Download(rows);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> xf(cols);
    for (int64_t c = 0; c < cols; ++c) xf[c] = Format<T>::ToF32(x[r * ldx + c]);
    std::vector<int8_t> want(cols);
    const float ws = QuantizeRowInt8OnHost(xf.data(), cols, want.data());
    EXPECT_EQ(std::memcmp(&ws, &s[r], 4), 0) << "row " << r << ": scale " << s[r] << " vs " << ws;
    for (int64_t c = 0; c < ldo; ++c) {
      const int8_t got = q[r * ldo + c];
      const int8_t expect = c < cols ? want[c] : static_cast<int8_t>(-128);  // padding untouched
      if (got != expect && bad++ < 5) {
        ADD_FAILURE() << "q[" << r << ", " << c << "] = " << int{got} << ", want " << int{expect};
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

struct Int8Case {
  int32_t m;
  int64_t n, k;
  bool bias = false;
  bool out_f32 = false;
  int64_t ldx_pad = 0, ldo_pad = 0;
};

// Tolerance. GEMV rows (W8A16): the products x * code are exact in fp32 (8 + 8 resp. 11 + 8
// significant bits), their fp32 sums in different orders are within 2 k 2^-24 sum|x w|, then one
// fp32 scale and bias step. GEMM rows (W8A8): x quantized exactly as the host does (bit-exact,
// QuantizeRowsIsBitExact), the int32 sums exact, then int32 -> fp32, two fp32 products and the
// bias: 4 fp32 roundings of the result's magnitude. Either output then rounds once to T.
template <typename T>
void RunInt8(Gemm& gemm, const Int8Case& c, uint32_t seed) {
  const bool gemv = c.m <= gemm.int8_gemv_max_rows();
  SCOPED_TRACE(testing::Message() << DTypeName(Format<T>::kDType) << " m=" << c.m << " n=" << c.n
                                  << " k=" << c.k << " bias=" << c.bias << " f32=" << c.out_f32
                                  << (gemv ? " (GEMV)" : " (GEMM)"));
  std::mt19937 rng(seed);
  const int64_t ldx = c.k + c.ldx_pad, ldo = c.n + c.ldo_pad;
  std::uniform_int_distribution<int> code_dist(-127, 127);
  std::uniform_real_distribution<float> scale_dist(0.001f, 0.02f);
  std::vector<int8_t> w(c.n * c.k);
  for (int8_t& v : w) v = static_cast<int8_t>(code_dist(rng));
  std::vector<float> sw(c.n);
  for (float& s : sw) s = scale_dist(rng);
  const std::vector<uint16_t> x = RandomActivations<T>(rng, c.m * ldx);
  const std::vector<uint16_t> bias = RandomActivations<T>(rng, c.n);

  Dev<int8_t> d_w(w.size()), d_xq(c.m * c.k);
  Dev<float> d_sw(sw.size()), d_sx(c.m);
  Dev<int32_t> d_acc(c.m * c.n);
  Dev<uint16_t> d_x(x.size()), d_bias(bias.size());
  const size_t out_bytes = c.m * ldo * (c.out_f32 ? 4 : 2);
  Dev<uint8_t> d_out(out_bytes);
  d_w.Upload(w);
  d_sw.Upload(sw);
  d_x.Upload(x);
  d_bias.Upload(bias);
  d_out.Upload(std::vector<uint8_t>(out_bytes, 0xff));
  const Status st = gemm.LinearInt8(As<T>(d_x.ptr), ldx, c.m, Int8Weight{d_w.ptr, d_sw.ptr}, c.n,
                                    c.k, c.bias ? As<T>(d_bias.ptr) : nullptr, d_out.ptr, ldo,
                                    c.out_f32, Int8Scratch{d_xq.ptr, d_sx.ptr, d_acc.ptr}, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out = d_out.Download(out_bytes);

  std::vector<double> ref(c.m * c.n), tol(c.m * c.n);
  for (int64_t r = 0; r < c.m; ++r) {
    std::vector<float> xf(c.k);
    for (int64_t j = 0; j < c.k; ++j) xf[j] = Format<T>::ToF32(x[r * ldx + j]);
    std::vector<int8_t> xq(c.k);
    const float sx = QuantizeRowInt8OnHost(xf.data(), c.k, xq.data());
    for (int64_t o = 0; o < c.n; ++o) {
      const double b = c.bias ? Format<T>::ToF32(bias[o]) : 0.0;
      double sum, t;
      if (gemv) {
        double dot = 0, mag = 0;
        for (int64_t j = 0; j < c.k; ++j) {
          dot += double{xf[j]} * w[o * c.k + j];
          mag += std::fabs(double{xf[j]} * w[o * c.k + j]);
        }
        sum = dot * sw[o] + b;
        t = (2.0 * c.k + 2) * std::ldexp(mag * sw[o], -24);
      } else {
        int64_t acc = 0;
        for (int64_t j = 0; j < c.k; ++j) acc += int64_t{xq[j]} * w[o * c.k + j];
        sum = static_cast<double>(acc) * sx * sw[o] + b;
        t = 4.0 * std::ldexp(std::fabs(static_cast<double>(acc) * sx * sw[o]), -24);
      }
      ref[r * c.n + o] = sum;
      tol[r * c.n + o] = t + std::ldexp(std::fabs(b) + std::fabs(sum), -23) +
                         (c.out_f32 ? 0.0 : std::ldexp(std::fabs(sum), kHalfUlpLog2<T>)) + 1e-6;
    }
  }
  Compare<T>(out, c.out_f32, c.m, c.n, ldo, ref, tol, c.out_f32 ? 1e-5 : std::ldexp(1.0, -8));
}

TYPED_TEST(Int8Gpu, LinearOnBothPaths) {
  REQUIRE_GPU();
  std::unique_ptr<Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);
  uint32_t seed = 41;
  // m 1..3: kernels::GemvInt8 (kInt8GemvDefaultRows); 4, 17, 64 and 130: cuBLASLt's int8 GEMM.
  for (int32_t m : {1, 2, 3, 4, 17, 64, 130}) {
    RunInt8<TypeParam>(*gemm, {m, 208, 576, true, false, 24, 5}, seed++);
    RunInt8<TypeParam>(*gemm, {m, 1040, 1536, false, true}, seed++);
  }
  // A GEMV-only width (n not a multiple of 16): fine on the GEMV rows.
  RunInt8<TypeParam>(*gemm, {2, 83, 768, true, false}, seed++);
  // The GEMM rows refuse it with a clear status instead.
  Dev<uint8_t> d(1 << 16);
  const Status st = gemm->LinearInt8(
      reinterpret_cast<const TypeParam*>(d.ptr), 768, 17,
      Int8Weight{reinterpret_cast<const int8_t*>(d.ptr), reinterpret_cast<const float*>(d.ptr)}, 83,
      768, nullptr, d.ptr, 83, false, Int8Scratch{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.ToString();
}

}  // namespace
}  // namespace kiln::cuda
