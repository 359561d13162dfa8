// FusedDecode: every decoder layer of a batch-1 decode step in one persistent kernel, for
// Llama-style models whose linear layers are e4m3 weights with per-output-channel scales (the FP8
// engine's W8A16 decode path) on Hopper.
//
// Why: launched op by op (norm, qkv, RoPE + KV write, attention, o, norm, gate_up, SiluMul, down,
// ~10 kernels a layer), a batch-1 step idles DRAM between the linear layers while the small
// kernels run and while each GEMV ramps up and drains. Here each SM owns a fixed slice of the
// rows of every weight, and one warp streams the SM's slices of all layers, in the order they
// are used, through a ring of shared-memory stages (bulk copies completing on mbarriers) without
// waiting for the activations: the weights are no kernel's output. Between a layer's qkv and o
// weights it also copies the K and V rows its attention work needs (all but the step's own
// token's). The other warps compute each phase once its input is ready (a grid-wide barrier
// between dependent phases), from the stages already landed. DRAM keeps streaming through the
// norms, attention and the barriers as long as the ring has room (~8.5 us of an SM's share of
// the bandwidth).
//
// Per layer, with h the fp32 residual stream and x, attn, act bf16:
//   1. x = rms_norm(h) * input_norm (every CTA computes all of x into shared memory);
//   2. qkv = x . W_qkv^T (+ bias) into qkv_out;                                  grid barrier
//   3. RoPE on q and k, the token's k and v into the paged cache, attention over the context
//      split over CTAs (kv head, context split), the splits merged by the last CTA to finish a
//      kv head;                                                                     grid barrier
//   4. h += attn . W_o^T (+ bias);                                                  grid barrier
//   5. x = rms_norm(h) * post_norm;
//   6. act = silu(gate) * up, each CTA owning the same columns of gate and up;      grid barrier
//   7. h += act . W_down^T (+ bias) (the last layer writes its output to delta instead, which
//      the final norm adds, as the op-by-op step leaves it);                        grid barrier
// The roundings are the op-by-op step's (the GEMV's summation order, bf16 outputs, the norm's
// reduction order, RoPE's and SiluMul's arithmetic), so every value up to attention's output is
// the same bits as there; attention sums in another order (fp32; positions in the order the
// ring's stages bring them).
//
// The grid is one CTA per SM, launched cooperatively (all CTAs resident: the grid barriers
// need it), so it is graph-capturable and fixed in size. Every function returns the launch
// status; nothing synchronizes or allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace kiln::kernels {

// One decoder layer. Weights are row-major [out, in] e4m3 codes, value = code * scale[out];
// biases may be null. The cache is [num_blocks, num_kv_heads, block_size, head_dim] of bf16, or
// of e4m3 codes with the layer's k_scale / v_scale (kernels/attention.h); every pointer 16-byte
// aligned (FusedDecodeLayerOk).
struct FusedDecodeLayer {
  const __nv_bfloat16* input_norm = nullptr;  // [hidden]
  const __nv_bfloat16* post_norm = nullptr;   // [hidden]
  const __nv_fp8_e4m3* qkv = nullptr;         // [q + 2 kv, hidden]
  const float* qkv_scale = nullptr;
  const __nv_bfloat16* qkv_bias = nullptr;
  const __nv_fp8_e4m3* o = nullptr;  // [hidden, q]
  const float* o_scale = nullptr;
  const __nv_bfloat16* o_bias = nullptr;
  const __nv_fp8_e4m3* gate_up = nullptr;  // [2 intermediate, hidden]: gate rows, then up rows
  const float* gate_up_scale = nullptr;
  const __nv_bfloat16* gate_up_bias = nullptr;
  const __nv_fp8_e4m3* down = nullptr;  // [hidden, intermediate]
  const float* down_scale = nullptr;
  const __nv_bfloat16* down_bias = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  float k_scale = 1.0f;  // an fp8 cache's dequantization scales; 1 for a bf16 cache
  float v_scale = 1.0f;
};

struct FusedDecodeArgs {
  const FusedDecodeLayer* layers = nullptr;  // device array [num_layers]
  int32_t num_layers = 0;
  int32_t hidden = 0;
  int32_t intermediate = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 64 or 128
  float rms_eps = 1e-5f;
  float attn_scale = 1.0f;          // softmax scale
  bool fp8_cache = false;           // the caches hold e4m3 codes
  const float* inv_freq = nullptr;  // device [head_dim / 2]
  bool interleaved_rope = false;
  // The step's one token (device scalars, read at run time: graph-capturable).
  const int32_t* position = nullptr;
  const int64_t* slot = nullptr;     // its cache slot; < 0: no KV write
  const int32_t* seq_len = nullptr;  // context length including the token; 0: no attention
  const int32_t* block_table = nullptr;
  int32_t block_size = 16;
  // In: the token's embedding; out: the last layer's down output (the final norm adds it to h).
  __nv_bfloat16* delta = nullptr;  // [hidden]
  float* residual = nullptr;       // [hidden], out: h before the last down output
  // Scratch, 16-byte aligned: [q + 2 kv], [q], [intermediate] bf16; FusedDecodeWorkspaceBytes
  // of fp32 partials; FusedDecodeSyncBytes of counters, zeroed once before the first launch
  // (every launch leaves them zero).
  __nv_bfloat16* qkv_out = nullptr;
  __nv_bfloat16* attn_out = nullptr;
  __nv_bfloat16* act_out = nullptr;
  float* partials = nullptr;
  uint32_t* sync = nullptr;
  // Benchmarks only (decode_fused_bench): kFusedDecode* bits that skip work (the results are
  // then wrong), and a device array of FusedDecodeTraceWords(num_layers) words where CTA 0
  // records %globaltimer and its SM's clock at each phase boundary of every layer. 0 / null in
  // the engine.
  uint32_t debug = 0;
  uint64_t* trace = nullptr;
};
inline constexpr uint32_t kFusedDecodeSkipDot = 1;        // consumers only wait and release
inline constexpr uint32_t kFusedDecodeSkipGridSync = 2;   // CTA barriers instead of grid ones
inline constexpr uint32_t kFusedDecodeSkipAttention = 4;  // no RoPE, KV write or attention
inline constexpr uint32_t kFusedDecodeSkipCopy = 8;  // stages released empty: no weight or KV read
// No producer, no stage waits, no attention: the consumers' own pace.
inline constexpr uint32_t kFusedDecodeSkipRing = 16;
// Per layer: the consumers' 12 phase boundaries (start, norm, qkv, barrier, attention, barrier,
// o, barrier, gate + up, barrier, down, barrier), then the time the producer had issued the
// layer's last copy; %globaltimer for every layer, then the SM's clock64 at the same points.
inline constexpr int kFusedDecodeTracePoints = 13;
inline int64_t FusedDecodeTraceWords(int32_t num_layers) {
  return 2 * int64_t{num_layers} * kFusedDecodeTracePoints;
}

size_t FusedDecodeWorkspaceBytes(int32_t num_heads, int32_t head_dim);
size_t FusedDecodeSyncBytes(int32_t num_kv_heads);

// Whether a layer's pointers are as FusedDecodeLayer requires (host-side copy of the layer).
bool FusedDecodeLayerOk(const FusedDecodeLayer& layer, bool fp8_cache);
// Whether FusedDecode runs these shapes on the current device: compute capability 9.0 or later
// with this build's sm_90 code, head_dim 64 or 128, at most 8 query heads a kv head, at least
// as many SMs as kv heads, hidden, q and intermediate multiples of 16 and at most 16,384 (hidden
// at most 8,192), at most 256 rows of any weight an SM, the scratch pointers aligned.
bool FusedDecodeSupported(const FusedDecodeArgs& a);
// The device half of FusedDecodeSupported: whether the current device runs the kernel at all.
bool FusedDecodeDeviceRuns();
cudaError_t FusedDecode(const FusedDecodeArgs& a, cudaStream_t stream);

}  // namespace kiln::kernels
