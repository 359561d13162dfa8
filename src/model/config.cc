#include "model/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/weights.h"

namespace kiln {
namespace {

using nlohmann::json;

// Typed access to optional JSON fields with errors that name the file and key.
class Fields {
 public:
  Fields(const json& j, std::string_view source) : j_(j), source_(source) {}

  const json* Find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status Error(const char* key, const std::string& what) const {
    return InvalidArgument(std::string(source_) + ": field '" + key + "' " + what);
  }

  template <typename T>
  Status Int(const char* key, T* out, bool required) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    if (!v->is_number_integer()) return Error(key, "must be an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) {
      return Error(key, "is out of range: " + std::to_string(x));
    }
    *out = static_cast<T>(x);
    return Status::Ok();
  }

  Status Double(const char* key, double* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) return Error(key, "must be a number, got " + v->dump());
    *out = v->get<double>();
    if (!std::isfinite(*out)) return Error(key, "must be finite");
    return Status::Ok();
  }

  Status Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean()) return Error(key, "must be true or false, got " + v->dump());
    *out = v->get<bool>();
    return Status::Ok();
  }

  // An int or a list of ints (eos_token_id).
  Status IntList(const char* key, std::vector<int>* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    out->clear();
    auto add = [&](const json& e) -> Status {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int>::max()) {
        return Error(key, "must hold non-negative token ids, got " + v->dump());
      }
      out->push_back(e.get<int>());
      return Status::Ok();
    };
    if (v->is_array()) {
      for (const json& e : *v) KILN_RETURN_IF_ERROR(add(e));
      return Status::Ok();
    }
    return add(*v);
  }

 private:
  const json& j_;
  std::string_view source_;
};

Result<json> ParseJsonObject(std::string_view text, std::string_view source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(source) + ": not valid JSON");
  if (!j.is_object()) return InvalidArgument(std::string(source) + ": expected a JSON object");
  return j;
}

Status ParseRopeScaling(const json& r, std::string_view source, RopeScaling* out) {
  Fields f(r, source);
  std::string type;
  if (const json* t = f.Find("rope_type")) {
    if (t->is_string()) type = t->get<std::string>();
  }
  if (type.empty()) {
    if (const json* t = f.Find("type")) {
      if (t->is_string()) type = t->get<std::string>();
    }
  }
  if (type.empty() || type == "default") {
    out->type = RopeScaling::Type::kNone;
    return Status::Ok();
  }
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
  } else if (type == "dynamic") {
    out->type = RopeScaling::Type::kDynamic;
  } else if (type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
  } else if (type == "yarn") {
    out->type = RopeScaling::Type::kYarn;
  } else {
    return Unsupported(std::string(source) + ": rope_scaling type '" + type +
                       "' is not supported; kiln handles linear, dynamic, llama3 and yarn");
  }
  KILN_RETURN_IF_ERROR(f.Double("factor", &out->factor));
  if (out->factor <= 0) return f.Error("rope_scaling.factor", "must be positive");
  KILN_RETURN_IF_ERROR(f.Double("low_freq_factor", &out->low_freq_factor));
  KILN_RETURN_IF_ERROR(f.Double("high_freq_factor", &out->high_freq_factor));
  KILN_RETURN_IF_ERROR(
      f.Int("original_max_position_embeddings", &out->original_max_position_embeddings, false));
  KILN_RETURN_IF_ERROR(f.Double("beta_fast", &out->beta_fast));
  KILN_RETURN_IF_ERROR(f.Double("beta_slow", &out->beta_slow));
  if (f.Find("attention_factor") != nullptr) {
    double a = 0;
    KILN_RETURN_IF_ERROR(f.Double("attention_factor", &a));
    out->attention_factor = a;
  }
  if (out->type == RopeScaling::Type::kLlama3) {
    if (out->original_max_position_embeddings <= 0) {
      return f.Error("rope_scaling.original_max_position_embeddings",
                     "must be a positive integer for llama3 scaling");
    }
    if (out->high_freq_factor <= out->low_freq_factor) {
      return f.Error("rope_scaling.high_freq_factor", "must exceed low_freq_factor");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kMistral:
      return "mistral";
    case ModelFamily::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

std::string_view RopeScalingTypeName(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone:
      return "none";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kDynamic:
      return "dynamic";
    case RopeScaling::Type::kLlama3:
      return "llama3";
    case RopeScaling::Type::kYarn:
      return "yarn";
  }
  return "unknown";
}

Status ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v > 0) return Status::Ok();
    return InvalidArgument(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  KILN_RETURN_IF_ERROR(positive("num_hidden_layers", num_layers));
  KILN_RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  KILN_RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  KILN_RETURN_IF_ERROR(positive("num_attention_heads", num_heads));
  KILN_RETURN_IF_ERROR(positive("num_key_value_heads", num_kv_heads));
  KILN_RETURN_IF_ERROR(positive("head_dim", head_dim));
  KILN_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  KILN_RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgument("num_attention_heads (" + std::to_string(num_heads) +
                           ") must be a multiple of num_key_value_heads (" +
                           std::to_string(num_kv_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    return InvalidArgument("head_dim must be even for rotary embeddings, got " +
                           std::to_string(head_dim));
  }
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) {
    return InvalidArgument("rms_norm_eps must be positive");
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    return InvalidArgument("rope_theta must be positive");
  }
  for (int id : eos_token_ids) {
    if (id >= vocab_size) {
      return InvalidArgument("eos_token_id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(vocab_size) + ")");
    }
  }
  if (bos_token_id && *bos_token_id >= vocab_size) {
    return InvalidArgument("bos_token_id " + std::to_string(*bos_token_id) +
                           " is outside the vocabulary (" + std::to_string(vocab_size) + ")");
  }
  return Status::Ok();
}

int64_t ModelConfig::NumParameters() const {
  int64_t n = 0;
  for (const WeightSpec& w : ExpectedWeights(*this)) n += w.shape.numel();
  return n;
}

int64_t ModelConfig::KvBytesPerToken(DType kv_dtype) const {
  const int64_t elems = 2 * int64_t{num_layers} * kv_size();
  auto bytes = DTypeByteSize(kv_dtype, elems);
  CHECK(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

Result<ModelConfig> ParseHfConfig(std::string_view json_text, std::string_view source) {
  KILN_ASSIGN_OR_RETURN(json j, ParseJsonObject(json_text, source));
  Fields f(j, source);
  ModelConfig c;

  std::string model_type;
  if (const json* t = f.Find("model_type"); t != nullptr && t->is_string()) {
    model_type = t->get<std::string>();
  }
  if (model_type == "llama") {
    c.family = ModelFamily::kLlama;
  } else if (model_type == "mistral") {
    c.family = ModelFamily::kMistral;
  } else if (model_type == "qwen2") {
    c.family = ModelFamily::kQwen2;
    c.qkv_bias = true;  // Qwen2 always has q/k/v biases; config.json does not say so
  } else if (model_type.empty()) {
    return InvalidArgument(std::string(source) + ": field 'model_type' is missing");
  } else {
    return Unsupported(std::string(source) + ": model_type '" + model_type +
                       "' is not supported; kiln serves the Llama family (llama, mistral, qwen2)");
  }
  if (const json* a = f.Find("architectures");
      a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    c.architecture = (*a)[0].get<std::string>();
  }

  KILN_RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.num_layers, true));
  KILN_RETURN_IF_ERROR(f.Int("hidden_size", &c.hidden_size, true));
  KILN_RETURN_IF_ERROR(f.Int("intermediate_size", &c.intermediate_size, true));
  KILN_RETURN_IF_ERROR(f.Int("num_attention_heads", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  KILN_RETURN_IF_ERROR(f.Int("num_key_value_heads", &c.num_kv_heads, false));
  KILN_RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab_size, true));
  c.max_position_embeddings = 2048;
  KILN_RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_position_embeddings, false));
  if (c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  KILN_RETURN_IF_ERROR(f.Int("head_dim", &c.head_dim, false));

  double eps = 1e-6;
  KILN_RETURN_IF_ERROR(f.Double("rms_norm_eps", &eps));
  c.rms_norm_eps = static_cast<float>(eps);
  KILN_RETURN_IF_ERROR(f.Double("rope_theta", &c.rope_theta));
  // transformers >= 5 writes the rope settings (theta included) under rope_parameters.
  const json* rope = f.Find("rope_scaling");
  if (rope == nullptr) rope = f.Find("rope_parameters");
  if (rope != nullptr) {
    if (!rope->is_object()) return f.Error("rope_scaling", "must be an object or null");
    KILN_RETURN_IF_ERROR(ParseRopeScaling(*rope, source, &c.rope_scaling));
    KILN_RETURN_IF_ERROR(Fields(*rope, source).Double("rope_theta", &c.rope_theta));
  }

  KILN_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  bool attention_bias = false;
  KILN_RETURN_IF_ERROR(f.Bool("attention_bias", &attention_bias));
  if (attention_bias && c.family != ModelFamily::kQwen2) c.qkv_bias = c.o_bias = true;
  KILN_RETURN_IF_ERROR(f.Bool("mlp_bias", &c.mlp_bias));

  int64_t window = 0;
  KILN_RETURN_IF_ERROR(f.Int("sliding_window", &window, false));
  bool use_window = window > 0;
  if (c.family == ModelFamily::kQwen2) {
    use_window = false;
    KILN_RETURN_IF_ERROR(f.Bool("use_sliding_window", &use_window));
    use_window = use_window && window > 0;
  }
  if (use_window) c.sliding_window = window;

  if (const json* act = f.Find("hidden_act"); act != nullptr) {
    if (!act->is_string() || (act->get<std::string>() != "silu")) {
      return Unsupported(std::string(source) + ": hidden_act " + act->dump() +
                         " is not supported; the Llama family uses silu");
    }
  }
  const json* dt = f.Find("torch_dtype");
  if (dt == nullptr) dt = f.Find("dtype");
  if (dt != nullptr && dt->is_string()) {
    auto d = ParseDType(dt->get<std::string>());
    if (!d.ok()) return f.Error("torch_dtype", "is not a dtype kiln knows: " + dt->dump());
    c.dtype = *d;
  }
  int bos = -1;
  KILN_RETURN_IF_ERROR(f.Int("bos_token_id", &bos, false));
  if (bos >= 0) c.bos_token_id = bos;
  KILN_RETURN_IF_ERROR(f.IntList("eos_token_id", &c.eos_token_ids));

  Status s = c.Validate();
  if (!s.ok()) return s.WithContext(source);
  return c;
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFound(path + ": cannot open (does the file exist and is it readable?)");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ss.str();
}

Result<ModelConfig> LoadHfConfig(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseHfConfig(text, path);
}

std::string ToHfConfigJson(const ModelConfig& c) {
  json j;
  const std::string_view family = ModelFamilyName(c.family);
  std::string arch = c.architecture;
  if (arch.empty()) {
    arch = c.family == ModelFamily::kLlama     ? "LlamaForCausalLM"
           : c.family == ModelFamily::kMistral ? "MistralForCausalLM"
                                               : "Qwen2ForCausalLM";
  }
  j["architectures"] = json::array({arch});
  j["model_type"] = family;
  j["num_hidden_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family == ModelFamily::kLlama) {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  if (c.family == ModelFamily::kQwen2) {
    j["use_sliding_window"] = c.sliding_window.has_value();
    j["sliding_window"] = c.sliding_window.value_or(c.max_position_embeddings);
    j["max_window_layers"] = c.num_layers;
  } else if (c.family == ModelFamily::kMistral) {
    j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    json rs;
    rs["rope_type"] = RopeScalingTypeName(r.type);
    rs["factor"] = r.factor;
    if (r.type == RopeScaling::Type::kLlama3) {
      rs["low_freq_factor"] = r.low_freq_factor;
      rs["high_freq_factor"] = r.high_freq_factor;
    }
    if (r.original_max_position_embeddings > 0) {
      rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    if (r.type == RopeScaling::Type::kYarn) {
      rs["beta_fast"] = r.beta_fast;
      rs["beta_slow"] = r.beta_slow;
      if (r.attention_factor) rs["attention_factor"] = *r.attention_factor;
    }
    j["rope_scaling"] = rs;
  }
  j["torch_dtype"] = c.dtype == DType::kF16   ? "float16"
                     : c.dtype == DType::kF32 ? "float32"
                                              : "bfloat16";
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["use_cache"] = true;
  // The config schema written here is the one transformers 5 reads; saying so also keeps
  // transformers from treating the checkpoint as a legacy Mistral one (fix_mistral_regex).
  j["transformers_version"] = "5.0.0";
  return j.dump(2) + "\n";
}

Result<GenerationConfig> ParseGenerationConfig(std::string_view json_text,
                                               std::string_view source) {
  KILN_ASSIGN_OR_RETURN(json j, ParseJsonObject(json_text, source));
  Fields f(j, source);
  GenerationConfig g;
  auto opt_int = [&](const char* key, auto* out) -> Status {
    using T = typename std::remove_reference_t<decltype(*out)>::value_type;
    if (f.Find(key) == nullptr) return Status::Ok();
    T v{};
    KILN_RETURN_IF_ERROR(f.Int(key, &v, true));
    *out = v;
    return Status::Ok();
  };
  auto opt_double = [&](const char* key, std::optional<double>* out) -> Status {
    if (f.Find(key) == nullptr) return Status::Ok();
    double v = 0;
    KILN_RETURN_IF_ERROR(f.Double(key, &v));
    *out = v;
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(opt_int("bos_token_id", &g.bos_token_id));
  KILN_RETURN_IF_ERROR(f.IntList("eos_token_id", &g.eos_token_ids));
  KILN_RETURN_IF_ERROR(opt_int("pad_token_id", &g.pad_token_id));
  if (f.Find("do_sample") != nullptr) {
    bool b = false;
    KILN_RETURN_IF_ERROR(f.Bool("do_sample", &b));
    g.do_sample = b;
  }
  KILN_RETURN_IF_ERROR(opt_double("temperature", &g.temperature));
  KILN_RETURN_IF_ERROR(opt_double("top_p", &g.top_p));
  KILN_RETURN_IF_ERROR(opt_int("top_k", &g.top_k));
  KILN_RETURN_IF_ERROR(opt_double("repetition_penalty", &g.repetition_penalty));
  KILN_RETURN_IF_ERROR(opt_int("max_new_tokens", &g.max_new_tokens));
  KILN_RETURN_IF_ERROR(opt_int("max_length", &g.max_length));
  return g;
}

Result<GenerationConfig> LoadGenerationConfig(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseGenerationConfig(text, path);
}

std::string ToGenerationConfigJson(const GenerationConfig& g) {
  json j;
  if (g.bos_token_id) j["bos_token_id"] = *g.bos_token_id;
  if (g.eos_token_ids.size() == 1) {
    j["eos_token_id"] = g.eos_token_ids[0];
  } else if (!g.eos_token_ids.empty()) {
    j["eos_token_id"] = g.eos_token_ids;
  }
  if (g.pad_token_id) j["pad_token_id"] = *g.pad_token_id;
  if (g.do_sample) j["do_sample"] = *g.do_sample;
  if (g.temperature) j["temperature"] = *g.temperature;
  if (g.top_p) j["top_p"] = *g.top_p;
  if (g.top_k) j["top_k"] = *g.top_k;
  if (g.repetition_penalty) j["repetition_penalty"] = *g.repetition_penalty;
  if (g.max_new_tokens) j["max_new_tokens"] = *g.max_new_tokens;
  if (g.max_length) j["max_length"] = *g.max_length;
  return j.dump(2) + "\n";
}

}  // namespace kiln
