// Device code on the CPU: what kernels/*.cu need to compile as host C++ and run on the emulator. The build
// translates each kernel file (translate_kernels.cmake turns `kernel<<<config>>>(args)` into
// `kernel | ::bsw::emu::Launch{config}(args)`) and includes this header after the CUDA headers, so the
// kernels' text is the text nvcc compiles.
//
// Every CUDA thread of a block is a fiber: a block runs its threads in turn until each finishes or waits at
// __syncthreads() or a warp collective (__shfl_xor_sync, __any_sync), the same way the hardware lets no
// thread past a barrier early. A barrier some threads can never reach, a collective whose lanes have exited,
// or a shuffle from an exited lane is an error (the launch fails as it could hang or read garbage on a GPU).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "runtime.hpp"

namespace bsw::emu {

struct ThreadContext {
  uint3 thread{}, block{};
  dim3 block_dim, grid_dim;
};

// The emulated thread running now (valid only inside a kernel).
[[nodiscard]] const ThreadContext& current();

// Where a collective is written. Threads of a block (lanes of a warp) meeting at different ones is undefined
// on a GPU (__syncthreads is barrier.sync.aligned) and an error here.
struct Site {
  const char* file;
  int line;
};

void syncthreads_at(Site site);
// A warp-wide exchange: every lane of the warp passes its 8 bytes and the index of the lane it reads.
[[nodiscard]] uint64_t warp_shuffle(unsigned mask, uint64_t bits, int source_lane, Site site);
[[nodiscard]] bool warp_any(unsigned mask, bool predicate, Site site);

// Registers a __shared__ array (the translated kernels call this after each declaration): the first thread of
// each block to reach it fills it with NaN bits, so a read before any write of this block shows.
void shared_memory(void* p, std::size_t bytes);

// Pointer arguments of a kernel must point into live device memory (a host pointer faults on a GPU).
// Returns an empty string, or what is wrong with argument `index`.
[[nodiscard]] std::string check_pointer_argument(const void* p, int index);

// Runs body once per thread of the grid (through enqueue, so a capturing stream records the launch).
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, const char* file, int line,
            std::function<void()> body);

template <class... A>
struct PendingLaunch {
  dim3 grid, block;
  std::size_t shared_bytes;
  cudaStream_t stream;
  const char* file;
  int line;
  std::tuple<A...> args;
};

// The launch configuration; applied to arguments it becomes a PendingLaunch, which `kernel | pending` runs.
struct Launch {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  const char* file;  // where the launch is written (the kernel file, through #line), for error messages
  int line;
  Launch(dim3 g, dim3 b, std::size_t shared = 0, cudaStream_t s = nullptr, const char* f = __builtin_FILE(),
         int l = __builtin_LINE())
      : grid(g), block(b), shared_bytes(shared), stream(s), file(f), line(l) {}
  template <class... A>
  PendingLaunch<std::decay_t<A>...> operator()(A&&... args) const {
    return {grid,
            block,
            shared_bytes,
            stream,
            file,
            line,
            std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
  }
};

template <class Kernel, class... A>
void operator|(Kernel kernel, PendingLaunch<A...>&& pending) {
  std::string wrong;
  int index = 0;
  std::apply(
      [&](const auto&... arg) {
        const auto check = [&](const auto& v) {
          if constexpr (std::is_pointer_v<std::decay_t<decltype(v)>>)
            if (wrong.empty()) wrong = check_pointer_argument(v, index);
          ++index;
        };
        (check(arg), ...);
      },
      pending.args);
  if (!wrong.empty()) {
    set_launch_error(cudaErrorIllegalAddress,
                     std::string(pending.file) + ":" + std::to_string(pending.line) + ": " + wrong);
    return;
  }
  launch(pending.grid, pending.block, pending.shared_bytes, pending.stream, pending.file, pending.line,
         [kernel, args = std::move(pending.args)]() { std::apply(kernel, args); });
}

template <class T>
T shuffle_xor(unsigned mask, T v, int lane_mask, Site site) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const int lane = static_cast<int>(
      ((current().thread.z * current().block_dim.y + current().thread.y) * current().block_dim.x +
       current().thread.x) %
      32);
  bits = warp_shuffle(mask, bits, lane ^ lane_mask, site);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace bsw::emu

// The CUDA keywords and built-ins, for host C++.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (::bsw::emu::current().thread)
#define blockIdx (::bsw::emu::current().block)
#define blockDim (::bsw::emu::current().block_dim)
#define gridDim (::bsw::emu::current().grid_dim)
#define __syncthreads() ::bsw::emu::syncthreads_at(::bsw::emu::Site{__FILE__, __LINE__})

// The call site comes from the default arguments, evaluated where the kernel calls these.
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
  return ::bsw::emu::shuffle_xor(mask, v, lane_mask, ::bsw::emu::Site{file, line});
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return ::bsw::emu::warp_any(mask, predicate != 0, ::bsw::emu::Site{file, line}) ? 1 : 0;
}

// One host thread runs every emulated thread, so atomics are plain read-modify-writes.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}
inline int atomicExch(int* p, int v) {
  const int old = *p;
  *p = v;
  return old;
}

inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __dsub_rn(double a, double b) {
  return a - b;
}
template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
  return a < b ? b : a;
}
