// The sweep: which batches to measure (the --batch grammar, --batch auto, --effective-batch splits), when to
// stop measuring one point (stopping criteria), and the runner that turns (backend, graph, settings) into
// Points. The sweep knows backends only through backend.hpp and knows nothing of how points are printed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/backend.hpp"
#include "batchsweep/plan.hpp"
#include "batchsweep/report.hpp"

namespace bsw {

// -------------------------------------------------------------------------------------------------------------
// Batch grammar and sizes
// -------------------------------------------------------------------------------------------------------------

inline constexpr std::size_t kMaxBatchCount = 4096;  // most batches one --batch list may expand to

// A parsed --batch value: either `auto` or an explicit, sorted, de-duplicated list of batches
// in 1..kMaxBatch.
struct BatchSpec {
  bool auto_search = false;
  std::vector<int64_t> batches;  // empty when auto_search
  std::string text;              // the text as given, for reports

  [[nodiscard]] bool operator==(const BatchSpec&) const = default;
};

// Parses the --batch grammar. Comma-separated items, mixable:
//   `64`              one batch
//   `8:256:+8`        arithmetic range start:stop:+step (stop included when the steps land on it)
//   `1:4096:*2`       geometric range start:stop:*factor (factor an integer >= 2)
//   `16:128`          shorthand for `16:128:*2` (batch sweeps are geometric by convention)
//   `auto`            alone: the auto search (see run_sweep)
// Numbers are integers; an integral scientific form (`1e3`) is accepted so that `1:1e9` fails on its range.
// Throws UsageError naming `flag` and the bad item for: a batch < 1 or > 2^24, stop < start, a step or factor
// that does not advance (`+0`, `*1`), text that is not a number, an empty list or item, `auto` mixed with
// batches, and more than kMaxBatchCount batches.
[[nodiscard]] BatchSpec parse_batch_spec(std::string_view text, std::string_view flag);

// Parses a byte size: `4096` (bytes), `512MiB`, `24GiB`, `1.5TiB` (binary, 1024^k), `80GB`, `500MB` (decimal,
// 1000^k), units B/KB/MB/GB/TB/PB and KiB/MiB/GiB/TiB/PiB, case-insensitive, an optional space before the
// unit. Fractions are rounded to the nearest byte. Throws UsageError naming `flag` for an unknown unit
// (`12XB`), a size of zero, a negative or malformed number, and a size that does not fit in 64 bits.
[[nodiscard]] uint64_t parse_size(std::string_view text, std::string_view flag);

// Throws UsageError naming --accumulation where `largest_batch` x `accumulation` passes max_micro_batch
// (plan.hpp): 2^24 samples per step.
void check_samples_per_step(int64_t largest_batch, int64_t accumulation);

// format_bytes (bytes as "74.10 GiB") is declared in plan.hpp, where the backends reach it too.

// -------------------------------------------------------------------------------------------------------------
// Stopping criteria (after nvbench's stopping_criterion)
// -------------------------------------------------------------------------------------------------------------

struct StoppingSettings {
  int64_t warmup_steps = 3;  // untimed steps after prepare (kernels selected, caches and clocks warm)
  // Untimed seconds at least, after warmup_steps, so a GPU's clocks have left idle before the first sample
  // (trtexec warms up 200 ms). Unset: kCudaWarmupTimeS on cuda, 0 elsewhere (see warmup_time_s).
  std::optional<double> warmup_time_s;
  int64_t min_samples = 10;     // timed steps at least
  double min_time_s = 0.5;      // sum of the timed step times at least
  double max_noise_pct = 1.0;   // relative noise (stddev / mean * 100 of all timed samples) at most
  double timeout_s = 5.0;       // wall clock per point (warm-up included): stop with a warning when reached
  int64_t max_samples = 10000;  // the sample cap (--max-samples), so a 1 us step cannot run forever

  [[nodiscard]] bool operator==(const StoppingSettings&) const = default;
};

// The largest --max-samples: every step's time is kept (samples_ms), and 100,000 of them are ~2 MB of JSON a
// point, rewritten after every point.
inline constexpr int64_t kMaxSampleCap = 100000;

inline constexpr double kCudaWarmupTimeS = 0.2;
// The warm-up time a sweep on `backend` uses: --warmup-time where given, else kCudaWarmupTimeS on cuda.
[[nodiscard]] inline double warmup_time_s(const StoppingSettings& stopping, BackendKind backend) {
  return stopping.warmup_time_s.value_or(backend == BackendKind::cuda ? kCudaWarmupTimeS : 0.0);
}

// Throws UsageError naming the flag (--warmup, --warmup-time, --min-samples, --min-time, --max-noise,
// --timeout, --max-samples) for a value out of range: warmup >= 0, warmup_time >= 0, min_samples in
// 1..max_samples, min_time >= 0, max_noise > 0, timeout > 0, all finite; max_samples in 1..kMaxSampleCap.
void validate(const StoppingSettings& stopping);

// Decides when a point has been measured enough. The runner feeds every timed step and asks after each one.
class StoppingCriterion {
 public:
  virtual ~StoppingCriterion() = default;
  virtual void add_measurement(double step_ms) = 0;
  [[nodiscard]] virtual bool is_finished() = 0;
  // Which rule ended the point ("noise target", "noise settled", "timeout", "sample cap"); empty while not
  // finished.
  [[nodiscard]] virtual std::string stop_reason() const = 0;
  // When the point ended short of its targets: a sentence saying which limit was hit, by how much, and the
  // flag that helps. nullopt when the targets were met.
  [[nodiscard]] virtual std::optional<std::string> warning() const = 0;
};

// The default criterion. Finished when
//   (a) samples >= min_samples AND sum(step_ms) >= min_time_s AND noise <= max_noise_pct: "noise target";
//   (b) as (a) but with the noise above the target and settled (nvbench's stdrel rule): the noise is recorded
//       after every step (the last kNoiseHistory readings kept); with more than kSettleMinReadings of them,
//       every kSettleEvery steps, their standard deviation around the current noise is under 5% of it. Steps
//       vary that much, and more of them would not lower it: "noise settled", with a warning giving the noise
//       and how well the mean is known;
//   (c) the wall clock since construction reaches timeout_s: "timeout";
//   (d) samples reach max_samples: "sample cap".
// Noise is stddev / mean of ALL timed samples of the point, kept as running sums (O(1) a step), the number
// reported as the point's noise_pct up to rounding, so the stop rule and the report never disagree. The wall
// clock is injectable for tests.
class NoiseCriterion final : public StoppingCriterion {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  explicit NoiseCriterion(StoppingSettings settings, Clock clock = {});

  void add_measurement(double step_ms) override;
  [[nodiscard]] bool is_finished() override;
  [[nodiscard]] std::string stop_reason() const override;
  [[nodiscard]] std::optional<std::string> warning() const override;
  // The same, quoting `mean_ci95_pct` as how well the mean is known where the noise settled: the point's
  // samples_per_second_ci95_pct (Student's t, allowing for drift), so the warning and the report give one
  // figure. Without it, 1.96 * noise / sqrt(n), the steps taken as independent.
  [[nodiscard]] std::optional<std::string> warning(std::optional<double> mean_ci95_pct) const;

  // run --rounds, rounds 2 on: finish after exactly `steps` steps, round 1's count, whatever the noise
  // ("steps of round 1"), so every round weighs the same in the point's pooled mean; the timeout still
  // applies.
  void set_round_steps(int64_t steps) { round_steps_ = steps; }

  [[nodiscard]] double noise_pct() const;  // of the samples so far, 0 with fewer than 2
  [[nodiscard]] std::size_t samples() const { return samples_; }
  [[nodiscard]] double measured_s() const { return measured_ms_ / 1000.0; }
  // Seconds on the point's wall clock, which started with the criterion (before prepare).
  [[nodiscard]] double elapsed_s() const { return clock_() - start_s_; }

 private:
  static constexpr std::size_t kNoiseHistory = 512;      // noise readings kept, the latest
  static constexpr std::size_t kSettleMinReadings = 64;  // more than this before judging
  static constexpr std::size_t kSettleEvery = 16;        // steps between two judgements
  static constexpr double kSettledSpread = 0.05;         // their stddev around the current noise / it, below

  [[nodiscard]] bool noise_settled() const;

  enum class Stop { none, noise_target, noise_settled, timeout, sample_cap, round_steps };
  int64_t round_steps_ = 0;  // 0: the noise rules
  StoppingSettings settings_;
  Clock clock_;
  double start_s_ = 0;
  double elapsed_at_stop_s_ = 0;
  std::size_t samples_ = 0;
  double measured_ms_ = 0;
  double mean_ms_ = 0;                // Welford's running mean
  double squares_ms2_ = 0;            // and sum of squared deviations from it
  std::deque<double> noise_history_;  // noise_pct() after each step from the second on
  Stop stop_ = Stop::none;
};

// -------------------------------------------------------------------------------------------------------------
// The runner
// -------------------------------------------------------------------------------------------------------------

struct SweepSettings {
  BatchSpec batches;  // explicit list or auto; ignored when effective_batch is set
  Precision precision = Precision::fp32;
  Mode mode = Mode::train;
  int64_t accumulation = 1;       // micro-batches per optimizer step for every listed batch
  bool checkpointing = false;     // --checkpointing: recompute each block's activations in backward
  int64_t checkpoint_blocks = 0;  // --checkpoint-blocks N: only the first N blocks (0: all of them)
  std::optional<int64_t>
      effective_batch;  // --effective-batch N: sweep the splits micro x accumulation = N instead
  std::optional<uint64_t>
      memory_limit_bytes;  // --memory-limit: plans above limit * kMemorySafetyFraction are skipped
  // --memory-limit NAME: the card(s) of configs/gpus.json it named ("L4"), whose memory the sweep fits
  // batches in; its speed stays this device's. Empty for a size.
  std::string memory_limit_card;
  double memory_warn_fraction =
      0.9;  // warn when a point's planned or device-used memory passes this of the budget
  StoppingSettings stopping;
  SessionOptions session;
  double knee_sensitivity = 1.0;  // --batch auto: Kneedle S for the knee the refinement measures around
  // --latency-slo (ms): --batch auto also bisects the batches where the step time at latency_percentile (p99)
  // crosses this budget, so
  // the best batch under it is known to a few percent, not to a power of two.
  std::optional<double> latency_slo_ms;
  double latency_percentile = 99;  // --latency-percentile: the step-time percentile the budget holds
  PathChoice paths;                // --attention, --conv (cuda)
  // --rounds: measure every ok point this many times. Round 1 is the strategy's own; rounds 2.. each measure
  // every point that was ok in all its rounds so far again (prepare, warm-up, then as many timed steps as
  // its round 1 took, within --timeout), in the order of batch, descending in even rounds and ascending in
  // odd ones, so a drift over the sweep (clocks, temperature, other processes) touches every batch alike;
  // each point pools its rounds' steps (Point::rounds), every round weighing the same. 1..kMaxRounds.
  int64_t rounds = 1;
  // run --resume: an earlier run's points, each with resumed_from set. Where the sweep asks for a (batch,
  // accumulation) that is ok among them, and its plan still fits the budget, that point is taken as it is
  // instead of being measured again; the caller has checked that both runs measure the same thing. An
  // interrupted sweep also keeps those it had not reached (see PointRunner::unreached_resume_points), so the
  // next resume takes them.
  std::vector<Point> resume_points;
};

// The execution paths a sweep plans every point with: on the cuda backend, requested_cuda_paths as the
// backend answers them (cuDNN where it accepts the shapes, else our own paths, with a note); the other
// backends have one path. Throws UsageError naming --attention / --conv when a path the user forced cannot
// run.
[[nodiscard]] ExecutionPaths resolve_execution_paths(Backend& backend, const Graph& graph,
                                                     const SweepSettings& settings);

// What on_point_start is told. `planned_total` is the number of points the sweep expects; for --batch auto
// and
// --effective-batch it is an estimate (total_is_estimate) that may change as the search learns.
struct PointStart {
  int index = 0;  // 1-based
  int planned_total = 0;
  bool total_is_estimate = false;
  int64_t batch = 0;
  int64_t accumulation = 1;
  bool refinement = false;
  int round = 1;   // run --rounds: which round measures it (1 for the first, and without --rounds)
  int rounds = 1;  // of how many
};

// Hooks the runner calls on the calling thread. Every method has a do-nothing default.
class SweepObserver {
 public:
  virtual ~SweepObserver() = default;
  virtual void on_point_start(const PointStart& /*start*/) {}
  // Around a prepare-only probe (--batch auto: the fit edge, and growth past a plateau), which records no
  // point and so has no on_point_done.
  virtual void on_probe_start(int64_t /*batch*/, int64_t /*accumulation*/) {}
  virtual void on_probe_done() {}
  // After each finished point (any status); `all_so_far` holds every finished point including this one and,
  // while resuming, the earlier points not reached yet that still fit (SweepSettings::resume_points), sorted
  // by (effective_batch, batch) as in SweepOutcome::points.
  virtual void on_point_done(const Point& /*point*/, const std::vector<Point>& /*all_so_far*/) {}
  // Instead of on_point_done, for a point taken from --resume's report, not measured (by default the same
  // call). An observer that rewrites its exports after each point skips that here: the report resumed holds
  // the point, and rewriting a large report once per taken point made a resume quadratic (130 points at the
  // sample cap, over 10 minutes before it measured anything).
  virtual void on_point_taken(const Point& point, const std::vector<Point>& all_so_far) {
    on_point_done(point, all_so_far);
  }
  // Before the runner prepares a point to time it (after its on_point_start; not for one taken from
  // --resume): where an observer skipped its rewrites for taken points, it writes them now, once for the run
  // of them, so a sweep killed while this point runs leaves them on disk.
  virtual void on_measuring() {}
  // Before on_point_done of a point the runner prepared and timed: how many such points the sweep has
  // (SweepOutcome::measured_points so far), so a report rewritten after each point carries it.
  virtual void on_measured_points(int /*measured_points*/) {}
  // run --rounds: round `round` (2..) begins, every earlier one having finished (round 1: the whole sweep).
  virtual void on_round_begun(int /*round*/) {}
  // Around a point's timed steps (after its warm-up): telemetry samplers start here and stop in on_timed_end,
  // which may annotate the point (its samples are in) and returns warnings to record with the sweep's.
  virtual void on_timed_start(const Point& /*point*/) {}
  [[nodiscard]] virtual std::vector<std::string> on_timed_end(Point& /*point*/) { return {}; }
  // Asked before each point and between timed steps; true drops the unfinished point and ends the sweep.
  [[nodiscard]] virtual bool should_stop() { return false; }
  // Once, at the end (also after an interrupt).
  virtual void on_sweep_end(bool /*interrupted*/) {}
  // The sweep's warnings so far, as SweepOutcome::warnings would hold them were it to end now: before each
  // on_point_done (a report rewritten after each point carries them), and when a fatal error (an Error
  // thrown out of run_sweep) ends the sweep, for the report of what finished.
  virtual void on_warnings(const std::vector<std::string>& /*so_far*/) {}
};

struct SweepOutcome {
  std::vector<Point> points;          // finished points (interrupted: and unreached resume points), sorted by
                                      // (effective_batch, batch)
  std::vector<std::string> warnings;  // sentences for stderr and the report, each saying how to fix
  bool interrupted = false;           // should_stop() ended the sweep; points holds everything finished
  int measured_points = 0;            // points that ran timed steps (prepared: ok, or error after prepare)
  int probed_points = 0;       // prepares that failed or were only probed (auto), plans over the budget
  int resumed_points = 0;      // points taken from SweepSettings::resume_points, not measured again
  std::string search_summary;  // auto / effective-batch: how the search went; empty for a plain list
  std::optional<UntimedFit> untimed_fit;  // auto: the largest batch that fits, where it was too slow to time
};

// Runs the sweep the settings describe:
//   - effective_batch set: the splits micro x accumulation = N (accumulation 1, 2, 4, ... dividing N),
//     from the largest micro-batch down; stops early once a split has fit and two successive smaller
//     micro-batches were each more than 5% slower than the one before (kEffectiveBatchStopSlowdown).
//   - batches.auto_search: the auto search (src/sweep/auto_search.cpp): doubling from 1 until the memory
//     budget, an oom or a plateau, bisection of the fit edge (exact below 64, to a multiple of 8 above),
//     points around the knee.
//   - otherwise every listed batch, in the order given, with settings.accumulation.
// Per point: make_plan; a plan above the budget (the smaller of memory_limit_bytes and the device's
// memory_total_bytes) times kMemorySafetyFraction is recorded `over_limit` without prepare; prepare throwing
// OutOfMemory gives `oom`, BackendError `error`; then warmup_steps untimed steps and timed steps until
// NoiseCriterion finishes. A non-finite loss makes the point `error` ("non-finite loss (NaN/Inf) at step N",
// N counting timed steps from 1, or "at warm-up step N"); its samples are kept, its throughput stays 0.
// samples_per_second = effective_batch / mean step time (the mean, not the median: throughput over a long run
// is total samples / total time). The Session is destroyed before the next prepare. Throws UsageError for
// invalid settings and anything a backend throws that is not an OutOfMemory or BackendError.
[[nodiscard]] SweepOutcome run_sweep(Backend& backend, const Graph& graph, const SweepSettings& settings,
                                     SweepObserver& observer);

// --effective-batch: stop once two successive smaller micro-batches are each this much slower than the last.
inline constexpr double kEffectiveBatchStopSlowdown = 0.05;
// --batch auto: timing stops when each of the last two doublings gained less than this fraction.
inline constexpr double kAutoPlateauGain = 0.03;

// The splits of --effective-batch N, largest micro-batch first: {micro, accumulation} for every accumulation
// dividing N, or a ladder of them where N has more than kEffectiveBatchAllSplits divisors (each accumulation
// at least 1.4x the last). Throws UsageError naming --effective-batch for N < 1 or N > kMaxBatch.
struct BatchSplit {
  int64_t micro_batch = 1;
  int64_t accumulation = 1;
  [[nodiscard]] bool operator==(const BatchSplit&) const = default;
};
// Every split of N with more than this many divisors is not measured: a ladder of them is.
inline constexpr std::size_t kEffectiveBatchAllSplits = 24;
[[nodiscard]] std::vector<BatchSplit> effective_batch_splits(int64_t effective_batch);

// -------------------------------------------------------------------------------------------------------------
// Progress on stderr
// -------------------------------------------------------------------------------------------------------------

// Everything one progress line shows; format_progress_line is pure so tests pin the text.
struct ProgressLine {
  int index = 0;  // 1-based, the point being measured
  int planned_total = 0;
  bool total_is_estimate = false;
  int64_t batch = 0;
  int64_t accumulation = 1;
  bool refinement = false;
  double elapsed_s = 0;
  std::optional<double> eta_s;    // none before the first point finished
  std::optional<double> point_s;  // time in the current point, shown once the line is redrawn during it
  bool probe = false;             // a prepare-only probe of `batch`, before the point `index`
  int round = 1, rounds = 1;      // run --rounds: "(round 2/3)" from round 2 on
};

// "[3/9] batch 64 · elapsed 12.4 s · ETA ~31 s"; an estimated total reads "[3/~9]", an accumulation
// "batch 16x4", a refinement point "batch 184 (refine)", a later round "batch 64 (round 2/3)"; redrawn during
// a long point,
// "[3/9] batch 64 · 8.2 s in this point · elapsed 20.6 s · ETA ~23 s". `color` adds ANSI bold/dim (never
// with a non-empty NO_COLOR).
[[nodiscard]] std::string format_progress_line(const ProgressLine& line, bool color);
// "12.4 s", "59.9 s", "2 min 05 s", "1 h 02 min".
[[nodiscard]] std::string format_duration(double seconds);

struct ProgressOptions {
  bool quiet = false;                    // print nothing
  bool terminal = false;                 // redraw one line in place with \r (stderr is a terminal)
  bool color = false;                    // ANSI styling (color_allowed)
  std::function<bool()> stop_requested;  // answers should_stop() (the CLI's signal flag); none = never
  std::function<double()> clock;         // seconds, monotonic; none = steady_clock
  // On a terminal, a background thread redraws the line this often (seconds) while a point runs, so the
  // clock moves during a long prepare or step; 0 = only at point starts (tests call tick() themselves).
  double tick_s = 0;
  // The terminal's width in columns, asked at every draw; a longer line is cut to fit one row (a wrapped line
  // cannot be redrawn in place). None or 0 = unknown: no cut.
  std::function<int()> columns;
};

// ANSI colour on the stream `fd`: it is a terminal, and NO_COLOR is unset or empty (no-color.org: only a
// non-empty NO_COLOR turns colour off). The one rule for the progress line, the tables and the warnings.
[[nodiscard]] bool color_allowed(int fd);

// Options for the real stderr: terminal = isatty(stderr), color = color_allowed(stderr), tick_s = 1 s,
// columns from TIOCGWINSZ.
[[nodiscard]] ProgressOptions stderr_progress_options(bool quiet);

// A SweepObserver that prints progress. On a terminal the line is redrawn in place (at each point start, and
// every tick_s during a point); off a terminal there is no progress line. Everywhere, a point that is not ok
// leaves one line ("batch 4096: oom — <reason>") and the end one summary line, unless quiet.
// ETA = mean wall time per finished point (points taken from --resume do not count) x points remaining, less
// the time the current point has run (never below the points after it).
class ProgressPrinter : public SweepObserver {
 public:
  ProgressPrinter(std::FILE* stream, ProgressOptions options);
  ~ProgressPrinter() override;
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  void on_point_start(const PointStart& start) override;
  // "[5/~16] probing batch 4096 (prepare only)": the line moves while --batch auto prepares batches it does
  // not time.
  void on_probe_start(int64_t batch, int64_t accumulation) override;
  void on_probe_done() override;
  void on_point_done(const Point& point, const std::vector<Point>& all_so_far) override;
  [[nodiscard]] bool should_stop() override;
  void on_sweep_end(bool interrupted) override;
  // Prints one line on its own (a warning during the sweep), clearing the progress line first; also when
  // quiet.
  void note(const std::string& line);
  // Redraws the current point's line with the time so far; nothing between points, off a terminal, or quiet.
  // The ticker thread calls it every tick_s.
  void tick();

 private:
  struct Ticker;
  [[nodiscard]] double now_s() const;
  void clear_line();
  void draw(const PointStart& start, double point_start_s, bool show_point_time);

  std::FILE* stream_;
  ProgressOptions options_;
  double start_s_ = 0;
  int finished_ = 0;
  int resumed_ = 0;                    // finished points taken from --resume: no time of this run's
  int later_rounds_ = 0;               // run --rounds: measurements of rounds 2.., among finished_
  std::size_t drawn_width_ = 0;        // characters of the line drawn in place
  std::optional<PointStart> current_;  // the point being measured, or the one after the probe
  bool probing_ = false;               // current_ is a prepare-only probe of current_->batch
  int planned_total_ = 0;              // the last point start's estimate, for probe lines
  bool total_is_estimate_ = false;
  double current_start_s_ = 0;
  std::unique_ptr<Ticker> ticker_;  // the redraw thread and the lock every write to the stream takes
};

}  // namespace bsw
