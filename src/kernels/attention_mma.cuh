// Warp-level building blocks of the paged attention kernels (attention.cu): cp.async, ldmatrix,
// mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate), and one warp's online-softmax step over a
// tile of keys held in shared memory. Plain sm_80 instructions, so the same code runs on Ampere and
// Hopper. T, the element type of Q, K, V and of the P fragments, is __nv_bfloat16 or __half; only
// the mma's operand type and P's packing depend on it (ldmatrix moves 16-bit words of any type).
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A 16x16 (row major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B 16x8  (col major): b0 = (2t..2t+1, g),  b1 = (2t+8.., g)
//   C 16x8:              c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// Two neighbouring C tiles of S = Q K^T are exactly the A fragment of P for P V (FlashAttention-2's
// register reuse), so P never goes through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/dtype_traits.cuh"

namespace kiln::kernels::attention_internal {

// Shared-memory tiles pad each row by 16 bytes: consecutive rows then start 4 banks apart, so the
// 8 row addresses of one ldmatrix phase hit 32 distinct banks (no conflicts, no swizzle).
template <int kHeadDim>
inline constexpr int kSmemStride = kHeadDim + 8;

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy to a shared-memory address (SmemAddr); copies zeros instead when
// !valid (src is then not read).
__device__ __forceinline__ void CpAsync16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  CpAsync16(SmemAddr(smem), gmem, valid);
}
// The same, always valid.
__device__ __forceinline__ void CpAsync16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// kBytes (8 or 16) of shared memory at address smem (SmemAddr) into r[0 .. kBytes / 4).
template <int kBytes>
__device__ __forceinline__ void LdShared(uint32_t smem, uint32_t* r) {
  if constexpr (kBytes == 16) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem));
  } else {
    static_assert(kBytes == 8, "8 or 16 bytes");
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem));
  }
}

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

// c += a * b for one m16n8k16 tile, a and b holding pairs of T.
template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "T is __nv_bfloat16 or __half");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x on the SFU without exp2f's denormal handling; exp2(-inf) is still 0.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Loads a warp's 16 query rows (smem, kSmemStride apart) as A fragments, one per 16 columns.
template <int kHeadDim, typename T>
__device__ __forceinline__ void LoadQFragments(const T* q_smem, uint32_t (&qf)[kHeadDim / 16][4]) {
  const int lane = threadIdx.x % 32;
  const int row = (lane & 7) + (((lane >> 3) & 1) << 3);
  const int col = (lane >> 4) << 3;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    Ldmatrix4(qf[kk], q_smem + row * kSmemStride<kHeadDim> + kk * 16 + col);
  }
}

// One warp's running softmax state for its kM tiles of 16 query rows: thread (g, t) owns rows g
// and g + 8 of each tile (index 2 * mi + r). m is the running maximum in log2 units (score *
// scale * log2 e); l the running sum of exp2(score - m) over this thread's columns only (the
// quad's partial sums are added at the end).
template <int kHeadDim, int kM = 1>
struct WarpState {
  float o[kM][kHeadDim / 8][4];
  float m[2 * kM];
  float l[2 * kM];

  __device__ __forceinline__ void Init() {
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < 2 * kM; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
  }

  // Adds the quad's partial sums; returns 1/l per row (0 for a row that saw no key).
  __device__ __forceinline__ void Finish(float (&inv_l)[2 * kM]) {
#pragma unroll
    for (int r = 0; r < 2 * kM; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      inv_l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
  }
};

// One online-softmax step for row g (r = 0) or g + 8 (r = 1) of a 16-row tile of scores s (C
// fragments of kN8 n tiles of 8 keys): m (log2 units) and l become the running maximum and sum,
// s's scores of the row become exp2(score * scale_log2 - m) (the P values), and the factor that
// O's row must be multiplied by is returned (exactly 1 where the maximum did not grow).
// kLog2Gain > 0 scales P and l by 2^kLog2Gain (exact; the e4m3 P of the Hopper prefill kernel
// keeps small weights out of the subnormals that way), O / l is unchanged.
template <int kN8, int kLog2Gain = 0>
__device__ __forceinline__ float SoftmaxRowStep(float (&s)[kN8][4], int r, float scale_log2,
                                                float& m, float& l) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kN8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m, mx * scale_log2);
  // NOTE: a row with every key so far masked keeps m = -inf; subtract 0 then so that
  // exp2(-inf - base) is 0 rather than NaN.
  const float base = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = FastExp2(m - base);
  m = m_new;
  const float shift = static_cast<float>(kLog2Gain) - base;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kN8; ++j) {
    s[j][2 * r] = FastExp2(s[j][2 * r] * scale_log2 + shift);
    s[j][2 * r + 1] = FastExp2(s[j][2 * r + 1] * scale_log2 + shift);
    sum += s[j][2 * r] + s[j][2 * r + 1];
  }
  l = l * alpha + sum;
  return alpha;
}

// Attends the warp's kM tiles of 16 query rows to kTileN keys whose K and V rows sit in shared
// memory (kSmemStride apart), updating the online softmax state. q_frag(kk, mi, a) yields the A
// fragment of columns 16 kk .. 16 kk + 15 of row tile mi (held in registers, or loaded from
// shared memory: with kM = 2 each K / V fragment feeds twice the mma's, halving the shared-memory
// reads per FLOP, and Q's are reloaded instead of taking 64 registers). Key key0 + j is masked
// for row index i (2 * mi + r) when key0 + j > max_pos[i] (causal mask and sequence end); masking
// is skipped when !need_mask. Masked keys' V rows must be finite (the loaders zero-fill them):
// 0 * NaN would poison O. P is rounded to T, V's type, for the P V product (half an ulp: at most
// 2^-8 relative in bf16, 2^-11 in fp16).
template <int kHeadDim, int kTileN, int kM, typename T, typename QFrag>
__device__ __forceinline__ void WarpAttendTileM(const QFrag& q_frag, const T* k_smem,
                                                const T* v_smem, float scale_log2, bool need_mask,
                                                int key0, const int (&max_pos)[2 * kM],
                                                WarpState<kHeadDim, kM>& st) {
  constexpr int kStride = kSmemStride<kHeadDim>;
  const int lane = threadIdx.x % 32;
  float s[kM][kTileN / 8][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j)
      s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.0f;
  }

  // S = Q K^T. K is [key][dim] in smem, i.e. B = K^T already column major: plain ldmatrix.
  {
    const int n = (lane & 7) + ((lane >> 4) << 3);
    const int k = ((lane >> 3) & 1) << 3;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t a[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) q_frag(kk, mi, a[mi]);
#pragma unroll
      for (int nn = 0; nn < kTileN / 16; ++nn) {
        uint32_t b[4];
        Ldmatrix4(b, k_smem + (nn * 16 + n) * kStride + kk * 16 + k);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          Mma<T>(s[mi][2 * nn], a[mi], b[0], b[1]);
          Mma<T>(s[mi][2 * nn + 1], a[mi], b[2], b[3]);
        }
      }
    }
  }

  const int t = lane & 3;
  if (need_mask) {
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int j = 0; j < kTileN / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = key0 + j * 8 + 2 * t + (c & 1);
          if (key > max_pos[2 * mi + (c >> 1)]) s[mi][j][c] = -INFINITY;
        }
      }
    }
  }

  // Online softmax, rows g (r = 0) and g + 8 (r = 1) of each row tile.
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * mi + r;
      const float alpha = SoftmaxRowStep(s[mi], r, scale_log2, st.m[i], st.l[i]);
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        st.o[mi][d][2 * r] *= alpha;
        st.o[mi][d][2 * r + 1] *= alpha;
      }
    }
  }

  // O += P V. V is [key][dim] in smem; B = V needs (key pairs, dim) per thread: ldmatrix.trans.
  {
    const int key = (lane & 7) + (((lane >> 3) & 1) << 3);
    const int dim = (lane >> 4) << 3;
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      uint32_t a[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        a[mi][0] = dtype_internal::PackPair<T>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = dtype_internal::PackPair<T>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = dtype_internal::PackPair<T>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = dtype_internal::PackPair<T>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < kHeadDim / 16; ++dd) {
        uint32_t b[4];
        Ldmatrix4Trans(b, v_smem + (kk * 16 + key) * kStride + dd * 16 + dim);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          Mma<T>(st.o[mi][2 * dd], a[mi], b[0], b[1]);
          Mma<T>(st.o[mi][2 * dd + 1], a[mi], b[2], b[3]);
        }
      }
    }
  }
}

// WarpAttendTileM for one row tile whose Q fragments are held in registers (qf).
template <int kHeadDim, int kTileN, typename T>
__device__ __forceinline__ void WarpAttendTile(const uint32_t (&qf)[kHeadDim / 16][4],
                                               const T* k_smem, const T* v_smem, float scale_log2,
                                               bool need_mask, int key0, const int (&max_pos)[2],
                                               WarpState<kHeadDim>& st) {
  WarpAttendTileM<kHeadDim, kTileN, 1>(
      [&](int kk, int, uint32_t(&a)[4]) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qf[kk][e];
      },
      k_smem, v_smem, scale_log2, need_mask, key0, max_pos, st);
}

}  // namespace kiln::kernels::attention_internal
