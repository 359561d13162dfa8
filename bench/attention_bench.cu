// attention_bench: paged attention kernels (src/kernels/attention.h) against their rooflines,
// both measured in the same run: device-to-device copy bandwidth (read + write bytes) and cuBLAS
// bf16 GEMM at 8192^3.
//
//   attention_bench [--json PATH] [--split-sweep] [--block-sweep] [--decode-only] [--fp8-kv]
//                   [--engine-like [--auto-splits-only]] [--prefill]
//
// --decode-only: decode at batch 64 and 256 x 1,024 and 224 x 1,536 (a runner-sized pool), each
// next to a read-only kernel over the same block tables (the access pattern's ceiling).
// --fp8-kv: the bf16 cache against the fp8 (e4m3) cache: decode at batch 64 and 256 x 1,024 and
// 4,096, each with the read-only ceiling of its bytes, and prefill (1 x 4,096 causal, 512 new on
// 3,584 cached); a table of the fp8 / bf16 time ratios last.
// --engine-like: decode as a 1000/1000 offline run's steps see it (BenchDecodeEngineLike), at
// the kernel's own split count and 1-24 forced ones (--auto-splits-only: the kernel's only).
// --prefill: the prefill kernels PagedPrefillAttention chooses from (SetPrefillKernel: the wgmma
// kernel on Hopper, the mma.sync one) on the same Llama-3.1-8B shapes, bf16 and fp8 caches: 1 x
// 4,096 and 4 x 4,096 causal, 8 x 2,048 (a 16,384-token prompt step of a 2048/128 run), 16 x
// 1,024, 512 new on 3,584 cached; a table of the mma.sync / wgmma time ratios last.
//
// Prefill figures are TFLOP/s (causal FLOPs: 4 * heads * head_dim per (query, visible key)) over
// the GEMM peak; decode figures are K/V bytes read per second over the copy bandwidth. Decode runs
// through a CUDA graph that cycles over several disjoint sets of cache blocks, so small cases read
// from device memory, not from the 50 MB L2. Fixed seeds; random (never zero) data.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/attention.h"

namespace {

using kiln::kernels::AttentionDims;
using kiln::kernels::PagedKvCache;

// The fp8 cache's scales in these runs (any finite positive value times the same).
constexpr float kFp8Scale = 0.05f;

#define CK(expr)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// A hash of (i, seed) as a value uniform in [-1, 1).
__device__ float HashUniform(size_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 0x9e3779b9u ^ seed;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return float(h & 0xffffff) / float(1 << 24) * 2.0f - 1.0f;
}

__global__ void FillRandomBf16(__nv_bfloat16* p, size_t n, uint32_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(HashUniform(i, seed) * amp);
  }
}

void Fill(__nv_bfloat16* p, size_t n, uint32_t seed, float amp = 1.0f) {
  FillRandomBf16<<<1024, 256>>>(p, n, seed, amp);
  CK(cudaGetLastError());
}

// Random e4m3 codes of values in [-1, 1] / kFp8Scale (as RopeStoreKv stores them).
__global__ void FillRandomFp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __nv_cvt_float_to_fp8(HashUniform(i, seed) / kFp8Scale, __NV_SATFINITE, __NV_E4M3);
  }
}

// Median milliseconds of `fn` (which enqueues work on `stream`) over `reps` timed runs.
template <typename Fn>
float MedianMs(cudaStream_t stream, int warmup, int reps, Fn fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, stream));
    fn();
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double CopyBandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  Fill(static_cast<__nv_bfloat16*>(src), bytes / 2, 1);
  const float ms = MedianMs(stream, 3, 20, [&] {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 2.0 * bytes / (ms * 1e-3);
}

double GemmPeak(cudaStream_t stream) {
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  CK(cudaMalloc(&a, size_t(n) * n * 2));
  CK(cudaMalloc(&b, size_t(n) * n * 2));
  CK(cudaMalloc(&c, size_t(n) * n * 2));
  Fill(a, size_t(n) * n, 2);
  Fill(b, size_t(n) * n, 3);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasSetStream(h, stream);
  const float alpha = 1.0f, beta = 0.0f;
  bool ok = true;
  const float ms = MedianMs(stream, 3, 10, [&] {
    ok &= cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                       CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  cublasDestroy(h);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  return ok ? 2.0 * n * n * double(n) / (ms * 1e-3) : 0.0;
}

// A pool of cache blocks and `num_sets` disjoint, randomly permuted block tables over it, each
// for `num_seqs` sequences of `seq_len` positions. With min_pool_bytes (K + V) the pool is at
// least that large and the tables take random blocks from all of it, as a runner's per-layer
// pool after a while of serving.
// elem_bytes: 2 (a bf16 cache) or 1 (fp8).
struct Pool {
  void *k = nullptr, *v = nullptr;
  std::vector<int32_t*> tables;
  int max_blocks_per_seq = 0;
  int num_blocks = 0;

  Pool(const AttentionDims& d, int block_size, int num_seqs, int seq_len, size_t budget_bytes,
       int max_sets, size_t min_pool_bytes = 0, int elem_bytes = 2) {
    const size_t block_bytes = size_t(block_size) * d.num_kv_heads * d.head_dim * elem_bytes;
    max_blocks_per_seq = (seq_len + block_size - 1) / block_size;
    const int64_t need = int64_t{num_seqs} * max_blocks_per_seq;
    const int64_t fit = int64_t(budget_bytes / (2 * block_bytes)) / need;
    const int num_sets = int(std::clamp<int64_t>(fit, 1, max_sets));
    Allocate(int(std::max<int64_t>(need * num_sets, min_pool_bytes / (2 * block_bytes))),
             block_bytes, elem_bytes);
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(5);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int s = 0; s < num_sets; ++s) {
      AddTable(std::vector<int32_t>(perm.begin() + s * need, perm.begin() + (s + 1) * need));
    }
  }
  // A pool of num_blocks blocks with the given table sets ([sequence][max_blocks_per_seq] each).
  Pool(const AttentionDims& d, int block_size, int num_blocks_, int max_blocks_per_seq_,
       const std::vector<std::vector<int32_t>>& table_sets, int elem_bytes) {
    max_blocks_per_seq = max_blocks_per_seq_;
    Allocate(num_blocks_, size_t(block_size) * d.num_kv_heads * d.head_dim * elem_bytes,
             elem_bytes);
    for (const auto& t : table_sets) AddTable(t);
  }
  void Allocate(int blocks, size_t block_bytes, int elem_bytes) {
    num_blocks = blocks;
    CK(cudaMalloc(&k, num_blocks * block_bytes));
    CK(cudaMalloc(&v, num_blocks * block_bytes));
    if (elem_bytes == 1) {
      FillRandomFp8<<<1024, 256>>>(static_cast<uint8_t*>(k), num_blocks * block_bytes, 11);
      FillRandomFp8<<<1024, 256>>>(static_cast<uint8_t*>(v), num_blocks * block_bytes, 12);
      CK(cudaGetLastError());
    } else {
      Fill(static_cast<__nv_bfloat16*>(k), num_blocks * block_bytes / 2, 11);
      Fill(static_cast<__nv_bfloat16*>(v), num_blocks * block_bytes / 2, 12);
    }
  }
  void AddTable(const std::vector<int32_t>& host) {
    int32_t* t;
    CK(cudaMalloc(&t, host.size() * 4));
    CK(cudaMemcpy(t, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    tables.push_back(t);
  }
  ~Pool() {
    for (int32_t* t : tables) cudaFree(t);
    cudaFree(k);
    cudaFree(v);
  }
  // The pool as a cache of element type C (__nv_bfloat16, or __nv_fp8_e4m3 scaled by kFp8Scale)
  // through table set `set`.
  template <typename C = __nv_bfloat16>
  kiln::kernels::PagedKvCacheT<__nv_bfloat16, C> Cache(int set, int block_size) const {
    kiln::kernels::PagedKvCacheT<__nv_bfloat16, C> c;
    c.k = static_cast<const C*>(k);
    c.v = static_cast<const C*>(v);
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    c.block_tables = tables[set];
    c.max_blocks_per_seq = max_blocks_per_seq;
    if (std::is_same_v<C, __nv_fp8_e4m3>) c.k_scale = c.v_scale = kFp8Scale;
    return c;
  }
};

struct Row {
  std::string name;
  double us = 0;
  double figure = 0;    // TFLOP/s or GB/s
  double roofline = 0;  // GEMM peak or copy bandwidth, same unit
  const char* unit = "";
};

Row BenchPrefill(const std::string& name, const AttentionDims& d, int num_seqs, int q_len,
                 int seq_len, double gemm_peak, cudaStream_t stream, bool fp8 = false) {
  const int bs = 16;
  Pool pool(d, bs, num_seqs, seq_len, size_t{1} << 28, 1, 0, fp8 ? 1 : 2);
  const int64_t tokens = int64_t{num_seqs} * q_len;
  const int64_t width = int64_t{d.num_heads} * d.head_dim;
  __nv_bfloat16 *q, *out;
  int32_t *cu, *lens;
  CK(cudaMalloc(&q, tokens * width * 2));
  CK(cudaMalloc(&out, tokens * width * 2));
  Fill(q, tokens * width, 21);
  std::vector<int32_t> cu_h(num_seqs + 1), lens_h(num_seqs, seq_len);
  for (int i = 0; i <= num_seqs; ++i) cu_h[i] = i * q_len;
  CK(cudaMalloc(&cu, cu_h.size() * 4));
  CK(cudaMalloc(&lens, lens_h.size() * 4));
  CK(cudaMemcpy(cu, cu_h.data(), cu_h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(lens, lens_h.data(), lens_h.size() * 4, cudaMemcpyHostToDevice));
  const float ms = MedianMs(stream, 3, 20, [&] {
    if (fp8) {
      CK(kiln::kernels::PagedPrefillAttention(q, width, pool.Cache<__nv_fp8_e4m3>(0, bs), cu, lens,
                                              num_seqs, q_len, d, out, width, stream));
    } else {
      CK(kiln::kernels::PagedPrefillAttention(q, width, pool.Cache(0, bs), cu, lens, num_seqs,
                                              q_len, d, out, width, stream));
    }
  });
  double visible = 0;  // (query, key) pairs under the causal mask
  for (int i = 0; i < q_len; ++i) visible += seq_len - q_len + i + 1;
  const double flops = 4.0 * d.num_heads * d.head_dim * visible * num_seqs;
  CK(cudaFree(q));
  CK(cudaFree(out));
  CK(cudaFree(cu));
  CK(cudaFree(lens));
  return {name, ms * 1e3, flops / (ms * 1e-3) / 1e12, gemm_peak / 1e12, "TFLOP/s"};
}

// splits > 0 forces the context splits (the sweep); max_seq_len > 0 passes a context limit
// above the actual length, as the runner's graphs do (their limit is max_model_len).
// Milliseconds per table set of `launch(set)` for every set of `pool`, all captured in one CUDA
// graph (median of 15 replays), so that each launch reads blocks the previous ones did not.
template <typename Launch>
float GraphMsPerSet(const Pool& pool, cudaStream_t stream, Launch launch) {
  const int sets = int(pool.tables.size());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int s = 0; s < sets; ++s) launch(s);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const float ms =
      MedianMs(stream, 2, 15, [&] { CK(cudaGraphLaunch(exec, stream)); }) / float(sets);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return ms;
}

// K + V bytes a decode of num_seqs sequences of seq_len positions reads from a cache of
// elem_bytes-byte elements.
double DecodeBytes(const AttentionDims& d, int num_seqs, int seq_len, int elem_bytes = 2) {
  return 2.0 * num_seqs * double(seq_len) * d.num_kv_heads * d.head_dim * elem_bytes;
}

// The read ceiling of decode attention's access pattern: every (sequence, kv head) block of
// 256 threads streams its K and V rows through the same block tables as PagedDecodeAttention
// (16-byte loads, 8 in flight a thread, up to 8 blocks an SM) and only folds them into a checksum.
// head_dim 128 of kElemBytes-byte elements, block_size a multiple of 16.
template <int kElemBytes>
__global__ void __launch_bounds__(256)
    PagedReadKernel(const void* k, const void* v, const int32_t* tables, int max_blocks,
                    int block_size, int num_kv_heads, int seq_len, uint4* sink) {
  constexpr int kRowChunks = 128 * kElemBytes / 16;  // 16-byte chunks per row
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int32_t* table = tables + int64_t{seq} * max_blocks;
  const int chunks = seq_len * kRowChunks;
  const uint4* k4 = reinterpret_cast<const uint4*>(k);
  const uint4* v4 = reinterpret_cast<const uint4*>(v);
  uint32_t acc = 0;
  for (int base = threadIdx.x; base < chunks; base += 4 * blockDim.x) {
    uint4 kk[4], vv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int c = base + u * blockDim.x;
      const int pos = c / kRowChunks;
      const int64_t row =
          (int64_t{table[pos / block_size]} * num_kv_heads + head) * block_size + pos % block_size;
      const int64_t at = row * kRowChunks + c % kRowChunks;
      kk[u] = c < chunks ? k4[at] : make_uint4(0, 0, 0, 0);
      vv[u] = c < chunks ? v4[at] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= kk[u].x ^ kk[u].w ^ vv[u].y ^ vv[u].z;
  }
  if (acc == 0x12345678u) sink[0] = make_uint4(acc, 0, 0, 0);  // keeps the loads
}

// PagedReadKernel over the same pools and tables as BenchDecode: the bandwidth a decode kernel
// could reach on this access pattern.
Row BenchRead(const std::string& name, const AttentionDims& d, int num_seqs, int seq_len,
              double copy_bw, cudaStream_t stream, size_t pool_bytes = 0, bool fp8 = false) {
  const int bs = 16;
  const int elem_bytes = fp8 ? 1 : 2;
  Pool pool(d, bs, num_seqs, seq_len, size_t{3} << 29, 64, pool_bytes, elem_bytes);
  uint4* sink;
  CK(cudaMalloc(&sink, 16));
  const float ms = GraphMsPerSet(pool, stream, [&](int s) {
    const dim3 grid(d.num_kv_heads, num_seqs);
    if (fp8) {
      PagedReadKernel<1><<<grid, 256, 0, stream>>>(pool.k, pool.v, pool.tables[s],
                                                   pool.max_blocks_per_seq, bs, d.num_kv_heads,
                                                   seq_len, sink);
    } else {
      PagedReadKernel<2><<<grid, 256, 0, stream>>>(pool.k, pool.v, pool.tables[s],
                                                   pool.max_blocks_per_seq, bs, d.num_kv_heads,
                                                   seq_len, sink);
    }
  });
  CK(cudaGetLastError());
  CK(cudaFree(sink));
  return {name, ms * 1e3, DecodeBytes(d, num_seqs, seq_len, elem_bytes) / (ms * 1e-3) / 1e9,
          copy_bw / 1e9, "GB/s"};
}

// Milliseconds per launch of decode attention over every table set of `pool` for sequences of
// the given lengths, block_size-token blocks of an fp8 or bf16 cache; limit is the max_seq_len
// passed (the runner's graphs pass max_model_len); splits > 0 forces the split count.
float DecodeMsPerSet(const Pool& pool, const AttentionDims& d, const std::vector<int32_t>& lens_h,
                     int limit, int block_size, int splits, bool fp8, cudaStream_t stream) {
  const int num_seqs = int(lens_h.size());
  const int64_t width = int64_t{d.num_heads} * d.head_dim;
  __nv_bfloat16 *q, *out;
  int32_t* lens;
  CK(cudaMalloc(&q, num_seqs * width * 2));
  CK(cudaMalloc(&out, num_seqs * width * 2));
  Fill(q, num_seqs * width, 31);
  CK(cudaMalloc(&lens, num_seqs * 4));
  CK(cudaMemcpy(lens, lens_h.data(), num_seqs * 4, cudaMemcpyHostToDevice));
  const size_t ws_bytes =
      splits > 0 ? kiln::kernels::PagedDecodeWorkspaceBytesForSplits(num_seqs, splits, d)
                 : kiln::kernels::PagedDecodeWorkspaceBytes(num_seqs, limit, d);
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  const float ms = GraphMsPerSet(pool, stream, [&](int s) {
    if (fp8) {
      CK(kiln::kernels::PagedDecodeAttention(q, width, pool.Cache<__nv_fp8_e4m3>(s, block_size),
                                             lens, num_seqs, limit, d, ws, ws_bytes, out, width,
                                             stream, splits));
    } else {
      CK(kiln::kernels::PagedDecodeAttention(q, width, pool.Cache(s, block_size), lens, num_seqs,
                                             limit, d, ws, ws_bytes, out, width, stream, splits));
    }
  });
  CK(cudaFree(q));
  CK(cudaFree(out));
  CK(cudaFree(lens));
  CK(cudaFree(ws));
  return ms;
}

// block_size and pool_bytes (the block sweep): the cache block size and a pool of at least that
// many bytes (K + V) that the sequences' blocks are drawn from at random.
Row BenchDecode(const std::string& name, const AttentionDims& d, int num_seqs, int seq_len,
                double copy_bw, cudaStream_t stream, int splits = 0, int max_seq_len = 0,
                int block_size = 16, size_t pool_bytes = 0, bool fp8 = false) {
  const int limit = max_seq_len > 0 ? max_seq_len : seq_len;
  const int elem_bytes = fp8 ? 1 : 2;
  Pool pool(d, block_size, num_seqs, limit, size_t{3} << 29, 64, pool_bytes, elem_bytes);
  const float ms = DecodeMsPerSet(pool, d, std::vector<int32_t>(num_seqs, seq_len), limit,
                                  block_size, splits, fp8, stream);
  const double bytes = DecodeBytes(d, num_seqs, seq_len, elem_bytes);
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, copy_bw / 1e9, "GB/s"};
}

// Decode as a runner's steps see it (--engine-like): num_seqs sequences with lengths drawn
// uniformly from [prompt, max_len] (1,000-2,000: a 1000/1000 offline run's decode steps), blocks
// handed out the way the runner's allocator does (each sequence's prompt blocks in one run, then
// one block per sequence in turn as the batch decodes), from at least one layer's share of a
// 68 GB cache (2.1 GB of K + V at fp8). Each launch's block set is disjoint from the previous
// one's (two sets, L2 cold). One row per entry of split_counts (0: the kernel's choice), then the
// read-only kernel over the same tables (the first `prompt` positions): the ceiling.
std::vector<Row> BenchDecodeEngineLike(const AttentionDims& d, bool fp8, int num_seqs, int prompt,
                                       int max_len, const std::vector<int>& split_counts,
                                       double copy_bw, cudaStream_t stream) {
  const int bs = 16;
  const int elem_bytes = fp8 ? 1 : 2;
  const size_t block_bytes = size_t(bs) * d.num_kv_heads * d.head_dim * elem_bytes;
  // One layer's share at fp8 (twice that at bf16: the same number of positions), or more where
  // two sets need it: need_blocks is twice a set's most, with 10 % to spare, so each set's
  // blocks fit its half.
  const size_t need_blocks = size_t{2} * num_seqs * ((max_len + bs - 1) / bs) * 11 / 10;
  const size_t pool_bytes =
      std::max(size_t{21} * (size_t{1} << 30) / 10 * elem_bytes, need_blocks * 2 * block_bytes);
  const int num_blocks = int(pool_bytes / (2 * block_bytes));
  // The runner's graphs pass max_model_len as the limit (8,192 here); tables are that wide.
  const int limit = 8192;
  const int max_blocks = limit / bs;
  std::mt19937 rng(7);
  std::vector<int32_t> lens(num_seqs);
  for (int32_t& l : lens) l = prompt + int(rng() % (max_len - prompt + 1));
  // Two disjoint sets: set s allocates from its own half of the pool, in the runner's order.
  const int sets = 2;
  std::vector<std::vector<int32_t>> table_sets;
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t>& t = table_sets.emplace_back(size_t(num_seqs) * max_blocks, 0);
    int next = s * (num_blocks / sets);
    const int prompt_blocks = (prompt + bs - 1) / bs;
    for (int q = 0; q < num_seqs; ++q) {
      for (int j = 0; j < prompt_blocks; ++j) t[size_t(q) * max_blocks + j] = next++;
    }
    for (int j = prompt_blocks; j < max_blocks; ++j) {
      for (int q = 0; q < num_seqs; ++q) {
        if (j * bs < lens[q]) t[size_t(q) * max_blocks + j] = next++;
      }
    }
  }
  const Pool pool(d, bs, num_blocks, max_blocks, table_sets, elem_bytes);
  std::vector<Row> rows;
  double bytes = 0;
  for (int32_t l : lens) bytes += DecodeBytes(d, 1, l, elem_bytes);
  const std::string kind = fp8 ? "fp8" : "bf16";
  // One untimed pass first: the first timings after the pool is filled and the tables built
  // (host time, the GPU idle) came out up to 15 % slow.
  DecodeMsPerSet(pool, d, lens, limit, bs, 0, fp8, stream);
  for (int splits : split_counts) {
    const float attn_ms = DecodeMsPerSet(pool, d, lens, limit, bs, splits, fp8, stream);
    rows.push_back({"engine-like b" + std::to_string(num_seqs) + " x " + std::to_string(prompt) +
                        "-" + std::to_string(max_len) + " " + kind + " splits " +
                        (splits > 0 ? std::to_string(splits) : std::string("auto")),
                    attn_ms * 1e3, bytes / (attn_ms * 1e-3) / 1e9, copy_bw / 1e9, "GB/s"});
  }
  // The read-only kernel takes one length for all sequences: the prompt's (every sequence has it).
  uint4* sink;
  CK(cudaMalloc(&sink, 16));
  const float read_ms = GraphMsPerSet(pool, stream, [&](int s) {
    const dim3 grid(d.num_kv_heads, num_seqs);
    if (fp8) {
      PagedReadKernel<1><<<grid, 256, 0, stream>>>(pool.k, pool.v, pool.tables[s], max_blocks, bs,
                                                   d.num_kv_heads, prompt, sink);
    } else {
      PagedReadKernel<2><<<grid, 256, 0, stream>>>(pool.k, pool.v, pool.tables[s], max_blocks, bs,
                                                   d.num_kv_heads, prompt, sink);
    }
  });
  CK(cudaGetLastError());
  rows.push_back({"read-only b" + std::to_string(num_seqs) + " x " + std::to_string(prompt) +
                      " engine-like " + kind,
                  read_ms * 1e3,
                  DecodeBytes(d, num_seqs, prompt, elem_bytes) / (read_ms * 1e-3) / 1e9,
                  copy_bw / 1e9, "GB/s"});
  CK(cudaFree(sink));
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool sweep = false, block_sweep = false, decode_only = false, fp8_kv = false, engine_like = false,
       auto_splits_only = false, prefill = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::string(argv[i]) == "--split-sweep") {
      sweep = true;
    } else if (std::string(argv[i]) == "--block-sweep") {
      block_sweep = true;
    } else if (std::string(argv[i]) == "--decode-only") {
      decode_only = true;
    } else if (std::string(argv[i]) == "--fp8-kv") {
      fp8_kv = true;
    } else if (std::string(argv[i]) == "--engine-like") {
      engine_like = true;
    } else if (std::string(argv[i]) == "--auto-splits-only") {
      auto_splits_only = true;
    } else if (std::string(argv[i]) == "--prefill") {
      prefill = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json PATH] [--split-sweep] [--block-sweep] [--decode-only] "
                   "[--fp8-kv] [--engine-like [--auto-splits-only]] [--prefill]\n",
                   argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const double copy_bw = CopyBandwidth(stream);
  const double gemm_peak = GemmPeak(stream);

  const AttentionDims llama{32, 8, 128, 1.0f / std::sqrt(128.0f)};
  const AttentionDims smol{9, 3, 64, 1.0f / 8.0f};
  std::vector<Row> rows;
  // --fp8-kv: (bf16 row, fp8 row) index pairs for the ratio table.
  std::vector<std::pair<size_t, size_t>> fp8_pairs;
  if (fp8_kv) {
    for (int ctx : {1024, 4096}) {
      for (int batch : {64, 256}) {
        const std::string shape = "b" + std::to_string(batch) + " x " + std::to_string(ctx);
        rows.push_back(BenchDecode("decode " + shape + " bf16 kv", llama, batch, ctx, copy_bw,
                                   stream, 0, 0, 16, 0, false));
        rows.push_back(BenchDecode("decode " + shape + " fp8 kv", llama, batch, ctx, copy_bw,
                                   stream, 0, 0, 16, 0, true));
        fp8_pairs.emplace_back(rows.size() - 2, rows.size() - 1);
        rows.push_back(BenchRead("read-only " + shape + " bf16", llama, batch, ctx, copy_bw, stream,
                                 0, false));
        rows.push_back(
            BenchRead("read-only " + shape + " fp8", llama, batch, ctx, copy_bw, stream, 0, true));
        fp8_pairs.emplace_back(rows.size() - 2, rows.size() - 1);
      }
    }
    for (bool fp8 : {false, true}) {
      rows.push_back(
          BenchPrefill(std::string("prefill 1x4096 causal ") + (fp8 ? "fp8" : "bf16") + " kv",
                       llama, 1, 4096, 4096, gemm_peak, stream, fp8));
    }
    fp8_pairs.emplace_back(rows.size() - 2, rows.size() - 1);
    for (bool fp8 : {false, true}) {
      rows.push_back(
          BenchPrefill(std::string("chunked 512 on 3584 ") + (fp8 ? "fp8" : "bf16") + " kv", llama,
                       1, 512, 4096, gemm_peak, stream, fp8));
    }
    fp8_pairs.emplace_back(rows.size() - 2, rows.size() - 1);
  }
  if (decode_only) {
    for (int batch : {64, 256}) {
      rows.push_back(BenchDecode("decode llama8b b" + std::to_string(batch) + " x 1024", llama,
                                 batch, 1024, copy_bw, stream));
    }
    rows.push_back(BenchDecode("decode llama8b b224 x 1536, 1.8 GB pool", llama, 224, 1536, copy_bw,
                               stream, 0, 0, 16, size_t{18} * (size_t{1} << 30) / 10));
    // The same access patterns read without attention's arithmetic (the ceiling).
    for (int batch : {64, 256}) {
      rows.push_back(BenchRead("read-only b" + std::to_string(batch) + " x 1024", llama, batch,
                               1024, copy_bw, stream));
    }
    rows.push_back(BenchRead("read-only b224 x 1536, 1.8 GB pool", llama, 224, 1536, copy_bw,
                             stream, size_t{18} * (size_t{1} << 30) / 10));
  }
  if (engine_like) {
    // (batch, shortest, longest) as a 1000/1000 run (256-768 sequences: 300 is just over one wave
    // of the fp8 kernel's CTAs on an H100), a 128/128 run (256 and 1,024), smaller batches, and
    // equal lengths just over one wave (300, 330, 400 x 1,500: a 1000/1000 run's lockstep steps).
    const int shapes[][3] = {{256, 1000, 2000}, {512, 1000, 2000}, {256, 128, 256},
                             {128, 1000, 2000}, {64, 1000, 2000},  {32, 1000, 2000},
                             {64, 1024, 1024},  {256, 1024, 1024}, {300, 1000, 2000},
                             {400, 1000, 2000}, {768, 1000, 2000}, {1024, 128, 256},
                             {300, 1500, 1500}, {400, 1500, 1500}, {330, 1500, 1500}};
    const std::vector<int> splits =
        auto_splits_only ? std::vector<int>{0} : std::vector<int>{0, 1, 2, 3, 4, 6, 8, 12, 16, 24};
    for (bool fp8 : {true, false}) {
      for (const auto& sh : shapes) {
        for (Row& r :
             BenchDecodeEngineLike(llama, fp8, sh[0], sh[1], sh[2], splits, copy_bw, stream)) {
          rows.push_back(r);
        }
      }
    }
  }
  // --prefill: (mma.sync row, wgmma row) index pairs for the ratio table.
  std::vector<std::pair<size_t, size_t>> kernel_pairs;
  if (prefill) {
    struct Shape {
      const char* name;
      int num_seqs, q_len, seq_len;
    };
    const Shape shapes[] = {{"1x4096 causal", 1, 4096, 4096},
                            {"4x4096 causal", 4, 4096, 4096},
                            {"8x2048 causal", 8, 2048, 2048},
                            {"16x1024 causal", 16, 1024, 1024},
                            {"512 new on 3584", 1, 512, 4096}};
    for (const Shape& sh : shapes) {
      for (bool fp8 : {false, true}) {
        using kiln::kernels::PrefillKernel;
        // Over the fp8 cache also the wgmma kernel with 16-bit mma's (auto: e4m3 mma's).
        std::vector<std::pair<PrefillKernel, const char*>> kernels = {
            {PrefillKernel::kMmaSync, " mma.sync"}, {PrefillKernel::kAuto, " auto"}};
        if (fp8) kernels.insert(kernels.begin() + 1, {PrefillKernel::kWgmma16Bit, " wgmma16"});
        const size_t first = rows.size();
        for (const auto& [kernel, name] : kernels) {
          kiln::kernels::SetPrefillKernel(kernel);
          rows.push_back(
              BenchPrefill(std::string("prefill ") + sh.name + (fp8 ? " fp8" : " bf16") + name,
                           llama, sh.num_seqs, sh.q_len, sh.seq_len, gemm_peak, stream, fp8));
        }
        kernel_pairs.emplace_back(first, rows.size() - 1);
      }
    }
    kiln::kernels::SetPrefillKernel(kiln::kernels::PrefillKernel::kAuto);
  }
  if (!decode_only && !fp8_kv && !engine_like && !prefill) {
    rows.push_back(
        BenchPrefill("prefill llama8b 1x4096 causal", llama, 1, 4096, 4096, gemm_peak, stream));
    rows.push_back(
        BenchPrefill("prefill llama8b 4x4096 causal", llama, 4, 4096, 4096, gemm_peak, stream));
    rows.push_back(
        BenchPrefill("chunked llama8b 512 new on 3584", llama, 1, 512, 4096, gemm_peak, stream));
    rows.push_back(
        BenchPrefill("prefill smollm2 1x4096 causal", smol, 1, 4096, 4096, gemm_peak, stream));
    for (int batch : {1, 64, 256}) {
      rows.push_back(BenchDecode("decode llama8b b" + std::to_string(batch) + " x 1024", llama,
                                 batch, 1024, copy_bw, stream));
    }
    rows.push_back(BenchDecode("decode llama8b b1 x 32768", llama, 1, 32768, copy_bw, stream));
    rows.push_back(BenchDecode("decode smollm2 b64 x 1024", smol, 64, 1024, copy_bw, stream));
  }
  // Decode splits under a graph-like context limit of 8,192 (the runner's max_model_len): the
  // kernel's own choice (auto) against forced split counts.
  if (sweep) {
    const std::pair<int, int> shapes[] = {{64, 1024}, {128, 1024}, {220, 1536}, {256, 1024}};
    for (const auto& [batch, ctx] : shapes) {
      for (int splits : {0, 1, 2, 3, 4, 5, 6, 8, 12}) {
        rows.push_back(BenchDecode("sweep b" + std::to_string(batch) + " x " + std::to_string(ctx) +
                                       " splits " + (splits ? std::to_string(splits) : "auto"),
                                   llama, batch, ctx, copy_bw, stream, splits, 8192));
      }
    }
  }

  // Cache block size against the spread of a sequence's blocks: batch 224 x 1,536 positions
  // (the offline figure's decode steps) drawn at random from a pool the size of one layer's in
  // the runner (1.8 GB of K + V: 58 GB over 32 layers) and from a 8 GB pool.
  if (block_sweep) {
    for (size_t pool_gb10 : {18, 80}) {
      for (int bs : {16, 32, 64, 128}) {
        rows.push_back(BenchDecode(
            "b224 x 1536 block " + std::to_string(bs) + " pool " + std::to_string(pool_gb10 / 10) +
                "." + std::to_string(pool_gb10 % 10) + " GB",
            llama, 224, 1536, copy_bw, stream, 0, 0, bs, pool_gb10 * (size_t{1} << 30) / 10));
      }
    }
  }

  nlohmann::json j;
  j["device"] = prop.name;
  j["driver"] = driver;
  j["copy_bandwidth_gbs"] = copy_bw / 1e9;
  j["gemm_bf16_8192_tflops"] = gemm_peak / 1e12;
  std::printf(
      "device %s, driver %d\ncopy bandwidth (read+write) %.0f GB/s; cuBLAS bf16 8192^3 "
      "%.0f TFLOP/s\n\n",
      prop.name, driver, copy_bw / 1e9, gemm_peak / 1e12);
  std::printf("%-36s %10s %12s %10s %8s\n", "case", "time us", "achieved", "roofline", "% roof");
  for (const Row& r : rows) {
    std::printf("%-36s %10.1f %8.1f %-7s %8.0f %7.1f%%\n", r.name.c_str(), r.us, r.figure, r.unit,
                r.roofline, 100.0 * r.figure / r.roofline);
    j["cases"].push_back({{"name", r.name},
                          {"time_us", r.us},
                          {"achieved", r.figure},
                          {"unit", r.unit},
                          {"roofline", r.roofline},
                          {"fraction_of_roofline", r.figure / r.roofline}});
  }
  if (!fp8_pairs.empty()) {
    std::printf("\n%-36s %10s %10s %10s\n", "fp8 kv against bf16 kv", "bf16 us", "fp8 us",
                "bf16/fp8");
    for (const auto& [a, b] : fp8_pairs) {
      const double speedup = rows[a].us / rows[b].us;
      std::printf("%-36s %10.1f %10.1f %9.2fx\n", rows[b].name.c_str(), rows[a].us, rows[b].us,
                  speedup);
      j["fp8_kv_speedups"].push_back({{"bf16", rows[a].name},
                                      {"fp8", rows[b].name},
                                      {"bf16_us", rows[a].us},
                                      {"fp8_us", rows[b].us},
                                      {"speedup", speedup}});
    }
  }
  if (!kernel_pairs.empty()) {
    std::printf("\n%-36s %10s %10s %10s\n", "prefill kernel (auto = wgmma on H100)", "mma.sync us",
                "auto us", "speedup");
    for (const auto& [a, b] : kernel_pairs) {
      const double speedup = rows[a].us / rows[b].us;
      std::printf("%-36s %10.1f %10.1f %9.2fx\n", rows[b].name.c_str(), rows[a].us, rows[b].us,
                  speedup);
      j["prefill_kernel_speedups"].push_back({{"mma_sync", rows[a].name},
                                              {"auto", rows[b].name},
                                              {"mma_sync_us", rows[a].us},
                                              {"auto_us", rows[b].us},
                                              {"speedup", speedup}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  CK(cudaStreamDestroy(stream));
  return 0;
}
