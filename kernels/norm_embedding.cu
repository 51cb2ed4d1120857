// Layernorm over the last dimension (eps 1e-5, one warp per row, fp32 statistics) forward and backward, batch
// normalization per channel (a block per channel and slice of the batch, then a warp per channel combines the
// slices: deterministic, no atomics), and the token + position embedding forward and backward. Kernels first,
// then their launchers.
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
// The slabs add into dgamma/dbeta with atomics, in whatever order they finish: these two gradients may differ
// in their last bits from run to run, as the embedding's token gradient below may.
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

// ---- batch normalization: x [N, C, S]. Statistics per channel over slices of the batch (blockIdx.y), then a
// warp per channel combines the slices. An image's block takes one channel; a vector's (S == 1) block of 32 x
// 8 threads takes 32 neighbouring features, so its warps read contiguous memory. Indices step forward without
// a division per element: a 64-bit division costs more than these kernels' memory traffic.
constexpr float kBatchNormEps = 1e-5f;
constexpr int kBatchNormThreads = 256;
constexpr int kChannelsPerBlock = 8;  // finalize: one warp per channel
constexpr int kFeatureRows = 8;       // vectors: a 32 x 8 block, 8 rows at a time

// Chan's parallel combination of (count, mean, M2) moments: b into a.
__device__ __forceinline__ void combine_moments(float& n, float& mean, float& m2, float nb, float meanb,
                                                float m2b) {
  if (nb == 0.0f) return;
  const float total = n + nb;
  const float delta = meanb - mean;
  const float fb = nb / total;
  mean += delta * fb;
  m2 += m2b + delta * delta * n * fb;
  n = total;
}

__device__ __forceinline__ void add_moment(float& n, float& mean, float& m2, float v) {
  n += 1.0f;
  const float d = v - mean;
  mean += d / n;
  m2 += d * (v - mean);
}

__device__ __forceinline__ void warp_combine_moments(float& n, float& mean, float& m2) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float nb = __shfl_xor_sync(0xFFFFFFFFu, n, offset);
    const float meanb = __shfl_xor_sync(0xFFFFFFFFu, mean, offset);
    const float m2b = __shfl_xor_sync(0xFFFFFFFFu, m2, offset);
    combine_moments(n, mean, m2, nb, meanb, m2b);
  }
}

// Image: partials[(c * slabs + slab) * 3 + {0, 1, 2}] = count, mean, M2 of channel blockIdx.x over the
// slice's samples (Welford per thread; thread t starts at the slice's element t and steps by blockDim.x).
template <class T>
__global__ void batchnorm_moments_kernel(const T* x, float* partials, int64_t batch, int64_t channels,
                                         int64_t spatial, int64_t samples_per_slab) {
  __shared__ float shared[3][32];
  const int64_t c = blockIdx.x, slab = blockIdx.y, slabs = gridDim.y;
  const int64_t n1 = min(batch, (slab + 1) * samples_per_slab);
  const int64_t dn = blockDim.x / spatial, ds = blockDim.x % spatial;
  int64_t sample = slab * samples_per_slab + threadIdx.x / spatial, s = threadIdx.x % spatial;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  while (sample < n1) {
    add_moment(n, mean, m2, to_f32(x[(sample * channels + c) * spatial + s]));
    s += ds;
    sample += dn;
    if (s >= spatial) {
      s -= spatial;
      ++sample;
    }
  }
  warp_combine_moments(n, mean, m2);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    shared[0][warp] = n;
    shared[1][warp] = mean;
    shared[2][warp] = m2;
  }
  __syncthreads();
  if (warp != 0) return;
  const bool have = lane < static_cast<int>(blockDim.x / 32);
  n = have ? shared[0][lane] : 0.0f;
  mean = have ? shared[1][lane] : 0.0f;
  m2 = have ? shared[2][lane] : 0.0f;
  warp_combine_moments(n, mean, m2);
  if (lane == 0) {
    float* out = partials + (c * slabs + slab) * 3;
    out[0] = n;
    out[1] = mean;
    out[2] = m2;
  }
}

// Vector: the same partials for features blockIdx.x * 32 + threadIdx.x, rows of the slice by threadIdx.y.
template <class T>
__global__ void batchnorm_feature_moments_kernel(const T* x, float* partials, int64_t batch, int64_t channels,
                                                 int64_t samples_per_slab) {
  __shared__ float shared[3][kFeatureRows][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x, slab = blockIdx.y, slabs = gridDim.y;
  const int64_t n1 = min(batch, (slab + 1) * samples_per_slab);
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  if (c < channels)
    for (int64_t r = slab * samples_per_slab + threadIdx.y; r < n1; r += kFeatureRows)
      add_moment(n, mean, m2, to_f32(x[r * channels + c]));
  shared[0][threadIdx.y][threadIdx.x] = n;
  shared[1][threadIdx.y][threadIdx.x] = mean;
  shared[2][threadIdx.y][threadIdx.x] = m2;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int j = 1; j < kFeatureRows; ++j)
    combine_moments(n, mean, m2, shared[0][j][threadIdx.x], shared[1][j][threadIdx.x],
                    shared[2][j][threadIdx.x]);
  float* out = partials + (c * slabs + slab) * 3;
  out[0] = n;
  out[1] = mean;
  out[2] = m2;
}

// One warp per channel combines its slices: the batch's mean and 1/std, and the running statistics' step.
__global__ void batchnorm_finalize_kernel(const float* partials, int64_t slabs, int64_t channels, float* mean,
                                          float* invstd, float* running_mean, float* running_var,
                                          float momentum) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + threadIdx.y;
  if (c >= channels) return;
  const int lane = threadIdx.x;
  float n = 0.0f, mu = 0.0f, m2 = 0.0f;
  for (int64_t j = lane; j < slabs; j += 32) {
    const float* p = partials + (c * slabs + j) * 3;
    combine_moments(n, mu, m2, p[0], p[1], p[2]);
  }
  warp_combine_moments(n, mu, m2);
  if (lane != 0) return;
  const float var = m2 / n;
  mean[c] = mu;
  invstd[c] = rsqrtf(var + kBatchNormEps);
  if (running_mean != nullptr) running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mu;
  if (running_var != nullptr) {
    const float unbiased = n > 1.0f ? m2 / (n - 1.0f) : var;
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbiased;
  }
}

// Calls f(i, c) for this thread's grid-stride elements i of [N, C, S], c the channel of i: (s, c) step by the
// stride's own (ds, dc) with a carry, so no element pays for a division.
template <class F>
__device__ __forceinline__ void for_each_with_channel(int64_t n, int64_t channels, int64_t spatial, F&& f) {
  const int64_t stride = grid_stride();
  int64_t i = global_index();
  if (i >= n) return;
  int64_t s = i % spatial, c = (i / spatial) % channels;
  const int64_t ds = stride % spatial, dc = (stride / spatial) % channels;
  for (; i < n; i += stride) {
    f(i, c);
    s += ds;
    if (s >= spatial) {
      s -= spatial;
      ++c;
    }
    c += dc;
    if (c >= channels) c -= channels;
  }
}

// y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]; from_variance reads `scale` as a variance to invert.
template <class T>
__global__ void batchnorm_apply_kernel(const T* x, const T* gamma, const T* beta, const float* mean,
                                       const float* scale, bool from_variance, T* y, int64_t n,
                                       int64_t channels, int64_t spatial) {
  for_each_with_channel(n, channels, spatial, [&](int64_t i, int64_t c) {
    const float rs = from_variance ? rsqrtf(scale[c] + kBatchNormEps) : scale[c];
    y[i] = from_f32<T>((to_f32(x[i]) - mean[c]) * rs * to_f32(gamma[c]) + to_f32(beta[c]));
  });
}

// Image: partials[(c * slabs + slab) * 2 + {0, 1}] = sum of dy, sum of dy * xhat over the slice.
template <class T>
__global__ void batchnorm_grad_partials_kernel(const T* x, const T* dy, const float* mean,
                                               const float* invstd, float* partials, int64_t batch,
                                               int64_t channels, int64_t spatial, int64_t samples_per_slab) {
  __shared__ float shared[32];
  const int64_t c = blockIdx.x, slab = blockIdx.y, slabs = gridDim.y;
  const int64_t n1 = min(batch, (slab + 1) * samples_per_slab);
  const int64_t dn = blockDim.x / spatial, ds = blockDim.x % spatial;
  int64_t sample = slab * samples_per_slab + threadIdx.x / spatial, s = threadIdx.x % spatial;
  const float mu = mean[c], rs = invstd[c];
  float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
  while (sample < n1) {
    const int64_t k = (sample * channels + c) * spatial + s;
    const float g = to_f32(dy[k]);
    sum_dy += g;
    sum_dy_xhat += g * (to_f32(x[k]) - mu) * rs;
    s += ds;
    sample += dn;
    if (s >= spatial) {
      s -= spatial;
      ++sample;
    }
  }
  sum_dy = block_sum(sum_dy, shared);
  sum_dy_xhat = block_sum(sum_dy_xhat, shared);
  if (threadIdx.x == 0) {
    partials[(c * slabs + slab) * 2] = sum_dy;
    partials[(c * slabs + slab) * 2 + 1] = sum_dy_xhat;
  }
}

// Vector: the same sums for features blockIdx.x * 32 + threadIdx.x.
template <class T>
__global__ void batchnorm_feature_grad_partials_kernel(const T* x, const T* dy, const float* mean,
                                                       const float* invstd, float* partials, int64_t batch,
                                                       int64_t channels, int64_t samples_per_slab) {
  __shared__ float shared[2][kFeatureRows][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x, slab = blockIdx.y, slabs = gridDim.y;
  const int64_t n1 = min(batch, (slab + 1) * samples_per_slab);
  float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
  if (c < channels) {
    const float mu = mean[c], rs = invstd[c];
    for (int64_t r = slab * samples_per_slab + threadIdx.y; r < n1; r += kFeatureRows) {
      const float g = to_f32(dy[r * channels + c]);
      sum_dy += g;
      sum_dy_xhat += g * (to_f32(x[r * channels + c]) - mu) * rs;
    }
  }
  shared[0][threadIdx.y][threadIdx.x] = sum_dy;
  shared[1][threadIdx.y][threadIdx.x] = sum_dy_xhat;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  for (int j = 1; j < kFeatureRows; ++j) {
    sum_dy += shared[0][j][threadIdx.x];
    sum_dy_xhat += shared[1][j][threadIdx.x];
  }
  partials[(c * slabs + slab) * 2] = sum_dy;
  partials[(c * slabs + slab) * 2 + 1] = sum_dy_xhat;
}

// One warp per channel: dbeta[c] += sum dy, dgamma[c] += sum dy * xhat; means[c * 2 + {0, 1}] = their means.
__global__ void batchnorm_grad_finalize_kernel(const float* partials, int64_t slabs, int64_t channels,
                                               float count, float* dgamma, float* dbeta, float* means) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + threadIdx.y;
  if (c >= channels) return;
  float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
  for (int64_t j = threadIdx.x; j < slabs; j += 32) {
    sum_dy += partials[(c * slabs + j) * 2];
    sum_dy_xhat += partials[(c * slabs + j) * 2 + 1];
  }
  sum_dy = warp_sum(sum_dy);
  sum_dy_xhat = warp_sum(sum_dy_xhat);
  if (threadIdx.x != 0) return;
  dbeta[c] += sum_dy;
  dgamma[c] += sum_dy_xhat;
  means[c * 2] = sum_dy / count;
  means[c * 2 + 1] = sum_dy_xhat / count;
}

template <class T>
__global__ void batchnorm_dx_kernel(const T* x, const T* dy, const T* gamma, const float* mean,
                                    const float* invstd, const float* means, T* dx, int64_t n,
                                    int64_t channels, int64_t spatial) {
  for_each_with_channel(n, channels, spatial, [&](int64_t i, int64_t c) {
    const float rs = invstd[c];
    const float xhat = (to_f32(x[i]) - mean[c]) * rs;
    dx[i] = from_f32<T>(to_f32(gamma[c]) * rs * (to_f32(dy[i]) - means[c * 2] - xhat * means[c * 2 + 1]));
  });
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
  BSW_REQUIRE((rows + kRowsPerBlock - 1) / kRowsPerBlock <= 0x7FFFFFFF, "layernorm_backward");
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
      BSW_CUDA_LAUNCHED();  // each launch checked on its own line: an error names the kernel that failed
    }
    layernorm_param_grad_kernel<T><<<param_grid, dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(x), mean, rstd, static_cast<const T*>(dy), dgamma, dbeta, rows, dim,
        rows_per_slab);
  });
  BSW_CUDA_LAUNCHED();
}

namespace {

struct BatchNormGrid {
  int64_t slabs = 1, samples_per_slab = 1;
  bool features = false;  // a vector (S == 1): 32 x 8 blocks of 32 features
  dim3 reduce, block, finalize;
};

[[nodiscard]] BatchNormGrid batchnorm_grid(const char* what, int64_t batch, int64_t channels,
                                           int64_t spatial) {
  require(batch > 0 && channels > 0 && channels <= 0x7FFFFFFF && spatial > 0, what,
          "batch > 0 && 0 < channels < 2^31 && spatial > 0");
  BatchNormGrid g;
  g.slabs = cuda_batchnorm_slabs(batch, channels, spatial);
  g.samples_per_slab = (batch + g.slabs - 1) / g.slabs;
  g.slabs = (batch + g.samples_per_slab - 1) / g.samples_per_slab;  // no empty slice
  require(g.slabs <= 65535, what, "slabs <= 65535");
  g.features = spatial == 1;
  g.reduce = dim3(static_cast<unsigned>(g.features ? (channels + 31) / 32 : channels),
                  static_cast<unsigned>(g.slabs));
  g.block = g.features ? dim3(32, kFeatureRows) : dim3(kBatchNormThreads);
  g.finalize = dim3(static_cast<unsigned>((channels + kChannelsPerBlock - 1) / kChannelsPerBlock));
  return g;
}

}  // namespace

void batchnorm_statistics(DType t, const void* x, float* mean, float* invstd, float* running_mean,
                          float* running_var, int64_t batch, int64_t channels, int64_t spatial,
                          float momentum, float* workspace, cudaStream_t stream) {
  BSW_REQUIRE(mean != nullptr && invstd != nullptr && workspace != nullptr, "batchnorm_statistics");
  const BatchNormGrid g = batchnorm_grid("batchnorm_statistics", batch, channels, spatial);
  dispatch(t, "batchnorm_statistics", [&](auto tag) {
    using T = decltype(tag);
    if (g.features) {
      batchnorm_feature_moments_kernel<T><<<g.reduce, g.block, 0, stream>>>(
          static_cast<const T*>(x), workspace, batch, channels, g.samples_per_slab);
    } else {
      batchnorm_moments_kernel<T><<<g.reduce, g.block, 0, stream>>>(
          static_cast<const T*>(x), workspace, batch, channels, spatial, g.samples_per_slab);
    }
  });
  BSW_CUDA_LAUNCHED();
  batchnorm_finalize_kernel<<<g.finalize, dim3(32, kChannelsPerBlock), 0, stream>>>(
      workspace, g.slabs, channels, mean, invstd, running_mean, running_var, momentum);
  BSW_CUDA_LAUNCHED();
}

void batchnorm_apply(DType t, const void* x, const void* gamma, const void* beta, const float* mean,
                     const float* scale, bool from_variance, void* y, int64_t batch, int64_t channels,
                     int64_t spatial, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && channels > 0 && spatial > 0, "batchnorm_apply");
  const int64_t n = batch * channels * spatial;
  if (n == 0) return;
  dispatch(t, "batchnorm_apply", [&](auto tag) {
    using T = decltype(tag);
    batchnorm_apply_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), mean, scale,
        from_variance, static_cast<T*>(y), n, channels, spatial);
  });
  BSW_CUDA_LAUNCHED();
}

void batchnorm_backward(DType t, const void* x, const void* gamma, const float* mean, const float* invstd,
                        const void* dy, void* dx, float* dgamma, float* dbeta, int64_t batch,
                        int64_t channels, int64_t spatial, float* workspace, cudaStream_t stream) {
  BSW_REQUIRE(dgamma != nullptr && dbeta != nullptr && workspace != nullptr, "batchnorm_backward");
  const BatchNormGrid g = batchnorm_grid("batchnorm_backward", batch, channels, spatial);
  // The per-channel means follow the slices' partial sums (cuda_batchnorm_workspace_floats).
  float* means = workspace + channels * 3 * cuda_batchnorm_slabs(batch, channels, spatial);
  const int64_t n = batch * channels * spatial;
  dispatch(t, "batchnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    if (g.features) {
      batchnorm_feature_grad_partials_kernel<T>
          <<<g.reduce, g.block, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(dy), mean,
                                             invstd, workspace, batch, channels, g.samples_per_slab);
    } else {
      batchnorm_grad_partials_kernel<T>
          <<<g.reduce, g.block, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(dy), mean,
                                             invstd, workspace, batch, channels, spatial, g.samples_per_slab);
    }
    BSW_CUDA_LAUNCHED();
    batchnorm_grad_finalize_kernel<<<g.finalize, dim3(32, kChannelsPerBlock), 0, stream>>>(
        workspace, g.slabs, channels, static_cast<float>(batch * spatial), dgamma, dbeta, means);
    BSW_CUDA_LAUNCHED();
    if (dx != nullptr) {
      batchnorm_dx_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(gamma), mean, invstd,
          means, static_cast<T*>(dx), n, channels, spatial);
    }
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
