// The CPU reference math, part 4: the scaled dot-product attention core. Per (batch, head): S = q k^T /
// sqrt(hd) and O = P v through OpenBLAS sgemm on strided views of qkv (leading dimension 3D), a row softmax
// in between. Contracts are in ops.hpp.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/ops.hpp"

namespace bsw::cpu {
namespace {

[[nodiscard]] inline blasint bi(int64_t v) {
  return static_cast<blasint>(v);
}

// Row softmax of p[seq, seq] in place; with `causal`, row i covers columns [0, i] and the rest become exactly
// 0.
void softmax_rows(float* p, int64_t seq, bool causal) {
  for (int64_t i = 0; i < seq; ++i) {
    float* row = p + i * seq;
    const int64_t len = causal ? i + 1 : seq;
    const float max_score = *std::max_element(row, row + len);
    double sum = 0.0;
    for (int64_t j = 0; j < len; ++j) {
      const float e = std::exp(row[j] - max_score);
      row[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < len; ++j) row[j] *= inv;
    std::fill(row + len, row + seq, 0.0f);
  }
}

}  // namespace

void attention_forward(const float* qkv, float* out, float* probs, int64_t batch, int64_t seq, int64_t dim,
                       int64_t heads, bool causal) {
  const int64_t hd = dim / heads;
  const int64_t ld_qkv = 3 * dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q = qkv + n * seq * ld_qkv + h * hd;
      const float* k = q + dim;
      const float* v = q + 2 * dim;
      float* p = probs + (n * heads + h) * seq * seq;
      float* o = out + n * seq * dim + h * hd;
      // S[T, T] = scale * q[T, hd] k[T, hd]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(seq), bi(seq), bi(hd), scale, q, bi(ld_qkv), k,
                  bi(ld_qkv), 0.0f, p, bi(seq));
      softmax_rows(p, seq, causal);
      // O[T, hd] = P[T, T] v[T, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(seq), bi(hd), bi(seq), 1.0f, p, bi(seq), v,
                  bi(ld_qkv), 0.0f, o, bi(dim));
    }
  }
}

void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv, int64_t batch,
                        int64_t seq, int64_t dim, int64_t heads, bool causal, float* scratch) {
  const int64_t hd = dim / heads;
  const int64_t ld_qkv = 3 * dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* ds = scratch;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = n * seq * ld_qkv + h * hd;
      const float* q = qkv + base;
      const float* k = q + dim;
      const float* v = q + 2 * dim;
      float* dq = dqkv + base;
      float* dk = dq + dim;
      float* dv = dq + 2 * dim;
      const float* p = probs + (n * heads + h) * seq * seq;
      const float* dout_h = dout + n * seq * dim + h * hd;
      // dP[T, T] = dO[T, hd] v[T, hd]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(seq), bi(seq), bi(hd), 1.0f, dout_h, bi(dim), v,
                  bi(ld_qkv), 0.0f, ds, bi(seq));
      // dv[T, hd] = P[T, T]^T dO[T, hd]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(seq), bi(hd), bi(seq), 1.0f, p, bi(seq), dout_h,
                  bi(dim), 0.0f, dv, bi(ld_qkv));
      // dS = P * (dP - rowsum(P * dP)); masked entries have P == 0, so their dS is 0.
      for (int64_t i = 0; i < seq; ++i) {
        const float* prow = p + i * seq;
        float* drow = ds + i * seq;
        const int64_t len = causal ? i + 1 : seq;
        double dot = 0.0;
        for (int64_t j = 0; j < len; ++j) dot += static_cast<double>(prow[j]) * drow[j];
        const float dot_f = static_cast<float>(dot);
        for (int64_t j = 0; j < len; ++j) drow[j] = prow[j] * (drow[j] - dot_f);
        std::fill(drow + len, drow + seq, 0.0f);
      }
      // dq[T, hd] = scale * dS[T, T] k[T, hd];  dk[T, hd] = scale * dS^T q[T, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(seq), bi(hd), bi(seq), scale, ds, bi(seq), k,
                  bi(ld_qkv), 0.0f, dq, bi(ld_qkv));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(seq), bi(hd), bi(seq), scale, ds, bi(seq), q,
                  bi(ld_qkv), 0.0f, dk, bi(ld_qkv));
    }
  }
}

}  // namespace bsw::cpu
