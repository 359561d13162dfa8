// Prompt files, read the same way by the commands that take many prompts (`kiln generate
// --input`, `kiln eval compare --prompts`):
//
//   JSONL   one object per line: {"prompt": "..."} | {"messages": [...]} |
//           {"prompt_token_ids": [...]}
//   text    one prompt per line (the line as it is, without its newline)
//
// Blank lines (only spaces, tabs, CR) are skipped in both.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/llm.h"

namespace kiln::cli {

enum class PromptFileFormat : uint8_t {
  kAuto,  // JSONL when the file name ends in .jsonl or .json, else text
  kText,
  kJsonl,
};

// Parses "auto", "text" or "jsonl". Errors: kInvalidArgument naming the value.
Result<PromptFileFormat> ParsePromptFileFormat(const std::string& name);

struct PromptFileOptions {
  PromptFileFormat format = PromptFileFormat::kAuto;
  // Wrap text prompts ("prompt" strings and text lines) as one user message of the chat
  // template, after a system message when `system` is not empty.
  bool chat = false;
  std::string system;
};

// A text prompt, as a chat user message when options.chat.
Prompt TextPrompt(std::string text, const PromptFileOptions& options);

// The prompt of one JSONL line; `origin` ("FILE:LINE") starts every error message.
// Errors: kInvalidArgument for a line that is not a JSON object or has none of the keys above
// (or one of the wrong type).
Result<Prompt> PromptFromJsonLine(const std::string& line, const std::string& origin,
                                  const PromptFileOptions& options);

// Every prompt of the file, in order (possibly none). Errors: kNotFound "PATH: cannot open";
// those of PromptFromJsonLine, naming PATH:LINE.
Result<std::vector<Prompt>> ReadPromptFile(const std::string& path,
                                           const PromptFileOptions& options);

}  // namespace kiln::cli
