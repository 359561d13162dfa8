// Paged attention kernels against the CPU twin kiln::cpu::PagedAttention (label: gpu); every case
// runs with bf16 and with fp16 activations and cache.
//
// Tolerance. Inputs are bf16 (fp16) and the reference sees exactly those values in f32, so the
// only differences are the kernel's own roundings, each at most half an ulp, u = 2^-8 relative in
// bf16 (8 significant bits) and 2^-11 in fp16 (11): (1) P is rounded before the P V product:
// out = sum p_j v_j / l with |v_j| <= 1 moves by at most u in absolute terms (fp16 P below 2^-14
// is subnormal, absolute error 2^-25 a weight, negligible next to l >= 1); (2) the output is
// rounded (at most u |out| <= u); (3) fp32 accumulation in a different order (~1e-6). Together at
// most 2u per element, 7.8e-3 (bf16) and 9.8e-4 (fp16), in the worst case and far less in the
// norm. The bounds below (max abs 1.2e-2 resp. 1.5e-3 on outputs of magnitude <= 1, rel 1e-2
// resp. 1.25e-3 in the norm) leave 1.5x headroom on the worst case; the fp16 ones are the bf16
// ones / 8, the ratio of the two ulps, so an fp16 path that rounded P or the output to bf16 fails
// them. Any of a wrong mask, a wrong head mapping or a dropped tile moves the error to O(0.1..1).
//
// FP8 cache (PagedAttentionFp8CacheGpu, both activation types): K and V are random values x in
// [-1, 1] stored as e4m3(x / scale) (RopeStoreKv's rule), with scales 1, 0.05 (codes up to 20),
// 0.0025 (up to 400: the top binades) and 3.0 (codes of at most 1/3, with subnormals). The CPU
// twin reads the dequantized values e4m3 * scale, so quantization itself is no part of the
// difference: the kernel converts each code to T exactly and folds the scales into fp32 factors
// (scores = q . code * (scale * k_scale), out = (sum p code_v / l) * v_scale), which moves a
// result by a few fp32 ulps against the twin's q . (code * k_scale) and sum p (code * v_scale).
// The remaining differences are the T-cache ones above (P and the output rounded to T, the
// accumulation order), and the dequantized values are still of magnitude <= 1, so the same
// bounds apply. Unowned cache slots hold the e4m3 NaN (read by mistake: NaN in fp16, ~1.3e5 in
// bf16, an O(1) error either way).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/buffer.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

template <typename T>
constexpr double kRelTol = std::is_same_v<T, __half> ? 1.25e-3 : 1e-2;
template <typename T>
constexpr double kAbsTol = std::is_same_v<T, __half> ? 1.5e-3 : 1.2e-2;

// The Hopper prefill kernel's e4m3 mma's over an fp8 cache (PrefillKernel::kWgmmaE4m3): Q is
// rounded to e4m3 with a scale a (token, head) row, amax / 448, and P to e4m3 (after a factor
// 2^8 that keeps weights above 2^-14 normal). The reference gets Q rounded the same way (the
// kernel's codes times the row's scale), so what remains is P's rounding: at most 2^-4 of each
// weight (half an ulp of e4m3's 4 significant bits), i.e. at most 2^-4 absolute on an output of
// values |v| <= 1, and ~2^-3 / sqrt(12) relative in the norm (random rounding of every weight),
// plus the T rounding above. While set (E4m3Prefill), RunPrefill rounds the reference's Q and
// checks these bounds: rel 5e-2, max abs 2^-4 + 2^-7.
bool g_e4m3_prefill = false;
constexpr double kE4m3RelTol = 5e-2;
constexpr double kE4m3AbsTol = 0.0625 + 0.0078125;

struct Shape {
  int num_heads, num_kv_heads, head_dim, block_size;
  int q_pad = 0;    // extra elements per q row (q_stride > num_heads * head_dim)
  int out_pad = 0;  // extra elements per out row
};

// An fp8 cache's scales (a T cache's are 1).
struct Scales {
  float k = 1.0f, v = 1.0f;
};

using Fp8 = __nv_fp8_e4m3;

// One layer's paged cache of element type C (T, or Fp8 for activations of type T) with random
// K/V, random non-contiguous block tables, and NaN in every slot no sequence owns (unused blocks
// and the tail of each sequence's last block), so a read past a sequence's end shows up as NaN in
// its output.
template <typename T, typename C = T>
struct Cache {
  static constexpr bool kFp8 = std::is_same_v<C, Fp8>;
  using Bits = std::conditional_t<kFp8, uint8_t, uint16_t>;  // what the kernel reads
  Shape shape;
  Scales scales;
  std::vector<int> seq_lens;
  int num_blocks = 0, max_blocks_per_seq = 0;
  std::vector<int32_t> tables;
  std::vector<Bits> k, v;           // kernel layout [blocks, kv_heads, block_size, head_dim]
  std::vector<float> k_ref, v_ref;  // CPU layout   [blocks, block_size, kv_heads, head_dim]

  // min_table_len: the block table covers at least this many positions per sequence (decode's
  // max_seq_len must fit in it).
  Cache(const Shape& s, std::vector<int> lens, std::mt19937& rng, int min_table_len = 0,
        Scales sc = {})
      : shape(s), scales(sc), seq_lens(std::move(lens)) {
    const int bs = s.block_size, kvh = s.num_kv_heads, hd = s.head_dim;
    int used = 0;
    for (int len : seq_lens) {
      used += (len + bs - 1) / bs;
      max_blocks_per_seq = std::max(max_blocks_per_seq, (len + bs - 1) / bs);
    }
    // Spare entries per row stay -1: reading one would fault.
    max_blocks_per_seq = std::max(max_blocks_per_seq + 1, (min_table_len + bs - 1) / bs);
    num_blocks = used + used / 3 + 2;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(seq_lens.size() * max_blocks_per_seq, -1);
    const size_t elems = size_t(num_blocks) * bs * kvh * hd;
    k.assign(elems, kFp8 ? kPoisonFp8 : kPoison);
    v.assign(elems, kFp8 ? kPoisonFp8 : kPoison);
    k_ref.assign(elems, NAN);
    v_ref.assign(elems, NAN);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    int next = 0;
    for (size_t seq = 0; seq < seq_lens.size(); ++seq) {
      for (int pos = 0; pos < seq_lens[seq]; ++pos) {
        if (pos % bs == 0) tables[seq * max_blocks_per_seq + pos / bs] = perm[next++];
        const int64_t block = tables[seq * max_blocks_per_seq + pos / bs];
        for (int h = 0; h < kvh; ++h) {
          for (int d = 0; d < hd; ++d) {
            const size_t kern = ((block * kvh + h) * bs + pos % bs) * hd + d;
            const size_t ref = ((block * bs + pos % bs) * kvh + h) * hd + d;
            if constexpr (kFp8) {
              k[kern] = E4m3Sat(uni(rng) / sc.k);
              v[kern] = E4m3Sat(uni(rng) / sc.v);
              k_ref[ref] = F8E4M3ToF32(k[kern]) * sc.k;
              v_ref[ref] = F8E4M3ToF32(v[kern]) * sc.v;
            } else {
              k[kern] = Format<T>::FromF32(uni(rng));
              v[kern] = Format<T>::FromF32(uni(rng));
              k_ref[ref] = Format<T>::ToF32(k[kern]);
              v_ref[ref] = Format<T>::ToF32(v[kern]);
            }
          }
        }
      }
    }
  }
};

// Random queries of type T [num_tokens, q_stride] (padding columns poisoned) and their f32 copy.
template <typename T>
void RandomQ(const Shape& s, int num_tokens, std::mt19937& rng, std::vector<uint16_t>* q,
             std::vector<float>* q_ref) {
  const int width = s.num_heads * s.head_dim, stride = width + s.q_pad;
  // Scores of a few units make the softmax peaked enough that a wrong mask or a wrong head
  // changes the output by O(1), not by a blur of near-uniform weights.
  std::uniform_real_distribution<float> uni(-2.5f, 2.5f);
  q->assign(size_t(num_tokens) * stride, kPoison);
  q_ref->assign(size_t(num_tokens) * stride, 0.0f);
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < width; ++i) {
      (*q)[size_t(t) * stride + i] = Format<T>::FromF32(uni(rng));
      (*q_ref)[size_t(t) * stride + i] = Format<T>::ToF32((*q)[size_t(t) * stride + i]);
    }
  }
}

template <typename T, typename C>
std::vector<float> CpuReference(const Cache<T, C>& c, const std::vector<float>& q_ref,
                                const std::vector<int>& q_lens) {
  const Shape& s = c.shape;
  std::vector<int32_t> cu(q_lens.size() + 1, 0), positions;
  for (size_t i = 0; i < q_lens.size(); ++i) {
    cu[i + 1] = cu[i] + q_lens[i];
    for (int j = 0; j < q_lens[i]; ++j) positions.push_back(c.seq_lens[i] - q_lens[i] + j);
  }
  const int width = s.num_heads * s.head_dim;
  std::vector<float> out(size_t(cu.back()) * width, 0.0f);
  cpu::PagedAttentionArgs a;
  a.q = q_ref.data();
  a.ldq = width + s.q_pad;
  a.k_cache = c.k_ref.data();
  a.v_cache = c.v_ref.data();
  a.positions = positions.data();
  a.cu_seqlens = cu.data();
  a.block_tables = c.tables.data();
  a.num_seqs = static_cast<int32_t>(q_lens.size());
  a.max_blocks_per_seq = c.max_blocks_per_seq;
  a.block_size = s.block_size;
  a.num_heads = s.num_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_dim = s.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.out = out.data();
  a.ldo = width;
  cpu::PagedAttention(a, static_cast<int>(std::thread::hardware_concurrency()));
  return out;
}

// Compares out [num_tokens, out_stride] (T) with ref [num_tokens, width]; padding columns must
// still hold the poison.
template <typename T>
void ExpectClose(const Shape& s, const std::vector<uint16_t>& out, const std::vector<float>& ref,
                 int num_tokens, const std::string& what) {
  const int width = s.num_heads * s.head_dim, stride = width + s.out_pad;
  double err2 = 0, ref2 = 0, max_abs = 0;
  int64_t bad = 0, pad_written = 0;
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < width; ++i) {
      const float got = Format<T>::ToF32(out[size_t(t) * stride + i]);
      const float want = ref[size_t(t) * width + i];
      if (!std::isfinite(got)) {
        ++bad;
        continue;
      }
      err2 += double(got - want) * (got - want);
      ref2 += double(want) * want;
      max_abs = std::max(max_abs, double(std::fabs(got - want)));
    }
    for (int i = width; i < stride; ++i) pad_written += out[size_t(t) * stride + i] != kPoison;
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  EXPECT_EQ(bad, 0) << what << ": non-finite (unwritten or NaN-read) outputs";
  EXPECT_EQ(pad_written, 0) << what << ": wrote into the stride padding";
  EXPECT_LT(rel, g_e4m3_prefill ? kE4m3RelTol : kRelTol<T>) << what;
  EXPECT_LT(max_abs, g_e4m3_prefill ? kE4m3AbsTol : kAbsTol<T>) << what;
  std::printf("  %-4s %-48s rel %.2e  max_abs %.2e\n", DTypeName(Format<T>::kDType).data(),
              what.c_str(), rel, max_abs);
}

template <typename T, typename C>
PagedKvCacheT<T, C> DeviceCache(const Cache<T, C>& c, const Dev<typename Cache<T, C>::Bits>& k,
                                const Dev<typename Cache<T, C>::Bits>& v,
                                const Dev<int32_t>& tables) {
  PagedKvCacheT<T, C> kv;
  kv.k = reinterpret_cast<const C*>(k.ptr);
  kv.v = reinterpret_cast<const C*>(v.ptr);
  kv.k_scale = c.scales.k;
  kv.v_scale = c.scales.v;
  kv.num_blocks = c.num_blocks;
  kv.block_size = c.shape.block_size;
  kv.block_tables = tables.ptr;
  kv.max_blocks_per_seq = c.max_blocks_per_seq;
  return kv;
}

// A one-block cache of element type C over `data` (16-byte aligned), for the argument checks.
template <typename T, typename C = T>
PagedKvCacheT<T, C> OneBlockCache(const void* data, const int32_t* tables) {
  PagedKvCacheT<T, C> kv;
  kv.k = kv.v = static_cast<const C*>(data);
  kv.num_blocks = 1;
  kv.block_size = 16;
  kv.block_tables = tables;
  kv.max_blocks_per_seq = 4;
  return kv;
}

AttentionDims DimsOf(const Shape& s) {
  return AttentionDims{s.num_heads, s.num_kv_heads, s.head_dim,
                       1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

// q_ref's (token, head) rows as the e4m3 prefill kernel sees them: e4m3(x * 448 / amax) *
// (amax / 448) in f32 (an all-zero row stays zero).
void RoundQToE4m3Rows(const Shape& s, int num_tokens, std::vector<float>* q_ref) {
  const int stride = s.num_heads * s.head_dim + s.q_pad;
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < s.num_heads; ++h) {
      float* row = q_ref->data() + size_t(t) * stride + size_t(h) * s.head_dim;
      float amax = 0.0f;
      for (int d = 0; d < s.head_dim; ++d) amax = std::max(amax, std::fabs(row[d]));
      if (amax == 0.0f) continue;
      const float inv = 448.0f / amax, scale = amax / 448.0f;
      for (int d = 0; d < s.head_dim; ++d) row[d] = F8E4M3ToF32(E4m3Sat(row[d] * inv)) * scale;
    }
  }
}

// While alive: PagedPrefillAttention takes `kernel`, and RunPrefill checks the e4m3 bounds when
// `e4m3` (restored to kAuto and the T bounds after).
struct PrefillKernelScope {
  PrefillKernelScope(PrefillKernel kernel, bool e4m3) {
    SetPrefillKernel(kernel);
    g_e4m3_prefill = e4m3;
  }
  ~PrefillKernelScope() {
    SetPrefillKernel(PrefillKernel::kAuto);
    g_e4m3_prefill = false;
  }
};

// C: the cache's element type (T, or Fp8 with scales sc).
template <typename T, typename C = T>
void RunPrefill(const Shape& s, const std::vector<int>& q_lens, const std::vector<int>& seq_lens,
                uint32_t seed, const std::string& what, Scales sc = {}) {
  using Bits = typename Cache<T, C>::Bits;
  std::mt19937 rng(seed);
  Cache<T, C> c(s, seq_lens, rng, 0, sc);
  const int num_tokens = std::accumulate(q_lens.begin(), q_lens.end(), 0);
  std::vector<uint16_t> q;
  std::vector<float> q_ref;
  RandomQ<T>(s, num_tokens, rng, &q, &q_ref);
  std::vector<int32_t> cu(q_lens.size() + 1, 0);
  for (size_t i = 0; i < q_lens.size(); ++i) cu[i + 1] = cu[i] + q_lens[i];
  const int width = s.num_heads * s.head_dim;
  const size_t out_elems = size_t(num_tokens) * (width + s.out_pad);

  Dev<uint16_t> dq(q.size()), dout(out_elems);
  Dev<Bits> dk(c.k.size()), dv(c.v.size());
  Dev<int32_t> dtab(c.tables.size()), dcu(cu.size()), dlens(seq_lens.size());
  dq.Upload(q);
  dk.Upload(c.k);
  dv.Upload(c.v);
  dtab.Upload(c.tables);
  dcu.Upload(cu);
  dlens.Upload(std::vector<int32_t>(seq_lens.begin(), seq_lens.end()));
  dout.Upload(std::vector<uint16_t>(out_elems, kPoison));
  if (g_e4m3_prefill) RoundQToE4m3Rows(s, num_tokens, &q_ref);
  const int max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
  CUDA_OK(PagedPrefillAttention(As<T>(dq.ptr), width + s.q_pad, DeviceCache(c, dk, dv, dtab),
                                dcu.ptr, dlens.ptr, static_cast<int32_t>(q_lens.size()), max_q_len,
                                DimsOf(s), As<T>(dout.ptr), width + s.out_pad, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  ExpectClose<T>(s, dout.Download(out_elems), CpuReference(c, q_ref, q_lens), num_tokens, what);
}

const Shape kSmol{9, 3, 64, 16};       // SmolLM2-135M
const Shape kLlama8b{32, 8, 128, 16};  // Llama-3.1-8B

// " k*0.05 v*3" for an fp8 cache's scales; nothing for a T cache.
template <typename C>
std::string ScalesName(const Scales& sc) {
  if (!std::is_same_v<C, Fp8>) return "";
  char buf[48];
  std::snprintf(buf, sizeof(buf), " k*%g v*%g", sc.k, sc.v);
  return buf;
}

// Decode rows (q_len 1 on 1000s of positions), a full prefill, chunks, and a padding sequence
// (q_len 0, seq_len 0) in one launch; q as in a fused qkv buffer, out with its own padding. At
// head_dim 128 / block 16 (seed) and head_dim 64 / block 32 (seed + 1), with the fp8 scales
// sc128 / sc64.
template <typename T, typename C = T>
void RunMixedBatch(uint32_t seed, const std::string& prefix, Scales sc128 = {}, Scales sc64 = {}) {
  const std::vector<int> q_lens = {1, 769, 7, 0, 83, 1, 16};
  const std::vector<int> seq_lens = {1000, 769, 2000, 0, 5125, 1, 4000};
  Shape s = kLlama8b;
  s.q_pad = 2 * s.num_kv_heads * s.head_dim;
  s.out_pad = 8;
  RunPrefill<T, C>(s, q_lens, seq_lens, seed,
                   prefix + "mixed hd128 bs16 fused-qkv stride" + ScalesName<C>(sc128), sc128);
  Shape t = kSmol;
  t.block_size = 32;
  t.q_pad = 2 * t.num_kv_heads * t.head_dim;
  t.out_pad = 64;
  RunPrefill<T, C>(t, q_lens, seq_lens, seed + 1,
                   prefix + "mixed hd64 bs32 fused-qkv stride" + ScalesName<C>(sc64), sc64);
}

KILN_ELEMENT_TYPED_TEST_SUITE(PagedPrefillAttentionGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(PagedDecodeAttentionGpu);
KILN_ELEMENT_TYPED_TEST_SUITE(PagedAttentionGpu);

TYPED_TEST(PagedPrefillAttentionGpu, FullPrefillOddLengths) {
  REQUIRE_GPU();
  for (const Shape& s : {kSmol, kLlama8b}) {
    for (int len : {1, 7, 83, 769}) {
      RunPrefill<TypeParam>(
          s, {len}, {len}, 1000 + len,
          "prefill hd" + std::to_string(s.head_dim) + " q=ctx=" + std::to_string(len));
    }
  }
}

TYPED_TEST(PagedPrefillAttentionGpu, ChunkedPrefillOnLongContext) {
  REQUIRE_GPU();
  // Query rows are the last q_len of 5,125 positions: the causal offset matters on every row.
  RunPrefill<TypeParam>(kLlama8b, {83}, {5125}, 7, "chunked hd128 q=83 ctx=5125");
  RunPrefill<TypeParam>({12, 4, 64, 32}, {769}, {5125}, 8, "chunked hd64 bs32 g3 q=769 ctx=5125");
  RunPrefill<TypeParam>({8, 8, 128, 32}, {7}, {1000}, 9, "chunked hd128 bs32 mha q=7 ctx=1000");
  RunPrefill<TypeParam>({16, 1, 64, 64}, {129}, {300}, 10, "chunked hd64 bs64 mqa16 q=129 ctx=300");
}

TYPED_TEST(PagedPrefillAttentionGpu, MixedBatchWithStridesAndPadding) {
  REQUIRE_GPU();
  RunMixedBatch<TypeParam>(11, "");
}

// Grids of two waves of resident CTAs (these, on GPUs of up to 152 SMs) take two row tiles a
// warp (32 packed rows); the cases above, one. Full prompts, a chunk on a longer context, a decode
// row and a padding sequence in one launch, rows of one token split across a warp's two tiles
// (g3, g8).
TYPED_TEST(PagedPrefillAttentionGpu, TwoRowTilesPerWarp) {
  REQUIRE_GPU();
  RunPrefill<TypeParam>({32, 8, 128, 16}, {700, 700, 350, 1, 0}, {700, 1400, 350, 900, 0}, 12,
                        "two tiles hd128 g4 q=700,700,350,1,0");
  RunPrefill<TypeParam>({48, 16, 64, 32}, {700, 77, 700}, {700, 1500, 800}, 13,
                        "two tiles hd64 bs32 g3 q=700,77,700");
  RunPrefill<TypeParam>({64, 8, 128, 16}, {600, 2}, {600, 2}, 14, "two tiles hd128 g8 q=600,2");
}

// Lengths at the 128-key tiles and 128-row CTAs of the Hopper (wgmma) prefill kernel, groups
// that pack 8 (g16) to 128 (MHA) tokens into one CTA, cache blocks of 16-64 positions.
TYPED_TEST(PagedPrefillAttentionGpu, HeadDim128TileEdges) {
  REQUIRE_GPU();
  RunPrefill<TypeParam>(kLlama8b, {128, 129, 255, 256, 32, 33}, {128, 129, 255, 384, 160, 1057}, 15,
                        "tile edges hd128 g4 q=128,129,255,256,32,33");
  RunPrefill<TypeParam>({16, 1, 128, 16}, {300}, {2000}, 16, "chunked hd128 mqa16 q=300 ctx=2000");
  RunPrefill<TypeParam>({8, 8, 128, 64}, {257, 1}, {257, 4000}, 17, "hd128 bs64 mha q=257,1");
}

// Decode: one query row per sequence; rows with seq_len 0 must stay untouched. num_splits > 0
// forces the context splits (1: the split kernel writes the output itself).
template <typename T, typename C = T>
void RunDecode(const Shape& s, const std::vector<int>& seq_lens, int max_seq_len, uint32_t seed,
               const std::string& what, bool through_graph = false, int num_splits = 0,
               Scales sc = {}) {
  using Bits = typename Cache<T, C>::Bits;
  std::mt19937 rng(seed);
  Cache<T, C> c(s, seq_lens, rng, max_seq_len, sc);
  const int num_seqs = static_cast<int>(seq_lens.size());
  std::vector<uint16_t> q;
  std::vector<float> q_ref;
  RandomQ<T>(s, num_seqs, rng, &q, &q_ref);
  const int width = s.num_heads * s.head_dim, out_stride = width + s.out_pad;
  const size_t out_elems = size_t(num_seqs) * out_stride;
  const AttentionDims dims = DimsOf(s);
  const size_t ws_bytes = num_splits > 0
                              ? PagedDecodeWorkspaceBytesForSplits(num_seqs, num_splits, dims)
                              : PagedDecodeWorkspaceBytes(num_seqs, max_seq_len, dims);
  ASSERT_GT(ws_bytes, 0u);
  Dev<uint16_t> dq(q.size()), dout(out_elems);
  Dev<Bits> dk(c.k.size()), dv(c.v.size());
  Dev<int32_t> dtab(c.tables.size()), dlens(num_seqs);
  Dev<char> ws(ws_bytes);
  dq.Upload(q);
  dk.Upload(c.k);
  dv.Upload(c.v);
  dtab.Upload(c.tables);
  dlens.Upload(std::vector<int32_t>(seq_lens.begin(), seq_lens.end()));
  dout.Upload(std::vector<uint16_t>(out_elems, kPoison));
  // NOTE: the CUDA graph captures the launch with the device's seq_lens buffer, not its values:
  // writing seq_lens after capture and replaying exercises what the runner's graphs rely on.
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  auto launch = [&] {
    return PagedDecodeAttention(As<T>(dq.ptr), width + s.q_pad, DeviceCache(c, dk, dv, dtab),
                                dlens.ptr, num_seqs, max_seq_len, dims, ws.ptr, ws_bytes,
                                As<T>(dout.ptr), out_stride, stream, num_splits);
  };
  if (through_graph) {
    // Capture with all-zero lengths (nothing to do), then set the real ones and replay.
    CUDA_OK(cudaMemset(dlens.ptr, 0, num_seqs * sizeof(int32_t)));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const cudaError_t launched = launch();
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(launched);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    dlens.Upload(std::vector<int32_t>(seq_lens.begin(), seq_lens.end()));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  } else {
    CUDA_OK(launch());
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  const std::vector<uint16_t> out = dout.Download(out_elems);

  // Reference and comparison over the live rows only; padding rows must keep the poison.
  std::vector<int> q_lens(num_seqs);
  std::vector<uint16_t> live_out;
  int num_live = 0;
  for (int i = 0; i < num_seqs; ++i) {
    q_lens[i] = seq_lens[i] > 0 ? 1 : 0;
    if (seq_lens[i] > 0) {
      live_out.insert(live_out.end(), out.begin() + size_t(i) * out_stride,
                      out.begin() + size_t(i + 1) * out_stride);
      ++num_live;
    } else {
      const bool untouched = std::all_of(out.begin() + size_t(i) * out_stride,
                                         out.begin() + size_t(i + 1) * out_stride,
                                         [](uint16_t b) { return b == kPoison; });
      EXPECT_TRUE(untouched) << what << ": padding row " << i << " was written";
    }
  }
  // The reference packs live rows' queries back to back: q_ref rows of padding seqs are skipped
  // by their q_len of 0 only if they come last, so compact q_ref to the live rows first.
  std::vector<float> q_live;
  const int q_stride = width + s.q_pad;
  for (int i = 0; i < num_seqs; ++i) {
    if (seq_lens[i] > 0) {
      q_live.insert(q_live.end(), q_ref.begin() + size_t(i) * q_stride,
                    q_ref.begin() + size_t(i + 1) * q_stride);
    }
  }
  ExpectClose<T>(s, live_out, CpuReference(c, q_live, q_lens), num_live, what);
}

// Decode over contexts 1..5,125 with padding rows, both model shapes, block sizes 16 and 32
// (seed + block size), a fused-qkv q stride and a padded out stride; fp8 scales sc16 / sc32 by
// block size.
template <typename T, typename C = T>
void RunDecodeOddContexts(uint32_t seed, const std::string& prefix, Scales sc16 = {},
                          Scales sc32 = {}) {
  const std::vector<int> lens = {1, 17, 0, 1024, 5125, 0, 300};
  for (Shape s : {kSmol, kLlama8b}) {
    for (int bs : {16, 32}) {
      s.block_size = bs;
      s.q_pad = 2 * s.num_kv_heads * s.head_dim;
      s.out_pad = 8;
      const Scales sc = bs == 16 ? sc16 : sc32;
      RunDecode<T, C>(s, lens, 5125, seed + bs,
                      prefix + "decode hd" + std::to_string(s.head_dim) + " bs" +
                          std::to_string(bs) + ScalesName<C>(sc),
                      false, 0, sc);
    }
  }
}

TYPED_TEST(PagedDecodeAttentionGpu, OddContextsAndPaddingRows) {
  REQUIRE_GPU();
  RunDecodeOddContexts<TypeParam>(20, "");
}

TYPED_TEST(PagedDecodeAttentionGpu, LongContextManySplits) {
  REQUIRE_GPU();
  // One sequence: the split count is at its largest; max_seq_len above the live length too.
  RunDecode<TypeParam>(kLlama8b, {20000}, 32768, 30, "decode hd128 b1 ctx=20000 max=32768");
  RunDecode<TypeParam>({8, 2, 128, 64}, {3333, 1}, 4096, 31, "decode hd128 bs64 g4 b2");
}

TYPED_TEST(PagedDecodeAttentionGpu, OneSplitSkipsTheMerge) {
  REQUIRE_GPU();
  // Forced: the split kernel normalizes and writes the output; padding rows stay untouched.
  Shape s = kLlama8b;
  s.out_pad = 8;
  RunDecode<TypeParam>(s, {1, 17, 0, 1024, 300}, 1024, 70, "decode one split forced",
                       /*through_graph=*/false, /*num_splits=*/1);
  RunDecode<TypeParam>({40, 2, 64, 16}, {77, 1500}, 2048, 71, "decode hd64 g20 one split",
                       /*through_graph=*/false, /*num_splits=*/1);
  // Automatic: a batch large enough for one wave without splitting (132 SMs x 5 warps on an
  // H100 is 660 items; 96 sequences x 8 kv heads is 768).
  std::mt19937 rng(72);
  std::vector<int> lens(96);
  for (int& n : lens) n = static_cast<int>(rng() % 700);
  RunDecode<TypeParam>(kLlama8b, lens, 8192, 73, "decode b96 automatic splits");
}

TYPED_TEST(PagedDecodeAttentionGpu, LargeGroupsSpanHeadChunks) {
  REQUIRE_GPU();
  // group 20 > 16 query rows per warp: two head chunks per kv head; group 1 (MHA).
  RunDecode<TypeParam>({40, 2, 64, 16}, {77, 1500}, 2048, 40, "decode hd64 g20");
  RunDecode<TypeParam>({6, 6, 128, 16}, {513, 5}, 1024, 41, "decode hd128 mha");
}

TYPED_TEST(PagedDecodeAttentionGpu, GraphReplayReadsSeqLensOnDevice) {
  REQUIRE_GPU();
  Shape s = kLlama8b;
  RunDecode<TypeParam>(s, {900, 0, 17, 2048}, 2048, 50, "decode graph replay",
                       /*through_graph=*/true);
}

// Every code path at sizes compute-sanitizer (memcheck, racecheck) gets through quickly:
// run with --gtest_filter='*SmallShapes*'.
TYPED_TEST(PagedAttentionGpu, SmallShapesForSanitizers) {
  REQUIRE_GPU();
  Shape s{6, 2, 64, 16, 64, 8};
  RunPrefill<TypeParam>(s, {1, 0, 37, 5}, {70, 0, 37, 130}, 60, "small prefill hd64");
  Shape t{4, 2, 128, 32, 0, 8};
  RunPrefill<TypeParam>(t, {19, 1}, {19, 200}, 61, "small prefill hd128 bs32");
  // Four 128-key tiles: every buffer of the Hopper kernel's loops turns over.
  RunPrefill<TypeParam>(t, {300}, {500}, 65, "small prefill hd128 bs32 four tiles");
  RunDecode<TypeParam>(s, {1, 0, 17, 150}, 160, 62, "small decode hd64");
  RunDecode<TypeParam>(t, {33, 0, 1}, 64, 63, "small decode hd128 bs32");
  RunDecode<TypeParam>(t, {33, 0, 1}, 64, 64, "small decode hd128 bs32 one split",
                       /*through_graph=*/false, /*num_splits=*/1);
}

TYPED_TEST(PagedAttentionGpu, RejectsBadArguments) {
  REQUIRE_GPU();
  Dev<uint16_t> buf(1 << 16);
  Dev<int32_t> ints(64);
  const TypeParam* q = As<TypeParam>(buf.ptr);
  TypeParam* out = As<TypeParam>(buf.ptr);
  PagedKvCacheT<TypeParam> kv = OneBlockCache<TypeParam>(buf.ptr, ints.ptr);
  AttentionDims bad_dim{8, 2, 96, 0.1f};
  EXPECT_EQ(PagedPrefillAttention(q, 768, kv, ints.ptr, ints.ptr, 1, 1, bad_dim, out, 768, nullptr),
            cudaErrorInvalidValue);
  AttentionDims bad_group{9, 2, 64, 0.1f};
  EXPECT_EQ(PagedDecodeAttention(q, 576, kv, ints.ptr, 1, 16, bad_group, buf.ptr, 1 << 17, out, 576,
                                 nullptr),
            cudaErrorInvalidValue);
  AttentionDims ok{8, 2, 64, 0.1f};
  EXPECT_EQ(PagedPrefillAttention(q, 510, kv, ints.ptr, ints.ptr, 1, 1, ok, out, 512, nullptr),
            cudaErrorInvalidValue);  // stride below num_heads * head_dim
  kv.block_size = 24;
  EXPECT_EQ(PagedPrefillAttention(q, 512, kv, ints.ptr, ints.ptr, 1, 1, ok, out, 512, nullptr),
            cudaErrorInvalidValue);
  kv.block_size = 16;
  EXPECT_EQ(PagedDecodeAttention(q, 512, kv, ints.ptr, 1, 64, ok, buf.ptr, 16, out, 512, nullptr),
            cudaErrorInvalidValue);  // workspace too small
  EXPECT_EQ(
      PagedDecodeAttention(q, 512, kv, ints.ptr, 1, 65, ok, buf.ptr, 1 << 17, out, 512, nullptr),
      cudaErrorInvalidValue);  // max_seq_len beyond the block table
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- FP8 (e4m3) cache ----------------------------------------------------------------------

KILN_ELEMENT_TYPED_TEST_SUITE(PagedAttentionFp8CacheGpu);

const Scales kUnit{1.0f, 1.0f};
const Scales kSmallK{0.05f, 3.0f};  // K codes up to 20, V codes of at most 1/3 (subnormals)
const Scales kLargeK{3.0f, 0.05f};
const Scales kTopBinades{0.0025f, 0.0025f};  // codes up to 400

TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillChunksOnCachedPrefix) {
  REQUIRE_GPU();
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kWgmma16Bit, false);  // the e4m3 kernel: below
  RunPrefill<T, Fp8>(kLlama8b, {769}, {769}, 2000, "fp8 prefill hd128 g4 q=ctx=769", kUnit);
  RunPrefill<T, Fp8>(kSmol, {83}, {83}, 2001,
                     "fp8 prefill hd64 g3 q=ctx=83" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({12, 4, 64, 32}, {769}, {5125}, 2002,
                     "fp8 chunked hd64 bs32 g3 q=769 ctx=5125" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({8, 8, 128, 32}, {7}, {1000}, 2003,
                     "fp8 chunked hd128 bs32 mha q=7 ctx=1000" + ScalesName<Fp8>(kLargeK), kLargeK);
  RunPrefill<T, Fp8>({64, 8, 128, 16}, {83}, {3000}, 2004,
                     "fp8 chunked hd128 g8 q=83 ctx=3000" + ScalesName<Fp8>(kTopBinades),
                     kTopBinades);
  RunPrefill<T, Fp8>({16, 2, 64, 16}, {129}, {300}, 2005,
                     "fp8 chunked hd64 g8 q=129 ctx=300" + ScalesName<Fp8>(kSmallK), kSmallK);
  // Two row tiles a warp (PagedPrefillAttentionGpu.TwoRowTilesPerWarp).
  RunPrefill<T, Fp8>({32, 8, 128, 16}, {700, 700, 350, 1}, {700, 1400, 350, 900}, 2006,
                     "fp8 two tiles hd128 g4" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({48, 16, 64, 32}, {700, 77, 700}, {700, 1500, 800}, 2007,
                     "fp8 two tiles hd64 bs32 g3" + ScalesName<Fp8>(kLargeK), kLargeK);
}

// On Hopper builds PagedPrefillAttention takes the wgmma kernel at head_dim 128; the mma.sync
// kernel that other GPUs run there is forced here (SetPrefillKernel), T and fp8 caches. Elsewhere
// both runs take the same kernel.
TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillMmaSyncKernelAtHeadDim128) {
  REQUIRE_GPU();
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kMmaSync, false);
  RunPrefill<T>(kLlama8b, {769, 83}, {769, 5125}, 2020, "mma.sync hd128 q=769,83");
  RunPrefill<T, Fp8>(kLlama8b, {769, 83}, {769, 5125}, 2021,
                     "mma.sync fp8 hd128 q=769,83" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({32, 8, 128, 16}, {700, 700, 350, 1}, {700, 1400, 350, 900}, 2022,
                     "mma.sync fp8 two tiles hd128 g4" + ScalesName<Fp8>(kLargeK), kLargeK);
}

// The fp8 cache at the wgmma kernel's tile edges, every scale kind.
TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillHeadDim128TileEdges) {
  REQUIRE_GPU();
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kWgmma16Bit, false);  // the e4m3 kernel: below
  RunPrefill<T, Fp8>(kLlama8b, {128, 129, 255, 256, 32, 33}, {128, 129, 255, 384, 160, 1057}, 2023,
                     "fp8 tile edges hd128 g4" + ScalesName<Fp8>(kTopBinades), kTopBinades);
  RunPrefill<T, Fp8>({16, 1, 128, 16}, {300}, {2000}, 2024,
                     "fp8 chunked hd128 mqa16 q=300 ctx=2000" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({8, 8, 128, 64}, {257, 1}, {257, 4000}, 2025,
                     "fp8 hd128 bs64 mha q=257,1" + ScalesName<Fp8>(kLargeK), kLargeK);
  // Block sizes whose blocks straddle the 128-key tiles (48, not a power of two) or hold two of
  // them (256): the Hopper kernel's producer copies each run of keys inside one block.
  RunPrefill<T, Fp8>({32, 8, 128, 48}, {300, 77}, {700, 77}, 2026,
                     "fp8 hd128 bs48 q=300,77" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({32, 8, 128, 256}, {200, 129}, {600, 129}, 2027,
                     "fp8 hd128 bs256 q=200,129" + ScalesName<Fp8>(kSmallK), kSmallK);
}

TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillMixedBatchWithStrides) {
  REQUIRE_GPU();
  PrefillKernelScope scope(PrefillKernel::kWgmma16Bit, false);
  RunMixedBatch<TypeParam, Fp8>(2010, "fp8 ", kSmallK, kLargeK);
}

// The wgmma kernel with e4m3 mma's (the default over an fp8 cache on Hopper) against a reference
// fed the same e4m3 Q (bounds: kE4m3RelTol): full prefills, chunks on cached prefixes, the tile
// edges, block sizes that straddle or hold two tiles, every scale kind, MQA / MHA / g8.
TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillE4m3MmaAtHeadDim128) {
  REQUIRE_GPU();
  if (!PrefillWgmmaAvailable()) GTEST_SKIP() << "no sm_90a prefill kernel on this device/build";
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kWgmmaE4m3, true);
  RunPrefill<T, Fp8>(kLlama8b, {769}, {769}, 2060, "e4m3 prefill hd128 g4 q=ctx=769", kUnit);
  RunPrefill<T, Fp8>({64, 8, 128, 16}, {83}, {3000}, 2061,
                     "e4m3 chunked g8 q=83 ctx=3000" + ScalesName<Fp8>(kTopBinades), kTopBinades);
  RunPrefill<T, Fp8>({8, 8, 128, 32}, {7}, {1000}, 2062,
                     "e4m3 chunked bs32 mha q=7 ctx=1000" + ScalesName<Fp8>(kLargeK), kLargeK);
  RunPrefill<T, Fp8>({32, 8, 128, 16}, {700, 700, 350, 1}, {700, 1400, 350, 900}, 2063,
                     "e4m3 four seqs g4" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>(kLlama8b, {128, 129, 255, 256, 32, 33}, {128, 129, 255, 384, 160, 1057}, 2064,
                     "e4m3 tile edges g4" + ScalesName<Fp8>(kTopBinades), kTopBinades);
  RunPrefill<T, Fp8>({16, 1, 128, 16}, {300}, {2000}, 2065,
                     "e4m3 chunked mqa16 q=300 ctx=2000" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({8, 8, 128, 64}, {257, 1}, {257, 4000}, 2066,
                     "e4m3 bs64 mha q=257,1" + ScalesName<Fp8>(kLargeK), kLargeK);
  RunPrefill<T, Fp8>({32, 8, 128, 48}, {300, 77}, {700, 77}, 2067,
                     "e4m3 bs48 q=300,77" + ScalesName<Fp8>(kSmallK), kSmallK);
  RunPrefill<T, Fp8>({32, 8, 128, 256}, {200, 129}, {600, 129}, 2068,
                     "e4m3 bs256 q=200,129" + ScalesName<Fp8>(kSmallK), kSmallK);
  Shape padded{32, 8, 128, 16, 1024, 8};  // q as in a fused qkv buffer, out with padding
  RunPrefill<T, Fp8>(padded, {511, 0, 64}, {2047, 0, 64}, 2069,
                     "e4m3 strides, an empty seq" + ScalesName<Fp8>(kLargeK), kLargeK);
}

// The e4m3 kernel at sizes compute-sanitizer gets through quickly.
TYPED_TEST(PagedAttentionFp8CacheGpu, E4m3PrefillSmallShapesForSanitizers) {
  REQUIRE_GPU();
  if (!PrefillWgmmaAvailable()) GTEST_SKIP() << "no sm_90a prefill kernel on this device/build";
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kWgmmaE4m3, true);
  Shape t{4, 2, 128, 32, 0, 8};
  RunPrefill<T, Fp8>(t, {19, 1}, {19, 200}, 2071, "e4m3 small prefill bs32", kLargeK);
  RunPrefill<T, Fp8>(t, {300}, {500}, 2072, "e4m3 small prefill bs32 four tiles", kSmallK);
}

TYPED_TEST(PagedAttentionFp8CacheGpu, DecodeOddContextsAndPaddingRows) {
  REQUIRE_GPU();
  RunDecodeOddContexts<TypeParam, Fp8>(2020, "fp8 ", kSmallK, kLargeK);
}

TYPED_TEST(PagedAttentionFp8CacheGpu, DecodeLongContextsSplitK) {
  REQUIRE_GPU();
  using T = TypeParam;
  // One sequence: the most splits; a max_seq_len above the live length; group 8 and group 1.
  RunDecode<T, Fp8>(kLlama8b, {20000}, 32768, 2030, "fp8 decode hd128 g4 b1 ctx=20000 max=32768",
                    false, 0, kSmallK);
  RunDecode<T, Fp8>({64, 8, 128, 32}, {3333, 1, 4097}, 8192, 2031,
                    "fp8 decode hd128 bs32 g8 ctx=3333,1,4097" + ScalesName<Fp8>(kTopBinades),
                    false, 0, kTopBinades);
  RunDecode<T, Fp8>({6, 6, 64, 16}, {5125, 5}, 8192, 2032,
                    "fp8 decode hd64 mha ctx=5125" + ScalesName<Fp8>(kLargeK), false, 0, kLargeK);
  RunDecode<T, Fp8>({40, 2, 64, 16}, {77, 1500}, 2048, 2033,
                    "fp8 decode hd64 g20 (two head chunks)" + ScalesName<Fp8>(kUnit), false, 0,
                    kUnit);
  // Splits forced to 1 (the split kernel writes the output) and chosen for a one-wave batch.
  RunDecode<T, Fp8>(kLlama8b, {1, 17, 0, 1024, 300}, 1024, 2034, "fp8 decode one split forced",
                    false, 1, kSmallK);
  std::mt19937 rng(2035);
  std::vector<int> lens(96);
  for (int& n : lens) n = static_cast<int>(rng() % 700);
  RunDecode<T, Fp8>(kLlama8b, lens, 8192, 2036, "fp8 decode b96 automatic splits", false, 0,
                    kLargeK);
  // More than half a wave of items (200 x 8 kv heads; 132 SMs x 16 warps on an H100): one split,
  // so every warp writes its sequence's output and the merge kernel is not launched. Padding rows
  // and one-position sequences among lengths up to 2,500; eager and through a graph.
  std::vector<int> mixed(200);
  for (size_t i = 0; i < mixed.size(); ++i) {
    mixed[i] = i % 10 == 0 ? 0 : i % 10 == 1 ? 1 : static_cast<int>(rng() % 2500);
  }
  RunDecode<T, Fp8>(kLlama8b, mixed, 8192, 2037, "fp8 decode b200 one split", false, 0, kSmallK);
  RunDecode<T, Fp8>(kLlama8b, mixed, 8192, 2038, "fp8 decode b200 one split graph", true, 0,
                    kSmallK);
}

TYPED_TEST(PagedAttentionFp8CacheGpu, DecodeGraphReplay) {
  REQUIRE_GPU();
  RunDecode<TypeParam, Fp8>(kLlama8b, {900, 0, 17, 2048}, 2048, 2040, "fp8 decode graph replay",
                            /*through_graph=*/true, 0, kSmallK);
}

// The fp8 paths at sizes compute-sanitizer gets through quickly (--gtest_filter='*SmallShapes*').
TYPED_TEST(PagedAttentionFp8CacheGpu, SmallShapesForSanitizers) {
  REQUIRE_GPU();
  using T = TypeParam;
  PrefillKernelScope scope(PrefillKernel::kWgmma16Bit, false);
  Shape s{6, 2, 64, 16, 64, 8};
  RunPrefill<T, Fp8>(s, {1, 0, 37, 5}, {70, 0, 37, 130}, 2050, "fp8 small prefill hd64", kSmallK);
  Shape t{4, 2, 128, 32, 0, 8};
  RunPrefill<T, Fp8>(t, {19, 1}, {19, 200}, 2051, "fp8 small prefill hd128 bs32", kLargeK);
  RunPrefill<T, Fp8>(t, {300}, {500}, 2055, "fp8 small prefill hd128 bs32 four tiles", kSmallK);
  RunDecode<T, Fp8>(s, {1, 0, 17, 150}, 160, 2052, "fp8 small decode hd64", false, 0, kSmallK);
  RunDecode<T, Fp8>(t, {33, 0, 1}, 64, 2053, "fp8 small decode hd128 bs32", false, 0, kLargeK);
  RunDecode<T, Fp8>(t, {33, 0, 1}, 64, 2054, "fp8 small decode hd128 one split", false, 1, kSmallK);
}

TYPED_TEST(PagedAttentionFp8CacheGpu, RejectsBadScales) {
  REQUIRE_GPU();
  using T = TypeParam;
  Dev<uint16_t> buf(1 << 16);
  Dev<int32_t> ints(64);
  buf.Upload(std::vector<uint16_t>(1 << 16, kPoison));
  const T* q = As<T>(buf.ptr);
  T* out = As<T>(buf.ptr);
  PagedKvCacheFp8T<T> kv = OneBlockCache<T, Fp8>(buf.ptr, ints.ptr);
  const AttentionDims ok{8, 2, 64, 0.1f};
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    kv.k_scale = bad;
    kv.v_scale = 1.0f;
    EXPECT_EQ(PagedPrefillAttention(q, 512, kv, ints.ptr, ints.ptr, 1, 1, ok, out, 512, nullptr),
              cudaErrorInvalidValue)
        << "k_scale " << bad;
    kv.k_scale = 1.0f;
    kv.v_scale = bad;
    EXPECT_EQ(
        PagedDecodeAttention(q, 512, kv, ints.ptr, 1, 64, ok, buf.ptr, 1 << 17, out, 512, nullptr),
        cudaErrorInvalidValue)
        << "v_scale " << bad;
  }
  // A bf16 / fp16 cache is not quantized: scales other than 1 are a caller's mistake.
  PagedKvCacheT<T> plain = OneBlockCache<T>(buf.ptr, ints.ptr);
  plain.v_scale = 0.5f;
  EXPECT_EQ(PagedPrefillAttention(q, 512, plain, ints.ptr, ints.ptr, 1, 1, ok, out, 512, nullptr),
            cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> after = buf.Download(1 << 16);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint16_t b) { return b == kPoison; }));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- Q handed over as e4m3 codes by RoPE (PrefillQCodes) --------------------------------------

struct CodesCase {
  bool interleaved = false;
  bool scaled = false;  // qkv holds FP8 sums with row and column scales (bf16 only)
  bool bias = false;
  int skip_seqs = 0;  // leading sequences handled elsewhere (decode rows): RoPE writes their q
                      // back in both runs, the prefill launch starts after them
};

// RopeStoreKv writing every q head back then PagedPrefillAttention rounding Q to e4m3, against
// RopeStoreKv writing the prompt rows' q as codes (q_codes from the skipped rows on) then
// PagedPrefillAttention reading them: the cache, the skipped rows' q and the output must be the
// same bits, the prompt rows' q must be left as the projection wrote it, and the codes and
// scales must be the host's e4m3(x * (448 / amax)) and amax / 448 of the first run's rotated q.
template <typename T>
void RunQCodesPrefill(const Shape& s, const std::vector<int>& q_lens,
                      const std::vector<int>& seq_lens, const CodesCase& cc, uint32_t seed,
                      const std::string& what) {
  std::mt19937 rng(seed);
  Cache<T, Fp8> c(s, seq_lens, rng, 0, kSmallK);
  const int num_tokens = std::accumulate(q_lens.begin(), q_lens.end(), 0);
  const int q_width = s.num_heads * s.head_dim;
  const int ld = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
  std::vector<int32_t> cu(q_lens.size() + 1, 0), positions;
  std::vector<int64_t> slots;
  for (size_t i = 0; i < q_lens.size(); ++i) {
    cu[i + 1] = cu[i] + q_lens[i];
    for (int j = 0; j < q_lens[i]; ++j) {
      const int pos = seq_lens[i] - q_lens[i] + j;
      positions.push_back(pos);
      const int64_t block = c.tables[i * c.max_blocks_per_seq + pos / s.block_size];
      slots.push_back(block * s.block_size + pos % s.block_size);
    }
  }
  // Scaled: sums of tens with scales that make values of a few units, as RandomQ's.
  std::uniform_real_distribution<float> value(cc.scaled ? -60.0f : -2.5f, cc.scaled ? 60.0f : 2.5f);
  std::uniform_real_distribution<float> row_scale(0.02f, 0.05f), col_scale(0.5f, 1.5f),
      bias(-0.5f, 0.5f);
  std::vector<uint16_t> qkv(size_t(num_tokens) * ld);
  for (uint16_t& x : qkv) x = cc.scaled ? F32ToBF16(value(rng)) : Format<T>::FromF32(value(rng));
  // One all-zero q head (scale 1, zero codes).
  if (num_tokens > cu[cc.skip_seqs]) {
    std::fill_n(qkv.begin() + size_t(cu[cc.skip_seqs]) * ld, s.head_dim, uint16_t{0});
  }
  std::vector<float> rows(num_tokens), cols(ld);
  std::vector<uint16_t> biases(ld);
  for (float& x : rows) x = row_scale(rng);
  for (float& x : cols) x = col_scale(rng);
  for (uint16_t& x : biases) x = F32ToBF16(bias(rng));
  std::vector<float> inv_freq(s.head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * double(i) / s.head_dim));
  }
  Dev<float> drows(rows.size()), dcols(cols.size()), dfreq(inv_freq.size());
  Dev<uint16_t> dbias(biases.size());
  Dev<int32_t> dpos(positions.size()), dtab(c.tables.size()), dcu(cu.size()),
      dlens(seq_lens.size());
  Dev<int64_t> dslots(slots.size());
  drows.Upload(rows);
  dcols.Upload(cols);
  dfreq.Upload(inv_freq);
  dbias.Upload(biases);
  dpos.Upload(positions);
  dtab.Upload(c.tables);
  dcu.Upload(cu);
  dlens.Upload(std::vector<int32_t>(seq_lens.begin(), seq_lens.end()));
  dslots.Upload(slots);
  Fp8InputScales scales;
  if (cc.scaled) {
    scales.row = drows.ptr;
    scales.col = dcols.ptr;
    if (cc.bias) scales.bias = reinterpret_cast<const __nv_bfloat16*>(dbias.ptr);
  }
  const int skip = cc.skip_seqs, q_tokens = cu[skip];
  const size_t out_elems = size_t(num_tokens) * q_width;
  struct Result {
    std::vector<uint16_t> qkv, out;
    std::vector<uint8_t> k, v, codes;
    std::vector<float> code_scales;
  };
  auto run = [&](bool codes, Result* r) {
    Dev<uint16_t> dqkv(qkv.size()), dout(out_elems);
    Dev<uint8_t> dk(c.k.size()), dv(c.v.size()), dcodes(out_elems);
    Dev<float> dscales(size_t(num_tokens) * s.num_heads);
    dqkv.Upload(qkv);
    dk.Upload(c.k);
    dv.Upload(c.v);
    dout.Upload(std::vector<uint16_t>(out_elems, kPoison));
    dcodes.Upload(std::vector<uint8_t>(out_elems, kPoisonFp8));
    dscales.Upload(std::vector<float>(size_t(num_tokens) * s.num_heads, NAN));
    RopeKvArgsFp8T<T> rope;
    rope.qkv = As<T>(dqkv.ptr);
    rope.ld = ld;
    rope.positions = dpos.ptr;
    rope.slot_mapping = dslots.ptr;
    rope.num_tokens = num_tokens;
    rope.num_heads = s.num_heads;
    rope.num_kv_heads = s.num_kv_heads;
    rope.head_dim = s.head_dim;
    rope.inv_freq = dfreq.ptr;
    rope.interleaved = cc.interleaved;
    rope.k_cache = reinterpret_cast<Fp8*>(dk.ptr);
    rope.v_cache = reinterpret_cast<Fp8*>(dv.ptr);
    rope.block_size = s.block_size;
    rope.k_scale = kSmallK.k;
    rope.v_scale = kSmallK.v;
    rope.qkv_scales = scales;
    PrefillQCodes q_codes;
    if (codes) {
      rope.q_codes = reinterpret_cast<Fp8*>(dcodes.ptr);
      rope.q_code_scales = dscales.ptr;
      rope.q_tokens = q_tokens;
      q_codes = {reinterpret_cast<const Fp8*>(dcodes.ptr), dscales.ptr};
    }
    CUDA_OK(RopeStoreKv(rope, nullptr));
    PagedKvCacheFp8T<T> kv = DeviceCache(c, dk, dv, dtab);
    kv.block_tables = dtab.ptr + skip * c.max_blocks_per_seq;
    const int max_q_len = *std::max_element(q_lens.begin() + skip, q_lens.end());
    CUDA_OK(PagedPrefillAttention(As<T>(dqkv.ptr), ld, kv, dcu.ptr + skip, dlens.ptr + skip,
                                  static_cast<int32_t>(q_lens.size()) - skip, max_q_len, DimsOf(s),
                                  As<T>(dout.ptr), q_width, nullptr, q_codes));
    CUDA_OK(cudaDeviceSynchronize());
    *r = Result{dqkv.Download(qkv.size()),  dout.Download(out_elems),
                dk.Download(c.k.size()),    dv.Download(c.v.size()),
                dcodes.Download(out_elems), dscales.Download(size_t(num_tokens) * s.num_heads)};
  };
  Result plain, coded;
  run(false, &plain);
  run(true, &coded);
  if (::testing::Test::HasFatalFailure()) return;
  int64_t cache_diff = 0, out_diff = 0, skipped_q_diff = 0, prompt_q_touched = 0;
  for (size_t i = 0; i < c.k.size(); ++i) {
    cache_diff += (coded.k[i] != plain.k[i]) + (coded.v[i] != plain.v[i]);
  }
  for (size_t i = 0; i < out_elems; ++i) out_diff += coded.out[i] != plain.out[i];
  // The host's codes of the first run's rotated prompt rows.
  int64_t code_diff = 0, scale_diff = 0;
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < q_width; ++i) {
      const size_t at = size_t(t) * ld + i;
      if (t < q_tokens) {
        skipped_q_diff += coded.qkv[at] != plain.qkv[at];
      } else {
        prompt_q_touched += coded.qkv[at] != qkv[at];
      }
    }
    if (t < q_tokens) continue;
    for (int h = 0; h < s.num_heads; ++h) {
      const uint16_t* row = plain.qkv.data() + size_t(t) * ld + size_t(h) * s.head_dim;
      float amax = 0.0f;
      for (int d = 0; d < s.head_dim; ++d)
        amax = std::max(amax, std::fabs(Format<T>::ToF32(row[d])));
      const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
      for (int d = 0; d < s.head_dim; ++d) {
        code_diff += coded.codes[size_t(t) * q_width + size_t(h) * s.head_dim + d] !=
                     E4m3Sat(Format<T>::ToF32(row[d]) * inv);
      }
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      scale_diff += coded.code_scales[size_t(t) * s.num_heads + h] != scale;
    }
  }
  EXPECT_EQ(cache_diff, 0) << what << ": K / V cache codes";
  EXPECT_EQ(out_diff, 0) << what << ": outputs that differ from the T rows' kernel";
  EXPECT_EQ(skipped_q_diff, 0) << what << ": the skipped rows' q";
  EXPECT_EQ(prompt_q_touched, 0) << what << ": the prompt rows' q must not be written back";
  EXPECT_EQ(code_diff, 0) << what << ": codes against the host's";
  EXPECT_EQ(scale_diff, 0) << what << ": scales against the host's";
  int64_t written = 0;
  for (size_t i = size_t(q_tokens) * q_width; i < out_elems; ++i)
    written += plain.out[i] != kPoison;
  EXPECT_EQ(written, int64_t(num_tokens - q_tokens) * q_width) << what << ": rows not written";
  std::printf("  %-4s %-48s bitwise equal: %s\n", DTypeName(Format<T>::kDType).data(), what.c_str(),
              out_diff == 0 && code_diff == 0 ? "yes" : "NO");
}

// Llama-3.1-8B heads (g4) with decode-like rows ahead, chunks and full prompts; g8, g3, MQA-16
// and MHA; neox and gpt-j pairs; FP8 sums with and without a bias.
TYPED_TEST(PagedAttentionFp8CacheGpu, PrefillReadsRopesQCodes) {
  REQUIRE_GPU();
  if (!PrefillWgmmaAvailable()) GTEST_SKIP() << "no sm_90a prefill kernel on this device/build";
  using T = TypeParam;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  PrefillKernelScope scope(PrefillKernel::kAuto, true);
  ASSERT_TRUE(PrefillTakesQCodes(DimsOf(kLlama8b)));
  const std::vector<int> q_lens = {1, 1, 769, 7, 83, 130};
  const std::vector<int> seq_lens = {1000, 40, 769, 2000, 5125, 130};
  RunQCodesPrefill<T>(kLlama8b, q_lens, seq_lens, {.skip_seqs = 2}, 2080,
                      "g4 neox, two decode rows ahead");
  RunQCodesPrefill<T>(kLlama8b, q_lens, seq_lens,
                      {.interleaved = true, .scaled = kBf16, .bias = kBf16}, 2081,
                      "g4 gpt-j, fp8 sums + bias");
  RunQCodesPrefill<T>({64, 8, 128, 16}, {300, 1, 129}, {300, 900, 2000}, {.scaled = kBf16}, 2082,
                      "g8 neox, fp8 sums");
  RunQCodesPrefill<T>({24, 8, 128, 32}, {257, 7, 33}, {600, 7, 33}, {.interleaved = true}, 2083,
                      "g3 bs32 gpt-j, a 7-token prompt");
  RunQCodesPrefill<T>({16, 1, 128, 16}, {300, 5}, {2000, 5},
                      {.scaled = kBf16, .bias = kBf16, .skip_seqs = 1}, 2084,
                      "mqa16 neox, fp8 sums + bias, a 5-token prompt after");
  RunQCodesPrefill<T>({8, 8, 128, 16}, {129}, {129}, {}, 2085, "mha neox");
}

// Where Q codes cannot be made or read: the wrong kernel, head_dim or cache; missing scales.
TYPED_TEST(PagedAttentionFp8CacheGpu, QCodesRejectWhatTheyCannotDo) {
  REQUIRE_GPU();
  using T = TypeParam;
  Dev<uint16_t> buf(1 << 16);
  Dev<int32_t> ints(64);
  Dev<float> floats(256);
  buf.Upload(std::vector<uint16_t>(1 << 16, kPoison));
  const T* q = As<T>(buf.ptr);
  T* out = As<T>(buf.ptr);
  PagedKvCacheFp8T<T> kv = OneBlockCache<T, Fp8>(buf.ptr, ints.ptr);
  const PrefillQCodes codes{reinterpret_cast<const Fp8*>(floats.ptr), floats.ptr};
  auto launch = [&](const AttentionDims& d, const PrefillQCodes& c) {
    return PagedPrefillAttention(q, 1024, kv, ints.ptr, ints.ptr, 1, 1, d, out, 1024, nullptr, c);
  };
  EXPECT_FALSE(PrefillTakesQCodes({8, 2, 64, 0.1f}));
  EXPECT_EQ(launch({8, 2, 64, 0.1f}, codes), cudaErrorInvalidValue);  // head_dim 64
  {
    PrefillKernelScope scope(PrefillKernel::kWgmma16Bit, false);
    EXPECT_FALSE(PrefillTakesQCodes({8, 2, 128, 0.1f}));
    EXPECT_EQ(launch({8, 2, 128, 0.1f}, codes), cudaErrorInvalidValue);
  }
  if (PrefillWgmmaAvailable()) {
    EXPECT_TRUE(PrefillTakesQCodes({8, 2, 128, 0.1f}));
    EXPECT_EQ(launch({8, 2, 128, 0.1f}, {codes.codes, nullptr}), cudaErrorInvalidValue);
  }
  // RoPE: codes need an fp8 cache, head_dim 128, scales and q_tokens >= 0.
  RopeKvArgsFp8T<T> rope;
  rope.qkv = As<T>(buf.ptr);
  rope.ld = 3 * 128;
  rope.positions = ints.ptr;
  rope.num_tokens = 1;
  rope.num_heads = rope.num_kv_heads = 1;
  rope.head_dim = 64;
  rope.inv_freq = floats.ptr;
  rope.k_cache = rope.v_cache = reinterpret_cast<Fp8*>(buf.ptr);
  rope.q_codes = reinterpret_cast<Fp8*>(floats.ptr);
  rope.q_code_scales = floats.ptr;
  EXPECT_EQ(RopeStoreKv(rope, nullptr), cudaErrorInvalidValue);  // head_dim 64
  rope.head_dim = 128;
  rope.q_code_scales = nullptr;
  EXPECT_EQ(RopeStoreKv(rope, nullptr), cudaErrorInvalidValue);
  rope.q_code_scales = floats.ptr;
  rope.q_tokens = -1;
  EXPECT_EQ(RopeStoreKv(rope, nullptr), cudaErrorInvalidValue);
  RopeKvArgsT<T> plain;
  plain.qkv = As<T>(buf.ptr);
  plain.ld = 3 * 128;
  plain.positions = ints.ptr;
  plain.num_tokens = 1;
  plain.num_heads = plain.num_kv_heads = 1;
  plain.head_dim = 128;
  plain.inv_freq = floats.ptr;
  plain.k_cache = plain.v_cache = As<T>(buf.ptr);
  plain.q_codes = reinterpret_cast<Fp8*>(floats.ptr);
  plain.q_code_scales = floats.ptr;
  EXPECT_EQ(RopeStoreKv(plain, nullptr), cudaErrorInvalidValue);  // a T cache
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> after = buf.Download(1 << 16);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint16_t b) { return b == kPoison; }));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace kiln::kernels
