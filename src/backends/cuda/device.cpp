// Device discovery (device_count, no_device_reason, describe_devices), calibration of measured GEMM and copy
// rates, and the compiled-in spec sheet (configs/gpus.json) behind spec_peak_flops.
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "backends/cuda/calibration.hpp"
#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cudnn_graphs.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/kernels.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/gpu_specs.hpp"

namespace bsw::cuda {

namespace {

std::string version_text(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// The spec-sheet entry for a CUDA device name (configs/gpus.json's `match` and `exclude` tokens).
const nlohmann::json* spec_entry(const std::string& gpu_name) {
  return gpu_spec_for_device(gpu_name);
}

int device_attribute(cudaDeviceAttr attribute, int device) {
  int value = 0;
  BSW_CUDA(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

// nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string uuid_text(const cudaUUID_t& uuid) {
  std::string hex;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) hex += '-';
    hex += fmt::format("{:02x}", static_cast<unsigned char>(uuid.bytes[i]));
  }
  return "GPU-" + hex;
}

// The calibration cache's identity of a device, without describe_device() (which consults the cache).
nlohmann::json device_identity(int device) {
  cudaDeviceProp p{};
  BSW_CUDA(cudaGetDeviceProperties(&p, device));
  return calibration_identity({{"name", std::string(p.name)}, {"uuid", uuid_text(p.uuid)}},
                              library_versions());
}

void require_device(int device) {
  const int count = device_count();
  if (count == 0) throw UsageError(fmt::format("--backend cuda: no CUDA device: {}", no_device_reason()));
  if (device < 0 || device >= count)
    throw UsageError(fmt::format("--device {}: there are {} CUDA device(s), numbered from 0", device, count));
}

// Device memory that frees itself: calibration must not leak when a step throws.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) { BSW_CUDA(cudaMalloc(&ptr_, bytes)); }
  ~DeviceBuffer() { BSW_CUDA_NOEXCEPT(cudaFree(ptr_)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class EventPair {
 public:
  EventPair() {
    BSW_CUDA(cudaEventCreate(&start_));
    BSW_CUDA(cudaEventCreate(&stop_));
  }
  ~EventPair() {
    BSW_CUDA_NOEXCEPT(cudaEventDestroy(start_));
    BSW_CUDA_NOEXCEPT(cudaEventDestroy(stop_));
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  void start(cudaStream_t s) { BSW_CUDA(cudaEventRecord(start_, s)); }
  [[nodiscard]] double stop_ms(cudaStream_t s) {
    BSW_CUDA(cudaEventRecord(stop_, s));
    BSW_CUDA(cudaEventSynchronize(stop_));
    float ms = 0;
    BSW_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The calibration's sizes: a GPU's (an 8192^3 product, a 1 GiB copy), or on the CPU emulator (tests/emu)
// small ones, so that the same code runs there in seconds: its flow and cache, not its rates.
#ifdef BSW_CUDA_EMULATOR
constexpr int64_t kCalibrationGemmSize = 64;
constexpr uint64_t kCalibrationCopyBytes = uint64_t{1} << 20;
#else
constexpr int64_t kCalibrationGemmSize = 8192;
constexpr uint64_t kCalibrationCopyBytes = uint64_t{1} << 30;
#endif

// Best-of-three mean time of `iterations` GEMMs C[n, n] = A B on random data, in TFLOP/s.
double measure_gemm_tflops(Precision precision, int64_t n, cudaStream_t stream) {
  const DType t = storage_dtype(precision);
  const uint64_t bytes = static_cast<uint64_t>(n * n) * dtype_bytes(t);
  const uint64_t workspace_bytes = uint64_t{32} << 20;
  DeviceBuffer a(bytes), b(bytes), c(bytes), workspace(workspace_bytes);
  kernels::fill_uniform(t, a.get(), n * n, 1.0f, kernels::fill_key(1, 1), stream);
  kernels::fill_uniform(t, b.get(), n * n, 1.0f, kernels::fill_key(1, 2), stream);
  Gemm gemm(precision, workspace.get(), workspace_bytes);
  GemmArgs g;
  g.m = g.n = g.k = n;
  g.a = a.get();
  g.b = b.get();
  g.c = c.get();
  g.lda = g.ldb = g.ldc = n;
  g.ab_type = g.c_type = t;
  for (int i = 0; i < 3; ++i) gemm.run(g, stream);
  EventPair events;
  constexpr int kIterations = 10;
  double best_ms = 0;
  for (int round = 0; round < 3; ++round) {
    events.start(stream);
    for (int i = 0; i < kIterations; ++i) gemm.run(g, stream);
    const double ms = events.stop_ms(stream) / kIterations;
    best_ms = round == 0 ? ms : std::min(best_ms, ms);
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (best_ms * 1e-3) /
         1e12;
}

// Device-to-device copy of kCalibrationCopyBytes; GB/s counts the bytes read plus the bytes written.
double measure_copy_gbps(cudaStream_t stream) {
  const uint64_t bytes = kCalibrationCopyBytes;
  DeviceBuffer src(bytes), dst(bytes);
  BSW_CUDA(cudaMemsetAsync(src.get(), 1, bytes, stream));
  for (int i = 0; i < 2; ++i)
    BSW_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
  EventPair events;
  constexpr int kIterations = 10;
  events.start(stream);
  for (int i = 0; i < kIterations; ++i)
    BSW_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
  const double ms = events.stop_ms(stream) / kIterations;
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

struct CalibrationStore {
  std::mutex mutex;
  std::map<int, nlohmann::json> results;
};
CalibrationStore& calibration_store() {
  static CalibrationStore store;
  return store;
}

}  // namespace

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
      return fmt::format(
          "cudaGetDeviceCount: {}: no NVIDIA driver is loaded (is the NVIDIA driver installed?)",
          cudaGetErrorString(status));
    return fmt::format("cudaGetDeviceCount: {} (is the NVIDIA driver installed and recent enough?)",
                       cudaGetErrorString(status));
  }
  return count == 0 ? "cudaGetDeviceCount: no CUDA devices are visible (check CUDA_VISIBLE_DEVICES)" : "";
}

const nlohmann::json& spec_sheet() {
  return gpu_spec_sheet();
}

std::optional<double> spec_peak_flops(const std::string& gpu_name, Precision precision) {
  const nlohmann::json* gpu = spec_entry(gpu_name);
  if (gpu == nullptr) return std::nullopt;
  const nlohmann::json& rate = gpu->at("tflops").at(std::string(to_string(precision)));
  if (!rate.is_number()) return std::nullopt;
  return rate.get<double>() * 1e12;
}

std::optional<double> spec_memory_bandwidth(const std::string& gpu_name) {
  const nlohmann::json* gpu = spec_entry(gpu_name);
  if (gpu == nullptr) return std::nullopt;
  return gpu->at("memory_bandwidth_gbps").get<double>() * 1e9;
}

nlohmann::json library_versions() {
  nlohmann::json v = nlohmann::json::object();
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) v["cuda_driver"] = version_text(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) v["cuda_runtime"] = version_text(runtime);
  static_cast<void>(cudaGetLastError());
  const size_t cudnn = cudnnGetVersion();
  v["cudnn"] = fmt::format("{}.{}.{}", cudnn / 10000, (cudnn / 100) % 100, cudnn % 100);
  v["cudnn_frontend"] = cudnn_frontend_version();
  v["cublaslt"] = Gemm::version();
  return v;
}

// Leaves `device` current. Restoring the previous device would, in a thread that had none (cudaGetDevice
// then says 0), create a context on GPU 0 since CUDA 12 — hundreds of MiB on a GPU `run --device 1` never
// uses, perhaps someone else's. Every CUDA path here sets its own device before it works.
std::optional<uint64_t> free_memory_bytes(int device) {
  BSW_CUDA(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  const bool read = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  static_cast<void>(cudaGetLastError());
  return read ? std::optional<uint64_t>(free_bytes) : std::nullopt;
}

nlohmann::json describe_device(int device, bool free_memory) {
  cudaDeviceProp p{};
  BSW_CUDA(cudaGetDeviceProperties(&p, device));
  char bus_id[64] = {};
  BSW_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  nlohmann::json d = {
      {"index", device},
      {"name", std::string(p.name)},
      {"compute_capability", fmt::format("{}.{}", p.major, p.minor)},
      {"sms", p.multiProcessorCount},
      {"memory_total_bytes", static_cast<uint64_t>(p.totalGlobalMem)},
      {"memory_bus_width_bits", p.memoryBusWidth},
      {"sm_clock_mhz", device_attribute(cudaDevAttrClockRate, device) / 1000},
      {"memory_clock_mhz", device_attribute(cudaDevAttrMemoryClockRate, device) / 1000},
      {"l2_cache_bytes", p.l2CacheSize},
      {"pci_bus_id", std::string(bus_id)},
      {"uuid", uuid_text(p.uuid)},
  };
  if (free_memory) {
    if (const std::optional<uint64_t> free_bytes = free_memory_bytes(device))
      d["memory_free_bytes"] = *free_bytes;
  }
  const std::string name(p.name);
  nlohmann::json spec = nlohmann::json::object();
  for (Precision pr : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16})
    if (auto f = spec_peak_flops(name, pr)) spec[std::string(to_string(pr)) + "_tflops"] = *f / 1e12;
  if (auto bw = spec_memory_bandwidth(name)) spec["memory_bandwidth_gbps"] = *bw / 1e9;
  d["spec_sheet"] = spec.empty() ? nlohmann::json("not in configs/gpus.json") : spec;
  if (auto measured = calibrated(device)) d["calibrated"] = *measured;
  return d;
}

nlohmann::json describe_devices(bool free_memory) {
  nlohmann::json out = {
      {"backend", "cuda"}, {"versions", library_versions()}, {"devices", nlohmann::json::array()}};
  const int count = device_count();
  if (count == 0) {
    out["reason"] = no_device_reason();
    return out;
  }
  for (int i = 0; i < count; ++i) out["devices"].push_back(describe_device(i, free_memory));
  return out;
}

std::optional<nlohmann::json> calibrated(int device) {
  {
    CalibrationStore& store = calibration_store();
    const std::lock_guard<std::mutex> lock(store.mutex);
    const auto it = store.results.find(device);
    if (it != store.results.end()) return it->second;
  }
  return load_calibration(device_identity(device));
}

std::optional<double> calibrated_peak_flops(const nlohmann::json& calibration, Precision precision) {
  if (!calibration.is_object()) return std::nullopt;
  const auto it = calibration.find(std::string(to_string(precision)) + "_tflops");
  if (it == calibration.end() || !it->is_number()) return std::nullopt;
  const double tflops = it->get<double>();
  // A rate no GEMM can have (an edited cache) is no peak: MFU then falls back to the spec sheet.
  if (!std::isfinite(tflops) || tflops <= 0) return std::nullopt;
  return tflops * 1e12;
}

nlohmann::json calibrate(int device) {
  require_device(device);
  BSW_CUDA(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  BSW_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  nlohmann::json result = {
      {"device", device},
      {"method", fmt::format("cuBLASLt square GEMM C = A B on uniform random data, best of 3 rounds of 10; "
                             "copy: cudaMemcpyAsync of {} MiB, bytes read + written per second",
                             kCalibrationCopyBytes >> 20)}};
  try {
    constexpr int64_t kSize = kCalibrationGemmSize;
    // One precision this GPU's cuBLASLt cannot run (bf16 before sm_80) costs only its own rate: null, and
    // why; MFU in that precision falls back to the spec sheet.
    for (Precision p : {Precision::bf16, Precision::fp16, Precision::tf32, Precision::fp32}) {
      const std::string key = std::string(to_string(p)) + "_tflops";
      try {
        result[key] = measure_gemm_tflops(p, kSize, stream);
      } catch (const BackendError& e) {
        result[key] = nullptr;
        result[std::string(to_string(p)) + "_unavailable"] = e.what();
      } catch (const OutOfMemory& e) {
        result[key] = nullptr;
        result[std::string(to_string(p)) + "_unavailable"] = e.what();
      }
    }
    result["gemm_size"] = kSize;
    result["copy_gbps"] = measure_copy_gbps(stream);
  } catch (...) {
    BSW_CUDA_NOEXCEPT(cudaStreamDestroy(stream));
    throw;
  }
  BSW_CUDA(cudaStreamDestroy(stream));
  {
    CalibrationStore& store = calibration_store();
    const std::lock_guard<std::mutex> lock(store.mutex);
    store.results[device] = result;
  }
  result["cache"] = save_calibration(device_identity(device), result);
  return result;
}

}  // namespace bsw::cuda
