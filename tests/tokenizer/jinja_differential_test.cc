// Random expressions and statement nests (jinja_differential.py) rendered by kiln and by Python
// jinja2 in HF's configuration must agree: same bytes, or both fail. The CTest fixture
// `jinja_differential_setup` writes the cases; their path comes in KILN_JINJA_DIFFERENTIAL.
// A few known gaps (docs/chat_templates.md) keep the bar just under 100 %.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

TEST(JinjaDifferential, AgreesWithJinja2) {
  const char* path = std::getenv("KILN_JINJA_DIFFERENTIAL");
  if (path == nullptr || !std::ifstream(path).good()) {
    GTEST_SKIP() << "no differential cases (KILN_JINJA_DIFFERENTIAL unset or missing)";
  }
  std::ifstream in(path);
  auto cases = nlohmann::ordered_json::parse(in);
  int num_cases = 0, num_agree = 0, num_shown = 0;
  for (const auto& c : cases) {
    ++num_cases;
    std::string source = c["src"];
    auto t = ChatTemplate::Parse(source);
    Result<std::string> got = t.ok() ? t->Render(c["ctx"]) : Result<std::string>(t.status());
    bool want_error = c.contains("error");
    if (want_error ? !got.ok() : (got.ok() && *got == c["expected"].get<std::string>())) {
      ++num_agree;
      continue;
    }
    if (++num_shown <= 20) {
      std::cout << "MISMATCH " << nlohmann::json(source).dump() << "\n  jinja2: "
                << (want_error ? "raises " + c["error"].get<std::string>()
                               : nlohmann::json(c["expected"]).dump())
                << "\n  kiln:   "
                << (got.ok() ? nlohmann::json(*got).dump() : got.status().ToString()) << "\n";
    }
  }
  double rate = num_cases ? 100.0 * num_agree / num_cases : 0;
  std::cout << "jinja differential agreement: " << num_agree << "/" << num_cases << " = " << rate
            << " %\n";
  EXPECT_GE(rate, 99.5);
}

}  // namespace
}  // namespace kiln
