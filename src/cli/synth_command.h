// `kiln synth`: writes a synthetic HF checkpoint (random weights in a published or custom
// Llama-family shape); see docs/synth.md and builder/synth.h.
//
//   kiln synth (--preset NAME | --shape FILE.json) --out DIR [--num-layers N] [--dtype bf16|f16]
//              [--seed S] [--std X] [--max-shard-size 5GB] [--threads N] [--force] [--no-weights]
#pragma once

#include <CLI/CLI.hpp>

namespace kiln {

// Registers the `synth` subcommand on `app`. Its callback runs the whole write when the
// subcommand is parsed. On success it prints a one-line summary to stdout (and a progress line
// to stderr when stderr is a terminal). On failure it prints "kiln synth: error: <status>" to
// stderr and throws CLI::RuntimeError(1), which CLI11_PARSE / App::exit turn into exit code 1
// without printing anything more; a main that calls app.parse() directly must catch
// CLI::ParseError and return app.exit(e).
void AddSynthCommand(CLI::App& app);

}  // namespace kiln
