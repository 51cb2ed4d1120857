// NVML opened with dlopen and initialised: the resolved entry points, nvmlShutdown and dlclose on
// destruction. A symbol the library does not export is a null pointer, and the reading it serves is
// unavailable.
#pragma once

#include <memory>
#include <string>

#include "telemetry/nvml_api.hpp"

namespace bsw::telemetry {

// One optional entry point and the name it was found under (for messages).
template <typename Fn>
struct Entry {
  Fn fn = nullptr;
  const char* name = "";
  explicit operator bool() const { return fn != nullptr; }
};

class NvmlLibrary {
 public:
  // dlopen(path), resolve the entry points, nvmlInit_v2. On failure returns null and sets `why` to a sentence
  // ending in ": telemetry unavailable".
  [[nodiscard]] static std::unique_ptr<NvmlLibrary> load(const std::string& path, std::string& why);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // nvmlErrorString, or "NVML error <code>" when it is missing.
  [[nodiscard]] std::string error_string(nvml::nvmlReturn_t code) const;
  [[nodiscard]] const std::string& path() const { return path_; }

  Entry<nvml::DeviceGetCountFn> get_count;
  Entry<nvml::DeviceGetHandleByIndexFn> handle_by_index;
  Entry<nvml::DeviceGetHandleByPciBusIdFn> handle_by_pci_bus_id;
  Entry<nvml::DeviceGetNameFn> get_name;
  Entry<nvml::DeviceGetPciInfoFn> get_pci_info;
  Entry<nvml::DeviceGetUtilizationRatesFn> get_utilization;
  Entry<nvml::DeviceGetPowerUsageFn> get_power;
  Entry<nvml::DeviceGetTotalEnergyConsumptionFn> get_total_energy;
  Entry<nvml::DeviceGetClockFn> get_clock;
  Entry<nvml::DeviceGetClockFn> get_applications_clock;
  Entry<nvml::DeviceGetClockFn> get_default_applications_clock;
  Entry<nvml::DeviceGetTemperatureFn> get_temperature;
  Entry<nvml::DeviceGetClocksEventReasonsFn> get_clock_event_reasons;
  Entry<nvml::DeviceGetComputeRunningProcessesFn> get_compute_processes;
  Entry<nvml::DeviceGetMemoryInfoFn> get_memory_info;

 private:
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  // The first of `names` the library exports, or an empty entry.
  template <typename Fn, size_t N>
  [[nodiscard]] Entry<Fn> resolve(const char* const (&names)[N]) const;

  void* handle_;
  std::string path_;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::ErrorStringFn error_string_ = nullptr;
};

}  // namespace bsw::telemetry
