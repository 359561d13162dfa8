// W4A16 quantizers for kiln build (docs/quantization.md, "W4A16: RTN, AWQ, GPTQ"): each turns
// the decoder layers' linear weights (and lm_head on request) of an opened Checkpoint into the
// W4A16 format of model/quantization.h (packed signed 4-bit codes, fp16 group scales, int8
// zeros, optional act-order permutation), groups of `group_size` consecutive stored columns.
//
//   RTN   round to nearest: per (row, group) asymmetric min/max, scale = (max - min) / 15,
//         zero = round(-min / scale) clamped to [0, 15] (stored minus 8).
//   AWQ   activation-aware scaling: per input channel s = mean|x|^alpha (normalized), alpha
//         searched over a grid in [0, 1) for the smallest output error on calibration rows;
//         the weight columns are multiplied by s before RTN and 1/s folds into the op that
//         produces the input (input_layernorm for qkv, post_attention_layernorm for gate/up, the
//         up_proj rows for down). o_proj is not scaled (its input is attention's output: for a
//         GQA model v_proj cannot absorb it, as AutoAWQ also skips it), only clipped. Then a
//         clipping search per (row, group) (AWQ's auto_clip; not for q and k).
//   GPTQ  Hessian-based: H = 2 X^T X over the calibration inputs of each site (one H per input:
//         q/k/v share it, gate/up share it), 1 % dampening, columns quantized one at a time
//         with the error fed back through the upper Cholesky factor of H^-1, in lazy blocks of
//         128 columns; act-order sorts the columns by diag(H) descending (Weight::W4Params::perm,
//         the same for every part of a fused site).
//
// Calibration runs the CPU runner once over the calibration sequences (the unquantized model,
// not layer by layer on the partly quantized one) with W4Calibrator observing every linear
// input. Output rows are in the checkpoint's own row order (a GGUF file's q/k rows stay in its
// interleaved layout; Checkpoint::qk_rope_layout says which).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "builder/quantize.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/quantization.h"

namespace kiln {

enum class W4Algorithm : uint8_t { kRtn, kAwq, kGptq };
std::string_view W4AlgorithmName(W4Algorithm algorithm);  // "rtn", "awq", "gptq"

struct W4Options {
  W4Algorithm algorithm = W4Algorithm::kRtn;
  int32_t group_size = 128;  // must divide every linear layer's input size (and be even)
  bool act_order = true;     // GPTQ only
  double gptq_damp = 0.01;   // of mean(diag(H))
  int32_t awq_grid = 20;     // alphas 0, 1/grid, ..., (grid - 1) / grid
  bool awq_clip = true;
  int32_t awq_sample_rows = 512;  // calibration rows kept per site for AWQ's error
  // Also quantize lm_head (kiln build --quantize-lm-head), with group_size and no act-order, by
  // the same algorithm on its calibration inputs (the final norm's outputs; AWQ folds its 1/s
  // into model.norm.weight, returned as an f32 tensor). A tied model's lm_head is its embedding:
  // the result is then a separate "lm_head.weight" (the embedding stays 16-bit for the lookup;
  // WriteEngine unties the engine's config). Its vocab size must be a multiple of 16 (the CUDA
  // W4A16 kernels' row tile). false (default): lm_head stays in the engine dtype. 4 bits cut the
  // bytes batch-1 decode reads for it to about a quarter (Llama-3.1-8B, group 128: 1.05 GB of bf16
  // against 0.27 GB) at some cost in accuracy (docs/quantization.md, "4-bit lm_head").
  bool quantize_lm_head = false;
  int num_threads = 0;  // 0 = every core
};

// One decoder layer's linear input site (cpu_runner.h ActivationObserver::Site).
struct W4SiteStats {
  int64_t cols = 0;
  int64_t rows_seen = 0;
  std::vector<double> abs_sum;  // [cols] sum |x|
  std::vector<float> samples;   // [num_samples, cols] every stride-th row
  int64_t num_samples = 0;
  std::vector<double> gram;  // [cols, cols] sum x^T x (GPTQ), or empty
  float absmax = 0;          // max |x| over every row
};

// Collects what the W4 quantizers need from the calibration pass.
class W4Calibrator : public ActivationObserver {
 public:
  // sample_stride: keep every sample_stride-th row (up to max_samples) per site. lm_head: also
  // observe lm_head's input (lm_head_stats()).
  W4Calibrator(int num_layers, bool gram, int64_t sample_stride, int64_t max_samples,
               int num_threads, bool lm_head = false);
  void ObserveLinearInput(int layer, Site site, const float* x, int64_t rows, int64_t cols,
                          int64_t ld) override;
  void ObserveKv(int, const float*, const float*, int64_t, int64_t, int64_t) override {}
  bool wants_lm_head_input() const override { return lm_head_; }
  void ObserveLmHeadInput(const float* x, int64_t rows, int64_t cols, int64_t ld) override;
  const W4SiteStats& stats(int layer, Site site) const {
    return sites_[layer * 4 + static_cast<int>(site)];
  }
  const W4SiteStats& lm_head_stats() const { return lm_head_stats_; }

 private:
  void Accumulate(W4SiteStats& s, const float* x, int64_t rows, int64_t cols, int64_t ld);

  bool gram_;
  bool lm_head_;
  W4SiteStats lm_head_stats_;
  int64_t sample_stride_;
  int64_t max_samples_;
  int num_threads_;
  std::vector<W4SiteStats> sites_;  // [layer * 4 + site]
};

// Quantizes every decoder layer's q/k/v/o/gate/up/down weight (and lm_head with
// options.quantize_lm_head). `calibration`: token sequences (unused by RTN). Returns the W4A16
// tensors under their HF names ("lm_head.weight" also for a tied model) and, for AWQ, the
// changed norm weights (f32; model.norm.weight too with lm_head). Errors: InvalidArgument naming
// the tensor when the group size does not divide its input size (or is odd, or < 2), when lm_head's
// row count (the vocab size) is not a multiple of 16, or when AWQ/GPTQ get no calibration tokens;
// those of the checkpoint's weights and of the calibration pass.
Result<QuantizedModel> QuantizeW4(const Checkpoint& ckpt, const W4Options& options,
                                  const std::vector<std::vector<int32_t>>& calibration);

// FP8 W8A8 weights by GPTQ (kiln build --quant fp8 --weight-rounding gptq): per output channel
// e4m3 as model/quantization.h defines it (row scale Fp8RowScale of the row's amax), the codes
// chosen column by column with the rounding error fed back through the inverse Hessian of each
// input site (as for W4A16, q/k/v and gate/up sharing theirs), so that the layer's output on
// the calibration inputs moves less than round-to-nearest's. The format is plain FP8: nothing
// changes at run time.
struct Fp8GptqOptions {
  bool act_order = true;  // columns in order of decreasing diag(H) (codes stored unpermuted)
  double damp = 0.01;     // of mean(diag(H))
  bool static_activations = false;  // + input_scale = Fp8RowScale(calibrated max |x|)
  int num_threads = 0;              // 0 = every core
};
// Errors: InvalidArgument without calibration tokens; Unsupported for a quantized source;
// those of the weights and of the calibration pass.
Result<QuantizedModel> QuantizeFp8Gptq(const Checkpoint& ckpt, const Fp8GptqOptions& options,
                                       const std::vector<std::vector<int32_t>>& calibration);

namespace internal {

// RTN of one row's group of `size` values: writes codes [-8, 7] and returns (fp16 scale bits,
// zero in [-8, 7]). The scale is rounded to fp16 before the codes are chosen.
std::pair<uint16_t, int8_t> QuantizeGroupRtn(const float* w, int64_t size, int8_t* codes);

// GPTQ of w [n, k] (modified: ends as the dequantized weight) with Hessian h [k, k] (modified).
// Returns codes [n, k] (stored order), scales/zeros [n, k / group], perm ([k] or empty).
struct W4Codes {
  std::vector<int8_t> codes;
  Weight::W4Params params;
};
W4Codes Gptq(std::vector<float>& w, int64_t n, int64_t k, std::vector<double> h, int32_t group,
             bool act_order, double damp, int num_threads);
W4Codes Rtn(const float* w, int64_t n, int64_t k, int32_t group);

// GPTQ with e4m3 rounding (FP8 W8A8 weights, model/quantization.h): per output channel, the
// row scale Fp8RowScale of the original row, each column rounded by Fp8KvEncode (an error fed
// back past 448 * scale saturates). w [n, k] ends as the dequantized weight (act-order:
// permuted). Returns codes [n, k] in input-channel order and the row scales [n].
struct Fp8Codes {
  std::vector<uint8_t> codes;
  std::vector<float> row_scales;
};
Fp8Codes GptqFp8(std::vector<float>& w, int64_t n, int64_t k, std::vector<double> h, bool act_order,
                 double damp, int num_threads);

// The upper Cholesky factor U of a^-1 (a^-1 = U^T U) for a symmetric positive definite a [k, k];
// false if a is not positive definite.
bool UpperCholeskyOfInverse(std::vector<double>& a, int64_t k);

}  // namespace internal
}  // namespace kiln
