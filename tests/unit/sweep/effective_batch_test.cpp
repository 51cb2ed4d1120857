// --effective-batch N: the micro-batch x accumulation splits, measured from the largest micro-batch down, and
// the early stop once smaller micro-batches keep getting slower.
#include <gtest/gtest.h>

#include "batchsweep/errors.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::find_point;
using testing::RecordingObserver;
using testing::tiny_graph;

TEST(EffectiveBatchSplits, PowersOfTwoThatDivide) {
  EXPECT_EQ(effective_batch_splits(1), (std::vector<BatchSplit>{{1, 1}}));
  EXPECT_EQ(effective_batch_splits(8), (std::vector<BatchSplit>{{8, 1}, {4, 2}, {2, 4}, {1, 8}}));
  // Every divisor, not only the powers of two: 32x3 and 1x96 too.
  EXPECT_EQ(effective_batch_splits(96), (std::vector<BatchSplit>{{96, 1},
                                                                 {48, 2},
                                                                 {32, 3},
                                                                 {24, 4},
                                                                 {16, 6},
                                                                 {12, 8},
                                                                 {8, 12},
                                                                 {6, 16},
                                                                 {4, 24},
                                                                 {3, 32},
                                                                 {2, 48},
                                                                 {1, 96}}));
  EXPECT_EQ(effective_batch_splits(12),
            (std::vector<BatchSplit>{{12, 1}, {6, 2}, {4, 3}, {3, 4}, {2, 6}, {1, 12}}));
  EXPECT_EQ(effective_batch_splits(7), (std::vector<BatchSplit>{{7, 1}, {1, 7}}));
  EXPECT_EQ(effective_batch_splits(kMaxBatch).size(), 25u);
  // 720720 has 240 divisors: a ladder from 720720x1 to 1x720720, each accumulation >= 1.4x the last.
  const std::vector<BatchSplit> ladder = effective_batch_splits(720720);
  EXPECT_LE(ladder.size(), 41u);
  EXPECT_GE(ladder.size(), 30u);
  EXPECT_EQ(ladder.front(), (BatchSplit{720720, 1}));
  EXPECT_EQ(ladder.back(), (BatchSplit{1, 720720}));
  for (std::size_t i = 1; i + 1 < ladder.size(); ++i) {
    EXPECT_EQ(720720 % ladder[i].accumulation, 0);
    EXPECT_GE(ladder[i].accumulation, 1.4 * ladder[i - 1].accumulation) << i;
  }
}

TEST(EffectiveBatchSplits, RejectsOutOfRange) {
  EXPECT_THROW((void)effective_batch_splits(0), UsageError);
  EXPECT_THROW((void)effective_batch_splits(kMaxBatch + 1), UsageError);
  try {
    (void)effective_batch_splits(-3);
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--effective-batch:", 0), 0u);
  }
}

// 8198 = 2 x 4099: where 8198x1 and 4099x2 do not fit, 2x4099 runs (8.2 s a step: 4099 micro-batches at the
// 2 ms floor), and 1x8198, up to twice that a step, is not timed: one step of it (up to 16.4 s) could outlast
// --timeout 15. (Under 16.4 s it would be timed, the timeout cutting it short.)
TEST(EffectiveBatch, ASplitTooSlowToTimeIsNotTimed) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.oom_above_batch = 2048;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings;
  settings.effective_batch = 8198;
  settings.stopping.timeout_s = 15;  // a step of 8.2 s fits; of 16.4 s it does not
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.points.size(), 3u) << outcome.search_summary;
  EXPECT_EQ(outcome.points[0].batch, 2);
  EXPECT_EQ(outcome.points[0].status, PointStatus::ok);
  EXPECT_NEAR(outcome.points[0].step_ms.mean, 4099 * 2.0, 1e-6);
  EXPECT_EQ(outcome.points[1].status, PointStatus::oom);  // 4099x2
  EXPECT_EQ(outcome.points[2].status, PointStatus::oom);  // 8198x1
  EXPECT_EQ(testing::find_point(outcome.points, 1, 8198), nullptr);
  // Splits that did not fit were tried, not measured: said apart.
  EXPECT_NE(
      outcome.search_summary.find("effective batch 8198: 1 of 4 splits (micro-batch x accumulation) "
                                  "measured; did not fit: 8198 (oom), 4099x2 (oom); not timed, too slow "
                                  "for --timeout 15 s (from 1x8198 on, one step could take up to 16.4 s): "
                                  "1x8198"),
      std::string::npos)
      << outcome.search_summary;
  ASSERT_FALSE(outcome.warnings.empty());
  EXPECT_NE(
      outcome.warnings.back().find("--effective-batch 8198: 1 split not timed, too slow for --timeout 15 "
                                   "s (from 1x8198 on, one step could take up to 16.4 s"),
      std::string::npos)
      << outcome.warnings.back();
}

// An --effective-batch sweep of N on a scripted device.
SweepOutcome effective_sweep(const ScriptedConfig& config, int64_t effective_batch) {
  const auto backend = make_scripted_backend(config);
  SweepSettings settings;
  settings.effective_batch = effective_batch;
  RecordingObserver observer;
  return run_sweep(*backend, tiny_graph(), settings, observer);
}

// The same on a roofline device (2 ms floor) that runs out of memory above `oom_above`.
SweepOutcome effective_sweep(double samples_per_ms, int64_t oom_above, int64_t effective_batch) {
  ScriptedConfig config = testing::roofline(2.0, samples_per_ms);
  config.oom_above_batch = oom_above;
  return effective_sweep(config, effective_batch);
}

// A split measured that failed otherwise than out of memory (a non-finite loss: error) is named on the search
// line, as the splits that did not fit are: "5 of 11 measured" must not read as five that ran.
TEST(EffectiveBatch, ASplitThatFailedIsNamedInTheSummary) {
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  config.nan_at_batch = 128;
  const SweepOutcome outcome = effective_sweep(config, 1024);
  const Point* failed = find_point(outcome.points, 128, 8);
  ASSERT_NE(failed, nullptr) << outcome.search_summary;
  EXPECT_EQ(failed->status, PointStatus::error);
  EXPECT_NE(outcome.search_summary.find("; failed: 128x8 (error)"), std::string::npos)
      << outcome.search_summary;
}

// 720 has 30 divisors, so the sweep takes a ladder of them; where 24x30 does not fit, the ladder's next step
// is 16x45, and 20x36 and 18x40 would be skipped, though 20x36 fits and is the fastest. Once a ladder split
// fits after one that did not, the skipped splits between are probed from the largest down.
TEST(EffectiveBatch, TheSplitsTheLadderSkippedAtTheMemoryEdgeAreProbed) {
  const SweepOutcome outcome = effective_sweep(16.0, 20, 720);  // the knee at micro-batch 32
  const Point* twenty = find_point(outcome.points, 20, 36);
  ASSERT_NE(twenty, nullptr) << outcome.search_summary;
  EXPECT_EQ(twenty->status, PointStatus::ok);
  EXPECT_EQ(find_point(outcome.points, 18, 40), nullptr);  // 20x36 fit: on along the ladder
  ASSERT_NE(find_point(outcome.points, 16, 45), nullptr);
  for (const Point& p : outcome.points) {
    if (p.batch > 20) {
      EXPECT_EQ(p.status, PointStatus::oom) << p.batch;
    }
  }
  // 24x30 did not fit and 16x45 did: 20x36 is probed, fits, and is measured; 18x40 is not needed.
  EXPECT_NE(outcome.search_summary.find("; between the ladder's steps, the largest that fits: 20x36"),
            std::string::npos)
      << outcome.search_summary;
}

// Every split tried counts in "k of n splits": a probe that did not fit (20x36 where the edge is 19) as much
// as the one measured after it (18x40), and a sweep stopped by a signal still says what it measured.
TEST(EffectiveBatch, TheSummaryCountsEveryProbeAndSurvivesAnInterrupt) {
  const std::size_t ladder = effective_batch_splits(720).size();
  const SweepOutcome outcome = effective_sweep(16.0, 19, 720);
  ASSERT_NE(find_point(outcome.points, 18, 40), nullptr) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("20x36 (oom)"), std::string::npos) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find(" of " + std::to_string(ladder + 2) + " splits"), std::string::npos)
      << outcome.search_summary;

  ScriptedConfig config = testing::roofline(2.0, 16.0);
  const auto backend = make_scripted_backend(config);
  SweepSettings settings;
  settings.effective_batch = 64;
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() >= 2; };
  const SweepOutcome stopped = run_sweep(*backend, tiny_graph(), settings, observer);
  EXPECT_TRUE(stopped.interrupted);
  EXPECT_NE(
      stopped.search_summary.find("effective batch 64: 2 of 7 splits (micro-batch x accumulation) measured"),
      std::string::npos)
      << stopped.search_summary;
  EXPECT_NE(stopped.search_summary.find("; interrupted before the rest"), std::string::npos)
      << stopped.search_summary;
}

// 97 is prime: where 97x1 does not fit, only 1x97 runs, 97 micro-batches of one. The summary names the
// effective batch within 5% with the most micro-batches between the two: 96, 48x2 down to 2x48 (96x1 too,
// as nothing says it would not fit).
TEST(EffectiveBatch, APrimeEffectiveBatchNamesANearbyOneWithALargerMicroBatch) {
  const SweepOutcome outcome = effective_sweep(16.0, 20, 97);
  ASSERT_NE(find_point(outcome.points, 1, 97), nullptr) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find(
                "; 97 has no micro-batch between 1 (fit) and 97 (did not): --effective-batch 96 has 11 "
                "splits, 96x1 down to 2x48"),
            std::string::npos)
      << outcome.search_summary;
  // Where the divisors leave no wide gap at the edge (720: 20x36 fits, 24x30 does not), no hint.
  EXPECT_EQ(effective_sweep(16.0, 20, 720).search_summary.find("has no micro-batch"), std::string::npos);
  // Nor where a split in the gap failed otherwise (194: 194x1 oom, 97x2 a non-finite loss, 2x97 ok): the gap
  // is not one of memory.
  {
    ScriptedConfig config = testing::roofline(2.0, 16.0);
    config.oom_above_batch = 150;
    config.nan_at_batch = 97;
    const auto backend = make_scripted_backend(config);
    SweepSettings settings;
    settings.effective_batch = 194;
    RecordingObserver observer;
    const SweepOutcome errored = run_sweep(*backend, tiny_graph(), settings, observer);
    ASSERT_NE(find_point(errored.points, 97, 2), nullptr) << errored.search_summary;
    EXPECT_EQ(find_point(errored.points, 97, 2)->status, PointStatus::error);
    EXPECT_EQ(errored.search_summary.find("has no micro-batch"), std::string::npos) << errored.search_summary;
  }
  // Nor where the largest split fits.
  EXPECT_EQ(effective_sweep(16.0, 1000, 97).search_summary.find("has no micro-batch"), std::string::npos);
}

TEST(EffectiveBatch, StopsAfterTwoSlowerSplits) {
  const Graph graph = tiny_graph();
  // Knee at 256: 256x1 takes 2 ms, 128x2 4 ms, 64x4 8 ms: each halving is 50% slower.
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  SweepSettings settings;
  settings.effective_batch = 256;
  settings.batches.batches = {1, 2, 3};  // ignored with an effective batch
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.points.size(), 3u);
  for (const Point& p : outcome.points) {
    EXPECT_EQ(p.effective_batch, 256);
    EXPECT_EQ(p.batch * p.accumulation, 256);
    EXPECT_EQ(p.status, PointStatus::ok);
  }
  EXPECT_NEAR(find_point(outcome.points, 256, 1)->samples_per_second, 128000.0, 1.0);
  EXPECT_NEAR(find_point(outcome.points, 128, 2)->samples_per_second, 64000.0, 1.0);
  EXPECT_NEAR(find_point(outcome.points, 64, 4)->samples_per_second, 32000.0, 1.0);
  // Measured from the largest micro-batch down.
  ASSERT_EQ(observer.starts.size(), 3u);
  EXPECT_EQ(observer.starts[0].batch, 256);
  EXPECT_EQ(observer.starts[1].batch, 128);
  EXPECT_EQ(observer.starts[1].accumulation, 2);
  EXPECT_EQ(observer.starts[0].planned_total, 9);
  EXPECT_NE(outcome.search_summary.find("3 of 9 splits"), std::string::npos) << outcome.search_summary;
  EXPECT_NE(outcome.search_summary.find("stopped after micro-batch 64"), std::string::npos)
      << outcome.search_summary;
}

// Two slower splits at the end of the list are no early stop: nothing was left untried. (A split that did
// not fit is not 'measured', so the count of measured splits cannot tell.)
TEST(EffectiveBatch, SlowerSplitsAtTheEndAreNoEarlyStop) {
  const SweepOutcome outcome = effective_sweep(128.0, 4, 8);
  ASSERT_EQ(outcome.points.size(), 4u);
  EXPECT_NE(outcome.search_summary.find(
                "3 of 4 splits (micro-batch x accumulation) measured; did not fit: 8 (oom)"),
            std::string::npos)
      << outcome.search_summary;
  EXPECT_EQ(outcome.search_summary.find("stopped after"), std::string::npos) << outcome.search_summary;
}

// --resume: the splits the earlier run measured are taken, and the summary says how many.
TEST(EffectiveBatch, ResumedSplitsAreTakenAndCounted) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  SweepSettings settings;
  settings.effective_batch = 256;
  RecordingObserver first_observer;
  const SweepOutcome first = run_sweep(*backend, graph, settings, first_observer);
  for (Point p : first.points) {
    p.resumed_from = "2026-11-30T00:00:00Z";
    settings.resume_points.push_back(p);
  }
  RecordingObserver observer;
  const SweepOutcome resumed = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(resumed.points.size(), first.points.size());
  EXPECT_EQ(resumed.measured_points, 0);
  EXPECT_EQ(resumed.resumed_points, 3);
  for (const Point& p : resumed.points) EXPECT_EQ(p.resumed_from, "2026-11-30T00:00:00Z") << p.batch;
  EXPECT_NE(resumed.search_summary.find("3 of 9 splits (micro-batch x accumulation) measured (3 taken from "
                                        "--resume)"),
            std::string::npos)
      << resumed.search_summary;
}

TEST(EffectiveBatch, SkipsSplitsThatDoNotFitAndKeepsGoingWhileFlat) {
  const Graph graph = tiny_graph();
  // Knee at 16: micro-batches from 16 up all run at 8 samples/ms; the two above 32 run out of memory.
  ScriptedConfig config = testing::roofline(2.0, 8.0);
  config.oom_above_batch = 32;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings;
  settings.effective_batch = 128;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  // 128x1 oom, 64x2 oom, 32x4 ok, 16x8 as fast (flat), 8x16 50% slower, 4x32 slower again: stop.
  ASSERT_EQ(outcome.points.size(), 6u);
  EXPECT_EQ(find_point(outcome.points, 128, 1)->status, PointStatus::oom);
  EXPECT_EQ(find_point(outcome.points, 64, 2)->status, PointStatus::oom);
  EXPECT_EQ(find_point(outcome.points, 32, 4)->status, PointStatus::ok);
  EXPECT_NEAR(find_point(outcome.points, 16, 8)->samples_per_second,
              find_point(outcome.points, 32, 4)->samples_per_second, 1.0);
  EXPECT_EQ(find_point(outcome.points, 2, 64), nullptr);
  for (const Point& p : outcome.points) EXPECT_EQ(p.effective_batch, 128);
}

TEST(EffectiveBatch, MeasuresEverySplitWhenNoneGetsSlower) {
  const Graph graph = tiny_graph();
  // t0 tiny: micro_ms = b / rate, so every split takes the same time.
  const auto backend = make_scripted_backend(testing::roofline(1e-6, 16.0));
  SweepSettings settings;
  settings.effective_batch = 16;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(outcome.points.size(), 5u);
  EXPECT_NE(outcome.search_summary.find("5 of 5 splits"), std::string::npos) << outcome.search_summary;
}

}  // namespace
}  // namespace bsw
