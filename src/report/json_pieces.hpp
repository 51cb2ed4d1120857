// Pieces of the report's JSON form, written once as templates over the JSON type: the report writer
// instantiates them with nlohmann::json, the CSV printer with nlohmann::ordered_json (to keep the field order
// for its columns), compare reuses the analysis pieces.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <span>

#include "batchsweep/analysis.hpp"
#include "batchsweep/report.hpp"

namespace bsw::report_json {

// NaN and Inf never reach a report: they are written as null.
template <class Json>
Json number_or_null(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

// A latency percentile (50 to 99.99) as the number the schema lists: a whole one as the integer, not 99.0,
// which a reader decoding into an integer type refuses.
template <class Json>
Json percentile_json(double pct) {
  return std::isfinite(pct) && pct == std::floor(pct) && std::fabs(pct) <= 100 ? Json(static_cast<int>(pct))
                                                                               : number_or_null<Json>(pct);
}

template <class Json>
Json optional_number(const std::optional<double>& v) {
  return v ? number_or_null<Json>(*v) : Json(nullptr);
}

template <class Json, class T>
Json optional_integer(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

// `samples`: how many the statistics come from. Without samples (a point that never ran, or a report that
// gave only some statistics) a 0 is a statistic nobody measured, and unknown numbers are null; one sample has
// no spread to measure, so no stddev.
template <class Json>
Json step_stats_json(const StepStats& s, size_t samples) {
  const bool measured = samples > 0;
  const auto value = [&](double v) {
    return !measured && v == 0.0 ? Json(nullptr) : number_or_null<Json>(v);
  };
  Json out = Json::object();
  out["mean"] = value(s.mean);
  out["median"] = value(s.median);
  out["stddev"] = samples == 1 ? Json(nullptr) : value(s.stddev);
  out["min"] = value(s.min);
  out["max"] = value(s.max);
  out["p50"] = value(s.p50);
  out["p90"] = value(s.p90);
  out["p95"] = value(s.p95);
  out["p99"] = value(s.p99);
  return out;
}

template <class Json>
Json telemetry_json(const PointTelemetry& t) {
  Json out = Json::object();
  out["power_w"]["mean"] = optional_number<Json>(t.power_w_mean);
  out["power_w"]["max"] = optional_number<Json>(t.power_w_max);
  out["energy_j"] = optional_number<Json>(t.energy_j);
  out["joules_per_sample"] = optional_number<Json>(t.joules_per_sample);
  out["sm_clock_mhz"]["min"] = optional_number<Json>(t.sm_clock_mhz_min);
  out["sm_clock_mhz"]["median"] = optional_number<Json>(t.sm_clock_mhz_median);
  // Null where not read, never missing, as the other readings.
  out["mem_clock_mhz"]["min"] = optional_number<Json>(t.mem_clock_mhz_min);
  out["mem_clock_mhz"]["median"] = optional_number<Json>(t.mem_clock_mhz_median);
  out["utilization_pct"] = optional_number<Json>(t.utilization_pct);
  out["memory_utilization_pct"] = optional_number<Json>(t.memory_utilization_pct);
  out["temperature_c"] = optional_number<Json>(t.temperature_c);
  // An empty list says "no throttling seen"; where nothing was sampled (a price without telemetry) it is
  // null.
  const bool sampled = t.power_w_mean || t.energy_j || t.sm_clock_mhz_median || t.mem_clock_mhz_median ||
                       t.utilization_pct || t.memory_utilization_pct || t.temperature_c ||
                       !t.throttle_reasons.empty();
  out["throttle_reasons"] = sampled ? Json::array() : Json(nullptr);
  for (const auto& reason : t.throttle_reasons) out["throttle_reasons"].push_back(reason);
  out["cost_per_million_samples"] = optional_number<Json>(t.cost_per_million_samples);
  return out;
}

template <class Json>
Json host_json(const PointHost& h) {
  Json out = Json::object();
  out["wall_s"] = number_or_null<Json>(h.wall_s);
  out["cpu_s"] = number_or_null<Json>(h.cpu_s);
  out["cpus"] = h.cpus;
  out["others_cores"] = optional_number<Json>(h.others_cores);
  out["steal_pct"] = optional_number<Json>(h.steal_pct);
  out["waited_s"] = optional_number<Json>(h.waited_s);
  return out;
}

// Every point carries the same core fields; the extras (noise_pct, stop_reason, skipped_steps, loss,
// telemetry, host, execution) appear only when present.
// `round_spread`: the report's round_noise, which the point's samples_per_second_ci95_pct holds.
template <class Json>
Json point_json(const Point& p, const std::optional<RoundNoise>& round_spread = {}) {
  Json out = Json::object();
  out["batch"] = p.batch;
  out["accumulation"] = p.accumulation;
  out["effective_batch"] = p.effective_batch;
  out["status"] = std::string(to_string(p.status));
  out["reason"] = p.reason;
  // A point that failed has no throughput (not a throughput of 0).
  out["samples_per_second"] =
      p.status == PointStatus::ok ? number_or_null<Json>(p.samples_per_second) : Json(nullptr);
  out["tokens_per_second"] = optional_number<Json>(p.tokens_per_second);
  out["step_ms"] = step_stats_json<Json>(p.step_ms, p.samples_ms.size());
  out["samples_ms"] = Json::array();
  for (double v : p.samples_ms) out["samples_ms"].push_back(number_or_null<Json>(v));
  out["tflops"] = optional_number<Json>(p.tflops);
  out["mfu"] = optional_number<Json>(p.mfu);
  // 0: no plan behind the point (a hand-made report, the PyTorch peer's), so unknown.
  out["memory"]["planned_bytes"] = p.memory.planned_bytes > 0 ? Json(p.memory.planned_bytes) : Json(nullptr);
  out["memory"]["measured_bytes"] = optional_integer<Json>(p.memory.measured_bytes);
  out["memory"]["device_used_bytes"] = optional_integer<Json>(p.memory.device_used_bytes);
  out["refinement"] = p.refinement;
  if (!p.resumed_from.empty()) out["resumed_from"] = p.resumed_from;
  if (p.noise_pct) out["noise_pct"] = number_or_null<Json>(*p.noise_pct);
  // Derived from samples_ms when written (as rounds' mean_ms): how precisely this run measured the
  // throughput, with its rounds' spread where it has rounds.
  if (const std::optional<double> ci = throughput_ci95_pct(p, round_spread))
    out["samples_per_second_ci95_pct"] = number_or_null<Json>(*ci);
  if (!p.stop_reason.empty()) out["stop_reason"] = p.stop_reason;
  if (p.skipped_steps) out["skipped_steps"] = *p.skipped_steps;
  if (p.loss) out["loss"] = number_or_null<Json>(*p.loss);
  if (p.telemetry) out["telemetry"] = telemetry_json<Json>(*p.telemetry);
  if (p.host) out["host"] = host_json<Json>(*p.host);
  if (!p.rounds.empty()) {
    Json rounds = Json::array();
    const std::vector<std::span<const double>> slices = round_slices(p);
    for (size_t i = 0; i < p.rounds.size(); ++i) {
      const PointRound& r = p.rounds[i];
      Json round = Json::object();
      round["steps"] = r.steps;
      round["mean_ms"] = i < slices.size() && !slices[i].empty()
                             ? number_or_null<Json>(std::accumulate(slices[i].begin(), slices[i].end(), 0.0) /
                                                    static_cast<double>(slices[i].size()))
                             : Json(nullptr);
      round["status"] = std::string(to_string(r.status));
      if (!r.stop_reason.empty()) round["stop_reason"] = r.stop_reason;
      if (!r.reason.empty()) round["reason"] = r.reason;
      rounds.push_back(std::move(round));
    }
    out["rounds"] = std::move(rounds);
    if (const std::optional<RoundsAgreement> agreement = rounds_agreement(p)) {
      out["round_spread_pct"] = number_or_null<Json>(agreement->spread_pct);
      out["rounds_disagree"] = agreement->disagree;
    }
  }
  if (p.execution.is_object() && !p.execution.empty()) out["execution"] = Json::parse(p.execution.dump());
  return out;
}

template <class Json>
Json knee_json(const KneeResult& k) {
  Json out = Json::object();
  out["batch"] = optional_integer<Json>(k.batch);
  out["reason"] = k.reason;
  out["confidence"] = k.confidence;
  out["range_low"] = optional_integer<Json>(k.range_low);
  out["range_high"] = optional_integer<Json>(k.range_high);
  return out;
}

template <class Json>
Json choice_json(const BatchChoice& c) {
  Json out = Json::object();
  out["batch"] = optional_integer<Json>(c.batch);
  out["samples_per_second"] = optional_number<Json>(c.samples_per_second);
  out["reason"] = c.reason;
  if (c.latency_ms) out["latency_ms"] = *c.latency_ms;
  return out;
}

template <class Json>
Json recommendation_json(const Recommendation& r) {
  Json out = Json::object();
  out["batch"] = optional_integer<Json>(r.batch);
  out["why"] = r.why;
  return out;
}

}  // namespace bsw::report_json
