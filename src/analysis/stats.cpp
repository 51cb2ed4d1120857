// Summaries of step-time samples: numpy-compatible linear percentiles, sample standard deviation, relative
// noise and the geometric mean of ratios.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

void require_finite(std::span<const double> samples, std::string_view what) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i]))
      throw std::invalid_argument(fmt::format("{}: sample {} is not finite ({})", what, i, samples[i]));
  }
}

// numpy's lerp: exact at both ends, and the same rounding as np.percentile(method="linear").
double lerp(double a, double b, double t) {
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

void require_quantile(double q) {
  if (!(q >= 0.0 && q <= 100.0))
    throw std::invalid_argument(fmt::format("percentile: q must be in [0, 100], got {}", q));
}

}  // namespace

double sorted_percentile(std::span<const double> sorted, double q) {
  const double h = static_cast<double>(sorted.size() - 1) * q / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return lerp(sorted[lo], sorted[lo + 1], h - static_cast<double>(lo));
}

double percentile(std::span<const double> samples, double q) {
  require_quantile(q);
  require_finite(samples, "percentile");
  if (samples.empty()) return 0.0;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_percentile(sorted, q);
}

StepStats summarize(std::span<const double> samples_ms) {
  require_finite(samples_ms, "summarize");
  StepStats stats;
  if (samples_ms.empty()) return stats;
  std::vector<double> sorted(samples_ms.begin(), samples_ms.end());
  std::sort(sorted.begin(), sorted.end());
  const auto n = static_cast<double>(sorted.size());
  stats.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / n;
  if (sorted.size() > 1) {
    double sum_sq = 0.0;
    for (double v : sorted) sum_sq += (v - stats.mean) * (v - stats.mean);
    stats.stddev = std::sqrt(sum_sq / (n - 1.0));
  }
  stats.min = sorted.front();
  stats.max = sorted.back();
  stats.p50 = sorted_percentile(sorted, 50.0);
  stats.p90 = sorted_percentile(sorted, 90.0);
  stats.p95 = sorted_percentile(sorted, 95.0);
  stats.p99 = sorted_percentile(sorted, 99.0);
  stats.median = stats.p50;
  return stats;
}

double relative_noise(const StepStats& stats) {
  return stats.mean > 0.0 ? stats.stddev / stats.mean : 0.0;
}

double relative_noise(std::span<const double> samples) {
  if (samples.size() < 2) return 0.0;
  return relative_noise(summarize(samples));
}

namespace {

// The continued fraction of the regularized incomplete beta I_x(a, b) (modified Lentz), valid for
// x < (a + 1) / (a + b + 2); the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) elsewhere.
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::fabs(d) < kTiny ? kTiny : d);
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    d = 1.0 / (std::fabs(d) < kTiny ? kTiny : d);
    c = std::fabs(c) < kTiny ? kTiny : c;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    d = 1.0 / (std::fabs(d) < kTiny ? kTiny : d);
    c = std::fabs(c) < kTiny ? kTiny : c;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1.0) < 1e-15) break;
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

}  // namespace

double student_t_two_sided_p(double t, double df) {
  if (!(df > 0.0) || std::isnan(t))
    throw std::invalid_argument(fmt::format("student_t_two_sided_p: t {} with {} degrees of freedom", t, df));
  if (std::isinf(t)) return 0.0;
  return std::clamp(incomplete_beta(df / 2.0, 0.5, df / (df + t * t)), 0.0, 1.0);
}

double student_t_critical(double alpha, double df) {
  if (!(alpha > 0.0 && alpha < 1.0) || !(df > 0.0))
    throw std::invalid_argument(
        fmt::format("student_t_critical: alpha {} with {} degrees of freedom", alpha, df));
  double lo = 0.0, hi = 1e6;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = (lo + hi) / 2.0;
    (student_t_two_sided_p(mid, df) > alpha ? lo : hi) = mid;
  }
  return hi;
}

std::optional<double> drift_standard_error(std::span<const double> samples, double* degrees,
                                           bool significant_only) {
  if (samples.size() < 2 ||
      !std::all_of(samples.begin(), samples.end(), [](double v) { return std::isfinite(v); }))
    return std::nullopt;
  const double n = static_cast<double>(samples.size());
  const double independent = relative_noise(samples) / std::sqrt(n);
  if (degrees) *degrees = n - 1.0;
  if (samples.size() < 2 * kDriftBatches) return independent;
  const std::size_t per_batch = samples.size() / kDriftBatches;
  std::vector<double> means;
  for (std::size_t b = 0; b < kDriftBatches; ++b) {
    double sum = 0;
    for (std::size_t i = b * per_batch; i < (b + 1) * per_batch; ++i) sum += samples[i];
    means.push_back(sum / static_cast<double>(per_batch));
  }
  const double batches = relative_noise(means) / std::sqrt(static_cast<double>(kDriftBatches));
  if (batches <= independent) return independent;
  if (significant_only &&
      (batches * batches) / (independent * independent) * static_cast<double>(kDriftBatches - 1) <=
          kChiSquare9At75)
    return independent;
  if (degrees) *degrees = static_cast<double>(kDriftBatches - 1);
  return batches;
}

namespace {

// The two samples a t-test reads, checked (finite, 2 values a side) and summarized; `test` names the test in
// the errors.
struct TwoSamples {
  StepStats a, b;
  double na = 0, nb = 0;
};

TwoSamples two_samples(std::span<const double> a, std::span<const double> b, std::string_view test) {
  require_finite(a, fmt::format("{}: sample a", test));
  require_finite(b, fmt::format("{}: sample b", test));
  if (a.size() < 2 || b.size() < 2)
    throw std::invalid_argument(
        fmt::format("{}: needs 2 values a side, got {} and {}", test, a.size(), b.size()));
  return {summarize(a), summarize(b), static_cast<double>(a.size()), static_cast<double>(b.size())};
}

// t = diff / se on df degrees of freedom, with its two-sided p. Without spread (se 0) t is 0 for equal means
// (p 1), else infinite (p 0).
WelchResult t_result(double diff, double se, double df) {
  WelchResult r;
  r.df = df;
  if (se <= 0.0) {
    r.t = diff == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), diff);
    r.p_value = diff == 0.0 ? 1.0 : 0.0;
    return r;
  }
  r.t = diff / se;
  r.p_value = student_t_two_sided_p(r.t, r.df);
  return r;
}

}  // namespace

WelchResult welch_t_test(std::span<const double> a, std::span<const double> b) {
  const TwoSamples s = two_samples(a, b, "welch_t_test");
  const double va = s.a.stddev * s.a.stddev / s.na, vb = s.b.stddev * s.b.stddev / s.nb;
  // Without spread the Welch-Satterthwaite degrees of freedom are 0/0: the pooled count stands in.
  const double df = va + vb == 0.0
                        ? s.na + s.nb - 2.0
                        : (va + vb) * (va + vb) / (va * va / (s.na - 1.0) + vb * vb / (s.nb - 1.0));
  return t_result(s.a.mean - s.b.mean, std::sqrt(va + vb), df);
}

StudentResult student_t_test(std::span<const double> a, std::span<const double> b) {
  const TwoSamples s = two_samples(a, b, "student_t_test");
  const double df = s.na + s.nb - 2.0;
  const double pooled =
      ((s.na - 1.0) * s.a.stddev * s.a.stddev + (s.nb - 1.0) * s.b.stddev * s.b.stddev) / df;
  return t_result(s.a.mean - s.b.mean, std::sqrt(pooled * (1.0 / s.na + 1.0 / s.nb)), df);
}

std::vector<double> holm_adjust(std::span<const double> p_values) {
  std::vector<std::size_t> order(p_values.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (!(p_values[i] >= 0.0 && p_values[i] <= 1.0))
      throw std::invalid_argument(
          fmt::format("holm_adjust: p-value {} is {}, must be in [0, 1]", i, p_values[i]));
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return p_values[x] < p_values[y]; });
  std::vector<double> adjusted(p_values.size());
  const double m = static_cast<double>(p_values.size());
  double running = 0.0;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    running = std::max(running, std::min(1.0, (m - static_cast<double>(rank)) * p_values[order[rank]]));
    adjusted[order[rank]] = running;
  }
  return adjusted;
}

std::optional<double> geometric_mean(std::span<const double> ratios) {
  if (ratios.empty()) return std::nullopt;
  double log_sum = 0.0;
  for (std::size_t i = 0; i < ratios.size(); ++i) {
    if (!std::isfinite(ratios[i]) || ratios[i] <= 0.0)
      throw std::invalid_argument(
          fmt::format("geometric_mean: ratio {} is {}, must be finite and > 0", i, ratios[i]));
    log_sum += std::log(ratios[i]);
  }
  return std::exp(log_sum / static_cast<double>(ratios.size()));
}

}  // namespace bsw
