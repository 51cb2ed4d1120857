// Comparing sweeps: the first report is the baseline A, the others (B, C, ...) are set against it batch by
// batch. A verdict needs a throughput change beyond a minimum effect (1%) and a significant test on the raw
// step times: Mann-Whitney U (a shift of the steps) or Welch's t (a change of their mean, which throughput is
// made of), each at alpha / 2 (alpha 0.01 together), with each run's p's adjusted across its batches (Holm),
// so noise alone reads as a change at any batch at most alpha of the time. Where the samples are too few for
// the rank test ever to reach alpha / 2, the minimum effect and the means' noise decide.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/report.hpp"

namespace bsw {

inline constexpr double kCompareAlpha = 0.01;
inline constexpr double kCompareMinEffectPct = kSameThroughputPct;  // analysis.hpp

struct CompareOptions {
  // One per report, in order: the file names, used in errors and output. Missing names read "run 1", "run 2",
  // ...
  std::vector<std::string> names;
  // Compare reports of different models (settings.model.name), e.g. to set two model sizes side by side.
  // Devices and precisions may always differ (two GPU types, bf16 against fp16); both are shown.
  bool allow_model_mismatch = false;
  double alpha = kCompareAlpha;                  // Mann-Whitney significance level
  double min_effect_pct = kCompareMinEffectPct;  // |B/A - 1| must exceed this to call a change
  // A gate judges training runs' tails too (--fail-on-latency-regression given): the batches whose tail
  // could not be judged are then noted in training as they are in inference.
  bool tail_gated_in_training = false;
  // A gate holds latency (false: --fail-on-latency-regression off). Where it does not, the batches whose
  // latency could not be judged are notes only, not short_notes the CLI repeats beside the gate's answer.
  bool latency_gated = true;
};

enum class Verdict { same, faster, slower, not_comparable };
[[nodiscard]] std::string_view to_string(Verdict v);

// What a run looks like at a glance: where it came from and what its analysis chose.
struct RunSummary {
  std::string name;  // CompareOptions::names, or "run N"
  std::string model, device, backend, mode, precision;
  std::string threads;  // a CPU run's compute threads (device.threads), empty where the report says none
  // What its MFU is a fraction of: "a measured GEMM rate" (devices --calibrate), "the spec sheet's dense
  // peak", "a script's peak", else empty (device.peak_flops_source).
  std::string mfu_peak;
  // run --memory-limit: the card named ("L4") or the size; "none" without one.
  std::string memory_limit = "none";
  std::string
      split;  // "accumulation 4", "effective batch 256"; empty for one micro-batch a step (title only)
  std::string checkpointing;  // "activation checkpointing" (settings.checkpointing), else empty (title only)
  std::vector<std::string> overrides;  // settings.model_overrides (run --set), as given
  int64_t checkpoint_blocks = 0;       // settings.checkpoint_blocks (run --checkpoint-blocks); 0: all or none
  std::string state;  // Report::state: "complete", "interrupted", "in_progress", or empty (not said)
  bool first_round_finished = false;  // run --rounds: a later round had begun (every batch is in)
  KneeResult knee;
  BatchChoice max_fit;
  // A larger batch the run found to fit but did not time (settings.untimed_fit: a step too slow for
  // --timeout), so max_fit is not the card's memory edge.
  std::optional<int64_t> untimed_fit;
  BatchChoice best;  // the highest throughput, at whichever batch each run reached it
  Recommendation recommended;
  std::optional<int64_t> recommended_accumulation;  // the micro-batches a step of the recommendation, if any
  std::optional<double> recommended_cost_per_million_samples;  // USD, where the run has a price
  std::optional<double> price_per_hour;                        // USD (settings.price_per_hour), if given
  std::optional<double> latency_slo_ms;    // the run's latency budget (settings.latency_slo_ms), if any
  double latency_percentile = 99;          // the step-time percentile it holds (settings.latency_percentile)
  std::optional<BatchChoice> latency_slo;  // and its answer under that budget
  // Its serving at a request rate (analysis.serving: the run's --request-rate, or compare's, which simulates
  // every run at one rate), where it has one.
  std::optional<Serving> serving;
};

// Whether two runs serve at one rate, batcher hold and percentile, so their request latencies compare.
[[nodiscard]] bool same_serving(const RunSummary& a, const RunSummary& b);
// B/A request latency at the percentile, each run at its own best max batch, where both have one at one
// rate (same_serving): what choosing between cards for a server compares.
[[nodiscard]] std::optional<double> serving_ratio(const RunSummary& base, const RunSummary& run);
// --request-rate max in both, at one hold, percentile and latency budget: B/A the most requests/s each serves
// within the budget (each at its own max batch), where both serve some.
[[nodiscard]] std::optional<double> serving_rate_ratio(const RunSummary& base, const RunSummary& run);

// One run's point at a compared batch.
struct CompareCell {
  // The run did not sweep this batch (a row of three or more runs that the baseline and some other run
  // share): nothing below holds, and its delta is not_comparable ("not swept").
  bool absent = false;
  PointStatus status = PointStatus::ok;
  std::string reason;
  double samples_per_second = 0;
  size_t samples = 0;  // raw step-time samples (one: a step past --timeout, judged by the prediction test)
  // The relative standard error of the mean step time, where there are samples, allowing for drift: from 20
  // steps the batch-means estimate where the steps show drift (or the point stopped short and it is the
  // larger), else stddev / mean / sqrt(n).
  std::optional<double> standard_error;
  double standard_error_df = 0;  // its degrees of freedom: n - 1, or 9 where the batch means set it
  std::optional<double> p99_ms;  // the p99 step time, where the point ran
  // The step time at the baseline's budget percentile (p99 without a budget), where the point ran.
  std::optional<double> budget_latency_ms;
  // Timed while other processes competed for its CPUs or the hypervisor took them (PointHost): a verdict at
  // this batch may be the machine's load.
  bool busy_host = false;
};

// A run (B, C, ...) against the baseline at one batch.
struct CompareDelta {
  double ratio = 0;  // B/A samples per second; NaN when either point is not ok
  Verdict verdict = Verdict::not_comparable;
  bool from_samples = false;  // false: a throughput threshold only, shown as "(no samples)"
  // Samples on both sides, but too few for the rank test ever to reach alpha / 2 on them (3 a side: p >= 0.1;
  // 2 against more than 20, where the normal approximation is used: p >= 0.014). The threshold decides, and a
  // change within twice the combined standard error of the two mean step times is "same": "(few samples)".
  bool few_samples = false;
  // few_samples because every step on both sides took the same time (a deterministic step, to the timer's
  // resolution): no number of such samples could ever move the ranks. Shown "(steps all equal)".
  bool tied_samples = false;
  std::optional<double> p_value;  // two-sided Mann-Whitney p, when from_samples
  // from_samples, and the verdict rests on the mean step time, which throughput is made of: Welch's t-test
  // rejected at alpha / 2 though the rank test did not (a few much slower steps move the mean, and so the
  // throughput, but barely the ranks).
  bool from_mean = false;
  std::optional<double> mean_p_value;  // two-sided Welch's t-test p on the mean step times, when from_samples
  // from_samples, a change beyond the minimum effect, and the rank test significant (p < alpha / 2) in the
  // other direction than the mean: the steps mostly moved one way and the mean the other. "same" where the
  // mean's change is within its noise; else the mean's verdict (from_mean), throughput being the mean's.
  bool median_and_mean_disagree = false;
  // from_samples, "same", and a test significant (p < alpha / 2) on a change within the minimum effect: a
  // real but negligible change, shown "same (under 1%; p=…)" so the small p does not read as a change.
  bool under_min_effect = false;
  std::optional<double> under_min_effect_p;  // the p of the test that was significant, shown with it
  // from_samples, "same": a test was significant, but the change is within the two means' combined standard
  // error, each allowing for drift (batch means: steps that drift together, which the tests take as
  // independent), times Student's t at the row's level. Shown "same (within the means' noise, allowing for
  // drift)".
  bool within_drift_noise = false;
  // Where either point's steps drift (its standard error from the batch means) or it stopped short: the p of
  // the change against the two means' combined standard error (Student's t), adjusted as p_value is. A change
  // needs it below alpha too, and the larger of it and the tests' p is the row's for the adjustment.
  std::optional<double> drift_p_value;
  // within_drift_noise where a point stopped short of its measurement targets (timeout, sample cap, noise
  // settled: steps that would not settle). Shown "same (stopped short, within the means' noise)".
  bool short_within_noise = false;
  // Steps on both sides, one side only one (its point stopped short: a step longer than --timeout): that
  // step's noise is unknown. Against one step no change is called, whatever the effect ("same (one step:
  // noise unknown)"); against many, only beyond every one of them and their spread (mean_p_value, the
  // prediction test).
  bool one_step = false;
  // No change called for want of a second step on either side (one step against one): a row holding one is
  // judged by nobody (the gate, the mean). One step against many is judged by the prediction test
  // (mean_p_value): "same" there is within the many's spread.
  [[nodiscard]] bool unjudged() const { return one_step && verdict == Verdict::same && !mean_p_value; }
  // The geometric mean's verdict also held the change to the means' combined noise (every row had samples).
  bool noise_checked = false;
  // The run's point is the baseline's own measurement (run --resume took it from the baseline's report, or
  // both took it from one earlier run): "same" there compares a point with itself, and judges nothing.
  bool baseline_measurement = false;
  // The tests in this row's family (its run's rows with a throughput test, Holm's step-down over them): the
  // p's above (p_value, mean_p_value, under_min_effect_p) are adjusted for them, scaled by the row's adjusted
  // p over its own, and the verdict is judged on the adjusted p's, so noise alone calls any batch of a
  // comparison changed at most alpha of the time. 1: unadjusted; 0: no test.
  size_t p_adjusted_for = 0;

  // The tail: the step time at the baseline's latency percentile (CompareResult::tail_percentile; p99
  // without a budget), B's over A's, where both ran. Its verdict (slower: B's tail is longer) needs the
  // quantile test (stats.hpp) at alpha / 2 in that direction and a change beyond the minimum effect; a mean
  // can hold still while one step in twenty stalls, and an inference user serves the tail.
  std::optional<double> tail_ratio;
  Verdict tail_verdict = Verdict::not_comparable;  // not_comparable without raw samples on both sides
  std::optional<double> tail_p_value;              // the one-sided p in the direction the percentile moved
  // Samples on both sides, but too few at this percentile for any split to reach alpha / 2 (a p99 needs
  // several hundred steps a side): "same (few steps)", whatever the ratio.
  bool tail_few_steps = false;
  // The quantile test was significant, but not once each run's count above is allowed to vary as its runs of
  // consecutive steps show (steps that drift together: stats.hpp, QuantileTestResult): "same (drift)".
  bool tail_within_drift_noise = false;
  // Where a run's counts above vary beyond a binomial's (inflation above 1): the drift-allowing test's
  // one-sided p, adjusted as tail_p_value is; a tail change needs it below alpha / 2 too.
  std::optional<double> tail_drift_p_value;
  // The tails tested in this run (a family of their own): tail_p_value is adjusted for them as p_value is.
  size_t tail_p_adjusted_for = 0;
};

// A (batch, accumulation) the baseline swept and at least one other run did: each run is judged against the
// baseline on every batch the two share, whatever a third swept (its cells there are `absent`).
struct CompareRow {
  int64_t batch = 0;
  int64_t accumulation = 1;
  std::vector<CompareCell> runs;     // one per report
  std::vector<CompareDelta> deltas;  // one per report after the baseline
};

// Geometric means: the shown samples/s over the batches that are ok in every run; each run's delta against
// the baseline over the batches the two ran ok (with the same batches in every run, the shown means' ratio),
// by the minimum effect and, where every row has one, the means' combined noise.
struct CompareGeomean {
  size_t batches = 0;
  std::vector<std::optional<double>> samples_per_second;  // one per report
  std::vector<CompareDelta> deltas;                       // one per report after the baseline
  std::vector<size_t> delta_batches;  // one per report after the baseline: the batches its delta is over
  // One per report after the baseline: whether any of those batches was timed on a busy host, in either run.
  std::vector<bool> delta_busy_host;
};

// A batch that a run could not fit (oom or over_limit) although the baseline fit a micro-batch at least as
// large with the same accumulation, at a batch the baseline did not sweep (--batch auto puts its edges where
// each run's memory ran out), so no compared row shows it.
struct LostFit {
  size_t run = 0;  // index into CompareResult::runs, >= 1
  int64_t batch = 0;
  int64_t accumulation = 1;
  PointStatus status = PointStatus::oom;
  std::string reason;
  int64_t baseline_max_fit = 0;  // the baseline's largest ok micro-batch at this accumulation
};

// Whether two reports' settings.cuda_graphs, .attention and .conv (--graphs, --attention, --conv) can differ
// in what they measured: those shape CUDA runs only, and other backends' plans ignore them. False for two
// runs on one other backend (a CPU sweep with --attention explicit measured the same thing), true where
// either ran on cuda, the backends differ, or a report does not say. --resume and compare's "measured with
// other settings" both ask this.
[[nodiscard]] bool cuda_settings_apply(const nlohmann::json& settings_a, const nlohmann::json& settings_b);

// A run whose report says its sweep did not finish (state interrupted or in_progress), and why in words.
[[nodiscard]] bool incomplete(const RunSummary& run);
[[nodiscard]] std::string incomplete_why(const RunSummary& run);

struct CompareResult {
  std::vector<RunSummary> runs;  // runs[0] is the baseline
  std::vector<CompareRow> rows;  // ascending batch, then accumulation
  CompareGeomean geomean;
  double alpha = kCompareAlpha;
  double min_effect_pct = kCompareMinEffectPct;
  double tail_percentile = 99;  // the baseline's latency percentile: each delta's tail is judged at it
  // The table shows the tail column: the baseline is an inference sweep (where the tail is what a server
  // answers in), or some run's tail moved beyond noise.
  bool show_tail = false;
  // The gate judges the tail (inference, or training with --fail-on-latency-regression; not with it `off`):
  // the table colours a row whose tail is slower as the gate would fail it.
  bool tail_gated = false;
  std::vector<std::string> notes;  // batches not in every run, differing devices or precisions, ...
  // The notes (also in `notes`) that two reports hold one run (same created_at and points): every verdict
  // between them compares a run with itself. The CLI repeats them on stderr.
  std::vector<std::string> same_run_notes;
  // The runs (indices past 0) that are the baseline itself, by the same test: a gate between them can never
  // fail, so --fail-on-regression refuses them (exit 2).
  std::vector<size_t> copies_of_baseline;
  // The notes (also in `notes`) naming compared points that stopped before meeting their measurement targets
  // (timeout, sample cap, noise settled), or timed while other processes competed for the CPUs (PointHost):
  // the CLI repeats them on stderr under --fail-on-regression, where a busy machine's noise can fail (or
  // pass) a gate.
  std::vector<std::string> short_notes;
  std::vector<LostFit> lost_fits;
};

// Needs at least two reports (UsageError otherwise). Reports of different schema versions or modes, or of
// different models without allow_model_mismatch, throw InputError naming both files.
[[nodiscard]] CompareResult compare_reports(const std::vector<Report>& reports,
                                            const CompareOptions& options);

// What `compare --fail-on-regression PCT` (exit code 3) counts, one line each: a run "slower" than the
// baseline at some batch with B/A < 1 - pct/100, a batch that ran in the baseline but failed in a run
// (oom, over_limit, error: a batch that no longer fits is a regression a CI gate must catch), each
// LostFit (a batch the baseline did not sweep, that a run could not fit although the baseline fit one at
// least as large), and the baseline's answer under its latency budget where a run with the same budget
// (milliseconds and percentile) has a step time there, at that percentile, more than pct% over the budget (a
// different answer under the budget is only a note: it moves with latency noise). In an inference comparison
// (the baseline's mode infer), or any where GateThresholds::latency_given, also each batch where a run's tail
// (CompareDelta) is "slower" and more than the latency PCT longer than the baseline's: "tail_latency". The
// latency findings use GateThresholds::latency_pct, and none is made where it is off.
struct Regression {
  // "slower", "geomean" (over the batches: batch and accumulation 0, null in the JSON), "failed", "lost_fit",
  // "latency_budget" or "tail_latency"
  std::string kind;
  size_t run = 0;  // index into CompareResult::runs, >= 1
  int64_t batch = 0;
  int64_t accumulation = 1;
  std::string text;  // the line regressions() gives
  // A slower (or tail_latency) verdict where either point was timed on a busy host (its cell's busy_host):
  // the change may be the machine's load; the line says so, and a script may rerun before failing the build.
  bool busy_host = false;
};
// What the gate holds runs to: `--fail-on-regression PCT` and, where given,
// `--fail-on-latency-regression PCT|off`.
struct GateThresholds {
  double pct = 0;  // "slower" (at least the minimum effect), and with it "failed" and "lost_fit" (any)
  // "tail_latency" and "latency_budget": PCT unless --fail-on-latency-regression gave its own; nullopt where
  // it said off (neither is gated).
  std::optional<double> latency_pct;
  // --fail-on-latency-regression given: a training run's tail is gated too (by default only inference's,
  // since a training step's p99 is not an answer anyone waits for).
  bool latency_given = false;
};
// PCT for every finding, as --fail-on-regression alone sets them.
[[nodiscard]] GateThresholds uniform_gate(double pct);
// The gate's flags as given: "--fail-on-regression 5", then " --fail-on-latency-regression 20" (or "off").
[[nodiscard]] std::string gate_flags(const GateThresholds& gate);
[[nodiscard]] std::vector<Regression> find_regressions(const CompareResult& result,
                                                       const GateThresholds& gate);
[[nodiscard]] std::vector<Regression> find_regressions(const CompareResult& result, double pct);
[[nodiscard]] std::vector<std::string> regressions(const CompareResult& result, double pct);
// The lines of found regressions, as regressions() gives them.
[[nodiscard]] std::vector<std::string> regression_lines(const std::vector<Regression>& found);
[[nodiscard]] bool has_regression(const CompareResult& result, double pct);
// The gate's JSON for a script: {kind, run (its name), batch, accumulation, message} per regression.
[[nodiscard]] nlohmann::json regressions_json(const CompareResult& result,
                                              const std::vector<Regression>& found);

// Console table: per batch the throughput of each run, B/A and the verdict; the geometric-mean row; then each
// run's knee, max fit and recommendation. ANSI colors (faster green, slower red) when `color`.
// The letter the table, notes and gate name run i by: A, B, ... Z, then R27, R28, ...
[[nodiscard]] std::string run_letter(size_t i);
[[nodiscard]] std::string format_compare(const CompareResult& result, bool color);
// With a gate, a section says the gate's answer and each regression, as stderr and exit 3 do;
// `refused`, where not empty, is why the gate cannot pass (exit 2), said as its answer.
[[nodiscard]] std::string format_compare_markdown(const CompareResult& result,
                                                  std::optional<GateThresholds> gate = std::nullopt,
                                                  std::string_view refused = {});
[[nodiscard]] std::string format_compare_markdown(const CompareResult& result, double fail_on_regression_pct,
                                                  std::string_view refused = {});
[[nodiscard]] nlohmann::json to_json(const CompareResult& result);

}  // namespace bsw
