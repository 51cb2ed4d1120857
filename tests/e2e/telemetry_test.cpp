// End-to-end telemetry: the real binary samples a fake NVML (tests/fake_nvml) during each point's timed
// window and reports energy per sample, the energy-optimal batch and the cost per million samples; without
// NVML it says so.
#include <gtest/gtest.h>

#include "e2e/e2e_support.hpp"

namespace bsw::e2e {
namespace {

#ifdef BSW_FAKE_NVML
TEST(Telemetry, EnergyPerSampleAndTheEnergyOptimalBatch) {
  ScratchDir dir;
  // Steps sleep 20 ms at every batch here, so energy per sample falls with the batch: 8 is energy-optimal.
  const Result r = run({"run",
                        "--backend",
                        "scripted",
                        "--script",
                        scripted("sleepy.json"),
                        "--batch",
                        "1,2,4,8",
                        "--telemetry",
                        "on",
                        "--price-per-hour",
                        "3.5",
                        "--warmup",
                        "1",
                        "--min-samples",
                        "10",
                        "--min-time",
                        "0.2",
                        "--quiet",
                        "--json",
                        (dir / "t.json").string()},
                       {std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "t.json");
  EXPECT_TRUE(report["device"]["telemetry"].contains("library")) << report["device"].dump(2);
  for (const auto& p : report["points"]) {
    ASSERT_TRUE(p.contains("telemetry")) << p.dump(2);
    const auto& t = p["telemetry"];
    EXPECT_GT(t["energy_j"].get<double>(), 0.0);
    EXPECT_GT(t["joules_per_sample"].get<double>(), 0.0);
    EXPECT_GT(t["power_w"]["mean"].get<double>(), 0.0);
    EXPECT_GT(t["cost_per_million_samples"].get<double>(), 0.0);
  }
  EXPECT_EQ(report["analysis"]["energy_optimal"]["batch"], 8) << report["analysis"].dump(2);
  // The recommended batch's cost per million samples: its point's, at 3.5 USD per hour.
  const nlohmann::json& rec = report["analysis"]["recommended"];
  for (const auto& p : report["points"]) {
    if (p["batch"] == rec["batch"]) {
      EXPECT_DOUBLE_EQ(rec.at("cost_per_million_samples").get<double>(),
                       p["telemetry"]["cost_per_million_samples"].get<double>());
      EXPECT_NEAR(rec.at("cost_per_million_samples").get<double>(),
                  3.5 / 3600.0 * 1e6 / p["samples_per_second"].get<double>(), 1e-9)
          << rec.dump();
    }
  }
}

// What DCGM or nvidia-smi would have shown, turned into trust warnings: a GPU at 30% of its clock, thermal
// and power throttling, and another process on it. Each is said on stderr and kept in the report's warnings,
// and the points carry the throttle reasons.
TEST(Telemetry, TrustWarningsFromTheReadings) {
  ScratchDir dir;
  const Result r = run(
      {"run", "--backend", "scripted", "--script", scripted("sleepy.json"), "--batch", "1,2", "--telemetry",
       "on", "--warmup", "1", "--min-samples", "5", "--min-time", "0.1", "--json", (dir / "t.json").string()},
      {std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML,
       "FAKE_NVML_SCRIPT=sm_clock_mhz=600;clock_event_reasons=36;temperature_c=91;"
       "process=4242:1073741824"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "t.json");
  std::string warnings;
  for (const auto& w : report["warnings"]) warnings += w.get<std::string>() + "\n";
  for (const char* expected :
       {"SM clock median 600 MHz is 30% of the reference 1980 MHz", "thermal throttling during the point",
        "power throttling during the point", "another process used the GPU during the point (pid 4242"}) {
    EXPECT_NE(warnings.find(expected), std::string::npos) << expected << "\n" << warnings;
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << "\n" << r.err;
  }
  for (const auto& p : report["points"]) {
    const auto& reasons = p["telemetry"]["throttle_reasons"];
    EXPECT_EQ(reasons.size(), 2u) << p["telemetry"].dump();
    EXPECT_DOUBLE_EQ(p["telemetry"]["sm_clock_mhz"]["median"].get<double>(), 600.0);
    EXPECT_DOUBLE_EQ(p["telemetry"]["mem_clock_mhz"]["median"].get<double>(),
                     2619.0);  // the fake's HBM clock
  }
}
#endif

TEST(Telemetry, UnavailableWithoutNvmlIsAWarningNotAFailure) {
  const Result r = run({"run", "--backend", "scripted", "--script", scripted("roofline.json"), "--batch", "8",
                        "--telemetry", "on", "--min-time", "0.01", "--quiet", "--json", "-"},
                       {"BATCHSWEEP_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_NE(report["device"]["telemetry"]["unavailable"].get<std::string>().find("NVML not found"),
            std::string::npos);
  EXPECT_FALSE(report["points"][0].contains("telemetry") && !report["points"][0]["telemetry"].is_null());
}

}  // namespace
}  // namespace bsw::e2e
