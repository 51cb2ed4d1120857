// Entry point: runs the command line and maps typed errors to exit codes (the only place that does).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/json_depth.hpp"
#include "cli/app.hpp"

namespace {

// Set for the run again of blas_workers_check: "<pid>:<threads>:<why>", the process's own pid (execv keeps
// it), the thread count OpenBLAS started with and "starved" or "slow", so the note is said once, by that
// process, and a variable left in the environment (or set by hand) is not taken for it.
constexpr const char* kOneBlasThread = "BATCHSWEEP_BLAS_WORKERS_STARVED";

// Under a `ulimit -v` too tight for all of OpenBLAS's threads' work buffers (about 128 MiB each; its worker
// threads map theirs as it loads, before main, and a worker without room retries without end, so the process
// hangs at exit), runs this binary again with OPENBLAS_NUM_THREADS=1: no workers, and the CPU backend's own
// check then says whether the one buffer fits. Where the exec fails, says so and goes on as it is.
void escape_starved_blas_workers(char** argv) {
  if (const char* marker = std::getenv(kOneBlasThread)) {
    const std::string value = marker;
    unsetenv(kOneBlasThread);
    const std::string self = std::to_string(getpid()) + ":";
    if (value.starts_with(self)) {
      const std::string rest = value.substr(self.size());
      const size_t colon = rest.find(':');
      const std::string threads = rest.substr(0, colon);
      if (colon != std::string::npos && rest.substr(colon + 1) == "slow")
        std::fprintf(
            stderr,
            "batchsweep: note: under ulimit -v, OpenBLAS's %s threads had not mapped their work "
            "buffers after 5 s (a busy machine?), so batchsweep runs with OPENBLAS_NUM_THREADS=1 "
            "(CPU timings are single-threaded) rather than risk a worker that never gets its buffer\n",
            threads.c_str());
      else
        std::fprintf(
            stderr,
            "batchsweep: note: ulimit -v leaves too little address space for the work buffers of all "
            "%s of OpenBLAS's threads (about 128 MiB each), so batchsweep runs with "
            "OPENBLAS_NUM_THREADS=1 (CPU timings are single-threaded); raise ulimit -v to use them all\n",
            threads.c_str());
      return;
    }
  }
  const bsw::BlasWorkers workers = bsw::blas_workers_check();
  if (workers == bsw::BlasWorkers::fine) return;
  const char* before = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string user_threads = before != nullptr ? before : "";
  const std::string marker = std::to_string(getpid()) + ":" + std::to_string(bsw::blas_threads()) +
                             (workers == bsw::BlasWorkers::slow ? ":slow" : ":starved");
  setenv(kOneBlasThread, marker.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  execv("/proc/self/exe", argv);
  const int error = errno;
  unsetenv(kOneBlasThread);
  if (before != nullptr)
    setenv("OPENBLAS_NUM_THREADS", user_threads.c_str(), 1);
  else
    unsetenv("OPENBLAS_NUM_THREADS");
  std::fprintf(
      stderr,
      "batchsweep: warning: ulimit -v leaves too little address space for all of OpenBLAS's threads' "
      "work buffers, and running again single-threaded failed (%s): this process may hang at exit; "
      "run it with OPENBLAS_NUM_THREADS=1 or raise ulimit -v\n",
      std::strerror(error));
}

// flush_stdout()'s error, where a write that failed before the last flush (CLI11 flushes its help, a long
// text fills stdio's buffer) left only the stream's error flag (-1): EPIPE where stdout is a pipe whose
// reader left (poll says so), so run's long help into `head` ends as quietly as a short one, while on a
// full disk it is exit 1.
int stdout_error() {
  const int error = bsw::cli::flush_stdout();
  if (error != -1) return error;
  pollfd out{STDOUT_FILENO, POLLOUT, 0};
  // (POLLERR: a pipe without a reader; POLLHUP: a socket whose peer closed.)
  return ::poll(&out, 1, 0) == 1 && (out.revents & (POLLERR | POLLHUP)) != 0 ? EPIPE : error;
}

}  // namespace

int main(int argc, char** argv) {
  escape_starved_blas_workers(argv);
  // A closed pipe (`--json >(head -c 1)`, `| head`) is a write error naming the export, not a silent death;
  // so is a file past `ulimit -f` (EFBIG, not SIGXFSZ's kill that leaves a temporary file behind).
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    const int code = bsw::cli::run_app(argc, argv);
    // The table (or an export) on stdout that never reached it (a full disk, a reader that left): a job
    // reading exit 0, 3 or 4 would take a cut-off output for the whole, as `--json -` already says. A
    // failure's own code (1, 2, an interrupt) stands.
    // Help and the version read into a pager or `head` that stopped reading: nothing a job reads was lost,
    // and a broken-pipe error would be noise (`batchsweep help run | head`). A full disk is still exit 1.
    const auto help_text = [&] {
      if (argc >= 2 && (std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "version") == 0 ||
                        std::strcmp(argv[1], "--version") == 0))
        return true;
      for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
      return false;
    };
    if (const int error = stdout_error(); error == EPIPE && code == bsw::kExitOk && help_text())
      return code;
    else if (error != 0) {
      // The cause where a flush saw it; an earlier failed write left only the stream's error flag.
      if (error == ETIMEDOUT && bsw::writers_stopped())  // write_stdout after a stop signal
        std::fprintf(
            stderr,
            "batchsweep: error: cannot write to stdout: stopped; the reader took nothing in the %d s a "
            "stopped run gives its exports\n",
            bsw::kFifoWaitS);
      else
        std::fprintf(stderr, "batchsweep: error: cannot write to stdout%s%s\n", error > 0 ? ": " : "",
                     error > 0 ? std::strerror(error) : "");
      if (code == bsw::kExitOk || code == bsw::kExitRegression || code == bsw::kExitNothingRan)
        return bsw::kExitRuntime;
    }
    return code;
  } catch (const bsw::Error& e) {
    // A message quotes paths and values as given: a file named with ESC [ 31m must not color the terminal.
    std::fprintf(stderr, "batchsweep: error: %s\n", bsw::printable_text(e.what()).c_str());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "batchsweep: error: out of memory: what this command builds (its plans, its report or its "
                 "output) needs more memory than the process may have (ulimit -v, a cgroup limit, or the "
                 "machine); give a shorter --batch list or a smaller model\n");
    return bsw::kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batchsweep: internal error: %s\n", e.what());
    return bsw::kExitRuntime;
  }
}
