// The printers: one Report, many views (console table, markdown, CSV, SVG, JSON). Each is a pure function of
// the report, so the same data prints the same text every time (tests/golden pins each one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "batchsweep/report.hpp"

namespace bsw {

struct ConsoleOptions {
  bool color = false;  // ANSI styles: bold header and knee row, dimmed oom/over_limit rows, yellow warnings
};

// The console table (only the columns that carry information for this report: accumulation when it varies,
// tokens/s for token models, MFU when the peak is known, ...), the knee and other choices marked in the last
// column, then a summary of the analysis and the warnings.
[[nodiscard]] std::string format_console(const Report& report, const ConsoleOptions& options);

// A header line (model, device, mode, precision), the same table as GitHub markdown, and the summary as a
// list.
[[nodiscard]] std::string format_markdown(const Report& report);

// One row per point; the header holds the JSON field names, dotted for nested fields (`step_ms.p99`,
// `memory.planned_bytes`); raw samples are left out. RFC 4180 quoting, "\n" line ends, empty cells for null.
[[nodiscard]] std::string format_csv(const Report& report);

// A self-contained SVG plot: throughput and p99 step latency (the budget's percentile where a budget holds
// another) against batch (log2 axis), planned memory as
// bars, knee / saturation / max-fit lines, oom points on the axis. Deterministic.
[[nodiscard]] std::string format_svg(const Report& report);

// --config-for: the frameworks whose setup the recommended batch is written for.
enum class ConfigTarget { deepspeed, lightning, accelerate, transformers, triton };
[[nodiscard]] std::string_view to_string(ConfigTarget target);
[[nodiscard]] std::optional<ConfigTarget> parse_config_target(std::string_view name);
// Triton serves inference: throws UsageError naming --config-for triton for a training sweep (`infer`
// false), worded for run's flags or (`of_report`) a report's settings. Run calls it before measuring,
// analyze before writing anything.
void check_config_target_mode(std::string_view config_for, bool infer, bool of_report);

// The recommended batch (analysis.recommended, with its accumulation) as the lines to paste into `target`'s
// setup, in the precision the sweep ran (settings.precision; tf32 as PyTorch's matmul switch), for training
// or inference (settings.mode), over `world_size` GPUs each running that micro-batch: DeepSpeed's config JSON
// (train_batch_size = micro-batch x accumulation x world size, which DeepSpeed checks), Lightning's
// DataLoader and Trainer, accelerate's Accelerator, transformers' TrainingArguments, Triton's model config
// (max_batch_size, dynamic_batching with the simulated --max-queue-delay, instance_group). A one-line "none"
// without a recommendation. Throws UsageError naming --world-size below 1, and as
// check_effective_batch_world_size for a training --effective-batch report (settings.effective_batch).
[[nodiscard]] std::string format_config_snippet(const Report& report, ConfigTarget target,
                                                int64_t world_size);
// --effective-batch E is kept as the global batch across `world_size` devices: throws UsageError naming
// --world-size where it does not divide E. Run and analyze call it before measuring or writing anything.
void check_effective_batch_world_size(int64_t effective_batch, int64_t world_size);

// to_json(report) indented by 2 as dump(2) would, but each array of numbers on one line (a point's
// samples_ms), with invalid UTF-8 in strings replaced rather than thrown on; ends with a newline.
[[nodiscard]] std::string format_json(const Report& report);
// The largest report analyze, compare and --resume read (run warns where it writes a larger one).
inline constexpr uint64_t kMaxReportBytes = uint64_t{1} << 30;

}  // namespace bsw
