// Internal to src/sweep: measures one point (plan check, prepare, warm-up, timed steps until the stopping
// criterion) and keeps the sweep's bookkeeping (points so far, warnings, counts, interrupt), so the three
// strategies — a plain list, --batch auto and --effective-batch — only decide which batches to ask for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw::sweep_detail {

// The fewest timed steps a searched batch is worth measuring with: two give its noise (NoiseCriterion needs
// them). A search stops timing after a batch whose warm-up and these outlasted --timeout (timed_short); one
// that fits only part of --min-samples is timed, cut short by --timeout as any point is (stop_reason
// timeout).
inline constexpr int64_t kFewestTimedSteps = 2;

// Whether a timed point stopped at --timeout before its second timed step: a batch whose steps are no
// shorter (a larger one, or a split of more micro-batches) could not be timed either.
[[nodiscard]] inline bool timed_short(const Point& point) {
  return point.stop_reason == "timeout" && static_cast<int64_t>(point.samples_ms.size()) < kFewestTimedSteps;
}

// The answer of a prepare-only probe (auto search's fit-edge bisection).
enum class Fit { fits, oom, over_limit, error };

// A probe's answer as a point's status (a probe that fits has none: error).
[[nodiscard]] inline PointStatus status_of(Fit fit) {
  return fit == Fit::oom          ? PointStatus::oom
         : fit == Fit::over_limit ? PointStatus::over_limit
                                  : PointStatus::error;
}

struct FitProbe {
  Fit fit = Fit::fits;
  std::string reason;  // the oom / over_limit / error message
};

class PointRunner {
 public:
  PointRunner(Backend& backend, const Graph& graph, const SweepSettings& settings, SweepObserver& observer);

  // Measures (batch, accumulation) and records the point. nullopt when should_stop() interrupted it (the
  // unfinished point is dropped and interrupted() turns true).
  [[nodiscard]] std::optional<Point> measure(int64_t batch, int64_t accumulation, bool refinement);

  // Whether the plan of (batch, accumulation) fits the memory budget (no prepare, no point recorded); the
  // reason when it does not.
  [[nodiscard]] std::optional<std::string> plan_over_budget(int64_t batch, int64_t accumulation) const;

  // Prepares (batch, accumulation) and releases the session at once: does it fit? Records no point; counts a
  // probe. nullopt when should_stop() says to stop.
  [[nodiscard]] std::optional<FitProbe> probe(int64_t batch, int64_t accumulation);

  // Records a point that a probe found not to fit (status oom, over_limit or error), without measuring it.
  void record_unfit(int64_t batch, int64_t accumulation, PointStatus status, std::string reason,
                    bool refinement);

  // Where the backend cannot report out-of-memory at prepare (the CPU): why the plan of (batch,
  // accumulation) cannot be held now though the budget allows it (memory other processes hold); nullopt when
  // it can, or when only preparing would tell.
  [[nodiscard]] std::optional<std::string> over_memory_now(int64_t batch, int64_t accumulation) const;

  // The largest batch whose plan fits the budget (capped at kMaxBatch); nullopt without a budget or when
  // batch 1 does not fit.
  [[nodiscard]] std::optional<int64_t> plan_max_fit(int64_t accumulation) const;
  [[nodiscard]] bool has_budget() const { return budget_bytes_ > 0; }

  [[nodiscard]] const Point* find(int64_t batch, int64_t accumulation) const;
  [[nodiscard]] Point* find(int64_t batch, int64_t accumulation) {
    return const_cast<Point*>(std::as_const(*this).find(batch, accumulation));
  }
  [[nodiscard]] const std::vector<Point>& points() const { return points_; }
  [[nodiscard]] bool interrupted() const { return interrupted_; }
  [[nodiscard]] int measured_points() const { return measured_; }
  [[nodiscard]] int probed_points() const { return probed_; }
  [[nodiscard]] int resumed_points() const { return resumed_; }
  [[nodiscard]] const Graph& graph() const { return graph_; }
  [[nodiscard]] const SweepSettings& settings() const { return settings_; }

  // What on_point_start reports as the total: an exact count or an estimate.
  void set_planned_total(int total, bool estimate);
  void warn(std::string warning) { warnings_.push_back(std::move(warning)); }
  // The warnings the sweep's outcome would hold were it to end now (those the end adds, on the points that
  // stopped short and on a busy host, included): for each rewrite, and for a fatal error's report.
  [[nodiscard]] std::vector<std::string> warnings_so_far() const;
  void set_untimed_fit(UntimedFit fit) { untimed_fit_ = std::move(fit); }

  // run --rounds N: rounds 2..N over the points that are ok in every round so far (src/sweep/rounds.cpp),
  // each round in the order of batch, descending in even rounds and ascending in odd ones. Returns when
  // done, or when should_stop() interrupts (the round being timed is dropped; its point keeps the rounds
  // before it).
  void run_rounds();

  // check_plannable (plan.hpp) for this sweep's settings: a model with no batch that plans is refused.
  void check_plannable() const;

  // Ends the sweep: on_sweep_end, then the outcome with the points sorted.
  [[nodiscard]] SweepOutcome finish(std::string search_summary);

 private:
  [[nodiscard]] PlanRequest request(int64_t batch, int64_t accumulation) const;
  [[nodiscard]] PlanRequest request(int64_t batch, int64_t accumulation, const ExecutionPaths& paths) const;
  [[nodiscard]] std::optional<std::string> plan_over_budget(const PlanRequest& request) const;

  // What preparing one point gave: a session, or the status and reason it failed with. `plan` is the plan
  // the session was (or would have been) prepared with: on another path where the backend rejected one.
  struct Prepared {
    std::unique_ptr<Session> session;
    Plan plan;
    PointStatus status = PointStatus::ok;
    std::string reason;
  };
  // Prepares (batch, accumulation) with the sweep's paths. Where the backend rejects a library path at this
  // batch (PathRejected) that the user did not force, plans the point again on our own path, checks that plan
  // against the budget and prepares it; the plan's paths note says so.
  [[nodiscard]] Prepared prepare_point(int64_t batch, int64_t accumulation, int round = 1);
  // The sweep's paths with the rejected one replaced by our own; nullopt where the user forced it.
  [[nodiscard]] std::optional<ExecutionPaths> fallback_paths(const ExecutionPaths& paths,
                                                             const PathRejected& rejected);
  // Warm-up, then timed steps until the criterion holds, a non-finite loss or a backend error (recorded in
  // the point). False when should_stop() interrupted.
  [[nodiscard]] bool time_steps(Session& session, Point& point, NoiseCriterion& criterion);
  // Statistics, throughput, TFLOP/s, MFU and the stop reason of a timed point; a stopping warning when due.
  void summarize_point(Point& point, const Plan& plan, const NoiseCriterion& criterion);
  // Throughput, tokens/s, TFLOP/s and MFU of an ok point from its step_ms.mean.
  void rates(Point& point, const Plan& plan) const;
  // One more round of the stored ok point (batch, accumulation), pooled into it (rounds.cpp). False when
  // should_stop() interrupted it.
  [[nodiscard]] bool measure_round(int64_t batch, int64_t accumulation, int round);
  // Tells the observer a stored point is done (again, after a round): with every point so far.
  void notify_done(const Point& stored, bool taken = false);
  // run --rounds: the warning naming the points whose rounds disagree (rounds_agreement), if any.
  void warn_disagreeing_rounds();
  void add_memory_warning(const Point& point);
  std::optional<Point> measure_point(int64_t batch, int64_t accumulation, bool refinement);
  void add_session_warnings(const Point& point);
  // Training at a micro-batch where a batchnorm sees one value per channel (a vector at batch 1): said once.
  void add_model_warnings(const Point& point);
  // The warnings on points that stopped short of their targets: one each for up to kStopWarningsListed
  // points, else one naming them all.
  [[nodiscard]] std::vector<std::string> stop_warning_lines() const;
  static constexpr size_t kStopWarningsListed = 3;
  void insert(Point point, bool taken = false);
  // The ok point of SweepSettings::resume_points at (batch, accumulation), if there is one.
  [[nodiscard]] const Point* resumable(int64_t batch, int64_t accumulation) const;
  // The ok resume points of this sweep's accumulation (or effective batch) that it has not reached, whose
  // plans fit the budget and that lie below every batch this run found unfit at their accumulation.
  [[nodiscard]] std::vector<Point> unreached_resume_points() const;
  // points_ and unreached_resume_points(), sorted: what an export written mid-sweep, or an interrupted
  // sweep's outcome, holds.
  [[nodiscard]] std::vector<Point> points_with_unreached() const;

  Backend& backend_;
  const Graph& graph_;
  const SweepSettings& settings_;
  SweepObserver& observer_;
  DeviceInfo device_;
  ExecutionPaths paths_;  // asked of the backend once: every point is planned with them
  SessionOptions session_options_;
  // Where the host's load is measured (the cpu and cuda backends: a scripted device's steps need no CPU): the
  // CPUs this process may run on, for /proc/stat.
  bool measure_host_ = false;
  std::vector<int> host_cpus_;
  uint64_t budget_bytes_ = 0;  // 0: no budget known
  std::string budget_name_;    // "device memory", "--memory-limit"
  std::vector<Point> points_;  // sorted by (effective_batch, batch)
  std::vector<std::string> warnings_;
  std::set<std::string> session_warnings_seen_;
  bool single_value_batchnorm_warned_ = false;
  std::set<RejectedPath> fallbacks_warned_;  // a per-point path fallback is warned once per path
  // Points that stopped at --timeout or the sample cap before meeting their targets: (batch label, why).
  // A few are warned one by one; many (a noisy machine) become one line, see finish().
  struct StopWarning {
    int64_t batch = 0, accumulation = 1;
    std::string why;
    size_t samples = 0;       // timed steps
    bool warmup_cut = false;  // --timeout cut its warm-up short
    int round = 1;            // run --rounds: the round that stopped short
  };
  std::vector<StopWarning> stop_warnings_;  // in sweep order
  std::string warmup_cut_;                  // the point being timed: why its warm-up was cut short, if it was
  int started_ = 0;
  int planned_total_ = 0;
  bool total_is_estimate_ = false;
  bool interrupted_ = false;
  int measured_ = 0;
  std::optional<UntimedFit> untimed_fit_;
  int probed_ = 0;
  int resumed_ = 0;
  // run --rounds: the points of round 1 in the order it ran them (ok ones, measured or resumed), and the
  // points this run has measured, so a resumed point measured in a later round counts once.
  std::vector<std::pair<int64_t, int64_t>> first_round_order_;
  std::set<std::pair<int64_t, int64_t>> measured_now_;
};

// The strategies, each in its own file.
void run_batch_list(PointRunner& runner, const std::vector<int64_t>& batches, int64_t accumulation);
void run_effective_batch(PointRunner& runner, int64_t effective_batch, std::string& summary);
void run_auto_search(PointRunner& runner, std::string& summary);

}  // namespace bsw::sweep_detail
