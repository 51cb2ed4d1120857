// Elementwise activations and the linear op: forward against known values and a naive loop, backward against
// central differences for every activation, with and without bias, with and without dx; accumulate semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "gradcheck.hpp"

namespace bsw::cpu {
namespace {

using testing::expect_gradient;
using testing::GradCheckOptions;
using testing::Rng;
using testing::weighted_sum;

constexpr Activation kAllActivations[] = {Activation::none, Activation::relu, Activation::gelu,
                                          Activation::silu, Activation::tanh};

[[nodiscard]] std::string name(Activation act) {
  switch (act) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::silu:
      return "silu";
    case Activation::tanh:
      return "tanh";
  }
  return "?";
}

TEST(Activation, ForwardKnownValues) {
  const std::vector<float> z = {-2.0f, -0.5f, 0.0f, 1.0f, 3.0f};
  std::vector<float> y(z.size());
  activation_forward(Activation::relu, z.data(), y.data(), 5);
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.0f, 1.0f, 3.0f}));
  // GELU, tanh approximation: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
  activation_forward(Activation::gelu, z.data(), y.data(), 5);
  EXPECT_NEAR(y[0], -0.04540230, 1e-6);
  EXPECT_NEAR(y[1], -0.15428599, 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_NEAR(y[3], 0.84119199, 1e-6);
  EXPECT_NEAR(y[4], 2.99636261, 1e-6);
  activation_forward(Activation::silu, z.data(), y.data(), 5);
  EXPECT_NEAR(y[0], -0.23840584, 1e-6);
  EXPECT_NEAR(y[3], 0.73105858, 1e-6);
  activation_forward(Activation::tanh, z.data(), y.data(), 5);
  EXPECT_NEAR(y[4], 0.99505475, 1e-6);
  activation_forward(Activation::none, z.data(), y.data(), 5);
  EXPECT_EQ(y, z);
}

TEST(Activation, InPlaceForwardMatchesOutOfPlace) {
  Rng rng(3);
  const std::vector<float> z = rng.vec(64, -4.0f, 4.0f);
  for (Activation act : kAllActivations) {
    std::vector<float> y(z.size());
    std::vector<float> inplace = z;
    activation_forward(act, z.data(), y.data(), 64);
    activation_forward(act, inplace.data(), inplace.data(), 64);
    EXPECT_EQ(y, inplace) << name(act);
  }
}

TEST(Activation, BackwardMatchesFiniteDifferences) {
  Rng rng(4);
  for (Activation act : kAllActivations) {
    std::vector<float> z = rng.vec(40, -3.0f, 3.0f);
    for (float& v : z) {
      if (std::abs(v) < 0.05f) v = 0.5f;  // keep ReLU's kink out of reach of the default step
    }
    const std::vector<float> r = rng.vec(40);
    std::vector<float> y(40), dz(40);
    activation_forward(act, z.data(), y.data(), 40);
    activation_backward(act, z.data(), y.data(), r.data(), dz.data(), 40);
    std::vector<float> out(40);
    expect_gradient("activation " + name(act), z, dz, [&] {
      activation_forward(act, z.data(), out.data(), 40);
      return weighted_sum(r, out);
    });
  }
}

// y = act(x W^T + b) by plain loops in double.
[[nodiscard]] std::vector<double> naive_linear(const std::vector<float>& x, const std::vector<float>& w,
                                               const float* b, int64_t m, int64_t k, int64_t n,
                                               Activation act) {
  std::vector<double> pre(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b != nullptr ? b[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += static_cast<double>(x[i * k + l]) * w[j * k + l];
      pre[i * n + j] = s;
    }
  }
  std::vector<float> pre_f(pre.begin(), pre.end()), post(pre.size());
  activation_forward(act, pre_f.data(), post.data(), m * n);
  return {post.begin(), post.end()};
}

TEST(Linear, ForwardMatchesNaiveLoops) {
  Rng rng(5);
  const int64_t m = 7, k = 13, n = 5;
  const std::vector<float> x = rng.vec(m * k), w = rng.vec(n * k), b = rng.vec(n);
  for (Activation act : kAllActivations) {
    for (bool bias : {false, true}) {
      std::vector<float> z(m * n), y(m * n);
      linear_forward(x.data(), w.data(), bias ? b.data() : nullptr,
                     act == Activation::none ? nullptr : z.data(), y.data(), m, k, n, act);
      EXPECT_LT(testing::max_rel_diff(y, naive_linear(x, w, bias ? b.data() : nullptr, m, k, n, act)), 1e-5)
          << name(act) << " bias=" << bias;
      if (act != Activation::none) {
        EXPECT_LT(testing::max_rel_diff(
                      z, naive_linear(x, w, bias ? b.data() : nullptr, m, k, n, Activation::none)),
                  1e-5)
            << "pre-activation " << name(act);
        // Without z the activation runs in place in y and gives the same output.
        std::vector<float> y_inplace(m * n);
        linear_forward(x.data(), w.data(), bias ? b.data() : nullptr, nullptr, y_inplace.data(), m, k, n,
                       act);
        EXPECT_EQ(y, y_inplace) << name(act);
      }
    }
  }
}

struct LinearCase {
  Activation act;
  bool bias;
  bool want_dx;
};

void check_linear_gradients(const LinearCase& c) {
  const std::string what =
      "linear " + name(c.act) + (c.bias ? " bias" : " nobias") + (c.want_dx ? "" : " nodx");
  Rng rng(100 + static_cast<uint64_t>(c.act) * 4 + c.bias * 2 + c.want_dx);
  const int64_t m = 3, k = 4, n = 5;
  std::vector<float> x, w, b, z(m * n), y(m * n), scratch(m * n);
  do {  // redraw while a ReLU pre-activation sits within reach of the kink
    x = rng.vec(m * k);
    w = rng.vec(n * k);
    b = rng.vec(n);
    linear_forward(x.data(), w.data(), c.bias ? b.data() : nullptr, nullptr, z.data(), m, k, n,
                   Activation::none);
  } while (c.act == Activation::relu && testing::min_abs(z) < testing::kKinkMargin);
  const std::vector<float> r = rng.vec(m * n);
  const float* bias = c.bias ? b.data() : nullptr;
  const bool has_z = c.act != Activation::none;
  linear_forward(x.data(), w.data(), bias, has_z ? z.data() : nullptr, y.data(), m, k, n, c.act);

  std::vector<float> dx = testing::nan_filled(m * k);  // overwritten, so poison it first
  std::vector<float> dw(n * k, 0.0f), db(n, 0.0f);
  linear_backward(x.data(), w.data(), has_z ? z.data() : nullptr, y.data(), r.data(), scratch.data(),
                  c.want_dx ? dx.data() : nullptr, dw.data(), c.bias ? db.data() : nullptr, m, k, n, c.act);

  std::vector<float> out(m * n), zz(m * n);
  auto loss = [&] {
    linear_forward(x.data(), w.data(), c.bias ? b.data() : nullptr, has_z ? zz.data() : nullptr, out.data(),
                   m, k, n, c.act);
    return weighted_sum(r, out);
  };
  GradCheckOptions opt;
  if (c.act == Activation::relu) opt.step = testing::kKinkStep;
  if (c.want_dx) expect_gradient(what + " dx", x, dx, loss, opt);
  expect_gradient(what + " dw", w, dw, loss, opt);
  if (c.bias) expect_gradient(what + " db", b, db, loss, opt);

  // Parameter gradients accumulate: a second backward into the same buffers doubles them.
  std::vector<float> dw2 = dw, db2 = db;
  linear_backward(x.data(), w.data(), has_z ? z.data() : nullptr, y.data(), r.data(), scratch.data(), nullptr,
                  dw2.data(), c.bias ? db2.data() : nullptr, m, k, n, c.act);
  for (size_t i = 0; i < dw.size(); ++i)
    EXPECT_FLOAT_EQ(dw2[i], 2.0f * dw[i]) << what << " dw accumulate " << i;
  if (c.bias) {
    for (size_t i = 0; i < db.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2.0f * db[i]) << what << " db accumulate";
  }
  // And dx is overwritten, not accumulated.
  if (c.want_dx) {
    std::vector<float> dx_again = dx;
    std::vector<float> dw_tmp(n * k, 0.0f), db_tmp(n, 0.0f);
    linear_backward(x.data(), w.data(), has_z ? z.data() : nullptr, y.data(), r.data(), scratch.data(),
                    dx_again.data(), dw_tmp.data(), c.bias ? db_tmp.data() : nullptr, m, k, n, c.act);
    EXPECT_EQ(dx_again, dx) << what << " dx overwrite";
  }
}

TEST(Linear, GradientsEveryActivationBiasAndDx) {
  for (Activation act : kAllActivations) {
    for (bool bias : {false, true}) check_linear_gradients({act, bias, true});
    check_linear_gradients({act, true, false});
  }
}

TEST(Linear, LargerShapeGradientSpotCheck) {
  // Exercises OpenBLAS's blocked kernels (sizes past its small-matrix paths) against a naive dw/dx in double.
  Rng rng(9);
  const int64_t m = 67, k = 129, n = 33;
  const std::vector<float> x = rng.vec(m * k), w = rng.vec(n * k), dy = rng.vec(m * n);
  std::vector<float> dx(m * k), dw(n * k, 0.0f), db(n, 0.0f);
  linear_backward(x.data(), w.data(), nullptr, nullptr, dy.data(), nullptr, dx.data(), dw.data(), db.data(),
                  m, k, n, Activation::none);
  std::vector<double> dx_ref(m * k, 0.0), dw_ref(n * k, 0.0), db_ref(n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double g = dy[i * n + j];
      db_ref[j] += g;
      for (int64_t l = 0; l < k; ++l) {
        dx_ref[i * k + l] += g * w[j * k + l];
        dw_ref[j * k + l] += g * x[i * k + l];
      }
    }
  }
  EXPECT_LT(testing::max_rel_diff(dx, dx_ref), 1e-5);
  EXPECT_LT(testing::max_rel_diff(dw, dw_ref), 1e-5);
  EXPECT_LT(testing::max_rel_diff(db, db_ref), 1e-5);
}

TEST(Add, ForwardAliasingAndGradient) {
  Rng rng(6);
  std::vector<float> a = rng.vec(17), b = rng.vec(17);
  std::vector<float> out(17);
  add(a.data(), b.data(), out.data(), 17);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  std::vector<float> alias = a;
  add(alias.data(), b.data(), alias.data(), 17);
  EXPECT_EQ(alias, out);
  alias = b;
  add(a.data(), alias.data(), alias.data(), 17);
  EXPECT_EQ(alias, out);
  // Backward of a residual add passes dy to both inputs unchanged: d(sum r*(a+b))/da = r = d/db.
  const std::vector<float> r = rng.vec(17);
  auto loss = [&] {
    add(a.data(), b.data(), out.data(), 17);
    return weighted_sum(r, out);
  };
  expect_gradient("add da", a, r, loss);
  expect_gradient("add db", b, r, loss);
}

}  // namespace
}  // namespace bsw::cpu
