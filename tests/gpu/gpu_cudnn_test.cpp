// The cuDNN paths against the CPU reference: convolution fprop / wgrad / dgrad (with our bias and gradient
// accumulation kernels), fused SDPA forward and backward (causal and not), and whole training steps and
// inference of models the backend runs through cuDNN. Fresh random inputs, outputs poisoned first. Without a
// device every test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/ops.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cudnn_graphs.hpp"
#include "backends/cuda/kernels.hpp"
#include "batchsweep/model.hpp"
#include "gpu_test_models.hpp"
#include "gpu_test_util.hpp"

namespace bsw {
namespace {

using gputest::DeviceArray;
using gputest::graph_of;
using gputest::kImage;
using gputest::quantize;
using gputest::random_values;
using gputest::rel_error;
using gputest::tolerance;
namespace k = cuda::kernels;

constexpr uint64_t kWorkspaceBytes = uint64_t{64} << 20;

// Host-side: the shapes handed to cuDNN, including where a conv's packed weights sit (runs without a device).
TEST(CudnnShapes, FromOpsWithTheWeightAlignment) {
  const Graph g = lower(parse_model(nlohmann::json::parse(R"({"name": "c",
    "input": {"type": "image", "channels": 1, "height": 12, "width": 12},
    "layers": [{"type": "conv2d", "out_channels": 6, "kernel_size": 5},
               {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 3}]})"),
                                    "shapes.json"));
  // The first conv has 6*1*25 + 6 = 156 parameters: the second's weights start 312 bytes in (bf16), 624
  // (fp32).
  const cuda::ConvShape first = cuda::conv_shape(g.ops[0], 8, Precision::bf16);
  const cuda::ConvShape bf16 = cuda::conv_shape(g.ops[1], 8, Precision::bf16);
  const cuda::ConvShape fp32 = cuda::conv_shape(g.ops[1], 8, Precision::fp32);
  EXPECT_EQ(first.w_alignment, 16);
  EXPECT_EQ(bf16.w_alignment, 8);
  EXPECT_EQ(fp32.w_alignment, 16);
  EXPECT_EQ(bf16.batch, 8);
  EXPECT_EQ(bf16.channels, 6);
  EXPECT_EQ(bf16.height, 8);
  EXPECT_EQ(bf16.out_channels, 4);
  EXPECT_EQ(bf16.out_height, 4);
  EXPECT_EQ(bf16.padding, 1);
  EXPECT_EQ(bf16.stride, 2);
  const Graph t = lower(load_model("gpt2-small"));
  for (const Op& op : t.ops) {
    if (op.kind != OpKind::attention_core) continue;
    const cuda::SdpaShape s = cuda::sdpa_shape(op, 4, DType::bf16, true);
    EXPECT_EQ(s.heads, 12);
    EXPECT_EQ(s.head_dim, 64);
    EXPECT_EQ(s.seq, 1024);
    EXPECT_TRUE(s.causal);
  }
}

Precision precision_of(DType t) {
  return t == DType::f32 ? Precision::fp32 : t == DType::bf16 ? Precision::bf16 : Precision::fp16;
}

class GpuCudnnConv : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override { BSW_REQUIRE_CUDNN(); }
  [[nodiscard]] DType t() const { return GetParam(); }
};

TEST_P(GpuCudnnConv, FpropWgradDgradMatchTheCpu) {
  const int64_t batch = 3, cin = 5, h = 9, w = 7, cout = 8, ks = 3, stride = 2, pad = 1;
  const int64_t hout = (h + 2 * pad - ks) / stride + 1, wout = (w + 2 * pad - ks) / stride + 1,
                hw = hout * wout, patch = cin * ks * ks;
  const cpu::ConvShape s{batch, cin, h, w, cout, ks, stride, pad, hout, wout};
  const std::vector<float> x = quantize(random_values(batch * cin * h * w, 61), t()),
                           wt = quantize(random_values(cout * patch, 62), t()),
                           b = quantize(random_values(cout, 63), t()),
                           dy = quantize(random_values(batch * cout * hw, 64), t());
  std::vector<float> y_ref(batch * cout * hw), scratch(cpu::conv2d_scratch_elements(s)), dx_ref(x.size());
  std::vector<float> dw_ref(cout * patch, 0.5f), db_ref(cout, 0.0f);  // 0.5: the gradient accumulates
  cpu::conv2d_forward(s, x.data(), wt.data(), b.data(), nullptr, y_ref.data(), Activation::none,
                      scratch.data());
  cpu::conv2d_backward(s, x.data(), wt.data(), nullptr, y_ref.data(), dy.data(), nullptr, dx_ref.data(),
                       dw_ref.data(), db_ref.data(), Activation::none, scratch.data());

  cuda::CudnnGraphs graphs(0);
  cuda::ConvShape shape;
  shape.batch = batch;
  shape.channels = cin;
  shape.height = h;
  shape.width = w;
  shape.out_channels = cout;
  shape.kernel = ks;
  shape.stride = stride;
  shape.padding = pad;
  shape.out_height = hout;
  shape.out_width = wout;
  shape.precision = precision_of(t());
  for (cuda::ConvPass pass : {cuda::ConvPass::fprop, cuda::ConvPass::wgrad, cuda::ConvPass::dgrad})
    ASSERT_EQ(graphs.conv_support(pass, shape, kWorkspaceBytes), "");

  DeviceArray dx_in(t(), x), dw(t(), wt), dbias(t(), b), y(t(), y_ref.size()), ddy(t(), dy),
      dx(t(), x.size()), dw_batch(t() == DType::f16 ? DType::f32 : t(), wt.size()),
      ws(DType::f32, kWorkspaceBytes / 4);
  DeviceArray dwg(DType::f32, std::vector<float>(cout * patch, 0.5f));
  graphs.conv(cuda::ConvPass::fprop, shape, dx_in.get(), dw.get(), y.get(), ws.get(), kWorkspaceBytes,
              nullptr);
  k::bias_add_nchw(t(), y.get(), dbias.get(), batch, cout, hw, nullptr);
  EXPECT_LE(rel_error(y.download(), y_ref), tolerance(t()));

  graphs.conv(cuda::ConvPass::wgrad, shape, dx_in.get(), dw_batch.get(), ddy.get(), ws.get(), kWorkspaceBytes,
              nullptr);
  k::accumulate_f32(dw_batch.type(), dw_batch.get(), dwg.f32(), cout * patch, nullptr);
  EXPECT_LE(rel_error(dwg.download(), dw_ref), tolerance(t()));

  graphs.conv(cuda::ConvPass::dgrad, shape, dx.get(), dw.get(), ddy.get(), ws.get(), kWorkspaceBytes,
              nullptr);
  EXPECT_LE(rel_error(dx.download(), dx_ref), tolerance(t()));
  EXPECT_EQ(graphs.cached_graphs(), 3u);

  // Packed parameters can put a conv's weights 2 bytes into a 16-byte line: the graph is told so.
  std::vector<float> shifted(wt.size() + 1, 0.0f);
  std::copy(wt.begin(), wt.end(), shifted.begin() + 1);
  DeviceArray dw_shifted(t(), shifted), y2(t(), y_ref.size());
  cuda::ConvShape unaligned = shape;
  unaligned.w_alignment = static_cast<int64_t>(dtype_bytes(t()));
  ASSERT_EQ(graphs.conv_support(cuda::ConvPass::fprop, unaligned, kWorkspaceBytes), "");
  graphs.conv(cuda::ConvPass::fprop, unaligned, dx_in.get(),
              static_cast<unsigned char*>(dw_shifted.get()) + dtype_bytes(t()), y2.get(), ws.get(),
              kWorkspaceBytes, nullptr);
  k::bias_add_nchw(t(), y2.get(), dbias.get(), batch, cout, hw, nullptr);
  EXPECT_LE(rel_error(y2.download(), y_ref), tolerance(t()));
}

INSTANTIATE_TEST_SUITE_P(Storage, GpuCudnnConv, testing::Values(DType::f32, DType::bf16, DType::f16),
                         gputest::dtype_name);

struct SdpaCase {
  const char* name;
  DType dtype;
  bool causal;
  int64_t head_dim;
};

class GpuCudnnSdpa : public testing::TestWithParam<SdpaCase> {
 protected:
  void SetUp() override { BSW_REQUIRE_CUDNN(); }
};

TEST_P(GpuCudnnSdpa, ForwardAndBackwardMatchTheCpu) {
  const SdpaCase c = GetParam();
  const int64_t batch = 2, seq = 40, heads = 3, dim = heads * c.head_dim;
  const std::vector<float> qkv = quantize(random_values(batch * seq * 3 * dim, 71), c.dtype),
                           dout = quantize(random_values(batch * seq * dim, 72), c.dtype);
  std::vector<float> out_ref(batch * seq * dim), probs(batch * heads * seq * seq), dqkv_ref(qkv.size()),
      scratch(cpu::attention_scratch_elements(seq));
  cpu::attention_forward(qkv.data(), out_ref.data(), probs.data(), batch, seq, dim, heads, c.causal);
  cpu::attention_backward(qkv.data(), probs.data(), dout.data(), dqkv_ref.data(), batch, seq, dim, heads,
                          c.causal, scratch.data());

  cuda::CudnnGraphs graphs(0);
  const cuda::SdpaShape shape{batch, heads, seq, c.head_dim, c.causal, c.dtype, true};
  ASSERT_EQ(graphs.sdpa_support(false, shape, kWorkspaceBytes), "");
  ASSERT_EQ(graphs.sdpa_support(true, shape, kWorkspaceBytes), "");
  const size_t esize = dtype_bytes(c.dtype);
  DeviceArray d_qkv(c.dtype, qkv), out(c.dtype, out_ref.size()), d_dout(c.dtype, dout),
      dqkv(c.dtype, qkv.size()), stats(DType::f32, batch * heads * seq), ws(DType::f32, kWorkspaceBytes / 4);
  auto* base = static_cast<unsigned char*>(d_qkv.get());
  auto* dbase = static_cast<unsigned char*>(dqkv.get());
  graphs.sdpa_forward(shape, base, base + dim * esize, base + 2 * dim * esize, out.get(), stats.f32(),
                      ws.get(), kWorkspaceBytes, nullptr);
  EXPECT_LE(rel_error(out.download(), out_ref), tolerance(c.dtype)) << c.name;
  graphs.sdpa_backward(shape, base, base + dim * esize, base + 2 * dim * esize, out.get(), d_dout.get(),
                       stats.f32(), dbase, dbase + dim * esize, dbase + 2 * dim * esize, ws.get(),
                       kWorkspaceBytes, nullptr);
  EXPECT_LE(rel_error(dqkv.download(), dqkv_ref), 2 * tolerance(c.dtype)) << c.name;

  // Inference: no statistics.
  const cuda::SdpaShape infer{batch, heads, seq, c.head_dim, c.causal, c.dtype, false};
  out.poison();
  graphs.sdpa_forward(infer, base, base + dim * esize, base + 2 * dim * esize, out.get(), nullptr, ws.get(),
                      kWorkspaceBytes, nullptr);
  EXPECT_LE(rel_error(out.download(), out_ref), tolerance(c.dtype)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuCudnnSdpa,
                         testing::Values(SdpaCase{"bf16_causal_64", DType::bf16, true, 64},
                                         SdpaCase{"bf16_full_64", DType::bf16, false, 64},
                                         SdpaCase{"fp16_causal_32", DType::f16, true, 32},
                                         SdpaCase{"bf16_full_128", DType::bf16, false, 128}),
                         [](const testing::TestParamInfo<SdpaCase>& p) { return std::string(p.param.name); });

// ---- whole sessions on the paths the backend chooses
// ----------------------------------------------------------

constexpr const char* kTokens = R"({"name": "tokens",
  "input": {"type": "tokens", "sequence_length": 48, "vocab_size": 64},
  "layers": [{"type": "embedding", "dim": 128},
             {"type": "transformer_block", "heads": 2, "mlp_ratio": 2, "causal": true, "repeat": 2},
             {"type": "attention", "heads": 4},
             {"type": "layernorm"},
             {"type": "linear", "out_features": 64}],
  "loss": "cross_entropy"})";

struct PathCase {
  const char* name;
  const char* model;
  Precision precision;
  int64_t accumulation;
  bool expect_conv, expect_sdpa;
};

class GpuCudnnSession : public testing::TestWithParam<PathCase> {
 protected:
  void SetUp() override { BSW_REQUIRE_CUDNN(); }
};

std::vector<double> losses(const Graph& g, Backend& backend, const PlanRequest& request, int steps) {
  SessionOptions options;
  options.seed = 42;
  std::unique_ptr<Session> session = backend.prepare(g, make_plan(g, request), options);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    const StepResult r = session->step();
    EXPECT_TRUE(r.finite);
    out.push_back(r.loss);
  }
  return out;
}

TEST_P(GpuCudnnSession, TrainingLossesMatchTheCpuBackend) {
  const PathCase c = GetParam();
  const Graph g = graph_of(c.model);
  std::unique_ptr<Backend> gpu = cuda::make_cuda_backend(0);
  const ExecutionPaths paths =
      gpu->execution_paths(g, c.precision, Mode::train, preferred_cuda_paths(g, c.precision));
  EXPECT_EQ(paths.conv == ConvPath::cudnn, c.expect_conv) << paths.note;
  EXPECT_EQ(paths.attention == AttentionPath::cudnn_sdpa, c.expect_sdpa) << paths.note;
  EXPECT_EQ(paths.note, "");
  const std::unique_ptr<Backend> cpu_backend = cpu::make_cpu_backend();
  const std::vector<double> ref =
      losses(g, *cpu_backend, {4, c.precision, Mode::train, c.accumulation, BackendKind::cpu}, 3);
  const std::vector<double> got =
      losses(g, *gpu, {4, c.precision, Mode::train, c.accumulation, BackendKind::cuda, paths}, 3);
  const double tol = c.precision == Precision::fp32 ? 1e-4 : c.precision == Precision::tf32 ? 1e-2 : 3e-2;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], tol * std::abs(ref[i])) << c.name << " step " << i;

  // Inference on the same paths runs, and the session says which paths ran.
  const PlanRequest infer{
      3,
      c.precision,
      Mode::infer,
      1,
      BackendKind::cuda,
      gpu->execution_paths(g, c.precision, Mode::infer, preferred_cuda_paths(g, c.precision))};
  auto session = gpu->prepare(g, make_plan(g, infer), SessionOptions{});
  static_cast<void>(session->step());
  const nlohmann::json d = session->details();
  if (c.expect_conv) {
    EXPECT_NE(d.at("conv").get<std::string>().find("cuDNN"), std::string::npos) << d.dump();
  }
  if (c.expect_sdpa) {
    EXPECT_NE(d.at("attention").get<std::string>().find("cuDNN SDPA"), std::string::npos) << d.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GpuCudnnSession,
                         testing::Values(PathCase{"image_fp32", kImage, Precision::fp32, 1, true, false},
                                         PathCase{"image_tf32", kImage, Precision::tf32, 1, true, false},
                                         PathCase{"image_bf16", kImage, Precision::bf16, 2, true, false},
                                         PathCase{"image_fp16", kImage, Precision::fp16, 1, true, false},
                                         PathCase{"tokens_fp32", kTokens, Precision::fp32, 1, false, false},
                                         PathCase{"tokens_bf16", kTokens, Precision::bf16, 2, false, true},
                                         PathCase{"tokens_fp16", kTokens, Precision::fp16, 1, false, true}),
                         [](const testing::TestParamInfo<PathCase>& p) { return std::string(p.param.name); });

TEST(GpuCudnnMemory, MeasuredDeviceMemoryMatchesThePlanWithCudnnWorkspace) {
  BSW_REQUIRE_CUDNN();
  const Graph g = lower(load_model("gpt2-small"));
  std::unique_ptr<Backend> gpu = cuda::make_cuda_backend(0);
  const ExecutionPaths paths =
      gpu->execution_paths(g, Precision::bf16, Mode::train, preferred_cuda_paths(g, Precision::bf16));
  ASSERT_EQ(paths.attention, AttentionPath::cudnn_sdpa) << paths.note;
  const Plan plan = make_plan(g, {8, Precision::bf16, Mode::train, 1, BackendKind::cuda, paths});
  ASSERT_NE(plan.find("workspace.cudnn"), nullptr);
  EXPECT_EQ(plan.find("ops[4].probs"), nullptr);
  auto session = gpu->prepare(g, plan, SessionOptions{});
  const SessionMemory m = session->memory();
  EXPECT_EQ(m.allocated_bytes, m.planned_bytes);
  ASSERT_TRUE(m.device_used_bytes.has_value());
  EXPECT_NEAR(static_cast<double>(*m.device_used_bytes), static_cast<double>(m.planned_bytes),
              0.02 * static_cast<double>(m.planned_bytes));
  const StepResult r = session->step();
  EXPECT_TRUE(r.finite);
  EXPECT_NEAR(r.loss, std::log(50257.0), 0.5);
}

}  // namespace
}  // namespace bsw
