// Test helpers for the CPU ops: a portable seeded random source, and a central-difference gradient check that
// compares an analytic gradient with d(loss)/d(input) measured by perturbing one input element at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace bsw::cpu::testing {

// Uniform floats from a fixed seed; the conversion from bits is ours so values are the same with every
// stdlib.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  [[nodiscard]] float uniform(float lo, float hi) {
    const double unit = static_cast<double>(gen_() >> 11) * 0x1p-53;
    return static_cast<float>(lo + (hi - lo) * unit);
  }
  [[nodiscard]] std::vector<float> vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
  [[nodiscard]] int32_t below(int32_t n) { return static_cast<int32_t>(gen_() % static_cast<uint64_t>(n)); }

 private:
  std::mt19937_64 gen_;
};

// sum_i r_i * out_i in double: the scalar whose gradient with respect to out is r.
[[nodiscard]] inline double weighted_sum(const std::vector<float>& r, const std::vector<float>& out) {
  double sum = 0.0;
  for (size_t i = 0; i < r.size(); ++i) sum += static_cast<double>(r[i]) * static_cast<double>(out[i]);
  return sum;
}

struct GradCheckOptions {
  double step = 1e-2;     // perturbation of each input element
  double rel_tol = 1e-2;  // relative to max(|numeric|, |analytic|)
  double abs_tol = 2e-3;
};

// For every element i of `input`: numeric = (loss(x + h e_i) - loss(x - h e_i)) / (2h), with h the
// perturbation fp32 actually represents; expects |numeric - analytic[i]| <= abs_tol + rel_tol *
// max(|numeric|, |analytic|). `loss` recomputes the forward from the current contents of `input`. The input
// is restored afterwards.
template <class Loss>
void expect_gradient(const std::string& what, std::vector<float>& input, const std::vector<float>& analytic,
                     Loss&& loss, GradCheckOptions options = {}) {
  ASSERT_EQ(input.size(), analytic.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    const float original = input[i];
    const float plus = static_cast<float>(original + options.step);
    const float minus = static_cast<float>(original - options.step);
    input[i] = plus;
    const double loss_plus = loss();
    input[i] = minus;
    const double loss_minus = loss();
    input[i] = original;
    const double numeric =
        (loss_plus - loss_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    const double expected = analytic[i];
    const double tol = options.abs_tol + options.rel_tol * std::max(std::abs(numeric), std::abs(expected));
    if (!(std::abs(numeric - expected) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << expected << " vs numeric " << numeric;
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << input.size() << " elements differ";
  // A check of an all-zero gradient would pass for a backward that does nothing.
  const bool any_nonzero = std::any_of(analytic.begin(), analytic.end(), [](float g) { return g != 0.0f; });
  EXPECT_TRUE(any_nonzero) << what << ": analytic gradient is all zero";
}

// Largest |a - b| relative to max(1, |b|), element by element.
[[nodiscard]] inline double max_rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(b[i])));
  }
  return worst;
}

// Smallest |v|: how far a set of ReLU pre-activations sits from the kink at 0.
[[nodiscard]] inline float min_abs(const std::vector<float>& v) {
  float smallest = std::numeric_limits<float>::infinity();
  for (float x : v) smallest = std::min(smallest, std::abs(x));
  return smallest;
}

// ReLU's kink at 0 breaks central differences when a perturbation moves a pre-activation across it. With
// inputs and weights in [-1, 1], perturbing one element by kKinkStep moves each pre-activation by at most
// kKinkStep, so ReLU checks use that step on draws whose pre-activations all sit at least kKinkMargin from 0.
inline constexpr double kKinkStep = 2e-3;
inline constexpr float kKinkMargin = 3e-3f;

[[nodiscard]] inline std::vector<float> nan_filled(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace bsw::cpu::testing
