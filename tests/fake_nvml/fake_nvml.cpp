// A fake NVML for tests: a shared library exporting the NVML entry points telemetry uses, with readings
// scripted through extra exported functions that a test finds with dlsym:
//   void   fake_nvml_reset();                                 all defaults, no failures, no processes
//   int    fake_nvml_set(const char* key, double value);      0, or -1 for an unknown key (keys below)
//   double fake_nvml_get(const char* key);                    "init_refcount", "calls.<symbol>", or a set key
//   void   fake_nvml_fail(const char* symbol, int code);      make <symbol> return code (0 = succeed again)
//   void   fake_nvml_add_process(unsigned pid, unsigned long long used_bytes);
// Keys: device_count (device i is "Fake GPU i" at bus 0x1B + 0x20*i), power_w, sm_clock_mhz,
// app_sm_clock_mhz, default_app_sm_clock_mhz, gpu_util_pct, mem_util_pct, temperature_c, clock_event_reasons
// (bit mask), memory_total_bytes, memory_used_bytes. The total energy counter advances in real time at the
// scripted power, so counter energy = power x duration. A process that cannot call those functions (the
// batchsweep binary in an e2e test) scripts the readings with FAKE_NVML_SCRIPT, read at the first nvmlInit:
// "key=value;...;process=PID:BYTES". Built twice: fake_nvml (a current driver) and, with FAKE_NVML_LEGACY,
// fake_nvml_legacy (an old driver without the _v2 bus-id lookup, the energy counter, ...ClocksEventReasons,
// processes _v3 and default applications clocks).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "telemetry/nvml_api.hpp"

using namespace bsw::nvml;

struct bsw::nvml::nvmlDevice_st {
  unsigned index;
};

namespace {

constexpr unsigned kMaxDevices = 8;
using Clock = std::chrono::steady_clock;

struct State {
  int init_refcount = 0;
  unsigned device_count = 2;
  std::map<std::string, double> values;
  std::map<std::string, int> failures;
  std::map<std::string, double> calls;
  std::vector<nvmlProcessInfo_t> processes;
  double energy_mj = 1.0e6;  // accumulated up to energy_since
  Clock::time_point energy_since = Clock::now();
};

std::mutex g_mutex;
State g_state;
nvmlDevice_st g_devices[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

std::map<std::string, double> default_values() {
  return {{"power_w", 300.0},
          {"sm_clock_mhz", 1980.0},
          {"app_sm_clock_mhz", 1980.0},
          {"default_app_sm_clock_mhz", 1980.0},
          {"gpu_util_pct", 97.0},
          {"mem_util_pct", 40.0},
          {"temperature_c", 65.0},
          {"clock_event_reasons", 0.0},
          {"memory_total_bytes", 17179869184.0},  // 16 GiB, the emulator's device
          {"memory_used_bytes", 536870912.0}};
}

// Folds the energy used at the current power into the counter; call with the lock held.
void advance_energy() {
  const auto now = Clock::now();
  g_state.energy_mj +=
      g_state.values["power_w"] * 1000.0 * std::chrono::duration<double>(now - g_state.energy_since).count();
  g_state.energy_since = now;
}

// The common prologue of every device call: count it, apply a scripted failure, check init and the handle.
nvmlReturn_t enter(const char* symbol, nvmlDevice_t device) {
  g_state.calls[symbol] += 1;
  if (auto it = g_state.failures.find(symbol); it != g_state.failures.end() && it->second != NVML_SUCCESS) {
    return it->second;
  }
  if (g_state.init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
  if (device != nullptr && (device < g_devices || device >= g_devices + g_state.device_count)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

unsigned bus_of(unsigned index) {
  return 0x1B + 0x20 * index;
}

nvmlReturn_t clock_value(const char* symbol, nvmlDevice_t device, nvmlClockType_t type, const char* sm_key,
                         unsigned* mhz) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter(symbol, device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || mhz == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) {
    *mhz = static_cast<unsigned>(g_state.values[sm_key]);
  } else if (type == NVML_CLOCK_MEM) {
    *mhz = 2619;
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t reasons_value(const char* symbol, nvmlDevice_t device, unsigned long long* reasons) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter(symbol, device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = static_cast<unsigned long long>(g_state.values["clock_event_reasons"]);
  return NVML_SUCCESS;
}

nvmlReturn_t processes_value(const char* symbol, nvmlDevice_t device, unsigned* count,
                             nvmlProcessInfo_t* infos) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter(symbol, device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto needed = static_cast<unsigned>(g_state.processes.size());
  if (*count < needed || (needed > 0 && infos == nullptr)) {
    *count = needed;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < needed; ++i) infos[i] = g_state.processes[i];
  *count = needed;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

void fake_nvml_reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int refcount = g_state.init_refcount;  // a test may reset while a Telemetry holds NVML open
  g_state = State{};
  g_state.init_refcount = refcount;
  g_state.values = default_values();
}

int fake_nvml_set(const char* key, double value) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string k = key;
  if (k == "device_count") {
    if (value < 0 || value > kMaxDevices) return -1;
    g_state.device_count = static_cast<unsigned>(value);
    return 0;
  }
  if (g_state.values.empty()) g_state.values = default_values();
  if (g_state.values.count(k) == 0) return -1;
  if (k == "power_w") advance_energy();
  g_state.values[k] = value;
  return 0;
}

double fake_nvml_get(const char* key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string k = key;
  if (k == "init_refcount") return g_state.init_refcount;
  if (k == "device_count") return g_state.device_count;
  if (k.rfind("calls.", 0) == 0) return g_state.calls[k.substr(6)];
  if (auto it = g_state.values.find(k); it != g_state.values.end()) return it->second;
  return -1;
}

void fake_nvml_fail(const char* symbol, int code) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state.failures[symbol] = code;
}

void fake_nvml_add_process(unsigned pid, unsigned long long used_bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state.processes.push_back({pid, used_bytes, 0xFFFFFFFFu, 0xFFFFFFFFu});
}

// FAKE_NVML_SCRIPT: "key=value" settings (the keys of fake_nvml_set) and "process=PID:BYTES" entries,
// separated by ';'. Applied once; an unknown key is reported on stderr and skipped.
static void apply_script_locked() {
  static bool applied = false;
  if (applied) return;
  applied = true;
  const char* script = std::getenv("FAKE_NVML_SCRIPT");
  if (script == nullptr) return;
  std::string rest = script;
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string item = rest.substr(0, end);
    rest = end == std::string::npos ? std::string() : rest.substr(end + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "process") {
      const size_t colon = value.find(':');
      g_state.processes.push_back(
          {static_cast<unsigned>(std::strtoul(value.substr(0, colon).c_str(), nullptr, 10)),
           colon == std::string::npos ? 0ULL : std::strtoull(value.c_str() + colon + 1, nullptr, 10),
           0xFFFFFFFFu, 0xFFFFFFFFu});
    } else if (g_state.values.count(key) != 0) {
      g_state.values[key] = std::strtod(value.c_str(), nullptr);
    } else {
      std::fprintf(stderr, "fake NVML: FAKE_NVML_SCRIPT: unknown key '%s'\n", key.c_str());
    }
  }
}

nvmlReturn_t nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state.calls["nvmlInit_v2"] += 1;
  if (auto it = g_state.failures.find("nvmlInit_v2"); it != g_state.failures.end() && it->second != 0) {
    return it->second;
  }
  if (g_state.values.empty()) g_state.values = default_values();
  apply_script_locked();
  ++g_state.init_refcount;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state.calls["nvmlShutdown"] += 1;
  if (g_state.init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
  --g_state.init_refcount;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetCount_v2", nullptr); rc != NVML_SUCCESS) return rc;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = g_state.device_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetHandleByIndex_v2", nullptr); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || index >= g_state.device_count) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id, nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetHandleByPciBusId_v2", nullptr); rc != NVML_SUCCESS)
    return rc;
  if (pci_bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  if (std::sscanf(pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (unsigned i = 0; i < g_state.device_count; ++i) {
    if (domain == 0 && bus == bus_of(i) && dev == 0 && function == 0) {
      *device = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
#endif

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetName", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || name == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string text = "Fake GPU " + std::to_string(device->index);
  if (length < text.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(name, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetPciInfo_v3", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = nvmlPciInfo_t{};
  pci->domain = 0;
  pci->bus = bus_of(device->index);
  pci->device = 0;
  pci->pciDeviceId = 0x233510DE;
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain, pci->bus,
                pci->device);
  std::snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetUtilizationRates", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = static_cast<unsigned>(g_state.values["gpu_util_pct"]);
  utilization->memory = static_cast<unsigned>(g_state.values["mem_util_pct"]);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power_mw) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetPowerUsage", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || power_mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *power_mw = static_cast<unsigned>(g_state.values["power_w"] * 1000.0);
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy_mj) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetTotalEnergyConsumption", device); rc != NVML_SUCCESS)
    return rc;
  if (device == nullptr || energy_mj == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  advance_energy();
  *energy_mj = static_cast<unsigned long long>(g_state.energy_mj);
  return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock_mhz) {
  return clock_value("nvmlDeviceGetClockInfo", device, type, "sm_clock_mhz", clock_mhz);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock_mhz) {
  return clock_value("nvmlDeviceGetApplicationsClock", device, type, "app_sm_clock_mhz", clock_mhz);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned* clock_mhz) {
  return clock_value("nvmlDeviceGetDefaultApplicationsClock", device, type, "default_app_sm_clock_mhz",
                     clock_mhz);
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned* temperature_c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetTemperature", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || temperature_c == nullptr || sensor != NVML_TEMPERATURE_GPU) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *temperature_c = static_cast<unsigned>(g_state.values["temperature_c"]);
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return reasons_value("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}
#endif

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return reasons_value("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count,
                                                     nvmlProcessInfo_t* infos) {
  return processes_value("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos);
}
#endif

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned* count,
                                                     nvmlProcessInfo_t* infos) {
  return processes_value("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const nvmlReturn_t rc = enter("nvmlDeviceGetMemoryInfo", device); rc != NVML_SUCCESS) return rc;
  if (device == nullptr || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = static_cast<unsigned long long>(g_state.values["memory_total_bytes"]);
  memory->used = static_cast<unsigned long long>(g_state.values["memory_used_bytes"]);
  memory->free = memory->total - std::min(memory->used, memory->total);
  return NVML_SUCCESS;
}

}  // extern "C"
