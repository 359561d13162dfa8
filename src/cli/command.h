// Shared helpers for the kiln subcommands (src/cli/*_command.cc).
//
// Each subcommand registers itself on the CLI11 app with an Add<Name>Command(app) function. A
// command that fails prints `kiln <cmd>: error: <message>` to stderr and throws
// CLI::RuntimeError with a non-zero exit code, which main() turns into the process exit status.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::cli {

// Prints the error for `command` and throws CLI::RuntimeError(exit_code).
[[noreturn]] void Fail(std::string_view command, const Status& status, int exit_code = 1);

// Formats a byte count as "1.23 GiB" / "456.0 MiB" / "789 B".
std::string FormatBytes(int64_t bytes);
// Formats a count with thousands separators: 8030261248 -> "8,030,261,248".
std::string FormatCount(int64_t n);

// A progress bar for byte counts on stderr: `label [#####.....] 1.23 / 8.03 GB  45%`, redrawn
// in place on a terminal; elsewhere (logs) a line at every 25 %. Call it with (done, total).
std::function<void(int64_t done, int64_t total)> ByteProgressBar(std::string label);

void AddBuildCommand(CLI::App& app);         // build_command.cc
void AddInspectCommand(CLI::App& app);       // inspect_command.cc
void AddSynthCommand(CLI::App& app);         // synth_command.cc
void AddTokenizeCommand(CLI::App& app);      // tokenize_command.cc
void AddDetokenizeCommand(CLI::App& app);    // tokenize_command.cc
void AddChatTemplateCommand(CLI::App& app);  // tokenize_command.cc
void AddGenerateCommand(CLI::App& app);      // generate_command.cc
void AddServeCommand(CLI::App& app);         // serve_command.cc
void AddBenchCommand(CLI::App& app);         // bench_command.cc
void AddEvalCommand(CLI::App& app);          // eval_command.cc

}  // namespace kiln::cli
