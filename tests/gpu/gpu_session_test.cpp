// Whole CUDA sessions against the CPU backend: the same seed gives the same initial weights and data, so the
// losses of the first training steps must agree per precision; plus planned against measured device memory,
// an out-of-memory point followed by a successful smaller one, and graph replay against plain launches.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/ops.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "gpu_test_models.hpp"
#include "gpu_test_util.hpp"

namespace bsw {
namespace {

using gputest::graph_of;
using gputest::kImage;

constexpr const char* kMlp = R"({"name": "mlp",
  "input": {"type": "vector", "features": 40},
  "layers": [{"type": "linear", "out_features": 64, "activation": "gelu"},
             {"type": "linear", "out_features": 32, "activation": "silu"},
             {"type": "residual", "layers": [{"type": "linear", "out_features": 32, "activation": "tanh"}]},
             {"type": "linear", "out_features": 48, "activation": "relu"},
             {"type": "linear", "out_features": 10}],
  "loss": "cross_entropy"})";

constexpr const char* kTokens = R"({"name": "tokens",
  "input": {"type": "tokens", "sequence_length": 24, "vocab_size": 50},
  "layers": [{"type": "embedding", "dim": 32},
             {"type": "transformer_block", "heads": 4, "mlp_ratio": 2, "causal": true, "repeat": 2},
             {"type": "attention", "heads": 2},
             {"type": "layernorm"},
             {"type": "linear", "out_features": 50}],
  "loss": "cross_entropy"})";

constexpr const char* kVitMse = R"({"name": "vit-mse",
  "input": {"type": "image", "channels": 3, "height": 16, "width": 16},
  "layers": [{"type": "patch_embedding", "patch_size": 4, "dim": 32},
             {"type": "transformer_block", "heads": 2, "mlp_ratio": 2},
             {"type": "global_avgpool"},
             {"type": "linear", "out_features": 6}],
  "loss": "mse",
  "optimizer": {"type": "sgd", "learning_rate": 0.01, "momentum": 0.0}})";

// Residuals of the network input, one inside the other: backward skips their gradient stash (the data has
// none).
constexpr const char* kResidualOfInput = R"({"name": "residual-of-input",
  "input": {"type": "vector", "features": 40},
  "layers": [{"type": "residual", "layers": [{"type": "residual", "layers": [
                {"type": "linear", "out_features": 40, "activation": "gelu"}]}]},
             {"type": "linear", "out_features": 24, "activation": "tanh"},
             {"type": "residual", "layers": [{"type": "linear", "out_features": 24, "activation": "relu"}]},
             {"type": "linear", "out_features": 10}],
  "loss": "cross_entropy"})";

// A pool before the first layer that learns (padded, as the ResNet stem's), and a residual around the conv
// after it: no gradient before it. Then an average pool that counts its padding.
constexpr const char* kPoolFirst = R"({"name": "pool-first",
  "input": {"type": "image", "channels": 3, "height": 12, "width": 12},
  "layers": [{"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
             {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1,
                                              "activation": "relu"}]},
             {"type": "avgpool2d", "kernel_size": 2, "stride": 1, "padding": 1},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
  "loss": "cross_entropy"})";

// Batch normalization (ResNet's conv without bias, then BN and ReLU; one at a residual's end, where the add
// and the ReLU after it write over its output, as in torchvision's BasicBlock; one over a vector, GELU after
// it) and one first, on the data itself.
constexpr const char* kBatchNorm = R"({"name": "batchnorm",
  "input": {"type": "image", "channels": 3, "height": 12, "width": 12},
  "layers": [{"type": "batchnorm"},
             {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
             {"type": "batchnorm", "activation": "relu"},
             {"type": "residual", "layers": [
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm", "activation": "silu"},
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm"}], "activation": "relu"},
             {"type": "maxpool2d", "kernel_size": 2}, {"type": "flatten"},
             {"type": "linear", "out_features": 16, "bias": false},
             {"type": "batchnorm", "activation": "gelu"},
             {"type": "linear", "out_features": 5}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01}})";

// Activations after residual adds: tanh on a residual of the input, ReLU in place (torchvision's BasicBlock),
// SiLU keeping the sum in the inner layer's buffer as its pre-activation, GELU nested in a tanh. SGD, so the
// losses follow the gradients' size (AdamW's first steps are about their sign).
constexpr const char* kResidualActivations = R"({"name": "residual-activations",
  "input": {"type": "vector", "features": 24},
  "layers": [{"type": "residual", "activation": "tanh", "layers": [{"type": "linear", "out_features": 24}]},
             {"type": "residual", "activation": "relu", "layers": [
                {"type": "linear", "out_features": 24, "activation": "relu"},
                {"type": "linear", "out_features": 24}]},
             {"type": "residual", "activation": "silu", "layers": [
                {"type": "linear", "out_features": 24, "activation": "gelu"}]},
             {"type": "residual", "activation": "tanh", "layers": [
                {"type": "residual", "activation": "gelu", "layers": [{"type": "linear", "out_features": 24}]}]},
             {"type": "linear", "out_features": 10}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.2, "momentum": 0.9}})";

// Projection shortcuts (torchvision's downsample) on the network input and after it, one without parameters,
// one kept for backward (a tanh), one ending in a nested residual. SGD with momentum.
constexpr const char* kShortcuts = R"({"name": "shortcuts",
  "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
  "layers": [{"type": "residual", "activation": "relu", "layers": [
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1, "bias": false},
                {"type": "batchnorm", "activation": "relu"},
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm"}],
              "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2, "bias": false},
                           {"type": "batchnorm"}]},
             {"type": "residual", "activation": "silu", "layers": [
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1,
                 "activation": "gelu"}],
              "shortcut": [{"type": "avgpool2d", "kernel_size": 2}]},
             {"type": "residual", "layers": [
                {"type": "conv2d", "out_channels": 12, "kernel_size": 3, "padding": 1, "activation": "silu"}],
              "shortcut": [{"type": "conv2d", "out_channels": 12, "kernel_size": 1, "activation": "tanh"}]},
             {"type": "residual", "activation": "tanh", "layers": [
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1}],
              "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1},
                           {"type": "residual", "layers": [
                              {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1,
                               "activation": "tanh"}]}]},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9}})";

std::vector<double> run_losses(const Graph& g, BackendKind kind, Precision p, int64_t batch,
                               int64_t accumulation, int steps, bool graphs = true,
                               bool checkpointing = false, int64_t checkpoint_blocks = 0) {
  PlanRequest request{batch, p, Mode::train, accumulation, kind};
  request.checkpointing = checkpointing;
  request.checkpoint_blocks = checkpoint_blocks;
  const Plan plan = make_plan(g, request);
  SessionOptions options;
  options.seed = 42;
  options.cuda_graphs = graphs;
  std::unique_ptr<Backend> backend =
      kind == BackendKind::cpu ? cpu::make_cpu_backend() : cuda::make_cuda_backend(0);
  std::unique_ptr<Session> session = backend->prepare(g, plan, options);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    const StepResult r = session->step();
    EXPECT_TRUE(r.finite);
    EXPECT_FALSE(r.skipped);
    EXPECT_GT(r.step_ms, 0.0);
    losses.push_back(r.loss);
  }
  return losses;
}

struct Case {
  const char* name;
  const char* model;
  Precision precision;
  int64_t accumulation;
};

class GpuSession : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override { BSW_REQUIRE_DEVICE(); }
};

TEST_P(GpuSession, TrainingLossesMatchTheCpuBackend) {
  const Case c = GetParam();
  const Graph g = graph_of(c.model);
  const double tol = c.precision == Precision::fp32 ? 1e-4 : c.precision == Precision::tf32 ? 1e-2 : 3e-2;
  const std::vector<double> cpu = run_losses(g, BackendKind::cpu, c.precision, 4, c.accumulation, 3);
  const std::vector<double> gpu = run_losses(g, BackendKind::cuda, c.precision, 4, c.accumulation, 3);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], tol * std::abs(cpu[i])) << c.name << " step " << i + 1;
}

// Inference's output against the CPU backend's, element by element, for the same weights and data: the
// ping-pong buffers (a residual's first op reading its input's copy), activations in place on the output,
// shortcuts and batchnorm's running statistics, at each storage precision (a wrong buffer or a half-written
// one shows here; a loss would not, inference has none).
TEST_P(GpuSession, InferenceOutputMatchesTheCpuBackend) {
  const Case c = GetParam();
  const Graph g = graph_of(c.model);
  std::vector<std::vector<float>> outputs;
  for (const BackendKind kind : {BackendKind::cpu, BackendKind::cuda}) {
    const Plan plan = make_plan(g, {4, c.precision, Mode::infer, 1, kind});
    SessionOptions options;
    options.seed = 42;
    std::unique_ptr<Backend> backend =
        kind == BackendKind::cpu ? cpu::make_cpu_backend() : cuda::make_cuda_backend(0);
    std::unique_ptr<Session> session = backend->prepare(g, plan, options);
    for (int i = 0; i < 2; ++i) static_cast<void>(session->step());  // the second a graph replay on cuda
    if (kind == BackendKind::cpu) {
      outputs.push_back(dynamic_cast<cpu::CpuSessionProbe&>(*session).output_f32());
      continue;
    }
    const cuda::DeviceTensor t = dynamic_cast<cuda::CudaSessionProbe&>(*session).output();
    std::vector<float> values(t.elements);
    if (t.dtype == DType::f32) {
      std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
    } else {
      std::vector<uint16_t> halves(t.elements);
      std::memcpy(halves.data(), t.bytes.data(), t.bytes.size());
      if (t.dtype == DType::bf16) {
        cpu::from_bf16(halves.data(), values.data(), static_cast<int64_t>(t.elements));
      } else {
        cpu::from_fp16(halves.data(), values.data(), static_cast<int64_t>(t.elements));
      }
    }
    outputs.push_back(std::move(values));
  }
  const std::vector<float>& cpu_out = outputs[0];
  const std::vector<float>& gpu_out = outputs[1];
  ASSERT_EQ(gpu_out.size(), cpu_out.size()) << c.name;
  // Relative to the output's scale: a 16-bit output rounds each element to 2^-8 (bf16) of itself.
  double scale = 0;
  for (float v : cpu_out) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const double tol = (c.precision == Precision::fp32   ? 1e-4
                      : c.precision == Precision::tf32 ? 1e-2
                                                       : 3e-2) *
                     std::max(scale, 1e-3);
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(gpu_out[i])) << c.name << " element " << i;
    EXPECT_NEAR(gpu_out[i], cpu_out[i], tol) << c.name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, GpuSession,
    testing::Values(
        Case{"mlp_fp32", kMlp, Precision::fp32, 1}, Case{"mlp_tf32", kMlp, Precision::tf32, 1},
        Case{"mlp_bf16", kMlp, Precision::bf16, 1}, Case{"mlp_fp16", kMlp, Precision::fp16, 1},
        Case{"mlp_fp32_accumulate", kMlp, Precision::fp32, 2}, Case{"image_fp32", kImage, Precision::fp32, 1},
        Case{"image_bf16", kImage, Precision::bf16, 2}, Case{"tokens_fp32", kTokens, Precision::fp32, 1},
        Case{"tokens_bf16", kTokens, Precision::bf16, 1}, Case{"tokens_fp16", kTokens, Precision::fp16, 1},
        Case{"vit_mse_fp32", kVitMse, Precision::fp32, 1}, Case{"vit_mse_bf16", kVitMse, Precision::bf16, 2},
        Case{"residual_of_input_fp32", kResidualOfInput, Precision::fp32, 1},
        Case{"residual_of_input_bf16", kResidualOfInput, Precision::bf16, 2},
        Case{"pool_first_fp32", kPoolFirst, Precision::fp32, 1},
        Case{"pool_first_bf16", kPoolFirst, Precision::bf16, 1},
        Case{"batchnorm_fp32", kBatchNorm, Precision::fp32, 1},
        Case{"batchnorm_bf16", kBatchNorm, Precision::bf16, 2},
        Case{"batchnorm_fp16", kBatchNorm, Precision::fp16, 1},
        Case{"residual_activations_fp32", kResidualActivations, Precision::fp32, 1},
        Case{"residual_activations_bf16", kResidualActivations, Precision::bf16, 2},
        Case{"shortcuts_fp32", kShortcuts, Precision::fp32, 1},
        Case{"shortcuts_bf16", kShortcuts, Precision::bf16, 2},
        Case{"shortcuts_fp16", kShortcuts, Precision::fp16, 1}),
    [](const testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

// Every preset's first bf16 training step (batch 1) against the CPU backend: the full-size models, with the
// paths the GPU picks for them (cuDNN SDPA and convolutions where it takes them). On the emulator these take
// minutes each; scripts/emu-presets.sh runs them there.
class GpuPresetStep : public testing::TestWithParam<const char*> {};

TEST_P(GpuPresetStep, FirstBf16StepMatchesTheCpu) {
  BSW_REQUIRE_DEVICE();
  if (gputest::kEmulated)
    GTEST_SKIP() << "full-size presets: scripts/emu-presets.sh runs them on the emulator";
  const Graph g = lower(load_model(GetParam()));
  const double cpu = run_losses(g, BackendKind::cpu, Precision::bf16, 1, 1, 1).at(0);
  std::unique_ptr<Backend> gpu = cuda::make_cuda_backend(0);
  const ExecutionPaths paths =
      gpu->execution_paths(g, Precision::bf16, Mode::train, preferred_cuda_paths(g, Precision::bf16));
  const Plan plan = make_plan(g, {1, Precision::bf16, Mode::train, 1, BackendKind::cuda, paths});
  SessionOptions options;
  options.seed = 42;
  const StepResult r = gpu->prepare(g, plan, options)->step();
  EXPECT_TRUE(r.finite);
  EXPECT_NEAR(r.loss, cpu, 3e-2 * std::abs(cpu)) << GetParam() << " (attention " << to_string(paths.attention)
                                                 << ", conv " << to_string(paths.conv) << ")";
}

INSTANTIATE_TEST_SUITE_P(Presets, GpuPresetStep,
                         testing::Values("mlp", "mlp-large", "resnet-small", "resnet-50", "tiny-lm",
                                         "bert-base", "gpt2-small", "vit-base"),
                         [](const testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// --checkpointing: each block's forward runs again inside backward (captured in the step's graph too), into
// the recompute arena the plan lays out. The losses match the same session keeping every activation, and the
// CPU backend's with checkpointing; the device memory is the (smaller) plan's.
TEST(GpuSessionCheckpointing, MatchesKeepingEveryActivationAndTheCpu) {
  BSW_REQUIRE_DEVICE();
  for (const char* model : {kTokens, kVitMse, kResidualOfInput, kBatchNorm, kShortcuts}) {
    const Graph g = graph_of(model);
    ASSERT_FALSE(g.blocks.empty()) << g.model_name;
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      const int64_t accumulation = p == Precision::bf16 ? 2 : 1;
      const double tol = p == Precision::fp32 ? 1e-4 : 3e-2;
      const std::vector<double> kept = run_losses(g, BackendKind::cuda, p, 4, accumulation, 3, true, false);
      const std::vector<double> recomputed =
          run_losses(g, BackendKind::cuda, p, 4, accumulation, 3, true, true);
      const std::vector<double> plain = run_losses(g, BackendKind::cuda, p, 4, accumulation, 3, false, true);
      const std::vector<double> cpu = run_losses(g, BackendKind::cpu, p, 4, accumulation, 3, true, true);
      for (size_t i = 0; i < kept.size(); ++i) {
        EXPECT_NEAR(recomputed[i], kept[i], 1e-5 * std::abs(kept[i])) << g.model_name << " step " << i + 1;
        EXPECT_NEAR(plain[i], recomputed[i], 1e-5 * std::abs(kept[i])) << g.model_name << " step " << i + 1;
        EXPECT_NEAR(recomputed[i], cpu[i], tol * std::abs(cpu[i])) << g.model_name << " step " << i + 1;
      }
    }
    PlanRequest request{4, Precision::bf16, Mode::train, 1, BackendKind::cuda};
    request.checkpointing = true;
    const Plan plan = make_plan(g, request);
    auto session = cuda::make_cuda_backend(0)->prepare(g, plan, SessionOptions{});
    EXPECT_EQ(session->memory().allocated_bytes, plan.memory.total_bytes()) << g.model_name;
  }
}

// --checkpoint-blocks: the first block recomputes in the replayed graph, the second keeps its activations.
TEST(GpuSessionCheckpointing, SomeBlocksMatchEveryActivationKept) {
  BSW_REQUIRE_DEVICE();
  for (const char* model : {kTokens, kShortcuts}) {
    const Graph g = graph_of(model);
    if (recomputable_blocks(g).size() < 2) continue;
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      const std::vector<double> kept = run_losses(g, BackendKind::cuda, p, 4, 1, 3, true, false);
      const std::vector<double> some = run_losses(g, BackendKind::cuda, p, 4, 1, 3, true, true, 1);
      for (size_t i = 0; i < kept.size(); ++i)
        EXPECT_NEAR(some[i], kept[i], 1e-5 * std::abs(kept[i])) << g.model_name << " step " << i + 1;
    }
  }
}

TEST(GpuSessionGraphs, ReplayMatchesPlainLaunches) {
  BSW_REQUIRE_DEVICE();
  const Graph g = graph_of(kTokens);
  const std::vector<double> graphs = run_losses(g, BackendKind::cuda, Precision::fp32, 4, 1, 4, true);
  const std::vector<double> plain = run_losses(g, BackendKind::cuda, Precision::fp32, 4, 1, 4, false);
  for (size_t i = 0; i < graphs.size(); ++i) EXPECT_NEAR(graphs[i], plain[i], 1e-5 * std::abs(plain[i]));
  const Plan plan = make_plan(g, {4, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  auto session = cuda::make_cuda_backend(0)->prepare(g, plan, SessionOptions{});
  static_cast<void>(session->step());
  static_cast<void>(session->step());
  const nlohmann::json d = session->details();
  EXPECT_EQ(d.at("cuda_graphs"), "captured, replayed from step 2") << d.dump();
  EXPECT_TRUE(d.contains("attention"));
}

TEST(GpuSessionInference, RunsEveryModelInEveryPrecision) {
  BSW_REQUIRE_DEVICE();
  for (const char* model : {kMlp, kImage, kTokens, kVitMse, kBatchNorm, kResidualActivations, kShortcuts}) {
    const Graph g = graph_of(model);
    for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
      const Plan plan = make_plan(g, {3, p, Mode::infer, 1, BackendKind::cuda});
      auto session = cuda::make_cuda_backend(0)->prepare(g, plan, SessionOptions{});
      for (int i = 0; i < 3; ++i) {
        const StepResult r = session->step();
        EXPECT_TRUE(std::isnan(r.loss));
        EXPECT_GT(r.step_ms, 0.0);
      }
    }
  }
}

constexpr const char* kWide = R"({"name": "wide",
  "input": {"type": "vector", "features": 1024},
  "layers": [{"type": "linear", "out_features": 4096, "activation": "gelu"},
             {"type": "linear", "out_features": 4096, "activation": "gelu"},
             {"type": "linear", "out_features": 10}]})";

TEST(GpuSessionMemory, MeasuredDeviceMemoryMatchesThePlan) {
  BSW_REQUIRE_DEVICE();
  const Graph g = graph_of(kWide);
  // On a GPU the plan is large enough that the driver's allocation granularity is noise; the emulator
  // counts bytes exactly, and computes the step's GEMMs on the CPU, so a small batch does there.
  const int64_t batch = gputest::kEmulated ? 256 : 8192;
  const Plan plan = make_plan(g, {batch, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  if (!gputest::kEmulated) {
    ASSERT_GT(plan.memory.total_bytes(), uint64_t{512} << 20);
  }
  auto session = cuda::make_cuda_backend(0)->prepare(g, plan, SessionOptions{});
  const SessionMemory m = session->memory();
  EXPECT_EQ(m.planned_bytes, plan.memory.total_bytes());
  EXPECT_EQ(m.allocated_bytes, plan.memory.total_bytes());
  ASSERT_TRUE(m.device_used_bytes.has_value());
  const double ratio = static_cast<double>(*m.device_used_bytes) / static_cast<double>(m.planned_bytes);
  EXPECT_NEAR(ratio, 1.0, 0.02) << *m.device_used_bytes << " measured, " << m.planned_bytes << " planned";
  EXPECT_TRUE(session->step().finite);
  // Read again after the first step (lazily loaded kernels) and the graph's upload: never less, and what a
  // step holds beside the arena is still small next to it.
  const SessionMemory after = session->memory();
  ASSERT_TRUE(after.device_used_bytes.has_value());
  EXPECT_GE(*after.device_used_bytes, *m.device_used_bytes);
  EXPECT_NEAR(static_cast<double>(*after.device_used_bytes) / static_cast<double>(m.planned_bytes), 1.0, 0.1)
      << *after.device_used_bytes << " after a step, " << m.planned_bytes << " planned";
}

TEST(GpuSessionMemory, OutOfMemoryAtPrepareThenASmallerBatchRuns) {
  BSW_REQUIRE_DEVICE();
  const Graph g = graph_of(kWide);
  auto backend = cuda::make_cuda_backend(0);
  const uint64_t device_bytes = backend->device(Precision::fp32).memory_total_bytes;
  int64_t batch = 8192;
  while (make_plan(g, {batch, Precision::fp32, Mode::train, 1, BackendKind::cuda}).memory.total_bytes() <=
         device_bytes + (device_bytes >> 3))
    batch *= 2;
  const Plan too_big = make_plan(g, {batch, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  EXPECT_THROW(static_cast<void>(backend->prepare(g, too_big, SessionOptions{})), OutOfMemory);
  const Plan small = make_plan(g, {64, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  auto session = backend->prepare(g, small, SessionOptions{});
  EXPECT_TRUE(session->step().finite);

  SessionOptions limited;
  limited.memory_limit_bytes = small.memory.total_bytes() - 1;
  EXPECT_THROW(static_cast<void>(backend->prepare(g, small, limited)), OutOfMemory);
}

TEST(GpuDevices, DescribeAndSpecSheet) {
  const nlohmann::json d = cuda::describe_devices();
  EXPECT_TRUE(d.contains("versions"));
  ASSERT_TRUE(cuda::spec_peak_flops("NVIDIA H200", Precision::bf16).has_value());
  EXPECT_DOUBLE_EQ(*cuda::spec_peak_flops("NVIDIA H200", Precision::bf16), 989.5e12);
  EXPECT_DOUBLE_EQ(*cuda::spec_peak_flops("NVIDIA H100 PCIe", Precision::bf16), 756.5e12);
  EXPECT_DOUBLE_EQ(*cuda::spec_peak_flops("NVIDIA A100-SXM4-80GB", Precision::tf32), 156e12);
  EXPECT_DOUBLE_EQ(*cuda::spec_peak_flops("NVIDIA L40S", Precision::fp16), 362.05e12);
  EXPECT_FALSE(cuda::spec_peak_flops("Tesla V100-SXM2-16GB", Precision::bf16).has_value());
  EXPECT_FALSE(cuda::spec_peak_flops("Some Future GPU", Precision::fp32).has_value());
  // Names as CUDA reports them, and near misses that are other GPUs: whole model numbers only.
  EXPECT_DOUBLE_EQ(*cuda::spec_peak_flops("NVIDIA H100 80GB HBM3", Precision::bf16), 989.5e12);
  EXPECT_LT(*cuda::spec_peak_flops("NVIDIA H200 NVL", Precision::bf16),
            *cuda::spec_peak_flops("NVIDIA H200", Precision::bf16));  // the NVL entry, not the SXM one
  EXPECT_TRUE(cuda::spec_peak_flops("NVIDIA L4", Precision::bf16).has_value());
  EXPECT_TRUE(cuda::spec_peak_flops("NVIDIA A10", Precision::bf16).has_value());
  EXPECT_TRUE(cuda::spec_peak_flops("Tesla V100-SXM2-32GB", Precision::fp16).has_value());
  EXPECT_TRUE(cuda::spec_peak_flops("NVIDIA GeForce RTX 3090", Precision::fp16).has_value());
  for (const char* other : {"NVIDIA GH200 480GB", "NVIDIA A10G", "NVIDIA L40", "NVIDIA GeForce RTX 3090 Ti",
                            "NVIDIA GeForce RTX 4090 D", "Tesla V100S-PCIE-32GB", "NVIDIA H20"})
    EXPECT_FALSE(cuda::spec_peak_flops(other, Precision::fp16).has_value()) << other;
  EXPECT_NE(*cuda::spec_peak_flops("NVIDIA L40S", Precision::bf16),
            *cuda::spec_peak_flops("NVIDIA L4", Precision::bf16));
  if (cuda::device_count() == 0) {
    EXPECT_TRUE(d.at("devices").empty());
    EXPECT_FALSE(d.at("reason").get<std::string>().empty());
    EXPECT_THROW(static_cast<void>(cuda::make_cuda_backend(0)), UsageError);
    GTEST_SKIP() << "no CUDA device: " << cuda::no_device_reason()
                 << " (spec sheet and no-device paths checked)";
  }
  const nlohmann::json& first = d.at("devices").at(0);
  for (const char* key :
       {"name", "sms", "memory_total_bytes", "compute_capability", "pci_bus_id", "uuid", "sm_clock_mhz"})
    EXPECT_TRUE(first.contains(key)) << key;
}

// calibrate() on the GPU: plausible rates in the expected order, saved to the cache, and the MFU peak of a
// backend made afterwards. On the emulator the same flow on 64^3 products and a 1 MiB copy (device.cpp),
// whose rates are the CPU's: positive, in no order.
TEST(GpuDevices, CalibrateMeasuresTheRatesAndCachesThem) {
  BSW_REQUIRE_DEVICE();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bsw-calibrate-" + std::to_string(::getpid()));
  setenv("BATCHSWEEP_CACHE_DIR", dir.c_str(), 1);
  const nlohmann::json c = cuda::calibrate(0);
  for (const char* key : {"bf16_tflops", "fp16_tflops", "tf32_tflops", "fp32_tflops", "copy_gbps"})
    EXPECT_GT(c.at(key).get<double>(), 0.0) << key;
  EXPECT_EQ(c.at("gemm_size").get<int64_t>(), gputest::kEmulated ? 64 : 8192);
  // Tensor cores: 16-bit above tf32 above plain fp32.
  if (!gputest::kEmulated) {
    EXPECT_GT(c.at("bf16_tflops").get<double>(), c.at("tf32_tflops").get<double>());
    EXPECT_GT(c.at("tf32_tflops").get<double>(), c.at("fp32_tflops").get<double>());
  }
  EXPECT_EQ(c.at("cache").get<std::string>().rfind("saved to ", 0), 0U) << c.dump();
  const DeviceInfo info = cuda::make_cuda_backend(0)->device(Precision::bf16);
  ASSERT_TRUE(info.peak_flops.has_value());
  EXPECT_DOUBLE_EQ(*info.peak_flops, c.at("bf16_tflops").get<double>() * 1e12);
  // A spec sheet entry, where there is one, bounds the measurement (dense rates; a little above for boost).
  if (auto spec = cuda::spec_peak_flops(info.name, Precision::bf16); spec && !gputest::kEmulated) {
    EXPECT_LT(*info.peak_flops, *spec * 1.1);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  unsetenv("BATCHSWEEP_CACHE_DIR");
}

}  // namespace
}  // namespace bsw
