// W4A16 linear layers (model/quantization.h: 4-bit weight codes in groups along the input with an
// fp16 scale and an int8 zero point per (row, group), activations in bf16 or fp16): the repack of
// the canonical format into the kernel's tiled layout (once, at upload), the act-order gather of
// the activations, and the mixed-precision GEMM for decode batches (1..kW4GemmMaxRows rows).
// Raw device pointers + sizes + strides + stream; no engine types. Every launch returns its status
// and never synchronizes (graph-capturable). docs/kernels.md, "W4A16 GEMM", has the layout and
// the algorithm.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/elementwise.h"

namespace kiln::kernels {

// The tiled layout's granularity: a tile is 16 output rows by 64 input columns (512 bytes of
// codes, one 16-byte load per lane of a warp).
inline constexpr int64_t kW4TileRows = 16;
inline constexpr int64_t kW4TileCols = 64;
// Row tiles (n / 16) up to which W4Gemm runs 16-warp blocks for m <= 8 (else 8 warps): n <=
// 4,096 (o and down of an 8B Llama), fewer blocks than two per SM of an H100, where 8-warp blocks
// reached 25 % occupancy (ncu, session 12) and streamed down at 39 % of DRAM bandwidth.
inline constexpr int64_t kW4WideMaxRowTiles = 256;
// Rows of x one W4Gemm launch handles; callers loop over larger batches.
inline constexpr int32_t kW4GemmMaxRows = 64;
// W4Gemm's block-tile kernel (w4a16.cu, W4GemmTileKernel): the weight rows of one block, and
// the rows of x from which it is the default.
inline constexpr int64_t kW4BlockTileRows = 256;
inline constexpr int32_t kW4TileMinRows = 17;

// Whether the kernels take a weight of this shape and group size: n a multiple of 16, k of 64,
// group_size a multiple of 16 that divides k and is either a multiple of 64 or 16 / 32.
bool W4ShapeSupported(int64_t n, int64_t k, int64_t group_size);

// codes: the canonical packed kI4 matrix [n, k] (n * k / 2 bytes, element (r, c) in byte
// (r * k + c) / 2, low nibble for even c, signed); tiled: n * k / 2 bytes in the kernel's layout.
// REQUIRES: W4ShapeSupported(n, k, any); codes != tiled.
cudaError_t W4RepackCodes(const uint8_t* codes, int64_t n, int64_t k, uint8_t* tiled,
                          cudaStream_t stream);

// scales: fp16 bits [n, groups]; zeros: int8 [n, groups] (null: all zero); sz: [groups, ldsz]
// words (group-major, so that the rows a warp needs are adjacent; ldsz >= n: the rows of a fused
// matrix's part start at sz + its first row): the scale's fp16 bits in the low half, the
// activation type's (bf16: true, else fp16) bits of 2^e + 8 + zero in the high half (e = 7
// resp. 10: what the kernel subtracts from its 2^e + (code + 8)). A weight repacked for one
// activation type runs with that type only.
cudaError_t W4RepackScales(const uint16_t* scales, const int8_t* zeros, int64_t n, int64_t groups,
                           bool bf16, uint32_t* sz, int64_t ldsz, cudaStream_t stream);

// Act-order: out[r, j] = x[r, perm[j]] for r < m, j < k (out contiguous [m, k]).
cudaError_t W4GatherColumns(const __nv_bfloat16* x, int64_t ldx, int64_t m, int64_t k,
                            const int32_t* perm, __nv_bfloat16* out, cudaStream_t stream);
cudaError_t W4GatherColumns(const __half* x, int64_t ldx, int64_t m, int64_t k, const int32_t* perm,
                            __half* out, cudaStream_t stream);

// Rows [row0, row0 + rows) of a repacked weight (n rows, k stored columns, scale words
// [k / group_size, n] as W4RepackScales wrote them for T) dequantized into out [rows, k] (row
// stride k, stored column order): w = (code - zero) * scale in fp32, rounded once to T. For
// GEMMs of many rows (cuda::Gemm::LinearW4 beyond kW4GemmMaxRows), where re-streaming the codes
// per launch would cost more than writing and reading T weights once. REQUIRES:
// W4ShapeSupported(n, k, group_size), row0 and rows multiples of kW4TileRows, row0 + rows <= n,
// out 8-byte aligned.
cudaError_t W4Dequantize(const uint8_t* tiled, const uint32_t* sz, int64_t n, int64_t k,
                         int64_t group_size, int64_t row0, int64_t rows, __nv_bfloat16* out,
                         cudaStream_t stream);
cudaError_t W4Dequantize(const uint8_t* tiled, const uint32_t* sz, int64_t n, int64_t k,
                         int64_t group_size, int64_t row0, int64_t rows, __half* out,
                         cudaStream_t stream);

// The residual RMS norm before a linear layer, folded into its one-row GEMV (W4GemmArgsT::norm):
// x = RmsNormF32Residual's output row (kernels/elementwise.h) for delta, residual, init, weight
// and eps, the same bits, made in the kernel's prologue instead of read; residual_out gets the
// residual the norm would have left in place (residual + delta, or delta with init).
template <typename T>
struct W4NormArgsT {
  const T* weight = nullptr;        // [k]; null: no norm (x is read)
  const T* delta = nullptr;         // [k]
  const float* residual = nullptr;  // [k]; not read with init
  float* residual_out = nullptr;    // [k]; not residual (the blocks read it while one writes)
  float eps = 0.0f;
  bool init = false;
};

// out[m, n] = sum_c x[m, c] * (code[n, c] - zero[n, g(c)]) * scale[n, g(c)] (+ bias[n]), stored
// columns c (apply W4GatherColumns first for act-order), fp32 accumulation, one rounding to the
// output type (T, or fp32 with out_f32).
template <typename T>
struct W4GemmArgsT {
  const T* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  int32_t m = 0;                 // 1 ..= kW4GemmMaxRows
  const uint8_t* w = nullptr;    // tiled codes (W4RepackCodes)
  const uint32_t* sz = nullptr;  // W4RepackScales
  int64_t group_size = 0;
  int64_t n = 0;
  int64_t k = 0;
  const T* bias = nullptr;  // [n] or null
  void* out = nullptr;      // [m, n], row stride ldo
  int64_t ldo = 0;
  bool out_f32 = false;
  // A hint (dtype_internal::PrefetchL2 in kernels/dtype_traits.cuh): bytes the stream reads
  // next, e.g. the next linear layer's weights, for L2 to fetch while this kernel runs. Null:
  // none. REQUIRES: 16-byte aligned, prefetch_bytes a multiple of 16.
  const void* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
  // The block-tile kernel's split-K (kernels/w4a16.cu): room for the fp32 partial sums of
  // the blocks, and one counter per 256-row range of the weight (kW4BlockTileRows), all zero
  // before the first launch (each launch leaves them zero). Without them, or with fewer
  // counters than ranges, k is not split. Launches sharing them must be ordered (one stream).
  float* split_partials = nullptr;
  int64_t split_partial_bytes = 0;
  uint32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
  // For benchmarks and tests (gemv_bench --w4 times the alternatives); 0: the default for m.
  // 1: the k-split warps (W4GemmKernel; up to 8 rows with one row tile per block, W4GemvKernel);
  // 2: the block tiles; 3: one row streamed by resident blocks (W4GemvStreamKernel: m = 1,
  // groups of 64 columns or a multiple, k a multiple of 2,048 up to 32,768, x 16-byte aligned;
  // the default where this holds); 4: its wide form, 8 code words a lane in flight (no norm or
  // epilogue, groups of 64 or 128 columns, at least 2 rounds of 8 column tiles a warp of 8 or 7:
  // k a multiple of 4,096 from 8,192, or of 14,336; the default at groups of 128 where the
  // weight has at most 2 row tiles an SM: down of an 8B).
  int32_t kernel = 0;
  int32_t splits = 0;     // block tiles: k splits (at most what the scratch holds)
  int32_t row_tiles = 0;  // k-split warps: 16-row weight tiles per block, 1 or 2 (2: n % 32 == 0)
  int32_t warps = 0;      // k-split warps: warps per block, 8 or 16 (m <= 8, 1 row tile)
  // With norm.weight: x is not read but made from norm (W4NormArgsT). Only the streamed row
  // (kernel 3 or its default) takes it, with k of 2,048, 4,096 or 8,192, groups of 64 or 128
  // columns, T out and 16-byte aligned rows (W4NormSupported).
  W4NormArgsT<T> norm;
  // With norm, the layer after this one in the epilogue, as GemvW8ArgsT's silu_mul and rope do
  // for the W8A16 GEMV (kernels/quant.h): the bits of this GEMV followed by kernels::SiluMul or
  // kernels::RopeStoreKv, without that launch. Each needs the weight's rows in the order that
  // puts the values it pairs in one 16-row tile (the CUDA runner stores a W4A16 model's gate_up
  // and q / k rows so at upload):
  // - silu_mul: rows in GateUpLayout::kRunsOf8 (gate rows 8t .. 8t + 7, then up's, in row tile
  //   t); out gets the n / 2 products kernels::SiluMul(..., kRunsOf8) would make of this GEMV's
  //   output.
  // - rope or rope_fp8 (a T or an e4m3 cache; host pointers, read at the launch): the qkv
  //   projection of one decode token (num_tokens 1) with q and k heads in interleaved pair order
  //   (rope->interleaved), out = rope->qkv gets what RopeStoreKv leaves there (q heads rotated, k
  //   and v heads as computed) and the caches what it writes. REQUIRES: n = (num_heads + 2
  //   num_kv_heads) * head_dim, head_dim a multiple of 16, no q_codes and no qkv_scales, and the
  //   cache scales RopeStoreKv takes.
  // At most one of the three; W4NormSupported is false otherwise.
  bool silu_mul = false;
  const RopeKvArgsT<T, T>* rope = nullptr;
  const RopeKvArgsT<T, __nv_fp8_e4m3>* rope_fp8 = nullptr;
};

// W4ShapeSupported, 1 <= m <= kW4GemmMaxRows, ldx a multiple of 4, x 8-byte and w 16-byte
// aligned, and offsets that fit the kernel's 32-bit arithmetic (fewer than 2^32 16-byte code
// words and scale words, m * ldx < 2^31). The block tiles (kernel 2; by default from
// kW4TileMinRows rows where this holds, else the k-split warps) also need ldx a multiple of 8
// and x and sz 16-byte aligned.
bool W4GemmSupported(const W4GemmArgsT<__nv_bfloat16>& args);
bool W4GemmSupported(const W4GemmArgsT<__half>& args);

// Whether W4Gemm takes args with its norm (args.norm.weight set): W4GemmSupported and the
// streamed row's conditions above.
bool W4NormSupported(const W4GemmArgsT<__nv_bfloat16>& args);
bool W4NormSupported(const W4GemmArgsT<__half>& args);

// REQUIRES: W4GemmSupported(args), and W4NormSupported(args) with args.norm.weight.
cudaError_t W4Gemm(const W4GemmArgsT<__nv_bfloat16>& args, cudaStream_t stream);
cudaError_t W4Gemm(const W4GemmArgsT<__half>& args, cudaStream_t stream);

}  // namespace kiln::kernels
