// --effective-batch N: the splits micro-batch x accumulation = N (every divisor of N as the accumulation, or
// for N with more than kEffectiveBatchAllSplits divisors a ladder of them, each accumulation at least 1.4x
// the one before), measured from the largest micro-batch down, stopping once smaller micro-batches keep
// getting slower. Where the first ladder split that fits follows one that did not, the splits the ladder
// skipped between them are probed (prepare only) from the largest micro-batch down, and the first that fits
// is measured too: the largest micro-batch that fits is found, not just the next ladder step under the edge.
//
// Stop rule: after at least one split has fit (status ok), stop when two successive ok splits were each more
// than kEffectiveBatchStopSlowdown (5%) slower than the ok split measured just before them. A smaller
// micro-batch only adds per-micro-batch overhead once it is below the knee, so after two such drops the
// fastest split is behind us; a single drop may be noise or a kernel-selection step. Splits that do not fit
// (oom, over_limit) do not count either way: the largest micro-batches usually do not fit, which is why the
// sweep starts there.
//
// Too slow to time: every split's step processes N samples, in `accumulation` micro-batches, so a step can
// take at most accumulation / accumulation' times the last ok split's (per-micro-batch time no longer than at
// the larger micro-batch). Where that bound, over --warmup and two timed steps, exceeds --timeout, the
// split is not timed (as --batch auto leaves a batch too slow to time): a smaller micro-batch is seldom
// faster than a larger one that fits (though caches can make it so), and 1 x N of a large N can take hours a
// step. Before any split has run there is no basis, and the first
// split that fits is timed whatever it costs.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "batchsweep/errors.hpp"
#include "batchsweep/sweep.hpp"
#include "sweep/point_runner.hpp"

namespace bsw {

std::vector<BatchSplit> effective_batch_splits(int64_t effective_batch) {
  if (effective_batch < 1 || effective_batch > kMaxBatch)
    throw UsageError(
        fmt::format("--effective-batch: must be in 1..{} (2^24), got {}", kMaxBatch, effective_batch));
  // Every divisor, ascending. (Powers of two alone left 4x3 out of 12, and for odd N only Nx1: a 7 that did
  // not fit as 7x1 was never tried as 1x7.)
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d * d <= effective_batch; ++d) {
    if (effective_batch % d != 0) continue;
    divisors.push_back(d);
    if (d * d != effective_batch) divisors.push_back(effective_batch / d);
  }
  std::sort(divisors.begin(), divisors.end());
  // Highly composite N (720720 has 240 divisors): a ladder, each accumulation at least kLadder times the one
  // before, always ending at micro-batch 1: about twice the splits of a power of two near N (720720: 36,
  // 2^19: 20), which the stop rule usually cuts short.
  constexpr double kLadder = 1.4;
  const bool ladder = divisors.size() > kEffectiveBatchAllSplits;
  std::vector<BatchSplit> splits;
  for (const int64_t accumulation : divisors) {
    if (ladder && !splits.empty() && accumulation != effective_batch &&
        static_cast<double>(accumulation) < kLadder * static_cast<double>(splits.back().accumulation))
      continue;
    splits.push_back(BatchSplit{effective_batch / accumulation, accumulation});
  }
  return splits;
}

namespace sweep_detail {
namespace {

// Where N's divisors leave a wide gap at the memory edge (97 is 97x1, which did not fit, or 1x97), an
// effective batch near N (within 5% or 1 of it, at most 1024 away) with micro-batches in the gap gives the
// sweep a choice there: name the one with the most (the nearest of those), up to the plan's edge where the
// plan knows it.
std::string nearby_split_hint(int64_t n, int64_t fit, int64_t unfit, std::optional<int64_t> plan_edge) {
  if (unfit < 4 * fit) return {};
  const int64_t cap = plan_edge && *plan_edge >= fit && *plan_edge < unfit ? *plan_edge : unfit - 1;
  if (cap < 2 * fit) return {};
  // The divisors of m in [2 fit, cap], descending.
  const auto in_gap = [&](int64_t m) {
    std::vector<int64_t> out;
    for (int64_t d = 1; d * d <= m; ++d) {
      if (m % d != 0) continue;
      for (const int64_t v : {d, m / d})
        if (v >= 2 * fit && v <= cap) out.push_back(v);
    }
    std::sort(out.rbegin(), out.rend());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  const int64_t reach = std::clamp<int64_t>(n / 20, 1, 1024);
  int64_t best_n = 0;
  std::vector<int64_t> best;
  for (int64_t distance = 1; distance <= reach; ++distance) {
    for (const int64_t m : {n - distance, n + distance}) {
      if (m < 1 || m > kMaxBatch) continue;
      std::vector<int64_t> micro = in_gap(m);
      if (micro.size() > best.size()) {
        best = std::move(micro);
        best_n = m;
      }
    }
  }
  if (best.empty()) return {};
  const std::string splits = best.size() == 1
                                 ? fmt::format("{}x{}", best.front(), best_n / best.front())
                                 : fmt::format("{} splits, {}x{} down to {}x{}", best.size(), best.front(),
                                               best_n / best.front(), best.back(), best_n / best.back());
  return fmt::format("; {} has no micro-batch between {} (fit) and {} (did not): --effective-batch {} has {}",
                     n, fit, unfit, best_n, splits);
}

}  // namespace

void run_effective_batch(PointRunner& runner, int64_t effective_batch, std::string& summary) {
  const std::vector<BatchSplit> splits = effective_batch_splits(effective_batch);
  int64_t unfit_before = 0;  // the accumulation of the ladder split tried last, where it did not fit (else 0)
  std::vector<std::string> refined;  // splits between ladder steps, measured after the edge's probe
  runner.set_planned_total(static_cast<int>(splits.size()),
                           /*estimate=*/splits.size() > 1);  // may stop early

  std::optional<double> previous_ok_throughput;
  // The last ok split's mean step time (s) and accumulation: the basis of the too-slow bound.
  struct OkSplit {
    double step_s;
    int64_t accumulation;
    bool timed_short;  // stopped at --timeout before its second timed step
    std::string label;
  };
  std::optional<OkSplit> last_ok;
  int slower_in_a_row = 0;
  std::size_t done = 0;
  std::vector<std::string> unfit;   // over the memory budget or out of memory: tried, not timed
  std::vector<std::string> failed;  // measured and failed otherwise (an error)
  std::string stopped_early;
  std::vector<std::string> untimed;
  double untimed_bound_s = 0;
  std::string untimed_after;  // the split whose own steps outlasted --timeout, where that left the rest out
  const StoppingSettings& stopping = runner.settings().stopping;
  // What was measured and left out: at the end, and where a signal stops the sweep (as the auto search says).
  std::size_t probed = 0;  // splits between the ladder's steps that were probed (prepare only)
  const auto write_summary = [&](bool interrupted) {
    const std::string taken =
        runner.resumed_points() > 0 ? fmt::format(" ({} taken from --resume)", runner.resumed_points()) : "";
    std::string not_timed;
    if (!untimed.empty()) {
      // The first split left out, and its own bound: the later ones' are looser (more micro-batches).
      const std::string why =
          untimed_after.empty()
              ? fmt::format("from {} on, one step could take up to {:.3g} s", untimed.front(),
                            untimed_bound_s)
              : fmt::format(
                    "batch {}'s warm-up and two timed steps did not fit, and a smaller micro-batch's steps "
                    "are no shorter",
                    untimed_after);
      not_timed = fmt::format("; not timed, too slow for --timeout {:g} s ({}): {}", stopping.timeout_s, why,
                              fmt::join(untimed, ", "));
      runner.warn(fmt::format(
          "--effective-batch {}: {} split{} not timed, too slow for --timeout {:g} s ({}); a "
          "smaller micro-batch is seldom faster than a larger one that fits, but only timing "
          "says (raise --timeout to time them)",
          effective_batch, untimed.size(), untimed.size() == 1 ? "" : "s", stopping.timeout_s, why));
    }
    const std::string unfit_text =
        unfit.empty() ? std::string() : fmt::format("; did not fit: {}", fmt::join(unfit, ", "));
    const std::string failed_text =
        failed.empty() ? std::string() : fmt::format("; failed: {}", fmt::join(failed, ", "));
    const std::string between = refined.empty()
                                    ? std::string()
                                    : fmt::format("; between the ladder's steps, the largest that fits: {}",
                                                  fmt::join(refined, ", "));
    // The largest micro-batch that ran ok, and the smallest above it that did not fit.
    int64_t largest_ok = 0;
    for (const Point& p : runner.points())
      if (p.status == PointStatus::ok) largest_ok = std::max(largest_ok, p.batch);
    int64_t smallest_unfit = 0;
    for (const Point& p : runner.points())
      if (did_not_fit(p.status) && p.batch > largest_ok && (smallest_unfit == 0 || p.batch < smallest_unfit))
        smallest_unfit = p.batch;
    // A split between the two that failed otherwise (an error) leaves the gap's claim unproven: no hint.
    const bool errored_between =
        std::any_of(runner.points().begin(), runner.points().end(), [&](const Point& p) {
          return p.status == PointStatus::error && p.batch > largest_ok && p.batch < smallest_unfit;
        });
    const std::string nearby =
        largest_ok > 0 && smallest_unfit > 0 && !errored_between
            ? nearby_split_hint(effective_batch, largest_ok, smallest_unfit, runner.plan_max_fit(1))
            : std::string();
    summary = fmt::format(
        "effective batch {}: {} of {} splits (micro-batch x accumulation) measured{}{}{}{}{}{}{}{}",
        effective_batch, done, splits.size() + probed, taken, unfit_text, failed_text, between, stopped_early,
        not_timed, nearby, interrupted ? "; interrupted before the rest" : "");
  };
  for (const BatchSplit& split : splits) {
    if (last_ok && last_ok->step_s > 0) {
      const double bound_s = last_ok->step_s * static_cast<double>(split.accumulation) /
                             static_cast<double>(last_ok->accumulation);
      // Left out only where the last timed split's own steps outlasted --timeout (its warm-up and two timed
      // steps, the fewest that give a noise estimate, did not fit: this split's steps are no shorter), or
      // where one step, bounded by the last's scaled by the micro-batches, could: a split --timeout cuts
      // short is still timed, as a plain point is, and says so (stop_reason timeout). A bound on the whole
      // point's steps skipped every split after one of 0.5 s, though on a busy device the splits tie.
      if ((last_ok->timed_short || bound_s > stopping.timeout_s) &&
          !runner.find(split.micro_batch, split.accumulation)) {
        if (untimed.empty()) {
          untimed_bound_s = bound_s;
          if (last_ok->timed_short) untimed_after = last_ok->label;
        }
        untimed.push_back(batch_label(split.micro_batch, split.accumulation));
        continue;
      }
    }
    const auto point = runner.measure(split.micro_batch, split.accumulation, false);
    if (!point) return write_summary(true);
    if (did_not_fit(point->status)) {
      unfit.push_back(fmt::format("{} ({})", batch_label(split.micro_batch, split.accumulation),
                                  to_string(point->status)));
      unfit_before = split.accumulation;
      continue;
    }
    // The first split to fit, after one that did not: the ladder may have skipped larger micro-batches that
    // fit too. Probe them from the largest down; measure the first that fits.
    if (unfit_before > 0 && !last_ok && point->status == PointStatus::ok) {
      for (int64_t accumulation = unfit_before + 1; accumulation < split.accumulation; ++accumulation) {
        if (effective_batch % accumulation != 0) continue;
        const int64_t micro = effective_batch / accumulation;
        if (runner.find(micro, accumulation)) break;  // taken from --resume: the edge is known there
        const auto fit = runner.probe(micro, accumulation);
        if (!fit) return write_summary(true);
        ++probed;
        if (fit->fit != Fit::fits) {
          runner.record_unfit(micro, accumulation, status_of(fit->fit), fit->reason, true);
          unfit.push_back(
              fmt::format("{} ({})", batch_label(micro, accumulation), to_string(status_of(fit->fit))));
          if (fit->fit == Fit::error) break;  // not a memory answer: the edge is not here
          continue;
        }
        const auto larger = runner.measure(micro, accumulation, true);
        if (!larger) return write_summary(true);
        refined.push_back(batch_label(micro, accumulation));
        if (larger->status == PointStatus::ok) ++done;
        break;
      }
    }
    unfit_before = 0;
    ++done;
    if (point->status != PointStatus::ok) {
      // Measured, and failed otherwise than out of memory (an error): named, as the splits that did not fit
      // are, so the summary does not read as if every measured split ran.
      failed.push_back(fmt::format("{} ({})", batch_label(split.micro_batch, split.accumulation),
                                   to_string(point->status)));
      continue;
    }
    last_ok = OkSplit{point->step_ms.mean / 1000.0, point->accumulation, timed_short(*point),
                      batch_label(point->batch, point->accumulation)};
    const double throughput = point->samples_per_second;
    if (previous_ok_throughput &&
        throughput < *previous_ok_throughput * (1.0 - kEffectiveBatchStopSlowdown)) {
      ++slower_in_a_row;
    } else {
      slower_in_a_row = 0;
    }
    previous_ok_throughput = throughput;
    if (slower_in_a_row >= 2 && &split != &splits.back()) {  // a split was left: an early stop
      stopped_early = fmt::format(
          "; stopped after micro-batch {}: two successive smaller micro-batches were each more than {:.0f}% "
          "slower",
          split.micro_batch, kEffectiveBatchStopSlowdown * 100.0);
      break;
    }
  }
  write_summary(false);
}

}  // namespace sweep_detail
}  // namespace bsw
