// Tests of the knee: Kneedle itself, the rules around it (too few points, flat, still scaling) on synthetic
// throughput curves, and its confidence under each point's measured noise.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "sweep_points.hpp"
#include "unit/host_figures.hpp"

namespace bsw {
namespace {

using test::measured_point;
using test::powers_of_two;
using test::roofline;
using test::saturating;
using test::sweep;

const std::vector<int64_t> kBatches = powers_of_two(1, 4096);

TEST(Kneedle, FindsTheCornerOfAPiecewiseLinearCurve) {
  const std::vector<double> x{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<double> y{0, 1, 2, 3, 3, 3, 3, 3};
  const KneedleResult r = kneedle(x, y, 1.0);
  ASSERT_TRUE(r.knee.has_value());
  EXPECT_EQ(*r.knee, 3u);
}

TEST(Kneedle, MatchesKneedOnSaturatingCurves) {
  // kneed 0.8 KneeLocator(log2 b, log2 y, S=1, curve="concave", direction="increasing") gives these knees.
  const std::vector<std::pair<double, int64_t>> expected{
      {16, 32}, {64, 64}, {256, 128}, {512, 256}, {1024, 256}};
  for (const auto& [b0, knee_batch] : expected) {
    std::vector<double> x, y;
    for (int64_t b : kBatches) {
      x.push_back(std::log2(static_cast<double>(b)));
      y.push_back(std::log2(saturating(1000, b0)(static_cast<double>(b))));
    }
    const KneedleResult r = kneedle(x, y, 1.0);
    ASSERT_TRUE(r.knee.has_value()) << "b0 " << b0;
    EXPECT_EQ(kBatches[*r.knee], knee_batch) << "b0 " << b0;
  }
}

// A plateau of one point after the bend falls by exactly Kneedle's drop at S = 1: whether its throughput
// measured 0.01% above or below the bend's must not decide whether there is a knee.
TEST(Kneedle, AOnePointPlateauConfirmsTheKneeWhicheverSideRoundingPutsIt) {
  const std::vector<double> x{6, 7, 8, 9};  // log2 of 64..512
  for (const double last : {17.0 - 1e-4, 17.0, 17.0 + 1e-4}) {
    const std::vector<double> y{15, 16, 17, last};
    const KneedleResult r = kneedle(x, y, 1.0);
    ASSERT_TRUE(r.knee.has_value()) << last;
    EXPECT_EQ(*r.knee, 2u) << last;
  }
}

TEST(Kneedle, AStraightLineOrAConstantHasNoKnee) {
  const std::vector<double> x{0, 1, 2, 3, 4, 5};
  const std::vector<double> line{2, 3, 4, 5, 6, 7};
  const std::vector<double> constant{4, 4, 4, 4, 4, 4};
  EXPECT_FALSE(kneedle(x, line, 1.0).knee.has_value());
  EXPECT_FALSE(kneedle(x, constant, 1.0).knee.has_value());
}

TEST(Kneedle, ACandidateTheDataEndsBeforeConfirmingIsNotAKnee) {
  // y_d peaks at index 4 and only falls by half a step before the data end.
  const std::vector<double> x{0, 1, 2, 3, 4, 5};
  const std::vector<double> y{0, 1.2, 2.4, 3.6, 4.8, 5.3};
  const KneedleResult r = kneedle(x, y, 1.0);
  EXPECT_FALSE(r.knee.has_value());
  ASSERT_TRUE(r.unconfirmed.has_value());
  EXPECT_EQ(*r.unconfirmed, 4u);
}

TEST(Kneedle, HigherSensitivityNeedsALongerDrop) {
  const std::vector<double> x{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<double> y{0, 1, 2, 3, 3.5, 3.8, 4.0, 4.1};
  EXPECT_TRUE(kneedle(x, y, 1.0).knee.has_value());
  EXPECT_FALSE(kneedle(x, y, 10.0).knee.has_value());
}

TEST(Kneedle, RejectsMalformedCurves) {
  const std::vector<double> x{0, 1, 1, 3};
  const std::vector<double> y{0, 1, 2, 3};
  const std::vector<double> short_y{0, 1};
  EXPECT_THROW((void)kneedle(x, y, 1.0), std::invalid_argument);
  EXPECT_THROW((void)kneedle(y, short_y, 1.0), std::invalid_argument);
  EXPECT_THROW((void)kneedle(y, y, 0.0), std::invalid_argument);
  EXPECT_THROW((void)kneedle(std::vector<double>{1.0}, std::vector<double>{1.0}, 1.0), std::invalid_argument);
}

class SaturatingKnee : public ::testing::TestWithParam<double> {};

TEST_P(SaturatingKnee, IsNearB0) {
  const double b0 = GetParam();
  const KneeResult knee = find_knee(sweep(kBatches, saturating(50000, b0)), 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_GE(static_cast<double>(*knee.batch), b0 / 2) << knee.reason;
  EXPECT_LE(static_cast<double>(*knee.batch), b0 * 2) << knee.reason;
  EXPECT_EQ(knee.reason, "Kneedle S=1 on log2(batch) vs log2(samples/s)");
  EXPECT_EQ(knee.confidence, "stable") << knee.reason;
  EXPECT_FALSE(knee.range_low.has_value());
}

INSTANTIATE_TEST_SUITE_P(B0, SaturatingKnee, ::testing::Values(16.0, 64.0, 256.0));

// The rewrites after each point of a long sweep leave the knee's confidence (4n + 2 perturbed curves of n
// points each time) to the final analysis; up to kInterimConfidencePoints they compute it as that does.
TEST(FindKnee, AnInterimAnalysisOfALongSweepLeavesTheConfidenceToTheEnd) {
  std::vector<int64_t> batches;
  for (int64_t b = 8; b <= 8 * static_cast<int64_t>(kInterimConfidencePoints + 1); b += 8)
    batches.push_back(b);
  std::vector<Point> points = sweep(batches, saturating(50000, 256.0));
  AnalysisOptions options;
  const Analysis full = analyze(points, options);
  options.interim = true;
  const Analysis interim = analyze(points, options);
  EXPECT_EQ(interim.knee.batch, full.knee.batch);
  EXPECT_NE(full.knee.confidence, "unknown") << full.knee.reason;
  EXPECT_EQ(interim.knee.confidence, "unknown");
  const std::string rule = full.knee.reason.substr(0, full.knee.reason.find(';'));
  EXPECT_EQ(
      interim.knee.reason.rfind(rule + "; its confidence under noise is computed when the sweep ends (the "
                                       "sweep is still running, past 128 points)",
                                0),
      0u)
      << interim.knee.reason;
  // One point fewer: computed as at the end.
  points.pop_back();
  options.interim = false;
  const Analysis shorter = analyze(points, options);
  options.interim = true;
  EXPECT_EQ(analyze(points, options).knee.confidence, shorter.knee.confidence);
  EXPECT_EQ(analyze(points, options).knee.reason, shorter.knee.reason);
}

TEST(FindKnee, LinearThroughputIsStillScaling) {
  const KneeResult knee = find_knee(sweep(kBatches, [](double b) { return 100.0 * b; }), 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.reason.rfind("throughput still scaling at the largest batch", 0), 0u) << knee.reason;
  EXPECT_NE(knee.reason.find("4096: +100% over batch 2048"), std::string::npos) << knee.reason;
  EXPECT_EQ(knee.confidence, "stable");
}

// Linear up to 512, then a last doubling that gains almost nothing: that is noise, not scaling, and must not
// send the recommendation to the largest batch (twice the memory for nothing).
TEST(FindKnee, ALastStepWithinTheNoiseIsNotStillScaling) {
  const auto rate_with_last_gain = [](double gain) {
    return [gain](double b) { return b <= 512 ? 100.0 * b : 100.0 * 512 * (1.0 + gain); };
  };
  const std::vector<int64_t> batches = powers_of_two(1, 1024);
  const KneeResult flat_end = find_knee(sweep(batches, rate_with_last_gain(0.003)), 1.0);
  EXPECT_EQ(flat_end.reason.find("still scaling"), std::string::npos) << flat_end.reason;
  const KneeResult rising = find_knee(sweep(batches, rate_with_last_gain(0.10)), 1.0);
  EXPECT_EQ(rising.reason.rfind("throughput still scaling at the largest batch (1024: +10%", 0), 0u)
      << rising.reason;
  // Per doubling: +2% from 448 to 512 (a seventh more batch) is +11% a doubling, still scaling.
  std::vector<Point> linear_steps =
      sweep({64, 128, 192, 256, 320, 384, 448}, [](double b) { return 100.0 * b; });
  linear_steps.push_back(test::measured_point(512, 100.0 * 448 * 1.02));
  EXPECT_EQ(find_knee(linear_steps, 1.0).reason.rfind("throughput still scaling", 0), 0u)
      << find_knee(linear_steps, 1.0).reason;
  // A short last step (a bisected fit edge, 512 to 576) needs 1% however little 3% a doubling asks: +0.6% is
  // noise.
  std::vector<Point> short_step = sweep(powers_of_two(1, 512), [](double b) { return 100.0 * b; });
  short_step.push_back(test::measured_point(576, 100.0 * 512 * 1.006));
  EXPECT_EQ(find_knee(short_step, 1.0).reason.find("still scaling"), std::string::npos)
      << find_knee(short_step, 1.0).reason;
}

// A sweep finer than doublings: the last step (8128 to 8192, +0.8% in batch) cannot gain the 1% floor however
// fast the curve still scales, and the curve read as saturated (recommend 7744) where the same device swept
// in doublings read as still scaling. The last doubling decides instead, as long as the last step keeps to
// it.
TEST(FindKnee, AFineSweepStillScalingAtItsEndIsStillScaling) {
  std::vector<int64_t> fine;
  for (int64_t b = 64; b <= 8192; b += 64) fine.push_back(b);
  const auto nearly_linear = saturating(1e6, 65536);  // +89% from 4096 to 8192
  const KneeResult fine_knee = find_knee(sweep(fine, nearly_linear), 1.0);
  EXPECT_FALSE(fine_knee.batch.has_value()) << fine_knee.reason;
  EXPECT_EQ(fine_knee.reason.rfind("throughput still scaling at the largest batch (8192: +", 0), 0u)
      << fine_knee.reason;
  EXPECT_NE(fine_knee.reason.find("over batch 4096)"), std::string::npos) << fine_knee.reason;
  const KneeResult doublings = find_knee(sweep(powers_of_two(64, 8192), nearly_linear), 1.0);
  EXPECT_EQ(doublings.reason.rfind("throughput still scaling at the largest batch (8192: +", 0), 0u)
      << doublings.reason;
  // Flat over the last doubling: not still scaling, however the list is spaced.
  const KneeResult flat = find_knee(sweep(fine, saturating(1e6, 64)), 1.0);
  EXPECT_EQ(flat.reason.find("still scaling"), std::string::npos) << flat.reason;
}

// A bend Kneedle confirms far below the best, on a curve still rising fast at its end, is where the sweep
// ended before the curve bent, not where throughput stops scaling: a throughput of b / (1 + b / 4096) swept
// to 8192 put a "stable" knee at 512, 17% of the best, with +33% still to come per doubling.
TEST(FindKnee, AnEarlyBendOnACurveStillRisingFastIsNotAKnee) {
  const KneeResult early = find_knee(sweep(powers_of_two(1, 8192), saturating(1e6, 4096)), 1.0);
  EXPECT_FALSE(early.batch.has_value()) << early.reason;
  EXPECT_EQ(
      early.reason.rfind("throughput still scaling at the largest batch (8192: +33% over batch 4096); a "
                         "bend at batch ",
                         0),
      0u)
      << early.reason;
  EXPECT_NE(early.reason.find("is not where it stops scaling: throughput more than doubles past it"),
            std::string::npos)
      << early.reason;
  // Swept well past its bend, the same curve keeps its knee (a few % a doubling at the end).
  const KneeResult swept = find_knee(sweep(powers_of_two(1, 131072), saturating(1e6, 4096)), 1.0);
  EXPECT_TRUE(swept.batch.has_value()) << swept.reason;
  // So does a saturated curve whose last step is short and noisy (a fit edge 1.6% above the batch before it,
  // measured 3% fast): the rise is judged over the last doubling, not as 3% in a 64th of one.
  std::vector<Point> edge = sweep(powers_of_two(1, 4096), saturating(1e6, 90));
  edge.push_back(measured_point(4160, saturating(1e6, 90)(4096) * 1.03));
  const KneeResult kept = find_knee(edge, 1.0);
  EXPECT_TRUE(kept.batch.has_value()) << kept.reason;
}

// Points without raw samples cannot be moved by their noise: the knee's confidence is unknown, not stable.
TEST(FindKnee, WithoutSamplesTheConfidenceIsUnknown) {
  std::vector<Point> points;
  for (int64_t b : kBatches)
    points.push_back(measured_point(b, roofline(1.0, 128.0)(static_cast<double>(b)), 0.002, 1));
  const KneeResult knee = find_knee(points, 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(*knee.batch, 128);
  EXPECT_EQ(knee.confidence, "unknown");
  EXPECT_NE(knee.reason.find("no point has the raw step samples"), std::string::npos) << knee.reason;
  for (Point& p : points) p.samples_ms.clear();
  EXPECT_EQ(find_knee(points, 1.0).confidence, "unknown");
  // Also with too few points for a knee: nothing says it is stable.
  points.resize(2);
  EXPECT_EQ(find_knee(points, 1.0).confidence, "unknown");
  // Samples that are all equal (a noise-free scripted device) do have a spread, of zero: stable.
  std::vector<Point> exact;
  for (int64_t b : kBatches)
    exact.push_back(measured_point(b, roofline(1.0, 128.0)(static_cast<double>(b)), 0.0));
  EXPECT_EQ(find_knee(exact, 1.0).confidence, "stable");
}

TEST(FindKnee, RooflineKneeIsAtTheCorner) {
  // step = max(1 ms, b / 128 per ms): the roof starts at batch 128.
  const KneeResult knee = find_knee(sweep(kBatches, roofline(1.0, 128.0)), 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(*knee.batch, 128);
  EXPECT_EQ(knee.confidence, "stable");
}

TEST(FindKnee, RooflineCornerAtTheNextToLastBatchIsConfirmedByOneFlatStep) {
  const KneeResult knee = find_knee(sweep(kBatches, roofline(1.0, 2048.0)), 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(*knee.batch, 2048);
}

TEST(FindKnee, TooFewPoints) {
  const KneeResult knee =
      find_knee(sweep(powers_of_two(1, 4), [](double b) { return b == 1 ? 500.0 : 990.0; }), 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.reason, "too few points (3 ok, need 4)");
  EXPECT_EQ(knee.confidence, "stable");
}

// A short sweep rising at its end is still scaling, but not one within the flat rule's 5% (a longer sweep
// would call it flat): 1000, 1000, 1040 samples/s gains 4% on its last doubling, 4% overall.
TEST(FindKnee, AShortFlatSweepIsNotStillScaling) {
  std::vector<Point> points = {measured_point(8, 1000.0), measured_point(16, 1000.0),
                               measured_point(32, 1040.0)};
  EXPECT_EQ(find_knee(points, 1.0).reason, "too few points (3 ok, need 4)");
  points.pop_back();
  points.push_back(measured_point(32, 1200.0));
  EXPECT_NE(find_knee(points, 1.0).reason.find("throughput still scaling at the largest batch"),
            std::string::npos)
      << find_knee(points, 1.0).reason;
}

TEST(FindKnee, OnlyOkPointsCountAndDuplicatesCollapse) {
  std::vector<Point> points = sweep(powers_of_two(1, 4), saturating(1000, 2));
  points.push_back(test::failed_point(8, PointStatus::oom, "needs 90 GiB"));
  points.push_back(measured_point(4, 10.0, 0.002, 21, 2));  // a slower split of batch 4: ignored
  Point zero = measured_point(16, 1000.0);
  zero.samples_per_second = 0;
  points.push_back(zero);
  EXPECT_NE(find_knee(points, 1.0).reason.find("too few points for a knee (3 ok, need 4)"), std::string::npos)
      << find_knee(points, 1.0).reason;
}

TEST(FindKnee, FlatCurveHasNoBend) {
  // Within +-1.5% of 1000 samples/s everywhere: no bend worth naming, whatever the normalised curve says.
  const std::vector<double> wiggle{1.0, 1.01, 0.995, 1.015, 0.99, 1.005, 1.0, 1.012, 0.998};
  std::vector<Point> points;
  for (std::size_t i = 0; i < wiggle.size(); ++i)
    points.push_back(measured_point(int64_t{1} << i, 1000 * wiggle[i]));
  const KneeResult knee = find_knee(points, 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.reason.rfind("no knee: throughput curve has no concave bend", 0), 0u) << knee.reason;
  EXPECT_NE(knee.reason.find("already reaches"), std::string::npos) << knee.reason;
}

TEST(FindKnee, FallingCurveHasNoBend) {
  const KneeResult knee = find_knee(sweep(kBatches, [](double b) { return 5000.0 / std::sqrt(b); }), 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.reason, "no knee: throughput falls as the batch grows (-98% from 1 to 4096)");
}

// The smallest batch the fastest, the others within the flat margin: no circular "reaches 100% of itself".
TEST(FindKnee, FlatCurveLedByItsSmallestBatchSaysSo) {
  const std::vector<double> rate{1000, 990, 995, 980};
  std::vector<Point> points;
  for (std::size_t i = 0; i < rate.size(); ++i) points.push_back(measured_point(int64_t{1} << i, rate[i]));
  const KneeResult knee = find_knee(points, 1.0);
  EXPECT_EQ(knee.reason,
            "no knee: throughput curve has no concave bend (the smallest batch, 1, has the best throughput)");
}

TEST(FindKnee, ConvexCurveIsStillScaling) {
  // Throughput grows faster and faster (in log-log): the diagonal is never crossed from above, no bend.
  const std::vector<double> rate{100, 101, 103, 110, 130, 200, 400, 1000, 3000};
  std::vector<Point> points;
  for (std::size_t i = 0; i < rate.size(); ++i) points.push_back(measured_point(int64_t{1} << i, rate[i]));
  const KneeResult knee = find_knee(points, 1.0);
  EXPECT_FALSE(knee.batch.has_value()) << *knee.batch;
  EXPECT_EQ(knee.reason.rfind("throughput still scaling at the largest batch (256: +200% over batch 128)", 0),
            0u)
      << knee.reason;
}

TEST(FindKnee, DipsDoNotReadAsBends) {
  // Throughput falls from batch 1 to 8, recovers, and peaks at 64: the knee is the peak, not batch 1.
  const std::vector<double> rate{400, 300, 200, 100, 150, 300, 800, 700};
  std::vector<Point> points;
  for (std::size_t i = 0; i < rate.size(); ++i) points.push_back(measured_point(int64_t{1} << i, rate[i]));
  const KneeResult knee = find_knee(points, 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(*knee.batch, 64);
}

// One slow point in a rising curve (a timed-out or disturbed measurement, a slow kernel choice): flattened
// into a step it read as a bend at the batch before it, reaching a fraction of the best throughput. It is
// left out.
TEST(FindKnee, OneSlowPointInARisingCurveIsNotABend) {
  std::vector<Point> points =
      sweep(powers_of_two(1, 1024), [](double b) { return 1000.0 * b / (1 + b / 256); });
  const KneeResult clean = find_knee(points, 1.0);
  ASSERT_TRUE(clean.batch.has_value()) << clean.reason;
  ASSERT_EQ(*clean.batch, 64);
  auto dipped_at = [&](int64_t batch) {
    std::vector<Point> dipped = points;
    for (Point& p : dipped)
      if (p.batch == batch) p.samples_per_second *= 0.2;
    return find_knee(dipped, 1.0);
  };
  for (int64_t batch : {4, 16, 32, 256}) {
    const KneeResult dipped = dipped_at(batch);
    ASSERT_TRUE(dipped.batch.has_value()) << dipped.reason;
    EXPECT_EQ(*dipped.batch, 64) << "dip at " << batch;
  }
  // A slow knee is no knee: the next batch is, never one before it.
  EXPECT_EQ(dipped_at(64).batch, std::optional<int64_t>(128));
}

// A slow first point (the first point a sweep measures pays for what warm-up did not cover): its step is
// slower than the next batch's, which a sound measurement never shows, so it reads as linear scaling to the
// next. Before, it had no smaller point to bridge from, and the knee moved to batch 2.
TEST(FindKnee, ASlowFirstPointDoesNotMoveTheKnee) {
  const std::vector<Point> points =
      sweep(powers_of_two(1, 1024), [](double b) { return 1000.0 * b / (1 + b / 256); });
  for (const double factor : {0.2, 0.45}) {
    for (const int slow : {1, 2}) {
      std::vector<Point> dipped = points;
      for (int i = 0; i < slow; ++i) dipped[i].samples_per_second *= factor;
      const KneeResult knee = find_knee(dipped, 1.0);
      ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
      EXPECT_EQ(*knee.batch, 64) << slow << " slow points at " << factor;
    }
  }
  // Within 10% of the next batch's step (0.95 of the trend) a first point is a measurement like any other.
  std::vector<Point> slower = points;
  slower[0].samples_per_second *= 0.95;
  EXPECT_EQ(find_knee(slower, 1.0).batch, std::optional<int64_t>(64));
}

// Only the leading points: noise of a few percent on a near-linear stretch further in (a step slightly
// shorter than the next batch's) lifts nothing, so it cannot flatten the normalised curve and lose a knee.
TEST(FindKnee, NoiseInsideTheCurveLiftsNothing) {
  std::vector<Point> points =
      sweep(powers_of_two(1, 1024), [](double b) { return 1000.0 * b / (1 + b / 256); });
  const KneeResult clean = find_knee(points, 1.0);
  for (std::size_t i = 1; i < 5; i += 2) points[i].samples_per_second *= 0.93;  // batches 2 and 8
  const KneeResult noisy = find_knee(points, 1.0);
  ASSERT_TRUE(noisy.batch.has_value()) << noisy.reason;
  EXPECT_EQ(noisy.batch, clean.batch);
}

TEST(FindKnee, PeakThenDeclineHasItsKneeAtThePeak) {
  std::vector<Point> points = sweep(powers_of_two(1, 256), [](double b) { return 100.0 * b; });
  points.push_back(measured_point(512, 100.0 * 256 * 0.9));
  points.push_back(measured_point(1024, 100.0 * 256 * 0.7));
  const KneeResult knee = find_knee(points, 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(*knee.batch, 256);
}

TEST(FindKnee, BendTooLateToConfirmSaysSo) {
  // Linear up to 2048, then +10% at 4096: the bend at 2048 has only a partial drop after it.
  std::vector<Point> points = sweep(powers_of_two(1, 2048), [](double b) { return 10.0 * b; });
  points.push_back(measured_point(4096, 2048 * 10.0 * 1.1));
  const KneeResult knee = find_knee(points, 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.reason.rfind("throughput still scaling at the largest batch", 0), 0u) << knee.reason;
  EXPECT_NE(knee.reason.find("a bend near batch 2048 is not confirmed"), std::string::npos) << knee.reason;
}

// The same curve as the splits of --effective-batch 4096: no micro-batch is larger than 4096, so the advice
// does not ask for one; where the 4096x1 split did not fit, it says that instead.
TEST(FindKnee, AnEffectiveBatchSweepIsNotAskedForALargerMicroBatch) {
  std::vector<Point> points = sweep(powers_of_two(1, 2048), [](double b) { return 10.0 * b; });
  points.push_back(measured_point(4096, 2048 * 10.0 * 1.02));
  for (Point& p : points) {
    p.accumulation = 4096 / p.batch;
    p.effective_batch = 4096;
  }
  EXPECT_EQ(find_knee(points, 1.0).reason,
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch 2048; no micro-batch of effective batch 4096 is larger)");
  // 4096x1 out of memory, 2048x2 2% over 1024x4: the bend at 1024 is unconfirmed at the largest split.
  points.back() = test::failed_point(4096, PointStatus::oom, "needs 900 GiB");
  points.back().effective_batch = 4096;
  points[points.size() - 2] = measured_point(2048, 1024 * 10.0 * 1.02);
  points[points.size() - 2].accumulation = 2;
  points[points.size() - 2].effective_batch = 4096;
  EXPECT_EQ(find_knee(points, 1.0).reason,
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch 1024; the larger splits of effective batch 4096 did not run ok)");
}

TEST(FindKnee, AnUnconfirmedBendAtTheFitEdgeDoesNotAskForALargerBatch) {
  // Linear up to 2048, then +2% at 4096: not still scaling (3% a doubling), and the bend at 2048 has only a
  // partial drop after it.
  std::vector<Point> points = sweep(powers_of_two(1, 2048), [](double b) { return 10.0 * b; });
  points.push_back(measured_point(4096, 2048 * 10.0 * 1.02));
  const KneeResult open = find_knee(points, 1.0);
  EXPECT_FALSE(open.batch.has_value());
  EXPECT_EQ(open.reason,
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch 2048; extend the sweep past batch 4096)");
  points.push_back(test::failed_point(65536, PointStatus::oom, "needs 900 GiB"));
  EXPECT_EQ(find_knee(points, 1.0).reason,
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch 2048; sweep batches between 4096 and 65536, which did not fit)");
  points.push_back(test::failed_point(4160, PointStatus::over_limit, "over the limit"));
  points.push_back(test::failed_point(2040, PointStatus::oom, "a transient failure below"));
  EXPECT_EQ(find_knee(points, 1.0).reason,
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch 2048; batch 4160 did not fit, so the sweep cannot go past batch 4096)");
}

TEST(FindKnee, NoiseCanMakeAKneeAppear) {
  // The unconfirmed bend of the test above, measured with +-20% step times: some perturbed curves confirm it.
  std::vector<Point> points = sweep(
      powers_of_two(1, 2048), [](double b) { return 10.0 * b; }, 0.2);
  points.push_back(measured_point(4096, 2048 * 10.0 * 1.1, 0.2));
  const KneeResult knee = find_knee(points, 1.0);
  EXPECT_FALSE(knee.batch.has_value());
  EXPECT_EQ(knee.confidence, "range");
  ASSERT_TRUE(knee.range_low.has_value());
  ASSERT_TRUE(knee.range_high.has_value());
  EXPECT_LE(*knee.range_low, *knee.range_high);
  EXPECT_NE(knee.reason.find("under measured noise a knee appears in"), std::string::npos) << knee.reason;
}

TEST(FindKnee, VeryNoisyDataGivesARange) {
  const KneeResult knee = find_knee(sweep(kBatches, saturating(50000, 64), 0.4), 1.0);
  ASSERT_TRUE(knee.batch.has_value()) << knee.reason;
  EXPECT_EQ(knee.confidence, "range") << knee.reason;
  ASSERT_TRUE(knee.range_low.has_value());
  ASSERT_TRUE(knee.range_high.has_value());
  EXPECT_LT(*knee.range_low, *knee.range_high);
  EXPECT_LE(*knee.range_low, *knee.batch);
  EXPECT_GE(*knee.range_high, *knee.batch);
  EXPECT_NE(knee.reason.find("under measured noise the knee moves between batch"), std::string::npos)
      << knee.reason;
}

// The band each point moves in is its mean's 99% confidence interval, not its steps' spread: the throughput
// is the mean's. 400 steps a point at +-20% spread know each mean to about 1%, so the knee is stable (the
// steps' median/p10..p90 band said "range"); two steps a point at +-1% know it to no better than +-60% (t on
// one degree of freedom is 64), so it is not.
TEST(FindKnee, TheBandIsTheMeansConfidenceIntervalNotTheStepsSpread) {
  std::vector<Point> many;
  for (int64_t b : kBatches) {
    many.push_back(measured_point(b, saturating(50000, 64)(static_cast<double>(b)), 0.2, 400));
    // measured_point lays its steps out as a ramp, which is drift; the same steps in a scrambled order are
    // not.
    std::vector<double>& steps = many.back().samples_ms;
    std::vector<double> scrambled(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) scrambled[i] = steps[(i * 263) % steps.size()];
    steps = scrambled;
  }
  const KneeResult known = find_knee(many, 1.0);
  ASSERT_TRUE(known.batch.has_value()) << known.reason;
  EXPECT_EQ(known.confidence, "stable") << known.reason;
  std::vector<Point> two;
  for (int64_t b : kBatches)
    two.push_back(measured_point(b, saturating(50000, 64)(static_cast<double>(b)), 0.01, 2));
  const KneeResult guessed = find_knee(two, 1.0);
  EXPECT_EQ(guessed.confidence, "range") << guessed.reason;
}

TEST(FindKnee, ConfidenceIsDeterministic) {
  const std::vector<Point> points = sweep(kBatches, saturating(50000, 64), 0.4);
  const KneeResult first = find_knee(points, 1.0);
  const KneeResult second = find_knee(points, 1.0);
  EXPECT_EQ(first.reason, second.reason);
  EXPECT_EQ(first.range_low, second.range_low);
  EXPECT_EQ(first.range_high, second.range_high);
}

// A knee that holds under each point's own noise, where some points were timed on a busy host: the load
// moved whole steps and differs from run to run, so it is "contended", not "stable", and the reason names
// them. A quiet host's figures change nothing.
TEST(FindKnee, AKneeOnABusyHostIsContendedNotStable) {
  std::vector<Point> points = sweep(kBatches, saturating(50000, 64));
  const auto host = [](double others, double steal) {
    return test::host_figures(1.0, 1.0, others, steal, others > 0 ? 0.2 : 0.0);
  };
  for (Point& p : points) p.host = host(0.0, 0.0);
  const KneeResult quiet = find_knee(points, 1.0);
  ASSERT_EQ(quiet.confidence, "stable") << quiet.reason;
  for (Point& p : points)
    if (p.batch == 32 || p.batch == 128) p.host = host(1.0, 0.0);
  points.back().host = host(0.0, 9.0);  // steal alone
  const KneeResult busy = find_knee(points, 1.0);
  EXPECT_EQ(busy.batch, quiet.batch);
  EXPECT_EQ(busy.confidence, "contended");
  EXPECT_EQ(busy.reason, quiet.reason +
                             "; batches 32, 128, 4096 were timed on a busy host (the points' host figures), "
                             "so a rerun may put the knee elsewhere");
}

// However noisy their summaries, points without raw samples cannot be moved: the knee stays, its confidence
// is unknown.
TEST(FindKnee, PointsWithoutSamplesDoNotMove) {
  std::vector<Point> points = sweep(kBatches, saturating(50000, 64), 0.4);
  const KneeResult measured = find_knee(points, 1.0);
  for (Point& p : points) p.samples_ms.clear();
  const KneeResult bare = find_knee(points, 1.0);
  EXPECT_EQ(bare.batch, measured.batch);
  EXPECT_EQ(bare.confidence, "unknown");
  EXPECT_FALSE(bare.range_low.has_value());
}

}  // namespace
}  // namespace bsw
