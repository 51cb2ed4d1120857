// Layernorm, batch normalization and the token + position embedding: forward statistics and values, running
// statistics, gradients against central differences (dx, dgamma, dbeta; dtokens with repeated ids,
// dpositions), accumulate/overwrite semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "gradcheck.hpp"

namespace bsw::cpu {
namespace {

using testing::expect_gradient;
using testing::Rng;
using testing::weighted_sum;

TEST(LayerNorm, UnitGammaGivesMeanZeroVarianceOne) {
  Rng rng(21);
  const int64_t rows = 4, dim = 33;
  std::vector<float> x = rng.vec(rows * dim, -3.0f, 5.0f);
  for (float& v : x) v += 100.0f;  // a large offset: statistics must not cancel catastrophically
  const std::vector<float> gamma(dim, 1.0f), beta(dim, 0.0f);
  std::vector<float> y(rows * dim), mean(rows), rstd(rows);
  layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0.0, var = 0.0, sum_y = 0.0, sum_y2 = 0.0;
    for (int64_t i = 0; i < dim; ++i) mu += x[r * dim + i];
    mu /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mu) * (x[r * dim + i] - mu);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      sum_y += y[r * dim + i];
      sum_y2 += static_cast<double>(y[r * dim + i]) * y[r * dim + i];
    }
    EXPECT_NEAR(mean[r], mu, 1e-4);
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(var + 1e-5), 1e-5);
    EXPECT_NEAR(sum_y / dim, 0.0, 1e-5);
    EXPECT_NEAR(sum_y2 / dim, var / (var + 1e-5), 1e-4);  // biased variance, eps inside the sqrt
  }
}

TEST(LayerNorm, GammaBetaApplied) {
  const std::vector<float> x = {1.0f, 3.0f};  // mean 2, var 1
  const std::vector<float> gamma = {2.0f, -1.0f}, beta = {0.5f, 0.25f};
  std::vector<float> y(2), mean(1), rstd(1);
  layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), 1, 2);
  const double rs = 1.0 / std::sqrt(1.0 + 1e-5);
  EXPECT_NEAR(y[0], -1.0 * rs * 2.0 + 0.5, 1e-6);
  EXPECT_NEAR(y[1], 1.0 * rs * -1.0 + 0.25, 1e-6);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Rng rng(22);
  const int64_t rows = 3, dim = 7;
  std::vector<float> x = rng.vec(rows * dim, -2.0f, 2.0f), gamma = rng.vec(dim, 0.5f, 1.5f),
                     beta = rng.vec(dim);
  const std::vector<float> r = rng.vec(rows * dim);
  std::vector<float> y(rows * dim), mean(rows), rstd(rows);
  layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, dim);
  std::vector<float> dx = testing::nan_filled(x.size());
  std::vector<float> dgamma(dim, 0.0f), dbeta(dim, 0.0f);
  layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), r.data(), dx.data(), dgamma.data(),
                     dbeta.data(), rows, dim);
  std::vector<float> out(y.size()), m2(rows), r2(rows);
  auto loss = [&] {
    layernorm_forward(x.data(), gamma.data(), beta.data(), out.data(), m2.data(), r2.data(), rows, dim);
    return weighted_sum(r, out);
  };
  expect_gradient("layernorm dx", x, dx, loss);
  expect_gradient("layernorm dgamma", gamma, dgamma, loss);
  expect_gradient("layernorm dbeta", beta, dbeta, loss);

  std::vector<float> dgamma2 = dgamma, dbeta2 = dbeta;
  layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), r.data(), nullptr, dgamma2.data(),
                     dbeta2.data(), rows, dim);
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_FLOAT_EQ(dgamma2[i], 2.0f * dgamma[i]);
    EXPECT_FLOAT_EQ(dbeta2[i], 2.0f * dbeta[i]);
  }
}

// Per channel of [N, C, S]: the batch's statistics (a large offset must not cancel), PyTorch's running
// statistics update (unbiased variance, momentum 0.1), and gamma/beta.
TEST(BatchNorm, TrainingNormalizesEachChannelOverBatchAndSpace) {
  Rng rng(31);
  const int64_t n = 3, c = 4, s = 5;
  std::vector<float> x = rng.vec(n * c * s, -3.0f, 5.0f);
  for (float& v : x) v += 100.0f;
  std::vector<float> gamma(c), beta(c);
  for (int64_t k = 0; k < c; ++k) {
    gamma[k] = 0.5f + static_cast<float>(k);
    beta[k] = -1.0f + 0.25f * static_cast<float>(k);
  }
  std::vector<float> y(x.size()), mean(c), invstd(c), running_mean(c, 0.0f), running_var(c, 1.0f);
  batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                          running_mean.data(), running_var.data(), n, c, s, 0.1f);
  for (int64_t k = 0; k < c; ++k) {
    double mu = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) mu += x[(i * c + k) * s + j];
    mu /= n * s;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) var += std::pow(x[(i * c + k) * s + j] - mu, 2);
    const double biased = var / (n * s), unbiased = var / (n * s - 1);
    EXPECT_NEAR(mean[k], mu, 1e-4);
    EXPECT_NEAR(invstd[k], 1.0 / std::sqrt(biased + 1e-5), 1e-5);
    EXPECT_NEAR(running_mean[k], 0.1 * mu, 1e-5);
    EXPECT_NEAR(running_var[k], 0.9 + 0.1 * unbiased, 1e-5);
    double sum_y = 0.0, sum_y2 = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const double v = (y[(i * c + k) * s + j] - beta[k]) / gamma[k];
        sum_y += v;
        sum_y2 += v * v;
      }
    EXPECT_NEAR(sum_y / (n * s), 0.0, 1e-5);
    EXPECT_NEAR(sum_y2 / (n * s), biased / (biased + 1e-5), 1e-4);
  }
}

TEST(BatchNorm, InferenceUsesTheRunningStatistics) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};  // N 2, C 2, S 1
  const std::vector<float> gamma = {2.0f, 1.0f}, beta = {0.5f, -0.5f};
  const std::vector<float> rmean = {1.0f, -1.0f}, rvar = {4.0f, 0.25f};
  std::vector<float> y(4);
  batchnorm_forward_infer(x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(), y.data(), 2, 2, 1);
  const double r0 = 1.0 / std::sqrt(4.0 + 1e-5), r1 = 1.0 / std::sqrt(0.25 + 1e-5);
  EXPECT_NEAR(y[0], (1.0 - 1.0) * r0 * 2.0 + 0.5, 1e-6);
  EXPECT_NEAR(y[1], (2.0 + 1.0) * r1 * 1.0 - 0.5, 1e-5);
  EXPECT_NEAR(y[2], (3.0 - 1.0) * r0 * 2.0 + 0.5, 1e-5);
  EXPECT_NEAR(y[3], (4.0 + 1.0) * r1 * 1.0 - 0.5, 1e-5);
}

TEST(BatchNorm, OneValuePerChannelTakesTheBiasedVarianceForTheRunningOne) {
  const std::vector<float> x = {3.0f, -2.0f}, gamma = {1.0f, 1.0f}, beta = {0.0f, 0.0f};
  std::vector<float> y(2), mean(2), invstd(2), rmean = {0.0f, 0.0f}, rvar = {1.0f, 1.0f};
  batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                          rmean.data(), rvar.data(), 1, 2, 1, 0.1f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(rvar[0], 0.9f);
  EXPECT_FLOAT_EQ(rmean[1], -0.2f);
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  Rng rng(32);
  for (const int64_t s : {int64_t{1}, int64_t{6}}) {
    const int64_t n = 3, c = 2;
    std::vector<float> x = rng.vec(n * c * s, -2.0f, 2.0f), gamma = rng.vec(c, 0.5f, 1.5f), beta = rng.vec(c);
    const std::vector<float> r = rng.vec(n * c * s);
    std::vector<float> y(x.size()), mean(c), invstd(c);
    batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                            nullptr, nullptr, n, c, s, 0.1f);
    std::vector<float> dx = testing::nan_filled(x.size());
    std::vector<float> dgamma(c, 0.0f), dbeta(c, 0.0f);
    batchnorm_backward(x.data(), gamma.data(), mean.data(), invstd.data(), r.data(), dx.data(), dgamma.data(),
                       dbeta.data(), n, c, s);
    std::vector<float> out(y.size()), m2(c), r2(c);
    auto loss = [&] {
      batchnorm_forward_train(x.data(), gamma.data(), beta.data(), out.data(), m2.data(), r2.data(), nullptr,
                              nullptr, n, c, s, 0.1f);
      return weighted_sum(r, out);
    };
    expect_gradient("batchnorm dx", x, dx, loss);
    expect_gradient("batchnorm dgamma", gamma, dgamma, loss);
    expect_gradient("batchnorm dbeta", beta, dbeta, loss);

    std::vector<float> dgamma2 = dgamma, dbeta2 = dbeta;
    batchnorm_backward(x.data(), gamma.data(), mean.data(), invstd.data(), r.data(), nullptr, dgamma2.data(),
                       dbeta2.data(), n, c, s);
    for (int64_t i = 0; i < c; ++i) {
      EXPECT_FLOAT_EQ(dgamma2[i], 2.0f * dgamma[i]);
      EXPECT_FLOAT_EQ(dbeta2[i], 2.0f * dbeta[i]);
    }
  }
}

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  const int64_t batch = 2, seq = 3, dim = 2;
  const std::vector<float> tokens = {0, 1, 10, 11, 20, 21, 30, 31};  // vocab 4
  const std::vector<float> positions = {0.5f, 0.25f, 1.5f, 1.25f, 2.5f, 2.25f};
  const std::vector<int32_t> ids = {3, 0, 3, 1, 2, 1};
  std::vector<float> y(batch * seq * dim);
  embedding_forward(ids.data(), tokens.data(), positions.data(), y.data(), batch, seq, dim);
  EXPECT_EQ(y, (std::vector<float>{30.5f, 31.25f, 1.5f, 2.25f, 32.5f, 33.25f,  //
                                   10.5f, 11.25f, 21.5f, 22.25f, 12.5f, 13.25f}));
}

TEST(Embedding, GradientsWithRepeatedIds) {
  Rng rng(23);
  const int64_t batch = 2, seq = 4, dim = 3, vocab = 5;
  // Id 2 appears three times, id 4 twice, id 0 never.
  const std::vector<int32_t> ids = {2, 4, 2, 1, 3, 2, 4, 1};
  std::vector<float> tokens = rng.vec(vocab * dim), positions = rng.vec(seq * dim);
  const std::vector<float> r = rng.vec(batch * seq * dim);
  std::vector<float> dtokens(tokens.size(), 0.0f), dpositions(positions.size(), 0.0f), out(r.size());
  embedding_backward(ids.data(), r.data(), dtokens.data(), dpositions.data(), batch, seq, dim);
  auto loss = [&] {
    embedding_forward(ids.data(), tokens.data(), positions.data(), out.data(), batch, seq, dim);
    return weighted_sum(r, out);
  };
  expect_gradient("embedding dtokens", tokens, dtokens, loss);
  expect_gradient("embedding dpositions", positions, dpositions, loss);
  for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(dtokens[0 * dim + d], 0.0f) << "unused id has no gradient";

  std::vector<float> dtokens2 = dtokens, dpositions2 = dpositions;
  embedding_backward(ids.data(), r.data(), dtokens2.data(), dpositions2.data(), batch, seq, dim);
  for (size_t i = 0; i < dtokens.size(); ++i) EXPECT_FLOAT_EQ(dtokens2[i], 2.0f * dtokens[i]);
  for (size_t i = 0; i < dpositions.size(); ++i) EXPECT_FLOAT_EQ(dpositions2[i], 2.0f * dpositions[i]);
}

}  // namespace
}  // namespace bsw::cpu
