// GPU sampling: cpu::Sample / cpu::Score (backend/cpu/sampler.h) for a batch of fp32 logit rows.
//
// Three kernels per SampleRows call (all shapes from num_rows and vocab_size, so a graph can
// capture them):
//   1. PenaltyKernel, a block per row: rows with a bias, a ban or an active penalty copy their
//      logits into the workspace and apply the penalties there (sampler.h's order and float ops).
//      Other rows return at once.
//   2. SelectKernel, a block per row: picks the token of every temperature > 0 row, and the argmax
//      of penalized greedy rows. Plain greedy rows return at once (kernel 3 finds their argmax).
//   3. ScoreKernel (grid splits x rows) + FinalizeKernel (a block per row): one pass over the raw
//      logits for the log-sum-exp, the argmax (greedy rows and the all-banned fallback), the rank
//      (1 + the count strictly larger than the token's raw logit) and the top-N, split across
//      blocks when the batch is small, merged by FinalizeKernel.
//
// Order keys. Every ordering of sampler.h (value desc, id asc) is a comparison of 64-bit keys:
// (order-preserving bits of the value) << 32 | (0xFFFFFFFF - id); the larger key is better. A
// "cut" key c selects the prefix {key >= c}. Top-k (on scaled logits v) and top-p (on weights w)
// are both a prefix: top-k holds k keys; top-p is the shortest prefix whose weight reaches
// target = (top_p - 1e-6) * total. Both are found by a radix select over the key (11-bit digits,
// a shared-memory histogram of counts, and for top-p of weights, per pass over the row), which
// switches to a gather + bitonic sort in shared memory once the bin holding the cut has at most
// kGatherCap keys. A top-k of at most kGatherCap tokens is gathered whole and the rest (softmax,
// top-p, min-p, race) runs in shared memory.
//
// Exactness against the CPU. The per-token arithmetic is the CPU's, operation for operation:
// the penalties in float without contraction, v = x / T (IEEE division), w = expf(v - vmax)
// computed as (float)exp((double)(v - vmax)) (correctly rounded but for double-rounding cases,
// as glibc's expf is but for its rare 0.502-ulp cases), -logf(u) likewise, p = (float)(w / sum)
// and p / E in float. Sums of weights are exact: each weight enters as a 2^-80 fixed-point
// integer (128-bit, order-independent, so deterministic), where the CPU sums in double in its
// own order; the two differ by ~1e-16 relative, which can only move a top-p cut or a race
// winner that the CPU itself decides by the last bits of its sums (a near-tie).
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/launch.cuh"

namespace kiln::kernels {
namespace {

using u128 = unsigned __int128;

constexpr int kThreads = 512;     // per block, every kernel
constexpr int kBins = 2048;       // radix digit: 11 bits
constexpr int kGatherCap = 4096;  // keys a block sorts in shared memory
constexpr int kMaxSplits = 32;    // blocks per row in ScoreKernel
constexpr int kScoreChunk = kThreads * 4;
constexpr int32_t kMaxVocab = 1 << 18;  // ids fit the 18 low key bits the radix walks
constexpr float kNegInf = -__builtin_huge_valf();

template <typename T>
__device__ __forceinline__ T Max(T a, T b) {
  return a > b ? a : b;
}

// ---- keys ----------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t OrderedBits(float x) {
  // NOTE: -0 and +0 compare equal on the CPU, so they must share a key.
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float FromOrderedBits(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
__device__ __forceinline__ uint64_t MakeKey(uint32_t hi, int32_t id) {
  return (static_cast<uint64_t>(hi) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ uint64_t ValueKey(float v, int32_t id) {
  return MakeKey(OrderedBits(v), id);
}
// Weights are >= 0, so their bits already order them; shifted left a bit so that the first
// radix digit holds 3 mantissa bits instead of a constant sign bit.
__device__ __forceinline__ uint64_t WeightKey(float w, int32_t id) {
  return MakeKey(__float_as_uint(w) << 1, id);
}
__device__ __forceinline__ int32_t KeyId(uint64_t key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}
__device__ __forceinline__ float KeyValue(uint64_t key) {
  return FromOrderedBits(static_cast<uint32_t>(key >> 32));
}
__device__ __forceinline__ float KeyWeight(uint64_t key) {
  return __uint_as_float(static_cast<uint32_t>(key >> 33));
}

// A weight in [0, 1] as an integer number of 2^-80 (exact for weights >= 2^-56; smaller ones lose
// their last bits, far below what double sums resolve). A sum of 2^18 of them fits in 99 bits.
__device__ __forceinline__ u128 WeightUnits(float w) {
  const double scaled = static_cast<double>(w) * 0x1p40;  // exact
  const double hi = floor(scaled);
  const double lo = (scaled - hi) * 0x1p40;  // exact: at most 24 significant bits
  return (static_cast<u128>(static_cast<uint64_t>(hi)) << 40) + static_cast<uint64_t>(lo);
}
__device__ __forceinline__ double UnitsToDouble(u128 x) {
  return (static_cast<double>(static_cast<uint64_t>(x >> 64)) * 0x1p64 +
          static_cast<double>(static_cast<uint64_t>(x))) *
         0x1p-80;
}
// The smallest unit count >= d * 2^80 (d >= 0), so that "units >= result" is "mass >= d".
__device__ __forceinline__ u128 CeilUnits(double d) {
  if (!(d > 0.0)) return 0;
  int exp2 = 0;
  const double frac = frexp(d, &exp2);  // d = frac * 2^exp2, frac in [0.5, 1)
  const uint64_t mant = static_cast<uint64_t>(ldexp(frac, 53));
  const int shift = exp2 + 80 - 53;
  if (shift >= 0) return static_cast<u128>(mant) << shift;
  const int down = -shift;
  if (down >= 64) return 1;
  const uint64_t q = mant >> down;
  return static_cast<u128>(q + ((q << down) != mant ? 1 : 0));
}

// sampler.h: softmax weight exp(v - vmax), with v == vmax giving 1 even for infinities.
__device__ __forceinline__ float Weight(float v, float vmax) {
  return v == vmax ? 1.0f : static_cast<float>(exp(static_cast<double>(v - vmax)));
}

// ---- block primitives ----------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T ShflUp(T x, int d) {
  if constexpr (sizeof(T) == 16) {
    const uint64_t lo = __shfl_up_sync(0xffffffffu, static_cast<uint64_t>(x), d);
    const uint64_t hi = __shfl_up_sync(0xffffffffu, static_cast<uint64_t>(x >> 64), d);
    return (static_cast<u128>(hi) << 64) | lo;
  } else {
    return __shfl_up_sync(0xffffffffu, x, d);
  }
}

// Exclusive prefix sum over the block in thread order; *total gets the sum. Every thread calls.
template <typename T>
__device__ T BlockExclusiveSum(T x, T* total) {
  __shared__ T warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inc = x;
  for (int d = 1; d < 32; d <<= 1) {
    const T y = ShflUp(inc, d);
    if (lane >= d) inc += y;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  T before = 0, all = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) before += warp_sums[w];
    all += warp_sums[w];
  }
  __syncthreads();
  *total = all;
  return before + inc - x;
}

template <typename T, typename Op>
__device__ T BlockReduce(T x, Op op) {
  __shared__ T warp_vals[kThreads / 32];
  for (int d = 16; d > 0; d >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, d));
  if ((threadIdx.x & 31) == 0) warp_vals[threadIdx.x >> 5] = x;
  __syncthreads();
  T r = warp_vals[0];
  for (int w = 1; w < kThreads / 32; ++w) r = op(r, warp_vals[w]);
  __syncthreads();
  return r;
}
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

__device__ u128 BlockSumUnits(u128 x) {
  u128 total;
  BlockExclusiveSum(x, &total);
  return total;
}

// Sorts keys[0, n) descending in place; n a power of two. Every thread calls.
__device__ void BitonicSortDesc(uint64_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n / 2; i += kThreads) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a < b) == desc) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ int NextPow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- row access ----------------------------------------------------------------------------

// A row of logits read four consecutive ids at a time (16-byte loads when aligned).
struct RowReader {
  const float* row;
  int32_t vocab;
  bool aligned;
  __device__ int32_t NumGroups() const { return (vocab + 3) / 4; }
  // x[j] = row[4 g + j], -inf past the end.
  __device__ __forceinline__ void Load(int32_t g, float x[4]) const {
    const int32_t base = 4 * g;
    if (aligned && base + 4 <= vocab) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(row + base));
      x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
    } else {
      for (int j = 0; j < 4; ++j) x[j] = base + j < vocab ? __ldg(row + base + j) : kNegInf;
    }
  }
};

__device__ __forceinline__ RowReader MakeReader(const float* row, int32_t vocab, bool stride_ok) {
  return {row, vocab, stride_ok && (reinterpret_cast<uintptr_t>(row) & 15) == 0};
}

// ---- workspace -----------------------------------------------------------------------------

struct ScorePartial {
  uint64_t argmax_key;  // 0 = none
  float max_logit;      // of the split's finite logits (-inf if none)
  int32_t num_larger;   // raw logits > the target's
  double sum_exp;       // sum of exp(x - max_logit)
  int32_t num_top;
  uint64_t top[kMaxTopLogprobs];
};

struct Workspace {
  float* processed;        // [max_rows, vocab]
  int32_t* marks;          // [max_rows, vocab]: penalty counts, valid only at listed ids
  int32_t* tokens;         // [max_rows]: SelectKernel's choice, -1 = the raw argmax
  ScorePartial* partials;  // [max_rows, kMaxSplits]
};

size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

Workspace CarveWorkspace(void* base, int32_t max_rows, int32_t vocab) {
  char* p = static_cast<char*>(base);
  Workspace ws;
  const size_t plane = Align256(sizeof(float) * static_cast<size_t>(max_rows) * vocab);
  ws.processed = reinterpret_cast<float*>(p);
  ws.marks = reinterpret_cast<int32_t*>(p + plane);
  ws.tokens = reinterpret_cast<int32_t*>(p + 2 * plane);
  ws.partials = reinterpret_cast<ScorePartial*>(p + 2 * plane + Align256(4 * max_rows));
  return ws;
}

size_t WorkspaceBytes(int32_t max_rows, int32_t vocab) {
  const size_t plane = Align256(sizeof(float) * static_cast<size_t>(max_rows) * vocab);
  return 2 * plane + Align256(4 * max_rows) +
         Align256(sizeof(ScorePartial) * static_cast<size_t>(max_rows) * kMaxSplits);
}

__device__ __forceinline__ bool NeedsPenalties(const SamplingRow& r) {
  const bool has_tokens = r.output_end > r.output_begin;
  return r.bias_end > r.bias_begin || r.banned_end > r.banned_begin ||
         (r.repetition_penalty != 1.0f && (has_tokens || r.prompt_end > r.prompt_begin)) ||
         ((r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f) && has_tokens);
}

// ---- 1. penalties --------------------------------------------------------------------------

// Ids outside [0, vocab) are skipped (the launcher cannot read device lists to reject them).
__global__ void __launch_bounds__(kThreads) PenaltyKernel(SamplingInputs in, Workspace ws) {
  PdlWait();
  PdlLaunchDependents();
  const int32_t r = blockIdx.x;
  const SamplingRow row = in.rows[r];
  if (!NeedsPenalties(row)) return;
  const int32_t vocab = in.vocab_size;
  const float* src = in.logits + r * in.logits_stride;
  float* dst = ws.processed + static_cast<int64_t>(r) * vocab;
  int32_t* marks = ws.marks + static_cast<int64_t>(r) * vocab;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) {  // in list order: a repeated id adds its biases in the CPU's order
    for (int32_t j = row.bias_begin; j < row.bias_end; ++j) {
      const int32_t id = in.bias_ids[j];
      if (id >= 0 && id < vocab) dst[id] = __fadd_rn(dst[id], in.bias_values[j]);
    }
  }
  __syncthreads();
  for (int32_t j = row.banned_begin + threadIdx.x; j < row.banned_end; j += kThreads) {
    const int32_t id = in.banned_ids[j];
    if (id >= 0 && id < vocab) dst[id] = kNegInf;
  }
  const float rp = row.repetition_penalty;
  const float fp = row.frequency_penalty, pp = row.presence_penalty;
  const bool use_rp = rp != 1.0f;
  const bool use_fp = fp != 0.0f || pp != 0.0f;
  if (!use_rp && !use_fp) return;
  // The listed ids: the prompt's (only for the repetition penalty), then the output's.
  const int32_t prompt_len = use_rp ? row.prompt_end - row.prompt_begin : 0;
  const int32_t num_listed = prompt_len + row.output_end - row.output_begin;
  auto listed = [&](int32_t j) {
    return j < prompt_len ? in.token_ids[row.prompt_begin + j]
                          : in.token_ids[row.output_begin + j - prompt_len];
  };
  // marks[id] counts id's output occurrences; no clearing needed since only listed ids are read,
  // and each is zeroed first. Then the first lister to set the sign bit penalizes the id once.
  __syncthreads();
  for (int32_t j = threadIdx.x; j < num_listed; j += kThreads) {
    const int32_t id = listed(j);
    if (id >= 0 && id < vocab) marks[id] = 0;
  }
  __syncthreads();
  for (int32_t j = prompt_len + threadIdx.x; j < num_listed; j += kThreads) {
    const int32_t id = listed(j);
    if (id >= 0 && id < vocab) atomicAdd(&marks[id], 1);
  }
  __syncthreads();
  for (int32_t j = threadIdx.x; j < num_listed; j += kThreads) {
    const int32_t id = listed(j);
    if (id < 0 || id >= vocab) continue;
    const int32_t count = atomicOr(&marks[id], static_cast<int32_t>(0x80000000u));
    if (count < 0) continue;  // another lister owns this id
    float x = dst[id];
    if (use_rp) x = x > 0.0f ? __fdiv_rn(x, rp) : __fmul_rn(x, rp);
    if (use_fp && count > 0) {
      x = __fsub_rn(x, __fadd_rn(__fmul_rn(fp, static_cast<float>(count)), pp));
    }
    dst[id] = x;
  }
}

// ---- 2. selection --------------------------------------------------------------------------

struct SelectShared {
  union {
    struct {
      uint32_t count[kBins];
      unsigned long long mass_hi[kBins];  // weight units >> 40 summed
      unsigned long long mass_lo[kBins];  // weight units & (2^40 - 1) summed
    } hist;
    uint64_t keys[kGatherCap];
  };
  int32_t num_keys;
  // The bin (or sorted position) that holds the cut.
  int32_t found;
  uint32_t sel_bin;
  uint32_t sel_count;
  uint64_t sel_count_before;
  u128 sel_mass_before;
  u128 sel_mass;
  uint64_t result;
};

// Which tokens are still in the running and their keys, for one row of a SelectKernel block.
struct Candidates {
  RowReader reader;
  float temperature;
  float vmax;
  uint64_t top_k_cut;  // keep ValueKey >= this (0: all)
  uint64_t top_p_cut;  // keep WeightKey >= this (0: all)
  float min_p;         // keep w >= this (<= 0: all)

  // The candidate's scaled logit, or false if it is out (banned/-inf or below a cut so far).
  __device__ __forceinline__ bool Scaled(float x, int32_t id, float* v) const {
    if (x == kNegInf || id >= reader.vocab) return false;
    *v = __fdiv_rn(x, temperature);
    return ValueKey(*v, id) >= top_k_cut;
  }
  __device__ __forceinline__ bool Weighted(float x, int32_t id, float* w) const {
    float v;
    if (!Scaled(x, id, &v)) return false;
    *w = Weight(v, vmax);
    return WeightKey(*w, id) >= top_p_cut && (min_p <= 0.0f || *w >= min_p);
  }
};

// The radix select (file comment). kMass: keys are WeightKeys, `need` is weight units (the cut is
// the first key where the running weight reaches need; need >= 1); else `need` is a count (the
// cut is the need-th key). KeyFn(x, id, &key) -> bool (in the set). Returns the cut; *prefix_mass
// gets the weight of the keys >= the cut (kMass only).
template <bool kMass, typename KeyFn>
__device__ uint64_t RadixSelect(const RowReader& reader, KeyFn key_fn, u128 need, SelectShared& sh,
                                u128* prefix_mass) {
  // Digits over the key: the value's 32 bits (11, 11, 10), then the id's 18 low bits (9, 9); the
  // id's bits 31..18 of (0xFFFFFFFF - id) are always set (vocab < 2^18).
  constexpr int kShift[5] = {53, 42, 32, 9, 0};
  constexpr int kWidth[5] = {11, 11, 10, 9, 9};
  uint64_t prefix = 0, mask = 0;
  u128 above = 0;  // count or mass of the keys above the current range
  for (int level = 0; level < 5; ++level) {
    const int shift = kShift[level];
    const uint32_t bin_mask = (1u << kWidth[level]) - 1;
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      sh.hist.count[b] = 0;
      if (kMass) sh.hist.mass_hi[b] = sh.hist.mass_lo[b] = 0;
    }
    if (threadIdx.x == 0) sh.found = 0;
    __syncthreads();
    for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
      float x[4];
      reader.Load(g, x);
      for (int j = 0; j < 4; ++j) {
        uint64_t key;
        if (!key_fn(x[j], 4 * g + j, &key) || (key & mask) != prefix) continue;
        const uint32_t bin = static_cast<uint32_t>(key >> shift) & bin_mask;
        atomicAdd(&sh.hist.count[bin], 1u);
        if (kMass) {
          const u128 units = WeightUnits(KeyWeight(key));
          atomicAdd(&sh.hist.mass_hi[bin], static_cast<unsigned long long>(units >> 40));
          atomicAdd(&sh.hist.mass_lo[bin],
                    static_cast<unsigned long long>(units & ((u128{1} << 40) - 1)));
        }
      }
    }
    __syncthreads();
    // Bins best first: thread t holds bins nb-1-4t .. nb-4-4t.
    constexpr int kPer = kBins / kThreads;
    const int nb = static_cast<int>(bin_mask) + 1;
    u128 mine[kPer];
    u128 local = 0;
    for (int j = 0; j < kPer; ++j) {
      const int b = nb - 1 - (kPer * threadIdx.x + j);
      mine[j] = 0;
      if (b >= 0) {
        mine[j] = kMass ? (static_cast<u128>(sh.hist.mass_hi[b]) << 40) + sh.hist.mass_lo[b]
                        : static_cast<u128>(sh.hist.count[b]);
      }
      local += mine[j];
    }
    u128 total;
    u128 run = above + BlockExclusiveSum(local, &total);
    for (int j = 0; j < kPer; ++j) {
      const int b = nb - 1 - (kPer * threadIdx.x + j);
      if (b >= 0 && run < need && run + mine[j] >= need) {
        sh.found = 1;
        sh.sel_bin = b;
        sh.sel_count = sh.hist.count[b];
        sh.sel_mass_before = run;
        sh.sel_mass = mine[j];
      }
      run += mine[j];
    }
    __syncthreads();
    if (!sh.found) {  // the set holds less than need (rounding of a top-p target): keep all
      *prefix_mass = above + total;
      return 0;
    }
    const uint32_t bin = sh.sel_bin, bin_count = sh.sel_count;
    above = sh.sel_mass_before;
    const u128 bin_amount = sh.sel_mass;
    __syncthreads();
    prefix |= static_cast<uint64_t>(bin) << shift;
    mask |= static_cast<uint64_t>(bin_mask) << shift;
    if (level == 2) {
      prefix |= 0xfffc0000ull;
      mask |= 0xfffc0000ull;
    }
    // The whole bin is in the prefix: the cut is its lowest possible key.
    if ((!kMass && above + bin_amount == need) || bin_count == 1 || level == 4) {
      *prefix_mass = above + bin_amount;
      return prefix;
    }
    if (bin_count <= kGatherCap) {
      if (threadIdx.x == 0) sh.num_keys = 0;
      __syncthreads();
      for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
        float x[4];
        reader.Load(g, x);
        for (int j = 0; j < 4; ++j) {
          uint64_t key;
          if (key_fn(x[j], 4 * g + j, &key) && (key & mask) == prefix) {
            sh.keys[atomicAdd(&sh.num_keys, 1)] = key;
          }
        }
      }
      __syncthreads();
      const int n = sh.num_keys, n2 = NextPow2(n);
      for (int i = n + threadIdx.x; i < n2; i += kThreads) sh.keys[i] = 0;
      __syncthreads();
      BitonicSortDesc(sh.keys, n2);
      if (threadIdx.x == 0) {  // defaults, should rounding leave no crossing
        sh.result = sh.keys[n - 1];
        sh.sel_mass = above + bin_amount;
      }
      __syncthreads();
      // The position where the running amount reaches need; thread t holds a run of positions.
      const int per = (n + kThreads - 1) / kThreads;
      const int first = per * threadIdx.x;
      u128 amount = 0;
      for (int i = first; i < first + per && i < n; ++i) {
        amount += kMass ? WeightUnits(KeyWeight(sh.keys[i])) : u128{1};
      }
      u128 unused;
      u128 cum = above + BlockExclusiveSum(amount, &unused);
      for (int i = first; i < first + per && i < n; ++i) {
        const u128 next = cum + (kMass ? WeightUnits(KeyWeight(sh.keys[i])) : u128{1});
        if (cum < need && next >= need) {
          sh.result = sh.keys[i];
          sh.sel_mass = next;
        }
        cum = next;
      }
      __syncthreads();
      const uint64_t cut = sh.result;
      *prefix_mass = sh.sel_mass;
      __syncthreads();
      return cut;
    }
  }
  return prefix;  // not reached: level 4 returns
}

// The race of sampler.h for one candidate: its score p / E (>= 0), or -1 if p == 0.
__device__ __forceinline__ float RaceScore(float w, double weight_sum, float u) {
  const float p = static_cast<float>(static_cast<double>(w) / weight_sum);
  if (!(p > 0.0f)) return -1.0f;
  const float e = u < 1.0f ? -static_cast<float>(log(static_cast<double>(u))) : 0x1p-25f;
  return __fdiv_rn(p, e);
}

__device__ __forceinline__ uint64_t ScoreKey(float score, int32_t id) {
  return score < 0.0f ? 0 : ValueKey(score, id);
}

// The token of one temperature > 0 row, or -1 when every candidate is out.
__device__ int32_t SampleRow(const SamplingRow& row, const RowReader& reader, SelectShared& sh) {
  Candidates c{reader, row.temperature, 0.0f, 0, 0, 0.0f};
  // Pass 1: the number of candidates and the best scaled logit.
  uint64_t best = 0;
  uint32_t num_candidates = 0;
  for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
    float x[4];
    reader.Load(g, x);
    for (int j = 0; j < 4; ++j) {
      float v;
      if (c.Scaled(x[j], 4 * g + j, &v)) {
        ++num_candidates;
        best = Max(best, ValueKey(v, 4 * g + j));
      }
    }
  }
  best = BlockReduce(best, MaxOp{});
  num_candidates = BlockReduce(num_candidates, SumOp{});
  if (num_candidates == 0) return -1;
  c.vmax = KeyValue(best);

  const int32_t k = row.top_k;
  const bool use_top_k = k > 0 && static_cast<uint32_t>(k) < num_candidates;
  if (use_top_k) {
    u128 unused;
    c.top_k_cut = RadixSelect<false>(
        reader,
        [&](float x, int32_t id, uint64_t* key) {
          float v;
          if (!c.Scaled(x, id, &v)) return false;
          *key = ValueKey(v, id);
          return true;
        },
        static_cast<u128>(k), sh, &unused);
  }

  if (use_top_k && k <= kGatherCap) {
    // The k survivors fit in shared memory: softmax, top-p, min-p and the race run there.
    if (threadIdx.x == 0) sh.num_keys = 0;
    __syncthreads();
    for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
      float x[4];
      reader.Load(g, x);
      for (int j = 0; j < 4; ++j) {
        float v;
        if (c.Scaled(x[j], 4 * g + j, &v)) {
          sh.keys[atomicAdd(&sh.num_keys, 1)] = WeightKey(Weight(v, c.vmax), 4 * g + j);
        }
      }
    }
    __syncthreads();
    const int n = sh.num_keys, n2 = NextPow2(n);
    for (int i = n + threadIdx.x; i < n2; i += kThreads) sh.keys[i] = 0;
    __syncthreads();
    BitonicSortDesc(sh.keys, n2);  // (w desc, id asc): top_p's order
    const int per = (n + kThreads - 1) / kThreads;
    const int first = per * threadIdx.x;
    u128 amount = 0;
    for (int i = first; i < first + per && i < n; ++i) amount += WeightUnits(KeyWeight(sh.keys[i]));
    u128 total;
    const u128 before = BlockExclusiveSum(amount, &total);
    // Survivors: the shortest prefix reaching the top-p target, then w >= min_p (a prefix too).
    const u128 need =
        row.top_p < 1.0f
            ? Max(CeilUnits((static_cast<double>(row.top_p) - 1e-6) * UnitsToDouble(total)),
                  u128{1})
            : total + 1;
    if (threadIdx.x == 0) sh.found = n;
    __syncthreads();
    u128 cum = before;
    for (int i = first; i < first + per && i < n; ++i) {
      const float w = KeyWeight(sh.keys[i]);
      const u128 next = cum + WeightUnits(w);
      if (cum < need && next >= need) atomicMin(&sh.found, i + 1);
      if (row.min_p > 0.0f && w < row.min_p) atomicMin(&sh.found, i);
      cum = next;
    }
    __syncthreads();
    const int num_kept = max(sh.found, 1);
    // The kept weight: the prefix sum up to num_kept.
    u128 kept_amount = 0;
    for (int i = first; i < first + per && i < num_kept; ++i) {
      kept_amount += WeightUnits(KeyWeight(sh.keys[i]));
    }
    const double weight_sum = UnitsToDouble(BlockSumUnits(kept_amount));
    uint64_t winner = 0;
    for (int i = threadIdx.x; i < num_kept; i += kThreads) {
      const int32_t id = KeyId(sh.keys[i]);
      const Philox4x32Block words = SamplerRandomWords(
          row.seed, static_cast<uint64_t>(row.rng_position), static_cast<uint32_t>(id) / 4);
      const float u = UniformFloat(words.w[id % 4]);
      winner = Max(winner, ScoreKey(RaceScore(KeyWeight(sh.keys[i]), weight_sum, u), id));
    }
    winner = BlockReduce(winner, MaxOp{});
    return winner == 0 ? -1 : KeyId(winner);
  }

  // The general case: the survivors are a predicate over the row; one pass per step.
  c.min_p = row.min_p;
  u128 min_p_mass = 0;  // of the candidates with w >= min_p (all when min_p <= 0)
  for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
    float x[4];
    reader.Load(g, x);
    for (int j = 0; j < 4; ++j) {
      float w;
      if (c.Weighted(x[j], 4 * g + j, &w)) min_p_mass += WeightUnits(w);
    }
  }
  min_p_mass = BlockSumUnits(min_p_mass);
  u128 kept_mass = min_p_mass;
  if (row.top_p < 1.0f) {
    // The total weight for the target: min_p == 0 makes min_p_mass the total, else another pass.
    u128 total = min_p_mass;
    if (row.min_p > 0.0f) {
      Candidates all = c;
      all.min_p = 0.0f;
      total = 0;
      for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
        float x[4];
        reader.Load(g, x);
        for (int j = 0; j < 4; ++j) {
          float w;
          if (all.Weighted(x[j], 4 * g + j, &w)) total += WeightUnits(w);
        }
      }
      total = BlockSumUnits(total);
    }
    const u128 need =
        Max(CeilUnits((static_cast<double>(row.top_p) - 1e-6) * UnitsToDouble(total)), u128{1});
    Candidates all = c;
    all.min_p = 0.0f;
    u128 top_p_mass;
    c.top_p_cut = RadixSelect<true>(
        reader,
        [&](float x, int32_t id, uint64_t* key) {
          float w;
          if (!all.Weighted(x, id, &w)) return false;
          *key = WeightKey(w, id);
          return true;
        },
        need, sh, &top_p_mass);
    // min_p and top_p both keep a prefix in weight order: the shorter one is the survivors.
    if (!(row.min_p > 0.0f && KeyWeight(c.top_p_cut) < row.min_p)) kept_mass = top_p_mass;
  }
  const double weight_sum = UnitsToDouble(kept_mass);
  uint64_t winner = 0;
  for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
    float x[4];
    reader.Load(g, x);
    Philox4x32Block words;
    bool have_words = false;
    for (int j = 0; j < 4; ++j) {
      float w;
      if (!c.Weighted(x[j], 4 * g + j, &w)) continue;
      if (!have_words) {
        words = SamplerRandomWords(row.seed, static_cast<uint64_t>(row.rng_position),
                                   static_cast<uint32_t>(g));
        have_words = true;
      }
      winner = Max(winner, ScoreKey(RaceScore(w, weight_sum, UniformFloat(words.w[j])), 4 * g + j));
    }
  }
  winner = BlockReduce(winner, MaxOp{});
  return winner == 0 ? -1 : KeyId(winner);
}

__global__ void __launch_bounds__(kThreads) SelectKernel(SamplingInputs in, Workspace ws) {
  __shared__ SelectShared sh;
  PdlWait();
  PdlLaunchDependents();
  const int32_t r = blockIdx.x;
  const SamplingRow row = in.rows[r];
  const bool penalized = NeedsPenalties(row);
  if (row.temperature == 0.0f && !penalized) {
    if (threadIdx.x == 0) ws.tokens[r] = -1;
    return;
  }
  const RowReader reader =
      penalized
          ? MakeReader(ws.processed + static_cast<int64_t>(r) * in.vocab_size, in.vocab_size,
                       in.vocab_size % 4 == 0)
          : MakeReader(in.logits + r * in.logits_stride, in.vocab_size, in.logits_stride % 4 == 0);
  int32_t token;
  if (row.temperature == 0.0f) {
    uint64_t best = 0;
    for (int32_t g = threadIdx.x; g < reader.NumGroups(); g += kThreads) {
      float x[4];
      reader.Load(g, x);
      for (int j = 0; j < 4; ++j) {
        if (x[j] != kNegInf && 4 * g + j < reader.vocab)
          best = Max(best, ValueKey(x[j], 4 * g + j));
      }
    }
    best = BlockReduce(best, MaxOp{});
    token = best == 0 ? -1 : KeyId(best);
  } else {
    token = SampleRow(row, reader, sh);
  }
  if (threadIdx.x == 0) ws.tokens[r] = token;
}

// ---- 3. score ------------------------------------------------------------------------------

struct ScoreShared {
  uint64_t keys[2 * kScoreChunk];
  int32_t num_keys;
  uint64_t threshold;
  ScorePartial partial;  // when the row has one split
};

// Keeps the best num_top keys of a stream, chunk by chunk: keys above the threshold (the
// num_top-th best so far) are appended; when the buffer passes one chunk it is sorted and cut.
__device__ void PruneTop(ScoreShared& sh, int num_top, bool final) {
  __syncthreads();
  const int n = sh.num_keys;
  if (n > kScoreChunk || (final && n > 0)) {
    const int n2 = NextPow2(n);
    for (int i = n + threadIdx.x; i < n2; i += kThreads) sh.keys[i] = 0;
    __syncthreads();
    BitonicSortDesc(sh.keys, n2);
    if (threadIdx.x == 0) {
      sh.num_keys = min(n, num_top);
      if (n >= num_top) sh.threshold = sh.keys[num_top - 1];
    }
  }
  __syncthreads();
}

// Merges a row's partials into *out (cpu::Score's fields). `keys` is shared memory for
// kMaxSplits * kMaxTopLogprobs keys, rounded up to a power of two. Every thread calls.
__device__ void FinalizeRow(const ScorePartial* parts, int32_t splits, const float* row,
                            int32_t vocab, int32_t target, int32_t num_top, uint64_t* keys,
                            SampledToken* out) {
  float max_logit = kNegInf;
  uint64_t best = 0;
  int32_t num_larger = 0, n = 0;
  for (int s = 0; s < splits; ++s) {
    max_logit = fmaxf(max_logit, parts[s].max_logit);
    best = Max(best, parts[s].argmax_key);
    num_larger += parts[s].num_larger;
    n += parts[s].num_top;
  }
  double sum = 0.0;
  for (int s = 0; s < splits; ++s) {
    if (parts[s].max_logit != kNegInf) {
      sum += parts[s].sum_exp * exp(static_cast<double>(parts[s].max_logit) - max_logit);
    }
  }
  const double log_sum = log(sum) + max_logit;
  const int n2 = NextPow2(Max(n, 1));
  for (int i = threadIdx.x; i < n2; i += kThreads) keys[i] = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0;
    for (int s = 0; s < splits; ++s) {
      for (int i = 0; i < parts[s].num_top; ++i) keys[at++] = parts[s].top[i];
    }
  }
  __syncthreads();
  if (splits > 1) BitonicSortDesc(keys, n2);  // one split's list is sorted already
  if (threadIdx.x != 0) return;
  const bool is_argmax = target < 0;
  const int32_t token = is_argmax ? KeyId(best) : target;
  out->token_id = token;
  out->rank = is_argmax ? 1 : num_larger + 1;
  out->logprob = token < vocab ? static_cast<float>(static_cast<double>(row[token]) - log_sum)
                               : __int_as_float(0x7fc00000);
  out->num_top = min(num_top, n);
  for (int i = 0; i < kMaxTopLogprobs; ++i) {
    const bool has = i < out->num_top;
    out->top_ids[i] = has ? KeyId(keys[i]) : -1;
    out->top_logprobs[i] =
        has ? static_cast<float>(static_cast<double>(KeyValue(keys[i])) - log_sum) : 0.0f;
  }
}

constexpr int kMergeKeys = 1024;  // >= kMaxSplits * kMaxTopLogprobs, a power of two
static_assert(kMergeKeys >= kMaxSplits * kMaxTopLogprobs && kMergeKeys <= 2 * kScoreChunk);

// Grid (splits, rows): split s of row r covers groups [s * per, (s + 1) * per). A target < 0
// stands for the raw argmax. With one split the block writes out[r] itself; else it leaves its
// partial in `partials` for FinalizeKernel.
__global__ void __launch_bounds__(kThreads)
    ScoreKernel(const float* logits, int64_t stride, int32_t vocab, const int32_t* targets,
                const SamplingRow* rows, int32_t uniform_num_top, ScorePartial* partials,
                SampledToken* out) {
  __shared__ ScoreShared sh;
  PdlWait();
  PdlLaunchDependents();
  const int32_t r = blockIdx.y, split = blockIdx.x, splits = gridDim.x;
  const RowReader reader = MakeReader(logits + r * stride, vocab, stride % 4 == 0);
  const int32_t num_top = min(rows ? rows[r].num_top_logprobs : uniform_num_top, kMaxTopLogprobs);
  const int32_t target = targets[r];
  const bool has_target = target >= 0 && target < vocab;
  const float target_logit = has_target ? reader.row[target] : 0.0f;
  const int32_t groups = reader.NumGroups();
  const int32_t per = (groups + splits - 1) / splits;
  const int32_t g_begin = min(groups, split * per), g_end = min(groups, g_begin + per);
  if (threadIdx.x == 0) {
    sh.num_keys = 0;
    sh.threshold = 0;
  }
  __syncthreads();
  uint64_t best = 0;
  float m = kNegInf;
  double s = 0.0;
  int32_t num_larger = 0;
  // Every thread runs the same number of chunks (PruneTop synchronizes).
  for (int32_t base = g_begin; base < g_end; base += kThreads) {
    const int32_t g = base + threadIdx.x;
    if (g < g_end) {
      float x[4];
      reader.Load(g, x);
      for (int j = 0; j < 4; ++j) {
        const int32_t id = 4 * g + j;
        if (id >= vocab) continue;
        const uint64_t key = ValueKey(x[j], id);
        best = Max(best, key);
        num_larger += x[j] > target_logit ? 1 : 0;
        if (x[j] > m) {
          s = s * static_cast<double>(expf(m - x[j])) + 1.0;
          m = x[j];
        } else if (x[j] != kNegInf) {
          s += static_cast<double>(expf(x[j] - m));
        }
        if (num_top > 0 && key > sh.threshold) sh.keys[atomicAdd(&sh.num_keys, 1)] = key;
      }
    }
    if (num_top > 0) PruneTop(sh, num_top, false);
  }
  if (num_top > 0) PruneTop(sh, num_top, true);
  // Merge the threads' (m, s) in double.
  const float block_max = BlockReduce(m, MaxOp{});
  const double scaled = m == kNegInf ? 0.0 : s * exp(static_cast<double>(m) - block_max);
  const double block_sum = BlockReduce(scaled, SumOp{});
  best = BlockReduce(best, MaxOp{});
  num_larger = BlockReduce(num_larger, SumOp{});
  ScorePartial* p =
      splits == 1 ? &sh.partial : &partials[static_cast<int64_t>(r) * kMaxSplits + split];
  if (threadIdx.x == 0) {
    p->argmax_key = best;
    p->max_logit = block_max;
    p->sum_exp = block_sum;
    p->num_larger = has_target ? num_larger : 0;
    p->num_top = num_top > 0 ? sh.num_keys : 0;
    for (int i = 0; i < p->num_top; ++i) p->top[i] = sh.keys[i];
  }
  if (splits > 1) return;
  __syncthreads();
  // NOTE: the merge buffer reuses the key buffer; the partial holds what is needed of it.
  FinalizeRow(p, 1, reader.row, vocab, target, num_top, sh.keys, out + r);
}

// A block per row: merges the splits' partials into out[r].
__global__ void __launch_bounds__(kThreads)
    FinalizeKernel(const float* logits, int64_t stride, int32_t vocab, int32_t splits,
                   const int32_t* targets, const SamplingRow* rows, int32_t uniform_num_top,
                   const ScorePartial* partials, SampledToken* out) {
  __shared__ uint64_t keys[kMergeKeys];
  __shared__ ScorePartial parts[kMaxSplits];
  PdlWait();
  PdlLaunchDependents();
  const int32_t r = blockIdx.x;
  const int32_t num_top = min(rows ? rows[r].num_top_logprobs : uniform_num_top, kMaxTopLogprobs);
  // Every split's partial into shared memory at once: one round trip to L2, where FinalizeRow's
  // loops over them in global memory made about one a split.
  static_assert(sizeof(ScorePartial) % sizeof(uint64_t) == 0);
  constexpr int kWords = sizeof(ScorePartial) / sizeof(uint64_t);
  const auto* src =
      reinterpret_cast<const uint64_t*>(partials + static_cast<int64_t>(r) * kMaxSplits);
  auto* dst = reinterpret_cast<uint64_t*>(parts);
  for (int i = threadIdx.x; i < splits * kWords; i += kThreads) dst[i] = src[i];
  __syncthreads();
  FinalizeRow(parts, splits, logits + r * stride, vocab, targets[r], num_top, keys, out + r);
}

// Blocks per row for the score pass: enough rows x splits to cover the SMs twice, at least
// 8192 logits per block.
int32_t NumSplits(int32_t num_rows, int32_t vocab) {
  const int32_t sms = CurrentDeviceSmCount();
  const int32_t want = (2 * sms + num_rows - 1) / num_rows;
  const int32_t most = (vocab + 8191) / 8192;
  return std::max(1, std::min({want, most, kMaxSplits}));
}

}  // namespace

size_t SamplingWorkspaceBytes(int32_t max_rows, int32_t vocab_size) {
  return WorkspaceBytes(std::max(max_rows, 0), std::max(vocab_size, 0));
}

cudaError_t SampleRows(const SamplingInputs& in, void* workspace, size_t workspace_bytes,
                       SampledToken* out, cudaStream_t stream) {
  if (in.num_rows < 0 || in.vocab_size <= 0 || in.vocab_size > kMaxVocab ||
      in.logits_stride < in.vocab_size || in.logits == nullptr || in.rows == nullptr ||
      out == nullptr || workspace == nullptr ||
      workspace_bytes < SamplingWorkspaceBytes(in.num_rows, in.vocab_size)) {
    return cudaErrorInvalidValue;
  }
  if (in.num_rows == 0) return cudaSuccess;
  // NOTE: carved for num_rows rows: SamplingWorkspaceBytes(max_rows) covers any smaller batch.
  const Workspace ws = CarveWorkspace(workspace, in.num_rows, in.vocab_size);
  // Chained (launch.cuh): each kernel's blocks are scheduled while the one before finishes.
  cudaError_t e = LaunchChained(PenaltyKernel, in.num_rows, kThreads, 0, stream, in, ws);
  if (e == cudaSuccess) e = LaunchChained(SelectKernel, in.num_rows, kThreads, 0, stream, in, ws);
  const int32_t splits = NumSplits(in.num_rows, in.vocab_size);
  if (e == cudaSuccess) {
    e = LaunchChained(ScoreKernel, dim3(splits, in.num_rows), kThreads, 0, stream, in.logits,
                      in.logits_stride, in.vocab_size, ws.tokens, in.rows, 0, ws.partials, out);
  }
  if (e == cudaSuccess && splits > 1) {
    e = LaunchChained(FinalizeKernel, in.num_rows, kThreads, 0, stream, in.logits, in.logits_stride,
                      in.vocab_size, splits, ws.tokens, in.rows, 0, ws.partials, out);
  }
  return e;
}

cudaError_t ScoreRows(const float* logits, int64_t logits_stride, int32_t num_rows,
                      int32_t vocab_size, const int32_t* targets, int32_t num_top,
                      SampledToken* out, cudaStream_t stream) {
  if (num_rows < 0 || vocab_size <= 0 || vocab_size > kMaxVocab || logits_stride < vocab_size ||
      num_top < 0 || num_top > kMaxTopLogprobs || (num_rows > 0 && (!logits || !targets || !out))) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0) return cudaSuccess;
  // NOTE: no workspace here, so a block per row (prompt logprobs come many rows at a time).
  ScoreKernel<<<dim3(1, num_rows), kThreads, 0, stream>>>(logits, logits_stride, vocab_size,
                                                          targets, nullptr, num_top, nullptr, out);
  return cudaGetLastError();
}

__global__ void ResolvePreviousTokensKernel(int32_t* token_ids, int32_t num_tokens,
                                            const SampledToken* previous) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < num_tokens && token_ids[i] < 0) token_ids[i] = previous[-1 - token_ids[i]].token_id;
}

cudaError_t ResolvePreviousTokens(int32_t* token_ids, int32_t num_tokens,
                                  const SampledToken* previous, cudaStream_t stream) {
  if (num_tokens < 0 || (num_tokens > 0 && (!token_ids || !previous))) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  constexpr int kBlock = 256;
  ResolvePreviousTokensKernel<<<(num_tokens + kBlock - 1) / kBlock, kBlock, 0, stream>>>(
      token_ids, num_tokens, previous);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
