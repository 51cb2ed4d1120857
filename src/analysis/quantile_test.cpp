// The quantile test (Mood's median test at any percentile) by Fisher's exact test on the counts above the
// pooled percentile: see stats.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <vector>

#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

double log_choose(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// P(X = x) for X hypergeometric: `drawn` of `total`, `marked` of which are marked.
double hypergeometric_pmf(std::size_t x, std::size_t total, std::size_t marked, std::size_t drawn) {
  if (x > marked || x > drawn || drawn - x > total - marked) return 0.0;
  const auto d = [](std::size_t v) { return static_cast<double>(v); };
  return std::exp(log_choose(d(marked), d(x)) + log_choose(d(total - marked), d(drawn - x)) -
                  log_choose(d(total), d(drawn)));
}

// P(X >= x) and P(X <= x), summed over the shorter side of the support and clamped to [0, 1].
double upper_tail(std::size_t x, std::size_t total, std::size_t marked, std::size_t drawn) {
  const std::size_t top = std::min(marked, drawn);
  double p = 0;
  for (std::size_t k = x; k <= top; ++k) p += hypergeometric_pmf(k, total, marked, drawn);
  return std::clamp(p, 0.0, 1.0);
}

double lower_tail(std::size_t x, std::size_t total, std::size_t marked, std::size_t drawn) {
  const std::size_t bottom = drawn > total - marked ? drawn - (total - marked) : 0;
  double p = 0;
  for (std::size_t k = bottom; k <= x; ++k) p += hypergeometric_pmf(k, total, marked, drawn);
  return std::clamp(p, 0.0, 1.0);
}

void check(std::span<const double> samples, const char* which) {
  if (samples.empty()) throw std::invalid_argument(fmt::format("quantile_test: sample {} is empty", which));
  for (double v : samples)
    if (!std::isfinite(v))
      throw std::invalid_argument(fmt::format("quantile_test: sample {} holds a non-finite value", which));
}

// How much more the count above the threshold varies than independent steps' would: the variance of the
// counts in kDriftBatches runs of consecutive steps over per_run * p * (1 - p), p the steps' own fraction
// above (a run with more steps above has a count that varies more, drift or not). At least 1; 1 under
// 2 * kDriftBatches steps, or where no step or every step is above.
double count_inflation(std::span<const double> s, const auto& is_above) {
  const double p =
      static_cast<double>(std::count_if(s.begin(), s.end(), is_above)) / static_cast<double>(s.size());
  if (s.size() < 2 * kDriftBatches || !(p > 0 && p < 1)) return 1.0;
  const std::size_t per_run = s.size() / kDriftBatches;
  std::vector<double> counts;
  for (std::size_t k = 0; k < kDriftBatches; ++k)
    counts.push_back(static_cast<double>(
        std::count_if(s.begin() + static_cast<std::ptrdiff_t>(k * per_run),
                      s.begin() + static_cast<std::ptrdiff_t>((k + 1) * per_run), is_above)));
  double mean = 0;
  for (double c : counts) mean += c / static_cast<double>(counts.size());
  double squares = 0;
  for (double c : counts) squares += (c - mean) * (c - mean);
  const double observed = squares / static_cast<double>(counts.size() - 1);
  const double ratio = observed / (static_cast<double>(per_run) * p * (1 - p));
  // Independent steps' counts vary about as the binomial says, and the estimate from 10 counts is noisy:
  // (k - 1) * ratio is about chi-square on k - 1 = 9 degrees of freedom, above 16.92 one time in 20. Only a
  // ratio beyond that is taken for drift, so independent steps keep the exact test's power.
  return ratio * static_cast<double>(kDriftBatches - 1) > kChiSquare9At95 ? ratio : 1.0;
}

}  // namespace

QuantileTestResult quantile_test(std::span<const double> a, std::span<const double> b, double q,
                                 double alpha_side) {
  check(a, "a");
  check(b, "b");
  if (!(q > 0 && q < 100)) throw std::invalid_argument(fmt::format("quantile_test: q {} not in (0, 100)", q));
  std::vector<double> pooled(a.begin(), a.end());
  pooled.insert(pooled.end(), b.begin(), b.end());
  QuantileTestResult r;
  r.threshold = percentile(pooled, q);
  // Strictly above; where the slowest steps tie at the threshold (a coarse timer, a deterministic step with
  // stalls of one length) none is, and the tied steps count. Either rule depends on the pooled steps alone,
  // so the counts stay hypergeometric under the null.
  const double top = *std::max_element(pooled.begin(), pooled.end());
  r.ties_counted = !(top > r.threshold);
  const auto is_above = [&](double v) { return r.ties_counted ? v >= r.threshold : v > r.threshold; };
  const auto above = [&](std::span<const double> s) {
    return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), is_above));
  };
  r.above_a = above(a);
  r.above_b = above(b);
  const std::size_t total = a.size() + b.size(), marked = r.above_a + r.above_b, drawn = b.size();
  r.p_longer = upper_tail(r.above_b, total, marked, drawn);
  r.p_shorter = lower_tail(r.above_b, total, marked, drawn);
  // The most extreme splits the margins allow: every marked step in b, or as few as fit.
  const std::size_t most = std::min(marked, drawn);
  const std::size_t least = drawn > total - marked ? drawn - (total - marked) : 0;
  r.longer_resolvable = upper_tail(most, total, marked, drawn) < alpha_side;
  r.shorter_resolvable = lower_tail(least, total, marked, drawn) < alpha_side;
  // The same difference with each run's count allowed to vary as its runs of consecutive steps show.
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double p = static_cast<double>(marked) / static_cast<double>(total);
  r.inflation_a = count_inflation(a, is_above);
  r.inflation_b = count_inflation(b, is_above);
  const double variance = p * (1 - p) * (r.inflation_a / na + r.inflation_b / nb);
  if (variance > 0) {
    const double z =
        (static_cast<double>(r.above_b) / nb - static_cast<double>(r.above_a) / na) / std::sqrt(variance);
    r.p_longer_drift = 0.5 * std::erfc(z / std::sqrt(2.0));
    r.p_shorter_drift = 0.5 * std::erfc(-z / std::sqrt(2.0));
  }
  return r;
}

}  // namespace bsw
