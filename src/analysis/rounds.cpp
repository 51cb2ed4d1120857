// run --rounds: whether a point's rounds agree (see rounds_agreement in include/batchsweep/analysis.hpp).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
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

size_t rounds_with_steps(const Point& point) {
  const std::vector<std::span<const double>> slices = round_slices(point);
  return static_cast<size_t>(
      std::count_if(slices.begin(), slices.end(), [](std::span<const double> v) { return !v.empty(); }));
}

namespace {

// A point's rounds in order: each one's mean step, and its mean's relative variance from its own steps (0
// where it has one step); nullopt for a round without steps.
struct RoundMean {
  double mean = 0;
  double own_var = 0;
};
std::vector<std::optional<RoundMean>> round_means(const Point& point) {
  std::vector<std::optional<RoundMean>> out;
  for (const std::span<const double> slice : round_slices(point)) {
    if (slice.empty()) {
      out.emplace_back();
      continue;
    }
    const double mean = std::accumulate(slice.begin(), slice.end(), 0.0) / static_cast<double>(slice.size());
    if (!(mean > 0) || !std::isfinite(mean)) {
      out.emplace_back();
      continue;
    }
    double df = 0;
    const std::optional<double> se =
        slice.size() >= 2 ? drift_standard_error(slice, &df, true) : std::nullopt;
    out.push_back(RoundMean{mean, se ? *se * *se : 0.0});
  }
  return out;
}

size_t measured_rounds(const std::vector<std::optional<RoundMean>>& rounds) {
  return static_cast<size_t>(
      std::count_if(rounds.begin(), rounds.end(), [](const auto& r) { return r.has_value(); }));
}

// Welch-Satterthwaite over (variance, degrees of freedom) parts; parts of no variance add nothing.
double satterthwaite(std::initializer_list<std::pair<double, double>> parts) {
  double total = 0, spread = 0;
  for (const auto& [v, df] : parts) {
    if (!(v > 0)) continue;
    total += v;
    spread += df > 0 ? v * v / df : std::numeric_limits<double>::infinity();
  }
  return spread > 0 ? total * total / spread : 0.0;
}

}  // namespace

std::optional<RoundNoise> round_noise(std::span<const Point* const> points) {
  // Each point's offsets (round mean over the point's mean of round means, less 1), by round index.
  struct Offsets {
    std::vector<std::optional<double>> by_round;
    size_t measured = 0;
  };
  std::vector<Offsets> offsets;
  double own_sum = 0;
  size_t own_count = 0;
  size_t most_rounds = 0;
  for (const Point* p : points) {
    if (p == nullptr || p->status != PointStatus::ok) continue;
    const std::vector<std::optional<RoundMean>> rounds = round_means(*p);
    const size_t measured = measured_rounds(rounds);
    if (measured < 2) continue;
    double mean = 0;
    for (const auto& r : rounds)
      if (r) mean += r->mean / static_cast<double>(measured);
    Offsets& o = offsets.emplace_back();
    o.measured = measured;
    for (const auto& r : rounds) {
      o.by_round.push_back(r ? std::optional<double>(r->mean / mean - 1) : std::nullopt);
      if (r) {
        own_sum += r->own_var;
        ++own_count;
      }
    }
    most_rounds = std::max(most_rounds, rounds.size());
  }
  if (offsets.empty()) return std::nullopt;
  const double steps_var = own_sum / static_cast<double>(own_count);  // a round mean's, from its steps
  // The offset each round shares, over the points that have it.
  std::vector<std::optional<double>> common(most_rounds);
  double points_a_round = 0;
  for (size_t r = 0; r < most_rounds; ++r) {
    double sum = 0;
    size_t n = 0;
    for (const Offsets& o : offsets)
      if (r < o.by_round.size() && o.by_round[r]) {
        sum += *o.by_round[r];
        ++n;
      }
    if (n > 0) {
      common[r] = sum / static_cast<double>(n);
      points_a_round += static_cast<double>(n);
    }
  }
  const auto common_rounds = static_cast<size_t>(
      std::count_if(common.begin(), common.end(), [](const auto& c) { return c.has_value(); }));
  points_a_round /= static_cast<double>(common_rounds);
  double common_mean = 0;
  for (const auto& c : common)
    if (c) common_mean += *c / static_cast<double>(common_rounds);
  double common_ss = 0;
  for (const auto& c : common)
    if (c) common_ss += (*c - common_mean) * (*c - common_mean);
  double own_ss = 0, own_df = 0;
  for (const Offsets& o : offsets) {
    for (size_t r = 0; r < o.by_round.size(); ++r)
      if (o.by_round[r]) own_ss += (*o.by_round[r] - *common[r]) * (*o.by_round[r] - *common[r]);
    own_df += static_cast<double>(o.measured - 1);
  }
  RoundNoise noise;
  noise.common_df = static_cast<double>(common_rounds) - 1;
  noise.own_df = std::max(0.0, own_df - noise.common_df);
  if (noise.own_df > 0) noise.own_var = std::max(0.0, own_ss / noise.own_df - steps_var);
  // The rounds' mean offsets carry each point's own spread and steps' noise over the points averaged.
  if (noise.common_df > 0)
    noise.common_var =
        std::max(0.0, common_ss / noise.common_df - (noise.own_var + steps_var) / points_a_round);
  return noise;
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
  if (!rounds) return steps;
  const std::vector<std::optional<RoundMean>> means = round_means(point);
  const size_t measured = measured_rounds(means);
  // A point measured once (no rounds, or its later rounds failed): its steps' own variance stands for that
  // round's.
  double steps_var = *se * *se;
  if (measured >= 1) {
    steps_var = 0;
    for (const auto& m : means)
      if (m) steps_var += m->own_var / static_cast<double>(measured);
  }
  const double r = static_cast<double>(std::max<size_t>(1, measured));
  const double variance = (rounds->common_var + rounds->own_var + steps_var) / r;
  if (!(variance > steps.se * steps.se)) return steps;
  const double steps_df = std::max(1.0, static_cast<double>(samples.size()) - r);
  return MeanStepError{std::sqrt(variance),
                       satterthwaite({{rounds->common_var / r, rounds->common_df},
                                      {rounds->own_var / r, rounds->own_df},
                                      {steps_var / r, steps_df}}),
                       true};
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
