// Progress on stderr: the pure line formatting, durations, and the printer's behaviour on a terminal (redrawn
// in place), off a terminal (one line per point), with colour, and quiet.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "sweep_test_support.hpp"

namespace bsw {
namespace {

TEST(FormatDuration, Ranges) {
  EXPECT_EQ(format_duration(0), "0.0 s");
  EXPECT_EQ(format_duration(12.44), "12.4 s");
  EXPECT_EQ(format_duration(59.9), "59.9 s");
  EXPECT_EQ(format_duration(59.97), "1 min 00 s");
  EXPECT_EQ(format_duration(125), "2 min 05 s");
  EXPECT_EQ(format_duration(3725), "1 h 02 min");
  EXPECT_EQ(format_duration(-3), "0.0 s");
}

TEST(FormatProgressLine, TheDocumentedLine) {
  ProgressLine line;
  line.index = 3;
  line.planned_total = 9;
  line.batch = 64;
  line.elapsed_s = 12.4;
  line.eta_s = 31.2;
  EXPECT_EQ(format_progress_line(line, false), "[3/9] batch 64 · elapsed 12.4 s · ETA ~31 s");
}

TEST(FormatProgressLine, Variants) {
  ProgressLine line;
  line.index = 1;
  line.planned_total = 14;
  line.total_is_estimate = true;
  line.batch = 16;
  line.accumulation = 4;
  line.elapsed_s = 0;
  EXPECT_EQ(format_progress_line(line, false), "[1/~14] batch 16x4 · elapsed 0.0 s");
  line.accumulation = 1;
  line.batch = 184;
  line.refinement = true;
  line.eta_s = 150;
  EXPECT_EQ(format_progress_line(line, false),
            "[1/~14] batch 184 (refine) · elapsed 0.0 s · ETA ~2 min 30 s");
  line.planned_total = 0;
  line.refinement = false;
  line.eta_s.reset();
  EXPECT_EQ(format_progress_line(line, false), "[1/?] batch 184 · elapsed 0.0 s");
  // run --rounds: a later round says which; a refinement point's later round says the round.
  line.index = 9;
  line.planned_total = 12;
  line.total_is_estimate = false;
  line.refinement = true;
  line.round = 2;
  line.rounds = 3;
  EXPECT_EQ(format_progress_line(line, false), "[9/12] batch 184 (round 2/3) · elapsed 0.0 s");
  line.round = 1;
  EXPECT_EQ(format_progress_line(line, false), "[9/12] batch 184 (refine) · elapsed 0.0 s");
}

TEST(FormatProgressLine, ColorOnlyWhenAsked) {
  ProgressLine line{2, 5, false, 8, 1, false, 1.0, 2.0, std::nullopt};
  const std::string plain = format_progress_line(line, false);
  const std::string colored = format_progress_line(line, true);
  EXPECT_EQ(plain.find('\x1b'), std::string::npos);
  EXPECT_NE(colored.find("\x1b[1m[2/5] batch 8\x1b[0m"), std::string::npos) << colored;
  EXPECT_NE(colored.find("\x1b[2m"), std::string::npos);
}

// Captures what the printer writes.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) {}
  ~Capture() { std::fclose(file_); }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    char buffer[512];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, file_)) > 0) out.append(buffer, n);
    return out;
  }

 private:
  std::FILE* file_;
};

// A terminal whose clock reads `now_s`.
ProgressOptions terminal_at(const double& now_s) {
  ProgressOptions options;
  options.terminal = true;
  options.clock = [&now_s] { return now_s; };
  return options;
}

Point point_of(int64_t batch, PointStatus status, std::string reason = {}) {
  Point p;
  p.batch = batch;
  p.effective_batch = batch;
  p.status = status;
  p.reason = std::move(reason);
  return p;
}

TEST(ProgressPrinter, OffATerminalOnlyPointsThatDidNotRunAndTheEnd) {
  Capture out;
  double now_s = 0;
  ProgressOptions options;
  options.clock = [&] { return now_s; };
  ProgressPrinter printer(out.file(), options);
  std::vector<Point> all;
  printer.on_point_start(PointStart{1, 3, false, 1, 1, false});
  now_s = 10;
  all.push_back(point_of(1, PointStatus::ok));
  printer.on_point_done(all.back(), all);
  printer.on_point_start(PointStart{2, 3, false, 2, 1, false});
  now_s = 20;
  all.push_back(point_of(2, PointStatus::oom, "out of memory at batch 2"));
  printer.on_point_done(all.back(), all);
  printer.on_point_start(PointStart{3, 3, false, 4, 1, false});
  printer.on_sweep_end(false);
  // No progress lines in a log file or a pipe (issue 3: progress only on a terminal).
  EXPECT_EQ(out.text(),
            "batch 2: oom — out of memory at batch 2\n"
            "sweep done: 2 points in 20.0 s\n");
}

TEST(ProgressPrinter, RedrawsInPlaceOnATerminal) {
  Capture out;
  double now_s = 0;
  ProgressPrinter printer(out.file(), terminal_at(now_s));
  std::vector<Point> all{point_of(1, PointStatus::ok)};
  printer.on_point_start(PointStart{1, 2, false, 1, 1, false});
  now_s = 1;
  printer.on_point_done(all.back(), all);
  printer.on_point_start(PointStart{2, 2, false, 2, 1, false});
  printer.on_sweep_end(true);
  const std::string text = out.text();
  const std::string first = "[1/2] batch 1 · elapsed 0.0 s";
  // The second line overwrites the first: \r, blanks as wide as the first line (in characters), \r.
  EXPECT_EQ(text.rfind(first, 0), 0u) << text;
  const std::string blank = "\r" + std::string(29, ' ') + "\r";
  // The ETA: elapsed per finished point times the points left.
  EXPECT_NE(text.find(first + blank + "[2/2] batch 2 · elapsed 1.0 s · ETA ~1 s"), std::string::npos) << text;
  EXPECT_NE(text.find("interrupted after 1 point in 1.0 s\n"), std::string::npos) << text;
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;  // the only newline ends the summary
}

TEST(FormatProgressLine, TimeInThePoint) {
  ProgressLine line;
  line.index = 3;
  line.planned_total = 9;
  line.batch = 64;
  line.elapsed_s = 20.6;
  line.eta_s = 23.0;
  line.point_s = 8.2;
  EXPECT_EQ(format_progress_line(line, false),
            "[3/9] batch 64 · 8.2 s in this point · elapsed 20.6 s · ETA ~23 s");
}

TEST(ProgressPrinter, TicksDuringAPointWithTheTimeInItAndAnEtaThatCountsIt) {
  Capture out;
  double now_s = 0;
  ProgressPrinter printer(out.file(), terminal_at(now_s));
  std::vector<Point> all{point_of(1, PointStatus::ok)};
  printer.tick();  // before any point: nothing
  EXPECT_EQ(out.text(), "");
  printer.on_point_start(PointStart{1, 3, false, 1, 1, false});
  now_s = 10;
  printer.on_point_done(all.back(), all);
  printer.tick();  // between points: nothing
  printer.on_point_start(PointStart{2, 3, false, 2, 1, false});
  now_s = 14;
  printer.tick();
  // 10 s per finished point: this one and one more, less the 4 s this one has run.
  EXPECT_NE(out.text().find("[2/3] batch 2 · 4.0 s in this point · elapsed 14.0 s · ETA ~16 s"),
            std::string::npos)
      << out.text();
  now_s = 40;
  printer.tick();
  // A point running past the mean: the ETA stays at the points after it.
  EXPECT_NE(out.text().find("[2/3] batch 2 · 30.0 s in this point · elapsed 40.0 s · ETA ~10 s"),
            std::string::npos)
      << out.text();
  all.push_back(point_of(2, PointStatus::ok));
  printer.on_point_done(all.back(), all);
  const std::size_t before = out.text().size();
  printer.tick();
  EXPECT_EQ(out.text().size(), before);  // nothing after the point ended
  printer.on_sweep_end(false);
  EXPECT_EQ(out.text().find('\n'), out.text().size() - 1) << out.text();  // only the summary ends a line
}

// --batch auto's prepare-only probes move the line too: a probe of a large batch can take seconds.
TEST(ProgressPrinter, ProbesMoveTheLine) {
  Capture out;
  double now_s = 0;
  ProgressPrinter printer(out.file(), terminal_at(now_s));
  std::vector<Point> all{point_of(1, PointStatus::ok)};
  printer.on_point_start(PointStart{1, 5, true, 1, 1, false});
  now_s = 10;
  printer.on_point_done(all.back(), all);
  printer.on_probe_start(4096, 1);
  EXPECT_NE(out.text().find("[2/~5] probing batch 4096 (prepare only) · elapsed 10.0 s · ETA ~40 s"),
            std::string::npos)
      << out.text();
  now_s = 13;
  printer.tick();
  EXPECT_NE(
      out.text().find("[2/~5] probing batch 4096 (prepare only) · 3.0 s in this probe · elapsed 13.0 s"),
      std::string::npos)
      << out.text();
  // Once the probe is done the ticker draws nothing until the next point.
  printer.on_probe_done();
  const std::size_t before = out.text().size();
  now_s = 14;
  printer.tick();
  EXPECT_EQ(out.text().size(), before) << out.text();
  // The next point is drawn as a point again.
  printer.on_point_start(PointStart{2, 5, true, 2048, 1, true});
  EXPECT_NE(out.text().find("[2/~5] batch 2048 (refine) · elapsed 14.0 s"), std::string::npos) << out.text();
  printer.on_sweep_end(false);
  EXPECT_EQ(out.text().find('\n'), out.text().size() - 1) << out.text();
}

TEST(ProgressPrinter, LaterRoundsCountTowardTheEtaButAreNoNewPoints) {
  Capture out;
  double now_s = 0;
  ProgressPrinter printer(out.file(), terminal_at(now_s));
  std::vector<Point> all{point_of(1, PointStatus::ok), point_of(2, PointStatus::ok)};
  all[0].resumed_from = "2026-11-29T10:00:00Z";  // round 1 from an earlier run, round 2 now
  printer.on_point_start(PointStart{1, 4, true, 1, 1, false});
  printer.on_point_done(all[0], all);
  printer.on_point_start(PointStart{2, 4, true, 2, 1, false});
  now_s = 4;
  printer.on_point_done(all[1], all);
  printer.on_point_start(PointStart{3, 4, false, 2, 1, false, 2, 2});
  EXPECT_NE(out.text().find("[3/4] batch 2 (round 2/2) · elapsed 4.0 s · ETA ~8 s"), std::string::npos)
      << out.text();
  now_s = 8;
  printer.on_point_done(all[1], all);
  printer.on_point_start(PointStart{4, 4, false, 1, 1, false, 2, 2});
  // Two measurements in 8 s: the resumed point's round 2 is this run's.
  EXPECT_NE(out.text().find("[4/4] batch 1 (round 2/2) · elapsed 8.0 s · ETA ~4 s"), std::string::npos)
      << out.text();
  now_s = 12;
  printer.on_point_done(all[0], all);
  printer.on_sweep_end(false);
  EXPECT_NE(
      out.text().find("sweep done: 2 points (1 from this run, 1 taken from --resume) and 2 later rounds "
                      "in 12.0 s"),
      std::string::npos)
      << out.text();
}

TEST(ProgressPrinter, ResumedPointsDoNotCountTowardTheEta) {
  Capture out;
  double now_s = 0;
  ProgressPrinter printer(out.file(), terminal_at(now_s));
  std::vector<Point> all{point_of(1, PointStatus::ok), point_of(2, PointStatus::ok)};
  all[0].resumed_from = "2026-11-29T10:00:00Z";
  printer.on_point_start(PointStart{1, 4, false, 1, 1, false});
  printer.on_point_done(all[0], all);  // taken at once from the earlier report
  printer.on_point_start(PointStart{2, 4, false, 2, 1, false});
  now_s = 6;
  printer.on_point_done(all[1], all);
  printer.on_point_start(PointStart{3, 4, false, 4, 1, false});
  // One measured point took 6 s: two left, 12 s (not 6 s elapsed over 2 finished points times 2).
  EXPECT_NE(out.text().find("[3/4] batch 4 · elapsed 6.0 s · ETA ~12 s"), std::string::npos) << out.text();
  // The closing line counts them apart, as settings.measured_points does.
  printer.on_sweep_end(false);
  EXPECT_NE(out.text().find("sweep done: 2 points (1 from this run, 1 taken from --resume) in 6.0 s"),
            std::string::npos)
      << out.text();
}

TEST(ProgressPrinter, ASweepEndedByAnExceptionLeavesNoHalfLine) {
  Capture out;
  {
    ProgressOptions options;
    options.terminal = true;
    options.clock = [] { return 0.0; };
    ProgressPrinter printer(out.file(), options);
    printer.on_point_start(PointStart{1, 2, false, 1, 1, false});
    // No on_sweep_end: the printer is destroyed while unwinding.
  }
  const std::string line = "[1/2] batch 1 · elapsed 0.0 s";
  EXPECT_EQ(out.text(), line + "\r" + std::string(29, ' ') + "\r");
}

TEST(ProgressPrinter, ALineWiderThanTheTerminalIsCutToOneRow) {
  Capture out;
  ProgressOptions options;
  options.terminal = true;
  options.color = true;
  options.clock = [] { return 0.0; };
  options.columns = [] { return 21; };
  ProgressPrinter printer(out.file(), options);
  printer.on_point_start(PointStart{12, 14, true, 2048, 1, true});
  // 20 columns of the plain line (the middle dot is one column, two bytes), no colour codes cut in half.
  EXPECT_EQ(out.text(), "[12/~14] batch 2048 ");
  Capture wide;
  options.columns = [] { return 200; };
  ProgressPrinter roomy(wide.file(), options);
  roomy.on_point_start(PointStart{1, 2, false, 8, 1, false});
  EXPECT_NE(wide.text().find("\x1b[1m"), std::string::npos);  // fits: colour kept
}

// stderr that can no longer be written (a closed pipe, a hung-up terminal): the ticker thread stops instead
// of terminating the process, and the sweep's own lines are dropped, not thrown (progress is a courtesy: the
// sweep, its exports and its exit code go on); the destructor stays quiet.
TEST(ProgressPrinter, AStreamThatFailsEndsTheTickerNotTheProcess) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::FILE* writer = fdopen(fds[1], "w");
  ASSERT_NE(writer, nullptr);
  setvbuf(writer, nullptr, _IONBF, 0);  // as stderr: every write goes out at once
  const auto old_sigpipe = std::signal(SIGPIPE, SIG_IGN);
  std::atomic<int> clock_reads{0};
  {
    ProgressOptions options;
    options.terminal = true;
    options.tick_s = 0.002;
    options.clock = [&] {
      ++clock_reads;
      return 0.0;
    };
    ProgressPrinter printer(writer, options);
    printer.on_point_start(PointStart{1, 2, false, 8, 1, false});
    close(fds[0]);  // nobody reads: every write fails with EPIPE
    const int before = clock_reads.load();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (clock_reads.load() == before && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_GT(clock_reads.load(), before);  // the ticker tried to draw...
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(clock_reads.load(), before + 1);  // ...once, and stopped
    EXPECT_NO_THROW(printer.on_sweep_end(false));
  }  // the destructor clears the line on the broken stream without throwing
  std::signal(SIGPIPE, old_sigpipe);
  std::fclose(writer);
}

TEST(ProgressPrinter, TickDrawsNothingOffATerminalOrQuiet) {
  for (const bool quiet : {false, true}) {
    Capture out;
    ProgressOptions options;
    options.quiet = quiet;
    options.terminal = quiet;  // quiet on a terminal, or not quiet off one
    options.clock = [] { return 5.0; };
    ProgressPrinter printer(out.file(), options);
    printer.on_point_start(PointStart{1, 2, false, 1, 1, false});
    printer.tick();
    EXPECT_EQ(out.text(), "") << "quiet " << quiet;
  }
}

TEST(ProgressPrinter, TheTickerThreadRedrawsUntilTheSweepEnds) {
  Capture out;
  std::atomic<int> clock_reads{0};
  ProgressOptions options;
  options.terminal = true;
  options.tick_s = 0.005;
  options.clock = [&] {
    ++clock_reads;
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  {
    ProgressPrinter printer(out.file(), options);
    printer.on_point_start(PointStart{1, 1, false, 8, 1, false});
    // The printer reads the clock at construction and at the point start; each tick reads it once more.
    const int before_ticks = clock_reads.load();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (clock_reads.load() < before_ticks + 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GE(clock_reads.load(), before_ticks + 3);
    printer.on_sweep_end(false);  // joins the ticker
    const int after_end = clock_reads.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(clock_reads.load(), after_end);  // no tick after the summary
  }
  const std::string text = out.text();
  EXPECT_NE(text.find("in this point"), std::string::npos) << text;
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;  // the summary is the last thing written
  EXPECT_NE(text.find("sweep done: 0 points in "), std::string::npos) << text;
}

TEST(ProgressPrinter, QuietPrintsNothingAndShouldStopAsksTheFlag) {
  Capture out;
  bool stop = false;
  ProgressOptions options;
  options.quiet = true;
  options.stop_requested = [&] { return stop; };
  ProgressPrinter printer(out.file(), options);
  std::vector<Point> all{point_of(1, PointStatus::error, "bad")};
  printer.on_point_start(PointStart{1, 1, false, 1, 1, false});
  printer.on_point_done(all.back(), all);
  printer.on_sweep_end(false);
  EXPECT_EQ(out.text(), "");
  EXPECT_FALSE(printer.should_stop());
  stop = true;
  EXPECT_TRUE(printer.should_stop());
  ProgressPrinter no_flag(out.file(), ProgressOptions{});
  EXPECT_FALSE(no_flag.should_stop());
}

TEST(ProgressPrinter, StderrOptionsFollowNoColor) {
  // Under the test runner stderr may or may not be a terminal; colour never appears without one.
  const ProgressOptions options = stderr_progress_options(false);
  if (!options.terminal) {
    EXPECT_FALSE(options.color);
  }
  setenv("NO_COLOR", "1", 1);
  EXPECT_FALSE(stderr_progress_options(false).color);
  unsetenv("NO_COLOR");
  EXPECT_TRUE(stderr_progress_options(true).quiet);
  EXPECT_DOUBLE_EQ(stderr_progress_options(false).tick_s, 1.0);
}

}  // namespace
}  // namespace bsw
