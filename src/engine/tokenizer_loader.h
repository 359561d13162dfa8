// Loads the text side of a model: its tokenizer, chat template and bos/eos token strings, from
// an HF checkpoint directory or a GGUF file.
//
//   HF directory:  tokenizer.json (required), tokenizer_config.json (optional: chat_template as a
//                  string or a named list, bos_token / eos_token as strings or AddedToken dicts,
//                  add_bos_token / add_eos_token overriding the post-processor), and
//                  chat_template.jinja (used when tokenizer_config.json has no chat_template).
//   GGUF file:     tokenizer.ggml.* and tokenizer.chat_template metadata.
//   engine dir:    as an HF directory, or tokenizer.gguf.json (a GGUF source's tokenizer.ggml.*
//                  fields) + chat_template.jinja.
//
//   KILN_ASSIGN_OR_RETURN(LoadedTokenizer t, LoadTokenizer(model_path, {}));
//   KILN_ASSIGN_OR_RETURN(std::string prompt, ApplyChatTemplate(t, messages, nullptr, true));
//   std::vector<int32_t> ids = t.tokenizer->Encode(prompt, /*add_special=*/false, true);
//
// Thread safety: a LoadedTokenizer is immutable once loaded; its const methods may be used from
// any number of threads.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kiln {

struct TokenizerLoadOptions {
  // A file whose whole text is the chat template; replaces the checkpoint's (--chat-template).
  std::string chat_template_file;
  // Picks an entry of a named chat_template list in tokenizer_config.json ("" = "default").
  std::string chat_template_name;
};

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  // Absent when the checkpoint has none and no override was given; ApplyChatTemplate then fails.
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_source;  // where the template came from (a file or GGUF key)
  std::string bos_token;             // "" when the model has none
  std::string eos_token;
};

// Loads from `model_path`: a directory (HF) or a file (GGUF). Errors: kNotFound naming the path
// when it does not exist or a directory lacks tokenizer.json; those of VocabFromTokenizerJson /
// VocabFromGgufMetadata / GgufFile::Open; kInvalidArgument for a chat template that does not
// parse (naming its source) or malformed tokenizer_config.json; kNotFound for an unknown
// opts.chat_template_name. A checkpoint without a chat template is not an error.
Result<LoadedTokenizer> LoadTokenizer(const std::string& model_path,
                                      const TokenizerLoadOptions& opts = {});

// Reads the tokenizer.ggml.* keys of the GGUF file at `path`; absent optional keys keep their
// defaults. Errors: those of GgufFile::Open and of a key of the wrong type.
Result<GgufTokenizerFields> ReadGgufTokenizerFields(const std::string& path);
// The GGUF file's default chat template (tokenizer.chat_template), if it has one.
Result<std::optional<std::string>> ReadGgufChatTemplate(const std::string& path);

// GGUF tokenizer fields as JSON (an engine directory's tokenizer.gguf.json, model/engine_dir.h)
// and back. Errors: Corrupt naming `source` for malformed JSON or fields.
std::string GgufTokenizerFieldsToJson(const GgufTokenizerFields& fields);
Result<GgufTokenizerFields> GgufTokenizerFieldsFromJson(std::string_view text,
                                                        const std::string& source);

// Renders `messages` (a JSON list) with the loaded chat template and the context HF's
// apply_chat_template builds: messages, tools (omitted when null), add_generation_prompt,
// bos_token, eos_token, then the keys of `extra` (a JSON object or null; its keys win).
// Tokenize the result with add_special=false (HF does: the template writes bos itself).
// Errors: kInvalidArgument when messages is not a list, tools is neither null nor a list, extra
// is neither null nor an object, or the template raises; kNotFound when there is no template.
Result<std::string> ApplyChatTemplate(const LoadedTokenizer& loaded,
                                      const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools,
                                      bool add_generation_prompt,
                                      const nlohmann::ordered_json& extra = nullptr);

}  // namespace kiln
