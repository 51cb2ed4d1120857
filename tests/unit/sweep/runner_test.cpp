// run_sweep over a batch list with the scripted backend: throughput from the formula, oom / over_limit / NaN
// points that do not stop the sweep, memory warnings, timeouts, observer callbacks and interrupts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "batchsweep/stats.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::contains;
using testing::find_point;
using testing::list_settings;
using testing::planned_bytes;
using testing::RecordingObserver;
using testing::tiny_graph;

TEST(Runner, RooflineGivesTheExpectedThroughput) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);
  config.peak_flops = 1e12;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, list_settings({512, 1, 64}), observer);

  ASSERT_EQ(outcome.points.size(), 3u);
  EXPECT_FALSE(outcome.interrupted);
  EXPECT_EQ(outcome.measured_points, 3);
  EXPECT_EQ(outcome.probed_points, 0);
  EXPECT_TRUE(outcome.search_summary.empty());
  EXPECT_EQ(outcome.points[0].batch, 1);  // sorted
  EXPECT_EQ(outcome.points[2].batch, 512);
  // samples/s = batch / max(2 ms, batch / 128 per ms)
  const std::vector<std::pair<int64_t, double>> expected{{1, 500.0}, {64, 32000.0}, {512, 128000.0}};
  for (const auto& [batch, samples_per_second] : expected) {
    const Point* p = find_point(outcome.points, batch);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->status, PointStatus::ok);
    EXPECT_EQ(p->effective_batch, batch);
    EXPECT_NEAR(p->samples_per_second, samples_per_second, samples_per_second * 0.01) << batch;
    EXPECT_GE(p->samples_ms.size(), 10u);
    EXPECT_DOUBLE_EQ(p->step_ms.mean, summarize(p->samples_ms).mean);
    // The mean step time defines the throughput.
    EXPECT_NEAR(p->samples_per_second, batch / (p->step_ms.mean / 1000.0), 1e-6 * samples_per_second);
    ASSERT_TRUE(p->noise_pct.has_value());
    EXPECT_LE(*p->noise_pct, 1.0);
    EXPECT_EQ(p->stop_reason, "noise target");
    const Plan plan =
        make_plan(graph, PlanRequest{batch, Precision::fp32, Mode::train, 1, BackendKind::scripted});
    ASSERT_TRUE(p->tflops.has_value());
    EXPECT_NEAR(*p->tflops, plan.flops_per_step / (p->step_ms.mean / 1000.0) / 1e12, 1e-12);
    ASSERT_TRUE(p->mfu.has_value());
    EXPECT_NEAR(*p->mfu, *p->tflops * 1e12 / *config.peak_flops, 1e-12);
    EXPECT_EQ(p->memory.planned_bytes, plan.memory.total_bytes());
    EXPECT_EQ(p->memory.measured_bytes, plan.memory.total_bytes());
    EXPECT_TRUE(p->loss.has_value());
    EXPECT_FALSE(p->tokens_per_second.has_value());  // vector inputs
    EXPECT_FALSE(p->skipped_steps.has_value());      // fp32
    EXPECT_FALSE(p->refinement);
  }
  // Observer: starts in the order of the list (the grammar sorts it; run_sweep keeps what it is given) with
  // an exact total, done after each, end once.
  ASSERT_EQ(observer.starts.size(), 3u);
  EXPECT_EQ(observer.starts[0].index, 1);
  EXPECT_EQ(observer.starts[2].index, 3);
  EXPECT_EQ(observer.starts[0].planned_total, 3);
  EXPECT_FALSE(observer.starts[0].total_is_estimate);
  EXPECT_EQ(observer.starts[0].batch, 512);
  EXPECT_EQ(observer.starts[2].batch, 64);
  EXPECT_EQ(observer.sizes_seen, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_TRUE(observer.ended);
  EXPECT_FALSE(observer.ended_interrupted);
  EXPECT_TRUE(outcome.warnings.empty()) << outcome.warnings.front();
}

TEST(Runner, OomPointIsRecordedAndTheSweepGoesOn) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.oom_above_batch = 100;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, list_settings({64, 128, 256}), observer);
  ASSERT_EQ(outcome.points.size(), 3u);
  EXPECT_EQ(find_point(outcome.points, 64)->status, PointStatus::ok);
  for (const int64_t batch : {128, 256}) {
    const Point* p = find_point(outcome.points, batch);
    EXPECT_EQ(p->status, PointStatus::oom);
    EXPECT_TRUE(contains(p->reason, "out of memory at batch " + std::to_string(batch))) << p->reason;
    EXPECT_TRUE(p->samples_ms.empty());
    EXPECT_EQ(p->samples_per_second, 0.0);
    EXPECT_EQ(p->memory.planned_bytes, planned_bytes(graph, batch));
  }
  EXPECT_EQ(outcome.measured_points, 1);
  EXPECT_EQ(outcome.probed_points, 2);
}

// --resume: an ok point of the earlier run is taken as it is; one that did not run then, or whose plan no
// longer fits the budget, is not.
TEST(Runner, ResumedPointsAreTakenNotMeasured) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  SweepSettings settings = list_settings({8, 64, 128, 1024});
  Point earlier;
  earlier.batch = 64;
  earlier.effective_batch = 64;
  earlier.samples_ms = {7.0, 7.0};  // not what this device would measure (2 ms)
  earlier.samples_per_second = 64 / 0.007;
  earlier.resumed_from = "2026-11-29T10:00:00Z";
  Point earlier_oom = earlier;
  earlier_oom.batch = earlier_oom.effective_batch = 128;
  earlier_oom.status = PointStatus::oom;
  Point too_large = earlier;
  too_large.batch = too_large.effective_batch = 1024;
  Point other_accumulation = earlier;
  other_accumulation.batch = 8;
  other_accumulation.accumulation = 4;
  other_accumulation.effective_batch = 32;
  settings.resume_points = {earlier, earlier_oom, too_large, other_accumulation};
  // A budget that holds 128 but not 1024.
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 1024)) / 0.95) - 4096;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.points.size(), 4u);
  const Point* p64 = find_point(outcome.points, 64);
  EXPECT_EQ(p64->samples_ms, earlier.samples_ms);
  EXPECT_EQ(p64->resumed_from, earlier.resumed_from);
  EXPECT_EQ(p64->status, PointStatus::ok);
  const Point* p128 = find_point(outcome.points, 128);
  EXPECT_TRUE(p128->resumed_from.empty());  // oom then: measured now
  EXPECT_EQ(p128->status, PointStatus::ok);
  EXPECT_EQ(find_point(outcome.points, 1024)->status, PointStatus::over_limit);
  EXPECT_TRUE(find_point(outcome.points, 1024)->resumed_from.empty());
  EXPECT_TRUE(find_point(outcome.points, 8)->resumed_from.empty());  // another accumulation
  EXPECT_EQ(outcome.resumed_points, 1);
  EXPECT_EQ(outcome.measured_points, 2);
  // The observer saw it as a finished point, in order, so exports hold it.
  ASSERT_EQ(observer.done.size(), 4u);
  EXPECT_EQ(observer.done[1].batch, 64);
  EXPECT_EQ(observer.starts.size(), 4u);
  // ... as one taken, not measured: the CLI rewrites its exports after a measured point only (once per taken
  // point made a resume quadratic in the report's size).
  EXPECT_THAT(observer.taken, ::testing::ElementsAre(64));
  // ... and before the next point is prepared, the observer hears it (the CLI writes the taken points then,
  // so a run killed while it measures leaves them on disk): batch 8 x 4 measured, 64 taken, 128 measured
  // (1024 is over the budget, never prepared).
  EXPECT_THAT(observer.events, ::testing::ElementsAre("measuring", "taken 64", "measuring"));
}

// An interrupted resume keeps the earlier points it had not reached, unless they no longer fit: over this
// run's budget, above a batch that did not fit now, or of another accumulation.
TEST(Runner, AnInterruptedResumeKeepsTheUnreachedPointsThatStillFit) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.oom_above_batch = 100;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({8, 128, 32, 64, 256, 4096});
  const auto earlier = [](int64_t batch, int64_t accumulation = 1) {
    Point p;
    p.batch = batch;
    p.accumulation = accumulation;
    p.effective_batch = batch * accumulation;
    p.samples_ms = {1.0, 1.0};
    p.resumed_from = "2026-11-29T10:00:00Z";
    return p;
  };
  settings.resume_points = {earlier(32), earlier(64), earlier(256), earlier(4096), earlier(16, 2)};
  settings.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 1024)) / 0.95) - 4096;
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() >= 2; };  // after 8 and 128
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_TRUE(outcome.interrupted);
  ASSERT_EQ(find_point(outcome.points, 128)->status, PointStatus::oom);
  // 32 and 64 were not reached and fit; 256 lies above this run's oom at 128; 4096 is over the budget; 16x2
  // is another accumulation.
  std::vector<int64_t> batches;
  for (const Point& p : outcome.points) batches.push_back(p.batch);
  EXPECT_EQ(batches, (std::vector<int64_t>{8, 32, 64, 128}));
  EXPECT_EQ(find_point(outcome.points, 32)->resumed_from, "2026-11-29T10:00:00Z");
  EXPECT_EQ(outcome.resumed_points, 0);  // none taken: kept only
  // What the observer (the exports) saw after each point: 8 with 32, 64 and 256 (nothing unfit yet), then
  // 8 and 128 (oom) with 32 and 64.
  EXPECT_EQ(observer.sizes_seen, (std::vector<std::size_t>{4, 4}));
  // A sweep that finishes keeps only what it asked for.
  SweepSettings only_8 = settings;
  only_8.batches.batches = {8};
  RecordingObserver whole;
  const SweepOutcome finished = run_sweep(*backend, graph, only_8, whole);
  ASSERT_FALSE(finished.interrupted);
  ASSERT_EQ(finished.points.size(), 1u);
  EXPECT_EQ(finished.points[0].batch, 8);
}

// The earlier points an interrupted resume keeps get this run's memory warnings (the earlier run's are not
// carried), like the points it took or measured.
TEST(Runner, AnInterruptedResumeJudgesTheKeptPointsMemory) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  SweepSettings settings = list_settings({8, 32, 64});
  for (const int64_t batch : {32, 64}) {
    Point p;
    p.batch = p.effective_batch = batch;
    p.samples_ms = {1.0, 1.0};
    p.memory.planned_bytes = planned_bytes(graph, batch);
    p.resumed_from = "2026-11-29T10:00:00Z";
    settings.resume_points.push_back(p);
  }
  settings.memory_warn_fraction = 1e-9;  // every point passes it
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() >= 1; };  // after 8
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_TRUE(outcome.interrupted);
  ASSERT_EQ(outcome.points.size(), 3u);
  for (const std::string batch : {"8", "32", "64"}) {
    const bool warned =
        std::any_of(outcome.warnings.begin(), outcome.warnings.end(), [&](const std::string& w) {
          return w.starts_with("batch " + batch + " uses ") && w.ends_with("close to out-of-memory");
        });
    EXPECT_TRUE(warned) << batch;
  }
}

TEST(Runner, OverLimitFromMemoryLimitSkipsPrepareAndQuotesBothSizes) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.oom_above_batch = 64;  // would throw if the runner prepared 1024
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({64, 1024});
  // Between what 64 and 1024 need, leaving the 5% headroom.
  const uint64_t limit = static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 1024)) / 0.95) - 4096;
  ASSERT_GT(limit * 0.95, static_cast<double>(planned_bytes(graph, 64)));
  settings.memory_limit_bytes = limit;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point* p = find_point(outcome.points, 1024);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, PointStatus::over_limit);
  EXPECT_TRUE(contains(p->reason, "planned " + format_bytes(planned_bytes(graph, 1024)))) << p->reason;
  EXPECT_TRUE(contains(p->reason, format_bytes(limit) + " --memory-limit")) << p->reason;
  EXPECT_TRUE(contains(p->reason, "95%")) << p->reason;
  EXPECT_EQ(p->memory.planned_bytes, planned_bytes(graph, 1024));
  EXPECT_EQ(find_point(outcome.points, 64)->status, PointStatus::ok);
  // 64's plan is far below the limit: no memory warning for it.
  for (const auto& w : outcome.warnings) EXPECT_FALSE(contains(w, "batch 64 ")) << w;
}

TEST(Runner, WarnsWhenAPointIsCloseToTheMemoryBudget) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  SweepSettings settings = list_settings({8, 512});
  settings.memory_limit_bytes = static_cast<uint64_t>(static_cast<double>(planned_bytes(graph, 512)) / 0.93);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(find_point(outcome.points, 512)->status, PointStatus::ok);
  ASSERT_EQ(outcome.warnings.size(), 1u);
  const std::string& w = outcome.warnings[0];
  EXPECT_TRUE(contains(w, "batch 512 uses 93.0% of the --memory-limit")) << w;
  EXPECT_TRUE(contains(w, "planned " + format_bytes(planned_bytes(graph, 512)) + " of " +
                              format_bytes(*settings.memory_limit_bytes)))
      << w;
  EXPECT_TRUE(contains(w, "close to out-of-memory")) << w;
}

// A vector batchnorm at micro-batch 1 in training sees one value per channel: PyTorch refuses that, so the
// sweep says so, once, naming the layer; images (H x W values per sample) and inference are not warned.
TEST(Runner, WarnsOnceWhereABatchnormSeesOneValuePerChannel) {
  const auto backend = make_scripted_backend(testing::roofline());
  const auto graph_of = [](const char* text) {
    return lower(parse_model(nlohmann::json::parse(text), "test:bn"));
  };
  const Graph vector_bn = graph_of(R"({"name": "bn", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "linear", "out_features": 8, "bias": false}, {"type": "batchnorm", "activation": "relu"},
               {"type": "linear", "out_features": 3}]})");
  const auto bn_warnings = [](const SweepOutcome& o) {
    return std::count_if(o.warnings.begin(), o.warnings.end(),
                         [](const std::string& w) { return contains(w, "one value per channel"); });
  };
  SweepSettings settings = list_settings({1, 2, 4});
  RecordingObserver observer;
  SweepOutcome outcome = run_sweep(*backend, vector_bn, settings, observer);
  ASSERT_EQ(bn_warnings(outcome), 1);
  const auto it = std::find_if(outcome.warnings.begin(), outcome.warnings.end(),
                               [](const std::string& w) { return contains(w, "one value per channel"); });
  EXPECT_TRUE(it->starts_with("batch 1: the batchnorm at layers[1] has")) << *it;
  EXPECT_TRUE(contains(*it, "PyTorch raises an error there")) << *it;

  settings.mode = Mode::infer;
  RecordingObserver infer_observer;
  EXPECT_EQ(bn_warnings(run_sweep(*backend, vector_bn, settings, infer_observer)), 0);

  const Graph image_bn = graph_of(R"({"name": "bn2d", "input": {"type": "image", "channels": 3, "height": 4,
    "width": 4}, "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "bias": false},
    {"type": "batchnorm"}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})");
  settings.mode = Mode::train;
  RecordingObserver image_observer;
  EXPECT_EQ(bn_warnings(run_sweep(*backend, image_bn, settings, image_observer)), 0);
}

TEST(Runner, MemoryLimitAboveTheDeviceWarnsAndUsesTheDevice) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.memory_total_bytes = planned_bytes(graph, 256);  // 256 itself needs the 5% headroom: over the budget
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({8, 256});
  settings.memory_limit_bytes = 2 * config.memory_total_bytes;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(find_point(outcome.points, 256)->status, PointStatus::over_limit);
  EXPECT_TRUE(contains(find_point(outcome.points, 256)->reason, "device memory"));
  ASSERT_FALSE(outcome.warnings.empty());
  EXPECT_TRUE(contains(outcome.warnings[0], "--memory-limit")) << outcome.warnings[0];
}

TEST(Runner, NonFiniteLossMakesAnErrorPointThatKeepsItsSamples) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.nan_at_batch = 32;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({16, 32, 64});
  settings.stopping.warmup_steps = 0;
  RecordingObserver observer;
  SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point* p = find_point(outcome.points, 32);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, PointStatus::error);
  EXPECT_EQ(p->reason, "non-finite loss (NaN/Inf) at step 1");
  EXPECT_EQ(p->stop_reason, "non-finite loss");
  EXPECT_EQ(p->samples_ms.size(), 1u);
  EXPECT_DOUBLE_EQ(p->step_ms.mean, 2.0);
  EXPECT_EQ(p->samples_per_second, 0.0);  // not ok: no throughput
  EXPECT_EQ(find_point(outcome.points, 64)->status, PointStatus::ok);

  // With warm-up the NaN is caught there, before any timed step.
  settings.stopping.warmup_steps = 3;
  outcome = run_sweep(*backend, graph, settings, observer);
  p = find_point(outcome.points, 32);
  EXPECT_EQ(p->reason, "non-finite loss (NaN/Inf) at warm-up step 1");
  EXPECT_TRUE(p->samples_ms.empty());

  // Inference has no loss: its output is what is not finite (the stop reason keeps its one name).
  settings.mode = Mode::infer;
  outcome = run_sweep(*backend, graph, settings, observer);
  p = find_point(outcome.points, 32);
  EXPECT_EQ(p->reason, "non-finite output (NaN/Inf) at warm-up step 1");
  EXPECT_EQ(p->stop_reason, "non-finite loss");
}

// In fp16 training a backend returns a non-finite step only for an overflow at the lowest loss scale: the
// reason says so, and what to change.
TEST(Runner, Fp16NonFiniteStepSaysTheLossScaleCannotHelp) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.nan_at_batch = 32;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({32});
  settings.precision = Precision::fp16;
  settings.stopping.warmup_steps = 0;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point& p = outcome.points.at(0);
  EXPECT_EQ(p.status, PointStatus::error);
  // Its first step: no step updated the weights, so they overflow as initialised; no learning rate helps
  // (a point that trained first is tests/e2e's Fp16DivergenceIsAnErrorPoint, on the CPU).
  EXPECT_EQ(
      p.reason,
      "non-finite gradients (NaN/Inf) at step 1: they overflow fp16 at the lowest loss scale (1) and no "
      "step updated the weights, so the model overflows fp16 as initialised: use bf16 or fp32");
  EXPECT_EQ(p.stop_reason, "non-finite loss");
}

TEST(Runner, Fp16SkippedStepsAreCounted) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.skip_every_steps = 5;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({64});
  settings.precision = Precision::fp16;
  settings.stopping.warmup_steps = 0;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point& p = outcome.points.at(0);
  ASSERT_TRUE(p.skipped_steps.has_value());
  EXPECT_EQ(*p.skipped_steps, static_cast<int64_t>(p.samples_ms.size()) / 5);
  EXPECT_GT(*p.skipped_steps, 0);
  // One step in five skipped: a throughput that counts them as full steps is optimistic, and said so.
  const auto said = std::find_if(outcome.warnings.begin(), outcome.warnings.end(), [](const std::string& w) {
    return w.starts_with("batch 64: ") &&
           w.find("timed steps overflowed in fp16 and skipped the optimizer") != std::string::npos;
  });
  EXPECT_NE(said, outcome.warnings.end()) << ::testing::PrintToString(outcome.warnings);
  // One in a hundred is the loss scaler finding its level: nothing to say.
  config.skip_every_steps = 100;
  const auto rare = make_scripted_backend(config);
  settings.stopping.min_samples = 200;
  const SweepOutcome quiet = run_sweep(*rare, graph, settings, observer);
  EXPECT_GT(*quiet.points.at(0).skipped_steps, 0);
  for (const std::string& w : quiet.warnings) EXPECT_EQ(w.find("overflowed in fp16"), std::string::npos) << w;
  // Inference has no loss to scale: an fp16 infer point has no skipped_steps.
  SweepSettings infer = list_settings({64});
  infer.precision = Precision::fp16;
  infer.mode = Mode::infer;
  const auto plain = make_scripted_backend(testing::roofline());
  const SweepOutcome inferred = run_sweep(*plain, graph, infer, observer);
  EXPECT_FALSE(inferred.points.at(0).skipped_steps.has_value());
}

// Out of memory or a backend failure in a step (after prepare succeeded, past warm-up, with samples already
// taken) is a measurement of that batch: an oom/error point with its reason and no throughput; the next
// batch still runs.
TEST(Runner, AFailureInATimedStepIsAPointAndTheSweepGoesOn) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.step_oom_at_batch = 8;
  config.step_error_at_batch = 16;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({4, 8, 16, 32});
  settings.stopping.warmup_steps = 1;  // step 3 is the second timed step
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.points.size(), 4u);
  const Point* oom = find_point(outcome.points, 8);
  ASSERT_NE(oom, nullptr);
  EXPECT_EQ(oom->status, PointStatus::oom);
  EXPECT_TRUE(contains(oom->reason, "out of memory in step 3 at batch 8")) << oom->reason;
  EXPECT_EQ(oom->stop_reason, "oom");
  EXPECT_EQ(oom->samples_ms.size(), 1u);    // the one timed step before it is kept for the record
  EXPECT_EQ(oom->samples_per_second, 0.0);  // written as null
  const Point* failed = find_point(outcome.points, 16);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, PointStatus::error);
  EXPECT_TRUE(contains(failed->reason, "a kernel launch failed in step 3")) << failed->reason;
  EXPECT_EQ(failed->samples_per_second, 0.0);
  for (int64_t ok : {4, 32}) {
    EXPECT_EQ(find_point(outcome.points, ok)->status, PointStatus::ok) << ok;
    EXPECT_GT(find_point(outcome.points, ok)->samples_per_second, 0.0) << ok;
  }
}

TEST(Runner, TimeoutEndsAHangingPointWithAWarning) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.hang_at_batch = 8;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({4, 8});
  settings.stopping.timeout_s = 0.3;
  settings.stopping.warmup_steps = 1;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point* p = find_point(outcome.points, 8);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, PointStatus::ok);  // measured, just noisier than asked
  EXPECT_EQ(p->stop_reason, "timeout");
  EXPECT_GE(p->samples_ms.size(), 3u);
  EXPECT_LE(p->samples_ms.size(), 7u);
  EXPECT_GT(*p->noise_pct, 40.0);
  ASSERT_EQ(outcome.warnings.size(), 1u);
  EXPECT_TRUE(contains(outcome.warnings[0], "batch 8: timeout 0.3 s reached")) << outcome.warnings[0];
  EXPECT_TRUE(contains(outcome.warnings[0], "--max-noise")) << outcome.warnings[0];
  EXPECT_EQ(find_point(outcome.points, 4)->stop_reason, "noise target");
}

// --timeout bounds the whole point: steps so slow that warm-up alone would pass it stop warming up there
// and time one step, instead of running every warm-up step first.
TEST(Runner, TimeoutCutsAWarmUpThatWouldOutlastIt) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.hang_at_batch = 8;  // 50 ms a step
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({8});
  settings.stopping.timeout_s = 0.12;
  settings.stopping.warmup_steps = 40;  // 2 s of warm-up
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point* p = find_point(outcome.points, 8);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, PointStatus::ok);
  EXPECT_EQ(p->stop_reason, "timeout");
  EXPECT_EQ(p->samples_ms.size(), 1u);
  // One warning for the point: its timeout, with the cut warm-up.
  ASSERT_EQ(outcome.warnings.size(), 1u);
  const std::string& w = outcome.warnings[0];
  EXPECT_TRUE(contains(w, "batch 8: timeout 0.12 s reached")) << w;
  EXPECT_TRUE(contains(w, "(warm-up cut to ")) << w;
  EXPECT_TRUE(contains(w, " of 40 steps by the 0.12 s --timeout)")) << w;
  const int warm = std::stoi(w.substr(w.find("cut to ") + 7));
  EXPECT_GE(warm, 1);
  EXPECT_LT(warm, 40);
}

// --warmup-time keeps warming up past --warmup steps until that much time has passed (GPU clocks leave idle);
// the --timeout still cuts it, and says how far it got. The CPU and scripted backends default to none.
TEST(Runner, WarmUpTimeRunsStepsPastTheWarmUpStepsUntilTheTimeout) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.hang_at_batch = 8;  // 50 ms a step
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({8});
  settings.stopping.timeout_s = 0.22;
  settings.stopping.warmup_steps = 1;
  settings.stopping.warmup_time_s = 10.0;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.warnings.size(), 1u);
  const std::string& w = outcome.warnings[0];
  EXPECT_TRUE(contains(w, "(warm-up cut to ")) << w;
  EXPECT_TRUE(contains(w, " steps, short of the 10 s --warmup-time, by the 0.22 s --timeout)")) << w;
  const int warm = std::stoi(w.substr(w.find("cut to ") + 7));
  EXPECT_GE(warm, 2);  // past the one --warmup step
  EXPECT_EQ(warmup_time_s(StoppingSettings{}, BackendKind::cuda), kCudaWarmupTimeS);
  EXPECT_EQ(warmup_time_s(StoppingSettings{}, BackendKind::cpu), 0.0);
}

// --warmup-time counts from the end of the first warm-up step (which holds the one-time work) and then ends
// the warm-up: more untimed steps than --warmup, and none once the time has passed.
TEST(Runner, WarmUpTimeAddsStepsUntilItHasPassed) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.hang_at_batch = 8;  // 50 ms a step
  const auto backend = make_scripted_backend(config);
  const auto steps_asked = [&](double warmup_time) {
    SweepSettings settings = list_settings({8});
    settings.stopping.warmup_steps = 1;
    settings.stopping.warmup_time_s = warmup_time;
    settings.stopping.min_samples = 3;
    settings.stopping.min_time_s = 0;
    settings.stopping.max_noise_pct = 1000;
    RecordingObserver observer;  // asked whether to stop before every step, warm-up or timed
    const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
    EXPECT_TRUE(outcome.warnings.empty()) << outcome.warnings[0];
    EXPECT_EQ(outcome.points.at(0).samples_ms.size(), 3u);
    return observer.stop_questions;
  };
  const int plain = steps_asked(0.0), warmed = steps_asked(0.3);
  EXPECT_GE(warmed - plain, 2);  // 0.3 s of 50 ms steps after the first: about 6 more
  EXPECT_LE(warmed - plain, 7);
}

TEST(Runner, ManyPointsMissingTheirTargetsMakeOneWarning) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.noise_pct = 30;  // never within 1%: every point ends at the sample cap
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1, 2, 4, 8, 16});
  settings.stopping.max_samples = 20;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  for (const Point& p : outcome.points) EXPECT_EQ(p.stop_reason, "sample cap");
  ASSERT_EQ(outcome.warnings.size(), 1u);
  const std::string& w = outcome.warnings[0];
  EXPECT_TRUE(
      contains(w, "5 points stopped before meeting their measurement targets (batches 1, 2, 4, 8, 16)"))
      << w;
  EXPECT_TRUE(contains(w, "batch 1: sample cap 20 reached")) << w;
  EXPECT_TRUE(contains(w, "--max-noise")) << w;

  // The one quoted may be the mildest: points timed a single step, or whose warm-up the --timeout cut, are
  // named whatever it is (the walk that found this had 4 such points and only the first's sample count said).
  {
    ScriptedConfig slow = config;
    slow.hang_at_batch = 8;  // 50 ms a step
    const auto slow_backend = make_scripted_backend(slow);
    SweepSettings timed_out = settings;
    timed_out.stopping.timeout_s = 0.12;
    timed_out.stopping.warmup_steps = 40;
    const SweepOutcome cut = run_sweep(*slow_backend, graph, timed_out, observer);
    ASSERT_EQ(find_point(cut.points, 8)->samples_ms.size(), 1u);
    ASSERT_EQ(cut.warnings.size(), 1u);
    EXPECT_TRUE(contains(cut.warnings[0], "the first measured, batch 1: sample cap 20 reached"))
        << cut.warnings[0];
    EXPECT_TRUE(contains(cut.warnings[0],
                         "; batch 8 timed a single step (noise unknown: its throughput and latency are one "
                         "step's); the --timeout cut the warm-up of batch 8. Each point's"))
        << cut.warnings[0];
  }
  EXPECT_FALSE(contains(w, "single step")) << w;

  // Three or fewer are listed one by one.
  SweepSettings few = list_settings({1, 2});
  few.stopping.max_samples = 20;
  const SweepOutcome two = run_sweep(*backend, graph, few, observer);
  ASSERT_EQ(two.warnings.size(), 2u);
  EXPECT_TRUE(contains(two.warnings[1], "batch 2: sample cap 20 reached")) << two.warnings[1];
}

TEST(Runner, InterruptBetweenSamplesDropsTheUnfinishedPoint) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.sleep = true;  // real time passes, as with a device
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1, 2, 4, 8});
  settings.stopping.min_time_s = 0.02;
  RecordingObserver observer;
  int questions_in_third = 0;
  observer.stop_when = [&](const RecordingObserver& o) {
    return o.starts.size() == 3 && ++questions_in_third > 5;  // a few steps into the third point
  };
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_TRUE(outcome.interrupted);
  ASSERT_EQ(outcome.points.size(), 2u);
  EXPECT_EQ(outcome.points[0].batch, 1);
  EXPECT_EQ(outcome.points[1].batch, 2);
  EXPECT_EQ(outcome.points[1].status, PointStatus::ok);
  EXPECT_EQ(outcome.measured_points, 2);  // the dropped third point is not counted
  EXPECT_EQ(observer.done.size(), 2u);
  EXPECT_TRUE(observer.ended);
  EXPECT_TRUE(observer.ended_interrupted);
}

TEST(Runner, InterruptBeforeAPointStartsNothing) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() == 1; };
  const SweepOutcome outcome = run_sweep(*backend, graph, list_settings({1, 2, 4}), observer);
  EXPECT_TRUE(outcome.interrupted);
  EXPECT_EQ(outcome.points.size(), 1u);
  EXPECT_EQ(observer.starts.size(), 1u);
}

TEST(Runner, TokenInputsReportTokensPerSecond) {
  ModelSpec model;
  model.name = "tokens";
  model.source = "test:tokens";
  model.input.type = InputType::tokens;
  model.input.sequence_length = 8;
  model.input.vocab_size = 32;
  LayerSpec embedding;
  embedding.type = LayerType::embedding;
  embedding.json_path = "layers[0]";
  embedding.dim = 16;
  LayerSpec head;
  head.type = LayerType::linear;
  head.json_path = "layers[1]";
  head.out_features = 32;
  model.layers = {embedding, head};
  const Graph graph = lower(model);
  ASSERT_EQ(graph.tokens_per_sample, 8);
  const auto backend = make_scripted_backend(testing::roofline());
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, list_settings({64}), observer);
  const Point& p = outcome.points.at(0);
  ASSERT_TRUE(p.tokens_per_second.has_value());
  EXPECT_DOUBLE_EQ(*p.tokens_per_second, p.samples_per_second * 8);
}

TEST(Runner, AccumulationMultipliesTheEffectiveBatch) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  SweepSettings settings = list_settings({64});
  settings.accumulation = 4;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point& p = outcome.points.at(0);
  EXPECT_EQ(p.batch, 64);
  EXPECT_EQ(p.accumulation, 4);
  EXPECT_EQ(p.effective_batch, 256);
  EXPECT_NEAR(p.samples_per_second, 256 / 0.008, 1e-6);
}

TEST(Runner, RejectsSettingsThatCannotRun) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  RecordingObserver observer;
  EXPECT_THROW((void)run_sweep(*backend, graph, list_settings({}), observer), UsageError);
  SweepSettings settings = list_settings({8});
  settings.accumulation = 0;
  EXPECT_THROW((void)run_sweep(*backend, graph, settings, observer), UsageError);
  settings = list_settings({8});
  settings.stopping.timeout_s = -1;
  EXPECT_THROW((void)run_sweep(*backend, graph, settings, observer), UsageError);
}

}  // namespace
}  // namespace bsw
