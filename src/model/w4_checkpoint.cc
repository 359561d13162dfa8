#include "model/w4_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "model/config.h"
#include "model/dequant.h"

namespace kiln::internal {
namespace {

using nlohmann::json;

// AWQ's GEMM packing: nibble i of a word holds column kAwqOrder[i] of its 8.
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

int Nibble(const uint8_t* words, int64_t word, int i) {
  uint32_t v;
  std::memcpy(&v, words + word * 4, 4);
  return static_cast<int>((v >> (4 * i)) & 0xf);
}

Result<TensorRef> Need(const TensorLookup& find, const std::string& name, DType dtype,
                       const Shape& shape) {
  std::optional<TensorRef> t = find(name);
  if (!t)
    return NotFound("tensor '" + name + "' is missing (a W4 checkpoint's linear layer needs it)");
  if (t->tensor->dtype != dtype || !(t->tensor->shape == shape)) {
    return Corrupt(t->file + ": tensor '" + name + "' is " +
                   std::string(DTypeName(t->tensor->dtype)) + " " + t->tensor->shape.ToString() +
                   ", expected " + std::string(DTypeName(dtype)) + " " + shape.ToString());
  }
  return *t;
}

}  // namespace

Result<W4CheckpointConfig> ReadW4CheckpointConfig(const std::string& config_path) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(config_path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  W4CheckpointConfig c;
  if (j.is_discarded() || !j.is_object() || !j.contains("quantization_config") ||
      !j["quantization_config"].is_object()) {
    return c;
  }
  const json& qc = j["quantization_config"];
  const std::string method = qc.contains("quant_method") && qc["quant_method"].is_string()
                                 ? qc["quant_method"].get<std::string>()
                                 : "";
  if (method != "awq" && method != "gptq") return c;
  const std::string where = config_path + ": quantization_config (" + method + ")";
  auto get_int = [&](const char* key, const char* alt) -> std::optional<int> {
    for (const char* k : {key, alt}) {
      if (k != nullptr && qc.contains(k) && qc[k].is_number_integer()) return qc[k].get<int>();
    }
    return std::nullopt;
  };
  const std::optional<int> bits = get_int("bits", "w_bit");
  if (bits != 4) {
    return Unsupported(where + ": " + (bits ? std::to_string(*bits) : std::string("missing")) +
                       " bits; kiln runs 4-bit AWQ / GPTQ (W4A16)");
  }
  const std::optional<int> group = get_int("group_size", "q_group_size");
  if (!group || *group == 0 || *group < -1) {
    return Corrupt(where + ": group_size must be a positive integer or -1");
  }
  c.method = method;
  c.group_size = *group;
  if (method == "awq") {
    const std::string version = qc.contains("version") && qc["version"].is_string()
                                    ? qc["version"].get<std::string>()
                                    : "gemm";
    std::string lower = version;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower != "gemm") {
      return Unsupported(where + ": AWQ version '" + version +
                         "' is not supported (kiln reads the GEMM layout)");
    }
    if (qc.contains("zero_point") && qc["zero_point"].is_boolean() &&
        !qc["zero_point"].get<bool>()) {
      return Unsupported(where + ": AWQ without zero points is not supported");
    }
  } else {
    const std::string format =
        qc.contains("checkpoint_format") && qc["checkpoint_format"].is_string()
            ? qc["checkpoint_format"].get<std::string>()
            : "gptq";
    if (format != "gptq" && format != "gptq_v2") {
      return Unsupported(where + ": checkpoint_format '" + format +
                         "' is not supported (kiln reads gptq and gptq_v2)");
    }
    c.zero_offset = format == "gptq";
  }
  return c;
}

Result<Weight> ConvertW4Weight(const W4CheckpointConfig& config, const WeightSpec& spec,
                               const TensorLookup& find, std::vector<std::vector<uint8_t>>* storage,
                               std::set<std::string>* used) {
  const std::string prefix = spec.name.substr(0, spec.name.size() - std::string("weight").size());
  const int64_t n = spec.shape[0];  // out
  const int64_t k = spec.shape[1];  // in
  const int64_t g = config.group_size == -1 ? k : config.group_size;
  const std::string name = spec.name;
  if (k % g != 0 || g % 2 != 0 || n % 8 != 0 || k % 8 != 0) {
    return Unsupported("'" + name + "' [" + std::to_string(n) + ", " + std::to_string(k) +
                       "] with group size " + std::to_string(g) +
                       ": kiln needs an even group size dividing the input size and both sizes "
                       "multiples of 8");
  }
  const int64_t groups = k / g;
  const bool awq = config.method == "awq";
  KILN_ASSIGN_OR_RETURN(TensorRef qweight, Need(find, prefix + "qweight", DType::kI32,
                                                awq ? Shape({k, n / 8}) : Shape({k / 8, n})));
  KILN_ASSIGN_OR_RETURN(TensorRef qzeros,
                        Need(find, prefix + "qzeros", DType::kI32, Shape({groups, n / 8})));
  std::optional<TensorRef> scales_ref = find(prefix + "scales");
  if (!scales_ref) return NotFound("tensor '" + prefix + "scales' is missing");
  const SafetensorsTensor& st = *scales_ref->tensor;
  if (!(st.shape == Shape({groups, n})) || !CanDequantizeToF32(st.dtype) ||
      !GetDTypeInfo(st.dtype).is_float) {
    return Corrupt(scales_ref->file + ": tensor '" + st.name + "' is " +
                   std::string(DTypeName(st.dtype)) + " " + st.shape.ToString() +
                   ", expected a float tensor " + Shape({groups, n}).ToString());
  }
  std::vector<float> scales(groups * n);
  KILN_RETURN_IF_ERROR(DequantizeToF32(st.dtype, st.data, st.nbytes, groups * n, scales.data())
                           .WithContext(scales_ref->file + ": tensor '" + st.name + "'"));
  used->insert({prefix + "qweight", prefix + "qzeros", prefix + "scales"});

  // The group of each input channel, and the permutation that sorts channels by it.
  std::vector<int32_t> group_of(k);
  for (int64_t i = 0; i < k; ++i) group_of[i] = static_cast<int32_t>(i / g);
  if (!awq) {
    if (std::optional<TensorRef> gi = find(prefix + "g_idx")) {
      used->insert(prefix + "g_idx");
      if (gi->tensor->dtype != DType::kI32 || !(gi->tensor->shape == Shape({k}))) {
        return Corrupt(gi->file + ": tensor '" + prefix + "g_idx' must be int32 [" +
                       std::to_string(k) + "]");
      }
      std::memcpy(group_of.data(), gi->tensor->data, k * sizeof(int32_t));
    }
  }
  std::vector<int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int32_t a, int32_t b) { return group_of[a] < group_of[b]; });
  bool identity = true;
  for (int64_t j = 0; j < k; ++j) {
    if (group_of[perm[j]] != j / g) {
      return Corrupt("'" + prefix + "g_idx' does not put " + std::to_string(g) +
                     " input channels in each of the " + std::to_string(groups) + " groups");
    }
    identity &= perm[j] == j;
  }

  Weight::W4Params params;
  params.group_size = static_cast<int32_t>(g);
  params.scales.resize(n * groups);
  params.zeros.resize(n * groups);
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t o = 0; o < n; ++o) {
      const int64_t word = grp * (n / 8) + o / 8;
      int z = 0;
      if (awq) {
        // Position of column o % 8 among the nibbles.
        int pos = 0;
        while (kAwqOrder[pos] != o % 8) ++pos;
        z = Nibble(qzeros.tensor->data, word, pos);
      } else {
        z = Nibble(qzeros.tensor->data, word, static_cast<int>(o % 8)) +
            (config.zero_offset ? 1 : 0);
      }
      if (z > 15) {
        return Unsupported(qzeros.file + ": tensor '" + prefix +
                           "qzeros' holds a GPTQ v1 zero point of 16 " +
                           "(stored 15 + 1) at group " + std::to_string(grp) + ", column " +
                           std::to_string(o) + "; kiln's W4A16 zeros are 0..15");
      }
      params.zeros[o * groups + grp] = static_cast<int8_t>(z - 8);
      params.scales[o * groups + grp] = F32ToF16(scales[grp * n + o]);
    }
  }
  std::vector<uint8_t> codes(n * k / 2, 0);
  for (int64_t o = 0; o < n; ++o) {
    int pos = 0;
    while (kAwqOrder[pos] != o % 8) ++pos;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = perm[j];  // the input channel of stored column j
      const int q = awq ? Nibble(qweight.tensor->data, i * (n / 8) + o / 8, pos)
                        : Nibble(qweight.tensor->data, (i / 8) * n + o, static_cast<int>(i % 8));
      const uint8_t nib = static_cast<uint8_t>((q - 8) & 0xf);
      const int64_t e = o * k + j;
      codes[e / 2] |= (e % 2 == 0) ? nib : static_cast<uint8_t>(nib << 4);
    }
  }
  if (!identity) params.perm = std::move(perm);
  storage->push_back(std::move(codes));
  Weight w;
  w.name = spec.name;
  w.source_name = prefix + "qweight";
  w.file = qweight.file;
  w.dtype = DType::kI4;
  w.shape = spec.shape;
  w.nbytes = n * k / 2;
  w.data = storage->back().data();
  w.w4 = std::move(params);
  return w;
}

}  // namespace kiln::internal
