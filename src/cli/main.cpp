// Entry point: runs the command line and maps typed errors to exit codes (the only place that does).
#include <csignal>
#include <cstdio>
#include <exception>

#include "batchsweep/errors.hpp"
#include "cli/app.hpp"

int main(int argc, char** argv) {
  // A closed pipe (`--json >(head -c 1)`, `| head`) is a write error naming the export, not a silent death.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    const int code = bsw::cli::run_app(argc, argv);
    // The table (or an export) on stdout that never reached it (a full disk, a reader that left): a job
    // reading exit 0 would take a cut-off output for the whole. A failure's own code stands.
    if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && code == bsw::kExitOk) {
      std::fprintf(stderr, "batchsweep: error: cannot write to stdout\n");
      return bsw::kExitRuntime;
    }
    return code;
  } catch (const bsw::Error& e) {
    std::fprintf(stderr, "batchsweep: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batchsweep: internal error: %s\n", e.what());
    return bsw::kExitRuntime;
  }
}
