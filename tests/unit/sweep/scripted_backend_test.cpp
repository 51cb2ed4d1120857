// The scripted backend: script validation (errors name the file and key), the step-time formulas, seeded
// noise, and the scripted failures (oom, NaN, fp16 skips, hang).
#include <gtest/gtest.h>

#include <tuple>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "batchsweep/errors.hpp"
#include "sweep_test_support.hpp"

namespace bsw {
namespace {

using testing::kGiB;
using testing::tiny_graph;

Plan plan_for(const Graph& graph, int64_t batch, int64_t accumulation = 1, Mode mode = Mode::train,
              Precision precision = Precision::fp32) {
  return make_plan(graph, PlanRequest{batch, precision, mode, accumulation, BackendKind::scripted});
}

std::string usage_message(const nlohmann::json& doc) {
  try {
    (void)parse_scripted_config(doc, "script.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return {};
}

TEST(ScriptedConfig, ParsesEveryKey) {
  const auto doc = nlohmann::json::parse(R"({
    "name": "scripted-h100", "memory_total_bytes": 1000, "peak_flops": 1e15, "t0_ms": 2.0,
    "curve": "roofline", "samples_per_ms": 50, "noise_pct": 1.5, "seed": 7, "oom_above_batch": 64, "nan_at_batch": 8,
    "skip_every_steps": 4, "sleep": true, "hang_at_batch": 16,
    "step_oom_at_batch": 64, "step_error_at_batch": 128})");
  const ScriptedConfig config = parse_scripted_config(doc, "s.json");
  EXPECT_EQ(config.name, "scripted-h100");
  EXPECT_EQ(config.memory_total_bytes, 1000u);
  EXPECT_EQ(config.peak_flops, 1e15);
  EXPECT_EQ(config.curve, ScriptedConfig::Curve::roofline);
  EXPECT_EQ(config.samples_per_ms, 50);
  EXPECT_EQ(config.noise_pct, 1.5);
  EXPECT_EQ(config.seed, 7u);
  EXPECT_EQ(config.oom_above_batch, 64);
  EXPECT_EQ(config.nan_at_batch, 8);
  EXPECT_EQ(config.skip_every_steps, 4);
  EXPECT_TRUE(config.sleep);
  EXPECT_EQ(config.hang_at_batch, 16);
  EXPECT_EQ(config.step_oom_at_batch, 64);
  EXPECT_EQ(config.step_error_at_batch, 128);
  EXPECT_EQ(config.source, "s.json");
}

TEST(ScriptedConfig, ErrorsNameTheFileAndKey) {
  const auto base = nlohmann::json{{"memory_total_bytes", 1000}, {"t0_ms", 1.0}, {"samples_per_ms", 10}};
  EXPECT_EQ(usage_message(base), "");

  auto doc = base;
  doc["noise"] = 1;
  EXPECT_NE(usage_message(doc).find("script.json: unknown key 'noise'"), std::string::npos)
      << usage_message(doc);

  doc = base;
  doc.erase("memory_total_bytes");
  EXPECT_NE(usage_message(doc).find("script.json: memory_total_bytes: is required"), std::string::npos);

  doc = base;
  doc.erase("t0_ms");
  EXPECT_NE(usage_message(doc).find("script.json: t0_ms: is required"), std::string::npos);

  doc = base;
  doc["name"] = "two\nlines";  // it titles tables: a newline would split them
  EXPECT_NE(usage_message(doc).find("script.json: name: must not contain control characters"),
            std::string::npos)
      << usage_message(doc);

  doc = base;
  doc["name"] = std::string(201, 'x');  // printed in every title, as a model's name (also capped at 200)
  EXPECT_NE(usage_message(doc).find("script.json: name: is 201 bytes long: at most 200 are allowed"),
            std::string::npos)
      << usage_message(doc);
  doc["name"] = std::string(200, 'x');
  EXPECT_EQ(usage_message(doc), "");

  doc = base;
  doc["t0_ms"] = "fast";
  EXPECT_NE(usage_message(doc).find("t0_ms: must be a number"), std::string::npos);

  doc = base;
  doc["t0_ms"] = -1;
  EXPECT_NE(usage_message(doc).find("t0_ms: must be > 0"), std::string::npos);

  // Bounded, so every step time is finite and every throughput above 0: a report `run` writes is one
  // `analyze` reads back (noise 1e308 made ok points with 0 samples/s, which analyze refused).
  for (const auto& [key, value, message] :
       {std::tuple{"noise_pct", 1e308, "noise_pct: must be between 0 and 1000, got 1e+308"},
        std::tuple{"t0_ms", 1e300, "t0_ms: must be between 1e-06 and 3.6e+06, got 1e+300"},
        std::tuple{"samples_per_ms", 1e-300, "samples_per_ms: must be between 1e-06 and 1e+12, got 1e-300"},
        std::tuple{"peak_flops", 1.0, "peak_flops: must be between 1000 and 1e+21, got 1.0"}}) {
    doc = base;
    doc[key] = value;
    EXPECT_NE(usage_message(doc).find(message), std::string::npos) << usage_message(doc);
  }
  doc = base;
  doc["noise_pct"] = 0;  // no noise: the lower bound is for numbers above 0
  EXPECT_EQ(usage_message(doc), "");

  // A model config given to --script is said to be one.
  doc = nlohmann::json{
      {"name", "m"}, {"input", {{"type", "vector"}, {"features", 4}}}, {"layers", nlohmann::json::array()}};
  EXPECT_EQ(usage_message(doc), "script.json: is a model config (for --model), not a step-time script");

  doc = base;
  doc["curve"] = "cubic";
  EXPECT_NE(usage_message(doc).find("curve: must be \"roofline\" or \"saturating\""), std::string::npos);

  doc = base;
  doc["curve"] = "saturating";
  EXPECT_NE(usage_message(doc).find("b0: is required by the saturating curve"), std::string::npos);

  doc = base;
  doc["b0"] = 64;
  EXPECT_NE(usage_message(doc).find("b0: belongs to the saturating curve"), std::string::npos);

  doc = base;
  doc["oom_above_batch"] = 0;
  EXPECT_NE(usage_message(doc).find("oom_above_batch: must be at least 1"), std::string::npos);

  doc = base;
  doc["seed"] = 1.5;
  EXPECT_NE(usage_message(doc).find("seed: must be an integer"), std::string::npos);
  // Past 2^64 the parser holds a whole number as a double: too large, as one less is, not "not an integer".
  doc = base;
  doc["memory_total_bytes"] = nlohmann::json::parse("18446744073709551616");
  EXPECT_NE(usage_message(doc).find("memory_total_bytes: 1.8446744073709552e+19 is too large"),
            std::string::npos)
      << usage_message(doc);

  doc = base;
  doc["sleep"] = 1;
  EXPECT_NE(usage_message(doc).find("sleep: must be true or false"), std::string::npos);

  EXPECT_NE(usage_message(nlohmann::json::array()).find("must be a JSON object"), std::string::npos);
}

TEST(ScriptedBackend, ReadsTheExampleScript) {
  const auto backend = make_scripted_backend(std::string(BSW_TEST_DATA) + "/data/scripted/roofline.json");
  EXPECT_EQ(backend->kind(), BackendKind::scripted);
  const DeviceInfo info = backend->device(Precision::bf16);
  EXPECT_EQ(info.backend, "scripted");
  EXPECT_EQ(info.name, "scripted-h100");
  EXPECT_EQ(info.memory_total_bytes, 80 * kGiB);
  EXPECT_EQ(info.peak_flops, 989e12);
  EXPECT_EQ(info.details.at("curve"), "roofline");
}

TEST(ScriptedBackend, FileErrorsNameTheFile) {
  try {
    (void)make_scripted_backend("/nonexistent/script.json");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/script.json"), std::string::npos);
  }
  const auto path = std::filesystem::temp_directory_path() / "bsw_scripted_bad.json";
  std::ofstream(path) << "{ not json";
  try {
    (void)make_scripted_backend(path.string());
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": not valid JSON"), std::string::npos) << e.what();
  }
  // A key given twice: JSON would keep the last, silently.
  std::ofstream(path) << R"({"memory_total_bytes": 1000, "t0_ms": 1, "samples_per_ms": 10, "t0_ms": 5})";
  try {
    (void)make_scripted_backend(path.string());
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": t0_ms: is given twice in the same object"),
              std::string::npos)
        << e.what();
  }
  // An empty file, and a directory (which opens, and cannot be read).
  for (const auto& [input, said] :
       {std::pair{std::string("/dev/null"), std::string("/dev/null: is empty (or not a file)")},
        std::pair{std::filesystem::temp_directory_path().string(),
                  "--script " + std::filesystem::temp_directory_path().string() +
                      ": cannot be read: Is a directory"}}) {
    try {
      (void)make_scripted_backend(input);
      FAIL() << input;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

TEST(ScriptedBackend, RooflineAndSaturatingFormulas) {
  ScriptedConfig config = testing::roofline(2.0, 128.0);
  EXPECT_DOUBLE_EQ(config.step_ms(64, 1), 2.0);
  EXPECT_DOUBLE_EQ(config.step_ms(256, 1), 2.0);
  EXPECT_DOUBLE_EQ(config.step_ms(512, 1), 4.0);
  EXPECT_DOUBLE_EQ(config.step_ms(64, 4), 8.0);  // four micro-batches, each paying t0
  config.curve = ScriptedConfig::Curve::saturating;
  config.b0 = 64;
  EXPECT_DOUBLE_EQ(config.step_ms(64, 1), 4.0);
  EXPECT_DOUBLE_EQ(config.step_ms(192, 2), 16.0);
}

TEST(ScriptedBackend, StepsReturnTheFormulaAndMemoryIsThePlan) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0));
  const Plan plan = plan_for(graph, 512);
  const auto session = backend->prepare(graph, plan, SessionOptions{});
  for (int i = 0; i < 3; ++i) {
    const StepResult r = session->step();
    EXPECT_DOUBLE_EQ(r.step_ms, 4.0);
    EXPECT_TRUE(r.finite);
    EXPECT_FALSE(r.skipped);
    EXPECT_TRUE(std::isfinite(r.loss));
  }
  EXPECT_EQ(session->memory().planned_bytes, plan.memory.total_bytes());
  EXPECT_EQ(session->memory().allocated_bytes, plan.memory.total_bytes());
  EXPECT_FALSE(session->memory().device_used_bytes.has_value());
  const auto infer = backend->prepare(graph, plan_for(graph, 8, 1, Mode::infer), SessionOptions{});
  EXPECT_TRUE(std::isnan(infer->step().loss));
}

// A step over a year (a huge batch of a slow script) is an error for its point: no report holds one, and a
// report the tool wrote must be one analyze reads back.
TEST(ScriptedBackend, AStepOverAYearIsAnError) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(1.0, 1e-6));
  const auto ok = backend->prepare(graph, plan_for(graph, 1), SessionOptions{});
  EXPECT_LE(ok->step().step_ms, kLongestStepMs);
  const auto slow = backend->prepare(graph, plan_for(graph, 40000), SessionOptions{});
  try {
    (void)slow->step();
    ADD_FAILURE() << "no error";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("a step of 4e+10 ms at batch 40000 is longer than a year"),
              std::string::npos)
        << e.what();
  }
}

TEST(ScriptedBackend, NoiseIsSeededPerPoint) {
  const Graph graph = tiny_graph();
  const auto backend = make_scripted_backend(testing::roofline(2.0, 128.0, 5.0));
  const auto samples = [&](int64_t batch, int round = 1) {
    SessionOptions options;
    options.round = round;
    const auto session = backend->prepare(graph, plan_for(graph, batch), options);
    std::vector<double> out;
    for (int i = 0; i < 200; ++i) out.push_back(session->step().step_ms);
    return out;
  };
  const auto a = samples(64);
  EXPECT_EQ(a, samples(64));  // the same point gives the same samples whenever it is measured
  EXPECT_NE(a, samples(32));
  // A later round (run --rounds) draws its own, the same whenever that round is measured (also by a resume).
  const auto again = samples(64, 2);
  EXPECT_NE(a, again);
  EXPECT_EQ(again, samples(64, 2));
  EXPECT_NE(again, samples(64, 3));
  double sum = 0, sum_sq = 0;
  for (double v : a) {
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / a.size();
  const double sd = std::sqrt((sum_sq - a.size() * mean * mean) / (a.size() - 1));
  EXPECT_NEAR(mean, 2.0, 0.03);
  EXPECT_NEAR(sd / mean, 0.05, 0.01);
}

TEST(ScriptedBackend, ScriptedFailures) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.oom_above_batch = 64;
  config.nan_at_batch = 16;
  config.skip_every_steps = 3;
  const auto backend = make_scripted_backend(config);
  EXPECT_THROW((void)backend->prepare(graph, plan_for(graph, 65), SessionOptions{}), OutOfMemory);
  EXPECT_NO_THROW((void)backend->prepare(graph, plan_for(graph, 64), SessionOptions{}));

  const auto nan_session = backend->prepare(graph, plan_for(graph, 16), SessionOptions{});
  EXPECT_FALSE(nan_session->step().finite);

  const auto session =
      backend->prepare(graph, plan_for(graph, 8, 1, Mode::train, Precision::fp16), SessionOptions{});
  std::vector<bool> skipped;
  for (int i = 0; i < 6; ++i) skipped.push_back(session->step().skipped);
  EXPECT_EQ(skipped, (std::vector<bool>{false, false, true, false, false, true}));
  // Loss scaling is fp16 training's alone: bf16, fp32 and inference never skip.
  for (const Plan& plan : {plan_for(graph, 8, 1, Mode::train, Precision::bf16), plan_for(graph, 8),
                           plan_for(graph, 8, 1, Mode::infer, Precision::fp16)}) {
    const auto other = backend->prepare(graph, plan, SessionOptions{});
    for (int i = 0; i < 6; ++i) EXPECT_FALSE(other->step().skipped) << i;
  }

  // The device memory and the session's memory limit are enforced at prepare.
  const Plan plan = plan_for(graph, 32);
  SessionOptions limited;
  limited.memory_limit_bytes = plan.memory.total_bytes() - 1;
  EXPECT_THROW((void)backend->prepare(graph, plan, limited), OutOfMemory);
  ScriptedConfig small = testing::roofline();
  small.memory_total_bytes = plan.memory.total_bytes() - 1;
  EXPECT_THROW((void)make_scripted_backend(small)->prepare(graph, plan, SessionOptions{}), OutOfMemory);
}

// Every Nth step of a session stalls by the factor: a tail the mean barely shows. Both keys are checked.
TEST(ScriptedBackend, StallsLengthenEveryNthStep) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.noise_pct = 0;
  config.stall_every_steps = 3;
  config.stall_factor = 4.0;
  const auto session = make_scripted_backend(config)->prepare(graph, plan_for(graph, 8), SessionOptions{});
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) ms.push_back(session->step().step_ms);
  EXPECT_EQ(ms[2], 4.0 * ms[0]);
  EXPECT_EQ(ms[5], 4.0 * ms[0]);
  EXPECT_EQ(ms[1], ms[0]);
  EXPECT_EQ(ms[3], ms[0]);

  const auto doc = nlohmann::json{{"memory_total_bytes", 1000},
                                  {"t0_ms", 1.0},
                                  {"samples_per_ms", 10},
                                  {"stall_every_steps", 25},
                                  {"stall_factor", 1.5}};
  const ScriptedConfig parsed = parse_scripted_config(doc, "s.json");
  EXPECT_EQ(parsed.stall_every_steps, 25);
  EXPECT_EQ(parsed.stall_factor, 1.5);
  auto alone = doc;
  alone.erase("stall_every_steps");
  EXPECT_NE(usage_message(alone).find("stall_factor: needs stall_every_steps"), std::string::npos)
      << usage_message(alone);
  auto one = doc;
  one["stall_factor"] = 1;
  EXPECT_NE(usage_message(one).find("stall_factor: must be above 1, got 1"), std::string::npos)
      << usage_message(one);
  auto zero = doc;
  zero["stall_every_steps"] = 0;
  EXPECT_NE(usage_message(zero).find("stall_every_steps"), std::string::npos) << usage_message(zero);
}

TEST(ScriptedBackend, DriftSlowsEachSessionAfterTheFirst) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.drift_pct = 10;
  const auto backend = make_scripted_backend(config);
  const auto first_step = [&](int64_t batch) {
    return backend->prepare(graph, plan_for(graph, batch), SessionOptions{})->step().step_ms;
  };
  EXPECT_DOUBLE_EQ(first_step(8), 2.0);
  EXPECT_DOUBLE_EQ(first_step(8), 2.2);
  EXPECT_DOUBLE_EQ(first_step(512), 4.0 * 1.2);  // whatever the batch: the device is warmer
  EXPECT_EQ(backend->device(Precision::fp32).details.at("drift_pct"), 10.0);
  EXPECT_FALSE(
      make_scripted_backend(testing::roofline())->device(Precision::fp32).details.contains("drift_pct"));

  const auto doc = nlohmann::json{
      {"memory_total_bytes", 1000}, {"t0_ms", 1.0}, {"samples_per_ms", 10}, {"drift_pct", 2.5}};
  EXPECT_EQ(parse_scripted_config(doc, "s.json").drift_pct, 2.5);
  auto negative = doc;
  negative["drift_pct"] = -1;
  EXPECT_NE(usage_message(negative).find("script.json: drift_pct: must be >= 0, got -1"), std::string::npos)
      << usage_message(negative);
}

TEST(ScriptedBackend, HangSleepsAndReportsHugeNoise) {
  const Graph graph = tiny_graph();
  ScriptedConfig config = testing::roofline();
  config.hang_at_batch = 4;
  const auto backend = make_scripted_backend(config);
  const auto session = backend->prepare(graph, plan_for(graph, 4), SessionOptions{});
  const auto start = std::chrono::steady_clock::now();
  const double first = session->step().step_ms;
  const double second = session->step().step_ms;
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(elapsed_ms, 95.0);
  EXPECT_EQ(first + second, 100.0);
  EXPECT_NE(first, second);
}

}  // namespace
}  // namespace bsw
