// The validated settings of each subcommand, filled by the CLI11 definitions in app.cpp. Defaults live here,
// once;
// `--help` prints them from the same values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/plan.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw::cli {

// Where a report goes besides the console table. "-" for --json means stdout (the table then goes to stderr).
struct ExportSettings {
  std::string json_path, csv_path, markdown_path, svg_path;
  std::string config_for;  // --config-for: deepspeed, lightning, accelerate, transformers; empty for none
  int64_t world_size = 1;  // --world-size: GPUs that each run the recommended micro-batch
  bool world_size_given = false;  // analyze: without it, the run's settings.world_size holds
  [[nodiscard]] bool any() const {
    return !json_path.empty() || !csv_path.empty() || !markdown_path.empty() || !svg_path.empty();
  }
};

struct AnalysisFlags {
  std::optional<double> latency_slo_ms;
  double latency_percentile = 99;  // --latency-percentile: the step-time percentile the budget holds
  double saturation_pct = 95.0;
  double knee_sensitivity = 1.0;
  std::optional<double> price_per_hour;
  std::optional<double> request_rate;        // --request-rate: serving at this many requests/s
  std::optional<double> max_queue_delay_ms;  // --max-queue-delay: the batcher's hold (needs --request-rate)
};

struct PlanSettings {
  std::string model = "mlp";
  std::vector<std::string> model_sets;  // --set PATH=VALUE, in order (parsed by parse_model_override)
  std::string backend = "auto";
  std::string batch = "1,8,64,512";
  Precision precision = Precision::fp32;
  Mode mode = Mode::train;
  int64_t accumulation = 1;
  bool checkpointing = false;              // --checkpointing (training)
  int64_t checkpoint_blocks = 0;           // --checkpoint-blocks N (sets checkpointing); 0: all blocks
  std::optional<int64_t> effective_batch;  // --effective-batch: plan its splits instead of --batch
  std::optional<uint64_t> memory_bytes;
  std::string memory_card;  // --memory NAME: the card(s) of configs/gpus.json named
  bool memory_all = false;  // --memory all: every card of configs/gpus.json
  std::string json_path;
  bool buffers = false;
  PathChoice paths;  // --attention, --conv
};

struct RunSettings {
  std::string model = "mlp";
  std::vector<std::string> model_sets;  // --set PATH=VALUE, in order
  std::string backend = "auto";
  std::string script;              // --script, for --backend scripted
  std::string telemetry = "auto";  // --telemetry auto|on|off: NVML sampling per point (auto: on for cuda)
  std::string resume_path;         // --resume: an earlier report whose ok points are taken, not re-measured
  std::optional<int> device;       // --device: the CUDA device (none: device 0)
  SweepSettings sweep;
  AnalysisFlags analysis;
  ExportSettings exports;
  bool quiet = false;
  bool mode_given = false;    // --mode on the command line (a latency budget in training by default is noted)
  bool graphs_given = false;  // --graphs on the command line (said to change nothing off cuda)
};

struct AnalyzeSettings {
  std::string report_path;
  AnalysisFlags analysis;
  ExportSettings exports;
  // Which analysis flags were given: the others take the run's values (its settings).
  bool saturation_given = false, knee_sensitivity_given = false, latency_percentile_given = false;
  bool no_latency_slo = false;     // --no-latency-slo: drop the run's budget
  bool no_request_rate = false;    // --no-request-rate: drop the run's serving rate
  bool no_price_per_hour = false;  // --no-price-per-hour: drop the run's price (and every cost)
};

struct CompareSettings {
  std::vector<std::string> report_paths;
  std::optional<double> fail_on_regression_pct;
  // --fail-on-latency-regression: the latency findings' own PCT, or "off"; empty where not given (PCT holds).
  std::string fail_on_latency_regression;
  bool allow_model_mismatch = false;
  bool allow_incomplete = false;  // gate runs that did not finish on the batches they hold
  // --request-rate, --max-queue-delay: every run served at this rate (each report's own rate otherwise).
  std::optional<double> request_rate, max_queue_delay_ms;
  std::string json_path, markdown_path;
};

struct DevicesSettings {
  bool calibrate = false;
  int device = 0;  // --device: the CUDA device --calibrate measures
  bool json = false;
};

}  // namespace bsw::cli
