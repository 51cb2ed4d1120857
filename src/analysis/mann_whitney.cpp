// The two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu conventions), the Hodges-Lehmann shift, and the
// same / faster / slower call that `compare` makes per batch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

void require_sample(std::span<const double> samples, std::string_view name) {
  if (samples.empty()) throw std::invalid_argument(fmt::format("mann_whitney_u: sample {} is empty", name));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i]))
      throw std::invalid_argument(
          fmt::format("mann_whitney_u: sample {} value {} is not finite ({})", name, i, samples[i]));
  }
}

struct RankSums {
  double rank_sum_a = 0;  // ranks 1..n, averaged over ties
  double tie_term = 0;    // sum over tie groups of t^3 - t
  bool has_ties = false;
};

RankSums rank_sums(std::span<const double> a, std::span<const double> b) {
  std::vector<std::pair<double, bool>> pooled;  // (value, from a)
  pooled.reserve(a.size() + b.size());
  for (double v : a) pooled.emplace_back(v, true);
  for (double v : b) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
  RankSums sums;
  std::size_t i = 0;
  while (i < pooled.size()) {
    std::size_t j = i + 1;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double tied = static_cast<double>(j - i);
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k) {
      if (pooled[k].second) sums.rank_sum_a += mean_rank;
    }
    if (j - i > 1) {
      sums.tie_term += tied * tied * tied - tied;
      sums.has_ties = true;
    }
    i = j;
  }
  return sums;
}

// Number of arrangements giving each U = 0..m*n under the null, for samples of m and n without ties: the
// coefficients of the Gaussian binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i).
// Every coefficient is an integer below C(40, 20) < 2^53, so doubles hold them exactly.
std::vector<double> exact_u_counts(std::size_t m, std::size_t n) {
  std::vector<double> coeff(m * n + 1, 0.0);
  coeff[0] = 1.0;
  for (std::size_t i = 1; i <= m; ++i) {
    for (std::size_t u = coeff.size(); u-- > n + i;) coeff[u] -= coeff[u - (n + i)];
    for (std::size_t u = i; u < coeff.size(); ++u) coeff[u] += coeff[u - i];
  }
  return coeff;
}

double exact_two_sided_p(double u, std::size_t m, std::size_t n) {
  const std::vector<double> counts = exact_u_counts(m, n);
  const auto u_index = static_cast<std::size_t>(std::llround(u));
  double total = 0, at_most = 0, at_least = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    total += counts[k];
    if (k <= u_index) at_most += counts[k];
    if (k >= u_index) at_least += counts[k];
  }
  return std::min(1.0, 2.0 * std::min(at_most, at_least) / total);
}

// Number of pairs with a_i - b_j <= t, for ascending a and b: O(n_a + n_b) with one moving index, comparing
// the rounded differences themselves so the count is exact for every t.
std::size_t count_differences_at_most(const std::vector<double>& a, const std::vector<double>& b, double t) {
  std::size_t count = 0, first = 0;
  for (double ai : a) {
    while (first < b.size() && ai - b[first] > t) ++first;
    count += b.size() - first;
  }
  return count;
}

// The k-th smallest (1-based) pairwise difference a_i - b_j, by bisection on the value until the bracket is
// two adjacent doubles; exact because every difference is itself a double. O((n_a + n_b) log) time, O(1)
// memory.
double kth_difference(const std::vector<double>& a, const std::vector<double>& b, std::size_t k) {
  double lo = a.front() - b.back();
  if (count_differences_at_most(a, b, lo) >= k) return lo;
  double hi = a.back() - b.front();
  for (int iteration = 0; iteration < 4096; ++iteration) {
    const double mid = lo + (hi - lo) / 2.0;
    if (mid <= lo || mid >= hi) break;
    if (count_differences_at_most(a, b, mid) >= k) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

double hodges_lehmann(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  const std::size_t pairs = a.size() * b.size();
  if (pairs % 2 == 1) return kth_difference(a, b, pairs / 2 + 1);
  return (kth_difference(a, b, pairs / 2) + kth_difference(a, b, pairs / 2 + 1)) / 2.0;
}

}  // namespace

MannWhitneyResult mann_whitney_u(std::span<const double> a, std::span<const double> b) {
  require_sample(a, "a");
  require_sample(b, "b");
  MannWhitneyResult result;
  result.n_a = a.size();
  result.n_b = b.size();
  const auto n_a = static_cast<double>(a.size());
  const auto n_b = static_cast<double>(b.size());
  const double n = n_a + n_b;

  const RankSums sums = rank_sums(a, b);
  result.u = sums.rank_sum_a - n_a * (n_a + 1.0) / 2.0;
  const double mean_u = n_a * n_b / 2.0;
  const double variance = n_a * n_b / 12.0 * ((n + 1.0) - sums.tie_term / (n * (n - 1.0)));
  const double distance = std::abs(result.u - mean_u) - 0.5;  // continuity correction
  if (variance > 0.0 && distance > 0.0) {
    result.z = std::copysign(distance / std::sqrt(variance), result.u - mean_u);
    result.p_value = std::min(1.0, std::erfc(std::abs(result.z) / std::sqrt(2.0)));
  }
  if (!sums.has_ties && a.size() <= kMannWhitneyExactMaxN && b.size() <= kMannWhitneyExactMaxN) {
    result.exact = true;
    result.p_value = exact_two_sided_p(result.u, a.size(), b.size());
  }

  result.hodges_lehmann_shift =
      hodges_lehmann(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()));
  const double median_b = percentile(b, 50.0);
  result.median_ratio = median_b != 0.0 ? percentile(a, 50.0) / median_b : 0.0;
  return result;
}

}  // namespace bsw
