// Warpgroup-level building blocks of the Hopper prefill kernel (attention_prefill_sm90.cu):
// shared-memory matrix descriptors for the 128-byte swizzle, and wgmma.mma_async m64n128k16 with
// fp32 accumulators, A from shared memory or from registers. sm_90a only: everything here
// compiles to nothing elsewhere (KILN_WGMMA unset), and the launcher never picks the kernel there.
//
// Shared-memory tiles (PTX ISA "Shared Memory Matrix Layout", 128-byte swizzle): a tile of R
// rows of 128 16-bit elements is two column blocks of 64 elements, [2][R][64]; row r of a block
// is 128 bytes whose 16-byte chunk c sits at chunk c ^ (r % 8) (SwizzledOffset). Tiles start at
// 1,024-byte boundaries (the swizzle repeats every 8 rows). Read as
//   K-major (rows = M or N, the 64 elements = K):  SBO = 1,024 (8 rows), a k16 step is +32 bytes
//                                                  in a block, the next block +R * 128 bytes
//   MN-major (rows = K, the 64 elements = N):      LBO = R * 128 (the next 64 N), SBO = 1,024
//                                                  (the next 8 K rows), a k16 step +2,048 bytes
// so one [keys][head_dim] tile serves as K (K-major B of S = Q K^T) and as V (MN-major B of
// O = P V) alike.
//
// Accumulator layout of m64nNk16 (thread = 32 w + 4 g + t of the warpgroup): d[j][c] is row
// 16 w + g + 8 (c / 2), column 8 j + 2 t + (c % 2): per warp the layout of mma.sync m16n8's C
// tiles, so SoftmaxRowStep and FlashAttention-2's P reuse apply unchanged; the A fragment from
// registers is mma.sync m16n8k16's A for the warp's 16 rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WGMMA 1
#endif

namespace kiln::kernels::attention_internal {

// Byte offset of 16-byte chunk `chunk` (0..15: elements 8 chunk .. 8 chunk + 7) of row `row` in
// a swizzled [2][kRows][64] tile of 16-bit elements.
template <int kRows>
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk) {
  return (chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// Matrix descriptor of a 128-byte-swizzled operand at shared address `addr` (PTX "Matrix
// Descriptor Format": start, leading and stride byte offsets in 16-byte units, base offset 0,
// layout type 1 = 128-byte swizzle).
__device__ __forceinline__ uint64_t SmemDescSw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t{(addr & 0x3ffff) >> 4} | uint64_t{(lbo >> 4) & 0x3fff} << 16 |
         uint64_t{(sbo >> 4) & 0x3fff} << 32 | uint64_t{1} << 62;
}

// Orders the warpgroup's register accesses before the wgmma's that follow (every wgmma batch
// whose accumulators or A registers were touched since the last one).
__device__ __forceinline__ void WgmmaFence() {
#ifdef KILN_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#ifdef KILN_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
#ifdef KILN_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Makes this thread's shared-memory writes (st.shared, cp.async) visible to the async proxy
// (wgmma's operand reads); then a barrier, then the wgmma.
__device__ __forceinline__ void FenceProxyAsync() {
#ifdef KILN_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- mbarriers, named barriers, register limits (the prefill kernel's warp specialization) ----
// Addresses are shared-memory addresses (SmemAddr) of 8-byte-aligned barriers. A phase of a
// barrier completes when its expected arrivals are in; waits name the phase's parity.

__device__ __forceinline__ void MbarrierInit(uint32_t bar, uint32_t arrivals) {
#ifdef KILN_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}
// Makes this thread's barrier inits visible to the other threads (and the async proxy); a
// __syncthreads must follow before anyone uses them.
__device__ __forceinline__ void FenceMbarrierInit() {
#ifdef KILN_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void MbarrierArrive(uint32_t bar) {
#ifdef KILN_WGMMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// One arrival on `bar` once this thread's cp.async copies so far have landed (counted in the
// barrier's expected arrivals: .noinc).
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) {
#ifdef KILN_WGMMA
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
// The transaction bytes the next phase of `bar` waits for, with this thread's arrival.
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
#ifdef KILN_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t parity) {
#ifdef KILN_WGMMA
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
#endif
}
// The calling warpgroup's registers a thread from here on: kIncrease raises the limit to kCount
// (waiting until the register file has them), else lowers it (freeing them). Every thread of the
// warpgroup executes it.
template <bool kIncrease, int kCount>
__device__ __forceinline__ void SetMaxRegisters() {
#ifdef KILN_WGMMA
  if constexpr (kIncrease) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kCount));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kCount));
  }
#endif
}
// Waits at named barrier `id` until `count` threads have arrived there.
__device__ __forceinline__ void NamedBarrierSync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Keeps the compiler from moving accesses of the 64 accumulators across a wgmma issue or wait
// (the asm's operands are read and written asynchronously).
__device__ __forceinline__ void FenceAccumulators(float (&d)[16][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
  }
}

// The 64 accumulators of an m64n128 wgmma: the asm's register list (operands %0..%63) and its
// operands d[16][4].
#define KILN_WGMMA_D_REGS                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define KILN_WGMMA_D_OPERANDS(d)                                                                  \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),   \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),   \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),   \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),   \
      "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),   \
      "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
      "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),             \
      "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),             \
      "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),             \
      "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),             \
      "+f"(d[15][2]), "+f"(d[15][3])

// The wgmma's of the two wrappers below for operand type TYPE ("f16" or "bf16"): SS takes
// descriptors a, b and the accumulate flag, RS the A fragment a[4] and descriptor b.
#define KILN_WGMMA_SS(TYPE)                                                              \
  asm volatile(                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                       \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " KILN_WGMMA_D_REGS \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                    \
      : KILN_WGMMA_D_OPERANDS(d)                                                         \
      : "l"(a), "l"(b), "r"(int{accumulate}))
#define KILN_WGMMA_RS_TRANS_B(TYPE)                                                      \
  asm volatile(                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                       \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " KILN_WGMMA_D_REGS \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                      \
      : KILN_WGMMA_D_OPERANDS(d)                                                         \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

// d (+)= A B for m64n128k16, fp32 accumulators; A and B from shared memory (descriptors, both
// K-major), M = __half or __nv_bfloat16. accumulate = false overwrites d.
template <typename M>
__device__ __forceinline__ void WgmmaSS(float (&d)[16][4], uint64_t a, uint64_t b,
                                        bool accumulate) {
#ifdef KILN_WGMMA
  static_assert(std::is_same_v<M, __half> || std::is_same_v<M, __nv_bfloat16>,
                "M is __half or __nv_bfloat16");
  if constexpr (std::is_same_v<M, __half>) {
    KILN_WGMMA_SS("f16");
  } else {
    KILN_WGMMA_SS("bf16");
  }
#endif
}

// d += A B for m64n128k16, fp32 accumulators; A from registers (a: the warp's m16n8k16 A
// fragment of pairs of M), B from shared memory, MN-major (transposed).
template <typename M>
__device__ __forceinline__ void WgmmaRSTransB(float (&d)[16][4], const uint32_t (&a)[4],
                                              uint64_t b) {
#ifdef KILN_WGMMA
  static_assert(std::is_same_v<M, __half> || std::is_same_v<M, __nv_bfloat16>,
                "M is __half or __nv_bfloat16");
  if constexpr (std::is_same_v<M, __half>) {
    KILN_WGMMA_RS_TRANS_B("f16");
  } else {
    KILN_WGMMA_RS_TRANS_B("bf16");
  }
#endif
}

// The e4m3 versions (m64n128k32: a k-step is 32 bytes of a 128-byte row, as k16 is for 16-bit
// types). 8-bit wgmma reads both shared-memory operands K-major only, so P V needs V transposed
// in shared memory. SS: A and B from shared memory; RS: A from registers, a[0] / a[1] = rows g /
// g + 8 of the warp's 16, k = 4 t .. 4 t + 3 (byte 0 the lowest k), a[2] / a[3] the same at
// k = 16 + 4 t .. (mma.sync m16n8k32's 8-bit A fragment).
__device__ __forceinline__ void WgmmaSSE4m3(float (&d)[16][4], uint64_t a, uint64_t b,
                                            bool accumulate) {
#ifdef KILN_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " KILN_WGMMA_D_REGS
      "%64, %65, p, 1, 1;\n}\n"
      : KILN_WGMMA_D_OPERANDS(d)
      : "l"(a), "l"(b), "r"(int{accumulate}));
#endif
}
__device__ __forceinline__ void WgmmaRSE4m3(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef KILN_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " KILN_WGMMA_D_REGS
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : KILN_WGMMA_D_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
#endif
}

#undef KILN_WGMMA_SS
#undef KILN_WGMMA_RS_TRANS_B
#undef KILN_WGMMA_D_REGS
#undef KILN_WGMMA_D_OPERANDS

}  // namespace kiln::kernels::attention_internal
