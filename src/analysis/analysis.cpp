// The analysis of a sweep's points: saturation, max-fit, best throughput, latency budget, energy, cost, the
// effective-batch split and the one recommended batch. The rules are documented in
// include/batchsweep/analysis.hpp.
#include "batchsweep/analysis.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "analysis/curve.hpp"
#include "batchsweep/cost.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/plan.hpp"
#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

using analysis_detail::between_range;
using analysis_detail::CurvePoint;
using analysis_detail::falling_text;
using analysis_detail::format_number;
using analysis_detail::format_percent;
using analysis_detail::format_rate;
using analysis_detail::format_share;
using analysis_detail::is_ok;
using analysis_detail::KneeCall;
using analysis_detail::latency_text;
using analysis_detail::swept_effective_batch;

// The N whose splits the points are: from the points where they hold two accumulations of one N, else from
// run's --effective-batch where every point makes it (one split ran).
std::optional<int64_t> split_sweep(std::span<const Point> points, const AnalysisOptions& options) {
  if (const std::optional<int64_t> swept = swept_effective_batch(points)) return swept;
  if (!options.effective_batch || points.empty()) return std::nullopt;
  const bool all = std::all_of(points.begin(), points.end(), [&](const Point& p) {
    return (p.effective_batch > 0 ? p.effective_batch : p.batch * p.accumulation) == *options.effective_batch;
  });
  return all ? options.effective_batch : std::nullopt;
}

uint64_t memory_bytes(const Point& point) {
  return point.memory.measured_bytes.value_or(point.memory.planned_bytes);
}

std::string split_name(const Point& point) {
  return fmt::format("batch {} x accumulation {}", point.batch, point.accumulation);
}

// "batch 512 did not fit (oom: needs 90 GiB)" / "batch 64 failed (error: ...)".
std::string failure_text(const Point& point) {
  std::string detail(to_string(point.status));
  if (point.status == PointStatus::ok) detail = "ok but no throughput measured";
  if (!point.reason.empty()) detail += ": " + point.reason;
  // "batch 1x97": with accumulation the split, as the table and the warnings write it.
  return fmt::format("batch {} {} ({})", batch_label(point.batch, point.accumulation),
                     did_not_fit(point.status) ? "did not fit" : "failed", detail);
}

// The smallest not-ok point whose batch is above `batch` (all not-ok points when batch is nullopt).
const Point* first_failure_above(std::span<const Point> points, std::optional<int64_t> batch) {
  const Point* first = nullptr;
  for (const Point& point : points) {
    if (is_ok(point) || (batch && point.batch <= *batch)) continue;
    if (!first || point.batch < first->batch) first = &point;
  }
  return first;
}

// Where the smallest batch above the largest that ran ok failed (`above`) and is not close to it
// (budget_edge_narrow), the batches between were never tried, and the edge may lie anywhere among them:
// "; the batches between 128 and 4096 were not tried (--batch 256:2048:*2 measures them)". Empty where the
// two are close, or in an --effective-batch sweep (its splits are all the batches it can run).
std::string untried_between(std::span<const Point> points, int64_t largest_ok, const Point& above) {
  if (budget_edge_narrow(largest_ok, above.batch) || swept_effective_batch(points)) return {};
  return fmt::format("; the batches between {} and {} were not tried (--batch {} measures them)", largest_ok,
                     above.batch, between_range(largest_ok, above.batch));
}

// The ok point of highest throughput among those `eligible` accepts (the smaller batch on a tie).
template <typename Eligible>
const Point* fastest(std::span<const Point> points, Eligible eligible) {
  const Point* best = nullptr;
  for (const Point& point : points) {
    if (!is_ok(point) || !eligible(point)) continue;
    if (!best || point.samples_per_second > best->samples_per_second ||
        (point.samples_per_second == best->samples_per_second && point.batch < best->batch))
      best = &point;
  }
  return best;
}

BatchChoice choose(const Point& point, std::string reason) {
  return {point.batch, point.samples_per_second, std::move(reason)};
}

BatchChoice none(std::string reason) {
  return {std::nullopt, std::nullopt, std::move(reason)};
}

// Why nothing can be chosen: no ok point. An unfinished sweep may have stopped before any batch finished,
// which is not a batch that failed.
std::string no_ok_reason(std::span<const Point> points, bool unfinished) {
  const Point* failure = first_failure_above(points, std::nullopt);
  if (unfinished && points.empty()) return "the sweep stopped before any batch finished";
  const std::string none_ok = unfinished ? "no batch ran ok before the sweep stopped" : "no batch ran ok";
  return failure ? none_ok + ": " + failure_text(*failure) : none_ok;
}

BatchChoice best_throughput(std::span<const Point> points, bool unfinished) {
  const Point* best = fastest(points, [](const Point&) { return true; });
  if (!best) return none(no_ok_reason(points, unfinished));
  std::string reason = fmt::format("highest throughput: {} samples/s", format_rate(best->samples_per_second));
  if (best->accumulation != 1) reason += " (" + split_name(*best) + ")";
  return choose(*best, std::move(reason));
}

std::string near_cut_note(const std::vector<CurvePoint>& curve, int64_t chosen, const CurvePoint& best,
                          double pct);

BatchChoice saturation(std::span<const Point> points, const std::vector<CurvePoint>& curve, double pct,
                       bool unfinished) {
  if (curve.empty()) return none(no_ok_reason(points, unfinished));
  const auto best = std::max_element(
      curve.begin(), curve.end(),
      [](const CurvePoint& l, const CurvePoint& r) { return l.samples_per_second < r.samples_per_second; });
  // pct / 100 first: best * pct could overflow to infinity for a huge rate in a hand-made report.
  const double threshold = best->samples_per_second * (pct / 100.0);
  auto first = std::find_if(curve.begin(), curve.end(),
                            [&](const CurvePoint& c) { return c.samples_per_second >= threshold; });
  if (first == curve.end()) first = best;
  if (first->batch == best->batch)
    return choose(*first->point,
                  fmt::format("the best throughput ({} samples/s); no smaller batch reaches {}% of it{}",
                              format_rate(best->samples_per_second), format_number(pct),
                              near_cut_note(curve, first->batch, *best, pct)));
  return choose(
      *first->point,
      fmt::format("smallest batch reaching {}% of the best throughput: {} of {} samples/s (batch {}){}",
                  format_number(pct), format_share(first->samples_per_second / best->samples_per_second, pct),
                  format_rate(best->samples_per_second), best->batch,
                  near_cut_note(curve, first->batch, *best, pct)));
}

BatchChoice max_fit_above(std::span<const Point> points, const Point& largest_ok,
                          const std::optional<UntimedFit>& untimed, bool unfinished);

BatchChoice max_fit(std::span<const Point> points, const std::optional<UntimedFit>& untimed,
                    bool unfinished) {
  const Point* largest = nullptr;
  for (const Point& point : points) {
    if (!is_ok(point)) continue;
    if (!largest || point.batch > largest->batch ||
        (point.batch == largest->batch && point.samples_per_second > largest->samples_per_second))
      largest = &point;
  }
  if (!largest) return none(no_ok_reason(points, unfinished));
  BatchChoice fit = max_fit_above(points, *largest, untimed, unfinished);
  // A batch below the largest that ran out of memory (or over the budget): the memory free moved during the
  // sweep (another process, fragmentation), and the edge may be lower when the job runs. Said, with the
  // largest such batch.
  // Measured in one session: a point taken from an earlier run's report (--resume) met that run's memory.
  const Point* lower = nullptr;
  if (largest->resumed_from.empty())
    for (const Point& point : points)
      if (did_not_fit(point.status) && point.resumed_from.empty() && point.batch < largest->batch &&
          (!lower || point.batch > lower->batch))
        lower = &point;
  if (lower)
    fit.reason += fmt::format(
        "; but batch {} below it did not fit ({}{}), so the memory free may have changed during the sweep "
        "(another process, fragmentation) and the largest batch may not fit when the job runs",
        batch_label(lower->batch, lower->accumulation), to_string(lower->status),
        lower->reason.empty() ? std::string() : ": " + lower->reason);
  return fit;
}

BatchChoice max_fit_above(std::span<const Point> points, const Point& largest_ok,
                          const std::optional<UntimedFit>& untimed, bool unfinished) {
  const Point* largest = &largest_ok;
  // The search found a larger batch that fits but could not time it: say so, with its own edge, rather than
  // let the largest timed batch pass for the largest that fits.
  if (untimed && untimed->batch > largest->batch)
    return choose(*largest, fmt::format("the largest timed batch; batch {} fits too ({})", untimed->batch,
                                        untimed->reason));
  const Point* failure = first_failure_above(points, largest->batch);
  // A batch that did not fit far above leaves the fit edge unknown: the batches between were not tried.
  if (failure)
    return choose(*largest, failure_text(*failure) + (did_not_fit(failure->status)
                                                          ? untried_between(points, largest->batch, *failure)
                                                          : std::string()));
  return choose(*largest, unfinished
                              ? "the largest batch measured before the sweep stopped (it did not finish: "
                                "some batches it asked for were not measured)"
                              : "the largest batch swept");
}

// A latency budget: `ms` on the step time at percentile `pct` (--latency-percentile; "p99").
struct Budget {
  double ms = 0;
  double pct = 99;
  [[nodiscard]] std::string name() const { return latency_name(pct); }
  [[nodiscard]] std::optional<double> of(const Point& point) const { return step_latency_ms(point, pct); }
};

// Under 100 steps a p99 (20 a p95, ...) is close to the slowest step seen, so the reason says how many it
// rests on, and that --timeout cut them short where it did: "of 21 steps", "from a single step, cut short by
// --timeout".
std::string latency_steps(const Point& point, double pct) {
  const size_t n = point.samples_ms.size();
  if (!analysis_detail::too_few_steps(n, pct)) return {};
  const std::string cut = point.stop_reason == "timeout" ? ", cut short by --timeout" : "";
  return n == 1 ? "from a single step" + cut : fmt::format("of {} steps{}", n, cut);
}

std::string steps_clause(const Point& point, double pct) {
  const std::string steps = latency_steps(point, pct);
  return steps.empty() ? steps : " " + steps;
}

std::string latency_basis(const Point& point, double pct) {
  const std::string steps = latency_steps(point, pct);
  if (steps.empty()) return {};
  return fmt::format(" ({} {}{})", latency_name(pct), steps,
                     point.samples_ms.size() > 1 ? ": near the slowest" : "");
}

// The relative standard error of a point's mean step time, from its noise (the steps' relative standard
// deviation) over the square root of its sample count; nullopt without both.
std::optional<double> mean_uncertainty(const Point& p) {
  if (!p.noise_pct || p.samples_ms.size() < 2) return std::nullopt;
  return *p.noise_pct / 100.0 / std::sqrt(static_cast<double>(p.samples_ms.size()));
}

// The cut of a saturation pick (--saturation, 95% of the best throughput) takes no account of noise, as the
// latency and split choices do: where the batch below the pick falls short of it by less than the two means'
// noise (twice their combined standard error), a rerun may pick that one (with less memory), and the pick
// says so: "; batch 1024 (94.8%) is short of the cut by less than the noise (2.7%): a rerun may pick it".
// Empty where there is none, or a mean has no standard error.
std::string near_cut_note(const std::vector<CurvePoint>& curve, int64_t chosen, const CurvePoint& best,
                          double pct) {
  if (best.samples_per_second <= 0) return {};
  const std::optional<double> se_best = mean_uncertainty(*best.point);
  if (!se_best) return {};
  const CurvePoint* below = nullptr;
  const CurvePoint* at = nullptr;
  const CurvePoint* above = nullptr;
  for (const CurvePoint& c : curve) {
    if (c.batch < chosen && (!below || c.batch > below->batch)) below = &c;
    if (c.batch == chosen) at = &c;
    if (c.batch > chosen && (!above || c.batch < above->batch)) above = &c;
  }
  const auto percent = [](double margin) {
    return margin * 100.0 < 10 ? fmt::format("{:.2g}%", margin * 100.0)
                               : fmt::format("{:.0f}%", margin * 100.0);
  };
  std::string note;
  if (below != nullptr) {
    if (const std::optional<double> se_below = mean_uncertainty(*below->point)) {
      const double share = below->samples_per_second / best.samples_per_second;
      const double margin = noise_margin(*se_below, *se_best) * share;  // the share's own noise
      if (share < pct / 100.0 && pct / 100.0 - share < margin)
        note += fmt::format(
            "; batch {} ({}) is short of the {}% cut by less than the noise ({}): a rerun may "
            "pick it",
            below->batch, format_share(share, pct), format_number(pct), percent(margin));
    }
  }
  // The other way round: the chosen batch clears the cut by less than the noise, and a rerun may find it
  // short and take the next batch (12 reruns of one curve took 1024 five times and 2048 seven).
  if (at != nullptr && above != nullptr && at->batch != best.batch) {
    if (const std::optional<double> se_at = mean_uncertainty(*at->point)) {
      const double share = at->samples_per_second / best.samples_per_second;
      const double margin = noise_margin(*se_at, *se_best) * share;
      // (Its share with the digits that set it apart from the cut: "95.2%", not "95%".)
      std::string shown = format_share(share, pct);
      for (int digits = 1; digits <= 6 && shown == format_number(pct) + "%"; ++digits)
        shown = fmt::format("{:.{}f}%", share * 100.0, digits);
      if (share >= pct / 100.0 && share - pct / 100.0 < margin)
        note += fmt::format(
            "; batch {} ({}) clears the {}% cut by less than the noise ({}): a rerun may pick "
            "batch {}",
            at->batch, shown, format_number(pct), percent(margin), above->batch);
    }
  }
  return note;
}

// The throughput lead (percent) within which two measured points are the same: kSameThroughputPct, or the
// two means' noise_margin where that is larger (a mean without a standard error adds none).
double same_throughput_margin_pct(std::optional<double> se_a, std::optional<double> se_b) {
  return std::max(kSameThroughputPct, 100.0 * noise_margin(se_a.value_or(0.0), se_b.value_or(0.0)));
}

// Why a lead within `margin_pct` (same_throughput_margin_pct) is no difference: the two means' noise where
// that set the margin, else the minimum effect (a 0.97% lead may be well beyond noise, yet it is under 1%).
std::string tie_words(double margin_pct) {
  if (margin_pct > kSameThroughputPct) return fmt::format("within noise (< {:.3g}%)", margin_pct);
  return fmt::format("under the {:g}% that counts as a difference", kSameThroughputPct);
}

// The latency budget's answer. `fastest`: the highest-throughput ok point whose p99 is within the budget.
// `chosen`: the point with the lowest p99 among those the fastest does not beat by a measurable margin:
// kSameThroughputPct (compare's minimum effect), or twice the combined standard error of the two means where
// that is larger. 2x the latency for 0.01% more samples/s is no trade. Only between measured points (both
// with noise_pct): a hand-made report's figures cannot say what is noise, so there it is the fastest.
struct BudgetChoice {
  const Point* chosen = nullptr;
  const Point* fastest = nullptr;
  double lead_pct = 0;    // how much faster the fastest is than chosen, percent
  double margin_pct = 0;  // the margin that lead stayed within
};

BudgetChoice within_budget(std::span<const Point> points, const Budget& budget) {
  const auto eligible = [&](const Point& p) {
    const std::optional<double> latency = budget.of(p);
    return is_ok(p) && latency && *latency <= budget.ms;
  };
  BudgetChoice c;
  c.fastest = fastest(points, eligible);
  c.chosen = c.fastest;
  if (!c.fastest || !c.fastest->noise_pct) return c;
  const std::optional<double> fastest_se = mean_uncertainty(*c.fastest);
  for (const Point& p : points) {
    if (!eligible(p) || &p == c.fastest || !p.noise_pct || p.samples_per_second <= 0) continue;
    const double margin_pct = same_throughput_margin_pct(fastest_se, mean_uncertainty(p));
    const double lead_pct = (c.fastest->samples_per_second / p.samples_per_second - 1.0) * 100.0;
    if (lead_pct >= margin_pct) continue;
    const double p99 = *budget.of(p), best_p99 = *budget.of(*c.chosen);
    if (p99 < best_p99 || (p99 == best_p99 && p.batch < c.chosen->batch)) {
      c.chosen = &p;
      c.lead_pct = lead_pct;
      c.margin_pct = margin_pct;
    }
  }
  return c;
}

// Where the ok point right above the chosen one (same accumulation) is over the budget and more than 1/16
// larger (and at least 8 from batch 8 up), a batch between the two may fit the budget and run faster:
// "; batch 96's p99 is 3.09 ms: --batch 72:88:+8 measures between them". Empty otherwise: the two are that
// close (run --batch auto --latency-slo bisects to there), or throughput is flat up to the chosen batch
// (flat_below). The range is between_range's.
std::string edge_hint(std::span<const Point> points, const Point& chosen, const Budget& budget) {
  const Point* next = nullptr;
  for (const Point& point : points) {
    if (!is_ok(point) || point.accumulation != chosen.accumulation || point.batch <= chosen.batch) continue;
    if (!next || point.batch < next->batch) next = &point;
  }
  if (!next) return {};
  const std::optional<double> p99 = budget.of(*next);
  const int64_t lo = chosen.batch, hi = next->batch;
  if (!p99 || *p99 <= budget.ms || budget_edge_narrow(lo, hi)) return {};
  if (flat_below(points, chosen) != nullptr) return {};
  const std::string range = between_range(lo, hi);
  // A batch between them that did not run is said: the range measures it again.
  const Point* failed = nullptr;
  for (const Point& point : points)
    if (!is_ok(point) && point.accumulation == chosen.accumulation && point.batch > lo && point.batch < hi &&
        (!failed || point.batch < failed->batch))
      failed = &point;
  const std::string between = failed ? fmt::format(" and batch {} between them has status {}", failed->batch,
                                                   to_string(failed->status))
                                     : "";
  // At the points' accumulation: --batch alone would measure other points, at 1/A of the samples per step.
  const std::string accumulation =
      chosen.accumulation > 1 ? fmt::format(" --accumulation {}", chosen.accumulation) : std::string();
  return fmt::format("; batch {}'s {} is {} ms{}: --batch {}{} measures between them", hi, budget.name(),
                     latency_text(*p99, budget.ms), between, range, accumulation);
}

// The next doublings above `largest`, to paste, after the advice to extend the sweep (run --batch): ", e.g.
// --batch 1024:8192:*2", keeping its accumulation, up to the cap of 2^24 samples a step; empty at the cap.
std::string extend_example(const Point& largest) {
  const int64_t accumulation = std::max<int64_t>(1, largest.accumulation);
  const int64_t cap = kMaxBatch / accumulation;
  const int64_t from = largest.batch * 2;
  if (from > cap) return {};
  int64_t to = from;
  for (int i = 0; i < 3 && to * 2 <= cap; ++i) to *= 2;
  const std::string batches = from == to ? fmt::format("{}", from) : fmt::format("{}:{}:*2", from, to);
  return fmt::format(", e.g. --batch {}{}", batches,
                     accumulation > 1 ? fmt::format(" --accumulation {}", accumulation) : std::string());
}

// Where the budget did not bind above the answer: the chosen batch is the largest that ran (no larger batch
// failed to fit). Then nothing says where latency would stop the batch growing: "extend the sweep (run
// --batch)", as the curve's own still-rising advice does; an unfinished sweep says it stopped first. A
// smaller batch over the budget (a noisy step, a hang) does not bound the batch from above, so it changes the
// words, not the advice.
std::string budget_not_reached(std::span<const Point> points, const Point& chosen, const Budget& budget,
                               const AnalysisOptions& options) {
  // An --effective-batch sweep has no larger batch to try: its splits all hold the same samples. The auto
  // search's larger fit it could not time bounds the batch (max_fit names it).
  if (split_sweep(points, options)) return {};
  if (options.untimed_fit && options.untimed_fit->batch > chosen.batch) return {};
  const bool unfinished = options.unfinished;
  bool every_one_meets = true;
  for (const Point& point : points) {
    if (is_ok(point) && (!budget.of(point) || *budget.of(point) > budget.ms)) every_one_meets = false;
    if (is_ok(point) && point.batch > chosen.batch) return {};  // a larger batch ran
  }
  // A larger batch that did not fit bounds the batch, unless it is far above and the batches between were
  // never tried.
  if (const Point* above = first_failure_above(points, chosen.batch)) {
    if (!did_not_fit(above->status)) return {};
    const std::string gap = untried_between(points, chosen.batch, *above);
    if (gap.empty()) return {};
    return every_one_meets ? fmt::format("; every batch that ran meets the budget and batch {} did not fit{}",
                                         above->batch, gap)
                           : fmt::format("; batch {} is the largest that ran and batch {} did not fit{}",
                                         chosen.batch, above->batch, gap);
  }
  if (every_one_meets)
    return unfinished ? "; every batch measured meets the budget, and the sweep stopped before larger ones"
                      : fmt::format(
                            "; every batch swept meets the budget: larger batches were not tried (extend the "
                            "sweep (run --batch) to find where it binds{})",
                            extend_example(chosen));
  return unfinished
             ? fmt::format("; batch {} is the largest measured, and the sweep stopped before larger ones",
                           chosen.batch)
             : fmt::format(
                   "; batch {} is the largest swept: larger batches were not tried (extend the "
                   "sweep (run --batch) to find where the budget binds{})",
                   chosen.batch, extend_example(chosen));
}

// A smaller batch over the budget while the chosen one is within it: a step should take no longer at a
// smaller batch, so one of the two percentiles is likely noise (a stall, too few steps near the slowest),
// and the chosen batch's margin may not hold in a rerun. Said, with the largest such batch.
std::string smaller_over_budget(std::span<const Point> points, const Point& chosen, const Budget& budget) {
  const Point* over = nullptr;
  for (const Point& p : points)
    if (is_ok(p) && p.accumulation == chosen.accumulation && p.batch < chosen.batch && budget.of(p) &&
        *budget.of(p) > budget.ms && (over == nullptr || p.batch > over->batch))
      over = &p;
  if (over == nullptr) return {};
  return fmt::format(
      "; but batch {}, smaller, is over it ({} {} ms): a smaller batch's step should be no longer, so these "
      "{}s are likely noisy and batch {}'s may not hold in a rerun (more steps: --min-samples, --timeout)",
      batch_label(over->batch, over->accumulation), budget.name(), latency_text(*budget.of(*over), budget.ms),
      budget.name(), batch_label(chosen.batch, chosen.accumulation));
}

// Ok points with no step time at the budget's percentile (a hand-made or trimmed report: neither step_ms at
// it nor samples_ms) cannot be judged against it; said, rather than passed over in silence: "; batches 16, 32
// have no p95 step time (step_ms.p95 or samples_ms) and were not judged".
std::string unjudged(std::span<const Point> points, const Budget& b) {
  std::vector<std::string> batches;
  for (const Point& point : points)
    if (is_ok(point) && !b.of(point)) batches.push_back(batch_label(point.batch, point.accumulation));
  if (batches.empty()) return {};
  return fmt::format("; batch{} {} {} no {} step time (step_ms.{} or samples_ms) and {} not judged",
                     batches.size() == 1 ? "" : "es", fmt::join(batches, ", "),
                     batches.size() == 1 ? "has" : "have", b.name(), b.name(),
                     batches.size() == 1 ? "was" : "were");
}

BatchChoice latency_slo_choice(std::span<const Point> points, const Budget& b,
                               const AnalysisOptions& options) {
  const bool unfinished = options.unfinished;
  const BudgetChoice budget = within_budget(points, b);
  if (const Point* chosen = budget.chosen) {
    // A faster point within noise: say what was given up, and why it is nothing. (No hint to measure above
    // the fastest: throughput is flat there.)
    std::string after;
    if (chosen != budget.fastest)
      after =
          fmt::format("; batch {} is {:.2f}% faster, {}, at {} {} ms", budget.fastest->batch, budget.lead_pct,
                      tie_words(budget.margin_pct), b.name(), latency_text(*b.of(*budget.fastest), b.ms));
    else
      after = edge_hint(points, *chosen, b) + budget_not_reached(points, *chosen, b, options);
    BatchChoice choice = choose(
        *chosen, fmt::format("{} step {} ms within the {} ms budget{}{}{}", b.name(),
                             latency_text(*b.of(*chosen), b.ms), format_number(b.ms),
                             latency_basis(*chosen, b.pct), smaller_over_budget(points, *chosen, b), after));
    choice.latency_ms = b.of(*chosen);
    return choice;
  }
  const Point* quickest = nullptr;
  for (const Point& point : points) {
    if (!is_ok(point) || !b.of(point)) continue;
    if (!quickest || *b.of(point) < *b.of(*quickest)) quickest = &point;
  }
  if (!quickest) {
    const bool any_ok = std::any_of(points.begin(), points.end(), is_ok);
    return none(any_ok ? std::string("no ok point has step-time samples") : no_ok_reason(points, unfinished));
  }
  // The quickest is the smallest batch swept: smaller ones, not swept, may meet the budget (not in an
  // --effective-batch sweep, whose splits all hold the same samples). Every power of two below it.
  const bool smallest =
      std::none_of(points.begin(), points.end(), [&](const Point& p) { return p.batch < quickest->batch; });
  std::string below;
  if (smallest && quickest->batch > 1 && !split_sweep(points, options)) {
    int64_t last = 1;
    while (last * 2 < quickest->batch) last *= 2;
    below = fmt::format("; no batch below {} was swept (try --batch {}{})", quickest->batch,
                        last == 1 ? std::string("1") : fmt::format("1:{}:*2", last),
                        quickest->accumulation > 1 ? fmt::format(" --accumulation {}", quickest->accumulation)
                                                   : std::string());
  }
  const std::string steps = latency_steps(*quickest, b.pct);
  return none(fmt::format("no batch meets the {} ms {} budget: the smallest {} is {} ms (batch {}{}){}",
                          format_number(b.ms), b.name(), b.name(), latency_text(*b.of(*quickest), b.ms),
                          quickest->batch, steps.empty() ? steps : ", " + steps, below));
}

BatchChoice latency_slo(std::span<const Point> points, const Budget& b, const AnalysisOptions& options) {
  BatchChoice choice = latency_slo_choice(points, b, options);
  // (Where no ok point could be judged, the reason already says so.)
  if (std::any_of(points.begin(), points.end(), [&](const Point& p) { return is_ok(p) && b.of(p); }))
    choice.reason += unjudged(points, b);
  return choice;
}

bool has_joules(const Point& point) {
  return point.telemetry && point.telemetry->joules_per_sample &&
         std::isfinite(*point.telemetry->joules_per_sample) && *point.telemetry->joules_per_sample > 0.0;
}

std::optional<BatchChoice> energy_optimal(std::span<const Point> points) {
  const bool any_reading = std::any_of(points.begin(), points.end(), [](const Point& p) {
    return p.telemetry && p.telemetry->joules_per_sample.has_value();
  });
  if (!any_reading) return std::nullopt;
  const Point* chosen = nullptr;
  for (const Point& point : points) {
    if (!is_ok(point) || !has_joules(point)) continue;
    const double joules = *point.telemetry->joules_per_sample;
    if (!chosen || joules < *chosen->telemetry->joules_per_sample) chosen = &point;
  }
  if (!chosen) return none("no ok point has a joules_per_sample reading");
  return choose(*chosen,
                fmt::format("fewest joules per sample: {:.3g} J/sample at {} samples/s",
                            *chosen->telemetry->joules_per_sample, format_rate(chosen->samples_per_second)));
}

// The split of an effective-batch sweep to use. `fastest`: the highest-throughput ok split. `ties`: the other
// splits the fastest leads by under kSameThroughputPct (1%), fastest first. `chosen`: among the fastest and
// its ties, the one needing the least memory (the fastest where memory is equal or unknown): splits that run
// alike at one effective batch are told apart by what they leave free, not by noise. Not the means' noise
// margin (same_throughput_margin_pct), which at 10% step noise let a split 12.6% slower win on memory: a
// runner-up within it is said (recommend), not chosen.
struct SplitChoice {
  struct Tie {
    const Point* point;
    double lead_pct;    // how much faster the fastest is, percent
    double margin_pct;  // the margin that lead stayed within
  };
  const Point* chosen = nullptr;
  const Point* fastest = nullptr;
  std::vector<Tie> ties;
};

SplitChoice choose_split(std::span<const Point> points) {
  SplitChoice c;
  c.fastest = fastest(points, [](const Point&) { return true; });
  c.chosen = c.fastest;
  if (!c.fastest) return c;
  for (const Point& p : points) {
    if (!is_ok(p) || &p == c.fastest || p.samples_per_second <= 0) continue;
    const double lead_pct = (c.fastest->samples_per_second / p.samples_per_second - 1.0) * 100.0;
    if (lead_pct < kSameThroughputPct) c.ties.push_back({&p, lead_pct, kSameThroughputPct});
  }
  std::sort(c.ties.begin(), c.ties.end(), [](const SplitChoice::Tie& a, const SplitChoice::Tie& b) {
    return a.point->samples_per_second > b.point->samples_per_second;
  });
  if (memory_bytes(*c.fastest) == 0) return c;
  for (const SplitChoice::Tie& t : c.ties) {
    const uint64_t bytes = memory_bytes(*t.point);
    if (bytes > 0 && bytes < memory_bytes(*c.chosen)) c.chosen = t.point;
  }
  return c;
}

std::optional<BatchChoice> effective_batch_split(std::span<const Point> points,
                                                 const AnalysisOptions& options) {
  const std::optional<int64_t> effective = split_sweep(points, options);
  if (!effective) return std::nullopt;
  const Point* chosen = choose_split(points).chosen;
  if (!chosen) return none(fmt::format("no split of effective batch {} ran ok", *effective));
  return choose(*chosen, split_name(*chosen));
}

// " with 25% of its memory", when the chosen point needs less memory than the best one and both are known.
std::string memory_clause(const Point& chosen, const Point& best) {
  const uint64_t chosen_bytes = memory_bytes(chosen), best_bytes = memory_bytes(best);
  if (chosen_bytes == 0 || best_bytes == 0 || chosen_bytes >= best_bytes) return {};
  return fmt::format(" with {} of its memory",
                     format_percent(static_cast<double>(chosen_bytes) / static_cast<double>(best_bytes)));
}

const Point* point_at(const std::vector<CurvePoint>& curve, int64_t batch) {
  for (const CurvePoint& c : curve) {
    if (c.batch == batch) return c.point;
  }
  return nullptr;
}

// "saturation at 512: 96% of the best throughput (batch 2048) with 30% of its memory".
std::string saturation_why(const std::vector<CurvePoint>& curve, const Point& chosen, const Point& best,
                           double pct) {
  const auto best_on_curve =
      std::find_if(curve.begin(), curve.end(), [&](const CurvePoint& c) { return c.point == &best; });
  if (chosen.batch == best.batch)
    return fmt::format(
        "batch {} has the best throughput ({} samples/s) and no smaller batch reaches {}% of it{}",
        chosen.batch, format_rate(best.samples_per_second), format_number(pct),
        best_on_curve == curve.end() ? std::string()
                                     : near_cut_note(curve, chosen.batch, *best_on_curve, pct));
  return fmt::format(
      "batch {} is the smallest reaching {}% of the best throughput: {} of batch {}{}{}", chosen.batch,
      format_number(pct), format_share(chosen.samples_per_second / best.samples_per_second, pct), best.batch,
      memory_clause(chosen, best),
      best_on_curve == curve.end() ? std::string() : near_cut_note(curve, chosen.batch, *best_on_curve, pct));
}

struct RecommendationInputs {
  std::span<const Point> points;
  const std::vector<CurvePoint>& curve;
  const Analysis& analysis;
  KneeCall knee_call;
  bool rising_at_end;
  const AnalysisOptions& options;
};

// What lies past `batch`, the largest ok batch, when throughput still rises into it; the first that applies:
// a larger batch known to fit but not timed; one found not to fit (oom, over_limit: an error says nothing of
// memory); a sweep stopped before larger ones; else larger batches were not tried.
// A batch found not to fit far above, with the batches between never tried, is `gap` (where the edge is, is
// not known).
// A larger batch tried that failed otherwise (an error, a hang) is `failed`: not "not tried".
enum class PastTheEnd { untimed_fit, unfit, gap, failed, unfinished, untried };

struct PastEnd {
  PastTheEnd kind;
  const Point* unfit = nullptr;  // unfit, gap: the smallest batch above that did not fit; failed: that one
  std::string gap;               // gap: untried_between's note
};

PastEnd past_the_end(const RecommendationInputs& in, int64_t batch) {
  if (in.options.untimed_fit && in.options.untimed_fit->batch > batch)
    return {PastTheEnd::untimed_fit, nullptr, {}};
  const Point* unfit = nullptr;
  for (const Point& p : in.points)
    if (p.batch > batch && did_not_fit(p.status) && (!unfit || p.batch < unfit->batch)) unfit = &p;
  if (unfit) {
    // Only where nothing failed between: a batch between that failed otherwise (error) was tried.
    const Point* first = first_failure_above(in.points, batch);
    std::string gap = first == unfit ? untried_between(in.points, batch, *unfit) : std::string();
    return {gap.empty() ? PastTheEnd::unfit : PastTheEnd::gap, unfit, std::move(gap)};
  }
  if (const Point* failed = first_failure_above(in.points, batch)) return {PastTheEnd::failed, failed, {}};
  return {in.options.unfinished ? PastTheEnd::unfinished : PastTheEnd::untried, nullptr, {}};
}

// Where the saturation batch is the largest swept and throughput still rose into it, the answer only says
// where this sweep ended: "; throughput still rising at the largest batch swept: extend the sweep (run
// --batch) ...".
std::string still_rising_note(const RecommendationInputs& in, const Point& saturated) {
  if (!in.rising_at_end || saturated.batch != in.curve.back().batch) return {};
  const PastEnd past = past_the_end(in, saturated.batch);
  switch (past.kind) {
    case PastTheEnd::untimed_fit:
      return fmt::format("; throughput still rising, and batch {} fits too ({})",
                         in.options.untimed_fit->batch, in.options.untimed_fit->reason);
    case PastTheEnd::unfit:
      return "; throughput still rising, and it is the largest batch that fits";
    case PastTheEnd::gap:
      return fmt::format("; throughput still rising, and batch {} did not fit{}", past.unfit->batch,
                         past.gap);
    case PastTheEnd::failed:
      return fmt::format("; throughput still rising, and {}", failure_text(*past.unfit));
    case PastTheEnd::unfinished:
      return "; throughput still rising, and the sweep stopped before larger batches";
    case PastTheEnd::untried:
      break;
  }
  return fmt::format(
      "; throughput still rising at the largest batch swept: extend the sweep (run --batch) to find where it "
      "stops{}",
      extend_example(saturated));
}

Recommendation recommend_from_curve(const RecommendationInputs& in) {
  const Analysis& a = in.analysis;
  const Point& best = *point_at(in.curve, *a.best_throughput.batch);
  const Point& saturated = *point_at(in.curve, *a.saturation.batch);
  const double pct = in.options.saturation_pct;
  if (a.knee.batch) {
    const Point& knee = *point_at(in.curve, *a.knee.batch);
    const double share = knee.samples_per_second / best.samples_per_second;
    if (share >= pct / 100.0) {
      if (knee.batch == best.batch)
        return {knee.batch, fmt::format("knee at {}, also the best throughput ({} samples/s)", knee.batch,
                                        format_rate(best.samples_per_second))};
      return {knee.batch, fmt::format("knee at {}: {} of the best throughput (batch {}){}", knee.batch,
                                      format_share(share, pct), best.batch, memory_clause(knee, best))};
    }
    const std::string knee_note = fmt::format("the knee at {} reaches only {} of the best throughput",
                                              knee.batch, format_share(share, pct));
    return {saturated.batch,
            fmt::format("{}; {}{}", knee_note, saturation_why(in.curve, saturated, best, pct),
                        still_rising_note(in, saturated))};
  }
  if (in.knee_call == KneeCall::still_scaling) {
    const Point& largest = *point_at(in.curve, *a.max_fit.batch);
    const std::string rate = format_rate(largest.samples_per_second);
    const PastEnd past = past_the_end(in, largest.batch);
    switch (past.kind) {
      case PastTheEnd::untimed_fit:
        return {
            largest.batch,
            fmt::format("throughput still rising: use the largest timed batch ({}, {} samples/s); batch {} "
                        "fits too ({})",
                        largest.batch, rate, in.options.untimed_fit->batch, in.options.untimed_fit->reason)};
      case PastTheEnd::unfit:
        return {largest.batch, fmt::format("throughput still rising: use the largest batch that fits ({}, {} "
                                           "samples/s)",
                                           largest.batch, rate)};
      case PastTheEnd::gap:
        return {
            largest.batch,
            fmt::format("throughput still rising at the largest batch that ran ({}, {} samples/s); batch {} "
                        "did not fit{}",
                        largest.batch, rate, past.unfit->batch, past.gap)};
      case PastTheEnd::failed:
        return {largest.batch,
                fmt::format("throughput still rising at the largest batch that ran ({}, {} samples/s); {}",
                            largest.batch, rate, failure_text(*past.unfit))};
      case PastTheEnd::unfinished:
        // Kept from --resume, the largest batch may be past some the stopped run did not reach (resumed into
        // with 1..128 after a run of 64, 128): which side they lie on is not known here, so not said.
        return {largest.batch,
                fmt::format("throughput still rising at the largest batch measured ({}, {} samples/s); the "
                            "sweep stopped before {}",
                            largest.batch, rate,
                            largest.resumed_from.empty()
                                ? "larger ones"
                                : fmt::format("it finished (batch {} was kept from --resume, so the batches "
                                              "it did not reach may lie below it too; --resume it again to "
                                              "measure them)",
                                              largest.batch))};
      case PastTheEnd::untried:
        break;
    }
    return {largest.batch,
            fmt::format("throughput still rising at the largest batch swept ({}, {} samples/s); larger "
                        "batches were not tried: extend the sweep (run --batch) to find where it stops{}",
                        largest.batch, rate, extend_example(largest))};
  }
  std::string prefix = "no knee";
  if (in.knee_call == KneeCall::too_few)
    prefix = fmt::format("too few points for a knee ({} ok)", in.curve.size());
  if (in.knee_call == KneeCall::flat) {
    // The smallest batch the fastest, larger ones slower: the curve falls, which "flat" would hide.
    if (const std::string falls = falling_text(in.curve); !falls.empty())
      return {saturated.batch, fmt::format("{}: batch {}, the smallest swept, has the best throughput ({} "
                                           "samples/s)",
                                           falls, best.batch, format_rate(best.samples_per_second))};
    prefix = "throughput is flat";
  }
  return {saturated.batch, fmt::format("{}: {}{}", prefix, saturation_why(in.curve, saturated, best, pct),
                                       still_rising_note(in, saturated))};
}

// `chosen` is set to the point recommended where it is not the curve's point of that batch (a latency budget
// may pick a slower split of a batch than the curve keeps), so its cost is that point's.
Recommendation recommend(const RecommendationInputs& in, const Point*& chosen) {
  const Analysis& a = in.analysis;
  chosen = nullptr;
  if (in.curve.empty()) return {std::nullopt, no_ok_reason(in.points, in.options.unfinished)};
  if (a.serving) {
    if (a.serving->best.batch) chosen = point_at(in.curve, *a.serving->best.batch);
    return {a.serving->best.batch, a.serving->best.reason};
  }
  if (a.latency_slo) {
    const Budget b{*in.options.latency_slo_ms, in.options.latency_percentile};
    const BudgetChoice budget = within_budget(in.points, b);
    chosen = budget.chosen;
    if (!chosen) return {std::nullopt, a.latency_slo->reason};
    const std::string name = b.name();
    // The caveat the budget's own line carries, here too: a script reads recommended.why alone.
    const std::string doubt = smaller_over_budget(in.points, *chosen, b);
    if (chosen == budget.fastest)
      return {
          chosen->batch,
          fmt::format("highest throughput within the {} ms {} budget: batch {} ({} samples/s, {} {} ms{}){}",
                      format_number(b.ms), name, chosen->batch, format_rate(chosen->samples_per_second), name,
                      latency_text(*b.of(*chosen), b.ms), steps_clause(*chosen, b.pct), doubt)};
    return {
        chosen->batch,
        fmt::format("batch {} ({} samples/s, {} {} ms{}): not measurably slower than batch {}, the highest "
                    "throughput within the {} ms {} budget, which leads by {:.2f}% ({}) at a higher {}, {} "
                    "ms{}",
                    chosen->batch, format_rate(chosen->samples_per_second), name,
                    latency_text(*b.of(*chosen), b.ms), steps_clause(*chosen, b.pct), budget.fastest->batch,
                    format_number(b.ms), name, budget.lead_pct, tie_words(budget.margin_pct), name,
                    latency_text(*b.of(*budget.fastest), b.ms), doubt)};
  }
  if (a.effective_batch_split && a.effective_batch_split->batch) {
    std::size_t ran = 0;
    const Point* slowest = nullptr;
    for (const Point& point : in.points) {
      if (is_ok(point)) ++ran;
      if (is_ok(point) && (!slowest || point.samples_per_second < slowest->samples_per_second))
        slowest = &point;
    }
    const double gain = *a.effective_batch_split->samples_per_second / slowest->samples_per_second - 1.0;
    const int64_t effective = *split_sweep(in.points, in.options);
    const std::string rate = format_rate(*a.effective_batch_split->samples_per_second);
    if (ran == 1)
      return {a.effective_batch_split->batch,
              fmt::format("the only split of effective batch {} that ran: {} ({} samples/s)", effective,
                          a.effective_batch_split->reason, rate)};
    // The splits as fast as the fastest: named, so a rerun that picks another of them reads as the same
    // answer, and the one needing the least memory is chosen among them.
    const SplitChoice split = choose_split(in.points);
    const auto label = [](const Point* p) { return batch_label(p->batch, p->accumulation); };
    std::vector<std::string> others;
    for (const SplitChoice::Tie& t : split.ties)
      if (t.point != split.chosen) others.push_back(label(t.point));
    // The chosen split may be the slowest (every split within 1%): then no gain is said.
    const std::string what = gain > 0
                                 ? fmt::format("{} ({} samples/s, {} faster than the slowest split)",
                                               a.effective_batch_split->reason, rate, format_percent(gain))
                                 : fmt::format("{} ({} samples/s)", a.effective_batch_split->reason, rate);
    if (split.chosen != split.fastest) {
      const auto tie = std::find_if(split.ties.begin(), split.ties.end(),
                                    [&](const SplitChoice::Tie& t) { return t.point == split.chosen; });
      const uint64_t chosen_bytes = memory_bytes(*split.chosen), fastest_bytes = memory_bytes(*split.fastest);
      return {a.effective_batch_split->batch,
              fmt::format("least memory of the splits of effective batch {} as fast as the fastest: {}; {} "
                          "leads it by {:.2f}% ({}) with {:.1f}\u00d7 its memory{}",
                          effective, what, label(split.fastest), tie->lead_pct, tie_words(tie->margin_pct),
                          static_cast<double>(fastest_bytes) / static_cast<double>(chosen_bytes),
                          others.empty() ? std::string()
                                         : fmt::format("; {} {} as fast too", fmt::join(others, ", "),
                                                       others.size() == 1 ? "is" : "are"))};
    }
    const std::string head = fmt::format("fastest split of effective batch {}: {}", effective, what);
    std::string tie;
    const char* no_less = memory_bytes(*split.fastest) > 0 ? " (none needs less memory)" : "";
    if (split.ties.size() == 1)
      tie = fmt::format("; {} is as fast: {} leads it by {:.2f}%, {}{}", label(split.ties[0].point),
                        label(split.fastest), split.ties[0].lead_pct, tie_words(split.ties[0].margin_pct),
                        no_less);
    else if (!split.ties.empty())
      tie = fmt::format(
          "; {} are as fast: {} leads them by {:.2f}% to {:.2f}%, each under the {:g}% that "
          "counts as a difference{}",
          fmt::join(others, ", "), label(split.fastest), split.ties.front().lead_pct,
          split.ties.back().lead_pct, kSameThroughputPct, no_less);
    // The next fastest beyond 1%, where the two means' noise cannot tell it from the fastest: said, since a
    // rerun may order them otherwise (the fastest is still chosen: only under 1% does memory decide).
    const Point* next = nullptr;
    for (const Point& p : in.points) {
      if (!is_ok(p) || &p == split.fastest || p.samples_per_second <= 0 ||
          std::any_of(split.ties.begin(), split.ties.end(),
                      [&](const SplitChoice::Tie& t) { return t.point == &p; }))
        continue;
      if (!next || p.samples_per_second > next->samples_per_second) next = &p;
    }
    if (next && split.fastest->noise_pct && next->noise_pct) {
      const double margin_pct =
          same_throughput_margin_pct(mean_uncertainty(*split.fastest), mean_uncertainty(*next));
      const double lead_pct = (split.fastest->samples_per_second / next->samples_per_second - 1) * 100;
      if (lead_pct < margin_pct)
        tie += fmt::format("; {} is not measurably slower: {} leads it by {:.2f}%, {}", label(next),
                           label(split.fastest), lead_pct, tie_words(margin_pct));
    }
    return {a.effective_batch_split->batch, head + tie};
  }
  return recommend_from_curve(in);
}

void require(bool valid, std::string_view flag, std::string_view rule, double value) {
  if (!valid) throw UsageError(fmt::format("{}: must be {}, got {}", flag, rule, value));
}

}  // namespace

bool is_latency_percentile(double pct) {
  return std::isfinite(pct) && pct >= 50 && pct <= 99.99 &&
         std::fabs(pct * 100 - std::round(pct * 100)) < 1e-6;
}

std::string latency_name(double pct) {
  return fmt::format("p{:g}", pct);
}

std::optional<double> step_latency_ms(const Point& point, double pct) {
  const double summary = pct == 50   ? point.step_ms.p50
                         : pct == 90 ? point.step_ms.p90
                         : pct == 95 ? point.step_ms.p95
                         : pct == 99 ? point.step_ms.p99
                                     : 0.0;
  if (summary > 0.0) return summary;
  if (!point.samples_ms.empty()) return percentile(point.samples_ms, pct);
  return std::nullopt;
}

void validate(const AnalysisOptions& options) {
  require(std::isfinite(options.knee_sensitivity) && options.knee_sensitivity > 0.0, "--knee-sensitivity",
          "a number > 0", options.knee_sensitivity);
  require(std::isfinite(options.saturation_pct) && options.saturation_pct > 0.0 &&
              options.saturation_pct <= 100.0,
          "--saturation", "a percentage in (0, 100]", options.saturation_pct);
  if (options.latency_slo_ms)
    require(std::isfinite(*options.latency_slo_ms) && *options.latency_slo_ms > 0.0, "--latency-slo",
            "a step time in ms > 0", *options.latency_slo_ms);
  require(is_latency_percentile(options.latency_percentile), "--latency-percentile", kLatencyPercentileRule,
          options.latency_percentile);
  if (options.price_per_hour)
    require(*options.price_per_hour >= 0.0 && *options.price_per_hour <= kMaxPricePerHour, "--price-per-hour",
            "a price per device-hour from 0 to 1e9", *options.price_per_hour);
  if (options.request_rate && !is_request_rate_max(options.request_rate))
    require(std::isfinite(*options.request_rate) && *options.request_rate > 0.0, "--request-rate",
            "requests per second > 0", *options.request_rate);
  if (is_request_rate_max(options.request_rate) && !options.latency_slo_ms)
    throw UsageError(kRequestRateMaxNeedsBudget);
  require(std::isfinite(options.max_queue_delay_ms) && options.max_queue_delay_ms >= 0.0, "--max-queue-delay",
          "a hold in ms >= 0", options.max_queue_delay_ms);
}

void annotate_cost(std::vector<Point>& points, double price_per_hour) {
  require(price_per_hour >= 0.0 && price_per_hour <= kMaxPricePerHour, "--price-per-hour",
          "a price per device-hour from 0 to 1e9", price_per_hour);
  for (Point& point : points) {
    if (is_ok(point)) {
      if (!point.telemetry) point.telemetry.emplace();
      point.telemetry->cost_per_million_samples = cost_per_million(price_per_hour, point.samples_per_second);
    } else if (point.telemetry) {
      point.telemetry->cost_per_million_samples.reset();
    }
  }
}

Analysis analyze(std::vector<Point>& points, const AnalysisOptions& options) {
  validate(options);
  if (options.price_per_hour) {
    annotate_cost(points, *options.price_per_hour);
  } else {
    // Without a price no point has a cost (a report read with one, analyzed with --no-price-per-hour), and a
    // telemetry that held only the cost is none.
    for (Point& point : points) {
      if (!point.telemetry) continue;
      point.telemetry->cost_per_million_samples.reset();
      if (*point.telemetry == PointTelemetry{}) point.telemetry.reset();
    }
  }
  const std::span<const Point> view(points);
  const std::vector<CurvePoint> curve = analysis_detail::throughput_curve(view);

  Analysis analysis;
  const analysis_detail::KneeDetail knee =
      analysis_detail::find_knee_detail(view, options.knee_sensitivity, options.interim);
  analysis.knee = knee.result;
  // Splits of a fixed effective batch end at the whole batch in one step: "still scaling" there asks for no
  // larger batch (none is a split of N), only says that the fewest micro-batches are fastest.
  if (const std::optional<int64_t> n = split_sweep(view, options);
      n && knee.call == analysis_detail::KneeCall::still_scaling && !curve.empty() &&
      curve.back().batch == *n)
    analysis.knee.reason +=
        fmt::format("; {} is the whole effective batch in one micro-batch ({}x1), so no split is larger",
                    curve.back().batch, curve.back().batch);
  analysis.saturation = saturation(view, curve, options.saturation_pct, options.unfinished);
  analysis.max_fit = max_fit(view, options.untimed_fit, options.unfinished);
  analysis.best_throughput = best_throughput(view, options.unfinished);
  if (analysis.knee.batch && analysis.best_throughput.batch) {
    // A bend on a log-log curve can sit far below the plateau; the knee's line says so on its own, since
    // scripts read knee.reason without the recommendation's.
    const Point* knee_point = point_at(curve, *analysis.knee.batch);
    const Point* best = point_at(curve, *analysis.best_throughput.batch);
    if (knee_point != nullptr && best != nullptr &&
        knee_point->samples_per_second < options.saturation_pct / 100.0 * best->samples_per_second)
      analysis.knee.reason += fmt::format(
          "; throughput keeps rising past it (the knee reaches {} of the best, batch {})",
          format_share(knee_point->samples_per_second / best->samples_per_second, options.saturation_pct),
          best->batch);
  }
  if (options.latency_slo_ms)
    analysis.latency_slo =
        latency_slo(view, Budget{*options.latency_slo_ms, options.latency_percentile}, options);
  if (options.request_rate) analysis.serving = simulate_serving(view, options);
  analysis.energy_optimal = energy_optimal(view);
  analysis.effective_batch_split = effective_batch_split(view, options);
  const Point* chosen = nullptr;
  analysis.recommended = recommend({view, curve, analysis, knee.call, knee.rising_at_end, options}, chosen);
  if (analysis.recommended.batch) {
    const Point* p = chosen != nullptr ? chosen : point_at(curve, *analysis.recommended.batch);
    if (p != nullptr) analysis.recommended_accumulation = p->accumulation;
    if (options.price_per_hour && p != nullptr && p->telemetry)
      analysis.recommended_cost_per_million_samples = p->telemetry->cost_per_million_samples;
    // Serving at a request rate, the card is paid for busy or idle: a million requests cost the hours they
    // take to arrive at that rate, not those the batch's full throughput would take (which reads the card
    // as busy all the time, and can rank two cards backwards).
    if (options.price_per_hour && analysis.serving &&
        analysis.serving->best.batch == analysis.recommended.batch && analysis.serving->request_rate > 0) {
      // (At 1e-300 requests/s a million of them cost more than a double holds: unknown, not "$inf".)
      const double cost = cost_per_million(*options.price_per_hour, analysis.serving->request_rate);
      analysis.recommended_cost_per_million_samples =
          std::isfinite(cost) ? std::optional<double>(cost) : std::nullopt;
    }
    // One timed step has no spread: the answer may rest on whatever that step met. Said where a script
    // reading only `recommended` sees it, as the sweep's warning says it on the terminal.
    if (p != nullptr && p->samples_ms.size() == 1 &&
        analysis.recommended.why.find("single step") == std::string::npos)
      analysis.recommended.why += fmt::format(
          "; batch {} was timed a single step, so its noise is unknown{}",
          batch_label(p->batch, p->accumulation),
          p->stop_reason == "timeout" ? " (the --timeout cut it: raise --timeout to time more)" : "");
    // The knee chosen is not stable under the measured noise: a rerun may put it, and the answer, elsewhere
    // in its range (reruns of one flat curve answered 64, 128, 256 and 512, each said only as "knee at").
    if (analysis.knee.batch && analysis.recommended.batch == analysis.knee.batch &&
        analysis.recommended.why.starts_with("knee at") && analysis.knee.confidence == "range" &&
        analysis.knee.range_low && analysis.knee.range_high &&
        *analysis.knee.range_low < *analysis.knee.range_high)
      analysis.recommended.why += fmt::format(
          "; the knee is not stable under the measured noise (batch {} to {}), so a rerun may choose another "
          "batch in that range",
          *analysis.knee.range_low, *analysis.knee.range_high);
    // Points timed while other processes competed for the CPUs (or the hypervisor took them): that load
    // moves whole steps and differs from run to run, so the choice among them held only under it. Said where
    // a script reading only `recommended` sees it, as each point's warning says it on the terminal.
    std::vector<std::string> busy;
    for (const Point& q : view)
      if (is_ok(q) && q.host && q.host->busy()) busy.push_back(batch_label(q.batch, q.accumulation));
    if (!busy.empty() && analysis.recommended.why.find("busy host") == std::string::npos) {
      constexpr size_t kNamed = 6;
      const size_t more = busy.size() > kNamed ? busy.size() - kNamed : 0;
      busy.resize(std::min(busy.size(), kNamed));
      analysis.recommended.why += fmt::format(
          "; {} {}{} {} timed on a busy host (other processes competed for the CPUs, or the hypervisor took "
          "them), so a rerun on an idle machine may choose otherwise",
          busy.size() + more == 1 ? "batch" : "batches", fmt::join(busy, ", "),
          more > 0 ? fmt::format(" and {} more", more) : std::string(),
          busy.size() + more == 1 ? "was" : "were");
    }
  }
  // A sweep that stopped early chose among what it measured: said in the reason, which is what a script
  // reading only `recommended` sees.
  if (options.unfinished && analysis.recommended.batch &&
      analysis.recommended.why.find("the sweep stopped") == std::string::npos)
    analysis.recommended.why += "; among the batches measured before the sweep stopped";
  return analysis;
}

const Point* flat_below(std::span<const Point> points, const Point& point) {
  const Point* reference = nullptr;
  for (const Point& p : points) {
    if (!is_ok(p) || p.accumulation != point.accumulation || p.batch * 2 > point.batch) continue;
    if (!reference || p.samples_per_second > reference->samples_per_second) reference = &p;
  }
  if (reference && point.samples_per_second < (1.0 + kFlatBelowGain) * reference->samples_per_second)
    return reference;
  return nullptr;
}

bool budget_edge_narrow(int64_t lo, int64_t hi) {
  return hi - lo <= std::max<int64_t>(lo >= 8 ? 8 : 1, lo / 16);
}

}  // namespace bsw
