#include "builder/quantized_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_weights.h"
#include "core/logging.h"
#include "model/config.h"
#include "model/dequant.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json Int8QuantizationConfig() {
  const json weights = {{"type", "int"},         {"num_bits", 8},    {"symmetric", true},
                        {"strategy", "channel"}, {"dynamic", false}, {"group_size", nullptr},
                        {"observer", "minmax"}};
  const json inputs = {{"type", "int"},       {"num_bits", 8},   {"symmetric", true},
                       {"strategy", "token"}, {"dynamic", true}, {"group_size", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr}};
}

struct Pending {
  SafetensorsTensorSpec spec;
  std::vector<uint8_t> owned;     // bytes we made
  const uint8_t* data = nullptr;  // else the source's mapped bytes
  int64_t nbytes = 0;
};

Pending Owned(std::string name, DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  Pending p;
  p.spec = {std::move(name), dtype, shape};
  p.owned = std::move(bytes);
  p.nbytes = static_cast<int64_t>(p.owned.size());
  return p;
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A GGUF tensor the QuantizedModel left alone, as f32 in HF layout (q/k rows and biases
// un-permuted).
Result<Pending> FromGguf(const Checkpoint& src, const Weight& w) {
  std::vector<float> values(w.shape.numel());
  KILN_RETURN_IF_ERROR(DequantizeToF32(w.dtype, w.data, w.nbytes, values.size(), values.data())
                           .WithContext(w.file + ": tensor '" + w.source_name + "'"));
  const ModelConfig& c = src.config();
  const bool q = w.name.find("self_attn.q_proj.") != std::string::npos;
  const bool k = w.name.find("self_attn.k_proj.") != std::string::npos;
  if (src.qk_rope_layout() == QkRopeLayout::kInterleaved && (q || k)) {
    const int64_t cols = w.shape.ndim() == 2 ? w.shape[1] : 1;
    std::vector<float> hf(values.size());
    cpu::UnpermuteQkRows(reinterpret_cast<const uint8_t*>(values.data()),
                         q ? c.num_heads : c.num_kv_heads, c.head_dim,
                         cols * static_cast<int64_t>(sizeof(float)),
                         reinterpret_cast<uint8_t*>(hf.data()));
    values = std::move(hf);
  }
  return Owned(w.name, DType::kF32, w.shape, FloatBytes(values));
}

}  // namespace

Status WriteCompressedTensorsCheckpoint(const Checkpoint& src, const QuantizedModel& model,
                                        const std::string& out_dir, int64_t max_shard_bytes) {
  if (model.method != QuantMethod::kInt8 && model.method != QuantMethod::kNone) {
    return InvalidArgument("a compressed-tensors export is written for int8-sq models, not " +
                           std::string(QuantMethodName(model.method)));
  }
  std::error_code ec;
  if (fs::exists(out_dir) && !fs::is_empty(out_dir, ec)) {
    return InvalidArgument(out_dir + ": exists and is not empty");
  }
  fs::create_directories(out_dir, ec);
  if (ec) return IoError(out_dir + ": cannot create the directory: " + ec.message());

  std::vector<Pending> tensors;
  for (const Weight& w : src.weights()) {
    if (const QuantizedTensor* t = model.Find(w.name)) {
      std::vector<uint8_t> bytes = t->bytes;
      std::vector<uint8_t> scales = FloatBytes(t->row_scales);
      const bool q = t->name.ends_with("self_attn.q_proj.weight");
      if (src.qk_rope_layout() == QkRopeLayout::kInterleaved &&
          (q || t->name.ends_with("self_attn.k_proj.weight"))) {
        // Rows in the source's (GGUF) order: HF order here, each row's scale with it.
        const int64_t heads = q ? src.config().num_heads : src.config().num_kv_heads;
        for (std::vector<uint8_t>* v : {&bytes, &scales}) {
          if (v->empty()) continue;
          std::vector<uint8_t> hf(v->size());
          cpu::UnpermuteQkRows(v->data(), heads, src.config().head_dim,
                               static_cast<int64_t>(v->size()) / t->shape[0], hf.data());
          *v = std::move(hf);
        }
      }
      tensors.push_back(Owned(t->name, t->dtype, t->shape, std::move(bytes)));
      if (!t->row_scales.empty()) {
        const std::string prefix = t->name.substr(0, t->name.size() - 7);  // minus ".weight"
        tensors.push_back(Owned(prefix + ".weight_scale", DType::kF32,
                                Shape{static_cast<int64_t>(t->row_scales.size()), 1},
                                std::move(scales)));
      }
    } else if (src.format() == CheckpointFormat::kGguf) {
      KILN_ASSIGN_OR_RETURN(Pending p, FromGguf(src, w));
      tensors.push_back(std::move(p));
    } else {
      Pending p;
      p.spec = {w.name, w.dtype, w.shape};
      p.data = w.data;
      p.nbytes = w.nbytes;
      tensors.push_back(std::move(p));
    }
  }
  for (size_t l = 0; l < model.kv_scales.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    tensors.push_back(
        Owned(p + "k_scale", DType::kF32, Shape{}, FloatBytes({model.kv_scales[l].k_scale})));
    tensors.push_back(
        Owned(p + "v_scale", DType::kF32, Shape{}, FloatBytes({model.kv_scales[l].v_scale})));
  }
  std::vector<SafetensorsTensorSpec> specs;
  for (const Pending& p : tensors) specs.push_back(p.spec);
  KILN_ASSIGN_OR_RETURN(SafetensorsLayout layout, PlanSafetensorsShards(specs, max_shard_bytes));
  KILN_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                        SafetensorsWriter::Create(out_dir, layout, specs));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Pending& p = tensors[i];
    const uint8_t* data = p.data != nullptr ? p.data : p.owned.data();
    KILN_RETURN_IF_ERROR(writer.WriteTensorBytes(static_cast<int>(i), 0, data, p.nbytes));
  }
  KILN_RETURN_IF_ERROR(writer.Finish());

  json config;
  if (src.format() == CheckpointFormat::kHfDirectory) {
    KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(src.path() + "/config.json"));
    config = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) return Corrupt(src.path() + "/config.json: not a JSON object");
  } else {
    config = json::parse(ToHfConfigJson(src.config()));
    config["torch_dtype"] = "float32";
  }
  if (model.method == QuantMethod::kInt8) config["quantization_config"] = Int8QuantizationConfig();
  KILN_RETURN_IF_ERROR(WriteTextFile(out_dir + "/config.json", config.dump(2) + "\n"));

  if (src.format() == CheckpointFormat::kHfDirectory) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "generation_config.json", "chat_template.jinja"}) {
      const fs::path from = fs::path(src.path()) / name;
      if (!fs::exists(from)) continue;
      fs::copy_file(from, fs::path(out_dir) / name, ec);
      if (ec) return IoError(out_dir + "/" + name + ": cannot copy: " + ec.message());
    }
  } else {
    LOG(WARNING) << out_dir << ": written without a tokenizer (" << src.path()
                 << " is a GGUF file, whose tokenizer has no tokenizer.json form here); a kiln "
                    "engine directory (kiln build) keeps it";
  }
  return Status::Ok();
}

}  // namespace kiln
