// Internal to Checkpoint::OpenHfDirectory: AutoAWQ and GPTQ checkpoints (config.json
// quantization_config quant_method "awq" / "gptq", 4 bits) converted at open into kiln's W4A16
// format (model/quantization.h; Weight::w4). docs/quantization.md, "Loading AutoAWQ and GPTQ
// checkpoints", gives the layouts:
//
//   awq (GEMM)  P.qweight int32 [in, out / 8]: nibble i of word (r, c) is output column
//               8c + [0, 2, 4, 6, 1, 3, 5, 7][i]; P.qzeros int32 [in / g, out / 8] packed
//               alike; P.scales fp16 [in / g, out]; w = (q - z) * s, q, z in 0..15.
//   gptq        P.qweight int32 [in / 8, out]: nibble i of word (r, c) is input row 8r + i;
//               P.qzeros int32 [in / g, out / 8], nibble i = output column 8c + i, holding
//               z - 1 (GPTQ v1; "checkpoint_format": "gptq_v2" holds z); P.scales fp16
//               [in / g, out]; P.g_idx int32 [in]: the group of each input channel (desc_act
//               permutes them); w[o, i] = (q[i, o] - z[g_idx[i], o]) * s[g_idx[i], o].
//
// Each becomes P.weight: kI4 [out, in] (codes q - 8, zeros z - 8) with W4Params; a g_idx that
// is not i / g becomes the act-order permutation (channels sorted by group, stably).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/fp8_checkpoint.h"
#include "model/weights.h"

namespace kiln::internal {

// The W4 quantization_config of config.json.
struct W4CheckpointConfig {
  std::string method;        // "awq" or "gptq"
  int32_t group_size = 0;    // -1 in the file (one group per row) becomes the input size
  bool zero_offset = false;  // gptq v1: stored zeros are z - 1
};

// Reads quantization_config from `config_path` (JSON text `config_text`) when it declares awq
// or gptq; method "" otherwise. Errors: Unsupported for bits other than 4, AWQ versions other
// than gemm, AWQ without zero points; Corrupt for a malformed declaration.
Result<W4CheckpointConfig> ReadW4CheckpointConfig(const std::string& config_path);

// Builds the W4A16 weight `spec` from `P.qweight`, `P.qzeros`, `P.scales` (and `P.g_idx`) of
// the checkpoint, where spec.name is "P.weight". The packed codes are appended to `storage`
// (the Weight points into it) and the source tensors' names to `used`. Errors name the file
// and tensor: NotFound for a missing part, Corrupt for a dtype or shape that does not match,
// a g_idx that is not a grouping of equal groups, or a zero point kiln's format cannot hold
// (a GPTQ v1 zero stored as 15, i.e. z = 16).
Result<Weight> ConvertW4Weight(const W4CheckpointConfig& config, const WeightSpec& spec,
                               const TensorLookup& find, std::vector<std::vector<uint8_t>>* storage,
                               std::set<std::string>* used);

}  // namespace kiln::internal
