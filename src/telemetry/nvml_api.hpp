// The slice of NVIDIA's NVML C API that telemetry uses, declared here because no Debian package ships nvml.h.
// Types, values and signatures follow NVIDIA's documented nvml.h (Linux: no calling-convention decoration, C
// enums are int-sized). Entry points are resolved with dlsym, so only the function-pointer types are needed;
// the fake NVML used by the tests defines the same symbols against these same declarations.
#pragma once

namespace bsw::nvml {

using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

using nvmlClockType_t = int;
inline constexpr nvmlClockType_t NVML_CLOCK_GRAPHICS = 0;
inline constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
inline constexpr nvmlClockType_t NVML_CLOCK_MEM = 2;

using nvmlTemperatureSensors_t = int;
inline constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;

inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3.
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of the sample period device memory was read or written
};

// nvmlProcessInfo_v2_t, the element type of nvmlDeviceGetComputeRunningProcesses_v2 and _v3.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or NVML_VALUE_NOT_AVAILABLE
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
inline constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;

// nvmlMemory_t, filled by nvmlDeviceGetMemoryInfo: device memory in bytes (used = total - free).
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Clock event (formerly "throttle") reason bits.
inline constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
inline constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ULL;
inline constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;

// Entry-point types, one per symbol looked up.
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int* count);
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using DeviceGetHandleByPciBusIdFn = nvmlReturn_t (*)(const char* pci_bus_id, nvmlDevice_t* device);
using DeviceGetNameFn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlPciInfo_t* pci);
using DeviceGetUtilizationRatesFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlUtilization_t* utilization);
using DeviceGetPowerUsageFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power_mw);
using DeviceGetTotalEnergyConsumptionFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                           unsigned long long* energy_mj);
using DeviceGetClockFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock_mhz);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                unsigned int* temperature_c);
using DeviceGetClocksEventReasonsFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned long long* reasons);
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using DeviceGetComputeRunningProcessesFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* info_count,
                                                            nvmlProcessInfo_t* infos);

}  // namespace bsw::nvml
