// The gate_up projection of an FP8 MLP with SiluMul in its epilogue, for prompt steps on Hopper
// (sm_90a: TMA loads, e4m3 wgmma; fp8_gate_up_sm90.cu). Raw device pointers + sizes + stream; no
// engine types; returns the launch status and never synchronizes.
//
// What it replaces: Gemm::Fp8GemmUnscaled writing the unscaled gate and up sums in bf16 (2 dim
// values a token), then kernels::SiluMulFp8 reading them back. Here the sums stay in registers:
// each block owns 128 tokens x 128 columns of gate *and* the same 128 columns of up, and writes
// only silu(gate) * up in bf16 (dim values a token); QuantizeRowsFp8 (or its static variant)
// then makes the down projection's e4m3 input and scales from it, the codes SiluMulFp8 writes.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/elementwise.h"

namespace kiln::kernels {

// For rows r < m and columns c < dim, with the e4m3 sums
//   G = sum_k x[r, k] * w[c, k],  U = sum_k x[r, k] * w[dim + c, k]   (fp32 accumulation)
// rounded to bf16 as Fp8GemmUnscaled's output, then scaled as SiluMulFp8 scales its unscaled
// input (scales.row[r], scales.col[c] resp. [dim + c], scales.bias: Fp8InputScales):
//   out[r, c] = bf16(bf16(silu(g)) * u)
// the products SiluMulFp8 computes before it quantizes them (the same arithmetic and roundings).
struct Fp8GateUpSiluArgs {
  const __nv_fp8_e4m3* x = nullptr;  // [m, k] contiguous: the tokens' e4m3 codes
  int64_t m = 0;
  int64_t k = 0;
  const __nv_fp8_e4m3* w = nullptr;  // [2 dim, k] contiguous: gate rows, then up rows
  int64_t dim = 0;
  Fp8InputScales scales;         // row [m], col [2 dim], bias [2 dim] or null
  __nv_bfloat16* out = nullptr;  // [m, dim], row stride ldo
  int64_t ldo = 0;
};

// Whether this build and the current device run Fp8GateUpSilu on these operands: an sm_90a
// build on a compute capability 9.0 device; k and dim multiples of 128; x, w and the column
// scales 16-byte aligned; ldo >= dim and a multiple of 4, out 8-byte aligned; row and column
// scales given; m, k, 2 dim below 2^31.
bool Fp8GateUpSiluSupported(const Fp8GateUpSiluArgs& args);

// REQUIRES: Fp8GateUpSiluSupported(args) (else cudaErrorInvalidValue, nothing launched).
cudaError_t Fp8GateUpSilu(const Fp8GateUpSiluArgs& args, cudaStream_t stream);

}  // namespace kiln::kernels
