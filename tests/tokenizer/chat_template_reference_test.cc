// Renders every chat template of ../shared/testdata/chat-templates over the conversations of
// render_templates.py and compares with Python jinja2's output byte for byte (a template that
// raises in jinja2 must fail here too). Reads the JSON that the CTest fixture
// `chat_template_reference_setup` writes; its path comes in KILN_CHAT_TEMPLATE_REFERENCE.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Index of the first differing byte, with a little context, for the failure report.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) + ": want …" +
         nlohmann::json(want.substr(from, 100)).dump() + "\n      got  …" +
         nlohmann::json(got.substr(from, 100)).dump();
}

TEST(ChatTemplateReference, MatchesJinja2) {
  const char* path = std::getenv("KILN_CHAT_TEMPLATE_REFERENCE");
  if (path == nullptr || !std::ifstream(path).good()) {
    GTEST_SKIP() << "no reference renders (KILN_CHAT_TEMPLATE_REFERENCE unset or missing): the "
                    "shared testdata or Python jinja2/transformers is absent";
  }
  auto reference = nlohmann::ordered_json::parse(ReadFile(path));
  ChatTemplateOptions options;
  options.strftime_now = [](std::string_view format) {
    std::tm t{};
    t.tm_year = 2024 - 1900;
    t.tm_mon = 6;
    t.tm_mday = 26;
    t.tm_hour = 12;
    t.tm_min = 34;
    t.tm_sec = 56;
    t.tm_wday = 5;
    t.tm_yday = 207;
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &t);
    return std::string(buf, n);
  };
  std::map<std::string, Result<ChatTemplate>> parsed;
  std::string templates_dir =
      std::string(std::getenv("KILN_TESTDATA") ? std::getenv("KILN_TESTDATA") : "") +
      "/chat-templates/";
  int num_cases = 0, num_passed = 0;
  std::map<std::string, int> failures_per_template;
  std::ostringstream report;
  for (const auto& c : reference["cases"]) {
    std::string name = c["template"];
    auto it = parsed.find(name);
    if (it == parsed.end()) {
      const std::string source_path = c.contains("template_path")
                                          ? c["template_path"].get<std::string>()
                                          : templates_dir + name + ".jinja";
      it = parsed.emplace(name, ChatTemplate::Parse(ReadFile(source_path), options)).first;
    }
    ++num_cases;
    std::string case_name = name + " / " + c["case"].get<std::string>();
    bool want_error = c.contains("error");
    Result<std::string> got = it->second.ok() ? it->second->Render(c["context"])
                                              : Result<std::string>(it->second.status());
    if (want_error) {
      if (!got.ok()) {
        ++num_passed;
      } else {
        report << "FAIL " << case_name << ": jinja2 raised (" << c["error"].get<std::string>()
               << ") but kiln rendered\n";
        ++failures_per_template[name];
      }
      continue;
    }
    std::string want = c["expected"];
    if (!got.ok()) {
      report << "FAIL " << case_name << ": " << got.status().ToString() << "\n";
      ++failures_per_template[name];
    } else if (*got != want) {
      report << "FAIL " << case_name << ": " << FirstDifference(want, *got) << "\n";
      ++failures_per_template[name];
    } else {
      ++num_passed;
    }
  }
  double rate = num_cases ? 100.0 * num_passed / num_cases : 0;
  std::cout << report.str();
  std::cout << "chat template pass rate: " << num_passed << "/" << num_cases << " = " << rate
            << " % (" << parsed.size() << " templates, " << failures_per_template.size()
            << " with failures)\n";
  EXPECT_GE(rate, 95.0) << "identical renders below 95 %";
  // The default model's template (present when KILN_DEFAULT_MODEL was set for the reference
  // script) must render exactly as jinja2 renders it, in every case.
  if (parsed.count("default-model")) {
    EXPECT_EQ(failures_per_template.count("default-model"), 0u)
        << "the default model's chat template differs from jinja2";
    std::cout << "default model's chat template: identical to jinja2 in every case\n";
  } else {
    std::cout << "default model's chat template: not checked (KILN_DEFAULT_MODEL unset)\n";
  }
}

}  // namespace
}  // namespace kiln
