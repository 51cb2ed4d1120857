// Shared device helpers of the kernels (no fmt here: GCC's -Wstringop-overflow misfires on fmt 9 under nvcc):
// storage-type conversions (fp32 math over float, bf16 and fp16 storage), dtype dispatch for launchers, grid
// sizing and block/warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <string>

#include "backends/cuda/check.hpp"
#include "backends/cuda/kernels.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cuda::kernels {

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// Calls f(T{}) with T the C++ type of a storage dtype.
template <class F>
void dispatch(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    case DType::f16:
      f(__half{});
      return;
    case DType::i32:
      break;
  }
  throw BackendError(std::string(what) + ": dtype " + std::string(to_string(t)) +
                     " is not a floating-point storage type");
}

// Throws BackendError naming the launcher when a shape assumption fails.
inline void require(bool ok, const char* what, const char* condition) {
  if (!ok) throw BackendError(std::string(what) + ": shape check failed: " + condition);
}
#define BSW_REQUIRE(cond, what) ::bsw::cuda::kernels::require((cond), (what), #cond)

inline constexpr int kThreads = 256;

// The most blocks a grid-stride loop launches: enough to fill any GPU many times over, and the loops stride
// over the rest.
inline constexpr int64_t kMaxBlocks = 65535 * 8;

// Blocks for a grid-stride loop over n elements (capped at kMaxBlocks).
[[nodiscard]] inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. `shared`
// holds 32.
template <class V>
__device__ V block_sum(V v, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  V total = lane < warps ? shared[lane] : V(0);
  return warp_sum(total);
}

__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(m);
}

}  // namespace bsw::cuda::kernels
