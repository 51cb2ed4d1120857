// The report's JSON form (schema v1, configs/schema/report-v1.schema.json): the writer, and a reader that
// checks every field it uses and names the file and the field in each error. Built with nlohmann only.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string_view>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/plan.hpp"
#include "batchsweep/printers.hpp"
#include "batchsweep/report.hpp"
#include "batchsweep/stats.hpp"
#include "report/json_pieces.hpp"

namespace bsw {

using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------------------------

json number_or_null(double v) {
  return report_json::number_or_null<json>(v);
}

json optional_number(const std::optional<double>& v) {
  return report_json::optional_number<json>(v);
}

// A copy of `doc` where every non-finite number is null, so user-supplied settings cannot smuggle NaN out.
json without_non_finite(const json& doc) {
  if (doc.is_number_float()) return number_or_null(doc.get<double>());
  if (!doc.is_structured()) return doc;
  json out = doc.is_object() ? json::object() : json::array();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (doc.is_object()) {
      out[it.key()] = without_non_finite(it.value());
    } else {
      out.push_back(without_non_finite(it.value()));
    }
  }
  return out;
}

// analysis.serving: each max batch's figures, null where it saturates.
json serving_json(const Serving& s) {
  json batches = json::array();
  for (const ServingBatch& b : s.batches) {
    json latency;
    if (b.latency_ms)
      latency = {{"mean", optional_number(b.latency_mean_ms)},
                 {"p50", optional_number(b.latency_p50_ms)},
                 {latency_name(s.latency_percentile), *b.latency_ms}};
    batches.push_back({{"batch", b.batch},
                       {"capacity_per_second", number_or_null(b.capacity_per_second)},
                       {"saturated", b.saturated},
                       {"utilization", optional_number(b.utilization)},
                       {"mean_batch", optional_number(b.mean_batch)},
                       {"latency_ms", latency},
                       {"latency_se_ms", optional_number(b.latency_se_ms)},
                       {"timed_steps", b.timed_steps},
                       {"requests", b.requests},
                       {"start_bias", optional_number(b.start_bias)},
                       {"latency_mean_se_ms", optional_number(b.latency_mean_se_ms)},
                       {"settled", b.settled}});
  }
  return {{"request_rate", number_or_null(s.request_rate)},
          {"max_queue_delay_ms", number_or_null(s.max_queue_delay_ms)},
          {"latency_percentile", s.latency_percentile},
          {"requests", s.requests},
          {"replications", s.replications},
          {"most_within_budget", s.most_within_budget},
          {"unserved_above", optional_number(s.unserved_above)},
          {"batches", std::move(batches)},
          {"best", report_json::choice_json<json>(s.best)}};
}

json analysis_json(const Analysis& a) {
  using report_json::choice_json;
  json out = {{"knee", report_json::knee_json<json>(a.knee)},
              {"saturation", choice_json<json>(a.saturation)},
              {"max_fit", choice_json<json>(a.max_fit)},
              {"best_throughput", choice_json<json>(a.best_throughput)},
              {"recommended", report_json::recommendation_json<json>(a.recommended)}};
  if (a.recommended_cost_per_million_samples)
    out["recommended"]["cost_per_million_samples"] = *a.recommended_cost_per_million_samples;
  if (a.recommended.batch && a.recommended_accumulation) {
    out["recommended"]["accumulation"] = *a.recommended_accumulation;
    out["recommended"]["effective_batch"] = *a.recommended.batch * *a.recommended_accumulation;
  }
  if (a.latency_slo) out["latency_slo"] = choice_json<json>(*a.latency_slo);
  if (a.energy_optimal) out["energy_optimal"] = choice_json<json>(*a.energy_optimal);
  if (a.effective_batch_split) out["effective_batch_split"] = choice_json<json>(*a.effective_batch_split);
  if (a.serving) out["serving"] = serving_json(*a.serving);
  return out;
}

constexpr std::string_view kDeviceKeys[] = {"backend", "name", "memory_total_bytes", "peak_flops",
                                            "peak_flops_source"};

bool is_device_key(std::string_view key) {
  for (std::string_view k : kDeviceKeys) {
    if (k == key) return true;
  }
  return false;
}

json device_json(const DeviceInfo& d) {
  json out = {{"backend", d.backend},
              {"name", d.name},
              {"memory_total_bytes", d.memory_total_bytes > 0 ? json(d.memory_total_bytes) : json()},
              {"peak_flops", optional_number(d.peak_flops)},
              // null where there is no peak to have a source (the CPU)
              {"peak_flops_source", d.peak_flops_source.empty() ? json() : json(d.peak_flops_source)}};
  if (d.details.is_object()) {
    for (auto it = d.details.begin(); it != d.details.end(); ++it) {
      if (!is_device_key(it.key())) out[it.key()] = without_non_finite(it.value());
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------------------------------

std::string child(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string element(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw InputError(source_ + ": " + path + ": " + problem);
  }

  // The value of `key` in `obj`, or nullptr when absent or null (optional fields accept both).
  [[nodiscard]] const json* optional(const json& obj, const std::string& path, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[nodiscard]] const json& required(const json& obj, const std::string& path, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(child(path, key), "missing (required)");
    return *it;
  }

  [[nodiscard]] const json* optional_object(const json& obj, const std::string& path,
                                            std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (v && !v->is_object()) fail(child(path, key), "expected an object");
    return v;
  }

  [[nodiscard]] double number(const json& v, const std::string& path) const {
    if (!v.is_number()) fail(path, "expected a number");
    return v.get<double>();
  }

  [[nodiscard]] std::optional<double> optional_number(const json& obj, const std::string& path,
                                                      std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (!v) return std::nullopt;
    return number(*v, child(path, key));
  }

  [[nodiscard]] int64_t integer(const json& v, const std::string& path) const {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
        fail(path, "integer out of range");
      }
      return v.get<int64_t>();
    }
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
    }
    fail(path, "expected an integer");
  }

  [[nodiscard]] std::optional<int64_t> optional_integer(const json& obj, const std::string& path,
                                                        std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (!v) return std::nullopt;
    return integer(*v, child(path, key));
  }

  [[nodiscard]] uint64_t byte_count(const json& v, const std::string& path) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d >= 0 && d == std::floor(d) && d < 1.8e19) return static_cast<uint64_t>(d);
    }
    fail(path, "expected a non-negative integer (bytes)");
  }

  [[nodiscard]] std::optional<uint64_t> optional_bytes(const json& obj, const std::string& path,
                                                       std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (!v) return std::nullopt;
    return byte_count(*v, child(path, key));
  }

  [[nodiscard]] std::string optional_string(const json& obj, const std::string& path,
                                            std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (!v) return {};
    if (!v->is_string()) fail(child(path, key), "expected a string");
    return v->get<std::string>();
  }

  [[nodiscard]] bool optional_bool(const json& obj, const std::string& path, std::string_view key) const {
    const json* v = optional(obj, path, key);
    if (!v) return false;
    if (!v->is_boolean()) fail(child(path, key), "expected true or false");
    return v->get<bool>();
  }

  [[nodiscard]] std::vector<std::string> string_list(const json& obj, const std::string& path,
                                                     std::string_view key) const {
    std::vector<std::string> out;
    const json* v = optional(obj, path, key);
    if (!v) return out;
    const std::string here = child(path, key);
    if (!v->is_array()) fail(here, "expected an array of strings");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) fail(element(here, i), "expected a string");
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  [[nodiscard]] PointStatus status(const json& v, const std::string& path) const {
    if (v.is_string()) {
      for (PointStatus s : {PointStatus::ok, PointStatus::oom, PointStatus::over_limit, PointStatus::error}) {
        if (v.get<std::string>() == to_string(s)) return s;
      }
    }
    fail(path, "expected one of \"ok\", \"oom\", \"over_limit\", \"error\"");
  }

  [[nodiscard]] StepStats step_stats(const json& v, const std::string& path) const {
    StepStats s;
    const std::pair<std::string_view, double*> fields[] = {
        {"mean", &s.mean}, {"median", &s.median}, {"stddev", &s.stddev}, {"min", &s.min}, {"max", &s.max},
        {"p50", &s.p50},   {"p90", &s.p90},       {"p95", &s.p95},       {"p99", &s.p99}};
    for (const auto& [key, target] : fields) *target = optional_number(v, path, key).value_or(0.0);
    return s;
  }

  [[nodiscard]] PointTelemetry telemetry(const json& v, const std::string& path) const {
    PointTelemetry t;
    if (const json* power = optional_object(v, path, "power_w")) {
      t.power_w_mean = optional_number(*power, child(path, "power_w"), "mean");
      t.power_w_max = optional_number(*power, child(path, "power_w"), "max");
    }
    t.energy_j = optional_number(v, path, "energy_j");
    t.joules_per_sample = optional_number(v, path, "joules_per_sample");
    if (const json* clock = optional_object(v, path, "sm_clock_mhz")) {
      t.sm_clock_mhz_min = optional_number(*clock, child(path, "sm_clock_mhz"), "min");
      t.sm_clock_mhz_median = optional_number(*clock, child(path, "sm_clock_mhz"), "median");
    }
    if (const json* clock = optional_object(v, path, "mem_clock_mhz")) {
      t.mem_clock_mhz_min = optional_number(*clock, child(path, "mem_clock_mhz"), "min");
      t.mem_clock_mhz_median = optional_number(*clock, child(path, "mem_clock_mhz"), "median");
    }
    t.utilization_pct = optional_number(v, path, "utilization_pct");
    t.memory_utilization_pct = optional_number(v, path, "memory_utilization_pct");
    t.temperature_c = optional_number(v, path, "temperature_c");
    t.throttle_reasons = string_list(v, path, "throttle_reasons");
    t.cost_per_million_samples = optional_number(v, path, "cost_per_million_samples");
    return t;
  }

  // A point's numbers are derived from its raw samples (run and the PyTorch peer alike, with the same
  // summarize): step_ms is their summary, and an ok point's samples_per_second the effective batch over their
  // mean. A report where they disagree was edited by hand, and the analysis (which reads the rates and the
  // percentiles) and compare's tests (which read the samples) would answer different questions: refused,
  // naming the field. No step time is negative.
  void check_consistent(const Point& p, const std::string& path) const {
    // Reports print doubles to round-trip, but a report stored and written back may be rounded (samples to
    // the nanosecond, numbers to 6 significant digits): 0.01% of the value (plus 1 ns for step times)
    // absorbs that, and any edit that could move an answer (compare calls nothing under 1% a difference) is
    // still caught.
    constexpr double kTolerance = 1e-4;
    const auto differ = [](double a, double b, double scale, double slack = 0) {
      return std::fabs(a - b) > kTolerance * std::fabs(scale) + slack;
    };
    constexpr double kNanosecondMs = 1e-6;
    const std::string stats = child(path, "step_ms");
    const std::pair<const char*, double> fields[] = {
        {"mean", p.step_ms.mean}, {"median", p.step_ms.median}, {"stddev", p.step_ms.stddev},
        {"min", p.step_ms.min},   {"max", p.step_ms.max},       {"p50", p.step_ms.p50},
        {"p90", p.step_ms.p90},   {"p95", p.step_ms.p95},       {"p99", p.step_ms.p99}};
    for (const auto& [name, value] : fields) {
      if (value < 0) fail(child(stats, name), "a step time must be >= 0 ms");
      // 0 is absent (null); a step time is otherwise within what a step can take (a spread may be tiny).
      if (std::string_view(name) != "stddev" && value > 0 &&
          !(value >= kShortestStepMs && value <= kLongestStepMs))
        fail(child(stats, name), fmt::format("a step time must be {:g} to {:g} ms (or null), got {:g}",
                                             kShortestStepMs, kLongestStepMs, value));
    }
    double mean = p.step_ms.mean;  // what the rate is over: the samples' mean where there are samples
    if (!p.samples_ms.empty()) {
      const StepStats from_samples = summarize(p.samples_ms);
      mean = from_samples.mean;
      const double derived[] = {from_samples.mean, from_samples.median, from_samples.stddev,
                                from_samples.min,  from_samples.max,    from_samples.p50,
                                from_samples.p90,  from_samples.p95,    from_samples.p99};
      for (std::size_t i = 0; i < std::size(fields); ++i)
        // Rounding the samples by up to 1 ns moves each statistic, the stddev too, by at most that.
        if (fields[i].second > 0 &&  // 0: absent (null)
            differ(fields[i].second, derived[i], derived[i], kNanosecondMs))
          fail(child(stats, fields[i].first),
               fmt::format("{:.9g} ms disagrees with its samples_ms, whose {} is {:.9g} ms", fields[i].second,
                           fields[i].first, derived[i]));
    }
    if (p.samples_ms.empty()) {
      // Without samples the summary stands alone, so it must hold together itself: min <= p50 <= p90 <= p95
      // <= p99 <= max, the mean and the median within min..max (a p99 under the fastest step would meet
      // any budget). Absent fields (0) are skipped.
      const std::pair<const char*, double> ladder[] = {{"min", p.step_ms.min}, {"p50", p.step_ms.p50},
                                                       {"p90", p.step_ms.p90}, {"p95", p.step_ms.p95},
                                                       {"p99", p.step_ms.p99}, {"max", p.step_ms.max}};
      const std::pair<const char*, double>* below = nullptr;
      for (const auto& step : ladder) {
        if (step.second <= 0) continue;
        if (below && differ(step.second, below->second, below->second) && step.second < below->second)
          fail(child(stats, step.first),
               fmt::format("{:.9g} ms is below step_ms.{} ({:.9g} ms): min, p50, p90, p95, p99 and max must "
                           "not decrease",
                           step.second, below->first, below->second));
        below = &step;
      }
      for (const auto& [name, value] : {std::pair<const char*, double>{"mean", p.step_ms.mean},
                                        std::pair<const char*, double>{"median", p.step_ms.median}}) {
        if (value <= 0) continue;
        if (p.step_ms.min > 0 && value < p.step_ms.min && differ(value, p.step_ms.min, p.step_ms.min))
          fail(child(stats, name),
               fmt::format("{:.9g} ms is below step_ms.min ({:.9g} ms)", value, p.step_ms.min));
        if (p.step_ms.max > 0 && value > p.step_ms.max && differ(value, p.step_ms.max, p.step_ms.max))
          fail(child(stats, name),
               fmt::format("{:.9g} ms is above step_ms.max ({:.9g} ms)", value, p.step_ms.max));
      }
    }
    if (p.status != PointStatus::ok) return;
    const char* from = p.samples_ms.empty() ? "step_ms.mean" : "its samples_ms";
    const double rate = static_cast<double>(p.effective_batch) / mean * 1000.0;
    // A mean moved 1 ns by rounding moves the rate by rate * 1 ns / mean (a lot, for microsecond steps).
    if (mean > 0 && differ(p.samples_per_second, rate, rate, rate * kNanosecondMs / mean))
      fail(child(path, "samples_per_second"),
           fmt::format("{:.9g} disagrees with {}: effective batch {} over a mean step of {:.9g} ms is {:.9g} "
                       "samples/s",
                       p.samples_per_second, from, p.effective_batch, mean, rate));
  }

  [[nodiscard]] Point point(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, "expected an object");
    Point p;
    p.batch = integer(required(v, path, "batch"), child(path, "batch"));
    // The batches and accumulations a sweep can run: 1..2^24 each.
    const auto in_range = [&](int64_t value, const char* key) {
      if (value < 1 || value > kMaxBatch)
        fail(child(path, key), fmt::format("must be in 1..{} (2^24), got {}", kMaxBatch, value));
    };
    in_range(p.batch, "batch");
    p.accumulation = optional_integer(v, path, "accumulation").value_or(1);
    in_range(p.accumulation, "accumulation");
    const int64_t product = p.batch * p.accumulation;  // < 2^48: no overflow
    // As a sweep runs them (check_samples_per_step): what multiplies it further (--config-for's world size)
    // then stays far inside 64 bits.
    if (product > kMaxBatch)
      fail(child(path, "accumulation"),
           fmt::format(
               "batch {} x accumulation {} is more than {} (2^24) samples per step, which no sweep runs",
               p.batch, p.accumulation, kMaxBatch));
    p.effective_batch = optional_integer(v, path, "effective_batch").value_or(product);
    if (p.effective_batch != product)
      fail(child(path, "effective_batch"), fmt::format("{} is not batch {} x accumulation {} = {}",
                                                       p.effective_batch, p.batch, p.accumulation, product));
    p.status = status(required(v, path, "status"), child(path, "status"));
    p.reason = optional_string(v, path, "reason");
    const json& sps = required(v, path, "samples_per_second");
    if (p.status != PointStatus::ok) {
      // A point that did not run has no throughput (null; 0 is read as none): a speed there would be read
      // as one by some reader.
      if (!sps.is_null() && number(sps, child(path, "samples_per_second")) != 0)
        fail(child(path, "samples_per_second"),
             fmt::format("must be null on a point with status {} (it did not run)", to_string(p.status)));
      p.samples_per_second = 0;
    } else {
      p.samples_per_second = number(sps, child(path, "samples_per_second"));
      if (p.samples_per_second < 0) fail(child(path, "samples_per_second"), "must be >= 0");
      if (p.status == PointStatus::ok && p.samples_per_second <= 0)
        fail(child(path, "samples_per_second"),
             "must be > 0 on an ok point (it ran, so it has a throughput)");
    }
    if (const json* stats = optional_object(v, path, "step_ms"))
      p.step_ms = step_stats(*stats, child(path, "step_ms"));
    if (const json* samples = optional(v, path, "samples_ms")) {
      const std::string here = child(path, "samples_ms");
      if (!samples->is_array()) fail(here, "expected an array of numbers");
      p.samples_ms.reserve(samples->size());
      for (size_t i = 0; i < samples->size(); ++i) {
        p.samples_ms.push_back(number((*samples)[i], element(here, i)));
        // A timed step took time: 0 ms (or a subnormal, whose throughput overflows) would let any
        // samples_per_second pass the check below; over a year (3.2e10 ms) no step runs.
        const double step = p.samples_ms.back();
        if (!(step >= kShortestStepMs && step <= kLongestStepMs))
          fail(element(here, i), fmt::format("a timed step must take {:g} to {:g} ms, got {:g}",
                                             kShortestStepMs, kLongestStepMs, step));
      }
    }
    check_consistent(p, path);
    // Figures derived from the rate: none is negative (a negative MFU or noise printed as one would be read).
    const auto non_negative = [&](const json& obj, const std::string& where,
                                  const char* key) -> std::optional<double> {
      const std::optional<double> value = optional_number(obj, where, key);
      if (value && *value < 0) fail(child(where, key), fmt::format("must be >= 0, got {:g}", *value));
      return value;
    };
    p.tokens_per_second = non_negative(v, path, "tokens_per_second");
    p.tflops = non_negative(v, path, "tflops");
    p.mfu = non_negative(v, path, "mfu");
    if (const json* memory = optional_object(v, path, "memory")) {
      const std::string here = child(path, "memory");
      p.memory.planned_bytes = optional_bytes(*memory, here, "planned_bytes").value_or(0);
      p.memory.measured_bytes = optional_bytes(*memory, here, "measured_bytes");
      p.memory.device_used_bytes = optional_bytes(*memory, here, "device_used_bytes");
    }
    p.refinement = optional_bool(v, path, "refinement");
    p.resumed_from = optional_string(v, path, "resumed_from");
    p.noise_pct = non_negative(v, path, "noise_pct");
    p.stop_reason = optional_string(v, path, "stop_reason");
    p.skipped_steps = optional_integer(v, path, "skipped_steps");
    p.loss = optional_number(v, path, "loss");
    if (const json* t = optional_object(v, path, "telemetry"))
      p.telemetry = telemetry(*t, child(path, "telemetry"));
    if (const json* h = optional_object(v, path, "host")) {
      const std::string here = child(path, "host");
      PointHost host;
      // What decides busy_host: a negative wall time would hide a busy point, a steal over 100% flag one.
      host.wall_s = non_negative(*h, here, "wall_s").value_or(0.0);
      host.cpu_s = non_negative(*h, here, "cpu_s").value_or(0.0);
      const int64_t cpus = optional_integer(*h, here, "cpus").value_or(0);
      if (cpus < 0 || cpus > (1 << 20))
        fail(child(here, "cpus"), fmt::format("must be in 0..{}, got {}", 1 << 20, cpus));
      host.cpus = static_cast<int>(cpus);
      host.others_cores = non_negative(*h, here, "others_cores");
      host.steal_pct = non_negative(*h, here, "steal_pct");
      if (host.steal_pct && *host.steal_pct > 100)
        fail(child(here, "steal_pct"), fmt::format("must be at most 100, got {:g}", *host.steal_pct));
      host.waited_s = non_negative(*h, here, "waited_s");
      p.host = host;
    }
    if (const json* e = optional_object(v, path, "execution")) p.execution = *e;
    if (const json* rounds = optional(v, path, "rounds"))
      p.rounds = point_rounds(*rounds, p, child(path, "rounds"));
    return p;
  }

  // run --rounds: a point's rounds, whose steps add up to its samples_ms (mean_ms is derived from them, and
  // is written again from them).
  [[nodiscard]] std::vector<PointRound> point_rounds(const json& v, const Point& p,
                                                     const std::string& path) const {
    if (!v.is_array()) fail(path, "expected an array of rounds");
    if (p.status != PointStatus::ok && !v.empty())
      fail(path, fmt::format("only an ok point has rounds; this one is {}", to_string(p.status)));
    std::vector<PointRound> rounds;
    int64_t steps = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string here = element(path, i);
      if (!v[i].is_object()) fail(here, "expected an object");
      PointRound r;
      r.steps = integer(required(v[i], here, "steps"), child(here, "steps"));
      if (r.steps < 0 || r.steps > static_cast<int64_t>(p.samples_ms.size()))
        fail(child(here, "steps"),
             fmt::format("must be in 0..{} (the point's samples_ms), got {}", p.samples_ms.size(), r.steps));
      if (const json* status_field = optional(v[i], here, "status"))
        r.status = status(*status_field, child(here, "status"));
      r.stop_reason = optional_string(v[i], here, "stop_reason");
      r.reason = optional_string(v[i], here, "reason");
      if (r.status != PointStatus::ok && r.steps != 0)
        fail(child(here, "steps"),
             fmt::format("a round that failed ({}) added no steps, got {}", to_string(r.status), r.steps));
      steps += r.steps;
      rounds.push_back(std::move(r));
    }
    if (!rounds.empty() && steps != static_cast<int64_t>(p.samples_ms.size()))
      fail(path, fmt::format("its rounds' steps add up to {}, but the point has {} samples_ms", steps,
                             p.samples_ms.size()));
    return rounds;
  }

  [[nodiscard]] BatchChoice choice(const json& v, const std::string& path) const {
    BatchChoice c;
    c.batch = optional_integer(v, path, "batch");
    c.samples_per_second = optional_number(v, path, "samples_per_second");
    c.reason = optional_string(v, path, "reason");
    c.latency_ms = optional_number(v, path, "latency_ms");
    return c;
  }

  [[nodiscard]] Serving serving(const json& v, const std::string& path) const {
    Serving s;
    s.request_rate = number(required(v, path, "request_rate"), child(path, "request_rate"));
    s.max_queue_delay_ms = optional_number(v, path, "max_queue_delay_ms").value_or(0.0);
    s.latency_percentile = optional_number(v, path, "latency_percentile").value_or(99.0);
    if (!is_latency_percentile(s.latency_percentile))
      fail(child(path, "latency_percentile"), fmt::format("must be {}", kLatencyPercentileRule));
    s.requests = optional_integer(v, path, "requests").value_or(0);
    s.replications = optional_integer(v, path, "replications").value_or(0);
    s.most_within_budget = optional_bool(v, path, "most_within_budget");
    s.unserved_above = optional_number(v, path, "unserved_above");
    if (const json* rows = optional(v, path, "batches")) {
      const std::string here = child(path, "batches");
      if (!rows->is_array()) fail(here, "expected an array");
      for (size_t i = 0; i < rows->size(); ++i) {
        const std::string row = element(here, i);
        const json& r = (*rows)[i];
        if (!r.is_object()) fail(row, "expected an object");
        ServingBatch b;
        b.batch = integer(required(r, row, "batch"), child(row, "batch"));
        b.capacity_per_second = optional_number(r, row, "capacity_per_second").value_or(0.0);
        b.saturated = optional_bool(r, row, "saturated");
        b.utilization = optional_number(r, row, "utilization");
        b.mean_batch = optional_number(r, row, "mean_batch");
        b.latency_se_ms = optional_number(r, row, "latency_se_ms");
        b.timed_steps = optional_integer(r, row, "timed_steps").value_or(0);
        b.requests = optional_integer(r, row, "requests").value_or(0);
        b.start_bias = optional_number(r, row, "start_bias");
        b.latency_mean_se_ms = optional_number(r, row, "latency_mean_se_ms");
        b.settled = optional_bool(r, row, "settled");
        if (const json* latency = optional_object(r, row, "latency_ms")) {
          const std::string at = child(row, "latency_ms");
          b.latency_mean_ms = optional_number(*latency, at, "mean");
          b.latency_p50_ms = optional_number(*latency, at, "p50");
          b.latency_ms = optional_number(*latency, at, latency_name(s.latency_percentile));
        }
        s.batches.push_back(std::move(b));
      }
    }
    if (const json* best = optional_object(v, path, "best")) s.best = choice(*best, child(path, "best"));
    return s;
  }

  [[nodiscard]] std::optional<BatchChoice> optional_choice(const json& obj, const std::string& path,
                                                           std::string_view key) const {
    const json* v = optional_object(obj, path, key);
    if (!v) return std::nullopt;
    return choice(*v, child(path, key));
  }

  [[nodiscard]] Analysis analysis(const json& v, const std::string& path) const {
    Analysis a;
    if (const json* knee = optional_object(v, path, "knee")) {
      const std::string here = child(path, "knee");
      a.knee.batch = optional_integer(*knee, here, "batch");
      a.knee.reason = optional_string(*knee, here, "reason");
      a.knee.confidence = optional_string(*knee, here, "confidence");
      a.knee.range_low = optional_integer(*knee, here, "range_low");
      a.knee.range_high = optional_integer(*knee, here, "range_high");
    }
    a.saturation = optional_choice(v, path, "saturation").value_or(BatchChoice{});
    a.max_fit = optional_choice(v, path, "max_fit").value_or(BatchChoice{});
    a.best_throughput = optional_choice(v, path, "best_throughput").value_or(BatchChoice{});
    a.latency_slo = optional_choice(v, path, "latency_slo");
    a.energy_optimal = optional_choice(v, path, "energy_optimal");
    a.effective_batch_split = optional_choice(v, path, "effective_batch_split");
    if (const json* serving = optional_object(v, path, "serving"))
      a.serving = this->serving(*serving, child(path, "serving"));
    if (const json* rec = optional_object(v, path, "recommended")) {
      a.recommended.batch = optional_integer(*rec, child(path, "recommended"), "batch");
      a.recommended.why = optional_string(*rec, child(path, "recommended"), "why");
      a.recommended_accumulation = optional_integer(*rec, child(path, "recommended"), "accumulation");
      int64_t effective = 0;
      if (a.recommended_accumulation &&
          (*a.recommended_accumulation < 1 ||
           __builtin_mul_overflow(a.recommended.batch.value_or(1), *a.recommended_accumulation, &effective) ||
           effective > kMaxBatch))
        fail(
            child(child(path, "recommended"), "accumulation"),
            fmt::format("must be at least 1, and times batch at most {} (2^24) samples per step", kMaxBatch));
      a.recommended_cost_per_million_samples =
          optional_number(*rec, child(path, "recommended"), "cost_per_million_samples");
    }
    return a;
  }

  [[nodiscard]] DeviceInfo device(const json& v, const std::string& path) const {
    DeviceInfo d;
    d.backend = optional_string(v, path, "backend");
    d.name = optional_string(v, path, "name");
    d.memory_total_bytes = optional_bytes(v, path, "memory_total_bytes").value_or(0);
    d.peak_flops = optional_number(v, path, "peak_flops");
    d.peak_flops_source = optional_string(v, path, "peak_flops_source");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!is_device_key(it.key())) d.details[it.key()] = it.value();
    }
    return d;
  }

  [[nodiscard]] Report report(const json& doc) const {
    if (!doc.is_object()) throw InputError(source_ + ": expected a JSON object (a batchsweep report)");
    const std::string top;
    if (const auto kind = doc.find("kind"); kind != doc.end() && *kind == "compare")
      throw InputError(source_ +
                       ": is a comparison (batchsweep compare --json), not a report: analyze, compare and "
                       "--resume read the reports run writes");
    // A plan (plan --json; before it said its kind, by its FLOP counts) measured nothing.
    if (const auto kind = doc.find("kind");
        (kind != doc.end() && *kind == "plan") ||
        (!doc.contains("schema_version") && doc.contains("flops_per_sample")))
      throw InputError(
          source_ +
          ": is a memory plan (batchsweep plan --json), not a report: it measured nothing; analyze, "
          "compare and --resume read the reports run writes");
    // A model config (the likeliest wrong file: it sits beside the reports) is what --model reads.
    if (!doc.contains("schema_version") && doc.contains("layers") && doc.contains("input"))
      throw InputError(source_ +
                       ": is a model config (for --model), not a report: analyze, compare and --resume read "
                       "the reports `batchsweep run --json` writes");
    auto version_it = doc.find("schema_version");
    if (version_it == doc.end()) fail("schema_version", "missing (required): is this a batchsweep report?");
    const int64_t version = integer(*version_it, "schema_version");
    if (version != kSchemaVersion) {
      throw InputError(source_ + ": schema_version " + std::to_string(version) +
                       " is not supported (this batchsweep reads " + std::to_string(kSchemaVersion) + ")");
    }
    Report r;
    r.schema_version = static_cast<int>(version);
    r.tool.name.clear();  // what the document says, not this program's name
    if (const json* tool = optional_object(doc, top, "tool")) {
      r.tool.name = optional_string(*tool, "tool", "name");
      r.tool.version = optional_string(*tool, "tool", "version");
      r.tool.git_commit = optional_string(*tool, "tool", "git_commit");
    }
    r.created_at = optional_string(doc, top, "created_at");
    r.command = string_list(doc, top, "command");
    r.state = optional_string(doc, top, "state");
    if (!r.state.empty() && r.state != "complete" && r.state != "interrupted" && r.state != "in_progress")
      fail("state", fmt::format("\"{}\" is not one of complete, interrupted, in_progress", r.state));
    if (const json* device_doc = optional_object(doc, top, "device"))
      r.device = device(*device_doc, "device");
    if (const json* settings = optional_object(doc, top, "settings")) r.settings = *settings;
    const json& points = required(doc, top, "points");
    if (!points.is_array()) fail("points", "expected an array");
    r.points.reserve(points.size());
    for (size_t i = 0; i < points.size(); ++i) r.points.push_back(point(points[i], element("points", i)));
    // One point per (batch, accumulation): with two, which one the analysis or a comparison used would be
    // an accident of order. (run never writes two; a hand-merged report may.)
    std::map<std::pair<int64_t, int64_t>, size_t> seen;
    for (size_t i = 0; i < r.points.size(); ++i) {
      const auto [it, inserted] = seen.emplace(std::pair{r.points[i].batch, r.points[i].accumulation}, i);
      if (!inserted)
        fail(element("points", i),
             fmt::format("batch {} is also points[{}]; a report holds one point per batch and accumulation",
                         batch_label(r.points[i].batch, r.points[i].accumulation), it->second));
    }
    // In the order run writes them (by effective batch, then micro-batch), whatever the file's: the table,
    // the CSV and a re-export read top to bottom.
    std::stable_sort(r.points.begin(), r.points.end(), [](const Point& a, const Point& b) {
      return std::pair{a.effective_batch, a.batch} < std::pair{b.effective_batch, b.batch};
    });
    if (const json* analysis_doc = optional_object(doc, top, "analysis")) {
      r.analysis = analysis(*analysis_doc, "analysis");
    }
    r.warnings = string_list(doc, top, "warnings");
    check_settings(r);
    return r;
  }

  // The settings a reader acts on: mode (compare refuses train against infer; a mode it cannot read would
  // slip past), precision, accumulation, effective_batch (the title and the splits' analysis) and the
  // latency budget. Others are kept as written. The CLI's aliases (training, inference) read as train, infer.
  void check_settings(Report& r) const {
    if (!r.settings.is_object()) return;
    const auto present = [&](const char* key) -> json* {
      const auto it = r.settings.find(key);
      return it == r.settings.end() || it->is_null() ? nullptr : &*it;
    };
    const std::string top = "settings";
    if (json* mode = present("mode")) {
      const std::string text = mode->is_string() ? mode->get<std::string>() : std::string();
      if (text == "training" || text == "train")
        *mode = "train";
      else if (text == "inference" || text == "infer")
        *mode = "infer";
      else
        fail(child(top, "mode"), fmt::format("{} is not train or infer", printable_text(mode->dump())));
    }
    if (json* precision = present("precision")) {
      const std::string text = precision->is_string() ? precision->get<std::string>() : std::string();
      if (text != "fp32" && text != "tf32" && text != "fp16" && text != "bf16")
        fail(child(top, "precision"),
             fmt::format("{} is not fp32, tf32, fp16 or bf16", printable_text(precision->dump())));
    }
    // Each integer written back as one (8.0, as a JSON tool may write it, reads as 8 where it is used).
    if (json* accumulation = present("accumulation")) {
      const int64_t n = integer(*accumulation, child(top, "accumulation"));
      if (n < 1 || n > kMaxBatch)
        fail(child(top, "accumulation"), fmt::format("must be in 1..{} (2^24), got {}", kMaxBatch, n));
      *accumulation = n;
    }
    if (json* rounds = present("rounds")) {
      const int64_t n = integer(*rounds, child(top, "rounds"));
      if (n < 1 || n > kMaxRounds)
        fail(child(top, "rounds"), fmt::format("must be in 1..{}, got {}", kMaxRounds, n));
      *rounds = n;
    }
    // run --world-size, which --config-for multiplies the batch by: one out of range was dropped without a
    // word, and the config pasted was for 1 GPU.
    if (json* world = present("world_size")) {
      const int64_t n = integer(*world, child(top, "world_size"));
      if (n < 1 || n > kMaxWorldSize)
        fail(child(top, "world_size"),
             fmt::format("must be in 1..{} (2^20, as --world-size takes), got {}", kMaxWorldSize, n));
      *world = n;
    }
    // --checkpoint-blocks N (the title, compare's refusal of runs that checkpointed other blocks) and the
    // memory edge --batch auto found past its timed points: 8.0 was read as absent ("all" blocks, no edge).
    if (json* blocks = present("checkpoint_blocks")) {
      const int64_t n = integer(*blocks, child(top, "checkpoint_blocks"));
      if (n < 1 || n > kMaxBatch)
        fail(child(top, "checkpoint_blocks"), fmt::format("must be a count of blocks, 1 or more, got {}", n));
      *blocks = n;
    }
    if (json* untimed = present("untimed_fit"); untimed && untimed->is_object()) {
      const std::string where = child(top, "untimed_fit");
      if (const auto batch = untimed->find("batch"); batch != untimed->end() && !batch->is_null()) {
        const int64_t n = integer(*batch, child(where, "batch"));
        if (n < 1 || n > kMaxBatch)
          fail(child(where, "batch"), fmt::format("must be in 1..{} (2^24), got {}", kMaxBatch, n));
        *batch = n;
      }
    }
    if (json* effective = present("effective_batch")) {
      const int64_t n = integer(*effective, child(top, "effective_batch"));
      if (n < 1 || n > kMaxBatch * kMaxBatch)
        fail(child(top, "effective_batch"), fmt::format("must be in 1..2^48 (a batch times an accumulation, "
                                                        "each at most 2^24), got {}",
                                                        n));
      *effective = n;
      // The points are its splits: one of another effective batch would be analysed as one of them.
      for (size_t i = 0; i < r.points.size(); ++i)
        if (r.points[i].effective_batch != n)
          fail(child(top, "effective_batch"),
               fmt::format("{} is not the effective batch of the point at batch {} ({}): a report of "
                           "--effective-batch N holds the splits of N alone",
                           n, batch_label(r.points[i].batch, r.points[i].accumulation),
                           r.points[i].effective_batch));
    }
    if (json* budget = present("latency_slo_ms")) {
      const double ms = number(*budget, child(top, "latency_slo_ms"));
      if (!(ms >= std::numeric_limits<double>::min()))
        fail(child(top, "latency_slo_ms"), fmt::format("must be a positive number of ms, got {:g}", ms));
    }
    // run --request-rate and --max-queue-delay, which analyze keeps.
    if (json* rate = present("request_rate"); rate && *rate != "max") {  // "max": --request-rate max
      const double per_s = number(*rate, child(top, "request_rate"));
      if (!(per_s >= std::numeric_limits<double>::min()) || !std::isfinite(per_s))
        fail(child(top, "request_rate"),
             fmt::format("must be a positive number of requests/s, got {:g}", per_s));
    }
    if (json* delay = present("max_queue_delay_ms")) {
      const double ms = number(*delay, child(top, "max_queue_delay_ms"));
      if (!(ms >= 0) || !std::isfinite(ms))
        fail(child(top, "max_queue_delay_ms"), fmt::format("must be a hold in ms >= 0, got {:g}", ms));
    }
  }

 private:
  std::string source_;
};

// A report holds its model config two levels down (settings.model): the deepest config a model file may hold
// nests that much deeper here (the rest is margin), and its report must read back.
constexpr int kMaxReportJsonDepth = kMaxJsonDepth + 8;

// Rejects documents nested deeper than kMaxReportJsonDepth before nlohmann's recursive parser sees them.
void check_nesting(std::string_view text, const std::string& path) {
  if (json_too_deep_at(text, kMaxReportJsonDepth))
    throw InputError(path + ": JSON nested deeper than " + std::to_string(kMaxReportJsonDepth) +
                     " levels; not a batchsweep report");
}

}  // namespace

json to_json(const Report& report) {
  json command = json::array();
  for (const auto& arg : report.command) command.push_back(arg);
  json points = json::array();
  const std::optional<RoundNoise> rounds = round_noise(report.points);
  for (const auto& p : report.points) points.push_back(report_json::point_json<json>(p, rounds));
  // Empty: a report read back that did not say (analyze of a minimal report), so null, not "".
  const auto said = [](const std::string& text) { return text.empty() ? json() : json(text); };
  json doc = {
      {"schema_version", report.schema_version},
      {"tool",
       {{"name", said(report.tool.name)},
        {"version", said(report.tool.version)},
        {"git_commit", said(report.tool.git_commit)}}},
      {"created_at", said(report.created_at)},
      {"command", std::move(command)},
      {"device", device_json(report.device)},
      {"settings", report.settings.is_object() ? without_non_finite(report.settings) : json::object()},
      {"points", std::move(points)},
      {"analysis", analysis_json(report.analysis)},
      {"warnings", report.warnings}};
  if (!report.state.empty()) doc["state"] = report.state;
  return doc;
}

Report report_from_json(const json& doc, const std::string& source) {
  return Reader(source).report(doc);
}

namespace {

// Which of batchsweep's other outputs `text` is ("markdown", "CSV", "SVG"), judged from how each begins;
// empty where it is none of them. Handed to a reader of reports, each is a user's slip, not a damaged file.
std::string_view export_kind(std::string_view text) {
  const std::size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string_view::npos) text.remove_prefix(start);
  if (text.starts_with("## batchsweep report") || text.starts_with("## batchsweep compare"))
    return "markdown";
  if (text.starts_with("batch,accumulation,")) return "CSV";
  if (text.starts_with("<svg") || (text.starts_with("<?xml") && text.find("<svg") != std::string_view::npos))
    return "SVG";
  return {};
}

}  // namespace

Report read_report(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw InputError("a report path is empty (\"\"; an unset shell variable?)");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(path + ": no such file");
  if (fs::is_directory(st)) throw InputError(path + ": is a directory, expected a report file");
  if (!fs::is_regular_file(st)) throw InputError(path + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw InputError(path + ": cannot read its size: " + ec.message());
  if (size > kMaxReportBytes) {
    throw InputError(path + ": " + std::to_string(size) + " bytes is over the 1 GiB limit for a report");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  text.reserve(static_cast<size_t>(size));
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(path + ": read failed: " + std::strerror(errno));
  if (text.size() > kMaxReportBytes) throw InputError(path + ": over the 1 GiB limit for a report");
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InputError(path + ": file is empty, expected a batchsweep report (JSON)");
  }
  check_nesting(text, path);
  json doc;
  try {
    // A key given twice (a hand-merged report): nlohmann would keep the last, and the point read would not be
    // the one the reader saw.
    doc = json::parse(text, DuplicateKeyCheck([&](const std::string& where) {
                        throw InputError(path + ": " + where +
                                         ": is given twice in the same object; JSON keeps only the last, so "
                                         "remove one");
                      }));
  } catch (const json::parse_error& e) {
    if (const std::string_view kind = export_kind(text); !kind.empty())
      throw InputError(path + ": is batchsweep's " + std::string(kind) +
                       " export, not a report: analyze, compare and --resume read the file --json writes");
    throw InputError(path + ": not valid JSON: " + json_syntax_error(text, e.byte, e.what()));
  } catch (const json::out_of_range& e) {  // a number beyond a double's range, e.g. 1e400 (out_of_range.406)
    throw InputError(path + ": not valid JSON: " + json_syntax_error(text, 0, e.what()));
  }
  return report_from_json(doc, path);
}

namespace {

// `v` as json_text(v, 2) writes it at `depth`, but an array of numbers (a point's samples_ms, up to 100,000
// steps) on one line: a number a line took about 27 bytes a step, so 93 points at the sample cap wrote a
// report over what the readers take.
void pretty_json(const json& v, int depth, std::string& out) {
  const bool numbers = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) {
                         return e.is_number() || e.is_null();
                       });
  if (v.empty() || !v.is_structured() || numbers) {
    out += json_text(v);
    return;
  }
  const auto next_line = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(2 * d), ' ');
  };
  out += v.is_object() ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ',';
    first = false;
    next_line(depth + 1);
    if (v.is_object()) out += json_text(json(it.key())) + ": ";
    pretty_json(it.value(), depth + 1, out);
  }
  next_line(depth);
  out += v.is_object() ? '}' : ']';
}

}  // namespace

std::string format_json(const Report& report) {
  std::string out;
  pretty_json(to_json(report), 0, out);
  return out + "\n";
}

}  // namespace bsw
