// Test helpers for the analysis tests: points of a synthetic sweep with known throughput curves and a chosen
// step-time spread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batchsweep/report.hpp"
#include "batchsweep/stats.hpp"

namespace bsw::test {

// An ok point whose `samples` step times spread evenly over +-spread (a fraction) around the step time that
// gives samples_per_second; memory grows with the batch.
inline Point measured_point(int64_t batch, double samples_per_second, double spread = 0.002, int samples = 21,
                            int64_t accumulation = 1) {
  Point point;
  point.batch = batch;
  point.accumulation = accumulation;
  point.effective_batch = batch * accumulation;
  point.samples_per_second = samples_per_second;
  const double center_ms = static_cast<double>(point.effective_batch) / samples_per_second * 1000.0;
  for (int i = 0; i < samples; ++i) {
    const double offset = samples == 1 ? 0.0 : 2.0 * i / (samples - 1) - 1.0;
    point.samples_ms.push_back(center_ms * (1.0 + spread * offset));
  }
  point.step_ms = summarize(point.samples_ms);
  point.memory.planned_bytes = static_cast<uint64_t>(batch) * (1u << 20) + (100u << 20);
  return point;
}

inline Point failed_point(int64_t batch, PointStatus status, std::string reason) {
  Point point;
  point.batch = batch;
  point.effective_batch = batch;
  point.status = status;
  point.reason = std::move(reason);
  return point;
}

inline std::vector<int64_t> powers_of_two(int64_t first, int64_t last) {
  std::vector<int64_t> batches;
  for (int64_t b = first; b <= last; b *= 2) batches.push_back(b);
  return batches;
}

inline std::vector<Point> sweep(const std::vector<int64_t>& batches,
                                const std::function<double(double)>& rate, double spread = 0.002) {
  std::vector<Point> points;
  for (int64_t b : batches) points.push_back(measured_point(b, rate(static_cast<double>(b)), spread));
  return points;
}

// throughput = peak * b / (b + b0): scales linearly below b0, saturates above.
inline std::function<double(double)> saturating(double peak, double b0) {
  return [=](double b) { return peak * b / (b + b0); };
}

// A roofline step time max(t0_ms, b / rate_per_ms): throughput b / step, flat past the corner b = t0 * rate.
inline std::function<double(double)> roofline(double t0_ms, double rate_per_ms) {
  return [=](double b) { return b / std::max(t0_ms, b / rate_per_ms) * 1000.0; };
}

}  // namespace bsw::test
