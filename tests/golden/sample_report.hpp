// A fixed report built in code, shared by the golden tests and the report unit tests: a roofline curve with
// its knee at 64, a refinement point, a point taken by --resume, one over_limit and one oom point, every
// analysis result set, and warnings. Everything is computed from constants, so the printers' output is the
// same on every run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "batchsweep/report.hpp"
#include "batchsweep/stats.hpp"

namespace bsw::testing {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// Five step times around `step_ms`, with a fixed relative spread pattern scaled by `spread`.
inline std::vector<double> sample_steps(double step_ms, double spread = 0.01) {
  const double pattern[] = {0.0, 1.0, -0.5, 2.0, -1.0, 0.5, -0.25, 1.5, 0.25, -0.75};
  std::vector<double> out;
  for (double p : pattern) out.push_back(step_ms * (1 + spread * p));
  return out;
}

inline Point ok_point(int64_t batch, double step_ms, bool refinement = false) {
  Point p;
  p.batch = batch;
  p.accumulation = 1;
  p.effective_batch = batch;
  p.status = PointStatus::ok;
  p.samples_ms = sample_steps(step_ms);
  p.step_ms = summarize(p.samples_ms);
  p.samples_per_second = static_cast<double>(batch) / (p.step_ms.mean / 1000.0);  // as run computes it
  const double flops_per_sample = 3.0e9;
  p.tflops = p.samples_per_second * flops_per_sample / 1e12;
  p.mfu = *p.tflops * 1e12 / 1.0e14;
  p.memory.planned_bytes = kGiB + static_cast<uint64_t>(batch) * 96 * kMiB;
  p.memory.measured_bytes = p.memory.planned_bytes;
  p.refinement = refinement;
  p.noise_pct = relative_noise(p.samples_ms) * 100;
  p.stop_reason = "noise target";
  p.loss = 2.302585 - 0.001 * static_cast<double>(batch);
  return p;
}

inline Point skipped_point(int64_t batch, PointStatus status, std::string reason) {
  Point p;
  p.batch = batch;
  p.effective_batch = batch;
  p.status = status;
  p.reason = std::move(reason);
  p.memory.planned_bytes = kGiB + static_cast<uint64_t>(batch) * 96 * kMiB;
  return p;
}

// Roofline: a step takes max(2 ms, batch / 32000 samples/s), so throughput stops scaling at batch 64.
inline double roofline_step_ms(int64_t batch) {
  return std::max(2.0, static_cast<double>(batch) / 32.0);
}

inline Report sample_report() {
  Report r;
  r.tool = {"batchsweep", "0.1.0", "0123456789ab"};
  r.created_at = "2025-01-02T03:04:05Z";
  r.command = {"batchsweep", "run", "--model", "mlp-small", "--batch", "1:512:*4", "--memory-limit", "24GiB"};
  r.device.backend = "scripted";
  r.device.name = "Scripted A&B GPU <24 GiB>";
  r.device.memory_total_bytes = 24 * kGiB;
  r.device.peak_flops = 1.0e14;
  r.device.peak_flops_source = "script";
  r.device.details = {{"sm_count", 108}, {"driver_version", "555.42"}};
  r.settings = {{"model", {{"name", "mlp-small"}, {"source", "preset:mlp-small"}}},
                {"mode", "train"},
                {"precision", "bf16"},
                {"accumulation", 1},
                {"seed", 1234},
                {"latency_slo_ms", 3.0}};  // the budget analysis.latency_slo was held to
  for (int64_t batch : {1, 4, 16, 64}) r.points.push_back(ok_point(batch, roofline_step_ms(batch)));
  r.points.push_back(ok_point(96, roofline_step_ms(96) * 1.01, true));
  r.points.push_back(ok_point(128, roofline_step_ms(128) * 1.02));
  r.points.push_back(
      skipped_point(256, PointStatus::over_limit, "planned 25.0 GiB > --memory-limit 24.0 GiB"));
  r.points.push_back(
      skipped_point(512, PointStatus::oom, "cudaMalloc failed: out of memory, \"needs 49.0 GiB\""));

  PointTelemetry telemetry;
  telemetry.power_w_mean = 312.5;
  telemetry.power_w_max = 340.0;
  telemetry.energy_j = 125.0;
  telemetry.joules_per_sample = 0.0097656;
  telemetry.sm_clock_mhz_min = 1755;
  telemetry.sm_clock_mhz_median = 1980;
  telemetry.utilization_pct = 98;
  telemetry.memory_utilization_pct = 61;
  telemetry.temperature_c = 67;
  telemetry.throttle_reasons = {"sw_power_cap"};
  telemetry.cost_per_million_samples = 0.0284;
  r.points[3].telemetry = telemetry;
  r.points[1].resumed_from = "2025-01-01T22:10:00Z";  // taken by run --resume from an earlier run
  r.points[3].skipped_steps = 0;

  Analysis& a = r.analysis;
  a.knee.batch = 64;
  a.knee.reason = "Kneedle on log2 throughput";
  a.knee.confidence = "stable";
  a.saturation = {64, r.points[3].samples_per_second, "first batch within 95% of the best throughput"};
  a.max_fit = {128, r.points[5].samples_per_second, "256 is over --memory-limit"};
  a.best_throughput = {64, r.points[3].samples_per_second, ""};
  a.latency_slo = BatchChoice{64, r.points[3].samples_per_second, "p99 2.04 ms within the 3 ms budget", 2.04};
  a.recommended = {64, "knee at 64: the best throughput with 54% of the memory of batch 128"};
  r.warnings = {"noise target 0.5% missed at batch 1 (1.1%): raise --min-time",
                "knee found next to the sweep's edge; extend --batch past 128 to confirm it"};
  return r;
}

// The same sweep on a second device: batch 4 is 20% faster, batch 16 15% slower, batch 64 0.4% faster
// (noise), batch 96 was not run, batch 1 has no raw samples, and batch 256 fits in the larger memory.
inline Report sample_candidate() {
  Report r = sample_report();
  r.device.name = "Scripted GPU 48 GiB";
  r.device.memory_total_bytes = 48 * kGiB;
  r.settings["precision"] = "fp16";
  std::vector<Point> points;
  for (const Point& base : r.points) {
    if (base.batch == 96) continue;
    Point p = base.batch == 256 ? ok_point(256, roofline_step_ms(256)) : base;
    p.resumed_from.clear();  // every point measured by this run
    double speedup = 1.0;
    if (p.batch == 4) speedup = 1.2;
    if (p.batch == 16) speedup = 0.85;
    if (p.batch == 64) speedup = 1.004;
    if (p.status == PointStatus::ok && speedup != 1.0) {
      for (double& v : p.samples_ms) v /= speedup;
      p.step_ms = summarize(p.samples_ms);
      p.samples_per_second = base.samples_per_second * speedup;
    }
    if (p.batch == 1) p.samples_ms.clear();
    points.push_back(std::move(p));
  }
  r.points = std::move(points);
  r.analysis.max_fit = {256, std::nullopt, "fits in 48 GiB"};
  r.analysis.recommended = {64, "knee at 64"};
  return r;
}

}  // namespace bsw::testing
