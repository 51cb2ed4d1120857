// The command line: CLI11 definitions of every subcommand and their validation into Settings structs.
#pragma once

#include <string_view>

namespace bsw::cli {

// Parses argv, runs the chosen subcommand, returns the process exit code. Throws bsw::Error subclasses.
[[nodiscard]] int run_app(int argc, char** argv);

// Flushes stdout: 0 where everything written to it reached it, else the errno of the first failure seen
// (-1 where only the stream's error flag says so). A failure is remembered, so a later call (main's, after a
// command said its exit code) reports the same error and its cause.
[[nodiscard]] int flush_stdout();
// Writes `text` to stdout past stdio (after flushing what stdio holds), through write_fully: after a stop
// signal a reader that takes nothing for kFifoWaitS ends the write. False on failure, which flush_stdout
// then reports (ETIMEDOUT for that stop).
bool write_stdout(std::string_view text);

}  // namespace bsw::cli
