// Losses (cross entropy, mse) against hand values and central differences with grad_scale; AdamW and SGD
// against step-by-step values computed by hand with PyTorch's formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "batchsweep/errors.hpp"
#include "gradcheck.hpp"

namespace bsw::cpu {
namespace {

using testing::expect_gradient;
using testing::Rng;

TEST(CrossEntropy, HandValue) {
  // Row 0: logits (0, 0, 0), label 1 -> log 3. Row 1: logits (1, 2, 3), label 2 -> log(e + e^2 + e^3) - 3.
  const std::vector<float> logits = {0, 0, 0, 1, 2, 3};
  const std::vector<int32_t> labels = {1, 2};
  std::vector<float> dlogits(6);
  const double loss = cross_entropy(logits.data(), labels.data(), dlogits.data(), 2, 3, 1.0f);
  const double row1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  EXPECT_NEAR(loss, (std::log(3.0) + row1) / 2.0, 1e-7);
  // d(mean)/dlogit = (softmax - onehot) / rows
  EXPECT_NEAR(dlogits[0], (1.0 / 3.0) / 2.0, 1e-7);
  EXPECT_NEAR(dlogits[1], (1.0 / 3.0 - 1.0) / 2.0, 1e-7);
  double row_sum = 0.0;
  for (int c = 3; c < 6; ++c) row_sum += dlogits[c];
  EXPECT_NEAR(row_sum, 0.0, 1e-7);
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 999.0f};
  const std::vector<int32_t> labels = {2};
  std::vector<float> dlogits(3);
  const double loss = cross_entropy(logits.data(), labels.data(), dlogits.data(), 1, 3, 1.0f);
  EXPECT_NEAR(loss, std::log1p(std::exp(-1.0)) + 1.0, 1e-6);
  EXPECT_TRUE(all_finite(dlogits.data(), 3));
  EXPECT_EQ(dlogits[1], 0.0f);
}

TEST(CrossEntropy, GradientWithGradScale) {
  Rng rng(41);
  const int64_t rows = 4, classes = 6;
  std::vector<float> logits = rng.vec(rows * classes, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {0, 5, 2, 2};
  for (float grad_scale : {1.0f, 0.25f, 1024.0f}) {
    std::vector<float> dlogits = testing::nan_filled(logits.size());
    cross_entropy(logits.data(), labels.data(), dlogits.data(), rows, classes, grad_scale);
    testing::GradCheckOptions opt;
    opt.abs_tol = 1e-3 * grad_scale;
    expect_gradient(
        "cross_entropy scale " + std::to_string(grad_scale), logits, dlogits,
        [&] {
          return cross_entropy(logits.data(), labels.data(), nullptr, rows, classes, 1.0f) * grad_scale;
        },
        opt);
  }
}

TEST(CrossEntropy, LabelOutOfRangeThrowsNamingTheRow) {
  const std::vector<float> logits(6, 0.0f);
  const std::vector<int32_t> labels = {0, 3};
  try {
    (void)cross_entropy(logits.data(), labels.data(), nullptr, 2, 3, 1.0f);
    FAIL() << "expected BackendError";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
}

TEST(Mse, HandValueAndGradientWithGradScale) {
  const std::vector<float> y = {1.0f, 2.0f, -1.0f, 0.5f}, target = {0.0f, 2.0f, 1.0f, 0.0f};
  std::vector<float> dy(4);
  EXPECT_NEAR(mse(y.data(), target.data(), dy.data(), 4, 1.0f), (1.0 + 0.0 + 4.0 + 0.25) / 4.0, 1e-7);
  EXPECT_EQ(dy, (std::vector<float>{0.5f, 0.0f, -1.0f, 0.25f}));  // 2 (y - t) / n

  Rng rng(42);
  std::vector<float> yy = rng.vec(10);
  const std::vector<float> tt = rng.vec(10);
  const float grad_scale = 0.5f;
  std::vector<float> dyy = testing::nan_filled(10);
  (void)mse(yy.data(), tt.data(), dyy.data(), 10, grad_scale);
  expect_gradient("mse", yy, dyy, [&] { return mse(yy.data(), tt.data(), nullptr, 10, 1.0f) * grad_scale; });
}

// ---- optimizers
// ----------------------------------------------------------------------------------------------------
// Expected values: PyTorch's AdamW / SGD update rules evaluated by hand in double for three steps.

TEST(AdamW, ThreeStepsMatchPyTorch) {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, weight_decay 0.1; w0 = 1, grads 0.5, -0.25, 1.0.
  float w = 1.0f, m = 0.0f, v = 0.0f;
  const float grads[] = {0.5f, -0.25f, 1.0f};
  const double expected_w[] = {0.890000002, 0.8544662986878463, 0.7801104766702113};
  const double expected_m[] = {0.05, 0.02, 0.118};
  const double expected_v[] = {0.00025, 0.00031225, 0.00131193775};
  for (int t = 1; t <= 3; ++t) {
    adamw_step(&w, &grads[t - 1], &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, t);
    EXPECT_NEAR(w, expected_w[t - 1], 2e-6) << "step " << t;
    // m and v carry 1 - beta computed from fp32 betas (1 - 0.999f = 0.00100005): a relative 5e-5 from the
    // double-precision reference; the bias-corrected update itself is insensitive to it.
    EXPECT_NEAR(m, expected_m[t - 1], 1e-4 * expected_m[t - 1]) << "step " << t;
    EXPECT_NEAR(v, expected_v[t - 1], 1e-4 * expected_v[t - 1]) << "step " << t;
  }
}

TEST(AdamW, ZeroGradientAndNoDecay) {
  // lr 0.01, betas (0.8, 0.99), eps 1e-3, no weight decay; w0 = -2, grads 0, 3, -1.
  float w[2] = {-2.0f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
  const float grads[3][2] = {{0.0f, 0.0f}, {3.0f, 3.0f}, {-1.0f, -1.0f}};
  const double expected_w[] = {-2.0, -2.0078333920911238, -2.0109728106854194};
  for (int t = 1; t <= 3; ++t) {
    adamw_step(w, grads[t - 1], m, v, 2, 0.01f, 0.8f, 0.99f, 1e-3f, 0.0f, t);
    EXPECT_NEAR(w[0], expected_w[t - 1], 1e-6) << "step " << t;
    EXPECT_EQ(w[0], w[1]);
  }
}

TEST(Sgd, MomentumThreeStepsMatchPyTorch) {
  // lr 0.1, momentum 0.9; first step buf = g (not 0.9 * garbage + g).
  float w = 1.0f, buf = std::nanf("");
  const float grads[] = {0.5f, -0.25f, 1.0f};
  const double expected_w[] = {0.95, 0.93, 0.812};
  const double expected_buf[] = {0.5, 0.2, 1.18};
  for (int t = 1; t <= 3; ++t) {
    sgd_step(&w, &grads[t - 1], &buf, 1, SgdSettings{0.1f, 0.9f, 0.0f, false}, t);
    EXPECT_NEAR(w, expected_w[t - 1], 1e-6) << "step " << t;
    EXPECT_NEAR(buf, expected_buf[t - 1], 1e-6) << "step " << t;
  }
}

TEST(Sgd, NoMomentumIsPlainSgd) {
  float w[2] = {1.0f, 2.0f};
  const float g[2] = {0.5f, -1.0f};
  sgd_step(w, g, nullptr, 2, SgdSettings{0.1f, 0.0f, 0.0f, false}, 1);
  sgd_step(w, g, nullptr, 2, SgdSettings{0.1f, 0.0f, 0.0f, false}, 2);
  EXPECT_NEAR(w[0], 0.9, 1e-7);
  EXPECT_NEAR(w[1], 2.2, 1e-6);
}

TEST(Sgd, NesterovWithWeightDecayThreeStepsMatchPyTorch) {
  // torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True): d = g + wd w; buf = 0.9 buf + d
  // (first step buf = d); w -= lr (d + 0.9 buf). w0 = 1, grads 0.5, -0.25, 1.0; evaluated by hand in double.
  float w = 1.0f, buf = std::nanf("");
  const float grads[] = {0.5f, -0.25f, 1.0f};
  const double expected_w[] = {0.886, 0.868066, 0.630906146};
  const double expected_buf[] = {0.6, 0.3786, 1.4275466};
  for (int t = 1; t <= 3; ++t) {
    sgd_step(&w, &grads[t - 1], &buf, 1, SgdSettings{0.1f, 0.9f, 0.1f, true}, t);
    EXPECT_NEAR(w, expected_w[t - 1], 1e-6) << "step " << t;
    EXPECT_NEAR(buf, expected_buf[t - 1], 1e-6) << "step " << t;
  }
}

TEST(Sgd, NesterovWithoutDecayLooksAheadAlongTheBuffer) {
  float w = 1.0f, buf = 0.0f;
  const float grads[] = {0.5f, -0.25f, 1.0f};
  const double expected_w[] = {0.905, 0.912, 0.7058};
  for (int t = 1; t <= 3; ++t) {
    sgd_step(&w, &grads[t - 1], &buf, 1, SgdSettings{0.1f, 0.9f, 0.0f, true}, t);
    EXPECT_NEAR(w, expected_w[t - 1], 1e-6) << "step " << t;
  }
}

TEST(Sgd, WeightDecayWithoutMomentumIsL2) {
  float w = 1.0f;
  const float grads[] = {0.5f, -0.25f, 1.0f};
  const double expected_w[] = {0.94, 0.9556, 0.846044};
  for (int t = 1; t <= 3; ++t) {
    sgd_step(&w, &grads[t - 1], nullptr, 1, SgdSettings{0.1f, 0.0f, 0.1f, false}, t);
    EXPECT_NEAR(w, expected_w[t - 1], 1e-6) << "step " << t;
  }
}

}  // namespace
}  // namespace bsw::cpu
