// Internal to the CUDA backend: making a session (src/backends/cuda/session.cpp) for the backend object.
#pragma once

#include <memory>

#include "batchsweep/backend.hpp"

namespace bsw::cuda {

class CudnnGraphs;

// Allocates the plan's buffers on `device` (the current device must be set) and initialises them. Throws
// OutOfMemory when they do not fit or exceed options.memory_limit_bytes (everything allocated is freed
// first). `cudnn` runs the plan's cuDNN paths (plan.request.paths); it may be null when the plan uses none.
[[nodiscard]] std::unique_ptr<Session> make_cuda_session(const Graph& graph, const Plan& plan,
                                                         const SessionOptions& options, int device,
                                                         std::shared_ptr<CudnnGraphs> cudnn);

}  // namespace bsw::cuda
