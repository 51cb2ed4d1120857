// Analysis of a sweep: the knee of the throughput curve (Kneedle) and how stable it is under the measured
// noise, the saturation batch, the largest batch that fits, the best throughput, the latency budget, the
// energy optimum, the per-point cost, the fastest micro-batch x accumulation split, and ONE recommended
// batch. Pure logic on the report's data types; nothing here knows a backend.
//
// Which points count. Only "ok" points take part: status ok and samples_per_second > 0 (and finite). The
// curve the knee and saturation run on has one point per distinct micro-batch (Point::batch): where several
// points share a batch (different accumulation) the one of highest throughput stands for it. max_fit,
// best_throughput, latency_slo, energy_optimal and effective_batch_split look at every ok point; each
// BatchChoice names the micro-batch of the point it chose.
//
// The knee (Kneedle: Satopaa, Albrecht, Irwin, Raghavan, "Finding a 'Kneedle' in a Haystack", ICDCS-W 2011),
// on x = log2(batch), y = log2(samples/s), as a concave increasing curve:
//   1. fewer than kMinKneePoints ok batches: no knee ("too few points (N ok, need 4)"); but where the largest
//      batch passes step 4's still-scaling test and the curve is not flat (step 2), the call is still
//      scaling, with the too-few note, so a short sweep rising at its end gets rule 5 below.
//   2. a flat curve: when the best throughput is within kFlatThroughputGain (5%) of the smallest batch's, the
//      normalised curve would be pure noise, so there is no knee ("no knee: throughput curve has no concave
//      bend (...)"). This also covers curves that only fall.
//   3. Kneedle proper (see `kneedle`): normalise x and y to [0, 1], difference curve y_d = y_n - x_n,
//      local maxima of y_d are candidates, threshold T = y_d(candidate) - S * mean(diff(x_n)); the FIRST
//      candidate whose y_d falls to or below T before the next local maximum is the knee (kneed's
//      online=false). y is log2(samples/s) without the dips before the best throughput: a batch slower than
//      a smaller one there reads as the straight line between the points around it (flattened into a step,
//      it would read as a bend before the real one); past the best, y is the best (a slower larger batch is a
//      plateau, never a bend). So the knee is always a batch faster than every smaller one. And the smallest
//      batches, while each one's step took more than kSlowFirstStepExcess (10%) longer than a larger batch's
//      (throughput more than linear in the batch, which a sound measurement never shows: a slow first point,
//      which paid for what warm-up missed), read as if their steps took the larger one's time. Only leading
//      points: further in, noise of a few percent on a near-linear stretch would lift points and flatten the
//      normalised curve, and dips there are bridged already.
//   4. no knee from Kneedle: "throughput still scaling at the largest batch (...)" when the largest batch has
//      the best throughput and beats the batch before it by more than kStillScalingGain (3%) per doubling of
//      the batch and by more than kStillScalingMinGain (1%) however short the step (a smaller gain is within
//      a measurement's noise). On a sweep finer than doublings, whose last step is too short to gain 1%,
//      also when it beats the largest batch at most half its size by more than 3% per doubling, the fastest
//      batch lies within that last doubling, the largest is within 1% of it, and the last step keeps within
//      1% of the doubling's trend (a last step that flattens is a bend, not scaling). Otherwise "no knee:
//      throughput curve has no concave bend". A candidate the sweep ended before confirming is NOT declared
//      a knee (as in the paper and kneed: the drop after a maximum is what makes it a knee); the reason names
//      it and says to extend the sweep. A knee Kneedle confirms below kKneeLeastShareWhileScaling (50%) of
//      the best throughput, on a curve still scaling at its end by more than kStillScalingStrongGain (25%) a
//      doubling, is still scaling too, the reason naming the bend: throughput more than doubles past it and
//      still rises fast, so it is not where throughput stops scaling (a sweep ended before the curve bends).
// Knee confidence: each curve point's throughput is moved within how well its mean step time is known: by
// Student's t at 99% times the standard error of the mean from its samples_ms, allowing for drift (batch
// means), up (a shorter mean) and down (points with no standard error do not move), and steps 1-4 are rerun
// on: every point moved alone up and alone down,
// every "tilt" (points below a split moved one way, the rest the other), all up, all down, and
// kKneePerturbations seeded pseudo-random patterns (half at full magnitude with random signs, half with
// random magnitudes in [-1, 1] of the spread). The same inputs always give the same answer. "stable" when
// every curve gives the same knee batch (or every one gives none), else "range" with range_low / range_high
// the smallest and largest knee batch seen; the reason then says so, and how often the knee vanished.
// "contended" instead of "stable" where a curve point was timed on a busy host (Point::timed_on_busy_host):
// the knee held under that run's own noise, but the load moved whole steps, and a rerun may put it elsewhere
// (two runs of one command on a loaded 2-CPU machine put it at none and at batch 2, each "stable").
// "unknown" when no point has two samples: nothing can be moved, which says nothing about stability.
//
// The recommendation (Analysis::recommended), first rule that applies:
//   1. no ok point: none.
//   1b. a request rate is given (--request-rate): the serving batch, analysis.serving.best (with a latency
//      SLO, it holds the requests' latency, queueing included, not the step's); none where every batch
//      saturates or none keeps the budget.
//   2. a latency SLO is given: the latency_slo batch (highest throughput whose step time at the budget's
//      percentile, p99 by default, fits the budget, or the batch lowest there within noise of it); none when
//      nothing fits, and `why` gives the smallest seen.
//   3. an effective-batch sweep (one effective batch, accumulation varies): the fastest split.
//   4. a knee whose throughput reaches saturation_pct of the best: the knee, where throughput stops scaling
//      well; below that, the saturation batch (the knee came too early to be worth it). The knee is never
//      past the best batch: it is faster than every smaller batch (step 3).
//   5. no knee and throughput still scaling at the largest batch: max_fit (the largest batch that fits).
//   6. otherwise (too few points and not still scaling, flat curve, no concave bend): the saturation batch.
// `why` is one line and cites numbers, e.g. "knee at 256: 94% of the best throughput (batch 1024) with 25% of
// its memory". Every recommended batch is an ok point.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "batchsweep/report.hpp"

namespace bsw {

inline constexpr std::size_t kMinKneePoints = 4;
inline constexpr double kFlatThroughputGain = 0.05;   // best within 5% of the smallest batch: a flat curve
inline constexpr double kStillScalingGain = 0.03;     // per doubling at the largest batch: "still scaling"
inline constexpr double kStillScalingMinGain = 0.01;  // and at least this on the last step, however short
// A Kneedle knee below this share of the best throughput, on a curve still rising by more than
// kStillScalingStrongGain a doubling at its end, is a bend where throughput has not stopped scaling: the call
// is still scaling.
inline constexpr double kKneeLeastShareWhileScaling = 0.5;
inline constexpr double kStillScalingStrongGain = 0.25;
// A leading point whose step took this much longer than a larger batch's reads as linear scaling to it.
inline constexpr double kSlowFirstStepExcess = 0.10;
inline constexpr int kKneePerturbations = 200;  // seeded random noise patterns for the knee confidence
inline constexpr uint64_t kKneePerturbationSeed = 0x6b6e6565646c65ULL;

// Kneedle on one concave increasing curve. x must be strictly increasing and the same length as y (at least 2
// values, all finite), else std::invalid_argument. `knee` is the index of the confirmed knee. `unconfirmed`
// is the index of the last candidate that lies above the diagonal (y_d > 0) but that the data ended before
// confirming (never the last index). Confirmation is "y_d <= T" with a 1e-9 tolerance, so that a perfectly
// flat step after a corner, which lands exactly on T with S = 1, counts; candidates on or below the diagonal
// (y_d <= 0) are not a concave bend and are skipped. A constant y has no knee.
struct KneedleResult {
  std::optional<std::size_t> knee;
  std::optional<std::size_t> unconfirmed;
};
[[nodiscard]] KneedleResult kneedle(std::span<const double> x, std::span<const double> y, double sensitivity);

// The knee of a sweep's points (steps 1-4 above) with its confidence. Does not modify the points.
[[nodiscard]] KneeResult find_knee(std::span<const Point> points, double sensitivity);

// A throughput lead smaller than this (percent) is no difference: compare's minimum effect, and the margin
// within which the latency choice prefers the lower-latency batch over a faster one.
inline constexpr double kSameThroughputPct = 1.0;

// Twice the combined standard error of two means, from each mean's relative standard error: a change inside
// it is noise (compare's verdicts, the latency choice, the effective-batch tie).
[[nodiscard]] inline double noise_margin(double se_a, double se_b) {
  return 2.0 * std::sqrt(se_a * se_a + se_b * se_b);
}

// Whether throughput is flat up to `point`: it gains less than kFlatBelowGain over the fastest ok point of
// the same accumulation at half its batch or less (false where there is none). On a concave curve a larger
// batch then gains less than that too, so neither the latency-budget bisection of --batch auto nor the
// latency choice's hint looks between `point` and the next batch. The reference that beats it is returned.
inline constexpr double kFlatBelowGain = 0.03;
[[nodiscard]] const Point* flat_below(std::span<const Point> points, const Point& point);

// Whether batches lo < hi on either side of a latency budget are close enough that nothing between them is
// worth timing: hi - lo at most lo / 16, or at most 8 from batch 8 up (1 below). Where the --batch auto
// bisection stops, and where the latency choice's hint stays silent.
[[nodiscard]] bool budget_edge_narrow(int64_t lo, int64_t hi);

// Throws UsageError naming the flag for options out of range: --knee-sensitivity (> 0), --saturation
// (0 < pct <= 100), --latency-slo (> 0 ms), --latency-percentile (is_latency_percentile), --price-per-hour
// (>= 0), --request-rate (> 0 requests/s), --max-queue-delay (>= 0 ms); all must be finite.
void validate(const AnalysisOptions& options);

// The timed steps a latency budget at percentile `pct` needs by default: enough that at least one step lies
// above the percentile (100 at p99, 20 at p95, 10 at p90), so the p99 a budget is judged on is not simply the
// slowest of a few steps, nor read lower than trtexec's or perf_analyzer's nearest-rank p99 by much. run
// raises --min-samples to it where a budget is given and --min-samples is not; --timeout still bounds a
// point.
[[nodiscard]] inline int64_t latency_budget_min_samples(double pct) {
  return pct < 100.0 ? static_cast<int64_t>(std::ceil(100.0 / (100.0 - pct) - 1e-9)) : 1;
}

// The step-time percentiles a latency budget may hold (--latency-percentile): 50 to 99.99 with at most two
// decimals (90, 95, 99 and 99.9 the usual; trtexec's --percentile takes any). Those step_ms has no field for
// (p99.9, p99.5) come from the raw samples; a tail at one step in N needs N steps
// (latency_budget_min_samples).
[[nodiscard]] bool is_latency_percentile(double pct);
// How an error says which percentiles is_latency_percentile takes.
inline constexpr const char* kLatencyPercentileRule =
    "a percentile from 50 to 99.99, at most two decimals (e.g. 95, 99, 99.5, 99.9)";
// "p99" for 99: how the answers name the percentile.
[[nodiscard]] std::string latency_name(double pct);
// A point's step time at percentile `pct`: its summary (step_ms.p50/p90/p95/p99), or its raw samples where
// the summary is empty (a hand-made report); nullopt without either.
[[nodiscard]] std::optional<double> step_latency_ms(const Point& point, double pct);

// run --rounds: whether a point's rounds measured one machine. Each round with at least one step has its mean
// step (its slice of samples_ms); spread_pct = (slowest mean - fastest) / fastest * 100. p_value: the
// two-sided p that the slowest and the fastest round share one mean, by Welch's t on their drift-aware
// standard errors (drift_standard_error, significant_only) and Welch-Satterthwaite degrees of freedom,
// Bonferroni over the R (R - 1) / 2 pairs of R such rounds, capped at 1; nullopt where either has under 2
// steps. Steps without spread (a script without noise): 0 where the means differ, 1 where they do not.
// `disagree`: p < kRoundsAlpha and spread_pct >= kRoundSpreadPct — the machine ran the batch at another
// speed in another round (clocks, temperature, other processes), so a rerun would see either.
struct RoundsAgreement {
  std::vector<double> means_ms;  // each round with steps, in order
  double spread_pct = 0;
  int slowest = 0, fastest = 0;  // 1-based numbers of those rounds among Point::rounds
  std::optional<double> p_value;
  bool disagree = false;
};
inline constexpr double kRoundSpreadPct = 1.0;
inline constexpr double kRoundsAlpha = 0.01;
// nullopt where fewer than two rounds have steps, or the rounds' steps do not add up to samples_ms.
[[nodiscard]] std::optional<RoundsAgreement> rounds_agreement(const Point& point);

// How well a point's mean step is known: its relative standard error (0.01 = 1%) and that estimate's degrees
// of freedom, allowing for drift (drift_standard_error): the batch means where its steps drift together (for
// a point that met its targets, only where they show it; for one that stopped short of them, where they are
// the larger), else stddev / mean / sqrt(n) on n - 1. `drift`: the batch means set it. nullopt under 2
// steps or with a non-finite one. compare's verdicts rest on it.
struct MeanStepError {
  double se = 0;
  double df = 0;
  bool drift = false;
};
// How far a run's round means (run --rounds) stray from their point's mean, in relative variance of one
// round's mean (0.0001 = 1%^2), with degrees of freedom. The machine's speed moves over seconds (clocks,
// heat, where the threads run, other processes), which no one point's steps show: 12 idle reruns of one CPU
// sweep differed by 4-6 times what each run's steps said of its means. A round is a rerun of its point inside
// the run. Two parts:
// - `common`: the offset a round shares across the run's points (a slow round is slow at every batch): the
//   variance of the rounds' mean offsets over the points, on the rounds less one degrees of freedom;
// - `own`: what is left of each point's rounds' spread once that offset is taken out, pooled over the
//   points, on their rounds less one each, less the common part's.
// Each part less what the rounds' own steps' noise puts in it (their drift-aware standard errors), floored at
// 0: a point whose rounds had few, noisy steps does not widen every other point's interval.
// nullopt where no point has two rounds with steps.
struct RoundNoise {
  double common_var = 0, common_df = 0;
  double own_var = 0, own_df = 0;
};
[[nodiscard]] std::optional<RoundNoise> round_noise(std::span<const Point> points);
[[nodiscard]] std::optional<RoundNoise> round_noise(std::span<const Point* const> points);
// With `rounds` (the run's round_noise), the larger of the above and the rounds' error: (common_var + own_var
// + the point's rounds' own variance, their steps' error squared, averaged) over its rounds with steps (one
// for a point measured once), on Welch-Satterthwaite's degrees of freedom over the three, `drift` set.
[[nodiscard]] std::optional<MeanStepError> mean_step_error(const Point& point,
                                                           const std::optional<RoundNoise>& rounds = {});
// The half-width of the 95% confidence interval of a point's throughput, in % of it: Student's t on
// mean_step_error's degrees of freedom times its standard error (the throughput is the batch over the mean
// step, so its relative error is the mean step's). nullopt where mean_step_error is, or the point is not ok.
[[nodiscard]] std::optional<double> throughput_ci95_pct(const Point& point,
                                                        const std::optional<RoundNoise>& rounds = {});
// Each round's steps, its slice of samples_ms (empty for a failed round); empty where the point has no rounds
// or their steps do not add up to samples_ms.
[[nodiscard]] std::vector<std::span<const double>> round_slices(const Point& point);
// How many of the point's rounds have steps (round_slices that are not empty).
[[nodiscard]] size_t rounds_with_steps(const Point& point);

// Serving at options.request_rate (run/analyze --request-rate; the model is in src/analysis/serving.cpp and
// the README's "Serving"): for each ok batch of one micro-batch a step, as a dynamic batcher's max batch, the
// requests it serves and their latency, simulated from the measured steps; and the max batch of the lowest
// request latency at options.latency_percentile among the settled ones (the smallest within kServingTiePct of
// it, or twice the two latencies' combined standard error), held to options.latency_slo_ms where given. A max
// batch whose throughput is at or below the rate is saturated; one whose latency the simulation cannot pin
// down (fewer than kServingMinSteps steps, or a mean or percentile whose standard error, from the spread
// between kServingReplications independent replications, is above kServingMaxRelativeError of it) is not
// settled and is not chosen; nor is one whose mean moves by more than that when the simulation starts from a
// backlog (kServingStartChecks). Below kServingNearCapacity such a row is simulated again with kServingLonger
// times the requests (a few long steps, heavy-tailed ones); near its capacity the queue wanders longer than
// any simulation. Deterministic: fixed seeds, and the same arrivals for every max batch.
// The most --price-per-hour takes (any currency): with a step of at most a year, the cost of a million
// samples then stays a finite number, as the report's schema holds it.
inline constexpr double kMaxPricePerHour = 1e9;
inline constexpr std::size_t kServingReplications = 8;   // independent runs per max batch, for the errors
inline constexpr std::size_t kServingRequests = 200000;  // timed per max batch, over the replications
inline constexpr std::size_t kServingLonger = 4;         // times as many where that does not settle
// The percentile's error: the share of requests above it counted in kServingSections consecutive sections
// of each replication, and read kServingErrorZ of that share's errors either side (Woodruff's interval).
inline constexpr std::size_t kServingSections = 10;
inline constexpr double kServingErrorZ = 2.0;
// Before each replication's timed requests, this many (kServingWarmupSteps max batches of them, but no more
// than kServingWarmupMostRequests): the queue fills. The cap keeps a max batch of thousands to millions from
// drawing 20 steps of arrivals a replication: a max batch of 2^24 took 2.9 GB and 16 s a rate, and
// --request-rate max minutes, with a floor of two max batches. A queue still filling after it remembers its
// start, which the backlog start below sees: it reads unsettled, as any does.
inline constexpr std::size_t kServingWarmupRequests = 5000;
inline constexpr std::size_t kServingWarmupSteps = 20;
inline constexpr std::size_t kServingWarmupMostRequests = std::size_t{1} << 18;
// Latencies this close are one (or within twice their noise). A smaller max batch taken only within the
// noise (more than kServingTiePct above the lowest) is simulated again with the lowest, kServingLonger times
// as long, and the choice made on those rows.
inline constexpr double kServingTiePct = 2.0;
inline constexpr int64_t kServingMinSteps = 200;  // a latency from fewer steps is not settled
inline constexpr double kServingMaxRelativeError = 0.05;
// kServingStartChecks replications also run from a backlog of kServingBacklog max batches: a mean that moves
// more than kServingMaxRelativeError with the start is not settled (a queue near its capacity remembers its
// start; one under 90% of it drains 2 max batches within the warm-up).
inline constexpr std::size_t kServingStartChecks = 2;
// Near its capacity a queue of steps wanders for about 1 / (1 - load)^2 of them (load: the rate over the max
// batch's capacity): a row whose replications each ran fewer steps than that is not settled either.
[[nodiscard]] inline double serving_relaxation_steps(double rate, double capacity) {
  const double load = rate / capacity;
  return load < 1 ? 1.0 / ((1.0 - load) * (1.0 - load)) : std::numeric_limits<double>::infinity();
}
inline constexpr std::size_t kServingBacklog = 2;
// The rate at this share of the best max batch's capacity or more: said to be near it.
inline constexpr double kServingNearCapacity = 0.9;
inline constexpr uint64_t kServingSeed = 0x73657276696e67ULL;
// --request-rate max: options.request_rate holds this, and the rate served is a search's. The most requests/s
// at which some max batch's settled request latency at the percentile keeps within options.latency_slo_ms
// (needed), beyond the simulation's noise (some settled, unsaturated max batch's latency plus twice its
// standard error within it; the answer is the tie rule's, its point estimate within the budget):
// each probe is simulate_serving's table at that rate, from the largest capacity down by halves to a rate
// served (at most kServingRateHalvings), then bisected (on
// a log scale) until the rate served and the one above it that is not are within kServingRateTolerance of
// each other; then rates from the largest capacity down to that one, kServingRateScanStep apart (at most
// kServingRateScanMost of them), for one served beyond a gap (a hold), which bounds a bisection again; also
// where the halving found none. A budget under the fastest measured step is served at no rate.
// Serving::most_within_budget and unserved_above say so. Feasibility is not strictly monotone in the rate (a
// hold fills batches faster at more load), so it is the most found from above, not a proof that no higher
// rate is served.
inline constexpr double kRequestRateMax = std::numeric_limits<double>::infinity();
inline constexpr const char* kRequestRateMaxNeedsBudget =
    "--request-rate max: the most requests/s is the most within a latency budget: give --latency-slo MS "
    "(the requests' latency at --latency-percentile)";
inline constexpr double kServingRateTolerance = 0.01;
inline constexpr int kServingRateHalvings = 16;
inline constexpr double kServingRateScanStep = 0.04;
inline constexpr int kServingRateScanMost = 48;
[[nodiscard]] inline bool is_request_rate_max(const std::optional<double>& rate) {
  return rate && std::isinf(*rate) && *rate > 0;
}
[[nodiscard]] Serving simulate_serving(std::span<const Point> points, const AnalysisOptions& options);
// The batches simulate_serving draws at their mean step alone, because their point kept no steps (a hand-made
// or trimmed report): ok points of one micro-batch a step, the fastest where two share a batch, with no
// finite positive sample. The serving heading names them from this, so it says what the simulation did.
[[nodiscard]] std::vector<int64_t> serving_mean_only_batches(std::span<const Point> points);
// The most requests a max batch may take to be simulated: request by request, a step of a million of them
// near its capacity draws a million arrivals in each of the replications' streams (gigabytes, and minutes for
// --request-rate max). Batches above it are left out of the serving table (a dynamic batcher's max batch is
// rarely past a few thousand), and the heading names them (serving_unsimulated_batches).
inline constexpr int64_t kServingMostMaxBatch = 131072;
// The warm-up holds two steps of the largest max batch simulated at least.
static_assert(kServingWarmupMostRequests >= 2 * static_cast<std::size_t>(kServingMostMaxBatch));
[[nodiscard]] std::vector<int64_t> serving_unsimulated_batches(std::span<const Point> points);

// Sets telemetry->cost_per_million_samples = price_per_hour / 3600 / samples_per_second * 1e6 on every ok
// point (creating the telemetry object where absent) and clears it on the others.
void annotate_cost(std::vector<Point>& points, double price_per_hour);

// The whole analysis. Validates the options (UsageError), then, when options.price_per_hour is set, annotates
// the points' cost in place (annotate_cost) — the only change it makes to them; their order is kept.
[[nodiscard]] Analysis analyze(std::vector<Point>& points, const AnalysisOptions& options);

}  // namespace bsw
