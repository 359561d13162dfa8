// kiln: the command-line entry point. Each subcommand lives in its own *_command.cc.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/command.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: LLM inference engine and OpenAI-compatible server"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "debug, info, warning or error (or KILN_LOG_LEVEL)");
  app.parse_complete_callback([&] {
    kiln::Status s = kiln::InitLoggingFromEnv();
    if (s.ok() && !log_level.empty()) {
      auto level = kiln::ParseLogLevel(log_level);
      if (level.ok()) kiln::SetLogLevel(*level);
      s = level.status().WithContext("--log-level");
    }
    if (!s.ok()) kiln::cli::Fail("", s);
  });
  kiln::cli::AddBuildCommand(app);
  kiln::cli::AddInspectCommand(app);
  kiln::cli::AddSynthCommand(app);
  kiln::cli::AddTokenizeCommand(app);
  kiln::cli::AddDetokenizeCommand(app);
  kiln::cli::AddChatTemplateCommand(app);
  kiln::cli::AddGenerateCommand(app);
  kiln::cli::AddServeCommand(app);
  kiln::cli::AddBenchCommand(app);
  kiln::cli::AddEvalCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
