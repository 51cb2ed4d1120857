// The console printer: a title, the points table (knee row bold, oom/over_limit rows dimmed when colored),
// the marks legend, the analysis summary and the warnings.
#include <string>
#include <vector>

#include "batchsweep/printers.hpp"
#include "report/view.hpp"

namespace bsw {

namespace {

constexpr const char* kBold = "\x1b[1m";
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kYellow = "\x1b[33m";
constexpr const char* kReset = "\x1b[0m";

std::string styled(const std::string& text, const char* style, bool color) {
  return color ? style + text + kReset : text;
}

std::string title_line(const report_view::Title& t) {
  std::string line;
  const std::string split = t.split();
  const std::string overrides = t.overrides_piece();
  for (const std::string* piece :
       {&t.model, &overrides, &t.device, &t.mode, &t.precision_shown, &split, &t.checkpointing}) {
    if (piece->empty()) continue;
    line += (line.empty() ? "" : " \u00b7 ") + *piece;
  }
  return line;
}

// The legend's "a = b; c = d" entries, wrapped at kLegendWidth columns.
constexpr size_t kLegendWidth = 110;

std::vector<std::string> wrap_legend(const std::string& legend) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start <= legend.size()) {
    size_t end = legend.find("; ", start);
    if (end == std::string::npos) end = legend.size();
    const std::string entry = legend.substr(start, end - start);
    if (!line.empty() &&
        report_format::display_width(line) + 2 + report_format::display_width(entry) > kLegendWidth) {
      lines.push_back(line + ";");
      line.clear();
    }
    if (!line.empty()) line += "; ";
    line += entry;
    start = end + 2;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

std::string format_console(const Report& report, const ConsoleOptions& options) {
  const bool color = options.color;
  std::string out;
  if (std::string title = title_line(report_view::title(report)); !title.empty()) {
    out += styled("batchsweep: " + title, kBold, color) + "\n\n";
  }
  if (const std::string unfinished = report_view::unfinished_line(report); !unfinished.empty())
    out += styled(unfinished, kBold, color) + "\n\n";
  if (report.points.empty()) {
    out += "no points measured\n";
  } else {
    const auto lines = report_format::render_lines(report_view::point_table(report));
    out += styled(lines[0], kBold, color) + "\n";
    for (size_t i = 0; i < report.points.size(); ++i) {
      const Point& p = report.points[i];
      const std::string& line = lines[i + 1];
      if (p.status != PointStatus::ok) {
        out += styled(line, kDim, color);
      } else if (report.analysis.knee.batch && *report.analysis.knee.batch == p.batch) {
        out += styled(line, kBold, color);
      } else {
        out += line;
      }
      out += "\n";
    }
    for (const auto& line : wrap_legend(report_view::marks_legend(report)))
      out += styled(line, kDim, color) + "\n";
  }
  if (const std::string heading = report_view::serving_heading(report); !heading.empty()) {
    out += "\n" + heading + "\n";
    for (const std::string& line : report_format::render_lines(report_view::serving_table(report)))
      out += line + "\n";
  }
  const auto summary = report_view::summary_lines(report);
  if (!summary.empty()) {
    out += "\n";
    for (const auto& line : summary) {
      out += line.rfind("recommended:", 0) == 0 ? styled(line, kBold, color) : line;
      out += "\n";
    }
  }
  if (!report.warnings.empty()) {
    out += "\n";
    for (const auto& w : report.warnings) out += styled("warning: " + w, kYellow, color) + "\n";
  }
  return out;
}

}  // namespace bsw
