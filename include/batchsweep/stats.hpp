// Statistics on step-time samples: summaries and percentiles, relative noise, the Mann-Whitney U test that
// `compare` uses to call a batch same / faster / slower, and the geometric mean of ratios.
// Pure functions on plain numbers; nothing here knows a backend or a report file.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "batchsweep/report.hpp"

namespace bsw {

// The q-th percentile (q in [0, 100]) with linear interpolation between closest ranks: numpy's default
// `np.percentile(x, q, method="linear")`. With the samples sorted as x[0..n-1], h = (n - 1) * q / 100 and the
// result is x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)]). Empty input gives 0.
// Throws std::invalid_argument when q is outside [0, 100] or a sample is not finite.
[[nodiscard]] double percentile(std::span<const double> samples, double q);
// percentile of samples already sorted ascending (non-empty; q not checked): no copy, no sort, for callers
// that take several percentiles of one large sample.
[[nodiscard]] double sorted_percentile(std::span<const double> sorted, double q);

// mean, median (= p50), sample standard deviation (n - 1 denominator; 0 for one sample), min, max and the
// p50/p90/p95/p99 percentiles (method as `percentile`). Empty input gives all zeros.
// Throws std::invalid_argument when a sample is not finite.
[[nodiscard]] StepStats summarize(std::span<const double> samples_ms);

// stddev / mean as a fraction (0.01 = 1%); 0 for fewer than two samples or a zero mean.
[[nodiscard]] double relative_noise(std::span<const double> samples);
[[nodiscard]] double relative_noise(const StepStats& stats);

// Two-sided Mann-Whitney U test of sample a against sample b: scipy.stats.mannwhitneyu's U, tie correction
// and continuity correction, but its exact p where both samples hold at most kMannWhitneyExactMaxN and there
// are no ties (scipy's `auto` is exact where either holds at most 8).
struct MannWhitneyResult {
  double u = 0;  // U of sample a: R_a - n_a (n_a + 1) / 2, ranks averaged over ties (scipy's `statistic`)
  double z = 0;  // (U - n_a n_b / 2) / sigma, continuity-corrected towards 0; > 0 when a tends to be larger
  double p_value = 1;  // two-sided
  // p comes from the exact null distribution (n_a, n_b <= 20 and no ties), else the normal approximation.
  bool exact = false;
  // Hodges-Lehmann estimate of the shift a - b: the median of all n_a * n_b pairwise differences a_i - b_j.
  double hodges_lehmann_shift = 0;
  double median_ratio = 0;  // median(a) / median(b); 0 when median(b) is 0
  std::size_t n_a = 0, n_b = 0;
};

// Largest sample size for which the exact null distribution is used (when there are no ties).
inline constexpr std::size_t kMannWhitneyExactMaxN = 20;

// The test: tie-corrected variance, normal approximation with continuity correction, and the exact
// distribution for n_a, n_b <= kMannWhitneyExactMaxN without ties. When every value is equal, z = 0 and
// p = 1. Throws std::invalid_argument when either sample is empty or holds a non-finite value.
[[nodiscard]] MannWhitneyResult mann_whitney_u(std::span<const double> a, std::span<const double> b);

// Welch's t-test of the difference of two means (unequal variances, Welch-Satterthwaite degrees of freedom),
// p from Student's t distribution. t > 0 when a's mean is larger. Both samples need 2 values or more; when
// both have no spread, t is 0 (equal means: p = 1) or infinite (p = 0). Throws std::invalid_argument for
// fewer than 2 values or a non-finite one.
struct WelchResult {
  double t = 0;
  double df = 0;
  double p_value = 1;  // two-sided
};
[[nodiscard]] WelchResult welch_t_test(std::span<const double> a, std::span<const double> b);

// Student's two-sample t-test with the variances pooled (na + nb - 2 degrees of freedom), for samples that
// share their spread (one command's runs on one machine). t > 0 when a's mean is larger; both without spread,
// t is 0 (equal means: p = 1) or infinite (p = 0). Throws std::invalid_argument for fewer than 2 values on
// a side or a non-finite one.
using StudentResult = WelchResult;
[[nodiscard]] StudentResult student_t_test(std::span<const double> a, std::span<const double> b);

// P(|T| >= |t|) for Student's t with df > 0 degrees of freedom: the regularized incomplete beta
// I_{df/(df+t^2)}(df/2, 1/2), by its continued fraction.
[[nodiscard]] double student_t_two_sided_p(double t, double df);

// Student's t quantile: the t > 0 whose two-sided p on df > 0 degrees of freedom is alpha (2.88 at alpha 0.01
// on 18), by bisection on student_t_two_sided_p.
[[nodiscard]] double student_t_critical(double alpha, double df);

// How well the mean of a run of step times is known, relative (0.01 = 1%), allowing for drift: the larger of
// stddev / mean / sqrt(n) and, from 2 * kDriftBatches samples up, the batch-means estimate, which splits the
// samples in order into kDriftBatches runs of consecutive ones and takes the spread of their means over
// sqrt(kDriftBatches) (a slow stretch moves one batch mean, where stddev / sqrt(n) would count each of its
// steps as independent evidence). Independent steps give about the same from both. nullopt under 2 samples
// or with a non-finite one. `degrees` gets the estimate's degrees of freedom: n - 1, or kDriftBatches - 1
// where the batch means are used. `significant_only`: the batch means only where they show drift, their
// variance beyond independent steps' by more than noise would put it one time in 4 (kChiSquare9At75: the
// ratio times kDriftBatches - 1 is about chi-square on kDriftBatches - 1 degrees of freedom), so independent
// steps keep most of the tests' power while steps that drift together are still caught (at 95%, a fifth
// of AR(1) phi 0.5 points went uncaught, and 1.75% of 10-batch A/A gates failed on them).
inline constexpr std::size_t kDriftBatches = 10;
inline constexpr double kChiSquare9At75 = 11.389;  // chi-square's 75th percentile on kDriftBatches - 1
inline constexpr double kChiSquare9At95 = 16.919;  // and its 95th
[[nodiscard]] std::optional<double> drift_standard_error(std::span<const double> samples,
                                                         double* degrees = nullptr,
                                                         bool significant_only = false);

// Whether b's q-th percentile lies above (or below) a's: the quantile test, Mood's median test carried to
// any percentile. The threshold is the pooled samples' q-th percentile (`percentile`); under the null (one
// distribution) the count of b's samples above it is hypergeometric: N = n_a + n_b draws, K of them above,
// n_b taken. p_longer = P(X >= above_b), p_shorter = P(X <= above_b), exactly (Fisher's exact test on the
// 2x2 table). "Above" is strictly above, or at or above where no step is strictly above (the slowest steps
// tie at the threshold): either rule is a function of the pooled steps, so the test stays exact.
// Distribution-free, so a heavy tail (a stall, a preemption) moves it as it moves the percentile and no more.
// `longer_resolvable` (`shorter_resolvable`): the most extreme split that way (every step above the
// threshold in b, or as few as fit) reaches p < alpha_side; where it does not, the steps are too few for this
// percentile that way (a p99 needs several hundred in the run that shows the longer tail) and no verdict can
// come from them. Throws std::invalid_argument for an empty sample, a non-finite value or q outside (0, 100).
struct QuantileTestResult {
  double threshold = 0;       // the pooled q-th percentile
  bool ties_counted = false;  // steps at the threshold counted as above (none was strictly above)
  std::size_t above_a = 0, above_b = 0;
  double p_longer = 1;   // one-sided: b's percentile above a's
  double p_shorter = 1;  // one-sided: b's percentile below a's
  bool longer_resolvable = false;
  bool shorter_resolvable = false;
  // Allowing for steps that drift together, which the exact test takes as independent: each run's count
  // above varies inflation_x times as much as independent steps' would (the counts in kDriftBatches runs of
  // consecutive steps, against p (1 - p) per step, p the run's own fraction above; at least 1, and 1 under
  // 2 * kDriftBatches steps), and the one-sided normal p's of the fractions above differing that way (the
  // pooled fraction's variance, each run's inflated so). 1 where no step or every step is above.
  double inflation_a = 1, inflation_b = 1;
  double p_longer_drift = 1, p_shorter_drift = 1;
};
[[nodiscard]] QuantileTestResult quantile_test(std::span<const double> a, std::span<const double> b, double q,
                                               double alpha_side);

// Holm's step-down adjustment of p-values for a family of tests (R's p.adjust(p, "holm")): with the p's
// sorted ascending p(1) <= ... <= p(m), the adjusted p(i) = max over j <= i of min(1, (m - j + 1) * p(j)),
// returned in the input's order. Rejecting where the adjusted p is below alpha holds the chance that noise
// rejects any of the m to alpha, whatever the tests' dependence. Throws std::invalid_argument for a p outside
// [0, 1].
[[nodiscard]] std::vector<double> holm_adjust(std::span<const double> p_values);

// exp(mean(log r)) of ratios (e.g. candidate / baseline throughput per batch); nullopt for no ratios.
// Throws std::invalid_argument naming the index of a ratio that is not finite and > 0.
[[nodiscard]] std::optional<double> geometric_mean(std::span<const double> ratios);

}  // namespace bsw
