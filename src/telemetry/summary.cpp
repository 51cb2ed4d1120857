// Window summaries, clock-event reason names, trust warnings and the report's PointTelemetry: the arithmetic
// of telemetry, kept apart from NVML and threads.
#include "telemetry/summary.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bsw {
namespace {

struct ReasonName {
  uint64_t bit;
  std::string_view name;
};

constexpr std::array<ReasonName, 9> kReasonNames{{
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
}};

// Clock-event reasons that mean the chip slowed itself for heat or power. gpu_idle,
// applications_clocks_setting, sync_boost and display_clock_setting are requested or benign and do not warn.
constexpr uint64_t kThermalReasons = 0x20 | 0x40;
constexpr uint64_t kPowerReasons = 0x4 | 0x80;
constexpr uint64_t kHardwareSlowdown = 0x8;  // thermal or power brake, NVML does not say which
constexpr uint64_t kGpuIdle = 0x1;

// The names of the bits of `mask` that are also in `filter`, joined with ", ".
std::string joined_names(uint64_t mask, uint64_t filter) {
  std::string out;
  for (const auto& name : clock_event_reason_names(mask & filter)) {
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

// Mean of the present values of one reading; std::nullopt when none is present.
template <typename Field>
std::optional<double> mean_of(const std::vector<TelemetrySample>& samples, Field field) {
  double sum = 0;
  int64_t count = 0;
  for (const auto& s : samples) {
    if (const auto& v = s.*field) {
      sum += *v;
      ++count;
    }
  }
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

template <typename Field>
std::vector<double> values_of(const std::vector<TelemetrySample>& samples, Field field) {
  std::vector<double> out;
  for (const auto& s : samples) {
    if (const auto& v = s.*field) out.push_back(*v);
  }
  return out;
}

std::optional<double> max_of(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  return *std::max_element(values.begin(), values.end());
}

std::optional<double> min_of(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  return *std::min_element(values.begin(), values.end());
}

std::string describe_process(const GpuProcess& p) {
  if (!p.used_bytes) return fmt::format("pid {}", p.pid);
  return fmt::format("pid {} using {:.0f} MiB", p.pid,
                     static_cast<double>(*p.used_bytes) / (1024.0 * 1024.0));
}

}  // namespace

std::string_view to_string(EnergySource v) {
  switch (v) {
    case EnergySource::none:
      return "none";
    case EnergySource::counter:
      return "energy counter";
    case EnergySource::integrated_power:
      return "integrated power";
  }
  return "none";
}

std::vector<std::string> clock_event_reason_names(uint64_t mask) {
  std::vector<std::string> names;
  for (int bit = 0; bit < 64; ++bit) {
    const uint64_t value = uint64_t{1} << bit;
    if ((mask & value) == 0) continue;
    const auto known = std::find_if(kReasonNames.begin(), kReasonNames.end(),
                                    [&](const ReasonName& r) { return r.bit == value; });
    names.push_back(known != kReasonNames.end() ? std::string(known->name)
                                                : fmt::format("unknown_{:#x}", value));
  }
  return names;
}

std::vector<std::string> trust_warnings(const TelemetryWindow& window) {
  std::vector<std::string> warnings;
  if (!window.available) return warnings;
  if (window.sm_clock_mhz_median && window.reference_sm_clock_mhz && *window.reference_sm_clock_mhz > 0 &&
      *window.sm_clock_mhz_median < kLowClockFraction * *window.reference_sm_clock_mhz) {
    const bool idle = (window.clock_event_reasons & kGpuIdle) != 0;
    const char* why = idle ? "the GPU was idle part of the window (gpu_idle), so the point is likely "
                             "launch- or CPU-bound; a larger batch or `--graphs on` keeps it busy"
                           : "the GPU ran slowed, so throughput is understated; check `nvidia-smi -q -d "
                             "PERFORMANCE,CLOCK` for the cause, or lock clocks with `nvidia-smi -lgc`";
    warnings.push_back(fmt::format(
        "SM clock median {:.0f} MHz is {:.0f}% of the reference {:.0f} MHz (below {:.0f}%): {}",
        *window.sm_clock_mhz_median, 100.0 * *window.sm_clock_mhz_median / *window.reference_sm_clock_mhz,
        *window.reference_sm_clock_mhz, 100.0 * kLowClockFraction, why));
  }
  if (const auto thermal = joined_names(window.clock_event_reasons, kThermalReasons); !thermal.empty()) {
    warnings.push_back(fmt::format(
        "thermal throttling during the point ({}{}): later points run on a hotter, slower GPU; improve "
        "cooling or add warmup so every point sees the same temperature",
        thermal, window.temperature_c_max ? fmt::format(", max {:.0f} C", *window.temperature_c_max) : ""));
  }
  if (const auto power = joined_names(window.clock_event_reasons, kPowerReasons | kHardwareSlowdown);
      !power.empty()) {
    warnings.push_back(
        fmt::format("power throttling during the point ({}{}): the GPU hit its power limit, so results "
                    "depend on the limit set (`nvidia-smi -q -d POWER`)",
                    power, window.power_w_max ? fmt::format(", max {:.0f} W", *window.power_w_max) : ""));
  }
  if (!window.other_processes.empty()) {
    std::string list;
    for (const auto& p : window.other_processes) list += (list.empty() ? "" : ", ") + describe_process(p);
    warnings.push_back(fmt::format(
        "another process used the GPU during the point ({}): it shares compute and memory, so timings are "
        "disturbed; stop it or run on an idle GPU",
        list));
  }
  return warnings;
}

std::optional<PointTelemetry> to_point_telemetry(const TelemetryWindow& window, int64_t samples_processed) {
  if (!window.available) return std::nullopt;
  PointTelemetry t;
  t.power_w_mean = window.power_w_mean;
  t.power_w_max = window.power_w_max;
  t.energy_j = window.energy_j;
  if (window.energy_j && samples_processed > 0) {
    t.joules_per_sample = *window.energy_j / static_cast<double>(samples_processed);
  }
  t.sm_clock_mhz_min = window.sm_clock_mhz_min;
  t.sm_clock_mhz_median = window.sm_clock_mhz_median;
  t.mem_clock_mhz_min = window.mem_clock_mhz_min;
  t.mem_clock_mhz_median = window.mem_clock_mhz_median;
  t.utilization_pct = window.utilization_pct_mean;
  t.memory_utilization_pct = window.memory_utilization_pct_mean;
  t.temperature_c = window.temperature_c_max;
  t.throttle_reasons = window.clock_event_reason_names;
  return t;
}

namespace telemetry {

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2.0;
}

std::optional<double> integrate_power_j(const std::vector<TelemetrySample>& samples, double duration_s) {
  std::vector<std::pair<double, double>> points;  // (t_s clamped to the window, power_w)
  for (const auto& s : samples) {
    if (s.power_w) points.emplace_back(std::clamp(s.t_s, 0.0, std::max(duration_s, 0.0)), *s.power_w);
  }
  if (points.empty()) return std::nullopt;
  std::stable_sort(points.begin(), points.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  double joules = points.front().second * points.front().first;  // held back to t = 0
  for (size_t i = 1; i < points.size(); ++i) {
    joules += 0.5 * (points[i - 1].second + points[i].second) * (points[i].first - points[i - 1].first);
  }
  joules += points.back().second * std::max(0.0, duration_s - points.back().first);  // held to the end
  return joules;
}

TelemetryWindow summarize_window(WindowInputs inputs) {
  TelemetryWindow w;
  w.available = true;
  w.duration_s = inputs.duration_s;
  w.reference_sm_clock_mhz = inputs.reference_sm_clock_mhz;
  w.other_processes = std::move(inputs.other_processes);

  const auto power = values_of(inputs.samples, &TelemetrySample::power_w);
  w.power_w_mean = mean_of(inputs.samples, &TelemetrySample::power_w);
  w.power_w_max = max_of(power);
  const auto sm_clock = values_of(inputs.samples, &TelemetrySample::sm_clock_mhz);
  w.sm_clock_mhz_min = min_of(sm_clock);
  w.sm_clock_mhz_median = median(sm_clock);
  const auto mem_clock = values_of(inputs.samples, &TelemetrySample::mem_clock_mhz);
  w.mem_clock_mhz_min = min_of(mem_clock);
  w.mem_clock_mhz_median = median(mem_clock);
  w.utilization_pct_mean = mean_of(inputs.samples, &TelemetrySample::utilization_pct);
  w.memory_utilization_pct_mean = mean_of(inputs.samples, &TelemetrySample::memory_utilization_pct);
  w.temperature_c_max = max_of(values_of(inputs.samples, &TelemetrySample::temperature_c));
  for (const auto& s : inputs.samples) w.clock_event_reasons |= s.clock_event_reasons.value_or(0);
  w.clock_event_reason_names = clock_event_reason_names(w.clock_event_reasons);

  const bool counter_ok =
      inputs.energy_start_mj && inputs.energy_end_mj && *inputs.energy_end_mj >= *inputs.energy_start_mj;
  if (counter_ok) {
    w.energy_j = static_cast<double>(*inputs.energy_end_mj - *inputs.energy_start_mj) / 1000.0;
    w.energy_source = EnergySource::counter;
    // The window's mean power, exactly: on Ampere and newer nvmlDeviceGetPowerUsage is an average over the
    // last second, so the readings of a point shorter than that mix in the one before it.
    if (inputs.duration_s > 0) {
      w.power_w_mean = *w.energy_j / inputs.duration_s;
      // The readings lag (each the last second's average), so the window's mean can pass all of them: the
      // max is at least the mean.
      if (w.power_w_max) w.power_w_max = std::max(*w.power_w_max, *w.power_w_mean);
    }
  } else {
    std::string why = inputs.energy_counter_problem;
    if (why.empty() && inputs.energy_start_mj && inputs.energy_end_mj) {
      why = "total energy counter went backwards (driver reset?)";
    } else if (why.empty()) {
      why = "total energy counter unavailable";
    }
    w.energy_j = integrate_power_j(inputs.samples, inputs.duration_s);
    if (w.energy_j) {
      w.energy_source = EnergySource::integrated_power;
      w.energy_note = fmt::format("energy integrated from {} power readings: {}", power.size(), why);
    } else {
      w.energy_note = fmt::format("no energy: {}, and no power readings", why);
    }
  }
  w.samples = std::move(inputs.samples);
  return w;
}

}  // namespace telemetry
}  // namespace bsw
