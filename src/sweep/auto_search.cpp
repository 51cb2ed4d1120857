// --batch auto: find the knee region and the largest batch that fits with few measured points.
//
// 1. Growth. Measure 1, 2, 4, ... until a batch does not fit (its plan is over the memory budget: recorded
//    `over_limit` without prepare; or prepare runs out of memory: `oom`) or the 2^24 cap. Once throughput
//    has plateaued (each of the last two doublings gained less than kAutoPlateauGain, 3%), larger batches
//    are only probed (prepare, then release; no timed steps) while the doubling goes on: the fit edge still
//    matters (it is the max-fit answer) but timing a flat curve teaches nothing. A point that fails for
//    another reason (non-finite loss, backend error) ends the growth.
// 2. Fit edge. Between the largest batch that fit and the smallest that did not, bisect with prepare-only
//    probes until the two are one multiple-of-8 step apart from batch 64 up (1 apart below 64), picking
//    multiples of 8 (tensor-core friendly) where they fall between. Where the budget is plan-based,
//    max_fit_batch() names the edge outright: the search jumps there, and batches the plan rejects are not
//    prepared; the growth's over_limit point and the edge's smallest over-budget batch are recorded
//    (over_limit), so max_fit's reason names the edge. Then the largest batch that fits is measured, and the
//    smallest real oom recorded, both as refinement points, so the report shows the two sides of the edge.
// 3. Knee. find_knee() on the ok points so far; when it names a knee K, measure the geometric midpoints
//    between K and its ok neighbours below and above (rounded to a multiple of 8 from 8 up) when they fit
//    and are new. Refinement points carry `refinement = true`.
// 4. Latency budget (--latency-slo). Where the step time at its percentile (--latency-percentile, p99 by
//    default) crosses the budget between two timed batches (the largest within it and the next one above),
//    bisect between them with timed points, to a multiple of 8, until the two are within max(8, 1/16) of each
//    other (about 6% from batch 128 up). The best batch under the budget is then known to a few percent
//    rather than to a power of two; the points are refinement points. Triton's model_analyzer searches the
//    same way, each step a separate server launch. Not where throughput is flat below the crossing
//    (flat_below: the analysis picks the fastest batch within the budget, or a lower-p99 one within noise of
//    it, and a batch between them would gain < 3%), nor past 12 points. A p99 that is not monotone in the
//    batch (noise, a kernel change) is bisected where the largest fitting batch lies.
//
// What other tools need for a roofline whose knee is at 256 and that runs out of memory above 2048 (the case
// tests/unit/sweep/auto_search_test.cpp pins):
//   - Lightning BatchSizeFinder, mode="power", from its default init_val 2: trials 2, 4, ..., 4096 (12 trials
//   of steps_per_trial = 3
//     steps, no statistics), answer 2048, the largest power of two that fits; no knee, and a real edge at,
//     say, 3000 is still reported as 2048.
//   - mode="binsearch": the same 12 trials, then bisection between 2048 and 4096 until high - low <= 1:
//     about 11 more (23 in all, each running training steps) for the exact edge; still no knee.
//   - DeepSpeed autotuning (autotuner.py, get_min_max_micro_batch_size, per ZeRO stage): a launch at the
//     minimum micro-batch, up to three at 1.05x / 1x / 0.95x of a memory-model estimate of the maximum, a
//     binary search between them when those fail (~log2(max) launches, stopping early on a throughput
//     plateau), then num_tuning_micro_batch_sizes (default 3) launches between max/2 and max; every one a
//     separate profiled process launch, repeated per ZeRO stage; it optimises one throughput number.
//   Growth also stops timing once the next doubling could not finish --warmup and two timed steps inside
//   --timeout (its step time extrapolated linearly); then the edge is probed, not timed, and a largest fit
//   too slow to time is reported with a warning instead of stalling the sweep. A batch that fits only part
//   of --min-samples is timed, cut short: holding growth to --min-samples stopped it after batch 1 wherever a
//   step took 50 ms and a --latency-slo asked for 100 samples (p99), recommending batch 1 where batch 32 ran
//   30 times as fast within the budget.
//   - here: 11 timed growth points (1..1024: the plateau after the knee stops timing), prepare-only probes
//     at 2048 (fits) and 4096 (oom, recorded), 8 prepare-only bisection probes down to 2048 | 2056, then 3
//     timed refinement points (2048 for max-fit, 184 and 360 around the knee): 14 timed points with full
//     statistics, the knee region, and the fit edge (exact below 64, to a multiple of 8 above).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>

#include "analysis/curve.hpp"
#include "batchsweep/analysis.hpp"
#include "batchsweep/sweep.hpp"
#include "sweep/point_runner.hpp"

namespace bsw::sweep_detail {
namespace {

using analysis_detail::latency_text;

constexpr int kKneeRefinementPoints = 2;
// The latency-budget bisection: at most this many timed points (a gap of 2^24 needs fewer at 1/16).
constexpr int kSloRefinementLimit = 12;

// Stop bisecting the fit edge when lo and hi are this close: one multiple-of-8 step from 64 up (at
// most 12.5%), exact below, where a step of 8 would be most of the batch (an edge at 12 reported as 8, 50%
// low: a large model on a small GPU) and the three probes more cost little.
int64_t edge_tolerance(int64_t lo) {
  return lo >= 64 ? 8 : 1;
}

// A batch strictly between lo and hi (hi - lo >= 2): the middle, moved to a multiple of 8 when that stays
// inside.
int64_t bisect(int64_t lo, int64_t hi) {
  const int64_t middle = lo + (hi - lo) / 2;
  if (middle < 8) return middle;
  int64_t rounded = (middle + 4) / 8 * 8;
  if (rounded <= lo) rounded = (lo / 8 + 1) * 8;
  return rounded < hi ? rounded : middle;
}

// sqrt(a * b) rounded to the nearest multiple of 8 from 8 up, else to the nearest integer.
int64_t geometric_midpoint(int64_t a, int64_t b) {
  const double middle = std::sqrt(static_cast<double>(a) * static_cast<double>(b));
  if (middle >= 8) return static_cast<int64_t>(std::llround(middle / 8.0)) * 8;
  return static_cast<int64_t>(std::llround(middle));
}

// The throughput gain of `to` over `from`, as a fraction.
double gain(const Point& from, const Point& to) {
  return to.samples_per_second / from.samples_per_second - 1.0;
}

struct Edge {
  int64_t largest_fit = 0;            // 0: not even batch 1 fits
  bool largest_fit_measured = false;  // a timed point exists for it
  std::optional<int64_t> smallest_unfit;
  Fit unfit_kind = Fit::oom;
  std::string unfit_reason;
};

class AutoSearch {
 public:
  AutoSearch(PointRunner& runner)
      : runner_(runner),
        accumulation_(runner.settings().accumulation),
        cap_(max_micro_batch(runner.settings().accumulation)) {}

  // Returns false when interrupted.
  bool grow() {
    // A first estimate for the progress line: doublings up to the plan's fit edge, then the refinements.
    const int64_t top = std::min(runner_.plan_max_fit(accumulation_).value_or(cap_), cap_);
    runner_.set_planned_total(static_cast<int>(std::log2(static_cast<double>(top))) + 2 + 1 +
                                  kKneeRefinementPoints + (runner_.settings().latency_slo_ms ? 4 : 0),
                              true);
    // Samples per step, batch x accumulation, are capped at 2^24 as --batch's are.
    for (int64_t batch = 1; batch <= cap_; batch *= 2) {
      if (plateau_at_) {
        const auto probe = runner_.probe(batch, accumulation_);
        if (!probe) return false;
        ++growth_probes_;
        if (probe->fit == Fit::fits) {
          edge_.largest_fit = batch;
          edge_.largest_fit_measured = false;
          continue;
        }
        runner_.record_unfit(batch, accumulation_, status_of(probe->fit), probe->reason, false);
        if (probe->fit == Fit::error) {
          growth_end_ = fmt::format("stopped at batch {}: {}", batch, probe->reason);
          return true;
        }
        note_unfit(batch, probe->fit, probe->reason);
        return true;
      }
      const auto point = runner_.measure(batch, accumulation_, false);
      if (!point) return false;
      switch (point->status) {
        case PointStatus::ok:
          edge_.largest_fit = batch;
          edge_.largest_fit_measured = true;
          growth_.push_back(*point);
          check_plateau();
          // Growth times the next doubling unless this one's steps already outlasted --timeout (its warm-up
          // and two timed steps did not fit), or one step of the next would, bounded linearly: below a
          // device's knee a doubled batch steps no slower, so a bound on the whole point (5 steps) would
          // stop timing at batch 1 wherever a step takes half a second.
          if (!plateau_at_ && timed_short(*point)) {
            slow_at_ = plateau_at_ = batch;
            slow_measured_ = true;
          } else if (!plateau_at_ && too_slow_to_time(2 * batch)) {
            slow_at_ = plateau_at_ = batch;
          }
          break;
        case PointStatus::oom:
          note_unfit(batch, Fit::oom, point->reason);
          return true;
        case PointStatus::over_limit:
          note_unfit(batch, Fit::over_limit, point->reason);
          return true;
        case PointStatus::error:
          growth_end_ = fmt::format("stopped at batch {}: {}", batch, point->reason);
          return true;
      }
    }
    reached_cap_ = true;
    growth_end_ =
        accumulation_ > 1
            ? fmt::format(
                  "reached the cap of {} (2^24) samples per step, batch {} x accumulation {}, without "
                  "running out of memory",
                  kMaxBatch, cap_, accumulation_)
            : fmt::format("reached the cap of {} (2^24) without running out of memory", kMaxBatch);
    return true;
  }

  // Bisects the fit edge with probes, then measures the largest batch that fits. Returns false when
  // interrupted.
  bool refine_edge() {
    if (reached_cap_ && edge_.largest_fit > 0) return cap_fits();
    if (!edge_.smallest_unfit || edge_.largest_fit == 0) return true;
    int64_t lo = edge_.largest_fit;
    int64_t hi = *edge_.smallest_unfit;
    Fit hi_kind = edge_.unfit_kind;
    std::string hi_reason = edge_.unfit_reason;
    bool lo_measured = edge_.largest_fit_measured;

    // The plan knows where the budget ends: no need to prepare anything above it.
    int64_t jump = 0;  // the first batch to try when the plan names the edge; 0: plain bisection
    const auto plan_edge = runner_.plan_max_fit(accumulation_);
    if (plan_edge && *plan_edge > lo && *plan_edge < hi) {
      hi = *plan_edge + 1;
      hi_kind = Fit::over_limit;
      hi_reason = runner_.plan_over_budget(hi, accumulation_).value_or(hi_reason);
      jump = *plan_edge >= 8 && *plan_edge / 8 * 8 > lo ? *plan_edge / 8 * 8 : *plan_edge;
    }
    while (hi - lo > edge_tolerance(lo)) {
      const int64_t batch = jump > lo && jump < hi ? jump : bisect(lo, hi);
      jump = 0;
      if (auto over = runner_.plan_over_budget(batch, accumulation_)) {
        hi = batch;  // the plan says no: not prepared (the edge's is recorded below)
        hi_kind = Fit::over_limit;
        hi_reason = std::move(*over);
        continue;
      }
      const auto probe = runner_.probe(batch, accumulation_);
      if (!probe) return false;
      ++edge_probes_;
      if (probe->fit == Fit::fits) {
        lo = batch;
        lo_measured = false;
      } else if (probe->fit == Fit::error) {
        edge_note_ = fmt::format(" (bisection stopped at batch {}: {})", batch, probe->reason);
        break;
      } else {
        hi = batch;
        hi_kind = probe->fit;
        hi_reason = probe->reason;
      }
    }
    // The smallest batch found not to fit is a point, so max_fit's reason names the edge, not a batch far
    // above it (an over-budget plan, like the doubling's, is never prepared: over_limit).
    if (hi != *edge_.smallest_unfit && (hi_kind == Fit::oom || hi_kind == Fit::over_limit))
      runner_.record_unfit(hi, accumulation_, status_of(hi_kind), hi_reason, true);
    const std::string unfit =
        fmt::format("{} at {}", hi_kind == Fit::oom ? "oom" : "over the memory budget", hi);
    // The plan put the edge between the multiple of 8 the bisection stopped at and the over-budget batch:
    // the batches between fit the plan but are not prepared or timed. Said, up to the plan's largest fit, so
    // max fit does not read as if the edge were unknown.
    const int64_t plan_fit =  // 0: the plan does not name a larger fit
        plan_edge && hi == *plan_edge + 1 && hi_kind == Fit::over_limit && lo < *plan_edge &&
                edge_note_.empty() && !runner_.over_memory_now(*plan_edge, accumulation_)
            ? *plan_edge
            : 0;
    edge_summary_ = plan_fit ? fmt::format("largest fit {} by the plan (the search stopped at {}), {}{}",
                                           plan_fit, lo, unfit, edge_note_)
                             : fmt::format("largest fit {}, {}{}", lo, unfit, edge_note_);
    if (!lo_measured && !runner_.find(lo, accumulation_)) {
      if (cannot_time(lo)) {
        // Too slow to time at the multiple of 8, so too slow above it: the largest fit is named untimed.
        const int64_t largest = plan_fit ? plan_fit : lo;
        const std::string why =
            fmt::format("not timed: {}; raise --timeout to time it", untimed_why(largest));
        // Said of the largest fit, not of the batch that did not fit after it.
        edge_summary_ = plan_fit
                            ? fmt::format("largest fit {} by the plan (the search stopped at {}; {}), {}{}",
                                          plan_fit, lo, why, unfit, edge_note_)
                            : fmt::format("largest fit {} ({}), {}{}", lo, why, unfit, edge_note_);
        runner_.set_untimed_fit(UntimedFit{
            largest, fmt::format("{}{}; {}", plan_fit ? "by the plan, which is " : "", unfit, why)});
        runner_.warn(fmt::format("batch {} fits{} but was not timed: {}; raise --timeout to time it", largest,
                                 plan_fit ? " by the plan" : "", untimed_why(largest)));
      } else if (!time_fit(lo, plan_fit ? plan_fit : lo,
                           fmt::format("{}{}", plan_fit ? "by the plan, which is " : "", unfit))) {
        return false;
      }
    }
    const Point* timed = runner_.find(lo, accumulation_);
    if (plan_fit && timed != nullptr && timed->status == PointStatus::ok)
      runner_.set_untimed_fit(UntimedFit{
          plan_fit, fmt::format("by the plan, which is {}; not timed: near the edge the search times "
                                "multiples of 8",
                                unfit)});
    largest_fit_ = lo;
    return true;
  }

  // Measures the geometric midpoints around the knee. Returns false when interrupted.
  bool refine_knee() {
    const KneeResult knee = find_knee(runner_.points(), runner_.settings().knee_sensitivity);
    if (!knee.batch) {
      knee_summary_ = fmt::format("no knee to refine ({})", knee.reason);
      return true;
    }
    std::vector<int64_t> ok_batches;
    for (const Point& p : runner_.points())
      if (p.status == PointStatus::ok && p.accumulation == accumulation_) ok_batches.push_back(p.batch);
    const auto at = std::find(ok_batches.begin(), ok_batches.end(), *knee.batch);
    std::vector<int64_t> targets;
    if (at != ok_batches.end()) {
      if (at != ok_batches.begin()) targets.push_back(geometric_midpoint(*(at - 1), *at));
      if (at + 1 != ok_batches.end()) targets.push_back(geometric_midpoint(*at, *(at + 1)));
    }
    std::vector<int64_t> measured;
    for (const int64_t batch : targets) {
      const bool inside = batch > 0 && (largest_fit_ == 0 || batch <= largest_fit_);
      if (!inside || runner_.find(batch, accumulation_)) continue;
      const auto point = runner_.measure(batch, accumulation_, true);
      if (!point) return false;
      measured.push_back(batch);
    }
    knee_summary_ =
        measured.empty()
            ? fmt::format("knee at {} before refinement, its neighbours already measured", *knee.batch)
            : fmt::format("knee at {} before refinement, points added at {}", *knee.batch,
                          fmt::join(measured, ", "));
    return true;
  }

  // Bisects the batches where the budget's step-time percentile (p99 by default) crosses --latency-slo.
  // Returns false when interrupted.
  bool refine_slo() {
    const std::optional<double> budget = runner_.settings().latency_slo_ms;
    if (!budget) return true;
    const double pct = runner_.settings().latency_percentile;
    const std::string name = latency_name(pct);
    const std::string ms =
        pct == 99 ? fmt::format("{:g} ms", *budget) : fmt::format("{:g} ms {}", *budget, name);
    const auto latency = [pct](const Point* p) { return step_latency_ms(*p, pct).value_or(0.0); };
    std::vector<int64_t> measured;
    std::string why;
    for (;;) {
      // The ok timed points of this accumulation, ascending.
      std::vector<const Point*> timed;
      for (const Point& p : runner_.points())
        if (p.status == PointStatus::ok && p.accumulation == accumulation_ && latency(&p) > 0)
          timed.push_back(&p);
      std::sort(timed.begin(), timed.end(),
                [](const Point* a, const Point* b) { return a->batch < b->batch; });
      std::size_t lo = timed.size();  // the largest batch whose latency fits the budget
      for (std::size_t i = 0; i < timed.size(); ++i)
        if (latency(timed[i]) <= *budget) lo = i;
      if (timed.empty()) {
        why = "no timed point";
        break;
      }
      if (lo == timed.size()) {
        const Point* quickest =
            *std::min_element(timed.begin(), timed.end(),
                              [&](const Point* x, const Point* y) { return latency(x) < latency(y); });
        why = fmt::format("no timed batch's {} is within it (the smallest: {} ms, batch {})", name,
                          latency_text(latency(quickest), *budget), quickest->batch);
        break;
      }
      if (lo + 1 == timed.size()) {
        why = fmt::format("the largest timed batch, {}, is within it ({} {} ms)", timed[lo]->batch, name,
                          latency_text(latency(timed[lo]), *budget));
        break;
      }
      const int64_t a = timed[lo]->batch;
      const int64_t b = timed[lo + 1]->batch;
      // With the digits that keep each on its side of the budget: not "1.7 ms" for 1.704 over 1.7.
      why = fmt::format("{} crosses it between {} ({} ms) and {} ({} ms)", name, a,
                        latency_text(latency(timed[lo]), *budget), b,
                        latency_text(latency(timed[lo + 1]), *budget));
      if (budget_edge_narrow(a, b)) break;
      // The analysis picks the fastest batch within the budget (or one within noise of it at a lower p99):
      // where throughput is flat up to a
      // (flat_below), a batch between a and b would gain less than that too, so timing them would change
      // little.
      if (const Point* reference = flat_below(runner_.points(), *timed[lo])) {
        why += fmt::format(
            "; throughput is flat below it (batch {} gains < {:.0f}% over batch {}), so a batch "
            "between them would gain less than that too",
            a, kFlatBelowGain * 100.0, reference->batch);
        break;
      }
      if (static_cast<int>(measured.size()) >= kSloRefinementLimit) {
        why += fmt::format(" (stopped after {} points)", kSloRefinementLimit);
        break;
      }
      const int64_t batch = bisect(a, b);
      if (const Point* recorded = runner_.find(batch, accumulation_)) {
        why += fmt::format(" (batch {} between them is already recorded: {})", batch,
                           to_string(recorded->status));
        break;
      }
      const auto point = runner_.measure(batch, accumulation_, true);
      if (!point) return false;
      measured.push_back(batch);
      if (point->status != PointStatus::ok) {
        why += fmt::format(" (batch {} between them: {})", batch, to_string(point->status));
        break;
      }
    }
    slo_summary_ = measured.empty() ? fmt::format("latency budget {}: {}", ms, why)
                                    : fmt::format("latency budget {}: {}, refined at {}", ms, why,
                                                  fmt::join(measured, ", "));
    return true;
  }

  [[nodiscard]] std::string summary(bool interrupted) const {
    const int probes = growth_probes_ + edge_probes_;
    std::string text = fmt::format("auto: {} point{} timed{}, {} prepare-only probe{}; growth ",
                                   runner_.measured_points(), runner_.measured_points() == 1 ? "" : "s",
                                   runner_.resumed_points() > 0
                                       ? fmt::format(" and {} taken from --resume", runner_.resumed_points())
                                       : std::string(),
                                   probes, probes == 1 ? "" : "s");
    if (slow_at_ && slow_measured_)
      text += fmt::format(
          "timed up to {} (its warm-up and two timed steps did not fit --timeout {} s, so a larger batch's "
          "would not), then ",
          *slow_at_, runner_.settings().stopping.timeout_s);
    else if (slow_at_)
      text += fmt::format("timed up to {} (one step of a larger batch could outlast --timeout {} s), then ",
                          *slow_at_, runner_.settings().stopping.timeout_s);
    else if (plateau_at_)
      text += fmt::format("timed up to {} (plateau: the last two doublings each gained < {:.0f}%), then ",
                          *plateau_at_, kAutoPlateauGain * 100.0);
    text += growth_end_.empty() ? "interrupted" : growth_end_;
    if (!edge_summary_.empty()) text += "; fit edge: " + edge_summary_;
    if (!knee_summary_.empty()) text += "; " + knee_summary_;
    if (!slo_summary_.empty()) text += "; " + slo_summary_;
    if (interrupted && !growth_end_.empty()) text += "; interrupted";
    return text;
  }

 private:
  // Growth reached the cap without running out of memory, past the plateau only preparing: the cap fits,
  // and is the max-fit answer. Timed where a step fits --timeout, as the bisected edge's largest fit is;
  // else named untimed (settings.untimed_fit, a warning), so max fit does not read as the largest batch
  // timed. Returns false when interrupted.
  bool cap_fits() {
    // With accumulation the cap (2^24 / accumulation) is no power of two: the doubling stopped below it.
    // The cap itself is asked once; where it does not fit, the doubling's last batch is the answer known
    // (the edge between is not bisected: both are within a factor of 2 of 2^24 samples a step).
    if (edge_.largest_fit < cap_) {
      if (const auto over = runner_.plan_over_budget(cap_, accumulation_); !over) {
        const auto probe = runner_.probe(cap_, accumulation_);
        if (!probe) return false;
        ++edge_probes_;
        if (probe->fit == Fit::fits) {
          edge_.largest_fit = cap_;
          edge_.largest_fit_measured = false;
        }
      }
    }
    const int64_t largest = edge_.largest_fit;
    largest_fit_ = largest;
    if (edge_.largest_fit_measured || runner_.find(largest, accumulation_)) return true;
    if (!cannot_time(largest))
      return time_fit(largest, largest, "growth reached it with no batch found not to fit");
    const std::string why = fmt::format("not timed: {}; raise --timeout to time it", untimed_why(largest));
    const bool at_cap = largest == cap_;
    edge_summary_ = fmt::format("largest fit {}{} ({})", largest, at_cap ? ", the cap" : "", why);
    runner_.set_untimed_fit(UntimedFit{
        largest, fmt::format("{}, which growth reached with no batch found not to fit; {}",
                             at_cap ? std::string("the cap of 2^24 samples a step")
                                    : fmt::format("the largest batch growth tried below the cap of {}", cap_),
                             why)});
    runner_.warn(fmt::format("batch {} fits but was not timed: {}; raise --timeout to time it", largest,
                             untimed_why(largest)));
    return true;
  }

  void note_unfit(int64_t batch, Fit kind, const std::string& reason) {
    edge_.smallest_unfit = batch;
    edge_.unfit_kind = kind;
    edge_.unfit_reason = reason;
    growth_end_ =
        fmt::format("doubled to {} ({})", batch, kind == Fit::oom ? "oom" : "over the memory budget");
  }

  // Step time of `batch` extrapolated linearly from the largest timed ok batch (step time grows at most
  // linearly with the batch once the device is busy).
  [[nodiscard]] double predicted_step_s(int64_t batch) const {
    if (growth_.empty()) return 0;
    const Point& last = growth_.back();
    return last.step_ms.mean / 1000.0 * static_cast<double>(batch) / static_cast<double>(last.batch);
  }
  // The prediction is the last timed step scaled linearly: a bound, since a larger batch uses the device
  // at least as well (a 2 ms step at batch 1 bounds batch 2048's by 4.1 s, where a roofline's takes 16 ms).
  [[nodiscard]] std::string predicted_step_text(int64_t batch) const {
    if (growth_.empty()) return "longer than --timeout allows";
    return fmt::format("up to about {:.3g} s (batch {}'s {:.3g} ms step, scaled linearly)",
                       predicted_step_s(batch), growth_.back().batch, growth_.back().step_ms.mean);
  }

  // True when one step of `batch`, bounded linearly by the last timed one, could outlast the per-point
  // timeout: a step cannot be cut short, so growth stops timing and the fit edge is found without timing it.
  [[nodiscard]] bool too_slow_to_time(int64_t batch) const {
    return predicted_step_s(batch) > runner_.settings().stopping.timeout_s;
  }
  // Whether `batch`, larger than every timed one, is not timed: growth's own steps outlasted --timeout, or
  // one of its steps could.
  [[nodiscard]] bool cannot_time(int64_t batch) const { return slow_measured_ || too_slow_to_time(batch); }
  // Times `timed`, the largest batch found to fit. Interrupted while timing it, the search's finding is kept
  // as an untimed fit (settings.untimed_fit) of `named` (`timed`, or the plan's larger fit above it), so max
  // fit does not read as if the edge were never found; --resume times it. Returns false when interrupted.
  bool time_fit(int64_t timed, int64_t named, const std::string& found) {
    if (runner_.measure(timed, accumulation_, true)) return true;
    runner_.set_untimed_fit(UntimedFit{
        named,
        fmt::format("{}; not timed: the sweep was stopped before its steps were timed (--resume times it)",
                    found)});
    return false;
  }

  // Why, in words: "batch 128's steps did not fit --timeout 5 s" or "a step would take up to about ...".
  [[nodiscard]] std::string untimed_why(int64_t batch) const {
    if (slow_measured_ && slow_at_)
      return fmt::format(
          "batch {}'s warm-up and two timed steps did not fit --timeout {} s, and a larger "
          "batch's steps are no shorter",
          *slow_at_, runner_.settings().stopping.timeout_s);
    return fmt::format("a step would take {}, more than --timeout {} s allows", predicted_step_text(batch),
                       runner_.settings().stopping.timeout_s);
  }

  void check_plateau() {
    const std::size_t n = growth_.size();
    if (n < 3) return;
    const Point& a = growth_[n - 3];
    const Point& b = growth_[n - 2];
    const Point& c = growth_[n - 1];
    if (b.batch != 2 * a.batch || c.batch != 2 * b.batch) return;
    if (gain(a, b) < kAutoPlateauGain && gain(b, c) < kAutoPlateauGain) plateau_at_ = c.batch;
  }

  PointRunner& runner_;
  int64_t accumulation_;
  std::vector<Point> growth_;  // ok growth points, ascending
  std::optional<int64_t> plateau_at_;
  std::optional<int64_t> slow_at_;  // growth stopped timing here: the next batch would not fit the timeout
  bool slow_measured_ = false;      // ... because this batch's own steps did not fit it (else the bound)
  const int64_t cap_;               // the largest batch: 2^24 samples per step over the accumulation
  Edge edge_;
  int64_t largest_fit_ = 0;   // after the edge refinement; 0 when unknown
  bool reached_cap_ = false;  // growth doubled past the cap with every batch fitting
  int growth_probes_ = 0;
  int edge_probes_ = 0;
  std::string growth_end_, edge_summary_, edge_note_, knee_summary_, slo_summary_;
};

}  // namespace

void run_auto_search(PointRunner& runner, std::string& summary) {
  AutoSearch search(runner);
  const bool finished = search.grow() && search.refine_edge() && search.refine_knee() && search.refine_slo();
  summary = search.summary(!finished);
}

}  // namespace bsw::sweep_detail
