// Loading NVML at run time. Versioned names are tried newest first (nvmlDeviceGetCurrentClocksEventReasons,
// then the pre-R535 ...ThrottleReasons; nvmlDeviceGetComputeRunningProcesses_v3, then _v2 with the same
// struct).
#include "telemetry/nvml_library.hpp"

#include <dlfcn.h>

#include <fmt/format.h>
#include <filesystem>
#include <system_error>
#include <utility>

namespace bsw::telemetry {
namespace {

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// Why dlopen failed, in the words the issue asks for when the library is simply not there.
std::string load_failure(const std::string& path) {
  const char* detail = dlerror();
  std::error_code ec;
  const bool names_a_file = path.find('/') != std::string::npos;
  if (names_a_file && std::filesystem::exists(path, ec)) {
    return fmt::format("NVML could not be loaded ({}: {}): telemetry unavailable", path,
                       detail ? detail : "unknown dlopen error");
  }
  return fmt::format("NVML not found ({}): telemetry unavailable", path);
}

}  // namespace

template <typename Fn, size_t N>
Entry<Fn> NvmlLibrary::resolve(const char* const (&names)[N]) const {
  for (const char* name : names) {
    if (auto fn = symbol<Fn>(handle_, name)) return Entry<Fn>{fn, name};
  }
  return Entry<Fn>{nullptr, names[0]};
}

std::unique_ptr<NvmlLibrary> NvmlLibrary::load(const std::string& path, std::string& why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = load_failure(path);
    return nullptr;
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(handle, path));
  const auto init = symbol<nvml::InitFn>(handle, "nvmlInit_v2");
  lib->shutdown_ = symbol<nvml::ShutdownFn>(handle, "nvmlShutdown");
  lib->error_string_ = symbol<nvml::ErrorStringFn>(handle, "nvmlErrorString");
  if (init == nullptr || lib->shutdown_ == nullptr) {
    why = fmt::format(
        "{} does not export nvmlInit_v2 and nvmlShutdown (not NVML, or too old): telemetry unavailable",
        path);
    lib->shutdown_ = nullptr;  // never initialised, so never shut down
    return nullptr;
  }
  if (const nvml::nvmlReturn_t rc = init(); rc != nvml::NVML_SUCCESS) {
    why = fmt::format("nvmlInit_v2 failed ({}: {}): telemetry unavailable", path, lib->error_string(rc));
    lib->shutdown_ = nullptr;
    return nullptr;
  }

  static constexpr const char* kCount[] = {"nvmlDeviceGetCount_v2"};
  static constexpr const char* kByIndex[] = {"nvmlDeviceGetHandleByIndex_v2"};
  static constexpr const char* kByBusId[] = {"nvmlDeviceGetHandleByPciBusId_v2"};
  static constexpr const char* kName[] = {"nvmlDeviceGetName"};
  static constexpr const char* kPciInfo[] = {"nvmlDeviceGetPciInfo_v3"};
  static constexpr const char* kUtilization[] = {"nvmlDeviceGetUtilizationRates"};
  static constexpr const char* kPower[] = {"nvmlDeviceGetPowerUsage"};
  static constexpr const char* kEnergy[] = {"nvmlDeviceGetTotalEnergyConsumption"};
  static constexpr const char* kClock[] = {"nvmlDeviceGetClockInfo"};
  static constexpr const char* kAppClock[] = {"nvmlDeviceGetApplicationsClock"};
  static constexpr const char* kDefaultAppClock[] = {"nvmlDeviceGetDefaultApplicationsClock"};
  static constexpr const char* kTemperature[] = {"nvmlDeviceGetTemperature"};
  static constexpr const char* kReasons[] = {"nvmlDeviceGetCurrentClocksEventReasons",
                                             "nvmlDeviceGetCurrentClocksThrottleReasons"};
  static constexpr const char* kProcesses[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                               "nvmlDeviceGetComputeRunningProcesses_v2"};
  static constexpr const char* kMemory[] = {"nvmlDeviceGetMemoryInfo"};
  lib->get_count = lib->resolve<nvml::DeviceGetCountFn>(kCount);
  lib->handle_by_index = lib->resolve<nvml::DeviceGetHandleByIndexFn>(kByIndex);
  lib->handle_by_pci_bus_id = lib->resolve<nvml::DeviceGetHandleByPciBusIdFn>(kByBusId);
  lib->get_name = lib->resolve<nvml::DeviceGetNameFn>(kName);
  lib->get_pci_info = lib->resolve<nvml::DeviceGetPciInfoFn>(kPciInfo);
  lib->get_utilization = lib->resolve<nvml::DeviceGetUtilizationRatesFn>(kUtilization);
  lib->get_power = lib->resolve<nvml::DeviceGetPowerUsageFn>(kPower);
  lib->get_total_energy = lib->resolve<nvml::DeviceGetTotalEnergyConsumptionFn>(kEnergy);
  lib->get_clock = lib->resolve<nvml::DeviceGetClockFn>(kClock);
  lib->get_applications_clock = lib->resolve<nvml::DeviceGetClockFn>(kAppClock);
  lib->get_default_applications_clock = lib->resolve<nvml::DeviceGetClockFn>(kDefaultAppClock);
  lib->get_temperature = lib->resolve<nvml::DeviceGetTemperatureFn>(kTemperature);
  lib->get_clock_event_reasons = lib->resolve<nvml::DeviceGetClocksEventReasonsFn>(kReasons);
  lib->get_compute_processes = lib->resolve<nvml::DeviceGetComputeRunningProcessesFn>(kProcesses);
  lib->get_memory_info = lib->resolve<nvml::DeviceGetMemoryInfoFn>(kMemory);
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (shutdown_ != nullptr) shutdown_();
  dlclose(handle_);
}

std::string NvmlLibrary::error_string(nvml::nvmlReturn_t code) const {
  if (error_string_ != nullptr) {
    if (const char* text = error_string_(code)) return text;
  }
  return fmt::format("NVML error {}", code);
}

}  // namespace bsw::telemetry
