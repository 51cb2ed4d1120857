// The command line: CLI11 definitions of every subcommand and their validation into Settings structs.
#pragma once

namespace bsw::cli {

// Parses argv, runs the chosen subcommand, returns the process exit code. Throws bsw::Error subclasses.
[[nodiscard]] int run_app(int argc, char** argv);

}  // namespace bsw::cli
