// TEMPORARY main for the synth branch: the integrator owns src/cli/main.cc and merges
// AddSynthCommand into the real one.
#include <CLI/CLI.hpp>

#include "cli/synth_command.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: LLM inference engine"};
  app.require_subcommand(1);
  kiln::AddSynthCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
