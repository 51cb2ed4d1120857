// The printers beyond their golden files: human units, which columns appear, color on and off, CSV quoting
// and its agreement with the JSON names, markdown and SVG escaping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/printers.hpp"
#include "golden/sample_report.hpp"
#include "report/format.hpp"
#include "report/view.hpp"

namespace bsw {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace rf = report_format;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Splits one CSV record (RFC 4180, no embedded newlines in this test data).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

void flatten_keys(const nlohmann::json& doc, const std::string& prefix, std::set<std::string>& out) {
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      flatten_keys(*it, key, out);
    } else {
      out.insert(key);
    }
  }
}

TEST(Format, SignificantDigits) {
  EXPECT_EQ(rf::sig3(0.98123), "0.981");
  EXPECT_EQ(rf::sig3(12.345), "12.3");
  EXPECT_EQ(rf::sig3(123.4), "123");
  EXPECT_EQ(rf::sig3(1235.6), "1236");
  EXPECT_EQ(rf::sig3(9.996), "10.0");
  EXPECT_EQ(rf::sig3(0.0), "0");
  EXPECT_EQ(rf::sig3(-0.0001234), "-0.000123");
  // Under a millionth, scientific: a measured TFLOP/s of hour-long steps is not "0".
  EXPECT_EQ(rf::sig3(1.4e-10), "1.4e-10");
  EXPECT_EQ(rf::sig3(-2.345e-8), "-2.35e-08");
  EXPECT_EQ(rf::sig3(0.000001234), "0.00000123");
  EXPECT_EQ(rf::sig3(std::nan("")), "\u2014");
  EXPECT_EQ(rf::fixed(-0.01, 1), "0.0");
}

// A recommended cost is worded as serving's (per million requests served) only where it is the price over
// the request rate: a report analyzed before that rule holds the price over the batch's throughput.
TEST(Format, AServingCostIsToldByItsValue) {
  // 3.6 USD an hour at 400 requests/s: 2.5 USD a million requests.
  EXPECT_TRUE(report_format::is_serving_cost(2.5, 3.6, 400));
  EXPECT_FALSE(report_format::is_serving_cost(0.5, 3.6, 400));  // the price over 2000 samples/s
  EXPECT_FALSE(report_format::is_serving_cost(2.5, std::nullopt, 400));
  EXPECT_FALSE(report_format::is_serving_cost(2.5, 3.6, 0));
}

TEST(Format, HumanRates) {
  EXPECT_EQ(rf::human_rate(950), "950");
  EXPECT_EQ(rf::human_rate(999.7), "1.00k");
  EXPECT_EQ(rf::human_rate(12345), "12.3k");
  EXPECT_EQ(rf::human_rate(1.234e6), "1.23M");
  EXPECT_EQ(rf::human_rate(4.56e9), "4.56G");
  EXPECT_EQ(rf::human_rate(9.5), "9.50");
  EXPECT_EQ(rf::human_rate(999e12), "999T");
  EXPECT_EQ(rf::human_rate(5.73e16), "57.3P");  // a plan's FLOP per step at a large batch
  EXPECT_EQ(rf::human_rate(1.2e18), "1.20E");
  EXPECT_EQ(rf::human_rate(2e306), "2e+306");  // past the last prefix
}

TEST(Format, HumanBytes) {
  EXPECT_EQ(rf::human_bytes(512), "512 B");
  EXPECT_EQ(rf::human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(rf::human_bytes(uint64_t{1} << 30), "1.00 GiB");
  EXPECT_EQ(rf::human_bytes(static_cast<uint64_t>(1.23 * (uint64_t{1} << 30))), "1.23 GiB");
  EXPECT_EQ(rf::human_bytes((uint64_t{1} << 30) - 1), "1.00 GiB");
  EXPECT_EQ(rf::human_bytes(80 * (uint64_t{1} << 30)), "80.0 GiB");
}

TEST(Format, TableAlignsByDisplayWidth) {
  rf::TextTable t{{"a", "mark", "end"}, {rf::Align::right, rf::Align::left, rf::Align::left}, {}};
  t.rows = {{"1", "\u25c0 knee", "x"}, {"100", "", "long last column"}};
  const auto lines = rf::render_lines(t);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "  a  mark    end");
  EXPECT_EQ(lines[1], "  1  \u25c0 knee  x");
  EXPECT_EQ(lines[2], "100          long last column");
}

// What the auto search or --effective-batch left out is said with the analysis, not only in the JSON.
TEST(Console, SaysHowTheSearchChoseItsPoints) {
  Report r = testing::sample_report();
  EXPECT_THAT(format_console(r, {false}), Not(HasSubstr("search:")));
  r.settings["search"] = "effective batch 256: 3 of 9 splits (micro-batch x accumulation) measured";
  const std::string text = format_console(r, {false});
  EXPECT_THAT(text, HasSubstr("\nsearch: effective batch 256: 3 of 9 splits (micro-batch x accumulation) "
                              "measured\nknee: "));
  EXPECT_THAT(format_markdown(r), HasSubstr("- **search**: effective batch 256: 3 of 9 splits"));
}

// A sweep that did not finish says so before its table, so the partial table does not read as the answer.
TEST(Console, AnUnfinishedSweepSaysSoFirst) {
  Report r = testing::sample_report();
  EXPECT_THAT(format_console(r, {false}), Not(HasSubstr("before the sweep finished")));
  r.state = "interrupted";
  EXPECT_THAT(format_console(r, {false}),
              HasSubstr("\n\ninterrupted before the sweep finished (state interrupted): the table and the "
                        "analysis cover only the batches it measured\n\nbatch "));
  EXPECT_THAT(format_markdown(r), HasSubstr("**interrupted before the sweep finished (state interrupted)"));
  r.state = "in_progress";
  EXPECT_THAT(format_console(r, {false}), HasSubstr("written while the sweep ran (state in_progress)"));
}

TEST(Console, NoEscapeCodesWithoutColor) {
  const std::string text = format_console(testing::sample_report(), {.color = false});
  EXPECT_THAT(text, Not(HasSubstr("\x1b[")));
  EXPECT_THAT(text, HasSubstr("\u25c0 knee"));
  EXPECT_THAT(text, HasSubstr("96*"));
  EXPECT_THAT(text, HasSubstr("oom: cudaMalloc failed"));
  EXPECT_THAT(text, HasSubstr("recommended: batch 64"));
  EXPECT_THAT(text, HasSubstr("warning: knee found next to the sweep's edge"));
}

TEST(Console, ColorDimsRowsThatDidNotRun) {
  const std::string text = format_console(testing::sample_report(), {.color = true});
  bool dimmed_oom = false, bold_knee = false;
  for (const auto& line : lines_of(text)) {
    if (line.find("oom: ") != std::string::npos) dimmed_oom = line.rfind("\x1b[2m", 0) == 0;
    if (line.find("\u25c0 knee sat") != std::string::npos) bold_knee = line.rfind("\x1b[1m", 0) == 0;
  }
  EXPECT_TRUE(dimmed_oom);
  EXPECT_TRUE(bold_knee);
}

TEST(Console, OnlyColumnsThatCarryInformation) {
  Report r = testing::sample_report();
  std::string header = lines_of(format_console(r, {}))[2];
  EXPECT_THAT(header, Not(HasSubstr("accum")));
  EXPECT_THAT(header, Not(HasSubstr("tokens/s")));
  EXPECT_THAT(header, HasSubstr("MFU %"));
  EXPECT_THAT(header, HasSubstr("status"));

  r.points.resize(4);  // all ok, accumulation 2 on one, tokens known, MFU not known
  r.points[1].accumulation = 2;
  r.points[1].effective_batch = 8;
  for (auto& p : r.points) {
    p.mfu.reset();
    p.tokens_per_second = p.samples_per_second * 128;
  }
  header = lines_of(format_console(r, {}))[2];
  EXPECT_THAT(header, HasSubstr("accum"));
  EXPECT_THAT(header, HasSubstr("eff batch"));
  EXPECT_THAT(header, HasSubstr("tokens/s"));
  EXPECT_THAT(header, Not(HasSubstr("MFU")));
  EXPECT_THAT(header, Not(HasSubstr("status")));
}

// A hand-made report that gives p99 and no p50 (what `analyze` reads): the missing figure is absent, as in
// the JSON's null, not 0.
TEST(Console, AMissingPercentileIsAbsentNotZero) {
  Report r = testing::sample_report();
  r.points.resize(2);
  for (Point& p : r.points) {
    p.step_ms = {};
    p.step_ms.p99 = 2.0;
  }
  const std::vector<std::string> console = lines_of(format_console(r, {}));
  ASSERT_THAT(console[2], HasSubstr("p50 ms"));
  EXPECT_THAT(console[3], HasSubstr("—"));
  EXPECT_THAT(console[3], HasSubstr("2.00"));
  EXPECT_THAT(console[3], Not(HasSubstr(" 0 ")));
  EXPECT_THAT(format_markdown(r), HasSubstr("| — | 2.00 |"));
}

// Next to a latency budget, the budget's percentile gets the digits that keep it on its side: a p99 of 2.0223
// ms against 2.022 reads "2.0223", not "2.02" (under the budget at a glance); elsewhere three digits.
TEST(Console, ABudgetsPercentileIsNotRoundedOntoTheOtherSide) {
  Report r = testing::sample_report();
  r.points.resize(2);
  r.points[0].step_ms.p99 = 2.0223;
  r.points[1].step_ms.p99 = 2.0219;
  r.settings["latency_slo_ms"] = 2.022;
  const std::string console = format_console(r, {});
  EXPECT_THAT(console, HasSubstr(" 2.0223 "));
  EXPECT_THAT(console, HasSubstr(" 2.02 "));  // 2.0219 is under it, as "2.02" reads
  EXPECT_THAT(format_markdown(r), HasSubstr("| 2.0223 |"));
  r.points[0].step_ms.p99 = 0.5904325;  // never fewer digits than three: not "0.6" against 0.5904
  r.settings["latency_slo_ms"] = 0.5904;
  EXPECT_THAT(format_console(r, {}), HasSubstr(" 0.59043 "));
  r.points[0].step_ms.p99 = 4.04656;
  r.settings["latency_slo_ms"] = 4.047;
  EXPECT_THAT(format_console(r, {}), HasSubstr(" 4.047 "));
  r.points[0].step_ms.p99 = 2.0220000000000002;  // over by a hair: still reads as over
  r.settings["latency_slo_ms"] = 2.022;
  EXPECT_THAT(format_console(r, {}), HasSubstr(" 2.022000001 "));
  r.points[0].step_ms.p99 = 12345.4;  // more decimals, never an exponent
  r.settings["latency_slo_ms"] = 12345.3;
  EXPECT_THAT(format_console(r, {}), HasSubstr(" 12345.4 "));
  r.points[0].step_ms.p99 = 2.0223;
  r.settings["latency_slo_ms"] = 2.022;
  r.settings["latency_percentile"] = 95;  // the p99 column is not the budget's then
  EXPECT_THAT(format_console(r, {}), Not(HasSubstr("2.0223")));
  r.settings.erase("latency_slo_ms");
  r.settings.erase("latency_percentile");
  EXPECT_THAT(format_console(r, {}), Not(HasSubstr("2.0223")));
}

TEST(Console, EmptyReport) {
  Report r;
  EXPECT_EQ(format_console(r, {}), "no points measured\n");
  EXPECT_THAT(format_markdown(r), HasSubstr("No points measured."));
  EXPECT_THAT(format_svg(r), HasSubstr("no points measured"));
  EXPECT_EQ(lines_of(format_csv(r)).size(), 1u);
}

TEST(Console, KneeRange) {
  Report r = testing::sample_report();
  r.analysis.knee.confidence = "range";
  r.analysis.knee.range_low = 16;
  r.analysis.knee.range_high = 96;
  EXPECT_THAT(format_console(r, {}), HasSubstr("knee: batch 64 (range 16\u201396)"));
  // A knee that never moves under noise, only vanishes sometimes: no "range 64-64".
  r.analysis.knee.range_low = 64;
  r.analysis.knee.range_high = 64;
  EXPECT_THAT(format_console(r, {}), HasSubstr("knee: batch 64 (not stable)"));
}

TEST(Csv, HeaderIsTheJsonNames) {
  const Report r = testing::sample_report();
  const auto lines = lines_of(format_csv(r));
  ASSERT_EQ(lines.size(), r.points.size() + 1);
  const auto header = csv_fields(lines[0]);
  EXPECT_EQ(header[0], "batch");
  // Every leaf of the richest point's JSON is a column, and nothing else is (raw samples left out).
  std::set<std::string> keys;
  flatten_keys(to_json(r)["points"][3], "", keys);
  keys.insert("resumed_from");  // only on points taken by --resume
  // Only on points the cpu and cuda backends timed (the sample is a scripted run's).
  const std::vector<std::string> host = {"host.wall_s",       "host.cpu_s",     "host.cpus",
                                         "host.others_cores", "host.steal_pct", "host.waited_s"};
  keys.insert(host.begin(), host.end());
  // Only on points of a run --rounds sweep: the rounds' means (not their objects), their spread.
  const std::vector<std::string> rounds = {"rounds.mean_ms", "round_spread_pct", "rounds_disagree"};
  keys.insert(rounds.begin(), rounds.end());
  keys.erase("samples_ms");
  // Then the run's context, the same on every row (run.checkpointing and run.model_overrides added after the
  // others).
  const std::vector<std::string> context = {
      "run.model",           "run.device",           "run.backend", "run.mode",
      "run.precision",       "run.created_at",       "run.state",   "run.checkpointing",
      "run.model_overrides", "run.checkpoint_blocks"};
  // Last, the serving columns (analysis.serving), empty without a request rate.
  const std::vector<std::string> serving = {"serving.request_rate",
                                            "serving.max_queue_delay_ms",
                                            "serving.latency_percentile",
                                            "serving.capacity_per_second",
                                            "serving.saturated",
                                            "serving.utilization",
                                            "serving.mean_batch",
                                            "serving.latency_mean_ms",
                                            "serving.latency_p50_ms",
                                            "serving.latency_ms",
                                            "serving.latency_se_ms",
                                            "serving.settled",
                                            "serving.best"};
  // After them, the latency budget's (settings.latency_slo_ms; the sample has a 3 ms budget at p99).
  const std::vector<std::string> budget = {"budget.latency_slo_ms", "budget.latency_percentile",
                                           "budget.latency_ms", "budget.within"};
  const auto k = static_cast<std::ptrdiff_t>(budget.size());
  const auto m = static_cast<std::ptrdiff_t>(serving.size());
  const auto n = static_cast<std::ptrdiff_t>(context.size());
  ASSERT_GE(header.size(), context.size() + serving.size() + budget.size() + 3);
  EXPECT_EQ(std::vector<std::string>(header.end() - k, header.end()), budget);
  EXPECT_EQ(std::vector<std::string>(header.end() - k - m, header.end() - k), serving);
  EXPECT_EQ(std::vector<std::string>(header.end() - k - m - n, header.end() - k - m), context);
  const std::vector<std::string> point_columns(header.begin(), header.end() - k - m - n);
  EXPECT_EQ(std::set<std::string>(point_columns.begin(), point_columns.end()), keys);
  EXPECT_EQ(point_columns.size(), keys.size());
  // Point columns added after the first release come last among them, in the order they were added.
  std::vector<std::string> added = {"resumed_from", "telemetry.mem_clock_mhz.min",
                                    "telemetry.mem_clock_mhz.median"};
  added.insert(added.end(), host.begin(), host.end());
  added.insert(added.end(), rounds.begin(), rounds.end());
  added.push_back("samples_per_second_ci95_pct");
  EXPECT_EQ(std::vector<std::string>(point_columns.end() - static_cast<std::ptrdiff_t>(added.size()),
                                     point_columns.end()),
            added);
  for (const auto& line : lines) EXPECT_EQ(csv_fields(line).size(), header.size()) << line;
  const auto first = csv_fields(lines[1]);
  EXPECT_EQ(std::vector<std::string>(first.end() - k - m - n, first.end() - k - m),
            (std::vector<std::string>{"mlp-small", r.device.name, "scripted", "train", "bf16", r.created_at,
                                      r.state, "false", "", ""}));
  EXPECT_EQ(std::vector<std::string>(first.end() - k - m, first.end() - k),
            std::vector<std::string>(serving.size()));
  EXPECT_FALSE(r.created_at.empty());
}

TEST(Csv, QuotingAndValues) {
  const Report r = testing::sample_report();
  const auto lines = lines_of(format_csv(r));
  const auto header = csv_fields(lines[0]);
  auto column = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const auto oom = csv_fields(lines[8]);
  EXPECT_EQ(oom[column("status")], "oom");
  EXPECT_EQ(oom[column("reason")], "cudaMalloc failed: out of memory, \"needs 49.0 GiB\"");
  EXPECT_THAT(lines[8], HasSubstr("\"cudaMalloc failed: out of memory, \"\"needs 49.0 GiB\"\"\""));
  EXPECT_EQ(oom[column("step_ms.p99")], "");  // never measured: unknown, not 0
  EXPECT_EQ(oom[column("samples_per_second")], "");
  EXPECT_EQ(oom[column("tflops")], "");
  const auto knee = csv_fields(lines[4]);
  EXPECT_EQ(knee[column("batch")], "64");
  EXPECT_EQ(knee[column("telemetry.throttle_reasons")], "sw_power_cap");
  EXPECT_EQ(knee[column("refinement")], "false");
  EXPECT_EQ(knee[column("memory.planned_bytes")], std::to_string(r.points[3].memory.planned_bytes));
}

// A latency budget's columns: its step time at the budget's own percentile on each ok point (p99.5 from the
// raw steps, which no step_ms column holds), whether that keeps the budget, and nothing for a failed point.
TEST(Csv, BudgetColumnsAtTheBudgetsPercentile) {
  Report r = testing::sample_report();
  r.settings["latency_percentile"] = 99.5;
  r.settings["latency_slo_ms"] = 3.05;  // batches to 64 take ~2 ms, 96 ~3.09 ms at p99.5, 128 ~4.2 ms
  const auto lines = lines_of(format_csv(r));
  const auto header = csv_fields(lines[0]);
  auto column = [&](const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    EXPECT_NE(at, header.end()) << name;
    return static_cast<size_t>(at - header.begin());
  };
  int within = 0, over = 0;
  for (size_t i = 0; i < r.points.size(); ++i) {
    const Point& p = r.points[i];
    const auto row = csv_fields(lines[i + 1]);
    EXPECT_EQ(row[column("budget.latency_slo_ms")], "3.05");
    EXPECT_EQ(row[column("budget.latency_percentile")], "99.5");
    if (p.status != PointStatus::ok) {
      EXPECT_EQ(row[column("budget.latency_ms")], "");
      EXPECT_EQ(row[column("budget.within")], "");
      continue;
    }
    ASSERT_FALSE(p.samples_ms.empty());
    const double p995 = percentile(p.samples_ms, 99.5);
    EXPECT_NEAR(std::stod(row[column("budget.latency_ms")]), p995, 1e-9 * p995) << p.batch;
    EXPECT_NE(p995, p.step_ms.p99) << p.batch;  // not a step_ms column under another name
    EXPECT_EQ(row[column("budget.within")], p995 <= 3.05 ? "true" : "false") << p.batch;
    ++(p995 <= 3.05 ? within : over);
  }
  EXPECT_GT(within, 0);
  EXPECT_GT(over, 0);
  // Without a budget, the columns are there and empty.
  r.settings.erase("latency_slo_ms");
  const auto plain = lines_of(format_csv(r));
  ASSERT_EQ(csv_fields(plain[0]), header);
  const auto row = csv_fields(plain[1]);
  for (const char* name :
       {"budget.latency_slo_ms", "budget.latency_percentile", "budget.latency_ms", "budget.within"})
    EXPECT_EQ(row[column(name)], "") << name;
}

TEST(Markdown, HeaderTableAndSummary) {
  Report r = testing::sample_report();
  r.settings["model"]["name"] = "my_model|v2";
  const std::string md = format_markdown(r);
  EXPECT_THAT(md, HasSubstr("**Model** my\\_model\\|v2"));
  EXPECT_THAT(md, HasSubstr("**Mode** train"));
  EXPECT_THAT(md, HasSubstr("**Precision** bf16"));
  EXPECT_THAT(md, HasSubstr("| batch | samples/s |"));
  EXPECT_THAT(md, HasSubstr("- **recommended**: batch 64"));
  EXPECT_THAT(md, Not(HasSubstr("accum")));
}

// run --set: every title says which fields of the model config the run changed, after the model's name.
TEST(Titles, SayTheModelOverrides) {
  Report r = testing::sample_report();
  EXPECT_THAT(format_console(r, {false}), Not(HasSubstr(" set ")));
  r.settings["model_overrides"] = {"input.features=64", "layers[0].activation=gelu"};
  EXPECT_THAT(format_console(r, {false}),
              HasSubstr("mlp-small \u00b7 set input.features=64, layers[0].activation=gelu \u00b7 "));
  EXPECT_THAT(format_markdown(r), HasSubstr("**Set** input.features=64, layers\\[0\\].activation=gelu"));
  EXPECT_THAT(format_svg(r), HasSubstr("mlp-small \u00b7 set input.features=64, layers[0].activation=gelu"));
  const auto csv = lines_of(format_csv(r));
  ASSERT_GE(csv.size(), 2u);
  EXPECT_THAT(csv[1],
              HasSubstr(",false,input.features=64; layers[0].activation=gelu," + std::string(13, ',')))
      << csv[1];  // then the 13 serving columns, empty without a rate (and the budget's)
  // A report read back may hold anything: what a terminal would act on is shown, not sent.
  r.settings["model_overrides"] = {"name=\x1b[2J"};
  EXPECT_THAT(format_console(r, {false}), Not(HasSubstr("\x1b[2J")));
}

// Every title says how a step's samples were split: the console's, markdown's and the chart's.
TEST(Titles, SayTheAccumulationOrEffectiveBatch) {
  Report r = testing::sample_report();
  r.settings["accumulation"] = 1;
  EXPECT_THAT(format_console(r, {false}), Not(HasSubstr("accumulation")));
  r.settings["accumulation"] = 4;
  EXPECT_THAT(format_console(r, {false}), HasSubstr("\u00b7 train \u00b7 bf16 \u00b7 accumulation 4\n"));
  EXPECT_THAT(format_markdown(r), HasSubstr("**Precision** bf16 \u00b7 **Accumulation** 4\n"));
  EXPECT_THAT(format_svg(r), HasSubstr("bf16 \u00b7 accumulation 4</text>"));
  r.settings["effective_batch"] = 256;
  EXPECT_THAT(format_console(r, {false}), HasSubstr("\u00b7 bf16 \u00b7 effective batch 256\n"));
  EXPECT_THAT(format_markdown(r), HasSubstr("**Effective batch** 256\n"));
  EXPECT_THAT(format_svg(r), HasSubstr("bf16 \u00b7 effective batch 256</text>"));
}

// The analysis lines name the batch with its accumulation where there is one (what to set: 256 alone pasted
// into --batch would change the effective batch): the run's --accumulation, or N / batch for the splits of N.
TEST(Console, AnalysisLinesNameTheAccumulation) {
  Report r = testing::sample_report();  // knee 64, max fit 128
  EXPECT_THAT(format_console(r, {false}), HasSubstr("knee: batch 64 ("));
  r.settings["accumulation"] = 4;
  // The points' own accumulation names them: a settings value that disagrees with them does not.
  EXPECT_THAT(format_console(r, {false}), HasSubstr("knee: batch 64 ("));
  for (Point& p : r.points) {
    p.accumulation = 4;
    p.effective_batch = p.batch * 4;
  }
  EXPECT_THAT(format_console(r, {false}), HasSubstr("knee: batch 64x4 ("));
  EXPECT_THAT(format_console(r, {false}), HasSubstr("max fit: batch 128x4,"));
  r.settings["effective_batch"] = 1024;
  for (Point& p : r.points) {
    p.accumulation = 1024 / p.batch;
    p.effective_batch = 1024;
  }
  EXPECT_THAT(format_console(r, {false}), HasSubstr("knee: batch 64x16 ("));
  EXPECT_THAT(format_console(r, {false}), HasSubstr("max fit: batch 128x8,"));
}

TEST(Svg, EscapedDeterministicAndComplete) {
  Report r = testing::sample_report();
  r.settings["model"]["name"] = "<script>alert('x')</script>";
  const std::string svg = format_svg(r);
  EXPECT_EQ(svg, format_svg(r));
  EXPECT_THAT(svg, Not(HasSubstr("<script>")));
  EXPECT_THAT(svg, HasSubstr("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt;"));
  EXPECT_THAT(svg, HasSubstr("Scripted A&amp;B GPU &lt;24 GiB&gt;"));
  EXPECT_THAT(svg, HasSubstr(">knee 64<"));
  EXPECT_THAT(svg, HasSubstr(">saturation 64<"));
  EXPECT_THAT(svg, HasSubstr(">max fit 128<"));
  EXPECT_THAT(svg, HasSubstr(">recommended 64<"));
  EXPECT_THAT(svg, HasSubstr(">p99 budget 3 ms<"));  // settings.latency_slo_ms, said as the console does
  EXPECT_THAT(svg, HasSubstr("batch 512: oom: cudaMalloc failed"));
  EXPECT_THAT(svg, HasSubstr("over memory limit"));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

// A --memory-limit below the device's memory is what the plans were held to: the bars' full height, drawn
// and named; at or above the device's memory the device's line stays.
TEST(Svg, ScalesMemoryToALimitBelowTheDevice) {
  Report r = testing::sample_report();
  EXPECT_THAT(format_svg(r), HasSubstr(">device memory "));
  r.settings["memory_limit_bytes"] = uint64_t{1} << 30;
  const std::string svg = format_svg(r);
  EXPECT_THAT(svg, HasSubstr(">--memory-limit 1.00 GiB<"));
  EXPECT_THAT(svg, HasSubstr("planned memory (full height 1.00 GiB)"));
  EXPECT_THAT(svg, Not(HasSubstr(">device memory ")));
  r.settings["memory_limit_bytes"] = r.device.memory_total_bytes * 2;
  EXPECT_THAT(format_svg(r), Not(HasSubstr(">--memory-limit ")));
}

// A latency budget is drawn on the latency axis, which reaches it even above every p99.
// A plot of a sweep that did not finish says so in its title, as the console and markdown do.
TEST(Svg, AnUnfinishedSweepSaysSoInItsTitle) {
  Report r = testing::sample_report();
  EXPECT_THAT(format_svg(r), Not(HasSubstr("finished points only")));
  r.state = "interrupted";
  EXPECT_THAT(format_svg(r), HasSubstr(" (interrupted: finished points only)</text>"));
  r.state = "in_progress";
  EXPECT_THAT(format_svg(r), HasSubstr(" (unfinished: finished points only)</text>"));
}

TEST(Svg, DrawsTheLatencyBudget) {
  Report r = testing::sample_report();
  r.settings["latency_slo_ms"] = 250.0;
  const std::string svg = format_svg(r);
  EXPECT_THAT(svg, HasSubstr(">p99 budget 250 ms<"));
  EXPECT_THAT(svg, HasSubstr(">250<"));  // a latency tick at the budget
}

// With a request rate, each max batch's request latency (where not saturated) on the latency axis, dashed,
// a diamond per max batch: filled where settled, hollow where not.
TEST(Svg, DrawsTheRequestLatencyPerMaxBatch) {
  Report r = testing::sample_report();
  r.settings["mode"] = "infer";
  AnalysisOptions options;
  options.request_rate = 5000;
  r.analysis.serving = simulate_serving(r.points, options);
  const std::string svg = format_svg(r);
  EXPECT_THAT(svg, HasSubstr(">p99 request ms at 5000/s (hollow: unsettled)<"));
  EXPECT_THAT(svg, HasSubstr(">p99 latency (ms)<"));
  size_t served = 0, diamonds = 0;
  for (const ServingBatch& b : r.analysis.serving->batches) served += b.latency_ms.has_value();
  for (size_t at = svg.find("stroke=\"#e377c2\" stroke-width=\"1.5\""); at != std::string::npos;
       at = svg.find("stroke=\"#e377c2\" stroke-width=\"1.5\"", at + 1))
    ++diamonds;
  EXPECT_GT(served, 0u);
  EXPECT_EQ(diamonds, served);
  EXPECT_EQ(svg, format_svg(r));  // deterministic
  r.analysis.serving.reset();
  EXPECT_THAT(format_svg(r), Not(HasSubstr("request ms")));
}

TEST(Svg, SurvivesOddCurves) {
  Report r;
  Point p;
  p.batch = 3;
  p.effective_batch = 3;
  p.samples_per_second = std::nan("");
  r.points = {p};
  EXPECT_THAT(format_svg(r), Not(HasSubstr("nan")));
  r.points[0].samples_per_second = 0;
  EXPECT_THAT(format_svg(r), HasSubstr("</svg>"));
  // Near the largest double a tick step no longer moves the tick: the axis counted them by addition and
  // looped forever, growing the SVG (a hand-edited report's rate, or --latency-slo 1.6e308).
  r.points[0].samples_per_second = 1.6e308;
  EXPECT_THAT(format_svg(r), HasSubstr("</svg>"));
  r.points[0].status = PointStatus::ok;
  r.points[0].samples_per_second = 100;
  r.points[0].step_ms.p99 = 30;
  r.settings["latency_slo_ms"] = 1.6e308;
  const std::string svg = format_svg(r);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_LT(svg.size(), 100000u);
}

}  // namespace
}  // namespace bsw

namespace bsw {
namespace {

// --config-for: the recommended batch in each framework's terms, with the run's precision and mode.
TEST(ConfigSnippet, EachFrameworkInTheRunsPrecision) {
  Report r = testing::sample_report();  // train, bf16, recommended 64, scripted
  r.analysis.recommended_accumulation = 4;
  EXPECT_EQ(
      format_config_snippet(r, ConfigTarget::deepspeed, 8),
      "config for DeepSpeed (batch 64 x accumulation 4, bf16, 8 GPUs; 2048 samples per optimizer step):\n"
      "  # measured on the scripted backend (a step-time formula, not a device): sweep on the GPU itself\n"
      "  {\n"
      "    \"train_micro_batch_size_per_gpu\": 64,\n"
      "    \"gradient_accumulation_steps\": 4,\n"
      "    \"train_batch_size\": 2048,\n"
      "    \"bf16\": {\"enabled\": true}\n"
      "  }\n");
  EXPECT_EQ(
      format_config_snippet(r, ConfigTarget::lightning, 1),
      "config for Lightning (batch 64 x accumulation 4, bf16, 1 GPU; 256 samples per optimizer step):\n"
      "  # measured on the scripted backend (a step-time formula, not a device): sweep on the GPU itself\n"
      "  # precision=\"bf16-mixed\" is autocast: fp32 weights and an fp32 residual stream, layernorm, "
      "softmax and loss outputs, "
      "a larger peak than the sweep's bf16 model with fp32 master weights\n"
      "  loader = DataLoader(dataset, batch_size=64)\n"
      "  trainer = L.Trainer(accumulate_grad_batches=4, precision=\"bf16-mixed\", devices=1)\n");
  EXPECT_EQ(
      format_config_snippet(r, ConfigTarget::accelerate, 2),
      "config for accelerate (batch 64 x accumulation 4, bf16, 2 GPUs; 512 samples per optimizer step):\n"
      "  # measured on the scripted backend (a step-time formula, not a device): sweep on the GPU itself\n"
      "  # mixed_precision=\"bf16\" is autocast: fp32 weights and an fp32 residual stream, layernorm, "
      "softmax and loss outputs, "
      "a "
      "larger peak than the sweep's bf16 model with fp32 master weights\n"
      "  accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision=\"bf16\")\n"
      "  loader = DataLoader(dataset, batch_size=64)  # per process; accelerate launch --num_processes 2\n"
      "  # the accumulation takes effect only for steps inside `with accelerator.accumulate(model):`, after "
      "accelerator.prepare(model, optimizer, loader)\n");
  EXPECT_EQ(
      format_config_snippet(r, ConfigTarget::transformers, 1),
      "config for transformers (batch 64 x accumulation 4, bf16, 1 GPU; 256 samples per optimizer step):\n"
      "  # measured on the scripted backend (a step-time formula, not a device): sweep on the GPU itself\n"
      "  # bf16=True is autocast: fp32 weights and an fp32 residual stream, layernorm, softmax and loss "
      "outputs, a larger peak "
      "than the sweep's bf16 model with fp32 master weights\n"
      "  args = TrainingArguments(output_dir=\"out\", per_device_train_batch_size=64, "
      "gradient_accumulation_steps=4, bf16=True)\n"
      "  # launch on one GPU: CUDA_VISIBLE_DEVICES=0 python your_script.py (started plainly where there are "
      "several, "
      "Trainer runs on them all and multiplies the batch)\n");

  // The largest batch that fit, under autocast's larger peak: check it, or step down.
  r.analysis.max_fit.batch = 64;
  EXPECT_NE(format_config_snippet(r, ConfigTarget::lightning, 1)
                .find("; batch 64 is the largest that fit, so check it under autocast (the PyTorch peer, "
                      "bench/peers/torch_sweep.py) or take a smaller one\n"),
            std::string::npos);
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::deepspeed, 1).find("autocast"), std::string::npos)
      << "DeepSpeed's bf16 is the sweep's: a 16-bit model with fp32 master weights";
  {  // The largest batch swept, with nothing larger that failed to fit, is no memory edge.
    Report swept = r;
    std::erase_if(swept.points, [](const Point& p) { return did_not_fit(p.status); });
    EXPECT_EQ(format_config_snippet(swept, ConfigTarget::lightning, 1).find("largest that fit"),
              std::string::npos);
  }
  r.settings["precision"] = "fp16";
  r.analysis.recommended_accumulation.reset();
  EXPECT_NE(
      format_config_snippet(r, ConfigTarget::deepspeed, 1)
          .find("    \"train_batch_size\": 64,\n    \"fp16\": {\"enabled\": true, \"loss_scale\": 0}\n"),
      std::string::npos)
      << "dynamic loss scaling, as the sweep's fp16 training";
  EXPECT_NE(format_config_snippet(r, ConfigTarget::lightning, 1).find("precision=\"16-mixed\""),
            std::string::npos);
  r.settings["precision"] = "tf32";
  const std::string tf32 = format_config_snippet(r, ConfigTarget::deepspeed, 1);
  EXPECT_NE(tf32.find("    \"train_batch_size\": 64\n  }\n"), std::string::npos) << tf32;
  EXPECT_NE(tf32.find("torch.backends.cuda.matmul.allow_tf32 = True"), std::string::npos) << tf32;
  EXPECT_NE(format_config_snippet(r, ConfigTarget::transformers, 1).find(", tf32=True)"), std::string::npos);
  EXPECT_NE(format_config_snippet(r, ConfigTarget::lightning, 1)
                .find("torch.set_float32_matmul_precision(\"high\")"),
            std::string::npos);
}

// An --effective-batch sweep sized one device's step of N: across --world-size devices N is kept as the
// global batch (what a framework's user means by it), by the accumulation that keeps it; where the
// recommended micro-batch cannot, by the fastest measured split that can; where none can, the step grows and
// a comment says so.
TEST(ConfigSnippet, AnEffectiveBatchAcrossDevicesIsKeptInAll) {
  Report r = testing::sample_report();  // train, bf16, recommended 64, scripted
  r.settings["effective_batch"] = 2048;
  r.analysis.recommended_accumulation = 32;
  const std::string eight = format_config_snippet(r, ConfigTarget::deepspeed, 8);
  EXPECT_NE(eight.find("(batch 64 x accumulation 4, bf16, 8 GPUs; 2048 samples per optimizer step)"),
            std::string::npos)
      << eight;
  EXPECT_NE(eight.find("  # --effective-batch 2048 kept in all across 8 GPUs: accumulation 4 each (the "
                       "sweep timed one GPU's share of 2048, accumulation 32)\n"),
            std::string::npos)
      << eight;
  EXPECT_NE(eight.find("\"gradient_accumulation_steps\": 4,\n    \"train_batch_size\": 2048"),
            std::string::npos)
      << eight;
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::deepspeed, 1).find("--effective-batch"),
            std::string::npos);
  // 3 does not divide 2048: no per-device split keeps it, refused as the run refuses it before measuring.
  EXPECT_THROW((void)format_config_snippet(r, ConfigTarget::deepspeed, 3), UsageError);
  EXPECT_THROW(check_effective_batch_world_size(2048, 3), UsageError);
  EXPECT_NO_THROW(check_effective_batch_world_size(2048, 128));
  // 64 x 128 does not divide 2048 and no measured split is there: each device takes 16 samples a step, as
  // batch 16 (it fits, as 64 ran), untimed and said so; never 128 times the global batch.
  const std::string wide = format_config_snippet(r, ConfigTarget::deepspeed, 128);
  EXPECT_NE(wide.find("(batch 16, bf16, 128 GPUs; 2048 samples per optimizer step)"), std::string::npos)
      << wide;
  EXPECT_NE(
      wide.find("  # --effective-batch 2048 kept in all across 128 GPUs: no measured micro-batch divides "
                "one GPU's share of 16, so batch 16, accumulation 1 each; batch 16 fits (batch 64 ran) but "
                "was not timed: the sweep timed one GPU's splits of 2048, and `run --effective-batch 2048 "
                "--world-size 128` times the splits of 16 each\n"),
      std::string::npos)
      << wide;
  EXPECT_NE(wide.find("\"train_batch_size\": 2048"), std::string::npos) << wide;
  // A share the recommended batch does not divide: its largest divisor below the recommended batch.
  r.settings["effective_batch"] = 2400;
  r.analysis.recommended_accumulation = 1;
  const std::string twenty = format_config_snippet(r, ConfigTarget::lightning, 20);
  EXPECT_NE(twenty.find("(batch 60 x accumulation 2, bf16, 20 GPUs; 2400 samples per optimizer step)"),
            std::string::npos)
      << twenty;
  r.settings["effective_batch"] = 2048;
  r.analysis.recommended_accumulation = 32;
  // 64 x 16 divides 2048, 64 x 64 does not: a measured split of 2048 whose micro-batch does (32 x 64) is
  // taken, with its speed beside the recommended one's.
  Point split32 = r.points.front();
  split32.batch = 32;
  split32.accumulation = 64;
  split32.effective_batch = 2048;
  split32.status = PointStatus::ok;
  Point split64 = split32;
  split64.batch = 64;
  split64.accumulation = 32;
  split32.samples_per_second = 900;
  split64.samples_per_second = 1000;
  r.points = {split32, split64};
  const std::string sixty_four = format_config_snippet(r, ConfigTarget::lightning, 64);
  EXPECT_NE(
      sixty_four.find("  # --effective-batch 2048 kept in all across 64 GPUs: the recommended batch 64 does "
                      "not divide one GPU's share of 32, so batch 32 (measured at 900 samples/s, 90% of "
                      "batch 64's), accumulation 1 each\n"),
      std::string::npos)
      << sixty_four;
  EXPECT_NE(sixty_four.find("batch_size=32)"), std::string::npos) << sixty_four;
  EXPECT_EQ(sixty_four.find("accumulate_grad_batches"), std::string::npos) << sixty_four;
}

// run --effective-batch E --world-size N timed one device's share, E / N (settings.effective_batch, with
// settings.world_size N): at that world size the recommended split is each device's as timed; at another the
// global batch E is still kept, and analyze without --world-size takes the run's.
TEST(ConfigSnippet, ASweepOfOneDevicesShareIsEachDevicesConfig) {
  Report r = testing::sample_report();  // train, bf16, recommended 64, scripted
  r.settings["effective_batch"] = 256;
  r.settings["world_size"] = 8;
  r.analysis.recommended_accumulation = 4;
  EXPECT_EQ(report_view::global_effective_batch(r), 2048);
  const std::string eight = format_config_snippet(r, ConfigTarget::deepspeed, 8);
  EXPECT_NE(eight.find("(batch 64 x accumulation 4, bf16, 8 GPUs; 2048 samples per optimizer step)"),
            std::string::npos)
      << eight;
  EXPECT_NE(eight.find("  # --effective-batch 2048 kept in all across 8 GPUs: 256 each per optimizer step, "
                       "whose splits the sweep timed\n"),
            std::string::npos)
      << eight;
  EXPECT_NE(eight.find("\"train_batch_size\": 2048"), std::string::npos) << eight;
  // Four devices: each takes 512, the recommended micro-batch twice as many times.
  const std::string four = format_config_snippet(r, ConfigTarget::deepspeed, 4);
  EXPECT_NE(four.find("(batch 64 x accumulation 8, bf16, 4 GPUs; 2048 samples per optimizer step)"),
            std::string::npos)
      << four;
  EXPECT_NE(four.find("(the sweep timed one GPU's share of 256, accumulation 4)"), std::string::npos) << four;
  // One: the whole global batch on it, still 2048.
  const std::string one = format_config_snippet(r, ConfigTarget::deepspeed, 1);
  EXPECT_NE(one.find("(batch 64 x accumulation 32, bf16, 1 GPU; 2048 samples per optimizer step)"),
            std::string::npos)
      << one;
  // 3 does not divide the global 2048.
  EXPECT_THROW((void)format_config_snippet(r, ConfigTarget::deepspeed, 3), UsageError);
  // The title says what was timed.
  EXPECT_THAT(format_console(r, {false}), HasSubstr("256 per device (2048 in all across 8)"));
  // A CPU sweep's world is processes.
  Report on_cpu = r;
  on_cpu.device.backend = "cpu";
  EXPECT_THAT(format_config_snippet(on_cpu, ConfigTarget::deepspeed, 8),
              HasSubstr("--effective-batch 2048 kept in all across 8 processes: 256 each"));
  // A hand-made world size out of range is not taken.
  r.settings["world_size"] = 0;
  EXPECT_FALSE(report_view::world_size_setting(r).has_value());
  EXPECT_EQ(report_view::global_effective_batch(r), 256);
}

// Nothing ran ok: every choice is none for one long reason, said once; the others point to it (a first-use
// audit counted one over_limit text six times). The JSON keeps each reason whole.
TEST(SummaryLines, OneReasonForNothingIsSaidOnce) {
  Report r = testing::sample_report();
  for (Point& p : r.points) {
    p.status = PointStatus::over_limit;
    p.reason = "planned 1.81 MiB exceeds 95% of the 1.00 MiB --memory-limit";
  }
  r.settings.erase("latency_slo_ms");
  r.analysis = analyze(r.points, {});
  ASSERT_FALSE(r.analysis.recommended.batch.has_value());
  const std::vector<std::string> lines = report_view::summary_lines(r);
  size_t said = 0;
  for (const std::string& line : lines) said += line.find("planned 1.81 MiB exceeds") != std::string::npos;
  EXPECT_EQ(said, 1u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines, ::testing::Contains("max fit: none \u2014 as saturation, above"));
  EXPECT_THAT(lines, ::testing::Contains("recommended: none \u2014 as saturation, above"));
  EXPECT_NE(r.analysis.recommended.why.find("planned 1.81 MiB exceeds"), std::string::npos);
}

// Beside a request rate the budget holds requests (serving's line): the step budget's line says it is a
// step's alone, so "within the budget" there is not read as the request's.
TEST(SummaryLines, TheStepBudgetBesideARateIsLabelledAStepsAlone) {
  Report r = testing::sample_report();
  r.analysis.latency_slo = BatchChoice(64, 1000.0, "p99 step 2 ms within the 3 ms budget");
  const auto label = [&] {
    for (const std::string& line : report_view::summary_lines(r))
      if (line.starts_with("latency SLO")) return line.substr(0, line.find(':'));
    return std::string();
  };
  EXPECT_EQ(label(), "latency SLO");
  r.analysis.serving = Serving{};
  r.analysis.serving->request_rate = 1000;
  EXPECT_EQ(label(), "latency SLO, a step alone (no queue)");
}

// Each launcher is told how many devices, even one (Lightning's default takes every GPU; a plain `python
// train.py` runs Trainer over them all; `accelerate launch` takes the saved config's count), and across
// nodes, which count is per node.
TEST(ConfigSnippet, TheLinesPinTheDeviceCount) {
  Report r = testing::sample_report();  // train, bf16, recommended 64, scripted
  const std::string one = format_config_snippet(r, ConfigTarget::lightning, 1);
  EXPECT_NE(one.find("devices=1)"), std::string::npos) << one;
  EXPECT_EQ(one.find("num_nodes"), std::string::npos) << one;
  const std::string sixteen = format_config_snippet(r, ConfigTarget::lightning, 16);
  EXPECT_NE(sixteen.find("  # devices counts one node's GPUs: over several nodes, devices=<GPUs per node>, "
                         "num_nodes=<nodes>, their product 16\n"),
            std::string::npos)
      << sixteen;
  EXPECT_NE(sixteen.find("devices=16)"), std::string::npos) << sixteen;
  EXPECT_NE(format_config_snippet(r, ConfigTarget::accelerate, 1).find("accelerate launch --num_processes 1"),
            std::string::npos);
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::accelerate, 1).find("accelerator.accumulate"),
            std::string::npos)
      << "no accumulation to make work";
  EXPECT_NE(format_config_snippet(r, ConfigTarget::transformers, 16)
                .find("--nproc_per_node <GPUs per node> --nnodes <nodes>, their product 16)"),
            std::string::npos);
  // The CPU's tf32 ran as fp32: the line says what the sweep asked for, not what it ran.
  r.settings["precision"] = "tf32";
  r.device.backend = "cpu";
  const std::string cpu = format_config_snippet(r, ConfigTarget::lightning, 1);
  EXPECT_NE(cpu.find("torch.set_float32_matmul_precision(\"high\")  # the sweep asked for tf32 (the CPU ran "
                     "fp32)"),
            std::string::npos)
      << cpu;
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::transformers, 1).find("CUDA_VISIBLE_DEVICES"),
            std::string::npos)
      << "a CPU process has no GPU to pin";
  EXPECT_NE(
      format_config_snippet(r, ConfigTarget::transformers, 1).find("tf32=True)  # the sweep asked for tf32"),
      std::string::npos);
  EXPECT_NE(cpu.find("accelerator=\"cpu\", devices=1)"), std::string::npos) << cpu;
  // At the memory edge without autocast (DeepSpeed, fp32): the framework's own memory is said.
  r.device.backend = "scripted";
  r.settings["precision"] = "fp32";
  r.analysis.max_fit.batch = 64;
  const std::string edge = format_config_snippet(r, ConfigTarget::deepspeed, 1);
  EXPECT_NE(edge.find("  # batch 64 is the largest that fit: the framework's own memory (the caching "
                      "allocator's slack) is not in the sweep"),
            std::string::npos)
      << edge;
  EXPECT_NE(format_config_snippet(r, ConfigTarget::deepspeed, 4)
                .find("(DDP's gradient buckets, NCCL's buffers, the caching allocator's slack)"),
            std::string::npos)
      << "gradient buckets and NCCL only where training spans devices";
}

// Triton's model config: the recommended batch as max_batch_size, the batcher's delay as --request-rate
// simulated it, one instance per device; training is refused.
TEST(ConfigSnippet, TritonServesTheRecommendedBatch) {
  Report r = testing::sample_report();
  r.settings["mode"] = "infer";
  r.device.backend = "cuda";
  r.analysis.max_fit.batch.reset();
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::triton, 1),
            "config for Triton (inference, batch 64, bf16, 1 GPU):\n"
            "  # the sweep ran the model in bf16: serve it in bf16, as the batch was sized for\n"
            "  max_batch_size: 64\n"
            "  dynamic_batching { }  # the queue delay is not sized here: run --request-rate R "
            "[--max-queue-delay MS] simulates your traffic\n"
            "  instance_group [ { count: 1, kind: KIND_GPU } ]\n");
  r.settings["request_rate"] = 2000;
  r.settings["max_queue_delay_ms"] = 2.5;
  r.settings["precision"] = "fp32";
  EXPECT_EQ(
      format_config_snippet(r, ConfigTarget::triton, 4),
      "config for Triton (inference, batch 64, fp32, 4 GPUs):\n"
      "  max_batch_size: 64\n"
      "  dynamic_batching {\n"
      "    max_queue_delay_microseconds: 2500  # as --request-rate simulated it\n"
      "  }\n"
      "  instance_group [ { count: 1, kind: KIND_GPU } ]  # one on each of the 4 GPUs, each batching on "
      "its own\n");
  EXPECT_EQ(parse_config_target("triton"), ConfigTarget::triton);
  EXPECT_NO_THROW(check_config_target_mode("triton", true, false));
  EXPECT_NO_THROW(check_config_target_mode("deepspeed", false, false));
  EXPECT_NO_THROW(check_config_target_mode("", false, true));
  EXPECT_THROW(check_config_target_mode("triton", false, true), UsageError);
  r.settings["mode"] = "train";
  EXPECT_THROW((void)format_config_snippet(r, ConfigTarget::triton, 1), UsageError);
}

TEST(ConfigSnippet, InferenceCpuAndNoRecommendation) {
  Report r = testing::sample_report();
  r.settings["mode"] = "infer";
  r.device.backend = "cpu";
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::transformers, 1),
            "config for transformers (inference, batch 64, bf16, 1 process):\n"
            "  # measured on the CPU backend: a GPU's best batch differs, so sweep on the GPU itself\n"
            "  args = TrainingArguments(output_dir=\"out\", per_device_eval_batch_size=64, "
            "bf16_full_eval=True)\n");
  {  // Lightning's "-true" casts the model as the sweep's inference does; accelerate has only autocast.
    const std::string lightning = format_config_snippet(r, ConfigTarget::lightning, 1);
    EXPECT_NE(lightning.find("precision=\"bf16-true\", accelerator=\"cpu\", devices=1)"), std::string::npos)
        << lightning;
    EXPECT_EQ(lightning.find("autocast"), std::string::npos) << lightning;
    EXPECT_NE(format_config_snippet(r, ConfigTarget::accelerate, 1).find("is autocast"), std::string::npos);
  }
  const std::string ds = format_config_snippet(r, ConfigTarget::deepspeed, 3);
  EXPECT_NE(ds.find("(inference, batch 64, bf16, 3 processes):"), std::string::npos) << ds;
  EXPECT_NE(ds.find("  loader = DataLoader(dataset, batch_size=64)\n"
                    "  engine = deepspeed.init_inference(model, dtype=torch.bfloat16)\n"),
            std::string::npos)
      << ds;
  EXPECT_EQ(ds.find("train_batch_size"), std::string::npos) << ds;
  r.analysis.recommended = {};
  EXPECT_EQ(format_config_snippet(r, ConfigTarget::accelerate, 1),
            "config for accelerate: none — there is no recommended batch to set (see recommended: above)\n");
  EXPECT_THROW((void)format_config_snippet(r, ConfigTarget::accelerate, 0), UsageError);
  EXPECT_EQ(parse_config_target("lightning"), ConfigTarget::lightning);
  EXPECT_FALSE(parse_config_target("Lightning"));
}

}  // namespace
}  // namespace bsw

namespace bsw {
namespace {

// The sample report's ok points, each in rounds of the given steps (rounds beyond the samples are dropped).
Report with_rounds(std::vector<std::vector<double>> rounds_ms, nlohmann::json setting) {
  Report r = testing::sample_report();
  r.settings["rounds"] = std::move(setting);
  for (Point& p : r.points) {
    if (p.status != PointStatus::ok) continue;
    p.samples_ms.clear();
    p.rounds.clear();
    for (const auto& round : rounds_ms) {
      p.samples_ms.insert(p.samples_ms.end(), round.begin(), round.end());
      p.rounds.push_back(PointRound{static_cast<int64_t>(round.size()), "noise target", PointStatus::ok, {}});
    }
  }
  return r;
}

TEST(RoundsLine, RoundsOfOneStepAreNotCalledInAgreement) {
  const std::string line = report_view::rounds_line(with_rounds({{2.0}, {2.5}}, 2));
  EXPECT_EQ(line.find("agree"), std::string::npos) << line;
  EXPECT_NE(line.find("; batches 1, 4, 16, 64, 96, 128 had a round of one step, too few to compare"),
            std::string::npos)
      << line;
}

TEST(RoundsLine, AgreementDisagreementAndRoundsFromAResumedReport) {
  const std::vector<double> a = {2.0, 2.02, 1.98, 2.01, 1.99}, b = {2.3, 2.32, 2.28, 2.31, 2.29};
  EXPECT_EQ(
      report_view::rounds_line(with_rounds({a, a}, 2)),
      "rounds: 2 per batch, the order reversed each round; every batch's rounds agree within their noise "
      "(widest: batch 1, 0.0% apart)");
  EXPECT_EQ(report_view::rounds_line(with_rounds({a, b}, 2.0)),  // 2.0 as a report may spell it
            "rounds: 2 per batch, the order reversed each round; the rounds of batches 1, 4, 16, 64, 96, 128 "
            "disagree, up to 15.0% apart (see the warnings)");
  // Resumed with fewer rounds asked than the points hold (or with none): the line says both.
  EXPECT_EQ(
      report_view::rounds_line(with_rounds({a, a, a}, 1)),
      "rounds: 1 per batch asked, up to 3 held (from the resumed report), the order reversed each round; "
      "every batch's rounds agree within their noise (widest: batch 1, 0.0% apart)");
  EXPECT_EQ(report_view::rounds_line(testing::sample_report()), "") << "no rounds, no line";
  // Interrupted in round 2 of a resume from a sweep without --rounds: the points it did not reach hold their
  // one round without a rounds[] and lack round 2 all the same.
  Report part = with_rounds({a, a}, 2);
  for (Point& p : part.points)
    if (p.batch == 1) {
      p.rounds.clear();
      p.samples_ms.resize(a.size());
    }
  EXPECT_EQ(report_view::rounds_line(part),
            "rounds: 2 per batch, the order reversed each round; the tested batches' rounds agree within "
            "their noise (widest: batch 4, 0.0% apart); fewer rounds ran at batch 1 (1 of 2)");
}

TEST(Csv, AFailedRoundsMeanIsAnEmptyEntry) {
  Report r = with_rounds({{2.0, 2.02}, {2.0, 2.04}}, 3);
  for (Point& p : r.points)
    if (!p.rounds.empty()) p.rounds.push_back(PointRound{0, {}, PointStatus::oom, "gone"});
  const std::string csv = format_csv(r);
  EXPECT_NE(csv.find(",2.01;2.02;,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("null"), std::string::npos) << csv;
}

}  // namespace
}  // namespace bsw
