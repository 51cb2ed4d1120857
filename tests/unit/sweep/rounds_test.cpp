// run --rounds: rounds 2.. in reversed order, each as long as round 1, pooled into the point; a drift over
// the sweep reaching every batch alike; a failed round; an interrupt mid-round; resumed points extended.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/stats.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::contains;
using testing::find_point;
using testing::list_settings;
using testing::RecordingObserver;
using testing::tiny_graph;

// The scripted backend, except that the `fail_at`-th prepare of micro-batch `batch` (1-based) runs out of
// memory: another process took the memory between two rounds.
class FailingOnce final : public Backend {
 public:
  FailingOnce(std::unique_ptr<Backend> inner, int64_t batch, int fail_at)
      : inner_(std::move(inner)), batch_(batch), fail_at_(fail_at) {}
  BackendKind kind() const override { return inner_->kind(); }
  DeviceInfo device(Precision precision) const override { return inner_->device(precision); }
  std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                   const SessionOptions& options) override {
    if (plan.request.batch == batch_ && ++prepared_ == fail_at_)
      throw OutOfMemory("another process holds the memory now");
    return inner_->prepare(graph, plan, options);
  }

 private:
  std::unique_ptr<Backend> inner_;
  int64_t batch_;
  int fail_at_;
  int prepared_ = 0;
};

TEST(Rounds, ReverseTheOrderEachRoundAndTimeAsManyStepsAsRoundOne) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0, 0.5));
  SweepSettings settings = list_settings({1, 2, 4, 8});
  settings.rounds = 3;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_FALSE(outcome.interrupted);
  // Round 1 ascending, round 2 descending, round 3 ascending.
  std::vector<int64_t> order;
  std::vector<int> rounds;
  for (const PointStart& s : observer.starts) {
    order.push_back(s.batch);
    rounds.push_back(s.round);
    EXPECT_EQ(s.rounds, s.round == 1 ? 1 : 3) << "round 1 is the strategy's, which knows of no rounds";
    EXPECT_EQ(s.planned_total, 12) << "every round's points are in the total from the start " << s.index;
    EXPECT_EQ(s.total_is_estimate, s.round == 1) << "a point may fail and run no more rounds";
  }
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 4, 8, 8, 4, 2, 1, 1, 2, 4, 8}));
  EXPECT_EQ(rounds, (std::vector<int>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  EXPECT_EQ(observer.done.size(), 12u) << "each round of a point is reported done, so exports keep it";
  ASSERT_EQ(outcome.points.size(), 4u);
  for (const Point& p : outcome.points) {
    ASSERT_EQ(p.rounds.size(), 3u) << p.batch;
    const int64_t first = p.rounds[0].steps;
    EXPECT_EQ(p.rounds[0].stop_reason, "noise target");
    for (size_t r = 1; r < 3; ++r) {
      EXPECT_EQ(p.rounds[r].steps, first) << "batch " << p.batch << " round " << r + 1;
      EXPECT_EQ(p.rounds[r].stop_reason, "steps of round 1");
      EXPECT_EQ(p.rounds[r].status, PointStatus::ok);
    }
    ASSERT_EQ(p.samples_ms.size(), static_cast<size_t>(3 * first));
    EXPECT_EQ(p.stop_reason, "noise target");  // no round stopped short
    // Every figure pools the rounds.
    const StepStats pooled = summarize(p.samples_ms);
    EXPECT_DOUBLE_EQ(p.step_ms.mean, pooled.mean);
    EXPECT_DOUBLE_EQ(p.samples_per_second, static_cast<double>(p.batch) / (pooled.mean / 1000.0));
    ASSERT_TRUE(p.noise_pct);
    EXPECT_NEAR(*p.noise_pct, relative_noise(p.samples_ms) * 100.0, 1e-12);
    // The rounds drew their own noise: not one round's steps three times over.
    EXPECT_FALSE(
        std::equal(p.samples_ms.begin(), p.samples_ms.begin() + first, p.samples_ms.begin() + first));
    const std::optional<RoundsAgreement> agreement = rounds_agreement(p);
    ASSERT_TRUE(agreement);
    EXPECT_FALSE(agreement->disagree) << "one machine, 0.5% noise: batch " << p.batch;
  }
  EXPECT_EQ(outcome.measured_points, 4) << "a point measured in three rounds is one measured point";
  for (const std::string& w : outcome.warnings) EXPECT_FALSE(contains(w, "rounds")) << w;
}

TEST(Rounds, ADriftOverTheSweepReachesEveryBatchAlike) {
  // Each session 5% slower than the one before: a GPU heating up. Measured once in ascending order the
  // larger batches pay most of it; in two rounds, the second reversed, every batch pays the same.
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.0);
  config.drift_pct = 5.0;
  SweepSettings settings = list_settings({1, 64, 256, 1024});
  settings.stopping.min_samples = 20;
  settings.stopping.min_time_s = 0;
  const auto ratio = [&](const Point& p) {  // the measured step over the formula's
    return p.step_ms.mean / config.step_ms(p.batch, 1);
  };
  {
    const auto backend = make_scripted_backend(config);
    RecordingObserver observer;
    const SweepOutcome once = run_sweep(*backend, graph, settings, observer);
    ASSERT_EQ(once.points.size(), 4u);
    EXPECT_NEAR(ratio(once.points[0]), 1.00, 1e-9);
    EXPECT_NEAR(ratio(once.points[3]), 1.15, 1e-9);  // the fourth session
  }
  settings.rounds = 2;
  const auto backend = make_scripted_backend(config);
  RecordingObserver observer;
  const SweepOutcome twice = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(twice.points.size(), 4u);
  // Sessions 1..4 ascending, then 5..8 descending: 1 + 0.05 * 3.5 for every batch.
  for (const Point& p : twice.points) EXPECT_NEAR(ratio(p), 1.175, 1e-9) << p.batch;
  // And the rounds name the drift: batch 1 ran first and last (factors 1.00 and 1.35).
  const std::optional<RoundsAgreement> first = rounds_agreement(*find_point(twice.points, 1));
  ASSERT_TRUE(first);
  EXPECT_NEAR(first->spread_pct, 35.0, 1e-6);
  EXPECT_EQ(first->fastest, 1);
  EXPECT_EQ(first->slowest, 2);
  EXPECT_TRUE(first->disagree);
  const auto warning = std::find_if(twice.warnings.begin(), twice.warnings.end(),
                                    [](const std::string& w) { return contains(w, "disagree"); });
  ASSERT_NE(warning, twice.warnings.end());
  EXPECT_TRUE(contains(*warning, "the rounds of batches 1, 64, 256, 1024 disagree")) << *warning;
  EXPECT_TRUE(contains(*warning, "batch 1: its 2 rounds' mean steps differ by 35.0% (2, 2.7 ms")) << *warning;
}

TEST(Rounds, ARoundThatFailsKeepsTheEarlierRoundsAndEndsThePointsRounds) {
  const Graph graph = tiny_graph();
  FailingOnce backend(make_scripted_backend(testing::roofline(2.0, 128.0, 0.5)), 4, 2);
  SweepSettings settings = list_settings({1, 4, 16});
  settings.rounds = 3;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, graph, settings, observer);
  const Point* four = find_point(outcome.points, 4);
  ASSERT_NE(four, nullptr);
  EXPECT_EQ(four->status, PointStatus::ok) << "its first round stands";
  ASSERT_EQ(four->rounds.size(), 2u) << "no third round after a failed second";
  EXPECT_EQ(four->rounds[1].status, PointStatus::oom);
  EXPECT_EQ(four->rounds[1].steps, 0);
  EXPECT_EQ(four->rounds[1].reason, "another process holds the memory now");
  EXPECT_EQ(four->samples_ms.size(), static_cast<size_t>(four->rounds[0].steps));
  EXPECT_FALSE(rounds_agreement(*four)) << "one round with steps: nothing to agree";
  for (const int64_t batch : {1, 16}) EXPECT_EQ(find_point(outcome.points, batch)->rounds.size(), 3u);
  const auto warning = std::find_if(outcome.warnings.begin(), outcome.warnings.end(),
                                    [](const std::string& w) { return w.starts_with("batch 4: round 2"); });
  ASSERT_NE(warning, outcome.warnings.end());
  EXPECT_EQ(*warning,
            "batch 4: round 2 failed (oom: another process holds the memory now); its figures are round 1's, "
            "and it "
            "ran no more rounds");
  // Round 2 starts all three (batch 4's fails), round 3 the two still ok.
  EXPECT_EQ(observer.starts.size(), 3u + 3u + 2u);
  EXPECT_EQ(observer.starts.back().planned_total, 8) << "round 3's total lost batch 4";
}

TEST(Rounds, AnInterruptMidRoundDropsThatRoundAndKeepsTheRest) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.sleep = true;  // real time passes, as with a device
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1, 2, 4});
  settings.stopping.min_time_s = 0.02;
  settings.rounds = 2;
  RecordingObserver observer;
  int questions = 0;
  // A few steps into round 2's second point (batch 2).
  observer.stop_when = [&](const RecordingObserver& o) { return o.starts.size() == 5 && ++questions > 5; };
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_TRUE(outcome.interrupted);
  ASSERT_EQ(outcome.points.size(), 3u) << "every point finished its round 1";
  EXPECT_EQ(find_point(outcome.points, 4)->rounds.size(), 2u);
  EXPECT_EQ(find_point(outcome.points, 2)->rounds.size(), 1u) << "its round 2 was cut: dropped";
  EXPECT_EQ(find_point(outcome.points, 2)->samples_ms.size(),
            static_cast<size_t>(find_point(outcome.points, 2)->rounds[0].steps));
  EXPECT_EQ(find_point(outcome.points, 1)->rounds.size(), 1u);
  EXPECT_TRUE(observer.ended_interrupted);
}

TEST(Rounds, ResumedPointsRunTheRoundsTheyLack) {
  const Graph graph = tiny_graph();
  const auto first_backend = make_scripted_backend(testing::roofline(2.0, 128.0, 0.5));
  RecordingObserver first_observer;
  const SweepOutcome first = run_sweep(*first_backend, graph, list_settings({1, 2}), first_observer);
  ASSERT_EQ(first.points.size(), 2u);
  ASSERT_TRUE(first.points[0].rounds.empty()) << "without --rounds a point has no round entries";

  SweepSettings settings = list_settings({1, 2});
  settings.rounds = 2;
  settings.resume_points = first.points;
  for (Point& p : settings.resume_points) p.resumed_from = "2026-12-05T00:00:00Z";
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0, 0.5));
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  EXPECT_EQ(outcome.resumed_points, 2);
  EXPECT_EQ(outcome.measured_points, 2) << "each was measured by this run too, in its round 2";
  for (const Point& p : outcome.points) {
    ASSERT_EQ(p.rounds.size(), 2u) << p.batch;
    EXPECT_EQ(p.rounds[0].steps, static_cast<int64_t>(first.points[p.batch == 1 ? 0 : 1].samples_ms.size()));
    EXPECT_EQ(p.rounds[1].steps, p.rounds[0].steps);
    EXPECT_EQ(p.resumed_from, "2026-12-05T00:00:00Z") << "its round 1 is still the earlier run's";
  }
  // Round 2 drew its own noise, not round 1's again (nor the earlier run's).
  for (const Point& p : outcome.points) {
    const auto first_steps = static_cast<size_t>(p.rounds[0].steps);
    EXPECT_FALSE(std::equal(p.samples_ms.begin(),
                            p.samples_ms.begin() + static_cast<std::ptrdiff_t>(first_steps),
                            p.samples_ms.begin() + static_cast<std::ptrdiff_t>(first_steps)))
        << p.batch;
  }
  // Only round 2 was measured now: batch 2 then batch 1.
  ASSERT_EQ(observer.starts.size(), 4u);
  EXPECT_EQ(observer.starts[2].batch, 2);
  EXPECT_EQ(observer.starts[2].round, 2);
}

TEST(Rounds, ATimeoutInALaterRoundIsThePointsStopReason) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.0);
  config.sleep = true;
  config.drift_pct = 400;  // the second session runs five times as long
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1});
  settings.stopping.min_samples = 40;
  settings.stopping.min_time_s = 0;
  settings.stopping.max_noise_pct = 50;
  settings.stopping.timeout_s = 0.25;  // 40 steps of 2 ms fit, 40 of 10 ms do not
  settings.rounds = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_EQ(outcome.points.size(), 1u);
  const Point& p = outcome.points[0];
  ASSERT_EQ(p.rounds.size(), 2u);
  EXPECT_EQ(p.rounds[0].steps, 40);
  EXPECT_LT(p.rounds[1].steps, 40);
  EXPECT_EQ(p.rounds[1].stop_reason, "timeout");
  EXPECT_EQ(p.stop_reason, "timeout") << "the weakest of its rounds'";
  const auto warning = std::find_if(outcome.warnings.begin(), outcome.warnings.end(),
                                    [](const std::string& w) { return w.starts_with("batch 1: round 2: "); });
  ASSERT_NE(warning, outcome.warnings.end());
  EXPECT_TRUE(contains(*warning, "of round 1's 40 steps (raise --timeout)")) << *warning;
}

TEST(Rounds, RoundTwoReversesRoundOnesOwnOrder) {
  // --effective-batch measures from the largest micro-batch down: round 2 goes up, and the drift evens out.
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.0);
  config.drift_pct = 3.0;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings;
  settings.effective_batch = 256;
  settings.stopping.min_samples = 20;
  settings.stopping.min_time_s = 0;
  settings.rounds = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  std::vector<int64_t> first, second;
  for (const PointStart& s : observer.starts) (s.round == 1 ? first : second).push_back(s.batch);
  ASSERT_GE(first.size(), 2u);
  EXPECT_TRUE(std::is_sorted(first.rbegin(), first.rend())) << "round 1: the largest micro-batch first";
  EXPECT_EQ(second, std::vector<int64_t>(first.rbegin(), first.rend()));
  // Every split pays the same drift: sessions k and 2n-1-k average to (n - 0.5) * 3%.
  const double n = static_cast<double>(first.size());
  for (const Point& p : outcome.points)
    EXPECT_NEAR(p.step_ms.mean / config.step_ms(p.batch, p.accumulation), 1 + 0.03 * (n - 0.5), 1e-9)
        << batch_label(p.batch, p.accumulation);
}

TEST(Rounds, AnInterruptedSweepStillNamesTheRoundsThatDisagree) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(2.0, 128.0, 0.5);
  config.drift_pct = 20;
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1, 2});
  settings.rounds = 3;
  RecordingObserver observer;
  observer.stop_when = [](const RecordingObserver& o) { return o.done.size() == 4; };  // after round 2
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  ASSERT_TRUE(outcome.interrupted);
  ASSERT_EQ(find_point(outcome.points, 1)->rounds.size(), 2u);
  EXPECT_TRUE(std::any_of(outcome.warnings.begin(), outcome.warnings.end(), [](const std::string& w) {
    return contains(w, "the rounds of batches 1, 2 disagree");
  })) << "the report's rounds: line points to this warning";
}

TEST(Rounds, ALaterRoundCutByTheTimeoutIsThePointsStopReasonWhateverRoundOneSaid) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(0.5, 128.0, 30.0);  // noise that settles far above 1%
  config.sleep = true;
  config.drift_pct = 1000;  // round 2's steps 11 times as long
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1});
  settings.stopping.min_time_s = 0;
  settings.stopping.timeout_s = 0.6;
  settings.rounds = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const Point& p = outcome.points.at(0);
  ASSERT_EQ(p.rounds.size(), 2u);
  EXPECT_EQ(p.rounds[0].stop_reason, "noise settled");
  EXPECT_EQ(p.rounds[1].stop_reason, "timeout");
  EXPECT_EQ(p.stop_reason, "timeout");
  // Round 1's warning gives its noise and its mean's precision: said to be that round's, not the point's (an
  // audit quoted round 1's +-0.16% beside a pooled mean 14% away from it).
  const auto round_one =
      std::find_if(outcome.warnings.begin(), outcome.warnings.end(), [](const std::string& w) {
        return w.starts_with("batch 1: round 1 (the report's point pools every round): noise settled");
      });
  EXPECT_NE(round_one, outcome.warnings.end()) << ::testing::PrintToString(outcome.warnings);
}

TEST(Rounds, ManyPointsStoppingShortNameTheirRounds) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline(20.0, 128.0, 0.0);
  config.sleep = true;
  config.drift_pct = 100;  // later sessions far slower: round 2 cannot time round 1's steps either
  const auto backend = make_scripted_backend(config);
  SweepSettings settings = list_settings({1, 2});
  settings.stopping.warmup_steps = 1;
  settings.stopping.min_samples = 40;  // 0.8 s of 20 ms steps: more than the timeout
  settings.stopping.timeout_s = 0.25;
  settings.rounds = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(*backend, graph, settings, observer);
  const auto warning =
      std::find_if(outcome.warnings.begin(), outcome.warnings.end(), [](const std::string& w) {
        return contains(w, "points stopped before meeting their measurement targets");
      });
  ASSERT_NE(warning, outcome.warnings.end());
  EXPECT_TRUE(
      contains(*warning,
               "2 points stopped before meeting their measurement targets, in 4 rounds (batches 1, "
               "1 (round 2), 2, 2 (round 2)); the first measured, batch 1: round 1 (the report's point "
               "pools every round): timeout"))
      << *warning;
}

TEST(Rounds, OutOfRangeIsAUsageErrorNamingTheFlag) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline());
  for (const int64_t rounds : {int64_t{0}, int64_t{-1}, kMaxRounds + 1}) {
    SweepSettings settings = list_settings({1});
    settings.rounds = rounds;
    RecordingObserver observer;
    try {
      (void)run_sweep(*backend, graph, settings, observer);
      FAIL() << rounds;
    } catch (const UsageError& e) {
      EXPECT_TRUE(contains(e.what(), "--rounds: must be in 1..100")) << e.what();
    }
  }
}

// rounds_agreement on points built by hand.
Point two_rounds(const std::vector<double>& a, const std::vector<double>& b) {
  Point p;
  p.batch = 8;
  p.samples_ms = a;
  p.samples_ms.insert(p.samples_ms.end(), b.begin(), b.end());
  p.rounds = {PointRound{static_cast<int64_t>(a.size()), "noise target", PointStatus::ok, {}},
              PointRound{static_cast<int64_t>(b.size()), "steps of round 1", PointStatus::ok, {}}};
  return p;
}

std::vector<double> steps(double mean, double wobble, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(mean + wobble * ((i % 5) - 2));  // mean exactly, spread fixed
  return out;
}

TEST(RoundsAgreement, SameMeansAgreeAndAShiftBeyondTheNoiseDisagrees) {
  const auto same = rounds_agreement(two_rounds(steps(10, 0.1, 50), steps(10, 0.1, 50)));
  ASSERT_TRUE(same);
  EXPECT_DOUBLE_EQ(same->spread_pct, 0);
  ASSERT_TRUE(same->p_value);
  EXPECT_NEAR(*same->p_value, 1.0, 1e-12);
  EXPECT_FALSE(same->disagree);

  const auto apart = rounds_agreement(two_rounds(steps(10, 0.1, 50), steps(10.3, 0.1, 50)));
  ASSERT_TRUE(apart);
  EXPECT_NEAR(apart->spread_pct, 3.0, 1e-9);
  EXPECT_EQ(apart->slowest, 2);
  EXPECT_EQ(apart->fastest, 1);
  EXPECT_LT(*apart->p_value, 1e-6);
  EXPECT_TRUE(apart->disagree);

  // Significant but under kRoundSpreadPct: not a disagreement worth a warning.
  const auto close = rounds_agreement(two_rounds(steps(10, 0.001, 50), steps(10.05, 0.001, 50)));
  ASSERT_TRUE(close);
  EXPECT_LT(*close->p_value, kRoundsAlpha);
  EXPECT_FALSE(close->disagree);

  // 3% apart, but steps that vary by 30%: within the noise.
  const auto noisy = rounds_agreement(two_rounds(steps(10, 1.5, 20), steps(10.3, 1.5, 20)));
  ASSERT_TRUE(noisy);
  EXPECT_GT(*noisy->p_value, kRoundsAlpha);
  EXPECT_FALSE(noisy->disagree);
}

TEST(RoundsAgreement, WelchsTOnTheRoundsMatchesAnIndependentComputation) {
  // Two rounds of 12 steps: the batch means are not used under 20 steps, so this is Welch's t, as the
  // library's own test (checked against scipy in stats_test) computes it.
  const std::vector<double> a = {10.1, 9.9, 10.2, 10.0, 9.8, 10.1, 10.3, 9.9, 10.0, 10.2, 9.7, 10.0};
  const std::vector<double> b = {10.2, 10.4, 10.1, 10.5, 10.0, 10.3, 10.2, 10.6, 10.1, 10.2, 10.4, 10.0};
  const auto agreement = rounds_agreement(two_rounds(a, b));
  ASSERT_TRUE(agreement);
  const WelchResult welch = welch_t_test(b, a);
  EXPECT_NEAR(*agreement->p_value, welch.p_value, 1e-12);
  // Three rounds, the third as the first: Bonferroni over the three pairs.
  Point three = two_rounds(a, b);
  three.samples_ms.insert(three.samples_ms.end(), a.begin(), a.end());
  three.rounds.push_back(PointRound{12, "steps of round 1", PointStatus::ok, {}});
  const auto tripled = rounds_agreement(three);
  ASSERT_TRUE(tripled);
  EXPECT_NEAR(*tripled->p_value, std::min(1.0, 3 * welch.p_value), 1e-12);
}

TEST(RoundsAgreement, NoAnswerWithoutTwoRoundsOfStepsOrWithStepsThatDoNotAddUp) {
  EXPECT_FALSE(rounds_agreement(Point{}));
  Point one = two_rounds(steps(10, 0.1, 10), steps(10, 0.1, 10));
  one.rounds[1] = PointRound{0, {}, PointStatus::oom, "gone"};
  one.samples_ms.resize(10);
  EXPECT_FALSE(rounds_agreement(one)) << "a failed round has no mean";
  Point off = two_rounds(steps(10, 0.1, 10), steps(10, 0.1, 10));
  off.samples_ms.pop_back();
  EXPECT_FALSE(rounds_agreement(off));
  // Without spread: equal means agree (p 1), different ones do not (p 0).
  const auto flat = rounds_agreement(two_rounds(steps(10, 0, 10), steps(11, 0, 10)));
  ASSERT_TRUE(flat);
  EXPECT_EQ(*flat->p_value, 0.0);
  EXPECT_TRUE(flat->disagree);
}

}  // namespace
}  // namespace bsw
