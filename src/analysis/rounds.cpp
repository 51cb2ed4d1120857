// run --rounds: whether a point's rounds agree (see rounds_agreement in include/batchsweep/analysis.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/stats.hpp"

namespace bsw {

std::vector<std::span<const double>> round_slices(const Point& point) {
  const auto total = std::accumulate(point.rounds.begin(), point.rounds.end(), int64_t{0},
                                     [](int64_t sum, const PointRound& r) { return sum + r.steps; });
  const bool negative =
      std::any_of(point.rounds.begin(), point.rounds.end(), [](const PointRound& r) { return r.steps < 0; });
  if (point.rounds.empty() || negative || total != static_cast<int64_t>(point.samples_ms.size())) return {};
  std::vector<std::span<const double>> slices;
  size_t at = 0;
  for (const PointRound& r : point.rounds) {
    const auto steps = static_cast<size_t>(r.steps);
    slices.emplace_back(point.samples_ms.data() + at, steps);
    at += steps;
  }
  return slices;
}

namespace {

// The means of a point's rounds that have steps.
std::vector<double> round_means(const Point& point) {
  std::vector<double> means;
  for (const std::span<const double> slice : round_slices(point))
    if (!slice.empty())
      means.push_back(std::accumulate(slice.begin(), slice.end(), 0.0) / static_cast<double>(slice.size()));
  return means;
}

}  // namespace

std::optional<RoundNoise> round_noise(std::span<const Point* const> points) {
  double squares = 0, df = 0;
  for (const Point* p : points) {
    if (p == nullptr || p->status != PointStatus::ok) continue;
    const std::vector<double> means = round_means(*p);
    if (means.size() < 2) continue;
    const double mean = std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(means.size());
    if (!(mean > 0) || !std::isfinite(mean)) continue;
    for (const double m : means) squares += (m / mean - 1) * (m / mean - 1);
    df += static_cast<double>(means.size() - 1);
  }
  if (!(df > 0)) return std::nullopt;
  return RoundNoise{std::sqrt(squares / df), df};
}

std::optional<RoundNoise> round_noise(std::span<const Point> points) {
  std::vector<const Point*> pointers;
  pointers.reserve(points.size());
  for (const Point& p : points) pointers.push_back(&p);
  return round_noise(std::span<const Point* const>(pointers));
}

std::optional<MeanStepError> mean_step_error(const Point& point, const std::optional<RoundNoise>& rounds) {
  const std::vector<double>& samples = point.samples_ms;
  if (samples.size() < 2 ||
      !std::all_of(samples.begin(), samples.end(), [](double v) { return std::isfinite(v); }))
    return std::nullopt;
  double df = 0;
  const std::optional<double> se = drift_standard_error(samples, &df, !stopped_short(point.stop_reason));
  if (!se) return std::nullopt;
  const MeanStepError steps{*se, df, df < static_cast<double>(samples.size()) - 1};
  if (!rounds || !(rounds->df > 0)) return steps;
  const double measured = static_cast<double>(std::max<size_t>(1, round_means(point).size()));
  const double across_rounds = rounds->relative_sd / std::sqrt(measured);
  if (!(across_rounds > steps.se)) return steps;
  return MeanStepError{across_rounds, rounds->df, true};
}

std::optional<double> throughput_ci95_pct(const Point& point, const std::optional<RoundNoise>& rounds) {
  if (point.status != PointStatus::ok) return std::nullopt;
  const std::optional<MeanStepError> e = mean_step_error(point, rounds);
  if (!e || !(e->df > 0)) return std::nullopt;
  return student_t_critical(0.05, e->df) * e->se * 100;
}

std::optional<RoundsAgreement> rounds_agreement(const Point& point) {
  struct Slice {
    int number = 0;  // 1-based, among point.rounds
    std::span<const double> steps;
    double mean = 0;
  };
  std::vector<Slice> slices;
  const std::vector<std::span<const double>> rounds = round_slices(point);
  for (size_t i = 0; i < rounds.size(); ++i)
    if (!rounds[i].empty())
      slices.push_back(
          {static_cast<int>(i + 1), rounds[i],
           std::accumulate(rounds[i].begin(), rounds[i].end(), 0.0) / static_cast<double>(rounds[i].size())});
  if (slices.size() < 2) return std::nullopt;
  RoundsAgreement out;
  for (const Slice& s : slices) out.means_ms.push_back(s.mean);
  const auto [fast, slow] = std::minmax_element(
      slices.begin(), slices.end(), [](const Slice& a, const Slice& b) { return a.mean < b.mean; });
  out.fastest = fast->number;
  out.slowest = slow->number;
  if (!(fast->mean > 0) || !std::isfinite(slow->mean)) return out;
  out.spread_pct = (slow->mean - fast->mean) / fast->mean * 100.0;
  double df_slow = 0, df_fast = 0;
  const std::optional<double> se_slow = drift_standard_error(slow->steps, &df_slow, true);
  const std::optional<double> se_fast = drift_standard_error(fast->steps, &df_fast, true);
  if (se_slow && se_fast) {
    // drift_standard_error is relative: in ms, each round's own mean times it.
    const double v_slow = std::pow(*se_slow * slow->mean, 2), v_fast = std::pow(*se_fast * fast->mean, 2);
    const double diff = slow->mean - fast->mean;
    double p = 1;
    if (v_slow + v_fast <= 0) {
      p = diff > 0 ? 0.0 : 1.0;
    } else {
      const double t = diff / std::sqrt(v_slow + v_fast);
      const double df = std::pow(v_slow + v_fast, 2) / ((v_slow > 0 ? v_slow * v_slow / df_slow : 0) +
                                                        (v_fast > 0 ? v_fast * v_fast / df_fast : 0));
      p = student_t_two_sided_p(t, df);
    }
    const double pairs = static_cast<double>(slices.size() * (slices.size() - 1) / 2);
    out.p_value = std::min(1.0, p * pairs);
    out.disagree = *out.p_value < kRoundsAlpha && out.spread_pct >= kRoundSpreadPct;
  }
  return out;
}

}  // namespace bsw
