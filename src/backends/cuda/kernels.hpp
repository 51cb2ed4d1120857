// Host-side declarations of the kernel launchers in kernels/*.cu. Every launcher takes raw device pointers,
// the storage dtype of its tensors (f32, bf16 or f16; math is fp32), and the stream; it checks its shape
// assumptions (throwing BackendError) and ends with a checked cudaGetLastError(). Layouts follow
// include/batchsweep/plan.hpp and src/backends/cpu/ops.hpp, whose functions are the reference every launcher
// here is tested against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"

namespace bsw::cuda::kernels {

// Per-step values the graph-captured step reads from device memory (workspace.scalars), so one captured graph
// serves every step: the host rewrites the inputs before each launch and reads the outputs after it.
struct StepScalars {
  // inputs
  float grad_scale = 1;                 // loss scale / accumulation: multiplies d(mean loss)
  float inv_loss_scale = 1;             // 1 / loss scale: unscales the accumulated gradients
  float lr = 0;                         // learning rate
  float beta1 = 0, beta2 = 0, eps = 0;  // adamw
  float decay = 1;                      // adamw: 1 - lr * weight_decay
  float step_size = 0;                  // adamw: lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1;      // adamw: sqrt(1 - beta2^t)
  float momentum = 0;                   // sgd
  float sgd_weight_decay = 0;           // sgd: L2, d = g + wd * w
  int32_t nesterov = 0;                 // sgd: 1 = Nesterov momentum
  int32_t t = 1;                        // optimizer step, from 1
  // outputs (the host writes them as zero)
  int32_t nonfinite = 0;  // a gradient (after unscaling) or the loss was NaN/Inf: the update was skipped
  int32_t bad_label = 0;  // cross_entropy saw a label outside [0, classes)
  float loss_sum = 0;     // sum over micro-batches of the mean loss
};
inline constexpr uint64_t kStepScalarsBytes = sizeof(StepScalars);

// ---- init and data (the numbers of bsw::cpu::fill_uniform and the CPU backend's synthetic data)
// -------------------- x[i] = bound * (top 24 bits of splitmix64_mix(key + (i + 1) * golden) * 2^-23 - 1),
// key = cpu fill_key(seed, stream)
void fill_uniform(DType t, void* x, int64_t n, float bound, uint64_t key, cudaStream_t stream);
[[nodiscard]] uint64_t fill_key(uint64_t seed, uint64_t stream_id);
void fill_constant(DType t, void* x, int64_t n, float value, cudaStream_t stream);
// The CPU backend's data_value / data_label over global element indices first_index + i.
void fill_data_values(DType t, void* x, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                      cudaStream_t stream);
void fill_data_labels(int32_t* x, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                      int64_t classes, cudaStream_t stream);

// ---- elementwise
// -------------------------------------------------------------------------------------------------- Round to
// nearest even (NaN stays NaN, fp16 overflow to Inf). in and out may not alias unless from == to.
void cast(DType from, const void* in, DType to, void* out, int64_t n, cudaStream_t stream);
void activation_forward(Activation act, DType t, const void* z, void* y, int64_t n, cudaStream_t stream);
// dz may alias dy (the backward pass works in place on its gradient buffer).
void activation_backward(Activation act, DType t, const void* z, const void* y, const void* dy, void* dz,
                         int64_t n, cudaStream_t stream);
void add(DType t, const void* a, const void* b, void* out, int64_t n,
         cudaStream_t stream);  // out may alias a or b
// out[i] += in[i] (fp32 accumulation of a storage-dtype gradient, e.g. cuDNN's weight gradient).
void accumulate_f32(DType t, const void* in, float* out, int64_t n, cudaStream_t stream);
// out[c] += sum over r of in[r * cols + c] (fp32 accumulation, fp32 out): bias and position gradients.
void column_sum_accumulate(DType t, const void* in, float* out, int64_t rows, int64_t cols,
                           cudaStream_t stream);

// ---- layernorm (eps 1e-5), stats fp32
// ------------------------------------------------------------------------------
void layernorm_forward(DType t, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim, cudaStream_t stream);
// dx overwritten (may be null), dgamma/dbeta accumulated (fp32).
void layernorm_backward(DType t, const void* x, const void* gamma, const float* mean, const float* rstd,
                        const void* dy, void* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                        cudaStream_t stream);

// ---- batch normalization (eps 1e-5) per channel of x [N, C, S], statistics fp32 ----
//
// The batch's mean[C] and invstd[C] (biased variance); running_mean/running_var (may be null) move by
// `momentum` toward the mean and the unbiased variance. workspace holds
// cuda_batchnorm_workspace_floats(batch, channels, spatial) floats (plan.hpp). Deterministic: slices of the
// batch, then one warp per channel combines them.
void batchnorm_statistics(DType t, const void* x, float* mean, float* invstd, float* running_mean,
                          float* running_var, int64_t batch, int64_t channels, int64_t spatial,
                          float momentum, float* workspace, cudaStream_t stream);
// y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]; with from_variance, `scale` is a variance (the running
// one) and invstd = 1/sqrt(scale + eps). y may alias x.
void batchnorm_apply(DType t, const void* x, const void* gamma, const void* beta, const float* mean,
                     const float* scale, bool from_variance, void* y, int64_t batch, int64_t channels,
                     int64_t spatial, cudaStream_t stream);
// dgamma, dbeta accumulate (fp32); dx overwritten (may be null; must not alias dy). Same workspace.
void batchnorm_backward(DType t, const void* x, const void* gamma, const float* mean, const float* invstd,
                        const void* dy, void* dx, float* dgamma, float* dbeta, int64_t batch,
                        int64_t channels, int64_t spatial, float* workspace, cudaStream_t stream);

// ---- embeddings
// ------------------------------------------------------------------------------------------------------
void embedding_forward(DType t, const int32_t* ids, const void* tokens, const void* positions, void* y,
                       int64_t batch, int64_t seq, int64_t dim, cudaStream_t stream);
// dtokens += (fp32 atomics: order-dependent in the last bits), dpositions += (column sums: in a fixed order
// up to 256 samples, above that one fp32 atomic per 256-sample slab, order-dependent in the last bits too).
void embedding_backward(DType t, const int32_t* ids, const void* dy, float* dtokens, float* dpositions,
                        int64_t batch, int64_t seq, int64_t dim, cudaStream_t stream);
// y[n * count + i] += positions[i] for every sample n.
void add_positions(DType t, void* y, const void* positions, int64_t batch, int64_t count,
                   cudaStream_t stream);

// ---- convolution helpers, pooling
// ------------------------------------------------------------------------------------
struct ConvGeometry {
  int64_t cin = 0, h = 0, w = 0, k = 1, stride = 1, pad = 0, hout = 0, wout = 0;
  [[nodiscard]] constexpr int64_t patch() const { return cin * k * k; }
  [[nodiscard]] constexpr int64_t spatial() const { return hout * wout; }
};
// A chunk of `chunk` samples: col[(c*k + ki)*k + kj][n*HW + oh*wout + ow] = x[n][c][ih][iw] (0 outside).
void im2col(DType t, const ConvGeometry& g, const void* x, void* col, int64_t chunk, cudaStream_t stream);
// The adjoint: dx (chunk samples, overwritten) gathers every col entry that read each pixel (no atomics).
void col2im(DType t, const ConvGeometry& g, const void* col, void* dx, int64_t chunk, cudaStream_t stream);
// [C, chunk*HW] <-> [chunk, C, HW]; the first adds bias[c] when bias is not null.
void channels_to_nchw(DType t, const void* in, const void* bias, void* out, int64_t chunk, int64_t channels,
                      int64_t hw, cudaStream_t stream);
void nchw_to_channels(DType t, const void* in, void* out, int64_t chunk, int64_t channels, int64_t hw,
                      cudaStream_t stream);
// y[n][c][p] += bias[c] in place (after a cuDNN convolution, which writes NCHW directly).
void bias_add_nchw(DType t, void* y, const void* bias, int64_t batch, int64_t channels, int64_t hw,
                   cudaStream_t stream);
// out[c] += sum over n, p of in[n][c][p] (conv bias gradient): deterministic with one slab of samples; with
// several (few channels, many samples) the slabs add atomically, so the last bits may vary run to run.
void channel_sum_accumulate(DType t, const void* in, float* out, int64_t batch, int64_t channels, int64_t hw,
                            cudaStream_t stream);

struct PoolGeometry {
  int64_t batch = 0, c = 0, h = 0, w = 0, k = 1, stride = 1, hout = 0, wout = 0;
  int64_t pad = 0;  // on each side: max pooling ignores it, average pooling counts it (PyTorch's defaults)
};
void maxpool_forward(DType t, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream);
// Gradient to the first maximum of each window (a NaN wins), as bsw::cpu::maxpool2d_backward. dx overwritten.
void maxpool_backward(DType t, const PoolGeometry& g, const void* x, const void* dy, void* dx,
                      cudaStream_t stream);
void avgpool_forward(DType t, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream);
void avgpool_backward(DType t, const PoolGeometry& g, const void* dy, void* dx, cudaStream_t stream);
void global_avgpool_forward(DType t, const void* x, void* y, int64_t batch, int64_t channels, int64_t spatial,
                            bool tokens_layout, cudaStream_t stream);
void global_avgpool_backward(DType t, const void* dy, void* dx, int64_t batch, int64_t channels,
                             int64_t spatial, bool tokens_layout, cudaStream_t stream);

// ---- attention (the non-fused path)
// ---------------------------------------------------------------------------------- [B, T, parts, heads, hd]
// <-> [parts, B, heads, T, hd]: q|k|v (parts 3) or the output (parts 1) by head.
void split_heads(DType t, const void* in, void* out, int64_t batch, int64_t seq, int64_t parts, int64_t heads,
                 int64_t head_dim, cudaStream_t stream);
void merge_heads(DType t, const void* in, void* out, int64_t batch, int64_t seq, int64_t parts, int64_t heads,
                 int64_t head_dim, cudaStream_t stream);
// probs[r, :] = softmax(scores[r, :]) over `rows` rows of length seq; causal: row r masks columns > r % seq
// (to 0).
void softmax_forward(DType t, const float* scores, void* probs, int64_t rows, int64_t seq, bool causal,
                     cudaStream_t stream);
// In place: probs[r, j] becomes dS = P * (dP - sum_j P * dP) (masked entries stay 0).
void softmax_backward(DType t, void* probs, const float* dprobs, int64_t rows, int64_t seq,
                      cudaStream_t stream);

// ---- losses (mean over predictions; gradients scaled by scalars->grad_scale)
// -------------------------------------------- Per-row loss into row_loss; dlogits (may be null) = (softmax -
// onehot) * grad_scale / rows. A label outside [0, classes) sets scalars->bad_label.
void cross_entropy(DType t, const void* logits, const int32_t* labels, void* dlogits, float* row_loss,
                   int64_t rows, int64_t classes, StepScalars* scalars, cudaStream_t stream);
// Per-element squared error into elem_loss; dy (may be null) = 2 (y - target) * grad_scale / n.
void mse(DType t, const void* y, const void* target, void* dy, float* elem_loss, int64_t n,
         StepScalars* scalars, cudaStream_t stream);
// The step's mean loss: += mean(values[0, n)) into scalars->loss_sum, through kLossPartials doubles of
// scratch (workspace.loss holds them ahead of the per-row losses).
inline constexpr int kLossPartials = 256;
void accumulate_mean_loss(const float* values, int64_t n, double* partials, StepScalars* scalars,
                          cudaStream_t stream);

// ---- optimizer (fused over the flat parameter buffer)
// ------------------------------------------------------------------ grads *= scalars->inv_loss_scale; a
// non-finite gradient or loss sets scalars->nonfinite.
void unscale_and_check(float* grads, int64_t n, StepScalars* scalars, cudaStream_t stream);
// Skipped entirely (on the device) when scalars->nonfinite. master (fp32) updated; params (storage dtype) =
// cast(master) when params != master.
void adamw(float* master, void* params, DType param_type, const float* grads, float* m, float* v, int64_t n,
           const StepScalars* scalars, cudaStream_t stream);
void sgd(float* master, void* params, DType param_type, const float* grads, float* momentum_buffer, int64_t n,
         const StepScalars* scalars, cudaStream_t stream);

}  // namespace bsw::cuda::kernels
