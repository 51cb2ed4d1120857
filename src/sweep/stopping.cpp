// The default stopping criterion: enough samples, enough measured time and low enough noise (or a noise that
// has settled above the target), or a wall-clock timeout, or a hard sample cap — whichever comes first — with
// a warning that says which limit was missed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// `value` (< limit) with two decimals, or as many more as it takes not to print the limit itself ("0.02 s
// measured < 0.02 s minimum" for 0.0196).
std::string below(double value, double limit) {
  for (int digits = 2; digits < 9; ++digits) {
    std::string text = fmt::format("{:.{}f}", value, digits);
    if (std::stod(text) < limit) return text;
  }
  return fmt::format("{:g}", value);
}
}  // namespace

NoiseCriterion::NoiseCriterion(StoppingSettings settings, Clock clock)
    : settings_(settings), clock_(clock ? std::move(clock) : Clock(steady_seconds)), start_s_(clock_()) {}

void NoiseCriterion::add_measurement(double step_ms) {
  ++samples_;
  measured_ms_ += step_ms;
  const double delta = step_ms - mean_ms_;
  mean_ms_ += delta / static_cast<double>(samples_);
  squares_ms2_ += delta * (step_ms - mean_ms_);
  if (samples_ < 2) return;
  noise_history_.push_back(noise_pct());
  if (noise_history_.size() > kNoiseHistory) noise_history_.pop_front();
}

double NoiseCriterion::noise_pct() const {
  if (samples_ < 2 || mean_ms_ <= 0.0) return 0.0;
  const double stddev = std::sqrt(std::max(0.0, squares_ms2_) / static_cast<double>(samples_ - 1));
  return stddev / mean_ms_ * 100.0;
}

bool NoiseCriterion::noise_settled() const {
  if (noise_history_.size() <= kSettleMinReadings || samples_ % kSettleEvery != 0) return false;
  const double current = noise_history_.back();
  if (current <= 0.0) return false;
  // The spread around the current value, not the readings' mean: a noise still drifting stays unsettled.
  double squares = 0.0;
  for (double v : noise_history_) squares += (v - current) * (v - current);
  const double spread = std::sqrt(squares / static_cast<double>(noise_history_.size() - 1));
  return spread / current < kSettledSpread;
}

bool NoiseCriterion::is_finished() {
  if (stop_ != Stop::none) return true;
  const double elapsed_s = clock_() - start_s_;
  const auto samples = static_cast<int64_t>(samples_);
  if (round_steps_ > 0) {
    if (samples >= round_steps_)
      stop_ = Stop::round_steps;
    else if (elapsed_s >= settings_.timeout_s)
      stop_ = Stop::timeout;
    if (stop_ != Stop::none) elapsed_at_stop_s_ = elapsed_s;
    return stop_ != Stop::none;
  }
  // One sample says nothing of the noise: the noise target needs two, whatever --min-samples says.
  if (samples >= std::max<int64_t>(2, settings_.min_samples) &&
      measured_ms_ >= settings_.min_time_s * 1000.0) {
    const double noise = noise_pct();
    if (noise <= settings_.max_noise_pct)
      stop_ = Stop::noise_target;
    else if (noise_settled())
      stop_ = Stop::noise_settled;
  }
  if (stop_ == Stop::none) {
    if (elapsed_s >= settings_.timeout_s)
      stop_ = Stop::timeout;
    else if (samples >= settings_.max_samples)
      stop_ = Stop::sample_cap;
  }
  if (stop_ != Stop::none) elapsed_at_stop_s_ = elapsed_s;
  return stop_ != Stop::none;
}

std::string NoiseCriterion::stop_reason() const {
  switch (stop_) {
    case Stop::none:
      return {};
    case Stop::noise_target:
      return "noise target";
    case Stop::noise_settled:
      return "noise settled";
    case Stop::timeout:
      return "timeout";
    case Stop::sample_cap:
      return "sample cap";
    case Stop::round_steps:
      return "steps of round 1";
  }
  return {};
}

namespace {

// A noise above its target, with the digits it takes to read as above it (1.045% of a 1% target is "1.05%",
// not "1.0%").
std::string noise_above(double noise, double target) {
  for (int digits = 1; digits < 4; ++digits) {
    const std::string text = fmt::format("{:.{}f}", noise, digits);
    if (std::stod(text) > target) return text;
  }
  return fmt::format("{:.4f}", noise);
}

}  // namespace

std::optional<std::string> NoiseCriterion::warning() const {
  return warning(std::nullopt);
}

std::optional<std::string> NoiseCriterion::warning(std::optional<double> mean_ci95_pct) const {
  if (stop_ == Stop::none || stop_ == Stop::noise_target || stop_ == Stop::round_steps) return std::nullopt;
  const auto samples = static_cast<int64_t>(samples_);
  // When the timeout struck: three digits, whole seconds from 100 s.
  const std::string stopped_at = elapsed_at_stop_s_ < 100 ? fmt::format("{:.3g}", elapsed_at_stop_s_)
                                                          : fmt::format("{:.0f}", elapsed_at_stop_s_);
  // Past --timeout by half again or more: the step in progress ran to its end, which "reached after 28.5 s"
  // alone would read as a timeout that did not work.
  const std::string never_cut = elapsed_at_stop_s_ > 1.5 * settings_.timeout_s
                                    ? std::string(" (checked between steps: a step is never cut)")
                                    : std::string();
  if (round_steps_ > 0)
    return fmt::format("timeout {:g} s reached after {} s{} with {} of round 1's {} steps (raise --timeout)",
                       settings_.timeout_s, stopped_at, never_cut, samples, round_steps_);
  const double noise = noise_pct();
  const bool noisy = noise > settings_.max_noise_pct;
  if (stop_ == Stop::noise_settled) {
    // 95% confidence half-width of the mean step time, relative: the report's (allowing for drift) where
    // given, else 1.96 * cv / sqrt(n).
    const double mean_pct = mean_ci95_pct.value_or(1.96 * noise / std::sqrt(static_cast<double>(samples)));
    return fmt::format(
        "noise settled at {}%, above the {:g}% target, after {} timed steps: steps vary that much, and more "
        "of "
        "them would not lower it; the mean step is known to ±{:.2f}% (95% confidence, {}) (relax --max-noise "
        "to stop sooner)",
        noise > settings_.max_noise_pct ? noise_above(noise, settings_.max_noise_pct)
                                        : fmt::format("{:.1f}", noise),
        settings_.max_noise_pct, samples, mean_pct,
        mean_ci95_pct ? "allowing for drift, as samples_per_second_ci95_pct"
                      : "taking the steps as independent; compare allows for drift");
  }
  // The targets that were not met, each with how far off it was and the flag that moves it.
  std::vector<std::string> missed;
  if (noisy)
    missed.push_back(fmt::format("noise {}% > {:g}% target", noise_above(noise, settings_.max_noise_pct),
                                 settings_.max_noise_pct));
  if (samples < 2) missed.push_back("noise unknown from one sample");
  if (samples < settings_.min_samples)
    missed.push_back(
        fmt::format("{} sample{} < {} minimum", samples, samples == 1 ? "" : "s", settings_.min_samples));
  const bool short_time = measured_ms_ < settings_.min_time_s * 1000.0;
  if (short_time)
    missed.push_back(fmt::format("{} s measured < {:g} s minimum", below(measured_s(), settings_.min_time_s),
                                 settings_.min_time_s));
  const std::string what = missed.empty() ? std::string("all targets met at the same moment")
                                          : fmt::format("{}", fmt::join(missed, ", "));
  if (stop_ == Stop::timeout) {
    return fmt::format("timeout {:g} s reached after {} s{} with {} ({})", settings_.timeout_s, stopped_at,
                       never_cut, what, noisy ? "raise --timeout or relax --max-noise" : "raise --timeout");
  }
  // The cap is reached by steps so short that min_time needs more of them, or by noise that never settled.
  std::vector<std::string> advice;
  if (short_time)
    advice.emplace_back(settings_.max_samples < kMaxSampleCap ? "raise --max-samples or lower --min-time"
                                                              : "lower --min-time");
  if (noisy) advice.emplace_back("relax --max-noise");
  return fmt::format("sample cap {} reached with {}{}", settings_.max_samples, what,
                     advice.empty() ? std::string() : fmt::format(" ({})", fmt::join(advice, " or ")));
}

}  // namespace bsw
