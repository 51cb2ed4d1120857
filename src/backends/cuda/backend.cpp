// The CUDA Backend object: what the device is (name, memory, MFU peak: calibrated when calibrate() ran in
// this process or the calibration cache holds a `devices --calibrate` of this GPU, else the spec sheet),
// which execution paths cuDNN accepts for a graph (checked on the device, falling back to our own paths), and
// prepare(), which hands the plan to a CudaSession.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/calibration.hpp"
#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cudnn_graphs.hpp"
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
    // describe_device() holds the calibration (this process's, else the cache's) when there is one.
    const nlohmann::json calibration = d.value("calibrated", nlohmann::json());
    if (auto measured = calibrated_peak_flops(calibration, precision)) {
      info.peak_flops = *measured;
      info.peak_flops_source = calibration.contains("measured_at")
                                   ? fmt::format("calibrated by `batchsweep devices --calibrate` at {} ({})",
                                                 calibration.value("measured_at", std::string("?")),
                                                 calibration.value("cache_file", std::string("?")))
                                   : std::string("calibrated (cuBLASLt GEMM, this process)");
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
    const ExecutionPaths& p = plan.request.paths;
    const bool uses_cudnn = p.conv == ConvPath::cudnn || p.attention == AttentionPath::cudnn_sdpa;
    std::shared_ptr<CudnnGraphs> graphs = uses_cudnn ? cudnn() : nullptr;
    // Once, at the first prepare: the context, cuBLASLt's and cuDNN's handles (and cuDNN's batch-1 plans
    // from execution_paths) exist, no arena yet; the sessions judge other processes' memory against it.
    if (!in_use_at_start_) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
        in_use_at_start_ = total_bytes - free_bytes;
      else
        static_cast<void>(cudaGetLastError());
    }
    return make_cuda_session(graph, plan, options, device_, std::move(graphs), in_use_at_start_.value_or(0));
  }

  // The requested paths, each checked at batch 1 on this device: a pass cuDNN rejects (or whose plans all
  // need more workspace than the planner reserves) sends that op kind to our own path, and the note says why.
  ExecutionPaths execution_paths(const Graph& graph, Precision precision, Mode mode,
                                 const ExecutionPaths& requested) override {
    ExecutionPaths paths = requested;
    paths.note.clear();
    if (paths.conv == ConvPath::im2col_gemm && paths.attention == AttentionPath::explicit_softmax)
      return paths;
    if (!cudnn_error_.empty() || !cudnn()) {
      paths.note =
          fmt::format("cuDNN unavailable ({}): our own attention and convolution paths run", cudnn_error_);
      paths.conv = ConvPath::im2col_gemm;
      paths.attention = AttentionPath::explicit_softmax;
      return paths;
    }
    // The planned cuDNN workspace depends on which op kinds use cuDNN: after a fallback the sessions reserve
    // less, so what passed against the larger limit is checked again against the one they will have.
    std::vector<std::string> notes;
    for (bool changed = true; changed;) {
      changed = false;
      const PlanRequest request{1, precision, mode, 1, BackendKind::cuda, paths};
      const uint64_t limit = cudnn_workspace_bytes(graph, request);
      // Out of device memory (other processes' memory) says nothing about the shape: the path stays, and
      // each point's prepare checks it again at its own batch (oom there is that point's measurement).
      const auto support = [&](const Op& op) -> std::string {
        try {
          return graphs_->op_support(graph, op, 1, precision, mode, limit);
        } catch (const OutOfMemory& e) {
          const std::string note = fmt::format(
              "{}: not checked at batch 1 ({}); each point checks it at prepare", op.path, e.what());
          if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
          return {};
        }
      };
      for (const Op& op : graph.ops) {
        if (op.kind == OpKind::conv2d && paths.conv == ConvPath::cudnn) {
          const std::string error = support(op);
          if (!error.empty()) {
            paths.conv = ConvPath::im2col_gemm;
            notes.push_back(fmt::format("conv: {} fell back to im2col + GEMM: {}", op.path, error));
            changed = true;
          }
        }
        if (op.kind == OpKind::attention_core && paths.attention == AttentionPath::cudnn_sdpa) {
          const std::string error = support(op);
          if (!error.empty()) {
            paths.attention = AttentionPath::explicit_softmax;
            notes.push_back(fmt::format("attention: {} fell back to the explicit path: {}", op.path, error));
            changed = true;
          }
        }
      }
    }
    for (const std::string& n : notes) {
      if (!paths.note.empty()) paths.note += "; ";
      paths.note += n;
    }
    return paths;
  }

 private:
  // The cuDNN handle and graph cache, made on first use; null (with cudnn_error_) when cuDNN cannot start.
  std::shared_ptr<CudnnGraphs> cudnn() {
    if (graphs_ || !cudnn_error_.empty()) return graphs_;
    try {
      graphs_ = std::make_shared<CudnnGraphs>(device_);
    } catch (const std::exception& e) {  // BackendError, or OutOfMemory from cuDNN's handle allocation
      cudnn_error_ = e.what();
    }
    return graphs_;
  }

  int device_;
  std::shared_ptr<CudnnGraphs> graphs_;
  std::string cudnn_error_;
  std::optional<uint64_t> in_use_at_start_;  // device memory in use at the first prepare (see prepare)
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = device_count();
  if (count == 0) throw UsageError(fmt::format("--backend cuda: no CUDA device: {}", no_device_reason()));
  if (device < 0 || device >= count)
    throw UsageError(fmt::format("--device {}: there are {} CUDA device(s), numbered from 0", device, count));
  // The kernels (bf16 arithmetic) and cuDNN's fused attention need Ampere or newer: an older GPU (a V100, a
  // T4) would fail at its first launch with "no kernel image"; said up front instead.
  cudaDeviceProp prop{};
  BSW_CUDA(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 8)
    throw UsageError(
        fmt::format("--backend cuda: device {} ({}) has compute capability {}.{}; batchsweep's CUDA backend "
                    "needs 8.0 or newer "
                    "(Ampere, Ada, Hopper): `plan --backend cuda --memory` still sizes it",
                    device, prop.name, prop.major, prop.minor));
  return std::make_unique<CudaBackend>(device);
}

}  // namespace bsw::cuda
