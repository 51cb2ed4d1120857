// Which backends this build has, and how to make one by name. The CLI and the sweep go through here.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/backend.hpp"

namespace bsw {

// "cpu", "cuda" (when compiled in), "scripted" (test backend, needs a script file).
[[nodiscard]] std::vector<std::string> compiled_backends();
[[nodiscard]] bool cuda_compiled();
// True when the CUDA backend is compiled in and a device answers.
[[nodiscard]] bool cuda_device_present();

// name: auto | cpu | cuda | scripted. `auto` picks cuda when a device is present, else cpu. `scripted` reads
// script_path (a JSON file, see src/backends/scripted). `device` (--device) is the CUDA device, numbered as
// CUDA numbers them (after CUDA_VISIBLE_DEVICES); none = device 0. Throws UsageError naming --backend for an
// unknown name, a backend not compiled in, or `cuda` without a device ("no CUDA device: ..."), and naming
// --device for a device that is not there or a backend that has no devices to choose.
[[nodiscard]] std::unique_ptr<Backend> make_backend(std::string_view name,
                                                    const std::string& script_path = {},
                                                    std::optional<int> device = std::nullopt);

// OpenBLAS starts its worker threads as it loads, before main, and each maps its work buffer (about 128 MiB)
// at once, retrying without end where `ulimit -v` leaves no room for it: such a process hangs at exit,
// joining a worker that never gets its buffer (even `presets`, which never calls BLAS). Where an
// address-space limit is set and OpenBLAS has workers: `starved` where what the limit leaves cannot hold the
// buffers the workers have yet to map plus the main thread's, `slow` where a worker has not mapped its buffer
// after 5 s though there is room; main then runs itself again with OPENBLAS_NUM_THREADS=1, which starts none.
// Otherwise `fine`, once every worker holds its buffer (one that starts after main must not find its room
// taken).
enum class BlasWorkers { fine, starved, slow };
[[nodiscard]] BlasWorkers blas_workers_check();
// The threads OpenBLAS runs GEMMs on (OPENBLAS_NUM_THREADS, else the cores).
[[nodiscard]] int blas_threads();

// For `batchsweep devices`: {"compiled": bool, "devices": [...], "versions": {...} (driver, runtime, cuDNN,
// cuBLASLt), "reason": "..." when there is no device}. `free_memory`: each device's memory_free_bytes from
// cudaMemGetInfo, which creates a CUDA context on every device (false leaves that to
// cuda_free_memory_bytes, one device at a time).
[[nodiscard]] nlohmann::json describe_cuda_devices(bool free_memory = true);
// cudaMemGetInfo's free bytes on CUDA device `device`, creating its context; nullopt without that device.
[[nodiscard]] std::optional<uint64_t> cuda_free_memory_bytes(int device);
// Measured GEMM rates per precision and copy bandwidth of CUDA device `device`. Throws UsageError naming
// --calibrate when there is no device or no CUDA backend in this build.
[[nodiscard]] nlohmann::json calibrate_cuda(int device);

}  // namespace bsw
