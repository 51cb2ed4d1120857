// Tests of the Mann-Whitney U test against scipy 1.17 (scipy.stats.mannwhitneyu, alternative="two-sided"),
// the Hodges-Lehmann shift against numpy's median of pairwise differences.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

TEST(MannWhitney, TiesUseTheCorrectedNormalApproximation) {
  // b holds ties (1.06, 1.29), so scipy's method="asymptotic" is the reference.
  const std::vector<double> a{1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
  const std::vector<double> b{0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
  const MannWhitneyResult r = mann_whitney_u(a, b);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 58.0);
  EXPECT_NEAR(r.p_value, 0.13291945818531892, 1e-12);
  EXPECT_NEAR(r.hodges_lehmann_shift, 0.56, 1e-12);
  EXPECT_NEAR(r.median_ratio, 1.5849056603773584, 1e-12);
  EXPECT_GT(r.z, 0.0);
  EXPECT_EQ(r.n_a, 9u);
  EXPECT_EQ(r.n_b, 9u);
}

TEST(MannWhitney, HeavyTies) {
  const std::vector<double> a{1, 2, 2, 3, 3, 3, 4, 5};
  const std::vector<double> b{3, 4, 4, 5, 5, 6, 6, 7, 7};
  const MannWhitneyResult r = mann_whitney_u(a, b);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 7.5);
  EXPECT_NEAR(r.p_value, 0.006340074742489072, 1e-12);
  EXPECT_DOUBLE_EQ(r.hodges_lehmann_shift, -2.0);
  EXPECT_NEAR(r.median_ratio, 0.6, 1e-12);
  EXPECT_LT(r.z, 0.0);
}

TEST(MannWhitney, SmallSamplesWithoutTiesAreExact) {
  const std::vector<double> a{10.2, 10.5, 10.1, 10.8, 10.3};
  const std::vector<double> b{11.0, 10.9, 11.4, 10.7, 11.2, 11.1};
  const MannWhitneyResult r = mann_whitney_u(a, b);
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 1.0);
  EXPECT_NEAR(r.p_value, 0.008658008658008658, 1e-14);  // method="exact"
  EXPECT_NEAR(r.hodges_lehmann_shift, -0.7, 1e-12);
  EXPECT_NEAR(r.median_ratio, 0.9321266968325792, 1e-12);
}

TEST(MannWhitney, ExactAtTheLargestExactSize) {
  const std::vector<double> a{5.76226, 3.80071, 5.07452, 5.57669, 4.81122, 5.68291, 4.93348,
                              5.66725, 6.43852, 4.32434, 5.20314, 4.53669, 5.12727, 3.81281,
                              4.4207,  4.8038,  5.89876, 6.14522, 3.67647, 4.20536};
  const std::vector<double> b{6.1469,  3.50758, 5.03683, 5.40271, 6.75701, 6.1894,  5.17279,
                              5.13142, 5.2498,  7.02353, 5.07198, 5.19632, 5.85259, 5.37923,
                              5.30272, 4.38593, 5.48848, 5.05642, 6.66613, 6.15309};
  const MannWhitneyResult r = mann_whitney_u(a, b);
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 130.0);
  EXPECT_NEAR(r.p_value, 0.05956383156170359, 1e-12);
  EXPECT_NEAR(r.hodges_lehmann_shift, -0.5131100000000002, 1e-12);
  EXPECT_NEAR(r.median_ratio, 0.9369075870978613, 1e-12);
}

TEST(MannWhitney, LargerSamplesUseTheNormalApproximation) {
  const std::vector<double> a{10.0012, 10.2987, 9.7259,  9.1094,  9.5453, 9.0084,  10.0601, 11.3402, 9.5078,
                              9.3795,  10.4898, 10.3569, 10.1054, 9.0695, 9.9707,  10.6953, 8.6558,  9.5424,
                              8.0988,  8.7105,  8.1583,  9.7649,  8.7326, 10.2713, 10.1568};
  const std::vector<double> b{10.4131, 8.0832,  10.0613, 10.5515, 10.7133, 9.0699,  10.1222, 9.6215,  9.7912,
                              11.6609, 9.7925,  10.5675, 11.4844, 10.0164, 10.4883, 10.7105, 10.6638, 9.3749,
                              10.6761, 11.9588, 9.0529,  11.4594, 10.7194, 9.9585,  12.6004};
  const MannWhitneyResult r = mann_whitney_u(a, b);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 166.0);
  EXPECT_NEAR(r.p_value, 0.004613992191848587, 1e-12);
  EXPECT_NEAR(r.hodges_lehmann_shift, -0.6872000000000007, 1e-12);
  EXPECT_NEAR(r.median_ratio, 0.9273094781804486, 1e-12);
}

TEST(MannWhitney, IdenticalSamplesAreNotDifferent) {
  const std::vector<double> same{2.0, 2.0, 2.0, 2.0};
  const MannWhitneyResult r = mann_whitney_u(same, same);
  EXPECT_EQ(r.z, 0.0);
  EXPECT_EQ(r.p_value, 1.0);
  EXPECT_EQ(r.hodges_lehmann_shift, 0.0);
  EXPECT_EQ(r.median_ratio, 1.0);
}

TEST(MannWhitney, RejectsEmptyAndNonFinite) {
  const std::vector<double> some{1.0, 2.0};
  const std::vector<double> with_inf{1.0, INFINITY};
  EXPECT_THROW((void)mann_whitney_u({}, some), std::invalid_argument);
  EXPECT_THROW((void)mann_whitney_u(some, {}), std::invalid_argument);
  EXPECT_THROW((void)mann_whitney_u(some, with_inf), std::invalid_argument);
}

}  // namespace
}  // namespace bsw
