// The report's JSON form: exact field names, NaN never written, round trips, and reader errors that name the
// file and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/printers.hpp"
#include "batchsweep/report.hpp"
#include "golden/sample_report.hpp"

namespace bsw {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Runs `f`, expects InputError, returns its message.
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return {};
}

json minimal_doc() {
  return json::parse(R"({"schema_version": 1, "points": [
    {"batch": 1, "status": "ok", "samples_per_second": 100},
    {"batch": 8, "status": "ok", "samples_per_second": 700.5},
    {"batch": 64, "status": "oom", "samples_per_second": 0, "reason": "does not fit"}]})");
}

TEST(ReportJson, TopLevelNames) {
  const json doc = to_json(testing::sample_report());
  for (const char* key : {"schema_version", "tool", "created_at", "command", "device", "settings", "points",
                          "analysis", "warnings"}) {
    EXPECT_TRUE(doc.contains(key)) << key;
  }
  EXPECT_EQ(doc.size(), 9u);
  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(doc["tool"],
            json({{"name", "batchsweep"}, {"version", "0.1.0"}, {"git_commit", "0123456789ab"}}));
  EXPECT_EQ(doc["command"][0], "batchsweep");
  EXPECT_EQ(doc["settings"]["precision"], "bf16");
}

TEST(ReportJson, DeviceMergesDetails) {
  Report r = testing::sample_report();
  r.device.details["name"] = "must not overwrite the device name";
  r.device.peak_flops.reset();
  const json device = to_json(r)["device"];
  EXPECT_EQ(device["backend"], "scripted");
  EXPECT_EQ(device["name"], "Scripted A&B GPU <24 GiB>");
  EXPECT_EQ(device["memory_total_bytes"], 24 * testing::kGiB);
  EXPECT_TRUE(device["peak_flops"].is_null());
  EXPECT_EQ(device["peak_flops_source"], "script");
  EXPECT_EQ(device["sm_count"], 108);
  EXPECT_EQ(device["driver_version"], "555.42");
}

TEST(ReportJson, PointNames) {
  const json doc = to_json(testing::sample_report());
  const json& p = doc["points"][3];  // batch 64, with telemetry
  for (const char* key :
       {"batch", "accumulation", "effective_batch", "status", "reason", "samples_per_second",
        "tokens_per_second", "step_ms", "samples_ms", "tflops", "mfu", "memory", "refinement", "noise_pct",
        "stop_reason", "skipped_steps", "loss", "telemetry", "samples_per_second_ci95_pct"}) {
    EXPECT_TRUE(p.contains(key)) << key;
  }
  EXPECT_EQ(p.size(), 19u);
  EXPECT_TRUE(p["tokens_per_second"].is_null());
  for (const char* key : {"mean", "median", "stddev", "min", "max", "p50", "p90", "p95", "p99"}) {
    EXPECT_TRUE(p["step_ms"][key].is_number()) << key;
  }
  EXPECT_EQ(p["memory"]["planned_bytes"], p["memory"]["measured_bytes"]);
  EXPECT_TRUE(p["memory"]["device_used_bytes"].is_null());
  EXPECT_EQ(p["telemetry"]["power_w"]["mean"], 312.5);
  EXPECT_EQ(p["telemetry"]["sm_clock_mhz"]["min"], 1755.0);
  EXPECT_EQ(p["telemetry"]["throttle_reasons"], json::array({"sw_power_cap"}));
  // Extras are left out when absent.
  const json& oom = doc["points"][7];
  EXPECT_EQ(oom["status"], "oom");
  EXPECT_FALSE(oom.contains("telemetry"));
  EXPECT_FALSE(oom.contains("noise_pct"));
  EXPECT_FALSE(oom.contains("stop_reason"));
  EXPECT_EQ(doc["points"][6]["status"], "over_limit");
}

TEST(ReportJson, AnalysisNames) {
  Report r = testing::sample_report();
  json a = to_json(r)["analysis"];
  EXPECT_EQ(a["knee"], json({{"batch", 64},
                             {"reason", "Kneedle on log2 throughput"},
                             {"confidence", "stable"},
                             {"range_low", nullptr},
                             {"range_high", nullptr}}));
  EXPECT_EQ(a["max_fit"]["batch"], 128);
  EXPECT_EQ(a["best_throughput"]["reason"], "");
  EXPECT_EQ(a["recommended"]["batch"], 64);
  EXPECT_TRUE(a.contains("latency_slo"));
  EXPECT_FALSE(a.contains("energy_optimal"));
  EXPECT_FALSE(a.contains("effective_batch_split"));

  r.analysis = Analysis{};
  a = to_json(r)["analysis"];
  EXPECT_TRUE(a["knee"]["batch"].is_null());
  EXPECT_TRUE(a["saturation"]["batch"].is_null());
  EXPECT_TRUE(a["saturation"]["samples_per_second"].is_null());
  EXPECT_TRUE(a["recommended"]["batch"].is_null());
  EXPECT_FALSE(a.contains("latency_slo"));
}

TEST(ReportJson, NonFiniteBecomesNull) {
  Report r = testing::sample_report();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  r.points[0].samples_per_second = inf;
  r.points[0].step_ms.p99 = nan;
  r.points[0].samples_ms[2] = nan;
  r.points[0].mfu = nan;
  r.points[0].loss = -inf;
  r.device.peak_flops = nan;
  r.settings["weird"] = nan;
  r.device.details["clock"] = inf;
  r.analysis.saturation.samples_per_second = nan;
  const json doc = to_json(r);
  EXPECT_TRUE(doc["points"][0]["samples_per_second"].is_null());
  EXPECT_TRUE(doc["points"][0]["step_ms"]["p99"].is_null());
  EXPECT_TRUE(doc["points"][0]["samples_ms"][2].is_null());
  EXPECT_TRUE(doc["points"][0]["mfu"].is_null());
  EXPECT_TRUE(doc["points"][0]["loss"].is_null());
  EXPECT_TRUE(doc["device"]["peak_flops"].is_null());
  EXPECT_TRUE(doc["device"]["clock"].is_null());
  EXPECT_TRUE(doc["settings"]["weird"].is_null());
  EXPECT_TRUE(doc["analysis"]["saturation"]["samples_per_second"].is_null());
  const std::string text = format_json(r);
  EXPECT_THAT(text, ::testing::Not(HasSubstr("nan")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("inf")));
}

// A number nobody measured is null, never 0: a single sample's spread, a plan that was never made (a
// hand-made report, the PyTorch peer's), a device's unknown memory.
TEST(ReportJson, UnknownNumbersAreNullNotZero) {
  Report r = report_from_json(minimal_doc(), "curve.json");
  r.points[0].samples_ms = {2.5};
  r.points[0].step_ms = {2.5, 2.5, 0.0, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5};
  const json doc = to_json(r);
  EXPECT_TRUE(doc["points"][0]["step_ms"]["stddev"].is_null());
  EXPECT_EQ(doc["points"][0]["step_ms"]["mean"], 2.5);
  EXPECT_TRUE(doc["points"][0]["memory"]["planned_bytes"].is_null());
  EXPECT_TRUE(doc["device"]["memory_total_bytes"].is_null());
  EXPECT_TRUE(doc["created_at"].is_null());
  EXPECT_TRUE(doc["tool"]["version"].is_null());
  EXPECT_TRUE(doc["tool"]["name"].is_null());
  // A price without telemetry: a cost, and no claim that no throttling was seen.
  r.points[1].telemetry.emplace();
  r.points[1].telemetry->cost_per_million_samples = 2.5;
  EXPECT_TRUE(to_json(r)["points"][1]["telemetry"]["throttle_reasons"].is_null());
  r.points[1].telemetry->power_w_mean = 300.0;
  EXPECT_EQ(to_json(r)["points"][1]["telemetry"]["throttle_reasons"], json::array());
  const json sample = to_json(testing::sample_report());
  EXPECT_TRUE(sample["points"][0]["memory"]["planned_bytes"].is_number_unsigned());
  EXPECT_TRUE(sample["points"][0]["step_ms"]["stddev"].is_number());
}

TEST(ReportJson, StateSaysWhetherTheSweepFinished) {
  json doc = minimal_doc();
  EXPECT_FALSE(to_json(report_from_json(doc, "a.json")).contains("state"));  // not said, not invented
  for (const char* state : {"complete", "interrupted", "in_progress"}) {
    doc["state"] = state;
    const Report r = report_from_json(doc, "a.json");
    EXPECT_EQ(r.state, state);
    EXPECT_EQ(to_json(r)["state"], state);
  }
  doc["state"] = "done";
  EXPECT_EQ(input_error([&] { (void)report_from_json(doc, "a.json"); }),
            "a.json: state: \"done\" is not one of complete, interrupted, in_progress");
}

TEST(ReportJson, RoundTrip) {
  Report original = testing::sample_report();
  original.points[3].execution = {{"cuda_graphs", "captured, replayed from step 2"},
                                  {"warnings", json::array({"memory in use before prepare"})}};
  const json doc = to_json(original);
  EXPECT_EQ(doc["points"][3]["execution"]["cuda_graphs"], "captured, replayed from step 2");
  EXPECT_FALSE(doc["points"][2].contains("execution")) << "absent when the backend said nothing";
  const Report back = report_from_json(doc, "sample.json");
  EXPECT_EQ(to_json(back), doc);
  ASSERT_EQ(back.points.size(), original.points.size());
  EXPECT_EQ(back.points[4].refinement, true);
  EXPECT_EQ(back.points[3].telemetry->throttle_reasons, original.points[3].telemetry->throttle_reasons);
  EXPECT_EQ(back.points[3].samples_ms, original.points[3].samples_ms);
  EXPECT_EQ(back.points[7].status, PointStatus::oom);
  EXPECT_EQ(back.points[7].reason, original.points[7].reason);
  EXPECT_EQ(back.points[3].execution, original.points[3].execution);
  EXPECT_EQ(back.device.details["sm_count"], 108);
  EXPECT_FALSE(back.device.details.contains("name"));
  EXPECT_EQ(back.analysis.latency_slo->batch, 64);
  EXPECT_EQ(back.warnings, original.warnings);
  // And through text.
  EXPECT_EQ(to_json(report_from_json(json::parse(format_json(original)), "sample.json")), doc);
}

TEST(ReportJson, RoundsRoundTripWithTheirMeansAndAgreement) {
  Report report = testing::sample_report();
  Point& p = report.points[3];
  const size_t n = p.samples_ms.size();
  ASSERT_GE(n, 4u);
  const int64_t half = static_cast<int64_t>(n / 2);
  p.rounds = {PointRound{half, "noise target", PointStatus::ok, {}},
              PointRound{static_cast<int64_t>(n) - half, "steps of round 1", PointStatus::ok, {}},
              PointRound{0, {}, PointStatus::oom, "another process took the memory"}};
  const json doc = to_json(report);
  const json& rounds = doc["points"][3]["rounds"];
  ASSERT_EQ(rounds.size(), 3u);
  double first = 0;
  for (int64_t i = 0; i < half; ++i) first += p.samples_ms[static_cast<size_t>(i)];
  EXPECT_DOUBLE_EQ(rounds[0]["mean_ms"].get<double>(), first / static_cast<double>(half));
  EXPECT_EQ(rounds[0]["stop_reason"], "noise target");
  EXPECT_EQ(rounds[0]["status"], "ok");
  EXPECT_FALSE(rounds[0].contains("reason"));
  EXPECT_TRUE(rounds[2]["mean_ms"].is_null()) << "a failed round has no steps to average";
  EXPECT_EQ(rounds[2]["status"], "oom");
  EXPECT_EQ(rounds[2]["reason"], "another process took the memory");
  EXPECT_FALSE(rounds[2].contains("stop_reason"));
  const std::optional<RoundsAgreement> agreement = rounds_agreement(p);
  ASSERT_TRUE(agreement);
  EXPECT_DOUBLE_EQ(doc["points"][3]["round_spread_pct"].get<double>(), agreement->spread_pct);
  EXPECT_EQ(doc["points"][3]["rounds_disagree"], agreement->disagree);
  EXPECT_FALSE(doc["points"][2].contains("rounds")) << "a point measured once has none";
  EXPECT_FALSE(doc["points"][2].contains("round_spread_pct"));
  const Report back = report_from_json(doc, "sample.json");
  ASSERT_EQ(back.points[3].rounds.size(), 3u);
  EXPECT_EQ(back.points[3].rounds[1].stop_reason, "steps of round 1");
  EXPECT_EQ(back.points[3].rounds[2].status, PointStatus::oom);
  EXPECT_EQ(to_json(back), doc);
}

TEST(ReportJson, ServingRoundTripsWithItsPercentileNamed) {
  Report report = testing::sample_report();
  AnalysisOptions options;
  options.request_rate = 5000;
  options.latency_percentile = 99.9;
  report.analysis.serving = simulate_serving(report.points, options);
  const json doc = to_json(report);
  const json& s = doc["analysis"]["serving"];
  EXPECT_EQ(s["request_rate"], 5000.0);
  EXPECT_EQ(s["latency_percentile"], 99.9);
  EXPECT_EQ(s["requests"], kServingRequests);
  ASSERT_EQ(s["batches"].size(), 6u);  // the ok batches
  EXPECT_EQ(s["batches"][0]["saturated"], true);
  EXPECT_TRUE(s["batches"][0]["latency_ms"].is_null());
  EXPECT_TRUE(s["batches"][0]["utilization"].is_null());
  EXPECT_TRUE(s["batches"][2]["latency_ms"].contains("p99.9"));
  EXPECT_DOUBLE_EQ(s["batches"][2]["latency_ms"]["p99.9"].get<double>(),
                   *report.analysis.serving->batches[2].latency_ms);
  const Report back = report_from_json(doc, "serving.json");
  ASSERT_TRUE(back.analysis.serving.has_value());
  EXPECT_EQ(back.analysis.serving->best.batch, report.analysis.serving->best.batch);
  EXPECT_EQ(to_json(back), doc);
  json bad = doc;
  bad["analysis"]["serving"]["latency_percentile"] = 99.999;
  EXPECT_EQ(input_error([&] { (void)report_from_json(bad, "a.json"); }),
            "a.json: analysis.serving.latency_percentile: must be a percentile from 50 to 99.99, at most two "
            "decimals (e.g. 95, 99, 99.5, 99.9)");
  bad = doc;
  bad["analysis"]["serving"]["batches"][1]["batch"] = "eight";
  EXPECT_EQ(input_error([&] { (void)report_from_json(bad, "a.json"); }),
            "a.json: analysis.serving.batches[1].batch: expected an integer");
}

TEST(ReportJson, MinimalPointsAreValid) {
  const Report r = report_from_json(minimal_doc(), "curve.json");
  ASSERT_EQ(r.points.size(), 3u);
  EXPECT_EQ(r.points[1].batch, 8);
  EXPECT_EQ(r.points[1].accumulation, 1);
  EXPECT_EQ(r.points[1].effective_batch, 8);
  EXPECT_DOUBLE_EQ(r.points[1].samples_per_second, 700.5);
  EXPECT_TRUE(r.points[1].samples_ms.empty());
  EXPECT_EQ(r.points[2].status, PointStatus::oom);
  EXPECT_EQ(r.points[2].reason, "does not fit");
  EXPECT_FALSE(r.analysis.knee.batch);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ReportJson, PartialStepStatsForLatencyBudgets) {
  json doc = minimal_doc();
  doc["points"][0]["step_ms"] = {{"p99", 3.5}};
  doc["points"][1]["accumulation"] = 4;
  const Report r = report_from_json(doc, "curve.json");
  EXPECT_DOUBLE_EQ(r.points[0].step_ms.p99, 3.5);
  EXPECT_DOUBLE_EQ(r.points[0].step_ms.p50, 0.0);
  EXPECT_EQ(r.points[1].effective_batch, 32);
}

// A report whose points are out of order (hand-merged, or reversed by a script) reads back in run's order:
// by effective batch, then micro-batch, so the table and the CSV read top to bottom.
TEST(ReportJson, PointsReadBackInRunsOrder) {
  json doc = minimal_doc();
  std::reverse(doc["points"].begin(), doc["points"].end());
  const Report r = report_from_json(doc, "b.json");
  ASSERT_GE(r.points.size(), 2u);
  for (std::size_t i = 1; i < r.points.size(); ++i)
    EXPECT_LT(r.points[i - 1].effective_batch, r.points[i].effective_batch) << i;
}

TEST(ReportJson, NullThroughputOnlyForPointsThatDidNotRun) {
  json doc = minimal_doc();
  doc["points"][2]["samples_per_second"] = nullptr;
  EXPECT_DOUBLE_EQ(report_from_json(doc, "b.json").points[2].samples_per_second, 0.0);
  doc["points"][1]["samples_per_second"] = nullptr;
  EXPECT_EQ(input_error([&] { (void)report_from_json(doc, "b.json"); }),
            "b.json: points[1].samples_per_second: expected a number");
}

// The CLI's mode aliases read as the names run writes, so compare holds them to each other.
TEST(ReportJson, ModeAliasesReadAsTheirNames) {
  json doc = minimal_doc();
  doc["settings"] = {{"mode", "inference"}};
  EXPECT_EQ(report_from_json(doc, "a.json").settings["mode"], "infer");
  doc["settings"] = {{"mode", "training"}};
  EXPECT_EQ(report_from_json(doc, "a.json").settings["mode"], "train");
}

TEST(ReportJson, ErrorsNameFileAndField) {
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["points"][2]["samples_per_second"] = "fast"; },
       "b.json: points[2].samples_per_second: expected a number"},
      {[](json& d) { d["points"][0].erase("batch"); }, "b.json: points[0].batch: missing (required)"},
      {[](json& d) { d["points"][1].erase("status"); }, "b.json: points[1].status: missing (required)"},
      {[](json& d) { d["points"][1].erase("samples_per_second"); },
       "b.json: points[1].samples_per_second: missing (required)"},
      {[](json& d) { d["points"][1]["status"] = "great"; },
       "b.json: points[1].status: expected one of \"ok\", \"oom\", \"over_limit\", \"error\""},
      {[](json& d) { d["points"][0]["batch"] = 1.5; }, "b.json: points[0].batch: expected an integer"},
      {[](json& d) { d["points"][0]["batch"] = 0; },
       "b.json: points[0].batch: must be in 1..16777216 (2^24), got 0"},
      {[](json& d) { d["points"][0]["batch"] = int64_t{1} << 40; },
       "b.json: points[0].batch: must be in 1..16777216 (2^24), got 1099511627776"},
      {[](json& d) { d["points"][0]["accumulation"] = -2; },
       "b.json: points[0].accumulation: must be in 1..16777216 (2^24), got -2"},
      // A sweep runs at most 2^24 samples a step (batch x accumulation), so --config-for's global batch (x
      // the world size) cannot overflow.
      {[](json& d) {
         d["points"][0]["batch"] = 1 << 24;
         d["points"][0]["accumulation"] = 2;
       },
       "b.json: points[0].accumulation: batch 16777216 x accumulation 2 is more than 16777216 (2^24) samples "
       "per step, which no sweep runs"},
      // One speed for the analysis, another for the tests: the effective batch is what samples/s counts.
      {[](json& d) {
         d["points"][1]["accumulation"] = 2;
         d["points"][1]["effective_batch"] = 32;
       },
       "b.json: points[1].effective_batch: 32 is not batch 8 x accumulation 2 = 16"},
      {[](json& d) { d["points"][2]["samples_per_second"] = 1000.0; },
       "b.json: points[2].samples_per_second: must be null on a point with status oom (it did not run)"},
      {[](json& d) { d["points"][0]["samples_per_second"] = -1; },
       "b.json: points[0].samples_per_second: must be >= 0"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {1.0, "x"};
       },
       "b.json: points[0].samples_ms[1]: expected a number"},
      {[](json& d) { d["points"][0]["step_ms"] = 3; }, "b.json: points[0].step_ms: expected an object"},
      {[](json& d) {
         d["points"][0]["step_ms"] = {{"p99", true}};
       },
       "b.json: points[0].step_ms.p99: expected a number"},
      {[](json& d) {
         d["points"][0]["memory"] = {{"planned_bytes", -5}};
       },
       "b.json: points[0].memory.planned_bytes: expected a non-negative integer (bytes)"},
      {[](json& d) { d["points"][0]["refinement"] = "yes"; },
       "b.json: points[0].refinement: expected true or false"},
      {[](json& d) {
         d["points"][0]["telemetry"] = {{"power_w", {{"mean", "hot"}}}};
       },
       "b.json: points[0].telemetry.power_w.mean: expected a number"},
      {[](json& d) { d["points"][0] = 7; }, "b.json: points[0]: expected an object"},
      {[](json& d) { d["points"] = json::object(); }, "b.json: points: expected an array"},
      {[](json& d) { d["points"][2]["batch"] = 1; },
       "b.json: points[2]: batch 1 is also points[0]; a report holds one point per batch and accumulation"},
      {[](json& d) {
         d["points"][1]["accumulation"] = 4;
         d["points"][2]["batch"] = 8;
         d["points"][2]["accumulation"] = 4;
       },
       "b.json: points[2]: batch 8x4 is also points[1]; a report holds one point per batch and accumulation"},
      {[](json& d) { d.erase("points"); }, "b.json: points: missing (required)"},
      {[](json& d) {
         d["analysis"] = {{"knee", {{"batch", "64"}}}};
       },
       "b.json: analysis.knee.batch: expected an integer"},
      {[](json& d) {
         d["analysis"] = {{"recommended", {{"why", 3}}}};
       },
       "b.json: analysis.recommended.why: expected a string"},
      {[](json& d) {
         d["warnings"] = {"ok", 3};
       },
       "b.json: warnings[1]: expected a string"},
      {[](json& d) {
         d["device"] = {{"memory_total_bytes", "lots"}};
       },
       "b.json: device.memory_total_bytes: expected a non-negative integer (bytes)"},
      {[](json& d) { d["settings"] = "fast"; }, "b.json: settings: expected an object"},
      // Hand-edited numbers that would pass the throughput check or print as valid (an adversarial walk).
      {[](json& d) {
         d["points"][0]["samples_ms"] = {0.0, 0.0, 0.0};
       },
       "b.json: points[0].samples_ms[0]: a timed step must take 1e-09 to 3.2e+10 ms, got 0"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {1e-310, 1e-310};
       },
       "b.json: points[0].samples_ms[0]: a timed step must take 1e-09 to 3.2e+10 ms, got 1e-310"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {1.7e308, 1.7e308};
       },
       "b.json: points[0].samples_ms[0]: a timed step must take 1e-09 to 3.2e+10 ms, got 1.7e+308"},
      {[](json& d) {
         d["points"][0]["step_ms"] = {{"mean", 1e-310}};
       },
       "b.json: points[0].step_ms.mean: a step time must be 1e-09 to 3.2e+10 ms (or null), got 1e-310"},
      {[](json& d) { d["points"][0]["mfu"] = -1; }, "b.json: points[0].mfu: must be >= 0, got -1"},
      {[](json& d) { d["points"][0]["tflops"] = -1; }, "b.json: points[0].tflops: must be >= 0, got -1"},
      {[](json& d) { d["points"][0]["noise_pct"] = -1; },
       "b.json: points[0].noise_pct: must be >= 0, got -1"},
      {[](json& d) { d["points"][0]["tokens_per_second"] = -1; },
       "b.json: points[0].tokens_per_second: must be >= 0, got -1"},
      {[](json& d) {
         d["points"][0]["host"] = {{"wall_s", -1}};
       },
       "b.json: points[0].host.wall_s: must be >= 0, got -1"},
      {[](json& d) {
         d["points"][0]["host"] = {{"steal_pct", 500}};
       },
       "b.json: points[0].host.steal_pct: must be at most 100, got 500"},
      {[](json& d) {
         d["points"][0]["host"] = {{"cpus", -2}};
       },
       "b.json: points[0].host.cpus: must be in 0..1048576, got -2"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {9.9, 10.0, 10.1};
         d["points"][0]["rounds"] = json::array({{{"steps", 2}}, {{"steps", 5}}});
       },
       "b.json: points[0].rounds[1].steps: must be in 0..3 (the point's samples_ms), got 5"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {9.9, 10.0, 10.1};
         d["points"][0]["rounds"] = json::array({{{"steps", 2}}});
       },
       "b.json: points[0].rounds: its rounds' steps add up to 2, but the point has 3 samples_ms"},
      {[](json& d) {
         d["points"][0]["samples_ms"] = {9.9, 10.0, 10.1};
         d["points"][0]["rounds"] = json::array({{{"steps", 2}}, {{"steps", 1}, {"status", "oom"}}});
       },
       "b.json: points[0].rounds[1].steps: a round that failed (oom) added no steps, got 1"},
      {[](json& d) { d["points"][0]["rounds"] = 2; },
       "b.json: points[0].rounds: expected an array of rounds"},
      {[](json& d) {
         d["points"][2]["rounds"] = json::array({{{"steps", 0}}});
       },
       "b.json: points[2].rounds: only an ok point has rounds; this one is oom"},
      {[](json& d) {
         d["points"][0]["rounds"] = json::array({{{"steps", "many"}}});
       },
       "b.json: points[0].rounds[0].steps: expected an integer"},
      {[](json& d) {
         d["settings"] = {{"rounds", 0}};
       },
       "b.json: settings.rounds: must be in 1..100, got 0"},
      {[](json& d) {
         d["settings"] = {{"mode", 1}};
       },
       "b.json: settings.mode: 1 is not train or infer"},
      {[](json& d) {
         d["settings"] = {{"mode", "INFER"}};
       },
       "b.json: settings.mode: \"INFER\" is not train or infer"},
      {[](json& d) {
         d["settings"] = {{"precision", "fp8"}};
       },
       "b.json: settings.precision: \"fp8\" is not fp32, tf32, fp16 or bf16"},
      {[](json& d) {
         d["settings"] = {{"accumulation", 0}};
       },
       "b.json: settings.accumulation: must be in 1..16777216 (2^24), got 0"},
      {[](json& d) {
         d["settings"] = {{"world_size", 0}};
       },
       "b.json: settings.world_size: must be in 1..1048576 (2^20, as --world-size takes), got 0"},
      {[](json& d) {
         d["settings"] = {{"world_size", 8.5}};
       },
       "b.json: settings.world_size: expected an integer"},
      {[](json& d) {
         d["settings"] = {{"effective_batch", 512}};
       },
       "b.json: settings.effective_batch: 512 is not the effective batch of the point at batch 1 (1): a "
       "report "
       "of --effective-batch N holds the splits of N alone"},
      {[](json& d) {
         d["settings"] = {{"latency_slo_ms", 1e-310}};
       },
       "b.json: settings.latency_slo_ms: must be a positive number of ms, got 1e-310"},
      {[](json& d) { d["schema_version"] = 2; },
       "b.json: schema_version 2 is not supported (this batchsweep reads 1)"},
      {[](json& d) { d["schema_version"] = "1"; }, "b.json: schema_version: expected an integer"},
      {[](json& d) { d.erase("schema_version"); },
       "b.json: schema_version: missing (required): is this a batchsweep report?"},
      {[](json& d) { d = json::array(); }, "b.json: expected a JSON object (a batchsweep report)"},
  };
  for (const auto& c : cases) {
    json doc = minimal_doc();
    c.edit(doc);
    EXPECT_EQ(input_error([&] { (void)report_from_json(doc, "b.json"); }), c.message);
  }
}

// Replaces random nodes of a real report with values of other types: the reader either accepts the document
// or throws InputError, never anything else (no nlohmann type_error, no crash).
TEST(ReportJson, MutatedDocumentsOnlyThrowInputError) {
  const json original = to_json(testing::sample_report());
  std::vector<json::json_pointer> pointers;
  const json flat = original.flatten();
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    json::json_pointer leaf(it.key());
    pointers.push_back(leaf);
    if (!leaf.empty()) pointers.push_back(leaf.parent_pointer());
  }
  const json replacements[] = {nullptr,        true,  -1,   1.5,          "x", json::array(),
                               json::object(), 1e308, -0.0, uint64_t(-1), 0,   json::array({1, "a"})};
  std::mt19937 rng(20240601);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    json doc = original;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const auto& where = pointers[rng() % pointers.size()];
      if (where.empty() || !doc.contains(where)) continue;
      doc[where] = replacements[rng() % std::size(replacements)];
    }
    try {
      (void)report_from_json(doc, "fuzz.json");
      ++accepted;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith("fuzz.json: "));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected " << e.what() << " for " << doc.dump();
      break;
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(ReportJson, PointStatusNames) {
  EXPECT_EQ(to_string(PointStatus::ok), "ok");
  EXPECT_EQ(to_string(PointStatus::oom), "oom");
  EXPECT_EQ(to_string(PointStatus::over_limit), "over_limit");
  EXPECT_EQ(to_string(PointStatus::error), "error");
}

TEST(ReportJson, InvalidUtf8DoesNotThrowWhenPrinted) {
  Report r = testing::sample_report();
  r.warnings.push_back(std::string("bad byte \xff here"));
  std::string text;
  ASSERT_NO_THROW(text = format_json(r));
  const nlohmann::json doc = nlohmann::json::parse(text);
  bool replaced = false;
  for (const auto& w : doc["warnings"])
    replaced = replaced || w.get<std::string>() == "bad byte \xEF\xBF\xBD here";  // U+FFFD for the bad byte
  EXPECT_TRUE(replaced) << doc["warnings"].dump();
}

// A JSON tool may write 8 as 8.0: read back, it is the integer 8 where the settings are used (--config-for's
// world size took only an integer, and dropped 8.0 without a word: a config for 1 GPU).
TEST(ReportJson, IntegralSettingsWrittenAsFloatsReadAsIntegers) {
  json doc = minimal_doc();
  doc["settings"] = {{"world_size", 8.0}, {"accumulation", 1.0}};
  const Report r = report_from_json(doc, "b.json");
  EXPECT_TRUE(r.settings["world_size"].is_number_integer());
  EXPECT_EQ(r.settings["world_size"], 8);
  EXPECT_TRUE(r.settings["accumulation"].is_number_integer());
  // The blocks checkpointed and the memory edge past the timed points, too: 4.0 read as "all" blocks, and an
  // untimed fit of 2048.0 as none.
  doc["settings"] = {{"checkpointing", true},
                     {"checkpoint_blocks", 4.0},
                     {"untimed_fit", {{"batch", 2048.0}, {"reason", "oom at 2056"}}}};
  const Report c = report_from_json(doc, "c.json");
  EXPECT_TRUE(c.settings["checkpoint_blocks"].is_number_integer());
  EXPECT_EQ(c.settings["checkpoint_blocks"], 4);
  EXPECT_TRUE(c.settings["untimed_fit"]["batch"].is_number_integer());
  EXPECT_EQ(c.settings["untimed_fit"]["batch"], 2048);
  doc["settings"]["checkpoint_blocks"] = 0;
  try {
    (void)report_from_json(doc, "d.json");
    ADD_FAILURE() << "checkpoint_blocks 0 was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("settings.checkpoint_blocks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bsw
