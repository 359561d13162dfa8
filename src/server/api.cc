// Request parsing: JSON bodies -> ApiJob (engine requests + what the writer needs). Every field
// is read by type first (a wrong type is a 400 naming it), then SamplingParams::Validate checks
// the ranges, then the prompt is tokenized and checked against the context length.
#include "server/api.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "engine/llm.h"
#include "server/api_internal.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

#define API_RETURN_IF_ERROR(expr)         \
  do {                                    \
    if (MaybeError api_error_ = (expr)) { \
      return *std::move(api_error_);      \
    }                                     \
  } while (0)

// Limits on what one request may ask for (beyond the transport's body-size limit). A choice is
// one engine request, so prompts × n bounds the engine work one HTTP request can enqueue.
constexpr int64_t kMaxChoices = 1024;
constexpr size_t kMaxMessages = 4096;
constexpr size_t kMaxContentParts = 4096;
constexpr size_t kMaxLogitBias = 1024;
constexpr size_t kMaxStopTokenIds = 1024;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();

ApiError BadRequest(const std::string& param, const std::string& what) {
  ApiError e;
  e.message = param.empty() ? what : param + ": " + what;
  e.param = param;
  return e;
}

ApiError Unsupported(const std::string& param, const std::string& what) {
  return BadRequest(param, what + " (not supported by kiln)");
}

ApiError TypeError(const std::string& param, std::string_view expected, const json& got) {
  return BadRequest(param, "expected " + std::string(expected) + ", got " + got.type_name());
}

// SamplingParams::Validate and the engine name the field first ("temperature: must be ...").
ApiError FromStatus(const Status& status, std::string_view default_param = "") {
  ApiError e;
  e.message = status.message();
  const size_t colon = e.message.find(':');
  e.param = colon == std::string::npos ? std::string(default_param) : e.message.substr(0, colon);
  return e;
}

// The value of `key`, or nullptr when absent or null (OpenAI clients send null for "unset").
const json* Field(const json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// Reads an integral JSON number (2.0 counts: pydantic's lax mode accepts it too) in [lo, hi].
MaybeError ToInt(const json& v, const std::string& param, int64_t lo, int64_t hi, int64_t* out) {
  auto range_error = [&] {
    return BadRequest(param, "must be an integer in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got " + v.dump());
  };
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(hi)) return range_error();
    *out = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != std::floor(d)) return TypeError(param, "an integer", v);
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) return range_error();
    *out = static_cast<int64_t>(d);
  } else {
    return TypeError(param, "an integer", v);
  }
  if (*out < lo || *out > hi) return range_error();
  return std::nullopt;
}

template <typename Int>
MaybeError ReadInt(const json& object, std::string_view key, int64_t lo, int64_t hi, Int* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  int64_t value = 0;
  API_RETURN_IF_ERROR(ToInt(*v, std::string(key), lo, hi, &value));
  *out = static_cast<Int>(value);
  return std::nullopt;
}

template <typename Int>
MaybeError ReadOptionalInt(const json& object, std::string_view key, int64_t lo, int64_t hi,
                           std::optional<Int>* out) {
  if (Field(object, key) == nullptr) return std::nullopt;
  Int value = 0;
  API_RETURN_IF_ERROR(ReadInt(object, key, lo, hi, &value));
  *out = value;
  return std::nullopt;
}

MaybeError ReadFloat(const json& object, std::string_view key, float* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return TypeError(std::string(key), "a number", *v);
  *out = static_cast<float>(v->get<double>());
  return std::nullopt;
}

MaybeError ReadBool(const json& object, std::string_view key, bool* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return TypeError(std::string(key), "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

MaybeError ReadString(const json& object, std::string_view key, std::string* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return TypeError(std::string(key), "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

// `stop`: a string or a list of strings (the count is Validate's to check).
MaybeError ReadStop(const json& object, std::string_view key, std::vector<std::string>* out) {
  const json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  const std::string param(key);
  if (v->is_string()) {
    out->assign(1, v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return TypeError(param, "a string or a list of strings", *v);
  if (v->size() > static_cast<size_t>(SamplingParams::kMaxStopStrings)) {
    return BadRequest(param, "at most " + std::to_string(SamplingParams::kMaxStopStrings) +
                                 " strings, got " + std::to_string(v->size()));
  }
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return TypeError(param + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
    }
    out->push_back((*v)[i].get<std::string>());
  }
  return std::nullopt;
}

MaybeError ReadTokenIdList(const json& v, const std::string& param, size_t max_size,
                           std::vector<int32_t>* out) {
  if (!v.is_array()) return TypeError(param, "a list of token ids", v);
  if (v.size() > max_size) {
    return BadRequest(param, "at most " + std::to_string(max_size) + " token ids, got " +
                                 std::to_string(v.size()));
  }
  out->clear();
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    API_RETURN_IF_ERROR(ToInt(v[i], param + "[" + std::to_string(i) + "]", 0, kInt32Max, &id));
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// `logit_bias`: {"<token id>": bias}; ids and biases are range-checked by Validate.
MaybeError ReadLogitBias(const json& object, std::vector<std::pair<int32_t, float>>* out) {
  const json* v = Field(object, "logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) return TypeError("logit_bias", "an object of token id -> bias", *v);
  if (v->size() > kMaxLogitBias) {
    return BadRequest("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries, got " +
                                        std::to_string(v->size()));
  }
  out->clear();
  for (const auto& [key, bias] : v->items()) {
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty()) {
      return BadRequest("logit_bias", "key '" + key + "' is not a token id");
    }
    if (!bias.is_number()) return TypeError("logit_bias", "a number as the bias", bias);
    out->emplace_back(id, static_cast<float>(bias.get<double>()));
  }
  return std::nullopt;
}

// `seed`: any 64-bit integer (negative ones wrap, as a C cast would).
MaybeError ReadSeed(const json& object, std::optional<uint64_t>* out) {
  const json* v = Field(object, "seed");
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
  } else if (v->is_number_integer()) {
    *out = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    return TypeError("seed", "an integer", *v);
  }
  return std::nullopt;
}

// The sampling fields the OpenAI routes share (and /generate, Triton), vLLM's extras included.
MaybeError ReadSampling(const json& body, SamplingParams* p) {
  API_RETURN_IF_ERROR(ReadInt(body, "n", 1, SamplingParams::kMaxN, &p->n));
  API_RETURN_IF_ERROR(ReadFloat(body, "temperature", &p->temperature));
  API_RETURN_IF_ERROR(ReadFloat(body, "top_p", &p->top_p));
  API_RETURN_IF_ERROR(ReadInt(body, "top_k", -1, kInt32Max, &p->top_k));
  API_RETURN_IF_ERROR(ReadFloat(body, "min_p", &p->min_p));
  API_RETURN_IF_ERROR(ReadFloat(body, "presence_penalty", &p->presence_penalty));
  API_RETURN_IF_ERROR(ReadFloat(body, "frequency_penalty", &p->frequency_penalty));
  API_RETURN_IF_ERROR(ReadFloat(body, "repetition_penalty", &p->repetition_penalty));
  API_RETURN_IF_ERROR(ReadLogitBias(body, &p->logit_bias));
  API_RETURN_IF_ERROR(ReadSeed(body, &p->seed));
  API_RETURN_IF_ERROR(ReadInt(body, "min_tokens", 0, kInt32Max, &p->min_tokens));
  API_RETURN_IF_ERROR(ReadStop(body, "stop", &p->stop));
  if (const json* ids = Field(body, "stop_token_ids")) {
    API_RETURN_IF_ERROR(
        ReadTokenIdList(*ids, "stop_token_ids", kMaxStopTokenIds, &p->stop_token_ids));
  }
  API_RETURN_IF_ERROR(ReadBool(body, "ignore_eos", &p->ignore_eos));
  API_RETURN_IF_ERROR(ReadBool(body, "include_stop_str_in_output", &p->include_stop_str_in_output));
  API_RETURN_IF_ERROR(ReadBool(body, "skip_special_tokens", &p->skip_special_tokens));
  API_RETURN_IF_ERROR(ReadInt(body, "priority", kInt32Min, kInt32Max, &p->priority));
  API_RETURN_IF_ERROR(ReadString(body, "cache_salt", &p->cache_salt));
  // `user` is accepted and ignored; other unknown fields too (clients send extras).
  if (const json* user = Field(body, "user"); user != nullptr && !user->is_string()) {
    return TypeError("user", "a string", *user);
  }
  return std::nullopt;
}

// `model` may be left out (vLLM does the same); when given it must name the served model.
MaybeError CheckModel(const json& body, const ModelInfo& model) {
  const json* v = Field(body, "model");
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return TypeError("model", "a string", *v);
  if (v->get_ref<const std::string&>() == model.name) return std::nullopt;
  ApiError e;
  e.status = 404;
  e.type = "not_found_error";
  e.param = "model";
  e.code = "model_not_found";
  e.message = "model: the model '" + v->get<std::string>() +
              "' does not exist; this server serves '" + model.name + "'";
  return e;
}

MaybeError CheckObject(const json& body) {
  if (!body.is_object()) return TypeError("", "a JSON object as the request body", body);
  return std::nullopt;
}

// `stream` and `stream_options` (include_usage; stream_options without stream is an error, as
// in OpenAI and vLLM).
MaybeError ReadStream(const json& body, bool* stream, bool* include_usage) {
  API_RETURN_IF_ERROR(ReadBool(body, "stream", stream));
  const json* options = Field(body, "stream_options");
  if (options == nullptr) return std::nullopt;
  if (!options->is_object()) return TypeError("stream_options", "an object", *options);
  if (!*stream) return BadRequest("stream_options", "is only allowed when stream is true");
  if (const json* v = Field(*options, "include_usage")) {
    if (!v->is_boolean()) return TypeError("stream_options.include_usage", "a boolean", *v);
    *include_usage = v->get<bool>();
  }
  return std::nullopt;
}

uint64_t Random64() {
  thread_local std::mt19937_64 rng([] {
    std::random_device device;
    return (uint64_t{device()} << 32) | uint64_t{device()};
  }());
  return rng();
}

std::string RandomId(std::string_view prefix) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int word = 0; word < 2; ++word) {
    uint64_t bits = Random64();
    for (int i = 0; i < 16; ++i, bits >>= 4) id.push_back(kHex[bits & 15]);
  }
  return id;
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Fits `requested` max_tokens (or the default, capped at the room left) into the context.
// prompt_param / max_tokens_param name the fields in the error ("messages",
// "max_completion_tokens").
MaybeError FitContext(int32_t prompt_len, std::optional<int32_t> requested, int32_t default_max,
                      const ModelInfo& model, const std::string& prompt_param,
                      const std::string& max_tokens_param, int32_t* max_tokens) {
  const int64_t limit = model.max_model_len;
  if (prompt_len >= limit) {
    return BadRequest(prompt_param, "this model's maximum context length is " +
                                        std::to_string(limit) + " tokens, but the prompt has " +
                                        std::to_string(prompt_len) +
                                        " tokens, which leaves no room to generate. Please "
                                        "reduce the length of the prompt.");
  }
  if (!requested.has_value()) {
    *max_tokens = static_cast<int32_t>(std::min<int64_t>(default_max, limit - prompt_len));
    return std::nullopt;
  }
  if (int64_t{prompt_len} + *requested > limit) {
    return BadRequest(max_tokens_param, "this model's maximum context length is " +
                                            std::to_string(limit) +
                                            " tokens. However, you requested " +
                                            std::to_string(int64_t{prompt_len} + *requested) +
                                            " tokens (" + std::to_string(prompt_len) +
                                            " in the prompt, " + std::to_string(*requested) +
                                            " in the completion). Please reduce the "
                                            "length of the prompt or " +
                                            max_tokens_param + ".");
  }
  *max_tokens = *requested;
  return std::nullopt;
}

MaybeError CheckPromptIds(const std::vector<int32_t>& ids, const std::string& param,
                          const ModelInfo& model) {
  if (ids.empty()) return BadRequest(param, "is empty");
  const int32_t vocab =
      model.vocab_size > 0 ? model.vocab_size : model.tokenizer->tokenizer->vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return BadRequest(param, "token id " + std::to_string(ids[i]) + " at position " +
                                   std::to_string(i) + " is out of range [0, " +
                                   std::to_string(vocab) + ")");
    }
  }
  return std::nullopt;
}

struct PromptInput {
  std::string param;  // "prompt" or "prompt[i]" (for errors)
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

// `prompt`: a string, a list of strings, a list of token ids, or a list of token-id lists.
MaybeError ReadPrompts(const json& body, std::vector<PromptInput>* prompts) {
  const json* v = Field(body, "prompt");
  static constexpr std::string_view kShapes =
      "a string, a list of strings, a list of token ids or a list of token-id lists";
  if (v == nullptr) return BadRequest("prompt", "is required");
  if (v->is_string()) {
    prompts->push_back({"prompt", v->get<std::string>(), {}});
    return std::nullopt;
  }
  if (!v->is_array()) return TypeError("prompt", kShapes, *v);
  if (v->empty()) return BadRequest("prompt", "must not be empty");
  const json& first = v->front();
  if (first.is_number()) {
    PromptInput p{"prompt", std::nullopt, {}};
    API_RETURN_IF_ERROR(ReadTokenIdList(*v, "prompt", std::numeric_limits<size_t>::max(), &p.ids));
    prompts->push_back(std::move(p));
    return std::nullopt;
  }
  if (v->size() > static_cast<size_t>(kMaxChoices)) {
    return BadRequest("prompt", "at most " + std::to_string(kMaxChoices) + " prompts, got " +
                                    std::to_string(v->size()));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    std::string param = "prompt[" + std::to_string(i) + "]";
    if (first.is_string() && item.is_string()) {
      prompts->push_back({param, item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      PromptInput p{param, std::nullopt, {}};
      API_RETURN_IF_ERROR(ReadTokenIdList(item, param, std::numeric_limits<size_t>::max(), &p.ids));
      prompts->push_back(std::move(p));
    } else {
      return TypeError(param,
                       first.is_string()  ? "a string (like prompt[0])"
                       : first.is_array() ? "a list of token ids (like prompt[0])"
                                          : "a string or a list of token ids",
                       item);
    }
  }
  return std::nullopt;
}

// The expansion shared by every route: prompt p's completion j is requests[p * n + j].
ApiJob BuildJob(ApiKind kind, bool stream, const SamplingParams& params,
                const std::vector<std::vector<int32_t>>& prompt_ids,
                const std::vector<int32_t>& max_tokens, bool max_tokens_is_default,
                std::shared_ptr<ApiJob::Render> render) {
  ApiJob job;
  job.kind = kind;
  job.stream = stream;
  job.requests.reserve(prompt_ids.size() * params.n);
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    for (int32_t j = 0; j < params.n; ++j) {
      EngineRequest r;
      r.prompt_token_ids = prompt_ids[p];
      r.params = params;
      r.params.max_tokens = max_tokens[p];
      r.max_tokens_is_default = max_tokens_is_default;
      r.seed = params.seed.has_value() ? CompletionSeed(*params.seed, j) : Random64();
      r.cache_key.cache_salt = params.cache_salt;
      job.requests.push_back(std::move(r));
    }
  }
  render->kind = kind;
  render->n = params.n;
  render->created = NowUnixSeconds();
  render->prompt_token_ids = prompt_ids;
  render->stop_token_ids = params.stop_token_ids;
  job.render = std::move(render);
  return job;
}

// Validates `params` against every prompt's max_tokens (min_tokens must fit the smallest).
MaybeError ValidateParams(SamplingParams params, const std::vector<int32_t>& max_tokens,
                          const ModelInfo& model) {
  params.max_tokens = *std::min_element(max_tokens.begin(), max_tokens.end());
  const int32_t vocab =
      model.vocab_size > 0 ? model.vocab_size : model.tokenizer->tokenizer->vocab_size();
  Status status = params.Validate(vocab);
  if (!status.ok()) return FromStatus(status);
  return std::nullopt;
}

// ---- chat ----------------------------------------------------------------------------------

bool IsRole(std::string_view role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "tool";
}

// One message -> the {role, content, ...} the template sees. List content becomes one string
// (text parts joined by "\n", as vLLM's "string" content format does); developer becomes
// system, since chat templates predate the role.
MaybeError ReadMessage(const json& m, size_t index, ojson* out) {
  const std::string param = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) return TypeError(param, "an object", m);
  const json* role = Field(m, "role");
  if (role == nullptr) return BadRequest(param + ".role", "is required");
  if (!role->is_string()) return TypeError(param + ".role", "a string", *role);
  const std::string& role_name = role->get_ref<const std::string&>();
  if (!IsRole(role_name)) {
    return BadRequest(param + ".role", "must be system, developer, user, assistant or tool, got '" +
                                           role_name + "'");
  }
  (*out)["role"] = role_name == "developer" ? "system" : role_name;
  const json* content = Field(m, "content");
  const json* tool_calls = Field(m, "tool_calls");
  const std::string content_param = param + ".content";
  if (content == nullptr) {
    if (role_name != "assistant") return BadRequest(content_param, "is required");
    (*out)["content"] = tool_calls != nullptr ? ojson(nullptr) : ojson("");
  } else if (content->is_string()) {
    (*out)["content"] = content->get<std::string>();
  } else if (content->is_array()) {
    if (content->size() > kMaxContentParts) {
      return BadRequest(content_param, "at most " + std::to_string(kMaxContentParts) + " parts");
    }
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const json& part = (*content)[j];
      const std::string part_param = content_param + "[" + std::to_string(j) + "]";
      if (!part.is_object()) return TypeError(part_param, "an object", part);
      const json* type = Field(part, "type");
      if (type == nullptr || !type->is_string()) {
        return BadRequest(part_param + ".type", "is required and must be a string");
      }
      if (type->get_ref<const std::string&>() != "text") {
        return Unsupported(part_param + ".type", "content parts of type '" +
                                                     type->get<std::string>() +
                                                     "' are not supported; only 'text' parts are");
      }
      const json* part_text = Field(part, "text");
      if (part_text == nullptr || !part_text->is_string()) {
        return BadRequest(part_param + ".text", "is required and must be a string");
      }
      if (j > 0) text += "\n";
      text += part_text->get<std::string>();
    }
    (*out)["content"] = std::move(text);
  } else {
    return TypeError(content_param, "a string or a list of text parts", *content);
  }
  if (tool_calls != nullptr) {
    if (!tool_calls->is_array()) return TypeError(param + ".tool_calls", "a list", *tool_calls);
    (*out)["tool_calls"] = ojson::parse(tool_calls->dump());
  }
  for (const char* key : {"name", "tool_call_id"}) {
    if (const json* v = Field(m, key)) {
      if (!v->is_string()) return TypeError(param + "." + key, "a string", *v);
      (*out)[key] = v->get<std::string>();
    }
  }
  return std::nullopt;
}

struct ChatPrompt {
  std::vector<int32_t> ids;
};

// messages (+ tools, tool_choice, add_generation_prompt, continue_final_message,
// chat_template_kwargs, add_special_tokens) -> prompt token ids via the model's chat template.
MaybeError ChatPromptIds(const json& body, const ModelInfo& model, std::vector<int32_t>* ids) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr) return BadRequest("messages", "is required");
  if (!messages->is_array()) return TypeError("messages", "a list of messages", *messages);
  if (messages->empty()) return BadRequest("messages", "must not be empty");
  if (messages->size() > kMaxMessages) {
    return BadRequest("messages", "at most " + std::to_string(kMaxMessages) + " messages, got " +
                                      std::to_string(messages->size()));
  }
  ojson rendered_messages = ojson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    ojson m = ojson::object();
    API_RETURN_IF_ERROR(ReadMessage((*messages)[i], i, &m));
    rendered_messages.push_back(std::move(m));
  }
  ojson tools = nullptr;
  if (const json* v = Field(body, "tools")) {
    if (!v->is_array()) return TypeError("tools", "a list of tools", *v);
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_object()) {
        return TypeError("tools[" + std::to_string(i) + "]", "an object", (*v)[i]);
      }
    }
    tools = ojson::parse(v->dump());
  }
  if (const json* v = Field(body, "tool_choice")) {
    if (v->is_string() && v->get_ref<const std::string&>() == "none") {
      tools = nullptr;  // the model is not to call tools: do not show them
    } else if (!(v->is_string() && v->get_ref<const std::string&>() == "auto")) {
      return Unsupported("tool_choice", "only \"auto\" and \"none\" are accepted");
    }
  }
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  API_RETURN_IF_ERROR(ReadBool(body, "add_generation_prompt", &add_generation_prompt));
  API_RETURN_IF_ERROR(ReadBool(body, "continue_final_message", &continue_final_message));
  API_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special_tokens));
  if (continue_final_message && add_generation_prompt) {
    return BadRequest("continue_final_message",
                      "cannot be combined with add_generation_prompt; set "
                      "add_generation_prompt to false");
  }
  ojson extra = nullptr;
  if (const json* v = Field(body, "chat_template_kwargs")) {
    if (!v->is_object()) return TypeError("chat_template_kwargs", "an object", *v);
    extra = ojson::parse(v->dump());
  }
  if (Field(body, "chat_template") != nullptr) {
    return Unsupported("chat_template",
                       "a per-request chat template is not accepted; start "
                       "the server with --chat-template instead");
  }
  if (!model.tokenizer->chat_template.has_value()) {
    return BadRequest("messages", "the model '" + model.name +
                                      "' has no chat template, so messages cannot be rendered; "
                                      "use /v1/completions with a prompt, or start the server "
                                      "with a chat template");
  }
  Result<std::string> text =
      ApplyChatTemplate(*model.tokenizer, rendered_messages, tools, add_generation_prompt, extra);
  if (!text.ok()) {
    return BadRequest("messages", "the chat template failed: " + text.status().message());
  }
  if (continue_final_message) {
    // Cut the rendering right after the final message's text, so the model continues it.
    const ojson& last = rendered_messages.back()["content"];
    const std::string last_text = last.is_string() ? last.get<std::string>() : "";
    const size_t at = last_text.empty() ? std::string::npos : text->rfind(last_text);
    if (at == std::string::npos) {
      return BadRequest("continue_final_message",
                        "the final message's text was not found in the rendered chat template");
    }
    text->resize(at + last_text.size());
  }
  *ids = model.tokenizer->tokenizer->Encode(*text, add_special_tokens, /*parse_special=*/true);
  if (ids->empty()) return BadRequest("messages", "render to an empty prompt");
  return std::nullopt;
}

// /generate and Triton: one text prompt, n = 1, sampling fields from `fields`.
ParseResult ParseSingleText(ApiKind kind, const json& fields, const std::string& prompt_key,
                            const std::string& text, bool stream, const ModelInfo& model) {
  SamplingParams params;
  API_RETURN_IF_ERROR(ReadSampling(fields, &params));
  if (params.n != 1) return Unsupported("n", "only n = 1 is accepted on this route");
  std::optional<int32_t> requested;
  API_RETURN_IF_ERROR(ReadOptionalInt(fields, "max_tokens", kInt32Min, kInt32Max, &requested));
  std::vector<int32_t> ids =
      model.tokenizer->tokenizer->Encode(text, /*add_special=*/true, /*parse_special=*/true);
  API_RETURN_IF_ERROR(CheckPromptIds(ids, prompt_key, model));
  std::vector<int32_t> max_tokens(1);
  API_RETURN_IF_ERROR(FitContext(static_cast<int32_t>(ids.size()), requested,
                                 model.default_max_tokens, model, prompt_key, "max_tokens",
                                 &max_tokens[0]));
  API_RETURN_IF_ERROR(ValidateParams(params, max_tokens, model));
  auto render = std::make_shared<ApiJob::Render>();
  render->id = RandomId("cmpl-");
  render->model_name = model.name;
  return BuildJob(kind, stream, params, {std::move(ids)}, max_tokens, !requested.has_value(),
                  std::move(render));
}

}  // namespace

nlohmann::json ErrorBody(const ApiError& error) {
  json e = {
      {"message", error.message}, {"type", error.type}, {"param", nullptr}, {"code", nullptr}};
  if (!error.param.empty()) e["param"] = error.param;
  if (!error.code.empty()) e["code"] = error.code;
  return json{{"error", std::move(e)}};
}

ParseResult ParseCompletions(const nlohmann::json& body, const ModelInfo& model) {
  API_RETURN_IF_ERROR(CheckObject(body));
  API_RETURN_IF_ERROR(CheckModel(body, model));
  if (const json* suffix = Field(body, "suffix")) {
    if (!suffix->is_string()) return TypeError("suffix", "a string", *suffix);
    if (!suffix->get_ref<const std::string&>().empty()) {
      return Unsupported("suffix", "insertion after a suffix is not supported");
    }
  }
  SamplingParams params;
  API_RETURN_IF_ERROR(ReadSampling(body, &params));
  if (Field(body, "best_of") != nullptr) {
    int32_t best_of = 1;
    API_RETURN_IF_ERROR(ReadInt(body, "best_of", 1, kInt32Max, &best_of));
    if (best_of != 1 && best_of != params.n) {
      return Unsupported("best_of", "best_of other than 1 or n is not supported");
    }
  }
  auto render = std::make_shared<ApiJob::Render>();
  bool stream = false;
  API_RETURN_IF_ERROR(ReadStream(body, &stream, &render->include_usage));
  API_RETURN_IF_ERROR(ReadBool(body, "echo", &render->echo));
  API_RETURN_IF_ERROR(
      ReadOptionalInt(body, "logprobs", 0, SamplingParams::kMaxLogprobs, &render->logprobs));
  params.logprobs = render->logprobs;
  if (render->echo && render->logprobs.has_value()) params.prompt_logprobs = render->logprobs;
  std::optional<int32_t> requested;
  API_RETURN_IF_ERROR(ReadOptionalInt(body, "max_tokens", kInt32Min, kInt32Max, &requested));
  bool add_special_tokens = true;
  API_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special_tokens));

  std::vector<PromptInput> prompts;
  API_RETURN_IF_ERROR(ReadPrompts(body, &prompts));
  if (static_cast<int64_t>(prompts.size()) * params.n > kMaxChoices) {
    return BadRequest("n", "prompts × n must be at most " + std::to_string(kMaxChoices) + ", got " +
                               std::to_string(prompts.size()) + " × " + std::to_string(params.n));
  }
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<int32_t> max_tokens(prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    PromptInput& prompt = prompts[p];
    if (prompt.text.has_value()) {
      prompt.ids = model.tokenizer->tokenizer->Encode(*prompt.text, add_special_tokens,
                                                      /*parse_special=*/true);
    }
    API_RETURN_IF_ERROR(CheckPromptIds(prompt.ids, prompt.param, model));
    API_RETURN_IF_ERROR(FitContext(static_cast<int32_t>(prompt.ids.size()), requested,
                                   model.default_max_tokens, model, prompt.param, "max_tokens",
                                   &max_tokens[p]));
    if (render->echo) {
      render->echo_text.push_back(prompt.text.has_value()
                                      ? *prompt.text
                                      : model.tokenizer->tokenizer->Decode(prompt.ids, false));
    }
    prompt_ids.push_back(std::move(prompt.ids));
  }
  API_RETURN_IF_ERROR(ValidateParams(params, max_tokens, model));
  render->id = RandomId("cmpl-");
  render->model_name = model.name;
  return BuildJob(ApiKind::kCompletions, stream, params, prompt_ids, max_tokens,
                  !requested.has_value(), std::move(render));
}

ParseResult ParseChatCompletions(const nlohmann::json& body, const ModelInfo& model) {
  API_RETURN_IF_ERROR(CheckObject(body));
  API_RETURN_IF_ERROR(CheckModel(body, model));
  SamplingParams params;
  API_RETURN_IF_ERROR(ReadSampling(body, &params));
  auto render = std::make_shared<ApiJob::Render>();
  bool stream = false;
  API_RETURN_IF_ERROR(ReadStream(body, &stream, &render->include_usage));
  bool logprobs = false;
  API_RETURN_IF_ERROR(ReadBool(body, "logprobs", &logprobs));
  std::optional<int32_t> top_logprobs;
  API_RETURN_IF_ERROR(
      ReadOptionalInt(body, "top_logprobs", 0, SamplingParams::kMaxLogprobs, &top_logprobs));
  if (top_logprobs.has_value() && !logprobs) {
    return BadRequest("top_logprobs", "requires logprobs to be true");
  }
  if (logprobs) render->logprobs = top_logprobs.value_or(0);
  params.logprobs = render->logprobs;
  if (const json* format = Field(body, "response_format")) {
    if (!format->is_object()) return TypeError("response_format", "an object", *format);
    const json* type = Field(*format, "type");
    if (type == nullptr || !type->is_string()) {
      return BadRequest("response_format.type", "is required and must be a string");
    }
    if (type->get_ref<const std::string&>() != "text") {
      return Unsupported("response_format",
                         "response_format type '" + type->get<std::string>() +
                             "' (structured output) is not supported; only 'text' is");
    }
  }
  // max_completion_tokens is the newer name and wins (vLLM does the same).
  std::string max_tokens_param = "max_tokens";
  std::optional<int32_t> requested;
  API_RETURN_IF_ERROR(ReadOptionalInt(body, "max_tokens", kInt32Min, kInt32Max, &requested));
  if (Field(body, "max_completion_tokens") != nullptr) {
    max_tokens_param = "max_completion_tokens";
    API_RETURN_IF_ERROR(
        ReadOptionalInt(body, "max_completion_tokens", kInt32Min, kInt32Max, &requested));
  }
  std::vector<int32_t> ids;
  API_RETURN_IF_ERROR(ChatPromptIds(body, model, &ids));
  API_RETURN_IF_ERROR(CheckPromptIds(ids, "messages", model));
  std::vector<int32_t> max_tokens(1);
  API_RETURN_IF_ERROR(FitContext(static_cast<int32_t>(ids.size()), requested, model.max_model_len,
                                 model, "messages", max_tokens_param, &max_tokens[0]));
  if (MaybeError e = ValidateParams(params, max_tokens, model)) {
    // The engine's names -> this route's names.
    if (e->param == "logprobs") e->param = "top_logprobs";
    if (e->param == "max_tokens" && max_tokens_param != "max_tokens") {
      e->param = max_tokens_param;
      e->message = max_tokens_param + e->message.substr(std::string("max_tokens").size());
    }
    return *e;
  }
  render->id = RandomId("chatcmpl-");
  render->model_name = model.name;
  return BuildJob(ApiKind::kChat, stream, params, {std::move(ids)}, max_tokens,
                  !requested.has_value(), std::move(render));
}

ParseResult ParseGenerate(const nlohmann::json& body, const ModelInfo& model) {
  API_RETURN_IF_ERROR(CheckObject(body));
  API_RETURN_IF_ERROR(CheckModel(body, model));
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return BadRequest("prompt", "is required");
  if (!prompt->is_string()) return TypeError("prompt", "a string", *prompt);
  bool stream = false;
  API_RETURN_IF_ERROR(ReadBool(body, "stream", &stream));
  return ParseSingleText(ApiKind::kGenerate, body, "prompt", prompt->get<std::string>(), stream,
                         model);
}

ParseResult ParseTritonGenerate(const nlohmann::json& body, const std::string& model_name,
                                bool stream, const ModelInfo& model) {
  if (model_name != model.name) {
    ApiError e;
    e.status = 404;
    e.type = "not_found_error";
    e.code = "model_not_found";
    e.message =
        "the model '" + model_name + "' does not exist; this server serves '" + model.name + "'";
    return e;
  }
  API_RETURN_IF_ERROR(CheckObject(body));
  // Triton clients put sampling fields at the top level or under "parameters"; the top level
  // wins. stop_words is TensorRT-LLM's name for stop.
  json fields = json::object();
  if (const json* parameters = Field(body, "parameters")) {
    if (!parameters->is_object()) return TypeError("parameters", "an object", *parameters);
    fields = *parameters;
  }
  for (const auto& [key, value] : body.items()) {
    if (key != "parameters") fields[key] = value;
  }
  if (Field(fields, "stop") == nullptr && Field(fields, "stop_words") != nullptr) {
    fields["stop"] = fields["stop_words"];
  }
  if (Field(fields, "seed") == nullptr && Field(fields, "random_seed") != nullptr) {
    fields["seed"] = fields["random_seed"];
  }
  if (Field(fields, "beam_width") != nullptr) {
    int32_t width = 1;
    API_RETURN_IF_ERROR(ReadInt(fields, "beam_width", 1, kInt32Max, &width));
    if (width != 1) return Unsupported("beam_width", "beam search is not supported");
  }
  const json* text = Field(fields, "text_input");
  if (text == nullptr) return BadRequest("text_input", "is required");
  std::string prompt;
  if (text->is_string()) {
    prompt = text->get<std::string>();
  } else if (text->is_array() && text->size() == 1 && (*text)[0].is_string()) {
    prompt = (*text)[0].get<std::string>();  // Triton's tensor form: a batch of one
  } else {
    return TypeError("text_input", "a string", *text);
  }
  return ParseSingleText(ApiKind::kTritonGenerate, fields, "text_input", prompt, stream, model);
}

std::variant<nlohmann::json, ApiError> Tokenize(const nlohmann::json& body,
                                                const ModelInfo& model) {
  API_RETURN_IF_ERROR(CheckObject(body));
  API_RETURN_IF_ERROR(CheckModel(body, model));
  std::vector<int32_t> ids;
  if (Field(body, "messages") != nullptr) {
    API_RETURN_IF_ERROR(ChatPromptIds(body, model, &ids));
  } else {
    const json* prompt = Field(body, "prompt");
    if (prompt == nullptr) return BadRequest("prompt", "is required (or messages)");
    if (!prompt->is_string()) return TypeError("prompt", "a string", *prompt);
    bool add_special_tokens = true;
    API_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special_tokens));
    ids = model.tokenizer->tokenizer->Encode(prompt->get_ref<const std::string&>(),
                                             add_special_tokens, /*parse_special=*/true);
  }
  bool return_token_strs = false;
  API_RETURN_IF_ERROR(ReadBool(body, "return_token_strs", &return_token_strs));
  json out = {{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}};
  if (return_token_strs) {
    json strs = json::array();
    for (int32_t id : ids)
      strs.push_back(SanitizeUtf8(TokenBytes(*model.tokenizer->tokenizer, id)));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

std::variant<nlohmann::json, ApiError> Detokenize(const nlohmann::json& body,
                                                  const ModelInfo& model) {
  API_RETURN_IF_ERROR(CheckObject(body));
  API_RETURN_IF_ERROR(CheckModel(body, model));
  const json* tokens = Field(body, "tokens");
  if (tokens == nullptr) return BadRequest("tokens", "is required");
  std::vector<int32_t> ids;
  API_RETURN_IF_ERROR(ReadTokenIdList(*tokens, "tokens", std::numeric_limits<size_t>::max(), &ids));
  const int32_t vocab = model.tokenizer->tokenizer->vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= vocab) {
      return BadRequest("tokens", "token id " + std::to_string(ids[i]) + " at position " +
                                      std::to_string(i) + " is out of range [0, " +
                                      std::to_string(vocab) + ")");
    }
  }
  return json{{"prompt", SanitizeUtf8(model.tokenizer->tokenizer->Decode(ids, false))}};
}

nlohmann::json ModelList(const ModelInfo& model) {
  json entry = {{"id", model.name},   {"object", "model"},  {"created", model.created},
                {"owned_by", "kiln"}, {"root", model.name}, {"max_model_len", model.max_model_len}};
  return json{{"object", "list"}, {"data", json::array({std::move(entry)})}};
}

}  // namespace kiln::server
