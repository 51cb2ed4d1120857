// Best-effort whole-file reads for the readers that learn from a file when it is there (/proc, cgroup files,
// an earlier export they may replace) and go on without it otherwise.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "batchsweep/files.hpp"

namespace bsw {

std::string read_file_or_empty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return {};
  return std::move(text).str();
}

int open_input(const std::string& path, std::string& why) {
  // Non-blocking, so a FIFO without a writer opens at once (a blocking open would wait for one forever).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot be opened: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    // Data, or a writer that came and went (POLLHUP), within the wait; a FIFO no writer has opened reports
    // neither.
    pollfd waiting{fd, POLLIN, 0};
    int ready = 0;
    do {
      ready = ::poll(&waiting, 1, kFifoWaitS * 1000);
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) {
      ::close(fd);
      why = "is a named pipe (FIFO) that nothing wrote to in " + std::to_string(kFifoWaitS) +
            " s: write the file to it, or give the file itself";
      return -1;
    }
  }
  // Reads block from here on, as a file's would: a writer part-way through is waited for.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::optional<std::string> read_input(const std::string& path, std::size_t max_bytes, std::string_view what,
                                      std::string& why) {
  const int fd = open_input(path, why);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  char buffer[1 << 16];
  for (ssize_t n = 0; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::string("cannot be read: ") + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    bytes.append(buffer, static_cast<std::size_t>(n));
    if (bytes.size() > max_bytes) {
      why = "is larger than " + std::to_string(max_bytes >> 20) + " MiB: " + std::string(what) +
            " is a small JSON document";
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  return bytes;
}

}  // namespace bsw
