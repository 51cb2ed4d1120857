// Telemetry: NVML device selection, the probe of which readings work, and the sampler thread that reads them
// over a timed window. The thread sleeps on a condition variable, so stop() wakes it at once instead of
// waiting out an interval; samples and processes are written only by that thread while it runs and read only
// after join().
#include "batchsweep/telemetry.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "batchsweep/errors.hpp"
#include "telemetry/nvml_library.hpp"
#include "telemetry/pci_bus_id.hpp"
#include "telemetry/summary.hpp"

namespace bsw {

using telemetry::NvmlLibrary;
using namespace bsw::nvml;
using SteadyClock = std::chrono::steady_clock;

struct Telemetry::Impl {
  TelemetryOptions options;
  std::string library_path;
  std::string unavailable_reason;
  std::unique_ptr<NvmlLibrary> lib;
  nvmlDevice_t device = nullptr;
  TelemetryDevice info;
  std::vector<std::string> unsupported;
  // Which readings to take; false when the symbol is missing or the device answered Not Supported when
  // probed.
  bool read_power = false, read_energy = false, read_sm_clock = false, read_mem_clock = false,
       read_utilization = false;
  bool read_temperature = false, read_reasons = false, read_processes = false;
  std::string energy_unsupported;  // the unsupported[] entry for the energy counter, when it is one

  bool running = false;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop_requested = false;  // guarded by mutex
  std::thread sampler;
  SteadyClock::time_point window_start;
  std::vector<TelemetrySample> samples;
  std::vector<GpuProcess> other_processes;
  std::optional<uint64_t> energy_start_mj;
  std::string energy_problem;

  ~Impl() {
    if (sampler.joinable()) {
      request_stop();
      sampler.join();
    }
    lib.reset();  // nvmlShutdown and dlclose after the thread is gone
  }

  [[nodiscard]] bool available() const { return lib != nullptr; }

  void request_stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop_requested = true;
    }
    wake.notify_all();
  }

  [[nodiscard]] bool select_device();
  [[nodiscard]] bool select_by_bus_id(const telemetry::PciAddress& address);
  void describe_device();
  void probe_readings();
  [[nodiscard]] TelemetrySample read_sample() const;
  [[nodiscard]] std::optional<uint64_t> read_energy_mj(std::string& problem) const;
  void poll_processes();
  // The compute processes on the device other than own_pids; nullopt when NVML cannot list them.
  [[nodiscard]] std::optional<std::vector<GpuProcess>> list_other_processes() const;
  void run_sampler();
};

namespace {

// Records `what` as unsupported when its entry point is missing or the device says Not Supported. Returns
// whether the reading should be taken.
template <typename Fn, typename Call>
bool probe(const NvmlLibrary& lib, const char* what, const telemetry::Entry<Fn>& entry, Call call,
           std::vector<std::string>& unsupported) {
  if (!entry) {
    unsupported.push_back(fmt::format("{}: {} not exported by {}", what, entry.name, lib.path()));
    return false;
  }
  const nvmlReturn_t rc = call(entry.fn);
  if (rc == NVML_ERROR_NOT_SUPPORTED) {
    unsupported.push_back(fmt::format("{}: {} ({})", what, lib.error_string(rc), entry.name));
    return false;
  }
  return true;  // other failures may pass; each sample retries
}

std::string resolve_library_path(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv(kNvmlLibraryEnv); env != nullptr && *env != '\0') return env;
  return kDefaultNvmlLibrary;
}

}  // namespace

bool Telemetry::Impl::select_by_bus_id(const telemetry::PciAddress& address) {
  const std::string bus_id = telemetry::to_nvml_bus_id(address);
  if (lib->handle_by_pci_bus_id && lib->handle_by_pci_bus_id.fn(bus_id.c_str(), &device) == NVML_SUCCESS) {
    return true;
  }
  // Older drivers lack the _v2 lookup; compare every device's bus id instead.
  unsigned count = 0;
  if (lib->get_count && lib->handle_by_index && lib->get_pci_info &&
      lib->get_count.fn(&count) == NVML_SUCCESS) {
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t candidate = nullptr;
      nvmlPciInfo_t pci{};
      if (lib->handle_by_index.fn(i, &candidate) != NVML_SUCCESS ||
          lib->get_pci_info.fn(candidate, &pci) != NVML_SUCCESS) {
        continue;
      }
      pci.busId[sizeof(pci.busId) - 1] = '\0';
      if (telemetry::parse_pci_bus_id(pci.busId) == address) {
        device = candidate;
        return true;
      }
    }
  }
  unavailable_reason = fmt::format(
      "NVML has no device with PCI bus id {} ({} device(s) visible): telemetry unavailable", bus_id, count);
  return false;
}

bool Telemetry::Impl::select_device() {
  const std::string& wanted = options.device;
  if (const auto index = telemetry::parse_device_index(wanted)) {
    if (lib->handle_by_index && lib->handle_by_index.fn(*index, &device) == NVML_SUCCESS) return true;
    unsigned count = 0;
    if (lib->get_count) (void)lib->get_count.fn(&count);
    unavailable_reason = fmt::format(
        "NVML has no device with index {} ({} device(s) visible): telemetry unavailable", *index, count);
    return false;
  }
  if (const auto address = telemetry::parse_pci_bus_id(wanted)) return select_by_bus_id(*address);
  unavailable_reason = fmt::format(
      "telemetry device '{}' is neither a PCI bus id (domain:bus:device.function) nor an NVML index: "
      "telemetry unavailable",
      wanted);
  return false;
}

void Telemetry::Impl::describe_device() {
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (lib->get_name && lib->get_name.fn(device, name, sizeof(name)) == NVML_SUCCESS) {
    name[sizeof(name) - 1] = '\0';
    info.name = name;
  }
  nvmlPciInfo_t pci{};
  if (lib->get_pci_info && lib->get_pci_info.fn(device, &pci) == NVML_SUCCESS) {
    pci.busId[sizeof(pci.busId) - 1] = '\0';
    const auto address = telemetry::parse_pci_bus_id(pci.busId);
    info.pci_bus_id = address ? telemetry::to_nvml_bus_id(*address) : std::string(pci.busId);
  } else if (const auto address = telemetry::parse_pci_bus_id(options.device)) {
    info.pci_bus_id = telemetry::to_nvml_bus_id(*address);
  }
  unsigned mhz = 0;
  if (lib->get_default_applications_clock &&
      lib->get_default_applications_clock.fn(device, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS && mhz > 0) {
    info.reference_sm_clock_mhz = mhz;
    info.reference_sm_clock_source = "default applications clock";
  } else if (lib->get_applications_clock &&
             lib->get_applications_clock.fn(device, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS && mhz > 0) {
    info.reference_sm_clock_mhz = mhz;
    info.reference_sm_clock_source = "applications clock";
  } else {
    unsupported.push_back(
        "reference SM clock: neither the default nor the current applications clock is "
        "reported, so the low-clock warning is off");
  }
}

void Telemetry::Impl::probe_readings() {
  const NvmlLibrary& l = *lib;
  nvmlDevice_t d = device;
  unsigned value = 0;
  unsigned long long wide = 0;
  nvmlUtilization_t utilization{};
  read_power = probe(
      l, "power", l.get_power, [&](auto fn) { return fn(d, &value); }, unsupported);
  const size_t before = unsupported.size();
  read_energy = probe(
      l, "total energy counter", l.get_total_energy, [&](auto fn) { return fn(d, &wide); }, unsupported);
  if (unsupported.size() > before) energy_unsupported = unsupported.back();
  read_sm_clock = probe(
      l, "SM clock", l.get_clock, [&](auto fn) { return fn(d, NVML_CLOCK_SM, &value); }, unsupported);
  read_mem_clock = probe(
      l, "memory clock", l.get_clock, [&](auto fn) { return fn(d, NVML_CLOCK_MEM, &value); }, unsupported);
  read_utilization = probe(
      l, "utilization", l.get_utilization, [&](auto fn) { return fn(d, &utilization); }, unsupported);
  read_temperature = probe(
      l, "temperature", l.get_temperature, [&](auto fn) { return fn(d, NVML_TEMPERATURE_GPU, &value); },
      unsupported);
  read_reasons = probe(
      l, "clock event reasons", l.get_clock_event_reasons, [&](auto fn) { return fn(d, &wide); },
      unsupported);
  read_processes = probe(
      l, "compute processes", l.get_compute_processes,
      [&](auto fn) {
        unsigned count = 0;
        const nvmlReturn_t rc = fn(d, &count, nullptr);
        return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_SUCCESS : rc;
      },
      unsupported);
}

TelemetrySample Telemetry::Impl::read_sample() const {
  TelemetrySample s;
  unsigned value = 0;
  if (read_power && lib->get_power.fn(device, &value) == NVML_SUCCESS) s.power_w = value / 1000.0;
  if (read_sm_clock && lib->get_clock.fn(device, NVML_CLOCK_SM, &value) == NVML_SUCCESS)
    s.sm_clock_mhz = value;
  if (read_mem_clock && lib->get_clock.fn(device, NVML_CLOCK_MEM, &value) == NVML_SUCCESS)
    s.mem_clock_mhz = value;
  nvmlUtilization_t utilization{};
  if (read_utilization && lib->get_utilization.fn(device, &utilization) == NVML_SUCCESS) {
    s.utilization_pct = utilization.gpu;
    s.memory_utilization_pct = utilization.memory;
  }
  if (read_temperature && lib->get_temperature.fn(device, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
    s.temperature_c = value;
  }
  unsigned long long reasons = 0;
  if (read_reasons && lib->get_clock_event_reasons.fn(device, &reasons) == NVML_SUCCESS) {
    s.clock_event_reasons = reasons;
  }
  s.t_s = std::chrono::duration<double>(SteadyClock::now() - window_start).count();
  return s;
}

std::optional<uint64_t> Telemetry::Impl::read_energy_mj(std::string& problem) const {
  if (!read_energy) {
    problem = energy_unsupported;
    return std::nullopt;
  }
  unsigned long long mj = 0;
  if (const nvmlReturn_t rc = lib->get_total_energy.fn(device, &mj); rc != NVML_SUCCESS) {
    problem = fmt::format("total energy counter: {} ({})", lib->error_string(rc), lib->get_total_energy.name);
    return std::nullopt;
  }
  return mj;
}

std::optional<std::vector<GpuProcess>> Telemetry::Impl::list_other_processes() const {
  if (!lib->get_compute_processes) return std::nullopt;
  std::vector<nvmlProcessInfo_t> infos(16);
  unsigned count = 0;
  for (int attempt = 0;; ++attempt) {
    count = static_cast<unsigned>(infos.size());
    const nvmlReturn_t rc = lib->get_compute_processes.fn(device, &count, infos.data());
    if (rc == NVML_SUCCESS) break;
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE || attempt == 3) return std::nullopt;
    infos.resize(count + 8);  // processes may start between the two calls
  }
  infos.resize(std::min<size_t>(count, infos.size()));
  std::vector<GpuProcess> others;
  for (const auto& p : infos) {
    if (std::find(options.own_pids.begin(), options.own_pids.end(), p.pid) != options.own_pids.end())
      continue;
    std::optional<uint64_t> used;
    if (p.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) used = p.usedGpuMemory;
    others.push_back({p.pid, used});
  }
  return others;
}

void Telemetry::Impl::poll_processes() {
  if (!read_processes) return;
  const std::optional<std::vector<GpuProcess>> now = list_other_processes();
  if (!now) return;
  for (const GpuProcess& p : *now) {
    auto known = std::find_if(other_processes.begin(), other_processes.end(),
                              [&](const GpuProcess& g) { return g.pid == p.pid; });
    if (known == other_processes.end()) {
      other_processes.push_back(p);
    } else if (p.used_bytes && (!known->used_bytes || *p.used_bytes > *known->used_bytes)) {
      known->used_bytes = p.used_bytes;
    }
  }
}

void Telemetry::Impl::run_sampler() {
  const auto interval = std::chrono::milliseconds(options.sample_interval_ms);
  const int process_every = std::max(1, 1000 / options.sample_interval_ms);  // about once a second
  auto next = window_start;
  std::unique_lock<std::mutex> lock(mutex);
  for (int tick = 0;; ++tick) {
    lock.unlock();
    samples.push_back(read_sample());
    if (tick > 0 && tick % process_every == 0) poll_processes();
    lock.lock();
    next += interval;
    if (const auto now = SteadyClock::now(); next <= now) {
      next += ((now - next) / interval + 1) * interval;  // fell behind: skip the missed ticks
    }
    if (wake.wait_until(lock, next, [this] { return stop_requested; })) return;
  }
}

Telemetry Telemetry::open(const TelemetryOptions& options) {
  if (options.sample_interval_ms < 1) {
    throw UsageError(fmt::format("telemetry sample interval must be at least 1 ms (got {} ms)",
                                 options.sample_interval_ms));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.own_pids.empty()) impl->options.own_pids.push_back(static_cast<uint32_t>(getpid()));
  impl->library_path = resolve_library_path(options.library_path);
  impl->lib = NvmlLibrary::load(impl->library_path, impl->unavailable_reason);
  if (impl->lib && !impl->select_device()) impl->lib.reset();
  if (impl->lib) {
    impl->describe_device();
    impl->probe_readings();
  }
  return Telemetry(std::move(impl));
}

Telemetry::Telemetry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Telemetry::Telemetry(Telemetry&& other) noexcept = default;
Telemetry& Telemetry::operator=(Telemetry&& other) noexcept = default;
Telemetry::~Telemetry() = default;

bool Telemetry::available() const {
  return impl_->available();
}
std::optional<GpuMemory> Telemetry::memory(std::string& why) const {
  if (!impl_->available()) {
    why = impl_->unavailable_reason;
    return std::nullopt;
  }
  const NvmlLibrary& lib = *impl_->lib;
  if (!lib.get_memory_info) {
    why = fmt::format("{} does not export {}", lib.path(), lib.get_memory_info.name);
    return std::nullopt;
  }
  nvmlMemory_t reading{};
  if (const nvmlReturn_t rc = lib.get_memory_info.fn(impl_->device, &reading); rc != NVML_SUCCESS) {
    why = fmt::format("{} failed: {}", lib.get_memory_info.name, lib.error_string(rc));
    return std::nullopt;
  }
  GpuMemory memory;
  memory.total_bytes = reading.total;
  memory.free_bytes = reading.free;
  memory.used_bytes = reading.used;
  memory.other_processes = impl_->list_other_processes().value_or(std::vector<GpuProcess>{});
  return memory;
}

const std::string& Telemetry::unavailable_reason() const {
  return impl_->unavailable_reason;
}
const std::string& Telemetry::library_path() const {
  return impl_->library_path;
}
const TelemetryDevice& Telemetry::device() const {
  return impl_->info;
}
const std::vector<std::string>& Telemetry::unsupported_readings() const {
  return impl_->unsupported;
}
bool Telemetry::running() const {
  return impl_->running;
}

void Telemetry::start() {
  Impl& s = *impl_;
  if (s.running) throw std::logic_error("Telemetry::start: a window is already running");
  if (!s.available()) {
    s.running = true;
    return;
  }
  s.samples.clear();
  s.other_processes.clear();
  s.energy_problem.clear();
  s.stop_requested = false;  // no thread runs now, so no lock is needed
  s.poll_processes();
  s.energy_start_mj = s.read_energy_mj(s.energy_problem);
  s.window_start = SteadyClock::now();
  s.sampler = std::thread([&s] { s.run_sampler(); });
  s.running = true;
}

TelemetryWindow Telemetry::stop() {
  Impl& s = *impl_;
  if (!s.running) throw std::logic_error("Telemetry::stop: no window is running");
  s.running = false;
  if (!s.available()) return TelemetryWindow{};
  s.request_stop();
  s.sampler.join();
  s.samples.push_back(s.read_sample());
  std::string end_problem;
  const auto energy_end_mj = s.read_energy_mj(end_problem);
  const auto end = SteadyClock::now();
  s.poll_processes();

  telemetry::WindowInputs inputs;
  inputs.duration_s = std::chrono::duration<double>(end - s.window_start).count();
  inputs.samples = std::move(s.samples);
  s.samples.clear();
  inputs.energy_start_mj = s.energy_start_mj;
  inputs.energy_end_mj = energy_end_mj;
  inputs.energy_counter_problem = s.energy_problem.empty() ? end_problem : s.energy_problem;
  inputs.reference_sm_clock_mhz = s.info.reference_sm_clock_mhz;
  inputs.other_processes = std::move(s.other_processes);
  s.other_processes.clear();
  return telemetry::summarize_window(std::move(inputs));
}

}  // namespace bsw
