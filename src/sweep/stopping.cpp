// The default stopping criterion: enough samples, enough measured time and low enough noise, or a wall-clock
// timeout, or a hard sample cap — whichever comes first — with a warning that says which limit was missed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <chrono>

#include "batchsweep/stats.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

NoiseCriterion::NoiseCriterion(StoppingSettings settings, Clock clock)
    : settings_(settings), clock_(clock ? std::move(clock) : Clock(steady_seconds)), start_s_(clock_()) {}

void NoiseCriterion::add_measurement(double step_ms) {
  samples_ms_.push_back(step_ms);
  measured_ms_ += step_ms;
}

double NoiseCriterion::noise_pct() const {
  return relative_noise(samples_ms_) * 100.0;
}

bool NoiseCriterion::is_finished() {
  if (stop_ != Stop::none) return true;
  const double elapsed_s = clock_() - start_s_;
  const auto samples = static_cast<int64_t>(samples_ms_.size());
  // The cheap conditions first: the noise (a pass over the samples) is only computed once they hold.
  if (samples >= settings_.min_samples && measured_ms_ >= settings_.min_time_s * 1000.0 &&
      noise_pct() <= settings_.max_noise_pct) {
    stop_ = Stop::noise_target;
  } else if (elapsed_s >= settings_.timeout_s) {
    stop_ = Stop::timeout;
  } else if (samples >= settings_.max_samples) {
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
    case Stop::timeout:
      return "timeout";
    case Stop::sample_cap:
      return "sample cap";
  }
  return {};
}

std::optional<std::string> NoiseCriterion::warning() const {
  if (stop_ != Stop::timeout && stop_ != Stop::sample_cap) return std::nullopt;
  const auto samples = static_cast<int64_t>(samples_ms_.size());
  // The targets that were not met, each with how far off it was and the flag that moves it.
  std::vector<std::string> missed;
  const double noise = noise_pct();
  if (noise > settings_.max_noise_pct)
    missed.push_back(fmt::format("noise {:.1f}% > {:g}% target", noise, settings_.max_noise_pct));
  if (samples < settings_.min_samples)
    missed.push_back(fmt::format("{} samples < {} minimum", samples, settings_.min_samples));
  if (measured_ms_ < settings_.min_time_s * 1000.0)
    missed.push_back(fmt::format("{:.2f} s measured < {:g} s minimum", measured_s(), settings_.min_time_s));
  const std::string what = missed.empty() ? std::string("all targets met at the same moment")
                                          : fmt::format("{}", fmt::join(missed, ", "));
  if (stop_ == Stop::timeout) {
    const bool noisy = noise > settings_.max_noise_pct;
    return fmt::format("timeout {:g} s reached after {:.1f} s with {} ({})", settings_.timeout_s,
                       elapsed_at_stop_s_, what,
                       noisy ? "raise --timeout or relax --max-noise" : "raise --timeout");
  }
  return fmt::format("sample cap {} reached with {} (relax --max-noise or raise --min-time)",
                     settings_.max_samples, what);
}

}  // namespace bsw
