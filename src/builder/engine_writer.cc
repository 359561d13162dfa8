#include "builder/engine_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/thread_pool.h"
#include "core/crypto.h"
#include "core/logging.h"
#include "core/units.h"
#include "engine/tokenizer_loader.h"
#include "model/dequant.h"
#include "model/weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// The f32 values of a weight (GGUF blocks, fp8, 16-bit ...), decoded on several threads.
Result<std::vector<float>> DecodeF32(const Weight& w, int threads) {
  const int64_t n = w.shape.numel();
  if (!CanDequantizeToF32(w.dtype)) {
    return Unsupported(w.file + ": tensor " + w.source_name + " has dtype " +
                       std::string(DTypeName(w.dtype)) + ", which kiln build cannot convert");
  }
  const DTypeInfo& info = GetDTypeInfo(w.dtype);
  std::vector<float> out(n);
  const int64_t blocks = n / info.block_size;
  std::mutex mu;
  Status first_error;
  cpu::ParallelFor(blocks, threads, [&](int64_t b, int64_t e) {
    const Status s =
        DequantizeToF32(w.dtype, w.data + b * info.block_bytes, (e - b) * info.block_bytes,
                        (e - b) * info.block_size, out.data() + b * info.block_size);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = s;
    }
  });
  KILN_RETURN_IF_ERROR(first_error.WithContext(w.file + ": " + w.source_name));
  return out;
}

std::vector<uint8_t> EncodeAs(const std::vector<float>& f32, DType dtype, int threads) {
  const int64_t n = static_cast<int64_t>(f32.size());
  std::vector<uint8_t> out(n * (dtype == DType::kF32 ? 4 : 2));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), f32.data(), out.size());
    return out;
  }
  auto* dst = reinterpret_cast<uint16_t*>(out.data());
  cpu::ParallelFor(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      dst[i] = dtype == DType::kF16 ? F32ToF16(f32[i]) : F32ToBF16(f32[i]);
    }
  });
  return out;
}

// A decoder layer's linear weight: what FP8 (and the other methods) quantize.
bool IsLayerLinear(const std::string& name) {
  if (!name.starts_with("model.layers.") || !name.ends_with(".weight")) return false;
  for (const char* part : {".q_proj.", ".k_proj.", ".v_proj.", ".o_proj.", ".gate_proj.",
                           ".up_proj.", ".down_proj."}) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

// The decoder layer a tensor belongs to ("model.layers.N...."), or -1.
int LayerOf(const std::string& name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  return std::atoi(name.c_str() + kPrefix.size());
}

// The tensor as the engine stores it.
struct Encoded {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
  std::vector<float> row_scales;
  std::optional<Weight::W4Params> w4;
  float input_scale = 0;  // e4m3 with a static activation scale
};

Result<Encoded> Encode(const Weight& w, const QuantizedTensor* q, const EngineBuildOptions& o,
                       DType dtype, int threads) {
  const int layer = LayerOf(w.name);
  const bool unquantized =
      layer >= 0 && std::find(o.unquantized_layers.begin(), o.unquantized_layers.end(), layer) !=
                        o.unquantized_layers.end();
  if (unquantized) q = nullptr;
  if (q != nullptr) {
    if (!(q->shape == w.shape)) {
      return InvalidArgument("quantizer: tensor " + w.name + " has shape " + q->shape.ToString() +
                             ", the model's is " + w.shape.ToString());
    }
    return Encoded{q->dtype, q->shape, q->bytes, q->row_scales, q->w4, q->input_scale};
  }
  if (w.dtype == DType::kF8E4M3 && !w.row_scales.empty()) {  // an FP8 checkpoint's, as stored
    return Encoded{w.dtype,      w.shape,      std::vector<uint8_t>(w.data, w.data + w.nbytes),
                   w.row_scales, std::nullopt, w.input_scale};
  }
  const bool fp8 = o.quantization == QuantMethod::kFp8 && IsLayerLinear(w.name) && !unquantized;
  const DType target = w.shape.ndim() == 1 ? DType::kF32 : dtype;
  if (!fp8 && w.dtype == target) {  // already as the engine stores it: no decoding
    return Encoded{target, w.shape, std::vector<uint8_t>(w.data, w.data + w.nbytes)};
  }
  KILN_ASSIGN_OR_RETURN(std::vector<float> f32, DecodeF32(w, threads));
  if (fp8) {
    const int64_t rows = w.shape[0], cols = w.shape[1];
    Encoded e{DType::kF8E4M3, w.shape, std::vector<uint8_t>(rows * cols), std::vector<float>(rows)};
    cpu::ParallelFor(rows, threads, [&](int64_t b, int64_t end) {
      for (int64_t r = b; r < end; ++r) {
        e.row_scales[r] = QuantizeRowFp8(f32.data() + r * cols, cols, e.bytes.data() + r * cols);
      }
    });
    return e;
  }
  return Encoded{target, w.shape, EncodeAs(f32, target, threads)};
}

// A GGUF `llama` file's q / k rows (and their scales) back in HF order (cpu::UnpermuteQkRows):
// an engine always stores the half-split RoPE layout, so its quantizers' per-row data moves
// with the rows.
void UnpermuteRows(Encoded& e, int64_t num_heads, int64_t head_dim) {
  auto unpermute = [&](auto& values) {
    if (values.empty()) return;
    using V = std::decay_t<decltype(values[0])>;
    const int64_t rows = e.shape[0];
    const int64_t row_bytes = static_cast<int64_t>(values.size() * sizeof(V)) / rows;
    std::remove_reference_t<decltype(values)> out(values.size());
    cpu::UnpermuteQkRows(reinterpret_cast<const uint8_t*>(values.data()), num_heads, head_dim,
                         row_bytes, reinterpret_cast<uint8_t*>(out.data()));
    values = std::move(out);
  };
  unpermute(e.bytes);
  unpermute(e.row_scales);
  if (e.w4) {
    unpermute(e.w4->scales);
    unpermute(e.w4->zeros);
  }
}

// weights.bin, written front to back with the alignment padding.
class WeightsFile {
 public:
  Status Open(const std::string& path) {
    path_ = path;
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) return IoError(path + ": cannot create: " + std::strerror(errno));
    return Status::Ok();
  }
  ~WeightsFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  Status Align(int64_t alignment) {
    static const std::vector<uint8_t> kZeros(kEngineAlignment);
    const int64_t pad = (alignment - offset_ % alignment) % alignment;
    return Write(kZeros.data(), pad).status();
  }
  Result<EngineSpan> Write(const void* data, int64_t n) {
    const EngineSpan span{offset_, n};
    if (n > 0 && std::fwrite(data, 1, n, file_) != static_cast<size_t>(n)) {
      return IoError(path_ + ": write failed: " + std::strerror(errno));
    }
    offset_ += n;
    return span;
  }
  Status Close() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return IoError(path_ + ": close failed: " + std::strerror(errno));
    return Status::Ok();
  }
  int64_t offset() const { return offset_; }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  int64_t offset_ = 0;
};

template <typename T>
Result<EngineSpan> WriteSidecar(WeightsFile& out, const std::vector<T>& values) {
  KILN_RETURN_IF_ERROR(out.Align(64));
  return out.Write(values.data(), static_cast<int64_t>(values.size() * sizeof(T)));
}

Status WriteText(const fs::path& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) return IoError(path.string() + ": write failed");
  return Status::Ok();
}

// Prepares out_dir: creates it, or empties an engine directory when overwriting is allowed.
Status PrepareDirectory(const EngineBuildOptions& o) {
  std::error_code ec;
  const fs::path dir(o.out_dir);
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return InvalidArgument(o.out_dir + ": exists and is a file");
    if (!fs::is_empty(dir, ec)) {
      if (!IsEngineDirectory(o.out_dir)) {
        return InvalidArgument(o.out_dir + ": exists, is not empty and is not a kiln engine; " +
                               "choose another --out");
      }
      if (!o.overwrite) {
        return InvalidArgument(o.out_dir + ": already holds an engine; pass --force to " +
                               "replace it");
      }
      for (const auto& entry : fs::directory_iterator(dir)) fs::remove_all(entry.path(), ec);
    }
  }
  fs::create_directories(dir, ec);
  if (ec) return IoError(o.out_dir + ": cannot create: " + ec.message());
  return Status::Ok();
}

// The tokenizer and chat template: an HF source's files as they are, or a GGUF source's
// tokenizer metadata as tokenizer.gguf.json (+ chat_template.jinja). Returns the kind.
Result<std::string> WriteTokenizer(const Checkpoint& source, const fs::path& dir) {
  if (source.format() == CheckpointFormat::kGguf) {
    KILN_ASSIGN_OR_RETURN(GgufTokenizerFields fields, ReadGgufTokenizerFields(source.path()));
    KILN_RETURN_IF_ERROR(
        WriteText(dir / kEngineGgufTokenizerFile, GgufTokenizerFieldsToJson(fields)));
    KILN_ASSIGN_OR_RETURN(std::optional<std::string> chat, ReadGgufChatTemplate(source.path()));
    if (chat) KILN_RETURN_IF_ERROR(WriteText(dir / "chat_template.jinja", *chat));
    return std::string("gguf");
  }
  // An HF directory, or an engine being rebuilt: its files as they are.
  const fs::path from(source.path());
  const std::string_view names[] = {"tokenizer.json", "tokenizer_config.json",
                                    "special_tokens_map.json", "chat_template.jinja",
                                    kEngineGgufTokenizerFile};
  for (const std::string_view name : names) {
    std::error_code ec;
    if (!fs::exists(from / name, ec)) continue;
    fs::copy_file(from / name, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError((from / name).string() + ": cannot copy: " + ec.message());
  }
  std::error_code ec;
  return std::string(fs::exists(dir / kEngineGgufTokenizerFile, ec) ? "gguf" : "hf");
}

// Writes the manifest (through a temporary name, so a reader never sees half of one) and drops
// the signature of the previous one.
Status StoreManifest(const std::string& dir, const EngineManifest& m) {
  const fs::path tmp = fs::path(dir) / (std::string(kEngineManifestFile) + ".tmp");
  KILN_RETURN_IF_ERROR(WriteText(tmp, EngineManifestToJson(m)));
  std::error_code ec;
  fs::rename(tmp, fs::path(dir) / kEngineManifestFile, ec);
  if (ec) return IoError(tmp.string() + ": rename failed: " + ec.message());
  fs::remove(fs::path(dir) / kEngineSignatureFile, ec);
  return Status::Ok();
}

// Digests of every file in `dir` but the manifest and signature into m.files, then the
// manifest, written last.
Status WriteManifest(const std::string& dir, EngineManifest& m, int threads,
                     const EngineBuildOptions& o) {
  m.files.clear();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kEngineManifestFile || name == kEngineSignatureFile || name.ends_with(".tmp")) {
      continue;
    }
    paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    if (o.progress) o.progress("sha256 " + p.filename().string(), 0, 1);
    KILN_ASSIGN_OR_RETURN(FileDigest d, Sha256File(p.string(), kEngineChunkBytes, threads));
    if (o.progress) o.progress("sha256 " + p.filename().string(), 1, 1);
    m.files[p.filename().string()] = std::move(d);
  }
  return StoreManifest(dir, m);
}

}  // namespace

Status WriteEngine(const Checkpoint& source, const QuantizedModel* quantized,
                   const EngineBuildOptions& o) {
  const DType dtype = o.dtype.value_or(DefaultGpuDType(source));
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) {
    return InvalidArgument("dtype: an engine holds bfloat16, float16 or float32 matrices, not " +
                           std::string(DTypeName(dtype)));
  }
  const QuantMethod pre = source.quantization().method;
  QuantMethod method = o.quantization;
  if (pre != QuantMethod::kNone) {
    if (method != QuantMethod::kNone && method != pre) {
      return InvalidArgument(source.path() + " is already quantized (" +
                             std::string(QuantMethodName(pre)) + "); it cannot be re-quantized " +
                             "to " + std::string(QuantMethodName(method)));
    }
    method = pre;
  }
  if ((method == QuantMethod::kInt8 || method == QuantMethod::kW4A16) &&
      pre == QuantMethod::kNone && (quantized == nullptr || quantized->method != method)) {
    return InvalidArgument("quantization " + std::string(QuantMethodName(method)) +
                           " needs the quantizer's tensors (calibration runs in kiln build)");
  }
  for (int layer : o.unquantized_layers) {
    if (layer < 0 || layer >= source.config().num_layers) {
      return InvalidArgument("unquantized layers: layer " + std::to_string(layer) +
                             " is not one of the model's " +
                             std::to_string(source.config().num_layers));
    }
  }
  if (!o.unquantized_layers.empty() && pre != QuantMethod::kNone) {
    return InvalidArgument(source.path() + " is already quantized; its layers cannot be " +
                           "written unquantized");
  }

  std::map<std::string, const QuantizedTensor*> replaced;
  if (quantized != nullptr) {
    for (const QuantizedTensor& t : quantized->tensors) replaced[t.name] = &t;
  }
  // What is written: the source's weights and, when the quantizer has an lm_head for a tied
  // model (--quantize-lm-head), the embedding once more as lm_head.weight (replaced below by the
  // quantizer's): the lookup keeps the 16-bit table and the engine is untied.
  std::vector<const Weight*> weights;
  for (const Weight& w : source.weights()) weights.push_back(&w);
  ModelConfig config = source.config();
  config.dtype = dtype;
  std::optional<Weight> untied_head;
  if (config.tie_word_embeddings && replaced.count("lm_head.weight")) {
    const Weight* embedding = source.Find("model.embed_tokens.weight");
    if (embedding == nullptr) return Internal("engine writer: no model.embed_tokens.weight");
    untied_head = *embedding;
    untied_head->name = "lm_head.weight";
    weights.push_back(&*untied_head);
    config.tie_word_embeddings = false;
  }
  auto weight_named = [&](const std::string& name) -> const Weight* {
    for (const Weight* w : weights) {
      if (w->name == name) return w;
    }
    return nullptr;
  };
  for (const auto& [name, t] : replaced) {
    if (weight_named(name) == nullptr) {
      return InvalidArgument("quantizer: tensor " + name + " is not a weight of the model");
    }
  }
  KILN_RETURN_IF_ERROR(PrepareDirectory(o));
  const int threads = o.threads > 0 ? o.threads : cpu::DefaultNumThreads();
  const fs::path dir(o.out_dir);
  KILN_RETURN_IF_ERROR(WriteText(dir / "config.json", ToHfConfigJson(config)));
  if (source.generation_config()) {
    KILN_RETURN_IF_ERROR(WriteText(dir / "generation_config.json",
                                   ToGenerationConfigJson(*source.generation_config())));
  }
  EngineManifest m;
  KILN_ASSIGN_OR_RETURN(m.tokenizer, WriteTokenizer(source, dir));

  // Fused groups: a part list starts at its first member's name.
  auto group_of = [](const std::string& name) -> std::vector<std::string> {
    auto swap = [&](const char* from, std::initializer_list<const char*> parts) {
      std::vector<std::string> out;
      const size_t at = name.find(from);
      for (const char* p : parts)
        out.push_back(name.substr(0, at) + p + name.substr(at + std::strlen(from)));
      return out;
    };
    if (name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.q_proj.bias")) {
      return swap("q_proj", {"q_proj", "k_proj", "v_proj"});
    }
    if (name.ends_with("mlp.gate_proj.weight") || name.ends_with("mlp.gate_proj.bias")) {
      return swap("gate_proj", {"gate_proj", "up_proj"});
    }
    return {name};
  };

  WeightsFile out;
  KILN_RETURN_IF_ERROR(out.Open((dir / kEngineWeightsFile).string()));
  int64_t total = 0;
  for (const Weight* w : weights) total += w->nbytes;
  int64_t done = 0;
  std::set<std::string> written;
  for (const Weight* first : weights) {
    if (written.count(first->name)) continue;
    std::vector<std::string> names = group_of(first->name);
    std::vector<Encoded> parts;
    for (const std::string& name : names) {
      const Weight* w = weight_named(name);
      if (w == nullptr) return Internal("engine writer: no weight " + name);
      auto it = replaced.find(name);
      KILN_ASSIGN_OR_RETURN(
          Encoded e, Encode(*w, it == replaced.end() ? nullptr : it->second, o, dtype, threads));
      if (source.qk_rope_layout() == QkRopeLayout::kInterleaved) {
        const ModelConfig& c = source.config();
        if (name.find("self_attn.q_proj.") != std::string::npos) {
          UnpermuteRows(e, c.num_heads, c.head_dim);
        } else if (name.find("self_attn.k_proj.") != std::string::npos) {
          UnpermuteRows(e, c.num_kv_heads, c.head_dim);
        }
      }
      parts.push_back(std::move(e));
    }
    // A group is fused only when its parts share a dtype (and so a row format).
    bool fusable = names.size() > 1;
    for (const Encoded& e : parts) fusable = fusable && e.dtype == parts[0].dtype;
    KILN_RETURN_IF_ERROR(out.Align(kEngineAlignment));
    const int64_t group_start = out.offset();
    std::vector<EngineTensor> tensors;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!fusable) KILN_RETURN_IF_ERROR(out.Align(kEngineAlignment));
      EngineTensor t;
      t.name = names[i];
      t.dtype = parts[i].dtype;
      t.shape = parts[i].shape;
      t.input_scale = parts[i].input_scale;
      KILN_ASSIGN_OR_RETURN(t.data, out.Write(parts[i].bytes.data(), parts[i].bytes.size()));
      tensors.push_back(std::move(t));
    }
    if (fusable) {
      std::string fused_name = names[0];
      fused_name.replace(fused_name.find(names.size() == 3 ? "q_proj" : "gate_proj"),
                         names.size() == 3 ? 6 : 9,
                         names.size() == 3 ? "qkv_proj" : "gate_up_proj");
      m.fused.push_back({fused_name, names, {group_start, out.offset() - group_start}});
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      Encoded& e = parts[i];
      if (!e.row_scales.empty()) {
        KILN_ASSIGN_OR_RETURN(tensors[i].row_scales, WriteSidecar(out, e.row_scales));
      }
      if (e.w4) {
        EngineTensor::W4 p;
        p.group_size = e.w4->group_size;
        KILN_ASSIGN_OR_RETURN(p.scales, WriteSidecar(out, e.w4->scales));
        KILN_ASSIGN_OR_RETURN(p.zeros, WriteSidecar(out, e.w4->zeros));
        if (!e.w4->perm.empty()) {
          KILN_ASSIGN_OR_RETURN(p.perm, WriteSidecar(out, e.w4->perm));
        }
        tensors[i].w4 = std::move(p);
      }
      written.insert(names[i]);
      done += weight_named(names[i])->nbytes;
      m.tensors.push_back(std::move(tensors[i]));
    }
    if (o.progress) o.progress("weights", done, total);
  }
  KILN_RETURN_IF_ERROR(out.Close());

  m.kiln_version = o.kiln_version;
  m.created = UtcTimestamp();
  m.model_name = source.name();
  m.source_path = fs::absolute(source.path()).lexically_normal().string();
  m.source_format = std::string(CheckpointFormatName(source.format()));
  m.qk_rope_layout = QkRopeLayout::kHalfSplit;  // UnpermuteRows
  m.dtype = dtype;
  m.quantization = method;
  m.quant_recipe = o.quant_recipe;
  for (const EngineTensor& t : m.tensors) {
    if (t.name == "lm_head.weight") m.quantized_lm_head = t.dtype == DType::kI4;
  }
  m.kv_cache_dtype = o.kv_cache_dtype;
  if (quantized != nullptr) m.build_details = quantized->details_json;
  if (!o.unquantized_layers.empty()) {
    nlohmann::json details = nlohmann::json::parse(m.build_details, nullptr, false);
    if (!details.is_object()) details = nlohmann::json::object();
    details["unquantized_layers"] = o.unquantized_layers;
    m.build_details = details.dump();
  }
  if (quantized != nullptr && !quantized->kv_scales.empty()) {
    m.kv_cache_scales = quantized->kv_scales;
  } else {
    m.kv_cache_scales = source.kv_cache_scales();
  }
  return WriteManifest(o.out_dir, m, threads, o);
}

Status WriteEngineGemmTable(const std::string& dir, std::string_view table_json) {
  const fs::path root(dir);
  const std::string manifest_path = (root / kEngineManifestFile).string();
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(manifest_path));
  KILN_ASSIGN_OR_RETURN(EngineManifest m, ParseEngineManifest(text, manifest_path));
  const fs::path table = root / kEngineGemmTableFile;
  KILN_RETURN_IF_ERROR(WriteText(table, table_json));
  // The other files are unchanged since the manifest listed them: only the table is hashed.
  KILN_ASSIGN_OR_RETURN(m.files[std::string(kEngineGemmTableFile)],
                        Sha256File(table.string(), kEngineChunkBytes, 1));
  m.gemm_table = std::string(kEngineGemmTableFile);
  return StoreManifest(dir, m);
}

Status SignEngine(const std::string& dir, const std::string& private_key_pem) {
  const fs::path root(dir);
  KILN_ASSIGN_OR_RETURN(std::string manifest, ReadTextFile((root / kEngineManifestFile).string()));
  KILN_ASSIGN_OR_RETURN(std::string sig, Ed25519Sign(private_key_pem, manifest));
  return WriteText(root / kEngineSignatureFile, sig + "\n");
}

}  // namespace kiln
