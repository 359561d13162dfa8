// Fp8GateUpSilu (fp8_gate_up.h) on Hopper: a persistent, warp-specialized e4m3 GEMM whose
// epilogue is SiluMulFp8's first half.
//
// Block: 384 threads, one per SM, tiles handed out round-robin (tile = blockIdx.x + i gridDim.x).
// A tile is 128 tokens x 128 columns of the intermediate: the A tile is the tokens' codes, the B
// tile the 128 gate rows of the weight followed by the same 128 columns' up rows, so one
// m64n256k32 wgmma of a consumer warpgroup computes gate and up of its 64 tokens side by side.
// - Warpgroup 0, warp 0 (the producer): one thread issues the TMA copies (128-byte swizzle) of
//   the A tile and the two B halves of every 128-byte k-block into a ring of kStages stages of
//   48 KiB, completing on the stage's `full` mbarrier.
// - Warpgroups 1-2 (the consumers): 64 tokens each; per k-block four m64n256k32 e4m3 wgmma's
//   from shared memory, one batch in flight, the stage released (`empty`) once the next batch is
//   issued; fp32 accumulators, 128 a thread. At a tile's end they round the sums to bf16 into
//   the sums buffer (`sums_full`) and go on with the next tile.
// - Warpgroup 0, warps 1-3 (the epilogue): SiluMul of the sums buffer into out, released
//   (`sums_empty`) once read, while the consumers run the next tile's wgmma's. The epilogue's
//   arithmetic (~50 instructions an output, two of them MUFU) idled the tensor cores ~18 % of a
//   tile when the consumers did it themselves (the first version, docs/kernels.md); a fourth
//   warpgroup for it would compile every thread at 128 registers, too few for the consumers'
//   128 accumulators (setmaxnreg only moves registers at run time).
// Tiles go in groups of kGroupM token tiles (token tile fastest) so that the blocks in flight
// share their A and B tiles in L2.
//
// Epilogue, per (token r, column c) pair of gate (accumulator column c) and up (column 128 + c):
// each sum rounded to bf16 as Fp8GemmUnscaled's output, scaled and rounded as SiluMulFp8's
// ScaleInput8, silu rounded to bf16, times up, rounded to bf16 and stored.
#include "kernels/fp8_gate_up.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "kernels/attention_mma.cuh"
#include "kernels/attention_wgmma.cuh"
#include "kernels/dtype_traits.cuh"
#include "kernels/launch.h"

#if defined(KILN_SM90A) && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_GATE_UP_SM90 1
#endif

namespace kiln::kernels {
namespace {

using bf16 = __nv_bfloat16;
// The wgmma building blocks of the prefill kernel (descriptors, fences, mbarriers).
using attention_internal::ArriveExpectTx;
using attention_internal::FenceMbarrierInit;
using attention_internal::MbarrierArrive;
using attention_internal::MbarrierInit;
using attention_internal::MbarrierWait;
using attention_internal::SetMaxRegisters;
using attention_internal::SmemAddr;
using attention_internal::SmemDescSw128;
using attention_internal::WgmmaCommit;
using attention_internal::WgmmaFence;
using attention_internal::WgmmaWait;

constexpr int kTileM = 128;  // tokens a tile
constexpr int kTileN = 128;  // intermediate columns a tile (gate and up)
constexpr int kTileK = 128;  // bytes of k a stage: one swizzle span
constexpr int kStages = 3;
constexpr int kATileBytes = kTileM * kTileK;  // 16 KiB
constexpr int kBHalfBytes = kTileN * kTileK;  // 16 KiB: gate, then up
constexpr int kStageBytes = kATileBytes + 2 * kBHalfBytes;
// The sums buffer: 128 rows of 128 gate then 128 up sums in bf16, rows 16 bytes apart from a
// multiple of 128 (a consumer warp's 4-byte stores of 8 rows then hit 32 distinct banks).
constexpr int kSumsRowBytes = 2 * 2 * kTileN + 16;
constexpr int kSumsOffset = kStages * kStageBytes;
// full[kStages], empty[kStages], sums_full, sums_empty.
constexpr int kBarrierOffset = kSumsOffset + kTileM * kSumsRowBytes;
constexpr int kSmemBytes = kBarrierOffset + 16 * kStages + 16 + 1024;  // + 1,024-byte alignment
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kEpilogueWarps = 3;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr int kGroupM = 8;
[[maybe_unused]] constexpr int kConsumerRegisters = 208;
[[maybe_unused]] constexpr int kProducerRegisters = 88;  // warpgroup 0: the epilogue's too

struct GateUpParams {
  int32_t m, k, dim, m_tiles, n_tiles, num_tiles;
  const float* row_scale;
  const float* col_scale;
  const bf16* bias;
  bf16* out;
  int64_t ldo;
};

// The token tile and column tile of tile `tile`.
[[maybe_unused]] __device__ __forceinline__ void TileOf(const GateUpParams& p, int tile, int* mt,
                                                        int* nt) {
  const int per_group = kGroupM * p.n_tiles;
  const int group = tile / per_group;
  const int first = group * kGroupM;
  const int rows = min(kGroupM, p.m_tiles - first);
  const int in = tile - group * per_group;
  *mt = first + in % rows;
  *nt = in / rows;
}

// A 2-D TMA copy of the box at (inner byte x, row y) of `map` into shared memory at dst,
// completing its bytes on `bar`.
[[maybe_unused]] __device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map,
                                                         int32_t x, int32_t y, uint32_t bar) {
#ifdef KILN_GATE_UP_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
#endif
}

// d (+)= A B for m64n256k32, e4m3 operands from shared memory (both K-major), fp32
// accumulators d[j][c]: row 16 warp + g + 8 (c / 2), column 8 j + 2 t + (c % 2).
[[maybe_unused]] __device__ __forceinline__ void WgmmaE4m3N256(float (&d)[32][4], uint64_t a,
                                                               uint64_t b, bool accumulate) {
#ifdef KILN_GATE_UP_SM90
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "
      "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "
      "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "
      "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, "
      "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "
      "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),
        "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),
        "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]),
        "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]),
        "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]),
        "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]),
        "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]),
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]),
        "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]),
        "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]),
        "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]),
        "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), "+f"(d[30][0]), "+f"(d[30][1]),
        "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]),
        "+f"(d[31][3])
      : "l"(a), "l"(b), "r"(int{accumulate}));
#endif
}

// Keeps the compiler from moving accesses of the accumulators across a wgmma issue or wait.
[[maybe_unused]] __device__ __forceinline__ void FenceAccumulators(float (&d)[32][4]) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
  }
}

// One gate or up value as SiluMulFp8 reads it: the sum rounded to bf16 (Fp8GemmUnscaled's
// output; y), scaled (Fp8ScaledSum) and rounded to bf16 (ScaleInput8).
[[maybe_unused]] __device__ __forceinline__ float Scaled(float y, float rs, float col, float bias) {
  return dtype_internal::RoundTo<bf16>(dtype_internal::Fp8ScaledSum(y, rs, col, bias));
}

// silu(g) * u at SiluMulFp8's rounding points (act_fn's output rounded to bf16), unrounded.
[[maybe_unused]] __device__ __forceinline__ float SiluTimes(float g, float u) {
  return dtype_internal::RoundTo<bf16>(dtype_internal::Silu(g)) * u;
}

// A consumer's sums rounded to bf16 into the sums buffer at `sums` (its 64 rows of the tile).
[[maybe_unused]] __device__ __forceinline__ void StoreSums(const float (&d)[32][4], uint32_t sums,
                                                           int ctid) {
#ifdef KILN_GATE_UP_SM90
  const int lane = ctid % 32, row = (ctid / 32) * 16 + lane / 4;  // warps 0-3, then 4-7
  const uint32_t at = sums + row * kSumsRowBytes + (lane % 4) * 4;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(d[j][2 * h], d[j][2 * h + 1]);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + 8 * h * kSumsRowBytes + 16 * j),
                   "r"(*reinterpret_cast<const uint32_t*>(&v))
                   : "memory");
    }
  }
#endif
}

// The epilogue warps' part of tile (mt, nt): warp ew takes rows ew, ew + 3, ..; lane l columns
// 4 l .. 4 l + 3 (8-byte loads and stores, a warp's row contiguous).
[[maybe_unused]] __device__ __forceinline__ void SiluMulTile(const GateUpParams& p, uint32_t sums,
                                                             int mt, int nt, int etid) {
#ifdef KILN_GATE_UP_SM90
  const int lane = etid % 32, ew = etid / 32;
  const int c = nt * kTileN + 4 * lane;
  const float4 cg = *reinterpret_cast<const float4*>(p.col_scale + c);
  const float4 cu = *reinterpret_cast<const float4*>(p.col_scale + p.dim + c);
  float bg[4] = {}, bu[4] = {};
  if (p.bias != nullptr) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      bg[e] = __bfloat162float(p.bias[c + e]);
      bu[e] = __bfloat162float(p.bias[p.dim + c + e]);
    }
  }
  const float cgs[4] = {cg.x, cg.y, cg.z, cg.w}, cus[4] = {cu.x, cu.y, cu.z, cu.w};
  const int64_t row0 = int64_t{mt} * kTileM;
#pragma unroll 4
  for (int local = ew; local < kTileM; local += kEpilogueWarps) {
    const int64_t r = row0 + local;
    if (r >= p.m) break;
    const float rs = p.row_scale[r];
    const uint32_t at = sums + local * kSumsRowBytes + 8 * lane;
    uint32_t gw[2], uw[2];
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(gw[0]), "=r"(gw[1]) : "r"(at));
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                 : "=r"(uw[0]), "=r"(uw[1])
                 : "r"(at + 2 * kTileN));
    float out[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t gv = gw[e / 2], uv = uw[e / 2];
      const float gy = __uint_as_float(e % 2 == 0 ? gv << 16 : gv & 0xffff0000u);
      const float uy = __uint_as_float(e % 2 == 0 ? uv << 16 : uv & 0xffff0000u);
      out[e] = SiluTimes(Scaled(gy, rs, cgs[e], bg[e]), Scaled(uy, rs, cus[e], bu[e]));
    }
    const __nv_bfloat162 lo = __floats2bfloat162_rn(out[0], out[1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(out[2], out[3]);
    uint2 v;
    v.x = *reinterpret_cast<const uint32_t*>(&lo);
    v.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(p.out + r * p.ldo + c) = v;
  }
#endif
}

__global__ void __launch_bounds__(kThreads, 1)
    GateUpSiluKernel(const __grid_constant__ CUtensorMap x_map,
                     const __grid_constant__ CUtensorMap w_map, const GateUpParams p) {
#ifdef KILN_GATE_UP_SM90
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t full = base + kBarrierOffset;
  const uint32_t empty = full + 8 * kStages;
  const uint32_t sums_full = empty + 8 * kStages;
  const uint32_t sums_empty = sums_full + 8;
  const uint32_t sums = base + kSumsOffset;
  const int tid = threadIdx.x;
  const int k_blocks = p.k / kTileK;
  if (tid < kStages) {
    MbarrierInit(full + 8 * tid, 1);                // the producer's expect_tx arrival
    MbarrierInit(empty + 8 * tid, kConsumerWarps);  // every consumer warp
  }
  if (tid == kStages) {
    MbarrierInit(sums_full, 256);                   // every consumer thread, after its stores
    MbarrierInit(sums_empty, 32 * kEpilogueWarps);  // every epilogue thread, after its loads
  }
  if (tid <= kStages) FenceMbarrierInit();
  __syncthreads();

  if (tid < 128) {
    SetMaxRegisters<false, kProducerRegisters>();
    if (tid >= 32) {
      const int etid = tid - 32;
      uint32_t parity = 0;
      for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
        int mt, nt;
        TileOf(p, tile, &mt, &nt);
        MbarrierWait(sums_full, parity);
        SiluMulTile(p, sums, mt, nt, etid);
        MbarrierArrive(sums_empty);
        parity ^= 1;
      }
      return;
    }
    if (tid != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
      int mt, nt;
      TileOf(p, tile, &mt, &nt);
      for (int kb = 0; kb < k_blocks; ++kb) {
        MbarrierWait(empty + 8 * stage, phase ^ 1);  // a fresh barrier passes parity 1
        const uint32_t bar = full + 8 * stage;
        const uint32_t a = base + stage * kStageBytes;
        ArriveExpectTx(bar, kStageBytes);
        TmaLoad(a, &x_map, kb * kTileK, mt * kTileM, bar);
        TmaLoad(a + kATileBytes, &w_map, kb * kTileK, nt * kTileN, bar);
        TmaLoad(a + kATileBytes + kBHalfBytes, &w_map, kb * kTileK, p.dim + nt * kTileN, bar);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }
  SetMaxRegisters<true, kConsumerRegisters>();

  const int ctid = tid - 128;
  const uint32_t a_rows = (ctid / 128) * 64 * kTileK;  // this warpgroup's 64 tokens
  float d[32][4];
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) d[j][c] = 0.0f;
  }
  int stage = 0;
  uint32_t phase = 0, sums_parity = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    int prev = 0;
    for (int kb = 0; kb < k_blocks; ++kb) {
      MbarrierWait(full + 8 * stage, phase);
      const uint32_t a = base + stage * kStageBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 32; ++kk) {
        WgmmaE4m3N256(d, SmemDescSw128(a + a_rows + kk * 32, 0, 1024),
                      SmemDescSw128(a + kATileBytes + kk * 32, 0, 1024), kb > 0 || kk > 0);
      }
      WgmmaCommit();
      if (kb > 0) {
        WgmmaWait<1>();  // the previous k-block's batch is done with its stage
        if (ctid % 32 == 0) MbarrierArrive(empty + 8 * prev);
      }
      prev = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    WgmmaWait<0>();
    FenceAccumulators(d);
    if (ctid % 32 == 0) MbarrierArrive(empty + 8 * prev);
    MbarrierWait(sums_empty, sums_parity ^ 1);  // the epilogue has read the last tile's sums
    StoreSums(d, sums, ctid);
    MbarrierArrive(sums_full);
    sums_parity ^= 1;
  }
#endif
}

// Whether the current device runs the kernel (compute capability 9.0), with its dynamic shared
// memory granted: looked up and set up once a device.
[[maybe_unused]] bool DeviceRunsKernel() {
  static PerDeviceFact runs;
  return runs.Get([](int device) {
    return ComputeCapabilityIs(device, 9, 0) &&
           cudaFuncSetAttribute(GateUpSiluKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                kSmemBytes) == cudaSuccess;
  });
}

// cuTensorMapEncodeTiled from the driver (no link against libcuda); null where it is missing.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The tensor map of a [rows, k] matrix of bytes, boxes of 128 rows x 128 bytes, 128-byte swizzle
// (the wgmma's K-major layout), rows past the end read as zeros.
bool EncodeRows(const void* ptr, int64_t rows, int64_t k, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k)};
  const cuuint32_t box[2] = {kTileK, 128};
  const cuuint32_t steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box,
                steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

[[maybe_unused]] bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

bool Fp8GateUpSiluSupported(const Fp8GateUpSiluArgs& a) {
#ifndef KILN_SM90A
  (void)a;
  return false;
#else
  if (!DeviceRunsKernel() || TensorMapEncoder() == nullptr) return false;
  constexpr int64_t kMax = int64_t{1} << 31;
  const int64_t m_tiles = (a.m + kTileM - 1) / kTileM;
  return a.x != nullptr && a.w != nullptr && a.out != nullptr && a.scales.row != nullptr &&
         a.scales.col != nullptr && a.m >= 0 && a.m < kMax && a.k > 0 && a.k % kTileK == 0 &&
         a.k < kMax && a.dim > 0 && a.dim % kTileN == 0 && 2 * a.dim < kMax &&
         m_tiles * (a.dim / kTileN) < kMax && a.ldo >= a.dim && a.ldo % 4 == 0 &&
         Aligned(a.x, 16) && Aligned(a.w, 16) && Aligned(a.out, 8) && Aligned(a.scales.col, 16) &&
         Aligned(a.scales.bias, 2);
#endif
}

cudaError_t Fp8GateUpSilu(const Fp8GateUpSiluArgs& a, cudaStream_t stream) {
  if (!Fp8GateUpSiluSupported(a)) return cudaErrorInvalidValue;
  if (a.m == 0) return cudaSuccess;
  CUtensorMap x_map, w_map;
  if (!EncodeRows(a.x, a.m, a.k, &x_map) || !EncodeRows(a.w, 2 * a.dim, a.k, &w_map)) {
    return cudaErrorInvalidValue;
  }
  GateUpParams p;
  p.m = static_cast<int32_t>(a.m);
  p.k = static_cast<int32_t>(a.k);
  p.dim = static_cast<int32_t>(a.dim);
  p.m_tiles = static_cast<int32_t>((a.m + kTileM - 1) / kTileM);
  p.n_tiles = static_cast<int32_t>(a.dim / kTileN);
  p.num_tiles = p.m_tiles * p.n_tiles;
  p.row_scale = a.scales.row;
  p.col_scale = a.scales.col;
  p.bias = a.scales.bias;
  p.out = a.out;
  p.ldo = a.ldo;
  const int blocks = std::min(p.num_tiles, CurrentDeviceSmCount());
  GateUpSiluKernel<<<blocks, kThreads, kSmemBytes, stream>>>(x_map, w_map, p);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
