// A CUDA graph that cannot be instantiated (out of memory at high memory use): the point runs on plain
// launches, and says so in its details and as a warning, since its steps then pay launch overhead that
// the graph replays of other points do not.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "batchsweep/plan.hpp"
#include "gpu_test_models.hpp"
#include "runtime.hpp"

namespace bsw {
namespace {

TEST(EmuGraphCapture, AFailedInstantiationIsSaidAndTheStepsStillRun) {
  const Graph g = gputest::graph_of(gputest::kImage);
  const Plan plan = make_plan(g, {2, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  auto session = cuda::make_cuda_backend(0)->prepare(g, plan, SessionOptions{});
  emu::fail_next_graph_instantiate();
  for (int i = 0; i < 3; ++i) {
    const StepResult r = session->step();
    EXPECT_TRUE(r.finite);
  }
  const nlohmann::json d = session->details();
  EXPECT_EQ(
      d.at("cuda_graphs").get<std::string>().rfind("capture failed, plain launches: cudaGraphInstantiate", 0),
      0u)
      << d.dump();
  ASSERT_TRUE(d.contains("warnings")) << d.dump();
  bool said = false;
  for (const auto& w : d.at("warnings"))
    said |= w.get<std::string>().rfind(
                "CUDA graph capture failed, so those points' steps are timed as plain "
                "launches",
                0) == 0;
  EXPECT_TRUE(said) << d.dump();
}

}  // namespace
}  // namespace bsw
