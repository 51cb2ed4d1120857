// The throughput curve the knee and saturation run on, and the number formats of reasons.
#include "analysis/curve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "batchsweep/analysis.hpp"

namespace bsw::analysis_detail {

bool is_ok(const Point& point) {
  return point.status == PointStatus::ok && point.batch >= 1 && std::isfinite(point.samples_per_second) &&
         point.samples_per_second > 0.0;
}

std::vector<CurvePoint> throughput_curve(std::span<const Point> points) {
  std::vector<CurvePoint> curve;
  for (const Point& point : points) {
    if (!is_ok(point)) continue;
    auto same =
        std::find_if(curve.begin(), curve.end(), [&](const CurvePoint& c) { return c.batch == point.batch; });
    if (same == curve.end()) {
      curve.push_back({&point, point.batch, point.samples_per_second});
    } else if (point.samples_per_second > same->samples_per_second) {
      *same = {&point, point.batch, point.samples_per_second};
    }
  }
  std::sort(curve.begin(), curve.end(),
            [](const CurvePoint& l, const CurvePoint& r) { return l.batch < r.batch; });
  return curve;
}

std::string falling_text(const std::vector<CurvePoint>& curve) {
  if (curve.size() < 2) return {};
  const CurvePoint& first = curve.front();
  const CurvePoint& last = curve.back();
  const bool first_is_best = std::all_of(curve.begin(), curve.end(), [&](const CurvePoint& c) {
    return c.samples_per_second <= first.samples_per_second;
  });
  const double change = last.samples_per_second / first.samples_per_second - 1.0;
  if (!first_is_best || change >= -kFlatThroughputGain) return {};
  return fmt::format("throughput falls as the batch grows (-{} from {} to {})", format_percent(-change),
                     first.batch, last.batch);
}

std::string format_rate(double samples_per_second) {
  if (samples_per_second >= 1e15) return fmt::format("{:.4g}", samples_per_second);  // beyond any device
  if (samples_per_second >= 1000.0) return fmt::format("{:.0f}", samples_per_second);
  return fmt::format("{:.3g}", samples_per_second);
}

std::string format_percent(double fraction) {
  const double percent = fraction * 100.0;
  // Just short of 100% reads 99.9%, not a rounded 100% that would claim a tie. But a share within rounding
  // of 1 (two equal throughputs computed in a different order) is 100%.
  if (fraction < 1.0 && fraction > 1.0 - 1e-12) return "100%";
  if (fraction < 1.0 && std::round(percent) >= 100.0) return fmt::format("{:.1f}%", std::min(percent, 99.9));
  // Under 1% two decimals: "0.14% faster", not "0% faster".
  if (percent != 0.0 && std::fabs(percent) < 0.995) return fmt::format("{:.2f}%", percent);
  return fmt::format("{:.0f}%", percent);
}

std::string format_share(double fraction, double threshold_pct) {
  std::string text = format_percent(fraction);
  const double percent = fraction * 100.0;
  const bool reaches = percent >= threshold_pct;
  for (int decimals = 1; decimals <= 6 && (std::strtod(text.c_str(), nullptr) >= threshold_pct) != reaches;
       ++decimals) {
    text = fmt::format("{:.{}f}%", percent, decimals);
    // Short of the whole, never "100.0%".
    if (fraction < 1.0 && std::strtod(text.c_str(), nullptr) >= 100.0) text = format_percent(fraction);
  }
  // Within a millionth of a percent of the threshold: rounded toward its true side, never onto the other.
  if ((std::strtod(text.c_str(), nullptr) >= threshold_pct) != reaches)
    text = fmt::format("{:.6f}%", reaches ? std::ceil(percent * 1e6) / 1e6 : std::floor(percent * 1e6) / 1e6);
  return text;
}

// A --batch spec of batches strictly between lo and hi: every one up to 16, doublings where hi is more than
// four times lo (two or more of them), else multiples of a step of (hi - lo) / 8 rounded down to 8s.
std::string between_range(int64_t lo, int64_t hi) {
  if (hi <= 16) return lo + 1 == hi - 1 ? std::to_string(lo + 1) : fmt::format("{}:{}:+1", lo + 1, hi - 1);
  // Doublings where they give two batches or more; a gap of about 4x has one doubling inside it, which would
  // leave the edge unplaced on either side of it: even steps then.
  if (hi > 2 * lo && 4 * lo < hi) {
    int64_t last = 2 * lo;
    while (last * 2 < hi) last *= 2;
    return fmt::format("{}:{}:*2", 2 * lo, last);
  }
  const int64_t step = std::max<int64_t>(8, (hi - lo) / 8 / 8 * 8);
  const int64_t first = (lo / step + 1) * step;  // the first multiple of the step above lo
  const int64_t last = first + (hi - 1 - first) / step * step;
  return first == last ? std::to_string(first) : fmt::format("{}:{}:+{}", first, last, step);
}

std::string format_number(double value) {
  return fmt::format("{:g}", value);
}

// A latency (a p99, ...) beside the budget it is held to, with the digits it takes for the two to read the
// way they compare: never "the smallest p99 is 20 ms" over a 20 ms budget for 20.008.
std::string latency_text(double latency, double budget_ms) {
  // Read back with strtod, which takes a subnormal (a hand-edited report's 1e-310 ms) where std::stod throws.
  const auto read = [](const std::string& text) { return std::strtod(text.c_str(), nullptr); };
  const double budget = read(format_number(budget_ms));  // as the budget is printed
  const auto order = [](double a, double b) { return (a > b) - (a < b); };
  // At least the integer digits: 1234 ms, not 1.23e+03.
  const int whole = latency >= 1 ? static_cast<int>(std::floor(std::log10(latency))) + 1 : 1;
  for (int digits = std::max(3, whole); digits <= std::max(9, whole); ++digits) {
    std::string text = fmt::format("{:.{}g}", latency, digits);
    if (order(read(text), budget) == order(latency, budget_ms)) return text;
  }
  return fmt::format("{}", latency);
}

std::optional<int64_t> swept_effective_batch(std::span<const Point> points) {
  const auto effective = [](const Point& p) {
    return p.effective_batch > 0 ? p.effective_batch : p.batch * p.accumulation;
  };
  if (points.empty()) return std::nullopt;
  std::set<int64_t> accumulations;
  for (const Point& point : points) {
    if (effective(point) != effective(points.front())) return std::nullopt;
    accumulations.insert(point.accumulation);
  }
  if (accumulations.size() < 2) return std::nullopt;
  return effective(points.front());
}

}  // namespace bsw::analysis_detail
