// kernels::QuantizeRowsFp8 and kernels::GemvFp8 against model/quantization.h's arithmetic on the
// host, and the quantization fused into RmsNorm / SiluMul against the unfused pair (label gpu).
// Quantization is compared bit for bit (the same fp32 division and round-to-nearest-even e4m3
// conversion on both sides); the GEMV as kernels/fp8_test_util.cuh explains.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/fp8_test_util.cuh"
#include "kernels/gemv.h"
#include "kernels/test_util.cuh"
#include "model/quantization.h"

namespace kiln::kernels {
namespace {

KILN_ELEMENT_TYPED_TEST_SUITE(QuantizeRowsFp8Gpu);

TYPED_TEST(QuantizeRowsFp8Gpu, MatchesTheHostBitForBit) {
  REQUIRE_GPU();
  using T = TypeParam;
  // Odd row counts, widths that are not multiples of the block's 2048-element stride, a padded
  // input stride, rows spanning 2^-20 .. 2^10 (tiny rows hit the minimum scale), and a zero row.
  for (const auto [rows, cols, pad] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 8, 0}, {7, 584, 8}, {83, 4096, 0}, {5, 14336, 16}}) {
    SCOPED_TRACE(testing::Message() << "rows=" << rows << " cols=" << cols);
    std::mt19937 rng(static_cast<uint32_t>(rows * cols));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t ldx = cols + pad;
    std::vector<uint16_t> x(rows * ldx);
    std::vector<float> xf(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = r == 2 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r * 7 % 31) - 20);
      for (int64_t c = 0; c < ldx; ++c) {
        x[r * ldx + c] = Format<T>::FromF32(dist(rng) * scale);
        xf[r * ldx + c] = Format<T>::ToF32(x[r * ldx + c]);
      }
    }
    std::vector<uint8_t> want;
    std::vector<float> want_scales;
    QuantizeRowsOnHost(xf, rows, cols, ldx, &want, &want_scales);

    Dev<uint16_t> dx(x.size());
    Dev<uint8_t> dq(rows * cols);
    Dev<float> ds(rows);
    dx.Upload(x);
    dq.Upload(std::vector<uint8_t>(rows * cols, 0x7f));  // NaN in e4m3: never a quantized value
    ds.Upload(std::vector<float>(rows, NAN));
    CUDA_OK(QuantizeRowsFp8(As<T>(dx.ptr), ldx, rows, cols,
                            reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr), cols, ds.ptr, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = dq.Download(rows * cols);
    const std::vector<float> got_scales = ds.Download(rows);
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (got_scales[r] != want_scales[r] && bad++ < 5) {
        ADD_FAILURE() << "scale[" << r << "] = " << got_scales[r] << ", host " << want_scales[r];
      }
      for (int64_t c = 0; c < cols; ++c) {
        if (got[r * cols + c] != want[r * cols + c] && bad++ < 5) {
          ADD_FAILURE() << "q[" << r << ", " << c << "] = " << int{got[r * cols + c]} << ", host "
                        << int{want[r * cols + c]} << " (x = " << xf[r * ldx + c] << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TYPED_TEST(QuantizeRowsFp8Gpu, StaticScaleMatchesTheHostBitForBit) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t rows = 9, cols = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> x(rows * cols);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // Rows 0..8 grow by 4x each: past the calibrated range the later rows saturate.
    x[i] = Format<T>::FromF32(dist(rng) * std::ldexp(1.0f, 2 * static_cast<int>(i / cols) - 8));
    xf[i] = Format<T>::ToF32(x[i]);
  }
  const float scale = 0.01f;  // |x| up to 4.48 fits
  std::vector<uint8_t> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRowFp8Static(xf.data() + r * cols, cols, scale, want.data() + r * cols);
  }
  Dev<uint16_t> dx(x.size());
  Dev<uint8_t> dq(x.size());
  Dev<float> ds(rows), dscale(1);
  dx.Upload(x);
  dscale.Upload({scale});
  CUDA_OK(QuantizeRowsFp8Static(As<T>(dx.ptr), cols, rows, cols, dscale.ptr,
                                reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr), cols, ds.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = dq.Download(x.size());
  int bad = 0, saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    saturated += (want[i] & 0x7f) == 0x7e;
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << "q[" << i << "] = " << int{got[i]} << ", host " << int{want[i]};
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(saturated, 100);  // the case reaches the clamp
  for (float s : ds.Download(rows)) EXPECT_EQ(s, scale);
}

TYPED_TEST(QuantizeRowsFp8Gpu, RejectsWidthsThatAreNotMultiplesOf8) {
  REQUIRE_GPU();
  EXPECT_EQ(QuantizeRowsFp8(static_cast<const TypeParam*>(nullptr), 12, 1, 12, nullptr, 12, nullptr,
                            nullptr),
            cudaErrorInvalidValue);
}

KILN_ELEMENT_TYPED_TEST_SUITE(GemvFp8Gpu);

// The GEMV's arguments for CheckFp8Linear's operands.
template <typename T>
GemvFp8ArgsT<T> GemvArgsOf(const Fp8Operands& o) {
  GemvFp8ArgsT<T> a;
  a.x = static_cast<const T*>(o.x);
  a.ldx = o.ldx;
  a.m = o.m;
  a.w = o.w;
  a.w_scale = o.w_scale;
  a.n = o.n;
  a.k = o.k;
  a.bias = static_cast<const T*>(o.bias);
  a.out = o.out;
  a.ldo = o.ldo;
  a.out_f32 = o.out_f32;
  return a;
}

TYPED_TEST(GemvFp8Gpu, MatchesTheW8A16Formula) {
  REQUIRE_GPU();
  using T = TypeParam;
  uint32_t seed = 1;
  for (int32_t m : {1, 2, 3, 5, 8}) {
    for (const LinearCase& c :
         {LinearCase{m, 769, 592, 24, 5, true, false}, LinearCase{m, 576, 1536, 0, 0, false, false},
          LinearCase{m, 83, 4096, 8, 0, false, true}}) {
      CheckFp8Linear<T>(c, seed++, /*w8a8=*/false, [](const Fp8Operands& o) {
        const GemvFp8ArgsT<T> a = GemvArgsOf<T>(o);
        ASSERT_TRUE(GemvFp8Supported(a));
        CUDA_OK(GemvFp8(a, nullptr));
      });
    }
  }
}

// The number of 16-row tiles from which GemvFp8 takes the tensor-core form on this device (2.5
// an SM), rounded up.
int64_t MmaTiles() {
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  return (5 * int64_t{sms} + 1) / 2;
}

// The tensor-core form (GemvW8ArgsT::mma: one row, persistent, GemvFp8OnTensorCores) against
// the formula: k of 1,024 (one round a warp), 4,096, 14,336 (7 rounds) and 32,768 (the most), T
// and fp32 outputs, bias; x spread to 2^20 (bf16) / 2^13 (fp16), past f16's 2^15, where a warp
// stages x scaled down (fp32 outputs: the sums pass fp16's range); and shapes it declines (n
// not whole tiles, k not whole rounds, too few tiles), which the FMA forms take.
TYPED_TEST(GemvFp8Gpu, MmaFormMatchesTheW8A16Formula) {
  REQUIRE_GPU();
  using T = TypeParam;
  const float big = std::is_same_v<T, __half> ? 8192.0f : 1048576.0f;
  const int64_t n = 16 * MmaTiles();
  struct MmaCase {
    LinearCase c;
    bool mma;
  };
  uint32_t seed = 31;
  for (const MmaCase& mc :
       {MmaCase{{1, n, 1024, 0, 0, true, false}, true},
        MmaCase{{1, n + 32, 4096, 0, 0, false, true}, true},
        MmaCase{{1, n, 14336, 0, 0, true, false}, true}, MmaCase{{1, n, 32768}, true},
        MmaCase{{1, n, 4096, 0, 0, true, true, big}, true}, MmaCase{{1, n + 8, 4096}, false},
        MmaCase{{1, n, 2560, 0, 0, true, false}, false}, MmaCase{{1, 64, 4096}, false}}) {
    CheckFp8Linear<T>(mc.c, seed++, /*w8a8=*/false, [&](const Fp8Operands& o) {
      GemvFp8ArgsT<T> a = GemvArgsOf<T>(o);
      a.persistent = true;
      ASSERT_TRUE(GemvFp8Supported(a));
      EXPECT_EQ(GemvFp8OnTensorCores(a), mc.mma);
      CUDA_OK(GemvFp8(a, nullptr));
    });
  }
}

TYPED_TEST(GemvFp8Gpu, SupportedChecksShapes) {
  GemvFp8ArgsT<TypeParam> a;
  alignas(16) static uint8_t buffer[64];
  static float scale[1];
  a.x = reinterpret_cast<const TypeParam*>(buffer);
  a.w = reinterpret_cast<const __nv_fp8_e4m3*>(buffer);
  a.w_scale = scale;
  a.m = 1;
  a.n = 1;
  a.k = 16;
  a.ldx = 16;
  EXPECT_TRUE(GemvFp8Supported(a));
  a.k = 24;  // not a whole 16-byte weight load
  EXPECT_FALSE(GemvFp8Supported(a));
  a.k = 16;
  a.m = kGemvMaxRows + 1;
  EXPECT_FALSE(GemvFp8Supported(a));
  a.m = 1;
  a.silu_mul = true;
  EXPECT_TRUE(GemvFp8Supported(a));
  a.out_f32 = true;  // SiluMul's products are T values
  EXPECT_FALSE(GemvFp8Supported(a));
  a.silu_mul = a.out_f32 = false;
  a.w_scale = nullptr;
  EXPECT_FALSE(GemvFp8Supported(a));
}

// Random one-byte weight codes: every int8 code but -128 (outside the symmetric range), every
// e4m3 code but NaN (no weight quantizes to either).
template <typename Code>
std::vector<uint8_t> RandomCodes(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(n);
  for (auto& v : w) {
    v = static_cast<uint8_t>(byte(rng));
    if constexpr (std::is_same_v<Code, int8_t>) {
      if (v == 0x80) v = 0x81;
    } else {
      if ((v & 0x7f) == 0x7f) v ^= 1;
    }
  }
  return w;
}

// GemvFp8Supported / GemvInt8Supported and GemvFp8 / GemvInt8 by the code type.
template <typename T, typename Code>
bool GemvW8Supported(const GemvW8ArgsT<T, Code>& g) {
  if constexpr (std::is_same_v<Code, int8_t>) {
    return GemvInt8Supported(g);
  } else {
    return GemvFp8Supported(g);
  }
}
template <typename T, typename Code>
void RunGemvW8(const GemvW8ArgsT<T, Code>& g) {
  ASSERT_TRUE(GemvW8Supported(g));
  if constexpr (std::is_same_v<Code, int8_t>) {
    CUDA_OK(GemvInt8(g, nullptr));
  } else {
    CUDA_OK(GemvFp8(g, nullptr));
  }
}

// A W8A16 GEMV's operands on the device, random: x [m, k] (row stride ldx) and a bias [n] of
// normal values in T, n rows of k codes (RandomCodes), per-row scales near 2^-6. Args(): the
// kernel's arguments, without the output.
template <typename T, typename Code>
struct W8Operands {
  int32_t m;
  int64_t n, k, ldx;
  Dev<uint16_t> x, bias;
  Dev<uint8_t> w;
  Dev<float> scale;
  W8Operands(int32_t m, int64_t n, int64_t k, int64_t ldx, std::mt19937& rng)
      : m(m), n(n), k(k), ldx(ldx), x(m * ldx), bias(n), w(n * k), scale(n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> xh(m * ldx), bh(n);
    for (auto& v : xh) v = Format<T>::FromF32(normal(rng));
    for (auto& v : bh) v = Format<T>::FromF32(0.5f * normal(rng));
    std::vector<float> sh(n);
    for (auto& v : sh) v = std::ldexp(1.0f + 0.1f * std::fabs(normal(rng)), -6);
    x.Upload(xh);
    bias.Upload(bh);
    w.Upload(RandomCodes<Code>(n * k, rng));
    scale.Upload(sh);
  }
  GemvW8ArgsT<T, Code> Args(bool with_bias) const {
    GemvW8ArgsT<T, Code> a;
    a.x = As<T>(x.ptr);
    a.ldx = ldx;
    a.m = m;
    a.w = reinterpret_cast<const Code*>(w.ptr);
    a.w_scale = scale.ptr;
    a.n = n;
    a.k = k;
    a.bias = with_bias ? As<T>(bias.ptr) : nullptr;
    return a;
  }
};

// GemvW8ArgsT::silu_mul writes what the GEMV over the 2 dim gate_up rows followed by SiluMul
// writes, bit for bit, for e4m3 and int8 codes: dims that leave the last block's warps partly
// idle (dim % 4 != 0), k with and without a partial last load round, bias, strided x and a padded
// output whose padding must stay untouched.
// With persistent both run the persistent forms at one row: for e4m3 codes and mma_dim outputs
// the tensor-core form, whose epilogue must give its own plain sums' bits.
template <typename T, typename Code>
void CheckGemvSiluMul(uint32_t seed, bool persistent = false) {
  std::mt19937 rng(seed);
  const int mma_dim = static_cast<int>(8 * MmaTiles());  // the tensor-core form's at m = 1
  for (int32_t m : {1, 2, 3, 8}) {
    for (auto [dim, k, bias] :
         {std::tuple{14, 64, false}, std::tuple{517, 592, true}, std::tuple{1024, 4096, false},
          std::tuple{3, 16, true}, std::tuple{mma_dim, 2048, true}}) {
      SCOPED_TRACE("m " + std::to_string(m) + " dim " + std::to_string(dim) + " k " +
                   std::to_string(k) + (bias ? " bias" : "") + (persistent ? " persistent" : ""));
      const int64_t ldo = dim + 5, rows = 2 * int64_t{dim};
      const W8Operands<T, Code> ops(m, rows, k, k + 8, rng);
      Dev<uint16_t> dgu(m * rows), dref(m * ldo), dout(m * ldo);
      const std::vector<uint16_t> poison(m * ldo, kPoison);
      dref.Upload(poison);
      dout.Upload(poison);
      GemvW8ArgsT<T, Code> a = ops.Args(bias);
      a.out = dgu.ptr;
      a.ldo = rows;
      a.persistent = persistent;
      RunGemvW8(a);
      CUDA_OK(SiluMul(As<T>(dgu.ptr), rows, m, dim, As<T>(dref.ptr), ldo, nullptr));
      a.silu_mul = true;
      a.n = dim;
      a.out = dout.ptr;
      a.ldo = ldo;
      if constexpr (std::is_same_v<Code, __nv_fp8_e4m3>) {
        EXPECT_EQ(GemvFp8OnTensorCores(a), persistent && m == 1 && dim == mma_dim);
      }
      RunGemvW8(a);
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint16_t> want = dref.Download(m * ldo), got = dout.Download(m * ldo);
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i] && bad++ < 5) {
          ADD_FAILURE() << "out[" << i / ldo << ", " << i % ldo << "] = " << got[i] << ", unfused "
                        << want[i];
        }
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(got[ldo - 1], kPoison);  // padding
    }
  }
}

TYPED_TEST(GemvFp8Gpu, SiluMulInTheEpilogueEqualsGemvThenSiluMul) {
  REQUIRE_GPU();
  CheckGemvSiluMul<TypeParam, __nv_fp8_e4m3>(11);
  CheckGemvSiluMul<TypeParam, int8_t>(12);
  CheckGemvSiluMul<TypeParam, __nv_fp8_e4m3>(13, /*persistent=*/true);
}

// GemvW8ArgsT::rope writes what the GEMV followed by RopeStoreKv writes, bit for bit: the qkv
// rows (q heads rotated, k and v heads as computed) and the k / v cache rows, for e4m3 and int8
// codes, a T and an e4m3 cache, half-split and interleaved pairs, head_dim 64 and 128 (a last
// block of fewer than four pairs at 3 x 2 heads of 6), biases, a token without a cache slot.
template <typename T, typename Code, typename C>
void CheckGemvRope(uint32_t seed) {
  std::mt19937 rng(seed);
  // k 2,048: both in their persistent forms, for e4m3 codes at one row the tensor-core form
  // (4 q heads a kv head, enough of them for MmaTiles).
  struct Shape {
    int heads, kv_heads, head_dim;
    int64_t k = 96;
  };
  const int kv128 = static_cast<int>((MmaTiles() + 47) / 48);  // 6 heads x 8 tiles a kv head
  const int kv64 = static_cast<int>((MmaTiles() + 23) / 24);
  for (const Shape sh : {Shape{4, 2, 64}, Shape{2, 1, 128}, Shape{3, 1, 6},
                         Shape{4 * kv128, kv128, 128, 2048}, Shape{4 * kv64, kv64, 64, 2048}}) {
    for (int32_t m : {1, 3}) {
      for (bool interleaved : {false, true}) {
        SCOPED_TRACE("m " + std::to_string(m) + " heads " + std::to_string(sh.heads) + "/" +
                     std::to_string(sh.kv_heads) + " head_dim " + std::to_string(sh.head_dim) +
                     " k " + std::to_string(sh.k) + (interleaved ? " interleaved" : ""));
        const int64_t n = int64_t{sh.heads + 2 * sh.kv_heads} * sh.head_dim;
        const int32_t block_size = 4, num_blocks = 6;
        const W8Operands<T, Code> ops(m, n, sh.k, sh.k, rng);
        std::vector<float> inv_freq(sh.head_dim / 2);
        for (size_t i = 0; i < inv_freq.size(); ++i) {
          inv_freq[i] = std::pow(10000.0f, -2.0f * i / sh.head_dim);
        }
        const std::vector<int32_t> positions = {17, 3, 250};
        const std::vector<int64_t> slots = {9, -1, 22};  // token 1 writes no cache row
        constexpr bool kFp8Cache = std::is_same_v<C, __nv_fp8_e4m3>;
        const size_t cache_elems = size_t{num_blocks} * sh.kv_heads * block_size * sh.head_dim;
        using CacheBits = std::conditional_t<kFp8Cache, uint8_t, uint16_t>;
        const CacheBits poison = kFp8Cache ? kPoisonFp8 : kPoison;
        Dev<uint16_t> dqkv_ref(m * n), dqkv(m * n);
        Dev<float> dfreq(inv_freq.size());
        Dev<int32_t> dpos(3);
        Dev<int64_t> dslots(3);
        Dev<CacheBits> kc_ref(cache_elems), vc_ref(cache_elems), kc(cache_elems), vc(cache_elems);
        dfreq.Upload(inv_freq);
        dpos.Upload(positions);
        dslots.Upload(slots);
        const std::vector<CacheBits> cache_poison(cache_elems, poison);
        for (auto* c : {&kc_ref, &vc_ref, &kc, &vc}) c->Upload(cache_poison);
        RopeKvArgsT<T, C> rope;
        rope.ld = n;
        rope.positions = dpos.ptr;
        rope.slot_mapping = dslots.ptr;
        rope.num_tokens = m;
        rope.num_heads = sh.heads;
        rope.num_kv_heads = sh.kv_heads;
        rope.head_dim = sh.head_dim;
        rope.inv_freq = dfreq.ptr;
        rope.interleaved = interleaved;
        rope.block_size = block_size;
        if constexpr (kFp8Cache) {
          rope.k_scale = 0.03f;
          rope.v_scale = 0.02f;
        }
        GemvW8ArgsT<T, Code> a = ops.Args(/*with_bias=*/true);
        a.ldo = n;
        a.persistent = sh.k % 2048 == 0;
        // The unfused pair.
        a.out = dqkv_ref.ptr;
        RunGemvW8(a);
        rope.qkv = As<T>(dqkv_ref.ptr);
        rope.k_cache = reinterpret_cast<C*>(kc_ref.ptr);
        rope.v_cache = reinterpret_cast<C*>(vc_ref.ptr);
        CUDA_OK(RopeStoreKv(rope, nullptr));
        // The epilogue.
        a.out = dqkv.ptr;
        rope.qkv = As<T>(dqkv.ptr);
        rope.k_cache = reinterpret_cast<C*>(kc.ptr);
        rope.v_cache = reinterpret_cast<C*>(vc.ptr);
        if constexpr (kFp8Cache) {
          a.rope_fp8 = &rope;
        } else {
          a.rope = &rope;
        }
        if constexpr (std::is_same_v<Code, __nv_fp8_e4m3>) {
          EXPECT_EQ(GemvFp8OnTensorCores(a), a.persistent && m == 1);
        }
        RunGemvW8(a);
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(dqkv.Download(m * n), dqkv_ref.Download(m * n)) << "qkv rows";
        const std::vector<CacheBits> k_want = kc_ref.Download(cache_elems);
        EXPECT_EQ(kc.Download(cache_elems), k_want) << "k cache";
        EXPECT_EQ(vc.Download(cache_elems), vc_ref.Download(cache_elems)) << "v cache";
        // The case writes some cache rows and leaves others (slot -1, unused slots) poisoned.
        EXPECT_GT(std::count(k_want.begin(), k_want.end(), poison), 0);
        EXPECT_LT(std::count(k_want.begin(), k_want.end(), poison),
                  static_cast<std::ptrdiff_t>(cache_elems));
        // What the epilogue refuses: another token count than x's rows, q codes.
        RopeKvArgsT<T, C> other = rope;
        GemvW8ArgsT<T, Code> bad = a;
        if constexpr (kFp8Cache) {
          bad.rope_fp8 = &other;
        } else {
          bad.rope = &other;
        }
        EXPECT_TRUE(GemvW8Supported(bad));
        other.num_tokens = m + 1;
        EXPECT_FALSE(GemvW8Supported(bad));
        other.num_tokens = m;
        other.q_codes = reinterpret_cast<__nv_fp8_e4m3*>(ops.w.ptr);
        EXPECT_FALSE(GemvW8Supported(bad));
      }
    }
  }
}

TYPED_TEST(GemvFp8Gpu, RopeInTheEpilogueEqualsGemvThenRopeStoreKv) {
  REQUIRE_GPU();
  using T = TypeParam;
  CheckGemvRope<T, __nv_fp8_e4m3, T>(21);
  CheckGemvRope<T, __nv_fp8_e4m3, __nv_fp8_e4m3>(22);
  CheckGemvRope<T, int8_t, T>(23);
  CheckGemvRope<T, int8_t, __nv_fp8_e4m3>(24);
}

// GemvW8ArgsT::persistent gives the one-block-an-item kernel's bits: every epilogue (T and fp32
// outputs, SiluMul, RoPE into a T and an e4m3 cache), e4m3 and int8 codes, k of one and two
// rounds of loads a lane, and enough outputs that every block walks several items, the last one
// partial (its idle warps stream a row they never store). It runs at one row only; more rows,
// and k not a multiple of 2,048, run the one-block-an-item kernel (checked by the other GEMV
// tests), here at 3 rows as the flag's no-op.
template <typename T, typename Code>
void CheckGemvPersistent(uint32_t seed) {
  std::mt19937 rng(seed);
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // At most eight 256-thread blocks an SM: 2.6 items a block at least for the plain GEMV.
  const int64_t wide = 8 * 8 * int64_t{sms} * 21 / 8 + 13;
  // RoPE: 128-wide heads, a quarter of them kv heads (4 q heads a group), as many pairs.
  const int heads = 8 * static_cast<int>(wide / 128 / 12 + 1);
  const int64_t rope_n = int64_t{heads + heads / 2} * 128;
  const int32_t block_size = 16, num_blocks = 4;
  const size_t cache_bytes = size_t{2} * num_blocks * (heads / 4) * block_size * 128;
  std::vector<float> inv_freq(64);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -i / 64.0f);
  std::vector<int32_t> positions(3);
  std::vector<int64_t> slots(3);
  for (int32_t r = 0; r < 3; ++r) {
    positions[r] = 5 + 7 * r;
    slots[r] = r == 1 ? -1 : 3 * r;  // row 1 writes no cache row
  }
  Dev<float> dfreq(64);
  Dev<int32_t> dpos(3);
  Dev<int64_t> dslots(3);
  dfreq.Upload(inv_freq);
  dpos.Upload(positions);
  dslots.Upload(slots);
  for (int64_t k : {2048, 4096}) {
    // One set of operands a k: each case reads the first m rows of x and n rows of w.
    const W8Operands<T, Code> ops(3, std::max(2 * wide, rope_n), k, k, rng);
    for (int32_t m : {1, 3}) {
      for (int epi = 0; epi < 5; ++epi) {  // T out, fp32 out, SiluMul, RoPE T / e4m3 cache
        SCOPED_TRACE("m " + std::to_string(m) + " k " + std::to_string(k) + " epilogue " +
                     std::to_string(epi));
        const int64_t cols = epi >= 3 ? rope_n : wide;  // output columns a row
        const size_t out_bytes = (epi == 1 ? 4 : 2) * m * cols;
        std::vector<uint8_t> outs[2], kcs[2], vcs[2];
        for (bool persistent : {false, true}) {
          Dev<uint8_t> out(out_bytes), kc(cache_bytes), vc(cache_bytes);
          CUDA_OK(cudaMemset(out.ptr, 0xff, out_bytes));
          CUDA_OK(cudaMemset(kc.ptr, 0xff, cache_bytes));
          CUDA_OK(cudaMemset(vc.ptr, 0xff, cache_bytes));
          GemvW8ArgsT<T, Code> a = ops.Args(/*with_bias=*/true);
          a.m = m;
          a.n = cols;
          a.out = out.ptr;
          a.ldo = cols;
          a.out_f32 = epi == 1;
          a.silu_mul = epi == 2;
          a.persistent = persistent;
          a.mma = false;  // the FMA form (the tensor-core form: MmaForm..., ...InTheEpilogue...)
          RopeKvArgsT<T, T> rope;
          RopeKvArgsT<T, __nv_fp8_e4m3> rope_fp8;
          auto fill = [&](auto& r) {
            using C = std::remove_pointer_t<decltype(r.k_cache)>;
            r.qkv = reinterpret_cast<T*>(out.ptr);
            r.ld = cols;
            r.positions = dpos.ptr;
            r.slot_mapping = dslots.ptr;
            r.num_tokens = m;
            r.num_heads = heads;
            r.num_kv_heads = heads / 4;
            r.head_dim = 128;
            r.inv_freq = dfreq.ptr;
            r.k_cache = reinterpret_cast<C*>(kc.ptr);
            r.v_cache = reinterpret_cast<C*>(vc.ptr);
            r.block_size = block_size;
          };
          fill(rope);
          fill(rope_fp8);
          rope_fp8.k_scale = 0.03f;
          rope_fp8.v_scale = 0.02f;
          if (epi == 3) a.rope = &rope;
          if (epi == 4) a.rope_fp8 = &rope_fp8;
          RunGemvW8(a);
          CUDA_OK(cudaDeviceSynchronize());
          outs[persistent] = out.Download(out_bytes);
          kcs[persistent] = kc.Download(cache_bytes);
          vcs[persistent] = vc.Download(cache_bytes);
        }
        EXPECT_TRUE(outs[0] == outs[1]) << "outputs";
        EXPECT_TRUE(kcs[0] == kcs[1]) << "k cache";
        EXPECT_TRUE(vcs[0] == vcs[1]) << "v cache";
        if (epi != 1) {  // every T output written (0xffff is a NaN no output is)
          const auto* o = reinterpret_cast<const uint16_t*>(outs[1].data());
          EXPECT_EQ(std::count(o, o + m * cols, kPoison), 0);
        }
        if (epi >= 3) {  // some cache rows written
          EXPECT_LT(std::count(kcs[1].begin(), kcs[1].end(), uint8_t{0xff}),
                    static_cast<std::ptrdiff_t>(cache_bytes));
        }
      }
    }
  }
}

// The persistent W8A16 GEMV's fp32 outputs against sums in double, in its FMA and tensor-core
// forms, for random e4m3 codes and for rows of subnormal codes only (exponent 0, m * 2^-9: a
// decoder that flushed them would give 0). The error is measured against the sum of the terms'
// magnitudes; fp32 sums of 4,096 terms stay far inside 1e-4 of it.
template <typename T>
void CheckGemvPersistentSums(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t k = 4096;
  for (int form = 0; form < 4; ++form) {
    const bool subnormal = form % 2 == 1, mma = form >= 2;
    const int64_t n = mma ? 16 * MmaTiles() : 512;
    SCOPED_TRACE(std::string(subnormal ? "subnormal codes" : "random codes") +
                 (mma ? ", tensor cores" : ", FMA"));
    std::vector<uint16_t> xh(k);
    for (auto& v : xh) v = Format<T>::FromF32(normal(rng));
    std::vector<uint8_t> codes = RandomCodes<__nv_fp8_e4m3>(n * k, rng);
    if (subnormal) {
      for (auto& c : codes) c &= 0x87;
    }
    const std::vector<float> scales(n, 0.015625f);
    Dev<uint16_t> x(k);
    Dev<uint8_t> w(n * k);
    Dev<float> scale(n), out(n);
    x.Upload(xh);
    w.Upload(codes);
    scale.Upload(scales);
    GemvW8ArgsT<T, __nv_fp8_e4m3> a;
    a.x = As<T>(x.ptr);
    a.ldx = k;
    a.m = 1;
    a.w = reinterpret_cast<const __nv_fp8_e4m3*>(w.ptr);
    a.w_scale = scale.ptr;
    a.n = n;
    a.k = k;
    a.out = out.ptr;
    a.ldo = n;
    a.out_f32 = true;
    a.persistent = true;
    a.mma = mma;
    EXPECT_EQ(GemvFp8OnTensorCores(a), mma);
    RunGemvW8(a);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = out.Download(n);
    double worst = 0.0;
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0.0, mag = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double t = double{F8E4M3ToF32(codes[r * k + i])} * Format<T>::ToF32(xh[i]);
        sum += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(got[r] - sum * scales[r]) / (mag * scales[r]));
    }
    std::printf("persistent GEMV (%s), %s: max |error| / sum of |terms| = %.3g\n",
                mma ? "tensor cores" : "FMA", subnormal ? "subnormal codes" : "random codes",
                worst);
    EXPECT_LT(worst, 1e-4);
  }
}

TYPED_TEST(GemvFp8Gpu, PersistentSumsAsTheReference) {
  REQUIRE_GPU();
  CheckGemvPersistentSums<TypeParam>(33);
}

TYPED_TEST(GemvFp8Gpu, PersistentGivesTheSameBits) {
  REQUIRE_GPU();
  CheckGemvPersistent<TypeParam, __nv_fp8_e4m3>(31);
  CheckGemvPersistent<TypeParam, int8_t>(32);
}

// The fused activation quantization (kernels/elementwise.h) writes what the unfused pair writes:
// the op's T output, then QuantizeRowsFp8 of it, bit for bit (codes, scales and, for the norm,
// the updated residual stream).
KILN_ELEMENT_TYPED_TEST_SUITE(FusedFp8QuantGpu);

template <typename T>
void ExpectSameBytes(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] differs";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TYPED_TEST(FusedFp8QuantGpu, RmsNormFp8EqualsRmsNormThenQuantize) {
  REQUIRE_GPU();
  using T = TypeParam;
  // dim 576 (SmolLM2: one vector a thread), 4096 (Llama 8B: 2 per thread) and 8200 (6); rows
  // with a zero input, an init (layer 0) step and a row pick.
  for (const auto [rows, dim, init, pick] : std::vector<std::tuple<int32_t, int32_t, bool, bool>>{
           {5, 576, true, false}, {37, 4096, false, false}, {3, 8200, false, true}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "rows=" << rows << " dim=" << dim << " static=" << static_scale);
      std::mt19937 rng(static_cast<uint32_t>(rows * dim));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<uint16_t> x(int64_t{rows} * dim), w(dim);
      std::vector<float> residual(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = Format<T>::FromF32(i / dim == 1 ? 0.0f : dist(rng) * 3.0f);
        residual[i] = dist(rng) * 20.0f;
      }
      for (auto& v : w) v = Format<T>::FromF32(1.0f + 0.1f * dist(rng));
      const int32_t out_rows = pick ? 2 : rows;
      std::vector<int32_t> ids = {2, 0};
      Dev<uint16_t> dx(x.size()), dw(dim), dout(int64_t{out_rows} * dim);
      Dev<float> dres_a(residual.size()), dres_b(residual.size()), ds_a(out_rows), ds_b(out_rows);
      Dev<uint8_t> dq_a(int64_t{out_rows} * dim), dq_b(int64_t{out_rows} * dim);
      Dev<int32_t> dids(ids.size());
      // A static scale small enough that the largest values saturate.
      Dev<float> dstatic(1);
      dstatic.Upload({0.004f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      dx.Upload(x);
      dw.Upload(w);
      dres_a.Upload(residual);
      dres_b.Upload(residual);
      dids.Upload(ids);
      const int32_t* row_ids = pick ? dids.ptr : nullptr;
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      CUDA_OK(RmsNormF32Residual(As<T>(dx.ptr), dim, dres_a.ptr, init, row_ids, out_rows, dim,
                                 As<T>(dw.ptr), 1e-5f, As<T>(dout.ptr), dim, nullptr));
      CUDA_OK(static_scale ? QuantizeRowsFp8Static(As<T>(dout.ptr), dim, out_rows, dim, sscale, q_a,
                                                   dim, ds_a.ptr, nullptr)
                           : QuantizeRowsFp8(As<T>(dout.ptr), dim, out_rows, dim, q_a, dim,
                                             ds_a.ptr, nullptr));
      CUDA_OK(RmsNormF32ResidualFp8(As<T>(dx.ptr), dim, dres_b.ptr, init, row_ids, out_rows, dim,
                                    As<T>(dw.ptr), 1e-5f, q_b, dim, ds_b.ptr, sscale, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const int64_t n = int64_t{out_rows} * dim;
      ExpectSameBytes(dq_b.Download(n), dq_a.Download(n), "codes");
      ExpectSameBytes(ds_b.Download(out_rows), ds_a.Download(out_rows), "scales");
      ExpectSameBytes(dres_b.Download(residual.size()), dres_a.Download(residual.size()),
                      "residual");
    }
  }
}

// The 24-bit residual stream (RmsNormResidual24 / RmsNormResidual24Fp8) on the host: a value
// rounded to 16 significant bits, and rows of values laid out as the kernels store them (each
// row's high halves, then its low bytes).
float Round24OnHost(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fu + ((u >> 8) & 1u)) & 0xffffff00u;
  std::memcpy(&v, &u, 4);
  return v;
}

std::vector<uint8_t> Encode24(const std::vector<float>& v, int64_t rows, int64_t ldx) {
  std::vector<uint8_t> bytes(Residual24Bytes(rows, ldx));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = bytes.data() + 3 * r * ldx;
    for (int64_t i = 0; i < ldx; ++i) {
      uint32_t u;
      std::memcpy(&u, &v[r * ldx + i], 4);
      EXPECT_EQ(u & 0xffu, 0u) << "not a 24-bit value";
      row[2 * i] = static_cast<uint8_t>(u >> 16);
      row[2 * i + 1] = static_cast<uint8_t>(u >> 24);
      row[2 * ldx + i] = static_cast<uint8_t>(u >> 8);
    }
  }
  return bytes;
}

// A norm over the 24-bit stream is the fp32 stream's norm of the rounded sum: its new stream is
// round24(residual + x) (checked byte for byte against the host's encoding), and its e4m3 codes,
// scales and T rows are those RmsNormF32Residual(Fp8) writes for that sum held in fp32 (with x
// = 0, which adds nothing). Rows wider than a thread's vector, an init step, a row pick (the
// final norm's), a static scale.
TYPED_TEST(FusedFp8QuantGpu, Residual24NormIsTheFp32NormOfTheRoundedSum) {
  REQUIRE_GPU();
  using T = TypeParam;
  for (const auto [rows, dim, init, pick] : std::vector<std::tuple<int32_t, int32_t, bool, bool>>{
           {5, 576, true, false}, {37, 4096, false, false}, {3, 8208, false, true}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim << " init=" << init
                                      << " pick=" << pick << " static=" << static_scale);
      std::mt19937 rng(static_cast<uint32_t>(rows * dim + 1));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      const int64_t n_in = int64_t{rows} * dim;
      std::vector<uint16_t> x(n_in), zeros(n_in, 0), w(dim);
      std::vector<float> stream(n_in), sum(n_in);
      for (int64_t i = 0; i < n_in; ++i) {
        x[i] = Format<T>::FromF32(i / dim == 1 ? 0.0f : dist(rng) * 3.0f);
        // Outlier channels: the stream spans 2^-4 .. 2^12, where bf16 would keep 8 bits.
        stream[i] = Round24OnHost(dist(rng) * std::ldexp(1.0f, static_cast<int>(i % 17) - 4));
        sum[i] = Round24OnHost((init ? 0.0f : stream[i]) + Format<T>::ToF32(x[i]));
      }
      for (auto& v : w) v = Format<T>::FromF32(1.0f + 0.1f * dist(rng));
      const int32_t out_rows = pick ? 2 : rows;
      const int64_t n_out = int64_t{out_rows} * dim;
      // With a pick the stream is not written and the picked rows hold the sums.
      const std::vector<int32_t> ids = {2, 0};
      Dev<uint16_t> dx(n_in), dzero(n_in), dw(dim), dout_a(n_out), dout_b(n_out);
      Dev<uint8_t> dres24(Residual24Bytes(rows, dim)), dq_a(n_out), dq_b(n_out);
      Dev<float> dsum(n_in), ds_a(out_rows), ds_b(out_rows), dstatic(1);
      Dev<int32_t> dids(ids.size());
      dstatic.Upload({0.004f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      dx.Upload(x);
      dzero.Upload(zeros);
      dw.Upload(w);
      dids.Upload(ids);
      const int32_t* row_ids = pick ? dids.ptr : nullptr;
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      // The reference: the rounded sums as an fp32 stream, x = 0.
      dsum.Upload(sum);
      CUDA_OK(RmsNormF32ResidualFp8(As<T>(dzero.ptr), dim, dsum.ptr, false, row_ids, out_rows, dim,
                                    As<T>(dw.ptr), 1e-5f, q_a, dim, ds_a.ptr, sscale, nullptr));
      CUDA_OK(RmsNormF32Residual(As<T>(dzero.ptr), dim, dsum.ptr, false, row_ids, out_rows, dim,
                                 As<T>(dw.ptr), 1e-5f, As<T>(dout_a.ptr), dim, nullptr));
      // The 24-bit stream, once a kernel (each starts from the same stream).
      const std::vector<uint8_t> start = Encode24(stream, rows, dim);
      dres24.Upload(start);
      CUDA_OK(RmsNormResidual24Fp8(As<T>(dx.ptr), dim, dres24.ptr, init, row_ids, out_rows, dim,
                                   As<T>(dw.ptr), 1e-5f, q_b, dim, ds_b.ptr, sscale, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint8_t> after = dres24.Download(start.size());
      ExpectSameBytes(after, pick ? start : Encode24(sum, rows, dim), "stream");
      ExpectSameBytes(dq_b.Download(n_out), dq_a.Download(n_out), "codes");
      ExpectSameBytes(ds_b.Download(out_rows), ds_a.Download(out_rows), "scales");
      if (init) continue;  // the T-row norm below starts from `start` again, which init ignores
      dres24.Upload(start);
      CUDA_OK(RmsNormResidual24(As<T>(dx.ptr), dim, dres24.ptr, false, row_ids, out_rows, dim,
                                As<T>(dw.ptr), 1e-5f, As<T>(dout_b.ptr), dim, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      ExpectSameBytes(dout_b.Download(n_out), dout_a.Download(n_out), "rows");
      ExpectSameBytes(dres24.Download(start.size()), pick ? start : Encode24(sum, rows, dim),
                      "stream (T rows)");
    }
  }
}

TYPED_TEST(FusedFp8QuantGpu, Residual24RejectsWhatItCannotStore) {
  REQUIRE_GPU();
  using T = TypeParam;
  Dev<uint16_t> dx(64), dw(64), dout(64);
  Dev<uint8_t> dres(Residual24Bytes(2, 32)), dq(64);
  Dev<float> ds(2);
  Dev<int32_t> dids(1);
  auto* q = reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr);
  // A row stride that is not a multiple of 16: the planes of odd rows would not be aligned.
  EXPECT_EQ(RmsNormResidual24Fp8(As<T>(dx.ptr), 8, dres.ptr, false, nullptr, 2, 8, As<T>(dw.ptr),
                                 1e-5f, q, 8, ds.ptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(RmsNormResidual24(As<T>(dx.ptr), 24, dres.ptr, false, nullptr, 2, 24, As<T>(dw.ptr),
                              1e-5f, As<T>(dout.ptr), 24, nullptr),
            cudaErrorInvalidValue);
  // No stream, an init with a row pick, a dim that is not a multiple of 8 (no scalar kernel).
  EXPECT_EQ(RmsNormResidual24(As<T>(dx.ptr), 32, nullptr, false, nullptr, 2, 32, As<T>(dw.ptr),
                              1e-5f, As<T>(dout.ptr), 32, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(RmsNormResidual24(As<T>(dx.ptr), 32, dres.ptr, true, dids.ptr, 1, 32, As<T>(dw.ptr),
                              1e-5f, As<T>(dout.ptr), 32, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(RmsNormResidual24(As<T>(dx.ptr), 32, dres.ptr, false, nullptr, 2, 30, As<T>(dw.ptr),
                              1e-5f, As<T>(dout.ptr), 32, nullptr),
            cudaErrorInvalidValue);
  // Valid: 2 rows of 32.
  EXPECT_EQ(RmsNormResidual24(As<T>(dx.ptr), 32, dres.ptr, true, nullptr, 2, 32, As<T>(dw.ptr),
                              1e-5f, As<T>(dout.ptr), 32, nullptr),
            cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
}

TYPED_TEST(FusedFp8QuantGpu, SiluMulFp8EqualsSiluMulThenQuantize) {
  REQUIRE_GPU();
  using T = TypeParam;
  for (const auto [rows, dim] :
       std::vector<std::pair<int32_t, int32_t>>{{1, 1536}, {9, 14336}, {4, 2056}, {2, 20480}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "rows=" << rows << " dim=" << dim << " static=" << static_scale);
      std::mt19937 rng(static_cast<uint32_t>(rows + dim));
      std::normal_distribution<float> dist(0.0f, 2.0f);
      std::vector<uint16_t> gate_up(int64_t{rows} * 2 * dim);
      for (auto& v : gate_up) v = Format<T>::FromF32(dist(rng));
      Dev<uint16_t> dgu(gate_up.size()), dact(int64_t{rows} * dim);
      Dev<uint8_t> dq_a(int64_t{rows} * dim), dq_b(int64_t{rows} * dim);
      Dev<float> ds_a(rows), ds_b(rows), dstatic(1);
      dstatic.Upload({0.01f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      dgu.Upload(gate_up);
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      CUDA_OK(SiluMul(As<T>(dgu.ptr), 2 * dim, rows, dim, As<T>(dact.ptr), dim, nullptr));
      CUDA_OK(static_scale
                  ? QuantizeRowsFp8Static(As<T>(dact.ptr), dim, rows, dim, sscale, q_a, dim,
                                          ds_a.ptr, nullptr)
                  : QuantizeRowsFp8(As<T>(dact.ptr), dim, rows, dim, q_a, dim, ds_a.ptr, nullptr));
      CUDA_OK(SiluMulFp8(As<T>(dgu.ptr), 2 * dim, rows, dim, q_b, dim, ds_b.ptr, sscale, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      ExpectSameBytes(dq_b.Download(int64_t{rows} * dim), dq_a.Download(int64_t{rows} * dim),
                      "codes");
      ExpectSameBytes(ds_b.Download(rows), ds_a.Download(rows), "scales");
    }
  }
}

// The GEMMs' scale passes fused into the kernels after them (Fp8InputScales): each consumer of
// an FP8 GEMM's unscaled sums writes what ApplyFp8Scales followed by the plain consumer writes,
// bit for bit. bf16 only (fp16 models keep the pass: below).
struct UnscaledSums {
  std::vector<uint16_t> y;  // bf16 sums as cuBLASLt writes them: up to ~448^2 k in magnitude
  std::vector<float> row, col;
  std::vector<uint16_t> bias;
};

UnscaledSums MakeUnscaledSums(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(1e-4f, 4e-3f);
  UnscaledSums u;
  u.y.resize(rows * cols);
  for (auto& v : u.y) v = Format<__nv_bfloat16>::FromF32(dist(rng) * 2000.0f);
  u.row.resize(rows);
  for (auto& v : u.row) v = scale(rng);
  u.col.resize(cols);
  for (auto& v : u.col) v = scale(rng);
  u.bias.resize(cols);
  for (auto& v : u.bias) v = Format<__nv_bfloat16>::FromF32(dist(rng));
  return u;
}

// The device copies of UnscaledSums and, in `scaled`, ApplyFp8Scales of them (the unfused
// path's input); Scales() is the fused path's Fp8InputScales.
struct DevSums {
  DevSums(const UnscaledSums& u, int64_t rows, int64_t cols, bool with_bias)
      : y(u.y.size()),
        scaled(u.y.size()),
        row(u.row.size()),
        col(u.col.size()),
        bias(u.bias.size()),
        rows(rows),
        cols(cols),
        with_bias(with_bias) {
    y.Upload(u.y);
    row.Upload(u.row);
    col.Upload(u.col);
    bias.Upload(u.bias);
  }
  Fp8InputScales Scales() const {
    return {row.ptr, col.ptr, with_bias ? As<__nv_bfloat16>(bias.ptr) : nullptr};
  }
  void ApplyScales() {
    CUDA_OK(ApplyFp8Scales(As<__nv_bfloat16>(y.ptr), cols, rows, cols, row.ptr, col.ptr,
                           with_bias ? As<__nv_bfloat16>(bias.ptr) : nullptr,
                           As<__nv_bfloat16>(scaled.ptr), nullptr));
  }
  Dev<uint16_t> y, scaled;
  Dev<float> row, col;
  Dev<uint16_t> bias;
  int64_t rows, cols;
  bool with_bias;
};

TEST(FusedFp8ScalesGpu, RmsNormFp8WithInputScalesEqualsApplyFp8ScalesFirst) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  for (const auto [rows, dim, pick, with_bias] :
       std::vector<std::tuple<int32_t, int32_t, bool, bool>>{
           {5, 576, false, true}, {37, 4096, false, false}, {3, 8200, true, true}}) {
    SCOPED_TRACE(testing::Message()
                 << "rows=" << rows << " dim=" << dim << " pick=" << pick << " bias=" << with_bias);
    DevSums sums(MakeUnscaledSums(rows, dim, static_cast<uint32_t>(rows + dim)), rows, dim,
                 with_bias);
    sums.ApplyScales();
    std::mt19937 rng(static_cast<uint32_t>(dim));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> residual(int64_t{rows} * dim);
    for (auto& v : residual) v = dist(rng) * 20.0f;
    std::vector<uint16_t> w(dim);
    for (auto& v : w) v = Format<T>::FromF32(1.0f + 0.1f * dist(rng));
    const int32_t out_rows = pick ? 2 : rows;
    Dev<uint16_t> dw(dim);
    Dev<float> dres_a(residual.size()), dres_b(residual.size()), ds_a(out_rows), ds_b(out_rows);
    Dev<uint8_t> dq_a(int64_t{out_rows} * dim), dq_b(int64_t{out_rows} * dim);
    Dev<int32_t> dids(2);
    dw.Upload(w);
    dres_a.Upload(residual);
    dres_b.Upload(residual);
    dids.Upload({2, 0});
    const int32_t* row_ids = pick ? dids.ptr : nullptr;
    auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
    auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
    CUDA_OK(RmsNormF32ResidualFp8(As<T>(sums.scaled.ptr), dim, dres_a.ptr, false, row_ids, out_rows,
                                  dim, As<T>(dw.ptr), 1e-5f, q_a, dim, ds_a.ptr, nullptr, nullptr));
    CUDA_OK(RmsNormF32ResidualFp8(As<T>(sums.y.ptr), dim, dres_b.ptr, false, row_ids, out_rows, dim,
                                  As<T>(dw.ptr), 1e-5f, q_b, dim, ds_b.ptr, nullptr, nullptr,
                                  sums.Scales()));
    CUDA_OK(cudaDeviceSynchronize());
    const int64_t n = int64_t{out_rows} * dim;
    ExpectSameBytes(dq_b.Download(n), dq_a.Download(n), "codes");
    ExpectSameBytes(ds_b.Download(out_rows), ds_a.Download(out_rows), "scales");
    ExpectSameBytes(dres_b.Download(residual.size()), dres_a.Download(residual.size()), "residual");
  }
}

// The same over the 24-bit stream: scaling the unscaled sums as they are read gives the stream,
// codes and scales of ApplyFp8Scales then the unscaled kernel.
TEST(FusedFp8ScalesGpu, Residual24NormWithInputScalesEqualsApplyFp8ScalesFirst) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  for (const auto [rows, dim, with_bias] :
       std::vector<std::tuple<int32_t, int32_t, bool>>{{5, 576, true}, {37, 4096, false}}) {
    SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim << " bias=" << with_bias);
    DevSums sums(MakeUnscaledSums(rows, dim, static_cast<uint32_t>(rows + dim + 2)), rows, dim,
                 with_bias);
    sums.ApplyScales();
    std::mt19937 rng(static_cast<uint32_t>(dim + 2));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> stream(int64_t{rows} * dim);
    for (auto& v : stream) v = Round24OnHost(dist(rng) * 20.0f);
    std::vector<uint16_t> w(dim);
    for (auto& v : w) v = Format<T>::FromF32(1.0f + 0.1f * dist(rng));
    const std::vector<uint8_t> start = Encode24(stream, rows, dim);
    Dev<uint16_t> dw(dim);
    Dev<uint8_t> dres_a(start.size()), dres_b(start.size()), dq_a(int64_t{rows} * dim),
        dq_b(int64_t{rows} * dim);
    Dev<float> ds_a(rows), ds_b(rows);
    dw.Upload(w);
    dres_a.Upload(start);
    dres_b.Upload(start);
    auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
    auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
    CUDA_OK(RmsNormResidual24Fp8(As<T>(sums.scaled.ptr), dim, dres_a.ptr, false, nullptr, rows, dim,
                                 As<T>(dw.ptr), 1e-5f, q_a, dim, ds_a.ptr, nullptr, nullptr));
    CUDA_OK(RmsNormResidual24Fp8(As<T>(sums.y.ptr), dim, dres_b.ptr, false, nullptr, rows, dim,
                                 As<T>(dw.ptr), 1e-5f, q_b, dim, ds_b.ptr, nullptr, nullptr,
                                 sums.Scales()));
    CUDA_OK(cudaDeviceSynchronize());
    const int64_t n = int64_t{rows} * dim;
    ExpectSameBytes(dq_b.Download(n), dq_a.Download(n), "codes");
    ExpectSameBytes(ds_b.Download(rows), ds_a.Download(rows), "scales");
    ExpectSameBytes(dres_b.Download(start.size()), dres_a.Download(start.size()), "stream");
  }
}

TEST(FusedFp8ScalesGpu, SiluMulFp8WithInputScalesEqualsApplyFp8ScalesFirst) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  // 14336: Llama 8B (7 vectors a thread at 256 threads: the 8-vector instance); 20480 more.
  for (const auto [rows, dim, with_bias] : std::vector<std::tuple<int32_t, int32_t, bool>>{
           {1, 1536, true}, {9, 14336, false}, {2, 20480, true}}) {
    for (const bool static_scale : {false, true}) {
      SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim
                                      << " static=" << static_scale << " bias=" << with_bias);
      DevSums sums(MakeUnscaledSums(rows, 2 * dim, static_cast<uint32_t>(rows * dim)), rows,
                   2 * dim, with_bias);
      sums.ApplyScales();
      Dev<uint8_t> dq_a(int64_t{rows} * dim), dq_b(int64_t{rows} * dim);
      Dev<float> ds_a(rows), ds_b(rows), dstatic(1);
      dstatic.Upload({0.01f});
      const float* sscale = static_scale ? dstatic.ptr : nullptr;
      auto* q_a = reinterpret_cast<__nv_fp8_e4m3*>(dq_a.ptr);
      auto* q_b = reinterpret_cast<__nv_fp8_e4m3*>(dq_b.ptr);
      CUDA_OK(SiluMulFp8(As<T>(sums.scaled.ptr), 2 * dim, rows, dim, q_a, dim, ds_a.ptr, sscale,
                         nullptr));
      CUDA_OK(SiluMulFp8(As<T>(sums.y.ptr), 2 * dim, rows, dim, q_b, dim, ds_b.ptr, sscale, nullptr,
                         sums.Scales()));
      CUDA_OK(cudaDeviceSynchronize());
      ExpectSameBytes(dq_b.Download(int64_t{rows} * dim), dq_a.Download(int64_t{rows} * dim),
                      "codes");
      ExpectSameBytes(ds_b.Download(rows), ds_a.Download(rows), "scales");
    }
  }
}

// RopeStoreKv over unscaled qkv sums: the rotated q heads written back and the k / v heads in
// the cache (bf16 and e4m3) are those of ApplyFp8Scales then RopeStoreKv. tokens: few take the
// one-pair-a-thread kernel, many the 8-pair one.
template <typename C>
void CheckRopeWithInputScales(bool with_bias, int tokens) {
  using T = __nv_bfloat16;
  const int heads = 4, kv_heads = 2, head_dim = 64, block_size = 16;
  const int64_t width = int64_t{heads + 2 * kv_heads} * head_dim;
  DevSums sums(MakeUnscaledSums(tokens, width, 7), tokens, width, with_bias);
  sums.ApplyScales();
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  const int num_blocks = tokens / block_size + 2;
  std::vector<int32_t> positions(tokens);
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) {
    positions[t] = (t * 37) % 300;
    slots[t] = t == tokens / 2 ? -1 : num_blocks * block_size - 1 - t;  // -1: a padding row
  }
  Dev<float> dinv(inv_freq.size());
  Dev<int32_t> dpos(tokens);
  Dev<int64_t> dslots(tokens);
  dinv.Upload(inv_freq);
  dpos.Upload(positions);
  dslots.Upload(slots);
  const int64_t cache_elems = int64_t{num_blocks} * kv_heads * block_size * head_dim;
  Dev<C> kc_a(cache_elems), vc_a(cache_elems), kc_b(cache_elems), vc_b(cache_elems);
  for (Dev<C>* d : {&kc_a, &vc_a, &kc_b, &vc_b}) {
    CUDA_OK(cudaMemset(d->ptr, 0, cache_elems * sizeof(C)));
  }
  RopeKvArgsT<T, C> a;
  a.ld = width;
  a.positions = dpos.ptr;
  a.slot_mapping = dslots.ptr;
  a.num_tokens = tokens;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.inv_freq = dinv.ptr;
  a.block_size = block_size;
  if constexpr (!std::is_same_v<C, T>) a.k_scale = 0.05f, a.v_scale = 0.02f;
  RopeKvArgsT<T, C> b = a;
  a.qkv = As<T>(sums.scaled.ptr);
  a.k_cache = kc_a.ptr;
  a.v_cache = vc_a.ptr;
  b.qkv = As<T>(sums.y.ptr);
  b.k_cache = kc_b.ptr;
  b.v_cache = vc_b.ptr;
  b.qkv_scales = sums.Scales();
  CUDA_OK(RopeStoreKv(a, nullptr));
  CUDA_OK(RopeStoreKv(b, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> qa = sums.scaled.Download(tokens * width),
                              qb = sums.y.Download(tokens * width);
  for (int t = 0; t < tokens; ++t) {  // the q heads: the first heads * head_dim of each row
    const std::vector<uint16_t> ra(qa.begin() + t * width,
                                   qa.begin() + t * width + heads * head_dim);
    const std::vector<uint16_t> rb(qb.begin() + t * width,
                                   qb.begin() + t * width + heads * head_dim);
    ExpectSameBytes(rb, ra, "q");
  }
  ExpectSameBytes(kc_b.Download(cache_elems), kc_a.Download(cache_elems), "k cache");
  ExpectSameBytes(vc_b.Download(cache_elems), vc_a.Download(cache_elems), "v cache");
}

TEST(FusedFp8ScalesGpu, RopeStoreKvWithInputScalesEqualsApplyFp8ScalesFirst) {
  REQUIRE_GPU();
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(testing::Message() << "bias=" << with_bias);
    for (const int tokens : {6, 40}) {
      CheckRopeWithInputScales<__nv_bfloat16>(with_bias, tokens);
      CheckRopeWithInputScales<__nv_fp8_e4m3>(with_bias, tokens);
    }
  }
}

TEST(FusedFp8ScalesGpu, RejectsFp16AndAliasedScales) {
  REQUIRE_GPU();
  Dev<float> dres(64), dscale(4), dcol(128);
  Dev<uint16_t> dx(64), dw(64), dgu(128);
  Dev<uint8_t> dq(64);
  auto* q = reinterpret_cast<__nv_fp8_e4m3*>(dq.ptr);
  const Fp8InputScales s{dscale.ptr, dcol.ptr, nullptr};
  // fp16: its unscaled sums would be bf16, not its T.
  EXPECT_EQ(
      RmsNormF32ResidualFp8(As<__half>(dx.ptr), 64, dres.ptr, false, nullptr, 1, 64,
                            As<__half>(dw.ptr), 1e-5f, q, 64, dscale.ptr + 1, nullptr, nullptr, s),
      cudaErrorInvalidValue);
  EXPECT_EQ(SiluMulFp8(As<__half>(dgu.ptr), 128, 1, 64, q, 64, dscale.ptr + 1, nullptr, nullptr, s),
            cudaErrorInvalidValue);
  // bf16 writing the scales it reads.
  EXPECT_EQ(RmsNormF32ResidualFp8(As<__nv_bfloat16>(dx.ptr), 64, dres.ptr, false, nullptr, 1, 64,
                                  As<__nv_bfloat16>(dw.ptr), 1e-5f, q, 64, dscale.ptr, nullptr,
                                  nullptr, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      SiluMulFp8(As<__nv_bfloat16>(dgu.ptr), 128, 1, 64, q, 64, dscale.ptr, nullptr, nullptr, s),
      cudaErrorInvalidValue);
  // No column scales.
  EXPECT_EQ(SiluMulFp8(As<__nv_bfloat16>(dgu.ptr), 128, 1, 64, q, 64, dscale.ptr + 1, nullptr,
                       nullptr, Fp8InputScales{dscale.ptr, nullptr, nullptr}),
            cudaErrorInvalidValue);
  RopeKvArgsT<__half> r;
  r.num_tokens = 1;
  r.head_dim = 64;
  r.qkv_scales = s;
  EXPECT_EQ(RopeStoreKv(r, nullptr), cudaErrorInvalidValue);
}

TYPED_TEST(FusedFp8QuantGpu, RejectUnalignedShapes) {
  REQUIRE_GPU();
  using T = TypeParam;
  EXPECT_EQ(
      SiluMulFp8(static_cast<const T*>(nullptr), 24, 1, 12, nullptr, 12, nullptr, nullptr, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(QuantizeRowsFp8Static(static_cast<const T*>(nullptr), 8, 1, 8, nullptr, nullptr, 8,
                                  nullptr, nullptr),
            cudaErrorInvalidValue);  // no scale
  Dev<float> dres(16);
  EXPECT_EQ(RmsNormF32ResidualFp8(static_cast<const T*>(nullptr), 12, dres.ptr, false, nullptr, 1,
                                  12, nullptr, 1e-5f, nullptr, 12, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// FillGaussianE4m3: a pure function of (seed, index) with the moments of N(0, sigma^2) (sigma 20:
// no saturation), both signs, and its arguments checked.
TEST(FillGaussianE4m3Gpu, NormalCodesFromASeed) {
  REQUIRE_GPU();
  constexpr int64_t n = 1 << 20;
  Dev<uint8_t> a(n), b(n), c(n);
  auto* pa = reinterpret_cast<__nv_fp8_e4m3*>(a.ptr);
  CUDA_OK(FillGaussianE4m3(pa, n, 7, 20.0f, nullptr));
  CUDA_OK(FillGaussianE4m3(reinterpret_cast<__nv_fp8_e4m3*>(b.ptr), n, 7, 20.0f, nullptr));
  CUDA_OK(FillGaussianE4m3(reinterpret_cast<__nv_fp8_e4m3*>(c.ptr), n, 8, 20.0f, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> ha = a.Download(n), hb = b.Download(n), hc = c.Download(n);
  EXPECT_EQ(ha, hb);
  EXPECT_NE(ha, hc);
  double sum = 0, sum_sq = 0;
  int64_t negative = 0, nan = 0;
  for (uint8_t code : ha) {
    __nv_fp8_e4m3 v;
    v.__x = code;
    const float f = static_cast<float>(v);
    if (std::isnan(f)) {
      ++nan;
      continue;
    }
    sum += f;
    sum_sq += double{f} * f;
    negative += f < 0;
  }
  EXPECT_EQ(nan, 0);
  EXPECT_NEAR(sum / n, 0.0, 0.1);
  EXPECT_NEAR(std::sqrt(sum_sq / n), 20.0, 0.4);  // e4m3 rounds each value within 6.25 %
  EXPECT_NEAR(static_cast<double>(negative) / n, 0.5, 0.01);
  EXPECT_EQ(FillGaussianE4m3(pa, 16, 1, 0.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(FillGaussianE4m3(nullptr, 16, 1, 1.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(FillGaussianE4m3(pa, -1, 1, 1.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(FillGaussianE4m3(pa, 0, 1, 1.0f, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace kiln::kernels
