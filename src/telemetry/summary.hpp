// Turning a window's raw readings into a TelemetryWindow: pure functions, no NVML, so they are tested with
// exact numbers. The sampler (telemetry.cpp) gathers the inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/telemetry.hpp"

namespace bsw::telemetry {

struct WindowInputs {
  double duration_s = 0;  // from the first energy-counter read to the last
  std::vector<TelemetrySample> samples;
  std::optional<uint64_t> energy_start_mj, energy_end_mj;  // total energy counter at the window's edges
  std::string energy_counter_problem;  // why a counter read is missing ("...: Not Supported"), when one is
  std::optional<double> reference_sm_clock_mhz;
  std::vector<GpuProcess> other_processes;
};

[[nodiscard]] TelemetryWindow summarize_window(WindowInputs inputs);

// Energy in joules from the power samples over [0, duration_s]: trapezoids between samples, the first and
// last readings held to the window's edges. std::nullopt when no sample has power.
[[nodiscard]] std::optional<double> integrate_power_j(const std::vector<TelemetrySample>& samples,
                                                      double duration_s);

// Median of the values (mean of the two middle ones for an even count); std::nullopt when empty.
[[nodiscard]] std::optional<double> median(std::vector<double> values);

}  // namespace bsw::telemetry
