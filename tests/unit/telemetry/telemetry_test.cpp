// Telemetry against the fake NVML: loading and its failures, device matching by bus id, window summaries from
// the energy counter and from integrated power, clock-event reasons, the three trust warnings, old-driver
// fallbacks, and the sampler's start/stop behaviour (repeatable, prompt, balanced nvmlInit/nvmlShutdown).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "batchsweep/errors.hpp"
#include "batchsweep/telemetry.hpp"
#include "unit/telemetry/fake_nvml_control.hpp"

namespace bsw {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using SteadyClock = std::chrono::steady_clock;

constexpr int kNotSupported = 3;

double elapsed_ms(SteadyClock::time_point since) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - since).count();
}

// A window of about `ms` milliseconds.
TelemetryWindow measure(Telemetry& telemetry, int ms) {
  telemetry.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return telemetry.stop();
}

class TelemetryFake : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.loaded());
    fake_.reset();
    unsetenv(kNvmlLibraryEnv);
  }
  void TearDown() override { unsetenv(kNvmlLibraryEnv); }

  // The first fake device, at bus 0x1B, sampled every 5 ms.
  static TelemetryOptions options() {
    TelemetryOptions o;
    o.library_path = BSW_FAKE_NVML;
    o.device = "00000000:1B:00.0";
    o.sample_interval_ms = 5;
    return o;
  }

  testing::FakeNvml fake_{BSW_FAKE_NVML};
};

TEST(TelemetryUnavailable, MissingLibrary) {
  TelemetryOptions o;
  o.library_path = "/nonexistent/dir/libnvidia-ml.so.1";
  Telemetry telemetry = Telemetry::open(o);
  EXPECT_FALSE(telemetry.available());
  EXPECT_EQ(telemetry.unavailable_reason(),
            "NVML not found (/nonexistent/dir/libnvidia-ml.so.1): telemetry unavailable");
  telemetry.start();
  EXPECT_TRUE(telemetry.running());
  const TelemetryWindow window = telemetry.stop();
  EXPECT_FALSE(window.available);
  EXPECT_THAT(window.samples, IsEmpty());
  EXPECT_FALSE(to_point_telemetry(window, 100).has_value());
  EXPECT_THAT(trust_warnings(window), IsEmpty());
}

TEST(TelemetryUnavailable, EnvironmentVariableNamesTheLibrary) {
  setenv(kNvmlLibraryEnv, "/nonexistent/libfake.so", 1);
  const Telemetry telemetry = Telemetry::open();
  unsetenv(kNvmlLibraryEnv);
  EXPECT_FALSE(telemetry.available());
  EXPECT_EQ(telemetry.library_path(), "/nonexistent/libfake.so");
  EXPECT_THAT(telemetry.unavailable_reason(), HasSubstr("NVML not found (/nonexistent/libfake.so)"));
}

TEST(TelemetryUnavailable, FileThatIsNotALibrary) {
  TelemetryOptions o;
  o.library_path = BSW_SOURCE_DIR "/CMakeLists.txt";
  const Telemetry telemetry = Telemetry::open(o);
  EXPECT_FALSE(telemetry.available());
  EXPECT_THAT(telemetry.unavailable_reason(), HasSubstr("NVML could not be loaded (" BSW_SOURCE_DIR));
  EXPECT_THAT(telemetry.unavailable_reason(), HasSubstr("telemetry unavailable"));
}

TEST(TelemetryUnavailable, LibraryThatIsNotNvml) {
  TelemetryOptions o;
  o.library_path = "libm.so.6";
  const Telemetry telemetry = Telemetry::open(o);
  EXPECT_FALSE(telemetry.available());
  EXPECT_THAT(telemetry.unavailable_reason(), HasSubstr("does not export nvmlInit_v2"));
}

TEST(TelemetryUnavailable, IntervalBelowOneMillisecondIsAUsageError) {
  TelemetryOptions o;
  o.sample_interval_ms = 0;
  EXPECT_THROW((void)Telemetry::open(o), UsageError);
}

TEST_F(TelemetryFake, InitFailureIsUnavailableNotACrash) {
  fake_.fail("nvmlInit_v2", 9);
  const Telemetry telemetry = Telemetry::open(options());
  EXPECT_FALSE(telemetry.available());
  EXPECT_THAT(telemetry.unavailable_reason(), HasSubstr("nvmlInit_v2 failed"));
  EXPECT_EQ(fake_.get("calls.nvmlShutdown"), 0);  // never initialised, never shut down
}

TEST_F(TelemetryFake, EnvironmentVariableAndExplicitPath) {
  setenv(kNvmlLibraryEnv, BSW_FAKE_NVML, 1);
  {
    const Telemetry telemetry = Telemetry::open();  // device "0"
    EXPECT_TRUE(telemetry.available()) << telemetry.unavailable_reason();
    EXPECT_EQ(telemetry.library_path(), BSW_FAKE_NVML);
    EXPECT_EQ(telemetry.device().name, "Fake GPU 0");
  }
  setenv(kNvmlLibraryEnv, "/nonexistent/libnvidia-ml.so.1", 1);
  const Telemetry explicit_path = Telemetry::open(options());  // the explicit path wins
  EXPECT_TRUE(explicit_path.available()) << explicit_path.unavailable_reason();
}

TEST_F(TelemetryFake, MatchesTheDeviceByBusIdInEverySpelling) {
  for (const char* bus_id : {"00000000:3B:00.0", "0000:3b:00.0", "3b:00.0", "1"}) {
    TelemetryOptions o = options();
    o.device = bus_id;
    const Telemetry telemetry = Telemetry::open(o);
    ASSERT_TRUE(telemetry.available()) << bus_id << ": " << telemetry.unavailable_reason();
    EXPECT_EQ(telemetry.device().name, "Fake GPU 1") << bus_id;
    EXPECT_EQ(telemetry.device().pci_bus_id, "00000000:3B:00.0") << bus_id;
  }
  const Telemetry first = Telemetry::open(options());
  EXPECT_EQ(first.device().name, "Fake GPU 0");
  EXPECT_EQ(first.device().reference_sm_clock_mhz, 1980.0);
  EXPECT_EQ(first.device().reference_sm_clock_source, "default applications clock");
  EXPECT_THAT(first.unsupported_readings(), IsEmpty());
}

TEST_F(TelemetryFake, UnknownDeviceIsUnavailableWithTheReason) {
  TelemetryOptions o = options();
  o.device = "0000:99:00.0";
  Telemetry by_bus = Telemetry::open(o);
  EXPECT_FALSE(by_bus.available());
  EXPECT_THAT(by_bus.unavailable_reason(),
              HasSubstr("NVML has no device with PCI bus id 00000000:99:00.0 (2 device(s) visible)"));
  o.device = "5";
  EXPECT_THAT(Telemetry::open(o).unavailable_reason(),
              HasSubstr("no device with index 5 (2 device(s) visible)"));
  o.device = "GPU-8c1d";
  EXPECT_THAT(Telemetry::open(o).unavailable_reason(), HasSubstr("'GPU-8c1d' is neither a PCI bus id"));
  EXPECT_EQ(fake_.get("init_refcount"), 0);  // the unavailable objects shut NVML down again
}

TEST_F(TelemetryFake, WindowEnergyFromTheCounterMatchesPowerTimesDuration) {
  fake_.set("power_w", 250);
  Telemetry telemetry = Telemetry::open(options());
  ASSERT_TRUE(telemetry.available()) << telemetry.unavailable_reason();
  const TelemetryWindow w = measure(telemetry, 200);
  ASSERT_TRUE(w.available);
  EXPECT_EQ(w.energy_source, EnergySource::counter);
  EXPECT_THAT(w.energy_note, IsEmpty());
  EXPECT_GE(w.duration_s, 0.19);
  ASSERT_TRUE(w.energy_j.has_value());
  // Exact up to the time between each counter read and its timestamp: 3%, plus 10 ms at 250 W for a thread
  // descheduled between the two on a loaded CI machine (sanitizers, both cores busy).
  EXPECT_NEAR(*w.energy_j, 250.0 * w.duration_s, 0.03 * 250.0 * w.duration_s + 2.5);
  EXPECT_DOUBLE_EQ(*w.power_w_mean, *w.energy_j / w.duration_s);  // the counter's, exactly
  // The readings' max (250 W), or the counter's mean where the timing puts that a little above it.
  EXPECT_DOUBLE_EQ(*w.power_w_max, std::max(250.0, *w.power_w_mean));
  EXPECT_DOUBLE_EQ(*w.sm_clock_mhz_median, 1980.0);
  EXPECT_DOUBLE_EQ(*w.sm_clock_mhz_min, 1980.0);
  EXPECT_DOUBLE_EQ(*w.utilization_pct_mean, 97.0);
  EXPECT_DOUBLE_EQ(*w.memory_utilization_pct_mean, 40.0);
  EXPECT_DOUBLE_EQ(*w.temperature_c_max, 65.0);
  EXPECT_GE(w.samples.size(), 10u);  // about 40 at 5 ms
  for (size_t i = 1; i < w.samples.size(); ++i) EXPECT_GE(w.samples[i].t_s, w.samples[i - 1].t_s);
  EXPECT_LE(w.samples.back().t_s, w.duration_s);
  EXPECT_THAT(trust_warnings(w), IsEmpty());

  const auto point = to_point_telemetry(w, 4000);
  ASSERT_TRUE(point.has_value());
  EXPECT_DOUBLE_EQ(*point->joules_per_sample, *w.energy_j / 4000.0);
  EXPECT_DOUBLE_EQ(*point->energy_j, *w.energy_j);
  EXPECT_THAT(point->throttle_reasons, IsEmpty());
}

TEST_F(TelemetryFake, CounterFollowsAPowerChangeWithinTheWindow) {
  fake_.set("power_w", 100);
  Telemetry telemetry = Telemetry::open(options());
  telemetry.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fake_.set("power_w", 300);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const TelemetryWindow w = telemetry.stop();
  ASSERT_EQ(w.energy_source, EnergySource::counter);
  EXPECT_GT(*w.energy_j, 100.0 * w.duration_s);
  EXPECT_LT(*w.energy_j, 300.0 * w.duration_s);
  EXPECT_DOUBLE_EQ(*w.power_w_max, 300.0);
}

TEST_F(TelemetryFake, IntegratesPowerWhenTheCounterIsNotSupported) {
  fake_.set("power_w", 200);
  fake_.fail("nvmlDeviceGetTotalEnergyConsumption", kNotSupported);
  Telemetry telemetry = Telemetry::open(options());
  ASSERT_TRUE(telemetry.available());
  EXPECT_THAT(telemetry.unsupported_readings(),
              ElementsAre("total energy counter: Not Supported (nvmlDeviceGetTotalEnergyConsumption)"));
  const double probe_calls = fake_.get("calls.nvmlDeviceGetTotalEnergyConsumption");
  const TelemetryWindow w = measure(telemetry, 100);
  EXPECT_EQ(w.energy_source, EnergySource::integrated_power);
  EXPECT_THAT(w.energy_note, HasSubstr("energy integrated from"));
  EXPECT_THAT(w.energy_note, HasSubstr("Not Supported (nvmlDeviceGetTotalEnergyConsumption)"));
  ASSERT_TRUE(w.energy_j.has_value());
  EXPECT_NEAR(*w.energy_j, 200.0 * w.duration_s, 1e-6);  // constant power: integration is exact
  EXPECT_EQ(fake_.get("calls.nvmlDeviceGetTotalEnergyConsumption"), probe_calls);  // not asked again
}

TEST_F(TelemetryFake, IntegratesPowerWhenTheCounterFailsDuringAWindow) {
  fake_.set("power_w", 150);
  Telemetry telemetry = Telemetry::open(options());
  ASSERT_EQ(measure(telemetry, 20).energy_source, EnergySource::counter);
  fake_.fail("nvmlDeviceGetTotalEnergyConsumption", 999);
  const TelemetryWindow w = measure(telemetry, 50);
  EXPECT_EQ(w.energy_source, EnergySource::integrated_power);
  EXPECT_THAT(w.energy_note, HasSubstr("total energy counter: Unknown Error"));
  EXPECT_NEAR(*w.energy_j, 150.0 * w.duration_s, 1e-6);
  fake_.fail("nvmlDeviceGetTotalEnergyConsumption", 0);
  EXPECT_EQ(measure(telemetry, 20).energy_source, EnergySource::counter);
}

TEST_F(TelemetryFake, MissingReadingsAreAbsentNotFatal) {
  fake_.fail("nvmlDeviceGetPowerUsage", kNotSupported);
  fake_.fail("nvmlDeviceGetTotalEnergyConsumption", kNotSupported);
  fake_.fail("nvmlDeviceGetTemperature", kNotSupported);
  Telemetry telemetry = Telemetry::open(options());
  ASSERT_TRUE(telemetry.available());
  EXPECT_EQ(telemetry.unsupported_readings().size(), 3u);
  const TelemetryWindow w = measure(telemetry, 30);
  EXPECT_FALSE(w.power_w_mean.has_value());
  EXPECT_FALSE(w.temperature_c_max.has_value());
  EXPECT_FALSE(w.energy_j.has_value());
  EXPECT_EQ(w.energy_source, EnergySource::none);
  EXPECT_DOUBLE_EQ(*w.sm_clock_mhz_median, 1980.0);
  const auto point = to_point_telemetry(w, 10);
  ASSERT_TRUE(point.has_value());
  EXPECT_FALSE(point->joules_per_sample.has_value());
}

TEST_F(TelemetryFake, ThrottleReasonNamesAndWarnings) {
  fake_.set("clock_event_reasons", 0x1 | 0x4 | 0x40);
  fake_.set("temperature_c", 88);
  Telemetry telemetry = Telemetry::open(options());
  const TelemetryWindow w = measure(telemetry, 30);
  EXPECT_THAT(w.clock_event_reason_names, ElementsAre("gpu_idle", "sw_power_cap", "hw_thermal_slowdown"));
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("thermal throttling during the point (hw_thermal_slowdown, max 88 C)"));
  EXPECT_THAT(warnings[1], HasSubstr("power throttling during the point (sw_power_cap, max 300 W)"));
  EXPECT_THAT(to_point_telemetry(w, 1)->throttle_reasons,
              ElementsAre("gpu_idle", "sw_power_cap", "hw_thermal_slowdown"));

  fake_.set("clock_event_reasons", 0x1 | 0x2);  // idle and the applications clock setting do not warn
  const TelemetryWindow benign = measure(telemetry, 20);
  EXPECT_THAT(benign.clock_event_reason_names, ElementsAre("gpu_idle", "applications_clocks_setting"));
  EXPECT_THAT(trust_warnings(benign), IsEmpty());
}

TEST_F(TelemetryFake, ReasonsSeenOnceInAWindowAreKept) {
  Telemetry telemetry = Telemetry::open(options());
  telemetry.start();
  // Wait for the sampler thread to read each setting at least once, however loaded the machine is.
  const auto sampled_after = [&](double calls) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fake_.get("calls.nvmlDeviceGetCurrentClocksEventReasons") < calls + 2 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  fake_.set("clock_event_reasons", 0x20);
  sampled_after(fake_.get("calls.nvmlDeviceGetCurrentClocksEventReasons"));
  fake_.set("clock_event_reasons", 0);
  sampled_after(fake_.get("calls.nvmlDeviceGetCurrentClocksEventReasons"));
  const TelemetryWindow w = telemetry.stop();
  EXPECT_THAT(w.clock_event_reason_names, ElementsAre("sw_thermal_slowdown"));
  EXPECT_THAT(trust_warnings(w), Contains(HasSubstr("sw_thermal_slowdown")));
}

TEST_F(TelemetryFake, LowClockWarning) {
  fake_.set("sm_clock_mhz", 1200);
  Telemetry telemetry = Telemetry::open(options());
  const auto warnings = trust_warnings(measure(telemetry, 30));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("SM clock median 1200 MHz is 61% of the reference 1980 MHz"));
  fake_.set("sm_clock_mhz", 1600);  // 81%: fine
  EXPECT_THAT(trust_warnings(measure(telemetry, 20)), IsEmpty());
}

TEST_F(TelemetryFake, LowClockAgainstTheApplicationsClockWhenNoDefaultIsReported) {
  fake_.fail("nvmlDeviceGetDefaultApplicationsClock", kNotSupported);
  fake_.set("app_sm_clock_mhz", 1600);
  fake_.set("sm_clock_mhz", 1100);
  Telemetry telemetry = Telemetry::open(options());
  EXPECT_EQ(telemetry.device().reference_sm_clock_mhz, 1600.0);
  EXPECT_EQ(telemetry.device().reference_sm_clock_source, "applications clock");
  EXPECT_THAT(trust_warnings(measure(telemetry, 20)), ElementsAre(HasSubstr("of the reference 1600 MHz")));
}

TEST_F(TelemetryFake, OtherProcessWarningIgnoresOurOwnProcess) {
  fake_.add_process(static_cast<unsigned>(getpid()), 1ULL << 30);
  Telemetry telemetry = Telemetry::open(options());
  EXPECT_THAT(trust_warnings(measure(telemetry, 20)), IsEmpty());

  telemetry.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  fake_.add_process(4242, 2ULL << 30);  // starts during the window
  const TelemetryWindow w = telemetry.stop();
  ASSERT_EQ(w.other_processes.size(), 1u);
  EXPECT_EQ(w.other_processes[0].pid, 4242u);
  EXPECT_EQ(w.other_processes[0].used_bytes, 2ULL << 30);
  const auto warnings = trust_warnings(w);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0],
              HasSubstr("another process used the GPU during the point (pid 4242 using 2048 MiB)"));
  EXPECT_THAT(warnings[0], Not(HasSubstr(std::to_string(getpid()) + " ")));

  TelemetryOptions o = options();
  o.own_pids = {static_cast<uint32_t>(getpid()), 4242};  // both are this run (e.g. a launcher and a worker)
  Telemetry ours = Telemetry::open(o);
  EXPECT_THAT(measure(ours, 20).other_processes, IsEmpty());
}

TEST_F(TelemetryFake, ManyProcessesAreAllListed) {
  for (unsigned pid = 1000; pid < 1040; ++pid) fake_.add_process(pid, ~0ULL);
  Telemetry telemetry = Telemetry::open(options());
  const TelemetryWindow w = measure(telemetry, 10);
  ASSERT_EQ(w.other_processes.size(), 40u);
  EXPECT_FALSE(w.other_processes[0].used_bytes.has_value());
}

// `batchsweep devices` reads a GPU's memory through NVML, so it need not create a CUDA context there.
TEST_F(TelemetryFake, MemoryAndTheOtherProcessesWithoutAWindow) {
  fake_.set("memory_total_bytes", 80.0 * (1ULL << 30));
  fake_.set("memory_used_bytes", 5.0 * (1ULL << 30));
  fake_.add_process(static_cast<unsigned>(getpid()), 1ULL << 30);
  fake_.add_process(4242, 4ULL << 30);
  fake_.add_process(77, ~0ULL);  // size not reported (a container)
  Telemetry telemetry = Telemetry::open(options());
  std::string why;
  const std::optional<GpuMemory> memory = telemetry.memory(why);
  ASSERT_TRUE(memory.has_value()) << why;
  EXPECT_EQ(memory->total_bytes, 80ULL << 30);
  EXPECT_EQ(memory->used_bytes, 5ULL << 30);
  EXPECT_EQ(memory->free_bytes, 75ULL << 30);
  ASSERT_EQ(memory->other_processes.size(), 2u);
  EXPECT_EQ(memory->other_processes[0].pid, 4242u);
  EXPECT_EQ(memory->other_processes[0].used_bytes, 4ULL << 30);
  EXPECT_EQ(memory->other_processes[1].pid, 77u);
  EXPECT_FALSE(memory->other_processes[1].used_bytes.has_value());

  // A device that cannot say (unified memory) and a telemetry that never opened give the reason instead.
  fake_.fail("nvmlDeviceGetMemoryInfo", kNotSupported);
  EXPECT_FALSE(telemetry.memory(why).has_value());
  EXPECT_EQ(why, "nvmlDeviceGetMemoryInfo failed: Not Supported");
  TelemetryOptions elsewhere = options();
  elsewhere.device = "0000:99:00.0";
  EXPECT_FALSE(Telemetry::open(elsewhere).memory(why).has_value());
  EXPECT_THAT(why, HasSubstr("NVML has no device with PCI bus id 00000000:99:00.0"));
}

TEST(TelemetryLegacyDriver, FallsBackToOlderEntryPoints) {
  testing::FakeNvml legacy(BSW_FAKE_NVML_LEGACY);
  ASSERT_TRUE(legacy.loaded());
  legacy.reset();
  legacy.set("power_w", 120);
  legacy.set("clock_event_reasons", 0x20);
  legacy.set("app_sm_clock_mhz", 1410);
  legacy.add_process(31337, 1ULL << 20);
  TelemetryOptions o;
  o.library_path = BSW_FAKE_NVML_LEGACY;
  o.device = "0000:3b:00.0";  // no nvmlDeviceGetHandleByPciBusId_v2: found by enumerating bus ids
  o.sample_interval_ms = 5;
  Telemetry telemetry = Telemetry::open(o);
  ASSERT_TRUE(telemetry.available()) << telemetry.unavailable_reason();
  EXPECT_EQ(telemetry.device().name, "Fake GPU 1");
  EXPECT_EQ(telemetry.device().reference_sm_clock_source, "applications clock");
  EXPECT_THAT(
      telemetry.unsupported_readings(),
      ElementsAre(HasSubstr("total energy counter: nvmlDeviceGetTotalEnergyConsumption not exported by")));
  const TelemetryWindow w = measure(telemetry, 50);
  EXPECT_EQ(w.energy_source, EnergySource::integrated_power);
  EXPECT_NEAR(*w.energy_j, 120.0 * w.duration_s, 1e-6);
  EXPECT_THAT(w.clock_event_reason_names, ElementsAre("sw_thermal_slowdown"));
  ASSERT_EQ(w.other_processes.size(), 1u);
  EXPECT_EQ(w.other_processes[0].pid, 31337u);
  EXPECT_GT(legacy.get("calls.nvmlDeviceGetCurrentClocksThrottleReasons"), 0);
  EXPECT_GT(legacy.get("calls.nvmlDeviceGetComputeRunningProcesses_v2"), 0);
}

TEST_F(TelemetryFake, StartAndStopRepeatedly) {
  TelemetryOptions o = options();
  o.sample_interval_ms = 1;
  Telemetry telemetry = Telemetry::open(o);
  for (int i = 0; i < 200; ++i) {
    telemetry.start();
    if (i % 20 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const TelemetryWindow w = telemetry.stop();
    ASSERT_TRUE(w.available);
    ASSERT_GE(w.samples.size(), 2u);  // the thread's first reading and the last one taken by stop()
    ASSERT_EQ(w.energy_source, EnergySource::counter);
    ASSERT_GE(*w.energy_j, 0.0);
    ASSERT_FALSE(telemetry.running());
  }
}

TEST_F(TelemetryFake, MisuseThrowsLogicError) {
  Telemetry telemetry = Telemetry::open(options());
  EXPECT_THROW((void)telemetry.stop(), std::logic_error);
  telemetry.start();
  EXPECT_THROW(telemetry.start(), std::logic_error);
  EXPECT_TRUE(telemetry.stop().available);
}

TEST_F(TelemetryFake, StopIsPromptEvenWithALongInterval) {
  TelemetryOptions o = options();
  o.sample_interval_ms = 10'000;
  Telemetry telemetry = Telemetry::open(o);
  telemetry.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto before = SteadyClock::now();
  const TelemetryWindow w = telemetry.stop();
  EXPECT_LT(elapsed_ms(before), 100.0);
  EXPECT_EQ(w.samples.size(), 2u);

  telemetry.start();  // destroying a running Telemetry stops it just as promptly
  const auto destroy = SteadyClock::now();
  { Telemetry gone = std::move(telemetry); }
  EXPECT_LT(elapsed_ms(destroy), 100.0);
}

TEST_F(TelemetryFake, NvmlInitAndShutdownBalance) {
  {
    Telemetry a = Telemetry::open(options());
    Telemetry b = Telemetry::open(options());
    EXPECT_EQ(fake_.get("init_refcount"), 2);
    Telemetry moved = std::move(a);
    EXPECT_TRUE(moved.available());
    b = std::move(moved);  // the old b shuts down
    EXPECT_EQ(fake_.get("init_refcount"), 1);
  }
  EXPECT_EQ(fake_.get("init_refcount"), 0);
}

}  // namespace
}  // namespace bsw
