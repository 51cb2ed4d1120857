// Golden tests: every printer's output for the fixed report in sample_report.hpp, compared byte for byte with
// the files in tests/golden/data/. After an intended change to a printer, regenerate them with
//   BSW_UPDATE_GOLDEN=1 build/tests/test_golden
// and review the diff (git diff tests/golden/data) before committing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "batchsweep/analysis.hpp"
#include "batchsweep/compare.hpp"
#include "batchsweep/printers.hpp"
#include "golden/sample_report.hpp"

namespace {

std::filesystem::path golden_path(const std::string& name) {
  return std::filesystem::path(BSW_TEST_DATA) / "golden" / "data" / name;
}

bool updating() {
  const char* env = std::getenv("BSW_UPDATE_GOLDEN");
  return env && std::string(env) == "1";
}

void expect_golden(const std::string& name, const std::string& actual) {
  const auto path = golden_path(name);
  if (updating()) {
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; run with BSW_UPDATE_GOLDEN=1 to create it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(expected.str(), actual) << name << " differs from " << path
                                    << "; if the change is intended, rerun with BSW_UPDATE_GOLDEN=1";
}

TEST(Golden, Console) {
  expect_golden("console.txt", bsw::format_console(bsw::testing::sample_report(), {.color = false}));
}

TEST(Golden, ConsoleColor) {
  expect_golden("console-color.txt", bsw::format_console(bsw::testing::sample_report(), {.color = true}));
}

TEST(Golden, Markdown) {
  expect_golden("report.md", bsw::format_markdown(bsw::testing::sample_report()));
}

TEST(Golden, Csv) {
  expect_golden("report.csv", bsw::format_csv(bsw::testing::sample_report()));
}

TEST(Golden, Svg) {
  expect_golden("report.svg", bsw::format_svg(bsw::testing::sample_report()));
}

TEST(Golden, Json) {
  expect_golden("report.json", bsw::format_json(bsw::testing::sample_report()));
}

// The sample report as run --rounds 2 would hold it: each ok point's steps split into two rounds, and the
// warning the runner gives where they disagree.
bsw::Report rounds_report() {
  bsw::Report r = bsw::testing::sample_report();
  r.settings["rounds"] = 2;
  for (bsw::Point& p : r.points) {
    if (p.status != bsw::PointStatus::ok || p.samples_ms.size() < 2) continue;
    const auto half = static_cast<int64_t>(p.samples_ms.size() / 2);
    p.rounds = {
        bsw::PointRound{half, "noise target", bsw::PointStatus::ok, {}},
        bsw::PointRound{
            static_cast<int64_t>(p.samples_ms.size()) - half, "steps of round 1", bsw::PointStatus::ok, {}}};
  }
  return r;
}

TEST(Golden, ConsoleRounds) {
  expect_golden("console-rounds.txt", bsw::format_console(rounds_report(), {.color = false}));
}

TEST(Golden, CsvRounds) {
  expect_golden("report-rounds.csv", bsw::format_csv(rounds_report()));
}

// The sample report as an inference sweep with run --request-rate 5000 --max-queue-delay 0.5 would hold it:
// the serving table (batches 1 and 4 saturate) and its answer as the recommendation (the smallest max batch
// within 2% of the lowest latency).
bsw::Report serving_report() {
  bsw::Report r = bsw::testing::sample_report();
  r.settings["mode"] = "infer";
  r.settings["request_rate"] = 5000;
  r.settings["max_queue_delay_ms"] = 0.5;
  r.settings.erase("latency_slo_ms");  // a budget would hold the requests' latency: none here
  r.analysis.latency_slo.reset();
  bsw::AnalysisOptions options;
  options.request_rate = 5000;
  options.max_queue_delay_ms = 0.5;
  r.analysis.serving = bsw::simulate_serving(r.points, options);
  r.analysis.recommended = {r.analysis.serving->best.batch, r.analysis.serving->best.reason};
  return r;
}

TEST(Golden, ConsoleServing) {
  expect_golden("console-serving.txt", bsw::format_console(serving_report(), {.color = false}));
}

TEST(Golden, MarkdownServing) {
  expect_golden("report-serving.md", bsw::format_markdown(serving_report()));
}

// The serving columns: the rate on every row, each max batch's figures on its row, the best marked.
TEST(Golden, CsvServing) {
  expect_golden("report-serving.csv", bsw::format_csv(serving_report()));
}

TEST(Golden, Compare) {
  bsw::CompareOptions options;
  options.names = {"a100.json", "h100.json"};
  const auto result =
      bsw::compare_reports({bsw::testing::sample_report(), bsw::testing::sample_candidate()}, options);
  expect_golden("compare.txt", bsw::format_compare(result, false));
}

}  // namespace
