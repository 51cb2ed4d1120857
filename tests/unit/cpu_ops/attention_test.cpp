// The attention core: forward against a naive per-head implementation in double (causal and not), exact zeros
// above the diagonal, rows of probs summing to 1, and dqkv against central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "gradcheck.hpp"

namespace bsw::cpu {
namespace {

using testing::expect_gradient;
using testing::Rng;
using testing::weighted_sum;

// softmax(q k^T / sqrt(hd)) v per (batch, head), in double, straight from the definition.
[[nodiscard]] std::vector<double> naive_attention(const std::vector<float>& qkv, int64_t batch, int64_t seq,
                                                  int64_t dim, int64_t heads, bool causal) {
  const int64_t hd = dim / heads;
  std::vector<double> out(static_cast<size_t>(batch * seq * dim), 0.0);
  auto at = [&](int64_t n, int64_t t, int64_t part, int64_t h, int64_t i) {
    return static_cast<double>(qkv[(n * seq + t) * 3 * dim + part * dim + h * hd + i]);
  };
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t keys = causal ? i + 1 : seq;
        std::vector<double> score(keys);
        double max_score = -1e300;
        for (int64_t j = 0; j < keys; ++j) {
          double s = 0.0;
          for (int64_t e = 0; e < hd; ++e) s += at(n, i, 0, h, e) * at(n, j, 1, h, e);
          score[j] = s / std::sqrt(static_cast<double>(hd));
          max_score = std::max(max_score, score[j]);
        }
        double total = 0.0;
        for (double& s : score) total += (s = std::exp(s - max_score));
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0.0;
          for (int64_t j = 0; j < keys; ++j) o += score[j] / total * at(n, j, 2, h, e);
          out[(n * seq + i) * dim + h * hd + e] = o;
        }
      }
    }
  }
  return out;
}

TEST(Attention, ForwardMatchesNaive) {
  Rng rng(31);
  const int64_t batch = 2, seq = 5, dim = 8, heads = 2;
  const std::vector<float> qkv = rng.vec(batch * seq * 3 * dim, -2.0f, 2.0f);
  for (bool causal : {false, true}) {
    std::vector<float> out(batch * seq * dim), probs(batch * heads * seq * seq, -1.0f);
    attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, dim, heads, causal);
    EXPECT_LT(testing::max_rel_diff(out, naive_attention(qkv, batch, seq, dim, heads, causal)), 1e-5)
        << "causal=" << causal;
    for (int64_t row = 0; row < batch * heads * seq; ++row) {
      const int64_t i = row % seq;
      double sum = 0.0;
      for (int64_t j = 0; j < seq; ++j) {
        const float p = probs[row * seq + j];
        sum += p;
        if (causal && j > i) {
          EXPECT_EQ(p, 0.0f) << "masked prob row " << row << " col " << j;
        } else {
          EXPECT_GT(p, 0.0f);
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
}

TEST(Attention, LargeScoresDoNotOverflow) {
  // Scores of ~1e4 would overflow exp() without the max subtraction.
  const int64_t seq = 3, dim = 4, heads = 1;
  std::vector<float> qkv(seq * 3 * dim);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t e = 0; e < dim; ++e) {
      qkv[t * 3 * dim + e] = 60.0f;                                // q
      qkv[t * 3 * dim + dim + e] = 50.0f + static_cast<float>(t);  // k
      qkv[t * 3 * dim + 2 * dim + e] = static_cast<float>(t + 1);  // v
    }
  std::vector<float> out(seq * dim), probs(seq * seq);
  attention_forward(qkv.data(), out.data(), probs.data(), 1, seq, dim, heads, false);
  EXPECT_TRUE(all_finite(out.data(), static_cast<int64_t>(out.size())));
  EXPECT_LT(testing::max_rel_diff(out, naive_attention(qkv, 1, seq, dim, heads, false)), 1e-5);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  Rng rng(32);
  const int64_t batch = 2, seq = 4, dim = 6, heads = 2;
  for (bool causal : {false, true}) {
    std::vector<float> qkv = rng.vec(batch * seq * 3 * dim);
    const std::vector<float> r = rng.vec(batch * seq * dim);
    std::vector<float> out(r.size()), probs(batch * heads * seq * seq),
        scratch(attention_scratch_elements(seq));
    attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, dim, heads, causal);
    std::vector<float> dqkv = testing::nan_filled(qkv.size());  // overwritten everywhere
    attention_backward(qkv.data(), probs.data(), r.data(), dqkv.data(), batch, seq, dim, heads, causal,
                       scratch.data());
    std::vector<float> out2(r.size()), probs2(probs.size());
    expect_gradient(std::string("attention causal=") + (causal ? "1" : "0"), qkv, dqkv, [&] {
      attention_forward(qkv.data(), out2.data(), probs2.data(), batch, seq, dim, heads, causal);
      return weighted_sum(r, out2);
    });
    if (causal) {
      // The first query attends only to itself (its prob is exactly 1), so its gradient is exactly zero.
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t e = 0; e < dim; ++e) EXPECT_EQ(dqkv[n * seq * 3 * dim + e], 0.0f) << "dq[t=0] " << e;
      }
    }
  }
}

}  // namespace
}  // namespace bsw::cpu
