// --batch auto on scripted devices: the knee region and the fit edge found with few timed points, plan-based
// edges found without preparing what the plan rejects, plateaus, and the batch cap.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::find_point;
using testing::planned_bytes;
using testing::RecordingObserver;
using testing::tiny_graph;

SweepSettings auto_settings() {
  SweepSettings settings;
  settings.batches.auto_search = true;
  settings.batches.text = "auto";
  return settings;
}

// An interrupted run's points as --resume hands them to the next run.
std::vector<Point> as_resumed(std::vector<Point> points) {
  for (Point& p : points) p.resumed_from = "2026-11-30T00:00:00Z";
  return points;
}

// The analysis's answer to a latency budget over a sweep's points.
std::optional<BatchChoice> latency_choice(const SweepOutcome& outcome, double budget_ms) {
  AnalysisOptions options;
  options.latency_slo_ms = budget_ms;
  std::vector<Point> points = outcome.points;
  return analyze(points, options).latency_slo;
}

int64_t largest_ok(const std::vector<Point>& points) {
  int64_t batch = 0;
  for (const Point& p : points)
    if (p.status == PointStatus::ok) batch = std::max(batch, p.batch);
  return batch;
}

int64_t smallest_failed_above(const std::vector<Point>& points, int64_t batch) {
  int64_t smallest = INT64_MAX;
  for (const Point& p : points)
    if (p.status != PointStatus::ok && p.batch > batch) smallest = std::min(smallest, p.batch);
  return smallest;
}

TEST(AutoSearch, RooflineFindsTheKneeRegionAndTheFitEdgeWithFewPoints) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);  // knee at 256
  config.oom_above_batch = 2048;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  ASSERT_FALSE(outcome.interrupted);
  RecordProperty("search_summary", outcome.search_summary);

  // The fit edge, to one multiple of 8: 2048 runs, 2056 does not.
  const int64_t fit = largest_ok(outcome.points);
  EXPECT_EQ(fit, 2048);
  const int64_t failed = smallest_failed_above(outcome.points, fit);
  EXPECT_LE(failed - fit, 8) << "edge " << fit << " | " << failed;
  EXPECT_EQ(find_point(outcome.points, failed)->status, PointStatus::oom);
  EXPECT_TRUE(find_point(outcome.points, failed)->refinement);

  // The knee region: the knee of the final points lies between the growth points around 256, and the
  // refinement measured the midpoints there.
  const KneeResult knee = find_knee(outcome.points, 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_GE(*knee.batch, 128);
  EXPECT_LE(*knee.batch, 512);
  const Point* below = find_point(outcome.points, 184);
  const Point* above = find_point(outcome.points, 360);
  ASSERT_NE(below, nullptr);
  ASSERT_NE(above, nullptr);
  EXPECT_TRUE(below->refinement);
  EXPECT_TRUE(above->refinement);
  EXPECT_NEAR(below->samples_per_second, 92000.0, 920.0);    // 184 / 2 ms
  EXPECT_NEAR(above->samples_per_second, 128000.0, 1280.0);  // flat past the knee

  // Few timed points: growth to the plateau (1..1024), the fit edge, two around the knee.
  EXPECT_LE(outcome.measured_points, 20);
  EXPECT_EQ(outcome.measured_points, 14);
  int timed = 0;
  for (const Point& p : outcome.points) timed += p.samples_ms.empty() ? 0 : 1;
  EXPECT_EQ(timed, outcome.measured_points);
  EXPECT_LE(outcome.points.size(), 20u);
  EXPECT_NE(outcome.search_summary.find("auto: 14 points timed"), std::string::npos)
      << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("largest fit 2048, oom at 2056"), std::string::npos)
      << outcome.search_summary;
  // The knee it refined around is the growth points' (the final analysis may move it).
  EXPECT_NE(outcome.search_summary.find("knee at 256 before refinement, points added at 184, 360"),
            std::string::npos)
      << outcome.search_summary;

  // Each prepare-only probe told the observer (the progress line moves during them): growth past the
  // plateau at 2048 and 4096, then the bisection, ending at 2056.
  ASSERT_GE(observer.probes.size(), 3u);
  EXPECT_EQ(observer.probes[0], 2048);
  EXPECT_EQ(observer.probes[1], 4096);
  EXPECT_EQ(observer.probes.back(), failed);

  // The growth points are not refinements; the progress total was an estimate.
  EXPECT_FALSE(find_point(outcome.points, 64)->refinement);
  EXPECT_TRUE(observer.starts.front().total_is_estimate);
  for (const Point& p : outcome.points) EXPECT_EQ(p.effective_batch, p.batch);
}

// A small fit edge (a large model on a small GPU) is found exactly: to a multiple of 8 an edge at 12 read as
// 8, 50% low, with nothing said of 9 to 15. From 64 up a step of 8 is at most 12.5%, and the edge stays to a
// multiple of 8.
TEST(AutoSearch, ASmallFitEdgeIsFoundExactly) {
  const Graph graph = tiny_graph();
  for (const int64_t edge : {5, 12, 37, 63}) {
    ScriptedConfig config = testing::roofline(2.0, 128.0);
    config.oom_above_batch = edge;
    const auto backend = make_scripted_backend(config);
    RecordingObserver observer;
    const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
    EXPECT_EQ(largest_ok(outcome.points), edge);
    const int64_t failed = smallest_failed_above(outcome.points, edge);
    EXPECT_EQ(failed, edge + 1) << "edge " << edge;
  }
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.oom_above_batch = 100;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  EXPECT_EQ(largest_ok(outcome.points), 96);
  EXPECT_EQ(smallest_failed_above(outcome.points, 96), 104);
}

// --resume of an interrupted auto search: the same search, with every point the first run finished taken as
// it was; what was oom then is probed again.
// With gradient accumulation the growth stops at 2^24 samples per step, as --batch's list does: at
// accumulation 2^22, batch 4.
TEST(AutoSearch, GrowthStopsAtTheSamplesPerStepCap) {
  ScriptedConfig config = testing::roofline(0.001, 1e9, 0.0);  // fast enough to time every batch
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.accumulation = int64_t{1} << 22;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, tiny_graph(), settings, observer);
  for (const Point& p : outcome.points) EXPECT_LE(p.batch, 4) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("reached the cap of 16777216 (2^24) samples per step, batch 4 x "
                                        "accumulation 4194304"),
            std::string::npos)
      << outcome.search_summary;
}

TEST(AutoSearch, ResumedSearchTakesTheFinishedPointsAndEndsWhereAFreshOneWould) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.0);  // no noise: both searches decide alike
  config.oom_above_batch = 2048;
  const auto fresh_backend = make_scripted_backend(config);
  RecordingObserver fresh_observer;
  const SweepOutcome fresh = run_sweep(*fresh_backend, graph, auto_settings(), fresh_observer);

  // Interrupted after its sixth finished point.
  const auto first_backend = make_scripted_backend(config);
  RecordingObserver first_observer;
  first_observer.stop_when = [](const RecordingObserver& o) { return o.done.size() >= 6; };
  const SweepOutcome first = run_sweep(*first_backend, graph, auto_settings(), first_observer);
  ASSERT_TRUE(first.interrupted);
  ASSERT_EQ(first.points.size(), 6u);

  SweepSettings settings = auto_settings();
  settings.resume_points = as_resumed(first.points);
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome resumed = run_sweep(*backend, graph, settings, observer);
  ASSERT_FALSE(resumed.interrupted);
  // The same batches as the fresh search, the first six as they were measured.
  ASSERT_EQ(resumed.points.size(), fresh.points.size());
  for (std::size_t i = 0; i < fresh.points.size(); ++i) {
    EXPECT_EQ(resumed.points[i].batch, fresh.points[i].batch) << i;
    EXPECT_EQ(resumed.points[i].status, fresh.points[i].status) << i;
  }
  int taken = 0;
  for (const Point& earlier : first.points) {
    const Point* p = find_point(resumed.points, earlier.batch);
    ASSERT_NE(p, nullptr) << earlier.batch;
    if (earlier.status != PointStatus::ok) continue;
    ++taken;
    EXPECT_EQ(p->resumed_from, "2026-11-30T00:00:00Z") << earlier.batch;
    EXPECT_EQ(p->samples_ms, earlier.samples_ms) << earlier.batch;
  }
  EXPECT_EQ(resumed.resumed_points, taken);
  EXPECT_EQ(resumed.measured_points + resumed.resumed_points, fresh.measured_points);
  EXPECT_NE(resumed.search_summary.find(fmt::format("auto: {} points timed and {} taken from --resume",
                                                    resumed.measured_points, resumed.resumed_points)),
            std::string::npos)
      << resumed.search_summary;
  for (const Point& p : resumed.points) {
    if (p.batch > 1024) {
      EXPECT_TRUE(p.resumed_from.empty()) << p.batch;  // measured by this run
    }
  }
}

// A listed sweep whose first batch above the largest that ran ok is over the memory limit: the plan knows the
// edge, so its largest fit between them is named (untimed), not left to a --batch range over the limit.
TEST(BatchList, AnOverLimitBatchNamesThePlansLargestFitBelowIt) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  SweepSettings settings;
  settings.batches.batches = {1000, 2000, 4096};
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 3003)) / 0.95) + 1;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const auto plan_edge =
      max_fit_batch(graph, PlanRequest{1, Precision::fp32, Mode::train, 1, BackendKind::scripted},
                    *settings.memory_limit_bytes);
  ASSERT_TRUE(plan_edge.has_value());
  ASSERT_EQ(find_point(outcome.points, 4096)->status, PointStatus::over_limit);
  ASSERT_TRUE(outcome.untimed_fit.has_value());
  EXPECT_EQ(outcome.untimed_fit->batch, *plan_edge);
  EXPECT_NE(
      outcome.untimed_fit->reason.find("by the plan, the largest within the memory limit (batch 4096 was "
                                       "over_limit)"),
      std::string::npos)
      << outcome.untimed_fit->reason;
  // An out-of-memory above (not the plan's answer) names nothing.
  ScriptedConfig oom = testing::roofline(2.0, 128.0);
  oom.oom_above_batch = 3000;
  const auto failing = make_scripted_backend(oom);
  SweepSettings plain;
  plain.batches.batches = {1000, 2000, 4096};
  EXPECT_FALSE(run_sweep(*failing, graph, plain, observer).untimed_fit.has_value());
}

// Where the largest batch that ran ok is the plan's largest fit, the batch after it is recorded over_limit
// (a refinement point), so max fit names the edge rather than "--batch 40:56:+8 measures them", a range
// the plan puts over the limit (a walk followed that advice into exit 4).
TEST(BatchList, TheLargestOkBatchAtThePlansEdgeRecordsTheBatchAfterIt) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  SweepSettings settings;
  settings.batches.batches = {1000, 2000, 4096};
  // The budget's edge is batch 2000 by the plan: 2001 is over it.
  settings.memory_limit_bytes = planned_bytes(graph, 2000) * 100 / 95 + 1;
  ASSERT_EQ(max_fit_batch(graph, PlanRequest{1, Precision::fp32, Mode::train, 1, BackendKind::scripted},
                          *settings.memory_limit_bytes),
            2000);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_FALSE(outcome.untimed_fit.has_value());
  const Point* edge = find_point(outcome.points, 2001);
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(edge->status, PointStatus::over_limit);
  EXPECT_TRUE(edge->refinement);
  EXPECT_EQ(find_point(outcome.points, 4096)->status, PointStatus::over_limit);
  std::vector<Point> points = outcome.points;
  const Analysis a = analyze(points, AnalysisOptions{});
  ASSERT_EQ(a.max_fit.batch, 2000);
  EXPECT_EQ(a.max_fit.reason.rfind("batch 2001 did not fit (over_limit", 0), 0u) << a.max_fit.reason;
  EXPECT_EQ(a.max_fit.reason.find("measures them"), std::string::npos) << a.max_fit.reason;
  EXPECT_EQ(a.recommended.why.find("measures them"), std::string::npos) << a.recommended.why;
}

TEST(AutoSearch, PlanBasedEdgeIsFoundWithoutPreparingWhatThePlanRejects) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  // A budget whose edge is 3003 by the plan.
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 3003)) / 0.95) + 1;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  const auto plan_edge =
      max_fit_batch(graph, PlanRequest{1, Precision::fp32, Mode::train, 1, BackendKind::scripted},
                    *settings.memory_limit_bytes);
  ASSERT_TRUE(plan_edge.has_value());
  ASSERT_GE(*plan_edge, 3003);
  ASSERT_LT(*plan_edge, 3010);
  // The largest multiple of 8 the plan allows is measured; of the batches above it only the doubling's
  // (4096) and the edge's (the smallest the bisection found over the budget, so max_fit's reason names it)
  // are recorded, neither prepared.
  EXPECT_EQ(largest_ok(outcome.points), *plan_edge / 8 * 8);
  std::vector<int64_t> over_limit;
  for (const Point& p : outcome.points)
    if (p.status == PointStatus::over_limit) over_limit.push_back(p.batch);
  ASSERT_EQ(over_limit.size(), 2u);
  EXPECT_EQ(find_point(outcome.points, 4096)->status, PointStatus::over_limit);
  const int64_t edge = std::min(over_limit[0], over_limit[1]);
  EXPECT_GT(edge, *plan_edge / 8 * 8);
  EXPECT_LE(edge, *plan_edge + 1);
  EXPECT_TRUE(find_point(outcome.points, edge)->refinement);
  EXPECT_NE(outcome.search_summary.find("over the memory budget"), std::string::npos)
      << outcome.search_summary;
  EXPECT_LE(outcome.measured_points, 20);
  // The batches between the timed multiple of 8 and the edge fit the plan untimed: said, up to the plan's
  // largest fit, so max fit does not read as if the edge were unknown.
  // The budget puts the plan's edge between multiples of 8 (3004 when this was written).
  ASSERT_NE(*plan_edge % 8, 0) << *plan_edge;
  {
    ASSERT_EQ(edge, *plan_edge + 1);
    ASSERT_TRUE(outcome.untimed_fit.has_value());
    EXPECT_EQ(outcome.untimed_fit->batch, *plan_edge);
    EXPECT_EQ(outcome.untimed_fit->reason,
              fmt::format("by the plan, which is over the memory budget at {}; not timed: near the edge the "
                          "search times multiples of 8",
                          edge));
  }
}

// Like the CPU: prepare cannot run out of memory below the budget (the host overcommits), but memory other
// processes hold leaves only `available` bytes now, which prepare refuses to go past.
class BusyHostBackend final : public Backend {
 public:
  explicit BusyHostBackend(uint64_t available)
      : available_(available), inner_(make_scripted_backend(testing::roofline(2.0, 128.0))) {}
  BackendKind kind() const override { return BackendKind::scripted; }
  DeviceInfo device(Precision p) const override { return inner_->device(p); }
  bool reports_out_of_memory() const override { return false; }
  std::optional<std::string> over_memory_now(uint64_t bytes) const override {
    if (bytes <= available_) return std::nullopt;
    return fmt::format("{} bytes, more than the {} available now", bytes, available_);
  }
  std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                   const SessionOptions& options) override {
    ++prepared_;
    if (auto why = over_memory_now(plan.memory.total_bytes())) throw OutOfMemory(*why);
    return inner_->prepare(graph, plan, options);
  }

  uint64_t available_;
  std::unique_ptr<Backend> inner_;
  int prepared_ = 0;
};

TEST(AutoSearch, ProbesOnABusyHostFindTheEdgeOfTheMemoryFreeNowNotThePlans) {
  const Graph graph = tiny_graph();
  BusyHostBackend backend(planned_bytes(graph, 3003));  // the budget (80 GiB) is far above
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, graph, auto_settings(), observer);
  RecordProperty("search_summary", outcome.search_summary);
  // Every point that ran fits what is free; the smallest that did not names why, and is within the
  // bisection's tolerance of the edge, so no batch found to fit was measured out of memory.
  const int64_t ok = largest_ok(outcome.points);
  EXPECT_LE(ok, 3003);
  EXPECT_GE(ok, 3003 - 8);
  for (const Point& p : outcome.points) {
    if (p.status != PointStatus::ok) {
      EXPECT_EQ(p.status, PointStatus::oom) << p.batch;
      EXPECT_GT(p.batch, 3003);
      EXPECT_NE(p.reason.find("available now"), std::string::npos) << p.reason;
    }
  }
  EXPECT_LE(smallest_failed_above(outcome.points, ok), ok + 8);
  EXPECT_FALSE(outcome.untimed_fit.has_value());
  EXPECT_NE(outcome.search_summary.find("oom at"), std::string::npos) << outcome.search_summary;
}

TEST(AutoSearch, ThePlansLargerFitIsNotClaimedWhenItIsNotFreeNow) {
  const Graph graph = tiny_graph();
  SweepSettings settings = auto_settings();
  // The budget's edge is 3003 by the plan (the test above it claims 3003 untimed); only 3001 is free now.
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 3003)) / 0.95) + 1;
  BusyHostBackend backend(planned_bytes(graph, 3001));
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  EXPECT_EQ(largest_ok(outcome.points), 3000);
  EXPECT_FALSE(outcome.untimed_fit.has_value()) << outcome.untimed_fit->reason;
  EXPECT_EQ(outcome.search_summary.find("by the plan"), std::string::npos) << outcome.search_summary;
}

TEST(AutoSearch, SaturatingCurveStopsTimingAtThePlateau) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.curve = ScriptedConfig::Curve::saturating;
  config.b0 = 32;  // samples/s = b / (2 ms (1 + b/32)): each doubling gains < 3% from 1024 up
  config.oom_above_batch = 1 << 14;
  const auto backend = make_scripted_backend(config);
  // A step of 16384 takes 2 ms (1 + 16384/32) = 1.03 s: 3 warm-up + 10 timed steps need a 14 s timeout.
  SweepSettings settings = auto_settings();
  settings.stopping.timeout_s = 30;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  EXPECT_NE(outcome.search_summary.find("growth timed up to 4096 (plateau"), std::string::npos)
      << outcome.search_summary;
  // The edge is still found, by prepare-only probes, and the largest fitting batch is measured.
  EXPECT_EQ(largest_ok(outcome.points), 1 << 14);
  EXPECT_EQ(smallest_failed_above(outcome.points, 1 << 14), (1 << 14) + 8);
  EXPECT_LE(outcome.measured_points, 20);
}

TEST(AutoSearch, LargestFitTooSlowToTimeIsReportedNotTimed) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.curve = ScriptedConfig::Curve::saturating;
  config.b0 = 32;
  config.oom_above_batch = 1 << 14;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  // One step of 16384, 1.03 s (bounded by 8192's 0.51 s, doubled), could outlast a 1 s timeout: the edge is
  // found by probes but not timed.
  SweepSettings settings = auto_settings();
  settings.stopping.timeout_s = 1.0;
  settings.stopping.min_time_s = 0.1;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_LT(largest_ok(outcome.points), 1 << 14);
  EXPECT_EQ(smallest_failed_above(outcome.points, 1 << 14), (1 << 14) + 8);
  EXPECT_NE(outcome.search_summary.find("largest fit 16384"), std::string::npos) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("not timed"), std::string::npos) << outcome.search_summary;
  ASSERT_TRUE(outcome.untimed_fit.has_value());
  EXPECT_EQ(outcome.untimed_fit->batch, 1 << 14);
  EXPECT_EQ(outcome.untimed_fit->reason.rfind("oom at 16392; not timed: a step would take up to about ", 0),
            0u)
      << outcome.untimed_fit->reason;
  bool warned = false;
  for (const std::string& w : outcome.warnings) warned |= w.find("batch 16384 fits but was not timed") == 0;
  EXPECT_TRUE(warned);
}

// A plan-based edge between multiples of 8 whose batches are too slow to time: the untimed largest fit is the
// plan's, not the multiple of 8 the bisection stopped at (both are untimed; the plan's is the answer).
TEST(AutoSearch, PlanEdgeTooSlowToTimeNamesThePlansLargestFit) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.curve = ScriptedConfig::Curve::saturating;
  // A step of b ~ 3000 takes 2 ms (1 + b/32) ~ 0.19 s, bounded by 2048's 130 ms scaled: over 0.15 s.
  config.b0 = 32;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.stopping.timeout_s = 0.15;
  settings.stopping.min_time_s = 0.05;
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 3003)) / 0.95) + 1;
  const auto plan_edge =
      max_fit_batch(graph, PlanRequest{1, Precision::fp32, Mode::train, 1, BackendKind::scripted},
                    *settings.memory_limit_bytes);
  ASSERT_TRUE(plan_edge.has_value());
  ASSERT_NE(*plan_edge % 8, 0) << *plan_edge;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  EXPECT_LT(largest_ok(outcome.points), *plan_edge / 8 * 8);
  ASSERT_TRUE(outcome.untimed_fit.has_value());
  EXPECT_EQ(outcome.untimed_fit->batch, *plan_edge);
  EXPECT_EQ(
      outcome.untimed_fit->reason.rfind(
          fmt::format("by the plan, which is over the memory budget at {}; not timed: a step would take "
                      "up to about ",
                      *plan_edge + 1),
          0),
      0u)
      << outcome.untimed_fit->reason;
  // "Not timed" is said of the largest fit, not of the batch over the budget after it (a walk read it so).
  EXPECT_NE(outcome.search_summary.find(fmt::format(
                "largest fit {} by the plan (the search stopped at {}; not timed: a step would take "
                "up to about ",
                *plan_edge, *plan_edge / 8 * 8)),
            std::string::npos)
      << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find(
                fmt::format("raise --timeout to time it), over the memory budget at {}", *plan_edge + 1)),
            std::string::npos)
      << outcome.search_summary;
  bool warned = false;
  for (const std::string& w : outcome.warnings)
    warned |= w.find(fmt::format("batch {} fits by the plan but was not timed", *plan_edge)) == 0;
  EXPECT_TRUE(warned);
  // max fit names it beside the largest timed batch.
  std::vector<Point> points = outcome.points;
  AnalysisOptions options;
  options.untimed_fit = outcome.untimed_fit;
  const Analysis a = analyze(points, options);
  EXPECT_NE(a.max_fit.reason.find(fmt::format("batch {} fits too (by the plan", *plan_edge)),
            std::string::npos)
      << a.max_fit.reason;
}

TEST(AutoSearch, GrowthStopsTimingWhenTheNextBatchWouldOutlastTheTimeout) {
  const Graph graph = tiny_graph();
  // Throughput still scales (each doubling gains > 40%) while steps grow: step = 100 ms (1 + b / 100000).
  ScriptedConfig config = testing::roofline(100.0, 128.0);
  config.curve = ScriptedConfig::Curve::saturating;
  config.b0 = 100000;
  config.memory_total_bytes = uint64_t{1} << 40;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  // After 4194304 (4.29 s a step) one step of the next doubling could take 8.6 s (linearly), over the 5 s
  // timeout. (The scripted steps take no time, so --timeout cuts none of them here.)
  EXPECT_EQ(largest_ok(outcome.points), 4194304) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find(
                "growth timed up to 4194304 (one step of a larger batch could outlast --timeout 5 s)"),
            std::string::npos)
      << outcome.search_summary;
}

// A 40 ms step up to batch 8 (a device below its knee), then steps growing with the batch, under a 0.3 s
// timeout: the old bound (the whole point's 5 steps, scaled linearly from batch 1) stopped timing at batch 1
// wherever 5 steps of twice the step outlasted the timeout, though batches 2 to 8 step no slower. Growth
// times each doubling until a point's own steps do not fit (batch 16: 3 warm-up steps of 80 ms and one
// timed), and finds the edge above it by probes.
TEST(AutoSearch, GrowthTimesBatchesBelowTheKneeThoughStepsAreLong) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(40.0, 0.2);  // max(40 ms, b / 0.2 ms): 80 ms at 16
  config.sleep = true;                                   // real time passes, as with a device
  config.oom_above_batch = 64;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.stopping.timeout_s = 0.3;
  settings.stopping.min_time_s = 0.1;
  settings.stopping.min_samples = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  for (int64_t b : {1, 2, 4, 8}) {
    const auto p = std::find_if(outcome.points.begin(), outcome.points.end(),
                                [&](const Point& q) { return q.batch == b && q.status == PointStatus::ok; });
    ASSERT_NE(p, outcome.points.end()) << b << ": " << outcome.search_summary;
    EXPECT_GE(p->samples_ms.size(), 2u) << b;
  }
  EXPECT_NE(outcome.search_summary.find("growth timed up to 16 (its warm-up and two timed steps did not fit "
                                        "--timeout 0.3 s, so a larger batch's would not)"),
            std::string::npos)
      << outcome.search_summary;
  ASSERT_TRUE(outcome.untimed_fit.has_value()) << outcome.search_summary;
  EXPECT_EQ(outcome.untimed_fit->batch, 64);
  EXPECT_NE(
      outcome.untimed_fit->reason.find("batch 16's warm-up and two timed steps did not fit --timeout 0.3 s"),
      std::string::npos)
      << outcome.untimed_fit->reason;
}

// A 60 ms step under a 100 ms p99 budget: --latency-slo asks 100 samples a point (p99), which 5 s cannot
// hold even at batch 1. Growth times what --timeout allows rather than stopping there, so the budget's best
// batch is found (a walk saw batch 1 recommended where batch 32 ran 30 times as fast within the budget).
TEST(AutoSearch, ALatencyBudgetsSamplesDoNotStopGrowthAtBatchOne) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(60.0, 0.5);  // a step takes max(60 ms, b / 0.5 ms)
  config.noise_pct = 1;
  config.seed = 1;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.mode = Mode::infer;
  settings.latency_slo_ms = 100;
  settings.stopping.min_samples = 100;  // what run sets for a p99 budget
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  RecordProperty("search_summary", outcome.search_summary);
  const std::optional<BatchChoice> slo = latency_choice(outcome, 100);
  ASSERT_TRUE(slo.has_value()) << outcome.search_summary;
  EXPECT_GE(*slo->batch, 32) << slo->reason << "\n" << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("latency budget 100 ms: p99 crosses it between"), std::string::npos)
      << outcome.search_summary;
}

TEST(AutoSearch, StopsAtTheBatchCapWithoutAnEdge) {
  const Graph graph = tiny_graph();
  // Throughput keeps scaling: t0 large, so step time stays t0 far beyond 2^24 — no plateau, no oom.
  ScriptedConfig config = testing::roofline(1.0, 1e9);
  config.memory_total_bytes = UINT64_MAX / 2;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.stopping.min_samples = 2;
  settings.stopping.min_time_s = 0;
  settings.stopping.warmup_steps = 0;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(largest_ok(outcome.points), kMaxBatch);
  EXPECT_NE(outcome.search_summary.find("reached the cap"), std::string::npos) << outcome.search_summary;
}

// Past the plateau growth only prepares; where it reaches the cap without running out of memory, the cap is
// the largest fit: timed where a step fits --timeout, else named untimed (max fit's reason, a warning), not
// left as if the largest batch timed were the largest that fits.
TEST(AutoSearch, ACapReachedByProbesIsTheLargestFit) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(0.001, 1e6);  // plateau from ~1000; 2^24 takes 16.8 ms
  config.memory_total_bytes = UINT64_MAX / 2;
  const auto fast = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome timed = run_sweep(*fast, graph, auto_settings(), observer);
  const Point* cap = find_point(timed.points, kMaxBatch);
  ASSERT_NE(cap, nullptr) << timed.search_summary;
  EXPECT_EQ(cap->status, PointStatus::ok);
  EXPECT_TRUE(cap->refinement);
  EXPECT_FALSE(timed.untimed_fit.has_value());
  EXPECT_EQ(largest_ok(timed.points), kMaxBatch);

  config.curve = ScriptedConfig::Curve::saturating;  // 1 ms (1 + b / 64): 2^24 would take 262 s (264 by the
                                                     // linear extrapolation)
  config.t0_ms = 1.0;
  config.b0 = 64;
  const auto slow = make_scripted_backend(config);
  const SweepOutcome untimed = run_sweep(*slow, graph, auto_settings(), observer);
  EXPECT_EQ(find_point(untimed.points, kMaxBatch), nullptr);
  ASSERT_TRUE(untimed.untimed_fit.has_value()) << untimed.search_summary;
  EXPECT_EQ(untimed.untimed_fit->batch, kMaxBatch);
  EXPECT_NE(
      untimed.untimed_fit->reason.find("the cap of 2^24 samples a step, which growth reached with no batch "
                                       "found not to fit; not timed: a step would take up to about 26"),
      std::string::npos)
      << untimed.untimed_fit->reason;
  EXPECT_NE(untimed.search_summary.find("fit edge: largest fit 16777216, the cap (not timed"),
            std::string::npos)
      << untimed.search_summary;
  // With accumulation 3 the cap, 5592405, is no power of two: the doubling stops at 4194304, and the cap
  // itself is asked, not named by the doubling's last batch.
  SweepSettings accumulated = auto_settings();
  accumulated.accumulation = 3;
  const SweepOutcome three = run_sweep(*slow, graph, accumulated, observer);
  ASSERT_TRUE(three.untimed_fit.has_value()) << three.search_summary;
  EXPECT_EQ(three.untimed_fit->batch, 5592405);
  EXPECT_EQ(three.untimed_fit->reason.rfind("the cap of 2^24 samples a step", 0), 0u)
      << three.untimed_fit->reason;
  // A growth that stopped on an error did not reach the cap: nothing is named untimed.
  config.nan_at_batch = 16;
  const auto failing = make_scripted_backend(config);
  const SweepOutcome stopped = run_sweep(*failing, graph, auto_settings(), observer);
  EXPECT_FALSE(stopped.untimed_fit.has_value()) << stopped.search_summary;
}

// The search line says the two batches around the budget with the digits that keep each on its side: a
// p99 of 1.704 ms over a 1.7 ms budget is not "1.7 ms".
TEST(AutoSearch, TheBudgetCrossingIsSaidOnItsSides) {
  ScriptedConfig config = testing::roofline(1.0, 1.0, 0.0);
  config.curve = ScriptedConfig::Curve::saturating;  // 1 ms (1 + b / 2000)
  config.b0 = 2000;
  config.oom_above_batch = 16384;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.mode = Mode::infer;
  settings.latency_slo_ms = 1.7;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, tiny_graph(), settings, observer);
  EXPECT_NE(outcome.search_summary.find("p99 crosses it between 1344 (1.67 ms) and 1408 (1.704 ms)"),
            std::string::npos)
      << outcome.search_summary;
}

// --latency-slo: the batches where p99 crosses the budget are bisected with timed points until they are
// within 1/16 of each other, so the best batch under the budget is known to a few percent.
ScriptedConfig still_scaling() {
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.0);
  config.curve = ScriptedConfig::Curve::saturating;
  config.b0 = 4096;  // step 2 ms (1 + b / 4096): throughput still grows by a third from 4096 to 8192
  config.oom_above_batch = 8192;
  return config;
}

TEST(AutoSearch, LatencyBudgetCrossingIsBisectedToAFewPercent) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(still_scaling());
  SweepSettings settings = auto_settings();
  settings.latency_slo_ms = 2.8;  // crossed at 1638: 1600 takes 2.78 ms, 1664 2.81 ms
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_FALSE(outcome.interrupted);
  RecordProperty("search_summary", outcome.search_summary);

  // After growth (1024 within, 2048 over): 1536 within, 1792 over, 1664 over, 1600 within; 1600 and 1664
  // are 64 apart, under 1600 / 16.
  for (const int64_t batch : {1536, 1792, 1664, 1600}) {
    const Point* p = find_point(outcome.points, batch);
    ASSERT_NE(p, nullptr) << batch << ": " << outcome.search_summary;
    EXPECT_EQ(p->status, PointStatus::ok);
    EXPECT_TRUE(p->refinement) << batch;
    EXPECT_EQ(p->step_ms.p99 <= 2.8, batch == 1536 || batch == 1600) << batch << ": " << p->step_ms.p99;
  }
  EXPECT_NE(outcome.search_summary.find("; latency budget 2.8 ms: p99 crosses it between 1600 (2.78 ms) and "
                                        "1664 (2.81 ms), refined at 1536, 1792, 1664, 1600"),
            std::string::npos)
      << outcome.search_summary;

  // The analysis names the batch 2% under the crossing, where a power-of-two search named 1024 (29% slower).
  const std::optional<BatchChoice> slo = latency_choice(outcome, 2.8);
  ASSERT_TRUE(slo.has_value());
  EXPECT_EQ(slo->batch, 1600) << slo->reason;
  EXPECT_EQ(slo->reason.find("measures between"), std::string::npos) << slo->reason;
}

// Interrupted in the middle of the budget's bisection and resumed, the search ends on the fresh search's
// batches; with accumulation 2, the bisection looks at that accumulation's points only.
TEST(AutoSearch, LatencyBisectionResumesAndKeepsToItsAccumulation) {
  const Graph graph = tiny_graph();
  for (const int64_t accumulation : {1, 2}) {
    SCOPED_TRACE(fmt::format("accumulation {}", accumulation));
    SweepSettings settings = auto_settings();
    settings.latency_slo_ms =
        2.8 * static_cast<double>(accumulation);  // an optimizer step of two micro-batches
    settings.accumulation = accumulation;
    const auto fresh_backend = make_scripted_backend(still_scaling());
    RecordingObserver fresh_observer;
    const SweepOutcome fresh = run_sweep(*fresh_backend, graph, settings, fresh_observer);
    ASSERT_FALSE(fresh.interrupted);
    const Point* edge = find_point(fresh.points, 1600, accumulation);
    ASSERT_NE(edge, nullptr) << fresh.search_summary;
    EXPECT_TRUE(edge->refinement);

    // Stopped after the bisection's second point (1792), before 1664 and 1600.
    const auto first_backend = make_scripted_backend(still_scaling());
    RecordingObserver first_observer;
    first_observer.stop_when = [&](const RecordingObserver& o) {
      return o.done.size() == fresh.points.size() - 2;
    };
    const SweepOutcome first = run_sweep(*first_backend, graph, settings, first_observer);
    ASSERT_TRUE(first.interrupted);
    ASSERT_EQ(find_point(first.points, 1600, accumulation), nullptr);
    SweepSettings resume = settings;
    resume.resume_points = as_resumed(first.points);
    const auto backend = make_scripted_backend(still_scaling());
    RecordingObserver observer;
    const SweepOutcome resumed = run_sweep(*backend, graph, resume, observer);
    ASSERT_FALSE(resumed.interrupted);
    ASSERT_EQ(resumed.points.size(), fresh.points.size());
    for (std::size_t i = 0; i < fresh.points.size(); ++i) {
      EXPECT_EQ(resumed.points[i].batch, fresh.points[i].batch) << i;
      EXPECT_EQ(resumed.points[i].accumulation, accumulation) << i;
    }
    EXPECT_EQ(resumed.measured_points, 2);  // 1664 and 1600
  }
}

// A batch inside the budget's bracket that fails ends the bisection there: the search says so, and the
// analysis answers with the largest timed batch within the budget, not with the failed one.
TEST(AutoSearch, LatencyBisectionStopsAtAFailedBatchInsideTheBracket) {
  const Graph graph = tiny_graph();
  for (const bool oom : {false, true}) {
    SCOPED_TRACE(oom ? "out of memory in a step" : "a failed step");
    ScriptedConfig config = still_scaling();
    (oom ? config.step_oom_at_batch : config.step_error_at_batch) = 1536;  // bisection's first point
    const auto backend = make_scripted_backend(config);
    SweepSettings settings = auto_settings();
    settings.latency_slo_ms = 2.8;
    RecordingObserver observer;
    const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
    ASSERT_FALSE(outcome.interrupted);
    const Point* failed = find_point(outcome.points, 1536);
    ASSERT_NE(failed, nullptr) << outcome.search_summary;
    EXPECT_NE(failed->status, PointStatus::ok);
    EXPECT_TRUE(failed->refinement);
    // Nothing else was tried between 1024 and 2048.
    for (const Point& p : outcome.points)
      EXPECT_FALSE(p.batch > 1024 && p.batch < 2048 && p.batch != 1536) << p.batch;
    EXPECT_NE(outcome.search_summary.find(fmt::format("p99 crosses it between 1024 (2.5 ms) and 2048 (3 ms) "
                                                      "(batch 1536 between them: {}), refined at 1536",
                                                      to_string(failed->status))),
              std::string::npos)
        << outcome.search_summary;

    const std::optional<BatchChoice> slo = latency_choice(outcome, 2.8);
    ASSERT_TRUE(slo.has_value());
    EXPECT_EQ(slo->batch, 1024) << slo->reason;
    // The range it suggests measures the failed batch again, and says so.
    EXPECT_NE(slo->reason.find(
                  fmt::format("; batch 2048's p99 is 3 ms and batch 1536 between them has status {}: --batch "
                              "1152:1920:+128 measures between them",
                              to_string(failed->status))),
              std::string::npos)
        << slo->reason;
  }
}

// p99 need not grow with the batch (a noisy step near the budget): the search bisects where the largest
// batch within the budget lies, which is the batch the analysis would answer with.
TEST(AutoSearch, LatencyBisectionFollowsTheLargestBatchWithinTheBudget) {
  const Graph graph = tiny_graph();
  SweepSettings settings = auto_settings();
  settings.latency_slo_ms = 2.8;
  // A run stopped before the bisection: the growth and knee points only.
  const auto first_backend = make_scripted_backend(still_scaling());
  RecordingObserver first_observer;
  first_observer.stop_when = [](const RecordingObserver& o) {
    return !o.done.empty() && o.done.back().refinement && o.done.back().batch > 1024 &&
           o.done.back().batch < 2048;
  };
  const SweepOutcome first = run_sweep(*first_backend, graph, settings, first_observer);
  ASSERT_TRUE(first.interrupted);
  std::vector<Point> kept = as_resumed(first.points);
  kept.erase(std::remove_if(kept.begin(), kept.end(),
                            [](const Point& p) { return p.batch > 1024 && p.batch < 2048; }),
             kept.end());
  const auto at = [&](int64_t batch) -> Point& {
    const auto it = std::find_if(kept.begin(), kept.end(), [&](const Point& p) { return p.batch == batch; });
    EXPECT_NE(it, kept.end()) << batch;
    return *it;
  };
  ASSERT_LE(at(1024).step_ms.p99, 2.8);
  ASSERT_GT(at(2048).step_ms.p99, 2.8);
  ASSERT_GT(at(4096).step_ms.p99, 2.8);

  // A spike at 512 over the budget, below a batch within it, changes nothing: 1024 is still the largest
  // batch within the budget, and the crossing above it is bisected as in a fresh run.
  // Resumes from the kept points with the p99 of one batch changed.
  const auto resumed_with_p99 = [&](int64_t batch, double p99) {
    SweepSettings resume = settings;
    resume.resume_points = kept;
    resume.resume_points[static_cast<std::size_t>(&at(batch) - kept.data())].step_ms.p99 = p99;
    const auto backend = make_scripted_backend(still_scaling());
    RecordingObserver observer;
    return run_sweep(*backend, graph, resume, observer);
  };
  {
    const SweepOutcome outcome = resumed_with_p99(512, 3.5);
    ASSERT_FALSE(outcome.interrupted);
    EXPECT_NE(outcome.search_summary.find("p99 crosses it between 1600 (2.78 ms) and 1664 (2.81 ms), refined "
                                          "at 1536, 1792, 1664, 1600"),
              std::string::npos)
        << outcome.search_summary;
  }
  // A quick step at 4096, within the budget above 2048 over it: the largest batch within the budget is
  // 4096, so the search bisects above it, between 4096 and 8192, and not between 1024 and 2048.
  {
    const SweepOutcome outcome = resumed_with_p99(4096, 2.7);
    ASSERT_FALSE(outcome.interrupted);
    for (const Point& p : outcome.points)
      EXPECT_FALSE(p.batch > 1024 && p.batch < 2048) << p.batch << ": " << outcome.search_summary;
    EXPECT_NE(outcome.search_summary.find(
                  "; latency budget 2.8 ms: p99 crosses it between 4096 (2.7 ms) and 4352 (4.12 ms), refined "
                  "at 6144, 5120, 4608, 4352"),
              std::string::npos)
        << outcome.search_summary;
    const std::optional<BatchChoice> slo = latency_choice(outcome, 2.8);
    ASSERT_TRUE(slo.has_value());
    EXPECT_EQ(slo->batch, 4096) << slo->reason;
  }
}

// On a plateau the fastest batch under the budget is no larger one: the crossing is not bisected.
TEST(AutoSearch, LatencyBudgetOnAPlateauIsNotBisected) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);  // flat past the knee at 256
  config.oom_above_batch = 2048;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = auto_settings();
  settings.latency_slo_ms = 10.8;  // crossed between 1024 (8 ms) and 2048 (16 ms)
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(outcome.measured_points, 14);
  EXPECT_NE(outcome.search_summary.find("p99 crosses it between 1024 ("), std::string::npos)
      << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("throughput is flat below it (batch 1024 gains < 3% over batch "),
            std::string::npos)
      << outcome.search_summary;
}

TEST(AutoSearch, LatencyBudgetWithoutACrossingAddsNoPoints) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);
  config.oom_above_batch = 2048;
  for (const double budget : {1.0, 100.0}) {
    const auto backend = make_scripted_backend(config);
    SweepSettings settings = auto_settings();
    settings.latency_slo_ms = budget;
    RecordingObserver observer;
    const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
    EXPECT_EQ(outcome.measured_points, 14) << budget;
    const std::string expected =
        budget < 2 ? "latency budget 1 ms: no timed batch's p99 is within it (the smallest: "
                   : "latency budget 100 ms: the largest timed batch, 2048, is within it";
    EXPECT_NE(outcome.search_summary.find(expected), std::string::npos) << outcome.search_summary;
  }
}

TEST(AutoSearch, LatencyBudgetMustBePositive) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  SweepSettings settings = auto_settings();
  settings.latency_slo_ms = 0.0;
  RecordingObserver observer;
  try {
    (void)run_sweep(*backend, graph, settings, observer);
    FAIL() << "a zero budget was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--latency-slo"), std::string::npos) << e.what();
  }
}

TEST(AutoSearch, InterruptKeepsFinishedPoints) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() == 4; };
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  EXPECT_TRUE(outcome.interrupted);
  EXPECT_EQ(outcome.points.size(), 4u);
  EXPECT_NE(outcome.search_summary.find("interrupted"), std::string::npos) << outcome.search_summary;
}

// Stopped while timing the fit edge it had found: the edge is kept as an untimed fit, so max fit names it
// and --resume, not a sweep of the batches below it.
TEST(AutoSearch, InterruptedWhileTimingTheFitEdgeKeepsTheEdgeFound) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);
  config.oom_above_batch = 2048;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) {
    return !o.starts.empty() && o.starts.back().batch == 2048;
  };
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  ASSERT_TRUE(outcome.interrupted);
  EXPECT_EQ(find_point(outcome.points, 2048), nullptr);  // the unfinished point is dropped
  ASSERT_NE(find_point(outcome.points, 2056), nullptr);
  EXPECT_EQ(find_point(outcome.points, 2056)->status, PointStatus::oom);
  ASSERT_TRUE(outcome.untimed_fit.has_value());
  EXPECT_EQ(outcome.untimed_fit->batch, 2048);
  EXPECT_EQ(outcome.untimed_fit->reason,
            "oom at 2056; not timed: the sweep was stopped before its steps were timed (--resume times it)");
  AnalysisOptions options;
  options.untimed_fit = outcome.untimed_fit;
  options.unfinished = true;
  std::vector<Point> points = outcome.points;
  const BatchChoice fit = analyze(points, options).max_fit;
  EXPECT_EQ(fit.batch, 1024);
  EXPECT_EQ(fit.reason.rfind("the largest timed batch; batch 2048 fits too (oom at 2056; not timed", 0), 0u)
      << fit.reason;
  EXPECT_EQ(fit.reason.find("were not tried"), std::string::npos) << fit.reason;
}

TEST(AutoSearch, NothingFits) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.memory_total_bytes = 1024;  // not even batch 1
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, auto_settings(), observer);
  ASSERT_EQ(outcome.points.size(), 1u);
  EXPECT_EQ(outcome.points[0].status, PointStatus::over_limit);
  EXPECT_EQ(outcome.measured_points, 0);
}

}  // namespace
}  // namespace bsw
