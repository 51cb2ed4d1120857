// Execution paths in a sweep (--attention, --conv): what is requested of a cuda backend, how its fallback and
// the user's forced choices combine, and that every point is planned with the resolved paths. A fake cuda
// backend (the scripted one under another kind) stands in for the GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
    if (plan.request.paths.attention == AttentionPath::cudnn_sdpa && plan.request.batch > reject_above_)
      throw PathRejected(
          RejectedPath::attention,
          fmt::format("layers[1].attention at batch {}: cuDNN check_support: no engine fits the "
                      "workspace",
                      plan.request.batch));
    return inner_->prepare(graph, plan, options);
  }

  bool decline_;
  int64_t reject_above_ = INT64_MAX;  // prepare rejects the cuDNN attention above this batch
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

size_t count_containing(const std::vector<std::string>& lines, std::string_view part) {
  return static_cast<size_t>(std::count_if(lines.begin(), lines.end(),
                                           [&](const std::string& l) { return l.find(part) != l.npos; }));
}

// cuDNN took batch 1 but rejects a larger one: that point is planned and run on our own path, the rest stay
// on cuDNN, and one warning says so.
TEST(ExecutionPathsInASweep, APointCudnnRejectsRunsOnOurOwnPath) {
  const Graph g = transformer();
  FakeCudaBackend backend(false);
  backend.reject_above_ = 2;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, g, bf16({2, 4, 8}), observer);
  ASSERT_EQ(outcome.points.size(), 3u);
  for (const Point& p : outcome.points) EXPECT_EQ(p.status, PointStatus::ok) << p.batch << ": " << p.reason;
  // 2 on cuDNN; 4 and 8 each asked of cuDNN, then planned again on the explicit path.
  ASSERT_EQ(backend.plans_.size(), 5u);
  EXPECT_EQ(backend.plans_[0].request.paths.attention, AttentionPath::cudnn_sdpa);
  for (const size_t i : {1u, 3u})
    EXPECT_EQ(backend.plans_[i].request.paths.attention, AttentionPath::cudnn_sdpa);
  for (const size_t i : {2u, 4u}) {
    const Plan& fallback = backend.plans_[i];
    EXPECT_EQ(fallback.request.paths.attention, AttentionPath::explicit_softmax);
    EXPECT_NE(fallback.find("workspace.attention"), nullptr);
    EXPECT_EQ(fallback.find("workspace.cudnn"), nullptr);
    EXPECT_NE(fallback.request.paths.note.find("cuDNN rejected layers[1].attention at batch"),
              std::string::npos)
        << fallback.request.paths.note;
    EXPECT_NE(fallback.request.paths.note.find("no engine fits the workspace"), std::string::npos);
  }
  // Each point's planned bytes are those of the plan it ran with.
  EXPECT_EQ(outcome.points[0].memory.planned_bytes, backend.plans_[0].memory.total_bytes());
  EXPECT_EQ(outcome.points[1].memory.planned_bytes, backend.plans_[2].memory.total_bytes());
  EXPECT_EQ(outcome.points[2].memory.planned_bytes, backend.plans_[4].memory.total_bytes());
  EXPECT_NE(backend.plans_[1].memory.total_bytes(), backend.plans_[2].memory.total_bytes());
  EXPECT_EQ(count_containing(outcome.warnings, "rejected"), 1u);
  EXPECT_EQ(count_containing(outcome.warnings, "accepted the model's attention at batch 1"), 1u);
}

// --attention cudnn: no fallback; the rejected point is an error with cuDNN's reason and the sweep goes on.
TEST(ExecutionPathsInASweep, AForcedPathCudnnRejectsIsAnErrorPoint) {
  const Graph g = transformer();
  FakeCudaBackend backend(false);
  backend.reject_above_ = 2;
  SweepSettings forced = bf16({2, 4});
  forced.paths.attention = AttentionPath::cudnn_sdpa;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, g, forced, observer);
  ASSERT_EQ(outcome.points.size(), 2u);
  EXPECT_EQ(outcome.points[0].status, PointStatus::ok);
  EXPECT_EQ(outcome.points[1].status, PointStatus::error);
  EXPECT_NE(outcome.points[1].reason.find("layers[1].attention at batch 4"), std::string::npos)
      << outcome.points[1].reason;
  ASSERT_EQ(backend.plans_.size(), 2u);  // never planned on the explicit path
  for (const Plan& plan : backend.plans_) EXPECT_EQ(plan.request.paths.attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(count_containing(outcome.warnings, "rejected"), 0u);
}

// Past 65,535 sequences cuDNN's fused attention cannot run (its execute fails): that batch is planned, and
// run, on our explicit attention, said in its paths note; forced, it is an error point.
TEST(ExecutionPathsInASweep, PastCudnnsSequencesAPointRunsOurOwnAttention) {
  const Graph g = transformer();
  FakeCudaBackend backend(false);
  RecordingObserver observer;
  SweepSettings s = bf16({kCudnnSdpaMostSequences, kCudnnSdpaMostSequences + 1});
  s.paths = {};
  const SweepOutcome outcome = run_sweep(backend, g, s, observer);
  ASSERT_EQ(backend.plans_.size(), 2u);
  EXPECT_EQ(backend.plans_[0].request.paths.attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(backend.plans_[0].request.paths.note, "");
  EXPECT_EQ(backend.plans_[1].request.paths.attention, AttentionPath::explicit_softmax);
  EXPECT_EQ(
      backend.plans_[1].request.paths.note,
      "attention: cuDNN's fused attention runs at most 65535 sequences at once, so batch 65536 runs our "
      "explicit path");
  // Sized as our attention, which keeps the probabilities (more than cuDNN's would need), wherever it is
  // asked.
  const auto planned = [&](int64_t batch, AttentionPath attention) {
    return make_plan(g, PlanRequest{batch, Precision::bf16, Mode::train, 1, BackendKind::cuda,
                                    ExecutionPaths{attention, ConvPath::im2col_gemm, ""}})
        .memory.total_bytes();
  };
  const int64_t past = kCudnnSdpaMostSequences + 1;
  EXPECT_EQ(backend.plans_[1].memory.total_bytes(), planned(past, AttentionPath::explicit_softmax));
  EXPECT_EQ(planned(past, AttentionPath::cudnn_sdpa), planned(past, AttentionPath::explicit_softmax));
  EXPECT_LT(planned(past - 1, AttentionPath::cudnn_sdpa), planned(past - 1, AttentionPath::explicit_softmax));

  FakeCudaBackend forced_backend(false);
  SweepSettings forced = s;
  forced.paths.attention = AttentionPath::cudnn_sdpa;
  RecordingObserver forced_observer;
  const SweepOutcome refused = run_sweep(forced_backend, g, forced, forced_observer);
  ASSERT_EQ(refused.points.size(), 2u);
  EXPECT_EQ(refused.points[0].status, PointStatus::ok);
  EXPECT_EQ(refused.points[1].status, PointStatus::error);
  EXPECT_EQ(
      refused.points[1].reason,
      "--attention cudnn: cuDNN's fused attention runs at most 65535 sequences at once, and batch 65536 is "
      "more (--attention auto runs our own attention there)");
  EXPECT_EQ(forced_backend.plans_.size(), 1u);  // never prepared
  // Under a budget our attention's plan would not fit, forced it is still that error, not over_limit: memory
  // is not why it cannot run.
  FakeCudaBackend tight_backend(false);
  SweepSettings tight = forced;
  tight.memory_limit_bytes = uint64_t{1} << 30;
  RecordingObserver tight_observer;
  const SweepOutcome limited = run_sweep(tight_backend, g, tight, tight_observer);
  ASSERT_EQ(limited.points.size(), 2u);
  EXPECT_EQ(limited.points[0].status, PointStatus::over_limit);  // the budget binds: cuDNN's plan is over it
  EXPECT_EQ(limited.points[1].status, PointStatus::error) << limited.points[1].reason;
  EXPECT_EQ(limited.points[1].reason, refused.points[1].reason);
}

// Our own path keeps the [B, heads, T, T] probabilities: where its plan is over the budget the point is
// over_limit, saying both why cuDNN was not used and what did not fit; it is never prepared.
TEST(ExecutionPathsInASweep, AFallbackOverTheBudgetIsOverLimit) {
  const Graph g = lower(parse_model(nlohmann::json::parse(R"({"name": "long",
    "input": {"type": "tokens", "sequence_length": 512, "vocab_size": 64},
    "layers": [{"type": "embedding", "dim": 128}, {"type": "transformer_block", "heads": 2},
               {"type": "linear", "out_features": 64}]})"),
                                    "paths-long.json"));
  const auto bytes = [&](int64_t batch, AttentionPath attention) {
    ExecutionPaths paths;
    paths.attention = attention;
    return make_plan(g, PlanRequest{batch, Precision::bf16, Mode::train, 1, BackendKind::cuda, paths})
        .memory.total_bytes();
  };
  const uint64_t on_cudnn = bytes(64, AttentionPath::cudnn_sdpa);
  const uint64_t explicit_path = bytes(64, AttentionPath::explicit_softmax);
  ASSERT_LT(on_cudnn, explicit_path);
  FakeCudaBackend backend(false);
  backend.reject_above_ = 8;
  SweepSettings s = bf16({8, 64});
  s.memory_limit_bytes =
      static_cast<uint64_t>(static_cast<double>(on_cudnn + explicit_path) / 2.0 / kMemorySafetyFraction);
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(backend, g, s, observer);
  ASSERT_EQ(outcome.points.size(), 2u);
  EXPECT_EQ(outcome.points[0].status, PointStatus::ok);
  const Point& over = outcome.points[1];
  EXPECT_EQ(over.status, PointStatus::over_limit);
  EXPECT_NE(over.reason.find("cuDNN rejected layers[1].attention at batch 64"), std::string::npos)
      << over.reason;
  EXPECT_NE(over.reason.find("on our own path: planned"), std::string::npos) << over.reason;
  EXPECT_EQ(over.memory.planned_bytes, explicit_path);
  ASSERT_EQ(backend.plans_.size(), 2u);  // batch 8, and batch 64 on cuDNN; the fallback was never prepared
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
