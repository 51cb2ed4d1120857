// CPU backend tests: allocated bytes equal the plan for every preset, whole-network gradients against finite
// differences, accumulation equivalent to one big batch, training lowers the loss in every precision.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/ops.hpp"
#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"

namespace bsw {
namespace {

Graph graph_of(const std::string& text) {
  return lower(parse_model(nlohmann::json::parse(text), "test.json"));
}

struct Prepared {
  Graph graph;
  Plan plan;
  std::unique_ptr<Session> session;
  cpu::CpuSessionProbe* probe = nullptr;
};

Prepared prepare(const Graph& g, const PlanRequest& request, uint64_t seed) {
  Prepared out{g, make_plan(g, request), nullptr, nullptr};
  SessionOptions options;
  options.seed = seed;
  out.session = cpu::make_cpu_backend()->prepare(out.graph, out.plan, options);
  out.probe = dynamic_cast<cpu::CpuSessionProbe*>(out.session.get());
  return out;
}

Prepared prepare(const Graph& g, int64_t batch, Precision p, Mode m, int64_t accumulation = 1,
                 uint64_t seed = 7) {
  return prepare(g, {batch, p, m, accumulation, BackendKind::cpu}, seed);
}

// Every layer type, smooth activations (finite differences need no kinks).
constexpr const char* kAllLayersImage = R"({"name": "all-image",
  "input": {"type": "image", "channels": 2, "height": 8, "width": 8},
  "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "activation": "tanh"},
             {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1,
                                              "activation": "silu"}]},
             {"type": "avgpool2d", "kernel_size": 2},
             {"type": "conv2d", "out_channels": 4, "kernel_size": 2, "stride": 2, "activation": "gelu"},
             {"type": "global_avgpool"},
             {"type": "linear", "out_features": 5}],
  "loss": "cross_entropy"})";

constexpr const char* kAllLayersTokens = R"({"name": "all-tokens",
  "input": {"type": "tokens", "sequence_length": 6, "vocab_size": 11},
  "layers": [{"type": "embedding", "dim": 8},
             {"type": "transformer_block", "heads": 2, "mlp_ratio": 2, "causal": true},
             {"type": "attention", "heads": 4},
             {"type": "layernorm"},
             {"type": "linear", "out_features": 11}]})";

constexpr const char* kVitMse = R"({"name": "vit-mse",
  "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
  "layers": [{"type": "patch_embedding", "patch_size": 4, "dim": 8},
             {"type": "transformer_block", "heads": 2},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 3, "activation": "tanh"}],
  "loss": "mse"})";

constexpr const char* kPools = R"({"name": "pools",
  "input": {"type": "image", "channels": 2, "height": 6, "width": 6},
  "layers": [{"type": "maxpool2d", "kernel_size": 2}, {"type": "flatten"},
             {"type": "linear", "out_features": 4, "activation": "gelu"},
             {"type": "linear", "out_features": 3}]})";

// Padded pools (the ResNet stem's max pool, an average pool counting its padding) through the whole backward.
constexpr const char* kPaddedPools = R"({"name": "padded-pools",
  "input": {"type": "image", "channels": 2, "height": 7, "width": 7},
  "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1, "activation": "tanh"},
             {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
             {"type": "avgpool2d", "kernel_size": 2, "stride": 1, "padding": 1},
             {"type": "flatten"}, {"type": "linear", "out_features": 3}]})";

// Residuals of the network input, nested, then one of a layer's output: no gradient stash for the first two.
constexpr const char* kResidualOfInput = R"({"name": "residual-of-input",
  "input": {"type": "vector", "features": 6},
  "layers": [{"type": "residual", "layers": [{"type": "residual", "layers": [
                {"type": "linear", "out_features": 6, "activation": "gelu"}]}]},
             {"type": "linear", "out_features": 5, "activation": "tanh"},
             {"type": "residual", "layers": [{"type": "linear", "out_features": 5, "activation": "silu"}]},
             {"type": "linear", "out_features": 3}]})";

// A pool before the first layer that learns: backward stops at the conv, which computes no input gradient.
constexpr const char* kPoolFirst = R"({"name": "pool-first",
  "input": {"type": "image", "channels": 2, "height": 8, "width": 8},
  "layers": [{"type": "avgpool2d", "kernel_size": 2},
             {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1,
                                              "activation": "tanh"}]},
             {"type": "flatten"}, {"type": "linear", "out_features": 3}]})";

// Batch normalization after convolutions without bias (the ResNet pattern), at the end of a residual (the add
// then writes over its output), over a vector (BatchNorm1d) and as the first layer that learns.
constexpr const char* kBatchNorm = R"({"name": "batchnorm",
  "input": {"type": "image", "channels": 2, "height": 6, "width": 6},
  "layers": [{"type": "batchnorm"},
             {"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "bias": false},
             {"type": "batchnorm", "activation": "silu"},
             {"type": "residual", "layers": [
                {"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm", "activation": "tanh"},
                {"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm"}]},
             {"type": "avgpool2d", "kernel_size": 2}, {"type": "flatten"},
             {"type": "linear", "out_features": 5, "bias": false},
             {"type": "batchnorm", "activation": "gelu"},
             {"type": "linear", "out_features": 3}]})";

// Activations after residual adds: tanh on a residual of the network input (no gradient stash, but the
// gradient into its inner layers goes through the tanh), tanh in place over a linear's output, SiLU with its
// own pre-activation, and a tanh add in place over a SiLU add's output.
constexpr const char* kResidualActivations = R"({"name": "residual-activations",
  "input": {"type": "vector", "features": 6},
  "layers": [{"type": "residual", "activation": "tanh", "layers": [{"type": "linear", "out_features": 6}]},
             {"type": "residual", "activation": "tanh", "layers": [{"type": "linear", "out_features": 6}]},
             {"type": "residual", "activation": "silu", "layers": [
                {"type": "linear", "out_features": 6, "activation": "gelu"}]},
             {"type": "residual", "activation": "tanh", "layers": [
                {"type": "residual", "activation": "silu", "layers": [{"type": "linear", "out_features": 6}]}]},
             {"type": "linear", "out_features": 3}]})";

// Projection shortcuts: on the network input (the shortcut conv and the first inner conv both compute no
// input gradient, and backward goes on from one path to the other), one without parameters (an average pool),
// one ending in a tanh (kept for backward, not transient), and one ending in a nested residual.
constexpr const char* kShortcuts = R"({"name": "shortcuts",
  "input": {"type": "image", "channels": 2, "height": 8, "width": 8},
  "layers": [{"type": "residual", "activation": "tanh", "layers": [
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1, "bias": false},
                {"type": "batchnorm", "activation": "tanh"},
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm"}],
              "shortcut": [{"type": "conv2d", "out_channels": 4, "kernel_size": 1, "stride": 2, "bias": false},
                           {"type": "batchnorm"}]},
             {"type": "residual", "activation": "silu", "layers": [
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1,
                 "activation": "gelu"}],
              "shortcut": [{"type": "avgpool2d", "kernel_size": 2}]},
             {"type": "residual", "layers": [
                {"type": "conv2d", "out_channels": 6, "kernel_size": 3, "padding": 1, "activation": "silu"}],
              "shortcut": [{"type": "conv2d", "out_channels": 6, "kernel_size": 1, "activation": "tanh"}]},
             {"type": "residual", "activation": "tanh", "layers": [
                {"type": "conv2d", "out_channels": 5, "kernel_size": 3, "padding": 1}],
              "shortcut": [{"type": "conv2d", "out_channels": 5, "kernel_size": 1},
                           {"type": "residual", "layers": [
                              {"type": "conv2d", "out_channels": 5, "kernel_size": 3, "padding": 1,
                               "activation": "tanh"}]}]},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 3}]})";

// The only parameters of a block on the network input are on its shortcut: backward stops in the inner path
// (a pool) and goes on with the shortcut; and a vector model with shortcuts of linear layers.
constexpr const char* kShortcutOnly = R"({"name": "shortcut-only",
  "input": {"type": "image", "channels": 2, "height": 6, "width": 6},
  "layers": [{"type": "residual", "layers": [{"type": "avgpool2d", "kernel_size": 3, "stride": 1, "padding": 1}],
              "shortcut": [{"type": "conv2d", "out_channels": 2, "kernel_size": 1}]},
             {"type": "flatten"}, {"type": "linear", "out_features": 3}]})";

// A projection block on the network input whose inner path starts with another one: backward stops in the
// nested block's inner path, goes on with its shortcut, stops there, and goes on with the outer shortcut.
constexpr const char* kShortcutNested = R"({"name": "shortcut-nested",
  "input": {"type": "image", "channels": 2, "height": 8, "width": 8},
  "layers": [{"type": "residual", "activation": "tanh",
              "shortcut": [{"type": "conv2d", "out_channels": 4, "kernel_size": 1, "stride": 2}],
              "layers": [{"type": "residual",
                          "shortcut": [{"type": "conv2d", "out_channels": 4, "kernel_size": 1, "stride": 2}],
                          "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2,
                                      "padding": 1, "activation": "tanh"}]},
                         {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1,
                          "activation": "tanh"}]},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 3}]})";

constexpr const char* kShortcutVector = R"({"name": "shortcut-vector",
  "input": {"type": "vector", "features": 6},
  "layers": [{"type": "linear", "out_features": 6, "activation": "tanh"},
             {"type": "residual", "activation": "gelu", "layers": [
                {"type": "linear", "out_features": 4, "activation": "silu"}, {"type": "linear", "out_features": 4}],
              "shortcut": [{"type": "linear", "out_features": 4, "bias": false}, {"type": "batchnorm"}]},
             {"type": "linear", "out_features": 3}]})";

// A residual (with a shortcut of its own) as the last layer of a shortcut: its sum waits in act.shortcut, and
// act.residual[1] holds only its 4-wide input (a review found the plan sizing it for the 64-wide sum).
constexpr const char* kShortcutOfAResidual = R"({"name": "shortcut-of-a-residual",
  "input": {"type": "vector", "features": 4},
  "layers": [{"type": "residual",
              "shortcut": [{"type": "residual", "layers": [{"type": "linear", "out_features": 64}],
                            "shortcut": [{"type": "linear", "out_features": 64}]}],
              "layers": [{"type": "linear", "out_features": 64}]},
             {"type": "linear", "out_features": 3}]})";

// Central differences of the whole network's loss against the backend's gradients: a few entries of every
// parameter tensor of every op, so each layer's backward is reached through the whole stack.
void check_gradients(const char* text, int64_t batch) {
  const Graph g = graph_of(text);
  Prepared s = prepare(g, batch, Precision::fp32, Mode::train);
  const std::vector<float> params = s.probe->parameters_f32();
  (void)s.probe->loss_and_gradients();
  const std::vector<float> grads = s.probe->gradients_f32();
  std::mt19937 rng(3);
  int checked = 0;
  for (const Op& op : g.ops) {
    for (const Op::Param& p : op.params) {
      std::uniform_int_distribution<int64_t> pick(p.offset, p.offset + p.elements - 1);
      for (int k = 0; k < 3; ++k) {
        const size_t i = static_cast<size_t>(pick(rng));
        const float eps = 1e-3f * std::max(1.0f, std::abs(params[i]));
        std::vector<float> moved = params;
        moved[i] = params[i] + eps;
        s.probe->set_parameters(moved);
        const double lp = s.probe->loss_and_gradients();
        moved[i] = params[i] - eps;
        s.probe->set_parameters(moved);
        const double lm = s.probe->loss_and_gradients();
        const double numeric = (lp - lm) / (2.0 * static_cast<double>(eps));
        const double analytic = grads[i];
        // 5% relative, plus what fp32 rounding of the loss (~1e-7 of it) leaves in a difference over 2 eps.
        const double tolerance = 0.05 * std::max(std::abs(numeric), std::abs(analytic)) + 5e-4;
        EXPECT_LT(std::abs(numeric - analytic), tolerance)
            << g.model_name << " " << op.path << "." << p.name << "[" << i - p.offset << "]: numeric "
            << numeric << " analytic " << analytic;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// A step flushes subnormals to zero (cpu::FlushDenormals): three bias-free layers of weights 1e-20 make the
// second layer's output 1e-40, subnormal, so every weight gradient (a product with it, or with W2·W3 = 1e-40)
// is exactly zero where IEEE arithmetic leaves about 1e-40, and the calling thread's mode is left as it was.
TEST(CpuBackend, StepsFlushSubnormalsToZero) {
  const Graph g = graph_of(R"({"name": "tiny-weights", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "linear", "out_features": 8, "bias": false},
               {"type": "linear", "out_features": 8, "bias": false},
               {"type": "linear", "out_features": 4, "bias": false}], "loss": "mse"})");
  Prepared s = prepare(g, 4, Precision::fp32, Mode::train);
  s.probe->set_parameters(std::vector<float>(static_cast<size_t>(g.parameters), 1e-20f));
  volatile float tiny = 1e-20f;
  ASSERT_NE(tiny * tiny, 0.0f) << "this thread already flushes subnormals";
  ASSERT_FALSE(cpu::denormals_flushed());
  const double loss = s.probe->loss_and_gradients();
  EXPECT_FALSE(cpu::denormals_flushed());
  EXPECT_GT(loss, 0.0);
  for (const float grad : s.probe->gradients_f32()) ASSERT_EQ(grad, 0.0f);
  const StepResult step = s.session->step();
  EXPECT_TRUE(step.finite);
  EXPECT_FALSE(cpu::denormals_flushed());
}

// OpenBLAS's worker threads flush them too: restarted under the flush (they keep the mode they start with), a
// threaded GEMM of subnormals by ones is zero in every part, and the device says so.
TEST(CpuBackend, OpenBlasWorkersFlushSubnormalsToo) {
  if (::dlsym(RTLD_DEFAULT, "blas_thread_shutdown_") == nullptr)
    GTEST_SKIP() << "this OpenBLAS has no blas_thread_shutdown_: its workers keep subnormals";
  const DeviceInfo info = cpu::make_cpu_backend()->device(Precision::fp32);
  EXPECT_EQ(info.details.value("denormals", std::string()),
            "flushed to zero (FTZ/DAZ), in OpenBLAS's threads too");
  constexpr int64_t n = 512;
  std::vector<float> a(n * n, 1e-39f), w(n * n, 1.0f), y(n * n, 1.0f);
  {
    const cpu::FlushDenormals flush;
    cpu::linear_forward(a.data(), w.data(), nullptr, nullptr, y.data(), n, n, n, Activation::none);
  }
  EXPECT_EQ(std::count(y.begin(), y.end(), 0.0f), n * n);
}

TEST(CpuBackend, GradientsOfEveryLayerMatchFiniteDifferences) {
  check_gradients(kAllLayersImage, 3);
  check_gradients(kAllLayersTokens, 2);
  check_gradients(kVitMse, 2);
  check_gradients(kPools, 2);
  check_gradients(kResidualOfInput, 3);
  check_gradients(kPoolFirst, 2);
  check_gradients(kPaddedPools, 2);
  check_gradients(kBatchNorm, 4);
  check_gradients(kResidualActivations, 3);
  check_gradients(kShortcuts, 3);
  check_gradients(kShortcutOnly, 2);
  check_gradients(kShortcutVector, 4);
  check_gradients(kShortcutNested, 2);
}

// Every configuration of shortcut allocates exactly its plan, trains (the loss falls) and runs inference, in
// every precision.
TEST(CpuBackend, ShortcutModelsAllocateThePlanAndTrain) {
  for (const char* text : {kShortcuts, kShortcutOnly, kShortcutVector, kShortcutNested}) {
    const Graph g = graph_of(text);
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      for (Mode m : {Mode::train, Mode::infer}) {
        Prepared s = prepare(g, 4, p, m);
        EXPECT_EQ(s.session->memory().allocated_bytes, s.plan.memory.total_bytes()) << g.model_name;
        EXPECT_TRUE(s.session->step().finite) << g.model_name << " " << to_string(p) << " " << to_string(m);
      }
    }
    Prepared t = prepare(g, 8, Precision::fp32, Mode::train);
    const double first = t.session->step().loss;
    double last = first;
    for (int i = 0; i < 20; ++i) last = t.session->step().loss;
    EXPECT_LT(last, first) << g.model_name;
  }
}

// Inference's ping-pong buffers are each sized for the outputs written to them (a wide head sizes one, not
// both; a single layer needs no second), and every model runs in them: a view past a planned buffer's end
// throws rather than writing over the next.
TEST(CpuBackend, InferenceRunsInThePingPongBuffersThePlanSizes) {
  const Graph head = graph_of(R"({"name": "head", "input": {"type": "vector", "features": 6},
    "layers": [{"type": "linear", "out_features": 8}, {"type": "linear", "out_features": 500}]})");
  Prepared wide = prepare(head, 4, Precision::fp32, Mode::infer);
  EXPECT_EQ(wide.plan.buffer("act.a").elements, 4u * 8u);
  EXPECT_EQ(wide.plan.buffer("act.b").elements, 4u * 500u);
  EXPECT_TRUE(wide.session->step().finite);
  const Graph one = graph_of(R"({"name": "one", "input": {"type": "vector", "features": 6},
    "layers": [{"type": "linear", "out_features": 3}]})");
  Prepared single = prepare(one, 4, Precision::bf16, Mode::infer);
  EXPECT_EQ(single.plan.find("act.b"), nullptr);
  EXPECT_TRUE(single.session->step().finite);
  for (const char* text :
       {kAllLayersImage, kAllLayersTokens, kVitMse, kPools, kPaddedPools, kResidualOfInput, kPoolFirst,
        kBatchNorm, kResidualActivations, kShortcuts, kShortcutOnly, kShortcutNested, kShortcutVector}) {
    const Graph g = graph_of(text);
    for (Precision p : {Precision::fp32, Precision::fp16}) {
      Prepared s = prepare(g, 3, p, Mode::infer);
      EXPECT_TRUE(s.session->step().finite) << g.model_name << " " << to_string(p);
    }
  }
}

// Training moves the running statistics (PyTorch's momentum 0.1 from mean 0, variance 1) and inference
// normalizes with them, not with the batch's: here the first batchnorm sees the synthetic data directly.
TEST(CpuBackend, BatchNormRunningStatistics) {
  const Graph g = graph_of(kBatchNorm);
  ASSERT_EQ(g.ops[0].kind, OpKind::batchnorm);
  Prepared train = prepare(g, 4, Precision::fp32, Mode::train);
  const std::vector<float> start = train.probe->buffer_f32("ops[0].running");
  ASSERT_EQ(start.size(), 4u);
  EXPECT_EQ(start, (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f}));
  (void)train.probe->loss_and_gradients();
  const std::vector<float> stats = train.probe->buffer_f32("ops[0].stats");  // mean, 1/std of the batch
  const std::vector<float> moved = train.probe->buffer_f32("ops[0].running");
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(moved[c], 0.1f * stats[c], 1e-6);
    const double biased = 1.0 / (static_cast<double>(stats[2 + c]) * stats[2 + c]) - 1e-5;
    const double count = 4.0 * 36.0;
    EXPECT_NEAR(moved[2 + c], 0.9 + 0.1 * biased * count / (count - 1), 1e-5);
  }
  // Inference normalizes with the running statistics (here the initial mean 0, variance 1: y = x / sqrt(1 +
  // eps)), not the batch's, and keeps no stats buffer. The batchnorm's output is in act.a (op 0's of the
  // ping-pong pair), the linear after it writes act.b.
  const Graph small = graph_of(R"({"name": "bn-infer", "input": {"type": "image", "channels": 2, "height": 3,
    "width": 3}, "layers": [{"type": "batchnorm"}, {"type": "flatten"}, {"type": "linear", "out_features": 2}]})");
  Prepared infer = prepare(small, 4, Precision::fp32, Mode::infer);
  EXPECT_EQ(infer.plan.find("ops[0].stats"), nullptr);
  ASSERT_NE(infer.plan.find("ops[0].running"), nullptr);
  EXPECT_EQ(infer.plan.buffer("ops[0].running").category, MemoryCategory::parameters);
  EXPECT_TRUE(infer.session->step().finite);
  const std::vector<float> x = infer.probe->buffer_f32("data.input");
  const std::vector<float> y = infer.probe->buffer_f32("act.a");
  ASSERT_EQ(x.size(), 72u);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i] / std::sqrt(1.0 + 1e-5), 1e-6) << i;
  // The batch's own statistics would have given channel means of 0; the outputs keep the data's.
  double mean0 = 0;
  for (int n = 0; n < 4; ++n)
    for (int k = 0; k < 9; ++k) mean0 += y[n * 18 + k] / 36.0;
  EXPECT_GT(std::abs(mean0), 1e-3);
  EXPECT_EQ(infer.probe->buffer_f32("ops[0].running"), start);
}

// Exact by construction (the session allocates Plan::buffers and nothing else); this pins it for the small
// presets in every precision and mode, and for the large ones in bf16 inference (training them needs
// gigabytes).
TEST(CpuBackend, AllocatesExactlyThePlan) {
  for (const std::string& name : preset_names()) {
    const Graph g = lower(load_model(name));
    const bool small = g.parameters < 5'000'000;
    for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
      for (Mode m : {Mode::train, Mode::infer}) {
        if (!small && (m == Mode::train || p != Precision::bf16)) continue;
        Prepared s = prepare(g, 1, p, m);
        const SessionMemory mem = s.session->memory();
        EXPECT_EQ(mem.allocated_bytes, s.plan.memory.total_bytes()) << name;
        EXPECT_EQ(mem.planned_bytes, s.plan.memory.total_bytes()) << name;
        if (small) {
          const StepResult r = s.session->step();
          EXPECT_TRUE(r.finite) << name << " " << to_string(p) << " " << to_string(m);
          EXPECT_GT(r.step_ms, 0.0) << name;
          if (m == Mode::train) {
            EXPECT_TRUE(std::isfinite(r.loss)) << name << " " << to_string(p);
          }
        }
      }
    }
  }
}

TEST(CpuBackend, AccumulationEqualsOneBigBatch) {
  const Graph g = graph_of(kAllLayersTokens);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Prepared big = prepare(g, 8, p, Mode::train, 1);
    Prepared split = prepare(g, 2, p, Mode::train, 4);
    const double loss_big = big.probe->loss_and_gradients();
    const double loss_split = split.probe->loss_and_gradients();
    EXPECT_NEAR(loss_big, loss_split, 1e-5 * std::abs(loss_big));
    const auto a = big.probe->gradients_f32(), b = split.probe->gradients_f32();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += a[i] * a[i];
    }
    EXPECT_LT(std::sqrt(num / den), p == Precision::fp32 ? 1e-5 : 1e-2) << to_string(p);
    // One optimizer step each: the same weights afterwards.
    (void)big.session->step();
    (void)split.session->step();
    const auto wa = big.probe->parameters_f32(), wb = split.probe->parameters_f32();
    double diff = 0;
    for (size_t i = 0; i < wa.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(wa[i] - wb[i])));
    EXPECT_LT(diff, p == Precision::fp32 ? 1e-5 : 1e-3);
  }
}

// With accumulation the later micro-batches' data is generated between them, outside the step's time (a
// loop's data arrives prefetched): the step's time and the data's add up to no more than the call took.
TEST(CpuBackend, AccumulatedStepsLeaveTheirDataOutOfTheirTime) {
  const Graph g = graph_of(R"({"name": "wide", "input": {"type": "vector", "features": 65536},
    "layers": [{"type": "linear", "out_features": 2}], "loss": "cross_entropy"})");
  Prepared one = prepare(g, 4, Precision::fp32, Mode::train, 1);
  (void)one.session->step();
  EXPECT_EQ(one.probe->untimed_data_ms(), 0.0);  // filled once, at prepare
  Prepared split = prepare(g, 4, Precision::fp32, Mode::train, 4);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const StepResult r = split.session->step();
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GT(split.probe->untimed_data_ms(), 0.0);
    EXPECT_GT(r.step_ms, 0.0);
    EXPECT_LE(r.step_ms + split.probe->untimed_data_ms(), wall);
  }
}

TEST(CpuBackend, TrainingLowersTheLossInEveryPrecision) {
  for (const char* text : {kAllLayersTokens, kAllLayersImage, kVitMse}) {
    nlohmann::json doc = nlohmann::json::parse(text);
    doc["optimizer"] = {{"type", "adamw"}, {"learning_rate", 0.01}};
    const Graph g = lower(parse_model(doc, "test.json"));
    for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
      Prepared s = prepare(g, 4, p, Mode::train);
      const StepResult first = s.session->step();
      StepResult last;
      for (int i = 0; i < 40; ++i) last = s.session->step();
      ASSERT_TRUE(std::isfinite(last.loss)) << g.model_name << " " << to_string(p);
      EXPECT_LT(last.loss, first.loss * 0.9) << g.model_name << " " << to_string(p);
      EXPECT_GT(last.step_ms, 0.0);
    }
  }
}

TEST(CpuBackend, SgdAndInference) {
  const Graph g = graph_of(R"({"name": "s", "input": {"type": "vector", "features": 6},
    "layers": [{"type": "linear", "out_features": 8, "activation": "relu"}, {"type": "linear", "out_features": 3}],
    "optimizer": {"type": "sgd", "learning_rate": 0.1}})");
  Prepared t = prepare(g, 8, Precision::fp32, Mode::train);
  const double first = t.session->step().loss;
  double last = first;
  for (int i = 0; i < 30; ++i) last = t.session->step().loss;
  EXPECT_LT(last, first);
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    Prepared inf = prepare(g, 16, p, Mode::infer);
    const StepResult r = inf.session->step();
    EXPECT_TRUE(std::isnan(r.loss));
    EXPECT_EQ(inf.session->memory().allocated_bytes, inf.plan.memory.total_bytes());
  }
}

TEST(CpuBackend, SgdNesterovAndWeightDecayReachTheUpdate) {
  // The same model and data under three SGD settings: the first step's loss is the same (the update comes
  // after it); the weights after it differ by what each setting adds, as torch.optim.SGD would update them.
  const char* base = R"({"name": "s", "input": {"type": "vector", "features": 6},
    "layers": [{"type": "linear", "out_features": 8, "activation": "relu"}, {"type": "linear", "out_features": 3}],
    "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9%s}})";
  const auto run = [&](const char* extra) {
    std::string text(base);
    text.replace(text.find("%s"), 2, extra);
    Prepared p = prepare(graph_of(text), 8, Precision::fp32, Mode::train);
    const std::vector<float> w0 = p.probe->parameters_f32();
    const double loss = p.session->step().loss;
    return std::tuple{loss, w0, p.probe->parameters_f32()};
  };
  const auto [plain_loss, w0, plain] = run("");
  const auto [decay_loss, w0_decay, decayed] = run(R"(, "weight_decay": 0.5)");
  const auto [nesterov_loss, w0_nesterov, nesterov] = run(R"(, "nesterov": true)");
  EXPECT_EQ(w0, w0_decay);
  EXPECT_EQ(w0, w0_nesterov);
  EXPECT_DOUBLE_EQ(plain_loss, decay_loss);
  EXPECT_DOUBLE_EQ(plain_loss, nesterov_loss);
  ASSERT_EQ(plain.size(), w0.size());
  double worst_decay = 0, worst_nesterov = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    const double g = (w0[i] - plain[i]) / 0.1;  // first step: buf = g, w1 = w0 - lr g
    // weight decay: d = g + 0.5 w0; nesterov: d = g + 0.9 g (the first buffer is g).
    worst_decay = std::max(worst_decay, std::abs(decayed[i] - (w0[i] - 0.1 * (g + 0.5 * w0[i]))));
    worst_nesterov = std::max(worst_nesterov, std::abs(nesterov[i] - (w0[i] - 0.1 * 1.9 * g)));
  }
  EXPECT_LT(worst_decay, 1e-6);
  EXPECT_LT(worst_nesterov, 1e-6);
  EXPECT_NE(plain, decayed);
  EXPECT_NE(plain, nesterov);
}

TEST(CpuBackend, Fp16LossScalingSkipsOverflowingStepsThenRecovers) {
  const Graph g = graph_of(R"({"name": "f", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 64, "activation": "gelu"}, {"type": "linear", "out_features": 4}],
    "loss": "cross_entropy", "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.0}})");
  Prepared s = prepare(g, 16, Precision::fp16, Mode::train);
  // A scale that overflows the fp16 gradients: the step is skipped, the weights stay, the scale halves.
  s.probe->set_loss_scale(1e30);
  const std::vector<float> before = s.probe->parameters_f32();
  const StepResult first = s.session->step();
  EXPECT_TRUE(first.skipped);
  EXPECT_TRUE(first.finite);
  EXPECT_EQ(s.probe->skipped_steps(), 1);
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 5e29);
  EXPECT_EQ(s.probe->parameters_f32(), before);
  // It keeps halving until the scaled gradients fit in fp16, then the update happens.
  int steps = 1;
  while (s.session->step().skipped && steps < 200) ++steps;
  ASSERT_LT(steps, 200) << "the loss scale never came down";
  EXPECT_EQ(s.probe->skipped_steps(), steps);
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 1e30 / std::exp2(steps));
  EXPECT_LT(s.probe->loss_scale(), 65504.0 * 65504.0);
  EXPECT_NE(s.probe->parameters_f32(), before);
  // 2000 clean steps double it (torch.cuda.amp.GradScaler's growth interval).
  s.probe->set_loss_scale(1024);
  for (int i = 0; i < 1999; ++i) ASSERT_FALSE(s.session->step().skipped) << "step " << i;
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 1024);
  static_cast<void>(s.session->step());
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 2048);
}

TEST(CpuBackend, Fp16OverflowAtTheLowestLossScaleIsNotFinite) {
  const Graph g = graph_of(R"({"name": "f", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 64, "activation": "gelu"}, {"type": "linear", "out_features": 4}],
    "loss": "cross_entropy", "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.0}})");
  Prepared s = prepare(g, 16, Precision::fp16, Mode::train);
  // Weights that overflow fp16 unscaled (a diverged model): at scale 2 the step is skipped and the scale
  // halves, as any overflow; at 1 no lower scale can help, so the step is skipped and not finite.
  s.probe->set_parameters(std::vector<float>(static_cast<size_t>(g.parameters), 1e4f));
  s.probe->set_loss_scale(2.0);
  const StepResult halved = s.session->step();
  EXPECT_TRUE(halved.skipped);
  EXPECT_TRUE(halved.finite);
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 1.0);
  const StepResult lowest = s.session->step();
  EXPECT_TRUE(lowest.skipped);
  EXPECT_FALSE(lowest.finite);
  EXPECT_EQ(s.probe->skipped_steps(), 2);
  EXPECT_DOUBLE_EQ(s.probe->loss_scale(), 1.0);
}

// Checkpointing runs each block's forward again before its backward, in the same buffers: the same losses,
// gradients, weights and batchnorm running statistics, bit for bit, as keeping every activation (the same
// ops on the same inputs), in less memory. Blocks on the network input (backward stops inside them),
// shortcuts, activations after adds in place, nested residuals, batchnorm at a block's end, accumulation.
TEST(CpuBackend, CheckpointingGivesTheSameStepsInLessMemory) {
  const auto checked_prepare = [](const Graph& g, Precision p, int64_t accumulation, bool checkpointing) {
    PlanRequest request{3, p, Mode::train, accumulation, BackendKind::cpu};
    request.checkpointing = checkpointing;
    return prepare(g, request, 11);
  };
  std::vector<Graph> graphs;
  for (const char* text :
       {kAllLayersImage, kAllLayersTokens, kVitMse, kResidualOfInput, kPoolFirst, kBatchNorm,
        kResidualActivations, kShortcuts, kShortcutOnly, kShortcutNested, kShortcutVector})
    graphs.push_back(graph_of(text));
  for (const char* name : {"tiny-lm", "resnet-small"}) graphs.push_back(lower(load_model(name)));
  int compared = 0;
  for (const Graph& g : graphs) {
    ASSERT_FALSE(g.blocks.empty()) << g.model_name;
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      for (int64_t accumulation : {int64_t{1}, int64_t{2}}) {
        if (p != Precision::fp32 && accumulation != 1) continue;
        Prepared plain = checked_prepare(g, p, accumulation, false);
        Prepared ckpt = checked_prepare(g, p, accumulation, true);
        const std::string what =
            fmt::format("{} {} accumulation {}", g.model_name, to_string(p), accumulation);
        EXPECT_EQ(ckpt.session->memory().allocated_bytes, ckpt.plan.memory.total_bytes()) << what;
        EXPECT_LE(ckpt.plan.memory.total_bytes(), plain.plan.memory.total_bytes()) << what;
        for (int step = 0; step < 3; ++step) {
          const StepResult a = plain.session->step(), b = ckpt.session->step();
          EXPECT_EQ(a.loss, b.loss) << what << " step " << step;
          EXPECT_EQ(a.finite, b.finite) << what;
        }
        EXPECT_EQ(plain.probe->gradients_f32(), ckpt.probe->gradients_f32()) << what;
        EXPECT_EQ(plain.probe->parameters_f32(), ckpt.probe->parameters_f32()) << what;
        for (size_t i = 0; i < g.ops.size(); ++i)
          if (g.ops[i].kind == OpKind::batchnorm) {
            const std::string running = fmt::format("ops[{}].running", i);
            EXPECT_EQ(plain.probe->buffer_f32(running), ckpt.probe->buffer_f32(running))
                << what << " " << running;
          }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 13 * 4);
  // The arena holds one block's activations, not all of them: tiny-lm's two blocks keep two outputs.
  const Graph lm = lower(load_model("tiny-lm"));
  PlanRequest request{8, Precision::fp32, Mode::train, 1, BackendKind::cpu};
  const Plan plain = make_plan(lm, request);
  request.checkpointing = true;
  const Plan ckpt = make_plan(lm, request);
  EXPECT_LT(ckpt.memory.saved_activations, plain.memory.saved_activations * 2 / 3);
}

// --checkpoint-blocks N: the first N blocks recompute, the rest keep their activations; the steps are the
// same to the bit as keeping every activation, for every N.
TEST(CpuBackend, CheckpointingSomeBlocksGivesTheSameSteps) {
  for (const char* name : {"tiny-lm", "resnet-small"}) {
    const Graph g = lower(load_model(
        name,
        {parse_model_override(std::string(name) == "tiny-lm" ? "layers[1].repeat=3" : "input.height=16")}));
    const size_t blocks = recomputable_blocks(g).size();
    ASSERT_GE(blocks, 3u) << name;
    const auto run = [&](bool checkpointing, int64_t count) {
      PlanRequest request{2, Precision::fp32, Mode::train, 1, BackendKind::cpu};
      request.checkpointing = checkpointing;
      request.checkpoint_blocks = count;
      Prepared out = prepare(g, request, 5);
      EXPECT_EQ(out.session->memory().allocated_bytes, out.plan.memory.total_bytes()) << name << " " << count;
      std::vector<double> losses;
      for (int step = 0; step < 2; ++step) losses.push_back(out.session->step().loss);
      return std::make_pair(losses, out.probe->parameters_f32());
    };
    const auto plain = run(false, 0);
    for (const int64_t count : {int64_t{1}, int64_t{2}, static_cast<int64_t>(blocks) - 1}) {
      const auto some = run(true, count);
      EXPECT_EQ(some.first, plain.first) << name << " --checkpoint-blocks " << count;
      EXPECT_EQ(some.second, plain.second) << name << " --checkpoint-blocks " << count;
    }
  }
}

TEST(CpuBackend, MemoryLimitRefusesThePlan) {
  const Graph g = lower(load_model("mlp"));
  const Plan plan = make_plan(g, {64, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  SessionOptions options;
  options.memory_limit_bytes = plan.memory.total_bytes() / 2;
  EXPECT_THROW((void)cpu::make_cpu_backend()->prepare(g, plan, options), OutOfMemory);
}

TEST(CpuBackend, TrainsEverySmallPresetAStep) {
  for (const char* name : {"mlp", "resnet-small", "tiny-lm"}) {
    const Graph g = lower(load_model(name));
    Prepared s = prepare(g, 2, Precision::bf16, Mode::train);
    const StepResult r = s.session->step();
    EXPECT_TRUE(std::isfinite(r.loss)) << name;
  }
}

TEST(Registry, BackendsByName) {
  EXPECT_EQ(make_backend("cpu")->kind(), BackendKind::cpu);
  EXPECT_THROW((void)make_backend("tpu"), UsageError);
  EXPECT_THROW((void)make_backend("scripted"), UsageError);
  if (!cuda_device_present()) {
    EXPECT_THROW((void)make_backend("cuda"), UsageError);
    EXPECT_EQ(make_backend("auto")->kind(), BackendKind::cpu);
  }
}

std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// Inference computes what training's forward does, through its own buffers: the ping-pong (a residual's ops
// reading the copy of its input), activations in place on the output. With the same weights and data the
// output is training's logits to the bit, at every precision (batchnorm aside: training normalizes by the
// batch's statistics, inference by the running ones).
TEST(CpuBackend, InferenceOutputIsTrainingsForward) {
  std::vector<Graph> graphs;
  for (const char* text :
       {kAllLayersImage, kAllLayersTokens, kVitMse, kPools, kPaddedPools, kResidualOfInput, kPoolFirst,
        kResidualActivations, kShortcuts, kShortcutOnly, kShortcutNested, kShortcutVector})
    graphs.push_back(graph_of(text));
  graphs.push_back(lower(load_model("tiny-lm")));
  int compared = 0;
  for (const Graph& g : graphs) {
    if (g.has(OpKind::batchnorm)) continue;
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      const std::string what = fmt::format("{} {}", g.model_name, to_string(p));
      Prepared infer = prepare(g, 3, p, Mode::infer), train = prepare(g, 3, p, Mode::train);
      ASSERT_TRUE(infer.session->step().finite) << what;
      (void)train.probe->loss_and_gradients();
      const std::vector<float> out = infer.probe->output_f32();
      ASSERT_EQ(out.size(), train.probe->output_f32().size()) << what;
      EXPECT_EQ(bits(out), bits(train.probe->output_f32())) << what;
      ++compared;
    }
  }
  EXPECT_GE(compared, 30);
}

// The plan holds what a step uses and nothing more: every buffer a step computes into (saved activations,
// transients, workspaces), first filled with NaN bytes, is written to its last element, and nothing is read
// before it is written (the steps are the same to the bit as from zeroed buffers). The recompute arena is
// written to the end of the farthest view in it (each view is rounded up to 256 bytes).
TEST(CpuBackend, AStepWritesEveryBufferItComputesIntoBeforeReadingIt) {
  std::vector<Graph> graphs;
  for (const char* text : {kAllLayersImage, kAllLayersTokens, kVitMse, kPools, kPaddedPools, kResidualOfInput,
                           kPoolFirst, kBatchNorm, kResidualActivations, kShortcuts, kShortcutOnly,
                           kShortcutNested, kShortcutVector, kShortcutOfAResidual})
    graphs.push_back(graph_of(text));
  for (const char* name : {"mlp", "tiny-lm", "resnet-small"}) graphs.push_back(lower(load_model(name)));
  int checked = 0;
  for (const Graph& g : graphs)
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
      for (Mode m : {Mode::train, Mode::infer})
        for (int checkpointing : {0, 1, 2}) {  // none, every block, the first only (the rest overlaid)
          if (checkpointing > 0 && m == Mode::infer) continue;
          if (checkpointing == 2 && recomputable_blocks(g).size() < 2) continue;
          const std::string what = fmt::format("{} {} {}{}", g.model_name, to_string(p), to_string(m),
                                               checkpointing == 1   ? " checkpointing"
                                               : checkpointing == 2 ? " --checkpoint-blocks 1"
                                                                    : "");
          PlanRequest request{3, p, m, m == Mode::train ? 2 : 1, BackendKind::cpu};
          request.checkpointing = checkpointing > 0;
          request.checkpoint_blocks = checkpointing == 2 ? 1 : 0;
          Prepared zeroed = prepare(g, request, 5), poisoned = prepare(g, request, 5);
          zeroed.probe->poison_step_buffers(0x00);
          poisoned.probe->poison_step_buffers(0xFF);
          const StepResult a = zeroed.session->step(), b = poisoned.session->step();
          EXPECT_TRUE(b.finite) << what;
          // The output, bit for bit, in either mode: inference (whose step has no loss to compare) reads
          // no byte it did not write either.
          EXPECT_EQ(bits(zeroed.probe->output_f32()), bits(poisoned.probe->output_f32())) << what;
          if (m == Mode::infer) {
            for (float v : poisoned.probe->output_f32()) ASSERT_TRUE(std::isfinite(v)) << what;
          }
          if (m == Mode::train) {
            EXPECT_EQ(a.loss, b.loss) << what;
            // Bit for bit: fp16's first step may overflow at the initial loss scale (NaN gradients).
            EXPECT_EQ(bits(zeroed.probe->gradients_f32()), bits(poisoned.probe->gradients_f32())) << what;
            EXPECT_EQ(bits(zeroed.probe->parameters_f32()), bits(poisoned.probe->parameters_f32())) << what;
          }
          const std::vector<BufferSpec>& buffers = poisoned.plan.buffers;
          for (const auto& [name, written] : poisoned.probe->written_bytes(0xFF)) {
            // What the step puts there: the elements, or in the arena the farthest end of a view in it.
            uint64_t own = 0, views = 0, element = 4;
            for (const BufferSpec& x : buffers) {
              if (x.name == name) {
                own = x.elements * dtype_bytes(x.dtype);
                element = dtype_bytes(x.dtype);
              }
              if (x.within == name) views = std::max(views, x.offset + x.elements * dtype_bytes(x.dtype));
            }
            const uint64_t used = views > 0 ? views : own;
            EXPECT_GT(written + element, used)
                << what << " " << name << ": wrote " << written << " of " << used << " bytes";
          }
          ++checked;
        }
  EXPECT_GE(checked, 16 * 3 * 3 + 3 * 3);
}

}  // namespace
}  // namespace bsw
