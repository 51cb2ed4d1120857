// Entry point: runs the command line and maps typed errors to exit codes (the only place that does).
#include <cstdio>
#include <exception>

#include "batchsweep/errors.hpp"
#include "cli/app.hpp"

int main(int argc, char** argv) {
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
