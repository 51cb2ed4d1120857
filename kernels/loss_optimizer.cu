// Losses and the optimizer step: softmax + cross-entropy (one block per row, or one warp for up to 1024
// classes; log-sum-exp) and mse forward and
// backward, the loss mean, gradient unscaling with the overflow check of fp16 loss scaling, and fused AdamW /
// SGD over the flat fp32 parameter buffer writing the storage-dtype copy. Step values come from StepScalars
// in device memory so a captured CUDA graph replays every step. Kernels first, then their launchers.
#include <algorithm>

#include "common.cuh"

namespace bsw::cuda::kernels {
namespace {

constexpr int kRowThreads = 256;

// One row's loss (lse - x[label], by the thread at `first` 0) and its logits' gradient, (softmax - onehot) *
// grad_scale / rows, over classes first, first + stride, ...: the end of both cross-entropy kernels.
template <class T>
__device__ void finish_row(const T* x, int32_t label, int64_t row, int64_t rows, int64_t classes,
                           float max_logit, double sum_exp, int64_t first, int64_t stride, T* dlogits,
                           float* row_loss, StepScalars* scalars) {
  const bool valid = label >= 0 && label < classes;
  if (first == 0) {
    if (!valid) atomicExch(&scalars->bad_label, 1);
    const double lse = static_cast<double>(max_logit) + log(sum_exp);
    row_loss[row] = valid ? static_cast<float>(lse - static_cast<double>(to_f32(x[label]))) : 0.0f;
  }
  if (dlogits == nullptr) return;
  const double dscale = static_cast<double>(scalars->grad_scale) / static_cast<double>(rows);
  const double inv_sum = 1.0 / sum_exp;
  T* dx = dlogits + row * classes;
  for (int64_t c = first; c < classes; c += stride) {
    const double p = static_cast<double>(expf(to_f32(x[c]) - max_logit)) * inv_sum;
    dx[c] = from_f32<T>(static_cast<float>((p - (c == label ? 1.0 : 0.0)) * dscale));
  }
}

template <class T>
__global__ void cross_entropy_kernel(const T* logits, const int32_t* labels, T* dlogits, float* row_loss,
                                     int64_t rows, int64_t classes, StepScalars* scalars) {
  __shared__ float shared[32];
  __shared__ double shared_d[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  float local_max = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) local_max = fmaxf(local_max, to_f32(x[c]));
  const float max_logit = block_max(local_max, shared);
  double local_sum = 0.0;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    local_sum += static_cast<double>(expf(to_f32(x[c]) - max_logit));
  const double sum_exp = block_sum(local_sum, shared_d);
  finish_row(x, labels[row], row, rows, classes, max_logit, sum_exp, threadIdx.x, blockDim.x, dlogits,
             row_loss, scalars);
}

// The same for a classifier with few classes (at most kWarpRowClasses): one warp per row and kWarpRows rows
// per block, so a batch of a million 10-class rows is not a million mostly idle 256-thread blocks.
constexpr int64_t kWarpRowClasses = 1024;
constexpr int kWarpRows = 8;

template <class T>
__global__ void cross_entropy_warp_kernel(const T* logits, const int32_t* labels, T* dlogits, float* row_loss,
                                          int64_t rows, int64_t classes, StepScalars* scalars) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.y;
  if (row >= rows) return;  // the whole warp: threadIdx.y is the warp's
  const int lane = threadIdx.x;
  const T* x = logits + row * classes;
  float local_max = -INFINITY;
  for (int64_t c = lane; c < classes; c += 32) local_max = fmaxf(local_max, to_f32(x[c]));
  const float max_logit = warp_max(local_max);
  double local_sum = 0.0;
  for (int64_t c = lane; c < classes; c += 32)
    local_sum += static_cast<double>(expf(to_f32(x[c]) - max_logit));
  const double sum_exp = warp_sum(local_sum);
  finish_row(x, labels[row], row, rows, classes, max_logit, sum_exp, lane, 32, dlogits, row_loss, scalars);
}

template <class T>
__global__ void mse_kernel(const T* y, const T* target, T* dy, float* elem_loss, int64_t n,
                           const StepScalars* scalars) {
  const float dscale =
      static_cast<float>(2.0 * static_cast<double>(scalars->grad_scale) / static_cast<double>(n));
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float diff = to_f32(y[i]) - to_f32(target[i]);
    elem_loss[i] = diff * diff;
    if (dy != nullptr) dy[i] = from_f32<T>(diff * dscale);
  }
}

// The loss mean in two deterministic stages: each block sums its grid-stride share into partials[block]
// (the block count depends only on n), then one block sums the partials in a fixed order.
__global__ void partial_sums_kernel(const float* values, int64_t n, double* partials) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = global_index(); i < n; i += grid_stride()) sum += static_cast<double>(values[i]);
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void accumulate_mean_kernel(const double* partials, int blocks, int64_t n, StepScalars* scalars) {
  __shared__ double shared[32];
  const double total =
      block_sum(static_cast<int>(threadIdx.x) < blocks ? partials[threadIdx.x] : 0.0, shared);
  if (threadIdx.x == 0) scalars->loss_sum += static_cast<float>(total / static_cast<double>(n));
}

__global__ void unscale_and_check_kernel(float* grads, int64_t n, StepScalars* scalars) {
  const float inv = scalars->inv_loss_scale;
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float g = grads[i] * inv;
    grads[i] = g;
    bad |= !isfinite(g);
  }
  if (global_index() == 0) bad |= !isfinite(scalars->loss_sum);
  if (__any_sync(0xFFFFFFFFu, bad) && threadIdx.x % 32 == 0) atomicExch(&scalars->nonfinite, 1);
}

template <class T>
__global__ void adamw_kernel(float* master, T* params, const float* grads, float* m, float* v, int64_t n,
                             const StepScalars* scalars) {
  if (scalars->nonfinite != 0) return;
  const float beta1 = scalars->beta1, beta2 = scalars->beta2, eps = scalars->eps, decay = scalars->decay;
  const float step_size = scalars->step_size, bc2 = scalars->bias_correction2_sqrt;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float gi = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2 + eps;
    const float w = master[i] * decay - step_size * (mi / denom);
    master[i] = w;
    if (params != nullptr) params[i] = from_f32<T>(w);
  }
}

template <class T>
__global__ void sgd_kernel(float* master, T* params, const float* grads, float* buf, int64_t n,
                           const StepScalars* scalars) {
  if (scalars->nonfinite != 0) return;
  const float lr = scalars->lr, momentum = scalars->momentum, wd = scalars->sgd_weight_decay;
  const bool nesterov = scalars->nesterov != 0;
  const bool with_momentum = momentum != 0.0f && buf != nullptr;
  const bool first = scalars->t <= 1;
  // bsw::cpu::sgd_step's arithmetic, operation by operation (no contraction the CPU does not do).
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    float d = grads[i];
    if (wd != 0.0f) d = __fadd_rn(d, __fmul_rn(wd, master[i]));
    if (with_momentum) {
      const float b = first ? d : __fadd_rn(__fmul_rn(momentum, buf[i]), d);
      buf[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
    } else if (buf != nullptr) {
      buf[i] = d;
    }
    const float w = __fsub_rn(master[i], __fmul_rn(lr, d));
    master[i] = w;
    if (params != nullptr) params[i] = from_f32<T>(w);
  }
}

}  // namespace

void cross_entropy(DType t, const void* logits, const int32_t* labels, void* dlogits, float* row_loss,
                   int64_t rows, int64_t classes, StepScalars* scalars, cudaStream_t stream) {
  BSW_REQUIRE(rows >= 1 && classes >= 2, "cross_entropy");
  // One grid dimension: a block per row over kWarpRowClasses classes, a warp per row (kWarpRows a block)
  // up to them.
  BSW_REQUIRE((classes <= kWarpRowClasses ? (rows + kWarpRows - 1) / kWarpRows : rows) <= 0x7FFFFFFF,
              "cross_entropy");
  dispatch(t, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    if (classes <= kWarpRowClasses) {
      cross_entropy_warp_kernel<T>
          <<<static_cast<unsigned>((rows + kWarpRows - 1) / kWarpRows), dim3(32, kWarpRows), 0, stream>>>(
              static_cast<const T*>(logits), labels, static_cast<T*>(dlogits), row_loss, rows, classes,
              scalars);
    } else {
      cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits), labels, static_cast<T*>(dlogits), row_loss, rows, classes, scalars);
    }
  });
  BSW_CUDA_LAUNCHED();
}

void mse(DType t, const void* y, const void* target, void* dy, float* elem_loss, int64_t n,
         StepScalars* scalars, cudaStream_t stream) {
  BSW_REQUIRE(n >= 1, "mse");
  dispatch(t, "mse", [&](auto tag) {
    using T = decltype(tag);
    mse_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(target), static_cast<T*>(dy), elem_loss, n, scalars);
  });
  BSW_CUDA_LAUNCHED();
}

void accumulate_mean_loss(const float* values, int64_t n, double* partials, StepScalars* scalars,
                          cudaStream_t stream) {
  BSW_REQUIRE(n >= 1, "accumulate_mean_loss");
  // A block per 4096 values (16 per thread), at most kLossPartials blocks.
  const int blocks = static_cast<int>(std::min<int64_t>(kLossPartials, (n + 4095) / 4096));
  partial_sums_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(values, n, partials);
  BSW_CUDA_LAUNCHED();
  accumulate_mean_kernel<<<1, kLossPartials, 0, stream>>>(partials, blocks, n, scalars);
  BSW_CUDA_LAUNCHED();
}

void unscale_and_check(float* grads, int64_t n, StepScalars* scalars, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "unscale_and_check");
  unscale_and_check_kernel<<<grid_for(n), kThreads, 0, stream>>>(grads, n, scalars);
  BSW_CUDA_LAUNCHED();
}

void adamw(float* master, void* params, DType param_type, const float* grads, float* m, float* v, int64_t n,
           const StepScalars* scalars, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0 && master != nullptr && m != nullptr && v != nullptr, "adamw");
  if (n == 0) return;
  void* copy = params == master ? nullptr : params;
  dispatch(param_type, "adamw", [&](auto tag) {
    using T = decltype(tag);
    adamw_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(master, static_cast<T*>(copy), grads, m, v, n, scalars);
  });
  BSW_CUDA_LAUNCHED();
}

void sgd(float* master, void* params, DType param_type, const float* grads, float* momentum_buffer, int64_t n,
         const StepScalars* scalars, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0 && master != nullptr, "sgd");
  if (n == 0) return;
  void* copy = params == master ? nullptr : params;
  dispatch(param_type, "sgd", [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(master, static_cast<T*>(copy), grads, momentum_buffer,
                                                        n, scalars);
  });
  BSW_CUDA_LAUNCHED();
}

}  // namespace bsw::cuda::kernels
