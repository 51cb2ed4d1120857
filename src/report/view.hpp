// What the human-facing printers (console, markdown) show of a report: which columns carry information, the
// cells of each point, the marks (knee, saturation, ...), the title line and the analysis summary. One place,
// so the console and the markdown tables never disagree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "batchsweep/report.hpp"
#include "report/format.hpp"

namespace bsw::report_view {

// The step-time percentile the report's latency budget holds (settings.latency_percentile: 50, 90, 95 or
// 99), where it has a budget; 99 otherwise.
[[nodiscard]] double budget_percentile(const Report& report);
// settings.latency_slo_ms, the latency budget the report was run or analyzed with, where it holds a positive
// number of ms.
[[nodiscard]] std::optional<double> latency_budget_ms(const Report& report);
// run --rounds: whether a later round had begun (settings.rounds_begun; in a report from before it, a point
// this run measured holding a second round),
// so round 1, the whole sweep, had finished and every batch it asked for (or its search chose) is in the
// points, whatever stopped the sweep after.
[[nodiscard]] bool later_round_begun(const Report& report);
// Whether the sweep stopped short of some of its batches (AnalysisOptions::unfinished): state interrupted or
// in_progress, unless a later --rounds round had begun (it then lacks rounds, not batches).
[[nodiscard]] bool lacks_batches(const Report& report);
// settings.price_per_hour (USD per device-hour), where it holds a price above zero.
[[nodiscard]] std::optional<double> price_per_hour(const Report& report);
// The table of a report's points: only the columns that vary or are known for some point.
[[nodiscard]] report_format::TextTable point_table(const Report& report);

// Index of the "marks" column in point_table's headers, or -1 when no point carries a mark.
[[nodiscard]] int marks_column(const report_format::TextTable& table);

// The marks of one point, e.g. "◀ knee sat rec", or empty.
[[nodiscard]] std::string point_marks(const Report& report, const Point& point);

// One line explaining the marks used in this report (empty when none is used).
[[nodiscard]] std::string marks_legend(const Report& report);

// Title pieces from settings and device: model, device (backend), mode, precision; empty when unknown.
// precision_shown is the precision with the device's note on how it ran, where it has one ("bf16 (16-bit
// storage, fp32 math on the CPU)"): what the console, markdown and SVG titles print.
// split_label and split_value say how the samples of a step were split, where not one micro-batch:
// "Accumulation" and "4" (--accumulation 4), or "Effective batch" and "256" (--effective-batch 256).
struct Title {
  std::string model, device, mode, precision, precision_shown;
  std::string split_label, split_value;
  // "activation checkpointing" where settings.checkpointing is true (run --checkpointing), "activation
  // checkpointing, first 5 blocks" with settings.checkpoint_blocks (run --checkpoint-blocks 5); else empty.
  std::string checkpointing;
  int64_t checkpoint_blocks = 0;  // settings.checkpoint_blocks; 0: every block (or no checkpointing)
  // "input.sequence_length=1024, layers[1].repeat=24": settings.model_overrides (run --set); else empty.
  std::string overrides;
  // "set input.sequence_length=1024, ...": the overrides as a title piece; empty without them.
  [[nodiscard]] std::string overrides_piece() const {
    return overrides.empty() ? overrides : "set " + overrides;
  }
  // "accumulation 4", "effective batch 256": the split as a title piece; empty for one micro-batch a step.
  [[nodiscard]] std::string split() const;
};
[[nodiscard]] Title title(const Report& report);

// settings.model_overrides (run --set), as given, in order; the strings of it where a report read back holds
// other values there too; empty without it.
[[nodiscard]] std::vector<std::string> model_overrides(const Report& report);
// The --effective-batch N a report was swept with (settings.effective_batch), where it says a valid one.
[[nodiscard]] std::optional<int64_t> effective_batch_setting(const Report& report);
// settings.world_size (run --world-size N, 1..2^20), or nullopt.
[[nodiscard]] std::optional<int64_t> world_size_setting(const Report& report);
// The global batch of an --effective-batch run: settings.effective_batch (one device's share, as timed)
// times settings.world_size (1 where absent); nullopt without an effective batch.
[[nodiscard]] std::optional<int64_t> global_effective_batch(const Report& report);

// For a sweep that did not finish (state interrupted or in_progress), one line saying the table is partial;
// empty otherwise.
[[nodiscard]] std::string unfinished_line(const Report& report);

// "knee: batch 64 (stable) — reason", one line per analysis result that is set.
// run --rounds N (settings.rounds > 1): "rounds: N per batch, ...", whether each batch's rounds agree
// (rounds_agreement) and which batches ran fewer; empty without rounds.
[[nodiscard]] std::string rounds_line(const Report& report);
[[nodiscard]] std::vector<std::string> summary_lines(const Report& report);

// run/analyze --request-rate: the line above the serving table (what was simulated), and the table, one row
// per max batch (capacity, busy share, requests per step, request latency); empty without analysis.serving.
[[nodiscard]] std::string serving_heading(const Report& report);
[[nodiscard]] report_format::TextTable serving_table(const Report& report);

}  // namespace bsw::report_view
