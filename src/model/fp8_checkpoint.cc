#include "model/fp8_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/dequant.h"

namespace kiln::internal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

int NumBits(const json& args) {
  return args.contains("num_bits") && args["num_bits"].is_number_integer()
             ? args["num_bits"].get<int>()
             : 0;
}

// One compressed-tensors quantization args object ("weights" or "input_activations") must be
// 8-bit float; strategies other than the listed ones are refused.
Status CheckFloat8Args(const json& args, const std::string& where,
                       std::initializer_list<const char*> strategies) {
  if (!args.is_object()) return Corrupt(where + ": expected an object");
  const std::string type = Str(args, "type");
  const int bits = NumBits(args);
  if (type != "float" || bits != 8) {
    return Unsupported(where + ": type '" + type + "' with num_bits " + std::to_string(bits) +
                       "; kiln runs compressed-tensors FP8 (type float, num_bits 8) only");
  }
  const std::string strategy = Str(args, "strategy");
  for (const char* s : strategies) {
    if (strategy == s) return Status::Ok();
  }
  std::string allowed;
  for (const char* s : strategies) allowed += std::string(allowed.empty() ? "" : ", ") + s;
  return Unsupported(where + ": strategy '" + strategy + "' is not supported (kiln reads " +
                     allowed + ")");
}

// compressed-tensors W8A8 int8 (llm-compressor's W8A8 / SmoothQuant recipes, format
// "int-quantized"): symmetric int8 weights per output channel, and activations either dynamic
// per token (what kiln runs) or static per tensor (accepted: kiln quantizes per token anyway).
Status CheckInt8Args(const json& args, const std::string& where, bool activations) {
  if (!args.is_object()) return Corrupt(where + ": expected an object");
  const std::string type = Str(args, "type");
  const int bits = NumBits(args);
  if (type != "int" || bits != 8) {
    return Unsupported(where + ": type '" + type + "' with num_bits " + std::to_string(bits) +
                       "; an int-quantized checkpoint must be int8 (type int, num_bits 8)");
  }
  if (args.contains("symmetric") && args["symmetric"].is_boolean() &&
      !args["symmetric"].get<bool>()) {
    return Unsupported(where + ": asymmetric int8 (zero points) is not supported");
  }
  const std::string strategy = Str(args, "strategy");
  const bool ok = activations ? (strategy == "token" || strategy == "tensor")
                              : (strategy == "channel" || strategy == "tensor");
  if (!ok) {
    return Unsupported(where + ": strategy '" + strategy + "' is not supported (kiln reads " +
                       (activations ? "token, tensor" : "channel, tensor") + ")");
  }
  return Status::Ok();
}

// Calls check(group, where) for each of a compressed-tensors quantization_config's config groups
// (each an object with "weights"); `where` names the group in errors.
Status ForEachConfigGroup(const json& qc, const std::string& file,
                          const std::function<Status(const json&, const std::string&)>& check) {
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() ||
      qc["config_groups"].empty()) {
    return Corrupt(file + ": compressed-tensors quantization_config has no config_groups");
  }
  for (auto& [name, group] : qc["config_groups"].items()) {
    const std::string where = file + ": quantization_config.config_groups." + name;
    if (!group.is_object() || !group.contains("weights")) {
      return Corrupt(where + ": expected an object with 'weights'");
    }
    KILN_RETURN_IF_ERROR(check(group, where));
  }
  return Status::Ok();
}

Result<CheckpointQuantization> FromCompressedTensorsInt8(const json& qc, const std::string& file) {
  CheckpointQuantization q;
  q.method = QuantMethod::kInt8;
  q.format = "compressed-tensors";
  q.config_file = file;
  KILN_RETURN_IF_ERROR(
      ForEachConfigGroup(qc, file, [](const json& group, const std::string& where) {
        KILN_RETURN_IF_ERROR(CheckInt8Args(group["weights"], where + ".weights", false));
        if (group.contains("input_activations") && !group["input_activations"].is_null()) {
          KILN_RETURN_IF_ERROR(
              CheckInt8Args(group["input_activations"], where + ".input_activations", true));
        }
        return Status::Ok();
      }));
  return q;
}

Result<CheckpointQuantization> FromCompressedTensors(const json& qc, const std::string& file) {
  CheckpointQuantization q;
  q.method = QuantMethod::kFp8;
  q.format = "compressed-tensors";
  q.config_file = file;
  const std::string format = Str(qc, "format");
  if (format == "int-quantized") return FromCompressedTensorsInt8(qc, file);
  if (!format.empty() && format != "float-quantized" && format != "naive-quantized") {
    return Unsupported(file + ": compressed-tensors format '" + format +
                       "' is not supported (kiln reads float-quantized FP8 and int-quantized "
                       "INT8)");
  }
  KILN_RETURN_IF_ERROR(
      ForEachConfigGroup(qc, file, [](const json& group, const std::string& where) {
        KILN_RETURN_IF_ERROR(
            CheckFloat8Args(group["weights"], where + ".weights", {"tensor", "channel"}));
        if (group.contains("input_activations") && !group["input_activations"].is_null()) {
          const json& in = group["input_activations"];
          const bool dynamic = in.is_object() && in.contains("dynamic") &&
                               in["dynamic"].is_boolean() && in["dynamic"].get<bool>();
          KILN_RETURN_IF_ERROR(CheckFloat8Args(in, where + ".input_activations",
                                               dynamic
                                                   ? std::initializer_list<const char*>{"token"}
                                                   : std::initializer_list<const char*>{"tensor"}));
        }
        return Status::Ok();
      }));
  return q;
}

Result<CheckpointQuantization> FromModelOpt(const json& qc, const std::string& file) {
  // config.json carries the fields at the top level; hf_quant_config.json under "quantization".
  const json& fields =
      qc.contains("quantization") && qc["quantization"].is_object() ? qc["quantization"] : qc;
  const std::string algo = Str(fields, "quant_algo");
  if (algo != "FP8" && algo != "FP8_PER_CHANNEL_PER_TOKEN") {
    return Unsupported(file + ": ModelOpt quant_algo '" + algo +
                       "' is not supported (kiln reads FP8 and FP8_PER_CHANNEL_PER_TOKEN)");
  }
  const std::string kv = Str(fields, "kv_cache_quant_algo");
  if (!kv.empty() && kv != "FP8") {
    return Unsupported(file + ": ModelOpt kv_cache_quant_algo '" + kv +
                       "' is not supported (kiln reads FP8)");
  }
  CheckpointQuantization q;
  q.method = QuantMethod::kFp8;
  q.format = "modelopt";
  q.config_file = file;
  return q;
}

Result<CheckpointQuantization> FromFp8(const json& qc, const std::string& file) {
  if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
    return Unsupported(file +
                       ": fp8 with weight_block_size (block-wise weight scales) is not supported; "
                       "kiln reads per-tensor and per-channel FP8 scales");
  }
  const std::string scheme = Str(qc, "activation_scheme");
  if (!scheme.empty() && scheme != "static" && scheme != "dynamic") {
    return Corrupt(file + ": fp8 activation_scheme '" + scheme + "' is not one of static, dynamic");
  }
  CheckpointQuantization q;
  q.method = QuantMethod::kFp8;
  q.format = "fp8";
  q.config_file = file;
  return q;
}

Result<json> ReadJson(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path + ": not a JSON object");
  return j;
}

// The fp32 values of a scale tensor with 1 or `rows` elements, each finite and positive.
Result<std::vector<float>> ReadScales(const TensorRef& ref, int64_t rows, bool per_row_allowed) {
  const SafetensorsTensor& t = *ref.tensor;
  const std::string where = ref.file + ": tensor '" + t.name + "'";
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
    return Corrupt(where + " has dtype " + std::string(DTypeName(t.dtype)) +
                   "; a scale must be f32, bf16 or f16");
  }
  const Shape& s = t.shape;
  const bool scalar = s.numel() == 1 && s.ndim() <= 1;
  const bool per_row = per_row_allowed && s.ndim() >= 1 && s[0] == rows && s.numel() == rows &&
                       (s.ndim() == 1 || (s.ndim() == 2 && s[1] == 1));
  if (!scalar && !per_row) {
    return Corrupt(where + " has shape " + s.ToString() + "; expected [] or [1]" +
                   (per_row_allowed ? " (per tensor) or [" + std::to_string(rows) + ", 1] (per " +
                                          "output channel)"
                                    : ""));
  }
  std::vector<float> values(s.numel());
  KILN_RETURN_IF_ERROR(
      DequantizeToF32(t.dtype, t.data, t.nbytes, s.numel(), values.data()).WithContext(where));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]) || !(values[i] > 0)) {
      return Corrupt(where + " element " + std::to_string(i) + " is " + std::to_string(values[i]) +
                     "; a scale must be finite and positive");
    }
  }
  return values;
}

struct KvScale {
  float value;
  std::string where;  // file and tensor
};

// A per-layer KV scale under any of the names producers use; nullopt when absent.
Result<std::optional<KvScale>> FindKvScale(const TensorLookup& find, const std::string& layer,
                                           char kv, std::set<std::string>* used) {
  const std::string names[] = {
      layer + "self_attn." + kv + "_scale",                  // compressed-tensors, vLLM
      layer + "self_attn." + kv + "_proj." + kv + "_scale",  // ModelOpt
      layer + "self_attn." + kv + "_proj.output_scale",      // older compressed-tensors
      layer + "self_attn.kv_scale",                          // deprecated: K and V
  };
  for (const std::string& name : names) {
    if (std::optional<TensorRef> ref = find(name)) {
      KILN_ASSIGN_OR_RETURN(std::vector<float> v, ReadScales(*ref, 1, false));
      used->insert(name);
      return std::optional<KvScale>({v[0], ref->file + ": tensor '" + name + "'"});
    }
  }
  return std::optional<KvScale>();
}

}  // namespace

Result<CheckpointQuantization> ReadCheckpointQuantization(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  KILN_ASSIGN_OR_RETURN(json config, ReadJson(config_path));
  if (config.contains("quantization_config") && !config["quantization_config"].is_null()) {
    const json& qc = config["quantization_config"];
    if (!qc.is_object()) return Corrupt(config_path + ": quantization_config is not an object");
    const std::string method = Str(qc, "quant_method");
    if (method == "fp8") return FromFp8(qc, config_path);
    if (method == "compressed-tensors") return FromCompressedTensors(qc, config_path);
    if (method == "modelopt") return FromModelOpt(qc, config_path);
    if (method == "awq" || method == "gptq") {  // details: w4_checkpoint.h
      CheckpointQuantization q;
      q.method = QuantMethod::kW4A16;
      q.format = method;
      q.config_file = config_path;
      return q;
    }
    return Unsupported(config_path + ": quantization_config.quant_method '" + method +
                       "' is not supported; kiln loads FP8 checkpoints (fp8, compressed-tensors, "
                       "modelopt) and 4-bit AWQ / GPTQ checkpoints, and makes INT8 / INT4 engines "
                       "with kiln build");
  }
  const std::string modelopt_path = (fs::path(dir) / "hf_quant_config.json").string();
  if (fs::exists(modelopt_path)) {
    KILN_ASSIGN_OR_RETURN(json qc, ReadJson(modelopt_path));
    return FromModelOpt(qc, modelopt_path);
  }
  return CheckpointQuantization();
}

Status AttachFp8Scales(CheckpointQuantization* quantization, int num_layers,
                       const TensorLookup& find, std::vector<Weight>* weights,
                       std::vector<KvCacheScales>* kv, std::set<std::string>* used) {
  const bool fp8 = quantization->method == QuantMethod::kFp8;
  const bool int8 = quantization->method == QuantMethod::kInt8;
  // The dtype of the checkpoint's quantized linear weights (F8_E4M3 unless declared int8).
  const DType quantized = int8 ? DType::kI8 : DType::kF8E4M3;
  const std::string quantized_name = int8 ? "I8" : "F8_E4M3";
  for (Weight& w : *weights) {
    if (!w.name.ends_with(".weight")) continue;
    const std::string source_prefix = w.source_name.substr(0, w.source_name.size() - 7);
    const std::string where = w.file + ": tensor '" + w.source_name + "'";
    std::optional<TensorRef> scale = find(source_prefix + ".weight_scale");
    if (w.dtype != quantized) {
      if (scale) {
        return Corrupt(scale->file + ": tensor '" + source_prefix + ".weight_scale' belongs to '" +
                       w.source_name + "', which is " + std::string(DTypeName(w.dtype)) + ", not " +
                       quantized_name);
      }
      continue;
    }
    if (w.shape.ndim() != 2) {
      if (int8) return Unsupported(where + ": an I8 tensor that is not a linear weight");
      continue;  // an fp8 vector: plain values, as before
    }
    if (!fp8 && !int8) {
      return Unsupported(where +
                         " is F8_E4M3 but config.json declares no FP8 quantization_config (fp8, "
                         "compressed-tensors or modelopt), so its scales are unknown");
    }
    if (w.name == "model.embed_tokens.weight") {
      return Unsupported(where + ": an " + quantized_name + " embedding is not supported");
    }
    if (!scale) {
      return NotFound(where + " is " + quantized_name + " but '" + source_prefix +
                      ".weight_scale' is missing from the checkpoint");
    }
    const int64_t rows = w.shape[0];
    KILN_ASSIGN_OR_RETURN(std::vector<float> values, ReadScales(*scale, rows, true));
    quantization->per_channel |= values.size() > 1 || rows == 1;
    w.row_scales = values.size() == 1 ? std::vector<float>(rows, values[0]) : values;
    used->insert(source_prefix + ".weight_scale");
    if (std::optional<TensorRef> input = find(source_prefix + ".input_scale")) {
      KILN_ASSIGN_OR_RETURN(std::vector<float> input_scale, ReadScales(*input, 1, false));
      quantization->static_activations = true;
      used->insert(source_prefix + ".input_scale");
      // FP8 runs the static scale (model/quantization.h), as vLLM does. An int8 checkpoint's is
      // checked only: INT8 activations are always quantized per token.
      if (fp8) w.input_scale = input_scale[0];
    }
  }
  kv->clear();
  int with_scales = 0;
  std::string first_where;
  std::vector<KvCacheScales> scales(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".";
    KILN_ASSIGN_OR_RETURN(std::optional<KvScale> k, FindKvScale(find, layer, 'k', used));
    KILN_ASSIGN_OR_RETURN(std::optional<KvScale> v, FindKvScale(find, layer, 'v', used));
    if (k.has_value() != v.has_value()) {
      return Corrupt((k ? k->where : v->where) + " is a " + (k ? "K" : "V") +
                     " cache scale, but layer " + std::to_string(l) + " has no " + (k ? "V" : "K") +
                     " cache scale");
    }
    if (k) {
      scales[l] = {k->value, v->value};
      if (with_scales++ == 0) first_where = k->where;
    }
  }
  if (with_scales > 0 && with_scales < num_layers) {
    return Corrupt(first_where + ": KV cache scales are present for " +
                   std::to_string(with_scales) + " of " + std::to_string(num_layers) +
                   " layers; a calibrated checkpoint has all or none");
  }
  if (with_scales == num_layers && num_layers > 0) *kv = std::move(scales);
  return Status::Ok();
}

}  // namespace kiln::internal
