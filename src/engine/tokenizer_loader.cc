#include "engine/tokenizer_loader.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "model/config.h"
#include "model/gguf.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// A special token written in tokenizer_config.json: a string, an AddedToken dict
// {"content": ...} or null. Anything else reads as "".
std::string SpecialTokenText(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return "";
}

Status ParseTemplateInto(std::string source, std::string origin, LoadedTokenizer* out) {
  auto parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) return parsed.status().WithContext(origin);
  out->chat_template.emplace(std::move(*parsed));
  out->chat_template_source = std::move(origin);
  return Status::Ok();
}

std::string TokenText(const Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.vocab_size() ? tok.IdToToken(id) : std::string();
}

// An engine directory built from a GGUF file: its tokenizer fields, and chat_template.jinja.
Result<LoadedTokenizer> LoadGgufJsonDirectory(const fs::path& dir,
                                              const TokenizerLoadOptions& opts) {
  const fs::path fields_path = dir / "tokenizer.gguf.json";
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(fields_path.string()));
  KILN_ASSIGN_OR_RETURN(GgufTokenizerFields fields,
                        GgufTokenizerFieldsFromJson(text, fields_path.string()));
  KILN_ASSIGN_OR_RETURN(TokenizerVocab vocab, VocabFromGgufMetadata(fields));
  LoadedTokenizer out;
  KILN_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::Create(std::move(vocab)));
  out.bos_token = TokenText(*out.tokenizer, out.tokenizer->bos_id());
  out.eos_token = TokenText(*out.tokenizer, out.tokenizer->eos_id());
  if (!opts.chat_template_file.empty()) return out;
  if (!opts.chat_template_name.empty()) {
    return NotFound(dir.string() + ": an engine keeps only the default chat template; no '" +
                    opts.chat_template_name + "'");
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    KILN_ASSIGN_OR_RETURN(std::string source, ReadTextFile(jinja_path.string()));
    KILN_RETURN_IF_ERROR(ParseTemplateInto(std::move(source), jinja_path.string(), &out));
  }
  return out;
}

Result<LoadedTokenizer> LoadHfDirectory(const fs::path& dir, const TokenizerLoadOptions& opts) {
  const fs::path tokenizer_json = dir / "tokenizer.json";
  if (!fs::exists(tokenizer_json) && fs::exists(dir / "tokenizer.gguf.json")) {
    return LoadGgufJsonDirectory(dir, opts);
  }
  if (!fs::exists(tokenizer_json)) {
    return NotFound(tokenizer_json.string() +
                    ": no such file (kiln reads HF fast-tokenizer files; a checkpoint with only "
                    "tokenizer.model needs converting with transformers first)");
  }
  KILN_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tokenizer_json.string()));
  KILN_ASSIGN_OR_RETURN(TokenizerVocab vocab,
                        VocabFromTokenizerJson(text, tokenizer_json.string()));

  LoadedTokenizer out;
  const fs::path config_path = dir / "tokenizer_config.json";
  std::string config_text;
  Json config = Json::object();
  if (fs::exists(config_path)) {
    KILN_ASSIGN_OR_RETURN(config_text, ReadTextFile(config_path.string()));
    config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return InvalidArgument(config_path.string() + ": not a JSON object");
    }
  }
  out.bos_token = SpecialTokenText(config, "bos_token");
  out.eos_token = SpecialTokenText(config, "eos_token");
  // tokenizer_config.json's add_bos_token / add_eos_token override the post-processor.
  auto flag = [&](const char* key, bool* value) {
    auto it = config.find(key);
    if (it != config.end() && it->is_boolean()) *value = it->get<bool>();
  };
  flag("add_bos_token", &vocab.add_bos);
  flag("add_eos_token", &vocab.add_eos);

  // The config's bos/eos token names the id when the post-processor did not.
  auto find_id = [&](const std::string& token) -> int32_t {
    auto it = std::find(vocab.tokens.begin(), vocab.tokens.end(), token);
    return it == vocab.tokens.end() ? -1 : static_cast<int32_t>(it - vocab.tokens.begin());
  };
  if (vocab.bos_id < 0 && !out.bos_token.empty()) vocab.bos_id = find_id(out.bos_token);
  if (vocab.eos_id < 0 && !out.eos_token.empty()) vocab.eos_id = find_id(out.eos_token);
  KILN_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::Create(std::move(vocab)));
  if (out.bos_token.empty()) out.bos_token = TokenText(*out.tokenizer, out.tokenizer->bos_id());
  if (out.eos_token.empty()) out.eos_token = TokenText(*out.tokenizer, out.tokenizer->eos_id());

  if (!opts.chat_template_file.empty()) return out;  // LoadTokenizer parses the override
  // As in HF transformers, chat_template.jinja wins over tokenizer_config.json's chat_template
  // unless a named template is asked for.
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (opts.chat_template_name.empty() && fs::exists(jinja_path)) {
    KILN_ASSIGN_OR_RETURN(std::string source, ReadTextFile(jinja_path.string()));
    KILN_RETURN_IF_ERROR(ParseTemplateInto(std::move(source), jinja_path.string(), &out));
    return out;
  }
  if (!config_text.empty() &&
      (config.contains("chat_template") || !opts.chat_template_name.empty())) {
    auto source = SelectChatTemplate(config_text, opts.chat_template_name);
    if (!source.ok()) return source.status().WithContext(config_path.string());
    KILN_RETURN_IF_ERROR(ParseTemplateInto(std::move(*source), config_path.string(), &out));
  } else if (!opts.chat_template_name.empty()) {
    return NotFound(dir.string() + ": no chat template named '" + opts.chat_template_name + "'");
  }
  return out;
}

Result<LoadedTokenizer> LoadGguf(const std::string& path, const TokenizerLoadOptions& opts) {
  KILN_ASSIGN_OR_RETURN(GgufTokenizerFields fields, ReadGgufTokenizerFields(path));
  KILN_ASSIGN_OR_RETURN(TokenizerVocab vocab, VocabFromGgufMetadata(fields));
  LoadedTokenizer out;
  KILN_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::Create(std::move(vocab)));
  out.bos_token = TokenText(*out.tokenizer, out.tokenizer->bos_id());
  out.eos_token = TokenText(*out.tokenizer, out.tokenizer->eos_id());
  if (!opts.chat_template_file.empty()) return out;
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
  std::string key = "tokenizer.chat_template";
  if (!opts.chat_template_name.empty()) key += "." + opts.chat_template_name;
  if (gguf.Has(key)) {
    KILN_ASSIGN_OR_RETURN(std::string source, gguf.GetString(key));
    KILN_RETURN_IF_ERROR(ParseTemplateInto(std::move(source), path + ": " + key, &out));
  } else if (!opts.chat_template_name.empty()) {
    return NotFound(path + ": no chat template named '" + opts.chat_template_name + "' (key " +
                    key + ")");
  }
  return out;
}

}  // namespace

Result<GgufTokenizerFields> ReadGgufTokenizerFields(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
  GgufTokenizerFields f;
  KILN_ASSIGN_OR_RETURN(f.model, gguf.GetString("tokenizer.ggml.model"));
  if (gguf.Has("tokenizer.ggml.pre")) {
    KILN_ASSIGN_OR_RETURN(f.pre, gguf.GetString("tokenizer.ggml.pre"));
  }
  KILN_ASSIGN_OR_RETURN(f.tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (gguf.Has("tokenizer.ggml.scores")) {
    KILN_ASSIGN_OR_RETURN(f.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (gguf.Has("tokenizer.ggml.token_type")) {
    KILN_ASSIGN_OR_RETURN(f.token_type, gguf.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (gguf.Has("tokenizer.ggml.merges")) {
    KILN_ASSIGN_OR_RETURN(f.merges, gguf.GetStringArray("tokenizer.ggml.merges"));
  }
  auto get_id = [&](const char* key, int64_t* out) -> Status {
    if (!gguf.Has(key)) return Status::Ok();
    KILN_ASSIGN_OR_RETURN(*out, gguf.GetInt(key));
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.bos_token_id", &f.bos_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.eos_token_id", &f.eos_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.unknown_token_id", &f.unk_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.padding_token_id", &f.pad_id));
  auto get_flag = [&](const char* key, int* out) -> Status {
    if (!gguf.Has(key)) return Status::Ok();
    KILN_ASSIGN_OR_RETURN(bool b, gguf.GetBool(key));
    *out = b ? 1 : 0;
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_bos_token", &f.add_bos));
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_eos_token", &f.add_eos));
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_space_prefix", &f.add_space_prefix));
  return f;
}

Result<std::optional<std::string>> ReadGgufChatTemplate(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
  if (!gguf.Has("tokenizer.chat_template")) return std::optional<std::string>();
  KILN_ASSIGN_OR_RETURN(std::string source, gguf.GetString("tokenizer.chat_template"));
  return std::optional<std::string>(std::move(source));
}

std::string GgufTokenizerFieldsToJson(const GgufTokenizerFields& f) {
  Json j;
  j["model"] = f.model;
  j["pre"] = f.pre;
  j["tokens"] = f.tokens;
  j["scores"] = f.scores;
  j["token_type"] = f.token_type;
  j["merges"] = f.merges;
  j["bos_id"] = f.bos_id;
  j["eos_id"] = f.eos_id;
  j["unk_id"] = f.unk_id;
  j["pad_id"] = f.pad_id;
  j["add_bos"] = f.add_bos;
  j["add_eos"] = f.add_eos;
  j["add_space_prefix"] = f.add_space_prefix;
  // NOTE: replace, not throw: GGUF token strings need not be valid UTF-8; a replaced token
  // would break the vocabulary, so it is caught on reading (the tokenizer's own checks).
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

Result<GgufTokenizerFields> GgufTokenizerFieldsFromJson(std::string_view text,
                                                        const std::string& source) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(source + ": not a JSON object");
  GgufTokenizerFields f;
  try {
    f.model = j.at("model").get<std::string>();
    f.pre = j.at("pre").get<std::string>();
    f.tokens = j.at("tokens").get<std::vector<std::string>>();
    f.scores = j.at("scores").get<std::vector<double>>();
    f.token_type = j.at("token_type").get<std::vector<int64_t>>();
    f.merges = j.at("merges").get<std::vector<std::string>>();
    f.bos_id = j.at("bos_id").get<int64_t>();
    f.eos_id = j.at("eos_id").get<int64_t>();
    f.unk_id = j.at("unk_id").get<int64_t>();
    f.pad_id = j.at("pad_id").get<int64_t>();
    f.add_bos = j.at("add_bos").get<int>();
    f.add_eos = j.at("add_eos").get<int>();
    f.add_space_prefix = j.at("add_space_prefix").get<int>();
  } catch (const Json::exception& e) {
    return Corrupt(source + ": " + e.what());
  }
  return f;
}

Result<LoadedTokenizer> LoadTokenizer(const std::string& model_path,
                                      const TokenizerLoadOptions& opts) {
  std::error_code ec;
  const fs::path path(model_path);
  if (!fs::exists(path, ec)) return NotFound(model_path + ": no such file or directory");
  Result<LoadedTokenizer> loaded =
      fs::is_directory(path, ec) ? LoadHfDirectory(path, opts) : LoadGguf(model_path, opts);
  if (!loaded.ok() || opts.chat_template_file.empty()) return loaded;
  KILN_ASSIGN_OR_RETURN(std::string source, ReadTextFile(opts.chat_template_file));
  KILN_RETURN_IF_ERROR(ParseTemplateInto(std::move(source), opts.chat_template_file, &*loaded));
  return loaded;
}

Result<std::string> ApplyChatTemplate(const LoadedTokenizer& loaded, const Json& messages,
                                      const Json& tools, bool add_generation_prompt,
                                      const Json& extra) {
  if (!loaded.chat_template) {
    return NotFound(
        "the model has no chat template (none in tokenizer_config.json, chat_template.jinja or "
        "GGUF tokenizer.chat_template); pass one with --chat-template FILE");
  }
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON list");
  if (!tools.is_null() && !tools.is_array()) {
    return InvalidArgument("tools must be a JSON list");
  }
  if (!extra.is_null() && !extra.is_object()) {
    return InvalidArgument("extra template kwargs must be a JSON object");
  }
  // The keys and order of HF's render(messages=, tools=, documents=, add_generation_prompt=,
  // **special_tokens_map, **kwargs); tools and documents are None when not given.
  Json context = Json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (!loaded.bos_token.empty()) context["bos_token"] = loaded.bos_token;
  if (!loaded.eos_token.empty()) context["eos_token"] = loaded.eos_token;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) context[key] = value;
  }
  auto rendered = loaded.chat_template->Render(context);
  if (!rendered.ok()) return rendered.status().WithContext(loaded.chat_template_source);
  return rendered;
}

}  // namespace kiln
