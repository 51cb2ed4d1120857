// Window arithmetic without NVML: medians, power integration, counter vs fallback energy, reason names, trust
// warnings and the report's PointTelemetry, all with exact numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "batchsweep/telemetry.hpp"
#include "telemetry/summary.hpp"

namespace bsw::telemetry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TelemetrySample sample(double t_s, double power_w, double sm_clock_mhz) {
  TelemetrySample s;
  s.t_s = t_s;
  s.power_w = power_w;
  s.sm_clock_mhz = sm_clock_mhz;
  s.utilization_pct = 90;
  s.memory_utilization_pct = 30;
  s.temperature_c = 60;
  s.clock_event_reasons = 0;
  return s;
}

TEST(TelemetryMedian, OddEvenAndEmpty) {
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({7}), 7.0);
  EXPECT_FALSE(median({}).has_value());
}

TEST(TelemetryIntegrate, TrapezoidsWithEdgesHeld) {
  // 100 W held from t=0 to the first reading at 0.1 s, ramp to 300 W at 0.3 s, 300 W held to the end at 0.5
  // s.
  const std::vector<TelemetrySample> samples{sample(0.1, 100, 0), sample(0.3, 300, 0)};
  const auto joules = integrate_power_j(samples, 0.5);
  ASSERT_TRUE(joules.has_value());
  EXPECT_DOUBLE_EQ(*joules, 100 * 0.1 + 0.5 * (100 + 300) * 0.2 + 300 * 0.2);
}

TEST(TelemetryIntegrate, SkipsSamplesWithoutPowerAndNeedsOne) {
  TelemetrySample no_power;
  no_power.t_s = 0.2;
  EXPECT_FALSE(integrate_power_j({no_power}, 1.0).has_value());
  const auto joules = integrate_power_j({no_power, sample(0.5, 200, 0)}, 1.0);
  ASSERT_TRUE(joules.has_value());
  EXPECT_DOUBLE_EQ(*joules, 200.0);  // one reading held over the whole window
}

TEST(TelemetrySummarize, CounterEnergyAndStatistics) {
  WindowInputs in;
  in.duration_s = 2.0;
  in.samples = {sample(0, 200, 1800), sample(1, 300, 1500), sample(2, 250, 1700)};
  in.samples[1].temperature_c = 71;
  in.samples[1].clock_event_reasons = 0x4;
  in.samples[2].clock_event_reasons = 0x1;
  in.energy_start_mj = 1'000'000;
  in.energy_end_mj = 1'500'000;
  in.reference_sm_clock_mhz = 1980;
  const TelemetryWindow w = summarize_window(in);
  EXPECT_TRUE(w.available);
  EXPECT_EQ(w.energy_source, EnergySource::counter);
  EXPECT_DOUBLE_EQ(*w.energy_j, 500.0);
  EXPECT_THAT(w.energy_note, IsEmpty());
  EXPECT_DOUBLE_EQ(*w.power_w_mean, 250.0);
  EXPECT_DOUBLE_EQ(*w.power_w_max, 300.0);
  EXPECT_DOUBLE_EQ(*w.sm_clock_mhz_min, 1500.0);
  EXPECT_DOUBLE_EQ(*w.sm_clock_mhz_median, 1700.0);
  EXPECT_DOUBLE_EQ(*w.utilization_pct_mean, 90.0);
  EXPECT_DOUBLE_EQ(*w.memory_utilization_pct_mean, 30.0);
  EXPECT_DOUBLE_EQ(*w.temperature_c_max, 71.0);
  EXPECT_EQ(w.clock_event_reasons, 0x5u);
  EXPECT_THAT(w.clock_event_reason_names, ElementsAre("gpu_idle", "sw_power_cap"));
  EXPECT_EQ(w.samples.size(), 3u);
}

// With the energy counter, the mean power is its joules over the window, not the readings' mean: on Ampere
// and newer a reading is the last second's average, and a short point's readings mix in the one before it.
TEST(TelemetrySummarize, MeanPowerComesFromTheCounterWhereThereIsOne) {
  WindowInputs in;
  in.duration_s = 0.5;
  in.samples = {sample(0, 100, 1800), sample(0.25, 120, 1800),
                sample(0.5, 140, 1800)};  // still averaging in idle
  in.energy_start_mj = 2'000'000;
  in.energy_end_mj = 2'175'000;  // 175 J in 0.5 s
  const TelemetryWindow w = summarize_window(in);
  EXPECT_DOUBLE_EQ(*w.power_w_mean, 350.0);
  EXPECT_DOUBLE_EQ(*w.power_w_max, 350.0);  // the readings lag: the max is at least the mean
  in.energy_end_mj.reset();                 // no counter: the readings' mean
  EXPECT_DOUBLE_EQ(*summarize_window(in).power_w_mean, 120.0);
}

TEST(TelemetrySummarize, FallsBackToIntegrationAndSaysWhy) {
  WindowInputs in;
  in.duration_s = 1.0;
  in.samples = {sample(0, 200, 1800), sample(1, 200, 1800)};
  in.energy_counter_problem = "total energy counter: Not Supported (nvmlDeviceGetTotalEnergyConsumption)";
  const TelemetryWindow w = summarize_window(in);
  EXPECT_EQ(w.energy_source, EnergySource::integrated_power);
  EXPECT_DOUBLE_EQ(*w.energy_j, 200.0);
  EXPECT_THAT(w.energy_note, HasSubstr("integrated from 2 power readings"));
  EXPECT_THAT(w.energy_note, HasSubstr("Not Supported"));
}

TEST(TelemetrySummarize, CounterGoingBackwardsIsNotTrusted) {
  WindowInputs in;
  in.duration_s = 1.0;
  in.samples = {sample(0.5, 100, 1800)};
  in.energy_start_mj = 5000;
  in.energy_end_mj = 10;
  const TelemetryWindow w = summarize_window(in);
  EXPECT_EQ(w.energy_source, EnergySource::integrated_power);
  EXPECT_DOUBLE_EQ(*w.energy_j, 100.0);
  EXPECT_THAT(w.energy_note, HasSubstr("went backwards"));
}

TEST(TelemetrySummarize, NoReadingsAtAll) {
  WindowInputs in;
  in.duration_s = 1.0;
  in.samples = {TelemetrySample{}};
  const TelemetryWindow w = summarize_window(in);
  EXPECT_TRUE(w.available);
  EXPECT_EQ(w.energy_source, EnergySource::none);
  EXPECT_FALSE(w.energy_j.has_value());
  EXPECT_FALSE(w.power_w_mean.has_value());
  EXPECT_FALSE(w.sm_clock_mhz_median.has_value());
  EXPECT_THAT(w.energy_note, HasSubstr("no power readings"));
  EXPECT_THAT(trust_warnings(w), IsEmpty());
}

TEST(TelemetryReasons, NamesEveryDocumentedBitAndUnknownOnes) {
  EXPECT_THAT(clock_event_reason_names(0x1FF),
              ElementsAre("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                          "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                          "hw_power_brake_slowdown", "display_clock_setting"));
  EXPECT_THAT(clock_event_reason_names(0x400), ElementsAre("unknown_0x400"));
  EXPECT_THAT(clock_event_reason_names(0), IsEmpty());
}

TelemetryWindow healthy_window() {
  WindowInputs in;
  in.duration_s = 1.0;
  in.samples = {sample(0, 250, 1950), sample(1, 260, 1960)};
  in.energy_start_mj = 0;
  in.energy_end_mj = 255'000;
  in.reference_sm_clock_mhz = 1980;
  return summarize_window(in);
}

TEST(TelemetryWarnings, HealthyWindowHasNone) {
  EXPECT_THAT(trust_warnings(healthy_window()), IsEmpty());
}

TEST(TelemetryWarnings, BenignReasonsDoNotWarn) {
  TelemetryWindow w = healthy_window();
  w.clock_event_reasons = 0x1 | 0x2 | 0x10 | 0x100;
  EXPECT_THAT(trust_warnings(w), IsEmpty());
}

TEST(TelemetryWarnings, LowClockAgainstReference) {
  TelemetryWindow w = healthy_window();
  w.sm_clock_mhz_median = 1400;  // 70.7% of 1980
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("SM clock median 1400 MHz is 71% of the reference 1980 MHz"));
  w.sm_clock_mhz_median = 1500;  // 75.8%: fine
  EXPECT_THAT(trust_warnings(w), IsEmpty());
  w.sm_clock_mhz_median = 100;
  w.reference_sm_clock_mhz.reset();  // nothing to compare with
  EXPECT_THAT(trust_warnings(w), IsEmpty());
}

TEST(TelemetryWarnings, LowClockWhileIdlePointsAtAnIdleGpuNotThrottling) {
  TelemetryWindow w = healthy_window();
  w.sm_clock_mhz_median = 600;
  w.clock_event_reasons = 0x1;
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("idle part of the window (gpu_idle)"));
  w.clock_event_reasons = 0;
  EXPECT_THAT(trust_warnings(w), ElementsAre(HasSubstr("the GPU ran slowed")));
}

TEST(TelemetryWarnings, ThermalAndPowerThrottling) {
  TelemetryWindow w = healthy_window();
  w.clock_event_reasons = 0x4 | 0x40 | 0x1;
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("thermal throttling during the point (hw_thermal_slowdown, max 60 C)"));
  EXPECT_THAT(warnings[1], HasSubstr("power throttling during the point (sw_power_cap, max 260 W)"));
}

TEST(TelemetryWarnings, OtherProcesses) {
  TelemetryWindow w = healthy_window();
  w.other_processes = {{4242, uint64_t{512} << 20}, {77, std::nullopt}};
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0],
              HasSubstr("another process used the GPU during the point (pid 4242 using 512 MiB, pid 77)"));
}

TEST(TelemetryWarnings, UnavailableWindowHasNone) {
  TelemetryWindow w;
  w.clock_event_reasons = 0x40;
  EXPECT_THAT(trust_warnings(w), IsEmpty());
}

TEST(TelemetryPoint, FillsReportFieldsAndJoulesPerSample) {
  TelemetryWindow w = healthy_window();
  w.clock_event_reason_names = {"sw_power_cap"};
  const auto point = to_point_telemetry(w, 1000);
  ASSERT_TRUE(point.has_value());
  EXPECT_DOUBLE_EQ(*point->energy_j, 255.0);
  EXPECT_DOUBLE_EQ(*point->joules_per_sample, 0.255);
  EXPECT_DOUBLE_EQ(*point->power_w_mean, 255.0);
  EXPECT_DOUBLE_EQ(*point->power_w_max, 260.0);
  EXPECT_DOUBLE_EQ(*point->sm_clock_mhz_min, 1950.0);
  EXPECT_DOUBLE_EQ(*point->sm_clock_mhz_median, 1955.0);
  EXPECT_DOUBLE_EQ(*point->utilization_pct, 90.0);
  EXPECT_DOUBLE_EQ(*point->memory_utilization_pct, 30.0);
  EXPECT_DOUBLE_EQ(*point->temperature_c, 60.0);
  EXPECT_THAT(point->throttle_reasons, ElementsAre("sw_power_cap"));
  EXPECT_FALSE(point->cost_per_million_samples.has_value());
  EXPECT_FALSE(to_point_telemetry(w, 0)->joules_per_sample.has_value());
  EXPECT_FALSE(to_point_telemetry(TelemetryWindow{}, 1000).has_value());
}

TEST(TelemetryEnergySource, Names) {
  EXPECT_EQ(to_string(EnergySource::counter), "energy counter");
  EXPECT_EQ(to_string(EnergySource::integrated_power), "integrated power");
  EXPECT_EQ(to_string(EnergySource::none), "none");
}

}  // namespace
}  // namespace bsw::telemetry
