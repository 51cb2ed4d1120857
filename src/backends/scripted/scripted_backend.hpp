// The scripted backend (after hyperfine's MockExecutor): step times follow a formula read from a JSON script,
// so the sweep, the analysis and the whole CLI can be tested with deterministic numbers and no device.
//
// Script keys (any other key is a UsageError naming the file):
//   "name"                string, the device name (default "scripted")
//   "memory_total_bytes"  integer > 0, required: device memory; prepare throws OutOfMemory above it
//   "peak_flops"          number > 0, optional: FLOP/s for MFU
//   "t0_ms"               number > 0, required: the fixed cost of one micro-batch
//   "curve"               "roofline" (default) or "saturating"
//   "samples_per_ms"      number > 0, roofline: micro_ms(b) = max(t0_ms, b / samples_per_ms)
//                         (the knee is at t0_ms * samples_per_ms)
//   "b0"                  number > 0, saturating: micro_ms(b) = t0_ms * (1 + b / b0)
//                         (samples/ms tends to b0 / t0_ms)
//   "noise_pct"           number >= 0 (default 0): each sample times (1 + noise_pct / 100 * N(0, 1))
//   "drift_pct"           number >= 0 (default 0): each session runs this many percent of the formula
//                         slower per session the backend prepared before it (the k-th takes 1 +
//                         drift_pct / 100 * (k - 1) times as long): a GPU that heats up over the sweep
//   "seed"                integer (default 1), mixed with the batch, the accumulation and the round
//                         (SessionOptions::round): each point's samples are the same whatever order the
//                         sweep measures it in, and each round of it (run --rounds) draws its own
//   "oom_above_batch"     integer, optional: prepare throws OutOfMemory for micro-batches above it
//   "nan_at_batch"        integer, optional: at this micro-batch every step reports a non-finite loss
//   "skip_every_steps"    integer >= 1, optional: every Nth step reports an fp16 overflow skip
//   "stall_every_steps"   integer >= 1, optional: every Nth step of a session takes stall_factor times as
//                         long (a preemption, a GC pause, a queue): a tail the mean barely shows
//   "stall_factor"        number > 1 (default 2), with stall_every_steps
//   "hang_at_batch"       integer, optional: at this micro-batch each step sleeps 50 ms and reports
//                         25 ms and 75 ms alternately (50% noise), so only the timeout ends the point
//   "step_oom_at_batch"   integer, optional: at this micro-batch the 3rd step of a session throws
//                         OutOfMemory (a library allocating lazily mid-step), after warm-up with --warmup <=
//                         2
//   "step_error_at_batch" integer, optional: the same with a BackendError (a failed kernel launch)
//   "step_fatal_at_batch" integer, optional: the same with an Error that stops the sweep (a CUDA context an
//                         illegal address left unusable)
//   "sleep"               bool (default false): the session really sleeps each step's time
// A step over `accumulation` micro-batches takes accumulation * micro_ms(micro_batch): smaller
// micro-batches pay their fixed cost more often, as on a real device; with accumulation 1 it is the
// formula of the batch. Memory: allocated_bytes = the plan's total; no device-used reading.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "batchsweep/backend.hpp"

namespace bsw {

struct ScriptedConfig {
  std::string name = "scripted";
  uint64_t memory_total_bytes = 0;
  std::optional<double> peak_flops;
  double t0_ms = 1.0;
  enum class Curve { roofline, saturating } curve = Curve::roofline;
  double samples_per_ms = 0;  // roofline
  double b0 = 0;              // saturating
  double noise_pct = 0;
  double drift_pct = 0;
  uint64_t seed = 1;
  std::optional<int64_t> oom_above_batch;
  std::optional<int64_t> nan_at_batch;
  std::optional<int64_t> skip_every_steps;
  std::optional<int64_t> stall_every_steps;
  double stall_factor = 2.0;
  std::optional<int64_t> hang_at_batch;
  std::optional<int64_t> step_oom_at_batch;
  std::optional<int64_t> step_error_at_batch;
  std::optional<int64_t> step_fatal_at_batch;
  bool sleep = false;
  std::string source;  // the script path, or what the caller names it

  // Noise-free time of one step of `accumulation` micro-batches of `micro_batch` samples.
  [[nodiscard]] double step_ms(int64_t micro_batch, int64_t accumulation) const;
};

// Validates a script document. `source` names it in errors. Throws UsageError "<source>: <key>: <problem>".
[[nodiscard]] ScriptedConfig parse_scripted_config(const nlohmann::json& doc, const std::string& source);

[[nodiscard]] std::unique_ptr<Backend> make_scripted_backend(ScriptedConfig config);
// Reads and validates the JSON script at script_path. Throws UsageError naming the file (missing, not JSON,
// unknown key, wrong type or value).
[[nodiscard]] std::unique_ptr<Backend> make_scripted_backend(const std::string& script_path);

}  // namespace bsw
