// conv2d, pooling, global average pooling and patch embedding: forward against direct loops, backward against
// central differences, accumulate/overwrite semantics, PyTorch's max-pooling tie rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

[[nodiscard]] ConvShape conv_shape(int64_t batch, int64_t cin, int64_t h, int64_t w, int64_t cout, int64_t k,
                                   int64_t stride, int64_t pad) {
  return {
      batch, cin, h, w, cout, k, stride, pad, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
}

[[nodiscard]] int64_t in_elems(const ConvShape& s) {
  return s.batch * s.cin * s.h * s.w;
}
[[nodiscard]] int64_t out_elems(const ConvShape& s) {
  return s.batch * s.cout * s.hout * s.wout;
}

// The direct convolution: every output is a sum over (cin, ki, kj) of in-bounds inputs, in double.
[[nodiscard]] std::vector<double> naive_conv(const ConvShape& s, const std::vector<float>& x,
                                             const std::vector<float>& w, const float* b) {
  std::vector<double> y(static_cast<size_t>(out_elems(s)));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t co = 0; co < s.cout; ++co)
      for (int64_t oh = 0; oh < s.hout; ++oh)
        for (int64_t ow = 0; ow < s.wout; ++ow) {
          double sum = b != nullptr ? b[co] : 0.0;
          for (int64_t ci = 0; ci < s.cin; ++ci)
            for (int64_t ki = 0; ki < s.k; ++ki)
              for (int64_t kj = 0; kj < s.k; ++kj) {
                const int64_t ih = oh * s.stride - s.pad + ki;
                const int64_t iw = ow * s.stride - s.pad + kj;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                sum += static_cast<double>(x[((n * s.cin + ci) * s.h + ih) * s.w + iw]) *
                       w[((co * s.cin + ci) * s.k + ki) * s.k + kj];
              }
          y[((n * s.cout + co) * s.hout + oh) * s.wout + ow] = sum;
        }
  return y;
}

struct ConvCase {
  int64_t k, stride, pad;
  Activation act;
  bool bias;
};

[[nodiscard]] std::string describe(const ConvCase& c) {
  return "conv k" + std::to_string(c.k) + " s" + std::to_string(c.stride) + " p" + std::to_string(c.pad) +
         " act" + std::to_string(static_cast<int>(c.act)) + (c.bias ? " bias" : "");
}

constexpr ConvCase kConvCases[] = {
    {3, 1, 0, Activation::none, true},  {3, 1, 1, Activation::none, true}, {3, 2, 0, Activation::none, false},
    {3, 2, 1, Activation::gelu, true},  {3, 1, 1, Activation::relu, true}, {1, 1, 0, Activation::tanh, true},
    {2, 2, 0, Activation::silu, false},
};

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  Rng rng(11);
  for (const ConvCase& c : kConvCases) {
    const ConvShape s = conv_shape(2, 3, 7, 6, 4, c.k, c.stride, c.pad);
    const std::vector<float> x = rng.vec(in_elems(s)), w = rng.vec(s.cout * s.cin * s.k * s.k),
                             b = rng.vec(s.cout);
    std::vector<float> scratch(conv2d_scratch_elements(s)), z(out_elems(s)), y(out_elems(s));
    const float* bias = c.bias ? b.data() : nullptr;
    conv2d_forward(s, x.data(), w.data(), bias, c.act == Activation::none ? nullptr : z.data(), y.data(),
                   c.act, scratch.data());
    const std::vector<double> pre = naive_conv(s, x, w, bias);
    const std::vector<float>& pre_out = c.act == Activation::none ? y : z;
    EXPECT_LT(testing::max_rel_diff(pre_out, pre), 1e-5) << describe(c);
    std::vector<float> pre_f(pre.begin(), pre.end()), post(pre.size());
    activation_forward(c.act, pre_f.data(), post.data(), out_elems(s));
    EXPECT_LT(testing::max_rel_diff(y, {post.begin(), post.end()}), 1e-5) << describe(c);
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  Rng rng(12);
  for (const ConvCase& c : kConvCases) {
    const std::string what = describe(c);
    const ConvShape s = conv_shape(2, 2, 5, 5, 3, c.k, c.stride, c.pad);
    std::vector<float> x, w, b, z(out_elems(s)), y(out_elems(s)), dz(out_elems(s));
    std::vector<float> scratch(conv2d_scratch_elements(s));
    do {  // redraw while a ReLU pre-activation sits within reach of the kink
      x = rng.vec(in_elems(s));
      w = rng.vec(s.cout * s.cin * s.k * s.k);
      b = rng.vec(s.cout);
      conv2d_forward(s, x.data(), w.data(), c.bias ? b.data() : nullptr, nullptr, z.data(), Activation::none,
                     scratch.data());
    } while (c.act == Activation::relu && testing::min_abs(z) < testing::kKinkMargin);
    const std::vector<float> r = rng.vec(out_elems(s));
    const bool has_z = c.act != Activation::none;
    conv2d_forward(s, x.data(), w.data(), c.bias ? b.data() : nullptr, has_z ? z.data() : nullptr, y.data(),
                   c.act, scratch.data());
    std::vector<float> dx = testing::nan_filled(in_elems(s));
    std::vector<float> dw(w.size(), 0.0f), db(b.size(), 0.0f);
    conv2d_backward(s, x.data(), w.data(), has_z ? z.data() : nullptr, y.data(), r.data(), dz.data(),
                    dx.data(), dw.data(), c.bias ? db.data() : nullptr, c.act, scratch.data());

    std::vector<float> zz(out_elems(s)), out(out_elems(s)), scratch2(scratch.size());
    auto loss = [&] {
      conv2d_forward(s, x.data(), w.data(), c.bias ? b.data() : nullptr, has_z ? zz.data() : nullptr,
                     out.data(), c.act, scratch2.data());
      return weighted_sum(r, out);
    };
    GradCheckOptions opt;
    if (c.act == Activation::relu) opt.step = testing::kKinkStep;
    expect_gradient(what + " dx", x, dx, loss, opt);
    expect_gradient(what + " dw", w, dw, loss, opt);
    if (c.bias) expect_gradient(what + " db", b, db, loss, opt);

    // Accumulate into dw/db, skip dx when it is null.
    std::vector<float> dw2 = dw, db2 = db;
    conv2d_backward(s, x.data(), w.data(), has_z ? z.data() : nullptr, y.data(), r.data(), dz.data(), nullptr,
                    dw2.data(), c.bias ? db2.data() : nullptr, c.act, scratch.data());
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], 2.0f * dw[i]) << what << " dw accumulate";
    for (size_t i = 0; i < db.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2.0f * db[i]) << what << " db accumulate";
  }
}

// ---- pooling
// ------------------------------------------------------------------------------------------------------

[[nodiscard]] PoolShape pool_shape(int64_t batch, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride,
                                   int64_t pad = 0) {
  return {batch, c, h, w, k, stride, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1, pad};
}

TEST(MaxPool, ForwardHandExample) {
  // One 4x4 plane, k=2 s=2.
  const std::vector<float> x = {1,  2,  5, 6,  //
                                3,  4,  7, 8,  //
                                -1, -2, 0, 0,  //
                                -3, -4, 0, 0};
  const PoolShape s = pool_shape(1, 1, 4, 4, 2, 2);
  std::vector<float> y(4);
  maxpool2d_forward(s, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{4, 8, -1, 0}));
  // Ties: the gradient goes to the first maximum in row-major window order only.
  const std::vector<float> dy = {1, 1, 1, 1};
  std::vector<float> dx = testing::nan_filled(16);
  maxpool2d_backward(s, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 0, 0, 0,  //
                                    0, 1, 0, 1,  //
                                    1, 0, 1, 0,  //
                                    0, 0, 0, 0}));
}

// PyTorch's MaxPool2d(3, 2, padding=1) (the ResNet stem's): padding is -inf, never the maximum, even over
// negative values; the gradient goes to the first maximum inside the image.
TEST(MaxPool, PaddingIsNeverTheMaximum) {
  const std::vector<float> x = {-1, -2, -3,  //
                                -4, -5, -6,  //
                                -7, -8, -9};
  const PoolShape s = pool_shape(1, 1, 3, 3, 3, 2, 1);
  ASSERT_EQ(s.hout, 2);
  std::vector<float> y(4);
  maxpool2d_forward(s, x.data(), y.data());
  // Windows over rows/cols [-1, 1], [-1, 1]x[1, 3], [1, 3]x[-1, 1], [1, 3]x[1, 3].
  EXPECT_EQ(y, (std::vector<float>{-1, -2, -4, -5}));
  std::vector<float> dx = testing::nan_filled(9);
  maxpool2d_backward(s, x.data(), std::vector<float>{1, 2, 3, 4}.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
}

TEST(MaxPool, NanPropagatesAndTakesTheGradient) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1, nan, 3, 2};
  const PoolShape s = pool_shape(1, 1, 2, 2, 2, 2);
  std::vector<float> y(1), dx(4);
  maxpool2d_forward(s, x.data(), y.data());
  EXPECT_TRUE(std::isnan(y[0]));
  const std::vector<float> dy = {1.0f};
  maxpool2d_backward(s, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 1, 0, 0}));
}

// Distinct values spaced well apart, so a perturbation never changes which element is the maximum.
[[nodiscard]] std::vector<float> distinct_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i);
  std::mt19937_64 gen(seed);
  for (size_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen() % (i + 1)]);
  return v;
}

TEST(MaxPool, GradientsMatchFiniteDifferences) {
  Rng rng(13);
  for (const PoolShape& s :
       {pool_shape(2, 2, 4, 6, 2, 2), pool_shape(1, 2, 7, 7, 3, 2), pool_shape(1, 2, 7, 6, 3, 2, 1)}) {
    std::vector<float> x = distinct_values(s.batch * s.c * s.h * s.w, 14);
    const int64_t out_n = s.batch * s.c * s.hout * s.wout;
    const std::vector<float> r = rng.vec(out_n);
    std::vector<float> y(out_n), out(out_n);
    maxpool2d_forward(s, x.data(), y.data());
    std::vector<float> dx = testing::nan_filled(x.size());
    maxpool2d_backward(s, x.data(), r.data(), dx.data());
    expect_gradient("maxpool k" + std::to_string(s.k), x, dx, [&] {
      maxpool2d_forward(s, x.data(), out.data());
      return weighted_sum(r, out);
    });
  }
}

TEST(AvgPool, ForwardAndGradients) {
  const std::vector<float> hand = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> hand_y(4);
  avgpool2d_forward(pool_shape(1, 1, 3, 3, 2, 1), hand.data(), hand_y.data());
  EXPECT_EQ(hand_y, (std::vector<float>{3, 4, 6, 7}));
  // Padding counts as zeros in the k*k divisor (PyTorch's count_include_pad=True): k=2, s=2, pad 1 on 3x3.
  std::vector<float> padded_y(4);
  avgpool2d_forward(pool_shape(1, 1, 3, 3, 2, 2, 1), hand.data(), padded_y.data());
  EXPECT_EQ(padded_y, (std::vector<float>{0.25f, (2 + 3) / 4.0f, (4 + 7) / 4.0f, (5 + 6 + 8 + 9) / 4.0f}));

  Rng rng(15);
  // Non-overlapping, overlapping (stride < k) and a window grid that leaves a border uncovered.
  for (const PoolShape& s :
       {pool_shape(2, 2, 4, 4, 2, 2), pool_shape(1, 2, 5, 5, 3, 1), pool_shape(1, 1, 5, 5, 2, 2),
        pool_shape(1, 2, 5, 6, 3, 2, 1), pool_shape(1, 1, 4, 4, 2, 1, 1)}) {
    std::vector<float> x = rng.vec(s.batch * s.c * s.h * s.w);
    const int64_t out_n = s.batch * s.c * s.hout * s.wout;
    const std::vector<float> r = rng.vec(out_n);
    std::vector<float> out(out_n);
    std::vector<float> dx = testing::nan_filled(x.size());
    avgpool2d_backward(s, r.data(), dx.data());
    expect_gradient("avgpool k" + std::to_string(s.k) + " s" + std::to_string(s.stride), x, dx, [&] {
      avgpool2d_forward(s, x.data(), out.data());
      return weighted_sum(r, out);
    });
  }
}

TEST(GlobalAvgPool, BothLayoutsForwardAndGradients) {
  Rng rng(16);
  const int64_t batch = 2, channels = 3, spatial = 5;
  for (bool tokens : {false, true}) {
    std::vector<float> x = rng.vec(batch * channels * spatial);
    std::vector<float> y(batch * channels);
    global_avgpool_forward(x.data(), y.data(), batch, channels, spatial, tokens);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        double sum = 0.0;
        for (int64_t s = 0; s < spatial; ++s) {
          sum += tokens ? x[(n * spatial + s) * channels + c] : x[(n * channels + c) * spatial + s];
        }
        EXPECT_NEAR(y[n * channels + c], sum / spatial, 1e-6) << "tokens=" << tokens;
      }
    }
    const std::vector<float> r = rng.vec(batch * channels);
    std::vector<float> dx = testing::nan_filled(x.size());
    global_avgpool_backward(r.data(), dx.data(), batch, channels, spatial, tokens);
    expect_gradient(std::string("global_avgpool tokens=") + (tokens ? "1" : "0"), x, dx, [&] {
      global_avgpool_forward(x.data(), y.data(), batch, channels, spatial, tokens);
      return weighted_sum(r, y);
    });
  }
}

// ---- patch embedding
// ------------------------------------------------------------------------------------------------

TEST(PatchEmbedding, ForwardEqualsStridedConvPlusPositions) {
  Rng rng(17);
  for (const PatchShape& s : {PatchShape{2, 3, 8, 12, 4, 5}, PatchShape{1, 2, 7, 9, 3, 4}}) {
    const int64_t grid_h = s.h / s.patch, grid_w = s.w / s.patch, count = grid_h * grid_w;
    const std::vector<float> x = rng.vec(s.batch * s.c * s.h * s.w);
    const std::vector<float> w = rng.vec(s.dim * s.c * s.patch * s.patch), b = rng.vec(s.dim);
    const std::vector<float> pos = rng.vec(count * s.dim);
    std::vector<float> y(s.batch * count * s.dim), scratch(patch_embedding_scratch_elements(s));
    patch_embedding_forward(s, x.data(), w.data(), b.data(), pos.data(), y.data(), scratch.data());
    // The same as a conv with k = stride = p (output [B, D, N]) transposed to [B, N, D], plus positions.
    const ConvShape cs{s.batch, s.c, s.h, s.w, s.dim, s.patch, s.patch, 0, grid_h, grid_w};
    const std::vector<double> conv = naive_conv(cs, x, w, b.data());
    std::vector<double> expected(y.size());
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t p = 0; p < count; ++p)
        for (int64_t d = 0; d < s.dim; ++d)
          expected[(n * count + p) * s.dim + d] = conv[(n * s.dim + d) * count + p] + pos[p * s.dim + d];
    EXPECT_LT(testing::max_rel_diff(y, expected), 1e-5) << "h=" << s.h << " w=" << s.w;
  }
}

TEST(PatchEmbedding, GradientsMatchFiniteDifferences) {
  Rng rng(18);
  // 6x9 with p=3 leaves no border; 7x8 with p=3 leaves the last row and last two columns outside every patch.
  for (const PatchShape& s : {PatchShape{2, 2, 6, 9, 3, 4}, PatchShape{1, 2, 7, 8, 3, 3}}) {
    const int64_t count = (s.h / s.patch) * (s.w / s.patch);
    std::vector<float> x = rng.vec(s.batch * s.c * s.h * s.w);
    std::vector<float> w = rng.vec(s.dim * s.c * s.patch * s.patch), b = rng.vec(s.dim),
                       pos = rng.vec(count * s.dim);
    const std::vector<float> r = rng.vec(s.batch * count * s.dim);
    std::vector<float> scratch(patch_embedding_scratch_elements(s)), out(r.size());
    std::vector<float> dx = testing::nan_filled(x.size());
    std::vector<float> dw(w.size(), 0.0f), db(b.size(), 0.0f), dpos(pos.size(), 0.0f);
    patch_embedding_backward(s, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), dpos.data(),
                             scratch.data());
    auto loss = [&] {
      patch_embedding_forward(s, x.data(), w.data(), b.data(), pos.data(), out.data(), scratch.data());
      return weighted_sum(r, out);
    };
    const std::string what = "patch_embedding " + std::to_string(s.h) + "x" + std::to_string(s.w);
    expect_gradient(what + " dx", x, dx, loss);
    expect_gradient(what + " dw", w, dw, loss);
    expect_gradient(what + " db", b, db, loss);
    expect_gradient(what + " dpositions", pos, dpos, loss);

    std::vector<float> dw2 = dw, db2 = db, dpos2 = dpos;
    patch_embedding_backward(s, x.data(), w.data(), r.data(), nullptr, dw2.data(), db2.data(), dpos2.data(),
                             scratch.data());
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], 2.0f * dw[i]) << what << " dw accumulate";
    for (size_t i = 0; i < db.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2.0f * db[i]) << what << " db accumulate";
    for (size_t i = 0; i < dpos.size(); ++i)
      EXPECT_FLOAT_EQ(dpos2[i], 2.0f * dpos[i]) << what << " dpos accumulate";
  }
}

}  // namespace
}  // namespace bsw::cpu
