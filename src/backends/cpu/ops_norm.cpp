// The CPU reference math, part 3: layernorm over the last dimension and the token + position embedding.
// Contracts are in ops.hpp.
#include <cmath>

#include "backends/cpu/ops.hpp"

namespace bsw::cpu {
namespace {
constexpr double kLayerNormEps = 1e-5;
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
