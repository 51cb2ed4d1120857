// Compare: set each run against the baseline batch by batch (Mann-Whitney U and Welch's t on the raw step
// times plus a minimum effect on throughput), a geometric-mean row, and what each run's analysis chose;
// console, markdown and JSON.
#include "batchsweep/compare.hpp"
#include "batchsweep/analysis.hpp"
#include "batchsweep/json_keys.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "batchsweep/cost.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_diff.hpp"
#include "batchsweep/stats.hpp"
#include "report/format.hpp"
#include "report/json_pieces.hpp"
#include "report/view.hpp"

namespace bsw {

bool cuda_settings_apply(const nlohmann::json& settings_a, const nlohmann::json& settings_b) {
  const auto backend = [](const nlohmann::json& settings) {
    return settings.is_object() && settings.contains("backend") && settings.at("backend").is_string()
               ? settings.at("backend").get<std::string>()
               : std::string();
  };
  const std::string a = backend(settings_a), b = backend(settings_b);
  return a.empty() || b.empty() || a == "cuda" || b == "cuda" || a != b;
}

bool incomplete(const RunSummary& run) {
  return run.state == "interrupted" || run.state == "in_progress";
}

std::string incomplete_why(const RunSummary& run) {
  // Stopped in a later --rounds round: every batch has its first round; the rounds that balance drift are
  // what it lacks.
  if (run.first_round_finished)
    return fmt::format(
        "{} during a later --rounds round: every batch has its first round, and some lack the "
        "later ones, which balance drift between them",
        run.state == "interrupted" ? "interrupted by a signal (state interrupted)"
                                   : "stopped (state in_progress)");
  if (run.state == "interrupted")
    return "interrupted by a signal (state interrupted), its batches after that were never run";
  return "written while its sweep ran (state in_progress): the run stopped before it finished (killed, or "
         "failed) or is still running, and its later batches are not in it";
}

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::same:
      return "same";
    case Verdict::faster:
      return "faster";
    case Verdict::slower:
      return "slower";
    case Verdict::not_comparable:
      return "not comparable";
  }
  return "not comparable";
}

namespace {

namespace rf = report_format;
using Key = std::pair<int64_t, int64_t>;  // (batch, accumulation)

std::string run_name(const CompareOptions& options, size_t i) {
  return i < options.names.size() && !options.names[i].empty() ? options.names[i]
                                                               : fmt::format("run {}", i + 1);
}

// A, B, C, ... for the column headers; R27, R28, ... past Z.
std::string letter(size_t i) {
  return run_letter(i);
}

bool usable_samples(const std::vector<double>& samples) {
  return samples.size() >= 2 &&
         std::all_of(samples.begin(), samples.end(), [](double v) { return std::isfinite(v); });
}

// Welch-Satterthwaite: the degrees of freedom of a sum of independent variances, each with its own.
double combined_degrees(const std::vector<MeanStepError>& parts) {
  double total = 0, spread = 0;
  for (const MeanStepError& e : parts) {
    const double v = e.se * e.se;
    total += v;
    if (e.df > 0) spread += v * v / e.df;
  }
  return spread > 0 ? total * total / spread : std::numeric_limits<double>::infinity();
}

// The two-sided p of a change `log_change` (in log, as the relative standard errors are) against the
// errors' combined standard error: Student's t on their combined degrees of freedom (Welch-Satterthwaite;
// capped at 1e6, where t is the normal). Twice the standard error, a z-test near 5%, called one command's
// reruns changed 5-10% of the time where steps drift together; t on 18 degrees of freedom whatever the
// samples, 3-7% of geometric means of one or two rows of 2 or 3 steps.
double change_p(double log_change, const std::vector<MeanStepError>& parts) {
  double total = 0;
  for (const MeanStepError& e : parts) total += e.se * e.se;
  const double change = std::fabs(log_change);
  if (!(total > 0)) return change > 0 ? 0.0 : 1.0;
  return student_t_two_sided_p(change / std::sqrt(total), std::min(combined_degrees(parts), 1e6));
}

bool ran(const Point& p) {
  return p.status == PointStatus::ok && std::isfinite(p.samples_per_second) && p.samples_per_second > 0;
}

// Ran while other processes competed for its CPUs or the hypervisor took them: a verdict there may be the
// machine's load (the cell's busy_host, and the note naming such batches).
bool busy_host(const Point& p) {
  return ran(p) && p.host && p.host->busy();
}

// The point a run has for `key`: its first ok point with that key, else its first point with that key.
const Point* find_point(const Report& report, const Key& key) {
  const Point* found = nullptr;
  for (const auto& p : report.points) {
    if (p.batch != key.first || p.accumulation != key.second) continue;
    if (p.status == PointStatus::ok) return &p;
    if (!found) found = &p;
  }
  return found;
}

Verdict direction(double ratio) {
  return ratio > 1 ? Verdict::faster : Verdict::slower;
}

bool beyond_effect(double ratio, const CompareOptions& options) {
  return std::fabs(ratio - 1) * 100 > options.min_effect_pct;
}

// The smallest two-sided p the test can give on these values: every step of one side longer than every step
// of the other. The same values keep the same sizes and ties, so the test takes the same path (exact, or
// the normal approximation, whose floor with 2 samples on a side is 0.014 however many the other has).
double smallest_p(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> pooled(a);
  pooled.insert(pooled.end(), b.begin(), b.end());
  std::sort(pooled.begin(), pooled.end());
  const std::span<const double> low(pooled.data(), b.size());
  const std::span<const double> high(pooled.data() + b.size(), a.size());
  return mann_whitney_u(high, low).p_value;
}

// Steps a run needs, per step above its percentile (100 at p99), for "same" to say the tail held: five above
// the pooled p99 a side, 500 steps, where a stall every 25th step shows at p = 1e-4 or below.
constexpr int64_t kTailStepsPerSample = 5;

// A p-value as its family's adjustment scales it (Holm: the adjusted p over the unadjusted, for this row's
// test), capped at 1.
double scaled(double p, double scale) {
  return std::min(1.0, p * scale);
}

// The tail's ratio and verdict at percentile `pct` (CompareDelta's tail fields), for two points that ran.
// `scale` is the tail's family adjustment (1 before it is known).
void judge_tail(CompareDelta& d, const Point& baseline, const Point& run, double pct,
                const CompareOptions& options, double scale) {
  const std::optional<double> base = step_latency_ms(baseline, pct), here = step_latency_ms(run, pct);
  if (!base || !here || !(*base > 0)) return;
  d.tail_ratio = *here / *base;
  if (baseline.samples_ms.empty() || run.samples_ms.empty()) return;  // not comparable: no samples
  d.tail_verdict = Verdict::same;
  // One step (a step longer than --timeout) says nothing of a percentile.
  if (!usable_samples(baseline.samples_ms) || !usable_samples(run.samples_ms)) {
    d.tail_few_steps = true;
    return;
  }
  if (*d.tail_ratio == 1) return;  // the percentile did not move (steps all equal, a coarse timer)
  const double half_alpha = options.alpha / 2;
  const QuantileTestResult test = quantile_test(baseline.samples_ms, run.samples_ms, pct, half_alpha);
  // Judged in the direction the percentile moved: the run with the longer tail needs the steps to show it.
  const bool longer = *d.tail_ratio > 1;
  d.tail_p_value = scaled(longer ? test.p_longer : test.p_shorter, scale);
  // The exact test takes each step as independent; where steps drift together their slow ones come in runs,
  // and the counts above vary more than it allows (AR(1), phi 0.9: 53% of 10-batch A/A inference gates
  // failed on a tail). Where a run's counts show it, the change must also hold with each run's count as
  // variable as its runs of consecutive steps show (tail_drift_p_value, in the row's p for the adjustment).
  if (test.inflation_a > 1 || test.inflation_b > 1)
    d.tail_drift_p_value = scaled(longer ? test.p_longer_drift : test.p_shorter_drift, scale);
  if (*d.tail_p_value < half_alpha) {
    if (d.tail_drift_p_value && *d.tail_drift_p_value >= half_alpha)
      d.tail_within_drift_noise = true;
    else if (beyond_effect(*d.tail_ratio, options))
      d.tail_verdict = longer ? Verdict::slower : Verdict::faster;
  } else if (!(longer ? test.longer_resolvable : test.shorter_resolvable)) {
    d.tail_few_steps = true;
    d.tail_p_value.reset();
  } else if (std::min(baseline.samples_ms.size(), run.samples_ms.size()) <
             static_cast<size_t>(kTailStepsPerSample * latency_budget_min_samples(pct))) {
    // Some split could have shown a change, but with so few steps above the percentile only a tail longer
    // in nearly every one of them would: a stall in one step of 25 cannot show in 100 (p = 0.0098), so
    // "same" there is not "the tail held".
    d.tail_few_steps = true;
  }
}

// One run against the baseline at a batch. `p_scale` and `tail_scale` are the row's Holm adjustments in its
// run's families (throughput, tail): every p the verdicts compare with alpha is scaled by them, so a row
// changes only where its adjusted p does (1: unadjusted, as the first pass computes them).
// The two runs' round_noise (run --rounds), baseline first: the means' errors hold them.
struct RunNoises {
  std::optional<RoundNoise> baseline, run;
};

CompareDelta delta(const Point& baseline, const Point& run, double tail_pct, const CompareOptions& options,
                   const RunNoises& noises = {}, double p_scale = 1, double tail_scale = 1) {
  CompareDelta d;
  if (!ran(baseline) || !ran(run)) {
    d.ratio = std::nan("");
    return d;
  }
  judge_tail(d, baseline, run, tail_pct, options, tail_scale);
  d.ratio = run.samples_per_second / baseline.samples_per_second;
  const bool effect = beyond_effect(d.ratio, options);
  const bool samples = usable_samples(baseline.samples_ms) && usable_samples(run.samples_ms);
  // The rank test and the mean's test share alpha (each at alpha / 2), so noise alone calls a change at most
  // alpha of the time.
  const double half_alpha = options.alpha / 2;
  if (samples && smallest_p(run.samples_ms, baseline.samples_ms) >= half_alpha) {
    // Three samples a side can never give p below 0.1: the rank test could only ever say "same". The means'
    // test decides, at alpha (the only test there): Student's t with the two runs' spread pooled (one
    // command's runs on one machine share it), on na + nb - 2 degrees of freedom, so two steps against fifty
    // borrow the fifty's spread, where Welch's t would rest on one degree of freedom. (Twice the means'
    // combined standard error, a z-test near 5% that ignores the degrees of freedom, called 6-10% of one
    // command's reruns changed.)
    d.few_samples = true;
    const auto [run_min, run_max] = std::minmax_element(run.samples_ms.begin(), run.samples_ms.end());
    const auto [base_min, base_max] =
        std::minmax_element(baseline.samples_ms.begin(), baseline.samples_ms.end());
    d.tied_samples = *run_min == *run_max && *base_min == *base_max && *run_min == *base_min;
    const StudentResult pooled = student_t_test(run.samples_ms, baseline.samples_ms);
    d.mean_p_value = scaled(pooled.p_value, p_scale);
    const bool mean_agrees = direction(d.ratio) == Verdict::slower ? pooled.t > 0 : pooled.t < 0;
    d.verdict = effect && mean_agrees && *d.mean_p_value < options.alpha ? direction(d.ratio) : Verdict::same;
    // With rounds, the change must also clear their spread, as below.
    if (d.verdict != Verdict::same && (noises.run || noises.baseline)) {
      const std::optional<MeanStepError> run_error = mean_step_error(run, noises.run),
                                         base_error = mean_step_error(baseline, noises.baseline);
      if (run_error && base_error && (run_error->drift || base_error->drift)) {
        d.drift_p_value = scaled(change_p(std::log(d.ratio), {*run_error, *base_error}), p_scale);
        if (*d.drift_p_value >= options.alpha) {
          d.verdict = Verdict::same;
          d.within_drift_noise = true;
        }
      }
    }
  } else if (samples) {
    // a = the run, b = the baseline: z > 0 when the run's steps tend to take longer.
    const MannWhitneyResult test = mann_whitney_u(run.samples_ms, baseline.samples_ms);
    d.from_samples = true;
    d.p_value = scaled(test.p_value, p_scale);
    const Verdict dir = direction(d.ratio);
    const bool agrees = dir == Verdict::slower ? test.z > 0 : test.z < 0;
    const bool shifted = *d.p_value < half_alpha && agrees;
    // The throughput compared is the mean's: Welch's t-test on the mean step times counts too (a few much
    // slower steps move the mean, and the throughput, but barely the ranks).
    const WelchResult welch = welch_t_test(run.samples_ms, baseline.samples_ms);
    d.mean_p_value = scaled(welch.p_value, p_scale);
    const bool mean_agrees = dir == Verdict::slower ? welch.t > 0 : welch.t < 0;
    const bool mean_moved = *d.mean_p_value < half_alpha && mean_agrees;
    d.verdict = effect && (shifted || mean_moved) ? dir : Verdict::same;
    d.from_mean = d.verdict != Verdict::same && !shifted;
    // The ranks moved significantly the other way from the mean (most steps faster, a few much slower, or
    // the reverse). Where the mean's change is within its noise neither direction is the change, and the
    // shown p is the rank test's; where it is beyond, the mean's is: throughput, the total time of the steps,
    // moved with it (a stall every 20th step is a regression however many steps got faster), and the text
    // says the ranks went the other way.
    d.median_and_mean_disagree = effect && *d.p_value < half_alpha && !agrees;
    d.under_min_effect = d.verdict == Verdict::same && !effect && (shifted || mean_moved);
    if (d.under_min_effect) d.under_min_effect_p = shifted ? d.p_value : d.mean_p_value;
    // Both tests take each step as independent. Steps that drift together (a busy machine, clocks, heat)
    // make them sure of a shift that a rerun would not reproduce: two runs of one command on a loaded CPU
    // read "47% slower, p=1e-74" at a point whose own noise was 150%, and steps correlated from one to the
    // next (AR(1), phi 0.5) failed 19% of 10-batch A/A gates, though each point met its noise target (which
    // is the steps' spread, not how well their mean is known). So where either point's steps drift (its
    // standard error from the batch means) or it stopped short, a change must also clear the two means'
    // combined noise at the row's level: its p (drift_p_value) is in the row's p for the batches' adjustment.
    // With rounds, the spread between them is in these errors (mean_step_error), and a change must clear it:
    // a round is a rerun, and two runs differ as their rounds do.
    const MeanStepError run_error = *mean_step_error(run, noises.run),
                        base_error = *mean_step_error(baseline, noises.baseline);
    const bool short_point = stopped_short(run.stop_reason) || stopped_short(baseline.stop_reason);
    if (short_point || run_error.drift || base_error.drift) {
      d.drift_p_value = scaled(change_p(std::log(d.ratio), {run_error, base_error}), p_scale);
      if (d.verdict != Verdict::same && *d.drift_p_value >= options.alpha) {
        d.verdict = Verdict::same;
        d.from_mean = false;
        d.median_and_mean_disagree = false;  // the means' noise decides, whichever way the ranks went
        d.within_drift_noise = true;
        d.short_within_noise = short_point;
      }
    }
  } else if ((run.samples_ms.size() == 1 || baseline.samples_ms.size() == 1) && !run.samples_ms.empty() &&
             !baseline.samples_ms.empty()) {
    // One timed step (a step longer than --timeout) says nothing of how much the next would differ: two runs
    // of one command on a busy CPU are apart by whatever their single steps met. One against one calls no
    // change. One against the other run's steps is a change only beyond every one of them (and the effect),
    // and beyond their spread: the prediction test for one more step from their distribution, t = (one -
    // mean) / (stddev * sqrt(1 + 1/n)) on n - 1 degrees of freedom, at alpha (the only test). Beyond every
    // one of n alone happens by chance 2 / (n + 1) of the time: two runs of one command, 1 step against 2,
    // failed a gate two times in three. A step 20x longer than all of the baseline's is a regression; one
    // just past the slowest of a few is not.
    d.one_step = true;
    d.verdict = Verdict::same;
    const bool run_one = run.samples_ms.size() == 1;
    const std::vector<double>& many = run_one ? baseline.samples_ms : run.samples_ms;
    if (usable_samples(many)) {
      const double one = run_one ? run.samples_ms.front() : baseline.samples_ms.front();
      const StepStats stats = summarize(many);
      const double n = static_cast<double>(many.size());
      // Every step of the many alike (a deterministic step): one that differs lies beyond their spread, as
      // the few-samples test takes it (an infinite t).
      d.mean_p_value = scaled(
          stats.stddev > 0
              ? student_t_two_sided_p((one - stats.mean) / (stats.stddev * std::sqrt(1 + 1 / n)), n - 1)
          : one == stats.mean ? 1.0
                              : 0.0,
          p_scale);
      const auto [low, high] = std::minmax_element(many.begin(), many.end());
      // Slower: the run's steps are longer than the baseline's, every one of them.
      const bool slower = run_one ? one > *high : *low > one;
      const bool faster = run_one ? one < *low : *high < one;
      if (effect && *d.mean_p_value < options.alpha &&
          ((slower && direction(d.ratio) == Verdict::slower) ||
           (faster && direction(d.ratio) == Verdict::faster)))
        d.verdict = direction(d.ratio);
    }
  } else {
    d.verdict = effect ? direction(d.ratio) : Verdict::same;
  }
  return d;
}

// The p a row's throughput verdict rests on, as one test at alpha: the rank test and the mean's each at
// alpha / 2 (twice the smaller p); the few-samples or one-step test alone. nullopt where no test ran.
// Where the means' noise is checked too (drift_p_value), the larger of the two: a change needs both.
std::optional<double> family_p(const CompareDelta& d) {
  if (d.from_samples && d.p_value && d.mean_p_value)
    return std::max(std::min(1.0, 2 * std::min(*d.p_value, *d.mean_p_value)), d.drift_p_value.value_or(0.0));
  if ((d.few_samples || d.one_step) && d.mean_p_value) return *d.mean_p_value;
  return std::nullopt;
}

// A comparison asks, per run, one question of every batch (did its throughput change?) and another of every
// tail: ten batches at alpha each would call noise a change somewhere in one comparison of ten. So each run's
// tests are two families, each held to alpha by Holm's step-down adjustment (stats.hpp), and every row whose
// adjusted p differs from its own is judged again with its p's scaled to the adjusted ones: noise alone
// calls any batch of a comparison changed at most alpha of the time (its throughput; its tail likewise).
// `self[r][run]`: the row's point in that run is the baseline's own measurement (run --resume took it, and
// its steps are the baseline's), a comparison of a point with itself that no test should be counted for.
void adjust_for_batches(std::vector<CompareRow>& rows, const std::vector<std::vector<const Point*>>& points,
                        const std::vector<std::vector<bool>>& self, double tail_pct,
                        const CompareOptions& options, const std::vector<std::optional<RoundNoise>>& noises) {
  if (rows.empty()) return;
  for (size_t run = 1; run < rows.front().runs.size(); ++run) {
    // Each family's rows and their unadjusted p's (a tail's one-sided p at alpha / 2 is a test at alpha).
    std::vector<size_t> tested, tail_tested;
    std::vector<double> p, tail_p;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (self[r][run]) continue;
      const CompareDelta& d = rows[r].deltas[run - 1];
      if (const std::optional<double> q = family_p(d)) {
        tested.push_back(r);
        p.push_back(*q);
      }
      if (d.tail_p_value) {
        tail_tested.push_back(r);
        tail_p.push_back(std::min(1.0, 2 * std::max(*d.tail_p_value, d.tail_drift_p_value.value_or(0.0))));
      }
    }
    const std::vector<double> adjusted = holm_adjust(p), tail_adjusted = holm_adjust(tail_p);
    std::vector<double> scale(rows.size(), 1), tail_scale(rows.size(), 1);
    // Where the unadjusted p is 0 (underflow), so is the adjusted one: no scale to find or need.
    for (size_t k = 0; k < tested.size(); ++k)
      if (p[k] > 0) scale[tested[k]] = adjusted[k] / p[k];
    for (size_t k = 0; k < tail_tested.size(); ++k)
      if (tail_p[k] > 0) tail_scale[tail_tested[k]] = tail_adjusted[k] / tail_p[k];
    for (size_t r = 0; r < rows.size(); ++r) {
      CompareDelta& d = rows[r].deltas[run - 1];
      if (scale[r] != 1 || tail_scale[r] != 1)
        d = delta(*points[r][0], *points[r][run], tail_pct, options, {noises[0], noises[run]}, scale[r],
                  tail_scale[r]);
    }
    for (size_t r : tested) rows[r].deltas[run - 1].p_adjusted_for = tested.size();
    for (size_t r : tail_tested) rows[r].deltas[run - 1].tail_p_adjusted_for = tail_tested.size();
  }
}

RunSummary summarize_run(const Report& report, std::string name) {
  const report_view::Title t = report_view::title(report);
  RunSummary s;
  s.name = std::move(name);
  s.model = t.model;
  s.overrides = report_view::model_overrides(report);
  s.device = printable_text(report.device.name);  // quoted in notes and titles: shown, not sent
  s.backend = report.device.backend;
  if (const auto card = report.settings.find("memory_limit_card");
      card != report.settings.end() && card->is_string()) {
    s.memory_limit = printable_text(card->get<std::string>()) + "'s";
  } else if (const auto bytes = report.settings.find("memory_limit_bytes");
             bytes != report.settings.end() && bytes->is_number_unsigned()) {
    s.memory_limit = rf::human_bytes(bytes->get<uint64_t>());
  }
  {
    const std::string& source = report.device.peak_flops_source;
    s.mfu_peak = source.starts_with("calibrated")   ? "a measured GEMM rate (devices --calibrate)"
                 : source.starts_with("spec sheet") ? "the spec sheet's dense peak"
                 : source == "script"               ? "a script's peak"
                                                    : "";
  }
  if (report.device.details.is_object() && report.device.details.contains("threads") &&
      report.device.details["threads"].is_number_integer())
    s.threads = std::to_string(report.device.details["threads"].get<int64_t>());
  s.mode = t.mode;
  s.precision = t.precision;
  s.split = t.split();
  s.checkpointing = t.checkpointing;
  s.checkpoint_blocks = t.checkpoint_blocks;
  s.state = report.state;
  s.first_round_finished = report_view::later_round_begun(report);
  s.knee = report.analysis.knee;
  s.max_fit = report.analysis.max_fit;
  if (const auto it = report.settings.find("untimed_fit"); it != report.settings.end() && it->is_object()) {
    const auto batch = it->find("batch");
    if (batch != it->end() && batch->is_number_integer()) s.untimed_fit = batch->get<int64_t>();
  }
  s.best = report.analysis.best_throughput;
  s.recommended = report.analysis.recommended;
  s.recommended_accumulation = report.analysis.recommended_accumulation;
  s.recommended_cost_per_million_samples = report.analysis.recommended_cost_per_million_samples;
  s.price_per_hour = report_view::price_per_hour(report);
  s.latency_slo_ms = report_view::latency_budget_ms(report);
  s.latency_percentile = report_view::budget_percentile(report);
  if (s.latency_slo_ms) s.latency_slo = report.analysis.latency_slo;
  s.serving = report.analysis.serving;
  return s;
}

bool same_budget(const RunSummary& a, const RunSummary& b) {
  return a.latency_slo_ms && b.latency_slo_ms && *a.latency_slo_ms == *b.latency_slo_ms &&
         a.latency_percentile == b.latency_percentile;
}

// A point's step time at `pct`, where it ran.
std::optional<double> latency_if_ran(const Point& p, double pct) {
  return p.status == PointStatus::ok ? step_latency_ms(p, pct) : std::nullopt;
}

// A run against the baseline under their latency budgets: where the budgets are one (milliseconds and
// percentile), an answer that differs (no
// batch within it, or another throughput or batch); where they differ or one run has none, that they were
// not compared. Empty where the answers agree or neither run had a budget.
std::optional<std::string> budget_change(const RunSummary& base, const RunSummary& run,
                                         const std::string& name, double min_effect_pct) {
  if (!base.latency_slo_ms && !run.latency_slo_ms) return std::nullopt;
  if (!same_budget(base, run)) {
    const auto text = [](const RunSummary& r) {
      return r.latency_slo_ms
                 ? fmt::format("{:g} ms {}", *r.latency_slo_ms, latency_name(r.latency_percentile))
                 : std::string("none");
    };
    // Where A has one, --fail-on-regression still holds the run to it (find_regressions): said, or a PR
    // reader sees "not compared" beside a gate that failed on it.
    return fmt::format(
        "latency budgets differ (A {}, {} {}): the answers under them are not compared{}", text(base), name,
        text(run), base.latency_slo_ms ? " (--fail-on-regression still holds every run to A's budget)" : "");
  }
  if (!base.latency_slo || !run.latency_slo) return std::nullopt;
  const BatchChoice &a = *base.latency_slo, &b = *run.latency_slo;
  const std::string pct = latency_name(base.latency_percentile);
  const std::string budget = fmt::format("under the {:g} ms {} budget", *base.latency_slo_ms, pct);
  const auto p99 = [&](const BatchChoice& c) {
    return c.latency_ms ? fmt::format(" ({} {:.4g} ms)", pct, *c.latency_ms) : std::string();
  };
  if (a.batch && a.samples_per_second && !b.batch)
    return fmt::format("{}: {} has no batch within it ({}); A served {} samples/s at batch {}{}", budget,
                       name, b.reason, rf::human_rate(*a.samples_per_second), *a.batch, p99(a));
  if (!a.batch && b.batch && b.samples_per_second)
    return fmt::format("{}: A has no batch within it ({}); {} serves {} samples/s at batch {}{}", budget,
                       a.reason, name, rf::human_rate(*b.samples_per_second), *b.batch, p99(b));
  if (!a.batch || !b.batch || !a.samples_per_second || !b.samples_per_second) return std::nullopt;
  const double ratio = *b.samples_per_second / *a.samples_per_second;
  if (std::abs(ratio - 1) * 100 <= min_effect_pct && *a.batch == *b.batch) return std::nullopt;
  return fmt::format("{}: {} serves {} samples/s at batch {}{}, A {} at batch {}{} ({}/A {}\u00d7)", budget,
                     name, rf::human_rate(*b.samples_per_second), *b.batch, p99(b),
                     rf::human_rate(*a.samples_per_second), *a.batch, p99(a), name, rf::fixed(ratio, 3));
}

// Serving at a request rate, each run at its own best max batch: a server's latency on each card. Where the
// runs serve at different rates (or only some at one), said, with how to set one rate for all.
std::optional<std::string> serving_change(const RunSummary& base, const RunSummary& run,
                                          const std::string& name) {
  if (!base.serving && !run.serving) return std::nullopt;
  const auto setting = [](const Serving& s, bool percentile) {
    // A searched rate says so: the most within its budget, or none found (the last rate tried).
    std::string out =
        !s.most_within_budget ? fmt::format("{} requests/s", rf::sig3(s.request_rate))
        : s.best.batch ? fmt::format("{} requests/s (the most within its budget)", rf::sig3(s.request_rate))
                       : std::string("no rate within its budget");
    if (s.max_queue_delay_ms > 0) out += fmt::format(", max queue delay {:g} ms", s.max_queue_delay_ms);
    if (percentile) out += " (" + latency_name(s.latency_percentile) + ")";
    return out;
  };
  constexpr std::string_view kOneRate =
      "compare --request-rate PER_S simulates every run at one rate, with one --max-queue-delay (0 unless "
      "given)";
  if (!base.serving || !run.serving)
    return fmt::format("serving not compared: only {} has a request rate ({}) ({})",
                       base.serving ? std::string("A") : name,
                       setting(base.serving ? *base.serving : *run.serving, false), kOneRate);
  const Serving &a = *base.serving, &b = *run.serving;
  // --request-rate max in both, under one budget: the most requests/s each serves within it.
  if (const auto ratio = serving_rate_ratio(base, run)) {
    const auto at = [](const Serving& sv) {
      return sv.best.batch
                 ? fmt::format("{} requests/s at max batch {}", rf::sig3(sv.request_rate), *sv.best.batch)
                 : std::string("none");
    };
    // Where both have a price: a million requests at the most each serves cost its hours at that rate.
    std::string cost;
    if (base.price_per_hour && run.price_per_hour && a.request_rate > 0 && b.request_rate > 0) {
      const double cost_a = cost_per_million(*base.price_per_hour, a.request_rate);
      const double cost_b = cost_per_million(*run.price_per_hour, b.request_rate);
      if (std::isfinite(cost_a) && std::isfinite(cost_b) && cost_a > 0 && cost_b > 0)
        cost = fmt::format("; a million requests there cost {} ${:.4g}, A ${:.4g} ({}/A {}\u00d7)", name,
                           cost_b, cost_a, name, rf::fixed(cost_b / cost_a, 3));
    }
    return fmt::format(
        "serving within the {:g} ms {} budget{}: {}/A {}\u00d7 the requests/s (the most found "
        "to {:g}%: {} {}, A {}){}",
        *base.latency_slo_ms, latency_name(a.latency_percentile),
        a.max_queue_delay_ms > 0 ? fmt::format(", max queue delay {:g} ms", a.max_queue_delay_ms)
                                 : std::string(),
        name, rf::fixed(*ratio, 3), kServingRateTolerance * 100, name, at(b), at(a), cost);
  }
  if (a.most_within_budget && b.most_within_budget && a.best.batch && b.best.batch) {
    // What differs, and what aligns it.
    std::vector<std::string> differ;
    if (!same_budget(base, run))
      differ.push_back(fmt::format(
          "the budgets (A {}, {} {})",
          base.latency_slo_ms ? fmt::format("{:g} ms", *base.latency_slo_ms) : std::string("none"), name,
          run.latency_slo_ms ? fmt::format("{:g} ms", *run.latency_slo_ms) : std::string("none")));
    if (a.latency_percentile != b.latency_percentile)
      differ.push_back(fmt::format("the percentiles (A {}, {} {})", latency_name(a.latency_percentile), name,
                                   latency_name(b.latency_percentile)));
    if (a.max_queue_delay_ms != b.max_queue_delay_ms)
      differ.push_back(
          fmt::format("the holds (A {:g} ms, {} {:g} ms)", a.max_queue_delay_ms, name, b.max_queue_delay_ms));
    return fmt::format(
        "serving not compared: the most requests/s within each run's budget, and {} differ: analyze each "
        "with --request-rate max at one --latency-slo, --latency-percentile and --max-queue-delay first "
        "(compare sets the rate and the hold, not the budget or the percentile)",
        fmt::join(differ, " and "));
  }
  if (!same_serving(base, run))
    return fmt::format("serving not compared: A at {}, {} at {} ({})", setting(a, true), name,
                       setting(b, true),
                       a.request_rate != b.request_rate || a.max_queue_delay_ms != b.max_queue_delay_ms
                           ? std::string(kOneRate)
                           : std::string("their latency percentiles differ: analyze each at one "
                                         "--latency-percentile first"));
  const std::string pct = latency_name(a.latency_percentile);
  const auto served = [&](const Serving& s) {
    return fmt::format(
        "{}{} ms at max batch {}", rf::sig3(*s.best.latency_ms),
        [&] {
          const ServingBatch* row = s.best_row();
          return row && row->latency_se_ms ? fmt::format(" \u00b1 {}", rf::sig3(*row->latency_se_ms))
                                           : std::string();
        }(),
        *s.best.batch);
  };
  const bool a_serves = a.best.batch && a.best.latency_ms, b_serves = b.best.batch && b.best.latency_ms;
  const std::string at = fmt::format("serving at {}", setting(a, false));
  if (a_serves && b_serves)
    return fmt::format(
        "{}: {}/A {}\u00d7 in {} request latency ({} {}, A {}; simulated from each run's steps)", at, name,
        rf::fixed(*serving_ratio(base, run), 3), pct, name, served(b), served(a));
  if (a_serves)
    return fmt::format("{}: {} serves at no max batch ({}); A's {} request latency is {}", at, name,
                       b.best.reason, pct, served(a));
  if (b_serves)
    return fmt::format("{}: A serves at no max batch ({}); {}'s {} request latency is {}", at, a.best.reason,
                       name, pct, served(b));
  return fmt::format("{}: neither A nor {} serves at any max batch (A: {}; {}: {})", at, name, a.best.reason,
                     name, b.best.reason);
}

// Where two reports' resolved models (settings.model) first differ; nullopt where they agree or either has
// none.
std::optional<std::string> model_difference(const Report& a, const Report& b) {
  const auto a_model = a.settings.find("model");
  const auto b_model = b.settings.find("model");
  if (a_model == a.settings.end() || b_model == b.settings.end() || !a_model->is_object() ||
      !b_model->is_object())
    return std::nullopt;
  const std::optional<JsonDifference> d = first_difference(*a_model, *b_model, "settings.model", 40);
  if (!d) return std::nullopt;
  if (!d->second) return d->where + " only in the first";
  if (!d->first) return d->where + " only in the second";
  return fmt::format("{}: {} vs {}", d->where, *d->first, *d->second);
}

void check_comparable(const std::vector<Report>& reports, const std::vector<RunSummary>& runs,
                      const CompareOptions& options) {
  const Report& a = reports.front();
  // The first run that says its mode is what the others' modes are held to.
  size_t moded = 0;
  while (moded + 1 < runs.size() && runs[moded].mode.empty()) ++moded;
  // Likewise the first run that names its model: a minimal report (schema_version and points) names none
  // and conflicts with none, but the runs that do name one are held to each other.
  size_t named = 0;
  while (named + 1 < runs.size() && runs[named].model.empty()) ++named;
  for (size_t i = 1; i < reports.size(); ++i) {
    const std::string both = fmt::format("{} and {}", runs[0].name, runs[i].name);
    if (reports[i].schema_version != a.schema_version) {
      throw InputError(fmt::format("{}: different schema versions ({} vs {})", both, a.schema_version,
                                   reports[i].schema_version));
    }
    // A minimal report (schema_version and points) may not say its mode: only two known modes conflict.
    if (!runs[i].mode.empty() && !runs[moded].mode.empty() && runs[i].mode != runs[moded].mode) {
      throw InputError(
          fmt::format("{} and {}: different modes ({} vs {}); a training step and an inference batch are not "
                      "comparable",
                      runs[moded].name, runs[i].name, runs[moded].mode, runs[i].mode));
    }
    if (options.allow_model_mismatch || i == named || runs[i].model.empty() || runs[named].model.empty())
      continue;
    const std::string pair = fmt::format("{} and {}", runs[named].name, runs[i].name);
    if (runs[i].model != runs[named].model) {
      throw InputError(
          fmt::format("{}: different models ({} vs {}); pass --allow-model-mismatch to compare them "
                      "anyway",
                      pair, runs[named].model, runs[i].model));
    }
    // One name, other layers (a model file named like a preset): the resolved models say.
    if (const std::optional<std::string> where = model_difference(reports[named], reports[i]))
      throw InputError(fmt::format(
          "{}: different models named {} ({}); pass --allow-model-mismatch to compare them anyway", pair,
          runs[named].model, *where));
  }
}

// "devices differ: A x, B y" when some run's value differs from the baseline's.
void note_difference(const std::vector<RunSummary>& runs, const char* what,
                     std::string (*value)(const RunSummary&), std::vector<std::string>& notes) {
  bool differs = false;
  for (const auto& r : runs) differs |= value(r) != value(runs.front());
  if (!differs) return;
  std::string note = fmt::format("{} differ:", what);
  for (size_t i = 0; i < runs.size(); ++i) {
    note += fmt::format("{} {} {}", i ? "," : "", letter(i),
                        value(runs[i]).empty() ? "(unknown)" : value(runs[i]));
  }
  notes.push_back(std::move(note));
}

std::string device_of(const RunSummary& r) {
  if (r.backend.empty()) return r.device;
  return r.device.empty() ? fmt::format("({})", r.backend) : fmt::format("{} ({})", r.device, r.backend);
}

// A run's speed round by round (run --rounds), over `points` (each with two rounds with steps or more): for
// each round, the mean over the points of their log mean step, where a point's rounds are taken as its mean
// log plus that round's offset from it, averaged over the points that have the round (a failed round is
// left out, not shifted onto the next). What moves every batch of a round together (the machine's speed over
// a round) is in their spread, which the rows' errors, taken as independent, divide by the batches. Empty
// with fewer than two such rounds.
std::vector<double> round_log_means(const std::vector<const Point*>& points) {
  std::vector<double> offset_sum, offset_count;
  double level = 0;
  for (const Point* p : points) {
    std::vector<std::optional<double>> logs;
    double sum = 0;
    size_t n = 0;
    for (const std::span<const double> slice : round_slices(*p)) {
      const double mean = slice.empty() ? 0.0
                                        : std::accumulate(slice.begin(), slice.end(), 0.0) /
                                              static_cast<double>(slice.size());
      if (mean > 0 && std::isfinite(mean)) {
        logs.emplace_back(std::log(mean));
        sum += *logs.back();
        ++n;
      } else {
        logs.emplace_back();
      }
    }
    if (n < 2) return {};
    const double point_mean = sum / static_cast<double>(n);
    level += point_mean / static_cast<double>(points.size());
    offset_sum.resize(std::max(offset_sum.size(), logs.size()), 0.0);
    offset_count.resize(offset_sum.size(), 0.0);
    for (size_t r = 0; r < logs.size(); ++r)
      if (logs[r]) {
        offset_sum[r] += *logs[r] - point_mean;
        offset_count[r] += 1;
      }
  }
  std::vector<double> means;
  for (size_t r = 0; r < offset_sum.size(); ++r)
    if (offset_count[r] > 0) means.push_back(level + offset_sum[r] / offset_count[r]);
  if (means.size() < 2) return {};
  return means;
}

// Welch's t on two runs' round_log_means: the two-sided p that their geometric means are one speed, as far as
// their rounds vary. nullopt without two rounds a side.
std::optional<double> rounds_change_p(const std::vector<double>& base, const std::vector<double>& run) {
  if (base.size() < 2 || run.size() < 2) return std::nullopt;
  return welch_t_test(run, base).p_value;
}

CompareGeomean geomean_row(const std::vector<CompareRow>& rows,
                           const std::vector<std::vector<const Point*>>& points, size_t runs,
                           const CompareOptions& options) {
  CompareGeomean g;
  const auto ran_ok = [](const CompareCell& c) {
    return !c.absent && c.status == PointStatus::ok && std::isfinite(c.samples_per_second) &&
           c.samples_per_second > 0;
  };
  // The shown samples/s: over the rows every run ran ok, where no run's change went unjudged.
  std::vector<std::vector<double>> rates(runs);
  for (const auto& row : rows) {
    const bool all_ran = std::all_of(row.runs.begin(), row.runs.end(), ran_ok);
    // A row whose change nobody can judge (one step against one) has no place in a judged mean either.
    const bool unjudged = std::any_of(row.deltas.begin(), row.deltas.end(), [](const CompareDelta& d) {
      return d.unjudged() || d.baseline_measurement;
    });
    if (!all_ran || unjudged) continue;
    ++g.batches;
    for (size_t i = 0; i < runs; ++i) rates[i].push_back(row.runs[i].samples_per_second);
  }
  for (size_t i = 0; i < runs; ++i) g.samples_per_second.push_back(geometric_mean(rates[i]));
  // Each run against A over the rows the two ran ok (and judged): a third run that lacks some must not move
  // another's verdict. With the same rows for every run, these are the shown means' ratios.
  for (size_t i = 1; i < runs; ++i) {
    std::vector<double> base_rates, run_rates;
    // Per side, its rows' standard errors with their degrees of freedom: the log of a geometric mean ratio is
    // the mean of the rows' log ratios, whose variance is about the sum of both sides' over k^2. Used where
    // every row has one.
    std::vector<MeanStepError> base_errors, run_errors;
    std::vector<const Point*> base_points, run_points;
    bool busy = false;
    for (size_t r = 0; r < rows.size(); ++r) {
      const CompareRow& row = rows[r];
      if (!ran_ok(row.runs[0]) || !ran_ok(row.runs[i]) || row.deltas[i - 1].unjudged() ||
          row.deltas[i - 1].baseline_measurement)
        continue;
      // The rounds' check is over the rows where both points have two rounds with steps (the same rows a
      // side, so that the two levels compare).
      if (rounds_with_steps(*points[r][0]) >= 2 && rounds_with_steps(*points[r][i]) >= 2) {
        base_points.push_back(points[r][0]);
        run_points.push_back(points[r][i]);
      }
      busy |= row.runs[0].busy_host || row.runs[i].busy_host;
      base_rates.push_back(row.runs[0].samples_per_second);
      run_rates.push_back(row.runs[i].samples_per_second);
      if (const std::optional<double>& se = row.runs[0].standard_error)
        base_errors.push_back({*se, row.runs[0].standard_error_df});
      if (const std::optional<double>& se = row.runs[i].standard_error)
        run_errors.push_back({*se, row.runs[i].standard_error_df});
    }
    g.delta_batches.push_back(base_rates.size());
    g.delta_busy_host.push_back(busy);
    const std::optional<double> a = geometric_mean(base_rates), b = geometric_mean(run_rates);
    CompareDelta d;
    if (a && b) {
      d.ratio = *b / *a;
      // Beyond the minimum effect, and beyond the noise of the means where every row says how noisy it is,
      // so the row does not call a change no batch could tell apart from noise.
      bool beyond_noise = true;
      if (base_errors.size() == base_rates.size() && run_errors.size() == run_rates.size()) {
        d.noise_checked = true;
        const double k = static_cast<double>(base_rates.size());
        // Every row's standard error of both runs, with its own degrees of freedom (Welch-Satterthwaite).
        std::vector<MeanStepError> parts = base_errors;
        parts.insert(parts.end(), run_errors.begin(), run_errors.end());
        // The mean of k log ratios against its error: the sum of them against the rows' summed errors.
        d.mean_p_value = change_p(k * std::log(d.ratio), parts);
        // With rounds in both runs, the change must also clear how far their rounds' geometric means vary:
        // a round slower at every batch (the runs' offsets at neighbouring batches correlated 0.7-0.9 on a
        // CPU) moves the mean of the batches by as much as one batch, not by a k-th of it.
        if (const std::optional<double> rounds_p =
                rounds_change_p(round_log_means(base_points), round_log_means(run_points)))
          d.mean_p_value = std::max(*d.mean_p_value, *rounds_p);
        beyond_noise = *d.mean_p_value < options.alpha;
      }
      d.verdict = beyond_effect(d.ratio, options) && beyond_noise ? direction(d.ratio) : Verdict::same;
    } else {
      d.ratio = std::nan("");
    }
    g.deltas.push_back(d);
  }
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------------------------

std::string ratio_text(const CompareDelta& d) {
  return std::isfinite(d.ratio) ? rf::fixed(d.ratio, 3) + "\u00d7" : std::string(rf::kAbsent);
}

// `threshold_note` says why a verdict did not come from the test: "no samples" for a batch, "threshold" for
// the geometric mean.
// "p=0.031", and "p<1e-300" where the test's p underflowed to 0 (thousands of samples far apart): a measured
// p is never 0.
std::string p_text(double p) {
  return p > 0 ? fmt::format("p={:.2g}", p) : std::string("p<1e-300");
}

std::string verdict_text(const CompareDelta& d, double min_effect_pct,
                         const char* threshold_note = "no samples") {
  if (d.verdict == Verdict::not_comparable) return std::string(to_string(d.verdict));
  if (d.baseline_measurement) return fmt::format("{} (A's own measurement)", to_string(d.verdict));
  if (d.few_samples)
    return d.verdict == Verdict::same || d.tied_samples
               ? fmt::format("{} ({})", to_string(d.verdict),
                             d.tied_samples ? "steps all equal" : "few samples")
               : fmt::format("{} (few samples; mean {})", to_string(d.verdict),
                             p_text(d.mean_p_value.value_or(1.0)));
  if (d.one_step && d.verdict == Verdict::same && d.mean_p_value)
    return fmt::format("{} (one step, within the other run's spread: {})", to_string(d.verdict),
                       p_text(*d.mean_p_value));
  if (d.one_step)
    return d.verdict == Verdict::same
               ? fmt::format("{} (one step: noise unknown)", to_string(d.verdict))
               : fmt::format("{} (one step, beyond every step of the other run; {})", to_string(d.verdict),
                             p_text(d.mean_p_value.value_or(1.0)));
  if (!d.from_samples) return fmt::format("{} ({})", to_string(d.verdict), threshold_note);
  if (d.from_mean)
    return fmt::format("{} (mean; {}{})", to_string(d.verdict), p_text(d.mean_p_value.value_or(1.0)),
                       d.median_and_mean_disagree ? "; median and mean disagree" : "");
  if (d.under_min_effect)
    return fmt::format("{} (under {}%; {})", to_string(d.verdict), min_effect_pct,
                       p_text(d.under_min_effect_p.value_or(1.0)));
  if (d.short_within_noise)
    return fmt::format("{} (stopped short, within the means' noise)", to_string(d.verdict));
  if (d.within_drift_noise)
    return fmt::format("{} (within the means' noise, allowing for drift)", to_string(d.verdict));
  return fmt::format("{} ({}{})", to_string(d.verdict), p_text(d.p_value.value_or(1.0)),
                     d.median_and_mean_disagree ? "; median and mean disagree" : "");
}

// The tail column: "1.70× longer", "0.98× same", "1.40× (few steps)", "—" where either did not run.
std::string tail_text(const CompareDelta& d) {
  if (!d.tail_ratio) return std::string(rf::kAbsent);
  const std::string ratio = rf::fixed(*d.tail_ratio, 2) + "\u00d7";
  switch (d.tail_verdict) {
    case Verdict::slower:
      return ratio + " longer";
    case Verdict::faster:
      return ratio + " shorter";
    case Verdict::same:
      return ratio + (d.tail_few_steps            ? " (few steps)"
                      : d.tail_within_drift_noise ? " same (drift)"
                                                  : " same");
    case Verdict::not_comparable:
      break;
  }
  return ratio + " (no samples)";
}

std::string cell_text(const CompareCell& c) {
  if (c.absent) return "not swept";
  return c.status == PointStatus::ok ? rf::human_rate(c.samples_per_second)
                                     : std::string(to_string(c.status));
}

std::string batch_text(int64_t batch) {
  return fmt::format("batch {}", batch);
}

std::string run_line(const RunSummary& r) {
  std::string knee = r.knee.batch ? batch_text(*r.knee.batch) : std::string("none");
  if (r.knee.batch && r.knee.confidence == "range" && r.knee.range_low && r.knee.range_high) {
    knee += *r.knee.range_low == *r.knee.range_high  // only vanishes under noise
                ? std::string(" (not stable)")
                : fmt::format(" (range {}\u2013{})", *r.knee.range_low, *r.knee.range_high);
  } else if (r.knee.batch && !r.knee.confidence.empty()) {
    knee += fmt::format(" ({})", r.knee.confidence);
  }
  std::string best = "none";
  if (r.best.batch && r.best.samples_per_second)
    best = fmt::format("{} ({} samples/s)", batch_text(*r.best.batch),
                       rf::human_rate(*r.best.samples_per_second));
  std::string recommended = r.recommended.batch ? batch_text(*r.recommended.batch) : std::string("none");
  if (r.recommended.batch && r.recommended_accumulation && *r.recommended_accumulation > 1)
    recommended += fmt::format(" with accumulation {} (effective batch {})", *r.recommended_accumulation,
                               *r.recommended.batch * *r.recommended_accumulation);
  if (r.recommended.batch && r.recommended_cost_per_million_samples)
    recommended +=
        r.serving && r.serving->best.batch == r.recommended.batch &&
                rf::is_serving_cost(*r.recommended_cost_per_million_samples, r.price_per_hour,
                                    r.serving->request_rate)
            ? fmt::format(" (${:.4g} per million requests served)", *r.recommended_cost_per_million_samples)
            : fmt::format(" (${:.4g} per million samples)", *r.recommended_cost_per_million_samples);
  std::string max_fit = r.max_fit.batch ? batch_text(*r.max_fit.batch) : std::string("none");
  // Timed to here, and a larger batch fits untimed: the card's memory is not what stopped it.
  if (r.untimed_fit && (!r.max_fit.batch || *r.untimed_fit > *r.max_fit.batch))
    max_fit += fmt::format(" ({} fits, untimed)", batch_text(*r.untimed_fit));
  std::string line =
      fmt::format("knee {}, max fit {}, best {}, recommended {}", knee, max_fit, best, recommended);
  if (!r.recommended.why.empty()) line += " \u2014 " + r.recommended.why;
  return line;
}

std::string run_title(const RunSummary& r) {
  std::string out;
  std::string overrides;
  for (const std::string& o : r.overrides)
    overrides += (overrides.empty() ? "set " : ", ") + printable_text(o);
  for (const std::string& piece :
       {r.model, overrides, device_of(r), r.mode, r.precision, r.split, r.checkpointing}) {
    if (piece.empty()) continue;
    if (!out.empty()) out += " \u00b7 ";
    out += piece;
  }
  return out;
}

rf::TextTable compare_table(const CompareResult& result) {
  const size_t runs = result.runs.size();
  const bool show_accumulation = std::any_of(result.rows.begin(), result.rows.end(),
                                             [](const CompareRow& r) { return r.accumulation != 1; });
  rf::TextTable table;
  auto column = [&](std::string header, rf::Align align) {
    table.headers.push_back(std::move(header));
    table.align.push_back(align);
  };
  column("batch", rf::Align::right);
  if (show_accumulation) column("accum", rf::Align::right);
  for (size_t i = 0; i < runs; ++i) column(letter(i) + " samples/s", rf::Align::right);
  const std::string tail = latency_name(result.tail_percentile);
  for (size_t i = 1; i < runs; ++i) {
    column(letter(i) + "/A", rf::Align::right);
    column(runs == 2 ? std::string("verdict") : letter(i) + " verdict", rf::Align::left);
    if (result.show_tail) column(letter(i) + " " + tail + "/A", rf::Align::left);
  }
  for (const auto& row : result.rows) {
    std::vector<std::string> cells{std::to_string(row.batch)};
    if (show_accumulation) cells.push_back(std::to_string(row.accumulation));
    for (const auto& c : row.runs) cells.push_back(cell_text(c));
    for (size_t i = 0; i < row.deltas.size(); ++i) {
      const CompareDelta& d = row.deltas[i];
      cells.push_back(ratio_text(d));
      cells.push_back(row.runs[i + 1].absent ? std::string("not swept")
                                             : verdict_text(d, result.min_effect_pct));
      if (result.show_tail) cells.push_back(tail_text(d));
    }
    table.rows.push_back(std::move(cells));
  }
  if (result.geomean.batches > 0 ||
      std::any_of(result.geomean.delta_batches.begin(), result.geomean.delta_batches.end(),
                  [](size_t n) { return n > 0; })) {
    std::vector<std::string> cells{"geomean"};
    if (show_accumulation) cells.emplace_back();
    for (const auto& v : result.geomean.samples_per_second) {
      cells.push_back(v ? rf::human_rate(*v) : std::string(rf::kAbsent));
    }
    for (const auto& d : result.geomean.deltas) {
      cells.push_back(ratio_text(d));
      cells.push_back(
          verdict_text(d, result.min_effect_pct, d.noise_checked ? "threshold and noise" : "threshold"));
      if (result.show_tail) cells.emplace_back();
    }
    table.rows.push_back(std::move(cells));
  }
  return table;
}

// Which verdict colors a console line: slower wins over faster; a longer tail counts where the gate judges
// it (`tail_gated`: inference).
std::optional<Verdict> line_verdict(const std::vector<CompareDelta>& deltas, bool tail_gated) {
  std::optional<Verdict> out;
  for (const auto& d : deltas) {
    if (d.verdict == Verdict::slower || (tail_gated && d.tail_verdict == Verdict::slower))
      return Verdict::slower;
    if (d.verdict == Verdict::faster) out = Verdict::faster;
  }
  return out;
}

std::string colored(const std::string& line, std::optional<Verdict> v, bool color) {
  if (!color || !v) return line;
  return (*v == Verdict::slower ? "\x1b[31m" : "\x1b[32m") + line + "\x1b[0m";
}

nlohmann::json number_or_null(double v) {
  return report_json::number_or_null<nlohmann::json>(v);
}

// Batches a run failed to fit that the baseline never swept, though it fit a larger micro-batch with the same
// accumulation. Memory grows with the micro-batch, so the baseline fit these too: the run needs more memory.
std::vector<LostFit> lost_fits(const std::vector<Report>& reports) {
  std::map<int64_t, int64_t> baseline_fit;  // accumulation -> largest ok micro-batch
  for (const Point& p : reports.front().points) {
    if (!ran(p)) continue;
    int64_t& largest = baseline_fit[p.accumulation];
    largest = std::max(largest, p.batch);
  }
  std::vector<LostFit> lost;
  for (size_t i = 1; i < reports.size(); ++i) {
    std::set<Key> seen;
    for (const Point& p : reports[i].points) {
      const Key key{p.batch, p.accumulation};
      const auto fit = baseline_fit.find(p.accumulation);
      if (!did_not_fit(p.status) || fit == baseline_fit.end() || p.batch > fit->second ||
          !seen.insert(key).second)
        continue;
      // A batch the baseline has is a compared row for this run, where the row rule catches it.
      if (find_point(reports.front(), key) != nullptr ||
          find_point(reports[i], key)->status == PointStatus::ok)
        continue;
      lost.push_back({i, p.batch, p.accumulation, p.status, p.reason, fit->second});
    }
  }
  return lost;
}

std::string lost_fit_text(const LostFit& f) {
  return fmt::format("batch {}: {} in {}{}, though A fit batch {}", batch_label(f.batch, f.accumulation),
                     to_string(f.status), letter(f.run),
                     f.reason.empty() ? "" : fmt::format(" ({})", f.reason),
                     batch_label(f.baseline_max_fit, f.accumulation));
}

// settings.checkpointing: absent (a report from before --checkpointing, or a hand-made one) is false.
bool checkpointing(const nlohmann::json& settings) {
  if (!settings.is_object()) return false;
  const auto it = settings.find("checkpointing");
  return it != settings.end() && it->is_boolean() && it->get<bool>();
}

// How many blocks a checkpointing run checkpointed: settings.checkpoint_blocks, or "all" (absent); "none"
// without checkpointing.
std::string checkpointed(const nlohmann::json& settings) {
  if (!checkpointing(settings)) return "none";
  const auto it = settings.find("checkpoint_blocks");
  return it != settings.end() && it->is_number_integer() ? it->dump() : "all";
}

// One run in two reports: the same created_at and the same points, sample for sample (a file given twice, a
// copy, or analyze's re-export, which keeps created_at).
bool same_run(const Report& a, const Report& b) {
  if (a.created_at != b.created_at || a.points.empty() || a.points.size() != b.points.size()) return false;
  // The command that made it (analyze's re-export keeps it): two runs of one script started in one second
  // with other flags, or another --json path, are two runs.
  if (a.command != b.command) return false;
  // What was measured, which analyze's re-export keeps: two runs started in one second (created_at has
  // seconds) with other settings are two runs, even where a scripted device gives them the same samples.
  const auto setting = [](const Report& r, const char* key) {
    return r.settings.is_object() && r.settings.contains(key) ? r.settings.at(key) : nlohmann::json();
  };
  for (const char* key : {"backend", "model", "mode", "precision", "seed", "accumulation"})
    if (setting(a, key) != setting(b, key)) return false;
  if (checkpointed(a.settings) != checkpointed(b.settings)) return false;
  if (a.device.name != b.device.name || a.device.backend != b.device.backend) return false;
  const auto same_rate = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  for (size_t i = 0; i < a.points.size(); ++i) {
    const Point& p = a.points[i];
    const Point& q = b.points[i];
    if (p.batch != q.batch || p.accumulation != q.accumulation || p.status != q.status ||
        !same_rate(p.samples_per_second, q.samples_per_second) || p.samples_ms != q.samples_ms)
      return false;
  }
  return true;
}

// `runs`: the indices of two or more reports that are one run (same_run above), in order.
std::string same_run_text(const Report& a, const std::vector<size_t>& runs) {
  // A script's steps repeat exactly: two runs of one started in one second are indistinguishable.
  const bool scripted = a.device.backend == "scripted";
  std::string names;
  for (size_t k = 0; k < runs.size(); ++k)
    names += (k == 0 ? "" : k + 1 == runs.size() ? " and " : ", ") + letter(runs[k]);
  const bool two = runs.size() == 2;
  return fmt::format(
      "{} are the same run{} ({}, the same points): every verdict between them compares the run with "
      "itself, so \"same\" there says nothing about a change",
      names,
      scripted ? fmt::format(", or {} runs of one script started in one second, whose steps repeat",
                             two ? "two" : "several")
               : "",
      a.created_at.empty() ? std::string(two ? "neither has a created_at" : "none has a created_at")
                           : "created_at " + a.created_at);
}

nlohmann::json delta_json(const CompareDelta& d, const std::string& run, const std::string& label) {
  return {{"run", run},
          {"label", label},
          {"ratio", number_or_null(d.ratio)},
          {"verdict", to_string(d.verdict)},
          {"from_samples", d.from_samples},
          {"few_samples", d.few_samples},
          {"from_mean", d.from_mean},
          {"median_and_mean_disagree", d.median_and_mean_disagree},
          {"under_min_effect", d.under_min_effect},
          {"short_within_noise", d.short_within_noise},
          {"within_drift_noise", d.within_drift_noise},
          {"drift_p_value", d.drift_p_value ? number_or_null(*d.drift_p_value) : nlohmann::json(nullptr)},
          {"one_step", d.one_step},
          {"mean_p_value", d.mean_p_value ? number_or_null(*d.mean_p_value) : nlohmann::json(nullptr)},
          {"noise_checked", d.noise_checked},
          {"baseline_measurement", d.baseline_measurement},
          {"p_value", d.p_value ? number_or_null(*d.p_value) : nlohmann::json(nullptr)},
          {"tail_ratio", d.tail_ratio ? number_or_null(*d.tail_ratio) : nlohmann::json(nullptr)},
          {"tail_verdict", to_string(d.tail_verdict)},
          {"tail_p_value", d.tail_p_value ? number_or_null(*d.tail_p_value) : nlohmann::json(nullptr)},
          {"tail_few_steps", d.tail_few_steps},
          {"tail_within_drift_noise", d.tail_within_drift_noise},
          {"tail_drift_p_value",
           d.tail_drift_p_value ? number_or_null(*d.tail_drift_p_value) : nlohmann::json(nullptr)},
          {"p_adjusted_for", d.p_adjusted_for},
          {"tail_p_adjusted_for", d.tail_p_adjusted_for}};
}

}  // namespace

CompareResult compare_reports(const std::vector<Report>& reports, const CompareOptions& options) {
  if (reports.size() < 2) {
    throw UsageError(fmt::format("compare needs at least two reports (the first is the baseline), got {}",
                                 reports.size()));
  }
  CompareResult result;
  result.alpha = options.alpha;
  result.min_effect_pct = options.min_effect_pct;
  for (size_t i = 0; i < reports.size(); ++i)
    result.runs.push_back(summarize_run(reports[i], run_name(options, i)));
  check_comparable(reports, result.runs, options);
  result.tail_percentile = result.runs.front().latency_percentile;

  std::set<Key> all_keys;
  for (const auto& r : reports) {
    for (const auto& p : r.points) all_keys.insert({p.batch, p.accumulation});
  }
  std::vector<std::string> missing;
  std::map<size_t, std::vector<std::string>> unswept;  // run -> compared batches it lacks
  std::vector<std::string> shared;  // batches a run took from the baseline's own measurement (--resume)
  // Each run's rounds' spread (run --rounds), which its means' errors hold.
  std::vector<std::optional<RoundNoise>> noises;
  for (const auto& r : reports) noises.push_back(round_noise(r.points));
  std::vector<std::vector<const Point*>> row_points;  // each row's point in every run (null: not swept)
  std::vector<std::vector<bool>> row_self;            // ... that is the baseline's own measurement
  for (const Key& key : all_keys) {
    std::vector<const Point*> points;
    for (const auto& r : reports) points.push_back(find_point(r, key));
    // Each run is set against the baseline wherever the two share a batch: a third run that lacks it must
    // not take the others' verdicts (and their gate) with it.
    if (!points[0] || std::all_of(points.begin() + 1, points.end(), [](const Point* p) { return !p; })) {
      missing.push_back(batch_label(key.first, key.second));
      continue;
    }
    CompareRow row;
    row.batch = key.first;
    row.accumulation = key.second;
    for (size_t i = 0; i < points.size(); ++i) {
      const Point* p = points[i];
      if (!p) {
        CompareCell absent;
        absent.absent = true;
        absent.samples_per_second = std::nan("");
        row.runs.push_back(absent);
        unswept[i].push_back(batch_label(key.first, key.second));
        continue;
      }
      row.runs.push_back({false, p->status, p->reason, p->samples_per_second, p->samples_ms.size(),
                          std::nullopt, 0, latency_if_ran(*p, 99),
                          latency_if_ran(*p, result.runs.front().latency_percentile), busy_host(*p)});
      if (const std::optional<MeanStepError> e = mean_step_error(*p, noises[i])) {
        row.runs.back().standard_error = e->se;
        row.runs.back().standard_error_df = e->df;
      }
    }
    for (size_t i = 1; i < points.size(); ++i) {
      if (points[i]) {
        row.deltas.push_back(
            delta(*points[0], *points[i], result.tail_percentile, options, {noises[0], noises[i]}));
      } else {
        CompareDelta absent;
        absent.ratio = std::nan("");
        row.deltas.push_back(absent);
      }
    }
    // One measurement in two runs: run --resume took one run's point into another (or both took one earlier
    // run's). A point was measured when its report was made, unless it says it was taken; two reports made
    // in the same second are not taken for one, so the steps must be the same ones too (or begin with them:
    // --rounds adds a round to a taken point).
    const auto measured_at = [&](size_t i) -> const std::string& {
      return points[i]->resumed_from.empty() ? reports[i].created_at : points[i]->resumed_from;
    };
    const auto begins_with = [](const Point& whole, const Point& part) {
      return !part.samples_ms.empty() && whole.samples_ms.size() >= part.samples_ms.size() &&
             std::equal(part.samples_ms.begin(), part.samples_ms.end(), whole.samples_ms.begin());
    };
    const auto same_steps = [&](size_t i, size_t j) {
      return points[i]->samples_ms == points[j]->samples_ms || begins_with(*points[i], *points[j]) ||
             begins_with(*points[j], *points[i]);
    };
    bool one_measurement = false;
    for (size_t i = 0; i < points.size() && !one_measurement; ++i) {
      if (!points[i] || points[i]->resumed_from.empty()) continue;
      for (size_t j = 0; j < points.size(); ++j)
        one_measurement |=
            j != i && points[j] && measured_at(j) == points[i]->resumed_from && same_steps(i, j);
    }
    if (one_measurement) shared.push_back(batch_label(key.first, key.second));
    // The baseline's own steps: the same point, or one that holds them with later rounds beside them (run
    // --resume of the baseline with --rounds adds a round to its point): either way no test of a change.
    std::vector<bool> self(points.size(), false);
    for (size_t i = 1; i < points.size(); ++i)
      self[i] = points[i] && (!points[0]->resumed_from.empty() || !points[i]->resumed_from.empty()) &&
                measured_at(0) == measured_at(i) &&
                (points[0]->samples_ms == points[i]->samples_ms || begins_with(*points[i], *points[0]) ||
                 begins_with(*points[0], *points[i]));
    for (size_t i = 1; i < points.size(); ++i) row.deltas[i - 1].baseline_measurement = self[i];
    result.rows.push_back(std::move(row));
    row_points.push_back(std::move(points));
    row_self.push_back(std::move(self));
  }
  adjust_for_batches(result.rows, row_points, row_self, result.tail_percentile, options, noises);
  result.geomean = geomean_row(result.rows, row_points, reports.size(), options);
  result.show_tail = result.runs.front().mode == "infer" || options.tail_gated_in_training;
  result.tail_gated = options.latency_gated && result.show_tail;
  for (const CompareRow& row : result.rows)
    for (const CompareDelta& d : row.deltas)
      result.show_tail |= d.tail_verdict == Verdict::slower || d.tail_verdict == Verdict::faster;
  result.lost_fits = lost_fits(reports);

  // One note per run given more than once, naming every copy: 64 copies of one report are one warning,
  // not 2016. same_run compares fields for equality, so "the same run as" is transitive.
  std::vector<bool> grouped(reports.size(), false);
  for (size_t i = 0; i < reports.size(); ++i) {
    if (grouped[i]) continue;
    std::vector<size_t> copies{i};
    for (size_t j = i + 1; j < reports.size(); ++j) {
      if (!grouped[j] && same_run(reports[i], reports[j])) {
        copies.push_back(j);
        grouped[j] = true;
      }
    }
    if (copies.size() > 1) result.same_run_notes.push_back(same_run_text(reports[i], copies));
    if (i == 0) result.copies_of_baseline.assign(copies.begin() + 1, copies.end());
  }
  result.notes = result.same_run_notes;  // first: it outweighs every other note

  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    result.notes.push_back(
        fmt::format("{}, not compared: batch {}",
                    reports.size() == 2 ? "not in every run" : "not in A and any other run", list));
  }
  // Where runs lack batches others have, each geomean ratio is over its own pair's: said, with the counts.
  std::vector<std::string> pair_counts;
  for (size_t i = 0; i < result.geomean.delta_batches.size(); ++i)
    pair_counts.push_back(fmt::format("{} {}", letter(i + 1), result.geomean.delta_batches[i]));
  if (std::any_of(result.geomean.delta_batches.begin(), result.geomean.delta_batches.end(),
                  [&](size_t n) { return n != result.geomean.batches; }))
    result.notes.push_back(
        fmt::format("geomean: each run's ratio to A is over the batches the two ran ok ({}); the samples/s "
                    "shown are over "
                    "the {} every run ran ok",
                    fmt::join(pair_counts, ", "), result.geomean.batches));
  for (const auto& [run, batches] : unswept)
    result.notes.push_back(fmt::format("{} did not sweep batch{} {}: the other runs are compared there",
                                       letter(run), batches.size() == 1 ? "" : "es",
                                       fmt::join(batches, ", ")));
  for (const LostFit& f : result.lost_fits) result.notes.push_back(lost_fit_text(f));
  // Each run at its own best batch: what choosing between devices compares, whatever batches they share.
  const RunSummary& base = result.runs.front();
  bool said_priceless = false;
  for (size_t i = 1; i < result.runs.size(); ++i) {
    const RunSummary& run = result.runs[i];
    if (!base.best.samples_per_second || !run.best.samples_per_second || !base.best.batch || !run.best.batch)
      continue;
    // Where both have a price (run or analyze --price-per-hour): what a million samples cost at each best,
    // which is what choosing between cards weighs against the speed.
    std::string cost;
    if (base.price_per_hour && run.price_per_hour) {
      const double a = cost_per_million(*base.price_per_hour, *base.best.samples_per_second);
      const double b = cost_per_million(*run.price_per_hour, *run.best.samples_per_second);
      // Served at a request rate, a card costs its hours whatever it does: the runs' lines give that cost,
      // and this one, of a card kept busy at its best, can point the other way (an L4 cheaper to serve 300
      // requests/s, an H100 cheaper per sample when saturated). Said which question each answers.
      const bool served = base.serving && run.serving;
      if (std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0)  // a hand-edited price of 1e308 is none
        cost = fmt::format("; a million samples there cost {} ${:.4g}, A ${:.4g} ({}/A {}\u00d7){}",
                           letter(i), b, a, letter(i), rf::fixed(b / a, 3),
                           served ? " with each kept busy at its best; serving the request rate, the runs' "
                                    "lines give what a million requests cost"
                                  : "");
    } else if ((base.price_per_hour || run.price_per_hour) && !said_priceless) {
      said_priceless = true;  // once: a third run would repeat it
      // One price alone compares nothing: said, with how to give the other its price.
      cost = fmt::format(
          "; no cost beside it: {} has no --price-per-hour (`batchsweep analyze` of its report "
          "with --price-per-hour USD --json FILE gives it one)",
          base.price_per_hour ? letter(i) : std::string("A"));
    }
    result.notes.push_back(
        fmt::format("best against best: {}/A {}\u00d7 ({} {} samples/s at batch {}, A {} at batch {}){}",
                    letter(i), rf::fixed(*run.best.samples_per_second / *base.best.samples_per_second, 3),
                    letter(i), rf::human_rate(*run.best.samples_per_second), *run.best.batch,
                    rf::human_rate(*base.best.samples_per_second), *base.best.batch, cost));
  }
  for (size_t i = 1; i < result.runs.size(); ++i)
    if (auto change = budget_change(base, result.runs[i], letter(i), options.min_effect_pct))
      result.notes.push_back(std::move(*change));
  for (size_t i = 1; i < result.runs.size(); ++i)
    if (auto change = serving_change(base, result.runs[i], letter(i)))
      result.notes.push_back(std::move(*change));
  // The baseline's answer under its budget, where a run ran that batch but has no step times there (a
  // report of rates alone): the budget gate cannot judge it, and its "passed" must not read as "held".
  if (base.latency_slo_ms && base.latency_slo && base.latency_slo->batch) {
    for (const CompareRow& row : result.rows) {
      if (row.batch != *base.latency_slo->batch) continue;
      for (size_t i = 1; i < row.runs.size(); ++i)
        if (!row.runs[i].absent && row.runs[i].status == PointStatus::ok && !row.runs[i].budget_latency_ms) {
          result.notes.push_back(fmt::format(
              "{}: batch {} (A's answer under the {:g} ms {} budget) has no step times, so its latency there "
              "was not judged against the budget",
              letter(i), batch_label(row.batch, row.accumulation), *base.latency_slo_ms,
              latency_name(base.latency_percentile)));
          if (options.latency_gated) result.short_notes.push_back(result.notes.back());
        }
    }
  }
  // Where the gate judges the tail (inference, or training where asked): batches whose tail could not be
  // judged for want of steps, so a gate's "passed" is not read as "the p99 held".
  if (result.runs.front().mode == "infer" || options.tail_gated_in_training) {
    for (size_t i = 1; i < reports.size(); ++i) {
      std::vector<std::string> unjudged;
      size_t fewest = std::numeric_limits<size_t>::max();
      for (const CompareRow& row : result.rows) {
        if (!row.deltas[i - 1].tail_few_steps) continue;
        unjudged.push_back(batch_label(row.batch, row.accumulation));
        for (size_t k : {size_t{0}, i})
          if (const Point* p = find_point(reports[k], {row.batch, row.accumulation}))
            fewest = std::min(fewest, p->samples_ms.size());
      }
      if (unjudged.empty()) continue;
      result.notes.push_back(fmt::format(
          "{}: its {} step was not judged against A's at batch{} {}: too few steps (as few as {}) to tell "
          "whether it held; a {} needs {} or more in each run (--min-samples)",
          letter(i), latency_name(result.tail_percentile), unjudged.size() == 1 ? "" : "es",
          fmt::join(unjudged, ", "), fewest, latency_name(result.tail_percentile),
          kTailStepsPerSample * latency_budget_min_samples(result.tail_percentile)));
      if (options.latency_gated) result.short_notes.push_back(result.notes.back());
    }
  }
  // Points that stopped short of their measurement targets: their verdicts rest on noisier means.
  for (size_t i = 0; i < reports.size(); ++i) {
    std::vector<std::string> short_points;
    double worst_noise = 0;
    for (const CompareRow& row : result.rows) {
      const Point* p = find_point(reports[i], {row.batch, row.accumulation});
      if (p == nullptr || !ran(*p)) continue;
      if (!stopped_short(p->stop_reason)) continue;
      short_points.push_back(batch_label(row.batch, row.accumulation));
      if (p->noise_pct) worst_noise = std::max(worst_noise, *p->noise_pct);
    }
    if (short_points.empty()) continue;
    result.short_notes.push_back(
        fmt::format("{}: batch{} {} stopped before meeting {} measurement targets{}, so {} verdicts rest on "
                    "noisier means",
                    letter(i), short_points.size() == 1 ? "" : "es", fmt::join(short_points, ", "),
                    short_points.size() == 1 ? "its" : "their",
                    worst_noise > 0 ? fmt::format(" (noise up to {:.1f}%)", worst_noise) : std::string(),
                    short_points.size() == 1 ? "its" : "their"));
    result.notes.push_back(result.short_notes.back());
  }
  // Points timed while other processes competed for the CPUs (or a hypervisor took them): their step times
  // measured the machine's load too, which a verdict there may be.
  for (size_t i = 0; i < reports.size(); ++i) {
    std::vector<std::string> busy;
    bool contended = false, stolen = false;
    double worst_others = 0, worst_steal = 0;
    for (const CompareRow& row : result.rows) {
      const Point* p = find_point(reports[i], {row.batch, row.accumulation});
      if (p == nullptr || !busy_host(*p)) continue;
      busy.push_back(batch_label(row.batch, row.accumulation));
      if (p->host->contended()) {
        contended = true;
        worst_others = std::max(worst_others, p->host->others_cores.value_or(0.0));
      }
      if (p->host->stolen()) {
        stolen = true;
        worst_steal = std::max(worst_steal, p->host->steal_pct.value_or(0.0));
      }
    }
    if (busy.empty()) continue;
    // Each cause that was there, with its worst figure: a wait alone (no /proc/stat) names no CPU count.
    std::vector<std::string> causes;
    if (contended)
      causes.push_back(
          worst_others > 0
              ? fmt::format("other processes competed for its CPUs, taking up to {:.2g} CPUs", worst_others)
              : std::string("its threads waited for a CPU"));
    if (stolen)
      causes.push_back(fmt::format("the hypervisor took up to {:.0f}% of its CPU time (steal)", worst_steal));
    result.short_notes.push_back(fmt::format(
        "{}: batch{} {} {} timed while {}, so a verdict there may be the machine's load, not a change (the "
        "points' host figures)",
        letter(i), busy.size() == 1 ? "" : "es", fmt::join(busy, ", "), busy.size() == 1 ? "was" : "were",
        fmt::join(causes, " and ")));
    result.notes.push_back(result.short_notes.back());
  }
  // Points whose own rounds (run --rounds) disagreed: the machine changed speed within that run, so a rerun
  // of it, and a verdict against it, may move as much.
  for (size_t i = 0; i < reports.size(); ++i) {
    std::vector<std::string> apart;
    double widest = 0;
    for (const CompareRow& row : result.rows) {
      const Point* p = find_point(reports[i], {row.batch, row.accumulation});
      if (p == nullptr) continue;
      const std::optional<RoundsAgreement> agreement = rounds_agreement(*p);
      if (!agreement || !agreement->disagree) continue;
      apart.push_back(batch_label(row.batch, row.accumulation));
      widest = std::max(widest, agreement->spread_pct);
    }
    if (apart.empty()) continue;
    result.short_notes.push_back(
        fmt::format("{}: the rounds of batch{} {} disagreed (up to {:.1f}% apart): the machine changed speed "
                    "during that run, "
                    "so a verdict there may be the machine's, not a change (its points' rounds[])",
                    letter(i), apart.size() == 1 ? "" : "es", fmt::join(apart, ", "), widest));
    result.notes.push_back(result.short_notes.back());
  }
  // Batches where a run timed one step: not judged, and said beside a gate's answer with the change seen.
  std::vector<std::string> one_step, seen;
  for (const CompareRow& row : result.rows)
    for (size_t i = 0; i < row.deltas.size(); ++i) {
      if (!row.deltas[i].unjudged()) continue;
      const std::string label = batch_label(row.batch, row.accumulation);
      if (one_step.empty() || one_step.back() != label) one_step.push_back(label);
      seen.push_back(fmt::format("{} {:.1f}% {} at {}", letter(i + 1),
                                 std::fabs(row.deltas[i].ratio - 1) * 100,
                                 row.deltas[i].ratio < 1 ? "slower" : "faster", label));
    }
  if (!one_step.empty()) {
    result.short_notes.push_back(
        fmt::format("batch{} {}: one timed step, whose noise is unknown: no change is called "
                    "there ({}); a longer --timeout times more steps",
                    one_step.size() == 1 ? "" : "es", fmt::join(one_step, ", "), fmt::join(seen, ", ")));
    result.notes.push_back(result.short_notes.back());
  }
  for (size_t i = 0; i < result.runs.size(); ++i) {
    if (!incomplete(result.runs[i])) continue;
    result.notes.push_back(fmt::format("{} ({}) did not finish: {}", letter(i), result.runs[i].name,
                                       incomplete_why(result.runs[i])));
  }
  if (!shared.empty())
    result.notes.push_back(fmt::format(
        "batch {}: one measurement in two runs (run --resume took it; resumed_from), so \"same\" there "
        "compares a point with itself",
        fmt::join(shared, ", ")));
  note_difference(
      result.runs, "models", [](const RunSummary& r) { return r.model; }, result.notes);
  // One name, other layers (let through by --allow-model-mismatch): the names alone would say nothing.
  for (size_t i = 1; i < reports.size(); ++i) {
    if (result.runs[i].model.empty() || result.runs[i].model != result.runs[0].model) continue;
    if (const std::optional<std::string> where = model_difference(reports[0], reports[i]))
      result.notes.push_back(fmt::format("{} and {}: different models, both named {} ({})", letter(0),
                                         letter(i), result.runs[0].model, *where));
  }
  note_difference(
      result.runs, "devices", [](const RunSummary& r) { return device_of(r); }, result.notes);
  // Where every run says (`known`: some values are a report's only where it knows them), a difference said
  // with why it matters.
  const auto said_with = [&](const char* what, std::string (*value)(const RunSummary&), bool known,
                             const char* why) {
    if (!known) return;
    const size_t before = result.notes.size();
    note_difference(result.runs, what, value, result.notes);
    if (result.notes.size() > before) result.notes.back() += why;
  };
  const auto every = [&](std::string RunSummary::*field) {
    return std::all_of(result.runs.begin(), result.runs.end(),
                       [&](const RunSummary& r) { return !(r.*field).empty(); });
  };
  // A run under --memory-limit fitted batches in less memory than its device has (a card emulated): its
  // speed is still the device's.
  said_with(
      "memory limits", [](const RunSummary& r) { return r.memory_limit; }, true,
      " (--memory-limit: which batches fit; each run's speed is its device's)");
  // MFU against a measured GEMM rate reads higher than against the datasheet's peak for the same step: the
  // two reports' MFU % columns do not compare.
  said_with(
      "MFU's peaks", [](const RunSummary& r) { return r.mfu_peak; }, every(&RunSummary::mfu_peak),
      " (their MFU % do not compare: the samples/s do)");
  // On a CPU the threads are the device's size: batchsweep's OpenBLAS threads against the PyTorch peer's
  // (torch.get_num_threads), or OPENBLAS_NUM_THREADS=1 against the default.
  said_with(
      "CPU threads", [](const RunSummary& r) { return r.threads; }, every(&RunSummary::threads),
      " (a CPU's throughput scales with its threads: the peer's --threads sets them)");
  // How each point was measured: another noise target or timeout stops points by another rule, and CUDA
  // graphs or another attention or conv path is another step. Said, as --resume refuses such a run.
  for (size_t i = 1; i < reports.size(); ++i) {
    std::vector<std::string> differ;
    // Compared as JSON values (30.0 and 30 are one number, as jq rewrites it); absent or null (the PyTorch
    // peer's warmup_time_s without --warmup-time: its backend's default) is not a difference.
    const auto value = [](const nlohmann::json& obj, const std::string& key) {
      return obj.is_object() && obj.contains(key) ? obj.at(key) : nlohmann::json();
    };
    const nlohmann::json& first = reports[0].settings;
    const nlohmann::json& other = reports[i].settings;
    const auto stopping = [](const nlohmann::json& settings) {
      return settings.is_object() && settings.contains("stopping") ? settings.at("stopping")
                                                                   : nlohmann::json();
    };
    for (const char* key : {"warmup_steps", "warmup_time_s", "min_samples", "min_time_s", "max_noise_pct",
                            "timeout_s", "max_samples"}) {
      const nlohmann::json a = value(stopping(first), key), b = value(stopping(other), key);
      if (!a.is_null() && !b.is_null() && a != b)
        differ.push_back(fmt::format("stopping.{} {} vs {}", key, json_text(a), json_text(b)));
    }
    for (const char* key : {"cuda_graphs", "attention", "conv"}) {
      if (!cuda_settings_apply(first, other)) break;
      const nlohmann::json a = value(first, key), b = value(other, key);
      if (!a.is_null() && !b.is_null() && a != b)
        differ.push_back(fmt::format("{} {} vs {}", key, json_text(a), json_text(b)));
    }
    if (checkpointing(first) != checkpointing(other))
      differ.push_back(fmt::format("checkpointing {} vs {}", checkpointing(first), checkpointing(other)));
    else if (checkpointed(first) != checkpointed(other))
      differ.push_back(fmt::format("checkpoint_blocks {} vs {}", checkpointed(first), checkpointed(other)));
    if (!differ.empty())
      result.notes.push_back(fmt::format("{} and {}: measured with other settings ({})", letter(0), letter(i),
                                         fmt::join(differ, ", ")));
  }
  const size_t before_precisions = result.notes.size();
  note_difference(
      result.runs, "precisions", [](const RunSummary& r) { return r.precision; }, result.notes);
  // The CPU's 16 bits are storage, the math fp32 with conversions around it: not what a GPU's 16 bits do.
  const bool cpu_16_bit = std::any_of(result.runs.begin(), result.runs.end(), [](const RunSummary& r) {
    return r.backend == "cpu" && (r.precision == "bf16" || r.precision == "fp16");
  });
  if (result.notes.size() > before_precisions && cpu_16_bit)
    result.notes.back() +=
        " (on the CPU, 16-bit precisions store in 16 bits and compute in fp32, converting "
        "around every op: not a GPU's 16-bit speed)";
  // One precision name, two arithmetics: batchsweep's CPU backend computes 16-bit runs in fp32, where another
  // tool's (the PyTorch peer's) does the math in 16 bits.
  else if (cpu_16_bit && std::any_of(result.runs.begin(), result.runs.end(), [](const RunSummary& r) {
             return r.backend != "cpu" && r.backend != "scripted" &&
                    (r.precision == "bf16" || r.precision == "fp16");
           }))
    result.notes.push_back(
        "the cpu backend's 16-bit runs store in 16 bits and compute in fp32, converting around every op, "
        "where "
        "the other backend's compute in 16 bits (PyTorch on the CPU): the same precision name, not the same "
        "arithmetic or speed");
  return result;
}

GateThresholds uniform_gate(double pct) {
  return GateThresholds{pct, pct, false};
}

std::string gate_flags(const GateThresholds& gate) {
  std::string out = fmt::format("--fail-on-regression {:g}", gate.pct);
  if (gate.latency_given)
    out += gate.latency_pct ? fmt::format(" --fail-on-latency-regression {:g}", *gate.latency_pct)
                            : std::string(" --fail-on-latency-regression off");
  return out;
}

std::vector<Regression> find_regressions(const CompareResult& result, double pct) {
  return find_regressions(result, uniform_gate(pct));
}

std::vector<Regression> find_regressions(const CompareResult& result, const GateThresholds& gate) {
  const double pct = gate.pct;
  const double min_ratio = 1 - pct / 100;
  // The tail is gated in inference, and in training where --fail-on-latency-regression asked for it.
  const bool tail_gated = gate.latency_pct && (result.runs.front().mode == "infer" || gate.latency_given);
  const double latency_pct = gate.latency_pct.value_or(0);
  const std::string tail = latency_name(result.tail_percentile);
  std::vector<Regression> found;
  for (const auto& row : result.rows) {
    const std::string batch = batch_label(row.batch, row.accumulation);
    for (size_t i = 0; i < row.deltas.size(); ++i) {
      const CompareDelta& d = row.deltas[i];
      const CompareCell& base = row.runs.front();
      const CompareCell& run = row.runs[i + 1];
      const std::string busy = base.busy_host && run.busy_host ? "both runs"
                               : base.busy_host                ? "A"
                               : run.busy_host                 ? letter(i + 1)
                                                               : std::string();
      const std::string busy_text =
          busy.empty() ? std::string()
                       : fmt::format(
                             "; timed on a busy host in {}, so it may be the machine's load (rerun on a "
                             "quiet machine)",
                             busy);
      // A run's tail, longer beyond noise and by more than the latency PCT: the latency a server answers in.
      if (tail_gated && d.tail_verdict == Verdict::slower && d.tail_ratio &&
          *d.tail_ratio > 1 + latency_pct / 100 && base.budget_latency_ms && run.budget_latency_ms)
        found.push_back(Regression{
            "tail_latency", i + 1, row.batch, row.accumulation,
            fmt::format(
                "batch {}: {}'s {} step is {:.1f}% longer than A's ({} ms against {} ms; beyond noise: "
                "quantile test {}){}",
                batch, letter(i + 1), tail, (*d.tail_ratio - 1) * 100, rf::sig3(*run.budget_latency_ms),
                rf::sig3(*base.budget_latency_ms), p_text(d.tail_p_value.value_or(1.0)), busy_text),
            !busy.empty()});
      if (d.verdict == Verdict::slower && d.ratio < min_ratio) {
        found.push_back(Regression{
            "slower", i + 1, row.batch, row.accumulation,
            fmt::format(
                "batch {}: {} is {:.1f}% slower than A {}{}", batch, letter(i + 1), (1 - d.ratio) * 100,
                d.one_step ? fmt::format("(one step, beyond every step of the other run and their spread: "
                                         "{})",
                                         p_text(d.mean_p_value.value_or(1.0)))
                : d.from_mean && d.median_and_mean_disagree
                    ? "beyond its mean's noise (Welch's t; by rank most steps were faster, and a few "
                      "much slower ones make the mean)"
                : d.from_mean    ? "beyond its mean's noise (Welch's t; the ranks did not move)"
                : d.from_samples ? "beyond noise"
                : d.few_samples  ? fmt::format("(too few samples for the rank test; Student's t on the "
                                                "means, spread pooled: {})",
                                               p_text(d.mean_p_value.value_or(1.0)))
                                 : "(no samples to test against noise)",
                busy_text),
            !busy.empty()});
      } else if (base.status == PointStatus::ok && !run.absent && run.status != PointStatus::ok)
        found.push_back(Regression{
            "failed", i + 1, row.batch, row.accumulation,
            fmt::format("batch {}: ran in A, {} in {}{}", batch, to_string(run.status), letter(i + 1),
                        run.reason.empty() ? "" : fmt::format(" ({})", run.reason))});
    }
  }
  // A run slower over all its batches (their geometric mean) beyond the means' combined noise and by more
  // than PCT, where no batch alone could tell: a uniform slowdown of a few percent on noisy steps (stalls)
  // reads "same" at every batch, each within its own noise, and is a regression all the same.
  for (size_t i = 0; i < result.geomean.deltas.size(); ++i) {
    const CompareDelta& g = result.geomean.deltas[i];
    // Over one batch the geomean is that batch, which its own row judged (by the rank test at alpha / 2).
    if (g.verdict != Verdict::slower || !g.noise_checked || !(g.ratio < min_ratio) ||
        result.geomean.delta_batches[i] < 2)
      continue;
    const bool row_found = std::any_of(found.begin(), found.end(), [&](const Regression& r) {
      return r.run == i + 1 && r.kind == "slower";
    });
    if (row_found) continue;
    const bool busy = i < result.geomean.delta_busy_host.size() && result.geomean.delta_busy_host[i];
    found.push_back(Regression{
        "geomean", i + 1, 0, 0,
        fmt::format(
            "geomean over {} batches: {} is {:.1f}% slower than A beyond the means' combined noise "
            "({}), though no batch alone was{}",
            result.geomean.delta_batches[i], letter(i + 1), (1 - g.ratio) * 100,
            p_text(g.mean_p_value.value_or(1.0)),
            busy ? "; timed on a busy host, so it may be the machine's load (rerun on a quiet machine)" : ""),
        busy});
  }
  for (const LostFit& f : result.lost_fits)
    found.push_back(Regression{"lost_fit", f.run, f.batch, f.accumulation, lost_fit_text(f)});
  // The baseline's answer under its latency budget, where a run swept that batch too
  // and its latency there is over the budget by more than PCT%: a tail-latency regression at the batch served
  // (the mean may not move). Within PCT% it is the noise at the budget's edge, and only the note says it.
  const RunSummary& base = result.runs.front();
  if (gate.latency_pct && base.latency_slo_ms && base.latency_slo && base.latency_slo->batch) {
    const double budget = *base.latency_slo_ms;
    const std::string name = latency_name(base.latency_percentile);
    for (const CompareRow& row : result.rows) {
      if (row.batch != *base.latency_slo->batch || !row.runs.front().budget_latency_ms) continue;
      for (size_t i = 1; i < row.runs.size(); ++i) {
        const std::optional<double> latency = row.runs[i].budget_latency_ms;
        // Every run is held to the baseline's budget, whatever its own: a run that dropped or moved
        // --latency-slo does not switch the gate off (its samples say its latency just the same).
        if (!latency || *latency <= budget * (1 + latency_pct / 100)) continue;
        const double over = (*latency / budget - 1) * 100;
        found.push_back(Regression{
            "latency_budget", i, row.batch, row.accumulation,
            fmt::format("batch {} (A's answer under the {:g} ms {} budget): {}'s {} is {:.4g} ms, {}% "
                        "over the budget "
                        "(A {:.4g} ms)",
                        batch_label(row.batch, row.accumulation), budget, name, letter(i), name, *latency,
                        // A breach under 1% (PCT 0 gates any) keeps two significant digits: not "0.0%".
                        over >= 1 ? fmt::format("{:.1f}", over) : fmt::format("{:.2g}", over),
                        *row.runs.front().budget_latency_ms)});
      }
    }
  }
  return found;
}

std::vector<std::string> regression_lines(const std::vector<Regression>& found) {
  std::vector<std::string> lines;
  for (const Regression& r : found) lines.push_back(r.text);
  return lines;
}

std::vector<std::string> regressions(const CompareResult& result, double pct) {
  return regression_lines(find_regressions(result, pct));
}

nlohmann::json regressions_json(const CompareResult& result, const std::vector<Regression>& found) {
  nlohmann::json out = nlohmann::json::array();
  for (const Regression& r : found)
    out.push_back({{"kind", r.kind},
                   {"run", r.run < result.runs.size() ? result.runs[r.run].name : std::string()},
                   {"label", letter(r.run)},
                   {"batch", r.kind == "geomean" ? nlohmann::json() : nlohmann::json(r.batch)},
                   {"accumulation", r.kind == "geomean" ? nlohmann::json() : nlohmann::json(r.accumulation)},
                   {"message", r.text},
                   {"busy_host", r.busy_host}});
  return out;
}

bool has_regression(const CompareResult& result, double pct) {
  return !regressions(result, pct).empty();
}

// How a verdict is reached, in the console's and the markdown's footnote alike.
static std::string verdict_rule(const CompareResult& result) {
  return fmt::format(
      "a throughput change beyond {}% and a shift of the step times (Mann-Whitney U) or of their mean "
      "(Welch's t), the two tests at alpha {} together, their p's adjusted for the batches compared (Holm); "
      "without raw samples the threshold alone; with too few for the rank test, Student's t on the means "
      "with the runs' spread pooled; also, as for the geometric mean, a change beyond Student's t at that "
      "level times the means' combined standard error (allowing for drift, and for the spread between rounds "
      "with --rounds); after one step, against another no change at all, against many only beyond every one "
      "of them and their spread (p < {:g}){}",
      result.min_effect_pct, result.alpha, result.alpha,
      result.show_tail
          ? fmt::format(
                "; the {0} column: B's {0} step over A's, longer or shorter where it moved beyond {1}% "
                "and the quantile test (the steps above the pooled {0}, Fisher's exact test, adjusted as "
                "above) gives p < {2:g} that way, also allowing for drift (\"same (drift)\"); \"few steps\" "
                "where no split of so few steps could reach that",
                latency_name(result.tail_percentile), result.min_effect_pct, result.alpha / 2)
          : std::string());
}

std::string run_letter(size_t i) {
  return i < 26 ? std::string(1, static_cast<char>('A' + i)) : fmt::format("R{}", i + 1);
}

std::string format_compare(const CompareResult& result, bool color) {
  std::string out = "compare (A is the baseline)\n";
  for (size_t i = 0; i < result.runs.size(); ++i) {
    const std::string title = run_title(result.runs[i]);
    out += fmt::format("  {}  {}{}{}\n", letter(i), printable_text(result.runs[i].name),
                       title.empty() ? "" : "  ", title);
  }
  out += "\n";
  if (result.rows.empty()) {
    out += "no batch of the baseline's is in another run\n";
  } else {
    const auto lines = rf::render_lines(compare_table(result));
    const bool tail_gated = result.tail_gated;
    out += (color ? "\x1b[1m" + lines[0] + "\x1b[0m" : lines[0]) + "\n";
    for (size_t i = 0; i < result.rows.size(); ++i) {
      out += colored(lines[i + 1], line_verdict(result.rows[i].deltas, tail_gated), color) + "\n";
    }
    if (lines.size() > result.rows.size() + 1) {
      out += colored(lines.back(), line_verdict(result.geomean.deltas, tail_gated), color) + "\n";
    }
  }
  out += "\n";
  for (size_t i = 0; i < result.runs.size(); ++i) {
    out += fmt::format("{}: {}\n", letter(i), run_line(result.runs[i]));
  }
  out += "\nverdicts: " + verdict_rule(result) + "\n";
  for (const auto& note : result.notes) out += "note: " + note + "\n";
  return out;
}

std::string format_compare_markdown(const CompareResult& result, double fail_on_regression_pct,
                                    std::string_view refused) {
  return format_compare_markdown(result, uniform_gate(fail_on_regression_pct), refused);
}

std::string format_compare_markdown(const CompareResult& result, std::optional<GateThresholds> gate,
                                    std::string_view refused) {
  std::string out = "## batchsweep compare\n\n";
  for (size_t i = 0; i < result.runs.size(); ++i) {
    const std::string title = run_title(result.runs[i]);
    out += fmt::format("- **{}**{}: {}{}{}\n", letter(i), i == 0 ? " (baseline)" : "",
                       rf::markdown_cell(printable_text(result.runs[i].name)),
                       title.empty() ? "" : " \u2014 ", rf::markdown_cell(title));
  }
  out += "\n";
  if (result.rows.empty()) {
    out += "No batch of the baseline's is in another run.\n";
  } else {
    out += rf::render_markdown(compare_table(result));
  }
  out += "\n";
  for (size_t i = 0; i < result.runs.size(); ++i) {
    out += fmt::format("- **{}**: {}\n", letter(i), rf::markdown_cell(run_line(result.runs[i])));
  }
  out += "\n_Verdicts: " + verdict_rule(result) + "._\n";
  if (!result.notes.empty()) {
    out += "\n";
    for (const auto& note : result.notes) out += "- " + rf::markdown_cell(note) + "\n";
  }
  // The gate's answer, as the exit code gives it: a markdown posted to a pull request says whether the job
  // failed and why, not only the table.
  if (gate && !refused.empty()) {
    out += fmt::format("\n### Gate: `{}`: **cannot pass**\n\n{}\n", gate_flags(*gate),
                       rf::markdown_cell(refused));
  } else if (gate) {
    const std::vector<Regression> found = find_regressions(result, *gate);
    out +=
        fmt::format("\n### Gate: `{}`: {}\n\n", gate_flags(*gate), found.empty() ? "passed" : "**failed**");
    // The rule as find_regressions applies it: slower beyond noise and by more than the larger of PCT and
    // the minimum effect (under which compare calls no change), over the budget by more than the latency PCT.
    const double pct = gate->pct;
    const double throughput_pct = std::max(pct, result.min_effect_pct);
    const bool tail_gated = gate->latency_pct && (result.runs.front().mode == "infer" || gate->latency_given);
    const double latency_pct = gate->latency_pct.value_or(0);
    const bool budget = gate->latency_pct && result.runs.front().latency_slo_ms.has_value();
    bool tail_unjudged = false;
    for (const CompareRow& row : result.rows)
      for (const CompareDelta& d : row.deltas) tail_unjudged |= d.tail_few_steps;
    if (found.empty())
      out += fmt::format(
          "No run is slower than the baseline, at a batch or over all of them, beyond noise and by more "
          "than {:g}%{}{}, lost a batch that fit{} failed a batch the baseline ran{}.\n",
          throughput_pct,
          pct < result.min_effect_pct
              ? fmt::format(" (compare calls no throughput change under {:g}%, so the gate acts there)",
                            result.min_effect_pct)
              : std::string(),
          tail_gated ? fmt::format(
                           ", has a {} step longer beyond noise and by more than {:g}%{}",
                           latency_name(result.tail_percentile), std::max(latency_pct, result.min_effect_pct),
                           tail_unjudged ? " (where its steps could tell: see the warnings below)" : "")
                     : std::string(),
          budget ? "," : " or",
          budget ? fmt::format(", or went more than {:g}% over the baseline's latency budget", latency_pct)
                 : std::string());
    // Said where the latency gate is off: a reader of "passed" must not think the tail was judged.
    if (!gate->latency_pct) out += "Latency is not gated (`--fail-on-latency-regression off`).\n";
    for (const Regression& r : found) out += "- " + rf::markdown_cell(r.text) + "\n";
    if (!result.short_notes.empty()) {
      out += "\n";
      for (const auto& note : result.short_notes) out += "- warning: " + rf::markdown_cell(note) + "\n";
    }
  }
  return out;
}

bool same_serving(const RunSummary& a, const RunSummary& b) {
  return a.serving && b.serving && a.serving->request_rate == b.serving->request_rate &&
         a.serving->max_queue_delay_ms == b.serving->max_queue_delay_ms &&
         a.serving->latency_percentile == b.serving->latency_percentile;
}

std::optional<double> serving_rate_ratio(const RunSummary& base, const RunSummary& run) {
  if (!base.serving || !run.serving || !base.serving->most_within_budget || !run.serving->most_within_budget)
    return std::nullopt;
  const Serving &a = *base.serving, &b = *run.serving;
  if (a.max_queue_delay_ms != b.max_queue_delay_ms || a.latency_percentile != b.latency_percentile ||
      !same_budget(base, run) || !a.best.batch || !b.best.batch || !(a.request_rate > 0))
    return std::nullopt;
  return b.request_rate / a.request_rate;
}

std::optional<double> serving_ratio(const RunSummary& base, const RunSummary& run) {
  // Searched rates (--request-rate max) differ by design: their latencies are each budget's edge.
  if (!same_serving(base, run) || base.serving->most_within_budget || run.serving->most_within_budget)
    return std::nullopt;
  const std::optional<double>&a = base.serving->best.latency_ms, &b = run.serving->best.latency_ms;
  if (!base.serving->best.batch || !run.serving->best.batch || !a || !b || !(*a > 0)) return std::nullopt;
  return *b / *a;
}

nlohmann::json to_json(const CompareResult& result) {
  using nlohmann::json;
  json runs = json::array();
  for (const auto& r : result.runs) {
    runs.push_back(
        {{"name", r.name},
         {"label", letter(runs.size())},  // A, B, ...: one file given twice has two
         {"model", r.model},
         {"device", r.device},
         {"backend", r.backend},
         {"mode", r.mode},
         {"precision", r.precision},
         {"checkpointing", !r.checkpointing.empty()},
         {"checkpoint_blocks", r.checkpoint_blocks > 0 ? json(r.checkpoint_blocks) : json()},
         {"model_overrides", r.overrides},
         {"state", r.state.empty() ? json() : json(r.state)},
         {"knee", report_json::knee_json<json>(r.knee)},
         {"max_fit", report_json::choice_json<json>(r.max_fit)},
         {"untimed_fit", r.untimed_fit ? json(*r.untimed_fit) : json()},
         {"best_throughput", report_json::choice_json<json>(r.best)},
         {"price_per_hour", r.price_per_hour ? json(*r.price_per_hour) : json()},
         // What a million samples cost at the best throughput (a card saturated): with the recommended
         // batch's cost, the figures a comparison of cards reads without parsing the notes.
         {"best_cost_per_million_samples",
          r.price_per_hour && r.best.samples_per_second && *r.best.samples_per_second > 0
              ? json(cost_per_million(*r.price_per_hour, *r.best.samples_per_second))
              : json()},
         {"recommended_cost_per_million_samples",
          r.recommended_cost_per_million_samples ? json(*r.recommended_cost_per_million_samples) : json()},
         {"recommended", report_json::recommendation_json<json>(r.recommended)}});
    // As the report writes it: a script reading only this must not take the micro-batch for the step.
    if (r.recommended.batch && r.recommended_accumulation) {
      runs.back()["recommended"]["accumulation"] = *r.recommended_accumulation;
      runs.back()["recommended"]["effective_batch"] = *r.recommended.batch * *r.recommended_accumulation;
    }
    if (r.serving) {
      const Serving& sv = *r.serving;
      json serving = {{"request_rate", sv.request_rate},
                      {"max_queue_delay_ms", sv.max_queue_delay_ms},
                      {"latency_percentile", report_json::percentile_json<json>(sv.latency_percentile)},
                      {"best", report_json::choice_json<json>(sv.best)},
                      {"latency_se_ms", json()},
                      {"latency_ratio", json()},
                      {"most_within_budget", sv.most_within_budget},
                      {"request_rate_ratio", json()}};
      if (const ServingBatch* row = sv.best_row(); row && row->latency_se_ms)
        serving["latency_se_ms"] = *row->latency_se_ms;
      if (const auto ratio = runs.size() > 1 ? serving_ratio(result.runs.front(), r) : std::nullopt)
        serving["latency_ratio"] = *ratio;
      if (const auto ratio = runs.size() > 1 ? serving_rate_ratio(result.runs.front(), r) : std::nullopt)
        serving["request_rate_ratio"] = *ratio;
      runs.back()["serving"] = std::move(serving);
    }
    if (r.latency_slo) {
      json budget = report_json::choice_json<json>(*r.latency_slo);
      budget["budget_ms"] = r.latency_slo_ms ? json(*r.latency_slo_ms) : json();
      budget["latency_percentile"] = report_json::percentile_json<json>(r.latency_percentile);
      runs.back()["latency_slo"] = std::move(budget);
    }
  }
  json rows = json::array();
  for (const auto& row : result.rows) {
    json cells = json::array();
    for (size_t i = 0; i < row.runs.size(); ++i) {
      const CompareCell& c = row.runs[i];
      cells.push_back({{"run", result.runs[i].name},
                       {"label", letter(i)},
                       {"status", c.absent ? std::string("not_swept") : std::string(to_string(c.status))},
                       {"reason", c.reason},
                       // Nothing measured where the point did not run: null, never 0.
                       {"samples_per_second",
                        c.status == PointStatus::ok ? number_or_null(c.samples_per_second) : json()},
                       {"samples", c.samples},
                       {"p99_ms", c.p99_ms ? json(*c.p99_ms) : json()},
                       // at the baseline's budget percentile: what the gate reads
                       {"latency_ms", c.budget_latency_ms ? json(*c.budget_latency_ms) : json()},
                       {"busy_host", c.busy_host}});
    }
    json deltas = json::array();
    for (size_t i = 0; i < row.deltas.size(); ++i)
      deltas.push_back(delta_json(row.deltas[i], result.runs[i + 1].name, letter(i + 1)));
    rows.push_back(
        {{"batch", row.batch}, {"accumulation", row.accumulation}, {"runs", cells}, {"deltas", deltas}});
  }
  json geomean_rates = json::array();
  for (const auto& v : result.geomean.samples_per_second) {
    geomean_rates.push_back(v ? number_or_null(*v) : json(nullptr));
  }
  json geomean_deltas = json::array();
  for (size_t i = 0; i < result.geomean.deltas.size(); ++i) {
    geomean_deltas.push_back(delta_json(result.geomean.deltas[i], result.runs[i + 1].name, letter(i + 1)));
  }
  json lost = json::array();
  for (const LostFit& f : result.lost_fits) {
    lost.push_back({{"run", result.runs.at(f.run).name},
                    {"label", letter(f.run)},
                    {"batch", f.batch},
                    {"accumulation", f.accumulation},
                    {"status", to_string(f.status)},
                    {"reason", f.reason},
                    {"baseline_max_fit", f.baseline_max_fit}});
  }
  return {{"baseline", result.runs.empty() ? std::string() : result.runs.front().name},
          {"alpha", result.alpha},
          {"p_adjustment", "holm"},
          {"min_effect_pct", result.min_effect_pct},
          {"tail_percentile", report_json::percentile_json<json>(result.tail_percentile)},
          {"runs", runs},
          {"rows", rows},
          {"geomean",
           {{"batches", result.geomean.batches},
            {"delta_batches", result.geomean.delta_batches},
            {"samples_per_second", geomean_rates},
            {"deltas", geomean_deltas}}},
          {"lost_fits", lost},
          {"notes", result.notes}};
}

}  // namespace bsw
