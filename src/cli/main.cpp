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
    return bsw::cli::run_app(argc, argv);
  } catch (const bsw::Error& e) {
    std::fprintf(stderr, "batchsweep: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batchsweep: internal error: %s\n", e.what());
    return bsw::kExitRuntime;
  }
}
