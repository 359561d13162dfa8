// kiln tokenize / detokenize / chat-template: a model's tokenizer and chat template from the
// command line (src/engine/tokenizer_loader.h does the loading).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "engine/tokenizer_loader.h"
#include "model/config.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;

LoadedTokenizer LoadOrFail(const char* cmd, const std::string& model,
                           const TokenizerLoadOptions& opts = {}) {
  auto loaded = LoadTokenizer(model, opts);
  if (!loaded.ok()) Fail(cmd, loaded.status());
  return std::move(*loaded);
}

// The text of FILE, or of stdin for "-".
std::string ReadInputOrFail(const char* cmd, const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto text = ReadTextFile(path);
  if (!text.ok()) Fail(cmd, text.status());
  return *text;
}

Json ParseJsonOrFail(const char* cmd, const std::string& text, const std::string& origin) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) Fail(cmd, InvalidArgument(origin + ": not valid JSON"));
  return json;
}

void PrintIds(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
}

// ---- tokenize ----------------------------------------------------------------------------------

struct TokenizeOptions {
  std::string model, text, file;
  bool add_special = false;
  bool parse_special = false;
  bool json = false;
};

void RunTokenize(const TokenizeOptions& o) {
  if (o.text.empty() && o.file.empty()) {
    Fail("tokenize", InvalidArgument("give the text with --text T or --file F"));
  }
  LoadedTokenizer t = LoadOrFail("tokenize", o.model);
  const std::string text = o.file.empty() ? o.text : ReadInputOrFail("tokenize", o.file);
  const std::vector<int32_t> ids = t.tokenizer->Encode(text, o.add_special, o.parse_special);
  if (!o.json) {
    PrintIds(ids);
    return;
  }
  Json pieces = Json::array();
  for (int32_t id : ids) pieces.push_back(t.tokenizer->Decode({id}, /*skip_special=*/false));
  Json out = {{"ids", ids}, {"pieces", pieces}};
  std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

// ---- detokenize --------------------------------------------------------------------------------

struct DetokenizeOptions {
  std::string model, ids;
  bool skip_special = false;
};

void RunDetokenize(const DetokenizeOptions& o) {
  std::vector<int32_t> ids;
  std::istringstream in(o.ids);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id > INT32_MAX) {
      Fail("detokenize", InvalidArgument("--ids: '" + word + "' is not a token id"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  LoadedTokenizer t = LoadOrFail("detokenize", o.model);
  for (int32_t id : ids) {
    if (id >= t.tokenizer->vocab_size()) {
      Fail("detokenize",
           InvalidArgument("--ids: " + std::to_string(id) + " is outside the vocab (size " +
                           std::to_string(t.tokenizer->vocab_size()) + ")"));
    }
  }
  const std::string text = t.tokenizer->Decode(ids, o.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
}

// ---- chat-template -----------------------------------------------------------------------------

struct ChatTemplateCmdOptions {
  std::string model, messages, tools, chat_template, chat_template_name;
  bool add_generation_prompt = false;
  bool tokenize = false;
};

void RunChatTemplate(const ChatTemplateCmdOptions& o) {
  constexpr const char* kCmd = "chat-template";
  const std::string messages_origin = o.messages == "-" ? "stdin" : o.messages;
  Json messages =
      ParseJsonOrFail(kCmd, ReadInputOrFail(kCmd, o.messages), "--messages " + messages_origin);
  // A file may hold the list itself or an OpenAI request body {"messages": [...], "tools": ...}.
  Json tools = nullptr;
  if (messages.is_object() && messages.contains("messages")) {
    if (messages.contains("tools")) tools = messages["tools"];
    messages = Json(messages["messages"]);
  }
  if (!messages.is_array()) {
    Fail(kCmd, InvalidArgument("--messages " + messages_origin +
                               ": expected a JSON list of "
                               "messages"));
  }
  if (!o.tools.empty()) {
    tools = ParseJsonOrFail(kCmd, ReadInputOrFail(kCmd, o.tools), "--tools " + o.tools);
    if (!tools.is_array()) {
      Fail(kCmd, InvalidArgument("--tools " + o.tools + ": expected a JSON list of tools"));
    }
  }
  TokenizerLoadOptions lo;
  lo.chat_template_file = o.chat_template;
  lo.chat_template_name = o.chat_template_name;
  LoadedTokenizer t = LoadOrFail(kCmd, o.model, lo);
  auto prompt = ApplyChatTemplate(t, messages, tools, o.add_generation_prompt);
  if (!prompt.ok()) Fail(kCmd, prompt.status());
  if (o.tokenize) {
    // As HF's apply_chat_template(tokenize=True): the template wrote the special tokens itself.
    PrintIds(t.tokenizer->Encode(*prompt, /*add_special=*/false, /*parse_special=*/true));
  } else {
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  }
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("model,--model", opts->model, "HF checkpoint directory or .gguf file")
      ->required();
  auto* text = cmd->add_option("--text", opts->text, "the text");
  auto* file = cmd->add_option("--file", opts->file, "read the text from FILE (- = stdin)");
  text->excludes(file);
  cmd->add_flag("--add-special", opts->add_special, "add bos/eos as the tokenizer says");
  cmd->add_flag("--parse-special", opts->parse_special,
                "special tokens written in the text (<|im_end|>) become their ids");
  cmd->add_flag("--json", opts->json, "print {\"ids\": [...], \"pieces\": [...]}");
  cmd->callback([opts] { RunTokenize(*opts); });
}

void AddDetokenizeCommand(CLI::App& app) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Print the text of token ids");
  cmd->add_option("model,--model", opts->model, "HF checkpoint directory or .gguf file")
      ->required();
  cmd->add_option("--ids", opts->ids, "token ids separated by spaces: \"1 2 3\"")->required();
  cmd->add_flag("--skip-special", opts->skip_special, "special tokens produce no text");
  cmd->callback([opts] { RunDetokenize(*opts); });
}

void AddChatTemplateCommand(CLI::App& app) {
  auto opts = std::make_shared<ChatTemplateCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template", "Render a conversation with the model's chat template (as HF does)");
  cmd->add_option("model,--model", opts->model, "HF checkpoint directory or .gguf file")
      ->required();
  cmd->add_option("--messages", opts->messages,
                  "JSON file (- = stdin): a list of messages, or {\"messages\": [...], "
                  "\"tools\": [...]}")
      ->required();
  cmd->add_option("--tools", opts->tools, "JSON file with a list of tools");
  cmd->add_option("--chat-template", opts->chat_template,
                  "use the Jinja template in FILE instead of the model's");
  cmd->add_option("--chat-template-name", opts->chat_template_name,
                  "pick a named template of the model's list");
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt,
                "end with the assistant turn's opening");
  cmd->add_flag("--tokenize", opts->tokenize, "print the prompt's token ids instead");
  cmd->callback([opts] { RunChatTemplate(*opts); });
}

}  // namespace kiln::cli
