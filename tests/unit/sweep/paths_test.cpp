// Execution paths in a sweep (--attention, --conv): what is requested of a cuda backend, how its fallback and
// the user's forced choices combine, and that every point is planned with the resolved paths. A fake cuda
// backend (the scripted one under another kind) stands in for the GPU.
#include <gtest/gtest.h>

#include <string>

#include "batchsweep/errors.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::RecordingObserver;

Graph transformer() {
  return lower(parse_model(nlohmann::json::parse(R"({"name": "t",
    "input": {"type": "tokens", "sequence_length": 32, "vocab_size": 64},
    "layers": [{"type": "embedding", "dim": 128}, {"type": "transformer_block", "heads": 2, "causal": true},
               {"type": "linear", "out_features": 64}]})"),
                           "paths-test.json"));
}

// Answers like the cuda backend on a device where cuDNN declines attention when `decline_attention`.
class FakeCudaBackend final : public Backend {
 public:
  explicit FakeCudaBackend(bool decline_attention)
      : decline_(decline_attention), inner_(make_scripted_backend(testing::roofline())) {}
  BackendKind kind() const override { return BackendKind::cuda; }
  DeviceInfo device(Precision p) const override { return inner_->device(p); }
  ExecutionPaths execution_paths(const Graph&, Precision, Mode, const ExecutionPaths& requested) override {
    requested_.push_back(requested);
    ExecutionPaths answer = requested;
    if (decline_ && answer.attention == AttentionPath::cudnn_sdpa) {
      answer.attention = AttentionPath::explicit_softmax;
      answer.note = "attention: layers[1] fell back to the explicit path: cuDNN check_support: not supported";
    }
    return answer;
  }
  std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                   const SessionOptions& options) override {
    plans_.push_back(plan);
    return inner_->prepare(graph, plan, options);
  }

  bool decline_;
  std::unique_ptr<Backend> inner_;
  std::vector<ExecutionPaths> requested_;
  std::vector<Plan> plans_;
};

SweepSettings bf16(std::vector<int64_t> batches) {
  SweepSettings s = testing::list_settings(std::move(batches));
  s.precision = Precision::bf16;
  return s;
}

TEST(ExecutionPathsInASweep, AutoRequestsCudnnAndPlansEveryPointWithWhatTheBackendAccepts) {
  const Graph g = transformer();
  FakeCudaBackend accepting(false);
  const ExecutionPaths paths = resolve_execution_paths(accepting, g, bf16({1}));
  ASSERT_EQ(accepting.requested_.size(), 1u);
  EXPECT_EQ(accepting.requested_[0].attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(paths.attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(paths.note, "");

  FakeCudaBackend declining(true);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(declining, g, bf16({2, 4}), observer);
  ASSERT_EQ(outcome.points.size(), 2u);
  ASSERT_EQ(declining.plans_.size(), 2u);
  for (const Plan& plan : declining.plans_) {
    EXPECT_EQ(plan.request.paths.attention, AttentionPath::explicit_softmax);
    EXPECT_NE(plan.find("workspace.attention"), nullptr);  // the explicit path's buffers were planned
    EXPECT_EQ(plan.find("workspace.cudnn"), nullptr);
  }
  EXPECT_EQ(outcome.points[0].memory.planned_bytes, declining.plans_[0].memory.total_bytes());
}

TEST(ExecutionPathsInASweep, ForcedPathsAreUsageErrorsWhenTheyCannotRun) {
  const Graph g = transformer();
  SweepSettings forced = bf16({1});
  forced.paths.attention = AttentionPath::cudnn_sdpa;
  FakeCudaBackend declining(true);
  try {
    static_cast<void>(resolve_execution_paths(declining, g, forced));
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--attention cudnn"), std::string::npos) << what;
    EXPECT_NE(what.find("not supported"), std::string::npos) << what;  // cuDNN's reason
  }
  // fp32 attention cannot be fused at all: said before any device is asked.
  forced.precision = Precision::fp32;
  FakeCudaBackend accepting(false);
  EXPECT_THROW(static_cast<void>(resolve_execution_paths(accepting, g, forced)), UsageError);
  EXPECT_TRUE(accepting.requested_.empty());
  // Forcing our own path asks for it.
  SweepSettings plain = bf16({1});
  plain.paths.attention = AttentionPath::explicit_softmax;
  EXPECT_EQ(resolve_execution_paths(accepting, g, plain).attention, AttentionPath::explicit_softmax);
  EXPECT_EQ(accepting.requested_.back().attention, AttentionPath::explicit_softmax);
}

TEST(ExecutionPathsInASweep, OtherBackendsHaveOnePathAndRefuseCudnn) {
  const Graph g = transformer();
  const auto scripted = make_scripted_backend(testing::roofline());
  SweepSettings s = bf16({1});
  const ExecutionPaths none = resolve_execution_paths(*scripted, g, s);
  EXPECT_EQ(none.attention, AttentionPath::explicit_softmax);
  EXPECT_EQ(none.conv, ConvPath::im2col_gemm);
  s.paths.conv = ConvPath::cudnn;
  try {
    static_cast<void>(resolve_execution_paths(*scripted, g, s));
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--conv cudnn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bsw
