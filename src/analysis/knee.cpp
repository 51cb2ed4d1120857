// The knee of the throughput curve: Kneedle on log2(batch) vs log2(samples/s), the rules around it (too few
// points, flat curve, still scaling), and its confidence under each point's measured step-time noise.
// The rules are documented in include/batchsweep/analysis.hpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "analysis/curve.hpp"
#include "batchsweep/analysis.hpp"
#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

using analysis_detail::CurvePoint;
using analysis_detail::falling_text;
using analysis_detail::format_number;
using analysis_detail::format_percent;
using analysis_detail::KneeCall;

// Slack on "y_d at or below the threshold" and "above the diagonal", for values that are equal on paper.
constexpr double kKneedleTolerance = 1e-9;
// The share of Kneedle's threshold drop by which a difference may miss the threshold and still confirm a
// knee.
constexpr double kKneedleDropSlack = 0.01;

std::vector<double> normalized(std::span<const double> values) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double range = *hi - *lo;
  std::vector<double> out(values.size(), 0.0);
  if (range <= 0.0) return out;
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = (values[i] - *lo) / range;
  return out;
}

// Local maxima of y_d (>= both neighbours; an end compares with its one neighbour), in order.
std::vector<std::size_t> local_maxima(const std::vector<double>& y_d) {
  std::vector<std::size_t> maxima;
  for (std::size_t i = 0; i < y_d.size(); ++i) {
    const bool left = i == 0 || y_d[i] >= y_d[i - 1];
    const bool right = i + 1 == y_d.size() || y_d[i] >= y_d[i + 1];
    if (left && right) maxima.push_back(i);
  }
  return maxima;
}

void require_curve(std::span<const double> x, std::span<const double> y, double sensitivity) {
  if (x.size() != y.size())
    throw std::invalid_argument(fmt::format("kneedle: {} x values but {} y values", x.size(), y.size()));
  if (x.size() < 2) throw std::invalid_argument("kneedle: needs at least 2 points");
  if (!std::isfinite(sensitivity) || sensitivity <= 0.0)
    throw std::invalid_argument(fmt::format("kneedle: sensitivity must be > 0, got {}", sensitivity));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]))
      throw std::invalid_argument(fmt::format("kneedle: point {} is not finite ({}, {})", i, x[i], y[i]));
    if (i > 0 && !(x[i] > x[i - 1]))
      throw std::invalid_argument(fmt::format("kneedle: x is not strictly increasing at index {}", i));
  }
}

// The log2 gain the last step must beat to count as still scaling: kStillScalingGain per doubling of the
// batch, and never less than kStillScalingMinGain, since a measurement's noise does not shrink with the step
// (the last steps of a bisected fit edge are an eighth of a doubling or less).
double still_scaling_gain(double log2_step) {
  return std::max(std::log2(1.0 + kStillScalingGain) * log2_step, std::log2(1.0 + kStillScalingMinGain));
}

struct KneeOutcome {
  KneeCall call = KneeCall::no_bend;
  bool rising_at_end = false;
  std::size_t scaling_from = 0;            // with rising_at_end: the point the last one's gain is over
  std::optional<std::size_t> index;        // into the curve, when found
  std::optional<std::size_t> unconfirmed;  // Kneedle's unconfirmed candidate
  std::optional<std::size_t> early_bend;   // a Kneedle knee far below the best, on a curve still scaling
};

// The index of the largest batch at most half the last (the start of the curve's last doubling), or nullopt
// where every batch is above it.
std::optional<std::size_t> last_doubling_start(const std::vector<double>& log2_batch) {
  std::optional<std::size_t> half;
  for (std::size_t i = 0; i + 1 < log2_batch.size(); ++i)
    if (log2_batch[i] <= log2_batch.back() - 1.0) half = i;
  return half;
}

// Step 4's still-scaling test: the index of the point the largest batch's gain is measured over, or nullopt
// where the curve is not still scaling at its end. The last step, where it gains more than
// still_scaling_gain and the largest batch is the fastest. Or, on a sweep finer than doublings (64:8192:+64,
// whose last step of 0.8% in batch cannot gain the 1% floor however fast the curve still scales), the last
// doubling: from the largest batch at most half the last, a gain over still_scaling_gain of that span, with
// the fastest batch inside the doubling and the last within kStillScalingMinGain of it (noise between
// neighbours that close in batch decides which of them is the faster).
std::optional<std::size_t> still_scaling_from(const std::vector<double>& log2_batch,
                                              const std::vector<double>& log2_rate) {
  const std::size_t n = log2_rate.size();
  if (n < 2) return std::nullopt;
  const double best = *std::max_element(log2_rate.begin(), log2_rate.end());
  const std::size_t last = n - 1;
  if (log2_rate[last] >= best &&
      log2_rate[last] - log2_rate[last - 1] > still_scaling_gain(log2_batch[last] - log2_batch[last - 1]))
    return last - 1;
  const std::optional<std::size_t> half = last_doubling_start(log2_batch);
  if (!half || *half + 1 == last) return std::nullopt;  // the last step is a doubling or more: judged above
  const double window_best =
      *std::max_element(log2_rate.begin() + static_cast<std::ptrdiff_t>(*half) + 1, log2_rate.end());
  if (window_best < best || log2_rate[last] < best - std::log2(1.0 + kStillScalingMinGain))
    return std::nullopt;
  if (log2_rate[last] - log2_rate[*half] <= still_scaling_gain(log2_batch[last] - log2_batch[*half]))
    return std::nullopt;
  // And the last step keeps to the doubling's trend, within kStillScalingMinGain: a curve linear to 512 whose
  // bisected fit edge at 576 gains 0.6% (12.5% on the trend) flattened there, and is not still scaling.
  const std::size_t before = last - 1;
  const double trend = (log2_rate[before] - log2_rate[*half]) / (log2_batch[before] - log2_batch[*half]);
  const double expected = log2_rate[before] + trend * (log2_batch[last] - log2_batch[before]);
  if (log2_rate[last] < expected - std::log2(1.0 + kStillScalingMinGain)) return std::nullopt;
  return half;
}

// Steps 1-4 of analysis.hpp on a curve given as log2(batch) and log2(samples/s).
KneeOutcome call_knee(const std::vector<double>& log2_batch, const std::vector<double>& log2_rate,
                      double sensitivity) {
  KneeOutcome outcome;
  const std::size_t n = log2_rate.size();
  const double best = n == 0 ? 0.0 : *std::max_element(log2_rate.begin(), log2_rate.end());
  // Larger batches would be faster still.
  const std::optional<std::size_t> scaling_from = still_scaling_from(log2_batch, log2_rate);
  const bool rising_at_end = scaling_from.has_value();
  const bool flat = n > 0 && best <= log2_rate.front() + std::log2(1.0 + kFlatThroughputGain);
  outcome.rising_at_end = rising_at_end && !flat;
  outcome.scaling_from = scaling_from.value_or(0);
  if (n < kMinKneePoints) {
    // Too few for Kneedle, but a curve still rising at its end says so (and the recommendation advises
    // extending the sweep) however few its points, unless it is flat as a longer sweep would call it.
    outcome.call = rising_at_end && !flat ? KneeCall::still_scaling : KneeCall::too_few;
    return outcome;
  }
  if (flat) {
    outcome.call = KneeCall::flat;
    return outcome;
  }
  // What Kneedle sees. Up to the best throughput, a batch slower than a smaller one is a dip in a rising
  // curve (a slow kernel choice, a disturbed or timed-out measurement): it reads as the straight line between
  // the points around it, since flattened into a step it would read as a bend before the real one. Past the
  // best, the best (a larger batch that is slower is never the better choice: a plateau).
  const auto peak =
      static_cast<std::size_t>(std::max_element(log2_rate.begin(), log2_rate.end()) - log2_rate.begin());
  std::vector<double> ys(log2_rate);
  std::size_t last_kept = 0;  // the point before a dip: as fast as every smaller batch
  for (std::size_t i = 1; i <= peak; ++i) {
    if (log2_rate[i] < log2_rate[last_kept]) continue;
    const double slope = (log2_rate[i] - log2_rate[last_kept]) / (log2_batch[i] - log2_batch[last_kept]);
    for (std::size_t j = last_kept + 1; j < i; ++j)
      ys[j] = log2_rate[last_kept] + slope * (log2_batch[j] - log2_batch[last_kept]);
    last_kept = i;
  }
  for (std::size_t i = peak + 1; i < n; ++i) ys[i] = best;
  // A leading batch whose step took longer than a larger batch's (doubling the batch more than doubled the
  // throughput) was measured slow: a step does not get faster with more work. The first point has no smaller
  // one to bridge a dip from, and slow it would put the knee at the second. While the smallest batches' steps
  // took more than kSlowFirstStepExcess longer than a larger one's, they read as if they took its time:
  // linear scaling, the most a sound measurement shows (analysis.hpp says why only leading points).
  std::vector<double> envelope(ys);
  for (std::size_t i = peak; i-- > 0;)
    envelope[i] = std::max(ys[i], envelope[i + 1] - (log2_batch[i + 1] - log2_batch[i]));
  for (std::size_t i = 0; i < peak && envelope[i] - ys[i] > std::log2(1.0 + kSlowFirstStepExcess); ++i)
    ys[i] = envelope[i];
  const std::vector<double>& xs = log2_batch;
  const KneedleResult result = kneedle(xs, ys, sensitivity);
  outcome.unconfirmed = result.unconfirmed;
  // How fast the curve still rises at its end, in log2(samples/s) per doubling of the batch: over the last
  // doubling at least (from the largest batch at most half the last, else the smallest), so that a short
  // last step's noise (a bisected edge 1.6% above the batch before it) does not read as a steep rise.
  double end_slope = 0.0;
  if (rising_at_end) {
    const std::size_t from = std::min(last_doubling_start(log2_batch).value_or(0), *scaling_from);
    end_slope = (log2_rate[n - 1] - log2_rate[from]) / (log2_batch[n - 1] - log2_batch[from]);
  }
  if (result.knee && rising_at_end && !flat && end_slope > std::log2(1.0 + kStillScalingStrongGain) &&
      log2_rate[*result.knee] < best - std::log2(1.0 / kKneeLeastShareWhileScaling)) {
    // A bend on a curve still rising fast at its end, whose throughput more than doubles past it: not where
    // throughput stops scaling (a sweep that ends before the curve bends: Kneedle's normalisation stretches
    // its gentle curvature on log-log axes into a candidate). Still scaling, naming the bend. (A saturating
    // curve swept well past its bend gains a few % a doubling at its end, and keeps its knee.)
    outcome.call = KneeCall::still_scaling;
    outcome.early_bend = result.knee;
  } else if (result.knee) {
    outcome.call = KneeCall::found;
    outcome.index = result.knee;
  } else if (rising_at_end) {
    outcome.call = KneeCall::still_scaling;
  } else {
    outcome.call = KneeCall::no_bend;
  }
  return outcome;
}

// The smallest batch above the curve's last that did not fit (oom, over_limit), at the curve's last
// accumulation: where the sweep cannot be extended.
std::optional<int64_t> unfit_above(std::span<const Point> points, const CurvePoint& last) {
  std::optional<int64_t> unfit;
  for (const Point& p : points) {
    if (!did_not_fit(p.status) || p.batch <= last.batch || p.accumulation != last.point->accumulation)
      continue;
    if (!unfit || p.batch < *unfit) unfit = p.batch;
  }
  return unfit;
}

std::string knee_reason(const KneeOutcome& outcome, const std::vector<CurvePoint>& curve,
                        std::span<const Point> points, double sensitivity) {
  switch (outcome.call) {
    case KneeCall::found:
      return fmt::format("Kneedle S={} on log2(batch) vs log2(samples/s)", format_number(sensitivity));
    case KneeCall::too_few:
      return fmt::format("too few points ({} ok, need {})", curve.size(), kMinKneePoints);
    case KneeCall::flat: {
      if (const std::string falls = falling_text(curve); !falls.empty()) return "no knee: " + falls;
      const auto best = std::max_element(curve.begin(), curve.end(), [](const auto& l, const auto& r) {
        return l.samples_per_second < r.samples_per_second;
      });
      if (best->batch == curve.front().batch)
        return fmt::format(
            "no knee: throughput curve has no concave bend (the smallest batch, {}, has the best throughput)",
            curve.front().batch);
      return fmt::format(
          "no knee: throughput curve has no concave bend (the smallest batch, {}, already reaches {} of "
          "the best throughput, batch {})",
          curve.front().batch, format_percent(curve.front().samples_per_second / best->samples_per_second),
          best->batch);
    }
    case KneeCall::still_scaling: {
      const CurvePoint& last = curve[curve.size() - 1];
      const CurvePoint& before = curve[outcome.scaling_from];
      std::string reason = fmt::format(
          "throughput still scaling at the largest batch ({}: +{} over batch {})", last.batch,
          format_percent(last.samples_per_second / before.samples_per_second - 1.0), before.batch);
      if (outcome.early_bend)
        reason += fmt::format(
            "; a bend at batch {} is not where it stops scaling: throughput more than doubles past it ({} "
            "of the best there)",
            curve[*outcome.early_bend].batch,
            format_percent(curve[*outcome.early_bend].samples_per_second / last.samples_per_second));
      else if (outcome.unconfirmed)
        reason += fmt::format("; a bend near batch {} is not confirmed before the sweep ends",
                              curve[*outcome.unconfirmed].batch);
      if (curve.size() < kMinKneePoints)
        reason += fmt::format("; too few points for a knee ({} ok, need {})", curve.size(), kMinKneePoints);
      return reason;
    }
    case KneeCall::no_bend:
      if (outcome.unconfirmed) {
        // Past the largest batch that fits there is nothing to extend the sweep to; short of a batch that
        // did not fit, far above, the batches between are where to look.
        const int64_t last = curve.back().batch;
        const std::optional<int64_t> unfit = unfit_above(points, curve.back());
        std::string advice = fmt::format("extend the sweep past batch {}", last);
        if (const auto effective =
                analysis_detail::swept_effective_batch(points))  // no micro-batch above N to sweep
          advice = last == *effective
                       ? fmt::format("no micro-batch of effective batch {} is larger", *effective)
                       : fmt::format("the larger splits of effective batch {} did not run ok", *effective);
        else if (unfit && budget_edge_narrow(last, *unfit))
          advice = fmt::format("batch {} did not fit, so the sweep cannot go past batch {}", *unfit, last);
        else if (unfit)
          advice = fmt::format("sweep batches between {} and {}, which did not fit", last, *unfit);
        return fmt::format(
            "no knee: throughput curve has no concave bend confirmed before the sweep ends (a candidate at "
            "batch {}; {})",
            curve[*outcome.unconfirmed].batch, advice);
      }
      return "no knee: throughput curve has no concave bend";
  }
  return {};
}

// How far one point's throughput may move, in log2(samples/s): across the 99% confidence interval of its mean
// step time (Student's t at kKneeBandAlpha on the standard error's degrees of freedom, the standard error
// allowing for drift: drift_standard_error). The throughput is the mean's, so that is how well it is known;
// the steps' own spread (median/p10 to median/p90, the band before) called a knee known to 1% "range
// 128-1024" at 20% step noise, and one from two steps a point "stable".
struct NoiseBand {
  double up = 0;    // >= 0
  double down = 0;  // <= 0
};

constexpr double kKneeBandAlpha = 0.01;
// A mean known to no better than this fraction either way: the band is held there (1 - k * se would reach 0).
constexpr double kKneeBandMaxFraction = 0.9;

// With `rounds` (run --rounds), the rounds' error where it is the larger (mean_step_error): how far a
// rerun of the point moves its mean.
NoiseBand noise_band(const Point& point, const std::optional<RoundNoise>& rounds) {
  NoiseBand band;
  double degrees = 0;
  std::optional<double> se = drift_standard_error(point.samples_ms, &degrees);
  if (!se || !(degrees > 0)) return band;
  if (rounds) {
    if (const std::optional<MeanStepError> e = mean_step_error(point, rounds); e && e->se > *se) {
      se = e->se;
      degrees = e->df;
    }
  }
  const double half_width = std::min(student_t_critical(kKneeBandAlpha, degrees) * *se, kKneeBandMaxFraction);
  // A mean step time shorter by the half width is a higher rate: rate / (1 - w); longer, rate / (1 + w).
  band.up = -std::log2(1.0 - half_width);
  band.down = -std::log2(1.0 + half_width);
  return band;
}

// A perturbation assigns each point a weight in [-1, 1]: + moves it towards `up`, - towards `down`.
using Weights = std::vector<double>;

std::vector<Weights> systematic_perturbations(std::size_t n) {
  std::vector<Weights> patterns;
  for (std::size_t i = 0; i < n; ++i) {
    for (double sign : {1.0, -1.0}) {
      Weights alone(n, 0.0);
      alone[i] = sign;
      patterns.push_back(std::move(alone));
    }
  }
  for (std::size_t split = 1; split < n; ++split) {
    for (double sign : {1.0, -1.0}) {
      Weights tilt(n, 0.0);
      for (std::size_t i = 0; i < n; ++i) tilt[i] = i < split ? -sign : sign;
      patterns.push_back(std::move(tilt));
    }
  }
  patterns.emplace_back(n, 1.0);
  patterns.emplace_back(n, -1.0);
  return patterns;
}

// Uniform in [-1, 1] from the top 53 bits of the generator, so the patterns are the same with every standard
// library (std::uniform_real_distribution is not specified bit for bit).
double unit_weight(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

std::vector<Weights> random_perturbations(std::size_t n) {
  std::mt19937_64 generator(kKneePerturbationSeed);
  std::vector<Weights> patterns;
  for (int k = 0; k < kKneePerturbations; ++k) {
    const bool full_magnitude = k % 2 == 0;
    Weights weights(n);
    for (double& w : weights) {
      const double u = unit_weight(generator);
      w = full_magnitude ? (u < 0.0 ? -1.0 : 1.0) : u;
    }
    patterns.push_back(std::move(weights));
  }
  return patterns;
}

// Runs the knee rules on every perturbed curve and fills confidence, range and the reason's note.
// `rounds`: the run's round_noise, over all its points (as the report's intervals).
void add_confidence(KneeResult& knee, const std::vector<CurvePoint>& curve,
                    const std::vector<double>& log2_batch, const std::vector<double>& log2_rate,
                    double sensitivity, const std::optional<RoundNoise>& rounds) {
  // Without raw samples (a minimal report, or one step per point) nothing can move: that is not stability.
  // (Samples that are all equal do have a spread, of zero: that is stable.)
  if (std::all_of(curve.begin(), curve.end(),
                  [](const CurvePoint& c) { return c.point->samples_ms.size() < 2; })) {
    knee.confidence = "unknown";
    if (knee.batch) knee.reason += "; no point has the raw step samples to show how noise moves it";
    return;
  }
  knee.confidence = "stable";
  const std::size_t n = curve.size();
  if (n < kMinKneePoints) return;
  std::vector<NoiseBand> bands;
  bands.reserve(n);
  for (const CurvePoint& c : curve) bands.push_back(noise_band(*c.point, rounds));

  std::vector<Weights> patterns = systematic_perturbations(n);
  std::vector<Weights> random = random_perturbations(n);
  patterns.insert(patterns.end(), random.begin(), random.end());

  std::optional<int64_t> low = knee.batch, high = knee.batch;
  std::size_t moved = 0, vanished = 0;
  std::vector<double> perturbed(n);
  for (const Weights& weights : patterns) {
    for (std::size_t i = 0; i < n; ++i)
      perturbed[i] =
          log2_rate[i] + (weights[i] >= 0.0 ? weights[i] * bands[i].up : -weights[i] * bands[i].down);
    const KneeOutcome outcome = call_knee(log2_batch, perturbed, sensitivity);
    const std::optional<int64_t> batch =
        outcome.index ? std::optional<int64_t>(curve[*outcome.index].batch) : std::nullopt;
    if (batch != knee.batch) ++moved;
    if (!batch) {
      ++vanished;
      continue;
    }
    low = low ? std::min(*low, *batch) : *batch;
    high = high ? std::max(*high, *batch) : *batch;
  }
  if (moved == 0) return;
  knee.confidence = "range";
  knee.range_low = low;
  knee.range_high = high;
  if (knee.batch) {
    if (*low == *high)  // it never moves elsewhere, only vanishes
      knee.reason +=
          fmt::format("; under measured noise the knee stays at batch {} where there is one", *low);
    else
      knee.reason +=
          fmt::format("; under measured noise the knee moves between batch {} and {}", *low, *high);
    if (vanished > 0)
      knee.reason += fmt::format(" and vanishes in {} of {} perturbed curves", vanished, patterns.size());
  } else {
    knee.reason += fmt::format(
        "; under measured noise a knee appears in {} of {} perturbed curves ({})", patterns.size() - vanished,
        patterns.size(),
        *low == *high ? fmt::format("at batch {}", *low) : fmt::format("batch {} to {}", *low, *high));
  }
}

}  // namespace

KneedleResult kneedle(std::span<const double> x, std::span<const double> y, double sensitivity) {
  require_curve(x, y, sensitivity);
  const std::size_t n = x.size();
  const std::vector<double> x_n = normalized(x);
  const std::vector<double> y_n = normalized(y);
  std::vector<double> y_d(n);
  for (std::size_t i = 0; i < n; ++i) y_d[i] = y_n[i] - x_n[i];
  // x_n runs from 0 to 1, so mean(diff(x_n)) = 1 / (n - 1).
  const double threshold_drop = sensitivity / static_cast<double>(n - 1);

  KneedleResult result;
  const std::vector<std::size_t> maxima = local_maxima(y_d);
  for (std::size_t k = 0; k < maxima.size(); ++k) {
    const std::size_t candidate = maxima[k];
    if (y_d[candidate] <= kKneedleTolerance) continue;  // on or below the diagonal: not a concave bend
    const std::size_t next = k + 1 < maxima.size() ? maxima[k + 1] : n - 1;
    const double threshold = y_d[candidate] - threshold_drop;
    // A plateau of one point after the bend falls by exactly the drop (S = 1: the last point's difference is
    // 0 and the threshold is 0), so which of two equal throughputs measured 0.01% higher decided whether the
    // knee was confirmed: "not stable" with every mean known to 0.05%. Within 1% of the drop counts as
    // reaching it.
    const double slack = std::max(kKneedleTolerance, kKneedleDropSlack * threshold_drop);
    for (std::size_t j = candidate + 1; j <= next && j < n; ++j) {
      if (y_d[j] <= threshold + slack) {
        result.knee = candidate;
        return result;
      }
    }
    if (k + 1 == maxima.size() && candidate + 1 < n) result.unconfirmed = candidate;
  }
  return result;
}

namespace analysis_detail {

// A knee that held under each point's own noise, on points some of which were timed while other processes
// competed for the CPUs (or the hypervisor took them): that noise is not the load's, which moved whole steps
// and differs from run to run, so "stable" would promise a rerun the same answer.
void add_busy_host(KneeResult& knee, const std::vector<CurvePoint>& curve) {
  // Too few points for a knee is that, whatever the load.
  if (knee.confidence != "stable" || curve.size() < kMinKneePoints) return;
  std::vector<int64_t> busy;
  for (const CurvePoint& c : curve)
    if (c.point->host && c.point->host->busy()) busy.push_back(c.batch);
  if (busy.empty()) return;
  knee.confidence = "contended";
  knee.reason += fmt::format(
      "; batch{} {} {} timed on a busy host (the points' host figures), so a rerun may put the knee "
      "elsewhere",
      busy.size() == 1 ? "" : "es", fmt::join(busy, ", "), busy.size() == 1 ? "was" : "were");
}

KneeDetail find_knee_detail(std::span<const Point> points, double sensitivity, bool interim) {
  if (!std::isfinite(sensitivity) || sensitivity <= 0.0)
    throw std::invalid_argument(fmt::format("find_knee: sensitivity must be > 0, got {}", sensitivity));
  const std::vector<CurvePoint> curve = analysis_detail::throughput_curve(points);
  std::vector<double> log2_batch, log2_rate;
  for (const CurvePoint& c : curve) {
    log2_batch.push_back(std::log2(static_cast<double>(c.batch)));
    log2_rate.push_back(std::log2(c.samples_per_second));
  }
  const KneeOutcome outcome = call_knee(log2_batch, log2_rate, sensitivity);
  KneeDetail detail;
  detail.call = outcome.call;
  detail.rising_at_end = outcome.rising_at_end;
  if (outcome.index) detail.result.batch = curve[*outcome.index].batch;
  detail.result.reason = knee_reason(outcome, curve, points, sensitivity);
  if (interim && curve.size() > kInterimConfidencePoints) {
    // 4n + 2 systematic perturbed curves of n points each, after every point of a long sweep: a cost that
    // grows with the cube of its length. The final analysis, and `analyze`, compute it.
    detail.result.confidence = "unknown";
    detail.result.reason += fmt::format(
        "; its confidence under noise is computed when the sweep ends (the sweep is still running, past {} "
        "points)",
        kInterimConfidencePoints);
  } else {
    add_confidence(detail.result, curve, log2_batch, log2_rate, sensitivity, round_noise(points));
  }
  add_busy_host(detail.result, curve);
  return detail;
}

}  // namespace analysis_detail

KneeResult find_knee(std::span<const Point> points, double sensitivity) {
  return analysis_detail::find_knee_detail(points, sensitivity).result;
}

}  // namespace bsw
