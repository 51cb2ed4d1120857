// The CPU reference math: fp32 forward and backward of every primitive op, losses and optimizers.
// This is the oracle the CUDA backend is tested against. Layouts follow include/batchsweep/plan.hpp:
// batch-first, row-major; GEMMs through OpenBLAS (cblas_sgemm).
// Backward functions ACCUMULATE (+=) into parameter gradients and OVERWRITE input gradients (dx); a null dx
// means "not needed" (first op) and skips that work.
#pragma once

#include <cstdint>

#include "batchsweep/model.hpp"

namespace bsw::cpu {

// ---- elementwise activations ------------------------------------------------------------------------------
// GELU is the tanh approximation (as in GPT-2/PyTorch approximate="tanh").
void activation_forward(Activation act, const float* z, float* y, int64_t n);
// dz = dy * act'(z); y = act(z) is given too for activations whose derivative is cheaper from it.
void activation_backward(Activation act, const float* z, const float* y, const float* dy, float* dz,
                         int64_t n);

// ---- linear: y[M,N] = act(x[M,K] W[N,K]^T + b[N]) ---------------------------------------------------------
// z (pre-activation, [M,N]) is written when act != none; with act == none, pass z == nullptr (y holds
// x W^T + b). With act != none and z == nullptr the activation is applied in place in y (inference: nothing
// is saved for backward). b may be null (no bias).
void linear_forward(const float* x, const float* w, const float* b, float* z, float* y, int64_t m, int64_t k,
                    int64_t n, Activation act);
// dy is [M,N] gradient of y. scratch_dz [M,N] is used when act != none (may alias nothing else).
// dw [N,K] += ..., db [N] += ... (db may be null when there is no bias), dx [M,K] = ... (may be null).
void linear_backward(const float* x, const float* w, const float* z, const float* y, const float* dy,
                     float* scratch_dz, float* dx, float* dw, float* db, int64_t m, int64_t k, int64_t n,
                     Activation act);

// ---- conv2d: NCHW, zero padding, via im2col per sample ----------------------------------------------------
struct ConvShape {
  int64_t batch, cin, h, w, cout, k, stride, pad, hout, wout;
};
// im2col scratch holds cin*k*k*hout*wout floats (one sample at a time); a 1x1 stride-1 unpadded conv does not
// touch it (conv2d_scratch_elements is 0 for it). z, b: as for linear_forward (z == nullptr with act != none
// applies the activation in place in y).
[[nodiscard]] int64_t conv2d_scratch_elements(const ConvShape& s);
void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b, float* z, float* y,
                    Activation act, float* scratch);
// scratch holds conv2d_scratch_elements(s) floats; scratch_dz holds batch*cout*hout*wout floats when
// act != none.
void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* z, const float* y,
                     const float* dy, float* scratch_dz, float* dx, float* dw, float* db, Activation act,
                     float* scratch);

// ---- pooling (no padding) ---------------------------------------------------------------------------------
// Windows start at (oh*stride, ow*stride); overlapping windows (stride < k) add up in backward. dx
// overwritten.
struct PoolShape {
  int64_t batch, c, h, w, k, stride, hout, wout;
  int64_t
      pad;  // on each side; max pooling ignores the padding, average pooling counts it (PyTorch's defaults)
};
void maxpool2d_forward(const PoolShape& s, const float* x, float* y);
// Gradient goes to the first maximum of each window (PyTorch's choice; a NaN always wins, as in ATen); the
// window's maximum is found again from x, so y is not read.
void maxpool2d_backward(const PoolShape& s, const float* x, const float* dy,
                        float* dx);  // argmax found again in x
void avgpool2d_forward(const PoolShape& s, const float* x, float* y);
void avgpool2d_backward(const PoolShape& s, const float* dy, float* dx);
// Mean over the spatial positions. Channels-first ([B, C, S] -> [B, C]) or tokens ([B, S, C] -> [B, C]).
void global_avgpool_forward(const float* x, float* y, int64_t batch, int64_t channels, int64_t spatial,
                            bool tokens_layout);
void global_avgpool_backward(const float* dy, float* dx, int64_t batch, int64_t channels, int64_t spatial,
                             bool tokens_layout);

// ---- layernorm over the last dim, eps = 1e-5 --------------------------------------------------------------
// mean[rows], rstd[rows] are saved for backward (either may be null in inference). Statistics in double.
// Backward: dgamma, dbeta accumulate; dx is overwritten (may be null).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim);
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim);

// ---- batch normalization per channel, eps 1e-5 ------------------------------------------------------------
// x and y are [N, C, S]: S = H*W for an image (BatchNorm2d), 1 for a vector (BatchNorm1d). Statistics in
// double. Training normalizes with the batch's mean and biased variance over N*S values per channel, saves
// mean[C] and invstd[C] = 1/sqrt(var + eps) (either may be null), and moves running_mean/running_var (may be
// null) by `momentum` toward the mean and the unbiased variance (divisor N*S - 1; PyTorch refuses N*S == 1 in
// training, which here takes the biased one, 0).
void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                             float* invstd, float* running_mean, float* running_var, int64_t batch,
                             int64_t channels, int64_t spatial, float momentum);
// Inference: normalizes with the running statistics.
void batchnorm_forward_infer(const float* x, const float* gamma, const float* beta, const float* running_mean,
                             const float* running_var, float* y, int64_t batch, int64_t channels,
                             int64_t spatial);
// From the saved mean and invstd: dgamma, dbeta accumulate; dx is overwritten (may be null).
void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t batch,
                        int64_t channels, int64_t spatial);

// ---- embeddings -------------------------------------------------------------------------------------------
// ids [B, T] in [0, vocab) (not checked: vocab is not passed); y [B, T, D] = tokens[ids] + positions[t].
// Backward accumulates into dtokens (repeated ids add up) and dpositions; either may be null.
void embedding_forward(const int32_t* ids, const float* tokens, const float* positions, float* y,
                       int64_t batch, int64_t seq, int64_t dim);
void embedding_backward(const int32_t* ids, const float* dy, float* dtokens, float* dpositions, int64_t batch,
                        int64_t seq, int64_t dim);
// Patch embedding: x [B, C, H, W] -> y [B, N, D], N = (H/p)(W/p) in row-major patch order; conv k=p stride=p
// with weight [D, C, p, p] and bias [D], plus positions [N, D]. scratch holds N * C * p * p floats. When p
// does not divide H or W the trailing rows/columns are ignored (as a stride-p conv would) and get dx = 0. b,
// positions (forward) and db, dpositions, dx (backward) may be null; dw, db, dpositions accumulate.
struct PatchShape {
  int64_t batch, c, h, w, patch, dim;
};
[[nodiscard]] int64_t patch_embedding_scratch_elements(const PatchShape& s);
void patch_embedding_forward(const PatchShape& s, const float* x, const float* w, const float* b,
                             const float* positions, float* y, float* scratch);
void patch_embedding_backward(const PatchShape& s, const float* x, const float* w, const float* dy, float* dx,
                              float* dw, float* db, float* dpositions, float* scratch);

// ---- scaled dot-product attention core --------------------------------------------------------------------
// qkv [B, T, 3D]: q = qkv[..., 0:D], k = qkv[..., D:2D], v = qkv[..., 2D:3D]; head h uses columns
// [h*hd, (h+1)*hd) of each, hd = D / heads. out [B, T, D] (heads concatenated). probs [B, heads, T, T] saved
// (masked entries are 0 when causal). Scale 1/sqrt(hd). Softmax subtracts the row maximum; causal row i
// covers keys [0, i] and probs above the diagonal are exactly 0.
void attention_forward(const float* qkv, float* out, float* probs, int64_t batch, int64_t seq, int64_t dim,
                       int64_t heads, bool causal);
// dqkv [B, T, 3D] is overwritten. scratch holds T*T floats.
void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv, int64_t batch,
                        int64_t seq, int64_t dim, int64_t heads, bool causal, float* scratch);
[[nodiscard]] inline int64_t attention_scratch_elements(int64_t seq) {
  return seq * seq;
}

// ---- elementwise ------------------------------------------------------------------------------------------
void add(const float* a, const float* b, float* out, int64_t n);  // out may alias a or b

// ---- losses (mean over predictions) -----------------------------------------------------------------------
// logits [rows, classes], labels [rows] in [0, classes). Returns the mean loss; writes
// dlogits = d(mean loss) * grad_scale (grad_scale carries the 1/accumulation factor and the fp16 loss scale).
// dlogits may alias nothing. Log-sum-exp in double. dlogits (and dy for mse) may be null: loss only. A label
// outside [0, classes) throws BackendError naming the row.
double cross_entropy(const float* logits, const int32_t* labels, float* dlogits, int64_t rows,
                     int64_t classes, float grad_scale);
// Mean over all n elements of (y - target)^2; dy = d(mean loss) * grad_scale.
double mse(const float* y, const float* target, float* dy, int64_t n, float grad_scale);

// ---- optimizers (fp32 master weights, fp32 grads), step counter t starts at 1 -----------------------------
// AdamW with decoupled weight decay (PyTorch semantics), bias-corrected.
void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t t);
// Order: w *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (bias corrections computed in double).
// SGD, torch.optim.SGD's arithmetic (dampening 0): d = g + weight_decay * w (L2, coupled); with momentum,
// buf = momentum * buf + d (first step buf = d) and d = nesterov ? d + momentum * buf : buf; then w -= lr *
// d. With momentum == 0 (or buf == nullptr) there is no buffer: w -= lr * d (buf, when given, is set to d).
struct SgdSettings {
  float lr = 0.01f;
  float momentum = 0;
  float weight_decay = 0;
  bool nesterov = false;
};
void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdSettings& s, int64_t t);

// ---- 16-bit storage ---------------------------------------------------------------------------------------
// Round to nearest even; NaN stays NaN (quiet, sign kept); overflow to +-Inf (fp16: |f| >= 65520); fp16
// subnormals (down to 2^-24) are produced and read exactly; |f| <= 2^-25 rounds to a signed zero. Integer
// code: no dependence on the FPU rounding mode or flush-to-zero.
[[nodiscard]] uint16_t float_to_bf16(float f);
[[nodiscard]] float bf16_to_float(uint16_t h);
[[nodiscard]] uint16_t float_to_fp16(float f);
[[nodiscard]] float fp16_to_float(uint16_t h);
void to_bf16(const float* in, uint16_t* out, int64_t n);
void from_bf16(const uint16_t* in, float* out, int64_t n);
void to_fp16(const float* in, uint16_t* out, int64_t n);
void from_fp16(const uint16_t* in, float* out, int64_t n);

// ---- checks and init --------------------------------------------------------------------------------------
// true when every value is finite.
[[nodiscard]] bool all_finite(const float* x, int64_t n);
void scale(float* x, int64_t n, float factor);
// Deterministic fill: uniform in [-bound, bound) from (seed, stream) with a counter-based generator
// (splitmix64), so the CUDA backend's device-side init can produce the same numbers. Exactly (mod 2^64):
//   mix(z) = z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
//   G      = 0x9E3779B97F4A7C15
//   key    = mix(seed ^ mix(stream + G))
//   r_i    = mix(key + (i + 1) * G)          (the (i+1)-th output of splitmix64 seeded with key)
//   x[i]   = (float((uint32_t)(r_i >> 40)) * 0x1p-23f - 1.0f) * bound
// The bracket is exact in fp32 (a 24-bit integer times a power of two, in [-1, 1)), so the only rounding is
// one IEEE multiply by bound: a device that multiplies in round-to-nearest matches bit for bit. bound >= 0.
void fill_uniform(float* x, int64_t n, float bound, uint64_t seed, uint64_t stream);
// Labels uniform in [0, classes), same key and r_i as fill_uniform:
//   x[i] = (int32_t)(((r_i >> 32) * (uint64_t)classes) >> 32)
// classes < 1 throws BackendError.
void fill_labels(int32_t* x, int64_t n, int32_t classes, uint64_t seed, uint64_t stream);

// ---- subnormal floats
// --------------------------------------------------------------------------------------- While it lives,
// this thread flushes subnormal results to zero and reads subnormal inputs as zero (x86 MXCSR FTZ and DAZ;
// aarch64 FPCR FZ), as TensorFlow's CPU kernels do. A model that memorizes the fixed synthetic batch drives
// its softmax, gradients and AdamW's second moment into the subnormal range, where x86 arithmetic takes a
// microcode assist per operation: the mlp's batch-1 step went from 0.30 to 3.66 ms after about 600 steps, so
// a point's time would depend on how long it ran. CUDA keeps subnormals at full speed, so only the CPU needs
// this; the values flushed are below 1.2e-38, which no comparison here resolves.
class FlushDenormals {
 public:
  FlushDenormals();
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  uint64_t saved_ = 0;
};

// Whether this thread flushes subnormals now (FlushDenormals is in effect).
[[nodiscard]] bool denormals_flushed();

// ---- the synthetic data a step trains on ------------------------------------------------------------------
// splitmix64 over a global element index: the synthetic data of sample s is the same whether it is drawn in
// one big batch or in micro-batches, which makes accumulation equivalence testable (and lets a peer,
// tests/peers/step_trace, draw the same data).
inline constexpr uint64_t kDataStream = 1u << 20;    // streams of the synthetic data, apart from parameters'
inline constexpr uint64_t kTargetStream = 1u << 21;  // streams of the targets
// A value uniform in [-1, 1) for element `index` of `stream`.
[[nodiscard]] float data_value(uint64_t seed, uint64_t stream, uint64_t index);
// A label uniform in [0, classes) for element `index` of `stream`.
[[nodiscard]] int32_t data_label(uint64_t seed, uint64_t stream, uint64_t index, int64_t classes);

}  // namespace bsw::cpu
