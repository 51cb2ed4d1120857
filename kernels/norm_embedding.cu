// Layernorm over the last dimension (eps 1e-5, one warp per row, fp32 statistics) forward and backward, and
// the token + position embedding forward and backward. Kernels first, then their launchers.
#include <algorithm>

#include "common.cuh"

namespace bsw::cuda::kernels {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                                         float* rstd, int64_t rows, int64_t dim) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const T* xr = x + row * dim;
  float sum = 0.0f;
  for (int64_t i = lane; i < dim; i += 32) sum += to_f32(xr[i]);
  const float mu = warp_sum(sum) / static_cast<float>(dim);
  float sq = 0.0f;
  for (int64_t i = lane; i < dim; i += 32) {
    const float d = to_f32(xr[i]) - mu;
    sq += d * d;
  }
  const float rs = rsqrtf(warp_sum(sq) / static_cast<float>(dim) + kLayerNormEps);
  T* yr = y + row * dim;
  for (int64_t i = lane; i < dim; i += 32)
    yr[i] = from_f32<T>((to_f32(xr[i]) - mu) * rs * to_f32(gamma[i]) + to_f32(beta[i]));
  if (lane == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
}

template <class T>
__global__ void layernorm_dx_kernel(const T* x, const T* gamma, const float* mean, const float* rstd,
                                    const T* dy, T* dx, int64_t rows, int64_t dim) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const T* xr = x + row * dim;
  const T* dyr = dy + row * dim;
  const float mu = mean[row], rs = rstd[row];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int64_t i = lane; i < dim; i += 32) {
    const float xhat = (to_f32(xr[i]) - mu) * rs;
    const float dxhat = to_f32(dyr[i]) * to_f32(gamma[i]);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  const float mean_dxhat = warp_sum(sum_dxhat) / static_cast<float>(dim);
  const float mean_dxhat_xhat = warp_sum(sum_dxhat_xhat) / static_cast<float>(dim);
  T* dxr = dx + row * dim;
  for (int64_t i = lane; i < dim; i += 32) {
    const float xhat = (to_f32(xr[i]) - mu) * rs;
    dxr[i] = from_f32<T>(rs * (to_f32(dyr[i]) * to_f32(gamma[i]) - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// dgamma[c] += sum_r dy * xhat, dbeta[c] += sum_r dy: a (32 x 8) block owns 32 columns and a slab of rows.
template <class T>
__global__ void layernorm_param_grad_kernel(const T* x, const float* mean, const float* rstd, const T* dy,
                                            float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                                            int64_t rows_per_slab) {
  __shared__ float partial_g[8][33];
  __shared__ float partial_b[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slab;
  const int64_t r1 = min(rows, r0 + rows_per_slab);
  float g = 0.0f, b = 0.0f;
  if (c < dim) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = to_f32(dy[r * dim + c]);
      g += d * (to_f32(x[r * dim + c]) - mean[r]) * rstd[r];
      b += d;
    }
  }
  partial_g[threadIdx.y][threadIdx.x] = g;
  partial_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < dim) {
    float tg = 0.0f, tb = 0.0f;
    for (int j = 0; j < 8; ++j) {
      tg += partial_g[j][threadIdx.x];
      tb += partial_b[j][threadIdx.x];
    }
    atomicAdd(dgamma + c, tg);
    atomicAdd(dbeta + c, tb);
  }
}

template <class T>
__global__ void embedding_forward_kernel(const int32_t* ids, const T* tokens, const T* positions, T* y,
                                         int64_t batch, int64_t seq, int64_t dim) {
  const int64_t n = batch * seq * dim;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t d = i % dim;
    const int64_t bt = i / dim;
    const int64_t t = bt % seq;
    const int64_t id = ids[bt];
    y[i] = from_f32<T>(to_f32(tokens[id * dim + d]) + to_f32(positions[t * dim + d]));
  }
}

template <class T>
__global__ void embedding_tokens_backward_kernel(const int32_t* ids, const T* dy, float* dtokens,
                                                 int64_t rows, int64_t dim) {
  const int64_t n = rows * dim;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t d = i % dim;
    atomicAdd(dtokens + static_cast<int64_t>(ids[i / dim]) * dim + d, to_f32(dy[i]));
  }
}

template <class T>
__global__ void add_positions_kernel(T* y, const T* positions, int64_t batch, int64_t count) {
  const int64_t n = batch * count;
  for (int64_t i = global_index(); i < n; i += grid_stride())
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(positions[i % count]));
}

[[nodiscard]] dim3 row_grid(int64_t rows) {
  return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
}

}  // namespace

void layernorm_forward(DType t, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim, cudaStream_t stream) {
  BSW_REQUIRE(rows >= 0 && dim > 0, "layernorm_forward");
  BSW_REQUIRE((rows + kRowsPerBlock - 1) / kRowsPerBlock <= 0x7FFFFFFF, "layernorm_forward");
  if (rows == 0) return;
  dispatch(t, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<row_grid(rows), dim3(32, kRowsPerBlock), 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
        static_cast<T*>(y), mean, rstd, rows, dim);
  });
  BSW_CUDA_LAUNCHED();
}

void layernorm_backward(DType t, const void* x, const void* gamma, const float* mean, const float* rstd,
                        const void* dy, void* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                        cudaStream_t stream) {
  BSW_REQUIRE(rows >= 0 && dim > 0, "layernorm_backward");
  BSW_REQUIRE(dgamma != nullptr && dbeta != nullptr, "layernorm_backward");
  if (rows == 0) return;
  const int64_t rows_per_slab = std::max<int64_t>(256, (rows + 65534) / 65535);
  const dim3 param_grid(static_cast<unsigned>((dim + 31) / 32),
                        static_cast<unsigned>((rows + rows_per_slab - 1) / rows_per_slab));
  dispatch(t, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    if (dx != nullptr) {
      layernorm_dx_kernel<T><<<row_grid(rows), dim3(32, kRowsPerBlock), 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), mean, rstd, static_cast<const T*>(dy),
          static_cast<T*>(dx), rows, dim);
    }
    layernorm_param_grad_kernel<T><<<param_grid, dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(x), mean, rstd, static_cast<const T*>(dy), dgamma, dbeta, rows, dim,
        rows_per_slab);
  });
  BSW_CUDA_LAUNCHED();
}

void embedding_forward(DType t, const int32_t* ids, const void* tokens, const void* positions, void* y,
                       int64_t batch, int64_t seq, int64_t dim, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && seq > 0 && dim > 0, "embedding_forward");
  const int64_t n = batch * seq * dim;
  if (n == 0) return;
  dispatch(t, "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(ids, static_cast<const T*>(tokens),
                                                                      static_cast<const T*>(positions),
                                                                      static_cast<T*>(y), batch, seq, dim);
  });
  BSW_CUDA_LAUNCHED();
}

void embedding_backward(DType t, const int32_t* ids, const void* dy, float* dtokens, float* dpositions,
                        int64_t batch, int64_t seq, int64_t dim, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && seq > 0 && dim > 0, "embedding_backward");
  const int64_t n = batch * seq * dim;
  if (n == 0) return;
  dispatch(t, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_tokens_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(ids, static_cast<const T*>(dy), dtokens, batch * seq, dim);
  });
  BSW_CUDA_LAUNCHED();
  column_sum_accumulate(t, dy, dpositions, batch, seq * dim, stream);
}

void add_positions(DType t, void* y, const void* positions, int64_t batch, int64_t count,
                   cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && count > 0, "add_positions");
  const int64_t n = batch * count;
  if (n == 0) return;
  dispatch(t, "add_positions", [&](auto tag) {
    using T = decltype(tag);
    add_positions_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(positions), batch, count);
  });
  BSW_CUDA_LAUNCHED();
}

}  // namespace bsw::cuda::kernels
