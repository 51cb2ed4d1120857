// GPU telemetry through NVML (issue 7): power, energy, clocks, utilisation, temperature and clock-event
// ("throttle") reasons sampled on a background thread over a point's timed window, plus the warnings that say
// when a measurement should not be trusted. NVML is loaded at run time, so a build or machine without it
// still works: Telemetry::open() then returns an object that says unavailable and why, and start()/stop()
// give empty windows.
//
// Typical use, once per point:
//   auto telemetry = bsw::Telemetry::open({.device = cuda_pci_bus_id});
//   if (!telemetry.available()) warn(telemetry.unavailable_reason());
//   telemetry.start();  ... timed steps ...;  bsw::TelemetryWindow window = telemetry.stop();
//   point.telemetry = bsw::to_point_telemetry(window, samples_processed);
//   for (auto& w : bsw::trust_warnings(window)) warn("batch " + std::to_string(batch) + ": " + w);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/report.hpp"

namespace bsw {

inline constexpr int kDefaultTelemetryIntervalMs = 25;
inline constexpr const char* kDefaultNvmlLibrary = "libnvidia-ml.so.1";
inline constexpr const char* kNvmlLibraryEnv = "BATCHSWEEP_NVML_LIBRARY";
// A point whose median SM clock is below this fraction of the reference clock gets a warning.
inline constexpr double kLowClockFraction = 0.75;

struct TelemetryOptions {
  // The NVML shared library. Empty: $BATCHSWEEP_NVML_LIBRARY when set, else "libnvidia-ml.so.1".
  std::string library_path;
  // Which GPU: a PCI bus id as cudaDeviceGetPCIBusId gives it ("00000000:1B:00.0", "0000:1b:00.0",
  // "1b:00.0"), or an NVML index ("0"). Prefer the bus id: CUDA and NVML may number devices differently
  // (CUDA_VISIBLE_DEVICES).
  std::string device = "0";
  int sample_interval_ms = kDefaultTelemetryIntervalMs;
  // Processes that count as this run on the GPU; empty means this process. Any other compute process is
  // reported.
  std::vector<uint32_t> own_pids;
};

// The GPU telemetry reads, as NVML names it.
struct TelemetryDevice {
  std::string name;
  std::string pci_bus_id;  // NVML's form, "00000000:1B:00.0"
  // The clock an unthrottled SM should hold: the default applications clock, else the applications clock.
  std::optional<double> reference_sm_clock_mhz;
  std::string reference_sm_clock_source;  // "default applications clock", "applications clock", or empty
};

// One reading of every sampled quantity; a quantity the device or driver does not report is absent.
struct TelemetrySample {
  double t_s = 0;  // seconds since the window started
  std::optional<double> power_w;
  std::optional<double> sm_clock_mhz;
  std::optional<double> mem_clock_mhz;
  std::optional<double> utilization_pct;         // GPU busy, %
  std::optional<double> memory_utilization_pct;  // memory controller busy, %
  std::optional<double> temperature_c;
  std::optional<uint64_t> clock_event_reasons;  // NVML bit mask (nvmlClocksEventReason*)
};

// A compute process on the GPU that is not this run.
struct GpuProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_bytes;  // absent where NVML cannot tell (containers, MIG)
};

// A GPU's memory as NVML reports it, read without creating a CUDA context (for `batchsweep devices`).
struct GpuMemory {
  uint64_t total_bytes = 0, free_bytes = 0, used_bytes = 0;
  std::vector<GpuProcess> other_processes;  // compute processes on the GPU other than this one
};

enum class EnergySource {
  none,              // neither the counter nor power readings were available
  counter,           // difference of nvmlDeviceGetTotalEnergyConsumption over the window (exact)
  integrated_power,  // power samples integrated over time (trapezoid): the counter was unavailable
};
[[nodiscard]] std::string_view to_string(EnergySource v);

// Summary of one timed window. Optional fields are absent when no sample had the reading.
struct TelemetryWindow {
  bool available = false;  // false: telemetry unavailable, everything else empty
  double duration_s = 0;
  std::vector<TelemetrySample> samples;
  std::optional<double> power_w_mean, power_w_max;
  std::optional<double> energy_j;
  EnergySource energy_source = EnergySource::none;
  std::string energy_note;  // why the counter was not used, when it was not
  std::optional<double> sm_clock_mhz_min, sm_clock_mhz_median;
  std::optional<double> mem_clock_mhz_min, mem_clock_mhz_median;
  std::optional<double> reference_sm_clock_mhz;  // TelemetryDevice's, for the low-clock warning
  std::optional<double> utilization_pct_mean, memory_utilization_pct_mean;
  std::optional<double> temperature_c_max;
  uint64_t clock_event_reasons = 0;                   // union of every mask seen
  std::vector<std::string> clock_event_reason_names;  // clock_event_reason_names(clock_event_reasons)
  std::vector<GpuProcess> other_processes;            // seen before, during or after the window
};

// Names of the set bits, lowest first: gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown,
// sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, display_clock_setting; any
// other bit as "unknown_0x<hex>".
[[nodiscard]] std::vector<std::string> clock_event_reason_names(uint64_t mask);

// Why the window's numbers may not be trusted, one sentence each with what to do: SM clock median below
// kLowClockFraction of the reference clock, thermal or power throttling, another process on the GPU. The
// caller prefixes the point ("batch 64: ") and prints them on stderr. Empty for an unavailable window.
[[nodiscard]] std::vector<std::string> trust_warnings(const TelemetryWindow& window);

// The report's view of a window. joules_per_sample = energy_j / samples_processed (samples, not telemetry
// readings). std::nullopt when the window is unavailable. cost_per_million_samples is left to the analysis.
[[nodiscard]] std::optional<PointTelemetry> to_point_telemetry(const TelemetryWindow& window,
                                                               int64_t samples_processed);

// A handle on one GPU through NVML and a sampler for timed windows. Movable, not copyable (a moved-from
// Telemetry may only be assigned to or destroyed). Not thread-safe: one thread calls start()/stop(); the
// sampling thread is internal.
class Telemetry {
 public:
  // Loads NVML and finds the device. Never throws for a missing library, driver or device: the result is then
  // unavailable with a reason such as "NVML not found (libnvidia-ml.so.1): telemetry unavailable". Throws
  // UsageError when sample_interval_ms < 1.
  [[nodiscard]] static Telemetry open(const TelemetryOptions& options = {});

  Telemetry(Telemetry&& other) noexcept;
  Telemetry& operator=(Telemetry&& other) noexcept;
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;
  ~Telemetry();  // stops a running window, shuts NVML down

  [[nodiscard]] bool available() const;
  [[nodiscard]] const std::string& unavailable_reason() const;  // empty when available
  [[nodiscard]] const std::string& library_path() const;        // the path dlopen was given
  [[nodiscard]] const TelemetryDevice& device() const;
  // Readings this device or driver cannot give, found when opening: "total energy counter: Not Supported
  // (nvmlDeviceGetTotalEnergyConsumption)". For the report's device details.
  [[nodiscard]] const std::vector<std::string>& unsupported_readings() const;
  // The device's memory now and the other compute processes on it. std::nullopt, with `why` set to a
  // sentence, when telemetry is unavailable or NVML cannot read the memory (unified-memory devices say Not
  // Supported). The process list is empty where NVML cannot list processes.
  [[nodiscard]] std::optional<GpuMemory> memory(std::string& why) const;

  // Begins a window: reads the energy counter and the process list, then samples every sample_interval_ms on
  // a background thread. No-op when unavailable. Throws std::logic_error when a window is already running.
  void start();
  // Ends the window promptly (the thread wakes at once), takes a last reading and summarises. Returns an
  // unavailable window when telemetry is unavailable. Throws std::logic_error when no window is running.
  [[nodiscard]] TelemetryWindow stop();
  [[nodiscard]] bool running() const;

 private:
  struct Impl;
  explicit Telemetry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bsw
