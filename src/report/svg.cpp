// The SVG printer: throughput (left axis) and p99 step latency (the budget's percentile where a latency
// budget names another; right axis) against batch on a log2 axis, planned memory as bars scaled to the
// device's memory (or to a --memory-limit below it), dashed lines at the knee, saturation and max fit, and
// crosses on the axis where a batch did not fit. With --request-rate, the requests' latency at that
// percentile per max batch (analysis.serving) on the latency axis too, dashed: filled where settled, hollow
// where not. Every number is printed with fixed decimals, so the output is deterministic.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/printers.hpp"
#include "report/format.hpp"
#include "report/view.hpp"

namespace bsw {

namespace {

constexpr double kWidth = 880, kHeight = 540;
constexpr double kLeft = 90, kRight = 800, kTop = 64, kBottom = 420;
constexpr const char* kThroughputColor = "#1f77b4";
constexpr const char* kLatencyColor = "#ff7f0e";
constexpr const char* kServingColor = "#e377c2";
constexpr const char* kMemoryColor = "#9e9e9e";
constexpr const char* kOomColor = "#d62728";
constexpr const char* kLimitColor = "#8c564b";
constexpr const char* kErrorColor = "#333333";

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string px(double v) {
  return fmt::format("{:.1f}", v);
}

// The smallest of 1, 2, 2.5, 5, 10 x 10^k that is at least `raw`.
double nice_step(double raw) {
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * base >= raw * (1 - 1e-12)) return m * base;
  }
  return 10 * base;
}

// A linear value axis from 0 to a round maximum, with about five ticks.
// Ticks are counted, not stepped to the maximum by addition: near the largest double a step added to a tick
// no longer moves it (a hand-edited report's 1.6e308 samples/s looped forever, growing the SVG).
struct ValueAxis {
  double max = 1, step = 1;
  int steps = 1;  // ticks above 0
  explicit ValueAxis(double data_max) {
    if (!(data_max > 0) || !std::isfinite(data_max)) return;
    const double nice = nice_step(data_max / 5);
    const double top = std::ceil(data_max / nice - 1e-9) * nice;
    if (std::isfinite(top) && nice > 0 && std::isfinite(nice)) {
      step = nice;
      max = top;
    } else {  // rounding up overflowed: five plain steps to the data's maximum
      step = data_max / 5;
      max = data_max;
    }
    steps = static_cast<int>(std::clamp(std::round(max / step), 1.0, 20.0));
  }
  [[nodiscard]] double tick(int i) const { return step * i; }
  [[nodiscard]] double y(double v) const { return kBottom - v / max * (kBottom - kTop); }
};

// Half a bar's room on either side of the first and last tick, in log2 units.
constexpr double kBatchAxisPad = 0.35;

struct BatchAxis {
  int lo = 0, hi = 1;  // log2 of the first and last tick
  [[nodiscard]] double x(double batch) const {
    return kLeft + (std::log2(batch) - lo + kBatchAxisPad) / (hi - lo + 2 * kBatchAxisPad) * (kRight - kLeft);
  }
};

BatchAxis batch_axis(const std::vector<Point>& points) {
  int64_t smallest = points.front().batch, largest = points.front().batch;
  for (const auto& p : points) {
    smallest = std::min(smallest, p.batch);
    largest = std::max(largest, p.batch);
  }
  BatchAxis axis;
  axis.lo = static_cast<int>(std::floor(std::log2(static_cast<double>(smallest))));
  axis.hi = static_cast<int>(std::ceil(std::log2(static_cast<double>(largest))));
  if (axis.hi <= axis.lo) axis.hi = axis.lo + 1;
  return axis;
}

std::string text(double x, double y, std::string_view anchor, std::string_view content,
                 std::string_view extra = {}) {
  return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\"{}{}>{}</text>\n", px(x), px(y), anchor,
                     extra.empty() ? "" : " ", extra, escape(content));
}

std::string polyline(const std::vector<std::pair<double, double>>& xy, const char* color) {
  std::string points;
  for (const auto& [x, y] : xy) {
    if (!points.empty()) points += ' ';
    points += fmt::format("{},{}", px(x), px(y));
  }
  return fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points,
                     color);
}

std::string title_text(const Report& report) {
  const report_view::Title t = report_view::title(report);
  std::string title = "batchsweep";
  std::string details;
  const std::string split = t.split();
  const std::string overrides = t.overrides_piece();
  for (const std::string* piece :
       {&t.model, &overrides, &t.device, &t.mode, &t.precision_shown, &split, &t.checkpointing}) {
    if (!piece->empty()) details += (details.empty() ? "" : " \u00b7 ") + *piece;
  }
  title = details.empty() ? title : title + ": " + details;
  // A sweep that did not finish says so where the eye lands first (the markdown and console say it too).
  if (report.state == "interrupted") title += " (interrupted: finished points only)";
  if (report.state == "in_progress") title += " (unfinished: finished points only)";
  return title;
}

// A cross centred on (x, y), with a tooltip when `tooltip` is not empty.
std::string cross(double x, double y, const char* color, const std::string& tooltip) {
  std::string path =
      fmt::format("<path d=\"M {} {} L {} {} M {} {} L {} {}\" stroke=\"{}\" stroke-width=\"2.5\"", px(x - 6),
                  px(y - 6), px(x + 6), px(y + 6), px(x - 6), px(y + 6), px(x + 6), px(y - 6), color);
  if (tooltip.empty()) return path + "/>\n";
  return path + "><title>" + escape(tooltip) + "</title></path>\n";
}

struct NotRun {
  PointStatus status;
  const char* color;
  const char* label;
};

struct Marker {
  const char* label;
  const char* color;
  std::optional<int64_t> batch;
};

}  // namespace

std::string format_svg(const Report& report) {
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      px(kWidth), px(kHeight));
  out += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", px(kWidth), px(kHeight));
  out += text(kWidth / 2, 28, "middle", title_text(report), "font-size=\"16\" font-weight=\"bold\"");
  if (report.points.empty()) {
    out += text(kWidth / 2, (kTop + kBottom) / 2, "middle", "no points measured");
    return out + "</svg>\n";
  }

  std::vector<Point> sorted = report.points;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Point& a, const Point& b) { return a.batch < b.batch; });
  const BatchAxis bx = batch_axis(sorted);

  // The latency curve is the percentile the budget holds (p99 without one).
  const double pct = report_view::budget_percentile(report);
  const std::string pct_name = latency_name(pct);
  const auto latency = [pct](const Point& p) {
    const double v = step_latency_ms(p, pct).value_or(0.0);
    return std::isfinite(v) ? v : 0.0;
  };
  double best_rate = 0, worst_p99 = 0;
  uint64_t largest_plan = 0;
  bool any_latency = false;
  for (const auto& p : sorted) {
    largest_plan = std::max(largest_plan, p.memory.planned_bytes);
    if (p.status != PointStatus::ok) continue;
    if (std::isfinite(p.samples_per_second)) best_rate = std::max(best_rate, p.samples_per_second);
    if (p.status == PointStatus::ok && latency(p) > 0) {
      worst_p99 = std::max(worst_p99, latency(p));
      any_latency = true;
    }
  }
  // The latency budget the analysis held that percentile to, drawn on the latency axis (which then reaches
  // it).
  const std::optional<double> budget_ms = report_view::latency_budget_ms(report);
  // The requests' latency per max batch (run/analyze --request-rate), where a max batch was not saturated.
  const Serving* serving = report.analysis.serving ? &*report.analysis.serving : nullptr;
  bool any_serving = false;
  if (serving)
    for (const ServingBatch& b : serving->batches)
      if (b.latency_ms && std::isfinite(*b.latency_ms) && *b.latency_ms > 0) {
        worst_p99 = std::max(worst_p99, *b.latency_ms);
        any_serving = true;
      }
  any_latency = any_latency || any_serving;
  if (any_latency && budget_ms) worst_p99 = std::max(worst_p99, *budget_ms);
  const ValueAxis rate_axis(best_rate);
  const ValueAxis latency_axis(worst_p99);
  // A --memory-limit below the device's memory is the budget the plans were held to: the bars' full height,
  // a plan over it reaching the top.
  uint64_t limit = 0;
  if (const auto it = report.settings.find("memory_limit_bytes");
      it != report.settings.end() && it->is_number_unsigned())
    limit = it->get<uint64_t>();
  const uint64_t device_total = report.device.memory_total_bytes;
  if (limit > 0 && device_total > 0 && limit >= device_total) limit = 0;
  const uint64_t memory_scale = limit > 0 ? limit : std::max(device_total, largest_plan);

  // Memory bars first, behind everything else.
  if (memory_scale > 0) {
    const double bar_width = std::min(18.0, (kRight - kLeft) / (bx.hi - bx.lo + 2 * kBatchAxisPad) * 0.5);
    out += "<g opacity=\"0.35\">\n";
    for (const auto& p : sorted) {
      if (p.memory.planned_bytes == 0) continue;
      const double fraction = std::min(1.0, static_cast<double>(p.memory.planned_bytes) / memory_scale);
      const double height = fraction * (kBottom - kTop);
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                         px(bx.x(p.batch) - bar_width / 2), px(kBottom - height), px(bar_width), px(height),
                         p.status == PointStatus::ok ? kMemoryColor : kOomColor);
    }
    out += "</g>\n";
    const uint64_t line_bytes = limit > 0 ? limit : device_total;
    if (line_bytes > 0) {
      const double y = kBottom - static_cast<double>(line_bytes) / memory_scale * (kBottom - kTop);
      const char* color = limit > 0 ? kLimitColor : kMemoryColor;
      out += fmt::format(
          "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1\" "
          "stroke-dasharray=\"2 3\"/>\n",
          px(kLeft), px(y), px(kRight), px(y), color);
      out += text(kRight - 4, y - 4, "end",
                  (limit > 0 ? "--memory-limit " : "device memory ") + report_format::human_bytes(line_bytes),
                  fmt::format("fill=\"{}\"", color));
    }
  }

  // Grid and axes.
  out += "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  for (int i = 1; i <= rate_axis.steps; ++i) {
    const double v = rate_axis.tick(i);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", px(kLeft), px(rate_axis.y(v)),
                       px(kRight), px(rate_axis.y(v)));
  }
  out += "</g>\n";
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333333\" "
      "stroke-width=\"1\"/>\n",
      px(kLeft), px(kTop), px(kRight - kLeft), px(kBottom - kTop));
  const int exponent_step = (bx.hi - bx.lo) > 12 ? 2 : 1;
  for (int e = bx.lo; e <= bx.hi; e += exponent_step) {
    const double x = bx.x(std::ldexp(1.0, e));
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333333\"/>\n", px(x),
                       px(kBottom), px(kBottom + 5));
    out += text(x, kBottom + 18, "middle",
                e <= 62 ? fmt::format("{}", int64_t{1} << e) : fmt::format("2^{}", e));
  }
  out += text((kLeft + kRight) / 2, kBottom + 40, "middle", "batch (log2 scale)");
  for (int i = 0; i <= rate_axis.steps; ++i) {
    const double v = rate_axis.tick(i);
    out += text(kLeft - 8, rate_axis.y(v) + 4, "end", report_format::human_rate(v),
                fmt::format("fill=\"{}\"", kThroughputColor));
  }
  out += text(
      24, (kTop + kBottom) / 2, "middle", "samples/s",
      fmt::format("fill=\"{}\" transform=\"rotate(-90 24 {})\"", kThroughputColor, px((kTop + kBottom) / 2)));
  if (any_latency) {
    for (int i = 0; i <= latency_axis.steps; ++i) {
      const double v = latency_axis.tick(i);
      out += text(kRight + 8, latency_axis.y(v) + 4, "start", report_format::sig3(v),
                  fmt::format("fill=\"{}\"", kLatencyColor));
    }
    const double x = kWidth - 20;
    out += text(x, (kTop + kBottom) / 2, "middle",
                fmt::format("{} {}latency (ms)", pct_name, any_serving ? "" : "step "),
                fmt::format("fill=\"{}\" transform=\"rotate(90 {} {})\"", kLatencyColor, px(x),
                            px((kTop + kBottom) / 2)));
  }

  if (any_latency && budget_ms) {
    const double y = latency_axis.y(*budget_ms);
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1\" "
        "stroke-dasharray=\"4 3\"/>\n",
        px(kLeft), px(y), px(kRight), px(y), kLatencyColor);
    out += text(kRight - 4, y - 4, "end", fmt::format("{} budget {:g} ms", pct_name, *budget_ms),
                fmt::format("fill=\"{}\"", kLatencyColor));
  }

  // Knee, saturation, fit edge, and the answer.
  const Analysis& a = report.analysis;
  const Marker markers[] = {{"knee", "#2ca02c", a.knee.batch},
                            {"saturation", "#9467bd", a.saturation.batch},
                            {"max fit", "#17becf", a.max_fit.batch},
                            {"recommended", "#d62728", a.recommended.batch}};
  int label_row = 0;
  for (const Marker& m : markers) {
    if (!m.batch || *m.batch < 1) continue;
    const double x = std::clamp(bx.x(static_cast<double>(*m.batch)), kLeft, kRight);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"6 4\"/>\n",
        px(x), px(kTop), px(kBottom), m.color);
    const bool right_half = x > (kLeft + kRight) / 2;
    out += text(right_half ? x - 4 : x + 4, kTop + 14 + 14 * label_row, right_half ? "end" : "start",
                fmt::format("{} {}", m.label, *m.batch), fmt::format("fill=\"{}\"", m.color));
    ++label_row;
  }

  // Curves over the points that ran.
  std::vector<std::pair<double, double>> rate_xy, latency_xy;
  for (const auto& p : sorted) {
    if (p.status != PointStatus::ok || !std::isfinite(p.samples_per_second)) continue;
    rate_xy.emplace_back(bx.x(p.batch), rate_axis.y(p.samples_per_second));
    if (any_latency && p.status == PointStatus::ok && latency(p) > 0) {
      latency_xy.emplace_back(bx.x(p.batch), latency_axis.y(latency(p)));
    }
  }
  if (!latency_xy.empty()) {
    out += polyline(latency_xy, kLatencyColor);
    for (const auto& [x, y] : latency_xy) {
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"7.0\" height=\"7.0\" fill=\"{}\"/>\n", px(x - 3.5),
                         px(y - 3.5), kLatencyColor);
    }
  }
  if (any_serving) {
    std::vector<std::pair<double, double>> serving_xy;
    std::string marks;
    for (const ServingBatch& b : serving->batches) {
      if (!b.latency_ms || !std::isfinite(*b.latency_ms) || *b.latency_ms <= 0) continue;
      const double x = bx.x(static_cast<double>(b.batch)), y = latency_axis.y(*b.latency_ms);
      serving_xy.emplace_back(x, y);
      marks += fmt::format(
          "<path d=\"M {} {} L {} {} L {} {} L {} {} Z\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
          px(x), px(y - 5), px(x + 5), px(y), px(x), px(y + 5), px(x - 5), px(y),
          b.settled ? kServingColor : "#ffffff", kServingColor);
    }
    std::string line = polyline(serving_xy, kServingColor);
    line.insert(line.find("/>"), " stroke-dasharray=\"5 3\"");
    out += line + marks;
  }
  if (!rate_xy.empty()) {
    out += polyline(rate_xy, kThroughputColor);
    for (const auto& [x, y] : rate_xy) {
      out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4.0\" fill=\"{}\"/>\n", px(x), px(y),
                         kThroughputColor);
    }
  }

  // Batches that did not run: a cross on the axis, colored by why.
  const NotRun kinds[] = {{PointStatus::oom, kOomColor, "out of memory"},
                          {PointStatus::over_limit, kLimitColor, "over memory limit"},
                          {PointStatus::error, kErrorColor, "failed"}};
  std::vector<const NotRun*> used_kinds;
  for (const NotRun& kind : kinds) {
    bool used = false;
    for (const auto& p : sorted) {
      if (p.status != kind.status) continue;
      used = true;
      out += cross(bx.x(p.batch), kBottom, kind.color,
                   fmt::format("batch {}: {}{}{}", p.batch, to_string(p.status), p.reason.empty() ? "" : ": ",
                               p.reason));
    }
    if (used) used_kinds.push_back(&kind);
  }

  // Legend.
  double lx = kLeft;
  const double ly = kHeight - 36;
  auto legend = [&](const std::string& swatch, const std::string& label) {
    out += swatch;
    out += text(lx + 22, ly + 4, "start", label);
    lx += 34 + 6.5 * static_cast<double>(report_format::display_width(label));
  };
  legend(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     px(lx), px(ly), px(lx + 16), px(ly), kThroughputColor),
         "samples/s");
  if (any_latency) {
    legend(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       px(lx), px(ly), px(lx + 16), px(ly), kLatencyColor),
           pct_name + " step ms");
  }
  if (any_serving) {
    legend(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\" "
                       "stroke-dasharray=\"5 3\"/>\n",
                       px(lx), px(ly), px(lx + 16), px(ly), kServingColor),
           fmt::format("{} request ms at {}/s (hollow: unsettled)", latency_name(serving->latency_percentile),
                       report_format::sig3(serving->request_rate)));
  }
  if (memory_scale > 0) {
    legend(
        fmt::format("<rect x=\"{}\" y=\"{}\" width=\"16.0\" height=\"10.0\" fill=\"{}\" opacity=\"0.35\"/>\n",
                    px(lx), px(ly - 5), kMemoryColor),
        "planned memory (full height " + report_format::human_bytes(memory_scale) + ")");
  }
  for (const NotRun* kind : used_kinds) legend(cross(lx + 8, ly, kind->color, {}), kind->label);
  return out + "</svg>\n";
}

}  // namespace bsw
