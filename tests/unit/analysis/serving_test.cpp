// Tests of the serving simulation (--request-rate): against queueing theory where it has a closed form
// (M/D/1, a batch filled by Poisson arrivals), the batcher's hold and padding, saturation, the budget, the
// tie rule, and the recommendation that follows it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "sweep_points.hpp"

namespace bsw {
namespace {

using test::measured_point;

// A point whose every step takes `step_ms` (no spread).
Point constant_step(int64_t batch, double step_ms) {
  return measured_point(batch, static_cast<double>(batch) / step_ms * 1000.0, 0.0);
}

AnalysisOptions at_rate(double rate, double delay_ms = 0.0) {
  AnalysisOptions o;
  o.request_rate = rate;
  o.max_queue_delay_ms = delay_ms;
  return o;
}

const ServingBatch& row(const Serving& s, int64_t batch) {
  for (const ServingBatch& b : s.batches)
    if (b.batch == batch) return b;
  throw std::runtime_error("no row for that batch");
}

TEST(Serving, OneRequestAStepIsTheMD1Queue) {
  // Poisson arrivals, a deterministic 1 ms step, one server: mean time in system S + rho S / (2 (1 - rho)).
  const std::vector<Point> points = {constant_step(1, 1.0)};
  for (const double rho : {0.5, 0.8}) {
    const Serving s = simulate_serving(points, at_rate(rho * 1000.0));
    ASSERT_EQ(s.batches.size(), 1u);
    const ServingBatch& b = s.batches[0];
    ASSERT_FALSE(b.saturated);
    const double theory = 1.0 + rho / (2.0 * (1.0 - rho));
    EXPECT_NEAR(*b.latency_mean_ms, theory, 0.03 * theory) << "rho " << rho;
    EXPECT_NEAR(*b.utilization, rho, 0.02) << "rho " << rho;
    EXPECT_DOUBLE_EQ(*b.mean_batch, 1.0);
    // No request is faster than its step, and the tail lies above the median.
    EXPECT_GE(*b.latency_p50_ms, 1.0);
    EXPECT_GT(*b.latency_ms, *b.latency_p50_ms);
    EXPECT_EQ(s.requests, static_cast<int64_t>(kServingRequests));
  }
}

TEST(Serving, AHoldWithoutLimitWaitsForTheWholeBatch) {
  // Max batch 4 filled from Poisson arrivals at 1 per ms: the i-th of a batch waits for 3 - i more arrivals,
  // 1.5 gaps on average, then the 0.1 ms step.
  const std::vector<Point> points = {constant_step(4, 0.1)};
  const Serving s = simulate_serving(points, at_rate(1000.0, 1e9));
  const ServingBatch& b = s.batches[0];
  EXPECT_NEAR(*b.latency_mean_ms, 1.6, 0.05);
  EXPECT_DOUBLE_EQ(*b.mean_batch, 4.0);
}

TEST(Serving, TheDelayBoundsTheHold) {
  // At 10 requests/s a max batch of 8 never fills: each request waits the 5 ms hold alone, then its step.
  const std::vector<Point> points = {constant_step(8, 1.0)};
  const Serving held = simulate_serving(points, at_rate(10.0, 5.0));
  EXPECT_NEAR(*held.batches[0].latency_p50_ms, 6.0, 1e-9);
  EXPECT_LT(*held.batches[0].mean_batch, 1.1);
  // Without a hold (Triton's default) it starts at once.
  const Serving now = simulate_serving(points, at_rate(10.0, 0.0));
  EXPECT_NEAR(*now.batches[0].latency_p50_ms, 1.0, 1e-9);
}

TEST(Serving, AStepRunsAsTheSmallestSweptBatchThatHoldsIt) {
  // Batch 1 takes 1 ms, batch 64 10 ms. With max batch 64 at a low rate almost every step holds one request,
  // which runs as batch 1, not padded to 64.
  const std::vector<Point> points = {constant_step(1, 1.0), constant_step(64, 10.0)};
  const Serving s = simulate_serving(points, at_rate(20.0));
  EXPECT_NEAR(*row(s, 64).latency_p50_ms, 1.0, 1e-9);
  // Swept without batch 1, the same request runs as 64.
  const Serving padded = simulate_serving(std::vector<Point>{constant_step(64, 10.0)}, at_rate(20.0));
  EXPECT_NEAR(*padded.batches[0].latency_p50_ms, 10.0, 1e-9);
}

TEST(Serving, ARateAtTheCapacitySaturatesAndBatchingServesIt) {
  // Batch 1 serves 1000/s at most; batch 8 (2 ms) 4000/s. At 2000/s only batching keeps up.
  const std::vector<Point> points = {constant_step(1, 1.0), constant_step(8, 2.0)};
  const Serving s = simulate_serving(points, at_rate(2000.0));
  EXPECT_TRUE(row(s, 1).saturated);
  EXPECT_FALSE(row(s, 1).latency_ms.has_value());
  EXPECT_DOUBLE_EQ(row(s, 1).capacity_per_second, 1000.0);
  const ServingBatch& eight = row(s, 8);
  ASSERT_FALSE(eight.saturated);
  EXPECT_GT(*eight.mean_batch, 1.5);
  EXPECT_EQ(s.best.batch, 8);
  EXPECT_THAT(s.best.reason, testing::StartsWith("lowest p99 request latency at 2000 requests/s (simulated"));
  // A rate of exactly the capacity never drains.
  const Serving exact = simulate_serving(points, at_rate(4000.0));
  EXPECT_TRUE(row(exact, 8).saturated);
  EXPECT_FALSE(exact.best.batch.has_value());
  EXPECT_EQ(
      exact.best.reason,
      "every max batch saturates at 4000 requests/s: the most one serves is 4000 requests/s (batch 8); the "
      "rate needs more throughput (a larger batch where it still rises, or more GPUs)");
}

TEST(Serving, EqualLatenciesGoToTheSmallerMaxBatch) {
  // At 10 requests/s every step holds one request, which runs as batch 1 under either max batch.
  const std::vector<Point> points = {constant_step(1, 1.0), constant_step(2, 1.0)};
  const Serving s = simulate_serving(points, at_rate(10.0));
  EXPECT_DOUBLE_EQ(*row(s, 1).latency_ms, *row(s, 2).latency_ms);
  EXPECT_EQ(s.best.batch, 1);
}

TEST(Serving, TheBudgetHoldsTheRequestLatency) {
  const std::vector<Point> points = {constant_step(1, 1.0), constant_step(8, 2.0)};
  AnalysisOptions o = at_rate(2000.0);
  o.latency_slo_ms = 1.0;  // under one 2 ms step: nothing keeps it
  Serving s = simulate_serving(points, o);
  EXPECT_FALSE(s.best.batch.has_value());
  EXPECT_THAT(s.best.reason, testing::StartsWith("no max batch keeps the p99 request latency within the 1 ms "
                                                 "budget at 2000 requests/s"));
  o.latency_slo_ms = 100.0;
  s = simulate_serving(points, o);
  EXPECT_EQ(s.best.batch, 8);
  EXPECT_THAT(s.best.reason, testing::EndsWith("; within the 100 ms budget"));
}

TEST(Serving, TheRecommendationFollowsTheRate) {
  // The step budget alone would take the fastest batch within 50 ms; the rate asks for the request latency.
  std::vector<Point> points = {constant_step(1, 1.0), constant_step(8, 2.0), constant_step(64, 8.0)};
  AnalysisOptions o = at_rate(2000.0);
  o.latency_slo_ms = 50.0;
  const Analysis a = analyze(points, o);
  ASSERT_TRUE(a.serving.has_value());
  ASSERT_TRUE(a.latency_slo.has_value());
  EXPECT_EQ(a.latency_slo->batch, 64);
  EXPECT_EQ(a.recommended.batch, a.serving->best.batch);
  EXPECT_EQ(a.recommended.why, a.serving->best.reason);
  // Without a rate there is no serving answer.
  EXPECT_FALSE(analyze(points, {}).serving.has_value());
}

// --request-rate max: the most requests/s some max batch serves within the budget. At it a max batch keeps
// the budget; at the rate found above it (within 1%) none does; the answer follows it.
TEST(Serving, TheMostRequestsWithinTheBudget) {
  std::vector<Point> points = {constant_step(1, 1.0), constant_step(8, 2.0), constant_step(64, 8.0)};
  AnalysisOptions o = at_rate(kRequestRateMax);
  o.latency_slo_ms = 20.0;
  const Serving s = simulate_serving(points, o);
  EXPECT_TRUE(s.most_within_budget);
  ASSERT_TRUE(s.best.batch.has_value()) << s.best.reason;
  ASSERT_TRUE(s.unserved_above.has_value());
  EXPECT_GT(s.request_rate, 1000.0);  // batching serves more than batch 1's 1000/s
  EXPECT_LT(s.request_rate, 8000.0);  // and less than batch 64's capacity
  EXPECT_GT(*s.unserved_above, s.request_rate);
  EXPECT_LE(*s.unserved_above / s.request_rate, 1.0 + kServingRateTolerance);
  // Within the budget beyond the simulation's noise: the latency and twice its error.
  EXPECT_LE(*s.best.latency_ms + 2.0 * *row(s, *s.best.batch).latency_se_ms, 20.0);
  EXPECT_THAT(s.best.reason, testing::StartsWith("the most requests/s found within the 20 ms p99 budget, "));
  // Just above, no max batch keeps it beyond that noise.
  AnalysisOptions above = at_rate(*s.unserved_above);
  above.latency_slo_ms = 20.0;
  const Serving over = simulate_serving(points, above);
  for (const ServingBatch& b : over.batches) {
    if (!b.saturated && b.settled && b.latency_ms) {
      EXPECT_GT(*b.latency_ms + 2.0 * b.latency_se_ms.value_or(0.0), 20.0) << b.batch;
    }
  }
  // A tighter budget serves less. (A looser one than 20 ms serves no more: near batch 64's capacity its
  // queue wanders longer than the simulation runs, and the rows stop being settled first.)
  o.latency_slo_ms = 10.0;
  EXPECT_LT(simulate_serving(points, o).request_rate, s.request_rate);
  o.latency_slo_ms = 40.0;
  EXPECT_DOUBLE_EQ(simulate_serving(points, o).request_rate, s.request_rate);
  // The recommendation is the max batch that serves the most.
  o.latency_slo_ms = 20.0;
  const Analysis a = analyze(points, o);
  ASSERT_TRUE(a.serving.has_value());
  EXPECT_EQ(a.recommended.batch, s.best.batch);
  EXPECT_DOUBLE_EQ(a.serving->request_rate, s.request_rate);
}

// Steps with stalls (a few 2x to 8x longer) make some rows' latency errors wide: the answer at a rate (the
// smallest max batch as fast as the lowest within their errors) can be a noisy row whose latency plus twice
// its error is over the budget while a quieter row's is within. The rate is served all the same: "at X no
// max batch is known to keep it" holds of every row at the rate found above the answer. The 17th of these
// seeded sweeps is one such (the search judged only the answer's row, and called 667 requests/s unserved
// where max batches 8 and 16 kept the 4 ms budget beyond their errors); the others are drawn to reach it.
TEST(Serving, TheMostWithinTheBudgetIsJudgedOnEveryRowNotOnlyTheAnswer) {
  std::mt19937_64 engine(1);
  const auto uniform = [&] { return static_cast<double>(engine() >> 11) * 0x1.0p-53; };
  for (int trial = 0; trial < 17; ++trial) {
    std::vector<Point> points;
    for (int64_t b : {1, 2, 4, 8, 16}) {
      const double step = 1.0 + static_cast<double>(b) / 8.0;
      const double stall = uniform() < 0.5 ? 0.0 : 0.02 + 0.05 * uniform();
      const double factor = 2.0 + 6.0 * uniform();
      std::vector<double> ms;
      for (int i = 0; i < 200; ++i) {
        double v = step * (1.0 + 0.02 * (uniform() - 0.5));
        if (uniform() < stall) v *= factor;
        ms.push_back(v);
      }
      Point p;
      p.batch = p.effective_batch = b;
      p.samples_ms = ms;
      p.step_ms = summarize(ms);
      p.samples_per_second = static_cast<double>(b) / (p.step_ms.mean / 1000.0);
      points.push_back(p);
    }
    if (trial != 16) continue;  // the searches take seconds each
    AnalysisOptions o = at_rate(kRequestRateMax);
    o.latency_slo_ms = 4.0;
    const Serving s = simulate_serving(points, o);
    ASSERT_TRUE(s.best.batch.has_value()) << s.best.reason;
    ASSERT_TRUE(s.unserved_above.has_value());
    AnalysisOptions above = at_rate(*s.unserved_above);
    above.latency_slo_ms = 4.0;
    const Serving over = simulate_serving(points, above);
    for (const ServingBatch& b : over.batches) {
      if (!b.saturated && b.settled && b.latency_ms) {
        EXPECT_GT(*b.latency_ms + 2.0 * b.latency_se_ms.value_or(0.0), 4.0)
            << "trial " << trial << ": max batch " << b.batch << " keeps the budget at " << *s.unserved_above
            << ", which the search called unserved";
      }
    }
  }
}

TEST(Serving, NoRateIsWithinABudgetUnderEveryStep) {
  const std::vector<Point> points = {constant_step(1, 1.0), constant_step(8, 2.0)};
  AnalysisOptions o = at_rate(kRequestRateMax);
  o.latency_slo_ms = 0.5;  // under the fastest step
  const Serving s = simulate_serving(points, o);
  EXPECT_TRUE(s.most_within_budget);
  EXPECT_FALSE(s.best.batch.has_value());
  EXPECT_THAT(s.best.reason,
              testing::StartsWith("no max batch keeps the p99 request latency within the 0.5 ms "
                                  "budget at any rate: every request takes a step, and the "
                                  "fastest measured is 1.00 ms"));
  // No rate served: the table is the last rate tried, itself not served.
  ASSERT_TRUE(s.unserved_above.has_value());
  EXPECT_EQ(*s.unserved_above, s.request_rate);
  // Over the fastest step but under the p99 step at any load: no rate down to the floor of the search.
  // Steps of 0.8 to 1.2 ms: a p99 of 1.1 ms is under the p99 step at any load.
  const std::vector<Point> spread = {measured_point(1, 1000.0, 0.2)};
  o.latency_slo_ms = 1.1;
  const Serving tight = simulate_serving(spread, o);
  EXPECT_FALSE(tight.best.batch.has_value());
  EXPECT_THAT(tight.best.reason, testing::HasSubstr("at any rate tried, down to "));
  // The lowest latency is said with its error, and what a served rate needs: not as if it were within.
  EXPECT_THAT(tight.best.reason,
              testing::ContainsRegex(": the lowest is [0-9.]+ \u00b1 [0-9.]+ ms \\(max batch 1\\), "
                                     "and a rate is served only where that latency plus twice "
                                     "its error is within the budget"));
  ASSERT_TRUE(tight.unserved_above.has_value());
  EXPECT_EQ(*tight.unserved_above, tight.request_rate);
  // The most within a budget needs the budget.
  std::vector<Point> copy = points;
  EXPECT_THROW((void)analyze(copy, at_rate(kRequestRateMax)), UsageError);
}

TEST(Serving, NearItsCapacityTheQueueDoesNotSettleAndIsNotChosen) {
  // M/D/1 at 99% of the capacity: the mean latency is 50.5 ms in steady state, which the simulation does not
  // reach (the queue's memory is about 1 / (1 - rho)^2 steps). The spread between replications says so.
  const std::vector<Point> points = {constant_step(1, 1.0)};
  const Serving near = simulate_serving(points, at_rate(990.0));
  ASSERT_FALSE(near.batches[0].saturated);
  EXPECT_FALSE(near.batches[0].settled);
  EXPECT_GT(*near.batches[0].latency_mean_se_ms, kServingMaxRelativeError * *near.batches[0].latency_mean_ms);
  EXPECT_FALSE(near.best.batch.has_value());
  EXPECT_THAT(
      near.best.reason,
      testing::StartsWith("no max batch serves 990 requests/s with a latency the simulation can pin down"));
  // At 80% it settles, and its mean's error covers the distance to the steady state's 3 ms.
  const Serving settled = simulate_serving(points, at_rate(800.0));
  EXPECT_TRUE(settled.batches[0].settled);
  EXPECT_NEAR(*settled.batches[0].latency_mean_ms, 3.0, 3.0 * *settled.batches[0].latency_mean_se_ms);
}

TEST(Serving, ARowWhoseReplicationsAreShorterThanTheQueuesMemoryDoesNotSettle) {
  // Batches of 64 in 8 ms at 97% of their capacity: the queue wanders for about 1 / 0.03^2 = 1111 steps,
  // and a replication's 25,000 requests fill some 400. Its figures look settled (the start moves the mean
  // little in so few steps) but read low; a review's long simulation of such a row read 12% higher.
  const std::vector<Point> points = {constant_step(64, 8.0)};
  const Serving near = simulate_serving(points, at_rate(0.97 * 8000.0));
  ASSERT_FALSE(near.batches[0].saturated);
  EXPECT_LT(static_cast<double>(near.batches[0].timed_steps) / static_cast<double>(near.replications),
            serving_relaxation_steps(0.97 * 8000.0, near.batches[0].capacity_per_second));
  EXPECT_FALSE(near.batches[0].settled);
  // At 80% (25 steps of memory) it settles.
  EXPECT_TRUE(simulate_serving(points, at_rate(0.8 * 8000.0)).batches[0].settled);
  EXPECT_NEAR(serving_relaxation_steps(96.0, 100.0), 625.0, 1e-6);
  EXPECT_TRUE(std::isinf(serving_relaxation_steps(100.0, 100.0)));
}

// A tail made of a few long steps' requests: every 100th step eight times as long. Twice the percentile's
// error covers how far its figure moves when the simulation's seeds move, for most seeds.
TEST(Serving, ThePercentilesErrorCoversTheSeedsWhereTheTailIsAFewStalls) {
  std::vector<Point> points;
  for (const int64_t batch : {8, 16, 32}) {
    Point p = constant_step(batch, 0.2 + 0.01 * static_cast<double>(batch));
    const double base = p.samples_ms.front();
    p.samples_ms.assign(300, base);
    for (std::size_t i = 0; i < 300; i += 100) p.samples_ms[i] = 8 * base;
    p.step_ms = summarize(p.samples_ms);
    p.samples_per_second = static_cast<double>(batch) / p.step_ms.mean * 1000.0;
    points.push_back(p);
  }
  AnalysisOptions o = at_rate(20000.0);
  o.latency_percentile = 99.9;
  std::vector<std::pair<double, double>> figures;  // (p99.9, its error) of max batch 16, per seed
  for (uint64_t seed = 0; seed < 12; ++seed) {
    o.serving_seed = seed;
    const Serving s = simulate_serving(points, o);  // kept: row() refers into it
    const ServingBatch& b = row(s, 16);
    figures.emplace_back(*b.latency_ms, *b.latency_se_ms);
  }
  // The seeds move the figures: the option reaches the dice.
  EXPECT_NE(figures[0].first, figures[1].first);
  std::vector<double> values;
  for (const auto& [v, se] : figures) values.push_back(v);
  std::sort(values.begin(), values.end());
  const double median = (values[5] + values[6]) / 2;
  int within = 0;
  for (const auto& [v, se] : figures) within += std::fabs(v - median) <= 2 * se ? 1 : 0;
  EXPECT_GE(within, 10) << "of 12";
}

TEST(Serving, AFewHugeStepsDoNotSettle) {
  // Batches of 8192 held until full: even 800,000 timed requests fill under 100 steps, too few for a
  // latency.
  const Serving s = simulate_serving(std::vector<Point>{constant_step(8192, 1.0)}, at_rate(1000.0, 1e9));
  EXPECT_LT(s.batches[0].timed_steps, kServingMinSteps);
  EXPECT_FALSE(s.batches[0].settled);
  EXPECT_FALSE(s.best.batch.has_value());
}

TEST(Serving, AMicrosecondStepAfterDaysOfArrivalsKeepsItsDigits) {
  const Serving s = simulate_serving(std::vector<Point>{constant_step(1, 0.001)}, at_rate(1e-6));
  EXPECT_DOUBLE_EQ(*s.batches[0].latency_p50_ms, 0.001);
  EXPECT_DOUBLE_EQ(*s.batches[0].latency_ms, 0.001);
}

TEST(Serving, AtTheMedianTheReasonNamesItOnce) {
  AnalysisOptions o = at_rate(2000.0);
  o.latency_percentile = 50;
  const Serving s = simulate_serving(std::vector<Point>{constant_step(1, 1.0), constant_step(8, 2.0)}, o);
  ASSERT_EQ(s.best.batch, 8);
  EXPECT_THAT(s.best.reason,
              testing::HasSubstr("at 2000 requests/s (simulated from the measured steps): p50 "));
  EXPECT_EQ(s.best.reason.find("p50", s.best.reason.find(": p50 ") + 5), std::string::npos) << s.best.reason;
}

// Requests draw their steps from the measured ones: a p99 of requests over 21 steps is the slowest of those
// few, which the answer says (the step budget's "of 21 steps" caveat), and not over the 100 a p99 needs; a
// batch whose steps no request runs in (batch 1, where steps hold ~5) is not blamed.
TEST(Serving, AnAnswerOnTooFewStepsSaysSo) {
  const auto reason = [](int samples, double pct, int small_samples = 400) {
    AnalysisOptions o = at_rate(2000.0);
    o.latency_percentile = pct;
    return simulate_serving(std::vector<Point>{measured_point(1, 900.0, 0.01, small_samples),
                                               measured_point(8, 3000.0, 0.01, samples)},
                            o)
        .best.reason;
  };
  EXPECT_THAT(reason(21, 99),
              testing::HasSubstr("; its steps are drawn from as few as 21 measured (batch 8), "
                                 "under the 100 a p99 needs, so the tail is the slowest of those "
                                 "few and the \u00b1 is the simulation's alone: measure at least 100 steps a "
                                 "batch (--min-samples 100, run --request-rate's default)"));
  EXPECT_THAT(reason(100, 99), testing::Not(testing::HasSubstr("as few as")));
  EXPECT_THAT(reason(100, 99, 5), testing::Not(testing::HasSubstr("as few as")));
  EXPECT_THAT(reason(21, 95), testing::Not(testing::HasSubstr("as few as")));
  EXPECT_THAT(reason(100, 99.9), testing::HasSubstr("under the 1000 a p99.9 needs"));
}

// Steps of ~160 requests run as batch 256 on a sweep of 16 and 256: an engine of fixed batches pads them so,
// a dynamic-shape one would not, and the answer says which batches about them to sweep.
TEST(Serving, StepsPaddedFarUpToASweptBatchSaySo) {
  const Serving coarse =
      simulate_serving(std::vector<Point>{constant_step(16, 2.0), constant_step(256, 8.0)}, at_rate(20000.0));
  ASSERT_EQ(coarse.best.batch, 256);
  EXPECT_THAT(
      coarse.best.reason,
      testing::HasSubstr("; its steps of 160 requests on average run as batch 256, the smallest swept "
                         "that holds them, as an engine built for fixed batches (or a CUDA graph) pads "
                         "them; a dynamic-shape engine (TensorRT under Triton) runs them as they are: "
                         "--batch 128:240:+16 times batches about them"));
  // One swept batch, far above steps of ~40 requests: batches about 40, not 1 to 16.
  const Serving lone = simulate_serving(std::vector<Point>{constant_step(256, 2.0)}, at_rate(20000.0));
  EXPECT_THAT(lone.best.reason, testing::HasSubstr("--batch 32:60:+4 times batches about them"));
  // One request a step, timed as batch 1: nothing padded.
  const Serving single = simulate_serving(std::vector<Point>{constant_step(1, 1.0)}, at_rate(100.0));
  EXPECT_THAT(single.best.reason, testing::Not(testing::HasSubstr("run as batch")));
}

TEST(Serving, OneReportAlwaysGivesOneAnswer) {
  const std::vector<Point> points = {measured_point(1, 900.0, 0.3), measured_point(8, 3000.0, 0.3),
                                     measured_point(64, 9000.0, 0.3)};
  const Serving a = simulate_serving(points, at_rate(2500.0, 2.0));
  const Serving b = simulate_serving(points, at_rate(2500.0, 2.0));
  ASSERT_EQ(a.batches.size(), b.batches.size());
  for (size_t i = 0; i < a.batches.size(); ++i) {
    EXPECT_EQ(a.batches[i].latency_ms, b.batches[i].latency_ms);
    EXPECT_EQ(a.batches[i].utilization, b.batches[i].utilization);
  }
  EXPECT_EQ(a.best.reason, b.best.reason);
}

TEST(Serving, APointWithoutStepsServesAtItsMean) {
  Point p = constant_step(1, 2.0);
  p.samples_ms.clear();
  const Serving s = simulate_serving(std::vector<Point>{p, constant_step(8, 4.0)}, at_rate(1.0));
  EXPECT_NEAR(*s.batches[0].latency_p50_ms, 2.0, 1e-9);
  // And says so: its spread is not simulated.
  EXPECT_THAT(s.best.reason,
              testing::HasSubstr("simulated from the measured steps and, for batch 1, which the "
                                 "report keeps no steps of, the mean step alone: its spread is "
                                 "not simulated, and the tail reads short"));
  // Where every point kept its steps, nothing is said.
  const Serving kept = simulate_serving(std::vector<Point>{constant_step(1, 2.0)}, at_rate(1.0));
  EXPECT_THAT(kept.best.reason, testing::Not(testing::HasSubstr("mean step alone")));
}

TEST(Serving, TheMeanOnlyBatchesAreTheOnesItSimulatedSo) {
  // Batch 8 twice: the faster point kept its steps and is the one simulated, so the slower one without
  // steps is not named; batch 1 kept none and is; batch 4 runs two micro-batches a step and is not served.
  Point bare = constant_step(1, 2.0);
  bare.samples_ms.clear();
  Point slow = constant_step(8, 8.0);
  slow.samples_ms.clear();
  Point accumulated = measured_point(4, 1000.0, 0.0, 5, 2);
  accumulated.samples_ms.clear();
  const std::vector<Point> points = {bare, slow, constant_step(8, 4.0), accumulated};
  EXPECT_EQ(serving_mean_only_batches(points), std::vector<int64_t>{1});
  const Serving s = simulate_serving(points, at_rate(1.0));
  EXPECT_THAT(s.best.reason, testing::HasSubstr("for batch 1, which the report keeps no steps of"));
  // The slower one alone: now it is what batch 8 draws from.
  EXPECT_EQ(serving_mean_only_batches(std::vector<Point>{slow}), std::vector<int64_t>{8});
}

// A max batch past kServingMostMaxBatch is no row: request by request, a step of millions near its capacity
// drew millions of arrivals in each replication (2.9 GB and 16 s a rate at 2^24, minutes for --request-rate
// max). The heading names them from serving_unsimulated_batches; with nothing smaller, the reason says why.
TEST(Serving, MaxBatchesPastTheLimitAreNotSimulated) {
  const std::vector<Point> points = {constant_step(1, 1e-3), constant_step(1024, 1e-3),
                                     constant_step(int64_t{1} << 24, 1e-3),
                                     constant_step(int64_t{1} << 20, 1e-3)};
  EXPECT_THAT(serving_unsimulated_batches(points),
              ::testing::ElementsAre(int64_t{1} << 20, int64_t{1} << 24));
  AnalysisOptions max = at_rate(kRequestRateMax);
  max.latency_slo_ms = 1.0;
  for (const AnalysisOptions& options : {at_rate(5e8), max}) {
    const Serving s = simulate_serving(points, options);
    ASSERT_EQ(s.batches.size(), 2u);
    EXPECT_EQ(s.batches.back().batch, 1024);
    EXPECT_EQ(s.best.batch, 1024);
  }
  // A rate only a batch left out could serve: the reason names it.
  const Serving over = simulate_serving(points, at_rate(2e9));
  EXPECT_FALSE(over.best.batch);
  EXPECT_THAT(over.best.reason, ::testing::HasSubstr("; batch 1048576 serves up to"));
  EXPECT_THAT(over.best.reason, ::testing::HasSubstr("but a max batch above 131072 is not simulated"));
  const std::vector<Point> huge = {constant_step(int64_t{1} << 20, 1e-3)};
  const Serving none = simulate_serving(huge, at_rate(5e8));
  EXPECT_TRUE(none.batches.empty());
  EXPECT_FALSE(none.best.batch);
  EXPECT_THAT(none.best.reason, ::testing::HasSubstr("above max batch 131072, the most simulated request by "
                                                     "request (batch 1048576)"));
}

TEST(Serving, OnlyOneMicroBatchAStepServes) {
  const std::vector<Point> points = {measured_point(4, 1000.0, 0.0, 5, 2), constant_step(8, 2.0)};
  const Serving s = simulate_serving(points, at_rate(100.0));
  ASSERT_EQ(s.batches.size(), 1u);
  EXPECT_EQ(s.batches[0].batch, 8);
}

TEST(Serving, OptionsOutOfRangeNameTheirFlag) {
  std::vector<Point> points = {constant_step(1, 1.0)};
  // (+infinity is --request-rate max, which needs a budget: NoRateIsWithinABudgetUnderEveryStep.)
  for (const double bad : {0.0, -5.0, -std::numeric_limits<double>::infinity(), std::nan("")}) {
    try {
      (void)analyze(points, at_rate(bad));
      ADD_FAILURE() << bad;
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), testing::StartsWith("--request-rate: must be requests per second > 0"));
    }
  }
  try {
    (void)analyze(points, at_rate(10.0, -1.0));
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), testing::StartsWith("--max-queue-delay: must be a hold in ms >= 0"));
  }
}

}  // namespace
}  // namespace bsw
