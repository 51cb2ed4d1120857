// Backend registry: which backends this build has, and making one by name for --backend.
#include <fmt/format.h>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/scripted/scripted_backend.hpp"
#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"
#ifdef BATCHSWEEP_HAVE_CUDA
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace bsw {

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names{"cpu"};
  if (cuda_compiled()) names.emplace_back("cuda");
  names.emplace_back("scripted");
  return names;
}

bool cuda_compiled() {
#ifdef BATCHSWEEP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_present() {
#ifdef BATCHSWEEP_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view name, const std::string& script_path,
                                      std::optional<int> device) {
  if (name == "auto") {
    if (cuda_device_present()) return make_backend("cuda", script_path, device);
    if (device) {
#ifdef BATCHSWEEP_HAVE_CUDA
      const std::string why = cuda::no_device_reason();
#else
      const std::string why = "this batchsweep was built without the CUDA backend (-DBATCHSWEEP_CUDA=OFF)";
#endif
      throw UsageError(fmt::format(
          "--device {}: there is no CUDA device to choose ({}); --backend auto would run on the cpu", *device,
          why));
    }
    return make_backend("cpu");
  }
  if (device && name != "cuda")
    throw UsageError(fmt::format("--device {}: only --backend cuda has devices to choose, not --backend {}",
                                 *device, name));
  if (name == "cpu") return cpu::make_cpu_backend();
  if (name == "scripted") {
    if (script_path.empty())
      throw UsageError("--backend scripted needs --script FILE (a JSON step-time script)");
    return make_scripted_backend(script_path);
  }
  if (name == "cuda") {
#ifdef BATCHSWEEP_HAVE_CUDA
    if (!cuda_device_present())
      throw UsageError(fmt::format("--backend cuda: no CUDA device: {}", cuda::no_device_reason()));
    return cuda::make_cuda_backend(device.value_or(0));
#else
    throw UsageError(
        "--backend cuda: this batchsweep was built without the CUDA backend (-DBATCHSWEEP_CUDA=OFF)");
#endif
  }
  throw UsageError(fmt::format("--backend: unknown backend '{}' (choose auto, cpu, cuda or scripted)", name));
}

nlohmann::json describe_cuda_devices(bool free_memory) {
#ifdef BATCHSWEEP_HAVE_CUDA
  nlohmann::json out =
      cuda::describe_devices(free_memory);  // {backend, versions, devices, reason when there is none}
  out["compiled"] = true;
  if (cuda::device_count() == 0 && !out.contains("reason")) out["reason"] = cuda::no_device_reason();
  return out;
#else
  return {{"compiled", false},
          {"devices", nlohmann::json::array()},
          {"reason", "this batchsweep was built without the CUDA backend (-DBATCHSWEEP_CUDA=OFF)"}};
#endif
}

std::optional<uint64_t> cuda_free_memory_bytes(int device) {
#ifdef BATCHSWEEP_HAVE_CUDA
  if (device < 0 || device >= cuda::device_count()) return std::nullopt;
  return cuda::free_memory_bytes(device);
#else
  static_cast<void>(device);
  return std::nullopt;
#endif
}

nlohmann::json calibrate_cuda(int device) {
#ifdef BATCHSWEEP_HAVE_CUDA
  const int count = cuda::device_count();
  if (count == 0)
    throw UsageError(fmt::format("--calibrate needs a CUDA device: {}", cuda::no_device_reason()));
  if (device < 0 || device >= count)
    throw UsageError(fmt::format("--device {}: there are {} CUDA device(s), numbered from 0", device, count));
  return cuda::calibrate(device);
#else
  throw UsageError(
      "--calibrate needs the CUDA backend: this batchsweep was built with -DBATCHSWEEP_CUDA=OFF");
#endif
}

}  // namespace bsw
