#include "model/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/logging.h"
#include "model/checkpoint_files.h"
#include "model/engine_dir.h"
#include "model/fp8_checkpoint.h"
#include "model/w4_checkpoint.h"
#include "model/weights.h"

namespace kiln {
namespace fs = std::filesystem;

std::string_view CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kHfDirectory:
      return "hf";
    case CheckpointFormat::kGguf:
      return "gguf";
    case CheckpointFormat::kEngine:
      return "engine";
  }
  return "unknown";
}

Checkpoint::Checkpoint() : files_(std::make_unique<Files>()) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const Weight* Checkpoint::Find(std::string_view hf_name) const {
  for (const Weight& w : weights_) {
    if (w.name == hf_name) return &w;
  }
  return nullptr;
}

DType DefaultGpuDType(const Checkpoint& ckpt) {
  if (ckpt.engine().has_value())
    return ckpt.engine()->dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
  if (ckpt.format() == CheckpointFormat::kGguf) return DType::kF16;
  return ckpt.config().dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
}

int64_t Checkpoint::WeightBytes() const {
  int64_t n = 0;
  for (const Weight& w : weights_) n += w.nbytes;
  return n;
}

std::map<DType, int64_t> Checkpoint::WeightBytesByDType() const {
  std::map<DType, int64_t> m;
  for (const Weight& w : weights_) m[w.dtype] += w.nbytes;
  return m;
}

int64_t Checkpoint::NumStoredParameters() const {
  int64_t n = 0;
  for (const Weight& w : weights_) n += w.shape.numel();
  return n;
}

Result<Checkpoint> Checkpoint::Open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return NotFound(path +
                    ": no such file or directory (expected an HF checkpoint directory "
                    "or a .gguf file)");
  }
  if (fs::is_directory(st)) {
    return IsEngineDirectory(path) ? OpenEngine(path) : OpenHfDirectory(path);
  }
  // A file: GGUF is recognised by its magic, not its name.
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") return OpenGguf(path);
  if (path.ends_with(".safetensors") || path.ends_with(".json")) {
    return InvalidArgument(path +
                           ": pass the checkpoint directory that holds config.json and "
                           "the weights, not one of its files");
  }
  return Unsupported(path +
                     ": not a GGUF file (bad magic) and not a directory; kiln loads HF "
                     "checkpoint directories and GGUF files");
}

Status ValidateWeight(const WeightSpec& spec, const Weight& w, std::string_view config_path) {
  if (!(w.shape == spec.shape)) {
    return Corrupt(w.file + ": tensor '" + w.source_name + "' has shape " + w.shape.ToString() +
                   " but " + std::string(config_path) + " implies " + spec.shape.ToString());
  }
  return Status::Ok();
}

Result<Checkpoint> Checkpoint::OpenHfDirectory(const std::string& dir) {
  Checkpoint ckpt;
  ckpt.format_ = CheckpointFormat::kHfDirectory;
  ckpt.path_ = dir;
  ckpt.name_ = fs::path(dir).lexically_normal().filename().string();
  if (ckpt.name_.empty())
    ckpt.name_ = fs::path(dir).lexically_normal().parent_path().filename().string();

  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) {
    return NotFound(config_path + ": missing; an HF checkpoint directory needs config.json");
  }
  KILN_ASSIGN_OR_RETURN(ckpt.config_, LoadHfConfig(config_path));
  // Before the weights: a method kiln cannot run (AWQ's qweight, ...) fails with its name.
  KILN_ASSIGN_OR_RETURN(ckpt.quantization_, internal::ReadCheckpointQuantization(dir));
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path)) {
    KILN_ASSIGN_OR_RETURN(ckpt.generation_config_, LoadGenerationConfig(gen_path));
  }

  // Weight files: a sharded index, or one model.safetensors.
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (fs::exists(index_path)) {
    KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return Corrupt(index_path + ": not a JSON object with a 'weight_map' object");
    }
    std::set<std::string> seen;
    for (auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string())
        return Corrupt(index_path + ": shard of '" + tensor + "' is not a string");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        return Corrupt(index_path + ": shard name '" + f + "' for '" + tensor +
                       "' must be a file name inside the checkpoint directory");
      }
      weight_map[tensor] = f;
      if (seen.insert(f).second) shard_names.push_back(f);
    }
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else if (fs::exists(fs::path(dir) / "pytorch_model.bin") ||
             fs::exists(fs::path(dir) / "pytorch_model.bin.index.json")) {
    return Unsupported(dir +
                       ": holds PyTorch .bin weights; kiln reads safetensors (convert with "
                       "transformers' save_pretrained(safe_serialization=True))");
  } else {
    return NotFound(dir + ": no model.safetensors or model.safetensors.index.json");
  }

  std::map<std::string, const SafetensorsTensor*> by_name;
  std::map<std::string, size_t> shard_of;
  for (const std::string& shard : shard_names) {
    const std::string p = (fs::path(dir) / shard).string();
    auto file = SafetensorsFile::Open(p);
    if (!file.ok()) {
      if (file.status().code() == StatusCode::kNotFound) {
        return NotFound(p + ": shard listed in model.safetensors.index.json is missing");
      }
      return file.status();
    }
    ckpt.files_->safetensors.push_back(std::move(file).value());
  }
  for (size_t i = 0; i < ckpt.files_->safetensors.size(); ++i) {
    for (const SafetensorsTensor& t : ckpt.files_->safetensors[i].tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != shard_names[i]) continue;
      }
      if (!by_name.emplace(t.name, &t).second) {
        return Corrupt(ckpt.files_->safetensors[i].path() + ": tensor '" + t.name +
                       "' appears in more than one shard");
      }
      shard_of[t.name] = i;
    }
  }
  for (auto& [tensor, shard] : weight_map) {
    if (!by_name.count(tensor)) {
      return NotFound((fs::path(dir) / shard).string() + ": tensor '" + tensor +
                      "' listed in model.safetensors.index.json is not in this shard");
    }
  }

  // GPTQModel's quantized lm_head (lm_head.qweight ...) of a tied model is a matrix of its own:
  // the model runs untied, its embedding stays as stored for the lookup.
  if (ckpt.quantization_.method == QuantMethod::kW4A16 && ckpt.config_.tie_word_embeddings &&
      by_name.count("lm_head.qweight")) {
    ckpt.config_.tie_word_embeddings = false;
  }
  const std::vector<WeightSpec> specs = ExpectedWeights(ckpt.config_);
  std::set<std::string> expected;
  std::set<std::string> scale_tensors;
  auto find = [&](const std::string& name) -> std::optional<internal::TensorRef> {
    auto it = by_name.find(name);
    if (it == by_name.end()) return std::nullopt;
    return internal::TensorRef{it->second, ckpt.files_->safetensors[shard_of[name]].path()};
  };
  internal::W4CheckpointConfig w4;
  int num_converted = 0;
  if (ckpt.quantization_.method == QuantMethod::kW4A16) {
    KILN_ASSIGN_OR_RETURN(w4, internal::ReadW4CheckpointConfig(config_path));
  }
  for (const WeightSpec& spec : specs) {
    expected.insert(spec.name);
    if (!w4.method.empty() && !by_name.count(spec.name) && spec.name.ends_with(".weight") &&
        by_name.count(spec.name.substr(0, spec.name.size() - 6) + "qweight")) {
      auto converted =
          internal::ConvertW4Weight(w4, spec, find, &ckpt.files_->converted, &scale_tensors);
      if (!converted.ok()) return converted.status().WithContext(dir);
      ckpt.weights_.push_back(std::move(converted).value());
      ++num_converted;
      continue;
    }
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      return NotFound(dir + ": weight '" + spec.name + "' is missing (config.json implies it)");
    }
    const SafetensorsTensor& t = *it->second;
    Weight w{spec.name, t.name, ckpt.files_->safetensors[shard_of[t.name]].path(), t.dtype, t.shape,
             t.nbytes,  t.data};
    // int8 linear weights only in an int8 checkpoint (AttachFp8Scales attaches their scales).
    const bool int8_weight =
        w.dtype == DType::kI8 && ckpt.quantization_.method == QuantMethod::kInt8;
    if (!GetDTypeInfo(w.dtype).is_float && !int8_weight) {
      return Unsupported(w.file + ": tensor '" + t.name + "' has dtype " +
                         std::string(DTypeName(w.dtype)) +
                         "; kiln loads f32, f16, bf16 and fp8 weights from safetensors (int8 in an "
                         "int-quantized compressed-tensors checkpoint)");
    }
    KILN_RETURN_IF_ERROR(ValidateWeight(spec, w, config_path));
    ckpt.weights_.push_back(std::move(w));
  }
  if (!w4.method.empty() && num_converted == 0) {
    return Corrupt(config_path + ": declares " + w4.method +
                   " quantization but no linear layer has a qweight tensor");
  }
  KILN_RETURN_IF_ERROR(internal::AttachFp8Scales(&ckpt.quantization_, ckpt.config_.num_layers, find,
                                                 &ckpt.weights_, &ckpt.kv_cache_scales_,
                                                 &scale_tensors));
  int unused = 0;
  for (auto& [name, t] : by_name) {
    if (!expected.count(name) && !scale_tensors.count(name) &&
        !name.ends_with("rotary_emb.inv_freq")) {
      if (!(name == "lm_head.weight" && ckpt.config_.tie_word_embeddings)) ++unused;
    }
  }
  if (unused > 0) {
    LOG(WARNING) << dir << ": " << unused << " tensors are not used by the "
                 << ModelFamilyName(ckpt.config_.family) << " architecture and are ignored";
  }
  return ckpt;
}

}  // namespace kiln
