// The CUDA Backend object: what the device is (name, memory, MFU peak: calibrated when calibrate() ran in
// this process, else the spec sheet) and prepare(), which hands the plan to a CudaSession.
#include <fmt/format.h>

#include "backends/cuda/calibration.hpp"
#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/session.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  BackendKind kind() const override { return BackendKind::cuda; }

  DeviceInfo device(Precision precision) const override {
    const nlohmann::json d = describe_device(device_);
    DeviceInfo info;
    info.backend = "cuda";
    info.name = d.at("name").get<std::string>();
    info.memory_total_bytes = d.at("memory_total_bytes").get<uint64_t>();
    if (auto measured = calibrated_peak_flops(device_, precision)) {
      info.peak_flops = *measured;
      info.peak_flops_source = "calibrated (cuBLASLt GEMM, this process)";
    } else if (auto spec = spec_peak_flops(info.name, precision)) {
      info.peak_flops = *spec;
      info.peak_flops_source = "spec sheet (configs/gpus.json), dense";
    } else {
      info.peak_flops_source =
          "unknown: this GPU is not in configs/gpus.json (run `batchsweep devices --calibrate`)";
    }
    info.details = d;
    info.details["versions"] = library_versions();
    return info;
  }

  std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                   const SessionOptions& options) override {
    if (plan.request.backend != BackendKind::cuda)
      throw BackendError(
          fmt::format("cuda backend given a plan made for the {} backend", to_string(plan.request.backend)));
    BSW_CUDA(cudaSetDevice(device_));
    return make_cuda_session(graph, plan, options, device_);
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = device_count();
  if (count == 0) throw UsageError(fmt::format("--backend cuda: no CUDA device: {}", no_device_reason()));
  if (device < 0 || device >= count)
    throw UsageError(fmt::format("--device {}: there are {} CUDA device(s), numbered from 0", device, count));
  return std::make_unique<CudaBackend>(device);
}

}  // namespace bsw::cuda
