// FusedDecode (decode_fused.h) on Hopper.
//
// Block: 288 threads, one per SM. Warp 8, lane 0 (the producer) walks the SM's row slices of
// every weight in the order the layers use them (qkv, o, gate, up, down; layer by layer) and
// bulk-copies them, kStageBytes at most a copy and whole rows only, into a ring of kStages
// stages, each completing on its `full` mbarrier; it waits only for a stage's `empty` barrier.
// Between a layer's qkv and o slices it also copies the K and V rows of the CTA's attention item
// (below), so attention never waits for DRAM either. Warps 0-7 (the consumers) follow the same
// walk: for each stage, the warps whose rows it holds (row i of a slice goes to warp i % 8) take
// the dot product of the row with the activations in shared memory (w8_internal::Dot16, lane l
// over 16-element pieces l, l + 32, ...: the GemvFp8 kernel's order, so the same bits), reduce it
// over the warp and store the row's output; then every warp arrives on `empty`. A row's scale and
// bias, and h at the CTA's own rows of o and down, wait in lane i / 8 of the row's warp
// (RowParams, loaded a phase ahead), so no row waits for a global load. Between the phases the
// consumers meet at a grid barrier (GridSync: a release-add arrival counter, acquire polls).
//
// Slices: matrix of n rows, CTA b of G takes rows [n b / G, n (b + 1) / G); gate and up the same
// columns, so SiluMul needs no exchange between CTAs.
//
// Attention: CTA b < num_kv_heads * splits takes kv head b / splits and context split
// b % splits (splits: up to kMaxSplits, at least kMinSplitTokens positions each, at most
// G / num_kv_heads). The warps take each ring stage's cached positions round-robin, keeping an
// online softmax (fp32, base 2) for every query head of the group, merged over the warps in
// shared memory. One split: the CTA writes attn itself; more: it writes its partial (max, sum,
// unnormalized output per head) and the last CTA of the kv head to arrive (a counter per kv
// head, reset by it) merges them. The CTA with the context's last position rotates the token's k,
// writes k and v into the cache as RopeStoreKv does and scores them from registers.
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
constexpr int kStages = 12;
constexpr int kMaxWidth = 16384;  // elements of the widest activation (hidden, q, intermediate)
constexpr int kMaxSliceRows = 32 * kWarps;  // a CTA's rows of a weight: 32 a warp (RowParams)
constexpr int kMaxGroup = 8;                // query heads a kv head
constexpr int kMaxSplits = 32;
[[maybe_unused]] constexpr int kMinSplitTokens = 16;
constexpr int kNormThreads = 256;  // RmsNormVecKernel's block for rows of more than 1,024
constexpr int kMaxHidden = 8192;   // the norms keep a thread's share of h in registers
constexpr int kNormMaxVecs = kMaxHidden / 8 / kNormThreads;
static_assert(kConsumers >= kNormThreads, "the norm runs on the consumers");
// Shared memory: the ring; the activations (bf16 [kMaxWidth], attention's fp32 merge scratch
// [kWarps][group][head_dim] in between); the gate outputs; softmax statistics; a flag; barriers.
constexpr int kXOffset = kStages * kStageBytes;
constexpr int kGateOffset = kXOffset + 2 * kMaxWidth;
constexpr int kStatsOffset = kGateOffset + 4 * kMaxSliceRows;
constexpr int kStatsFloats = 2 * kMaxGroup * kWarps;
constexpr int kReduceOffset = kStatsOffset + 4 * kStatsFloats;  // float [32], then the flag
constexpr int kBarOffset = kReduceOffset + 4 * 64;
constexpr int kSmemBytes = kBarOffset + 16 * kStages;  // full[kStages], empty[kStages]
static_assert(kWarps * kMaxGroup * 128 * 4 <= 2 * kMaxWidth, "merge scratch fits the activations");
static_assert(kSmemBytes <= 227 * 1024, "one CTA an SM");
// Sync words: [0] the grid barriers' arrivals (GridSync), [1 + g] kv head g's splits done.
constexpr int kSyncHeader = 1;
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
[[maybe_unused]] constexpr int kSlices = 5;

[[maybe_unused]] __device__ __forceinline__ Slice SliceOf(const Params& p,
                                                          const FusedDecodeLayer& l, int which) {
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
[[maybe_unused]] __device__ __forceinline__ int RowsPerStage(int k) {
  return max(1, kStageBytes / k);
}

// The CTA's attention work in a step: kv head g, context positions [t0, t1) (split `split` of
// `splits`); none where the CTA has no item or the step no context.
struct AttnItem {
  int g = 0, split = 0, splits = 1, t0 = 0, t1 = 0;
  bool active = false;
};

[[maybe_unused]] __device__ __forceinline__ AttnItem ItemOf(const Params& p, int context) {
  AttnItem it;
  if (context <= 0) return it;
  const int nkv = p.a.num_kv_heads;
  it.splits = max(1, min(min(kMaxSplits, static_cast<int>(gridDim.x) / nkv),
                         (context + kMinSplitTokens - 1) / kMinSplitTokens));
  if (static_cast<int>(blockIdx.x) >= nkv * it.splits) return it;
  it.g = blockIdx.x / it.splits;
  it.split = blockIdx.x % it.splits;
  const int per = (context + it.splits - 1) / it.splits;
  it.t0 = min(context, it.split * per);
  it.t1 = min(context, it.t0 + per);
  it.active = true;
  return it;
}

// The item's positions already in the cache, [t0, end): all but the step's own token, whose k and
// v attention takes from qkv_out. The producer copies them through the ring, kv_rows positions a
// stage: their K rows from the stage's start, their V rows from its middle.
[[maybe_unused]] __device__ __forceinline__ int CachedEnd(const AttnItem& it, int context) {
  return it.active ? max(it.t0, min(it.t1, context - 1)) : 0;
}
[[maybe_unused]] constexpr int kVOffset = kStageBytes / 2;

// A position in the ring: the stage and its barriers' phase parity.
struct Pipe {
  int stage = 0;
  uint32_t phase = 0;
};
[[maybe_unused]] __device__ __forceinline__ void Advance(Pipe& pipe) {
  if (++pipe.stage == kStages) {
    pipe.stage = 0;
    pipe.phase ^= 1;
  }
}

[[maybe_unused]] __device__ __forceinline__ uint32_t FullBar(uint32_t bars, int stage) {
  return bars + 8 * stage;
}
[[maybe_unused]] __device__ __forceinline__ uint32_t EmptyBar(uint32_t bars, int stage) {
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

// Benchmarks: CTA 0's thread `who` records the time and its SM's clock at trace point `point`
// of `layer`.
[[maybe_unused]] __device__ __forceinline__ void Trace(const FusedDecodeArgs& a, int layer,
                                                       int point, int who) {
  if (a.trace != nullptr && blockIdx.x == 0 && threadIdx.x == who) {
    const int64_t at = int64_t{layer} * kFusedDecodeTracePoints + point;
    a.trace[at] = GlobalTimer();
    a.trace[int64_t{a.num_layers} * kFusedDecodeTracePoints + at] = clock64();
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

// The producer: every stage of the walk. Between each layer's qkv and o slices, the K and V rows
// of the CTA's attention item (the block table read once a run of a block's positions).
template <typename C, int kHd>
[[maybe_unused]] __device__ void Produce(const Params& p, uint8_t* smem) {
  const auto& a = p.a;
  const uint32_t ring = SmemAddr(smem);
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  const bool copy = (a.debug & kFusedDecodeSkipCopy) == 0;
  if (a.debug & kFusedDecodeSkipRing) return;
  uint64_t policy = 0;
#ifdef KILN_FUSED_DECODE_SM90
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  Pipe pipe;
  // Stage s: wait for it to be free, expect `bytes`, and let copies(dst) fill it.
  auto stage = [&](uint32_t bytes, auto&& copies) {
    MbarrierWait(EmptyBar(bars, pipe.stage), pipe.phase ^ 1);
    ArriveExpectTx(FullBar(bars, pipe.stage), copy ? bytes : 0u);
    if (copy) copies(ring + pipe.stage * kStageBytes, FullBar(bars, pipe.stage));
    Advance(pipe);
  };
  int context = 0;
  AttnItem it;
  constexpr int kRowBytes = kHd * static_cast<int>(sizeof(C));
  constexpr int kKvRows = kVOffset / kRowBytes;
  const int nkv = a.num_kv_heads, bs = a.block_size;
  for (int layer = 0; layer < a.num_layers; ++layer) {
    const FusedDecodeLayer& l = a.layers[layer];
    for (int which = 0; which < kSlices; ++which) {
      const Slice s = SliceOf(p, l, which);
      const int per = RowsPerStage(s.k);
      for (int64_t r = 0; r < s.rows; r += per) {
        const uint32_t bytes =
            static_cast<uint32_t>(min(static_cast<int64_t>(per), s.rows - r) * s.k);
        stage(bytes, [&](uint32_t dst, uint32_t bar) {
          BulkCopy(dst, s.w + r * s.k, bytes, bar, policy);
        });
      }
      if (which != 0 || (a.debug & kFusedDecodeSkipAttention) != 0) continue;
      if (layer == 0) {
        // The step's context and block table come from the kernels before this one.
        PdlWait();
        context = *a.seq_len;
        it = ItemOf(p, context);
      }
      const int end = CachedEnd(it, context);
      const auto* k_cache = static_cast<const uint8_t*>(l.k_cache);
      const auto* v_cache = static_cast<const uint8_t*>(l.v_cache);
      for (int t = it.t0; t < end; t += kKvRows) {
        const int n = min(kKvRows, end - t);
        stage(2u * n * kRowBytes, [&](uint32_t dst, uint32_t bar) {
          for (int u = t; u < t + n;) {
            const int off = u % bs, run = min(t + n - u, bs - off);
            const int64_t row =
                (static_cast<int64_t>(__ldg(a.block_table + u / bs)) * nkv + it.g) * bs + off;
            const uint32_t at = dst + (u - t) * kRowBytes;
            BulkCopy(at, k_cache + row * kRowBytes, run * kRowBytes, bar, policy);
            BulkCopy(at + kVOffset, v_cache + row * kRowBytes, run * kRowBytes, bar, policy);
            u += run;
          }
        });
      }
    }
    Trace(a, layer, kFusedDecodeTracePoints - 1, kConsumers);
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

// A warp's rows of a slice are rows warp, warp + kWarps, ...; lane i holds the scale and bias of
// the i-th (at most 32: FusedDecodeSupported), loaded ahead of the phase so that no row waits for
// a global load.
struct RowParams {
  float scale = 0.0f, bias = 0.0f;
};

[[maybe_unused]] __device__ __forceinline__ RowParams RowParamsOf(const Slice& s) {
  const int64_t i = threadIdx.x / 32 + int64_t{kWarps} * (threadIdx.x % 32);
  RowParams r;
  if (i < s.rows) {
    r.scale = __ldg(s.scale + s.row0 + i);
    if (s.bias != nullptr) r.bias = ToFloat(s.bias[s.row0 + i]);
  }
  return r;
}

// The consumers' side of one slice: done(i, value) for each row i of the slice this warp owns
// (every lane gets the value: sum * scale + bias, as GemvFp8's epilogue).
template <typename Done>
__device__ __forceinline__ void Consume(Pipe& pipe, const Slice& s, const RowParams& rp,
                                        const uint8_t* smem, uint32_t debug, Done&& done) {
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = RowsPerStage(s.k);
  const int vecs = s.k / 16;
  const auto* x = reinterpret_cast<const uint4*>(smem + kXOffset);
  const bool dot = (debug & kFusedDecodeSkipDot) == 0;
  const bool ring = (debug & kFusedDecodeSkipRing) == 0;
  for (int64_t r = 0; r < s.rows; r += per) {
    if (ring) MbarrierWait(FullBar(bars, pipe.stage), pipe.phase);
    const uint8_t* stage = smem + pipe.stage * kStageBytes;
    const int n = static_cast<int>(min(static_cast<int64_t>(per), s.rows - r));
    for (int j = (warp - static_cast<int>(r % kWarps) + kWarps) % kWarps; j < n; j += kWarps) {
      const int slot = static_cast<int>((r + j) / kWarps);
      const float scale = __shfl_sync(0xffffffffu, rp.scale, slot);
      const float bias = __shfl_sync(0xffffffffu, rp.bias, slot);
      const float acc =
          dot ? RowDot(reinterpret_cast<const uint4*>(stage + j * s.k), x, vecs) : 0.0f;
      done(r + j, acc * scale + bias);
    }
    __syncwarp();
    if (lane == 0 && ring) MbarrierArrive(EmptyBar(bars, pipe.stage));
    Advance(pipe);
  }
}

// n bf16 values from global memory (another CTA's writes: through L2) into the activations.
[[maybe_unused]] __device__ __forceinline__ void LoadActivations(const bf16* src, int n,
                                                                 uint8_t* smem) {
  auto* x = reinterpret_cast<uint4*>(smem + kXOffset);
  const auto* s = reinterpret_cast<const uint4*>(src);
  for (int i = threadIdx.x; i < n / 8; i += kConsumers) x[i] = __ldcg(s + i);
}

// The sum of v over the consumers, as RmsNormVecKernel's BlockSum adds it for a block of
// kNormThreads (or 128) threads (the others pass 0, which changes no bit of the sum).
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
// order (its launch's thread count for this dim). Layer 0: h is 0 + the embeddings (delta). The
// weight is prefetched into L1 with h's loads, so that it is at hand after the reduction.
[[maybe_unused]] __device__ void NormToSmem(const Params& p, bool first, const bf16* weight,
                                            uint8_t* smem) {
  const int dim = p.a.hidden, nvec = dim / 8;
  const int threads = nvec <= 128 ? 128 : kNormThreads;
  const int t = threadIdx.x;
  float v[kNormMaxVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormMaxVecs; ++j) {
    const int i = t + j * threads;
    if (t >= threads || i >= nvec) continue;
    asm volatile("prefetch.global.L1 [%0];" ::"l"(reinterpret_cast<const uint4*>(weight) + i));
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
    const uint4 wraw = __ldg(reinterpret_cast<const uint4*>(weight) + i);
    const auto* wp = reinterpret_cast<const dtype_internal::Pair<bf16>*>(&wraw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 w = PairToFloat2<bf16>(wp[e]);
      x[8 * i + 2 * e] = FromFloat<bf16>(RoundTo<bf16>(v[j][2 * e] * inv) * w.x);
      x[8 * i + 2 * e + 1] = FromFloat<bf16>(RoundTo<bf16>(v[j][2 * e + 1] * inv) * w.y);
    }
  }
}

// This lane's kE = kHd / 32 values of a row of kHd (dimensions lane * kE + e) in fp32, one load:
// a bf16 row in global memory (another CTA's writes: through L2) or a cache row in shared memory.
template <int kHd>
__device__ __forceinline__ void LoadHead(const bf16* row, float (&out)[kHd / 32]) {
  constexpr int kE = kHd / 32;
  const int lane = threadIdx.x % 32;
  if constexpr (kE == 4) {
    const uint2 raw = __ldcg(reinterpret_cast<const uint2*>(row) + lane);
    const float2 lo =
        PairToFloat2<bf16>(*reinterpret_cast<const dtype_internal::Pair<bf16>*>(&raw.x));
    const float2 hi =
        PairToFloat2<bf16>(*reinterpret_cast<const dtype_internal::Pair<bf16>*>(&raw.y));
    out[0] = lo.x, out[1] = lo.y, out[2] = hi.x, out[3] = hi.y;
  } else {
    const uint32_t raw = __ldcg(reinterpret_cast<const unsigned int*>(row) + lane);
    const float2 f = PairToFloat2<bf16>(*reinterpret_cast<const dtype_internal::Pair<bf16>*>(&raw));
    out[0] = f.x, out[1] = f.y;
  }
}

template <typename C, int kHd>
__device__ __forceinline__ void CacheRow(const uint8_t* row, float (&out)[kHd / 32]) {
  constexpr int kE = kHd / 32;
  const int lane = threadIdx.x % 32;
  if constexpr (kIsFp8<C>) {
    const auto* codes = reinterpret_cast<const __nv_fp8x2_storage_t*>(row) + lane * kE / 2;
#pragma unroll
    for (int e = 0; e < kE; e += 2) {
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes[e / 2], __NV_E4M3)));
      out[e] = f.x;
      out[e + 1] = f.y;
    }
  } else {
    const auto* pairs = reinterpret_cast<const dtype_internal::Pair<bf16>*>(row) + lane * kE / 2;
#pragma unroll
    for (int e = 0; e < kE; e += 2) {
      const float2 f = PairToFloat2<bf16>(pairs[e / 2]);
      out[e] = f.x;
      out[e + 1] = f.y;
    }
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

// A head at this lane's dimensions, rotated in place as RopeStoreKvKernel rotates it, unrounded.
template <int kHd>
__device__ __forceinline__ void Rotate(const Params& p, const Angles<kHd>& r,
                                       float (&x)[kHd / 32]) {
  constexpr int kE = kHd / 32;
  const int lane = threadIdx.x % 32;
  if (p.a.interleaved_rope) {
#pragma unroll
    for (int e = 0; e < kE; e += 2) RotatePair(r.c[e], r.s[e], x[e], x[e + 1]);
  } else {
    // Dimension d < half pairs with d + half, which lane ^ 16 holds.
    const bool low = lane < 16;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
      float x0 = low ? x[e] : other, x1 = low ? other : x[e];
      RotatePair(r.c[e], r.s[e], x0, x1);
      x[e] = low ? x0 : x1;
    }
  }
}

// The weight of a partial whose running max is m in a merge whose max is big (0 for a partial
// that saw no position).
[[maybe_unused]] __device__ __forceinline__ float MergeWeight(float m, float big) {
  return m == -INFINITY ? 0.0f : exp2f(m - big);
}

// One warp's online softmax (fp32, base 2) over positions, for every query head of the group (at
// most kG).
template <int kHd, int kG>
struct Softmax {
  static constexpr int kE = kHd / 32;
  float q[kG][kE];  // rotated, rounded as RoPE writes q back
  float m[kG], sum[kG], acc[kG][kE];

  __device__ __forceinline__ void Visit(int group, float score_scale, const float (&k)[kE],
                                        const float (&v)[kE]) {
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      if (h >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < kE; ++e) s = fmaf(q[h][e], k[e], s);
      for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
      s *= score_scale;
      const float mn = fmaxf(m[h], s);
      const float corr = MergeWeight(m[h], mn), pr = exp2f(s - mn);
      sum[h] = sum[h] * corr + pr;
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[h][e] = acc[h][e] * corr + pr * v[e];
      m[h] = mn;
    }
  }
};

// Attention for the CTA's item: the cached positions from the ring (the producer's stages after
// qkv), the step's own token from qkv_out (its k and v written to the cache here, by the CTA whose
// split holds it); warps take a stage's positions round-robin, merge in shared memory, and the
// splits merge through fp32 partials in the last CTA of the kv head.
template <typename C, int kHd, int kG>
__device__ void Attention(const Params& p, const FusedDecodeLayer& l, const AttnItem& it,
                          int context, Pipe& pipe, uint8_t* smem) {
  constexpr int kE = kHd / 32;
  constexpr int kRowBytes = kHd * static_cast<int>(sizeof(C));
  constexpr int kKvRows = kVOffset / kRowBytes;
  if (!it.active) return;
  const auto& a = p.a;
  const int nkv = a.num_kv_heads, group = a.num_heads / nkv, g = it.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool holds_last = it.t1 == context && it.t0 < it.t1 && warp == 0;
  Softmax<kHd, kG> sm;
  float k_last[kE], v_last[kE];
  // One trip for the group's q heads and (warp 0 of the CTA holding it) the token's k and v.
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h < group) LoadHead<kHd>(a.qkv_out + (g * group + h) * kHd, sm.q[h]);
  }
  if (holds_last) {
    LoadHead<kHd>(a.qkv_out + p.q_size + g * kHd, k_last);
    LoadHead<kHd>(a.qkv_out + p.q_size + p.kv_size + g * kHd, v_last);
  }
  const Angles<kHd> angles = AnglesOf<kHd>(p, static_cast<float>(*a.position));
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    sm.m[h] = -INFINITY;
    sm.sum[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) sm.acc[h][e] = 0.0f;
    if (h < group) {
      Rotate<kHd>(p, angles, sm.q[h]);
#pragma unroll
      for (int e = 0; e < kE; ++e) sm.q[h][e] = RoundTo<bf16>(sm.q[h][e]);
    }
  }
  if (holds_last) {
    // The token's k and v into the cache, as RopeStoreKvKernel writes them, and their values as
    // the cache holds them for the scores.
    Rotate<kHd>(p, angles, k_last);
    const int64_t slot = *a.slot;
    const int bs = a.block_size;
    const int64_t at = ((slot / bs * nkv + g) * bs + slot % bs) * kHd + lane * kE;
    auto* k_cache = static_cast<C*>(l.k_cache);
    auto* v_cache = static_cast<C*>(l.v_cache);
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      C kc, vc;
      if constexpr (kIsFp8<C>) {
        // RopeStoreKvKernel's code: one rounding of the exact quotient of the T value.
        kc = ToE4m3Sat(__fdiv_rn(RoundTo<bf16>(k_last[e]), l.k_scale));
        vc = ToE4m3Sat(__fdiv_rn(v_last[e], l.v_scale));
        k_last[e] = static_cast<float>(kc);
        v_last[e] = static_cast<float>(vc);
      } else {
        kc = FromFloat<bf16>(k_last[e]);
        vc = FromFloat<bf16>(v_last[e]);
        k_last[e] = ToFloat(kc);
      }
      if (slot >= 0) {
        k_cache[at + e] = kc;
        v_cache[at + e] = vc;
      }
    }
  }
  const float score_scale = a.attn_scale * l.k_scale * kLog2e;
  if (holds_last) sm.Visit(group, score_scale, k_last, v_last);
  const uint32_t bars = SmemAddr(smem + kBarOffset);
  const int end = CachedEnd(it, context);
  for (int t = it.t0; t < end; t += kKvRows) {
    const int n = min(kKvRows, end - t);
    MbarrierWait(FullBar(bars, pipe.stage), pipe.phase);
    const uint8_t* stage = smem + pipe.stage * kStageBytes;
    for (int j = warp; j < n; j += kWarps) {
      float k[kE], v[kE];
      CacheRow<C, kHd>(stage + j * kRowBytes, k);
      CacheRow<C, kHd>(stage + kVOffset + j * kRowBytes, v);
      sm.Visit(group, score_scale, k, v);
    }
    __syncwarp();
    if (lane == 0) MbarrierArrive(EmptyBar(bars, pipe.stage));
    Advance(pipe);
  }
  // Merge the warps: statistics [warp][head][2], outputs [warp][head][kHd] (fp32).
  auto* stats = reinterpret_cast<float*>(smem + kStatsOffset);
  auto* outs = reinterpret_cast<float*>(smem + kXOffset);
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h >= group) break;
    if (lane == 0) {
      stats[(warp * kMaxGroup + h) * 2] = sm.m[h];
      stats[(warp * kMaxGroup + h) * 2 + 1] = sm.sum[h];
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) outs[(warp * group + h) * kHd + lane * kE + e] = sm.acc[h][e];
  }
  ConsumerSync();
  const int splits = it.splits;
  float* part = a.partials + static_cast<int64_t>(g * kMaxSplits + it.split) * group * (kHd + 2);
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
  // The last CTA of kv head g to get here merges the splits: in one trip for up to kMergeBatch
  // splits, their statistics into shared memory (the scratch above is free again) and each
  // thread's outputs' partials into registers.
  __threadfence();
  ConsumerSync();
  auto* flag = reinterpret_cast<int*>(smem + kReduceOffset + 4 * 32);
  uint32_t* done = a.sync + kSyncHeader + g;
  if (threadIdx.x == 0) *flag = atomicAdd(done, 1u) == static_cast<uint32_t>(splits - 1);
  ConsumerSync();
  if (*flag == 0) return;
  __threadfence();
  const float* first = a.partials + static_cast<int64_t>(g * kMaxSplits) * group * (kHd + 2);
  auto* split_stats = outs;  // [split][head][2]
  for (int idx = threadIdx.x; idx < splits * group; idx += kConsumers) {
    const float* ph = first + static_cast<int64_t>(idx) * (kHd + 2);
    split_stats[2 * idx] = __ldcg(ph + kHd);
    split_stats[2 * idx + 1] = __ldcg(ph + kHd + 1);
  }
  constexpr int kMergeBatch = 16;
  float os[kMergeBatch];
  const int mine = threadIdx.x;  // output (head, dimension) of the first batch's loads
  auto load = [&](int idx, int s0) {
    const int h = idx / kHd, d = idx % kHd;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      if (s0 + u < splits) {
        os[u] = __ldcg(first + static_cast<int64_t>((s0 + u) * group + h) * (kHd + 2) + d);
      }
    }
  };
  if (mine < group * kHd) load(mine, 0);
  ConsumerSync();
  for (int idx = mine; idx < group * kHd; idx += kConsumers) {
    const int h = idx / kHd, d = idx % kHd;
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, split_stats[2 * (s * group + h)]);
    float total = 0.0f, o = 0.0f;
    for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
      if (idx != mine || s0 != 0) load(idx, s0);
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        if (s0 + u >= splits) break;
        const float wt = MergeWeight(split_stats[2 * ((s0 + u) * group + h)], big);
        total += split_stats[2 * ((s0 + u) * group + h) + 1] * wt;
        o += os[u] * wt;
      }
    }
    a.attn_out[(g * group + h) * kHd + d] = FromFloat<bf16>(o / total * l.v_scale);
  }
  if (threadIdx.x == 0) atomicExch(done, 0u);
}

template <typename C, int kHd, int kG>
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
    // Weights are no kernel's output: the producer starts before the previous kernel ends.
    if (threadIdx.x == kConsumers) Produce<C, kHd>(p, smem);
    return;
  }
  PdlWait();
  const auto& a = p.a;
  auto* gate = reinterpret_cast<float*>(smem + kGateOffset);
  Pipe pipe;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int context = *a.seq_len;
  const AttnItem item = (a.debug & (kFusedDecodeSkipAttention | kFusedDecodeSkipRing)) != 0
                            ? AttnItem{}
                            : ItemOf(p, context);
  uint32_t barriers = 0;  // grid barriers passed (thread 0)
  // h at the CTA's rows of o and down (the same rows, which only this CTA writes): lane i of a
  // warp holds its i-th, as RowParams.
  float h_mine = 0.0f;
  {
    const Slice rows = SliceOf(p, a.layers[0], 1);
    const int64_t i = warp + int64_t{kWarps} * lane;
    if (i < rows.rows) h_mine = 0.0f + ToFloat(__ldcg(a.delta + rows.row0 + i));
  }
  RowParams qkv_rp = RowParamsOf(SliceOf(p, a.layers[0], 0));
  for (int layer = 0; layer < a.num_layers; ++layer) {
    const FusedDecodeLayer& l = a.layers[layer];
    const bool first = layer == 0, last = layer + 1 == a.num_layers;
    Trace(a, layer, 0, 0);
    NormToSmem(p, first, l.input_norm, smem);
    ConsumerSync();
    Trace(a, layer, 1, 0);
    const Slice qkv = SliceOf(p, l, 0);
    Consume(pipe, qkv, qkv_rp, smem, a.debug, [&](int64_t i, float v) {
      if (lane == 0) a.qkv_out[qkv.row0 + i] = FromFloat<bf16>(v);
    });
    Trace(a, layer, 2, 0);
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 3, 0);
    Attention<C, kHd, kG>(p, l, item, context, pipe, smem);
    Trace(a, layer, 4, 0);
    const RowParams o_rp = RowParamsOf(SliceOf(p, l, 1));
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 5, 0);
    LoadActivations(a.attn_out, p.q_size, smem);
    ConsumerSync();
    const Slice o = SliceOf(p, l, 1);
    Consume(pipe, o, o_rp, smem, a.debug, [&](int64_t i, float v) {
      if (lane == i / kWarps) {
        h_mine = h_mine + RoundTo<bf16>(v);
        a.residual[o.row0 + i] = h_mine;
      }
    });
    Trace(a, layer, 6, 0);
    const RowParams gate_rp = RowParamsOf(SliceOf(p, l, 2)), up_rp = RowParamsOf(SliceOf(p, l, 3));
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 7, 0);
    NormToSmem(p, false, l.post_norm, smem);
    ConsumerSync();
    Consume(pipe, SliceOf(p, l, 2), gate_rp, smem, a.debug, [&](int64_t i, float v) {
      if (lane == 0) gate[i] = RoundTo<bf16>(v);
    });
    ConsumerSync();
    const Slice up_rows = SliceOf(p, l, 3);
    const int64_t col0 = up_rows.row0 - a.intermediate;
    Consume(pipe, up_rows, up_rp, smem, a.debug, [&](int64_t i, float v) {
      if (lane == 0) {
        a.act_out[col0 + i] = FromFloat<bf16>(SiluTimesExact<bf16>(gate[i], RoundTo<bf16>(v)));
      }
    });
    Trace(a, layer, 8, 0);
    const RowParams down_rp = RowParamsOf(SliceOf(p, l, 4));
    GridSync(a.sync, a.debug, &barriers);
    Trace(a, layer, 9, 0);
    LoadActivations(a.act_out, a.intermediate, smem);
    ConsumerSync();
    if (last) PdlLaunchDependents();
    const Slice down = SliceOf(p, l, 4);
    Consume(pipe, down, down_rp, smem, a.debug, [&](int64_t i, float v) {
      if (last) {
        if (lane == 0) a.delta[down.row0 + i] = FromFloat<bf16>(v);
      } else if (lane == i / kWarps) {
        h_mine = h_mine + RoundTo<bf16>(v);
        a.residual[down.row0 + i] = h_mine;
      }
    });
    Trace(a, layer, 10, 0);
    if (!last) {
      qkv_rp = RowParamsOf(SliceOf(p, a.layers[layer + 1], 0));
      GridSync(a.sync, a.debug, &barriers);
    }
    Trace(a, layer, 11, 0);
  }
#endif
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename C, int kHd, int kG>
auto KernelOf() {
  return FusedDecodeKernel<C, kHd, kG>;
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
    prepare(KernelOf<bf16, 64, 4>());
    prepare(KernelOf<bf16, 128, 4>());
    prepare(KernelOf<e4m3, 64, 4>());
    prepare(KernelOf<e4m3, 128, 4>());
    prepare(KernelOf<bf16, 64, kMaxGroup>());
    prepare(KernelOf<bf16, 128, kMaxGroup>());
    prepare(KernelOf<e4m3, 64, kMaxGroup>());
    prepare(KernelOf<e4m3, 128, kMaxGroup>());
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
      a.hidden > kMaxHidden || a.block_size <= 0 || a.inv_freq == nullptr ||
      a.position == nullptr || a.slot == nullptr || a.seq_len == nullptr ||
      a.block_table == nullptr || !Aligned16(a.delta) || !Aligned16(a.residual) ||
      !Aligned16(a.qkv_out) || !Aligned16(a.attn_out) || !Aligned16(a.act_out) ||
      a.partials == nullptr || a.sync == nullptr || !DeviceRuns()) {
    return false;
  }
  const int sms = CurrentDeviceSmCount();
  const int64_t rows = std::max(q + 2 * int64_t{a.num_kv_heads} * a.head_dim, widest);
  return sms >= a.num_kv_heads && (rows + sms - 1) / sms <= kMaxSliceRows;
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
  // The group's query heads: up to 4 (Llama-3 8B, Mistral 7B) in a kernel with half the
  // softmax registers.
  auto pick = [&](auto cache) {
    using C = decltype(cache);
    if (a.num_heads / a.num_kv_heads <= 4) {
      return a.head_dim == 64 ? launch(KernelOf<C, 64, 4>()) : launch(KernelOf<C, 128, 4>());
    }
    return a.head_dim == 64 ? launch(KernelOf<C, 64, kMaxGroup>())
                            : launch(KernelOf<C, 128, kMaxGroup>());
  };
  return a.fp8_cache ? pick(e4m3{}) : pick(bf16{});
}

}  // namespace kiln::kernels
