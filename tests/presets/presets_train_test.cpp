// Every embedded preset trains on the CPU backend at batch 1 through the real binary: one timed step, a
// finite loss near ln(classes) (random weights predict uniformly), and the memory it took equal to the plan.
// The big presets take seconds to half a minute each on 2 cores; label `presets` (not run under the
// sanitizers, whose suite covers the same code on the small models).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "e2e/e2e_support.hpp"

namespace bsw::e2e {
namespace {

struct Preset {
  const char* name;
  double classes;  // of the cross-entropy head
};

class PresetTrains : public testing::TestWithParam<Preset> {};

// One timed step (the noise target needs two: --timeout ends the point after the first), so the loss is
// the untrained model's.
TEST_P(PresetTrains, OneStepAtBatchOneOnTheCpu) {
  const Preset p = GetParam();
  const Result r =
      run({"run", "--backend", "cpu",   "--model",       p.name,   "--mode",     "train", "--batch",
           "1",   "--warmup",  "0",     "--min-samples", "1",      "--min-time", "0",     "--max-noise",
           "100", "--timeout", "0.001", "--quiet",       "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  ASSERT_EQ(report["points"].size(), 1u);
  const nlohmann::json& point = report["points"][0];
  ASSERT_EQ(point["status"], "ok") << point.dump();
  const double loss = point["loss"].get<double>();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, std::log(p.classes), 1.0) << p.name;
  EXPECT_EQ(point["memory"]["measured_bytes"], point["memory"]["planned_bytes"]);
  EXPECT_GT(point["samples_per_second"].get<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetTrains,
                         testing::Values(Preset{"mlp", 10}, Preset{"mlp-large", 1000},
                                         Preset{"resnet-small", 10}, Preset{"resnet-50", 1000},
                                         Preset{"tiny-lm", 1000}, Preset{"bert-base", 30522},
                                         Preset{"gpt2-small", 50257}, Preset{"vit-base", 1000}),
                         [](const testing::TestParamInfo<Preset>& param_info) {
                           std::string name = param_info.param.name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace bsw::e2e
