// Summaries of step-time samples: numpy-compatible linear percentiles, sample standard deviation, relative
// noise and the geometric mean of ratios.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

// The q-th percentile of already sorted, non-empty samples.
double sorted_percentile(const std::vector<double>& sorted, double q) {
  const double h = static_cast<double>(sorted.size() - 1) * q / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return lerp(sorted[lo], sorted[lo + 1], h - static_cast<double>(lo));
}

void require_quantile(double q) {
  if (!(q >= 0.0 && q <= 100.0))
    throw std::invalid_argument(fmt::format("percentile: q must be in [0, 100], got {}", q));
}

}  // namespace

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
