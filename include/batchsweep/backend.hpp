// The backend interface: prepare a session that owns exactly a plan's buffers, then time steps on it.
// A backend knows nothing of how batches are chosen or how results are printed.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/plan.hpp"

namespace bsw {

// What a backend knows about the device it runs on. `details` holds backend-specific facts (SM count, clocks,
// driver/CUDA/cuDNN/cuBLAS versions, BLAS library, threads) that reports copy verbatim.
struct DeviceInfo {
  std::string backend;  // "cpu", "cuda", "scripted", "pytorch-eager", ...
  std::string name;
  uint64_t memory_total_bytes = 0;
  std::optional<double> peak_flops;  // per second, for the session's precision, used for MFU
  std::string peak_flops_source;     // "calibrated", "spec sheet (configs/gpus.json)", ...
  nlohmann::json details = nlohmann::json::object();
};

struct SessionOptions {
  uint64_t seed = 1234;
  bool cuda_graphs = true;                     // cuda: capture the step as a graph and replay it
  std::optional<uint64_t> memory_limit_bytes;  // refuse plans above this (the emulated smaller card)
  // run --rounds: which measurement of its point this session is (1 the first). The real backends run the
  // same step every time; the scripted device draws other noise in each round.
  int round = 1;
};

struct StepResult {
  double step_ms =
      0;            // wall time of the step on the device (CUDA events on the GPU, steady_clock on the CPU)
  double loss = 0;  // mean loss of the step (train), NaN in inference
  bool skipped = false;  // fp16: the step overflowed and the optimizer skipped it (loss scale lowered)
  bool finite = true;    // false when the loss or a gradient was NaN/Inf and not an fp16 skip: an fp16
                         // overflow at the lowest loss scale (1), which no lower scale can absorb, is
                         // skipped and not finite
};

struct SessionMemory {
  uint64_t planned_bytes = 0;                 // Plan::memory.total_bytes()
  uint64_t allocated_bytes = 0;               // what the backend's own allocator handed out
  std::optional<uint64_t> device_used_bytes;  // cudaMemGetInfo after prepare minus before, where readable
};

class Session {
 public:
  virtual ~Session() = default;
  // One inference batch, or one optimizer step over `accumulation` micro-batches. Throws BackendError.
  [[nodiscard]] virtual StepResult step() = 0;
  [[nodiscard]] virtual SessionMemory memory() const = 0;
  // Facts about how this session runs (attention path, graphs on/off, loss scale, ...) for the report.
  [[nodiscard]] virtual nlohmann::json details() const { return nlohmann::json::object(); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual BackendKind kind() const = 0;
  [[nodiscard]] virtual DeviceInfo device(Precision precision) const = 0;
  // Whether prepare() can run out of memory below the plan's budget (a GPU: other tenants, fragmentation).
  // When false — the CPU, whose host allocator overcommits — the plan alone decides what fits, and sweeps
  // need not prepare a batch just to learn whether it fits.
  [[nodiscard]] virtual bool reports_out_of_memory() const { return true; }
  // Where reports_out_of_memory() is false: whether `bytes` cannot be held now, though the budget allows
  // them (the CPU: more than MemAvailable, other processes holding the rest), and why — what prepare()
  // would throw OutOfMemory for, asked without preparing, so a fit probe does not call such a batch a fit.
  [[nodiscard]] virtual std::optional<std::string> over_memory_now(uint64_t bytes) const {
    static_cast<void>(bytes);
    return std::nullopt;
  }
  // The execution paths this backend takes for the graph at this precision and mode, given the ones asked for
  // (requested_cuda_paths); they decide the plan's buffers, so a sweep asks once and plans every point with
  // them. The CUDA backend checks on the device that cuDNN accepts each requested cuDNN path and falls back
  // to its own path where not, saying why in ExecutionPaths::note. The other backends have one path.
  [[nodiscard]] virtual ExecutionPaths execution_paths(const Graph& graph, Precision precision, Mode mode,
                                                       const ExecutionPaths& requested) {
    static_cast<void>(graph);
    static_cast<void>(precision);
    static_cast<void>(mode);
    static_cast<void>(requested);
    return {};
  }
  // Allocates exactly plan.buffers and initialises them (seeded). Throws OutOfMemory when they do not fit
  // (the backend stays usable), BackendError otherwise.
  [[nodiscard]] virtual std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                                         const SessionOptions& options) = 0;
};

}  // namespace bsw
