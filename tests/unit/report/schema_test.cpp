// The published JSON Schema (configs/schema/report-v1.schema.json) against what the writer writes: a report
// is validated by tests/validate_schema.py (python3 + jsonschema), skipped with the reason when those are
// missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "batchsweep/compare.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/printers.hpp"
#include "golden/sample_report.hpp"
#include "schema_support.hpp"

namespace bsw {
namespace {

namespace fs = std::filesystem;

class Schema : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::python_with_jsonschema().empty()) GTEST_SKIP() << testing::kNoJsonschema;
  }

  // 0 when valid, 1 when not (errors on stderr).
  static int validate(const Report& report, const std::string& name) {
    const fs::path file =
        fs::temp_directory_path() / ("bsw_schema_" + std::to_string(::getpid()) + "_" + name);
    write_file_atomic(file.string(), format_json(report));
    const int rc = testing::validate_report_file(file);
    fs::remove(file);
    return rc;
  }
};

TEST_F(Schema, SampleReportIsValid) {
  EXPECT_EQ(validate(testing::sample_report(), "sample.json"), 0);
}

TEST_F(Schema, BareReportIsValid) {
  Report r;
  Point p;
  p.batch = 1;
  p.effective_batch = 1;
  p.samples_per_second = std::nan("");
  p.status = PointStatus::error;  // a point that did not run: no throughput (null)
  r.points.push_back(p);
  EXPECT_EQ(validate(r, "bare.json"), 0);
  // An ok point ran: its throughput is a positive number, never null or 0.
  r.points[0].status = PointStatus::ok;
  EXPECT_NE(validate(r, "nan-ok.json"), 0);
  r.points[0].samples_per_second = 0;
  EXPECT_NE(validate(r, "zero-ok.json"), 0);
  r.points[0].samples_per_second = 10;
  EXPECT_EQ(validate(r, "ok.json"), 0);
}

TEST_F(Schema, EveryOptionalSectionIsValid) {
  Report r = testing::sample_report();
  r.analysis.energy_optimal = BatchChoice{16, 8000.0, "fewest joules per sample"};
  r.analysis.effective_batch_split = BatchChoice{64, std::nullopt, "64 x 1"};
  r.analysis.knee.confidence = "range";
  r.analysis.knee.range_low = 16;
  r.analysis.knee.range_high = 96;
  r.points[0].tokens_per_second = 1e5;
  r.points[0].memory.device_used_bytes = 12345;
  r.points[1].status = PointStatus::error;
  r.points[1].reason = "loss is NaN";
  // run --rounds: two rounds of steps and one that failed.
  Point& rounds = r.points[3];
  const auto half = static_cast<int64_t>(rounds.samples_ms.size() / 2);
  rounds.rounds = {
      PointRound{half, "noise target", PointStatus::ok, {}},
      PointRound{
          static_cast<int64_t>(rounds.samples_ms.size()) - half, "steps of round 1", PointStatus::ok, {}},
      PointRound{0, {}, PointStatus::oom, "out of memory"}};
  r.settings["rounds"] = 3;
  EXPECT_EQ(validate(r, "full.json"), 0);
}

// compare --json against configs/schema/compare-v1.schema.json: verdicts, an oom cell, a lost fit, a
// recommendation with accumulation, a latency budget and the gate, as compare_command adds it.
TEST_F(Schema, CompareJsonIsValid) {
  Report a = testing::sample_report();
  a.analysis.recommended_accumulation = 2;
  Report b = testing::sample_candidate();
  for (Point& p : b.points)
    if (p.batch == 128) {
      p.status = PointStatus::oom;
      p.samples_per_second = 0;
      p.samples_ms.clear();
    }
  CompareOptions options;
  options.names = {"a.json", "b.json"};
  const CompareResult result = compare_reports({a, b}, options);
  nlohmann::json doc = to_json(result);
  doc["kind"] = "compare";
  doc["schema_version"] = 1;
  doc["tool"] = {{"name", "batchsweep"}, {"version", "0.1.0"}, {"git_commit", "abc123"}};
  doc["created_at"] = "2026-12-03T05:00:00Z";
  doc["command"] = {"batchsweep", "compare", "a.json", "b.json"};
  const std::vector<Regression> found = find_regressions(result, 5.0);
  ASSERT_FALSE(found.empty());
  doc["gate"] = {{"fail_on_regression_pct", 5.0},
                 {"passed", false},
                 {"regressions", regressions(result, 5.0)},
                 {"findings", regressions_json(result, found)}};
  const fs::path file =
      fs::temp_directory_path() / ("bsw_schema_" + std::to_string(::getpid()) + "_cmp.json");
  write_file_atomic(file.string(), doc.dump(2));
  EXPECT_EQ(testing::validate_file("compare-v1.schema.json", file), 0) << doc.dump(2);
  // And it catches a wrong one.
  doc["rows"][0]["deltas"][0]["verdict"] = "better";
  write_file_atomic(file.string(), doc.dump(2));
  EXPECT_EQ(testing::validate_file("compare-v1.schema.json", file), 1);
  fs::remove(file);
}

TEST_F(Schema, CatchesAWrongDocument) {
  Report r = testing::sample_report();
  r.points[0].batch = 0;  // the schema says minimum 1
  EXPECT_EQ(validate(r, "wrong.json"), 1);
}

}  // namespace
}  // namespace bsw
