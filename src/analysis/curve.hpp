// Internal to src/analysis: the throughput curve (one ok point per distinct micro-batch), how the knee was
// called, and the number formats the reasons and the recommendation's `why` share.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "batchsweep/report.hpp"

namespace bsw::analysis_detail {

// status ok, batch >= 1 and a finite samples_per_second > 0.
[[nodiscard]] bool is_ok(const Point& point);

struct CurvePoint {
  const Point* point = nullptr;
  int64_t batch = 0;
  double samples_per_second = 0;
};

// The ok points, one per distinct batch (the highest throughput where several share one; the first on a tie),
// sorted by batch.
[[nodiscard]] std::vector<CurvePoint> throughput_curve(std::span<const Point> points);

// An --effective-batch sweep's N: set when every point has one effective batch and the accumulation varies.
[[nodiscard]] std::optional<int64_t> swept_effective_batch(std::span<const Point> points);

// Which rule of analysis.hpp decided the knee.
enum class KneeCall { found, too_few, flat, still_scaling, no_bend };

struct KneeDetail {
  KneeResult result;
  KneeCall call = KneeCall::no_bend;
  // The largest batch is the fastest and beat the one before it by the still-scaling gain (analysis.hpp step
  // 4), whatever the call: a knee far below the plateau leaves the curve rising at its end too.
  bool rising_at_end = false;
};

// find_knee, plus the rule that decided it (the recommendation branches on it).
// interim: AnalysisOptions::interim (the confidence left to the final analysis past
// kInterimConfidencePoints).
[[nodiscard]] KneeDetail find_knee_detail(std::span<const Point> points, double sensitivity,
                                          bool interim = false);

// "throughput falls as the batch grows (-31% from 1 to 8)" where the smallest batch has the best throughput
// and the largest is more than kFlatThroughputGain below it; empty otherwise (a flat curve, or a rising one).
[[nodiscard]] std::string falling_text(const std::vector<CurvePoint>& curve);

// "12345" for rates of 1000 and more, else three significant digits ("98.7", "0.123").
[[nodiscard]] std::string format_rate(double samples_per_second);
// A fraction as a whole percentage ("94%"), with one decimal where rounding would print 100% for less than
// all.
[[nodiscard]] std::string format_percent(double fraction);

// format_percent of a share judged against `threshold_pct` (a percent), with the decimals that keep it on its
// side: 94.69% against 95 reads "94.7%", not "95%"; 99.991% against 99.99 reads "99.99%", not "99.9%".
[[nodiscard]] std::string format_share(double fraction, double threshold_pct);
// Whether the pct-th percentile of n steps is near the slowest: fewer than 1 step in (100 - pct) lies above
// it (with a tolerance: 1000 * (100 - 99.9) is 99.99999999999 in doubles, and 1000 steps do place one above a
// p99.9). n = 0 is not: there is no percentile to judge.
[[nodiscard]] inline bool too_few_steps(size_t n, double pct) {
  return n > 0 && static_cast<double>(n) * (100.0 - pct) < 100.0 - 1e-6;
}

// A --batch spec of batches strictly between lo and hi ("72:120:+8", "32:128:*2", "5:7:+1"), to measure
// there.
[[nodiscard]] std::string between_range(int64_t lo, int64_t hi);
// "%g"-style number for option values in reasons ("1", "0.5", "12.5").
[[nodiscard]] std::string format_number(double value);
// A latency (a p99, ...) beside the budget it is held to, with the digits it takes for the two to read the
// way they compare: never "20 ms" over a 20 ms budget for 20.008.
[[nodiscard]] std::string latency_text(double latency, double budget_ms);

}  // namespace bsw::analysis_detail
