// Sweep progress on stderr, only on a terminal: "[3/9] batch 64 · elapsed 12.4 s · ETA ~31 s", redrawn in
// place at each point start and, from a ticker thread, every second during a point. Everywhere, unless
// --quiet: a line for each point that did not run (oom, error, ...) and one at the end. The text comes from
// pure functions the tests pin.
#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

// Progress is a courtesy: a stderr that cannot take it (closed, a full disk, a reader that left) must not
// stop the sweep, its exports or its exit code, so a failed write is dropped, never thrown (fmt::print
// throws).
void put(std::FILE* stream, std::string_view text) {
  if (!text.empty()) (void)std::fwrite(text.data(), 1, text.size(), stream);
}

constexpr std::string_view kBold = "\x1b[1m";
constexpr std::string_view kDim = "\x1b[2m";
constexpr std::string_view kReset = "\x1b[0m";

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Display width of a line: code points, not bytes ("·" is two bytes), escape sequences excluded.
std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b') {
      while (i < text.size() && text[i] != 'm') ++i;
      continue;
    }
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++width;
  }
  return width;
}

// The first `width` display columns of a line without escape sequences (whole UTF-8 code points).
std::string cut_to_width(const std::string& text, std::size_t width) {
  std::size_t columns = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && columns++ == width) return text.substr(0, i);
  }
  return text;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  if (seconds < 59.95) return fmt::format("{:.1f} s", seconds);
  const auto whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
  return fmt::format("{} h {:02} min", whole / 3600, whole % 3600 / 60);
}

std::string format_progress_line(const ProgressLine& line, bool color) {
  const std::string total = line.planned_total > 0
                                ? fmt::format("{}{}", line.total_is_estimate ? "~" : "", line.planned_total)
                                : std::string("?");
  const std::string batch = batch_label(line.batch, line.accumulation);
  std::string eta;
  if (line.eta_s) {
    // The ETA is an estimate: whole seconds under a minute, the duration format above.
    eta = *line.eta_s < 59.5 ? fmt::format(" · ETA ~{:.0f} s", std::max(0.0, *line.eta_s))
                             : fmt::format(" · ETA ~{}", format_duration(*line.eta_s));
  }
  const std::string_view bold = color ? kBold : "";
  const std::string_view dim = color ? kDim : "";
  const std::string_view reset = color ? kReset : "";
  const std::string in_point = line.point_s ? fmt::format(" · {} in this {}", format_duration(*line.point_s),
                                                          line.probe ? "probe" : "point")
                                            : std::string();
  return fmt::format("{}[{}/{}] {}batch {}{}{}{}{} · elapsed {}{}{}", bold, line.index, total,
                     line.probe ? "probing " : "", batch, reset,
                     line.probe        ? std::string(" (prepare only)")
                     : line.round > 1  ? fmt::format(" (round {}/{})", line.round, line.rounds)
                     : line.refinement ? std::string(" (refine)")
                                       : std::string(),
                     dim, in_point, format_duration(line.elapsed_s), eta, reset);
}

// A terminal that says it takes no escape codes (TERM=dumb: Emacs' shell, some CI log viewers) would show
// them as text.
bool color_allowed(int fd) {
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return isatty(fd) == 1 && (no_color == nullptr || no_color[0] == '\0') &&
         (term == nullptr || std::string_view(term) != "dumb");
}

ProgressOptions stderr_progress_options(bool quiet) {
  ProgressOptions options;
  options.quiet = quiet;
  options.terminal = isatty(STDERR_FILENO) == 1;
  options.color = color_allowed(STDERR_FILENO);
  options.tick_s = 1.0;
  options.columns = [] {
    winsize size{};
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 ? static_cast<int>(size.ws_col) : 0;
  };
  return options;
}

// The lock every write to the stream takes (the sweep's thread and the ticker's), and the ticker thread.
struct ProgressPrinter::Ticker {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;

  void join() {
    {
      const std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
  }
};

ProgressPrinter::ProgressPrinter(std::FILE* stream, ProgressOptions options)
    : stream_(stream), options_(std::move(options)), ticker_(std::make_unique<Ticker>()) {
  start_s_ = now_s();
  if (options_.quiet || !options_.terminal || !(options_.tick_s > 0)) return;
  const auto period = std::chrono::duration<double>(options_.tick_s);
  ticker_->thread = std::thread([this, period] {
    std::unique_lock lock(ticker_->mutex);
    // wait_for returns false when the period passed without a stop: redraw, still holding the lock. A
    // failed write (stderr closed, a hung-up terminal) ends the ticker, not the process.
    while (!ticker_->wake.wait_for(lock, period, [this] { return ticker_->stop; })) {
      try {
        if (current_) draw(*current_, current_start_s_, true);
      } catch (const std::exception&) {
        return;
      }
      if (std::ferror(stream_) != 0) return;  // the write failed (put drops it): no more redraws
    }
  });
}

ProgressPrinter::~ProgressPrinter() {
  ticker_->join();
  // A sweep that ended by an exception leaves no half line for the error message to run into. Never throws:
  // this may run while an exception unwinds (a stream that cannot be written is one).
  try {
    clear_line();
    std::fflush(stream_);
  } catch (const std::exception&) {
  }
}

double ProgressPrinter::now_s() const {
  return options_.clock ? options_.clock() : steady_seconds();
}

void ProgressPrinter::clear_line() {
  if (!options_.terminal || drawn_width_ == 0) return;
  put(stream_, fmt::format("\r{}\r", std::string(drawn_width_, ' ')));
  drawn_width_ = 0;
}

void ProgressPrinter::draw(const PointStart& start, double point_start_s, bool show_point_time) {
  const double now = now_s();
  const double elapsed_s = now - start_s_;
  ProgressLine line{start.index, start.planned_total, start.total_is_estimate,
                    start.batch, start.accumulation,  start.refinement,
                    elapsed_s,   std::nullopt,        std::nullopt,
                    probing_,    start.round,         start.rounds};
  const double in_point_s = std::max(0.0, now - point_start_s);
  if (show_point_time) line.point_s = in_point_s;
  if (finished_ > resumed_) {
    // The mean measured point, times the points left (this one included), less what this one has run; never
    // below the points after this one.
    const double per_point_s = std::max(0.0, point_start_s - start_s_) / (finished_ - resumed_);
    const int remaining = std::max(0, start.planned_total - finished_);
    const double after_this_s = per_point_s * std::max(0, remaining - 1);
    line.eta_s = std::max(after_this_s, per_point_s * remaining - in_point_s);
  }
  std::string text = format_progress_line(line, options_.color);
  const int columns = options_.columns ? options_.columns() : 0;
  // One column spare: a line that fills the row exactly wraps the cursor on some terminals.
  if (columns > 1 && display_width(text) > static_cast<std::size_t>(columns - 1))
    text = cut_to_width(format_progress_line(line, false), static_cast<std::size_t>(columns - 1));
  clear_line();
  put(stream_, text);
  drawn_width_ = display_width(text);
  std::fflush(stream_);
}

void ProgressPrinter::on_point_start(const PointStart& start) {
  const std::lock_guard lock(ticker_->mutex);
  current_ = start;
  probing_ = false;
  planned_total_ = start.planned_total;
  total_is_estimate_ = start.total_is_estimate;
  current_start_s_ = now_s();
  if (options_.quiet || !options_.terminal) return;  // a log file or a pipe gets no progress lines
  draw(start, current_start_s_, false);
}

void ProgressPrinter::on_probe_start(int64_t batch, int64_t accumulation) {
  const std::lock_guard lock(ticker_->mutex);
  PointStart probe;
  probe.index = finished_ + 1;  // the point that comes next
  probe.planned_total = std::max(planned_total_, probe.index);
  probe.total_is_estimate = total_is_estimate_;
  probe.batch = batch;
  probe.accumulation = accumulation;
  current_ = probe;
  probing_ = true;
  current_start_s_ = now_s();
  if (options_.quiet || !options_.terminal) return;
  draw(probe, current_start_s_, false);
}

void ProgressPrinter::on_probe_done() {
  const std::lock_guard lock(ticker_->mutex);
  if (!probing_) return;
  current_.reset();  // the ticker stops redrawing a probe that has ended
  probing_ = false;
}

void ProgressPrinter::tick() {
  const std::lock_guard lock(ticker_->mutex);
  if (options_.quiet || !options_.terminal || !current_) return;
  draw(*current_, current_start_s_, true);
}

void ProgressPrinter::on_point_done(const Point& point, const std::vector<Point>& /*all_so_far*/) {
  const std::lock_guard lock(ticker_->mutex);
  ++finished_;
  // A later round of a point (run --rounds) is a measurement, for the ETA, but no new point; a resumed
  // point measured again in one ran now.
  const bool later_round = current_ && current_->round > 1;
  if (later_round) ++later_rounds_;
  if (!point.resumed_from.empty() && !later_round) ++resumed_;
  current_.reset();
  probing_ = false;
  if (options_.quiet || point.status == PointStatus::ok) return;
  // A point that did not run leaves a line, also on a terminal where the progress line is redrawn.
  clear_line();
  const std::string batch = batch_label(point.batch, point.accumulation);
  put(stream_, fmt::format("batch {}: {} — {}\n", batch, to_string(point.status), point.reason));
  std::fflush(stream_);
}

void ProgressPrinter::note(const std::string& line) {
  const std::lock_guard lock(ticker_->mutex);
  clear_line();
  put(stream_, fmt::format("{}\n", line));
  std::fflush(stream_);
}

bool ProgressPrinter::should_stop() {
  return options_.stop_requested && options_.stop_requested();
}

void ProgressPrinter::on_sweep_end(bool interrupted) {
  ticker_->join();  // no redraw after the summary
  current_.reset();
  if (options_.quiet) return;
  clear_line();
  const double elapsed_s = now_s() - start_s_;
  // Points taken from --resume were not measured in this time: said apart. "From this run", not "measured":
  // settings.measured_points leaves out the points that did not fit, which this count holds.
  const int points = finished_ - later_rounds_;
  const int measured = points - resumed_;
  const std::string resumed =
      resumed_ > 0 ? fmt::format(" ({} from this run, {} taken from --resume)", measured, resumed_)
                   : std::string();
  const std::string rounds =
      later_rounds_ > 0 ? fmt::format(" and {} later round{}", later_rounds_, later_rounds_ == 1 ? "" : "s")
                        : std::string();
  put(stream_, fmt::format("{} {} point{}{}{} in {}\n", interrupted ? "interrupted after" : "sweep done:",
                           points, points == 1 ? "" : "s", resumed, rounds, format_duration(elapsed_s)));
  std::fflush(stream_);
}

}  // namespace bsw
