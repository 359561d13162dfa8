#include "model/engine_dir.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/mapped_file.h"
#include "model/checkpoint_files.h"
#include "model/weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

Json SpanJson(const EngineSpan& s) { return Json{{"offset", s.offset}, {"nbytes", s.nbytes}}; }

std::string_view RopeLayoutName(QkRopeLayout layout) {
  return layout == QkRopeLayout::kInterleaved ? "interleaved" : "half_split";
}

// Reads fields of a parsed manifest; the first error names the file and the field.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}
  const Status& status() const { return status_; }

  const Json* Field(const Json& j, const char* key, Json::value_t type) {
    if (!status_.ok()) return nullptr;
    auto it = j.find(key);
    const bool number_ok =
        type == Json::value_t::number_integer && it != j.end() && it->is_number_unsigned();
    if (it == j.end() || (it->type() != type && !number_ok)) {
      Fail(std::string("field '") + key + "' is missing or of the wrong type");
      return nullptr;
    }
    return &*it;
  }
  std::string String(const Json& j, const char* key) {
    const Json* f = Field(j, key, Json::value_t::string);
    return f == nullptr ? "" : f->get<std::string>();
  }
  int64_t Int(const Json& j, const char* key) {
    const Json* f = Field(j, key, Json::value_t::number_integer);
    if (f == nullptr) return 0;
    const int64_t v = f->get<int64_t>();
    if (v < 0) Fail(std::string("field '") + key + "' is negative");
    return v;
  }
  EngineSpan Span(const Json& j, const char* key) {
    const Json* f = Field(j, key, Json::value_t::object);
    if (f == nullptr) return {};
    return {Int(*f, "offset"), Int(*f, "nbytes")};
  }
  void Fail(std::string what) {
    if (status_.ok()) status_ = Corrupt(source_ + ": " + std::move(what));
  }

 private:
  std::string source_;
  Status status_;
};

// Copies `count` values of T at `span` of the weights file, checking the span's size.
template <typename T>
Result<std::vector<T>> ReadValues(const MappedFile& file, const EngineSpan& span, int64_t count,
                                  const std::string& what) {
  if (span.nbytes != count * static_cast<int64_t>(sizeof(T)) ||
      span.offset + span.nbytes > static_cast<int64_t>(file.size())) {
    return Corrupt(file.path() + ": " + what + " spans bytes " + std::to_string(span.offset) + "+" +
                   std::to_string(span.nbytes) + ", not " + std::to_string(count) +
                   " values inside the file's " + std::to_string(file.size()) + " bytes");
  }
  std::vector<T> values(count);
  std::memcpy(values.data(), file.data() + span.offset, span.nbytes);
  return values;
}

}  // namespace

std::string EngineManifestToJson(const EngineManifest& m) {
  Json j;
  j["magic"] = std::string(kEngineMagic);
  j["format_version"] = m.format_version;
  j["kiln_version"] = m.kiln_version;
  j["created"] = m.created;
  j["model"] = {{"name", m.model_name},
                {"source_path", m.source_path},
                {"source_format", m.source_format},
                {"qk_rope_layout", RopeLayoutName(m.qk_rope_layout)}};
  j["build"] = {{"dtype", DTypeName(m.dtype)},
                {"quantization", QuantMethodName(m.quantization)},
                {"quant_recipe", m.quant_recipe},
                {"kv_cache_dtype", KvCacheDTypeName(m.kv_cache_dtype)},
                {"details", Json::parse(m.build_details, nullptr, false)}};
  if (m.quantized_lm_head) j["build"]["quantized_lm_head"] = true;
  Json scales = Json::array();
  for (const KvCacheScales& s : m.kv_cache_scales) scales.push_back({s.k_scale, s.v_scale});
  j["kv_cache_scales"] = scales;
  Json tensors = Json::array();
  for (const EngineTensor& t : m.tensors) {
    Json e = {{"name", t.name},
              {"dtype", DTypeName(t.dtype)},
              {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
              {"offset", t.data.offset},
              {"nbytes", t.data.nbytes}};
    if (t.row_scales) e["row_scales"] = SpanJson(*t.row_scales);
    if (t.input_scale > 0) e["input_scale"] = t.input_scale;
    if (t.w4) {
      e["w4"] = {{"group_size", t.w4->group_size},
                 {"scales", SpanJson(t.w4->scales)},
                 {"zeros", SpanJson(t.w4->zeros)}};
      if (t.w4->perm) e["w4"]["perm"] = SpanJson(*t.w4->perm);
    }
    tensors.push_back(std::move(e));
  }
  Json fused = Json::array();
  for (const EngineFusedGroup& g : m.fused) {
    fused.push_back({{"name", g.name},
                     {"parts", g.parts},
                     {"offset", g.data.offset},
                     {"nbytes", g.data.nbytes}});
  }
  j["weights"] = {{"file", std::string(kEngineWeightsFile)},
                  {"alignment", kEngineAlignment},
                  {"tensors", tensors},
                  {"fused", fused}};
  j["tokenizer"] = m.tokenizer;
  j["gemm_table"] = m.gemm_table;
  Json files = Json::object();
  for (const auto& [name, d] : m.files) {
    files[name] = {{"bytes", d.bytes},
                   {"sha256", d.sha256},
                   {"chunk_bytes", d.chunk_bytes},
                   {"chunk_sha256", d.chunk_sha256}};
  }
  j["files"] = files;
  return j.dump(1) + "\n";
}

Result<EngineManifest> ParseEngineManifest(std::string_view text, const std::string& source) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(source + ": not a JSON object");
  Reader r(source);
  if (r.String(j, "magic") != kEngineMagic) {
    return Unsupported(source + ": not a kiln engine manifest (magic is not '" +
                       std::string(kEngineMagic) + "')");
  }
  EngineManifest m;
  m.format_version = static_cast<int>(r.Int(j, "format_version"));
  KILN_RETURN_IF_ERROR(r.status());
  if (m.format_version > kEngineFormatVersion) {
    return Unsupported(source + ": engine format version " + std::to_string(m.format_version) +
                       " is newer than this kiln reads (" + std::to_string(kEngineFormatVersion) +
                       "); upgrade kiln or rebuild the engine");
  }
  m.kiln_version = r.String(j, "kiln_version");
  m.created = r.String(j, "created");
  if (const Json* model = r.Field(j, "model", Json::value_t::object)) {
    m.model_name = r.String(*model, "name");
    m.source_path = r.String(*model, "source_path");
    m.source_format = r.String(*model, "source_format");
    const std::string layout = r.String(*model, "qk_rope_layout");
    if (layout == "interleaved") {
      m.qk_rope_layout = QkRopeLayout::kInterleaved;
    } else if (layout != "half_split" && r.status().ok()) {
      r.Fail("model.qk_rope_layout '" + layout + "' is not half_split or interleaved");
    }
  }
  if (const Json* build = r.Field(j, "build", Json::value_t::object)) {
    auto dtype = ParseDType(r.String(*build, "dtype"));
    auto kv = ParseKvCacheDType(r.String(*build, "kv_cache_dtype"));
    const std::string method = r.String(*build, "quantization");
    m.quant_recipe = r.String(*build, "quant_recipe");
    KILN_RETURN_IF_ERROR(r.status());
    if (!dtype.ok() || !kv.ok()) return Corrupt(source + ": build.dtype or kv_cache_dtype");
    m.dtype = *dtype;
    m.kv_cache_dtype = *kv;
    bool known = false;
    for (QuantMethod q :
         {QuantMethod::kNone, QuantMethod::kFp8, QuantMethod::kInt8, QuantMethod::kW4A16}) {
      if (QuantMethodName(q) == method) {
        m.quantization = q;
        known = true;
      }
    }
    if (!known) return Corrupt(source + ": build.quantization '" + method + "' is unknown");
    if (auto head = build->find("quantized_lm_head"); head != build->end()) {
      if (!head->is_boolean())
        return Corrupt(source + ": build.quantized_lm_head is not a boolean");
      m.quantized_lm_head = head->get<bool>();
    }
    auto details = build->find("details");
    if (details != build->end() && details->is_object()) m.build_details = details->dump();
  }
  if (const Json* scales = r.Field(j, "kv_cache_scales", Json::value_t::array)) {
    for (const Json& s : *scales) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number() || !s[1].is_number() ||
          !(s[0].get<float>() > 0) || !(s[1].get<float>() > 0)) {
        r.Fail("kv_cache_scales: each entry must be [k_scale, v_scale], both > 0");
        break;
      }
      m.kv_cache_scales.push_back({s[0].get<float>(), s[1].get<float>()});
    }
  }
  const Json* weights = r.Field(j, "weights", Json::value_t::object);
  const Json* tensors = weights ? r.Field(*weights, "tensors", Json::value_t::array) : nullptr;
  if (tensors != nullptr) {
    for (const Json& e : *tensors) {
      if (!e.is_object()) {
        r.Fail("weights.tensors: an entry is not an object");
        break;
      }
      EngineTensor t;
      t.name = r.String(e, "name");
      const std::string dtype = r.String(e, "dtype");
      const Json* shape = r.Field(e, "shape", Json::value_t::array);
      t.data = {r.Int(e, "offset"), r.Int(e, "nbytes")};
      KILN_RETURN_IF_ERROR(r.status());
      auto parsed = ParseDType(dtype);
      if (!parsed.ok()) return Corrupt(source + ": tensor " + t.name + ": dtype '" + dtype + "'");
      t.dtype = *parsed;
      std::vector<int64_t> dims;
      for (const Json& d : *shape) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0) {
          return Corrupt(source + ": tensor " + t.name + ": bad shape");
        }
        dims.push_back(d.get<int64_t>());
      }
      auto shape_or = Shape::FromRange(dims);
      if (!shape_or.ok()) return Corrupt(source + ": tensor " + t.name + ": bad shape");
      t.shape = *shape_or;
      if (e.contains("row_scales")) t.row_scales = r.Span(e, "row_scales");
      if (const auto in = e.find("input_scale"); in != e.end()) {
        const float v = in->is_number() ? in->get<float>() : 0.0f;
        if (!std::isfinite(v) || !(v > 0) || t.dtype != DType::kF8E4M3) {
          return Corrupt(source + ": tensor " + t.name +
                         ": input_scale must be a finite number > 0 on an fp8_e4m3 tensor");
        }
        t.input_scale = v;
      }
      if (const auto w4 = e.find("w4"); w4 != e.end()) {
        if (!w4->is_object()) return Corrupt(source + ": tensor " + t.name + ": bad w4");
        EngineTensor::W4 p;
        p.group_size = static_cast<int32_t>(r.Int(*w4, "group_size"));
        p.scales = r.Span(*w4, "scales");
        p.zeros = r.Span(*w4, "zeros");
        if (w4->contains("perm")) p.perm = r.Span(*w4, "perm");
        t.w4 = p;
      }
      m.tensors.push_back(std::move(t));
    }
  }
  if (weights != nullptr && weights->contains("fused")) {
    if (const Json* fused = r.Field(*weights, "fused", Json::value_t::array)) {
      for (const Json& g : *fused) {
        EngineFusedGroup group;
        group.name = r.String(g, "name");
        group.data = {r.Int(g, "offset"), r.Int(g, "nbytes")};
        if (const Json* parts = r.Field(g, "parts", Json::value_t::array)) {
          for (const Json& p : *parts)
            group.parts.push_back(p.is_string() ? p.get<std::string>() : "");
        }
        m.fused.push_back(std::move(group));
      }
    }
  }
  m.tokenizer = r.String(j, "tokenizer");
  m.gemm_table = r.String(j, "gemm_table");
  if (const Json* files = r.Field(j, "files", Json::value_t::object)) {
    for (const auto& [name, f] : files->items()) {
      if (!f.is_object() || name.empty() || name.find('/') != std::string::npos) {
        r.Fail("files: entry '" + name + "' must be an object named by a plain file name");
        break;
      }
      FileDigest d;
      d.bytes = r.Int(f, "bytes");
      d.sha256 = r.String(f, "sha256");
      d.chunk_bytes = r.Int(f, "chunk_bytes");
      if (const Json* chunks = r.Field(f, "chunk_sha256", Json::value_t::array)) {
        for (const Json& c : *chunks)
          d.chunk_sha256.push_back(c.is_string() ? c.get<std::string>() : "");
      }
      m.files[name] = std::move(d);
    }
  }
  KILN_RETURN_IF_ERROR(r.status());
  if (m.tokenizer != "hf" && m.tokenizer != "gguf") {
    return Corrupt(source + ": tokenizer must be \"hf\" or \"gguf\", got '" + m.tokenizer + "'");
  }
  return m;
}

bool IsEngineDirectory(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kEngineManifestFile, ec);
}

Status VerifyEngine(const std::string& dir, const std::string& public_key_pem, int threads) {
  const fs::path root(dir);
  const std::string manifest_path = (root / kEngineManifestFile).string();
  const std::string sig_path = (root / kEngineSignatureFile).string();
  if (!IsEngineDirectory(dir)) {
    return InvalidArgument(dir + ": --verify-key needs a kiln engine directory (kiln build " +
                           "--sign writes signed ones); this has no " +
                           std::string(kEngineManifestFile));
  }
  std::error_code ec;
  if (!fs::exists(sig_path, ec)) {
    return NotFound(sig_path + ": missing: the engine is not signed (build it with kiln build " +
                    "--sign KEY), so --verify-key refuses it");
  }
  KILN_ASSIGN_OR_RETURN(std::string manifest_text, ReadTextFile(manifest_path));
  KILN_ASSIGN_OR_RETURN(std::string sig_text, ReadTextFile(sig_path));
  while (!sig_text.empty() && std::isspace(static_cast<unsigned char>(sig_text.back()))) {
    sig_text.pop_back();
  }
  KILN_RETURN_IF_ERROR(
      Ed25519Verify(public_key_pem, manifest_text, sig_text).WithContext(manifest_path));
  KILN_ASSIGN_OR_RETURN(EngineManifest m, ParseEngineManifest(manifest_text, manifest_path));
  std::set<std::string> listed;
  for (const auto& [name, digest] : m.files) {
    listed.insert(name);
    const std::string path = (root / name).string();
    if (!fs::exists(path, ec)) return NotFound(path + ": listed in the signed manifest, missing");
    KILN_RETURN_IF_ERROR(VerifyFileDigest(path, digest, threads));
  }
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != kEngineManifestFile && name != kEngineSignatureFile && !listed.count(name)) {
      return Corrupt(entry.path().string() + ": not listed in the signed manifest (a file " +
                     "added after signing); remove it or rebuild the engine");
    }
  }
  return Status::Ok();
}

Result<Checkpoint> Checkpoint::OpenEngine(const std::string& dir) {
  const fs::path root(dir);
  const std::string manifest_path = (root / kEngineManifestFile).string();
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(manifest_path));
  KILN_ASSIGN_OR_RETURN(EngineManifest m, ParseEngineManifest(text, manifest_path));

  Checkpoint ckpt;
  ckpt.format_ = CheckpointFormat::kEngine;
  ckpt.path_ = dir;
  ckpt.name_ = m.model_name;
  ckpt.qk_rope_layout_ = m.qk_rope_layout;
  const std::string config_path = (root / "config.json").string();
  KILN_ASSIGN_OR_RETURN(ckpt.config_, LoadHfConfig(config_path));
  const std::string gen_path = (root / "generation_config.json").string();
  if (fs::exists(gen_path)) {
    KILN_ASSIGN_OR_RETURN(ckpt.generation_config_, LoadGenerationConfig(gen_path));
  }
  ckpt.quantization_.method = m.quantization;
  ckpt.quantization_.format = m.quantization == QuantMethod::kNone ? "" : "kiln-engine";
  ckpt.quantization_.config_file = manifest_path;
  ckpt.quantization_.per_channel = true;
  if (!m.kv_cache_scales.empty() &&
      static_cast<int>(m.kv_cache_scales.size()) != ckpt.config_.num_layers) {
    return Corrupt(manifest_path + ": " + std::to_string(m.kv_cache_scales.size()) +
                   " kv_cache_scales entries for " + std::to_string(ckpt.config_.num_layers) +
                   " layers");
  }
  ckpt.kv_cache_scales_ = m.kv_cache_scales;
  EngineInfo info;
  info.quant_recipe = m.quant_recipe;
  info.dtype = m.dtype;
  info.kv_cache_dtype = m.kv_cache_dtype;
  info.quantized_lm_head = m.quantized_lm_head;
  if (!m.gemm_table.empty()) info.gemm_table_path = (root / m.gemm_table).string();
  ckpt.engine_ = info;

  const std::string weights_path = (root / kEngineWeightsFile).string();
  KILN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(weights_path));
  const int64_t file_bytes = static_cast<int64_t>(file.size());
  std::map<std::string, const EngineTensor*> by_name;
  for (const EngineTensor& t : m.tensors) {
    if (!by_name.emplace(t.name, &t).second) {
      return Corrupt(manifest_path + ": tensor '" + t.name + "' is listed twice");
    }
  }
  for (const WeightSpec& spec : ExpectedWeights(ckpt.config_)) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      return NotFound(manifest_path + ": weight '" + spec.name + "' is missing (config.json " +
                      "implies it)");
    }
    const EngineTensor& t = *it->second;
    const std::string where = weights_path + ": tensor '" + t.name + "'";
    if (!(t.shape == spec.shape)) {
      return Corrupt(where + " has shape " + t.shape.ToString() + " but config.json implies " +
                     spec.shape.ToString());
    }
    auto expected_bytes = DTypeByteSize(t.dtype, t.shape.numel());
    if (!expected_bytes.ok() || *expected_bytes != t.data.nbytes ||
        t.data.offset + t.data.nbytes > file_bytes) {
      return Corrupt(where + " spans bytes " + std::to_string(t.data.offset) + "+" +
                     std::to_string(t.data.nbytes) + ": not " + std::to_string(t.shape.numel()) +
                     " " + std::string(DTypeName(t.dtype)) + " values inside the file's " +
                     std::to_string(file_bytes) + " bytes (truncated or corrupt)");
    }
    Weight w{spec.name,
             t.name,
             weights_path,
             t.dtype,
             t.shape,
             t.data.nbytes,
             file.data() + t.data.offset};
    const int64_t rows = t.shape.ndim() == 2 ? t.shape[0] : 0;
    if (t.dtype == DType::kF8E4M3 || t.dtype == DType::kI8) {
      if (!t.row_scales || rows == 0) {
        return Corrupt(where + " is " + std::string(DTypeName(t.dtype)) +
                       " without per-row scales");
      }
      KILN_ASSIGN_OR_RETURN(w.row_scales,
                            ReadValues<float>(file, *t.row_scales, rows, where + " row_scales"));
      w.input_scale = t.input_scale;
      if (t.input_scale > 0) ckpt.quantization_.static_activations = true;
    }
    if (t.dtype == DType::kI4) {
      if (!t.w4 || rows == 0 || t.w4->group_size <= 0 || t.shape[1] % t.w4->group_size != 0) {
        return Corrupt(where + " is int4 without valid w4 group parameters");
      }
      const int64_t groups = rows * (t.shape[1] / t.w4->group_size);
      Weight::W4Params p;
      p.group_size = t.w4->group_size;
      KILN_ASSIGN_OR_RETURN(p.scales,
                            ReadValues<uint16_t>(file, t.w4->scales, groups, where + " scales"));
      KILN_ASSIGN_OR_RETURN(p.zeros,
                            ReadValues<int8_t>(file, t.w4->zeros, groups, where + " zeros"));
      if (t.w4->perm) {
        KILN_ASSIGN_OR_RETURN(p.perm,
                              ReadValues<int32_t>(file, *t.w4->perm, t.shape[1], where + " perm"));
      }
      w.w4 = std::move(p);
    }
    ckpt.weights_.push_back(std::move(w));
  }
  // The flag and the tensor agree (a runner may read either).
  const Weight* head = ckpt.Find("lm_head.weight");
  if (m.quantized_lm_head != (head != nullptr && head->dtype == DType::kI4)) {
    return Corrupt(
        manifest_path + ": build.quantized_lm_head is " + (m.quantized_lm_head ? "true" : "false") +
        " but lm_head.weight is " +
        (head == nullptr ? "absent (tied embeddings)" : std::string(DTypeName(head->dtype))));
  }
  if (by_name.size() != ckpt.weights_.size()) {
    LOG(WARNING) << manifest_path << ": " << by_name.size() - ckpt.weights_.size()
                 << " tensors are not used by the model and are ignored";
  }
  ckpt.files_->engine_weights.emplace(std::move(file));
  return ckpt;
}

}  // namespace kiln
