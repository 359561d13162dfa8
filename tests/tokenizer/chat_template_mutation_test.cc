// Randomly corrupted chat templates and oddly shaped contexts must give a Status or a render,
// never a crash, hang or sanitizer report (scripts/test runs this under ASan/UBSan). Starts
// from the real templates of ../shared/testdata/chat-templates; fixed seed.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

std::vector<std::string> LoadTemplates() {
  std::vector<std::string> out;
  std::filesystem::path dir = std::filesystem::path(KILN_TESTDATA_DIR) / "chat-templates";
  if (!std::filesystem::is_directory(dir)) return out;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".jinja") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

const char* const kFragments[] = {"{%",
                                  "%}",
                                  "{{",
                                  "}}",
                                  "{#",
                                  "#}",
                                  "-%}",
                                  "{%-",
                                  "(",
                                  ")",
                                  "[",
                                  "]",
                                  "{",
                                  "}",
                                  "'",
                                  "\"",
                                  "|",
                                  ".",
                                  ",",
                                  ":",
                                  " is ",
                                  " not ",
                                  " in ",
                                  "endif",
                                  "endfor",
                                  "if ",
                                  "for ",
                                  "else",
                                  "loop",
                                  "messages",
                                  "ns",
                                  "set ",
                                  "macro ",
                                  "endmacro",
                                  "**",
                                  "//",
                                  "~",
                                  "-1",
                                  "0",
                                  "[::-1]",
                                  "| tojson",
                                  "| length",
                                  "| selectattr('x')",
                                  "range(99)",
                                  "\\",
                                  "\n",
                                  " ",
                                  "é",
                                  "\xff"};

std::string Mutate(std::string s, std::mt19937& rng) {
  int num_edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < num_edits; ++e) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    size_t len = 1 + rng() % 16;
    switch (rng() % 4) {
      case 0:  // delete a span
        s.erase(std::min(pos, s.size()), len);
        break;
      case 1:  // insert a fragment
        s.insert(std::min(pos, s.size()), kFragments[rng() % std::size(kFragments)]);
        break;
      case 2: {  // duplicate a span
        size_t from = s.empty() ? 0 : rng() % s.size();
        s.insert(std::min(pos, s.size()), s.substr(from, len));
        break;
      }
      default:  // flip a byte
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    }
  }
  return s;
}

nlohmann::ordered_json Context(int variant) {
  auto ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "f", "arguments": {"a": 1}}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  switch (variant % 4) {
    case 1:  // odd shapes where strings are expected
      ctx["messages"][1]["content"] = nlohmann::ordered_json::array({1, nullptr, {{"t", 2}}});
      ctx["messages"][0]["content"] = nullptr;
      break;
    case 2:
      ctx["messages"] = nlohmann::ordered_json::object({{"role", "user"}});
      ctx["tools"] = "not a list";
      break;
    case 3:
      ctx.erase("messages");
      ctx["add_generation_prompt"] = 7;
      break;
    default:
      break;
  }
  return ctx;
}

TEST(ChatTemplateMutation, CorruptTemplatesAndContextsNeverCrash) {
  std::vector<std::string> templates = LoadTemplates();
  if (templates.empty()) GTEST_SKIP() << "no templates in " << KILN_TESTDATA_DIR;
  std::mt19937 rng(20261122);
  ChatTemplateOptions options;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_output_bytes = 1 << 20;
  options.strftime_now = [](std::string_view) { return std::string("26 Jul 2024"); };
  int num_parsed = 0, num_rendered = 0, num_cases = 0;
  for (int round = 0; round < 60; ++round) {
    for (const std::string& source : templates) {
      std::string mutated = round == 0 ? source : Mutate(source, rng);
      ++num_cases;
      auto t = ChatTemplate::Parse(mutated, options);
      if (!t.ok()) {
        EXPECT_FALSE(t.status().message().empty());
        continue;
      }
      ++num_parsed;
      auto out = t->Render(Context(round));
      if (out.ok()) ++num_rendered;
    }
  }
  std::cout << num_cases << " cases: " << num_parsed << " parsed, " << num_rendered
            << " rendered\n";
  EXPECT_GT(num_parsed, 0);
}

}  // namespace
}  // namespace kiln
