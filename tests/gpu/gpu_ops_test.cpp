// Every GPU kernel and GEMM path against its CPU twin in src/backends/cpu/ops.hpp: fresh random inputs,
// outputs poisoned with NaN first, relative error bounded per storage dtype. Without a device every test
// skips.
#include <gtest/gtest.h>

#include <limits>
#include <tuple>
#include <vector>

#include "backends/cuda/gemm.hpp"
#include "backends/cuda/kernels.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "gpu_test_util.hpp"

namespace bsw {
namespace {

using cuda::Epilogue;
using gputest::DeviceArray;
using gputest::quantize;
using gputest::random_values;
using gputest::rel_error;
using gputest::tolerance;
namespace k = cuda::kernels;

class GpuOps : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override { BSW_REQUIRE_DEVICE(); }
  [[nodiscard]] DType t() const { return GetParam(); }
  [[nodiscard]] std::vector<float> input(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) const {
    return quantize(random_values(n, seed, lo, hi), t());
  }
  cudaStream_t stream_ = nullptr;  // the legacy default stream: the tests synchronise through it
};

TEST(GpuInit, FillUniformIsBitIdenticalToTheCpu) {
  BSW_REQUIRE_DEVICE();
  const int64_t n = 100003;
  std::vector<float> ref(n);
  cpu::fill_uniform(ref.data(), n, 0.125f, 1234, 7);
  DeviceArray out(DType::f32, n);
  k::fill_uniform(DType::f32, out.get(), n, 0.125f, k::fill_key(1234, 7), nullptr);
  const std::vector<float> got = out.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ref[i]) << "element " << i;
}

TEST(GpuInit, CastsRoundLikeTheCpu) {
  BSW_REQUIRE_DEVICE();
  std::vector<float> v = random_values(4096, 3, -70000.0f, 70000.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float special :
       {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 3e-8f, inf, -inf})
    v.push_back(special);
  DeviceArray in(DType::f32, v);
  for (DType to : {DType::bf16, DType::f16}) {
    DeviceArray out(to, v.size());
    k::cast(DType::f32, in.get(), to, out.get(), static_cast<int64_t>(v.size()), nullptr);
    const std::vector<float> got = out.download();
    for (size_t i = 0; i < v.size(); ++i) {
      const float ref = to == DType::bf16 ? cpu::bf16_to_float(cpu::float_to_bf16(v[i]))
                                          : cpu::fp16_to_float(cpu::float_to_fp16(v[i]));
      ASSERT_EQ(got[i], ref) << to_string(to) << " of " << v[i];
    }
  }
}

TEST_P(GpuOps, ActivationsForwardAndBackward) {
  const int64_t n = 10000;
  const std::vector<float> z = input(n, 1, -4.0f, 4.0f), dy = input(n, 2);
  for (Activation act : {Activation::relu, Activation::gelu, Activation::silu, Activation::tanh}) {
    std::vector<float> y_ref(n), dz_ref(n);
    cpu::activation_forward(act, z.data(), y_ref.data(), n);
    const std::vector<float> y_q = quantize(y_ref, t());
    cpu::activation_backward(act, z.data(), y_q.data(), dy.data(), dz_ref.data(), n);
    DeviceArray dz_dev(t(), z), y_dev(t(), n), dy_dev(t(), dy), dz_out(t(), n);
    k::activation_forward(act, t(), dz_dev.get(), y_dev.get(), n, stream_);
    EXPECT_LE(rel_error(y_dev.download(), y_ref), tolerance(t())) << to_string(act);
    y_dev.upload(y_q);
    k::activation_backward(act, t(), dz_dev.get(), y_dev.get(), dy_dev.get(), dz_out.get(), n, stream_);
    EXPECT_LE(rel_error(dz_out.download(), dz_ref), tolerance(t())) << to_string(act);
  }
}

TEST_P(GpuOps, AddAndColumnSums) {
  const int64_t rows = 700, cols = 37;
  const std::vector<float> a = input(rows * cols, 3), b = input(rows * cols, 4);
  std::vector<float> ref(rows * cols);
  cpu::add(a.data(), b.data(), ref.data(), rows * cols);
  DeviceArray da(t(), a), db(t(), b), out(t(), rows * cols);
  k::add(t(), da.get(), db.get(), out.get(), rows * cols, stream_);
  EXPECT_LE(rel_error(out.download(), ref), tolerance(t()));

  std::vector<float> sums(cols, 0.5f);  // accumulates onto what is there
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += a[r * cols + c];
  DeviceArray dsum(DType::f32, std::vector<float>(cols, 0.5f));
  k::column_sum_accumulate(t(), da.get(), dsum.f32(), rows, cols, stream_);
  EXPECT_LE(rel_error(dsum.download(), sums), 1e-5);
}

// The conv bias gradient: out[c] += sum over samples and pixels. Few channels and many samples spread over
// slabs of samples (here 12 of 6 samples, the last one short) that add atomically; one slab adds directly.
TEST_P(GpuOps, ChannelSumsOverSlabsOfSamples) {
  for (const auto& [batch, channels, hw] : {std::tuple<int64_t, int64_t, int64_t>{67, 3, 49}, {2, 5, 9}}) {
    const std::vector<float> in = input(batch * channels * hw, 8);
    std::vector<float> sums(channels, -0.25f);  // accumulates onto what is there
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t p = 0; p < hw; ++p) sums[c] += in[(n * channels + c) * hw + p];
    DeviceArray din(t(), in), dsum(DType::f32, std::vector<float>(channels, -0.25f));
    k::channel_sum_accumulate(t(), din.get(), dsum.f32(), batch, channels, hw, stream_);
    EXPECT_LE(rel_error(dsum.download(), sums), 1e-5) << batch << "x" << channels << "x" << hw;
  }
}

TEST_P(GpuOps, LayernormForwardAndBackward) {
  const int64_t rows = 37, dim = 200;
  const std::vector<float> x = input(rows * dim, 5, -2.0f, 3.0f), gamma = input(dim, 6), beta = input(dim, 7);
  const std::vector<float> dy = input(rows * dim, 8);
  std::vector<float> y_ref(rows * dim), mean(rows), rstd(rows), dx_ref(rows * dim);
  std::vector<float> dgamma_ref(dim, 0.25f), dbeta_ref(dim, 0.25f);
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y_ref.data(), mean.data(), rstd.data(), rows,
                         dim);
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx_ref.data(),
                          dgamma_ref.data(), dbeta_ref.data(), rows, dim);
  DeviceArray dx_in(t(), x), dg(t(), gamma), dbeta_in(t(), beta), y(t(), rows * dim), dmean(DType::f32, rows),
      drstd(DType::f32, rows), ddy(t(), dy), dx(t(), rows * dim);
  DeviceArray dgamma(DType::f32, std::vector<float>(dim, 0.25f)),
      dbeta(DType::f32, std::vector<float>(dim, 0.25f));
  k::layernorm_forward(t(), dx_in.get(), dg.get(), dbeta_in.get(), y.get(), dmean.f32(), drstd.f32(), rows,
                       dim, stream_);
  EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t()));
  EXPECT_LE(rel_error(dmean.download(), mean), 1e-5);
  EXPECT_LE(rel_error(drstd.download(), rstd), 1e-5);
  k::layernorm_backward(t(), dx_in.get(), dg.get(), dmean.f32(), drstd.f32(), ddy.get(), dx.get(),
                        dgamma.f32(), dbeta.f32(), rows, dim, stream_);
  EXPECT_LE(rel_error(dx.download(), dx_ref), tolerance(t()));
  EXPECT_LE(rel_error(dgamma.download(), dgamma_ref), 1e-4);
  EXPECT_LE(rel_error(dbeta.download(), dbeta_ref), 1e-5);
}

// Per channel over slices of the batch: one sample per slice (67 x 3); vectors (BatchNorm1d, 32-feature
// blocks) with a partial block of features and 334 slices of 3 rows, the last one short; a plane larger than
// a block (300); one sample. Values offset by 50 so the moments must combine without cancelling.
TEST_P(GpuOps, BatchnormForwardAndBackward) {
  for (const auto& [batch, c, s] : {std::tuple<int64_t, int64_t, int64_t>{67, 3, 49},
                                    {5, 600, 1},
                                    {1000, 70, 1},
                                    {2, 8, 100},
                                    {3, 2, 300},
                                    {1, 4, 9}}) {
    const int64_t n = batch * c * s;
    const std::vector<float> x = input(n, 14, 48.0f, 53.0f);
    const std::vector<float> gamma = input(c, 15), beta = input(c, 16), dy = input(n, 17);
    std::vector<float> y_ref(n), mean(c), invstd(c), rmean(c, 0.0f), rvar(c, 1.0f), dx_ref(n);
    std::vector<float> dgamma_ref(c, 0.25f), dbeta_ref(c, 0.25f), infer_ref(n);
    cpu::batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y_ref.data(), mean.data(),
                                 invstd.data(), rmean.data(), rvar.data(), batch, c, s, kBatchNormMomentum);
    cpu::batchnorm_backward(x.data(), gamma.data(), mean.data(), invstd.data(), dy.data(), dx_ref.data(),
                            dgamma_ref.data(), dbeta_ref.data(), batch, c, s);
    cpu::batchnorm_forward_infer(x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(),
                                 infer_ref.data(), batch, c, s);
    DeviceArray dxin(t(), x), dg(t(), gamma), db(t(), beta), y(t(), n), dmean(DType::f32, c),
        dinvstd(DType::f32, c), ddy(t(), dy), dx(t(), n), infer(t(), n);
    DeviceArray drmean(DType::f32, std::vector<float>(c, 0.0f)),
        drvar(DType::f32, std::vector<float>(c, 1.0f));
    DeviceArray dgamma(DType::f32, std::vector<float>(c, 0.25f)),
        dbeta(DType::f32, std::vector<float>(c, 0.25f));
    DeviceArray ws(DType::f32, static_cast<int64_t>(cuda_batchnorm_workspace_floats(batch, c, s)));
    k::batchnorm_statistics(t(), dxin.get(), dmean.f32(), dinvstd.f32(), drmean.f32(), drvar.f32(), batch, c,
                            s, kBatchNormMomentum, ws.f32(), stream_);
    k::batchnorm_apply(t(), dxin.get(), dg.get(), db.get(), dmean.f32(), dinvstd.f32(), false, y.get(), batch,
                       c, s, stream_);
    const std::string where = std::to_string(batch) + "x" + std::to_string(c) + "x" + std::to_string(s);
    EXPECT_LE(rel_error(dmean.download(), mean), 1e-5) << where;
    EXPECT_LE(rel_error(dinvstd.download(), invstd), 1e-4) << where;
    EXPECT_LE(rel_error(drmean.download(), rmean), 1e-5) << where;
    EXPECT_LE(rel_error(drvar.download(), rvar), 1e-4) << where;
    EXPECT_LE(rel_error(y.download(), y_ref), 1e-3 + tolerance(t())) << where;
    k::batchnorm_backward(t(), dxin.get(), dg.get(), dmean.f32(), dinvstd.f32(), ddy.get(), dx.get(),
                          dgamma.f32(), dbeta.f32(), batch, c, s, ws.f32(), stream_);
    EXPECT_LE(rel_error(dx.download(), dx_ref), 1e-3 + tolerance(t())) << where;
    EXPECT_LE(rel_error(dgamma.download(), dgamma_ref), 1e-3) << where;
    EXPECT_LE(rel_error(dbeta.download(), dbeta_ref), 1e-5) << where;
    k::batchnorm_apply(t(), dxin.get(), dg.get(), db.get(), drmean.f32(), drvar.f32(), true, infer.get(),
                       batch, c, s, stream_);
    EXPECT_LE(rel_error(infer.download(), infer_ref), 1e-4 + tolerance(t())) << where;
  }
}

TEST_P(GpuOps, EmbeddingForwardAndBackward) {
  const int64_t batch = 3, seq = 9, dim = 16, vocab = 5;  // few ids: repeats exercise the atomics
  std::vector<float> ids_f(batch * seq);
  std::vector<int32_t> ids(batch * seq);
  for (size_t i = 0; i < ids.size(); ++i)
    ids_f[i] = static_cast<float>(ids[i] = static_cast<int32_t>((i * 7) % 5));
  const std::vector<float> tokens = input(vocab * dim, 9), positions = input(seq * dim, 10);
  const std::vector<float> dy = input(batch * seq * dim, 11);
  std::vector<float> y_ref(batch * seq * dim), dtok_ref(vocab * dim, 0.0f), dpos_ref(seq * dim, 0.0f);
  cpu::embedding_forward(ids.data(), tokens.data(), positions.data(), y_ref.data(), batch, seq, dim);
  cpu::embedding_backward(ids.data(), dy.data(), dtok_ref.data(), dpos_ref.data(), batch, seq, dim);
  DeviceArray dids(DType::i32, ids_f), dtokens(t(), tokens), dpositions(t(), positions),
      y(t(), batch * seq * dim), ddy(t(), dy);
  DeviceArray dtok(DType::f32, std::vector<float>(vocab * dim, 0.0f)),
      dpos(DType::f32, std::vector<float>(seq * dim, 0.0f));
  k::embedding_forward(t(), dids.i32(), dtokens.get(), dpositions.get(), y.get(), batch, seq, dim, stream_);
  EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t()));
  k::embedding_backward(t(), dids.i32(), ddy.get(), dtok.f32(), dpos.f32(), batch, seq, dim, stream_);
  EXPECT_LE(rel_error(dtok.download(), dtok_ref), 1e-5);
  EXPECT_LE(rel_error(dpos.download(), dpos_ref), 1e-5);
}

TEST_P(GpuOps, PoolingForwardAndBackward) {
  // (kernel, stride, padding): with padding as the ResNet stem's MaxPool2d(3, 2, padding=1).
  for (const auto& [k_size, stride, pad] :
       {std::tuple<int64_t, int64_t, int64_t>{2, 2, 0}, {3, 2, 0}, {3, 1, 0}, {3, 2, 1}, {2, 1, 1}}) {
    const int64_t batch = 2, c = 3, h = 9, w = 8;
    const int64_t hout = (h + 2 * pad - k_size) / stride + 1, wout = (w + 2 * pad - k_size) / stride + 1;
    const cpu::PoolShape s{batch, c, h, w, k_size, stride, hout, wout, pad};
    const k::PoolGeometry g{batch, c, h, w, k_size, stride, hout, wout, pad};
    const std::vector<float> x = input(batch * c * h * w, 12), dy = input(batch * c * hout * wout, 13);
    std::vector<float> y_ref(dy.size()), dx_ref(x.size()), avg_ref(dy.size()), davg_ref(x.size());
    cpu::maxpool2d_forward(s, x.data(), y_ref.data());
    cpu::maxpool2d_backward(s, x.data(), dy.data(), dx_ref.data());
    cpu::avgpool2d_forward(s, x.data(), avg_ref.data());
    cpu::avgpool2d_backward(s, dy.data(), davg_ref.data());
    DeviceArray dx_in(t(), x), ddy(t(), dy), y(t(), dy.size()), dx(t(), x.size());
    k::maxpool_forward(t(), g, dx_in.get(), y.get(), stream_);
    EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t()));
    k::maxpool_backward(t(), g, dx_in.get(), ddy.get(), dx.get(), stream_);
    EXPECT_LE(rel_error(dx.download(), dx_ref), tolerance(t()));
    y.poison();
    dx.poison();
    k::avgpool_forward(t(), g, dx_in.get(), y.get(), stream_);
    EXPECT_LE(rel_error(y.download(), avg_ref), tolerance(t()));
    k::avgpool_backward(t(), g, ddy.get(), dx.get(), stream_);
    EXPECT_LE(rel_error(dx.download(), davg_ref), tolerance(t()));
  }
}

TEST_P(GpuOps, GlobalAvgpoolBothLayouts) {
  const int64_t batch = 3, channels = 5, spatial = 49;
  for (bool tokens : {false, true}) {
    const std::vector<float> x = input(batch * channels * spatial, 14), dy = input(batch * channels, 15);
    std::vector<float> y_ref(batch * channels), dx_ref(x.size());
    cpu::global_avgpool_forward(x.data(), y_ref.data(), batch, channels, spatial, tokens);
    cpu::global_avgpool_backward(dy.data(), dx_ref.data(), batch, channels, spatial, tokens);
    DeviceArray dx_in(t(), x), ddy(t(), dy), y(t(), y_ref.size()), dx(t(), x.size());
    k::global_avgpool_forward(t(), dx_in.get(), y.get(), batch, channels, spatial, tokens, stream_);
    EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t())) << "tokens " << tokens;
    k::global_avgpool_backward(t(), ddy.get(), dx.get(), batch, channels, spatial, tokens, stream_);
    EXPECT_LE(rel_error(dx.download(), dx_ref), tolerance(t())) << "tokens " << tokens;
  }
}

TEST_P(GpuOps, LossesForwardAndBackward) {
  // 1000 classes run one warp per row, 2000 one block per row.
  for (const int64_t classes : {int64_t{1000}, int64_t{2000}}) {
    const int64_t rows = 33;
    const std::vector<float> logits = input(rows * classes, 16, -5.0f, 5.0f);
    std::vector<int32_t> labels(rows);
    std::vector<float> labels_f(rows);
    for (int64_t r = 0; r < rows; ++r)
      labels_f[r] = static_cast<float>(labels[r] = static_cast<int32_t>((r * 37) % classes));
    std::vector<float> dlogits_ref(logits.size());
    const float grad_scale = 0.5f;
    const double loss_ref =
        cpu::cross_entropy(logits.data(), labels.data(), dlogits_ref.data(), rows, classes, grad_scale);
    k::StepScalars host;
    host.grad_scale = grad_scale;
    DeviceArray scalars(DType::f32, 16), dlog(t(), logits), dlab(DType::i32, labels_f),
        dlogits(t(), logits.size()), row_loss(DType::f32, rows), partials(DType::f32, 2 * k::kLossPartials);
    BSW_CUDA(cudaMemcpy(scalars.get(), &host, sizeof(host), cudaMemcpyHostToDevice));
    auto* dev = static_cast<k::StepScalars*>(scalars.get());
    k::cross_entropy(t(), dlog.get(), dlab.i32(), dlogits.get(), row_loss.f32(), rows, classes, dev, stream_);
    k::accumulate_mean_loss(row_loss.f32(), rows, static_cast<double*>(partials.get()), dev, stream_);
    EXPECT_LE(rel_error(dlogits.download(), dlogits_ref), tolerance(t())) << classes << " classes";
    BSW_CUDA(cudaMemcpy(&host, scalars.get(), sizeof(host), cudaMemcpyDeviceToHost));
    EXPECT_NEAR(host.loss_sum, loss_ref, 1e-5 * std::abs(loss_ref)) << classes << " classes";
    EXPECT_EQ(host.bad_label, 0);
  }

  // 9000 values: the mean sums three blocks' partials.
  const int64_t n = 9000;
  const float grad_scale = 0.5f;
  const std::vector<float> y = input(n, 17), target = input(n, 18);
  std::vector<float> dy_ref(n);
  const double mse_ref = cpu::mse(y.data(), target.data(), dy_ref.data(), n, grad_scale);
  k::StepScalars host;
  host.grad_scale = grad_scale;
  DeviceArray scalars(DType::f32, 16), partials(DType::f32, 2 * k::kLossPartials);
  auto* dev = static_cast<k::StepScalars*>(scalars.get());
  BSW_CUDA(cudaMemcpy(scalars.get(), &host, sizeof(host), cudaMemcpyHostToDevice));
  DeviceArray dy_dev(t(), y), dt(t(), target), dy(t(), n), elem(DType::f32, n);
  k::mse(t(), dy_dev.get(), dt.get(), dy.get(), elem.f32(), n, dev, stream_);
  k::accumulate_mean_loss(elem.f32(), n, static_cast<double*>(partials.get()), dev, stream_);
  EXPECT_LE(rel_error(dy.download(), dy_ref), tolerance(t()));
  BSW_CUDA(cudaMemcpy(&host, scalars.get(), sizeof(host), cudaMemcpyDeviceToHost));
  EXPECT_NEAR(host.loss_sum, mse_ref, 1e-5 * mse_ref);
}

// The planner sizes workspace.loss for the session's layout (src/plan/plan.cpp keeps its own constant): the
// mean's kLossPartials doubles, then a loss per row (cross-entropy) or per element (mse). No device needed.
TEST(GpuLoss, ThePlanHoldsTheLossMeansPartialSums) {
  const Graph g = lower(load_model("mlp"));
  const Plan plan = make_plan(g, {64, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(plan.buffer("workspace.loss").elements,
            2u * static_cast<uint64_t>(k::kLossPartials) + 64u * static_cast<uint64_t>(g.loss_rows));
}

TEST(GpuLoss, BadLabelIsReported) {
  BSW_REQUIRE_DEVICE();
  DeviceArray logits(DType::f32, random_values(2 * 4, 19)),
      labels(DType::i32, std::vector<float>{1.0f, 4.0f}), dlogits(DType::f32, 8), row_loss(DType::f32, 2),
      scalars(DType::f32, 16);
  const k::StepScalars host;
  BSW_CUDA(cudaMemcpy(scalars.get(), &host, sizeof(host), cudaMemcpyHostToDevice));
  auto* dev = static_cast<k::StepScalars*>(scalars.get());
  k::cross_entropy(DType::f32, logits.get(), labels.i32(), dlogits.get(), row_loss.f32(), 2, 4, dev, nullptr);
  k::StepScalars back;
  BSW_CUDA(cudaMemcpy(&back, scalars.get(), sizeof(back), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back.bad_label, 1);
}

TEST_P(GpuOps, OptimizersMatchTheCpuOverThreeSteps) {
  const int64_t n = 4099;
  // adamw, then sgd with momentum, sgd with Nesterov momentum and L2 weight decay, and plain sgd with decay.
  struct Case {
    OptimizerType type;
    cpu::SgdSettings sgd;
    const char* name;
  };
  const Case cases[] = {
      {OptimizerType::adamw, {}, "adamw"},
      {OptimizerType::sgd, {1e-2f, 0.9f, 0.0f, false}, "sgd momentum"},
      {OptimizerType::sgd, {1e-2f, 0.9f, 1e-2f, true}, "sgd nesterov + weight decay"},
      {OptimizerType::sgd, {1e-2f, 0.0f, 1e-2f, false}, "sgd weight decay, no momentum"},
  };
  for (const Case& c : cases) {
    std::vector<float> w = random_values(n, 20), m(n, 0.0f), v(n, 0.0f);
    DeviceArray dmaster(DType::f32, w), dparams(t(), n), dm(DType::f32, m), dv(DType::f32, v),
        dgrad(DType::f32, n), scalars(DType::f32, 32);
    auto* dev = static_cast<k::StepScalars*>(scalars.get());
    const bool momentum_buffer = c.type == OptimizerType::sgd && c.sgd.momentum != 0.0f;
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = random_values(n, 100 + static_cast<uint32_t>(step));
      dgrad.upload(g);
      k::StepScalars s;
      s.lr = 1e-2f;
      s.beta1 = 0.9f;
      s.beta2 = 0.999f;
      s.eps = 1e-8f;
      s.momentum = c.sgd.momentum;
      s.sgd_weight_decay = c.sgd.weight_decay;
      s.nesterov = c.sgd.nesterov ? 1 : 0;
      s.t = static_cast<int32_t>(step);
      const float bc1 = static_cast<float>(1.0 - std::pow(0.9, static_cast<double>(step)));
      s.bias_correction2_sqrt =
          static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(0.999f), step)));
      s.step_size = s.lr / bc1;
      s.decay = 1.0f - s.lr * 0.01f;
      BSW_CUDA(cudaMemcpy(scalars.get(), &s, sizeof(s), cudaMemcpyHostToDevice));
      if (c.type == OptimizerType::adamw) {
        cpu::adamw_step(w.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
        k::adamw(dmaster.f32(), dparams.get(), t(), dgrad.f32(), dm.f32(), dv.f32(), n, dev, stream_);
      } else {
        cpu::sgd_step(w.data(), g.data(), momentum_buffer ? m.data() : nullptr, n, c.sgd, step);
        k::sgd(dmaster.f32(), dparams.get(), t(), dgrad.f32(), momentum_buffer ? dm.f32() : nullptr, n, dev,
               stream_);
      }
    }
    EXPECT_LE(rel_error(dmaster.download(), w), 1e-5) << c.name;
    if (momentum_buffer) {
      EXPECT_LE(rel_error(dm.download(), m), 1e-5) << c.name;
    }
    if (t() != DType::f32) {
      EXPECT_LE(rel_error(dparams.download(), w), tolerance(t())) << c.name;
    }
  }
}

TEST(GpuOptimizer, NonFiniteGradientSkipsTheUpdate) {
  BSW_REQUIRE_DEVICE();
  const int64_t n = 1000;
  std::vector<float> g = random_values(n, 21);
  g[517] = std::numeric_limits<float>::infinity();
  const std::vector<float> w = random_values(n, 22);
  DeviceArray dgrad(DType::f32, g), dmaster(DType::f32, w), dm(DType::f32, std::vector<float>(n, 0.0f)),
      dv(DType::f32, std::vector<float>(n, 0.0f)), scalars(DType::f32, 16);
  k::StepScalars s;
  s.inv_loss_scale = 0.5f;
  s.lr = 0.1f;
  BSW_CUDA(cudaMemcpy(scalars.get(), &s, sizeof(s), cudaMemcpyHostToDevice));
  auto* dev = static_cast<k::StepScalars*>(scalars.get());
  k::unscale_and_check(dgrad.f32(), n, dev, nullptr);
  k::adamw(dmaster.f32(), dmaster.f32(), DType::f32, dgrad.f32(), dm.f32(), dv.f32(), n, dev, nullptr);
  BSW_CUDA(cudaMemcpy(&s, scalars.get(), sizeof(s), cudaMemcpyDeviceToHost));
  EXPECT_EQ(s.nonfinite, 1);
  EXPECT_EQ(dmaster.download(), w);
  EXPECT_EQ(dgrad.download()[3], g[3] * 0.5f);
}

TEST_P(GpuOps, SoftmaxForwardAndBackwardWithCausalMask) {
  const int64_t seq = 70, rows = 3 * seq;
  for (bool causal : {false, true}) {
    const std::vector<float> scores = random_values(rows * seq, 23, -3.0f, 3.0f),
                             dp = random_values(rows * seq, 24);
    std::vector<float> p_ref(rows * seq, 0.0f), ds_ref(rows * seq, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t len = causal ? r % seq + 1 : seq;
      double mx = -1e30, sum = 0, dot = 0;
      for (int64_t j = 0; j < len; ++j) mx = std::max<double>(mx, scores[r * seq + j]);
      for (int64_t j = 0; j < len; ++j) sum += std::exp(scores[r * seq + j] - mx);
      for (int64_t j = 0; j < len; ++j)
        p_ref[r * seq + j] = static_cast<float>(std::exp(scores[r * seq + j] - mx) / sum);
      const std::vector<float> pq = quantize({p_ref.begin() + r * seq, p_ref.begin() + (r + 1) * seq}, t());
      for (int64_t j = 0; j < len; ++j) dot += static_cast<double>(pq[j]) * dp[r * seq + j];
      for (int64_t j = 0; j < len; ++j)
        ds_ref[r * seq + j] = static_cast<float>(pq[j] * (dp[r * seq + j] - dot));
    }
    DeviceArray ds(DType::f32, scores), probs(t(), rows * seq), ddp(DType::f32, dp);
    k::softmax_forward(t(), ds.f32(), probs.get(), rows, seq, causal, stream_);
    EXPECT_LE(rel_error(probs.download(), p_ref), tolerance(t())) << "causal " << causal;
    probs.upload(quantize(p_ref, t()));
    k::softmax_backward(t(), probs.get(), ddp.f32(), rows, seq, stream_);
    EXPECT_LE(rel_error(probs.download(), ds_ref), tolerance(t()) * 2) << "causal " << causal;
  }
}

TEST_P(GpuOps, HeadSplitAndMergeAreInverse) {
  const int64_t batch = 2, seq = 5, heads = 3, hd = 4;
  const std::vector<float> x = input(batch * seq * 3 * heads * hd, 25);
  DeviceArray in(t(), x), mid(t(), x.size()), back(t(), x.size());
  k::split_heads(t(), in.get(), mid.get(), batch, seq, 3, heads, hd, stream_);
  const std::vector<float> m = mid.download();
  // q of (n=1, h=2, t=3, d=1) sits at [part 0][n][h][t][d] and came from [n][t][part 0][h][d].
  EXPECT_EQ(m[((0 * batch + 1) * heads + 2) * seq * hd + 3 * hd + 1],
            x[((1 * seq + 3) * 3 + 0) * heads * hd + 2 * hd + 1]);
  k::merge_heads(t(), mid.get(), back.get(), batch, seq, 3, heads, hd, stream_);
  EXPECT_EQ(back.download(), x);
}

TEST_P(GpuOps, Im2colGemmConvMatchesCpuConv) {
  // The session's conv2d path: im2col -> GEMM -> permute, and its backward (dW, db, dx through col2im).
  const int64_t batch = 3, cin = 3, h = 9, w = 7, cout = 4, ks = 3, stride = 2, pad = 1;
  const int64_t hout = (h + 2 * pad - ks) / stride + 1, wout = (w + 2 * pad - ks) / stride + 1,
                hw = hout * wout;
  const cpu::ConvShape s{batch, cin, h, w, cout, ks, stride, pad, hout, wout};
  const k::ConvGeometry g{cin, h, w, ks, stride, pad, hout, wout};
  const int64_t patch = cin * ks * ks;
  const std::vector<float> x = input(batch * cin * h * w, 26), wt = input(cout * patch, 27),
                           b = input(cout, 28);
  const std::vector<float> dy = input(batch * cout * hw, 29);
  std::vector<float> y_ref(batch * cout * hw), scratch(cpu::conv2d_scratch_elements(s)), dx_ref(x.size());
  std::vector<float> dw_ref(cout * patch, 0.0f), db_ref(cout, 0.0f);
  cpu::conv2d_forward(s, x.data(), wt.data(), b.data(), nullptr, y_ref.data(), Activation::none,
                      scratch.data());
  cpu::conv2d_backward(s, x.data(), wt.data(), nullptr, y_ref.data(), dy.data(), nullptr, dx_ref.data(),
                       dw_ref.data(), db_ref.data(), Activation::none, scratch.data());

  DeviceArray dx_in(t(), x), dw(t(), wt), dbias(t(), b), col(t(), patch * batch * hw),
      perm(t(), cout * batch * hw), y(t(), y_ref.size()), ddy(t(), dy), dx(t(), x.size()),
      ws(DType::f32, (32u << 20) / 4);
  DeviceArray dwg(DType::f32, std::vector<float>(cout * patch, 0.0f)),
      dbg(DType::f32, std::vector<float>(cout, 0.0f));
  cuda::Gemm gemm(
      t() == DType::f32 ? Precision::fp32 : (t() == DType::bf16 ? Precision::bf16 : Precision::fp16),
      ws.get(), ws.bytes());
  k::im2col(t(), g, dx_in.get(), col.get(), batch, stream_);
  cuda::GemmArgs fwd;
  fwd.m = cout;
  fwd.n = batch * hw;
  fwd.k = patch;
  fwd.a = dw.get();
  fwd.lda = patch;
  fwd.b = col.get();
  fwd.ldb = batch * hw;
  fwd.c = perm.get();
  fwd.ldc = batch * hw;
  fwd.ab_type = fwd.c_type = t();
  gemm.run(fwd, stream_);
  k::channels_to_nchw(t(), perm.get(), dbias.get(), y.get(), batch, cout, hw, stream_);
  EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t()));

  k::channel_sum_accumulate(t(), ddy.get(), dbg.f32(), batch, cout, hw, stream_);
  k::nchw_to_channels(t(), ddy.get(), perm.get(), batch, cout, hw, stream_);
  cuda::GemmArgs gw;
  gw.trans_b = true;
  gw.m = cout;
  gw.n = patch;
  gw.k = batch * hw;
  gw.a = perm.get();
  gw.lda = batch * hw;
  gw.b = col.get();
  gw.ldb = batch * hw;
  gw.c = dwg.get();
  gw.ldc = patch;
  gw.ab_type = t();
  gw.c_type = DType::f32;
  gw.beta = 1.0f;
  gemm.run(gw, stream_);
  cuda::GemmArgs gx;
  gx.trans_a = true;
  gx.m = patch;
  gx.n = batch * hw;
  gx.k = cout;
  gx.a = dw.get();
  gx.lda = patch;
  gx.b = perm.get();
  gx.ldb = batch * hw;
  gx.c = col.get();
  gx.ldc = batch * hw;
  gx.ab_type = gx.c_type = t();
  gemm.run(gx, stream_);
  k::col2im(t(), g, col.get(), dx.get(), batch, stream_);
  EXPECT_LE(rel_error(dwg.download(), dw_ref), tolerance(t()));
  EXPECT_LE(rel_error(dbg.download(), db_ref), 1e-5);
  EXPECT_LE(rel_error(dx.download(), dx_ref), tolerance(t()));
}

INSTANTIATE_TEST_SUITE_P(Storage, GpuOps, testing::Values(DType::f32, DType::bf16, DType::f16),
                         gputest::dtype_name);

// Linear through cuBLASLt (bias epilogue; GELU epilogue for 16-bit) against cpu::linear_forward, per
// precision.
class GpuGemm : public testing::TestWithParam<Precision> {
 protected:
  void SetUp() override { BSW_REQUIRE_DEVICE(); }
};

TEST_P(GpuGemm, LinearForwardAndWeightGradient) {
  const Precision p = GetParam();
  const DType t = storage_dtype(p);
  const double tol = p == Precision::fp32 ? 1e-5 : p == Precision::tf32 ? 1e-3 : 1e-2;
  const int64_t m = 65, kk = 48, n = 40;
  const std::vector<float> x = quantize(random_values(m * kk, 30), t),
                           w = quantize(random_values(n * kk + n, 31), t);
  const std::vector<float> dy = quantize(random_values(m * n, 32), t);
  for (Epilogue e : {Epilogue::none, Epilogue::bias, Epilogue::gelu_bias}) {
    if (e == Epilogue::gelu_bias && t == DType::f32) continue;
    const Activation act = e == Epilogue::gelu_bias ? Activation::gelu : Activation::none;
    std::vector<float> y_ref(m * n), z_ref(m * n);
    cpu::linear_forward(x.data(), w.data(), e == Epilogue::none ? nullptr : w.data() + n * kk,
                        act == Activation::none ? nullptr : z_ref.data(), y_ref.data(), m, kk, n, act);
    DeviceArray dx(t, x), dw(t, w), y(t, m * n), ws(DType::f32, (32u << 20) / 4);
    cuda::Gemm gemm(p, ws.get(), ws.bytes());
    cuda::GemmArgs g;
    g.trans_b = true;
    g.m = m;
    g.n = n;
    g.k = kk;
    g.a = dx.get();
    g.lda = kk;
    g.b = dw.get();
    g.ldb = kk;
    g.c = y.get();
    g.ldc = n;
    g.ab_type = g.c_type = t;
    g.epilogue = e;
    if (e != Epilogue::none) g.bias = static_cast<char*>(dw.get()) + n * kk * dtype_bytes(t);
    gemm.run(g, nullptr);
    EXPECT_LE(rel_error(y.download(), y_ref), tol) << "epilogue " << static_cast<int>(e);
  }
  // dW[N, K] += dy^T x into fp32 gradients.
  std::vector<float> dw_ref(n * kk, 1.0f), scratch(m * n), db(n, 0.0f);
  std::vector<float> y_ref(m * n);
  cpu::linear_backward(x.data(), w.data(), nullptr, y_ref.data(), dy.data(), scratch.data(), nullptr,
                       dw_ref.data(), db.data(), m, kk, n, Activation::none);
  DeviceArray ddy(t, dy), dx(t, x), dwg(DType::f32, std::vector<float>(n * kk, 1.0f)),
      ws(DType::f32, (32u << 20) / 4);
  cuda::Gemm gemm(p, ws.get(), ws.bytes());
  cuda::GemmArgs g;
  g.trans_a = true;
  g.m = n;
  g.n = kk;
  g.k = m;
  g.a = ddy.get();
  g.lda = n;
  g.b = dx.get();
  g.ldb = kk;
  g.c = dwg.get();
  g.ldc = kk;
  g.ab_type = t;
  g.c_type = DType::f32;
  g.beta = 1.0f;
  gemm.run(g, nullptr);
  EXPECT_LE(rel_error(dwg.download(), dw_ref), tol);
}

TEST_P(GpuGemm, DgeluBgradEpilogueIsTheGeluBackwardAndBiasGradient) {
  // dx = dz W of a linear, with the previous linear's GELU backward and bias-gradient sum fused in.
  const Precision p = GetParam();
  const DType t = storage_dtype(p);
  if (t == DType::f32) GTEST_SKIP() << "the session fuses GELU epilogues in 16-bit only";
  const int64_t m = 72, n = 40, k = 56;  // dz [M, N], W [N, K], z_prev [M, K]
  const std::vector<float> dz = quantize(random_values(m * n, 33), t),
                           w = quantize(random_values(n * k, 34), t),
                           z = quantize(random_values(m * k, 35, -3.0f, 3.0f), t);
  std::vector<float> dx(m * k, 0.0f), y(m * k), dz_prev(m * k), bias_ref(k, 0.0f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c)
      for (int64_t j = 0; j < n; ++j) dx[r * k + c] += dz[r * n + j] * w[j * k + c];
  dx = quantize(dx, t);  // the CPU session rounds dx to storage before the activation's backward
  cpu::activation_forward(Activation::gelu, z.data(), y.data(), m * k);
  cpu::activation_backward(Activation::gelu, z.data(), y.data(), dx.data(), dz_prev.data(), m * k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) bias_ref[c] += dz_prev[r * k + c];

  DeviceArray ddz(t, dz), dw(t, w), dz_aux(t, z), out(t, m * k), bias(t, k), ws(DType::f32, (32u << 20) / 4);
  cuda::Gemm gemm(p, ws.get(), ws.bytes());
  cuda::GemmArgs g;
  g.m = m;
  g.n = k;
  g.k = n;
  g.a = ddz.get();
  g.lda = n;
  g.b = dw.get();
  g.ldb = k;
  g.c = out.get();
  g.ldc = k;
  g.ab_type = g.c_type = t;
  g.epilogue = Epilogue::dgelu_bgrad;
  g.aux = dz_aux.get();
  g.ld_aux = k;
  g.bias = bias.get();
  gemm.run(g, nullptr);
  EXPECT_LE(rel_error(out.download(), dz_prev), 2e-2);
  EXPECT_LE(rel_error(bias.download(), bias_ref), 2e-2);
  DeviceArray acc(DType::f32, std::vector<float>(k, 1.0f));
  k::accumulate_f32(t, bias.get(), acc.f32(), k, nullptr);
  std::vector<float> acc_ref(k);
  for (int64_t c = 0; c < k; ++c) acc_ref[c] = 1.0f + bias_ref[c];
  EXPECT_LE(rel_error(acc.download(), acc_ref), 2e-2);
}

// The non-fused attention path asks for batch * heads products; past cuBLASLt's 65535 they run in slices.
TEST_P(GpuGemm, BatchedProductsBeyondTheBatchCountLimitRunInSlices) {
  const Precision p = GetParam();
  const DType t = storage_dtype(p);
  const double tol = p == Precision::fp32 ? 1e-5 : p == Precision::tf32 ? 1e-3 : 1e-2;
  const int64_t batch = cuda::Gemm::kMaxBatchCount + 7, m = 2, n = 3, kk = 4;
  const std::vector<float> a = quantize(random_values(batch * m * kk, 36), t),
                           b = quantize(random_values(batch * kk * n, 37), t);
  std::vector<float> ref(batch * m * n, 0.0f);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < kk; ++j)
          ref[(i * m + r) * n + c] += a[(i * m + r) * kk + j] * b[(i * kk + j) * n + c];
  DeviceArray da(t, a), db(t, b), dc(t, batch * m * n), ws(DType::f32, (32u << 20) / 4);
  cuda::Gemm gemm(p, ws.get(), ws.bytes());
  cuda::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = kk;
  g.a = da.get();
  g.lda = kk;
  g.b = db.get();
  g.ldb = n;
  g.c = dc.get();
  g.ldc = n;
  g.ab_type = g.c_type = t;
  g.batch = batch;
  g.stride_a = m * kk;
  g.stride_b = kk * n;
  g.stride_c = m * n;
  EXPECT_TRUE(gemm.available(g));
  gemm.run(g, nullptr);
  const std::vector<float> got = dc.download();
  EXPECT_LE(rel_error(got, ref), tol);
  // The last products, in the second slice, were computed too.
  const std::vector<float> tail_got(got.end() - 7 * m * n, got.end()),
      tail_ref(ref.end() - 7 * m * n, ref.end());
  EXPECT_LE(rel_error(tail_got, tail_ref), tol);
  EXPECT_EQ(gemm.cached_shapes(), 2u);  // a full slice and the rest
}

INSTANTIATE_TEST_SUITE_P(Precisions, GpuGemm,
                         testing::Values(Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16),
                         [](const testing::TestParamInfo<Precision>& p) {
                           return std::string(to_string(p.param));
                         });

}  // namespace
}  // namespace bsw
