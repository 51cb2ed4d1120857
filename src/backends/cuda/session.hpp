// Internal to the CUDA backend: making a session (src/backends/cuda/session.cpp) for the backend object.
#pragma once

#include <memory>

#include "batchsweep/backend.hpp"

namespace bsw::cuda {

class CudnnGraphs;

// Allocates the plan's buffers on `device` (the current device must be set) and initialises them. Throws
// OutOfMemory when they do not fit or exceed options.memory_limit_bytes (everything allocated is freed
// first). `cudnn` runs the plan's cuDNN paths (plan.request.paths); it may be null when the plan uses none.
// `in_use_at_start`: the device memory in use (total - free) when the backend first prepared, with this
// process's own context, cuBLASLt and cuDNN in it; memory in use beyond it is another process's.
[[nodiscard]] std::unique_ptr<Session> make_cuda_session(const Graph& graph, const Plan& plan,
                                                         const SessionOptions& options, int device,
                                                         std::shared_ptr<CudnnGraphs> cudnn,
                                                         uint64_t in_use_at_start);

}  // namespace bsw::cuda
