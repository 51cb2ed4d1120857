// The report model (JSON schema v1): one data structure that every printer renders and every reader fills.
// Nothing here knows a backend exists; DeviceInfo is plain data.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "batchsweep/backend.hpp"

namespace bsw {

inline constexpr int kSchemaVersion = 1;

enum class PointStatus { ok, oom, over_limit, error };
[[nodiscard]] std::string_view to_string(PointStatus v);

// How the warning a fatal backend error leaves in a report begins (run writes it, the printers read it).
inline constexpr std::string_view kFatalErrorWarning = "the sweep stopped on a fatal error";

// How a point's batch is written in warnings, progress and compare: "64", or "16x4" with accumulation.
[[nodiscard]] std::string batch_label(int64_t batch, int64_t accumulation);

// Whether a status says the batch did not fit in memory: oom (it ran out) or over_limit (its plan was over
// the budget, never prepared). An error says nothing about memory.
[[nodiscard]] bool did_not_fit(PointStatus status);

// Whether a point's stop_reason says it stopped before meeting its measurement targets: "timeout",
// "sample cap" or "noise settled" (NoiseCriterion::stop_reason); "noise target" met them.
[[nodiscard]] bool stopped_short(std::string_view stop_reason);

struct StepStats {
  double mean = 0, median = 0, stddev = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};

struct PointMemory {
  uint64_t planned_bytes = 0;
  std::optional<uint64_t> measured_bytes;     // the backend's allocator
  std::optional<uint64_t> device_used_bytes;  // cudaMemGetInfo delta, where the backend can read it
};

// GPU telemetry over a point's timed window (issue 7); absent where unavailable.
struct PointTelemetry {
  std::optional<double> power_w_mean, power_w_max;
  std::optional<double> energy_j, joules_per_sample;
  std::optional<double> sm_clock_mhz_min, sm_clock_mhz_median;
  std::optional<double> mem_clock_mhz_min, mem_clock_mhz_median;
  std::optional<double> utilization_pct, memory_utilization_pct, temperature_c;
  std::vector<std::string> throttle_reasons;
  std::optional<double> cost_per_million_samples;  // with --price-per-hour

  [[nodiscard]] bool operator==(const PointTelemetry&) const = default;
};

// What else the host's CPUs did over a point's timed window (the cpu and cuda backends): a busy machine makes
// step times measure its load. From the process's CPU clock, its threads' schedstat and /proc/stat.
struct PointHost {
  double wall_s = 0;  // the timed window
  double cpu_s = 0;   // this process's CPU time in it, every thread
  int cpus = 0;       // the CPUs it may run on (its affinity)
  // Other processes' CPU time on those CPUs over the window, in CPUs (CPU seconds per second); null where
  // /proc/stat is unreadable or the window too short for its clock ticks.
  std::optional<double> others_cores;
  std::optional<double> steal_pct;  // the hypervisor's share of those CPUs' time
  // The time this process's threads were ready to run but waited for a CPU, summed over its threads
  // (/proc/self/task/*/schedstat); null where the kernel does not keep it.
  std::optional<double> waited_s;

  // Other processes competed for the CPUs this process used: its threads waited for a CPU at least 2% of the
  // window (summed over them) while other processes took at least a quarter of a CPU; where how busy they
  // were is unknown (a window under 0.2 s), a wait of 10% alone. Without the wait (a kernel without
  // schedstat): other processes took a quarter of a CPU and, with this process, left less than a quarter of
  // one idle. Other processes busy on CPUs this process did not need are no competition.
  [[nodiscard]] bool contended() const {
    if (cpus <= 0 || wall_s <= 0) return false;
    if (waited_s)
      return others_cores ? *waited_s >= 0.02 * wall_s && *others_cores >= 0.25 : *waited_s >= 0.1 * wall_s;
    return others_cores && *others_cores >= 0.25 && *others_cores + cpu_s / wall_s > cpus - 0.25;
  }
  // The hypervisor took at least 5% of the CPUs' time.
  [[nodiscard]] bool stolen() const { return steal_pct && *steal_pct >= 5.0; }
  [[nodiscard]] bool busy() const { return contended() || stolen(); }
};

// One round of a point measured in several (run --rounds): its steps follow the earlier rounds' in
// Point::samples_ms. A round that failed (out of memory at its prepare, a non-finite loss) added no steps.
inline constexpr int64_t kMaxRounds = 100;                  // run --rounds 1..100 (settings.rounds)
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;  // run --world-size 1..2^20 (settings.world_size)

struct PointRound {
  int64_t steps = 0;        // timed steps it added to samples_ms
  std::string stop_reason;  // its stopping rule, as Point::stop_reason; empty for a failed round
  PointStatus status = PointStatus::ok;
  std::string reason;  // why it failed; empty when ok
};

// The step times a report may hold: a picosecond to about a year. 0 ms (or a subnormal, whose rate overflows
// to infinity) would let any throughput pass the consistency check; more than a year no step takes.
inline constexpr double kShortestStepMs = 1e-9;
inline constexpr double kLongestStepMs = 3.2e10;

struct Point {
  int64_t batch = 0;  // micro-batch
  int64_t accumulation = 1;
  int64_t effective_batch = 0;  // batch * accumulation = samples per step
  PointStatus status = PointStatus::ok;
  std::string reason;  // why not ok, or empty
  double samples_per_second = 0;
  std::optional<double> tokens_per_second;  // token inputs
  StepStats step_ms;
  std::vector<double> samples_ms;  // raw per-step samples
  std::optional<double> tflops;
  std::optional<double> mfu;  // fraction of DeviceInfo::peak_flops, 0..1
  PointMemory memory;
  bool refinement = false;  // chosen by --batch auto's refinement stage
  // run --resume: the created_at of the earlier run whose measurement this point is; empty when measured now.
  std::string resumed_from;
  // Extras a demanding user wants next to the timings.
  std::optional<double> noise_pct;  // relative noise (stddev/mean * 100) of samples_ms
  std::string stop_reason;          // which stopping rule ended the point ("noise target", "timeout", ...)
  std::optional<int64_t> skipped_steps;  // fp16 overflow skips during the timed window
  std::optional<double> loss;            // last loss seen (train)
  std::optional<PointTelemetry> telemetry;
  std::optional<PointHost> host;
  // run --rounds N (N > 1): the rounds that measured this ok point, in order; empty for a point measured
  // once. samples_ms holds their steps one round after another, and every figure above pools them.
  std::vector<PointRound> rounds;
  // The backend's own account of how the step ran (Session::details): for CUDA the graph capture, the
  // attention and convolution paths, the fused epilogues, the fp16 loss scale and any warning of prepare.
  nlohmann::json execution = nlohmann::json::object();
};

struct KneeResult {
  std::optional<int64_t> batch;
  std::string reason;  // why there is none, or how it was found
  // "stable", "range" when a noise-perturbed curve moves the knee, "unknown" when no point has the samples
  std::string confidence;
  std::optional<int64_t> range_low, range_high;  // the batches the knee moves between (confidence == "range")
};

struct BatchChoice {
  BatchChoice() = default;
  BatchChoice(std::optional<int64_t> b, std::optional<double> rate, std::string why,
              std::optional<double> latency = std::nullopt)
      : batch(b), samples_per_second(rate), reason(std::move(why)), latency_ms(latency) {}
  std::optional<int64_t> batch;
  std::optional<double> samples_per_second;
  std::string reason;                // why there is none, or a note
  std::optional<double> latency_ms;  // latency_slo: the chosen point's step time at the budget's percentile
};

struct Recommendation {
  std::optional<int64_t> batch;
  std::string why;  // one line
};

// run/analyze --request-rate: the sweep's steps serving requests (one sample each) that arrive at random
// (Poisson) at that rate, through a dynamic batcher with each ok batch as its max batch
// (src/analysis/serving.cpp says how). Simulated from the measured steps: a prediction, not a measurement.
struct ServingBatch {
  int64_t batch = 0;               // the batcher's max batch
  double capacity_per_second = 0;  // batch / its mean step: the most requests/s it serves
  bool saturated = false;          // the rate is at or above the capacity: the queue grows without bound
  // Not saturated only: the share of time a step ran, requests per step, and each request's latency from
  // its arrival to the end of its step (mean, p50 and at the serving's percentile).
  std::optional<double> utilization, mean_batch;
  std::optional<double> latency_mean_ms, latency_p50_ms, latency_ms;
  // The standard errors of latency_ms and latency_mean_ms, from their spread between independent
  // replications.
  std::optional<double> latency_se_ms, latency_mean_se_ms;
  int64_t requests =
      0;  // the timed requests simulated (Serving::requests, or more where that did not settle)
  int64_t timed_steps = 0;  // the steps that served them
  // How far the mean moves (a fraction) when replications start with kServingBacklog max batches waiting.
  std::optional<double> start_bias;
  // Whether the figures stand: enough steps (kServingMinSteps), the mean and the percentile known to
  // kServingMaxRelativeError. Not near its capacity, where the queue wanders longer than the simulation runs.
  bool settled = false;
};

struct Serving {
  double request_rate = 0;        // requests per second
  double max_queue_delay_ms = 0;  // how long the batcher holds a request to fill a batch
  double latency_percentile = 99;
  int64_t requests = 0;      // requests timed per max batch (more where that does not settle)
  int64_t replications = 0;  // the independent replications they are split into, for the errors
  std::vector<ServingBatch> batches;
  // --request-rate max: request_rate is the most found served within the latency budget (see analysis.hpp),
  // and unserved_above the least rate found not served (its ratio to request_rate within the tolerance); at
  // none, request_rate is the lowest rate tried and best is none.
  bool most_within_budget = false;
  std::optional<double> unserved_above;
  // The max batch of the lowest request latency at the percentile (the smallest within kServingTiePct of
  // it); latency_ms is its latency. None where every batch saturates, or none keeps the latency budget.
  BatchChoice best;
  // best's row in batches; null where there is no best.
  [[nodiscard]] const ServingBatch* best_row() const {
    if (!best.batch) return nullptr;
    for (const ServingBatch& b : batches)
      if (b.batch == *best.batch) return &b;
    return nullptr;
  }
};

struct Analysis {
  KneeResult knee;
  BatchChoice saturation;
  BatchChoice max_fit;
  BatchChoice best_throughput;
  std::optional<BatchChoice> latency_slo;            // only with --latency-slo
  std::optional<BatchChoice> energy_optimal;         // only with telemetry
  std::optional<BatchChoice> effective_batch_split;  // --effective-batch: the split to use (README)
  std::optional<Serving> serving;                    // only with --request-rate
  Recommendation recommended;
  std::optional<double> recommended_cost_per_million_samples;  // USD, with --price-per-hour
  // The recommended point's gradient accumulation: set micro-batch recommended.batch and this many
  // accumulation steps (an --effective-batch sweep's answer is a split, not a batch alone).
  std::optional<int64_t> recommended_accumulation;
};

// A batch a sweep found to fit without timing it (--batch auto: its steps would outlast --timeout), larger
// than every timed one. Kept in settings.untimed_fit {batch, reason} so `analyze` sees it too.
struct UntimedFit {
  int64_t batch = 0;
  std::string reason;  // "not timed: a step would take about 28.1 s; raise --timeout to time it"
};

struct AnalysisOptions {
  double knee_sensitivity = 1.0;         // Kneedle S
  double saturation_pct = 95.0;          // of the best throughput
  std::optional<double> latency_slo_ms;  // step latency budget, at latency_percentile
  double latency_percentile = 99;  // which step-time percentile the budget holds (is_latency_percentile)
  std::optional<double> price_per_hour;  // USD per device-hour: cost_per_million_samples per point
  std::optional<double> request_rate;    // requests/s: analysis.serving, and the recommendation from it
  double max_queue_delay_ms = 0;         // the batcher's hold to fill a batch (Triton's max_queue_delay)
  // Moves the serving simulation's seeds: 0, as every report, unless BATCHSWEEP_SERVING_SEED asks (a check
  // of how far its answers move with the dice: bench/serving_check.py --seeds).
  uint64_t serving_seed = 0;
  std::optional<UntimedFit> untimed_fit;  // max_fit's reason names it where it is above the largest timed
  // The sweep stopped before the batches it asked for (report state interrupted or in_progress): the largest
  // batch measured is not "the largest swept", and larger ones were not "not tried".
  bool unfinished = false;
  // run --effective-batch N (settings.effective_batch): the points are splits of N, also where only one
  // accumulation of them ran (N x 1 alone, the rest too slow to time; an interrupted sweep).
  std::optional<int64_t> effective_batch;
  // The analysis of a sweep still running, rewritten after each point (its exports, state in_progress): past
  // kInterimConfidencePoints curve points the knee's confidence, whose perturbed curves cost the square of
  // the points each time, is left to the analysis at the end ("unknown" until then, and the reason says so).
  bool interim = false;
};
inline constexpr std::size_t kInterimConfidencePoints = 128;

struct ToolInfo {
  std::string name = "batchsweep";
  std::string version;
  std::string git_commit;
};

struct Report {
  int schema_version = kSchemaVersion;
  ToolInfo tool;
  std::string created_at;  // ISO 8601 UTC
  std::vector<std::string> command;
  // Whether the sweep finished: "complete", "interrupted" (SIGINT/SIGTERM), or "in_progress" (written after a
  // point while the sweep ran; read later, the process was killed). Empty where a report does not say.
  std::string state;
  DeviceInfo device;
  nlohmann::json settings = nlohmann::json::object();  // model (resolved), mode, precision, accumulation, ...
  std::vector<Point> points;
  Analysis analysis;
  std::vector<std::string> warnings;
};

// Reading and writing reports (src/report/json.cpp, src/report/atomic_write.cpp).
// The JSON form of a report, schema v1 (configs/schema/report-v1.schema.json). Non-finite numbers become
// null.
[[nodiscard]] nlohmann::json to_json(const Report& report);
// Reads a schema v1 document. Throws InputError "<source>: <field path>: <problem>" for anything it cannot
// use. Only schema_version and points are required; per point only batch, status and samples_per_second.
[[nodiscard]] Report report_from_json(const nlohmann::json& doc, const std::string& source);
// Reads and parses a report file (at most 256 MiB, at most 64 levels of nesting). Throws InputError naming
// the file.
[[nodiscard]] Report read_report(const std::string& path);

}  // namespace bsw
