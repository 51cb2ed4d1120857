// The markdown printer: a header line (model, device, mode, precision), the points table with only the
// columns that carry information, the analysis summary as a list, and the warnings.
#include <string>

#include "batchsweep/printers.hpp"
#include "report/view.hpp"

namespace bsw {

namespace {

using report_format::markdown_cell;

// "label: rest" → "**label**: rest"
std::string bold_label(const std::string& line) {
  const auto colon = line.find(": ");
  if (colon == std::string::npos) return markdown_cell(line);
  return "**" + markdown_cell(line.substr(0, colon)) + "**: " + markdown_cell(line.substr(colon + 2));
}

}  // namespace

std::string format_markdown(const Report& report) {
  const report_view::Title t = report_view::title(report);
  std::string header;
  const std::pair<const char*, const std::string*> pieces[] = {{"Model", &t.model},
                                                               {"Set", &t.overrides},
                                                               {"Device", &t.device},
                                                               {"Mode", &t.mode},
                                                               {"Precision", &t.precision_shown},
                                                               {t.split_label.c_str(), &t.split_value},
                                                               {"Memory", &t.checkpointing}};
  for (const auto& [label, value] : pieces) {
    if (value->empty()) continue;
    header += (header.empty() ? "" : " \u00b7 ") + std::string("**") + label + "** " + markdown_cell(*value);
  }
  std::string out = "## batchsweep report\n\n";
  if (!header.empty()) out += header + "\n\n";
  if (const std::string unfinished = report_view::unfinished_line(report); !unfinished.empty())
    out += "**" + markdown_cell(unfinished) + "**\n\n";
  if (report.points.empty()) {
    out += "No points measured.\n";
  } else {
    out += report_format::render_markdown(report_view::point_table(report));
    if (std::string legend = report_view::marks_legend(report); !legend.empty()) {
      out += "\n_" + markdown_cell(legend) + "_\n";
    }
  }
  if (const std::string heading = report_view::serving_heading(report); !heading.empty())
    out += "\n" + markdown_cell(heading) + "\n\n" +
           report_format::render_markdown(report_view::serving_table(report));
  const auto summary = report_view::summary_lines(report);
  if (!summary.empty()) {
    out += "\n";
    for (const auto& line : summary) out += "- " + bold_label(line) + "\n";
  }
  if (!report.warnings.empty()) {
    out += "\n**Warnings**\n\n";
    for (const auto& w : report.warnings) out += "- " + markdown_cell(w) + "\n";
  }
  return out;
}

}  // namespace bsw
