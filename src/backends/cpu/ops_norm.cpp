// The CPU reference math, part 3: layernorm over the last dimension, batch normalization per channel and the
// token + position embedding.
// Contracts are in ops.hpp.
#include <cmath>

#include "backends/cpu/ops.hpp"

namespace bsw::cpu {
namespace {
constexpr double kLayerNormEps = 1e-5;
constexpr double kBatchNormEps = 1e-5;  // PyTorch's default, as for layernorm
}  // namespace

// ---- layernorm
// ---------------------------------------------------------------------------------------------------

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t dim) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mu = sum * inv_dim;
    double sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double d = static_cast<double>(xr[i]) - mu;
      sq += d * d;
    }
    const double rs = 1.0 / std::sqrt(sq * inv_dim + kLayerNormEps);
    const float mu_f = static_cast<float>(mu);
    const float rs_f = static_cast<float>(rs);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mu_f) * rs_f * gamma[i] + beta[i];
    if (mean != nullptr) mean[r] = mu_f;
    if (rstd != nullptr) rstd[r] = rs_f;
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const float mu = mean[r];
    const float rs = rstd[r];
    double sum_dxhat = 0.0;
    double sum_dxhat_xhat = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mu) * rs;
      const float dxhat = dyr[i] * gamma[i];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += static_cast<double>(dxhat) * xhat;
      dgamma[i] += dyr[i] * xhat;
      dbeta[i] += dyr[i];
    }
    if (dx == nullptr) continue;
    const float mean_dxhat = static_cast<float>(sum_dxhat * inv_dim);
    const float mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat * inv_dim);
    float* dxr = dx + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mu) * rs;
      dxr[i] = rs * (dyr[i] * gamma[i] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

// ---- batch normalization
// -----------------------------------------------------------------------------------------

void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                             float* invstd, float* running_mean, float* running_var, int64_t batch,
                             int64_t channels, int64_t spatial, float momentum) {
  const int64_t count = batch * spatial;
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) sum += xs[s];
    }
    const double mu = sum / static_cast<double>(count);
    double sq = 0.0;
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) {
        const double d = static_cast<double>(xs[s]) - mu;
        sq += d * d;
      }
    }
    const double var = sq / static_cast<double>(count);
    const float mu_f = static_cast<float>(mu);
    const float rs_f = static_cast<float>(1.0 / std::sqrt(var + kBatchNormEps));
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      float* ys = y + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) ys[s] = (xs[s] - mu_f) * rs_f * gamma[c] + beta[c];
    }
    if (mean != nullptr) mean[c] = mu_f;
    if (invstd != nullptr) invstd[c] = rs_f;
    if (running_mean != nullptr)
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
    if (running_var != nullptr) {
      const double unbiased = count > 1 ? sq / static_cast<double>(count - 1) : var;
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

void batchnorm_forward_infer(const float* x, const float* gamma, const float* beta, const float* running_mean,
                             const float* running_var, float* y, int64_t batch, int64_t channels,
                             int64_t spatial) {
  for (int64_t c = 0; c < channels; ++c) {
    const float rs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + kBatchNormEps));
    const float mu = running_mean[c];
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      float* ys = y + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) ys[s] = (xs[s] - mu) * rs * gamma[c] + beta[c];
    }
  }
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t batch,
                        int64_t channels, int64_t spatial) {
  const double inv_count = 1.0 / static_cast<double>(batch * spatial);
  for (int64_t c = 0; c < channels; ++c) {
    const float mu = mean[c], rs = invstd[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      const float* dys = dy + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) {
        sum_dy += dys[s];
        sum_dy_xhat += static_cast<double>(dys[s]) * ((xs[s] - mu) * rs);
      }
    }
    dgamma[c] += static_cast<float>(sum_dy_xhat);
    dbeta[c] += static_cast<float>(sum_dy);
    if (dx == nullptr) continue;
    const float mean_dy = static_cast<float>(sum_dy * inv_count);
    const float mean_dy_xhat = static_cast<float>(sum_dy_xhat * inv_count);
    const float k = gamma[c] * rs;
    for (int64_t n = 0; n < batch; ++n) {
      const float* xs = x + (n * channels + c) * spatial;
      const float* dys = dy + (n * channels + c) * spatial;
      float* dxs = dx + (n * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s)
        dxs[s] = k * (dys[s] - mean_dy - (xs[s] - mu) * rs * mean_dy_xhat);
    }
  }
}

// ---- embeddings
// --------------------------------------------------------------------------------------------------

void embedding_forward(const int32_t* ids, const float* tokens, const float* positions, float* y,
                       int64_t batch, int64_t seq, int64_t dim) {
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t t = 0; t < seq; ++t) {
      const float* token = tokens + static_cast<int64_t>(ids[n * seq + t]) * dim;
      const float* position = positions + t * dim;
      float* out = y + (n * seq + t) * dim;
      for (int64_t d = 0; d < dim; ++d) out[d] = token[d] + position[d];
    }
  }
}

void embedding_backward(const int32_t* ids, const float* dy, float* dtokens, float* dpositions, int64_t batch,
                        int64_t seq, int64_t dim) {
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t t = 0; t < seq; ++t) {
      const float* g = dy + (n * seq + t) * dim;
      if (dtokens != nullptr) {
        float* token = dtokens + static_cast<int64_t>(ids[n * seq + t]) * dim;
        for (int64_t d = 0; d < dim; ++d) token[d] += g[d];
      }
      if (dpositions != nullptr) {
        float* position = dpositions + t * dim;
        for (int64_t d = 0; d < dim; ++d) position[d] += g[d];
      }
    }
  }
}

}  // namespace bsw::cpu
