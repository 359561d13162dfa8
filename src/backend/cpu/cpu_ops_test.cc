// The CPU ops against naive double-precision implementations written here, OpenBLAS's sgemm and
// the gguf-py-exact DequantizeToF32, on odd shapes; plus the invariances the backend promises:
// a Linear or attention row is bitwise the same whatever the batch around it, the thread count,
// the instruction set or the paging of the KV cache.
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/simd.h"
#include "core/dtype.h"
#include "model/dequant.h"
#include "model/quantization.h"

namespace kiln::cpu {
namespace {

using internal::SimdIsa;
using internal::SimdKernels;
using internal::SimdKernelsFor;

std::vector<float> RandomVector(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The kernels of every instruction set this CPU runs (generic always).
std::vector<const SimdKernels*> AvailableKernels() {
  std::vector<const SimdKernels*> out;
  for (SimdIsa isa : {SimdIsa::kGeneric, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (const SimdKernels* k = SimdKernelsFor(isa)) out.push_back(k);
  }
  return out;
}

bool BitwiseEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The 16-lane order of cpu_ops.h spelled out with scalar std::fma.
float LaneOrderDot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  for (int64_t k = 0; k < n; ++k) acc[k % 16] = std::fma(a[k], b[k], acc[k % 16]);
  float s8[8], s4[4], s2[2];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return s2[0] + s2[1];
}

TEST(DotTest, FollowsTheLaneOrderOnEveryIsa) {
  for (int64_t n : {1, 7, 16, 17, 64, 83, 769}) {
    const std::vector<float> a = RandomVector(n, 1 + n), b = RandomVector(n, 2 + n);
    const float expected = LaneOrderDot(a.data(), b.data(), n);
    double exact = 0;
    for (int64_t k = 0; k < n; ++k) exact += double{a[k]} * b[k];
    EXPECT_NEAR(expected, exact, 1e-5 * n);
    for (const SimdKernels* k : AvailableKernels()) {
      const float got = k->dot(a.data(), b.data(), n);
      EXPECT_EQ(std::memcmp(&got, &expected, 4), 0) << k->name << " n=" << n;
    }
    const float best = Dot(a.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(&best, &expected, 4), 0);
  }
}

// ---- Weights -----------------------------------------------------------------------------------

// Random bytes of a [rows, cols] matrix in `format` with finite, realistic fp16 scales.
std::vector<uint8_t> RandomWeightBytes(WeightFormat format, int64_t rows, int64_t cols,
                                       uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> out(rows * WeightRowBytes(format, cols));
  auto put16 = [&](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  if (format == WeightFormat::kF32) {
    for (size_t i = 0; i < out.size(); i += 4) {
      const float f = normal(rng);
      std::memcpy(&out[i], &f, 4);
    }
    return out;
  }
  if (format == WeightFormat::kF16 || format == WeightFormat::kBF16) {
    for (size_t i = 0; i < out.size(); i += 2) {
      const float f = normal(rng);
      put16(&out[i], format == WeightFormat::kF16 ? F32ToF16(f) : F32ToBF16(f));
    }
    return out;
  }
  const int block_bytes = GetDTypeInfo(WeightFormatDType(format)).block_bytes;
  for (size_t b = 0; b < out.size(); b += block_bytes) {
    for (int i = 0; i < block_bytes; ++i) out[b + i] = static_cast<uint8_t>(byte(rng));
    put16(&out[b], F32ToF16(std::abs(normal(rng)) * 0.05f + 1e-4f));                      // d
    if (format == WeightFormat::kQ4_1) put16(&out[b + 2], F32ToF16(normal(rng) * 0.3f));  // m
  }
  return out;
}

constexpr WeightFormat kAllFormats[] = {WeightFormat::kF32,  WeightFormat::kF16,
                                        WeightFormat::kBF16, WeightFormat::kQ4_0,
                                        WeightFormat::kQ4_1, WeightFormat::kQ8_0};

TEST(DecodeRowsTest, BitwiseEqualsDequantizeToF32OnEveryIsa) {
  for (WeightFormat format : kAllFormats) {
    const bool quantized = GetDTypeInfo(WeightFormatDType(format)).is_block_quant;
    for (int64_t cols : {32, 96, 576}) {
      const int64_t c = quantized ? cols : cols + 7;  // odd widths for the scalar types
      const int64_t rows = 5;
      const std::vector<uint8_t> bytes = RandomWeightBytes(format, rows, c, 7 * c);
      std::vector<float> expected(rows * c);
      ASSERT_TRUE(DequantizeToF32(WeightFormatDType(format), bytes.data(), bytes.size(), rows * c,
                                  expected.data())
                      .ok());
      const WeightView view{format, rows, c, bytes.data()};
      for (const SimdKernels* k : AvailableKernels()) {
        std::vector<float> got((rows - 1) * c);
        k->decode_rows(view, 1, rows - 1, got.data());
        EXPECT_TRUE(BitwiseEqual(got.data(), expected.data() + c, (rows - 1) * c))
            << k->name << " " << WeightFormatName(format) << " cols=" << c;
      }
    }
  }
}

// ---- Linear ------------------------------------------------------------------------------------

struct LinearCase {
  int64_t m, k, n;
};

TEST(LinearTest, MatchesNaiveAndOpenBlasOnOddShapes) {
  for (const LinearCase& c : {LinearCase{1, 7, 3}, LinearCase{7, 83, 769}, LinearCase{5, 17, 33},
                              LinearCase{64, 96, 19}, LinearCase{3, 1536, 40}}) {
    const std::vector<float> x = RandomVector(c.m * c.k, 11), w = RandomVector(c.n * c.k, 12);
    const std::vector<float> bias = RandomVector(c.n, 13), y0 = RandomVector(c.m * c.n, 14);
    const WeightView view{WeightFormat::kF32, c.n, c.k, reinterpret_cast<const uint8_t*>(w.data())};
    std::vector<float> y = y0;
    Linear(x.data(), c.k, c.m, view, bias.data(), y.data(), c.n, /*accumulate=*/true, 0);
    std::vector<float> blas(c.m * c.n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(c.m),
                static_cast<int>(c.n), static_cast<int>(c.k), 1.0f, x.data(), static_cast<int>(c.k),
                w.data(), static_cast<int>(c.k), 0.0f, blas.data(), static_cast<int>(c.n));
    double max_blas_diff = 0;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          exact += double{x[i * c.k + k]} * w[j * c.k + k];
          magnitude += std::abs(double{x[i * c.k + k]} * w[j * c.k + k]);
        }
        // f32 summation error bound: ~k * 2^-24 * sum |x w|, twice for two implementations.
        const double tol =
            2 * (c.k + 2) * 6e-8 * (magnitude + std::abs(bias[j]) + std::abs(y0[i * c.n + j]));
        const double want = y0[i * c.n + j] + (exact + bias[j]);
        const double got = y[i * c.n + j];
        EXPECT_NEAR(got, want, tol) << "m=" << c.m << " k=" << c.k << " n=" << c.n;
        const double mine = got - y0[i * c.n + j] - bias[j];
        max_blas_diff = std::max(max_blas_diff, std::abs(mine - blas[i * c.n + j]) / (tol + 1e-30));
      }
    }
    EXPECT_LE(max_blas_diff, 1.5) << "vs cblas_sgemm, in units of the tolerance";
  }
}

TEST(LinearTest, NoBiasNoAccumulateOverwrites) {
  const int64_t m = 3, k = 40, n = 21;
  const std::vector<float> x = RandomVector(m * k, 1), w = RandomVector(n * k, 2);
  const WeightView view{WeightFormat::kF32, n, k, reinterpret_cast<const uint8_t*>(w.data())};
  std::vector<float> y(m * n, 12345.0f);
  Linear(x.data(), k, m, view, nullptr, y.data(), n, /*accumulate=*/false, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float want = Dot(x.data() + i * k, w.data() + j * k, k);
      EXPECT_EQ(y[i * n + j], want);
    }
  }
}

// The batch-invariance property: row `probe` gives bitwise the same output in batches of
// M = 1, 7, 64 and 300, at any place in the batch, with any thread count, on every instruction
// set, and a quantized weight gives what its f32 dequantization gives.
TEST(LinearTest, RowResultIndependentOfBatchThreadsIsaAndFormat) {
  const int64_t k = 576, n = 200;
  const std::vector<float> probe = RandomVector(k, 99);
  const std::vector<float> others = RandomVector(300 * k, 100, 3.0f);
  const std::vector<float> bias = RandomVector(n, 101);
  for (WeightFormat format : kAllFormats) {
    const std::vector<uint8_t> bytes = RandomWeightBytes(format, n, k, 5);
    const WeightView view{format, n, k, bytes.data()};
    std::vector<float> dequantized(n * k);
    DecodeRows(view, 0, n, dequantized.data());
    const WeightView f32_view{WeightFormat::kF32, n, k,
                              reinterpret_cast<const uint8_t*>(dequantized.data())};
    std::vector<float> reference(n);
    Linear(probe.data(), k, 1, f32_view, bias.data(), reference.data(), n, false, 1);
    for (int64_t m : {1, 7, 64, 300}) {
      for (int64_t place : {int64_t{0}, m / 2, m - 1}) {
        for (int threads : {1, 2, 3}) {
          std::vector<float> x(others.begin(), others.begin() + m * k);
          std::copy(probe.begin(), probe.end(), x.begin() + place * k);
          std::vector<float> y(m * n);
          Linear(x.data(), k, m, view, bias.data(), y.data(), n, false, threads);
          EXPECT_TRUE(BitwiseEqual(y.data() + place * n, reference.data(), n))
              << WeightFormatName(format) << " M=" << m << " place=" << place
              << " threads=" << threads;
        }
      }
    }
    for (const SimdKernels* kernels : AvailableKernels()) {
      std::vector<float> y(n);
      kernels->linear_block(probe.data(), k, 1, k, dequantized.data(), k, n, bias.data(), y.data(),
                            n, false);
      EXPECT_TRUE(BitwiseEqual(y.data(), reference.data(), n)) << kernels->name;
    }
  }
}

// Not an assertion about kiln: records whether this machine's OpenBLAS sgemm gives a row the
// same bits at different M, the reason Linear has its own kernel.
TEST(LinearTest, ReportsWhetherOpenBlasIsRowInvariant) {
  const int k = 576, n = 576;
  const std::vector<float> w = RandomVector(int64_t{n} * k, 3), x = RandomVector(300 * k, 4);
  std::vector<float> one(n), batch(int64_t{300} * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, n, k, 1.0f, x.data(), k, w.data(), k,
              0.0f, one.data(), n);
  int differing = 0;
  for (int m : {7, 64, 300}) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.data(), k,
                0.0f, batch.data(), n);
    differing += BitwiseEqual(one.data(), batch.data(), n) ? 0 : 1;
  }
  std::printf(
      "OpenBLAS sgemm (k=n=576): row 0 differs from its M=1 result in %d of 3 batch sizes\n",
      differing);
}

// ---- Norm, activation, rope --------------------------------------------------------------------

TEST(RmsNormTest, MatchesNaive) {
  const int64_t rows = 5, dim = 83;
  const float eps = 1e-5f;
  const std::vector<float> x = RandomVector(rows * dim, 1), w = RandomVector(dim, 2);
  std::vector<float> out(rows * dim);
  RmsNorm(x.data(), dim, w.data(), rows, dim, eps, out.data(), dim, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(out[r * dim + i], w[i] * x[r * dim + i] * inv, 1e-5);
    }
  }
  std::vector<float> in_place = x;  // out may alias x
  RmsNorm(in_place.data(), dim, w.data(), rows, dim, eps, in_place.data(), dim, 0);
  EXPECT_TRUE(BitwiseEqual(in_place.data(), out.data(), rows * dim));
}

TEST(SiluMulTest, MatchesNaive) {
  const int64_t rows = 3, dim = 37;
  const std::vector<float> gu = RandomVector(rows * 2 * dim, 5, 4.0f);
  std::vector<float> out(rows * dim);
  SiluMul(gu.data(), 2 * dim, rows, dim, out.data(), dim, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const double g = gu[r * 2 * dim + i], u = gu[r * 2 * dim + dim + i];
      const double want = g / (1 + std::exp(-g)) * u;
      EXPECT_NEAR(out[r * dim + i], want, 1e-6 * (1 + std::abs(want)));
    }
  }
}

TEST(RopeTest, DefaultAndLinearInvFreq) {
  RopeScaling none;
  auto f = RopeInvFreq(64, 100000.0, none);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR((*f)[i], 1.0 / std::pow(100000.0, 2.0 * i / 64), 1e-6 * (*f)[i]);
  }
  RopeScaling linear;
  linear.type = RopeScaling::Type::kLinear;
  linear.factor = 4.0;
  auto g = RopeInvFreq(64, 100000.0, linear);
  ASSERT_TRUE(g.ok());
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ((*g)[i], (*f)[i] / 4.0f);
}

// Llama 3.1's published rope parameters against the formula of Meta's reference
// (apply_scaling in llama/model.py), written out here in double precision.
TEST(RopeTest, Llama3InvFreqMatchesHandComputedFormula) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  const int head_dim = 128;
  auto f = RopeInvFreq(head_dim, 500000.0, s);
  ASSERT_TRUE(f.ok());
  int num_low = 0, num_mid = 0, num_high = 0;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(500000.0, 2.0 * i / head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
    double want;
    if (wavelen < high_wavelen) {
      want = freq, ++num_high;
    } else if (wavelen > low_wavelen) {
      want = freq / 8.0, ++num_low;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * freq / 8.0 + smooth * freq, ++num_mid;
    }
    EXPECT_NEAR((*f)[i], want, 2e-6 * want) << "i=" << i;
  }
  EXPECT_GT(num_low, 0);
  EXPECT_GT(num_mid, 0);
  EXPECT_GT(num_high, 0);
}

TEST(RopeTest, RejectsWhatItCannotComputeExactly) {
  RopeScaling s;
  s.type = RopeScaling::Type::kDynamic;
  EXPECT_EQ(RopeInvFreq(64, 1e4, s).status().code(), StatusCode::kUnsupported);
  s.type = RopeScaling::Type::kYarn;
  EXPECT_EQ(RopeInvFreq(64, 1e4, s).status().code(), StatusCode::kUnsupported);
  s.type = RopeScaling::Type::kLlama3;
  s.original_max_position_embeddings = 0;
  EXPECT_EQ(RopeInvFreq(64, 1e4, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeInvFreq(63, 1e4, RopeScaling{}).status().code(), StatusCode::kInvalidArgument);
}

TEST(RopeTest, RotatesPairsHalfAHeadApart) {
  const int heads = 3, head_dim = 10, half = 5;
  const int64_t tokens = 4, ld = heads * head_dim + 6;  // strided rows
  const std::vector<int32_t> positions = {0, 1, 17, 500};
  auto inv = RopeInvFreq(head_dim, 10000.0, RopeScaling{});
  ASSERT_TRUE(inv.ok());
  std::vector<float> cos(tokens * half), sin(tokens * half);
  RopeCosSin(positions.data(), tokens, inv->data(), half, cos.data(), sin.data());
  const std::vector<float> x = RandomVector(tokens * ld, 8);
  std::vector<float> y = x;
  ApplyRope(y.data(), ld, tokens, heads, head_dim, cos.data(), sin.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < half; ++i) {
        const double angle = positions[t] * double{(*inv)[i]};
        const double a = x[t * ld + h * head_dim + i], b = x[t * ld + h * head_dim + i + half];
        EXPECT_NEAR(y[t * ld + h * head_dim + i], a * std::cos(angle) - b * std::sin(angle), 1e-4);
        EXPECT_NEAR(y[t * ld + h * head_dim + i + half], b * std::cos(angle) + a * std::sin(angle),
                    1e-4);
      }
    }
    for (int64_t i = heads * head_dim; i < ld; ++i) EXPECT_EQ(y[t * ld + i], x[t * ld + i]);
  }
}

// ---- Paged attention ---------------------------------------------------------------------------

struct AttentionSetup {
  int num_heads = 6, num_kv_heads = 2, head_dim = 20;
  // Context per sequence, and its query tokens (the last ones); the long one makes the work
  // large enough to be split over threads.
  std::vector<int32_t> seq_lens = {1, 9, 23, 150};
  std::vector<int32_t> num_new = {1, 4, 23, 40};
  std::vector<float> k_ctx, v_ctx;  // per sequence [len, kv_heads, head_dim], concatenated
  std::vector<float> q;             // [num_tokens, heads, head_dim]
  std::vector<int32_t> positions, cu_seqlens = {0};
  std::vector<int64_t> ctx_offset;  // start of each sequence in k_ctx (in positions)
  bool fp8 = false;                 // an FP8 cache (StoreKvFp8) with these scales
  float k_scale = 1.0f, v_scale = 1.0f;

  AttentionSetup() {
    int64_t total_ctx = 0;
    for (size_t s = 0; s < seq_lens.size(); ++s) {
      ctx_offset.push_back(total_ctx);
      total_ctx += seq_lens[s];
      for (int32_t i = seq_lens[s] - num_new[s]; i < seq_lens[s]; ++i) positions.push_back(i);
      cu_seqlens.push_back(cu_seqlens.back() + num_new[s]);
    }
    const int64_t kv_width = int64_t{num_kv_heads} * head_dim;
    k_ctx = RandomVector(total_ctx * kv_width, 21);
    v_ctx = RandomVector(total_ctx * kv_width, 22);
    q = RandomVector(int64_t{cu_seqlens.back()} * num_heads * head_dim, 23, 2.0f);
  }

  // Copies the contexts into a paged cache of block_size, blocks assigned by a seeded shuffle
  // (seed 0: in order), and runs PagedAttention.
  std::vector<float> Run(int32_t block_size, uint32_t shuffle_seed, int threads) const {
    const int64_t kv_width = int64_t{num_kv_heads} * head_dim;
    int32_t max_blocks = 0, total_blocks = 0;
    for (int32_t len : seq_lens) {
      const int32_t b = (len + block_size - 1) / block_size;
      max_blocks = std::max(max_blocks, b);
      total_blocks += b;
    }
    std::vector<int32_t> ids(total_blocks + 3);  // a few unused blocks
    std::iota(ids.begin(), ids.end(), 0);
    if (shuffle_seed != 0) std::shuffle(ids.begin(), ids.end(), std::mt19937(shuffle_seed));
    const int32_t num_blocks = static_cast<int32_t>(ids.size());
    std::vector<float> k_cache(int64_t{num_blocks} * block_size * kv_width, NAN);
    std::vector<float> v_cache(k_cache.size(), NAN);
    std::vector<uint8_t> k_fp8(k_cache.size(), 0x7f), v_fp8(k_cache.size(), 0x7f);  // NaN
    std::vector<int32_t> tables(seq_lens.size() * max_blocks, -1);
    int32_t next = 0;
    for (size_t s = 0; s < seq_lens.size(); ++s) {
      for (int32_t b = 0; b * block_size < seq_lens[s]; ++b)
        tables[s * max_blocks + b] = ids[next++];
      std::vector<int64_t> slots;
      for (int32_t p = 0; p < seq_lens[s]; ++p) {
        slots.push_back(int64_t{tables[s * max_blocks + p / block_size]} * block_size +
                        p % block_size);
      }
      const float* k = k_ctx.data() + ctx_offset[s] * kv_width;
      const float* v = v_ctx.data() + ctx_offset[s] * kv_width;
      if (fp8) {
        StoreKvFp8(k, kv_width, v, kv_width, slots.data(), seq_lens[s], kv_width, k_scale, v_scale,
                   k_fp8.data(), v_fp8.data());
      } else {
        StoreKv(k, kv_width, v, kv_width, slots.data(), seq_lens[s], kv_width, k_cache.data(),
                v_cache.data());
      }
    }
    const int64_t width = int64_t{num_heads} * head_dim;
    std::vector<float> out(cu_seqlens.back() * width);
    PagedAttentionArgs a;
    a.q = q.data();
    a.ldq = width;
    if (fp8) {
      a.k_cache_fp8 = k_fp8.data();
      a.v_cache_fp8 = v_fp8.data();
      a.k_scale = k_scale;
      a.v_scale = v_scale;
    } else {
      a.k_cache = k_cache.data();
      a.v_cache = v_cache.data();
    }
    a.positions = positions.data();
    a.cu_seqlens = cu_seqlens.data();
    a.block_tables = tables.data();
    a.num_seqs = static_cast<int32_t>(seq_lens.size());
    a.max_blocks_per_seq = max_blocks;
    a.block_size = block_size;
    a.num_heads = num_heads;
    a.num_kv_heads = num_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.out = out.data();
    a.ldo = width;
    PagedAttention(a, threads);
    return out;
  }
};

TEST(PagedAttentionTest, MatchesNaiveCausalGqaAttention) {
  const AttentionSetup setup;
  const std::vector<float> out = setup.Run(/*block_size=*/4, /*shuffle_seed=*/7, 0);
  const int hd = setup.head_dim, kv_width = setup.num_kv_heads * hd;
  const int group = setup.num_heads / setup.num_kv_heads;
  for (size_t s = 0; s < setup.seq_lens.size(); ++s) {
    for (int32_t t = setup.cu_seqlens[s]; t < setup.cu_seqlens[s + 1]; ++t) {
      for (int h = 0; h < setup.num_heads; ++h) {
        const float* q = setup.q.data() + (int64_t{t} * setup.num_heads + h) * hd;
        const int32_t context = setup.positions[t] + 1;
        std::vector<double> p(context);
        double max_score = -INFINITY, sum = 0;
        for (int32_t j = 0; j < context; ++j) {
          const float* k =
              setup.k_ctx.data() + (setup.ctx_offset[s] + j) * kv_width + (h / group) * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double{q[d]} * k[d];
          p[j] = dot / std::sqrt(static_cast<double>(hd));
          max_score = std::max(max_score, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - max_score));
        for (int d = 0; d < hd; ++d) {
          double want = 0;
          for (int32_t j = 0; j < context; ++j) {
            want += p[j] / sum *
                    setup.v_ctx[(setup.ctx_offset[s] + j) * kv_width + (h / group) * hd + d];
          }
          EXPECT_NEAR(out[(int64_t{t} * setup.num_heads + h) * hd + d], want, 2e-5)
              << "seq " << s << " token " << t << " head " << h;
        }
      }
    }
  }
}

TEST(PagedAttentionTest, PagingAndThreadsDoNotChangeABit) {
  const AttentionSetup setup;
  // One block holding each whole context, in order: the contiguous layout.
  const std::vector<float> contiguous = setup.Run(/*block_size=*/160, 0, 1);
  for (int32_t block_size : {1, 3, 4, 16}) {
    for (uint32_t seed : {0u, 5u, 6u}) {
      for (int threads : {1, 2, 3}) {
        const std::vector<float> paged = setup.Run(block_size, seed, threads);
        EXPECT_TRUE(BitwiseEqual(paged.data(), contiguous.data(), contiguous.size()))
            << "block_size " << block_size << " seed " << seed << " threads " << threads;
      }
    }
  }
}

// The per-(token, head) kernel gives the same bits on every instruction set, head_dim with and
// without a tail of the 16-lane chunks.
TEST(PagedAttentionTest, EveryIsaGivesTheSameBits) {
  for (int32_t head_dim : {20, 64, 72}) {
    const int32_t block_size = 5, context = 37, kv_width = 2 * head_dim;
    const std::vector<int32_t> table = {6, 2, 7, 0, 3, 1, 5, 4};
    const std::vector<float> k = RandomVector(8 * block_size * kv_width, 41);
    const std::vector<float> v = RandomVector(8 * block_size * kv_width, 42);
    const std::vector<float> q = RandomVector(head_dim, 43, 2.0f);
    std::vector<float> reference;
    for (const SimdKernels* kernels : AvailableKernels()) {
      std::vector<float> probs(context), out(head_dim);
      internal::AttendArgs a;
      a.q = q.data();
      a.k_cache = k.data() + head_dim;  // the second kv head
      a.v_cache = v.data() + head_dim;
      a.block_table = table.data();
      a.block_size = block_size;
      a.kv_width = kv_width;
      a.head_dim = head_dim;
      a.context = context;
      a.scale = 0.125f;
      a.probs = probs.data();
      a.out = out.data();
      kernels->attend(a);
      if (reference.empty()) reference = out;
      EXPECT_TRUE(BitwiseEqual(out.data(), reference.data(), head_dim))
          << kernels->name << " head_dim " << head_dim;
    }
  }
}

// The FP8 cache is an f32 cache holding e4m3(value / scale) * scale: the same bits as the f32
// path over those values (so the CUDA kernels have an exact reference), whatever the paging and
// threads; with scale 1 those values are within half an e4m3 ulp of the originals.
TEST(PagedAttentionTest, Fp8CacheIsTheF32PathOverItsDecodedValues) {
  for (float scale : {1.0f, 0.01f}) {
    AttentionSetup fp8;
    fp8.fp8 = true;
    fp8.k_scale = scale;
    fp8.v_scale = 2 * scale;
    fp8.k_ctx[5] = 5000.0f * scale;  // saturates to 448 * scale
    AttentionSetup decoded = fp8;
    decoded.fp8 = false;
    for (float& x : decoded.k_ctx) x = F8E4M3ToF32(Fp8KvEncode(x, fp8.k_scale)) * fp8.k_scale;
    for (float& x : decoded.v_ctx) x = F8E4M3ToF32(Fp8KvEncode(x, fp8.v_scale)) * fp8.v_scale;
    EXPECT_EQ(decoded.k_ctx[5], 448.0f * scale);
    const std::vector<float> want = decoded.Run(/*block_size=*/160, 0, 1);
    for (int32_t block_size : {1, 4, 16}) {
      for (int threads : {1, 3}) {
        const std::vector<float> got = fp8.Run(block_size, 9, threads);
        EXPECT_TRUE(BitwiseEqual(got.data(), want.data(), want.size()))
            << "scale " << scale << " block_size " << block_size << " threads " << threads;
      }
    }
  }
}

TEST(StoreKvFp8Test, WritesTheCodesOfEverySlot) {
  const int64_t kv_width = 12;
  const std::vector<float> k = RandomVector(3 * kv_width, 61), v = RandomVector(3 * kv_width, 62);
  const std::vector<int64_t> slots = {4, 0, 2};
  std::vector<uint8_t> kc(5 * kv_width, 0xAA), vc(5 * kv_width, 0xAA);
  StoreKvFp8(k.data(), kv_width, v.data(), kv_width, slots.data(), 3, kv_width, 0.5f, 0.25f,
             kc.data(), vc.data());
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < kv_width; ++i) {
      EXPECT_EQ(kc[slots[t] * kv_width + i], Fp8KvEncode(k[t * kv_width + i], 0.5f));
      EXPECT_EQ(vc[slots[t] * kv_width + i], Fp8KvEncode(v[t * kv_width + i], 0.25f));
    }
  }
  for (int64_t i = 0; i < kv_width; ++i) EXPECT_EQ(kc[1 * kv_width + i], 0xAA) << "slot 1 kept";
}

// ---- FP8 W8A8 Linear ---------------------------------------------------------------------------

TEST(Fp8Test, TableAndEveryIsaDecodeAll256CodesAsF8E4M3ToF32) {
  const float* table = F8E4M3Table();
  for (int code = 0; code < 256; ++code) {
    const float want = F8E4M3ToF32(static_cast<uint8_t>(code));
    EXPECT_EQ(std::memcmp(&table[code], &want, 4), 0) << "code " << code;
  }
  // Every code, at every offset of a 16-wide vector and in the scalar tails: rows of 263.
  const int64_t rows = 3, cols = 263;
  std::vector<uint8_t> bytes(rows * cols);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  std::vector<float> want(rows * cols);
  for (size_t i = 0; i < bytes.size(); ++i) want[i] = F8E4M3ToF32(bytes[i]);
  const std::vector<float> scales(rows, 1.0f);
  const WeightView view{WeightFormat::kF8E4M3, rows, cols, bytes.data(), scales.data()};
  for (const SimdKernels* k : AvailableKernels()) {
    std::vector<float> got((rows - 1) * cols);
    k->decode_rows(view, 1, rows - 1, got.data());
    EXPECT_TRUE(BitwiseEqual(got.data(), want.data() + cols, (rows - 1) * cols)) << k->name;
  }
}

// A [rows, cols] fp8 weight quantized from normal values, row magnitudes spread over 1e4.
OwnedWeight RandomFp8Weight(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> w = RandomVector(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] *= std::pow(10.0f, (r % 5) - 2.0f);
  }
  OwnedWeight f32{WeightFormat::kF32, rows, cols, {}, {}};
  f32.bytes.resize(w.size() * 4);
  std::memcpy(f32.bytes.data(), w.data(), f32.bytes.size());
  return QuantizeFp8(f32);
}

TEST(Fp8Test, QuantizeFp8QuantizesEachRowOnItsOwn) {
  const int64_t rows = 9, cols = 83;
  const std::vector<float> w = RandomVector(rows * cols, 71);
  OwnedWeight f32{WeightFormat::kF32, rows, cols, {}, {}};
  f32.bytes.resize(w.size() * 4);
  std::memcpy(f32.bytes.data(), w.data(), f32.bytes.size());
  const OwnedWeight q = QuantizeFp8(f32);
  ASSERT_EQ(q.format, WeightFormat::kF8E4M3);
  ASSERT_EQ(q.bytes.size(), static_cast<size_t>(rows * cols));
  ASSERT_EQ(q.row_scales.size(), static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> codes(cols);
    EXPECT_EQ(q.row_scales[r], QuantizeRowFp8(w.data() + r * cols, cols, codes.data()));
    EXPECT_EQ(std::memcmp(codes.data(), q.bytes.data() + r * cols, cols), 0) << "row " << r;
  }
  // A bf16 source quantizes from its f32 decoding; an fp8 one is kept.
  const std::vector<uint8_t> bf16 = RandomWeightBytes(WeightFormat::kBF16, rows, cols, 72);
  OwnedWeight b{WeightFormat::kBF16, rows, cols, bf16, {}};
  std::vector<float> decoded(rows * cols);
  DecodeRows(b.view(), 0, rows, decoded.data());
  const OwnedWeight qb = QuantizeFp8(b);
  std::vector<uint8_t> codes(cols);
  EXPECT_EQ(qb.row_scales[4], QuantizeRowFp8(decoded.data() + 4 * cols, cols, codes.data()));
  const OwnedWeight again = QuantizeFp8(qb);
  EXPECT_EQ(again.bytes, qb.bytes);
  EXPECT_EQ(again.row_scales, qb.row_scales);
}

// The header's formula in double: the quantization steps exactly as defined (fp32 scale, fp32
// division, e4m3 rounding), then the sum and the scaling in double. Linear differs only by the
// fp32 rounding of the dot (the products of two e4m3 values are exact in fp32), of the two scale
// multiplications and of the bias and residual additions, so the bound is
//   (k / 16 + 4) * 2^-24 * (sum |xq wq| sx sw)  for the 16 lanes of k / 16 terms each and the
//                                               four-level lane tree,
// + 3 * 2^-24 * |result| for the scale products and the bias, and one more for the residual.
// input_scale > 0: the weight's static activation scale (sx = input_scale for every token, the
// quotient clamped to +-448); returns how many input elements lay beyond e4m3's range.
int64_t ExpectFp8LinearMatchesTheFormula(float input_scale) {
  int64_t saturated = 0;
  for (const LinearCase& c : {LinearCase{7, 83, 769}, LinearCase{7, 769, 83}, LinearCase{1, 5, 3},
                              LinearCase{33, 576, 70}}) {
    std::vector<float> x = RandomVector(c.m * c.k, 81, 2.0f);
    for (int64_t k = 0; k < c.k; ++k) x[(c.m - 1) * c.k + k] = 0.0f;  // an all-zero token
    if (c.m > 2) x[c.k + 1] = 1e3f;                                   // an outlier
    OwnedWeight w = RandomFp8Weight(c.n, c.k, 82);
    w.input_scale = input_scale;
    const std::vector<float> bias = RandomVector(c.n, 83), y0 = RandomVector(c.m * c.n, 84);
    for (bool accumulate : {false, true}) {
      std::vector<float> y = y0;
      Linear(x.data(), c.k, c.m, w.view(), bias.data(), y.data(), c.n, accumulate, 0);
      double worst = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        const float* xi = x.data() + i * c.k;
        float amax = 0;
        for (int64_t k = 0; k < c.k; ++k) amax = std::max(amax, std::abs(xi[k]));
        const float sx = input_scale > 0 ? input_scale : Fp8RowScale(amax);
        std::vector<double> xq(c.k);
        for (int64_t k = 0; k < c.k; ++k) {
          const float q = xi[k] / sx;
          const bool out = std::abs(q) > kFp8E4M3Max;
          // Past e4m3's range (not a quotient that rounds to 448 anyway).
          saturated += !accumulate && std::isnan(F8E4M3ToF32(F32ToF8E4M3(q)));
          xq[k] = F8E4M3ToF32(F32ToF8E4M3(out ? std::copysign(kFp8E4M3Max, q) : q));
        }
        for (int64_t j = 0; j < c.n; ++j) {
          const float sw = w.row_scales[j];
          double dot = 0, magnitude = 0;
          for (int64_t k = 0; k < c.k; ++k) {
            const double wq = F8E4M3ToF32(w.bytes[j * c.k + k]);
            dot += xq[k] * wq;
            magnitude += std::abs(xq[k] * wq);
          }
          const double scaled = dot * sx * sw + bias[j];
          const double want = accumulate ? y0[i * c.n + j] + scaled : scaled;
          const double u = std::ldexp(1.0, -24);
          const double tol = (c.k / 16.0 + 4) * u * magnitude * sx * sw +
                             5 * u * (std::abs(scaled) + std::abs(want) + std::abs(bias[j]));
          const double err = std::abs(y[i * c.n + j] - want);
          EXPECT_LE(err, tol) << "m=" << c.m << " k=" << c.k << " n=" << c.n << " row " << i
                              << " col " << j << " accumulate " << accumulate;
          if (err > tol) return saturated;
          worst = std::max(worst, err / tol);
        }
      }
      std::printf("fp8 Linear %lldx%lldx%lld (%s): worst error %.3f of the bound\n",
                  static_cast<long long>(c.m), static_cast<long long>(c.k),
                  static_cast<long long>(c.n), input_scale > 0 ? "static" : "dynamic", worst);
    }
  }
  return saturated;
}

TEST(Fp8Test, LinearMatchesTheHeadersFormulaInDoubleOnOddShapes) {
  EXPECT_EQ(ExpectFp8LinearMatchesTheFormula(0), 0);  // dynamic scales never saturate
}

// A static scale (Weight::input_scale) replaces every token's own: 4 / 448 puts the inputs'
// tail past 4 (stddev 2) and the 1e3 outlier beyond e4m3's range, where they saturate at +-448.
TEST(Fp8Test, LinearWithAStaticScaleMatchesTheFormulaAndSaturates) {
  EXPECT_GT(ExpectFp8LinearMatchesTheFormula(4.0f / 448.0f), 100);
  // By hand, one element each side of the range: (448 * 1 + 1 * 0.5) * s * sw.
  OwnedWeight w{WeightFormat::kF8E4M3, 1, 2, {F32ToF8E4M3(1.0f), F32ToF8E4M3(0.5f)}, {3.0f}};
  w.input_scale = 0.25f;
  const float x[2] = {1e6f, 0.25f};
  float y = 0;
  Linear(x, 2, 1, w.view(), nullptr, &y, 1, false, 1);
  EXPECT_EQ(y, (448.0f * 1.0f + 1.0f * 0.5f) * 0.25f * 3.0f);
}

// A probe row's output through `w` has the same bits alone, at M = 7 and 64, first or last,
// on 1 or 2 threads.
void ExpectRowIndependentOfBatchAndThreads(const OwnedWeight& w, uint32_t seed) {
  const int64_t k = w.cols, n = w.rows;
  const std::vector<float> probe = RandomVector(k, seed);
  const std::vector<float> others = RandomVector(64 * k, seed + 1, 5.0f);
  const std::vector<float> bias = RandomVector(n, seed + 2);
  std::vector<float> reference(n);
  Linear(probe.data(), k, 1, w.view(), bias.data(), reference.data(), n, false, 1);
  for (int64_t m : {7, 64}) {
    for (int64_t place : {int64_t{0}, m - 1}) {
      for (int threads : {1, 2}) {
        std::vector<float> x(others.begin(), others.begin() + m * k);
        std::copy(probe.begin(), probe.end(), x.begin() + place * k);
        std::vector<float> y(m * n);
        Linear(x.data(), k, m, w.view(), bias.data(), y.data(), n, false, threads);
        EXPECT_TRUE(BitwiseEqual(y.data() + place * n, reference.data(), n))
            << "M=" << m << " place=" << place << " threads=" << threads;
      }
    }
  }
}

// W8A8 keeps the backend's batch invariance: a token's scale is its own row's, so its output
// row has the same bits at any M, place and thread count.
TEST(Fp8Test, LinearRowIndependentOfBatchAndThreads) {
  OwnedWeight w = RandomFp8Weight(200, 576, 91);
  ExpectRowIndependentOfBatchAndThreads(w, 92);
  w.input_scale = 0.01f;  // static: one scale for every row
  ExpectRowIndependentOfBatchAndThreads(w, 93);
}

// ---- INT8 W8A8 --------------------------------------------------------------------------------

// A [rows, cols] int8 weight quantized per row (QuantizeRowInt8) from normal values, row
// magnitudes spread over 1e4.
OwnedWeight RandomInt8Weight(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> w = RandomVector(rows * cols, seed);
  OwnedWeight out{WeightFormat::kI8, rows, cols, std::vector<uint8_t>(rows * cols), {}};
  out.row_scales.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] *= std::pow(10.0f, (r % 5) - 2.0f);
    out.row_scales[r] = QuantizeRowInt8(w.data() + r * cols, cols,
                                        reinterpret_cast<int8_t*>(out.bytes.data()) + r * cols);
  }
  return out;
}

TEST(Int8Test, EveryIsaDecodesTheCodesValues) {
  const int64_t rows = 3, cols = 263;
  std::vector<uint8_t> bytes(rows * cols);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  const std::vector<float> scales(rows, 0.5f);
  const WeightView view{WeightFormat::kI8, rows, cols, bytes.data(), scales.data()};
  for (const SimdKernels* k : AvailableKernels()) {
    std::vector<float> got((rows - 1) * cols);
    k->decode_rows(view, 1, rows - 1, got.data());
    for (int64_t i = 0; i < (rows - 1) * cols; ++i) {
      ASSERT_EQ(got[i], static_cast<float>(static_cast<int8_t>(bytes[cols + i])))
          << k->name << " element " << i;
    }
  }
  // The scaled f32 form of a kI8 matrix (what Stack uses for mixed formats) is code * scale.
  OwnedWeight w{WeightFormat::kI8, rows, cols, bytes, scales};
  std::vector<float> decoded(rows * cols);
  DecodeRows(w.view(), 0, rows, decoded.data());
  EXPECT_EQ(decoded[5], static_cast<float>(static_cast<int8_t>(bytes[5])));
  EXPECT_EQ(QuantizeFp8(w).format, WeightFormat::kI8);  // pre-quantized: never requantized
}

// The header's formula (model/quantization.h) with the sum and the scaling in double. The
// quantization steps are the same; the int32 sum is exact in both; Linear then rounds the
// conversion to f32 and the two scale products (3 roundings of |acc| sx sw), the bias addition
// and the residual addition (one rounding of each result), so
//   |y - want| <= 4 * 2^-24 * |acc| * sx * sw + 2 * 2^-24 * (|scaled| + |want|).
TEST(Int8Test, LinearMatchesTheHeadersFormulaInDoubleOnOddShapes) {
  for (const LinearCase& c : {LinearCase{7, 83, 769}, LinearCase{7, 769, 83}, LinearCase{1, 5, 3},
                              LinearCase{33, 576, 70}, LinearCase{3, 1536, 40}}) {
    std::vector<float> x = RandomVector(c.m * c.k, 181, 2.0f);
    for (int64_t k = 0; k < c.k; ++k) x[(c.m - 1) * c.k + k] = 0.0f;  // an all-zero token
    if (c.m > 2) x[c.k + 1] = 1e3f;                                   // an outlier
    const OwnedWeight w = RandomInt8Weight(c.n, c.k, 182);
    const auto* wq = reinterpret_cast<const int8_t*>(w.bytes.data());
    const std::vector<float> bias = RandomVector(c.n, 183), y0 = RandomVector(c.m * c.n, 184);
    for (bool accumulate : {false, true}) {
      std::vector<float> y = y0;
      Linear(x.data(), c.k, c.m, w.view(), bias.data(), y.data(), c.n, accumulate, 0);
      double worst = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        const float* xi = x.data() + i * c.k;
        float amax = 0;
        for (int64_t k = 0; k < c.k; ++k) amax = std::max(amax, std::abs(xi[k]));
        const float sx = Int8RowScale(amax);
        for (int64_t j = 0; j < c.n; ++j) {
          const float sw = w.row_scales[j];
          double dot = 0;
          for (int64_t k = 0; k < c.k; ++k) {
            const double xq = std::clamp(std::nearbyint(xi[k] / sx), -127.0f, 127.0f);
            dot += xq * wq[j * c.k + k];
          }
          const double scaled = dot * sx * sw + bias[j];
          const double want = accumulate ? y0[i * c.n + j] + scaled : scaled;
          const double u = std::ldexp(1.0, -24);
          const double tol =
              4 * u * std::abs(dot) * sx * sw + 2 * u * (std::abs(scaled) + std::abs(want));
          const double err = std::abs(y[i * c.n + j] - want);
          ASSERT_LE(err, tol) << "m=" << c.m << " k=" << c.k << " n=" << c.n << " row " << i
                              << " col " << j << " accumulate " << accumulate;
          if (tol > 0) worst = std::max(worst, err / tol);
        }
      }
      std::printf("int8 Linear %lldx%lldx%lld: worst error %.3f of the bound\n",
                  static_cast<long long>(c.m), static_cast<long long>(c.k),
                  static_cast<long long>(c.n), worst);
    }
  }
}

// Against the unquantized product: the W8A8 error is what the two roundings allow,
// |y - x w^T| <= sum_k (|x_k| sw/2 + |w_k| sx/2 + sx sw / 4) (+ fp32 noise).
TEST(Int8Test, LinearIsWithinTheQuantizationErrorOfTheF32Product) {
  const int64_t m = 5, k = 576, n = 64;
  const std::vector<float> x = RandomVector(m * k, 191);
  const std::vector<float> wf = RandomVector(n * k, 192, 0.05f);
  OwnedWeight w{WeightFormat::kI8, n, k, std::vector<uint8_t>(n * k), std::vector<float>(n)};
  for (int64_t r = 0; r < n; ++r) {
    w.row_scales[r] =
        QuantizeRowInt8(wf.data() + r * k, k, reinterpret_cast<int8_t*>(w.bytes.data()) + r * k);
  }
  std::vector<float> y(m * n);
  Linear(x.data(), k, m, w.view(), nullptr, y.data(), n, false, 1);
  for (int64_t i = 0; i < m; ++i) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::abs(x[i * k + c]));
    const double sx = Int8RowScale(amax);
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, bound = 0;
      for (int64_t c = 0; c < k; ++c) {
        exact += double{x[i * k + c]} * wf[j * k + c];
        bound += std::abs(x[i * k + c]) * w.row_scales[j] / 2 + std::abs(wf[j * k + c]) * sx / 2 +
                 sx * w.row_scales[j] / 4;
      }
      EXPECT_LE(std::abs(y[i * n + j] - exact), bound * 1.001 + 1e-6) << i << "," << j;
    }
  }
}

TEST(Int8Test, LinearRowIndependentOfBatchAndThreads) {
  ExpectRowIndependentOfBatchAndThreads(RandomInt8Weight(200, 576, 191), 192);
}

// ---- GGUF q/k row permutation ------------------------------------------------------------------

// llama.cpp's permute, as numpy evaluates it: w.reshape(heads, 2, rows / heads / 2, cols)
// .swapaxes(1, 2).reshape(rows, cols) -- output element [h, j, i, c] is input [h, i, j, c].
std::vector<float> NumpyStylePermute(const std::vector<float>& w, int64_t heads, int64_t rows,
                                     int64_t cols) {
  const int64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  int64_t flat = 0;  // walks the output in row-major order of shape [heads, half, 2, cols]
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t c = 0; c < cols; ++c) out[flat++] = w[((h * 2 + i) * half + j) * cols + c];
      }
    }
  }
  return out;
}

TEST(QkPermutationTest, MatchesLlamaCppAndUnpermuteInvertsIt) {
  for (auto [heads, head_dim, cols] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 8, 1}, {9, 64, 5}, {3, 64, 32}}) {
    const int64_t rows = heads * head_dim;
    const std::vector<float> hf = RandomVector(rows * cols, 31);
    std::vector<float> gguf(hf.size()), back(hf.size());
    PermuteQkRows(reinterpret_cast<const uint8_t*>(hf.data()), heads, head_dim,
                  cols * sizeof(float), reinterpret_cast<uint8_t*>(gguf.data()));
    EXPECT_EQ(gguf, NumpyStylePermute(hf, heads, rows, cols)) << heads << "x" << head_dim;
    UnpermuteQkRows(reinterpret_cast<const uint8_t*>(gguf.data()), heads, head_dim,
                    cols * sizeof(float), reinterpret_cast<uint8_t*>(back.data()));
    EXPECT_EQ(back, hf);
  }
  // The picture in cpu_weights.h: head_dim 8, GGUF rows 0..7 hold HF rows 0 4 1 5 2 6 3 7.
  std::vector<float> hf(8);
  std::iota(hf.begin(), hf.end(), 0.0f);
  std::vector<float> gguf(8);
  PermuteQkRows(reinterpret_cast<const uint8_t*>(hf.data()), 1, 8, sizeof(float),
                reinterpret_cast<uint8_t*>(gguf.data()));
  EXPECT_EQ(gguf, (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
}

}  // namespace
}  // namespace kiln::cpu
