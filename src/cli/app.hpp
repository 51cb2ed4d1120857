// The command line: CLI11 definitions of every subcommand and their validation into Settings structs.
#pragma once

namespace bsw::cli {

// Parses argv, runs the chosen subcommand, returns the process exit code. Throws bsw::Error subclasses.
[[nodiscard]] int run_app(int argc, char** argv);

// Flushes stdout: 0 where everything written to it reached it, else the errno of the first failure seen
// (-1 where only the stream's error flag says so). A failure is remembered, so a later call (main's, after a
// command said its exit code) reports the same error and its cause.
[[nodiscard]] int flush_stdout();

}  // namespace bsw::cli
