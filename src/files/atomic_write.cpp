// Atomic file replacement for reports and exports: a crash or Ctrl-C between points leaves either the
// previous file or the new one, never half of one. Write `<path>.tmp.<host>.<pid>` in the same directory,
// fsync, rename over `path` (and remove what writers killed before their rename left there). Pipes, FIFOs and
// devices are written in place instead (a rename would replace them).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"

namespace bsw {

namespace {

// Closes a file descriptor on every path out of a scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  // Closes now, reporting the error close() found (on some file systems, the write error).
  [[nodiscard]] int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

std::string describe_open_failure(const std::string& path, int error) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (error == ENOENT && !parent.empty() && !fs::is_directory(parent, ec)) {
    return path + ": cannot write: directory " + parent.string() + " does not exist";
  }
  return path + ": cannot write: " + std::strerror(error);
}

// When the stop signal came, on the monotonic clock in nanoseconds; 0 until then.
std::atomic<int64_t> g_stop_signalled_ns = 0;
static_assert(std::atomic<int64_t>::is_always_lock_free);

using Clock = std::chrono::steady_clock;

// When a writer first waited for a reader after the stop signal (the monotonic clock in nanoseconds; 0 until
// then): the start of the kFifoWaitS every pipe export then shares.
std::atomic<int64_t> g_stop_window_ns = 0;

// After a stop signal, every pipe export shares the kFifoWaitS its readers get from the first wait for one:
// four stalled FIFOs end the run about kFifoWaitS after it, not four times that. The window opens at that
// first wait, not at the signal, since the run may finish a long step first. A write (or a FIFO's open) that
// only begins once the window is spent still gets kStopGraceMs for a reader that is there and reading.
// Without a signal: nullopt (no limit). Called only where a writer is about to wait.
constexpr int kStopGraceMs = 1000;
std::optional<Clock::time_point> stop_deadline(Clock::time_point began) {
  if (g_stop_signalled_ns.load() == 0) return std::nullopt;
  int64_t window = g_stop_window_ns.load();
  if (window == 0) {
    const int64_t now = std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
    window = g_stop_window_ns.compare_exchange_strong(window, now) ? now : window;
  }
  const Clock::time_point opened{
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(window))};
  return std::max(opened + std::chrono::seconds(kFifoWaitS), began + std::chrono::milliseconds(kStopGraceMs));
}

// The host name the temporary names carry: at most 64 characters, "localhost" where there is none.
std::string host_name() {
  char host[256] = {};
  std::string name = ::gethostname(host, sizeof(host) - 1) == 0 ? host : "";
  if (name.empty()) name = "localhost";
  name.resize(std::min<size_t>(name.size(), 64));
  return name;
}

// Temporary files beside `path` that a writer on this host left when it was killed (kill -9, the OOM
// killer: no handler runs) would stay for ever, and a CI job that uploads the directory would ship them.
// Removed after a write succeeded: only `<path>.tmp.<this host>.<pid>` whose pid
// is no live process here and which was last written over a minute ago. A live writer's temporary lives from
// its open to its rename, a moment, so the age also spares one whose pid this process cannot see (a container
// sharing the host name but not the process table). Another host's, on a shared file system, and the
// host-less form of very long export names are left alone.
void remove_stale_temps(const std::string& path) {
  // Looked for at the first write, then at most once a minute (a sweep rewrites its exports after every
  // point), so a temporary too fresh at the start is removed later in the run.
  static std::mutex mutex;
  static std::map<std::string, std::chrono::steady_clock::time_point> scanned;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto steady_now = std::chrono::steady_clock::now();
    const auto [at, first] = scanned.try_emplace(path, steady_now);
    if (!first && steady_now - at->second < std::chrono::minutes(1)) return;
    at->second = steady_now;
  }
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string on_host = target.filename().string() + ".tmp." + host_name() + ".";
  const auto dead_pid = [](std::string_view digits) {
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    const pid_t pid = static_cast<pid_t>(std::stol(std::string(digits)));
    return pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
  };
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(on_host) || !dead_pid(std::string_view(name).substr(on_host.size()))) continue;
    std::error_code type_error, time_error;
    if (!it->is_regular_file(type_error) || type_error) continue;
    const auto written = fs::last_write_time(it->path(), time_error);
    if (time_error || now - written < std::chrono::minutes(1)) continue;
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

}  // namespace

void stop_waiting_writers() noexcept {
  // clock_gettime is async-signal-safe; steady_clock reads the same CLOCK_MONOTONIC.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t expected = 0;  // the first signal's time stands
  g_stop_signalled_ns.compare_exchange_strong(
      expected, std::max<int64_t>(1, int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec));
}

// A regular file is written as it always was. Anything else (a pipe, a FIFO, a terminal, stdout) waits for
// room in poll(), which a stop signal always interrupts, and then writes no more than fits without blocking:
// all the room a non-blocking descriptor has, PIPE_BUF bytes on a blocking one (what POLLOUT promises a
// pipe). A blocked write() that has moved some bytes returns them when a signal comes, and the next one
// blocks again: that is why the wait is not in write(). Once a stop signal has come (before or during the
// write), a reader that takes nothing for kFifoWaitS from the later of the first wait after the signal and
// its last read ends the write (ETIMEDOUT); a write begun after that time gets kStopGraceMs (stop_deadline).
bool writers_stopped() noexcept {
  return g_stop_signalled_ns.load() != 0;
}

bool write_fully(int fd, std::string_view content) {
  const Clock::time_point began = Clock::now();
  const char* data = content.data();
  size_t left = content.size();
  struct stat target {};
  if (::fstat(fd, &target) == 0 && S_ISREG(target.st_mode)) {
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data += n;
      left -= static_cast<size_t>(n);
    }
    return true;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  const size_t most = flags >= 0 && (flags & O_NONBLOCK) != 0 ? left : size_t{PIPE_BUF};
  // When the reader last took something: room that came while this write waited for it. (What fills the
  // pipe's buffer without a wait says nothing of the reader.)
  std::optional<Clock::time_point> last_read;
  bool waited = false;
  while (left > 0) {
    pollfd room{fd, POLLOUT, 0};
    int ready = ::poll(&room, 1, 0);
    if (ready == 0) {
      // Before a stop signal, a second at a time: a signal that comes between this check and the poll
      // interrupts nothing, and is seen at the next.
      int timeout_ms = 1000;
      if (const std::optional<Clock::time_point> stop = stop_deadline(began)) {
        const Clock::time_point until =
            last_read ? std::max(*stop, *last_read + std::chrono::seconds(kFifoWaitS)) : *stop;
        const auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
        if (left_ms <= 0) {
          errno = ETIMEDOUT;
          return false;
        }
        timeout_ms = static_cast<int>(left_ms);
      }
      ready = ::poll(&room, 1, timeout_ms);
      waited = true;
    }
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;  // a signal (the stop is read above) or the time left (measured above)
    // Room, or POLLERR/POLLHUP, which the write reports.
    const ssize_t n = ::write(fd, data, std::min(left, most));
    if (n > 0) {
      data += n;
      left -= static_cast<size_t>(n);
      if (waited) last_read = Clock::now();
      waited = false;
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return false;
    }
  }
  return true;
}

std::string temp_path_beside(const std::string& path) {
  const std::string name = host_name();
  const std::string pid = std::to_string(::getpid());
  // The temporary name must stay within NAME_MAX (255) wherever the export's own name does: a long export
  // name gives up the host name first.
  const size_t base = std::filesystem::path(path).filename().string().size();
  if (base + 6 + name.size() + pid.size() <= 255) return path + ".tmp." + name + "." + pid;
  if (base + 5 + pid.size() <= 255) return path + ".tmp." + pid;
  // A name near NAME_MAX itself (legal, 250 bytes): the temporary keeps the start of it, cut at a UTF-8
  // character's start, beside it.
  const std::string suffix = ".tmp." + pid;
  size_t keep = 255 - suffix.size();
  const size_t dir = path.size() - base;
  while (keep > 0 && (static_cast<unsigned char>(path[dir + keep]) & 0xC0) == 0x80) --keep;
  return path.substr(0, dir + keep) + suffix;
}

bool is_stream_target(const std::string& path) {
  if (path.empty() || path == "-") return false;
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);  // follows symlinks
  return !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
         !std::filesystem::is_directory(st);
}

void write_file_atomic(const std::string& path, const std::string& content) {
  if (path == "-") {
    std::cout << content << std::flush;
    if (!std::cout) throw InputError("-: cannot write to stdout");
    return;
  }
  if (path.empty()) throw InputError("cannot write a file with an empty name");
  if (is_stream_target(path)) {
    // Non-blocking open: a FIFO nobody reads fails (ENXIO) instead of hanging after the measurements. A
    // reader may be a moment late (`batchsweep run --json f & consumer < f`): tried again for up to
    // kFifoWaitS, as an input FIFO waits for its writer. The descriptor stays non-blocking (see write_fully).
    // After a stop signal, the wait ends with the time readers share (stop_deadline).
    const Clock::time_point began = Clock::now();
    int opened = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat target {};
    const bool fifo = ::stat(path.c_str(), &target) == 0 && S_ISFIFO(target.st_mode);  // not a socket's ENXIO
    while (fifo && opened < 0 && errno == ENXIO) {
      const std::optional<Clock::time_point> stop = stop_deadline(began);
      const Clock::time_point until =
          std::min(began + std::chrono::seconds(kFifoWaitS), stop.value_or(Clock::time_point::max()));
      if (Clock::now() >= until) break;
      ::usleep(50'000);
      opened = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    }
    FileDescriptor fd(opened);
    if (fd.get() < 0) {
      if (errno == ENXIO && fifo)
        throw InputError(
            path + ": cannot write: " +
            (writers_stopped()
                 ? "stopped; no process opened this pipe to read it in the " + std::to_string(kFifoWaitS) +
                       " s a stopped run gives its exports"
                 : "no process opened this pipe to read it within " + std::to_string(kFifoWaitS) + " s"));
      throw InputError(path + ": cannot write: " + std::strerror(errno));
    }
    if (!write_fully(fd.get(), content) || fd.close() != 0) {
      if (errno == ETIMEDOUT)
        throw InputError(path + ": cannot write: stopped; the reader took nothing in the " +
                         std::to_string(kFifoWaitS) + " s a stopped run gives its exports");
      throw InputError(path + ": cannot write: " + std::strerror(errno));
    }
    return;
  }
  const std::string temp = temp_path_beside(path);
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw InputError(describe_open_failure(path, errno));

  auto fail = [&](const char* what, int error) {
    ::unlink(temp.c_str());
    throw InputError(path + ": " + what + ": " + std::strerror(error));
  };
  // A file being replaced keeps its permissions (a report made read-only, or group-writable, stays so);
  // a new one gets 0644 less the umask.
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && ::fchmod(fd.get(), existing.st_mode & 0777) != 0)
    fail("cannot keep the file's permissions", errno);
  if (!write_fully(fd.get(), content)) fail("cannot write", errno);
  if (::fsync(fd.get()) != 0) fail("cannot flush to disk", errno);
  if (fd.close() != 0) fail("cannot write", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("cannot replace", errno);

  // Make the rename itself durable; a directory that cannot be opened or synced is not an error for the
  // report.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) (void)::fsync(dir_fd.get());
  remove_stale_temps(path);
}

}  // namespace bsw
