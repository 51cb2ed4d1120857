// Tests of the sample statistics: numpy-compatible percentiles, summaries, relative noise, geometric mean.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

// Reference values from numpy 2.4: np.percentile(x, q) (method="linear"), np.std(x, ddof=1).
const std::vector<double> kSamples{12.5, 10.1, 11.7, 13.9, 10.4, 15.2, 11.1, 10.9, 12.0, 30.3};

TEST(Percentile, MatchesNumpyLinear) {
  EXPECT_DOUBLE_EQ(percentile(kSamples, 0), 10.1);
  EXPECT_NEAR(percentile(kSamples, 10), 10.370000000000001, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 25), 10.95, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 33.3), 11.0994, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 50), 11.85, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 90), 16.709999999999994, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 95), 23.504999999999985, 1e-12);
  EXPECT_NEAR(percentile(kSamples, 99), 28.941000000000003, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(kSamples, 100), 30.3);
}

TEST(Percentile, SmallUnsortedSample) {
  const std::vector<double> three{4.0, 1.0, 3.0};
  EXPECT_DOUBLE_EQ(percentile(three, 0), 1.0);
  EXPECT_NEAR(percentile(three, 10), 1.4, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(three, 50), 3.0);
  EXPECT_NEAR(percentile(three, 90), 3.8, 1e-12);
  EXPECT_NEAR(percentile(three, 99), 3.98, 1e-12);
}

TEST(Percentile, EmptyAndSingleAndInvalid) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  const std::vector<double> one{7.5};
  EXPECT_EQ(percentile(one, 0), 7.5);
  EXPECT_EQ(percentile(one, 99), 7.5);
  EXPECT_THROW((void)percentile(kSamples, -1), std::invalid_argument);
  EXPECT_THROW((void)percentile(kSamples, 100.5), std::invalid_argument);
  EXPECT_THROW((void)percentile(kSamples, NAN), std::invalid_argument);
  const std::vector<double> with_nan{1.0, NAN};
  EXPECT_THROW((void)percentile(with_nan, 50), std::invalid_argument);
}

TEST(Summarize, MatchesNumpy) {
  const StepStats s = summarize(kSamples);
  EXPECT_NEAR(s.mean, 13.810000000000002, 1e-12);
  EXPECT_NEAR(s.stddev, 6.00471111341383, 1e-12);
  EXPECT_NEAR(s.median, 11.85, 1e-12);
  EXPECT_EQ(s.median, s.p50);
  EXPECT_DOUBLE_EQ(s.min, 10.1);
  EXPECT_DOUBLE_EQ(s.max, 30.3);
  EXPECT_NEAR(s.p90, 16.709999999999994, 1e-12);
  EXPECT_NEAR(s.p95, 23.504999999999985, 1e-12);
  EXPECT_NEAR(s.p99, 28.941000000000003, 1e-12);
}

TEST(Summarize, EmptyIsAllZerosAndOneSampleHasNoSpread) {
  const StepStats empty = summarize({});
  EXPECT_EQ(empty.mean, 0.0);
  EXPECT_EQ(empty.stddev, 0.0);
  EXPECT_EQ(empty.p99, 0.0);
  EXPECT_EQ(empty.max, 0.0);
  const std::vector<double> one{3.25};
  const StepStats single = summarize(one);
  EXPECT_EQ(single.mean, 3.25);
  EXPECT_EQ(single.stddev, 0.0);
  EXPECT_EQ(single.p99, 3.25);
  EXPECT_EQ(single.min, 3.25);
}

TEST(Summarize, StddevUsesNMinusOne) {
  const std::vector<double> values{2, 4, 4, 4, 5, 5, 7, 9};  // population stddev 2, sample sqrt(32/7)
  EXPECT_NEAR(summarize(values).stddev, std::sqrt(32.0 / 7.0), 1e-14);
}

TEST(RelativeNoise, IsStddevOverMean) {
  EXPECT_NEAR(relative_noise(kSamples), 6.00471111341383 / 13.810000000000002, 1e-12);
  const std::vector<double> flat{5.0, 5.0, 5.0};
  EXPECT_EQ(relative_noise(flat), 0.0);
  const std::vector<double> one{5.0};
  EXPECT_EQ(relative_noise(one), 0.0);
  EXPECT_EQ(relative_noise(StepStats{}), 0.0);
}

TEST(GeometricMean, MatchesScipy) {
  const std::vector<double> ratios{1.1, 0.9, 1.25, 2.0};
  ASSERT_TRUE(geometric_mean(ratios).has_value());
  EXPECT_NEAR(*geometric_mean(ratios), 1.2542779884280946, 1e-12);  // scipy.stats.gmean
  EXPECT_FALSE(geometric_mean({}).has_value());
  const std::vector<double> bad{1.0, 0.0};
  EXPECT_THROW((void)geometric_mean(bad), std::invalid_argument);
  const std::vector<double> negative{-1.0};
  EXPECT_THROW((void)geometric_mean(negative), std::invalid_argument);
}

// Student's t tail against table values (and, for the Welch example, a numerical integration of the density).
TEST(StudentT, TwoSidedTailMatchesTables) {
  EXPECT_NEAR(student_t_two_sided_p(2.228138851986, 10), 0.05, 1e-9);
  EXPECT_NEAR(student_t_two_sided_p(12.7062047364, 1), 0.05, 1e-9);
  EXPECT_NEAR(student_t_two_sided_p(-1.959963984540054, 1e6), 0.05, 1e-6);
  EXPECT_NEAR(student_t_two_sided_p(3.0, 4.5), 0.0343808680, 1e-8);
  EXPECT_DOUBLE_EQ(student_t_two_sided_p(0.0, 7), 1.0);
  EXPECT_EQ(student_t_two_sided_p(std::numeric_limits<double>::infinity(), 7), 0.0);
  EXPECT_THROW((void)student_t_two_sided_p(1.0, 0.0), std::invalid_argument);
}

TEST(Welch, UnequalVariancesAndSizes) {
  const std::vector<double> a{10.1, 9.8, 10.3, 10.0, 9.9, 10.2}, b{10.6, 10.9, 10.4, 10.8, 10.7};
  const WelchResult r = welch_t_test(a, b);
  EXPECT_NEAR(r.t, -5.4765357047075796, 1e-12);
  EXPECT_NEAR(r.df, 8.544345657595137, 1e-12);
  EXPECT_NEAR(r.p_value, 0.00046974973905, 1e-10);
  // No spread on either side: equal means are p 1, different ones p 0.
  EXPECT_EQ(welch_t_test(std::vector<double>{2, 2}, std::vector<double>{2, 2, 2}).p_value, 1.0);
  EXPECT_EQ(welch_t_test(std::vector<double>{2, 2}, std::vector<double>{3, 3}).p_value, 0.0);
  EXPECT_THROW((void)welch_t_test(std::vector<double>{1}, b), std::invalid_argument);
}

// Student's pooled t against scipy.stats.ttest_ind(equal_var=True) (t -1.5275, p 0.17047 on 7 degrees of
// freedom, the p checked by numeric integration of the t density too), and its critical value against tables.
TEST(StudentT, PooledVariancesAndTheCriticalValue) {
  const StudentResult r = student_t_test(std::vector<double>{1, 2, 3, 4}, std::vector<double>{2, 3, 4, 5, 6});
  EXPECT_NEAR(r.t, -1.5275252316519468, 1e-12);
  EXPECT_EQ(r.df, 7.0);
  EXPECT_NEAR(r.p_value, 0.170470648, 1e-7);
  EXPECT_EQ(student_t_test(std::vector<double>{2, 2}, std::vector<double>{2, 2, 2}).p_value, 1.0);
  EXPECT_EQ(student_t_test(std::vector<double>{2, 2}, std::vector<double>{3, 3}).p_value, 0.0);
  EXPECT_THROW((void)student_t_test(std::vector<double>{1}, std::vector<double>{1, 2}),
               std::invalid_argument);
  EXPECT_NEAR(student_t_critical(0.01, 18), 2.878440473, 1e-6);
  EXPECT_NEAR(student_t_critical(0.01, 1), 63.65674116, 1e-5);
  EXPECT_NEAR(student_t_critical(0.05, 1e6), 1.959966, 1e-5);
}

// The quantile test against exact sums of binomial coefficients (Python's math.comb): the counts above the
// pooled percentile, both one-sided p, and whether any split of so many steps could be significant.
TEST(QuantileTest, MatchesFishersExactTestOnTheCountsAboveThePooledPercentile) {
  std::vector<double> a, b;
  for (int i = 0; i < 400; ++i) {
    a.push_back(1.0 + 0.01 * (i % 17));
    b.push_back(1.0 + 0.01 * (i % 17) + (i % 25 == 0 ? 1.0 : 0.0));  // a stall every 25th step
  }
  const QuantileTestResult longer = quantile_test(a, b, 99, 0.005);
  EXPECT_NEAR(longer.threshold, 2.0701, 1e-12);
  EXPECT_EQ(longer.above_a, 0u);
  EXPECT_EQ(longer.above_b, 8u);
  EXPECT_NEAR(longer.p_longer, 0.0037706450711151598, 1e-12);
  EXPECT_NEAR(longer.p_shorter, 1.0, 1e-12);
  EXPECT_FALSE(longer.ties_counted);
  EXPECT_TRUE(longer.longer_resolvable);
  EXPECT_TRUE(longer.shorter_resolvable);
  // The other way round: the same p, shorter.
  const QuantileTestResult shorter = quantile_test(b, a, 99, 0.005);
  EXPECT_NEAR(shorter.p_shorter, 0.0037706450711151598, 1e-12);
  EXPECT_NEAR(shorter.p_longer, 1.0, 1e-12);
  // Unequal sizes at p95.
  a.clear();
  b.clear();
  for (int i = 0; i < 300; ++i) a.push_back(1.0 + 0.001 * i);
  for (int i = 0; i < 200; ++i) b.push_back(1.0 + 0.001 * i + (i % 10 == 0 ? 0.5 : 0.0));
  const QuantileTestResult p95 = quantile_test(a, b, 95, 0.005);
  EXPECT_EQ(p95.above_a, 5u);
  EXPECT_EQ(p95.above_b, 20u);
  EXPECT_NEAR(p95.p_longer, 3.5171605199478245e-05, 1e-15);
  EXPECT_NEAR(p95.p_shorter, 0.9999950978052426, 1e-12);
  EXPECT_TRUE(p95.longer_resolvable);
  // Many more steps in a than in b: a longer tail in b shows (every stall above the threshold is b's), while
  // a shorter one could not (0.87^K at best), so each direction says for itself whether it could.
  a.clear();
  b.clear();
  for (int i = 0; i < 2000; ++i) a.push_back(1.0 + 0.0001 * (i % 97));
  for (int i = 0; i < 300; ++i) b.push_back(1.0 + 0.0001 * (i % 97) + (i % 25 == 0 ? 0.5 : 0.0));
  const QuantileTestResult uneven = quantile_test(a, b, 99, 0.005);
  EXPECT_EQ(uneven.above_a, 0u);
  EXPECT_EQ(uneven.above_b, 12u);
  EXPECT_NEAR(uneven.p_longer, 1.997168322959615e-11, 1e-20);
  EXPECT_TRUE(uneven.longer_resolvable);
  EXPECT_FALSE(uneven.shorter_resolvable);
}

// Stalls of one length at the pooled percentile: none is strictly above it, so the steps at it count.
TEST(QuantileTest, TiedSlowestStepsAtThePercentileCount) {
  const std::vector<double> a(600, 2.0);
  std::vector<double> b;
  for (int i = 0; i < 600; ++i) b.push_back(i % 25 == 0 ? 3.0 : 2.0);
  const QuantileTestResult r = quantile_test(a, b, 99, 0.005);
  EXPECT_EQ(r.threshold, 3.0);
  EXPECT_TRUE(r.ties_counted);
  EXPECT_EQ(r.above_a, 0u);
  EXPECT_EQ(r.above_b, 24u);
  EXPECT_NEAR(r.p_longer, 4.71400904175901e-08, 1e-16);
}

// 20 steps a side cannot resolve a p99 (one step lies above it), however far apart they are; steps all
// equal have none above; bad input throws.
TEST(QuantileTest, TooFewStepsOrNoneAboveIsNotResolvable) {
  std::vector<double> a, b;
  for (int i = 1; i <= 20; ++i) {
    a.push_back(i);
    b.push_back(i + 100.0);
  }
  const QuantileTestResult few = quantile_test(a, b, 99, 0.005);
  EXPECT_FALSE(few.longer_resolvable);
  EXPECT_FALSE(few.shorter_resolvable);
  EXPECT_EQ(few.above_b, 1u);
  EXPECT_NEAR(few.p_longer, 0.5, 1e-12);
  const std::vector<double> flat(1000, 2.0);
  const QuantileTestResult equal = quantile_test(flat, flat, 99, 0.005);
  EXPECT_FALSE(equal.longer_resolvable);
  EXPECT_TRUE(equal.ties_counted);
  EXPECT_EQ(equal.above_a + equal.above_b, 2000u);  // every step ties: nothing to tell apart
  EXPECT_EQ(equal.p_longer, 1.0);
  EXPECT_THROW((void)quantile_test(std::vector<double>{}, flat, 99, 0.005), std::invalid_argument);
  EXPECT_THROW((void)quantile_test(flat, std::vector<double>{1.0, NAN}, 99, 0.005), std::invalid_argument);
  EXPECT_THROW((void)quantile_test(flat, flat, 100, 0.005), std::invalid_argument);
}

}  // namespace
}  // namespace bsw

// Holm's adjustment as R's p.adjust(p, "holm") gives it: p.adjust(c(0.01, 0.04, 0.03, 0.02, 0.05), "holm")
// is 0.05 0.09 0.09 0.08 0.09 (the step-down keeps them monotone in the p's order), in the input's order.
TEST(Holm, MatchesRsPAdjust) {
  const std::vector<double> p = {0.01, 0.04, 0.03, 0.02, 0.05};
  const std::vector<double> adjusted = bsw::holm_adjust(p);
  const std::vector<double> expected = {0.05, 0.09, 0.09, 0.08, 0.09};
  ASSERT_EQ(adjusted.size(), expected.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(adjusted[i], expected[i], 1e-12) << i;
  // Capped at 1; one test is its own p; ties keep one adjusted value; an empty family is empty.
  EXPECT_EQ(bsw::holm_adjust(std::vector<double>{0.4, 0.6}), (std::vector<double>{0.8, 0.8}));
  EXPECT_EQ(bsw::holm_adjust(std::vector<double>{0.003}), (std::vector<double>{0.003}));
  EXPECT_EQ(bsw::holm_adjust(std::vector<double>{0.01, 0.01}), (std::vector<double>{0.02, 0.02}));
  EXPECT_TRUE(bsw::holm_adjust(std::vector<double>{}).empty());
  EXPECT_EQ(bsw::holm_adjust(std::vector<double>{0.0, 0.2}), (std::vector<double>{0.0, 0.2}));
  EXPECT_THROW((void)bsw::holm_adjust(std::vector<double>{0.1, 1.5}), std::invalid_argument);
  EXPECT_THROW((void)bsw::holm_adjust(std::vector<double>{std::nan("")}), std::invalid_argument);
}

namespace bsw {
namespace {

// Steps from a fixed generator: independent, about 3% apart.
std::vector<double> independent_steps(size_t n, uint64_t seed) {
  std::vector<double> steps;
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    steps.push_back(1.0 + 0.1 * (static_cast<double>(seed >> 11) / 9007199254740992.0 - 0.5));
  }
  return steps;
}

// The mean's standard error allowing for drift: the batch means' where they are larger (a slow first half is
// one piece of evidence, not 100), on 9 degrees of freedom; significant_only takes them only where they are
// beyond what independent steps' noise would give one time in 4, so independent steps keep stddev / sqrt(n)
// on n - 1.
TEST(DriftStandardError, BatchMeansWhereStepsDriftTogether) {
  const std::vector<double> flat = independent_steps(200, 7);
  double df = 0;
  const double iid = relative_noise(flat) / std::sqrt(200.0);
  EXPECT_NEAR(*drift_standard_error(flat, &df, true), iid, 1e-15);
  EXPECT_EQ(df, 199);
  EXPECT_GE(*drift_standard_error(flat, &df), iid);  // the larger of the two, whichever it is
  std::vector<double> halves = flat;
  for (size_t i = 0; i < 100; ++i) halves[i] *= 1.2;
  const double drifted = *drift_standard_error(halves, &df, true);
  EXPECT_EQ(df, 9);
  EXPECT_GT(drifted, 3 * relative_noise(halves) / std::sqrt(200.0));
  EXPECT_EQ(*drift_standard_error(halves, &df, false), drifted);
  // Under 20 steps: stddev / sqrt(n) on n - 1; under 2, nothing.
  const std::vector<double> few(flat.begin(), flat.begin() + 19);
  EXPECT_NEAR(*drift_standard_error(few, &df, true), relative_noise(few) / std::sqrt(19.0), 1e-15);
  EXPECT_EQ(df, 18);
  EXPECT_FALSE(drift_standard_error(std::vector<double>{1.0}).has_value());
}

// The quantile test's drift allowance: steps above the percentile that come in one run of consecutive steps
// (a slow stretch) vary from one tenth of the run to the next far more than independent ones would, so the
// difference that the exact test is sure of is not sure once each count varies as its tenths show. The same
// number of slow steps spread evenly (a stall every 25th step) keeps its significance.
TEST(QuantileTest, CountsAboveThatComeInARunAllowForDrift) {
  const std::vector<double> a = independent_steps(600, 11);
  std::vector<double> spread = independent_steps(600, 12), stretch = spread;
  for (size_t i = 0; i < 600; ++i) {
    if (i % 25 == 24) spread[i] *= 1.5;
    if (i >= 300 && i < 324) stretch[i] *= 1.5;
  }
  const QuantileTestResult even = quantile_test(a, spread, 99, 0.005);
  EXPECT_LT(even.p_longer, 1e-3);
  EXPECT_EQ(even.inflation_b, 1.0);
  EXPECT_LT(even.p_longer_drift, 0.005);
  const QuantileTestResult run = quantile_test(a, stretch, 99, 0.005);
  EXPECT_EQ(run.above_b, even.above_b);
  EXPECT_NEAR(run.p_longer, even.p_longer, 1e-12);  // the exact test sees only the counts
  EXPECT_GT(run.inflation_b, 5);
  EXPECT_GT(run.p_longer_drift, 0.005);
  EXPECT_GT(run.p_shorter_drift, 0.5);
}

}  // namespace
}  // namespace bsw
