#include "cli/prompt_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace kiln::cli {

using Json = nlohmann::ordered_json;

Result<PromptFileFormat> ParsePromptFileFormat(const std::string& name) {
  if (name == "auto") return PromptFileFormat::kAuto;
  if (name == "text") return PromptFileFormat::kText;
  if (name == "jsonl") return PromptFileFormat::kJsonl;
  return InvalidArgument("prompt file format: expected auto, text or jsonl, got '" + name + "'");
}

Prompt TextPrompt(std::string text, const PromptFileOptions& options) {
  if (!options.chat) return Prompt::Text(std::move(text));
  Json messages = Json::array();
  if (!options.system.empty())
    messages.push_back({{"role", "system"}, {"content", options.system}});
  messages.push_back({{"role", "user"}, {"content", std::move(text)}});
  return Prompt::Chat(std::move(messages));
}

Result<Prompt> PromptFromJsonLine(const std::string& line, const std::string& origin,
                                  const PromptFileOptions& options) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(origin + ": not a JSON object");
  if (j.contains("messages")) {
    if (!j["messages"].is_array()) return InvalidArgument(origin + ": messages must be a list");
    return Prompt::Chat(j["messages"]);
  }
  if (j.contains("prompt_token_ids")) {
    const Json& ids = j["prompt_token_ids"];
    if (!ids.is_array()) return InvalidArgument(origin + ": prompt_token_ids must be a list");
    std::vector<int32_t> out;
    for (const Json& id : ids) {
      if (!id.is_number_integer()) {
        return InvalidArgument(origin + ": prompt_token_ids must hold integers");
      }
      out.push_back(id.get<int32_t>());
    }
    return Prompt::Tokens(std::move(out));
  }
  if (j.contains("prompt") && j["prompt"].is_string()) {
    return TextPrompt(j["prompt"].get<std::string>(), options);
  }
  return InvalidArgument(origin +
                         ": expected a \"prompt\" string, \"messages\" or \"prompt_token_ids\"");
}

Result<std::vector<Prompt>> ReadPromptFile(const std::string& path,
                                           const PromptFileOptions& options) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  bool jsonl = options.format == PromptFileFormat::kJsonl;
  if (options.format == PromptFileFormat::kAuto) {
    jsonl = path.ends_with(".jsonl") || path.ends_with(".json");
  }
  std::vector<Prompt> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!jsonl) {
      if (line.back() == '\r') line.pop_back();  // a file written on Windows
      prompts.push_back(TextPrompt(line, options));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Prompt p,
                          PromptFromJsonLine(line, path + ":" + std::to_string(n), options));
    prompts.push_back(std::move(p));
  }
  if (in.bad()) return IoError(path + ": read failed");
  return prompts;
}

}  // namespace kiln::cli
