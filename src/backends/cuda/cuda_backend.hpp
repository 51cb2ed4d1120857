// The CUDA backend: device discovery for `devices` and the registry, calibration of the device's real GEMM
// and copy rates, the spec sheet (configs/gpus.json, compiled in), and make_cuda_backend() whose sessions run
// the plan's ops with cuBLASLt GEMMs and the kernels of kernels/*.cu, timed with CUDA events and replayed as
// a CUDA graph.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/backend.hpp"

namespace bsw::cuda {

// Number of CUDA devices; 0 when there is no driver or no device. Never throws.
[[nodiscard]] int device_count() noexcept;
// Why there is no device, e.g. "cudaGetDeviceCount: no CUDA-capable device is detected (is the NVIDIA driver
// installed?)"; empty when a device answers.
[[nodiscard]] std::string no_device_reason();

// The backend on one device. Throws UsageError naming --device when there is no such device.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// A device tensor copied to the host, as stored there (the plan's storage dtype).
struct DeviceTensor {
  DType dtype = DType::f32;
  uint64_t elements = 0;
  std::vector<unsigned char> bytes;
};

// What a CUDA session shows tests (tests/gpu) of its results: dynamic_cast its Session to this.
class CudaSessionProbe {
 public:
  virtual ~CudaSessionProbe() = default;
  // The last step's network output (inference's result; training's logits, of its last micro-batch), copied
  // once the stream has drained. Throws BackendError before any step.
  [[nodiscard]] virtual DeviceTensor output() const = 0;
};

// Every device: name, SMs, memory, clocks, compute capability, PCI bus id, and the driver / CUDA runtime /
// cuDNN / cuBLASLt versions. Without a device: {"devices": [], "reason": no_device_reason(), ...versions}.
// `free_memory`: as describe_device's.
[[nodiscard]] nlohmann::json describe_devices(bool free_memory = true);
// cudaMemGetInfo's free bytes on `device` (creating its context), or nullopt when the call fails.
[[nodiscard]] std::optional<uint64_t> free_memory_bytes(int device);

// Measures bf16 / fp16 / tf32 / fp32 GEMM TFLOP/s with cuBLASLt on large square matrices and device-to-device
// copy GB/s on `device` (a few seconds). The result is remembered for this process and saved to the
// calibration cache (calibration.hpp; its "cache" says where, or why not): backends made afterwards, here or
// in a later process on the same GPU, driver and cuBLASLt, use the measured rate for MFU. Throws UsageError
// without such a device, BackendError on failure.
[[nodiscard]] nlohmann::json calibrate(int device);

// Datasheet dense FLOP/s (per second, not TFLOP/s) of a GPU by its CUDA name, from configs/gpus.json; nullopt
// when the GPU is not listed or has no such mode (e.g. bf16 on a V100).
[[nodiscard]] std::optional<double> spec_peak_flops(const std::string& gpu_name, Precision precision);
// Datasheet memory bandwidth in bytes per second, when the GPU is listed.
[[nodiscard]] std::optional<double> spec_memory_bandwidth(const std::string& gpu_name);
// The whole spec sheet (configs/gpus.json).
[[nodiscard]] const nlohmann::json& spec_sheet();

}  // namespace bsw::cuda
