// A GPU whose cuBLASLt has no algorithm for a fused epilogue (BSW_EMU_CUBLASLT_REFUSE plays it): Gemm says so
// instead of throwing, the session runs the plain GEMM and the separate GELU / bias-gradient kernels, its
// losses still match the CPU reference, and details() names the epilogues that were not available.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/gemm.hpp"
#include "batchsweep/errors.hpp"
#include "gpu_test_models.hpp"
#include "gpu_test_util.hpp"

namespace bsw {
namespace {

constexpr const char* kRefuse = "BSW_EMU_CUBLASLT_REFUSE";

// Two GELU linears and a head (two fused forward epilogues, two DGELU_BGRAD backward), and a large SGD step
// so a wrong gradient shows in the next losses: dropping gelu' and the bias gradients on the fallback moves
// step 2's loss by 1.3e-3 (relative) and step 4's by 6.5e-3; the right fallback stays within 6e-5 of the CPU
// reference and of the fused run. Hence the 5e-4 bound.
constexpr const char* kGeluMlp = R"({"name": "gelu-mlp",
  "input": {"type": "vector", "features": 24},
  "layers": [{"type": "linear", "out_features": 32, "activation": "gelu"},
             {"type": "linear", "out_features": 40, "activation": "gelu"},
             {"type": "linear", "out_features": 8}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.5, "momentum": 0.0}})";

struct Outcome {
  std::vector<double> losses;
  nlohmann::json details;
};

Outcome run_model(BackendKind kind, Precision p, Mode mode, int steps, const char* config = kGeluMlp) {
  const Graph g = gputest::graph_of(config);
  const Plan plan = make_plan(g, {16, p, mode, 1, kind});
  SessionOptions options;
  options.seed = 7;
  std::unique_ptr<Backend> backend =
      kind == BackendKind::cpu ? cpu::make_cpu_backend() : cuda::make_cuda_backend(0);
  std::unique_ptr<Session> session = backend->prepare(g, plan, options);
  Outcome r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(session->step().loss);
  r.details = session->details();
  return r;
}

class EpilogueFallback : public testing::Test {
 protected:
  void SetUp() override {
    BSW_REQUIRE_DEVICE();
    unsetenv(kRefuse);
  }
  void TearDown() override { unsetenv(kRefuse); }

  static void expect_losses_near(const Outcome& gpu, const Outcome& ref, double tol) {
    ASSERT_EQ(gpu.losses.size(), ref.losses.size());
    for (size_t i = 0; i < ref.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i], ref.losses[i], tol * std::abs(ref.losses[i])) << "step " << i + 1;
  }
};

TEST_F(EpilogueFallback, EveryGeluEpilogueRefusedRunsTheSeparateKernels) {
  const Outcome cpu = run_model(BackendKind::cpu, Precision::bf16, Mode::train, 4);
  const Outcome fused = run_model(BackendKind::cuda, Precision::bf16, Mode::train, 4);
  EXPECT_TRUE(fused.details.contains("gelu")) << fused.details.dump();
  EXPECT_TRUE(fused.details.contains("gelu_backward")) << fused.details.dump();
  EXPECT_FALSE(fused.details.contains("epilogues_unavailable")) << fused.details.dump();

  setenv(kRefuse, "GELU_AUX_BIAS,DGELU_BGRAD", 1);
  const Outcome unfused = run_model(BackendKind::cuda, Precision::bf16, Mode::train, 4);
  EXPECT_FALSE(unfused.details.contains("gelu")) << unfused.details.dump();
  EXPECT_FALSE(unfused.details.contains("gelu_backward")) << unfused.details.dump();
  ASSERT_TRUE(unfused.details.contains("epilogues_unavailable")) << unfused.details.dump();
  const std::vector<std::string> gemms = unfused.details["epilogues_unavailable"].at("gemms");
  // Forward: the two GELU linears [M x N x K] 16x32x24 and 16x40x32; backward: the input gradients of the
  // second and third linears (16x32x40, 16x40x8), each the GELU linear before it's pre-activation gradient.
  EXPECT_EQ(gemms, (std::vector<std::string>{"DGELU_BGRAD 16x32x40 bf16", "DGELU_BGRAD 16x40x8 bf16",
                                             "GELU_AUX_BIAS 16x32x24 bf16", "GELU_AUX_BIAS 16x40x32 bf16"}));
  expect_losses_near(unfused, cpu, 5e-4);
  expect_losses_near(unfused, fused, 5e-4);
}

TEST_F(EpilogueFallback, OnlyTheBackwardEpilogueRefused) {
  const Outcome cpu = run_model(BackendKind::cpu, Precision::bf16, Mode::train, 4);
  setenv(kRefuse, "DGELU_BGRAD", 1);
  const Outcome gpu = run_model(BackendKind::cuda, Precision::bf16, Mode::train, 4);
  EXPECT_TRUE(gpu.details.contains("gelu")) << gpu.details.dump();
  EXPECT_FALSE(gpu.details.contains("gelu_backward")) << gpu.details.dump();
  EXPECT_EQ(gpu.details["epilogues_unavailable"].at("gemms"),
            nlohmann::json::array({"DGELU_BGRAD 16x32x40 bf16", "DGELU_BGRAD 16x40x8 bf16"}));
  expect_losses_near(gpu, cpu, 5e-4);
}

// Without the BIAS epilogue (the head, and GELU linears once GELU_AUX_BIAS is refused too) the plain product
// runs and a kernel adds the bias.
TEST_F(EpilogueFallback, WithoutTheBiasEpilogueAKernelAddsTheBias) {
  const Outcome cpu = run_model(BackendKind::cpu, Precision::bf16, Mode::train, 4);
  setenv(kRefuse, "BIAS,GELU_AUX_BIAS", 1);
  const Outcome gpu = run_model(BackendKind::cuda, Precision::bf16, Mode::train, 4);
  EXPECT_EQ(gpu.details["epilogues_unavailable"].at("gemms"),
            nlohmann::json::array({"BIAS 16x32x24 bf16", "BIAS 16x40x32 bf16", "BIAS 16x8x40 bf16",
                                   "GELU_AUX_BIAS 16x32x24 bf16", "GELU_AUX_BIAS 16x40x32 bf16"}));
  expect_losses_near(gpu, cpu, 5e-4);
}

TEST_F(EpilogueFallback, InferenceWithoutGeluBias) {
  setenv(kRefuse, "GELU_BIAS", 1);
  const Outcome gpu = run_model(BackendKind::cuda, Precision::fp16, Mode::infer, 2);
  EXPECT_FALSE(gpu.details.contains("gelu")) << gpu.details.dump();
  EXPECT_EQ(gpu.details["epilogues_unavailable"].at("gemms"),
            nlohmann::json::array({"GELU_BIAS 16x32x24 f16", "GELU_BIAS 16x40x32 f16"}));
}

// Parameters are packed: the 12-wide layer leaves the next weight at element 300, so the GELU linear's bias
// starts at element 492 and the head's at 636 (984 and 1272 bytes in bf16: 8-byte aligned, not 16). No
// preference tells cuBLASLt of that, so those epilogues are not asked for; the plain products and the bias
// and GELU kernels run, and the losses still follow the CPU's.
constexpr const char* kPackedBiasMlp = R"({"name": "packed-bias-mlp",
  "input": {"type": "vector", "features": 24},
  "layers": [{"type": "linear", "out_features": 12, "activation": "relu"},
             {"type": "linear", "out_features": 16, "activation": "gelu"},
             {"type": "linear", "out_features": 8}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.5, "momentum": 0.0}})";

TEST_F(EpilogueFallback, ABiasNotSixteenByteAlignedRunsUnfused) {
  const Outcome cpu = run_model(BackendKind::cpu, Precision::bf16, Mode::train, 4, kPackedBiasMlp);
  const Outcome gpu = run_model(BackendKind::cuda, Precision::bf16, Mode::train, 4, kPackedBiasMlp);
  EXPECT_FALSE(gpu.details.contains("gelu")) << gpu.details.dump();
  // The GELU linear's BIAS is not asked for either once its GELU_AUX_BIAS is not; the first layer's bias
  // (element 288, 576 bytes) is aligned: its BIAS epilogue runs fused.
  EXPECT_EQ(
      gpu.details["epilogues_unavailable"].at("gemms"),
      nlohmann::json::array({"BIAS 16x16x12 bf16", "BIAS 16x8x16 bf16", "GELU_AUX_BIAS 16x16x12 bf16"}));
  expect_losses_near(gpu, cpu, 5e-4);
  // In fp32 (4-byte elements) the same offsets are 1968 and 2544 bytes: 16-byte aligned, fused.
  const Outcome fp32 = run_model(BackendKind::cuda, Precision::fp32, Mode::train, 2, kPackedBiasMlp);
  EXPECT_FALSE(fp32.details.contains("epilogues_unavailable")) << fp32.details.dump();
}

// C[16x8] = A[16x32] B[32x8] in bf16, no epilogue.
cuda::GemmArgs bf16_16x8x32(const gputest::DeviceArray& a, const gputest::DeviceArray& b,
                            const gputest::DeviceArray& c) {
  cuda::GemmArgs g;
  g.m = 16;
  g.n = 8;
  g.k = 32;
  g.a = a.get();
  g.lda = 32;
  g.b = b.get();
  g.ldb = 8;
  g.c = c.get();
  g.ldc = 8;
  g.ab_type = g.c_type = DType::bf16;
  return g;
}

TEST_F(EpilogueFallback, GemmAnswersAvailabilityAndRunNamesTheEpilogue) {
  gputest::DeviceArray a(DType::bf16, 16 * 32), b(DType::bf16, 32 * 8), c(DType::bf16, 16 * 8),
      bias(DType::bf16, 8), aux(DType::bf16, 16 * 8), workspace(DType::f32, 1024);
  cuda::Gemm gemm(Precision::bf16, workspace.get(), 4096);
  cuda::GemmArgs g = bf16_16x8x32(a, b, c);
  g.epilogue = cuda::Epilogue::gelu_aux_bias;
  g.bias = bias.get();
  g.aux = aux.get();
  g.ld_aux = 8;
  EXPECT_TRUE(gemm.available(g));
  EXPECT_EQ(gemm.cached_shapes(), 1U);
  // The same product with its bias 8 bytes into a 16-byte line is not asked of cuBLASLt.
  g.bias = static_cast<const char*>(bias.get()) + 8;
  EXPECT_FALSE(gemm.available(g));
  EXPECT_EQ(gemm.cached_shapes(), 1U);
  g.bias = bias.get();

  setenv(kRefuse, "GELU_AUX_BIAS", 1);
  g.ld_aux = 16;  // another problem, so the heuristic is asked again
  EXPECT_FALSE(gemm.available(g));
  EXPECT_FALSE(gemm.available(g));
  EXPECT_EQ(gemm.cached_shapes(), 1U);
  try {
    gemm.run(g, nullptr);
    FAIL() << "run without an algorithm";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("no algorithm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GELU_AUX_BIAS"), std::string::npos) << e.what();
  }
  g.ld_aux = 4;  // an impossible shape is still an error, not "unavailable"
  EXPECT_THROW(static_cast<void>(gemm.available(g)), BackendError);
}

// Past 2^31 - 1 rows cuBLASLt finds few algorithms: where it finds none, the error names that as the cause
// (and only there).
TEST_F(EpilogueFallback, NoAlgorithmPastInt32SaysSo) {
  gputest::DeviceArray a(DType::bf16, 16 * 32), b(DType::bf16, 32 * 8), c(DType::bf16, 16 * 8),
      workspace(DType::f32, 1024);
  cuda::Gemm gemm(Precision::bf16, workspace.get(), 4096);
  cuda::GemmArgs g = bf16_16x8x32(a, b, c);
  setenv(kRefuse, "DEFAULT", 1);
  const auto message = [&] {
    try {
      gemm.run(g, nullptr);
    } catch (const BackendError& e) {
      return std::string(e.what());
    }
    return std::string("ran");
  };
  EXPECT_THAT(message(),
              testing::AllOf(testing::HasSubstr("no algorithm"), testing::Not(testing::HasSubstr("2^31"))));
  g.m = int64_t{1} << 31;  // refused before any operand is read
  EXPECT_THAT(message(), testing::HasSubstr("a dimension of 2147483648 is past 2^31 - 1"));
}

}  // namespace
}  // namespace bsw
