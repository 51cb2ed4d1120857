// 16-bit conversions (exact bit patterns, round-half-even, subnormals, NaN, overflow, round trips),
// all_finite, scale, and the counter-based initialisers (determinism, element independence, range, pinned
// values).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cpu {
namespace {

[[nodiscard]] float from_bits(uint32_t b) {
  return std::bit_cast<float>(b);
}

TEST(Bf16, KnownBitPatterns) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // Round half to even: 1 + 2^-8 is half way between 1 and 1 + 2^-7 -> 1 (even); 1 + 3*2^-8 -> 1 + 2^-6.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000)), 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000)), 0x3F82);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)), 0x3F81);  // just above half: up
  EXPECT_EQ(float_to_bf16(from_bits(0x3F807FFF)), 0x3F80);  // just below half: down
  // The largest float rounds up to Inf; the largest bf16 stays.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F0000)), 0x7F7F);
  // Subnormals keep their top bits and round too.
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000)), 0x0001);
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)), 0x0002);
}

TEST(Bf16, NanStaysNanAndRoundTrips) {
  const uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  // A signalling NaN whose payload sits only in the low 16 bits must not become Inf.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7F800001)))));
  EXPECT_EQ(float_to_bf16(from_bits(0xFFC00000)) & 0x8000, 0x8000);  // sign kept
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << "round trip of bf16 " << h;
  }
}

TEST(Fp16, KnownBitPatterns) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.5f), 0xC100);
  EXPECT_EQ(float_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // half way to 65536, ties to even (up) -> Inf
  EXPECT_EQ(float_to_fp16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_fp16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(-0x1p-24f), 0x8001);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);         // half of the smallest subnormal: ties to even (0)
  EXPECT_EQ(float_to_fp16(0x1.8p-24f), 0x0002);       // 1.5 units: ties to even (2)
  EXPECT_EQ(float_to_fp16(0x1.4p-24f), 0x0001);       // 1.25 units: down
  EXPECT_EQ(float_to_fp16(0x1.000002p-25f), 0x0001);  // just above half a unit: up
  EXPECT_EQ(float_to_fp16(0x1.ffcp-15f), 0x0400);  // largest subnormal + half a unit rounds into the normals
  EXPECT_EQ(float_to_fp16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Round half to even among normals: 1 + 2^-11 is half way between 1 and 1 + 2^-10.
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(float_to_fp16(2047.5f), 0x67FF + 1);  // 2047.5: half way between 2047 and 2048, 2047 odd -> 2048
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x8001), -0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(0xC100), -2.5f);
}

TEST(Fp16, NanStaysNanAndRoundTrips) {
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(from_bits(0x7F800001)))));  // low payload only
  EXPECT_EQ(float_to_fp16(from_bits(0xFFC00000)) & 0x8000, 0x8000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(float_to_fp16(f), h) << "round trip of fp16 " << h;
  }
}

TEST(Fp16, MatchesNearestRepresentableOnASweep) {
  // Every float in a dense sweep converts to the nearest fp16 (checked by brute force over neighbours).
  for (float f = -70000.0f; f <= 70000.0f; f += 13.37f) {
    const uint16_t h = float_to_fp16(f);
    const double got = fp16_to_float(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::abs(f), 65520.0f);
      continue;
    }
    const double err = std::abs(got - f);
    const double up = fp16_to_float(static_cast<uint16_t>(h + 1));
    const double down = fp16_to_float(static_cast<uint16_t>(h - 1));
    if (!std::isinf(up) && !std::isnan(up)) {
      EXPECT_LE(err, std::abs(up - f)) << f;
    }
    if (!std::isinf(down) && !std::isnan(down)) {
      EXPECT_LE(err, std::abs(down - f)) << f;
    }
  }
}

TEST(Conversions, ArrayFormsMatchScalar) {
  const std::vector<float> in = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-7f, 3.14159f};
  std::vector<uint16_t> b(in.size()), h(in.size());
  std::vector<float> back_b(in.size()), back_h(in.size());
  to_bf16(in.data(), b.data(), 6);
  to_fp16(in.data(), h.data(), 6);
  from_bf16(b.data(), back_b.data(), 6);
  from_fp16(h.data(), back_h.data(), 6);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(b[i], float_to_bf16(in[i]));
    EXPECT_EQ(h[i], float_to_fp16(in[i]));
    EXPECT_EQ(back_b[i], bf16_to_float(b[i]));
    EXPECT_EQ(back_h[i], fp16_to_float(h[i]));
    EXPECT_NEAR(back_b[i], in[i], std::abs(in[i]) * 0x1p-8f);
  }
}

TEST(AllFinite, DetectsNanAndInfAnywhere) {
  std::vector<float> x(10000, 1.0f);
  x[5] = std::numeric_limits<float>::max();
  x[6] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(all_finite(x.data(), static_cast<int64_t>(x.size())));
  EXPECT_TRUE(all_finite(x.data(), 0));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t pos : {size_t{0}, size_t{4095}, size_t{4096}, size_t{9999}}) {
      std::vector<float> y = x;
      y[pos] = bad;
      EXPECT_FALSE(all_finite(y.data(), static_cast<int64_t>(y.size()))) << bad << " at " << pos;
      EXPECT_EQ(all_finite(y.data(), static_cast<int64_t>(pos)), true) << "prefix before " << pos;
    }
  }
}

TEST(Scale, MultipliesInPlace) {
  std::vector<float> x = {1.0f, -2.0f, 0.5f};
  scale(x.data(), 3, 4.0f);
  EXPECT_EQ(x, (std::vector<float>{4.0f, -8.0f, 2.0f}));
}

TEST(FillUniform, PinnedValuesFromTheDocumentedFormula) {
  // Computed independently from the formula in ops.hpp (Python, exact integer arithmetic).
  std::vector<float> x(4);
  fill_uniform(x.data(), 4, 1.0f, 1234, 7);
  EXPECT_EQ(x, (std::vector<float>{-0.4941854476928711f, -0.9735925197601318f, 0.9055696725845337f,
                                   -0.19981157779693604f}));
  fill_uniform(x.data(), 4, 0.5f, 1234, 7);
  EXPECT_EQ(x, (std::vector<float>{-0.24709272384643555f, -0.4867962598800659f, 0.45278483629226685f,
                                   -0.09990578889846802f}));
  fill_uniform(x.data(), 3, 1.0f, 0, 0);
  EXPECT_EQ(x[0], -0.32389509677886963f);
  EXPECT_EQ(x[1], -0.46173954010009766f);
  EXPECT_EQ(x[2], -0.4568668603897095f);
}

TEST(FillUniform, DeterministicPerElementAndInRange) {
  const int64_t n = 100000;
  const float bound = 0.125f;
  std::vector<float> a(n), b(n), other_stream(n), other_seed(n), prefix(10);
  fill_uniform(a.data(), n, bound, 42, 3);
  fill_uniform(b.data(), n, bound, 42, 3);
  fill_uniform(other_stream.data(), n, bound, 42, 4);
  fill_uniform(other_seed.data(), n, bound, 43, 3);
  fill_uniform(prefix.data(), 10, bound, 42, 3);
  EXPECT_EQ(a, b);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(prefix[i], a[i]) << "value i depends only on (seed, stream, i)";
  int same_stream = 0, same_seed = 0;
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(a[i], -bound);
    ASSERT_LT(a[i], bound);
    same_stream += a[i] == other_stream[i];
    same_seed += a[i] == other_seed[i];
    sum += a[i];
    sum_sq += static_cast<double>(a[i]) * a[i];
  }
  EXPECT_LT(same_stream, 20);
  EXPECT_LT(same_seed, 20);
  EXPECT_NEAR(sum / n, 0.0, 0.01 * bound);
  EXPECT_NEAR(sum_sq / n, bound * bound / 3.0, 0.01 * bound * bound);  // variance of U(-b, b)
  std::vector<float> zeros(8, 1.0f);
  fill_uniform(zeros.data(), 8, 0.0f, 1, 1);
  for (float z : zeros) EXPECT_EQ(z, 0.0f);
}

TEST(FillLabels, PinnedDeterministicAndCoversAllClasses) {
  std::vector<int32_t> labels(6);
  fill_labels(labels.data(), 6, 10, 1234, 7);
  EXPECT_EQ(labels, (std::vector<int32_t>{2, 0, 9, 4, 9, 7}));
  const int64_t n = 50000;
  const int32_t classes = 37;
  std::vector<int32_t> a(n), b(n);
  fill_labels(a.data(), n, classes, 5, 2);
  fill_labels(b.data(), n, classes, 5, 2);
  EXPECT_EQ(a, b);
  std::vector<int64_t> counts(classes, 0);
  for (int32_t v : a) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, classes);
    ++counts[v];
  }
  for (int32_t c = 0; c < classes; ++c) {
    EXPECT_NEAR(static_cast<double>(counts[c]), static_cast<double>(n) / classes, 0.15 * n / classes) << c;
  }
  std::vector<int32_t> one(100);
  fill_labels(one.data(), 100, 1, 9, 9);
  for (int32_t v : one) EXPECT_EQ(v, 0);
  EXPECT_THROW(fill_labels(one.data(), 1, 0, 1, 1), BackendError);
}

}  // namespace
}  // namespace bsw::cpu
