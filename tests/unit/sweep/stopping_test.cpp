// NoiseCriterion: each stop rule (noise target, noise settled, min samples, min time, timeout, sample cap) on
// a fake clock, and the warnings that say which limit was missed and the flag that helps.
#include <gtest/gtest.h>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include <string>

#include "batchsweep/errors.hpp"
#include "batchsweep/report.hpp"
#include "batchsweep/stats.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

struct FakeClock {
  double now_s = 100.0;
  NoiseCriterion::Clock clock() {
    return [this] { return now_s; };
  }
};

// Feeds step(0), step(1), ... (moving the clock by tick_s each) until the criterion finishes or `limit`
// steps; returns how many it took.
int feed(NoiseCriterion& criterion, FakeClock& time, const std::function<double(int)>& step,
         double tick_s = 0.0, int limit = 100000) {
  int added = 0;
  while (!criterion.is_finished() && added < limit) {
    criterion.add_measurement(step(added));
    time.now_s += tick_s;
    ++added;
  }
  return added;
}

TEST(NoiseCriterion, FinishesWhenAllTargetsHold) {
  FakeClock time;
  NoiseCriterion criterion(StoppingSettings{}, time.clock());
  for (int i = 0; i < 9; ++i) {
    criterion.add_measurement(60.0);
    EXPECT_FALSE(criterion.is_finished()) << "sample " << i + 1;  // fewer than 10 samples
  }
  criterion.add_measurement(60.0);
  EXPECT_TRUE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "noise target");
  EXPECT_FALSE(stopped_short(criterion.stop_reason()));  // the report's notes key off it
  EXPECT_FALSE(criterion.warning().has_value());
  EXPECT_EQ(criterion.samples(), 10u);
  EXPECT_DOUBLE_EQ(criterion.measured_s(), 0.6);
}

TEST(NoiseCriterion, ALaterRoundTimesExactlyRoundOnesSteps) {
  FakeClock time;
  NoiseCriterion criterion(StoppingSettings{}, time.clock());
  criterion.set_round_steps(25);
  // Noisy steps well past --min-samples, --min-time and any noise target: only the count ends it.
  EXPECT_EQ(feed(criterion, time, [](int i) { return i % 2 ? 200.0 : 20.0; }), 25);
  EXPECT_EQ(criterion.stop_reason(), "steps of round 1");
  EXPECT_FALSE(stopped_short(criterion.stop_reason()));
  EXPECT_FALSE(criterion.warning().has_value());

  // The timeout still ends it, and says how far it got.
  FakeClock slow;
  NoiseCriterion cut(StoppingSettings{}, slow.clock());
  cut.set_round_steps(25);
  EXPECT_EQ(feed(
                cut, slow, [](int) { return 60.0; }, 0.5),
            10);
  EXPECT_EQ(cut.stop_reason(), "timeout");
  ASSERT_TRUE(cut.warning().has_value());
  EXPECT_EQ(*cut.warning(), "timeout 5 s reached after 5 s with 10 of round 1's 25 steps (raise --timeout)");
}

TEST(NoiseCriterion, WaitsForMinSamples) {
  FakeClock time;
  StoppingSettings settings;
  settings.min_samples = 20;
  NoiseCriterion criterion(settings, time.clock());
  for (int i = 0; i < 19; ++i) criterion.add_measurement(200.0);  // 3.8 s measured, noise 0
  EXPECT_FALSE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "");
  criterion.add_measurement(200.0);
  EXPECT_TRUE(criterion.is_finished());
}

TEST(NoiseCriterion, WaitsForMinTime) {
  FakeClock time;
  NoiseCriterion criterion(StoppingSettings{}, time.clock());
  for (int i = 0; i < 499; ++i) {
    criterion.add_measurement(1.0);
    ASSERT_FALSE(criterion.is_finished()) << i;  // 0.499 s < 0.5 s
  }
  criterion.add_measurement(1.0);
  EXPECT_TRUE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "noise target");
}

TEST(NoiseCriterion, WaitsForTheNoiseTargetThenStops) {
  FakeClock time;
  StoppingSettings settings;
  settings.max_noise_pct = 5.0;
  NoiseCriterion criterion(settings, time.clock());
  // Ten samples alternating 90 / 110 ms: noise ~10.5%.
  for (int i = 0; i < 10; ++i) criterion.add_measurement(i % 2 ? 110.0 : 90.0);
  EXPECT_FALSE(criterion.is_finished());
  EXPECT_NEAR(criterion.noise_pct(), 10.54, 0.01);
  // Many samples at 100 ms pull the relative noise under 5%.
  int added = 0;
  while (!criterion.is_finished()) {
    criterion.add_measurement(100.0);
    ASSERT_LT(++added, 100);
  }
  EXPECT_LE(criterion.noise_pct(), 5.0);
  EXPECT_EQ(criterion.stop_reason(), "noise target");
}

TEST(NoiseCriterion, TimeoutSaysWhichLimitAndByHowMuch) {
  FakeClock time;
  StoppingSettings settings;
  settings.timeout_s = 5.0;
  NoiseCriterion criterion(settings, time.clock());
  for (int i = 0; i < 40; ++i) {
    criterion.add_measurement(i % 2 ? 3.0 : 1.0);  // noise 50.6%
    time.now_s += 0.1;
    ASSERT_FALSE(criterion.is_finished()) << i;
  }
  time.now_s += 1.5;  // 5.5 s since the start
  criterion.add_measurement(1.0);
  EXPECT_TRUE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "timeout");
  EXPECT_TRUE(stopped_short(criterion.stop_reason()));
  const auto warning = criterion.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("timeout 5 s reached after 5.5 s with"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("% > 1% target"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("0.08 s measured < 0.5 s minimum"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--timeout"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--max-noise"), std::string::npos) << *warning;
  // Finished stays finished.
  time.now_s += 100;
  EXPECT_TRUE(criterion.is_finished());
  // A step that ran far past the timeout (it is never cut) is said as such, not as a timeout that failed.
  NoiseCriterion slow(settings, time.clock());
  time.now_s += 8.0;
  slow.add_measurement(8000.0);
  ASSERT_TRUE(slow.is_finished());
  EXPECT_NE(slow.warning()->find("reached after 8 s (checked between steps: a step is never cut) with"),
            std::string::npos)
      << *slow.warning();
  EXPECT_EQ(criterion.stop_reason(), "timeout");
}

// A noise just above its target is printed with the digits that show it above ("1.04%", never "1.0% > 1%").
TEST(NoiseCriterion, ANoiseJustAboveTheTargetReadsAsAbove) {
  FakeClock time;
  StoppingSettings settings;
  settings.timeout_s = 5.0;
  NoiseCriterion criterion(settings, time.clock());
  for (int i = 0; i < 40; ++i) {
    criterion.add_measurement(i % 2 ? 1.021 : 1.0);  // noise about 1.04%
    time.now_s += 0.1;
    ASSERT_FALSE(criterion.is_finished()) << i;
  }
  time.now_s += 1.5;
  criterion.add_measurement(1.0);
  ASSERT_TRUE(criterion.is_finished());
  ASSERT_EQ(criterion.stop_reason(), "timeout");
  const std::string warning = criterion.warning().value_or("");
  const size_t at = warning.find("noise ");
  ASSERT_NE(at, std::string::npos) << warning;
  const size_t percent = warning.find("% > 1% target", at);
  ASSERT_NE(percent, std::string::npos) << warning;
  EXPECT_GT(std::stod(warning.substr(at + 6, percent - at - 6)), 1.0) << warning;
}

TEST(NoiseCriterion, TimeoutWithFewSamplesNamesTheMinimum) {
  FakeClock time;
  StoppingSettings settings;
  settings.timeout_s = 2.0;
  NoiseCriterion criterion(settings, time.clock());
  for (int i = 0; i < 3; ++i) {
    time.now_s += 0.8;
    criterion.add_measurement(800.0);
  }
  EXPECT_TRUE(criterion.is_finished());
  const auto warning = criterion.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("3 samples < 10 minimum"), std::string::npos) << *warning;
  EXPECT_EQ(warning->find("--max-noise"), std::string::npos) << *warning;  // the noise was fine
}

// One sample says nothing of the noise: with --min-samples 1 the noise target still waits for a second, and
// a point cut at one sample says the noise is unknown (it once stopped on "noise target" with no noise_pct).
TEST(NoiseCriterion, OneSampleNeverMeetsTheNoiseTarget) {
  FakeClock time;
  StoppingSettings settings;
  settings.min_samples = 1;
  settings.min_time_s = 0.0;
  NoiseCriterion criterion(settings, time.clock());
  criterion.add_measurement(50.0);
  EXPECT_FALSE(criterion.is_finished());
  criterion.add_measurement(50.0);
  EXPECT_TRUE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "noise target");

  settings.timeout_s = 1.0;
  NoiseCriterion slow(settings, time.clock());
  time.now_s += 2.0;
  slow.add_measurement(2000.0);
  EXPECT_TRUE(slow.is_finished());
  EXPECT_EQ(slow.stop_reason(), "timeout");
  const auto warning = slow.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("noise unknown from one sample"), std::string::npos) << *warning;
}

// A time just under the minimum is not printed as the minimum itself.
TEST(NoiseCriterion, ATimeJustShortOfTheMinimumPrintsBelowIt) {
  FakeClock time;
  StoppingSettings settings;
  settings.min_time_s = 0.02;
  settings.timeout_s = 1.0;
  NoiseCriterion criterion(settings, time.clock());
  for (int i = 0; i < 10; ++i) criterion.add_measurement(1.96);  // 19.6 ms in all
  time.now_s += 2.0;
  EXPECT_TRUE(criterion.is_finished());
  EXPECT_EQ(criterion.stop_reason(), "timeout");
  const auto warning = criterion.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("0.0196 s measured < 0.02 s minimum"), std::string::npos) << *warning;
}

TEST(NoiseCriterion, SampleCapStopsAFastNoisyStep) {
  FakeClock time;
  StoppingSettings settings;
  settings.max_samples = 50;
  NoiseCriterion criterion(settings, time.clock());
  int added = 0;
  while (!criterion.is_finished()) {
    criterion.add_measurement(added % 2 ? 0.003 : 0.001);
    ++added;
    ASSERT_LE(added, 50);
  }
  EXPECT_EQ(added, 50);
  EXPECT_EQ(criterion.stop_reason(), "sample cap");
  EXPECT_TRUE(stopped_short(criterion.stop_reason()));
  const auto warning = criterion.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("sample cap 50 reached"), std::string::npos) << *warning;
}

// Steps that vary by 2% never meet a 1% target however many are taken; once the noise has settled the point
// stops and says how well the mean is known, rather than running to the timeout and advising a longer one.
TEST(NoiseCriterion, ANoiseThatSettledAboveTheTargetStops) {
  FakeClock time;
  NoiseCriterion criterion(StoppingSettings{}, time.clock());
  // 1 ms of wall clock a step: far from the timeout.
  const int added = feed(
      criterion, time, [](int i) { return i % 2 ? 98.0 : 102.0; }, 0.001, 1000);
  // Readings from sample 2 on, judged every 16 steps past 64 of them: at 80 the early readings (2.8% at two
  // samples) still spread the history by more than 5% of the current 2.0%; at 112 they no longer do.
  EXPECT_EQ(added, 112);
  EXPECT_EQ(criterion.stop_reason(), "noise settled");
  EXPECT_TRUE(stopped_short(criterion.stop_reason()));
  const auto warning = criterion.warning();
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("noise settled at 2.0%, above the 1% target, after 112 timed steps"),
            std::string::npos)
      << *warning;
  EXPECT_NE(warning->find("the mean step is known to ±0.37%"), std::string::npos) << *warning;
  // Given the report's interval (samples_per_second_ci95_pct, allowing for drift), the warning quotes that:
  // one figure for one mean.
  const auto same = criterion.warning(0.52);
  ASSERT_TRUE(same.has_value());
  EXPECT_NE(same->find("the mean step is known to ±0.52% (95% confidence, allowing for drift, as "
                       "samples_per_second_ci95_pct)"),
            std::string::npos)
      << *same;
}

// A noise that is still moving (the steps drift, as with a GPU heating up) has not settled: the point goes
// on.
TEST(NoiseCriterion, ADriftingNoiseHasNotSettled) {
  FakeClock time;
  StoppingSettings settings;
  settings.timeout_s = 0.2;
  NoiseCriterion criterion(settings, time.clock());
  const int added = feed(
      criterion, time, [](int i) { return 100.0 + 0.5 * i; }, 0.001);
  EXPECT_EQ(criterion.stop_reason(), "timeout");
  EXPECT_EQ(added, 200);
}

// 1 ms steps with 1.5% noise that slowly drift up: judged on a recent window around its own mean, the noise
// looked settled at about 3% after ~550 steps while it was on its way to 14%. Around the current value over
// the last 512 readings, it settles only once the drift dominates, and then reports that noise.
TEST(NoiseCriterion, AFastDriftIsNotCalledSettledEarly) {
  FakeClock time;
  StoppingSettings settings;
  settings.timeout_s = 1e9;
  NoiseCriterion criterion(settings, time.clock());
  const int added =
      feed(criterion, time, [](int i) { return (1.0 + 0.015 * std::sin(i * 1.3)) * (1.0 + i * 0.00015); });
  EXPECT_EQ(criterion.stop_reason(), "noise settled");
  EXPECT_GT(added, 4000);
  EXPECT_GT(criterion.noise_pct(), 14.0);
}

// The running sums give the same noise as the two-pass summary the report prints.
TEST(NoiseCriterion, RunningNoiseMatchesTheSummary) {
  NoiseCriterion criterion(StoppingSettings{});
  std::vector<double> samples;
  for (int i = 0; i < 500; ++i) {
    const double v = 1e3 + 37.0 * std::sin(i * 0.7) + (i % 7);
    samples.push_back(v);
    criterion.add_measurement(v);
  }
  EXPECT_NEAR(criterion.noise_pct(), relative_noise(samples) * 100.0, 1e-10);
}

TEST(NoiseCriterion, UsesTheSteadyClockByDefault) {
  StoppingSettings settings;
  settings.timeout_s = 0.3;
  NoiseCriterion criterion(settings);
  criterion.add_measurement(1.0);
  EXPECT_FALSE(criterion.is_finished());  // one sample of 10, and (a loaded machine aside) no time has passed
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  criterion.add_measurement(1.0);
  EXPECT_TRUE(criterion.is_finished());  // only the real clock can have reached the timeout
  EXPECT_EQ(criterion.stop_reason(), "timeout");
}

TEST(StoppingSettings, ValidateNamesTheFlag) {
  const auto message_of = [](StoppingSettings s) {
    try {
      validate(s);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message_of(StoppingSettings{}), "");
  StoppingSettings s;
  s.warmup_steps = -1;
  EXPECT_EQ(message_of(s).rfind("--warmup:", 0), 0u);
  s = {};
  s.warmup_time_s = -0.1;
  EXPECT_EQ(message_of(s).rfind("--warmup-time:", 0), 0u);
  s = {};
  s.min_samples = 0;
  EXPECT_EQ(message_of(s).rfind("--min-samples:", 0), 0u);
  s = {};
  s.min_time_s = -0.5;
  EXPECT_EQ(message_of(s).rfind("--min-time:", 0), 0u);
  s = {};
  s.max_noise_pct = 0;
  EXPECT_EQ(message_of(s).rfind("--max-noise:", 0), 0u);
  s = {};
  s.timeout_s = 0;
  EXPECT_EQ(message_of(s).rfind("--timeout:", 0), 0u);
  s = {};
  s.min_samples = 20000;
  EXPECT_NE(message_of(s).find("above the sample cap 10000 (--max-samples)"), std::string::npos);
  s.max_samples = 20000;
  EXPECT_NO_THROW(validate(s));
  s.max_samples = kMaxSampleCap + 1;
  EXPECT_EQ(message_of(s), "--max-samples: must be in 1..100000, got 100001");
}

}  // namespace
}  // namespace bsw
