// Entry point: runs the command line and maps typed errors to exit codes (the only place that does).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"
#include "cli/app.hpp"

namespace {

// Set on the run again of blas_workers_starved (its value is the thread count OpenBLAS started with), so the
// note is said once and there is no second run again.
constexpr const char* kOneBlasThread = "BATCHSWEEP_BLAS_WORKERS_STARVED";

// Under a `ulimit -v` too tight for OpenBLAS's worker threads, which it starts before main and which would
// retry mapping their buffers without end (the process hangs at exit), runs this binary again with
// OPENBLAS_NUM_THREADS=1: no workers, and the CPU backend's own check then says whether one thread's buffer
// fits. Where the exec fails, goes on as it is.
void escape_starved_blas_workers(char** argv) {
  if (const char* marker = std::getenv(kOneBlasThread)) {
    std::fprintf(
        stderr,
        "batchsweep: note: ulimit -v leaves too little address space for OpenBLAS's %s threads' work "
        "buffers (about 128 MiB each), so batchsweep runs with OPENBLAS_NUM_THREADS=1 (CPU timings "
        "are single-threaded); raise ulimit -v to use them all\n",
        marker);
    unsetenv(kOneBlasThread);
    return;
  }
  if (!bsw::blas_workers_starved()) return;
  const std::string threads = std::to_string(bsw::blas_threads());
  setenv(kOneBlasThread, threads.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  execv("/proc/self/exe", argv);
  unsetenv(kOneBlasThread);
}

}  // namespace

int main(int argc, char** argv) {
  escape_starved_blas_workers(argv);
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
