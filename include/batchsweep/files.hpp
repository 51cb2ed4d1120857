// Files written whole or not at all: reports, exports and caches. Below every other library (it knows only
// errors.hpp), so a backend's cache and the report's exports share one way to replace a file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bsw {

// `<path>.tmp.<host>.<pid>`: the temporary file a replacement of `path` is written through. The host name
// keeps two machines that share a directory (NFS home) apart; the pid, two processes on one machine.
[[nodiscard]] std::string temp_path_beside(const std::string& path);
// True for an existing path that is neither a regular file nor a directory once symlinks are followed: a pipe
// (`--json >(jq .)`), a FIFO, a terminal, /dev/stdout, /dev/null. Such a target is written in place, once,
// at the end of a sweep: a rename would replace the pipe or device node itself.
[[nodiscard]] bool is_stream_target(const std::string& path);
// Writes temp_path_beside(path), fsyncs it and renames it over `path`, so readers never see a partial
// file; a stream target (above) is written in place; "-" writes to stdout. Throws InputError naming the path
// (and leaves an existing file untouched) on failure.
void write_file_atomic(const std::string& path, const std::string& content);
// Called from a stop signal's handler (async-signal-safe: clock_gettime and one lock-free store). From then
// on a write into a pipe whose reader takes nothing for kFifoWaitS fails instead of waiting for it for ever;
// the pipes written after the signal share those kFifoWaitS, from the first wait for a reader (a write begun
// once they are spent gets a second for a reader that is reading), so several stalled exports do not each
// wait their own.
void stop_waiting_writers() noexcept;
// Whether stop_waiting_writers was called.
[[nodiscard]] bool writers_stopped() noexcept;
// Writes all of `content` to the open descriptor `fd` (a file, a pipe, a terminal, stdout): false with errno
// set on failure, ETIMEDOUT where, after stop_waiting_writers, the reader took nothing for kFifoWaitS.
[[nodiscard]] bool write_fully(int fd, std::string_view content);
// Opens `path` to read, as open(2) with O_RDONLY | O_CLOEXEC, except that a named pipe (FIFO) nothing has
// opened to write does not block the process forever: it waits up to kFifoWaitS for a writer's data (or its
// end), then gives up. A pipe (`--model <(cat m.json)`) reads as a file. Returns the descriptor, or -1 with
// `why` saying what failed ("cannot be opened: Permission denied", "is a named pipe (FIFO) that nothing wrote
// to in 10 s").
inline constexpr int kFifoWaitS = 10;
[[nodiscard]] int open_input(const std::string& path, std::string& why);
// The whole of `path`, read through open_input, for an input the user named (--model, --script): nullopt
// with `why` where it cannot be opened or read, or is over `max_bytes` ("is larger than 1 MiB: <what> is a
// small JSON document").
[[nodiscard]] std::optional<std::string> read_input(const std::string& path, std::size_t max_bytes,
                                                    std::string_view what, std::string& why);

// The whole of a small file (a /proc or /sys file, an earlier export) as bytes, or "" where it cannot be
// opened or read: for readers where a missing file simply means "nothing to learn here", never for input
// the user named (those say why they failed).
[[nodiscard]] std::string read_file_or_empty(const std::string& path);

}  // namespace bsw
