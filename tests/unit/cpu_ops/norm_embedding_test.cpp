// Layernorm and the token + position embedding: forward statistics and values, gradients against central
// differences (dx, dgamma, dbeta; dtokens with repeated ids, dpositions), accumulate/overwrite semantics.
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
