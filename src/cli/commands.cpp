// The subcommands: glue from settings to the pipeline (model -> plan -> backend -> sweep -> analysis ->
// report) and to the printers. Signals, exports after every point, and what goes to stdout (data) vs stderr
// (progress, warnings).
#include "cli/commands.hpp"
#include "cli/app.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/backends.hpp"
#include "batchsweep/compare.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/gpu_specs.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_diff.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan_view.hpp"
#include "batchsweep/printers.hpp"
#include "batchsweep/report.hpp"
#include "batchsweep/sweep.hpp"
#include "batchsweep/telemetry.hpp"
#include "git_commit.hpp"
#include "model/suggest.hpp"
#include "report/format.hpp"
#include "report/json_pieces.hpp"
#include "report/view.hpp"

namespace bsw::cli {
namespace {

// The rows plan --buffers may list (batches x buffers): a few hundred megabytes of JSON at most.
constexpr uint64_t kMaxBufferRows = 200'000;

// settings.latency_percentile as the schema lists it: 99, not 99.0 (a reader decoding into an integer type
// refuses that), and 99.9.
// settings.request_rate: the number, or "max" for --request-rate max (JSON has no infinity).
nlohmann::json request_rate_setting(double rate) {
  return is_request_rate_max(rate) ? nlohmann::json("max") : nlohmann::json(rate);
}

// As the flag is given: "2000", or "max".
std::string request_rate_text(double rate) {
  return is_request_rate_max(rate) ? std::string("max") : fmt::format("{:g}", rate);
}

nlohmann::json percentile_setting(double pct) {
  return report_json::percentile_json<nlohmann::json>(pct);
}

std::atomic<int> g_signal{0};
// When the first signal came (CLOCK_MONOTONIC, ns). A second within kSameRequestNs is the same request: GNU
// timeout sends its signal to the command and to the command's process group, so `timeout -s INT 3600
// batchsweep run ...` delivers SIGINT twice at once, and that must not quit at once.
std::atomic<int64_t> g_first_signal_ns{0};
constexpr int64_t kSameRequestNs = 1'000'000'000;
// Whether a --json report file is on disk for --resume (written after a point, or the report being
// resumed into): a second signal before then says there is none.
std::atomic<bool> g_report_on_disk{false};
// Whether another export file (--csv, --markdown, --svg) has been rewritten after a point.
std::atomic<bool> g_other_exports_on_disk{false};
// Whether the sweep has ended and its final exports are being written: a second signal then may come
// before, during or after a file's write, and says so.
std::atomic<bool> g_final_writes{false};
// Whether stderr is a terminal, where the messages below start on a new line (after "^C" or a progress
// line); in a log they do not leave a blank one. Set before the handler is installed.
std::atomic<bool> g_stderr_tty{true};

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

extern "C" void on_signal(int sig) {
  const int64_t now = monotonic_ns();
  if (g_signal.load() != 0) {
    if (now - g_first_signal_ns.load() < kSameRequestNs) return;  // the first, delivered twice
    // Again, later: quit now, as the process would without a handler, saying what is left.
    static constexpr char kQuit[] =
        "\nbatchsweep: quitting now; the --json report file keeps the points finished so far (state "
        "in_progress: --resume it)\n";
    static constexpr char kQuitNothing[] =
        "\nbatchsweep: quitting now; no report file was written (no point had finished, or no --json file "
        "was given)\n";
    static constexpr char kQuitWriting[] =
        "\nbatchsweep: quitting now, while the final exports were being written: an export file is this "
        "run's whole or what was there before (files are replaced whole), while stdout or a pipe may be cut "
        "short\n";
    static constexpr char kQuitOthers[] =
        "\nbatchsweep: quitting now; the --csv, --markdown or --svg exports keep the points finished so far, "
        "but no --json report file was written to --resume\n";
    const bool kept = g_report_on_disk.load();
    const size_t skip = g_stderr_tty.load() ? 0 : 1;  // the leading newline
    const ssize_t said = g_final_writes.load()
                             ? ::write(STDERR_FILENO, kQuitWriting + skip, sizeof(kQuitWriting) - 1 - skip)
                         : kept ? ::write(STDERR_FILENO, kQuit + skip, sizeof(kQuit) - 1 - skip)
                         : g_other_exports_on_disk.load()
                             ? ::write(STDERR_FILENO, kQuitOthers + skip, sizeof(kQuitOthers) - 1 - skip)
                             : ::write(STDERR_FILENO, kQuitNothing + skip, sizeof(kQuitNothing) - 1 - skip);
    (void)said;
    ::signal(sig, SIG_DFL);
    ::raise(sig);  // delivered when this handler returns
    return;
  }
  g_first_signal_ns.store(now);
  g_signal.store(sig);
  stop_waiting_writers();
  // A long step (a large model on the CPU) is not cut: say at once that the signal was taken. write() is
  // async-signal-safe.
  static constexpr char kSaidInt[] =
      "\nbatchsweep: stopping after the current step; the finished points are kept (Ctrl-C again to quit "
      "now)\n";
  static constexpr char kSaidTerm[] =
      "\nbatchsweep: stopping after the current step; the finished points are kept (send SIGTERM again to "
      "quit now)\n";
  const size_t skip = g_stderr_tty.load() ? 0 : 1;  // the leading newline
  const ssize_t written = sig == SIGTERM
                              ? ::write(STDERR_FILENO, kSaidTerm + skip, sizeof(kSaidTerm) - 1 - skip)
                              : ::write(STDERR_FILENO, kSaidInt + skip, sizeof(kSaidInt) - 1 - skip);
  (void)written;
}

// SIGINT/SIGTERM set a flag the sweep checks between steps; a second signal (a second or more later) quits
// at once, as without a handler.
class SignalGuard {
 public:
  SignalGuard() {
    g_stderr_tty.store(::isatty(STDERR_FILENO) != 0);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    // Interrupted: the handler stays to the exit, so the copy of the signal GNU timeout sends the process
    // group (at once, but after a sweep that wraps up quickly) is taken as the same request, not a kill that
    // turns exit 130 into a death by SIGINT. A later signal still quits at once.
    if (g_signal.load() != 0) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// Writes one export to a path check_writable passed, or to stdout (-). Failing now (a full disk, a pipe
// nobody reads or a reader that left) is an I/O failure, exit 1, naming the flag.
void write_output(std::string_view flag, const std::string& path, const std::string& content) {
  if (path == "-") {
    // Past stdio, so that a reader that stopped reading does not hold the process after a stop signal
    // (write_fully); what stdio holds goes first.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw Error(fmt::format("{} -: cannot write to stdout: {}", flag,
                              errno != 0 ? std::strerror(errno) : "write error"));
    if (!write_fully(STDOUT_FILENO, content))
      throw Error(
          errno == ETIMEDOUT
              ? fmt::format("{} -: cannot write to stdout: stopped; the reader took nothing in the {} s "
                            "a stopped run gives its exports",
                            flag, kFifoWaitS)
              : fmt::format("{} -: cannot write to stdout: {}", flag, std::strerror(errno)));
    return;
  }
  try {
    write_file_atomic(path, content);
  } catch (const InputError& e) {
    throw Error(fmt::format("{}: {}", flag, e.what()));
  }
}

// Fails early (exit 2, before any measurement) when an export cannot be written: a missing directory, a
// directory in place of the file, or no permission.
void check_writable(const std::string& path, std::string_view flag) {
  if (path.empty() || path == "-") return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw InputError(fmt::format("{} {}: is a directory", flag, path));
  if (is_stream_target(path)) {  // a pipe, FIFO or device: written in place, once, at the end
    if (access(path.c_str(), W_OK) != 0)
      throw InputError(fmt::format("{} {}: not writable: {}", flag, path, std::strerror(errno)));
    // A device that cannot be opened here (/dev/tty without a controlling terminal) is found now, not after
    // the measurements. A FIFO is not opened: its reader may come later.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) throw InputError(fmt::format("{} {}: cannot open: {}", flag, path, std::strerror(errno)));
      ::close(fd);
    }
    return;
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw InputError(fs::exists(dir, ec)
                         ? fmt::format("{} {}: {} is a file, not a directory", flag, path, dir.string())
                         : fmt::format("{} {}: the directory {} does not exist", flag, path, dir.string()));
  if (access(dir.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} {}: the directory {} is not writable", flag, path, dir.string()));
  // The temporary file below is named to fit whatever the name's length: a name past the file system's
  // limit passed, and the sweep ran, to fail at the rename (exit 1).
  const std::string name = p.filename().string();
  if (const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
      name_max > 0 && name.size() > static_cast<std::size_t>(name_max))
    throw InputError(fmt::format("{} {}: the file name is {} bytes, over the {} this file system takes", flag,
                                 path, name.size(), name_max));
  // A symlink loop: the rename would have replaced the link with a file.
  struct stat link {};
  struct stat target {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode) && ::stat(path.c_str(), &target) != 0 &&
      errno == ELOOP)
    throw InputError(fmt::format("{} {}: {}", flag, path, std::strerror(ELOOP)));
  if (fs::exists(p, ec) && access(p.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} {}: the file is not writable", flag, path));
  // access() says yes to root everywhere: create (and remove) the temporary file the export will be written
  // through, so a read-only or special file system is refused now, not after the measurements.
  const std::string probe = temp_path_beside(path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    if (error != EEXIST)
      throw InputError(fmt::format("{} {}: cannot create a file in {}: {}", flag, path, dir.string(),
                                   std::strerror(error)));
    return;  // our own leftover: the write replaces it
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// Whether an existing path is the very file behind a file descriptor (/dev/stdout, /proc/self/fd/1, or the
// file stdout is redirected to).
bool same_file_as_fd(const std::string& path, int fd) {
  struct stat a {};
  struct stat b {};
  return ::stat(path.c_str(), &a) == 0 && ::fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

// Whether a path is the null device (by what it is, not its name): exports sent there are discarded, so
// several may go there, and it is not stdout even where stdout is redirected to it too.
bool is_null_device(const std::string& path) {
  struct stat a {};
  struct stat null {};
  return ::stat(path.c_str(), &a) == 0 && S_ISCHR(a.st_mode) && ::stat("/dev/null", &null) == 0 &&
         a.st_rdev == null.st_rdev;
}

// Whether two file descriptors write to the same file, pipe or device.
bool same_target(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// What each export path really names. Stdout by another name (/dev/stdout, the file stdout goes to) is "-":
// the report goes through stdout once and the table moves to stderr. A symlink to a file (or to no file
// yet) becomes that file, replaced (or created) atomically while the link stays. Stderr is refused: the
// progress shares it.
std::string resolve_export_path(const std::string& path, std::string_view flag) {
  namespace fs = std::filesystem;
  if (path.empty() || path == "-" || is_null_device(path)) return path;
  if (same_file_as_fd(path, STDOUT_FILENO)) return "-";
  if (same_file_as_fd(path, STDERR_FILENO))
    throw UsageError(fmt::format(
        "{} {}: that is stderr, where progress and warnings go ({})", flag, path,
        // Only the JSON exports take - (stdout); the others want a file.
        flag == "--json" ? fmt::format("use {} - for stdout", flag) : std::string("give it a file")));
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_regular_file(st)) {
    const fs::path target = fs::canonical(path, ec);
    if (!ec) return target.string();
  } else if (!fs::exists(st)) {
    // A dangling link: the export creates the file it names (following a chain of links, as open() would).
    fs::path link = path;
    for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(link, ec)); ++hops) {
      fs::path target = fs::read_symlink(link, ec);
      if (ec) return path;
      // Relative to the directory the link really sits in (its parent may be reached through links). The
      // link's own path is made absolute first: "link.json" has an empty parent, which fs::absolute rejects.
      if (target.is_relative()) {
        const fs::path dir = fs::absolute(link, ec).parent_path();
        if (ec) return path;
        target = fs::weakly_canonical(dir, ec) / target;
        if (ec) return path;
      }
      link = target;
    }
    return link.lexically_normal().string();
  }
  return path;
}

// Two exports to one file would leave only the last one written: refused, as is more than one on stdout.
// One export flag: its resolved path (symlinks followed), and the path as typed, for messages.
struct ExportPath {
  std::string_view flag;
  std::string path;
  std::string typed;
};

void check_distinct_exports(const std::vector<ExportPath>& exports) {
  namespace fs = std::filesystem;
  for (size_t i = 0; i < exports.size(); ++i) {
    const auto& [flag, path, typed] = exports[i];
    if (path.empty()) continue;
    for (size_t j = i + 1; j < exports.size(); ++j) {
      const auto& [other_flag, other, other_typed] = exports[j];
      if (other.empty()) continue;
      if (path == "-" || other == "-") {
        if (path == other)
          throw UsageError(
              fmt::format("{} - and {} -: only one export may go to stdout (-)", flag, other_flag));
        continue;
      }
      if (is_null_device(path) && is_null_device(other)) continue;  // both discarded
      std::error_code ec_a, ec_b;
      const fs::path a = fs::weakly_canonical(fs::absolute(path, ec_a), ec_a),
                     b = fs::weakly_canonical(fs::absolute(other, ec_b), ec_b);
      // Hard links of one file: one inode under two names (the exports' renames would split them).
      struct stat st_a {
      }, st_b{};
      const bool one_inode = ::stat(path.c_str(), &st_a) == 0 && ::stat(other.c_str(), &st_b) == 0 &&
                             S_ISREG(st_a.st_mode) && st_a.st_dev == st_b.st_dev &&
                             st_a.st_ino == st_b.st_ino;
      if (path == other || (!ec_a && !ec_b && a == b) || one_inode)
        throw UsageError(
            fmt::format("{} {} and {} {}: both name the same file, and the second would "
                        "overwrite the first; give each export its own file",
                        flag, typed, other_flag, other_typed));
    }
  }
}

// A file this command reads, which no export may overwrite: the model config, the --script, the reports
// compared. `json_may_replace` lets --json write the report it holds back into it (`analyze r.json --json
// r.json`, `--resume r.json --json r.json`): every point of it is kept.
struct InputFile {
  std::string_view what;  // "the --model file"
  std::string path;
  bool json_may_replace = false;
};

void check_inputs_spared(const std::vector<ExportPath>& exports, const std::vector<InputFile>& inputs) {
  namespace fs = std::filesystem;
  for (const ExportPath& x : exports) {
    if (x.path.empty() || x.path == "-") continue;
    for (const InputFile& in : inputs) {
      if (in.path.empty() || in.path == "-" || (in.json_may_replace && x.flag == "--json")) continue;
      std::error_code ec;
      if (fs::equivalent(x.path, in.path, ec) && !ec)
        throw UsageError(
            fmt::format("{} {}: that is {} ({}), which the export would overwrite; give the "
                        "export its own file",
                        x.flag, x.typed, in.what, in.path));
    }
  }
}

// The model config, when --model names a file it reads (a preset's name reads none, even where a file of
// that name exists: the preset wins).
std::vector<ModelOverride> model_overrides(const std::vector<std::string>& sets) {
  std::vector<ModelOverride> overrides;
  overrides.reserve(sets.size());
  for (const std::string& text : sets) overrides.push_back(parse_model_override(text));
  return overrides;
}

InputFile model_input(const std::string& model) {
  std::error_code ec;
  const bool file = preset_text(model).empty() && std::filesystem::is_regular_file(model, ec);
  return {"the --model file", file ? model : std::string()};
}

// Two inputs that are one stream (`--model /dev/stdin --script /dev/stdin`, a FIFO named twice): the first
// read takes it all, and the second would report the first's content as its own error ("unknown key 'curve'
// in a model config"). Refused up front, naming both flags. Regular files may be read twice.
struct InputStream {
  std::string_view flag;  // "--model"
  std::string path;       // empty: not a file (a preset's name), or not given
};

void check_streams_read_once(const std::vector<InputStream>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    struct stat a {};
    if (inputs[i].path.empty() || ::stat(inputs[i].path.c_str(), &a) != 0 || S_ISREG(a.st_mode) ||
        S_ISDIR(a.st_mode))
      continue;
    for (size_t j = i + 1; j < inputs.size(); ++j) {
      struct stat b {};
      if (inputs[j].path.empty() || ::stat(inputs[j].path.c_str(), &b) != 0 || a.st_dev != b.st_dev ||
          a.st_ino != b.st_ino || a.st_rdev != b.st_rdev)
        continue;
      throw UsageError(fmt::format(
          "{} {} and {} {}: both read one stream (a pipe or device), and it can be read only once; give "
          "one of them a file",
          inputs[i].flag, inputs[i].path, inputs[j].flag, inputs[j].path));
    }
  }
}

void check_exports(ExportSettings& e, const std::vector<InputFile>& inputs) {
  const ExportSettings given = e;  // as typed, for the messages
  e.json_path = resolve_export_path(e.json_path, "--json");
  e.csv_path = resolve_export_path(e.csv_path, "--csv");
  e.markdown_path = resolve_export_path(e.markdown_path, "--markdown");
  e.svg_path = resolve_export_path(e.svg_path, "--svg");
  check_writable(e.json_path, "--json");
  check_writable(e.csv_path, "--csv");
  check_writable(e.markdown_path, "--markdown");
  check_writable(e.svg_path, "--svg");
  struct Export {
    std::string_view flag;
    const std::string& path;
    const std::string& typed;
  };
  for (const Export& x : {Export{"--csv", e.csv_path, given.csv_path},
                          Export{"--markdown", e.markdown_path, given.markdown_path},
                          Export{"--svg", e.svg_path, given.svg_path}})
    if (x.path == "-")
      throw UsageError(
          fmt::format("{} {}: only --json goes to stdout (- or /dev/stdout), where the table goes otherwise; "
                      "give {} a file",
                      x.flag, x.typed, x.flag));
  const std::vector<ExportPath> all = {{"--json", e.json_path, given.json_path},
                                       {"--csv", e.csv_path, given.csv_path},
                                       {"--markdown", e.markdown_path, given.markdown_path},
                                       {"--svg", e.svg_path, given.svg_path}};
  check_distinct_exports(all);
  check_inputs_spared(all, inputs);
}

// Writes one export, naming its flag when the write fails (exit 1). Between points (final = false) a pipe or
// device is left alone: it gets the one complete report at the end.
void write_export(std::string_view flag, const std::string& path, const std::function<std::string()>& format,
                  bool final) {
  if (path.empty() || (!final && is_stream_target(path))) return;
  write_output(flag, path, format());
}

void print_warnings(const std::vector<std::string>& warnings) {
  const bool color = color_allowed(STDERR_FILENO);
  for (const std::string& w : warnings)
    std::fprintf(stderr, "%swarning:%s %s\n", color ? "\033[33m" : "", color ? "\033[0m" : "", w.c_str());
}

// The report's JSON; at the end, a warning where it is larger than analyze, compare and --resume read.
std::string checked_json(const Report& report, bool final) {
  std::string text = format_json(report);
  if (final && text.size() > kMaxReportBytes)
    std::fprintf(
        stderr,
        "batchsweep: warning: the report is %s, over the %s analyze, compare and --resume read: fewer "
        "batches, --rounds or --max-samples keep it readable\n",
        report_format::human_bytes(text.size()).c_str(), report_format::human_bytes(kMaxReportBytes).c_str());
  return text;
}

// Writes every export; one that fails does not keep the others from being written (so those that can be
// stay in step). Afterwards, one Error naming every export that failed (`failed_flags` gets their flags).
void write_exports(const Report& report, const ExportSettings& e, bool final,
                   std::set<std::string>* failed_flags = nullptr) {
  std::vector<std::string> failures;
  const auto attempt = [&](std::string_view flag, const std::string& path,
                           const std::function<std::string()>& format) {
    try {
      write_export(flag, path, format, final);
    } catch (const Error& error) {
      failures.emplace_back(error.what());
      if (failed_flags != nullptr) failed_flags->insert(std::string(flag));
    }
  };
  if (e.json_path != "-") attempt("--json", e.json_path, [&] { return checked_json(report, final); });
  attempt("--csv", e.csv_path, [&] { return format_csv(report); });
  attempt("--markdown", e.markdown_path, [&] { return format_markdown(report); });
  attempt("--svg", e.svg_path, [&] { return format_svg(report); });
  if (failures.empty()) return;
  std::string message = failures.front();
  for (size_t i = 1; i < failures.size(); ++i) message += "; and " + failures[i];
  throw Error(message);
}

// The devices --config-for writes for: --world-size where given, else the run's (settings.world_size),
// else 1.
int64_t config_world_size(const Report& report, const ExportSettings& e) {
  return e.world_size_given ? e.world_size : report_view::world_size_setting(report).value_or(1);
}

// Data on stdout: the JSON when --json -, else the console table; the table then goes to stderr. An export
// that cannot be written still lets the table be printed; its error follows (exit 1).
void print_final(const Report& report, const ExportSettings& e) {
  std::exception_ptr export_error;
  try {
    write_exports(report, e, true);
  } catch (const Error&) {
    export_error = std::current_exception();
  }
  if (e.json_path == "-") {
    try {
      write_output("--json", "-", checked_json(report, true));
    } catch (const Error&) {
      if (!export_error) export_error = std::current_exception();
    }
    const std::string table = format_console(report, {color_allowed(STDERR_FILENO)});
    std::fwrite(table.data(), 1, table.size(), stderr);
  }
  // Beside the table: on stdout, or on stderr where stdout carries the JSON.
  std::string snippet;
  if (const std::optional<ConfigTarget> target = parse_config_target(e.config_for))
    snippet = "\n" + format_config_snippet(report, *target, config_world_size(report, e));
  if (e.json_path == "-") {
    std::fwrite(snippet.data(), 1, snippet.size(), stderr);
  } else {
    // Past stdio, as --json - is: a reader that stopped reading does not hold the run after a stop signal.
    // A failure is stdout's: main says it, and makes the exit 1 where the run's own would be 0, 3 or 4 (an
    // interrupted run's 130 or 143 stands: its report is whole, where --json -'s failure loses it).
    (void)write_stdout(format_console(report, {color_allowed(STDOUT_FILENO)}) + snippet);
  }
  if (export_error) {
    std::fflush(stdout);
    std::rethrow_exception(export_error);
  }
}

// BATCHSWEEP_SERVING_SEED=N (a whole number): the serving simulation's seeds move, for a check of how far its
// answers move with them; said on stderr where a rate is simulated, since a report does not keep it.
uint64_t serving_seed_from_environment(bool simulating) {
  const char* text = std::getenv("BATCHSWEEP_SERVING_SEED");
  if (!simulating || text == nullptr || *text == '\0') return 0;  // read only where a rate is simulated
  char* end = nullptr;
  errno = 0;
  const unsigned long long seed = std::strtoull(text, &end, 10);
  if (std::string_view(text).find_first_not_of("0123456789") != std::string_view::npos || *end != '\0' ||
      errno != 0)
    throw UsageError(fmt::format("BATCHSWEEP_SERVING_SEED: '{}' is not a whole number", text));
  // Said once, where a command (compare) simulates several reports.
  static bool said = false;
  if (seed != 0 && !said) {
    said = true;
    fmt::print(
        stderr,
        "note: BATCHSWEEP_SERVING_SEED={}: the serving simulation's seeds are moved, so its figures are "
        "not the ones a rerun without it gives (the report does not keep it)\n",
        seed);
  }
  return seed;
}

AnalysisOptions analysis_options(const AnalysisFlags& a) {
  AnalysisOptions o;
  o.knee_sensitivity = a.knee_sensitivity;
  o.saturation_pct = a.saturation_pct;
  o.latency_slo_ms = a.latency_slo_ms;
  o.latency_percentile = a.latency_percentile;
  o.price_per_hour = a.price_per_hour;
  o.request_rate = a.request_rate;
  o.max_queue_delay_ms = a.max_queue_delay_ms.value_or(0.0);
  o.serving_seed = serving_seed_from_environment(o.request_rate.has_value());
  validate(o);
  return o;
}

std::string now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json settings_json(const RunSettings& s, const ModelSpec& model, std::string_view backend_kind) {
  const SweepSettings& w = s.sweep;
  nlohmann::json j = {
      {"model", to_json(model)},
      {"model_source", model.source},
      {"backend", backend_kind},
      {"device", s.device ? nlohmann::json(*s.device) : nlohmann::json(nullptr)},
      {"mode", to_string(w.mode)},
      {"precision", to_string(w.precision)},
      {"accumulation", w.accumulation},
      {"checkpointing", w.checkpointing},
      {"batch", w.effective_batch ? std::string() : w.batches.text},
      {"effective_batch", w.effective_batch ? nlohmann::json(*w.effective_batch) : nlohmann::json(nullptr)},
      {"memory_limit_bytes",
       w.memory_limit_bytes ? nlohmann::json(*w.memory_limit_bytes) : nlohmann::json(nullptr)},
      {"memory_warn_fraction", w.memory_warn_fraction},
      {"stopping",
       {{"warmup_steps", w.stopping.warmup_steps},
        {"warmup_time_s",
         warmup_time_s(w.stopping, backend_kind == "cuda" ? BackendKind::cuda : BackendKind::cpu)},
        {"min_samples", w.stopping.min_samples},
        {"min_time_s", w.stopping.min_time_s},
        {"max_noise_pct", w.stopping.max_noise_pct},
        {"timeout_s", w.stopping.timeout_s},
        {"max_samples", w.stopping.max_samples}}},
      {"rounds", w.rounds},
      {"seed", w.session.seed},
      // Only cuda captures graphs: a CPU report saying `true` would claim replays that never happened.
      {"cuda_graphs", backend_kind == "cuda" ? nlohmann::json(w.session.cuda_graphs) : nlohmann::json()},
      {"attention", w.paths.attention ? std::string(to_string(*w.paths.attention)) : std::string("auto")},
      {"conv", w.paths.conv ? std::string(to_string(*w.paths.conv)) : std::string("auto")},
      {"telemetry", s.telemetry},
      {"knee_sensitivity", s.analysis.knee_sensitivity},
      {"saturation_pct", s.analysis.saturation_pct},
      {"latency_slo_ms",
       s.analysis.latency_slo_ms ? nlohmann::json(*s.analysis.latency_slo_ms) : nlohmann::json()},
      // Validated (is_latency_percentile): a whole one as an integer, 99 not 99.0.
      {"latency_percentile", percentile_setting(s.analysis.latency_percentile)},
      {"price_per_hour",
       s.analysis.price_per_hour ? nlohmann::json(*s.analysis.price_per_hour) : nlohmann::json()},
      // So far: counted up as points are measured, in the rewrites after each point too.
      {"measured_points", 0},
  };
  // --rounds N: the round begun so far (1, then 2.. as the later rounds start).
  if (w.rounds > 1) j["rounds_begun"] = 1;
  // --world-size N (with --config-for): the devices the answer is for; with --effective-batch, the sweep
  // timed one device's share (effective_batch is that share, N of them the global batch).
  if (s.exports.world_size_given) j["world_size"] = s.exports.world_size;
  // --request-rate: the serving question (absent without it).
  if (s.analysis.request_rate) {
    j["request_rate"] = request_rate_setting(*s.analysis.request_rate);
    j["max_queue_delay_ms"] = s.analysis.max_queue_delay_ms.value_or(0.0);
  }
  // --memory-limit NAME: the card whose memory the sweep fitted batches in (the bytes are
  // memory_limit_bytes).
  if (!w.memory_limit_card.empty()) j["memory_limit_card"] = w.memory_limit_card;
  // settings.model holds their values already; this says which fields the config did not give so.
  if (!model.overrides.empty()) j["model_overrides"] = model.overrides;
  // --checkpoint-blocks N: the first N blocks only (absent where checkpointing covers them all, or is off).
  if (w.checkpointing && w.checkpoint_blocks > 0) j["checkpoint_blocks"] = w.checkpoint_blocks;
  return j;
}

int64_t count_resumed(const std::vector<Point>& points) {
  return std::count_if(points.begin(), points.end(), [](const Point& p) { return !p.resumed_from.empty(); });
}

// Rewrites every export after each finished point (atomically), so an interrupt or a crash leaves a valid
// report of everything finished (with --resume, and of the earlier points not reached yet); forwards progress
// to the stderr printer.
class ExportingObserver final : public SweepObserver {
 public:
  ExportingObserver(Report& report, const ExportSettings& exports, const AnalysisOptions& options, bool quiet,
                    Telemetry* telemetry)
      : telemetry_(telemetry), report_(report), exports_(exports), options_(options), progress_(stderr, [&] {
          ProgressOptions p = stderr_progress_options(quiet);
          p.stop_requested = [] { return g_signal.load() != 0; };
          return p;
        }()) {}

  void on_point_start(const PointStart& start) override { progress_.on_point_start(start); }
  // --rounds: the round the sweep has begun, so a report stopped in a later one says it has every batch.
  void on_round_begun(int round) override { report_.settings["rounds_begun"] = round; }
  void on_probe_start(int64_t batch, int64_t accumulation) override {
    progress_.on_probe_start(batch, accumulation);
  }
  void on_probe_done() override { progress_.on_probe_done(); }
  void on_measured_points(int measured_points) override {
    report_.settings["measured_points"] = measured_points;
  }
  // Taken from --resume's report: the report and the table follow, and the exports are rewritten once for a
  // run of taken points, before the next point is measured or probed (on_measuring), or by the next point's
  // rewrite, or at the end.
  void on_point_taken(const Point& point, const std::vector<Point>& all_so_far) override {
    follow(point, all_so_far);
    if (exports_.any()) unwritten_ = point;
  }
  void on_measuring() override {
    if (!unwritten_) return;
    const Point taken = std::move(*unwritten_);  // rewrite_exports clears unwritten_
    rewrite_exports(taken);
  }
  void on_point_done(const Point& point, const std::vector<Point>& all_so_far) override {
    follow(point, all_so_far);
    if (!exports_.any()) return;
    rewrite_exports(point);
  }
  // What each rewrite adds to its copy of the report (run --resume's warnings, as if the sweep stopped
  // there).
  void set_rewrite_notes(std::function<void(Report&)> notes) { rewrite_notes_ = std::move(notes); }

  // The warnings already said on stderr during the sweep: not repeated after it.
  [[nodiscard]] const std::set<std::string>& said() const { return said_; }
  void on_warnings(const std::vector<std::string>& so_far) override { sweep_warnings_ = so_far; }
  // The sweep's warnings as it last gave them (on_warnings): a fatal error's report holds them.
  [[nodiscard]] const std::vector<std::string>& sweep_warnings() const { return sweep_warnings_; }
  bool should_stop() override { return progress_.should_stop(); }
  void on_sweep_end(bool interrupted) override { progress_.on_sweep_end(interrupted); }
  // (batch, accumulation) of every point the sweep finished (measured, taken from --resume, or unfit).
  [[nodiscard]] const std::set<std::pair<int64_t, int64_t>>& swept() const { return swept_; }

  void on_timed_start(const Point& /*point*/) override {
    if (telemetry_ != nullptr && telemetry_->available()) telemetry_->start();
  }
  std::vector<std::string> on_timed_end(Point& point) override {
    if (telemetry_ == nullptr || !telemetry_->running()) return {};
    const TelemetryWindow window = telemetry_->stop();
    const int64_t samples = static_cast<int64_t>(point.samples_ms.size()) * point.effective_batch;
    point.telemetry = to_point_telemetry(window, samples);
    std::vector<std::string> warnings;
    const std::string prefix = fmt::format("batch {}: ", batch_label(point.batch, point.accumulation));
    for (const std::string& w : trust_warnings(window)) warnings.push_back(prefix + w);
    if (!window.energy_note.empty()) warnings.push_back(prefix + window.energy_note);
    return warnings;
  }

 private:
  void follow(const Point& point, const std::vector<Point>& all_so_far) {
    progress_.on_point_done(point, all_so_far);
    swept_.insert({point.batch, point.accumulation});
    // Kept up to date without exports too: a fatal error prints what finished (`--json -`, the table).
    report_.points = all_so_far;
    if (report_.settings.contains("resumed"))
      report_.settings["resumed"]["points"] = count_resumed(report_.points);
    // Serving is simulated once, at the end (and by analyze): each simulation runs 200,000 requests per
    // batch, too slow to repeat after every point of a long sweep.
    AnalysisOptions so_far = options_;
    so_far.request_rate.reset();
    so_far.interim = true;
    // Once a later --rounds round runs, every batch is in (round 1 was the whole sweep).
    so_far.unfinished = report_view::lacks_batches(report_);
    report_.analysis = analyze(report_.points, so_far);
  }
  void rewrite_exports(const Point& point) {
    unwritten_.reset();
    // An export that cannot be rewritten (a full disk, a directory made read-only) does not stop the
    // measurement: said once, recorded, and tried again after each point and at the end (exit 1 if that
    // fails too).
    std::set<std::string> failing;
    try {
      // The sweep's warnings so far go into each rewrite (the end replaces them with the outcome's), so a
      // killed run's report says which points stopped short.
      const WithWarnings with(report_.warnings, sweep_warnings_);
      if (rewrite_notes_) {
        Report noted = report_;
        rewrite_notes_(noted);
        write_exports(noted, exports_, false, &failing);
      } else {
        write_exports(report_, exports_, false, &failing);
      }
      if (!exports_.json_path.empty() && exports_.json_path != "-") g_report_on_disk.store(true);
      for (const std::string* other : {&exports_.csv_path, &exports_.markdown_path, &exports_.svg_path})
        if (!other->empty() && *other != "-") g_other_exports_on_disk.store(true);
    } catch (const Error& e) {
      if (!exports_.json_path.empty() && exports_.json_path != "-" && !failing.contains("--json"))
        g_report_on_disk.store(true);
      // Said once per export that starts failing, on its own line (not into the progress line).
      const bool new_failure = std::any_of(failing.begin(), failing.end(),
                                           [&](const std::string& flag) { return !warned_.contains(flag); });
      if (new_failure) {
        const std::string warning = fmt::format(
            "after batch {}, {} (the sweep goes on; the exports are rewritten after each point and at the "
            "end)",
            batch_label(point.batch, point.accumulation), e.what());
        const bool color = color_allowed(STDERR_FILENO);
        progress_.note(
            fmt::format("{}warning:{} {}", color ? "\033[33m" : "", color ? "\033[0m" : "", warning));
        report_.warnings.push_back(warning);
        said_.insert(warning);
        warned_.insert(failing.begin(), failing.end());
      }
    }
  }

  Telemetry* telemetry_;
  Report& report_;
  const ExportSettings& exports_;
  AnalysisOptions options_;
  std::set<std::pair<int64_t, int64_t>> swept_;
  std::set<std::string> warned_;  // the export flags whose failure was said
  std::set<std::string> said_;
  std::vector<std::string> sweep_warnings_;
  std::function<void(Report&)> rewrite_notes_;
  std::optional<Point> unwritten_;  // the last point taken from --resume since the exports were rewritten
  ProgressPrinter progress_;

  // Appends `extra` to `warnings` for as long as it lives (a rewrite), then takes them off again.
  struct WithWarnings {
    WithWarnings(std::vector<std::string>& warnings, const std::vector<std::string>& extra)
        : warnings_(warnings), size_(warnings.size()) {
      warnings.insert(warnings.end(), extra.begin(), extra.end());
    }
    ~WithWarnings() { warnings_.resize(size_); }
    WithWarnings(const WithWarnings&) = delete;
    WithWarnings& operator=(const WithWarnings&) = delete;

   private:
    std::vector<std::string>& warnings_;
    size_t size_;
  };
};

// A fatal backend error (a CUDA context left unusable) ends the sweep, exit 1: the report, as rewritten after
// the last finished point, names it in its warnings too (state stays in_progress: the sweep did not finish).
bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return !path.empty() && path != "-" && std::filesystem::is_regular_file(path, ec);
}

// A sweep that ends before any batch finished measured nothing: an export whose file already exists (an
// earlier run's report) is left as it was, not replaced by one of no points. Clears those paths in
// `exports`; what to add to the warning that says so ("; --csv r.csv left as it was (...)"), or nothing.
std::string keep_earlier_exports(ExportSettings& exports) {
  std::vector<std::string> left;
  for (auto& [flag, path] : {std::pair<std::string_view, std::string*>{"--json", &exports.json_path},
                             {"--csv", &exports.csv_path},
                             {"--markdown", &exports.markdown_path},
                             {"--svg", &exports.svg_path}}) {
    if (path->empty() || *path == "-" || !is_regular_file(*path)) continue;
    left.push_back(fmt::format("{} {}", flag, *path));
    path->clear();
  }
  if (left.empty()) return {};
  return fmt::format("; {} left as {} (an earlier run's, not replaced by nothing)", fmt::join(left, ", "),
                     left.size() > 1 ? "they were" : "it was");
}

// The console table ends with the warnings; said on stderr too when that table is not on a terminal, but
// not those the sweep said as they happened, and not where stderr goes to the same file or pipe as stdout
// (`> log 2>&1`), where the table holds them.
void say_unsaid_warnings(const std::vector<std::string>& warnings, const std::set<std::string>& said,
                         const ExportSettings& exports) {
  if (exports.json_path == "-" || isatty(fileno(stdout)) || same_target(STDOUT_FILENO, STDERR_FILENO)) return;
  std::vector<std::string> unsaid;
  for (const std::string& w : warnings)
    if (!said.contains(w)) unsaid.push_back(w);
  print_warnings(unsaid);
}

void keep_fatal_error(Report& report, const ExportSettings& given, const Error& e,
                      const AnalysisOptions& options) {
  ExportSettings exports = given;
  // The analysis after the last point, in full: the rewrites' left a long sweep's knee confidence to the end
  // (AnalysisOptions::interim), which this is. Serving stays unsimulated, as in those rewrites.
  AnalysisOptions final_options = options;
  final_options.request_rate.reset();
  final_options.interim = false;
  final_options.unfinished = report_view::lacks_batches(report);
  report.analysis = analyze(report.points, final_options);
  const std::string left = report.points.empty() ? keep_earlier_exports(exports) : std::string();
  report.warnings.push_back(
      fmt::format("{} (exit 1): {}; the report holds the {} point{} finished before it{}", kFatalErrorWarning,
                  e.what(), report.points.size(), report.points.size() == 1 ? "" : "s", left));
  // As at the end of a sweep: every export, `--json -` on stdout and the table included, so a pipeline
  // reading the JSON gets the finished points (its state, in_progress, says the sweep did not finish).
  try {
    print_final(report, exports);
  } catch (const Error&) {
    // The fatal error is the one to report; the rewrite after the last point stands.
  }
}

// --attention or --conv forced on a model with no such layer changes nothing: said, so a user comparing paths
// does not read two identical runs as a comparison of them.
void note_paths_without_layers(const Graph& graph, const PathChoice& paths, const char* command) {
  if (paths.attention && !graph.has(OpKind::attention_core))
    std::fprintf(
        stderr,
        "batchsweep %s: note: --attention %s: model %s has no attention layer, so it changes nothing\n",
        command, *paths.attention == AttentionPath::cudnn_sdpa ? "cudnn" : "explicit",
        graph.model_name.c_str());
  if (paths.conv && !graph.has(OpKind::conv2d))
    std::fprintf(stderr,
                 "batchsweep %s: note: --conv %s: model %s has no conv2d layer, so it changes nothing\n",
                 command, *paths.conv == ConvPath::cudnn ? "cudnn" : "im2col", graph.model_name.c_str());
}

// Training needs something to train: a model of pools alone has no gradients or optimizer to run.
void check_trainable(const Graph& graph, Mode mode) {
  if (mode == Mode::train && graph.parameters == 0)
    throw UsageError(fmt::format(
        "--mode train: model '{}' has no parameters to train (no linear, conv2d, layernorm, "
        "batchnorm, embedding, patch_embedding, attention or transformer_block layer); use --mode "
        "infer",
        graph.model_name));
}

// --checkpointing recomputes blocks: a model without one would run as without it, which is not what was
// asked. Where it saves no memory (one block, whose activations are all alive at once anyway, or blocks that
// keep nothing beyond their outputs), the blocks are still recomputed, as torch.utils.checkpoint would do:
// said as a warning.
std::optional<std::string> check_checkpointing(const Graph& graph, bool checkpointing, int64_t blocks) {
  if (!checkpointing) return std::nullopt;
  const char* flag = blocks > 0 ? "--checkpoint-blocks" : "--checkpointing";
  if (graph.blocks.empty())
    throw UsageError(
        fmt::format("{}: model '{}' has no transformer_block or residual layer at its top level, the blocks "
                    "that checkpointing recomputes, so it would change nothing",
                    flag, graph.model_name));
  const size_t recomputable = recomputable_blocks(graph).size();
  if (blocks > 0 && recomputable == 0)
    throw UsageError(
        fmt::format("--checkpoint-blocks: backward reaches no block of model '{}' (each comes before "
                    "every layer that learns), so there are none to count; --checkpointing lays "
                    "them all out in the arena",
                    graph.model_name));
  if (blocks > 0 && static_cast<uint64_t>(blocks) > recomputable)
    throw UsageError(
        fmt::format("--checkpoint-blocks: {} is more than the {} block{} of model '{}' that "
                    "backward recomputes (--checkpointing is all {})",
                    blocks, recomputable, recomputable == 1 ? "" : "s", graph.model_name, recomputable));
  // Activations grow with the batch: at 64 the 256-byte rounding hides no saving.
  // A model too large to plan at 64 (an attention over 2^29 tokens) is asked at batch 1; one that plans at
  // no batch is check_plannable's to refuse, not this note's.
  bool saves = true;
  for (const int64_t batch : {int64_t{64}, int64_t{1}}) {
    PlanRequest request{batch, Precision::fp32, Mode::train, 1, BackendKind::cpu};
    try {
      const uint64_t kept = make_plan(graph, request).memory.saved_activations;
      request.checkpointing = true;
      request.checkpoint_blocks = blocks;
      saves = make_plan(graph, request).memory.saved_activations < kept;
      break;
    } catch (const UsageError&) {
      continue;  // past 2^62 bytes at this batch
    }
  }
  if (saves) return std::nullopt;
  return fmt::format(
      "{}: it saves model '{}' no memory, as its recompute arena holds what its blocks kept "
      "without it (a single block, or blocks that keep nothing beyond their outputs); backward still runs "
      "their forward again, as torch.utils.checkpoint would",
      flag, graph.model_name);
}

// What checkpointing `blocks` blocks (0: all) of `request`'s model recomputes, % of its training FLOPs.
double recompute_pct(const Graph& graph, PlanRequest request, int64_t blocks) {
  request.checkpointing = true;
  request.checkpoint_blocks = blocks;
  const Plan plan = make_plan(graph, request);
  return plan.flops_per_sample > 0 ? 100.0 * plan.recompute_flops_per_sample / plan.flops_per_sample : 0.0;
}

// --checkpoint-blocks N where N is every block backward reaches: --checkpointing, recorded and compared as
// such (0), since the plans are the same to the byte.
int64_t every_block_is_all(const Graph& graph, int64_t blocks) {
  return blocks > 0 && static_cast<size_t>(blocks) == recomputable_blocks(graph).size() ? 0 : blocks;
}

// The largest divisor of n that is at most `limit` (>= 1): the largest micro-batch of an effective batch n.
int64_t largest_divisor_at_most(int64_t n, int64_t limit) {
  int64_t best = 1;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    for (const int64_t micro : {d, n / d})
      if (micro <= limit) best = std::max(best, micro);
  }
  return best;
}

}  // namespace

namespace {

// A plan of one batch of plan's list; one past 2^62 bytes is refused naming the flag that asked for it
// (check_plannable has refused a model with no batch that plans).
Plan plan_of_batch(const Graph& graph, const PlanRequest& request, bool effective_batch) {
  try {
    return make_plan(graph, request);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}; a smaller batch plans",
                                 effective_batch ? "--effective-batch" : "--batch", e.what()));
  }
}

}  // namespace

int plan_command(const PlanSettings& given, const std::vector<std::string>& argv) {
  PlanSettings s = given;
  // As run's exports: /dev/stdout (or the file stdout goes to) is stdout, and a symlink keeps its link.
  const std::string json_path = resolve_export_path(s.json_path, "--json");
  check_writable(json_path, "--json");
  check_inputs_spared({{"--json", json_path, s.json_path}}, {model_input(s.model)});
  const ModelSpec model = load_model(s.model, model_overrides(s.model_sets));
  const Graph graph = lower(model);
  check_trainable(graph, s.mode);
  s.checkpoint_blocks = every_block_is_all(graph, s.checkpoint_blocks);
  if (const std::optional<std::string> note =
          check_checkpointing(graph, s.checkpointing, s.checkpoint_blocks))
    std::fprintf(stderr, "batchsweep plan: note: %s\n", note->c_str());
  // --effective-batch N plans its splits (micro-batch x accumulation), as run would try them.
  std::vector<BatchSplit> splits;
  if (s.effective_batch) {
    splits = effective_batch_splits(*s.effective_batch);
  } else {
    const BatchSpec spec = parse_batch_spec(s.batch, "--batch");
    if (spec.auto_search) throw UsageError("--batch: plan needs explicit batches (auto is for run)");
    check_samples_per_step(spec.batches.back(), s.accumulation);  // as run's
    for (const int64_t b : spec.batches) splits.push_back(BatchSplit{b, s.accumulation});
  }
  print_warnings(model.notes);
  print_warnings(graph.notes);
  note_paths_without_layers(graph, s.paths, "plan");
  const int64_t cap = max_micro_batch(s.accumulation);
  // --memory naming a card sizes that GPU: --backend auto plans CUDA for it, with or without one here.
  if ((!s.memory_card.empty() || s.memory_all) && s.backend == "cpu")
    throw UsageError(fmt::format(
        "--memory {} names {}, and --backend cpu plans the CPU backend's buffers: "
        "give --backend cuda (or auto) to size {}",
        s.memory_all ? "all" : s.memory_card, s.memory_all ? "GPUs" : "a GPU", s.memory_all ? "them" : "it"));
  BackendKind kind = BackendKind::cpu;
  if (s.backend == "cuda" ||
      (s.backend == "auto" && (!s.memory_card.empty() || s.memory_all || cuda_device_present())))
    kind = BackendKind::cuda;
  PlanSummary summary;
  summary.graph = &graph;
  summary.model_overrides = model.overrides;
  summary.with_buffers = s.buffers;
  summary.accumulation = s.accumulation;
  summary.effective_batch = s.effective_batch;
  PlanRequest request{1, s.precision, s.mode, s.accumulation, kind};
  request.checkpointing = s.checkpointing;
  request.checkpoint_blocks = s.checkpoint_blocks;
  // The paths the CUDA backend prefers (or the ones forced); where cuDNN rejects a shape on the device, `run`
  // falls back and plans our own path instead (its report says which ran).
  if (kind == BackendKind::cuda) {
    request.paths = requested_cuda_paths(graph, s.precision, s.paths);
    // Forced where auto would not pick it: planned as asked, but only the device's cuDNN can say whether it
    // runs (run asks it at batch 1 and refuses the forced path where it does not).
    if (graph.has(OpKind::attention_core) && s.paths.attention == AttentionPath::cudnn_sdpa &&
        preferred_cuda_paths(graph, s.precision).attention != AttentionPath::cudnn_sdpa)
      std::fprintf(
          stderr,
          "batchsweep plan: note: --attention cudnn plans cuDNN SDPA for a head size auto would not "
          "give it (auto: a multiple of 8, at most 128); `run` asks this GPU's cuDNN and refuses the "
          "forced path if it declines\n");
  } else if (s.paths.attention == AttentionPath::cudnn_sdpa || s.paths.conv == ConvPath::cudnn) {
    throw UsageError(
        fmt::format("{}: cuDNN paths are planned for --backend cuda, not {}",
                    s.paths.attention == AttentionPath::cudnn_sdpa ? "--attention cudnn" : "--conv cudnn",
                    to_string(kind)));
  }
  check_plannable(graph, request);
  if (s.memory_bytes) {
    // Sizing a GPU from a laptop is what --memory is for; auto without a GPU plans the CPU backend, whose
    // buffers differ (fp16/bf16 keep fp32 copies for its math), and the largest fit with them.
    if (s.backend == "auto" && kind == BackendKind::cpu)
      std::fprintf(
          stderr,
          "batchsweep plan: note: no CUDA device here, so --backend auto planned the CPU backend; to "
          "size a GPU add --backend cuda (its plans differ)\n");
    summary.memory_bytes = s.memory_bytes;
    summary.memory_card = s.memory_card;
    // A card before Ampere is planned, as --memory all's footnote says, but cannot be run: said here too.
    // memory_card names one card, or several sharing a memory ("V100 PCIe or V100 SXM2").
    const auto named = [&](const std::string& name) {
      const std::string& cards = s.memory_card;
      for (size_t at = 0; at <= cards.size();) {
        const size_t end = std::min(cards.find(" or ", at), cards.size());
        if (cards.compare(at, end - at, name) == 0 && end - at == name.size()) return true;
        at = end + 4;
      }
      return false;
    };
    bool said_pre_ampere = false;
    for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus"))
      if (!s.memory_card.empty() && named(gpu.at("name").get<std::string>())) {
        const double cc = gpu.at("compute_capability").get<double>();
        const nlohmann::json& rate = gpu.at("tflops").at(std::string(to_string(s.precision)));
        if (cc > 0 && cc < 8.0 && !said_pre_ampere) {
          said_pre_ampere = true;  // once for the cards a name shares ("V100 PCIe or V100 SXM2")
          std::fprintf(
              stderr,
              "batchsweep plan: note: the %s has compute capability %.1f; batchsweep's CUDA backend "
              "runs on Ampere (8.0) and newer, so this is a plan `run` cannot measure%s\n",
              s.memory_card.c_str(), cc,
              rate.is_null()
                  ? fmt::format(" (nor has the card a {} tensor-core mode)", to_string(s.precision)).c_str()
                  : "");
        }
      }
    summary.max_fit_batch = max_fit_batch(graph, request, *s.memory_bytes);
    if (summary.max_fit_batch && *summary.max_fit_batch > cap) summary.max_fit_batch = cap;
    if (summary.max_fit_batch && *summary.max_fit_batch < cap) {
      PlanRequest next = request;
      next.batch = *summary.max_fit_batch + 1;
      try {
        (void)make_plan(graph, next);
      } catch (const UsageError&) {
        summary.max_fit_at_plan_limit = true;
      }
    }
    if (s.mode == Mode::train && !s.checkpointing && !s.effective_batch && !graph.blocks.empty() &&
        summary.max_fit_batch && *summary.max_fit_batch < cap) {
      PlanRequest checkpointed = request;
      checkpointed.checkpointing = true;
      const std::optional<int64_t> with = max_fit_batch(graph, checkpointed, *s.memory_bytes);
      if (with && *with > *summary.max_fit_batch) summary.max_fit_with_checkpointing = std::min(*with, cap);
    }
    if (s.effective_batch && summary.max_fit_batch) {
      // The largest micro-batch dividing N that fits (memory does not depend on the accumulation); where
      // N's splits are a ladder that skips it, it is planned too, as run's probe between ladder steps finds
      // it.
      const int64_t n = *s.effective_batch;
      const int64_t best = largest_divisor_at_most(n, *summary.max_fit_batch);
      summary.max_fit_any = std::min(*summary.max_fit_batch, n);
      summary.max_fit_batch = best;  // 1 divides N, and batch 1 fits
      if (std::none_of(splits.begin(), splits.end(),
                       [&](const BatchSplit& x) { return x.micro_batch == best; }))
        splits.push_back(BatchSplit{best, n / best});
    }
  }
  if (s.memory_all) {
    // Every card of the sheet: its largest batch (the largest micro-batch dividing N for --effective-batch),
    // its datasheet rate at this precision and its bandwidth, for choosing between them.
    for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus")) {
      PlanSummary::CardFit card;
      card.name = gpu.at("name").get<std::string>();
      card.memory_bytes = gpu.at("cuda_mib").get<uint64_t>() << 20;
      card.max_fit_batch = max_fit_batch(graph, request, card.memory_bytes);
      if (card.max_fit_batch && *card.max_fit_batch > cap) card.max_fit_batch = cap;
      if (s.effective_batch && card.max_fit_batch) {
        card.max_fit_any = card.max_fit_batch;
        card.max_fit_batch = largest_divisor_at_most(*s.effective_batch, *card.max_fit_batch);
      }
      const nlohmann::json& rate = gpu.at("tflops").at(std::string(to_string(s.precision)));
      if (rate.is_number()) card.peak_tflops = rate.get<double>();
      card.memory_bandwidth_gbps = gpu.at("memory_bandwidth_gbps").get<double>();
      card.compute_capability = gpu.at("compute_capability").get<double>();
      summary.cards.push_back(std::move(card));
    }
  }
  // Ascending micro-batch, as a --batch list's rows.
  std::sort(splits.begin(), splits.end(),
            [](const BatchSplit& a, const BatchSplit& b) { return a.micro_batch < b.micro_batch; });
  // --buffers lists every buffer of every batch: bounded, since a long --batch list of a deep model would
  // build gigabytes of rows (and die of it) rather than an answer. The largest batch has the most buffers.
  if (s.buffers && !splits.empty()) {
    request.batch = splits.back().micro_batch;
    request.accumulation = splits.back().accumulation;
    const uint64_t per_plan = plan_of_batch(graph, request, s.effective_batch.has_value()).buffers.size();
    const uint64_t rows = per_plan * splits.size();
    if (rows > kMaxBufferRows)
      throw UsageError(fmt::format(
          "--buffers: {} batches of {} buffers each would list {} rows, over the {} a listing holds; give "
          "--buffers a few batches (e.g. --batch {})",
          splits.size(), per_plan, rows, kMaxBufferRows,
          std::max<uint64_t>(1, kMaxBufferRows / per_plan) >= 3
              ? fmt::format("{},{},{}", splits.front().micro_batch, splits[splits.size() / 2].micro_batch,
                            splits.back().micro_batch)
              : std::to_string(splits.back().micro_batch)));
  }
  for (const BatchSplit& split : splits) {
    request.batch = split.micro_batch;
    request.accumulation = split.accumulation;
    summary.plans.push_back(plan_of_batch(graph, request, s.effective_batch.has_value()));
    // Without --buffers only the totals are shown: a deep model's buffer list at each of thousands of batches
    // is memory the answer does not need.
    if (!s.buffers) summary.plans.back().buffers = {};
  }
  // Training without checkpointing, where a batch does not fit: the fewest blocks --checkpoint-blocks needs
  // for it (recomputing fewer blocks than --checkpointing costs less), for the smallest batches that do not
  // fit (each a bisection of plans).
  const size_t recomputable = recomputable_blocks(graph).size();
  if (s.memory_bytes && s.mode == Mode::train && !s.checkpointing && !s.effective_batch &&
      recomputable >= 2) {
    constexpr size_t kMostAsked = 64;
    summary.blocks_to_fit.resize(summary.plans.size());
    summary.recomputable_blocks = recomputable;
    size_t asked = 0;
    for (size_t i = 0; i < summary.plans.size() && asked < kMostAsked; ++i) {
      const Plan& p = summary.plans[i];
      if (p.memory.total_bytes() <= usable_bytes(*s.memory_bytes)) continue;
      ++asked;
      PlanSummary::BlocksToFit& fit = summary.blocks_to_fit[i];
      fit.asked = true;
      fit.blocks = fewest_checkpoint_blocks(graph, p.request, *s.memory_bytes);
      if (fit.blocks) fit.recompute_pct = recompute_pct(graph, p.request, *fit.blocks);
    }
  }
  if (!json_path.empty()) {
    // What wrote it and when, as a report and a comparison say: a reader handed it for a report is told
    // what it is (configs/schema/plan-v1.schema.json).
    nlohmann::json doc = {
        {"kind", "plan"},
        {"schema_version", 1},
        {"tool", {{"name", "batchsweep"}, {"version", BSW_VERSION}, {"git_commit", BSW_GIT_COMMIT}}},
        {"created_at", now_iso8601()},
        {"command", argv}};
    doc.update(plan_to_json(summary));
    write_output("--json", json_path, json_text(doc, 2) + "\n");
  }
  // As run's: with the JSON on stdout, the table goes to stderr.
  std::fputs(format_plan_table(summary).c_str(), json_path == "-" ? stderr : stdout);
  return kExitOk;
}

// run --resume: what differs between the earlier run and this one in what a point measures, as "its X is A,
// this run's is B"; nullopt when its ok points can stand for this run's. Analysis settings, the batch list,
// exports and telemetry may differ.
std::optional<std::string> resume_mismatch(const Report& earlier, const Report& now) {
  struct Setting {
    const char* key;
    const char* flag;
  };
  static constexpr Setting kMeasured[] = {
      {"backend", "--backend"},
      {"model", "--model or --set"},
      {"mode", "--mode"},
      {"precision", "--precision"},
      {"seed", "--seed"},
      {"checkpointing", "--checkpointing or --checkpoint-blocks"},
      {"checkpoint_blocks", "--checkpoint-blocks"},
      {"cuda_graphs", "--graphs"},
      {"attention", "--attention"},
      {"conv", "--conv"},
      {"stopping",
       "--warmup, --warmup-time, --min-samples, --min-time, --max-noise, --max-samples or --timeout"}};
  const auto shown = [](const nlohmann::json* v) {
    return v != nullptr ? json_text(*v) : std::string("absent");
  };
  const auto at = [](const nlohmann::json& obj, const char* key) -> const nlohmann::json* {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  };
  // --graphs, --attention and --conv shape CUDA runs only: a CPU sweep resumed with another of them measures
  // the same thing.
  const bool cuda_only_apply = cuda_settings_apply(earlier.settings, now.settings);
  for (const Setting& setting : kMeasured) {
    const std::string_view key = setting.key;
    if (!cuda_only_apply && (key == "cuda_graphs" || key == "attention" || key == "conv")) continue;
    const nlohmann::json* before = at(earlier.settings, setting.key);
    const nlohmann::json* here = at(now.settings, setting.key);
    // Reports from before --warmup-time warmed up for no minimum time.
    nlohmann::json stopping_before;
    if (key == "stopping" && before != nullptr && before->is_object() && !before->contains("warmup_time_s")) {
      stopping_before = *before;
      stopping_before["warmup_time_s"] = 0.0;
      before = &stopping_before;
    }
    // Reports from before --checkpointing kept every activation.
    static const nlohmann::json kNoCheckpointing = false;
    if (key == "checkpointing") {
      if (before == nullptr) before = &kNoCheckpointing;
      if (here == nullptr) here = &kNoCheckpointing;
    }
    // Without --checkpoint-blocks every block is checkpointed (or none is): "all".
    static const nlohmann::json kAllBlocks = "all";
    if (key == "checkpoint_blocks") {
      if (before == nullptr) before = &kAllBlocks;
      if (here == nullptr) here = &kAllBlocks;
    }
    if (before != nullptr && here != nullptr && *before == *here) continue;
    // Another model altogether says so by name; one name with other layers, where.
    if (std::string_view(setting.key) == "model" && before != nullptr && here != nullptr &&
        before->is_object() && here->is_object() && before->contains("name") && here->contains("name") &&
        (*before)["name"] != (*here)["name"])
      return fmt::format("it measured model {}, this run measures {} ({})", shown(&(*before)["name"]),
                         shown(&(*here)["name"]), setting.flag);
    if (std::string_view(setting.key) == "model" && before != nullptr && here != nullptr)
      if (const std::optional<JsonDifference> d = first_difference(*before, *here))
        return fmt::format(
            "its resolved model (settings.model) differs from this run's at {}: {} there, {} here ({})",
            d->where.empty() ? std::string("the top") : d->where, d->first.value_or("absent"),
            d->second.value_or("absent"), setting.flag);
    if (key == "stopping" && before != nullptr && here != nullptr && before->is_object() &&
        here->is_object()) {
      // Name the one flag that differs, not the six that might.
      static constexpr std::pair<const char*, const char*> kStopping[] = {
          {"warmup_steps", "--warmup"},     {"warmup_time_s", "--warmup-time"},
          {"min_samples", "--min-samples"}, {"min_time_s", "--min-time"},
          {"max_noise_pct", "--max-noise"}, {"timeout_s", "--timeout"},
          {"max_samples", "--max-samples"}};
      for (const auto& [field, flag] : kStopping) {
        const nlohmann::json* a = at(*before, field);
        const nlohmann::json* b = at(*here, field);
        if ((a == nullptr) != (b == nullptr) || (a != nullptr && *a != *b))
          return fmt::format("its settings.stopping.{} is {}, this run's is {} ({}{})", field, shown(a),
                             shown(b), flag,
                             std::string_view(field) == "min_samples"
                                 ? "; a --latency-slo or --request-rate raises its default to what the "
                                   "percentile needs, so adding, dropping or changing one moves it: give "
                                   "--min-samples to match"
                                 : "");
      }
    }
    if (std::string_view(setting.key) == "model")  // one side has none: a whole model is too long to quote
      return fmt::format("its resolved model (settings.model) differs from this run's ({})", setting.flag);
    return fmt::format("its settings.{} is {}, this run's is {} ({})", setting.key, shown(before),
                       shown(here), setting.flag);
  }
  if (earlier.device.backend != now.device.backend || earlier.device.name != now.device.name) {
    // A report without a device (hand-edited) says so, not `on  ""`.
    const std::string before =
        earlier.device.backend.empty() && earlier.device.name.empty()
            ? std::string("it names no device (its device is missing or empty)")
            : fmt::format("it ran on {} \"{}\"", earlier.device.backend, earlier.device.name);
    return fmt::format("{}, this run on {} \"{}\"", before, now.device.backend, now.device.name);
  }
  // What else shapes the timings: the CPU's threads and BLAS kernels; which GPU it is (another one of the
  // same model is another measurement), its architecture, driver and libraries (cuBLASLt's and cuDNN's
  // choices change with them), the execution paths cuDNN accepted.
  // A scripted device is its script's formula: another formula under the same name is another device (not
  // the script's path, which may move, nor its failures, which do not change an ok point's steps; its stalls
  // do, and are compared).
  std::vector<const char*> keys = {"threads",  "blas",           "blas_core", "uuid", "compute_capability",
                                   "versions", "execution_paths"};
  if (now.device.backend == "scripted")
    keys.insert(keys.end(), {"curve", "t0_ms", "samples_per_ms", "b0", "noise_pct", "drift_pct", "seed",
                             "stall_every_steps", "stall_factor"});
  for (const char* key : keys) {
    const nlohmann::json* before = at(earlier.device.details, key);
    const nlohmann::json* here = at(now.device.details, key);
    if ((before != nullptr || here != nullptr) && (before == nullptr || here == nullptr || *before != *here))
      return fmt::format("its device.{} is {}, this run's is {}", key, shown(before), shown(here));
  }
  return std::nullopt;
}

// run --resume: the earlier report, and what of it this run may keep.
struct ResumeSource {
  std::string path;
  Report earlier;
  std::vector<Point> keepable;  // its ok points of this sweep's kind: an interrupted sweep keeps those
                                // it had not reached
  std::vector<std::string> other_kind;  // its ok points of another accumulation (or effective batch)
};

// Reads --resume's report, refuses one that measured something else, and hands its ok points to the sweep
// (with resumed_from, and MFU against this run's peak); `report` gets settings.resumed.
ResumeSource load_resume(const std::string& path, Report& report, SweepSettings& sweep) {
  ResumeSource source{path, {}, {}, {}};
  try {
    source.earlier = read_report(path);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--resume: {}", e.what()));
  }
  if (auto mismatch = resume_mismatch(source.earlier, report))
    throw UsageError(fmt::format(
        "--resume {}: {}; resume with the same settings, or sweep afresh without --resume", path, *mismatch));
  // Its created_at marks every point it gives (resumed_from), which the table, the warning and compare (a
  // point of the baseline's own) read: without one its points would pass for this run's measurements.
  if (source.earlier.created_at.empty() &&
      std::any_of(source.earlier.points.begin(), source.earlier.points.end(),
                  [](const Point& p) { return p.status == PointStatus::ok && p.resumed_from.empty(); }))
    throw UsageError(fmt::format(
        "--resume {}: it has no created_at, which marks the points it gives as an earlier run's "
        "(resumed_from); "
        "run writes one in every report, so this one was edited: put back its created_at, or sweep afresh "
        "without --resume",
        path));
  for (Point point : source.earlier.points) {
    if (point.status != PointStatus::ok) continue;  // what did not run then is tried again
    if (point.resumed_from.empty()) point.resumed_from = source.earlier.created_at;
    // MFU against this run's peak (a calibration may have come since).
    point.mfu = point.tflops && report.device.peak_flops && *report.device.peak_flops > 0
                    ? std::optional<double>(*point.tflops * 1e12 / *report.device.peak_flops)
                    : std::nullopt;
    // Only this sweep's accumulation (or effective batch) is ever kept, so a report never mixes two splits of
    // one micro-batch from different experiments.
    const bool same_kind = sweep.effective_batch ? point.effective_batch == *sweep.effective_batch
                                                 : point.accumulation == sweep.accumulation;
    if (same_kind) {
      source.keepable.push_back(point);
    } else {
      source.other_kind.push_back(batch_label(point.batch, point.accumulation));
    }
    sweep.resume_points.push_back(std::move(point));
  }
  // Said from the first export on, so a report written mid-sweep says it was resumed.
  report.settings["resumed"] = {{"from", path},
                                {"created_at", source.earlier.created_at},
                                {"git_commit", source.earlier.tool.git_commit},
                                {"points", source.keepable.size()}};
  return source;
}

// After a resumed sweep: settings.resumed.points, the earlier warnings about the points it holds, and what
// came from the earlier report, what was kept and what was left out.
void note_resume(Report& report, const ResumeSource& source,
                 const std::set<std::pair<int64_t, int64_t>>& swept, bool interrupted,
                 const std::string& json_path) {
  const Report& earlier = source.earlier;
  report.settings["resumed"]["points"] = count_resumed(report.points);
  std::vector<std::string> taken, kept, extended;
  // The rounds a point had in the earlier report (1 for one measured without --rounds).
  const auto earlier_rounds = [&earlier](const Point& p) -> size_t {
    for (const Point& q : earlier.points)
      if (q.batch == p.batch && q.accumulation == p.accumulation) return std::max<size_t>(1, q.rounds.size());
    return 1;
  };
  const auto add = [&report](const std::string& w) {
    if (std::find(report.warnings.begin(), report.warnings.end(), w) == report.warnings.end())
      report.warnings.push_back(w);
  };
  for (const Point& p : report.points) {
    if (p.resumed_from.empty()) continue;
    const std::string label = batch_label(p.batch, p.accumulation);
    if (!swept.contains({p.batch, p.accumulation}))
      kept.push_back(label);
    else if (p.rounds.size() > earlier_rounds(p))
      extended.push_back(label);  // run --rounds measured the rounds it lacked
    else
      taken.push_back(label);
    // What the earlier run warned about this point's measurement still holds (noise, telemetry). Memory
    // warnings are the runner's again, against this run's budget.
    // The earlier run's own warning about this point's stop begins "batch L: <stop_reason> ..." (the
    // criterion's wording), or is the one this function made when it resumed the point before.
    const std::string said_stop = fmt::format("batch {}: {} ", label, p.stop_reason);
    const std::string said_taken = fmt::format("batch {}: taken from the earlier run, ", label);
    bool stop_said = false;
    for (const std::string& w : earlier.warnings) {
      // Nor what the earlier run said of its rounds' agreement: this run judges every point's rounds again.
      const bool about_it =
          (w.starts_with("batch " + label + ":") || w.starts_with("batch " + label + " ")) &&
          !w.ends_with(": close to out-of-memory") &&
          w.find(" rounds' mean steps differ by ") == std::string::npos;
      if (!about_it) continue;
      add(w);
      stop_said |= w.starts_with(said_stop) || w.starts_with(said_taken);
    }
    // Stopped short of its targets, it is as short of them now. The earlier run may have said so in one
    // warning about many points, which names no batch up front: say it again for this one.
    if (!stop_said && stopped_short(p.stop_reason)) {
      std::string why = fmt::format("{} samples", p.samples_ms.size());
      if (p.noise_pct) why += fmt::format(", noise {:.1f}%", *p.noise_pct);
      add(
          fmt::format("batch {}: taken from the earlier run, where it stopped before meeting its "
                      "measurement targets (stop_reason \"{}\", {})",
                      label, p.stop_reason, why));
    }
  }
  const auto batches = [](const std::vector<std::string>& labels) {
    return fmt::format("batch{} {}", labels.size() == 1 ? "" : "es", fmt::join(labels, ", "));
  };
  const std::string& path = source.path;
  if (!taken.empty()) {
    std::string commit_note;
    if (earlier.tool.git_commit != report.tool.git_commit)
      commit_note =
          fmt::format(" by batchsweep {} (this is {})", earlier.tool.git_commit, report.tool.git_commit);
    report.warnings.push_back(fmt::format(
        "--resume {}: {} {} measured earlier{} and not again (resumed_from in the report); the machine's "
        "state may have changed since",
        path, batches(taken), taken.size() == 1 ? "was" : "were", commit_note));
  }
  if (!extended.empty())
    report.warnings.push_back(fmt::format(
        "--resume {}: {} kept {} earlier rounds and {} measured in the rounds {} lacked now (each point's "
        "rounds[] in the report); the machine's state may have changed between them",
        path, batches(extended), extended.size() == 1 ? "its" : "their",
        extended.size() == 1 ? "was" : "were", extended.size() == 1 ? "it" : "they"));
  if (!kept.empty())
    report.warnings.push_back(fmt::format(
        "--resume {}: {}, which this interrupted sweep did not reach, {} kept from it as measured then, so "
        "resuming again takes {}",
        path, batches(kept), kept.size() == 1 ? "is" : "are", kept.size() == 1 ? "it" : "them"));
  std::vector<std::string> dropped;
  for (const Point& p : source.keepable) {
    const bool in_report = std::any_of(report.points.begin(), report.points.end(), [&](const Point& q) {
      return q.batch == p.batch && q.accumulation == p.accumulation;
    });
    if (!in_report) dropped.push_back(batch_label(p.batch, p.accumulation));
  }
  if (!dropped.empty()) {
    std::error_code ec;
    const bool same_file =
        !json_path.empty() && json_path != "-" && std::filesystem::equivalent(path, json_path, ec);
    report.warnings.push_back(fmt::format(
        "--resume {}: {} of it {} not in this report: {}{}", path, batches(dropped),
        dropped.size() == 1 ? "is" : "are",
        interrupted ? "beyond what fits this run's memory"
                    : fmt::format("this sweep did not ask for {}", dropped.size() == 1 ? "it" : "them"),
        same_file ? fmt::format(", and so no longer in {}", json_path) : std::string()));
  }
  if (!source.other_kind.empty())
    report.warnings.push_back(fmt::format(
        "--resume {}: {} of it {} not in this report: {} differs from this sweep's", path,
        batches(source.other_kind), source.other_kind.size() == 1 ? "is" : "are",
        report.settings.value("effective_batch", nlohmann::json()).is_null() ? "the accumulation"
                                                                             : "the effective batch"));
  if (source.keepable.empty() && source.other_kind.empty())
    report.warnings.push_back(
        fmt::format("--resume {}: it holds no ok point; every point was measured now", path));
}

void require_budget_for_percentile(bool percentile_given, bool has_budget, bool has_rate) {
  if (percentile_given && !has_budget && !has_rate)
    throw UsageError(
        "--latency-percentile: it chooses what --latency-slo holds, or the request latency --request-rate "
        "answers at, and there is neither (give --latency-slo MS or --request-rate PER_S)");
}

namespace {

// A recommended split with accumulation trains batchnorm on each micro-batch's own statistics, as PyTorch
// does: the fastest split is then not the same training as one batch of its size.
std::optional<std::string> batchnorm_split_warning(const Graph& graph, Mode mode, const Analysis& analysis) {
  const std::optional<int64_t> micro = analysis.recommended.batch;
  const int64_t accumulation = analysis.recommended_accumulation.value_or(1);
  if (mode != Mode::train || !micro || accumulation <= 1) return std::nullopt;
  const auto bn = std::find_if(graph.ops.begin(), graph.ops.end(),
                               [](const Op& op) { return op.kind == OpKind::batchnorm; });
  if (bn == graph.ops.end()) return std::nullopt;
  return fmt::format(
      "the recommended split, micro-batch {} x accumulation {}, normalizes each batchnorm (the first at {}) "
      "over "
      "micro-batches of {} sample(s), not over the effective batch of {}: it trains differently from one "
      "batch "
      "of {}, not only faster or slower (PyTorch does the same); where accuracy depends on the batch "
      "statistics, prefer a split with a larger micro-batch",
      *micro, accumulation, bn->path, *micro, *micro * accumulation, *micro * accumulation);
}

// A training sweep whose batches ran out of memory (or past --memory-limit), of a model with blocks to
// checkpoint: what --checkpointing would plan for the smallest batch that did not fit, the next thing a
// user runs out of memory tries. On stderr, as a note; the report holds what was measured.
void note_checkpointing(const Graph& graph, const SweepSettings& sweep, BackendKind kind,
                        const ExecutionPaths& paths, const Report& report) {
  if (sweep.mode != Mode::train || graph.blocks.empty()) return;
  const Point* failed = nullptr;
  for (const Point& p : report.points)
    if ((p.status == PointStatus::oom || p.status == PointStatus::over_limit) &&
        (failed == nullptr || p.batch < failed->batch))
      failed = &p;
  if (failed == nullptr) return;
  PlanRequest request{failed->batch, sweep.precision, sweep.mode, failed->accumulation, kind, paths};
  // The budget the sweep held its plans to: the smaller of --memory-limit and the device's memory.
  uint64_t budget = report.device.memory_total_bytes;
  if (sweep.memory_limit_bytes && (budget == 0 || *sweep.memory_limit_bytes < budget))
    budget = *sweep.memory_limit_bytes;
  const bool limited = sweep.memory_limit_bytes && budget == *sweep.memory_limit_bytes;
  const char* budget_name = limited ? "--memory-limit" : "device memory";
  // over_limit: planned past the budget, which is --memory-limit only where that was given and smaller.
  const char* what = failed->status == PointStatus::oom ? "ran out of memory"
                     : limited                          ? "was over --memory-limit"
                                                        : "was over the device's memory by its plan";
  if (sweep.checkpointing) {
    // --checkpoint-blocks N, and still over: how many would fit it, or that even all would not.
    if (budget == 0) return;
    const std::optional<int64_t> fewest = fewest_checkpoint_blocks(graph, request, budget);
    const size_t all = recomputable_blocks(graph).size();
    std::fflush(stdout);
    // Fewer than all, or than N, can fit where more do not: the blocks kept whole lie over the recompute
    // arena, which a large early block, checkpointed, makes larger than they are.
    const int64_t given = sweep.checkpoint_blocks > 0 ? sweep.checkpoint_blocks : static_cast<int64_t>(all);
    if (fewest && *fewest > 0 && *fewest < given) {
      std::fprintf(
          stderr,
          "batchsweep run: note: batch %s %s with %s; --checkpoint-blocks %lld (of %zu) would fit "
          "it%s: the blocks it keeps whole lie over the recompute arena, which the larger blocks "
          "checkpointed before them make larger than they are\n",
          batch_label(failed->batch, failed->accumulation).c_str(), what,
          sweep.checkpoint_blocks > 0 ? fmt::format("--checkpoint-blocks {}", sweep.checkpoint_blocks).c_str()
                                      : "--checkpointing (every block)",
          static_cast<long long>(*fewest), all,
          failed->status == PointStatus::oom ? " by the plan (the device ran out anyway: leave it room)"
                                             : "");
      return;
    }
    if (sweep.checkpoint_blocks == 0) return;  // every block, and nothing fewer fits either
    if (fewest && *fewest > sweep.checkpoint_blocks)
      std::fprintf(
          stderr, "batchsweep run: note: batch %s %s with --checkpoint-blocks %lld; %s would fit it%s\n",
          batch_label(failed->batch, failed->accumulation).c_str(), what,
          static_cast<long long>(sweep.checkpoint_blocks),
          static_cast<size_t>(*fewest) == all
              ? "--checkpointing (all of them)"
              : fmt::format("--checkpoint-blocks {} (of {})", *fewest, all).c_str(),
          failed->status == PointStatus::oom ? " by the plan (the device ran out anyway: leave it room)"
                                             : "");
    else if (!fewest)
      std::fprintf(stderr,
                   "batchsweep run: note: batch %s %s with --checkpoint-blocks %lld, and would be with "
                   "--checkpointing too (every block)\n",
                   batch_label(failed->batch, failed->accumulation).c_str(), what,
                   static_cast<long long>(sweep.checkpoint_blocks));
    return;
  }
  const uint64_t without = make_plan(graph, request).memory.total_bytes();
  request.checkpointing = true;
  const Plan with = make_plan(graph, request);
  if (with.memory.total_bytes() >= without) return;
  // The blocks backward reaches, as the plan's title counts them (not one before every layer that learns).
  const std::vector<int> ends = blocks_ending(graph, request);
  const auto recomputed = std::count_if(ends.begin(), ends.end(), [](int k) { return k >= 0; });
  // Where not even batch 1 fits the budget with every block recomputed, rerunning with it cannot help: said,
  // not advised (the model's state, not its activations, is what is over).
  if (budget > 0 && !max_fit_batch(graph, request, budget)) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "batchsweep run: note: batch %s %s (its plan needs %s); --checkpointing would not fit it: "
                 "it plans %s, and not even batch 1 fits 95%% of the %s with it\n",
                 batch_label(failed->batch, failed->accumulation).c_str(), what,
                 format_bytes(without).c_str(), format_bytes(with.memory.total_bytes()).c_str(), budget_name);
    return;
  }
  std::string fits;
  if (sweep.memory_limit_bytes)
    if (const std::optional<int64_t> most = max_fit_batch(graph, request, *sweep.memory_limit_bytes))
      fits = fmt::format("; micro-batches up to {} fit --memory-limit with it", *most);
  // The fewest blocks that fit the batch in the budget, where fewer than all would (less recomputation).
  if (budget > 0) {
    PlanRequest plain = request;
    plain.checkpointing = false;
    if (const std::optional<int64_t> fewest = fewest_checkpoint_blocks(graph, plain, budget);
        fewest && *fewest > 0 && *fewest < recomputed)
      fits += fmt::format("; --checkpoint-blocks {} (of {}) is the fewest that fit it in {} (+{:.0f}% FLOPs)",
                          *fewest, recomputed, budget_name, recompute_pct(graph, plain, *fewest));
  }
  std::fflush(stdout);  // after the table, where both go to one file
  std::fprintf(
      stderr,
      "batchsweep run: note: batch %s %s (its plan needs %s); with --checkpointing it plans %s, "
      "recomputing its %td blocks' forward in backward (+%.0f%% FLOPs)%s: rerun with --checkpointing "
      "to measure what fits and what it costs\n",
      batch_label(failed->batch, failed->accumulation).c_str(), what, format_bytes(without).c_str(),
      format_bytes(with.memory.total_bytes()).c_str(), recomputed,
      // A model of norms alone counts no FLOPs: nothing to add to.
      with.flops_per_sample > 0 ? 100.0 * with.recompute_flops_per_sample / with.flops_per_sample : 0.0,
      fits.c_str());
}

// Out of memory is a measurement, and the report says it; but a script that reads only the exit code must
// not take "no batch fits this GPU", or "no batch meets --latency-slo", for an answer: both exit 4, said on
// stderr with the analysis's reason.
int recommendation_exit(const Report& report, std::string_view who) {
  if (report.analysis.recommended.batch) return kExitOk;
  const std::string& why = report.analysis.recommended.why;
  const bool none_ok = std::none_of(report.points.begin(), report.points.end(),
                                    [](const Point& p) { return p.status == PointStatus::ok; });
  // The table on stdout that did not reach it makes the exit 1 (main): this line must not say 4 then.
  const bool stdout_written = flush_stdout() == 0;
  // fputs, not fmt::print, which throws where stderr cannot be written: exit 4 stands.
  std::fputs(
      fmt::format(
          "{}: {}{}; there is nothing to recommend{}\n", who,
          none_ok && !report.points.empty() && !why.starts_with("no batch ran ok") ? "no batch ran ok: " : "",
          why, stdout_written ? fmt::format(" (exit {})", static_cast<int>(kExitNothingRan)) : std::string())
          .c_str(),
      stderr);
  return kExitNothingRan;
}

}  // namespace

int run_command(const RunSettings& given, const std::vector<std::string>& argv) {
  RunSettings s = given;
  ExportSettings exports = s.exports;
  check_exports(
      exports,
      {model_input(s.model), {"the --script file", s.script}, {"the --resume report", s.resume_path, true}});
  check_streams_read_once({{"--model", preset_text(s.model).empty() ? s.model : std::string()},
                           {"--script", s.script},
                           {"--resume", s.resume_path}});
  const ModelSpec model = load_model(s.model, model_overrides(s.model_sets));
  const Graph graph = lower(model);
  check_trainable(graph, s.sweep.mode);
  s.sweep.checkpoint_blocks = every_block_is_all(graph, s.sweep.checkpoint_blocks);
  const std::optional<std::string> checkpointing_note =
      check_checkpointing(graph, s.sweep.checkpointing, s.sweep.checkpoint_blocks);
  note_paths_without_layers(graph, s.sweep.paths, "run");
  std::unique_ptr<Backend> backend = make_backend(s.backend, s.script, s.device);
  AnalysisOptions options = analysis_options(s.analysis);
  options.effective_batch = s.sweep.effective_batch;  // the points are its splits, however few ran
  // A script sized to a card (a fake H100) fits fewer samples of an attention model than the card does: its
  // plan keeps the explicit path's probabilities. Said before the sweep, which would read as the card's
  // limit.
  // --graphs shapes CUDA steps only: said where the sweep runs elsewhere, as --attention on a model without
  // attention is, so a CI job passing it to every backend does not read a CPU run as graph replays.
  // --memory-limit NAME emulates a smaller card's memory, not its speed: said, as the report's title says it.
  if (!s.sweep.memory_limit_card.empty())
    std::fprintf(
        stderr,
        "batchsweep run: note: --memory-limit %s: batches fit in %s's memory; their speed and MFU are "
        "this device's, not %s's\n",
        s.sweep.memory_limit_card.c_str(), s.sweep.memory_limit_card.c_str(),
        s.sweep.memory_limit_card.c_str());
  if (s.graphs_given && backend->kind() != BackendKind::cuda)
    std::fprintf(
        stderr,
        "batchsweep run: note: --graphs: only the cuda backend captures CUDA graphs (this sweep runs "
        "on %s), so it changes nothing\n",
        std::string(to_string(backend->kind())).c_str());
  if (backend->kind() == BackendKind::scripted && graph.has(OpKind::attention_core))
    std::fprintf(
        stderr,
        "batchsweep run: note: the scripted backend plans attention as the explicit path does (its "
        "[B, heads, T, T] probabilities), with no workspaces: a script sized to a card fits fewer "
        "samples than that card does with cuDNN's fused attention; `batchsweep plan --memory <card>` "
        "says what fits a card\n");
  // A serving budget is an inference step's; by default the sweep times training steps (about 3x longer).
  // (Not with accumulation, which only training has.)
  if (options.latency_slo_ms && s.sweep.mode == Mode::train && !s.mode_given && !s.sweep.effective_batch &&
      s.sweep.accumulation == 1)
    std::fprintf(stderr,
                 "batchsweep run: note: --latency-slo budgets the training step (--mode train, the default); "
                 "for a serving latency budget add --mode infer\n");

  Report report;
  report.tool.version = BSW_VERSION;
  report.tool.git_commit = BSW_GIT_COMMIT;
  report.created_at = now_iso8601();
  report.command = argv;
  report.device = backend->device(s.sweep.precision);
  report.settings = settings_json(s, model, to_string(backend->kind()));
  report.warnings = model.notes;
  report.warnings.insert(report.warnings.end(), graph.notes.begin(), graph.notes.end());
  if (checkpointing_note) report.warnings.push_back(*checkpointing_note);
  ExecutionPaths paths;  // as the sweep plans its points (cuda), for the note after it
  if (backend->kind() == BackendKind::cuda) {
    // The sweep resolves them again (from the backend's cache) and plans every point with them.
    paths = resolve_execution_paths(*backend, graph, s.sweep);
    nlohmann::json p = {{"attention", to_string(paths.attention)}, {"conv", to_string(paths.conv)}};
    if (!paths.note.empty()) {
      p["note"] = paths.note;
      report.warnings.push_back(paths.note);
    }
    report.device.details["execution_paths"] = std::move(p);
  }

  std::optional<Telemetry> telemetry;
  if (s.telemetry == "on" || (s.telemetry == "auto" && backend->kind() == BackendKind::cuda)) {
    TelemetryOptions telemetry_options;
    if (report.device.details.contains("pci_bus_id"))
      telemetry_options.device = report.device.details["pci_bus_id"].get<std::string>();
    telemetry = Telemetry::open(telemetry_options);
    report.device.details["telemetry"] =
        telemetry->available() ? nlohmann::json{{"library", telemetry->library_path()},
                                                {"device", telemetry->device().name},
                                                {"unsupported", telemetry->unsupported_readings()}}
                               : nlohmann::json{{"unavailable", telemetry->unavailable_reason()}};
    if (!telemetry->available()) report.warnings.push_back(telemetry->unavailable_reason());
  } else {
    // Said in the report, not warned about: nothing was asked for that could not be done.
    report.device.details["telemetry"] = {
        {"unavailable", s.telemetry == "off" ? std::string("--telemetry off")
                                             : fmt::format("--telemetry auto samples GPUs only ({} backend); "
                                                           "--telemetry on asks NVML anyway",
                                                           to_string(backend->kind()))}};
  }

  SweepSettings sweep = s.sweep;
  std::optional<ResumeSource> resume;
  if (!s.resume_path.empty()) resume = load_resume(s.resume_path, report, sweep);
  // Resumed into its own file: that report is on disk, and --resume takes it again.
  {
    std::error_code ec;  // ./r.json and r.json are one file
    g_report_on_disk.store(!s.resume_path.empty() && !exports.json_path.empty() && exports.json_path != "-" &&
                           std::filesystem::equivalent(s.resume_path, exports.json_path, ec) && !ec);
  }

  SignalGuard signals;
  report.state = "in_progress";  // what the rewrites after each point say; a killed run leaves it so
  AnalysisOptions partial_options = options;  // the rewrites after each point hold a sweep still running
  partial_options.unfinished = true;
  ExportingObserver observer(report, exports, partial_options, s.quiet, telemetry ? &*telemetry : nullptr);
  // A rewrite mid-sweep says what a stop there would: which batches came from the earlier report, and
  // which of its points are kept though not reached yet.
  if (resume)
    observer.set_rewrite_notes(
        [&](Report& noted) { note_resume(noted, *resume, observer.swept(), true, exports.json_path); });
  SweepOutcome outcome;
  try {
    outcome = run_sweep(*backend, graph, sweep, observer);
  } catch (const Error& e) {
    if (e.exit_code() == kExitRuntime) {
      // The warnings on the points that finished (one cut short by --timeout, say) stay with them, on
      // stderr too where the table is not on a terminal, as at the end of a sweep.
      const std::vector<std::string>& finished = observer.sweep_warnings();
      report.warnings.insert(report.warnings.end(), finished.begin(), finished.end());
      say_unsaid_warnings(report.warnings, observer.said(), exports);
      keep_fatal_error(report, exports, e, partial_options);
    }
    throw;
  }

  report.points = std::move(outcome.points);
  report.warnings.insert(report.warnings.end(), outcome.warnings.begin(), outcome.warnings.end());
  if (!outcome.search_summary.empty()) report.settings["search"] = outcome.search_summary;
  if (outcome.untimed_fit)
    report.settings["untimed_fit"] = {{"batch", outcome.untimed_fit->batch},
                                      {"reason", outcome.untimed_fit->reason}};
  report.settings["measured_points"] = outcome.measured_points;
  if (resume) note_resume(report, *resume, observer.swept(), outcome.interrupted, exports.json_path);
  const int sig = g_signal.load();
  const char* sig_name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  // Interrupted before any batch finished: nothing was measured, so an earlier file at an export's path (a
  // finished run's report) is left as it was, not replaced by one that holds no point.
  ExportSettings final_exports = exports;
  if (outcome.interrupted && report.points.empty()) {
    report.warnings.push_back(fmt::format(
        "interrupted by {} before any batch finished: the report holds no point and its analysis nothing{}",
        sig_name, keep_earlier_exports(final_exports)));
  } else if (outcome.interrupted) {
    std::error_code ec_unused;
    report.warnings.push_back(fmt::format(
        "interrupted by {}: the report holds the {} finished point(s), and its analysis covers only those{}",
        sig_name, report.points.size(),
        // Only a report in a file can be resumed from (not stdout, a pipe or a device): one there, or one the
        // write below creates (a resume into a new file interrupted before its first point).
        is_regular_file(exports.json_path) || (!exports.json_path.empty() && exports.json_path != "-" &&
                                               !std::filesystem::exists(exports.json_path, ec_unused))
            ? fmt::format(" (the same command with --resume {} measures the rest)", exports.json_path)
            : std::string()));
  }
  report.state = outcome.interrupted ? "interrupted" : "complete";
  AnalysisOptions final_options = options;
  final_options.untimed_fit = outcome.untimed_fit;
  // Stopped in a later --rounds round, it lacks rounds, not batches: the analysis has them all.
  final_options.unfinished = report_view::lacks_batches(report);
  report.analysis = analyze(report.points, final_options);
  if (auto w = batchnorm_split_warning(graph, sweep.mode, report.analysis)) report.warnings.push_back(*w);
  say_unsaid_warnings(report.warnings, observer.said(), exports);
  g_final_writes.store(true);
  print_final(report, final_exports);
  note_checkpointing(graph, sweep, backend->kind(), paths, report);
  if (outcome.interrupted) return sig == SIGTERM ? 143 : kExitInterrupted;
  // A signal after the last point finished (during the analysis or the writes): the report is complete, and
  // the exit says the run was asked to stop, as `timeout` or a Ctrl-C expects.
  if (const int late = g_signal.load(); late != 0) {
    std::fprintf(stderr, "batchsweep: %s came after the last batch finished: the report is complete\n",
                 late == SIGTERM ? "SIGTERM" : "SIGINT");
    return late == SIGTERM ? 143 : kExitInterrupted;
  }
  return recommendation_exit(report, "batchsweep");
}

using report_view::effective_batch_setting;

// Which analysis flags the command line gave (the rest come from the run's settings).
struct GivenFlags {
  bool no_latency_slo = false;
  bool no_request_rate = false;
  bool saturation = false;
  bool knee_sensitivity = false;
  bool latency_percentile = false;
  bool no_price_per_hour = false;
};

struct RunAnalysis {
  AnalysisFlags flags;  // the command line's, with the run's values where a flag was not given
  AnalysisOptions options;
  std::vector<std::string> kept;     // "--saturation 90": the run's values taken
  std::vector<std::string> ignored;  // "settings.saturation_pct 400 out of range": not taken
};

// A flag given now replaces the run's value; without it the run's value holds (re-exporting a report, or
// changing one flag, keeps the rest of its answer; compare analyses each run as it was run). Values out of
// their flag's range (a hand-edited report) are not taken.
RunAnalysis run_analysis(const Report& report, const AnalysisFlags& given_flags, const GivenFlags& given) {
  RunAnalysis out;
  AnalysisFlags& flags = out.flags;
  flags = given_flags;
  const auto run_value = [&](const char* key, double lo, double hi) -> std::optional<double> {
    if (!report.settings.is_object()) return std::nullopt;
    const auto it = report.settings.find(key);
    if (it == report.settings.end() || it->is_null()) return std::nullopt;
    if (!it->is_number() || !(it->get<double>() > lo && it->get<double>() <= hi)) {
      out.ignored.push_back(fmt::format("settings.{} {} {}", key, it->dump(),
                                        it->is_number() ? "out of range" : "not a number"));
      return std::nullopt;
    }
    return it->get<double>();
  };
  constexpr double kHuge = std::numeric_limits<double>::max();
  if (!flags.price_per_hour && !given.no_price_per_hour) {
    flags.price_per_hour = run_value("price_per_hour", 0.0, kMaxPricePerHour);
    if (flags.price_per_hour) out.kept.push_back(fmt::format("--price-per-hour {:g}", *flags.price_per_hour));
  }
  if (!flags.request_rate && !given.no_request_rate) {
    // "max": the most within the budget (run --request-rate max).
    const auto it =
        report.settings.is_object() ? report.settings.find("request_rate") : report.settings.end();
    flags.request_rate = it != report.settings.end() && *it == "max" ? std::optional<double>(kRequestRateMax)
                                                                     : run_value("request_rate", 0.0, kHuge);
    if (flags.request_rate)
      out.kept.push_back(fmt::format("--request-rate {}", request_rate_text(*flags.request_rate)));
  }
  if (flags.request_rate && !flags.max_queue_delay_ms) {
    if (const auto v = run_value("max_queue_delay_ms", -1.0, kHuge); v && *v >= 0.0) {
      flags.max_queue_delay_ms = *v;
      if (*v > 0) out.kept.push_back(fmt::format("--max-queue-delay {:g}", *v));
    }
  }
  if (flags.max_queue_delay_ms && !flags.request_rate)
    throw UsageError(
        "--max-queue-delay: the batcher's hold needs a rate: give --request-rate (the run had none)");
  const bool training =
      report.settings.is_object() && report.settings.contains("mode") && report.settings["mode"] == "train";
  if (flags.request_rate && training)
    throw UsageError(
        fmt::format("{}the report is of a training sweep (settings.mode train), whose steps serve "
                    "no requests: serving needs a --mode infer sweep",
                    given_flags.request_rate ? "--request-rate: " : "the run's --request-rate: "));
  if (!flags.latency_slo_ms && !given.no_latency_slo) {
    flags.latency_slo_ms = run_value("latency_slo_ms", 0.0, kHuge);
    if (flags.latency_slo_ms) out.kept.push_back(fmt::format("--latency-slo {:g}", *flags.latency_slo_ms));
  }
  // The run's "max" kept, and its budget dropped: say which flag to give with --no-latency-slo.
  if (given.no_latency_slo && !given_flags.request_rate && is_request_rate_max(flags.request_rate))
    throw UsageError(
        "--no-latency-slo: the run's --request-rate max is the most requests/s within its budget, which "
        "needs one: give --no-request-rate too, or a --request-rate PER_S to serve without a budget");
  if (!given.saturation) {
    if (const auto v = run_value("saturation_pct", 1.0 - 1e-9, 100.0); v && *v != flags.saturation_pct) {
      flags.saturation_pct = *v;
      out.kept.push_back(fmt::format("--saturation {:g}", *v));
    }
  }
  if (!given.knee_sensitivity) {
    if (const auto v = run_value("knee_sensitivity", 0.0, kHuge); v && *v != flags.knee_sensitivity) {
      flags.knee_sensitivity = *v;
      out.kept.push_back(fmt::format("--knee-sensitivity {:g}", *v));
    }
  }
  // The percentile only means something beside a budget: given without one it is an error, and the run's is
  // said only where there is a budget to hold it. Without one (--no-latency-slo) it is still carried into the
  // settings written, so a later analyze that gives a budget judges at the run's percentile, not at p99.
  require_budget_for_percentile(given.latency_percentile, flags.latency_slo_ms.has_value(),
                                flags.request_rate.has_value());
  if (!given.latency_percentile) {
    if (const auto v = run_value("latency_percentile", 0.0, 100.0); v && *v != flags.latency_percentile) {
      if (is_latency_percentile(*v)) {
        flags.latency_percentile = *v;
        if (flags.latency_slo_ms || flags.request_rate)
          out.kept.push_back(fmt::format("--latency-percentile {:g}", *v));
      } else if (flags.latency_slo_ms || flags.request_rate) {
        out.ignored.push_back(
            fmt::format("settings.latency_percentile {:g} not {}", *v, kLatencyPercentileRule));
      }
    }
  }
  out.options = analysis_options(flags);
  out.options.unfinished = report_view::lacks_batches(report);
  // What run's --batch auto found to fit without timing it (settings.untimed_fit), where well-formed.
  if (report.settings.is_object()) {
    const auto it = report.settings.find("untimed_fit");
    if (it != report.settings.end() && it->is_object() && it->contains("batch") &&
        (*it)["batch"].is_number_integer() && it->contains("reason") && (*it)["reason"].is_string())
      out.options.untimed_fit = UntimedFit{(*it)["batch"].get<int64_t>(), (*it)["reason"].get<std::string>()};
    // run --effective-batch N: its points are splits of N, even where one accumulation of them ran.
    out.options.effective_batch = effective_batch_setting(report);
  }
  return out;
}
int analyze_command(const AnalyzeSettings& s, const std::vector<std::string>& argv) {
  ExportSettings exports = s.exports;
  check_exports(exports, {{"the report analyze reads", s.report_path, true}});
  Report report = read_report(s.report_path);
  check_config_target_mode(exports.config_for, report_view::title(report).mode == "infer", true);
  if (const std::optional<int64_t> e = report_view::global_effective_batch(report);
      e && !exports.config_for.empty() && report_view::title(report).mode != "infer")
    check_effective_batch_world_size(*e, config_world_size(report, exports));
  if (const std::optional<int64_t> world = report_view::world_size_setting(report);
      world && !exports.config_for.empty() && !exports.world_size_given)
    std::fprintf(stderr,
                 "batchsweep analyze: note: --config-for writes for the run's --world-size %lld (give "
                 "--world-size to write for another)\n",
                 static_cast<long long>(*world));
  if (report.state == "in_progress")
    std::fprintf(
        stderr,
        "batchsweep analyze: %s was written while its sweep ran (state in_progress): the run stopped "
        "before it finished (killed, or failed) or is still running, and the analysis covers the %zu "
        "point(s) it holds\n",
        s.report_path.c_str(), report.points.size());
  if (report.state == "interrupted")
    std::fprintf(stderr,
                 "batchsweep analyze: %s is of an interrupted sweep (state interrupted): the analysis covers "
                 "the %zu point(s) it finished\n",
                 s.report_path.c_str(), report.points.size());
  const RunAnalysis run =
      run_analysis(report, s.analysis,
                   {s.no_latency_slo, s.no_request_rate, s.saturation_given, s.knee_sensitivity_given,
                    s.latency_percentile_given, s.no_price_per_hour});
  const AnalysisFlags& flags = run.flags;
  if (!run.kept.empty())
    std::fprintf(stderr, "batchsweep analyze: the run's %s kept (give the flag to change it)\n",
                 fmt::format("{}", fmt::join(run.kept, ", ")).c_str());
  if (!run.ignored.empty())
    std::fprintf(stderr, "batchsweep analyze: %s: not taken (the default or the flag holds)\n",
                 fmt::format("{}", fmt::join(run.ignored, ", ")).c_str());
  const AnalysisOptions options = run.options;
  // A budget on a report whose ok points carry no step times (a hand-made one: ours always do) is a question
  // the input cannot answer, not a model that met no budget (exit 4).
  if (options.latency_slo_ms) {
    const auto ok = [](const Point& p) { return p.status == PointStatus::ok; };
    const bool any_ok = std::any_of(report.points.begin(), report.points.end(), ok);
    const bool any_latency = std::any_of(report.points.begin(), report.points.end(), [&](const Point& p) {
      return ok(p) && step_latency_ms(p, options.latency_percentile).has_value();
    });
    // Kept from the run (no flag given): said, with the flag that drops it.
    const std::string whose =
        s.analysis.latency_slo_ms
            ? std::string("--latency-slo")
            : fmt::format("the run's --latency-slo {:g} (kept; --no-latency-slo drops it)",
                          *options.latency_slo_ms);
    if (any_ok && !any_latency)
      throw UsageError(fmt::format(
          "{}: no ok point of {} has a step time to hold to it: a budget needs each point's step_ms.{} or "
          "samples_ms",
          whose, s.report_path, latency_name(options.latency_percentile)));
  }
  report.analysis = analyze(report.points, options);
  report.settings["price_per_hour"] =
      flags.price_per_hour ? nlohmann::json(*flags.price_per_hour) : nlohmann::json();
  report.settings["knee_sensitivity"] = flags.knee_sensitivity;
  report.settings["saturation_pct"] = flags.saturation_pct;
  report.settings["latency_slo_ms"] =
      flags.latency_slo_ms ? nlohmann::json(*flags.latency_slo_ms) : nlohmann::json();
  report.settings["latency_percentile"] = percentile_setting(flags.latency_percentile);
  if (flags.request_rate) {
    report.settings["request_rate"] = request_rate_setting(*flags.request_rate);
    report.settings["max_queue_delay_ms"] = flags.max_queue_delay_ms.value_or(0.0);
  } else if (report.settings.is_object()) {
    report.settings.erase("request_rate");
    report.settings.erase("max_queue_delay_ms");
  }
  // command, created_at and tool stay the run's (what measured the points); this says what analysed them.
  report.settings["analyzed"] = {
      {"command", argv}, {"at", now_iso8601()}, {"version", BSW_VERSION}, {"git_commit", BSW_GIT_COMMIT}};
  print_final(report, exports);
  return recommendation_exit(report, "batchsweep analyze");
}

namespace {

// Whether a report's batches were chosen by a search (--batch auto, --effective-batch) rather than listed.
bool searched(const Report& r) {
  if (!r.settings.is_object()) return false;
  const auto batch = r.settings.find("batch");
  const auto effective = r.settings.find("effective_batch");
  return r.settings.contains("search") || (batch != r.settings.end() && *batch == "auto") ||
         (effective != r.settings.end() && !effective->is_null());
}

// The batches (with their accumulation) that ran ok in `baseline` and that `run` holds no point of.
std::vector<std::string> unswept_baseline_batches(const Report& baseline, const Report& run) {
  std::vector<std::string> out;
  for (const Point& b : baseline.points) {
    if (b.status != PointStatus::ok) continue;
    const bool swept = std::any_of(run.points.begin(), run.points.end(), [&](const Point& p) {
      return p.batch == b.batch && p.accumulation == b.accumulation;
    });
    if (!swept) out.push_back(batch_label(b.batch, b.accumulation));
  }
  return out;
}

}  // namespace

void remove_stale_gate_exports(const std::vector<std::pair<std::string, std::string>>& exports,
                               std::string_view why) {
  namespace fs = std::filesystem;
  for (const auto& [flag, typed] : exports) {
    if (typed.empty() || typed == "-") continue;
    std::error_code error;
    const fs::path target = fs::is_symlink(typed, error) ? fs::canonical(typed, error) : fs::path(typed);
    if (error || !fs::is_regular_file(target, error) || fs::file_size(target, error) > (uint64_t{64} << 20))
      continue;
    const std::string content = read_file_or_empty(target.string());
    // Only an earlier answer of compare's: a report, a model or a README at a mistyped path is not touched.
    bool answer = false;
    if (flag == "--markdown") {
      answer = content.starts_with("## batchsweep compare\n");
    } else {
      const nlohmann::json doc = nlohmann::json::parse(content, nullptr, /*allow_exceptions=*/false);
      answer = doc.is_object() && doc.value("kind", std::string()) == "compare";
    }
    if (!answer || !fs::remove(target, error)) continue;
    const std::string what = target == fs::path(typed)
                                 ? fmt::format("{} ({})", typed, flag)
                                 : fmt::format("{}, the file {} {} links to", target.string(), flag, typed);
    std::fprintf(
        stderr,
        "batchsweep compare: removed %s, an earlier gate's answer: %s, and a script must not read that "
        "file's answer as this one's\n",
        what.c_str(), std::string(why).c_str());
  }
}

int compare_command(const CompareSettings& input, const std::vector<std::string>& argv) {
  CompareSettings s = input;
  s.json_path = resolve_export_path(s.json_path, "--json");
  s.markdown_path = resolve_export_path(s.markdown_path, "--markdown");
  check_writable(s.json_path, "--json");
  check_writable(s.markdown_path, "--markdown");
  const std::vector<ExportPath> exports = {{"--json", s.json_path, input.json_path},
                                           {"--markdown", s.markdown_path, input.markdown_path}};
  check_distinct_exports(exports);
  std::vector<InputFile> inputs;
  for (const std::string& path : s.report_paths) inputs.push_back({"a report compare reads", path});
  check_inputs_spared(exports, inputs);
  std::vector<InputStream> streams;
  for (const std::string& path : s.report_paths) streams.push_back({"report", path});
  check_streams_read_once(streams);
  // A gate that cannot compare at all (a report missing or unreadable, runs of different modes) has no
  // answer to write, and an export left from an earlier job would read as this one's: removed, and said.
  // (Gates that compare and refuse write their refusal there instead, below.)
  struct StaleGateExports {
    const CompareSettings& settings;
    const std::vector<ExportPath>& exports;
    bool compared = false;
    ~StaleGateExports() {
      if (compared || !settings.fail_on_regression_pct) return;
      std::vector<std::pair<std::string, std::string>> paths;
      for (const ExportPath& e : exports) paths.emplace_back(std::string(e.flag), e.typed);
      remove_stale_gate_exports(paths);
    }
  } stale_exports{s, exports};
  // Counted here, after the guard: a CI job whose candidate's path was an empty variable gave one report.
  if (s.report_paths.size() < 2 || s.report_paths.size() > 64)
    throw UsageError(
        fmt::format("compare: give two to 64 reports, the baseline first (A.json B.json ...), not {}",
                    s.report_paths.size()));
  std::vector<Report> reports;
  for (const std::string& path : s.report_paths) {
    reports.push_back(read_report(path));
    // Each run analysed as analyze would (its own settings): a hand-edited point or a report whose
    // analysis was left out (the PyTorch peer's) is summarised from its points, not from a stale block.
    Report& report = reports.back();
    // compare --request-rate: every run served at one rate (a training sweep's steps serve no requests).
    AnalysisFlags flags;
    flags.request_rate = s.request_rate;
    // One rate is one batcher for every run: its hold 0 unless given, not each report's own.
    flags.max_queue_delay_ms = s.request_rate ? s.max_queue_delay_ms.value_or(0.0) : s.max_queue_delay_ms;
    if (s.request_rate && report.settings.is_object() && report.settings.value("mode", "") == "train")
      throw UsageError(fmt::format(
          "--request-rate: {} is a training sweep (settings.mode train), whose steps serve no requests: "
          "serving compares --mode infer sweeps",
          path));
    if (is_request_rate_max(s.request_rate) && !report_view::latency_budget_ms(report))
      throw UsageError(
          fmt::format("--request-rate max: {} has no latency budget (settings.latency_slo_ms), and the most "
                      "requests/s is "
                      "the most within one: analyze it with --latency-slo MS first",
                      path));
    const RunAnalysis run = run_analysis(report, flags, GivenFlags{});
    if (!run.ignored.empty())
      std::fprintf(stderr, "batchsweep compare: %s: %s: not taken (the default holds)\n", path.c_str(),
                   fmt::format("{}", fmt::join(run.ignored, ", ")).c_str());
    report.analysis = analyze(report.points, run.options);
  }
  // What the gate holds runs to: PCT everywhere, unless --fail-on-latency-regression gave the latency
  // findings their own (validated: a number in 0..100, or off).
  std::optional<GateThresholds> gate;
  if (s.fail_on_regression_pct) {
    gate = uniform_gate(*s.fail_on_regression_pct);
    if (!s.fail_on_latency_regression.empty()) {
      gate->latency_given = true;
      gate->latency_pct = s.fail_on_latency_regression == "off"
                              ? std::nullopt
                              : std::optional<double>(std::stod(s.fail_on_latency_regression) + 0.0);
    }
  }
  CompareOptions options;
  options.tail_gated_in_training = gate && gate->latency_given && gate->latency_pct;
  options.latency_gated = !gate || gate->latency_pct.has_value();
  options.allow_model_mismatch = s.allow_model_mismatch;
  options.names = s.report_paths;
  const CompareResult result = compare_reports(reports, options);
  stale_exports.compared = true;
  std::vector<std::string> export_notes;  // said on stderr, and in the exports' notes (not the table's twice)
  // Not only in the table: a CI gate given one file twice passes, and its log should say why.
  for (const std::string& note : result.same_run_notes)
    std::fprintf(stderr, "batchsweep: warning: %s\n", note.c_str());
  std::vector<Regression> found;
  // Why the gate cannot pass (exit 2), where it cannot. The exports are still written, with the gate's answer
  // failed and this reason, so a CI job reading an export never finds an earlier run's "passed" there.
  const auto gate_refusal = [&]() -> std::optional<std::string> {
    // A run given as its own baseline (a CI variable naming one file twice, or a copy of it): every verdict
    // compares the run with itself, and the gate could never fail.
    if (!result.copies_of_baseline.empty()) {
      std::vector<std::string> names;
      for (size_t i : result.copies_of_baseline) names.push_back(result.runs[i].name);
      return fmt::format(
          "--fail-on-regression {:g}: {} {} the baseline itself ({}, the same points), so the gate compares "
          "a "
          "run with itself and could never fail (give the baseline's report and the new run's)",
          *s.fail_on_regression_pct, fmt::join(names, " and "), names.size() == 1 ? "is" : "are",
          result.runs[0].name);
    }
    // A run that did not finish lacks batches for no reason of its own: the gate would pass them unjudged.
    for (const RunSummary& run : result.runs) {
      if (incomplete(run) && !s.allow_incomplete)
        return fmt::format(
            "--fail-on-regression {:g}: {} did not finish: {}; {} (run it again, or pass "
            "--allow-incomplete to judge the batches it holds)",
            *s.fail_on_regression_pct, run.name, incomplete_why(run),
            run.first_round_finished ? "the gate judges finished runs only"
                                     : "the batches it lacks would pass unjudged");
    }
    // Under the minimum effect the throughput test calls nothing slower: said, since the latency budget's
    // gate does take such a PCT (0: any breach).
    if (gate->pct < result.min_effect_pct)
      std::fprintf(
          stderr, "%s",
          fmt::format("batchsweep compare: note: --fail-on-regression {:g}: compare calls no throughput "
                      "change under {:g}% slower, so the throughput gate acts at {:g}%{}\n",
                      gate->pct, result.min_effect_pct, result.min_effect_pct,
                      gate->latency_pct && !gate->latency_given
                          ? fmt::format("; the latency budget's gate takes {:g}% as given", gate->pct)
                          : std::string())
              .c_str());
    found = find_regressions(result, *gate);
    // A gate that compared nothing must not pass: no batch in every run, or none that ran in every run.
    // Judged: a verdict reached, not "same" for want of a second step (one step's noise is unknown). A gate
    // whose every row is unjudged compared nothing it could tell apart: a 9% regression would pass.
    // Each run on its own: beside a run the gate did compare, one that shares no judged batch with the
    // baseline would pass unjudged.
    std::size_t run = 1;
    bool comparable = false, compared = true, shares_a_row = false;
    for (; run < reports.size(); ++run) {
      const auto any_delta = [&](auto&& keep) {
        return std::any_of(result.rows.begin(), result.rows.end(),
                           [&](const CompareRow& row) { return keep(row.deltas[run - 1]); });
      };
      comparable = any_delta([](const CompareDelta& d) { return d.verdict != Verdict::not_comparable; });
      compared = any_delta([](const CompareDelta& d) {
        return d.verdict != Verdict::not_comparable && !d.unjudged() && !d.baseline_measurement;
      });
      shares_a_row = std::any_of(result.rows.begin(), result.rows.end(),
                                 [&](const CompareRow& row) { return !row.runs[run].absent; });
      if (!compared && found.empty()) break;  // a gate that fails anyway says its regressions (exit 3)
    }
    if (run < reports.size()) {
      // Named where there are several runs: which one the gate could not judge.
      const bool several = reports.size() > 2;
      const std::string who = several ? fmt::format(" {} ({})", run_letter(run), result.runs[run].name) : "";
      // Every batch it shares with the baseline is the baseline's own measurement (run --resume took them
      // from its report): it measured nothing the gate could judge.
      bool shared = false, all_taken = true;
      for (const CompareRow& row : result.rows) {
        if (row.runs[run].absent || row.runs.front().absent) continue;
        shared = true;
        all_taken &= row.deltas[run - 1].baseline_measurement;
      }
      // The other way round: the baseline is the report resumed from this run's.
      const bool baseline_took =
          !reports[run].created_at.empty() &&
          std::any_of(reports.front().points.begin(), reports.front().points.end(),
                      [&](const Point& p) { return p.resumed_from == reports[run].created_at; }) &&
          std::all_of(reports[run].points.begin(), reports[run].points.end(),
                      [](const Point& p) { return p.resumed_from.empty(); });
      if (shared && all_taken && baseline_took)
        return fmt::format(
            "--fail-on-regression {:g}: the baseline {} took the batches it shares with {} from that run's "
            "report (run --resume; its points' resumed_from), so the gate would compare {} with itself (give "
            "as the baseline a report measured on its own, not one resumed from the run it judges)",
            *s.fail_on_regression_pct, result.runs.front().name, result.runs[run].name,
            result.runs[run].name);
      if (shared && all_taken)
        return fmt::format(
            "--fail-on-regression {:g}: {} measured none of the batches it shares with the baseline on its "
            "own: each is the baseline's own measurement, or holds its steps beside later --rounds (run "
            "--resume took it from the baseline's report, or both took it from one earlier run; its points' "
            "resumed_from), so the gate would compare the baseline with itself (run the new sweep without "
            "that --resume)",
            *s.fail_on_regression_pct, result.runs[run].name);
      // A batch is compared at one accumulation: runs of other accumulations share no row, whatever their
      // batch lists, and "sweep the same batches" would not help.
      const auto accumulations = [](const Report& r) {
        std::set<int64_t> out;
        for (const Point& p : r.points) out.insert(p.accumulation);
        return fmt::format("{}", fmt::join(out, ", "));
      };
      std::string hint = "sweep the same batches, e.g. the baseline's --batch list";
      // Effective-batch sweeps have no --batch list: their splits are of their N.
      for (std::size_t i = 0; i < reports.size(); ++i)
        if (effective_batch_setting(reports[i])) {
          hint = "sweep the same splits: the same --effective-batch N in every run";
          break;
        }
      // A run with no points at all (interrupted before one finished) shares no batch whatever it swept.
      const auto empty =
          std::find_if(reports.begin(), reports.end(), [](const Report& r) { return r.points.empty(); });
      if (empty != reports.end()) {
        const auto i = static_cast<std::size_t>(empty - reports.begin());
        hint = fmt::format("{} ({}) has no points: it stopped before any finished", run_letter(i),
                           result.runs[i].name);
      }
      for (std::size_t i = 1; i < reports.size() && empty == reports.end(); ++i) {
        if (accumulations(reports[i]) == accumulations(reports[0])) continue;
        hint = fmt::format(
            "the runs' accumulations differ, A {} and {} {}, and a batch is compared at one accumulation: "
            "sweep them with the same --accumulation",
            accumulations(reports[0]), run_letter(i), accumulations(reports[i]));
        break;
      }
      if (comparable)
        return fmt::format(
            "--fail-on-regression {:g}:{} every batch {} ran ok timed one step in one of them (a step "
            "past --timeout), whose noise is unknown, so no change could be judged (raise --timeout so each "
            "point takes several steps)",
            *s.fail_on_regression_pct, several ? who + ":" : who,
            several ? "it and the baseline" : "both runs");
      if (several)
        return fmt::format(
            "--fail-on-regression {:g}:{} {}, so it was not compared and would pass unjudged ({})",
            *s.fail_on_regression_pct, who,
            !shares_a_row ? "shares no batch with the baseline" : "ran ok at no batch the baseline ran ok",
            hint);
      return fmt::format("--fail-on-regression {:g}: {}, so nothing was compared ({})",
                         *s.fail_on_regression_pct,
                         !shares_a_row ? "no batch of the baseline's is in another run"
                                       : "no batch the baseline shares with another run ran ok in both",
                         hint);
    }
    // A finished run whose batch list left out batches the baseline ran ok: the same hole (a CI job whose
    // --batch shrank would weaken its own gate). Searches (--batch auto, --effective-batch) choose their
    // batches by what they measure, so two of them differ by nature: said, not refused.
    for (std::size_t i = 1; i < reports.size(); ++i) {
      const std::vector<std::string> unswept = unswept_baseline_batches(reports[0], reports[i]);
      if (unswept.empty()) continue;
      const std::string list = fmt::format("{}", fmt::join(unswept, ", "));
      // Where the gate already fails on what it judged, the regressions are the answer (exit 3), named.
      // A search beside a baseline that swept a list is a job whose flags changed, and would weaken its gate
      // as a shrunk list does: refused as that is. Beside a baseline that searched, batches differ by nature.
      const char* why = searched(reports[0])
                            ? "the baseline is a search, which chooses its batches by what it "
                              "measures"
                        : s.allow_incomplete ? "--allow-incomplete"
                        : !found.empty()     ? "the gate fails on the regressions below anyway"
                                             : nullptr;
      if (why) {
        // In the exports too: a PR comment or a script reading the gate sees what passed unjudged.
        const std::string note =
            fmt::format("{} did not sweep batch{} {}, which ran ok in the baseline: not judged ({})",
                        result.runs[i].name, unswept.size() == 1 ? "" : "es", list, why);
        std::fprintf(stderr, "batchsweep compare: note: %s\n", note.c_str());
        export_notes.push_back(note);
      } else
        return fmt::format(
            "--fail-on-regression {:g}: {}{} did not sweep batch{} {}, which ran ok in the baseline {}: {} "
            "would pass unjudged (sweep the baseline's --batch list, or pass --allow-incomplete to judge the "
            "batches both swept)",
            *s.fail_on_regression_pct, result.runs[i].name,
            searched(reports[i]) ? ", a search where the baseline swept a --batch list," : "",
            unswept.size() == 1 ? "" : "es", list, result.runs[0].name, unswept.size() == 1 ? "it" : "they");
    }
    // Batches a run took from the baseline's own report (--resume): passed unjudged, and said so.
    for (std::size_t i = 1; i < reports.size(); ++i) {
      std::vector<std::string> taken;
      for (const CompareRow& row : result.rows)
        if (row.deltas[i - 1].baseline_measurement) taken.push_back(batch_label(row.batch, row.accumulation));
      if (taken.empty()) continue;
      const std::string note = fmt::format(
          "{}: batch{} {} {} the baseline's own measurement (run --resume took {}; resumed_from): not judged",
          result.runs[i].name, taken.size() == 1 ? "" : "es", fmt::join(taken, ", "),
          taken.size() == 1 ? "is" : "are", taken.size() == 1 ? "it" : "them");
      std::fprintf(stderr, "batchsweep compare: note: %s\n", note.c_str());
      export_notes.push_back(note);
    }
    return std::nullopt;
  };
  const std::optional<std::string> refused =
      s.fail_on_regression_pct ? gate_refusal() : std::optional<std::string>();
  // An export that cannot be written is exit 1, named, but only after the table and the gate's lines: a CI
  // log must still say what regressed, and the other export is still written.
  std::optional<Error> export_error;
  const auto export_to = [&](std::string_view flag, const std::string& path, const std::string& text) {
    try {
      write_output(flag, path, text);
    } catch (const Error& e) {
      if (!export_error) export_error = e;
      // A full disk or a file-size limit leaves the earlier gate's answer in place: after `|| true` a script
      // would read its "passed" as this gate's.
      if (s.fail_on_regression_pct)
        remove_stale_gate_exports({{std::string(flag), path}},
                                  "this gate's answer could not be written there");
    }
  };
  CompareResult exported = result;
  exported.notes.insert(exported.notes.end(), export_notes.begin(), export_notes.end());
  if (!s.markdown_path.empty())
    export_to("--markdown", s.markdown_path,
              format_compare_markdown(exported, gate, refused.value_or(std::string())));
  if (!s.json_path.empty()) {
    nlohmann::json doc = to_json(exported);
    // What wrote it and when, as a report says: a script reading the gate's answer can check both, and a
    // reader handed it for a report is told what it is.
    doc["kind"] = "compare";
    doc["schema_version"] = 1;
    doc["tool"] = {{"name", "batchsweep"}, {"version", BSW_VERSION}, {"git_commit", BSW_GIT_COMMIT}};
    doc["created_at"] = now_iso8601();
    doc["command"] = argv;
    // What exit 3 meant, for a script that reads the JSON rather than stderr.
    if (s.fail_on_regression_pct) {
      doc["gate"] = {{"fail_on_regression_pct", gate->pct},
                     {"fail_on_latency_regression_pct",
                      gate->latency_pct ? nlohmann::json(*gate->latency_pct) : nlohmann::json()},
                     {"passed", found.empty() && !refused},
                     {"regressions", regression_lines(found)},
                     {"findings", regressions_json(result, found)}};
      if (refused) doc["gate"]["refused"] = *refused;
    }
    export_to("--json", s.json_path, json_text(doc, 2) + "\n");
  }
  // An export on stdout keeps it to itself; the table then goes to stderr, as run's does.
  if (s.json_path == "-" || s.markdown_path == "-")
    std::fputs(format_compare(result, color_allowed(STDERR_FILENO)).c_str(), stderr);
  else
    std::fputs(format_compare(result, color_allowed(STDOUT_FILENO)).c_str(), stdout);
  if (s.fail_on_regression_pct) {
    // A verdict on a point whose steps never settled may be the machine's noise (another job on a shared
    // runner), not the code's: said beside the gate's answer, not only in the table.
    for (const std::string& note : result.short_notes)
      std::fprintf(stderr, "batchsweep: warning: %s\n", note.c_str());
    // A gate holds a run to its baseline as the same machine's, measured the same way, before and after:
    // across devices its "regressions" are the other card's speed, across CPU thread counts the runner's
    // size, and across measurement settings (paths, graphs, stopping rules) another step.
    for (const std::string& note : result.notes) {
      const char* why =
          note.starts_with("devices differ:")
              ? "the gate judges each run against A as if on one machine, so a slower card reads as a "
                "regression (to choose between cards, compare without --fail-on-regression)"
          : note.starts_with("CPU threads differ:")
              ? "the gate judges each run against A as if on one machine, so another thread count reads as "
                "a regression, or hides one (give both runs the same threads: OPENBLAS_NUM_THREADS, or the "
                "runner's size)"
          : note.find(": measured with other settings (") != std::string::npos
              ? "the gate judges each run against A as if measured alike, so what those settings change "
                "reads "
                "as a regression, or hides one"
              : nullptr;
      if (why) std::fprintf(stderr, "batchsweep: warning: %s: %s\n", note.c_str(), why);
    }
    // The gate's answer in words, with the runs' files: a CI log that shows only stderr says which file is
    // which letter and whether the job's gate passed, not only its exit code.
    if (!refused) {
      std::vector<std::string> files;
      for (std::size_t i = 0; i < result.runs.size(); ++i)
        files.push_back(fmt::format("{} {}", run_letter(i), result.runs[i].name));
      std::fprintf(stderr, "%s",
                   fmt::format("batchsweep: gate {} ({}; {}){}\n", found.empty() ? "passed" : "failed",
                               gate_flags(*gate), fmt::join(files, ", "),
                               found.empty() ? ""
                                             : fmt::format(": {} regression{}{}", found.size(),
                                                           found.size() == 1 ? "" : "s",
                                                           export_error ? "" : " (exit 3)"))
                       .c_str());
    }
    for (const Regression& r : found) std::fprintf(stderr, "batchsweep: regression: %s\n", r.text.c_str());
    // A slower finding between runs without --rounds rests on each run's own steps, which do not show how far
    // a rerun moves a mean (README: Rounds): said once, naming those runs, so a CI job knows what to try.
    std::vector<std::string> unrounded;
    const auto has_rounds = [](const Report& report) {
      return std::any_of(report.points.begin(), report.points.end(),
                         [](const Point& p) { return rounds_with_steps(p) >= 2; });
    };
    for (size_t i = 0; i < reports.size(); ++i) {
      const bool judged = std::any_of(found.begin(), found.end(), [&](const Regression& r) {
        return (r.kind == "slower" || r.kind == "geomean") && (i == 0 || r.run == i);
      });
      if (judged && !has_rounds(reports[i])) unrounded.push_back(run_letter(i));
    }
    if (!unrounded.empty())
      std::fprintf(
          stderr, "%s",
          fmt::format("batchsweep: note: {} {} swept without --rounds: a slower verdict rests on each "
                      "run's own steps, which do not show how far a rerun moves its means (idle reruns "
                      "of one CPU sweep differed by 4-6 times that); sweep both with --rounds 3, or "
                      "compare two runs of the baseline to see how far they differ (README: Rounds)\n",
                      fmt::join(unrounded, " and "), unrounded.size() == 1 ? "was" : "were")
              .c_str());
  }
  if (refused) {
    // Both said: the export that failed, then why the gate cannot pass, whose exit (2) is the answer.
    if (export_error) std::fprintf(stderr, "batchsweep: error: %s\n", export_error->what());
    throw InputError(*refused);
  }
  if (export_error) throw *export_error;
  return s.fail_on_regression_pct && !found.empty() ? kExitRegression : kExitOk;
}

namespace {

// Fills a described CUDA device's free memory: from NVML where it can say, which needs no CUDA context, else
// from cudaMemGetInfo, which creates one on that GPU (hundreds of MiB held until this process exits, on a
// GPU someone else may be using).
void add_free_memory(nlohmann::json& d) {
  const std::string name = d.value("name", std::string());
  const uint64_t cuda_total = d.value("memory_total_bytes", uint64_t{0});
  std::string why;
  std::optional<GpuMemory> memory;
  if (name.find(" MIG ") != std::string::npos || name.rfind("MIG ", 0) == 0) {
    why = "a MIG instance: NVML's memory is the whole GPU's";
  } else {
    TelemetryOptions options;
    options.device = d.value("pci_bus_id", std::string());
    memory = Telemetry::open(options).memory(why);
    // Telemetry's reasons end in ": telemetry unavailable"; here it is the memory reading that is.
    constexpr std::string_view kSuffix = ": telemetry unavailable";
    if (why.size() > kSuffix.size() && why.ends_with(kSuffix)) why.resize(why.size() - kSuffix.size());
    if (memory && cuda_total > 0 &&
        std::abs(static_cast<double>(memory->total_bytes) / static_cast<double>(cuda_total) - 1.0) > 0.1) {
      why = fmt::format("NVML's total ({}) is not this device's ({})", format_bytes(memory->total_bytes),
                        format_bytes(cuda_total));
      memory.reset();
    }
  }
  if (memory) {
    d["memory_free_bytes"] = memory->free_bytes;
    d["memory_used_bytes"] = memory->used_bytes;
    d["memory_source"] = "nvml";
    nlohmann::json processes = nlohmann::json::array();
    for (const GpuProcess& p : memory->other_processes)
      processes.push_back(
          {{"pid", p.pid}, {"used_bytes", p.used_bytes ? nlohmann::json(*p.used_bytes) : nlohmann::json()}});
    d["other_processes"] = processes;
    return;
  }
  d["memory_source"] = "cudaMemGetInfo";
  d["nvml_memory_unavailable"] = why;
  if (const std::optional<uint64_t> free_bytes = cuda_free_memory_bytes(d.value("index", 0)))
    d["memory_free_bytes"] = *free_bytes;
}

// "  memory: 15.50 GiB free, 512.00 MiB used (NVML); 1 other process: pid 4242 1.00 GiB"
std::string memory_line(const nlohmann::json& d) {
  std::string line = "  memory: ";
  line += d.contains("memory_free_bytes") ? format_bytes(d["memory_free_bytes"].get<uint64_t>()) + " free"
                                          : std::string("free unknown");
  if (d.value("memory_source", std::string()) == "nvml") {
    line += fmt::format(", {} used (NVML)", format_bytes(d.value("memory_used_bytes", uint64_t{0})));
    const nlohmann::json processes = d.value("other_processes", nlohmann::json::array());
    if (!processes.empty()) {
      std::vector<std::string> each;
      for (const nlohmann::json& p : processes)
        each.push_back(fmt::format("pid {} {}", p.value("pid", 0u),
                                   p["used_bytes"].is_number() ? format_bytes(p["used_bytes"].get<uint64_t>())
                                                               : std::string("(size not reported)")));
      line += fmt::format("; {} other process{}: {}", processes.size(), processes.size() == 1 ? "" : "es",
                          fmt::join(each, ", "));
    }
  } else {
    line += fmt::format(" (cudaMemGetInfo: {})", d.value("nvml_memory_unavailable", std::string("?")));
  }
  return line;
}

}  // namespace

int devices_command(const DevicesSettings& s) {
  nlohmann::json doc;
  doc["backends"] = compiled_backends();
  const DeviceInfo cpu = make_backend("cpu")->device(Precision::fp32);
  doc["cpu"] = {{"name", cpu.name}, {"memory_total_bytes", cpu.memory_total_bytes}, {"details", cpu.details}};
  // Calibrate first: the devices described afterwards then show the new rates, not the cached ones.
  if (s.calibrate) doc["calibration"] = calibrate_cuda(s.device);
  doc["cuda"] = describe_cuda_devices(/*free_memory=*/false);
  if (doc["cuda"].contains("devices"))
    for (nlohmann::json& d : doc["cuda"]["devices"]) add_free_memory(d);
  if (s.json) {
    std::cout << json_text(doc, 2) << "\n";
    return kExitOk;
  }
  std::cout << "backends compiled in: " << fmt::format("{}", fmt::join(compiled_backends(), ", ")) << "\n";
  std::cout << fmt::format("cpu: {} ({:.1f} GiB memory, {} BLAS threads)\n", cpu.name,
                           static_cast<double>(cpu.memory_total_bytes) / (1u << 30),
                           cpu.details.value("threads", 0));
  const nlohmann::json& cuda = doc["cuda"];
  if (cuda.contains("versions")) {
    std::cout << "cuda libraries:";
    for (const auto& [name, version] : cuda["versions"].items())
      std::cout << " " << name << " "
                << (version.is_string() ? version.get<std::string>() : json_text(version));
    std::cout << "\n";
  }
  const nlohmann::json devices = cuda.value("devices", nlohmann::json::array());
  if (devices.empty()) {
    std::cout << "cuda: no device: " << cuda.value("reason", std::string("none found")) << "\n";
  } else {
    for (const nlohmann::json& d : devices) {
      std::cout << fmt::format(
          "cuda:{} {} (sm {}, {} SMs, {:.1f} GiB, clocks {} MHz SM / {} MHz memory, bus {}, {})\n",
          d.value("index", 0), d.value("name", std::string("?")),
          d.value("compute_capability", std::string("?")), d.value("sms", 0),
          d.value("memory_total_bytes", uint64_t{0}) / double(1u << 30), d.value("sm_clock_mhz", 0),
          d.value("memory_clock_mhz", 0), d.value("pci_bus_id", std::string("?")),
          d.value("uuid", std::string("?")));
      std::cout << memory_line(d) << "\n";
      if (!d.contains("calibrated")) continue;
      const nlohmann::json& c = d["calibrated"];
      const auto rate = [&](const char* key) {
        const auto it = c.find(key);
        return it != c.end() && it->is_number() ? fmt::format("{:.1f}", it->get<double>()) : std::string("?");
      };
      std::cout << fmt::format("  calibrated TFLOP/s: bf16 {} fp16 {} tf32 {} fp32 {}; copy {} GB/s{}\n",
                               rate("bf16_tflops"), rate("fp16_tflops"), rate("tf32_tflops"),
                               rate("fp32_tflops"), rate("copy_gbps"),
                               c.contains("measured_at") && c["measured_at"].is_string()
                                   ? fmt::format(" (measured {})", c["measured_at"].get<std::string>())
                                   : std::string(" (this run)"));
    }
  }
  if (s.calibrate) std::cout << "calibration: " << json_text(doc["calibration"], 2) << "\n";
  return kExitOk;
}

int presets_command(const std::optional<std::string>& name) {
  if (name) {
    const std::string& shown = *name;
    const std::string_view text = shown.empty() ? std::string_view() : preset_text(shown);
    if (text.empty()) {
      const std::vector<std::string> names = preset_names();
      const std::vector<std::string_view> views(names.begin(), names.end());
      const std::optional<std::string_view> near = model_detail::nearest_name(shown, views);
      throw UsageError(fmt::format("presets {}: no such preset{} (presets: {})",
                                   shown.empty() ? std::string("''") : printable_text(shown),
                                   near ? fmt::format("; did you mean '{}'?", *near) : std::string(),
                                   fmt::format("{}", fmt::join(names, ", "))));
    }
    std::cout << text << (text.ends_with('\n') ? "" : "\n");
    return kExitOk;
  }
  // GFLOP per sample: the forward pass, and a training step (forward and backward).
  std::cout << fmt::format("{:<14} {:>14} {:>10} {:>12}  {}\n", "preset", "parameters", "fwd GFLOP",
                           "train GFLOP", "input");
  for (const std::string& preset : preset_names()) {
    const ModelSpec m = load_model(preset);
    const Graph g = lower(m);
    const std::string input = fmt::format("{}", fmt::join(g.input_shape, "x"));
    // Four significant digits: mlp's 0.0002366 GFLOP printed as 0.000 with three decimals.
    std::cout << fmt::format("{:<14} {:>14} {:>10.4g} {:>12.4g}  {} {}\n", preset, g.parameters,
                             g.forward_flops_per_sample / 1e9, g.train_flops_per_sample / 1e9,
                             to_string(m.input.type), input);
  }
  std::cout
      << "GFLOP per sample: fwd the forward pass, train a training step (forward and backward)\n"
         "parameters: a language model's output layer is its own linear, not tied to its embedding\n"
         "as Hugging Face's GPT-2 (124.4M) and BERT are: gpt2-small has 163.0M; the FLOPs are the same\n"
         "batchsweep presets NAME prints one's config; run and plan --set PATH=VALUE change a field of it\n";
  return kExitOk;
}

}  // namespace bsw::cli
