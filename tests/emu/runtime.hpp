// The CPU emulator's runtime, shared by the fake CUDA runtime (fake_cudart.cpp), the fake cuBLASLt
// (fake_cublaslt.cpp) and the emulated kernels (cuda_emu.hpp): "device" memory is host memory that the fake
// runtime tracks, every stream runs its work at once on the calling thread, and a stream that is capturing a
// CUDA graph records the work instead, for cudaGraphLaunch to replay.
//
// What this emulates is the CUDA programming model, not a GPU: it checks our launch configurations, index
// arithmetic, reductions, library arguments, graph capture and memory plan on a machine without a device. It
// says nothing about speed, and races that only real concurrency shows can hide here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace bsw::emu {

// Runs `work` now, or appends it to the graph the stream is capturing. cudaErrorInvalidResourceHandle for a
// stream that was never created (or was destroyed).
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

// Makes the next cudaGetLastError() return `error`, and cudaGetErrorString of it say `message`
// (a bad launch, a kernel that touched memory outside every allocation, a deadlocked barrier).
void set_launch_error(cudaError_t error, const std::string& message);

// Makes the next cudaGraphInstantiate fail with cudaErrorMemoryAllocation (instantiation at high memory use).
void fail_next_graph_instantiate();

// True when [p, p + bytes) lies inside one live device allocation (cudaMalloc'd, not freed).
[[nodiscard]] bool device_range_ok(const void* p, std::size_t bytes);

// The messages of every launch error so far (for a test to print when a step fails).
[[nodiscard]] std::string error_log();

}  // namespace bsw::emu
