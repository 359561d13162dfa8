// FusedDecode (decode_fused.h) on Hopper.
//
// Block: 288 threads, one per SM. Warp 8, lane 0 (the producer) walks the SM's row slices of
// every weight in the order the layers use them (qkv, o, gate, up, down; layer by layer) and
// bulk-copies them, kStageBytes at most a copy and whole rows only, into a ring of kStages
// stages, each completing on its `full` mbarrier; it waits only for a stage's `empty` barrier.
// Warps 0-7 (the consumers) follow the same walk: for each stage, the warps whose rows it holds
// (row i of a slice goes to warp i % 8) take the dot product of the row with the activations in
// shared memory (w8_internal::Dot16, lane l over 16-element pieces l, l + 32, ...: the
// GemvFp8 kernel's order, so the same bits), reduce it over the warp and store the row's
// output; then every warp arrives on `empty`. Between the phases the consumers meet at a grid
// barrier (GridSync: an arrival counter and a generation word, reset by the last arrival).
//
// Slices: matrix of n rows, CTA b of G takes rows [n b / G, n (b + 1) / G); gate and up the same
// columns, so SiluMul needs no exchange between CTAs.
//
// Attention: CTA b < num_kv_heads * splits takes kv head b / splits and context split
// b % splits (splits: up to kMaxSplits, at least kMinSplitTokens positions each, at most
// G / num_kv_heads); its warps take positions t0 + warp, t0 + warp + 8, ..., each keeping an
// online softmax (fp32, base 2) for every query head of the group, merged over the warps in
// shared memory. One split: the CTA writes attn itself; more: it writes its partial (max, sum,
// unnormalized output per head) and the last CTA of the kv head to arrive (a counter per kv
// head, reset by it) merges them. The CTA with the context's last position first rotates the
// token's k and writes k and v into the cache as RopeStoreKv does.
#include "kernels/decode_fused.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "kernels/attention_mma.cuh"
#include "kernels/attention_wgmma.cuh"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch.h"
#include "kernels/w8_dot.cuh"

#if defined(KILN_SM90A) && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_FUSED_DECODE_SM90 1
#endif

namespace kiln::kernels {
namespace {

using bf16 = __nv_bfloat16;
using e4m3 = __nv_fp8_e4m3;
using attention_internal::ArriveExpectTx;
using attention_internal::FenceMbarrierInit;
using attention_internal::MbarrierArrive;
using attention_internal::MbarrierInit;
using attention_internal::MbarrierWait;
using attention_internal::NamedBarrierSync;
using attention_internal::SmemAddr;
using dtype_internal::FromFloat;
using dtype_internal::kIsFp8;
using dtype_internal::PairToFloat2;
using dtype_internal::RotatePair;
using dtype_internal::RoundTo;
using dtype_internal::SiluTimesExact;
using dtype_internal::ToE4m3Sat;
using dtype_internal::ToFloat;
using w8_internal::Dot16;

constexpr int kWarps = 8;  // consumer warps
constexpr int kConsumers = 32 * kWarps;
constexpr int kThreads = kConsumers + 32;
constexpr int kStageBytes = 16384;
constexpr int kStages = 11;
constexpr int kMaxWidth = 16384;  // elements of the widest activation (hidden, q, intermediate)
constexpr int kMaxGateRows = 512;
constexpr int kMaxGroup = 8;  // query heads a kv head
constexpr int kMaxSplits = 32;
[[maybe_unused]] constexpr int kMinSplitTokens = 16;
constexpr int kNormMaxVecs = kMaxWidth / 8 / kConsumers;
// Shared memory: the ring; the activations (bf16 [kMaxWidth], attention's fp32 merge scratch
// [kWarps][group][head_dim] in between); the gate outputs; softmax statistics; a flag; barriers.
constexpr int kXOffset = kStages * kStageBytes;
constexpr int kGateOffset = kXOffset + 2 * kMaxWidth;
constexpr int kStatsOffset = kGateOffset + 4 * kMaxGateRows;
constexpr int kStatsFloats = 2 * kMaxGroup * (kMaxSplits > kWarps ? kMaxSplits : kWarps);
constexpr int kReduceOffset = kStatsOffset + 4 * kStatsFloats;  // float [32], then the flag
constexpr int kBarOffset = kReduceOffset + 4 * 64;
constexpr int kSmemBytes = kBarOffset + 16 * kStages;  // full[kStages], empty[kStages]
static_assert(kWarps * kMaxGroup * 128 * 4 <= 2 * kMaxWidth, "merge scratch fits the activations");
// Sync words: [0] the grid barriers' arrivals (GridSync), [1] unused, [2 + g] kv head g's
// splits done.
constexpr int kSyncHeader = 2;
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  FusedDecodeArgs a;
  int32_t q_size, kv_size, qkv_rows;
};

// The CTA's rows of one weight: rows [row0, row0 + rows) of the matrix (k bytes a row), scales
// and bias indexed by the matrix row.
struct Slice {
  const uint8_t* w;  // row row0
  int64_t row0, rows;
  int32_t k;
  const float* scale;
  const bf16* bias;
};

// The walk's five slices of a layer: 0 qkv, 1 o, 2 gate, 3 up, 4 down.
constexpr int kSlices = 5;

__device__ __forceinline__ Slice SliceOf(const Params& p, const FusedDecodeLayer& l, int which) {
  const int64_t b = blockIdx.x, g = gridDim.x;
  const auto& a = p.a;
  int64_t n, first = 0;
  Slice s;
  switch (which) {
    case 0:
      n = p.qkv_rows, s.k = a.hidden, s.w = reinterpret_cast<const uint8_t*>(l.qkv);
      s.scale = l.qkv_scale, s.bias = l.qkv_bias;
      break;
    case 1:
      n = a.hidden, s.k = p.q_size, s.w = reinterpret_cast<const uint8_t*>(l.o);
      s.scale = l.o_scale, s.bias = l.o_bias;
      break;
    case 2:
    case 3:
      n = a.intermediate, s.k = a.hidden, s.w = reinterpret_cast<const uint8_t*>(l.gate_up);
      s.scale = l.gate_up_scale, s.bias = l.gate_up_bias;
      first = which == 3 ? a.intermediate : 0;
      break;
    default:
      n = a.hidden, s.k = a.intermediate, s.w = reinterpret_cast<const uint8_t*>(l.down);
      s.scale = l.down_scale, s.bias = l.down_bias;
      break;
  }
  const int64_t r0 = n * b / g, r1 = n * (b + 1) / g;
  s.row0 = first + r0;
  s.rows = r1 - r0;
  s.w += s.row0 * s.k;
  return s;
}

// Whole rows a stage holds.
__device__ __forceinline__ int RowsPerStage(int k) { return max(1, kStageBytes / k); }

struct Pipe {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void Next() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

__device__ __forceinline__ uint32_t FullBar(uint32_t bars, int stage) { return bars + 8 * stage; }
__device__ __forceinline__ uint32_t EmptyBar(uint32_t bars, int stage) {
  return bars + 8 * (kStages + stage);
}

// The consumers' barrier (the producer warp never joins it).
__device__ __forceinline__ void ConsumerSync() { NamedBarrierSync(1, kConsumers); }

[[maybe_unused]] __device__ __forceinline__ void BulkCopy(uint32_t dst, const void* src,
                                                          uint32_t bytes, uint32_t bar,
                                                          uint64_t policy) {
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
#endif
}

[[maybe_unused]] __device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v = 0;
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
#endif
  return v;
}

[[maybe_unused]] __device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t = 0;
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
#endif
  return t;
}

// Benchmarks: CTA 0's thread `who` records the time at trace point `point` of `layer`.
__device__ __forceinline__ void Trace(const FusedDecodeArgs& a, int layer, int point, int who) {
  if (a.trace != nullptr && blockIdx.x == 0 && threadIdx.x == who) {
    a.trace[layer * kFusedDecodeTracePoints + point] = GlobalTimer();
  }
}

[[maybe_unused]] __device__ __forceinline__ void AddRelease(uint32_t* p, uint32_t v) {
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
#endif
}

// All consumers of all CTAs; writes before it are visible after it. sync[0] counts the CTAs'
// arrivals over the launch (FusedDecode zeroes it before each): the n-th barrier (n from 1,
// `*count` in thread 0) is passed once it reaches n * gridDim.x. One release-add an arrival and
// acquire-loads to poll: no read-modify-write round trip, no reset inside the launch.
[[maybe_unused]] __device__ __forceinline__ void GridSync(uint32_t* sync, uint32_t debug,
                                                          uint32_t* count) {
  if (debug & kFusedDecodeSkipGridSync) {
    ConsumerSync();
    return;
  }
  __threadfence();
  ConsumerSync();
  if (threadIdx.x == 0) {
    const uint32_t target = ++*count * gridDim.x;
    AddRelease(sync, 1u);
    while (LoadAcquire(sync) < target) {
    }
  }
  ConsumerSync();
}

// The producer: every stage of the walk.
[[maybe_unused]] __device__ void Produce(const Params& p, uint8_t* smem) {
  const uint32_t ring = SmemAddr(smem);
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  uint64_t policy = 0;
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  Pipe pipe;
  for (int layer = 0; layer < p.a.num_layers; ++layer) {
    const FusedDecodeLayer& l = p.a.layers[layer];
    for (int which = 0; which < kSlices; ++which) {
      const Slice s = SliceOf(p, l, which);
      const int per = RowsPerStage(s.k);
      for (int64_t r = 0; r < s.rows; r += per) {
        const uint32_t bytes =
            static_cast<uint32_t>(min(static_cast<int64_t>(per), s.rows - r) * s.k);
        MbarrierWait(EmptyBar(bars, pipe.stage), pipe.phase ^ 1);
        ArriveExpectTx(FullBar(bars, pipe.stage), bytes);
        BulkCopy(ring + pipe.stage * kStageBytes, s.w + r * s.k, bytes, FullBar(bars, pipe.stage),
                 policy);
        pipe.Next();
      }
    }
    Trace(p.a, layer, kFusedDecodeTracePoints - 1, kConsumers);
  }
}

// The row's dot product with the activations, as GemvW8Kernel sums it (lane l: pieces l,
// l + 32, ... in order, then the warp's butterfly), four pieces' loads issued together.
[[maybe_unused]] __device__ __forceinline__ float RowDot(const uint4* w, const uint4* x, int vecs) {
  const int lane = threadIdx.x % 32;
  float acc = 0.0f;
  int c = lane;
  for (; c + 96 < vecs; c += 128) {
    uint4 wv[4], xv[8];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      wv[u] = w[c + 32 * u];
      xv[2 * u] = x[2 * (c + 32 * u)];
      xv[2 * u + 1] = x[2 * (c + 32 * u) + 1];
    }
    float d[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) d[u] = Dot16<bf16, e4m3>(wv[u], xv[2 * u], xv[2 * u + 1]);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += d[u];
  }
  for (; c < vecs; c += 32) acc += Dot16<bf16, e4m3>(w[c], x[2 * c], x[2 * c + 1]);
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  return acc;
}

// The consumers' side of one slice: done(i, value, pre(i)) for each row i of the slice this
// warp owns (every lane gets the value: sum * scale + bias, as GemvFp8's epilogue; pre(i), a
// load the row's output needs, is issued before the dot product so that its latency hides).
template <typename Pre, typename Done>
__device__ __forceinline__ void Consume(Pipe& pipe, const Slice& s, const uint8_t* smem,
                                        uint32_t debug, Pre&& pre, Done&& done) {
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = RowsPerStage(s.k);
  const int vecs = s.k / 16;
  const auto* x = reinterpret_cast<const uint4*>(smem + kXOffset);
  for (int64_t r = 0; r < s.rows; r += per) {
    MbarrierWait(FullBar(bars, pipe.stage), pipe.phase);
    const uint8_t* stage = smem + pipe.stage * kStageBytes;
    int n = static_cast<int>(min(static_cast<int64_t>(per), s.rows - r));
    for (int j = (warp - static_cast<int>(r % kWarps) + kWarps) % kWarps;
         (debug & kFusedDecodeSkipDot) != 0 && j < n; j += kWarps) {
      done(r + j, 0.0f, pre(r + j));
    }
    if (debug & kFusedDecodeSkipDot) n = 0;
    for (int j = (warp - static_cast<int>(r % kWarps) + kWarps) % kWarps; j < n; j += kWarps) {
      const int64_t row = s.row0 + r + j;
      const float scale = s.scale[row];
      const float bias = s.bias != nullptr ? ToFloat(s.bias[row]) : 0.0f;
      const float before = pre(r + j);
      const float acc = RowDot(reinterpret_cast<const uint4*>(stage + j * s.k), x, vecs);
      done(r + j, acc * scale + bias, before);
    }
    __syncwarp();
    if (lane == 0) MbarrierArrive(EmptyBar(bars, pipe.stage));
    pipe.Next();
  }
}

// n bf16 values from global memory (another CTA's writes: through L2) into the activations.
[[maybe_unused]] __device__ __forceinline__ void LoadActivations(const bf16* src, int n,
                                                                 uint8_t* smem) {
  auto* x = reinterpret_cast<uint4*>(smem + kXOffset);
  const auto* s = reinterpret_cast<const uint4*>(src);
  for (int i = threadIdx.x; i < n / 8; i += kConsumers) x[i] = __ldcg(s + i);
}

// The sum of v over the first `threads` consumers, as RmsNormVecKernel's BlockSum adds it for a
// block of that many threads (the other consumers pass 0).
__device__ __forceinline__ float NormSum(float v, uint8_t* smem) {
  auto* partial = reinterpret_cast<float*>(smem + kReduceOffset);
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  ConsumerSync();
  float s = lane < kWarps ? partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  ConsumerSync();  // partial[] is free again
  return s;
}

// x = rms_norm(h) * weight into the activations, with RmsNormVecKernel's roundings and summation
// order (its launch's thread count for this dim). Layer 0: h is 0 + the embeddings (delta).
[[maybe_unused]] __device__ void NormToSmem(const Params& p, bool first, const bf16* weight,
                                            uint8_t* smem) {
  const int dim = p.a.hidden, nvec = dim / 8;
  const int threads = nvec <= 128 ? 128 : kConsumers;
  const int t = threadIdx.x;
  float v[kNormMaxVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormMaxVecs; ++j) {
    const int i = t + j * threads;
    if (t >= threads || i >= nvec) continue;
    if (first) {
      const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(p.a.delta) + i);
      const auto* pr = reinterpret_cast<const dtype_internal::Pair<bf16>*>(&raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = PairToFloat2<bf16>(pr[e]);
        v[j][2 * e] = 0.0f + f.x;
        v[j][2 * e + 1] = 0.0f + f.y;
      }
    } else {
      const auto* h = reinterpret_cast<const float4*>(p.a.residual) + 2 * i;
      const float4 lo = __ldcg(h), hi = __ldcg(h + 1);
      v[j][0] = lo.x, v[j][1] = lo.y, v[j][2] = lo.z, v[j][3] = lo.w;
      v[j][4] = hi.x, v[j][5] = hi.y, v[j][6] = hi.z, v[j][7] = hi.w;
    }
  }
#pragma unroll
  for (int j = 0; j < kNormMaxVecs; ++j) {
    const int i = t + j * threads;
    if (t >= threads || i >= nvec) continue;
#pragma unroll
    for (int e = 0; e < 8; ++e) sum_sq += v[j][e] * v[j][e];
  }
  const float inv = rsqrtf(NormSum(sum_sq, smem) / static_cast<float>(dim) + p.a.rms_eps);
  auto* x = reinterpret_cast<bf16*>(smem + kXOffset);
#pragma unroll
  for (int j = 0; j < kNormMaxVecs; ++j) {
    const int i = t + j * threads;
    if (t >= threads || i >= nvec) continue;
    const uint4 wraw = *(reinterpret_cast<const uint4*>(weight) + i);
    const auto* wp = reinterpret_cast<const dtype_internal::Pair<bf16>*>(&wraw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 w = PairToFloat2<bf16>(wp[e]);
      x[8 * i + 2 * e] = FromFloat<bf16>(RoundTo<bf16>(v[j][2 * e] * inv) * w.x);
      x[8 * i + 2 * e + 1] = FromFloat<bf16>(RoundTo<bf16>(v[j][2 * e + 1] * inv) * w.y);
    }
  }
}

template <typename C>
__device__ __forceinline__ float CacheValue(const C* p) {
  if constexpr (kIsFp8<C>) {
    return static_cast<float>(*p);
  } else {
    return ToFloat(*p);
  }
}

// cos and sin of the token's angles at this lane's kE dimensions lane * kE + e (the same for
// every head), as RopeStoreKvKernel computes them: frequency i of pair (i, i + half), or of
// (2i, 2i + 1) interleaved.
template <int kHd>
struct Angles {
  float c[kHd / 32], s[kHd / 32];
};
template <int kHd>
__device__ __forceinline__ Angles<kHd> AnglesOf(const Params& p, float pos) {
  constexpr int kE = kHd / 32;
  const int lane = threadIdx.x % 32;
  Angles<kHd> r;
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const int d = lane * kE + e;
    const int i = p.a.interleaved_rope ? d / 2 : d % (kHd / 2);
    sincosf(pos * p.a.inv_freq[i], &r.s[e], &r.c[e]);
  }
  return r;
}

// Head `head` of the qkv row (bf16) at this lane's dimensions, rotated as RopeStoreKvKernel
// rotates it, unrounded.
template <int kHd>
__device__ __forceinline__ void Rotated(const Params& p, const Angles<kHd>& r, const bf16* head,
                                        float (&out)[kHd / 32]) {
  constexpr int kE = kHd / 32;
  const int lane = threadIdx.x % 32;
  float mine[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e) mine[e] = ToFloat(__ldcg(head + lane * kE + e));
  if (p.a.interleaved_rope) {
#pragma unroll
    for (int e = 0; e < kE; e += 2) {
      float x0 = mine[e], x1 = mine[e + 1];
      RotatePair(r.c[e], r.s[e], x0, x1);
      out[e] = x0;
      out[e + 1] = x1;
    }
  } else {
    // Dimension d < half pairs with d + half, which lane ^ 16 holds.
    const bool low = lane < 16;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, mine[e], 16);
      float x0 = low ? mine[e] : other, x1 = low ? other : mine[e];
      RotatePair(r.c[e], r.s[e], x0, x1);
      out[e] = low ? x0 : x1;
    }
  }
}

// The weight of a partial whose running max is m in a merge whose max is big (0 for a partial
// that saw no position).
[[maybe_unused]] __device__ __forceinline__ float MergeWeight(float m, float big) {
  return m == -INFINITY ? 0.0f : exp2f(m - big);
}

template <typename C, int kHd>
__device__ void Attention(const Params& p, const FusedDecodeLayer& l, uint8_t* smem) {
  constexpr int kE = kHd / 32;
  const auto& a = p.a;
  const int context = *a.seq_len;
  if (context <= 0) return;
  const int nkv = a.num_kv_heads, group = a.num_heads / nkv;
  const int splits = max(1, min(min(kMaxSplits, static_cast<int>(gridDim.x) / nkv),
                                (context + kMinSplitTokens - 1) / kMinSplitTokens));
  if (static_cast<int>(blockIdx.x) >= nkv * splits) return;
  const int g = blockIdx.x / splits, split = blockIdx.x % splits;
  const int per = (context + splits - 1) / splits;
  const int t0 = min(context, split * per), t1 = min(context, t0 + per);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Angles<kHd> angles = AnglesOf<kHd>(p, static_cast<float>(*a.position));
  auto* k_cache = static_cast<C*>(l.k_cache);
  auto* v_cache = static_cast<C*>(l.v_cache);
  const int bs = a.block_size;
  // The token's k and v into the cache (the CTA whose split holds its position).
  if (t1 == context && t0 < t1) {
    const int64_t slot = *a.slot;
    if (warp == 0 && slot >= 0) {
      float k[kE];
      Rotated<kHd>(p, angles, a.qkv_out + p.q_size + g * kHd, k);
      const bf16* v = a.qkv_out + p.q_size + p.kv_size + g * kHd;
      const int64_t at = ((slot / bs * nkv + g) * bs + slot % bs) * kHd + lane * kE;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float ve = ToFloat(__ldcg(v + lane * kE + e));
        if constexpr (kIsFp8<C>) {
          // RopeStoreKvKernel's code: one rounding of the exact quotient of the T value.
          k_cache[at + e] = ToE4m3Sat(__fdiv_rn(RoundTo<bf16>(k[e]), l.k_scale));
          v_cache[at + e] = ToE4m3Sat(__fdiv_rn(ve, l.v_scale));
        } else {
          k_cache[at + e] = FromFloat<bf16>(k[e]);
          v_cache[at + e] = FromFloat<bf16>(ve);
        }
      }
    }
    __threadfence_block();
    ConsumerSync();
  }
  // The group's query heads, rotated and rounded as RoPE writes them back.
  float q[kMaxGroup][kE];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h < group) {
      Rotated<kHd>(p, angles, a.qkv_out + (g * group + h) * kHd, q[h]);
#pragma unroll
      for (int e = 0; e < kE; ++e) q[h][e] = RoundTo<bf16>(q[h][e]);
    }
  }
  const float score_scale = a.attn_scale * l.k_scale * kLog2e;
  float m[kMaxGroup], sum[kMaxGroup], acc[kMaxGroup][kE];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    m[h] = -INFINITY;
    sum[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[h][e] = 0.0f;
  }
  // kBatch positions a warp at a time: their block numbers, then their K and V rows, loaded
  // before any is used (a position at a time waited a memory latency each).
  constexpr int kBatch = 2;
  for (int t = t0 + warp; t < t1; t += kBatch * kWarps) {
    int64_t at[kBatch];  // (block * nkv) * bs + offset: kv head 0's row of the position
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int tu = min(t + u * kWarps, t1 - 1);
      at[u] = static_cast<int64_t>(a.block_table[tu / bs]) * nkv * bs + tu % bs;
    }
    float kf[kBatch][kE], vf[kBatch][kE];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t base = (at[u] + int64_t{g} * bs) * kHd + lane * kE;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        kf[u][e] = CacheValue(k_cache + base + e);
        vf[u][e] = CacheValue(v_cache + base + e);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (t + u * kWarps >= t1) break;
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= group) break;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < kE; ++e) s = fmaf(q[h][e], kf[u][e], s);
        for (int offset = 16; offset > 0; offset >>= 1) {
          s += __shfl_xor_sync(0xffffffffu, s, offset);
        }
        s *= score_scale;
        const float mn = fmaxf(m[h], s);
        const float corr = MergeWeight(m[h], mn), pr = exp2f(s - mn);
        sum[h] = sum[h] * corr + pr;
#pragma unroll
        for (int e = 0; e < kE; ++e) acc[h][e] = acc[h][e] * corr + pr * vf[u][e];
        m[h] = mn;
      }
    }
  }
  // Merge the warps: statistics [warp][head][2], outputs [warp][head][kHd] (fp32).
  auto* stats = reinterpret_cast<float*>(smem + kStatsOffset);
  auto* outs = reinterpret_cast<float*>(smem + kXOffset);
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= group) break;
    if (lane == 0) {
      stats[(warp * kMaxGroup + h) * 2] = m[h];
      stats[(warp * kMaxGroup + h) * 2 + 1] = sum[h];
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) outs[(warp * group + h) * kHd + lane * kE + e] = acc[h][e];
  }
  ConsumerSync();
  float* part = a.partials + static_cast<int64_t>(g * kMaxSplits + split) * group * (kHd + 2);
  for (int idx = threadIdx.x; idx < group * kHd; idx += kConsumers) {
    const int h = idx / kHd, d = idx % kHd;
    float big = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, stats[(w * kMaxGroup + h) * 2]);
    float total = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float wt = MergeWeight(stats[(w * kMaxGroup + h) * 2], big);
      total += stats[(w * kMaxGroup + h) * 2 + 1] * wt;
      o += outs[(w * group + h) * kHd + d] * wt;
    }
    if (splits == 1) {
      a.attn_out[(g * group + h) * kHd + d] = FromFloat<bf16>(o / total * l.v_scale);
    } else {
      float* ph = part + h * (kHd + 2);
      __stcg(ph + d, o);
      if (d == 0) {
        __stcg(ph + kHd, big);
        __stcg(ph + kHd + 1, total);
      }
    }
  }
  if (splits == 1) return;
  // The last CTA of kv head g to get here merges the splits.
  __threadfence();
  ConsumerSync();
  auto* flag = reinterpret_cast<int*>(smem + kReduceOffset + 4 * 32);
  uint32_t* done = a.sync + kSyncHeader + g;
  if (threadIdx.x == 0) *flag = atomicAdd(done, 1u) == static_cast<uint32_t>(splits - 1);
  ConsumerSync();
  if (*flag == 0) return;
  __threadfence();
  const float* first = a.partials + static_cast<int64_t>(g * kMaxSplits) * group * (kHd + 2);
  for (int idx = threadIdx.x; idx < splits * group; idx += kConsumers) {
    const float* ph = first + static_cast<int64_t>(idx) * (kHd + 2);  // split idx / group
    stats[2 * idx] = __ldcg(ph + kHd);
    stats[2 * idx + 1] = __ldcg(ph + kHd + 1);
  }
  ConsumerSync();
  for (int idx = threadIdx.x; idx < group * kHd; idx += kConsumers) {
    const int h = idx / kHd, d = idx % kHd;
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, stats[2 * (s * group + h)]);
    float total = 0.0f, o = 0.0f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const float wt = MergeWeight(stats[2 * (s * group + h)], big);
      total += stats[2 * (s * group + h) + 1] * wt;
      o += __ldcg(first + static_cast<int64_t>(s * group + h) * (kHd + 2) + d) * wt;
    }
    a.attn_out[(g * group + h) * kHd + d] = FromFloat<bf16>(o / total * l.v_scale);
  }
  if (threadIdx.x == 0) atomicExch(done, 0u);
}

template <typename C, int kHd>
__global__ void __launch_bounds__(kThreads, 1) FusedDecodeKernel(const Params p) {
#ifdef KILN_FUSED_DECODE_SM90
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(FullBar(bars, s), 1);
      MbarrierInit(EmptyBar(bars, s), kWarps);
    }
    FenceMbarrierInit();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    // Weights are no kernel's output: the producer never waits for the previous kernel.
    if (threadIdx.x == kConsumers) Produce(p, smem);
    return;
  }
  PdlWait();
  const auto& a = p.a;
  auto* gate = reinterpret_cast<float*>(smem + kGateOffset);
  Pipe pipe;
  const int lane = threadIdx.x % 32;
  const auto none = [](int64_t) { return 0.0f; };
  uint32_t barriers = 0;  // grid barriers passed (thread 0)
  for (int layer = 0; layer < a.num_layers; ++layer) {
    const FusedDecodeLayer& l = a.layers[layer];
    const bool first = layer == 0, last = layer + 1 == a.num_layers;
    Trace(a, layer, 0, 0);
    NormToSmem(p, first, l.input_norm, smem);
    ConsumerSync();
    Trace(a, layer, 1, 0);
    const Slice qkv = SliceOf(p, l, 0);
    Consume(pipe, qkv, smem, a.debug, none, [&](int64_t i, float v, float) {
      if (lane == 0) a.qkv_out[qkv.row0 + i] = FromFloat<bf16>(v);
    });
    Trace(a, layer, 2, 0);
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 3, 0);
    if ((a.debug & kFusedDecodeSkipAttention) == 0) Attention<C, kHd>(p, l, smem);
    Trace(a, layer, 4, 0);
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 5, 0);
    LoadActivations(a.attn_out, p.q_size, smem);
    ConsumerSync();
    const Slice o = SliceOf(p, l, 1);
    Consume(
        pipe, o, smem, a.debug,
        [&](int64_t i) {
          const int64_t row = o.row0 + i;
          return first ? 0.0f + ToFloat(__ldcg(a.delta + row)) : __ldcg(a.residual + row);
        },
        [&](int64_t i, float v, float h) {
          if (lane == 0) a.residual[o.row0 + i] = h + RoundTo<bf16>(v);
        });
    Trace(a, layer, 6, 0);
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 7, 0);
    NormToSmem(p, false, l.post_norm, smem);
    ConsumerSync();
    Consume(pipe, SliceOf(p, l, 2), smem, a.debug, none, [&](int64_t i, float v, float) {
      if (lane == 0) gate[i] = RoundTo<bf16>(v);
    });
    ConsumerSync();
    const Slice up = SliceOf(p, l, 3);
    const int64_t col0 = up.row0 - a.intermediate;
    Consume(pipe, up, smem, a.debug, none, [&](int64_t i, float v, float) {
      if (lane == 0) {
        a.act_out[col0 + i] = FromFloat<bf16>(SiluTimesExact<bf16>(gate[i], RoundTo<bf16>(v)));
      }
    });
    Trace(a, layer, 8, 0);
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 9, 0);
    LoadActivations(a.act_out, a.intermediate, smem);
    ConsumerSync();
    if (last) PdlLaunchDependents();
    const Slice down = SliceOf(p, l, 4);
    Consume(
        pipe, down, smem, a.debug,
        [&](int64_t i) { return last ? 0.0f : __ldcg(a.residual + down.row0 + i); },
        [&](int64_t i, float v, float h) {
          if (lane != 0) return;
          if (last) {
            a.delta[down.row0 + i] = FromFloat<bf16>(v);
          } else {
            a.residual[down.row0 + i] = h + RoundTo<bf16>(v);
          }
        });
    Trace(a, layer, 10, 0);
    if (!last) GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 11, 0);
  }
#endif
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename C, int kHd>
auto KernelOf() {
  return FusedDecodeKernel<C, kHd>;
}

// Whether the current device runs the kernel: compute capability 9.0, this build's sm_90a code,
// cooperative launches, the shared memory, and one CTA on every SM. Looked up once a device.
bool DeviceRuns() {
#ifndef KILN_SM90A
  return false;
#else
  static PerDeviceFact runs;
  return runs.Get([](int device) {
    int cooperative = 0;
    bool ok =
        ComputeCapabilityIs(device, 9, 0) &&
        cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) == cudaSuccess &&
        cooperative != 0;
    auto prepare = [&](auto kernel) {
      int blocks = 0;
      ok = ok &&
           cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) ==
               cudaSuccess &&
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, kSmemBytes) ==
               cudaSuccess &&
           blocks >= 1;
    };
    prepare(KernelOf<bf16, 64>());
    prepare(KernelOf<bf16, 128>());
    prepare(KernelOf<e4m3, 64>());
    prepare(KernelOf<e4m3, 128>());
    return ok;
  });
#endif
}

}  // namespace

size_t FusedDecodeWorkspaceBytes(int32_t num_heads, int32_t head_dim) {
  return static_cast<size_t>(num_heads) * kMaxSplits * (head_dim + 2) * sizeof(float);
}

size_t FusedDecodeSyncBytes(int32_t num_kv_heads) {
  return static_cast<size_t>(kSyncHeader + num_kv_heads) * sizeof(uint32_t);
}

bool FusedDecodeDeviceRuns() { return DeviceRuns(); }

bool FusedDecodeLayerOk(const FusedDecodeLayer& l, bool fp8_cache) {
  return Aligned16(l.input_norm) && Aligned16(l.post_norm) && Aligned16(l.qkv) && Aligned16(l.o) &&
         Aligned16(l.gate_up) && Aligned16(l.down) && l.qkv_scale != nullptr &&
         l.o_scale != nullptr && l.gate_up_scale != nullptr && l.down_scale != nullptr &&
         l.k_cache != nullptr && l.v_cache != nullptr && std::isfinite(l.k_scale) &&
         std::isfinite(l.v_scale) && l.k_scale > 0 && l.v_scale > 0 &&
         (fp8_cache || (l.k_scale == 1.0f && l.v_scale == 1.0f));
}

bool FusedDecodeSupported(const FusedDecodeArgs& a) {
  const int64_t q = int64_t{a.num_heads} * a.head_dim;
  const int64_t widest = std::max({int64_t{a.hidden}, q, int64_t{a.intermediate}});
  if (a.layers == nullptr || a.num_layers <= 0 || a.hidden <= 0 || a.intermediate <= 0 ||
      a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.num_heads / a.num_kv_heads > kMaxGroup || (a.head_dim != 64 && a.head_dim != 128) ||
      a.hidden % 16 != 0 || q % 16 != 0 || a.intermediate % 16 != 0 || widest > kMaxWidth ||
      a.block_size <= 0 || a.inv_freq == nullptr || a.position == nullptr || a.slot == nullptr ||
      a.seq_len == nullptr || a.block_table == nullptr || !Aligned16(a.delta) ||
      !Aligned16(a.residual) || !Aligned16(a.qkv_out) || !Aligned16(a.attn_out) ||
      !Aligned16(a.act_out) || a.partials == nullptr || a.sync == nullptr || !DeviceRuns()) {
    return false;
  }
  const int sms = CurrentDeviceSmCount();
  return sms >= a.num_kv_heads && (a.intermediate + sms - 1) / sms <= kMaxGateRows;
}

cudaError_t FusedDecode(const FusedDecodeArgs& a, cudaStream_t stream) {
  if (!FusedDecodeSupported(a)) return cudaErrorInvalidValue;
  Params p;
  p.a = a;
  p.q_size = a.num_heads * a.head_dim;
  p.kv_size = a.num_kv_heads * a.head_dim;
  p.qkv_rows = p.q_size + 2 * p.kv_size;
  auto launch = [&](auto kernel) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(CurrentDeviceSmCount()));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmemBytes;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    const cudaError_t st = cudaMemsetAsync(a.sync, 0, sizeof(uint32_t), stream);
    return st != cudaSuccess ? st : cudaLaunchKernelEx(&config, kernel, p);
  };
  if (a.fp8_cache) {
    return a.head_dim == 64 ? launch(KernelOf<e4m3, 64>()) : launch(KernelOf<e4m3, 128>());
  }
  return a.head_dim == 64 ? launch(KernelOf<bf16, 64>()) : launch(KernelOf<bf16, 128>());
}

}  // namespace kiln::kernels
