// The scripted backend: a formula for the step time, seeded noise, and scripted failures (oom, NaN, hang),
// read from a JSON script. See scripted_backend.hpp for the script format.
#include "backends/scripted/scripted_backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <numbers>
#include <sstream>
#include <thread>

#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/report.hpp"
#include "model/suggest.hpp"

namespace bsw {
namespace {

constexpr double kHangSleepMs = 50.0;
constexpr std::array<double, 2> kHangReportedMs{25.0, 75.0};
constexpr int64_t kFailingStep = 3;  // step_oom_at_batch / step_error_at_batch: past a warm-up of up to 2

// splitmix64: a small, portable generator, so noise is identical on every standard library.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1).
double uniform_open(uint64_t& state) {
  return (static_cast<double>(splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller.
double gaussian(uint64_t& state) {
  const double u1 = uniform_open(state);
  const double u2 = uniform_open(state);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

class ScriptedSession final : public Session {
 public:
  // `sessions_before`: the sessions the backend prepared before this one (the script's drift_pct). `round`:
  // which measurement of the point this is (run --rounds): each round draws its own noise, the same in
  // whichever run or order measures it.
  ScriptedSession(const ScriptedConfig& config, const Plan& plan, int64_t sessions_before, int round)
      : config_(config),
        micro_batch_(plan.request.batch),
        accumulation_(plan.request.accumulation),
        train_(plan.request.mode == Mode::train),
        // Loss scaling, and so an overflow skip, is fp16 training's alone.
        loss_scaled_(plan.request.mode == Mode::train && plan.request.precision == Precision::fp16),
        planned_bytes_(plan.memory.total_bytes()),
        base_ms_(config.step_ms(plan.request.batch, plan.request.accumulation) *
                 (1.0 + config.drift_pct / 100.0 * static_cast<double>(sessions_before))) {
    rng_state_ = config.seed ^ (static_cast<uint64_t>(micro_batch_) * 0x9E3779B97F4A7C15ULL) ^
                 (static_cast<uint64_t>(accumulation_) * 0xC2B2AE3D27D4EB4FULL) ^
                 (static_cast<uint64_t>(std::max(round, 1) - 1) * 0xD6E8FEB86659FD93ULL);  // round 1: 0
  }

  StepResult step() override {
    ++steps_;
    if (steps_ == kFailingStep && config_.step_oom_at_batch == micro_batch_)
      throw OutOfMemory(fmt::format("scripted device '{}': out of memory in step {} at batch {}",
                                    config_.name, steps_, micro_batch_));
    if (steps_ == kFailingStep && config_.step_error_at_batch == micro_batch_)
      throw BackendError(fmt::format("scripted device '{}': a kernel launch failed in step {} at batch {}",
                                     config_.name, steps_, micro_batch_));
    if (steps_ == kFailingStep && config_.step_fatal_at_batch == micro_batch_)
      throw Error(fmt::format("scripted device '{}': an illegal address in step {}; the context is unusable",
                              config_.name, steps_));
    StepResult result;
    if (config_.hang_at_batch && *config_.hang_at_batch == micro_batch_) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kHangSleepMs));
      result.step_ms = kHangReportedMs[static_cast<std::size_t>(steps_ % 2)];
    } else {
      double ms = base_ms_;
      if (config_.noise_pct > 0) ms *= 1.0 + config_.noise_pct / 100.0 * gaussian(rng_state_);
      ms = std::max(ms, base_ms_ * 0.01);  // noise never makes a step free or negative
      if (config_.stall_every_steps && steps_ % *config_.stall_every_steps == 0) ms *= config_.stall_factor;
      // No report holds a step over a year (a huge batch on a slow script): an error point, not a report
      // that analyze would refuse.
      if (!(ms <= kLongestStepMs))
        throw BackendError(
            fmt::format("scripted device '{}': a step of {:.3g} ms at batch {} is longer than a "
                        "year, which no report holds (lower t0_ms, stall_factor or the batch)",
                        config_.name, ms, micro_batch_));
      result.step_ms = ms;
      if (config_.sleep)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(result.step_ms));
    }
    if (config_.nan_at_batch && *config_.nan_at_batch == micro_batch_) {
      result.finite = false;
      result.loss = std::numeric_limits<double>::quiet_NaN();
      return result;
    }
    result.skipped = loss_scaled_ && config_.skip_every_steps && steps_ % *config_.skip_every_steps == 0;
    // A loss that falls slowly, like the first steps of training on synthetic data; NaN in inference.
    result.loss =
        train_ ? 2.3 / (1.0 + 0.01 * static_cast<double>(steps_)) : std::numeric_limits<double>::quiet_NaN();
    return result;
  }

  SessionMemory memory() const override {
    SessionMemory memory;
    memory.planned_bytes = planned_bytes_;
    memory.allocated_bytes = planned_bytes_;
    return memory;
  }

  nlohmann::json details() const override {
    return {{"formula_step_ms", base_ms_}, {"micro_batch", micro_batch_}, {"accumulation", accumulation_}};
  }

 private:
  ScriptedConfig config_;  // a copy, so a session never points into its backend
  int64_t micro_batch_;
  int64_t accumulation_;
  bool train_;
  bool loss_scaled_;
  uint64_t planned_bytes_;
  double base_ms_;
  uint64_t rng_state_ = 0;
  int64_t steps_ = 0;
};

class ScriptedBackend final : public Backend {
 public:
  explicit ScriptedBackend(ScriptedConfig config) : config_(std::move(config)) {}

  BackendKind kind() const override { return BackendKind::scripted; }

  DeviceInfo device(Precision /*precision*/) const override {
    DeviceInfo info;
    info.backend = "scripted";
    info.name = config_.name;
    info.memory_total_bytes = config_.memory_total_bytes;
    info.peak_flops = config_.peak_flops;
    if (config_.peak_flops) info.peak_flops_source = "script";
    info.details = {{"script", config_.source},
                    {"curve", config_.curve == ScriptedConfig::Curve::roofline ? "roofline" : "saturating"},
                    {"t0_ms", config_.t0_ms},
                    {"noise_pct", config_.noise_pct},
                    {"seed", config_.seed}};
    if (config_.drift_pct > 0) info.details["drift_pct"] = config_.drift_pct;
    // Stalls lengthen ok points' steps: part of the formula (what --resume compares), where the script has
    // them.
    if (config_.stall_every_steps) {
      info.details["stall_every_steps"] = *config_.stall_every_steps;
      info.details["stall_factor"] = config_.stall_factor;
    }
    if (config_.curve == ScriptedConfig::Curve::roofline)
      info.details["samples_per_ms"] = config_.samples_per_ms;
    else
      info.details["b0"] = config_.b0;
    return info;
  }

  std::unique_ptr<Session> prepare(const Graph& /*graph*/, const Plan& plan,
                                   const SessionOptions& options) override {
    const uint64_t total = plan.memory.total_bytes();
    const int64_t batch = plan.request.batch;
    if (config_.oom_above_batch && batch > *config_.oom_above_batch)
      throw OutOfMemory(
          fmt::format("scripted device '{}': out of memory at batch {} (the script fails above {})",
                      config_.name, batch, *config_.oom_above_batch));
    if (total > config_.memory_total_bytes)
      throw OutOfMemory(fmt::format("scripted device '{}': out of memory: the plan needs {} ({} bytes) of {}",
                                    config_.name, format_bytes(total), total,
                                    format_bytes(config_.memory_total_bytes)));
    if (options.memory_limit_bytes && total > *options.memory_limit_bytes)
      throw OutOfMemory(
          fmt::format("scripted device '{}': the plan needs {} ({} bytes), above the memory limit of {}",
                      config_.name, format_bytes(total), total, format_bytes(*options.memory_limit_bytes)));
    return std::make_unique<ScriptedSession>(config_, plan, sessions_++, options.round);
  }

 private:
  ScriptedConfig config_;
  int64_t sessions_ = 0;  // prepared so far
};

// Typed accessors that name the source and key in every error.
struct ScriptReader {
  const nlohmann::json& doc;
  const std::string& source;

  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    throw UsageError(fmt::format("{}: {}: {}", source, key, why));
  }
  [[nodiscard]] const nlohmann::json* find(std::string_view key) const {
    const auto it = doc.find(key);
    return it == doc.end() ? nullptr : &*it;
  }
  // A number within [minimum, maximum] (above 0, or from 0 with allow_zero): the bounds keep every step time
  // a script yields finite and every throughput above 0, so a report run writes is one analyze reads back.
  [[nodiscard]] std::optional<double> positive_number(std::string_view key, double minimum, double maximum,
                                                      bool allow_zero = false) const {
    const nlohmann::json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_number()) fail(key, fmt::format("must be a number, got {}", value->dump()));
    const double v = value->get<double>();
    if (!std::isfinite(v) || v < 0 || (v == 0 && !allow_zero))
      fail(key, fmt::format("must be {}, got {}", allow_zero ? ">= 0" : "> 0", value->dump()));
    if ((v != 0 && v < minimum) || v > maximum)
      fail(key, fmt::format("must be between {:g} and {:g}, got {}", minimum, maximum, value->dump()));
    return v;
  }
  [[nodiscard]] std::optional<int64_t> integer(std::string_view key, int64_t minimum) const {
    const nlohmann::json* value = find(key);
    if (!value) return std::nullopt;
    // A whole number past 2^64 parses as a double: too large, not "not an integer".
    if (value->is_number_float() && std::isfinite(value->get<double>()) &&
        value->get<double>() == std::floor(value->get<double>()) && std::fabs(value->get<double>()) >= 0x1p63)
      fail(key, fmt::format("{} is {}", value->dump(), value->get<double>() > 0 ? "too large" : "too small"));
    if (!value->is_number_integer()) fail(key, fmt::format("must be an integer, got {}", value->dump()));
    if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, fmt::format("{} is too large", value->dump()));
    const int64_t v = value->get<int64_t>();
    if (v < minimum) fail(key, fmt::format("must be at least {}, got {}", minimum, v));
    return v;
  }
};

}  // namespace

double ScriptedConfig::step_ms(int64_t micro_batch, int64_t accumulation) const {
  const double b = static_cast<double>(micro_batch);
  const double micro_ms =
      curve == Curve::roofline ? std::max(t0_ms, b / samples_per_ms) : t0_ms * (1.0 + b / b0);
  return static_cast<double>(accumulation) * micro_ms;
}

ScriptedConfig parse_scripted_config(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object())
    throw UsageError(fmt::format("{}: a scripted backend script must be a JSON object", source));
  static constexpr std::array<std::string_view, 20> kKeys{"name",
                                                          "memory_total_bytes",
                                                          "peak_flops",
                                                          "t0_ms",
                                                          "curve",
                                                          "samples_per_ms",
                                                          "b0",
                                                          "noise_pct",
                                                          "drift_pct",
                                                          "seed",
                                                          "oom_above_batch",
                                                          "nan_at_batch",
                                                          "skip_every_steps",
                                                          "stall_every_steps",
                                                          "stall_factor",
                                                          "sleep",
                                                          "hang_at_batch",
                                                          "step_oom_at_batch",
                                                          "step_error_at_batch",
                                                          "step_fatal_at_batch"};
  // A model config given to --script (its flag is --model): said as such, not as its first unknown key.
  if (doc.contains("layers") && doc.contains("input"))
    throw UsageError(fmt::format("{}: is a model config (for --model), not a step-time script", source));
  for (const auto& [key, value] : doc.items()) {
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      // The unit left off ("t0" for t0_ms, "drift" for drift_pct) before a typo one letter off ("b0").
      const auto with_unit = std::find_if(kKeys.begin(), kKeys.end(), [&](std::string_view known) {
        return known.size() > key.size() + 1 && known.starts_with(key) && known[key.size()] == '_';
      });
      const std::optional<std::string_view> near = with_unit != kKeys.end()
                                                       ? std::optional<std::string_view>(*with_unit)
                                                       : model_detail::nearest_name(key, kKeys);
      throw UsageError(fmt::format("{}: unknown key '{}'{} (known: {})", source, key,
                                   near ? fmt::format("; did you mean '{}'?", *near) : std::string(),
                                   fmt::join(kKeys, ", ")));
    }
  }

  const ScriptReader in{doc, source};
  ScriptedConfig config;
  config.source = source;
  if (const nlohmann::json* name = in.find("name")) {
    if (!name->is_string() || name->get<std::string>().empty()) in.fail("name", "must be a non-empty string");
    config.name = name->get<std::string>();
    // It titles tables and lines: a newline would split them (as a model's name, refused).
    if (has_control_characters(config.name)) in.fail("name", "must not contain control characters");
    // As a model's name: it is printed in every title, and a device's name is a line, not a document.
    static constexpr size_t kMaxNameBytes = 200;
    if (config.name.size() > kMaxNameBytes)
      in.fail("name",
              fmt::format("is {} bytes long: at most {} are allowed", config.name.size(), kMaxNameBytes));
  }
  const auto memory = in.integer("memory_total_bytes", 1);
  if (!memory) in.fail("memory_total_bytes", "is required (the device memory in bytes)");
  config.memory_total_bytes = static_cast<uint64_t>(*memory);
  config.peak_flops = in.positive_number("peak_flops", 1e3, 1e21);
  const auto t0 = in.positive_number("t0_ms", 1e-6, 3.6e6);  // a nanosecond to an hour
  if (!t0) in.fail("t0_ms", "is required (the fixed cost of one micro-batch in ms)");
  config.t0_ms = *t0;

  std::string curve = "roofline";
  if (const nlohmann::json* value = in.find("curve")) {
    if (!value->is_string()) in.fail("curve", "must be \"roofline\" or \"saturating\"");
    curve = value->get<std::string>();
  }
  if (curve == "roofline") {
    config.curve = ScriptedConfig::Curve::roofline;
    const auto rate = in.positive_number("samples_per_ms", 1e-6, 1e12);
    if (!rate) in.fail("samples_per_ms", "is required by the roofline curve");
    if (in.find("b0")) in.fail("b0", "belongs to the saturating curve; the roofline uses samples_per_ms");
    config.samples_per_ms = *rate;
  } else if (curve == "saturating") {
    config.curve = ScriptedConfig::Curve::saturating;
    const auto b0 = in.positive_number("b0", 1e-6, 1e12);
    if (!b0) in.fail("b0", "is required by the saturating curve");
    if (in.find("samples_per_ms"))
      in.fail("samples_per_ms", "belongs to the roofline curve; saturating uses b0");
    config.b0 = *b0;
  } else {
    in.fail("curve", fmt::format("must be \"roofline\" or \"saturating\", got \"{}\"", curve));
  }

  config.noise_pct = in.positive_number("noise_pct", 0, 1000, /*allow_zero=*/true).value_or(0.0);
  config.drift_pct = in.positive_number("drift_pct", 0, 1000, /*allow_zero=*/true).value_or(0.0);
  if (const auto seed = in.integer("seed", 0)) config.seed = static_cast<uint64_t>(*seed);
  config.oom_above_batch = in.integer("oom_above_batch", 1);
  config.nan_at_batch = in.integer("nan_at_batch", 1);
  config.skip_every_steps = in.integer("skip_every_steps", 1);
  config.stall_every_steps = in.integer("stall_every_steps", 1);
  if (const auto factor = in.positive_number("stall_factor", 1, 1e6, /*allow_zero=*/false)) {
    if (!config.stall_every_steps) in.fail("stall_factor", "needs stall_every_steps");
    if (!(*factor > 1)) in.fail("stall_factor", fmt::format("must be above 1, got {}", *factor));
    config.stall_factor = *factor;
  }
  config.hang_at_batch = in.integer("hang_at_batch", 1);
  config.step_oom_at_batch = in.integer("step_oom_at_batch", 1);
  config.step_error_at_batch = in.integer("step_error_at_batch", 1);
  config.step_fatal_at_batch = in.integer("step_fatal_at_batch", 1);
  if (const nlohmann::json* value = in.find("sleep")) {
    if (!value->is_boolean()) in.fail("sleep", fmt::format("must be true or false, got {}", value->dump()));
    config.sleep = value->get<bool>();
  }
  return config;
}

std::unique_ptr<Backend> make_scripted_backend(ScriptedConfig config) {
  return std::make_unique<ScriptedBackend>(std::move(config));
}

std::unique_ptr<Backend> make_scripted_backend(const std::string& script_path) {
  std::string why;
  const std::optional<std::string> bytes =
      read_input(script_path, size_t{1} << 20, "a step-time script", why);
  if (!bytes) throw UsageError(fmt::format("--script {}: {}", script_path, why));
  std::stringstream text(*bytes);
  if (text.str().find_first_not_of(" \t\r\n") == std::string::npos)
    throw UsageError(
        fmt::format("{}: is empty (or not a file): expected a step-time script (JSON)", script_path));
  if (json_too_deep_at(text.str()))
    throw UsageError(fmt::format("{}: JSON nested deeper than {} levels; not a step-time script", script_path,
                                 kMaxJsonDepth));
  nlohmann::json doc;
  try {
    // A key given twice: JSON keeps the last, and the device scripted would not be the one the file reads as.
    doc = nlohmann::json::parse(text.str(), DuplicateKeyCheck([&](const std::string& where) {
                                  throw UsageError(
                                      fmt::format("{}: {}: is given twice in the same object; JSON "
                                                  "keeps only the last, so remove one",
                                                  script_path, where));
                                }));
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(
        fmt::format("{}: not valid JSON: {}", script_path, json_syntax_error(text.str(), e.byte, e.what())));
  } catch (const nlohmann::json::exception& e) {  // out_of_range for numbers like 1e400
    throw UsageError(
        fmt::format("{}: not valid JSON: {}", script_path, json_syntax_error(text.str(), 0, e.what())));
  }
  return make_scripted_backend(parse_scripted_config(doc, script_path));
}

}  // namespace bsw
