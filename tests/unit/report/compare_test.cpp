// compare_reports: verdicts from the Mann-Whitney test plus the minimum effect, threshold-only verdicts
// without samples, the geometric mean, the regression rule, mismatch errors, and the printers.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "batchsweep/compare.hpp"
#include "batchsweep/errors.hpp"
#include "golden/sample_report.hpp"
#include "report/format.hpp"
#include "unit/host_figures.hpp"

namespace bsw {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CompareResult compare_pair(const Report& a, const Report& b, CompareOptions options = {}) {
  options.names = {"a.json", "b.json"};
  return compare_reports({a, b}, options);
}

const CompareRow& row_at(const CompareResult& r, int64_t batch) {
  for (const auto& row : r.rows) {
    if (row.batch == batch) return row;
  }
  throw std::out_of_range("no row for batch " + std::to_string(batch));
}

// `a` with every ok point's steps scaled by 1/speedup.
Report sped_up(const Report& a, double speedup, bool keep_samples = true) {
  Report b = a;
  for (auto& p : b.points) {
    if (p.status != PointStatus::ok) continue;
    for (double& v : p.samples_ms) v /= speedup;
    p.samples_per_second *= speedup;
    if (!keep_samples) p.samples_ms.clear();
  }
  return b;
}

// `r` with each ok point cut to its first step, stopped by the timeout (a step longer than --timeout).
Report one_step_each(Report r) {
  for (Point& p : r.points) {
    if (p.status != PointStatus::ok) continue;
    p.samples_ms.resize(1);
    p.samples_per_second = static_cast<double>(p.batch) / (p.samples_ms[0] / 1000);
    p.stop_reason = "timeout";
  }
  return r;
}

// `r` with at most `n` raw samples a point.
Report samples_cut_to(Report r, size_t n) {
  for (Point& p : r.points)
    if (p.samples_ms.size() > n) p.samples_ms.resize(n);
  return r;
}

// `a` with its point at `batch` out of memory.
Report out_of_memory_at(const Report& a, int64_t batch) {
  Report b = a;
  for (Point& p : b.points)
    if (p.batch == batch) {
      p.status = PointStatus::oom;
      p.reason = "out of memory";
      p.samples_ms.clear();
    }
  return b;
}

TEST(Compare, VerdictsFromSamples) {
  const auto result = compare_pair(testing::sample_report(), testing::sample_candidate());
  ASSERT_EQ(result.runs.size(), 2u);
  EXPECT_EQ(result.runs[0].name, "a.json");
  EXPECT_EQ(row_at(result, 4).deltas[0].verdict, Verdict::faster);
  EXPECT_TRUE(row_at(result, 4).deltas[0].from_samples);
  EXPECT_LT(*row_at(result, 4).deltas[0].p_value, 0.01);
  EXPECT_NEAR(row_at(result, 4).deltas[0].ratio, 1.2, 1e-12);
  EXPECT_EQ(row_at(result, 16).deltas[0].verdict, Verdict::slower);
  // 0.4% is inside the minimum effect however clean the samples are.
  EXPECT_EQ(row_at(result, 64).deltas[0].verdict, Verdict::same);
  EXPECT_EQ(row_at(result, 128).deltas[0].verdict, Verdict::same);
  // Batch 1 has no samples in B: threshold only.
  EXPECT_FALSE(row_at(result, 1).deltas[0].from_samples);
  EXPECT_EQ(row_at(result, 1).deltas[0].verdict, Verdict::same);
  // over_limit in A, ok in B.
  EXPECT_EQ(row_at(result, 256).deltas[0].verdict, Verdict::not_comparable);
  EXPECT_EQ(row_at(result, 256).runs[0].status, PointStatus::over_limit);
  // Batch 96 is only in A.
  EXPECT_THROW((void)row_at(result, 96), std::out_of_range);
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr("not in every run, not compared: batch 96")));
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr("precisions differ: A bf16, B fp16")));
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr("devices differ")));
  EXPECT_THAT(result.notes, ::testing::Not(::testing::Contains(HasSubstr("on the CPU"))));
}

// fp32 against bf16 on the CPU: the note says the CPU's 16 bits are storage with fp32 math.
// Thousands of steps far apart: the rank test's p underflows to 0, said as below the doubles' range, not as
// "p=0".
TEST(Compare, APValueThatUnderflowsIsSaidAsTiny) {
  Report a = testing::sample_report();
  for (Point& p : a.points) {
    if (p.status != PointStatus::ok || p.batch != 4) continue;
    p.samples_ms.clear();
    for (int i = 0; i < 4000; ++i) p.samples_ms.push_back(1.0 + 0.001 * (i % 7));
    p.samples_per_second = 4 / (summarize(p.samples_ms).mean / 1000.0);
  }
  const CompareResult r = compare_pair(a, sped_up(a, 2.0));
  const CompareDelta& d = row_at(r, 4).deltas.at(0);
  ASSERT_EQ(d.verdict, Verdict::faster);
  ASSERT_EQ(d.p_value.value_or(1.0), 0.0);
  EXPECT_THAT(format_compare(r, false), HasSubstr("faster (p<1e-300)"));
  EXPECT_THAT(format_compare(r, false), Not(HasSubstr("p=0)")));
}

// CPU runs with other thread counts (OpenBLAS's against the PyTorch peer's) are said to differ; runs that do
// not all say their threads (a GPU's) are not.
TEST(Compare, CpuThreadCountsThatDifferAreNoted) {
  Report a = testing::sample_report();
  a.device.details["threads"] = 2;
  Report b = a;
  EXPECT_THAT(compare_pair(a, b).notes, Not(::testing::Contains(HasSubstr("threads"))));
  b.device.details["threads"] = 1;
  EXPECT_THAT(
      compare_pair(a, b).notes,
      ::testing::Contains(HasSubstr("CPU threads differ: A 2, B 1 (a CPU's throughput scales with its "
                                    "threads: the peer's --threads sets them)")));
  b.device.details.erase("threads");
  EXPECT_THAT(compare_pair(a, b).notes, Not(::testing::Contains(HasSubstr("threads"))));
}

TEST(Compare, CpuSixteenBitPrecisionsAreSaidToBeEmulated) {
  Report a = testing::sample_report();
  a.device.backend = "cpu";
  a.settings["precision"] = "fp32";
  Report b = a;
  b.settings["precision"] = "bf16";
  const CompareResult result = compare_pair(a, b);
  EXPECT_THAT(result.notes,
              ::testing::Contains(HasSubstr("precisions differ: A fp32, B bf16 (on the CPU, "
                                            "16-bit precisions store in 16 bits and compute in fp32")));
}

// bf16 on batchsweep's CPU backend against the PyTorch peer's bf16 on the CPU: one name, two arithmetics.
TEST(Compare, CpuSixteenBitAgainstAnotherBackendsIsNoted) {
  Report a = testing::sample_report();
  a.device.backend = "cpu";
  a.settings["precision"] = "bf16";
  Report b = a;
  b.device.backend = "pytorch-eager";
  EXPECT_THAT(
      compare_pair(a, b).notes,
      ::testing::Contains(HasSubstr("the cpu backend's 16-bit runs store in 16 bits and compute in fp32")));
  b.device.backend = "cpu";
  for (const std::string& note : compare_pair(a, b).notes)
    EXPECT_EQ(note.find("not the same arithmetic"), std::string::npos) << note;
}

// What a comparison of cards reads without parsing notes: a run's untimed fit beside its max fit (a step too
// slow for --timeout stopped the timing, not the memory), its price and what a million samples cost at its
// best throughput.
TEST(Compare, ARunsUntimedFitAndPriceAreInItsLineAndJson) {
  Report a = testing::sample_report();
  const int64_t max_fit = *a.analysis.max_fit.batch;
  a.settings["untimed_fit"] = {{"batch", max_fit * 4}, {"reason", "fits by the plan; not timed"}};
  a.settings["price_per_hour"] = 2.5;
  const Report b = testing::sample_candidate();
  const CompareResult r = compare_pair(a, b);
  EXPECT_NE(format_compare(r, false).find(
                fmt::format("max fit batch {} (batch {} fits, untimed)", max_fit, max_fit * 4)),
            std::string::npos)
      << format_compare(r, false);
  const nlohmann::json doc = to_json(r);
  EXPECT_EQ(doc["runs"][0]["untimed_fit"], max_fit * 4);
  EXPECT_TRUE(doc["runs"][1]["untimed_fit"].is_null());
  EXPECT_EQ(doc["runs"][0]["price_per_hour"], 2.5);
  const double best = *a.analysis.best_throughput.samples_per_second;
  EXPECT_DOUBLE_EQ(doc["runs"][0]["best_cost_per_million_samples"].get<double>(), 2.5 / (best * 3600) * 1e6);
  EXPECT_TRUE(doc["runs"][1]["best_cost_per_million_samples"].is_null());
}

// Runs measured by other stopping rules, or with CUDA graphs in one and not the other, are noted with what
// differs; the same settings get no such note.
TEST(Compare, OtherMeasurementSettingsAreNoted) {
  Report a = testing::sample_report();
  a.settings["stopping"] = {{"max_noise_pct", 1.0}, {"timeout_s", 5.0}, {"min_samples", 10}};
  a.settings["cuda_graphs"] = "on";
  Report b = a;
  EXPECT_THAT(compare_pair(a, b).notes, ::testing::Not(::testing::Contains(HasSubstr("other settings"))));
  // One number however written (jq rewrites 5.0 as 5), and a null (the peer's unset warmup time) is no
  // difference.
  b.settings["stopping"]["timeout_s"] = 5;
  b.settings["stopping"]["warmup_time_s"] = nullptr;
  a.settings["stopping"]["warmup_time_s"] = 0.2;
  EXPECT_THAT(compare_pair(a, b).notes, ::testing::Not(::testing::Contains(HasSubstr("other settings"))));
  b.settings["stopping"]["max_noise_pct"] = 0.01;
  b.settings["cuda_graphs"] = "off";
  EXPECT_THAT(
      compare_pair(a, b).notes,
      ::testing::Contains(HasSubstr("A and B: measured with other settings (stopping.max_noise_pct 1.0 "
                                    "vs 0.01, cuda_graphs \"on\" vs \"off\")")));
  // --graphs, --attention and --conv shape CUDA runs only: two CPU runs that differ in them measured the same
  // thing (as --resume takes them); a CPU run against a CUDA one is noted.
  a.settings["backend"] = b.settings["backend"] = "cpu";
  b.settings["attention"] = "explicit_softmax";
  a.settings["attention"] = "auto";
  EXPECT_THAT(
      compare_pair(a, b).notes,
      ::testing::Contains(HasSubstr("A and B: measured with other settings (stopping.max_noise_pct 1.0 "
                                    "vs 0.01)")));
  EXPECT_FALSE(cuda_settings_apply(a.settings, b.settings));
  b.settings["backend"] = "cuda";
  EXPECT_TRUE(cuda_settings_apply(a.settings, b.settings));
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(HasSubstr("cuda_graphs \"on\" vs \"off\", attention \"auto\" vs "
                                            "\"explicit_softmax\")")));
}

// A run resumed from the baseline holds some of the baseline's own points: compare says so rather than let a
// point compared with itself pass for a measured "same".
TEST(Compare, APointTakenFromTheBaselineByResumeIsSaidToBeTheSameMeasurement) {
  Report a = testing::sample_report();
  a.created_at = "2026-11-29T10:00:00Z";
  for (Point& p : a.points) p.resumed_from.clear();
  Report b = a;
  b.created_at = "2026-11-30T10:00:00Z";
  std::vector<int64_t> taken;
  for (Point& p : b.points) {
    if (p.status != PointStatus::ok || taken.size() == 2) continue;
    p.resumed_from = a.created_at;
    taken.push_back(p.batch);
  }
  ASSERT_EQ(taken.size(), 2u);
  const std::string expected = "batch " + std::to_string(taken[0]) + ", " + std::to_string(taken[1]) +
                               ": one measurement in two runs (run --resume took it";
  EXPECT_THAT(compare_pair(a, b).notes, ::testing::Contains(HasSubstr(expected)));
  EXPECT_THAT(compare_pair(b, a).notes, ::testing::Contains(HasSubstr(expected)));  // either order
  // Chained: the baseline itself took them from an earlier run, and so did the candidate.
  for (Point& p : a.points)
    if (p.batch == taken[0]) p.resumed_from = "2026-11-28T10:00:00Z";
  for (Point& p : b.points)
    if (p.batch == taken[0]) p.resumed_from = "2026-11-28T10:00:00Z";
  EXPECT_THAT(compare_pair(a, b).notes, ::testing::Contains(HasSubstr(expected)));
  // Measured anew: no such note.
  EXPECT_THAT(compare_pair(testing::sample_report(), testing::sample_candidate()).notes,
              ::testing::Not(::testing::Contains(HasSubstr("--resume"))));
  // Two runs that a scheduler started in one second: the resumed one's points were taken from the other's
  // twin, not from it, and their steps say so.
  Report twin = testing::sample_candidate();
  twin.created_at = "2026-11-28T10:00:00Z";
  for (Point& p : twin.points) {
    p.resumed_from.clear();
    if (p.batch == taken[0]) p.samples_ms = {2.5, 2.6, 2.4, 2.55};  // its own steps, not b's
  }
  EXPECT_THAT(compare_pair(twin, b).notes,
              ::testing::Not(::testing::Contains(HasSubstr("one measurement in two runs"))));
}

// A report compared with itself, or with a copy that has the same created_at and points: every "same" is a
// run compared with itself, and the first note says so.
TEST(Compare, OneRunTwiceIsNoted) {
  Report a = testing::sample_report();
  a.device.backend = "cuda";  // a script's runs are worded apart (below)
  const CompareResult r = compare_pair(a, a);
  const std::string said =
      "A and B are the same run (created_at 2025-01-02T03:04:05Z, the same points): every verdict between "
      "them "
      "compares the run with itself";
  ASSERT_EQ(r.same_run_notes.size(), 1u);
  EXPECT_THAT(r.same_run_notes[0], HasSubstr(said));
  ASSERT_FALSE(r.notes.empty());
  EXPECT_EQ(r.notes[0], r.same_run_notes[0]);
  EXPECT_THAT(to_json(r)["notes"][0].get<std::string>(), HasSubstr(said));
  // A script's steps repeat exactly: two runs of one started in one second read alike, and the words allow
  // it.
  Report scripted = a;
  scripted.device.backend = "scripted";
  EXPECT_THAT(
      compare_pair(scripted, scripted).same_run_notes.at(0),
      HasSubstr("A and B are the same run, or two runs of one script started in one second, whose steps "
                "repeat (created_at"));
  // Of three, the pair that is one run.
  const CompareResult three = compare_reports({a, testing::sample_candidate(), a}, {});
  ASSERT_EQ(three.same_run_notes.size(), 1u);
  EXPECT_THAT(three.same_run_notes[0], HasSubstr("A and C are the same run"));
  EXPECT_EQ(three.copies_of_baseline, std::vector<size_t>{2});
  // Many copies are one note naming them all, beside another run's own pair.
  Report other = testing::sample_candidate();
  other.device.backend = "cuda";
  const CompareResult many = compare_reports({a, other, a, a, other, a}, {});
  ASSERT_EQ(many.same_run_notes.size(), 2u);
  EXPECT_THAT(many.same_run_notes[0], HasSubstr("A, C, D and F are the same run (created_at"));
  EXPECT_THAT(many.same_run_notes[1], HasSubstr("B and E are the same run (created_at"));
  EXPECT_EQ(many.copies_of_baseline, (std::vector<size_t>{2, 3, 5}));  // B and E are a pair, not the baseline
  EXPECT_TRUE(compare_reports({other, a, other}, {}).copies_of_baseline == std::vector<size_t>{2});
  EXPECT_THAT(compare_reports({scripted, scripted, scripted}, {}).same_run_notes.at(0),
              HasSubstr("A, B and C are the same run, or several runs of one script started in one second"));
  // Another created_at, or another sample, is another run.
  Report later = a;
  later.created_at = "2025-01-02T03:04:06Z";
  EXPECT_TRUE(compare_pair(a, later).same_run_notes.empty());
  Report resampled = a;
  for (Point& p : resampled.points)
    if (!p.samples_ms.empty()) p.samples_ms.back() *= 1.001;
  EXPECT_TRUE(compare_pair(a, resampled).same_run_notes.empty());
  EXPECT_TRUE(compare_pair(a, testing::sample_candidate()).same_run_notes.empty());
  // Another precision started in the same second, with the same samples (a scripted device): two runs.
  Report fp16 = a;
  fp16.settings["precision"] = "fp16";
  EXPECT_TRUE(compare_pair(a, fp16).same_run_notes.empty());
}

TEST(Compare, NoiseAloneIsNotAChange) {
  // Overlapping samples with a 3% shift in the means of a very noisy run: the test does not reject.
  Report a = testing::sample_report();
  Report b = a;
  for (size_t i = 0; i < b.points.size(); ++i) {
    if (b.points[i].status != PointStatus::ok) continue;
    b.points[i].samples_ms = testing::sample_steps(b.points[i].step_ms.median * 1.03, 0.3);
    a.points[i].samples_ms = testing::sample_steps(a.points[i].step_ms.median, 0.3);
    b.points[i].samples_per_second = a.points[i].samples_per_second / 1.03;
  }
  const auto result = compare_pair(a, b);
  for (const auto& row : result.rows) {
    if (row.runs[0].status != PointStatus::ok) continue;
    EXPECT_EQ(row.deltas[0].verdict, Verdict::same) << "batch " << row.batch;
    EXPECT_TRUE(row.deltas[0].from_samples);
  }
  EXPECT_FALSE(has_regression(result, 1.0));
}

// Every 20th step three times as long: the mean step time, and so the throughput, is 10% worse, but the ranks
// barely move, so the rank test alone would say "same". The mean's own test calls it, and the gate fails.
TEST(Compare, AFewMuchSlowerStepsAreARegressionOfTheMean) {
  Report a = testing::sample_report();
  a.points = {testing::ok_point(64, 10.0)};
  std::vector<double> steps;
  for (int i = 0; i < 400; ++i) steps.push_back(10.0 * (1 + 0.01 * ((i * 7) % 5 - 2)));
  a.points[0].samples_ms = steps;
  a.points[0].samples_per_second = 64 / (summarize(steps).mean / 1000.0);
  Report b = a;
  for (size_t i = 19; i < steps.size(); i += 20) steps[i] *= 3;
  b.points[0].samples_ms = steps;
  b.points[0].samples_per_second = 64 / (summarize(steps).mean / 1000.0);
  const CompareDelta d = compare_pair(a, b).rows.at(0).deltas.at(0);
  EXPECT_NEAR(d.ratio, 1 / 1.1, 1e-3);
  EXPECT_GT(*d.p_value, 0.01);  // the ranks alone do not reject
  EXPECT_EQ(d.verdict, Verdict::slower);
  EXPECT_TRUE(d.from_mean);
  const CompareResult r = compare_pair(a, b);
  EXPECT_THAT(regressions(r, 5),
              ::testing::Contains(HasSubstr("batch 64: B is 9.2% slower than A beyond its mean's noise")));
  EXPECT_THAT(format_compare(r, false), HasSubstr("slower (mean; p="));
  EXPECT_EQ(to_json(r)["rows"][0]["deltas"][0]["from_mean"], true);
  // With 20 samples a side the same pattern is within the means' noise.
  Report a20 = samples_cut_to(a, 20), b20 = samples_cut_to(b, 20);
  EXPECT_EQ(compare_pair(a20, b20).rows.at(0).deltas.at(0).verdict, Verdict::same);
}

// Most steps 2% faster, every 20th 2.35 times as long: the mean is 4.6% slower, within its noise, while the
// ranks moved significantly the other way. Neither is the change: "same", and the text says why.
TEST(Compare, RanksAndMeanMovingApartIsSameAndSaysSo) {
  Report a = testing::sample_report();
  a.points = {testing::ok_point(64, 10.0)};
  std::vector<double> steps;
  for (int i = 0; i < 100; ++i) steps.push_back(10.0 * (1 + 0.01 * ((i * 7) % 5 - 2)));
  a.points[0].samples_ms = steps;
  a.points[0].samples_per_second = 64 / (summarize(steps).mean / 1000.0);
  Report b = a;
  for (size_t i = 0; i < steps.size(); ++i) steps[i] *= i % 20 == 19 ? 0.98 * 2.35 : 0.98;
  b.points[0].samples_ms = steps;
  b.points[0].samples_per_second = 64 / (summarize(steps).mean / 1000.0);
  const CompareResult r = compare_pair(a, b);
  const CompareDelta& d = r.rows.at(0).deltas.at(0);
  EXPECT_NEAR(d.ratio, 1 / 1.046, 2e-3);
  EXPECT_LT(*d.p_value, kCompareAlpha / 2);       // the ranks: faster
  EXPECT_GT(*d.mean_p_value, kCompareAlpha / 2);  // the mean: slower, within noise
  EXPECT_EQ(d.verdict, Verdict::same);
  EXPECT_TRUE(d.median_and_mean_disagree);
  EXPECT_THAT(format_compare(r, false),
              HasSubstr(fmt::format("same (p={:.2g}; median and mean disagree)", *d.p_value)));
  EXPECT_EQ(to_json(r)["rows"][0]["deltas"][0]["median_and_mean_disagree"], true);
  EXPECT_THAT(regressions(r, 1), Not(::testing::Contains(HasSubstr("slower than A"))));
  // Where they agree, nothing is said.
  EXPECT_FALSE(compare_pair(a, sped_up(a, 1.2)).rows.at(0).deltas.at(0).median_and_mean_disagree);
  EXPECT_THAT(format_compare(compare_pair(a, a), false), Not(HasSubstr("disagree")));
}

// Most steps 1.5% faster, every 20th three times as long: by rank the run is faster (p ~ 1e-100), and its
// mean, the throughput, 7% slower beyond its noise (the walk that found the two disagreeing had the mean's
// verdict and "the ranks did not move"). The mean decides, and both texts say the ranks went the other way.
TEST(Compare, RanksAgainstAMeanBeyondItsNoiseIsTheMeansChangeAndSaysSo) {
  Report a = testing::sample_report();
  a.points = {testing::ok_point(128, 1.0)};
  std::vector<double> steps;
  for (int i = 0; i < 400; ++i) steps.push_back(1.025 + 0.0025 * ((i * 7) % 5 - 2));
  a.points[0].samples_ms = steps;
  a.points[0].samples_per_second = 128 / (summarize(steps).mean / 1000.0);
  Report b = a;
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = i % 20 == 19 ? 3.0 : steps[i] - 0.02;
  b.points[0].samples_ms = steps;
  b.points[0].samples_per_second = 128 / (summarize(steps).mean / 1000.0);
  const CompareResult r = compare_pair(a, b);
  const CompareDelta& d = r.rows.at(0).deltas.at(0);
  EXPECT_LT(d.ratio, 0.95);
  EXPECT_LT(*d.p_value, 1e-50);                   // the ranks: faster
  EXPECT_LT(*d.mean_p_value, kCompareAlpha / 2);  // the mean: slower, beyond its noise
  EXPECT_EQ(d.verdict, Verdict::slower);
  EXPECT_TRUE(d.from_mean);
  EXPECT_TRUE(d.median_and_mean_disagree);
  EXPECT_THAT(format_compare(r, false),
              HasSubstr(fmt::format("slower (mean; p={:.2g}; median and mean disagree)", *d.mean_p_value)));
  EXPECT_THAT(regressions(r, 5), ::testing::Contains(HasSubstr(
                                     "beyond its mean's noise (Welch's t; by rank most steps were faster, "
                                     "and a few much slower ones make the mean)")));
  EXPECT_THAT(regressions(r, 5), Not(::testing::Contains(HasSubstr("the ranks did not move"))));
  EXPECT_EQ(to_json(r)["rows"][0]["deltas"][0]["median_and_mean_disagree"], true);
  // The same steps with the stalls together at the end of a point that stopped short: the means' noise, which
  // allows for drift, covers the change, so "same (stopped short ...)", and the flag, which says the mean
  // decided against the ranks, is not set (a review found it left on a verdict the mean did not decide).
  std::vector<double> drifting = b.points[0].samples_ms;
  std::sort(drifting.begin(), drifting.end());
  b.points[0].samples_ms = drifting;
  b.points[0].stop_reason = "timeout";
  const CompareResult drifted_result = compare_pair(a, b);
  const CompareDelta& drifted = drifted_result.rows.at(0).deltas.at(0);
  EXPECT_EQ(drifted.verdict, Verdict::same);
  EXPECT_TRUE(drifted.short_within_noise);
  EXPECT_FALSE(drifted.median_and_mean_disagree);
}

// Every step 0.5% faster: the tests are sure of it, but it is under the 1% minimum effect. "same", and the
// text says the change is under it, so the tiny p does not read as a change.
TEST(Compare, SignificantChangeUnderTheMinimumEffectSaysSo) {
  Report a = testing::sample_report();
  a.points = {testing::ok_point(64, 10.0)};
  std::vector<double> steps;
  for (int i = 0; i < 100; ++i) steps.push_back(10.0 * (1 + 0.001 * ((i * 7) % 5 - 2)));
  a.points[0].samples_ms = steps;
  a.points[0].samples_per_second = 64 / (summarize(steps).mean / 1000.0);
  const Report b = sped_up(a, 1.005);
  const CompareResult r = compare_pair(a, b);
  const CompareDelta& d = r.rows.at(0).deltas.at(0);
  EXPECT_LT(*d.p_value, kCompareAlpha / 2);
  EXPECT_EQ(d.verdict, Verdict::same);
  EXPECT_TRUE(d.under_min_effect);
  EXPECT_FALSE(d.median_and_mean_disagree);
  EXPECT_THAT(format_compare(r, false),
              HasSubstr(fmt::format("same (under 1%; p={:.2g})", *d.p_value)));  // the rank test's: it moved
  EXPECT_EQ(to_json(r)["rows"][0]["deltas"][0]["under_min_effect"], true);
  // A 2% effect is beyond it: "faster", not flagged.
  const CompareResult faster = compare_pair(a, sped_up(a, 1.02));
  const CompareDelta& beyond = faster.rows.at(0).deltas.at(0);
  EXPECT_EQ(beyond.verdict, Verdict::faster);
  EXPECT_FALSE(beyond.under_min_effect);
  // Identical runs: nothing significant, nothing said.
  EXPECT_FALSE(compare_pair(a, a).rows.at(0).deltas.at(0).under_min_effect);
}

// Two runs of one distribution (10 steps a side, 3% noise): the two tests share alpha, so noise alone calls a
// change at most alpha (1%) of the time, however often the means differ by more than the 1% effect.
TEST(Compare, NoiseAloneCallsAChangeAtMostAlphaOfTheTime) {
  std::mt19937_64 gen(2024);
  const auto normal = [&] {  // Box-Muller from the top 53 bits: the same on every standard library
    const double u1 = (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(gen() >> 11) * 0x1.0p-53;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::acos(-1.0) * u2);
  };
  Report a = testing::sample_report(), b = a;
  a.points.clear();
  b.points.clear();
  for (int64_t batch = 1; batch <= 2000; ++batch) {
    Point pa = testing::ok_point(batch, 10.0), pb = pa;
    for (Point* p : {&pa, &pb}) {
      p->samples_ms.clear();
      for (int i = 0; i < 10; ++i) p->samples_ms.push_back(10.0 * (1 + 0.03 * normal()));
      p->samples_per_second = static_cast<double>(batch) / (summarize(p->samples_ms).mean / 1000.0);
    }
    a.points.push_back(pa);
    b.points.push_back(pb);
  }
  int called = 0, beyond_effect = 0;
  for (const CompareRow& row : compare_pair(a, b).rows) {
    called += row.deltas[0].verdict != Verdict::same;
    beyond_effect += std::fabs(row.deltas[0].ratio - 1) > 0.01;
  }
  EXPECT_GT(beyond_effect, 800);  // the effect alone would call over 40% of them
  EXPECT_LE(called, 20) << "of 2000";
}

TEST(Compare, ThresholdOnlyWithoutSamples) {
  const Report a = testing::sample_report();
  const auto slower = compare_pair(a, sped_up(a, 0.9, false));
  for (const auto& row : slower.rows) {
    if (row.runs[0].status != PointStatus::ok) continue;
    EXPECT_EQ(row.deltas[0].verdict, Verdict::slower);
    EXPECT_FALSE(row.deltas[0].from_samples);
    EXPECT_FALSE(row.deltas[0].p_value);
  }
  EXPECT_EQ(compare_pair(a, sped_up(a, 1.005, false)).rows[0].deltas[0].verdict, Verdict::same);
  EXPECT_THAT(format_compare(slower, false), HasSubstr("slower (no samples)"));
}

TEST(Compare, GeometricMean) {
  const Report a = testing::sample_report();
  const auto result = compare_pair(a, sped_up(a, 1.1));
  EXPECT_EQ(result.geomean.batches, 6u);  // the ok batches: 1, 4, 16, 64, 96, 128
  ASSERT_EQ(result.geomean.deltas.size(), 1u);
  EXPECT_NEAR(result.geomean.deltas[0].ratio, 1.1, 1e-12);
  EXPECT_EQ(result.geomean.deltas[0].verdict, Verdict::faster);
  EXPECT_THAT(format_compare(result, false), HasSubstr("geomean"));
}

TEST(Compare, RegressionThreshold) {
  const Report a = testing::sample_report();
  const auto result = compare_pair(a, sped_up(a, 0.9));  // 10% slower, with clean samples
  EXPECT_TRUE(has_regression(result, 5.0));
  EXPECT_FALSE(has_regression(result, 15.0));
  EXPECT_FALSE(has_regression(compare_pair(a, sped_up(a, 1.2)), 0.0));
  EXPECT_FALSE(has_regression(compare_pair(a, a), 0.0));
}

// A batch that ran in the baseline and no longer fits (or fails) in a candidate is a regression; one that
// fits only in the candidate is not.
TEST(Compare, ABatchThatStopsFittingIsARegression) {
  const Report a = testing::sample_report();
  const Report b = out_of_memory_at(a, 128);
  const auto lines = regressions(compare_pair(a, b), 50.0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "batch 128: ran in A, oom in B (out of memory)");
  EXPECT_TRUE(has_regression(compare_pair(a, b), 50.0));
  EXPECT_FALSE(has_regression(compare_pair(b, a), 0.0));  // the candidate fits more: no regression
  // Nothing was measured at B's batch 128: its rate is null in the JSON, never 0.
  nlohmann::json cell;
  const nlohmann::json compared = to_json(compare_pair(a, b));
  for (const auto& row : compared["rows"])
    if (row["batch"] == 128) cell = row["runs"][1];
  ASSERT_EQ(cell["status"], "oom");
  EXPECT_TRUE(cell["samples_per_second"].is_null());
  const auto slower = regressions(compare_pair(a, sped_up(a, 0.9)), 5.0);
  ASSERT_FALSE(slower.empty());
  EXPECT_THAT(slower[0], HasSubstr("B is 10.0% slower than A beyond noise"));
  // The structured findings carry the same lines with their kind, run and batch.
  const auto found = find_regressions(compare_pair(a, b), 50.0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "failed");
  EXPECT_EQ(found[0].run, 1u);
  EXPECT_EQ(found[0].batch, 128);
  EXPECT_EQ(found[0].text, lines[0]);
  EXPECT_EQ(find_regressions(compare_pair(a, sped_up(a, 0.9)), 5.0).front().kind, "slower");
}

// --batch auto puts each run's edge where its memory ran out, so the baseline's max fit and the candidate's
// first unfit batch need not share a row. A batch the candidate could not fit, no larger than a batch the
// baseline fit, is still a regression; an unfit batch above the baseline's max fit is not.
TEST(Compare, AnUnfitBatchBelowTheBaselinesMaxFitIsARegression) {
  const Report a = testing::sample_report();  // max fit 128
  ASSERT_EQ(compare_pair(a, a).runs[0].max_fit.batch, std::optional<int64_t>(128));
  Report b = a;
  Point unfit = b.points.front();
  unfit.batch = 112;
  unfit.status = PointStatus::oom;
  unfit.reason = "out of memory";
  unfit.samples_ms.clear();
  b.points.push_back(unfit);
  unfit.batch = 192;  // above A's max fit: no evidence either way
  b.points.push_back(unfit);
  const CompareResult result = compare_pair(a, b);
  ASSERT_EQ(result.lost_fits.size(), 1u);
  EXPECT_EQ(result.lost_fits[0].batch, 112);
  EXPECT_EQ(result.lost_fits[0].run, 1u);
  const auto lines = regressions(result, 50.0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "batch 112: oom in B (out of memory), though A fit batch 128");
  EXPECT_THAT(result.notes, ::testing::Contains(lines[0]));
  const nlohmann::json j = to_json(result);
  ASSERT_EQ(j["lost_fits"].size(), 1u);
  EXPECT_EQ(j["lost_fits"][0]["batch"], 112);
  EXPECT_EQ(j["lost_fits"][0]["baseline_max_fit"], 128);
  EXPECT_EQ(j["lost_fits"][0]["run"], "b.json");
  EXPECT_EQ(j["lost_fits"][0]["label"], "B");
  EXPECT_EQ(j["runs"][0]["label"], "A");
  EXPECT_EQ(j["runs"][1]["label"], "B");
  const auto found = find_regressions(result, 5.0);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.back().kind, "lost_fit");
  EXPECT_EQ(found.back().batch, 112);
  EXPECT_EQ(regressions_json(result, found).back()["run"], "b.json");
  EXPECT_EQ(regressions_json(result, found).back()["label"], "B");
  // The other way round, 112 ran in neither, and A's unfit batches are not the candidate's regressions.
  EXPECT_TRUE(compare_pair(b, a).lost_fits.empty());
  // A batch the candidate also ran ok (a retry) is not lost.
  Report retried = b;
  retried.points.push_back(testing::ok_point(112, testing::roofline_step_ms(112)));
  EXPECT_EQ(compare_pair(a, retried).lost_fits.size(), 0u);
  // Accumulation needs its own buffers: A's fit without it says nothing about 112x4.
  Report accumulated = a;
  unfit.batch = 112;
  unfit.accumulation = 4;
  accumulated.points.push_back(unfit);
  EXPECT_TRUE(compare_pair(a, accumulated).lost_fits.empty());
}

// A recommendation with gradient accumulation keeps it: a script reading only the compare JSON must not take
// the micro-batch for the step.
TEST(Compare, RecommendationKeepsItsAccumulation) {
  Report a = testing::sample_report();
  a.analysis.recommended.batch = 256;
  a.analysis.recommended_accumulation = 16;
  const CompareResult result = compare_pair(a, a);
  const nlohmann::json j = to_json(result)["runs"][0]["recommended"];
  EXPECT_EQ(j["batch"], 256);
  EXPECT_EQ(j["accumulation"], 16);
  EXPECT_EQ(j["effective_batch"], 4096);
  EXPECT_THAT(format_compare(result, false),
              HasSubstr("recommended batch 256 with accumulation 16 (effective batch 4096)"));
  // Without accumulation, nothing is added.
  const CompareResult plain = compare_pair(testing::sample_report(), testing::sample_report());
  EXPECT_FALSE(to_json(plain)["runs"][0]["recommended"].contains("accumulation"));
}

// With 3 samples a side the exact test's smallest p is 2 / C(6, 3) = 0.1: it could never call a change at
// alpha 0.01, so a 23% regression read "same". The means' t-test (the spread pooled) decides there instead,
// and says so.
TEST(Compare, TooFewSamplesForTheTestFallBackToTheThreshold) {
  const Report a = samples_cut_to(testing::sample_report(), 3);
  const CompareResult result = compare_pair(a, sped_up(a, 1.0 / 1.3));
  const CompareDelta& d = row_at(result, 64).deltas[0];
  EXPECT_TRUE(d.few_samples);
  EXPECT_FALSE(d.from_samples);
  EXPECT_EQ(d.verdict, Verdict::slower);
  EXPECT_THAT(format_compare(result, false), HasSubstr("slower (few samples; mean p="));
  const auto lines = regressions(result, 5.0);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0],
              HasSubstr("slower than A (too few samples for the rank test; Student's t on the means, "
                        "spread pooled: p="));
  EXPECT_EQ(to_json(result)["rows"][3]["deltas"][0]["few_samples"], true);
  // Two samples against many: past 20 a side the test uses the normal approximation, whose smallest p with 2
  // samples is 0.014 however many the other side has. More baseline samples must not hide a regression.
  Report many = testing::sample_report();
  const Report two = samples_cut_to(sped_up(many, 1.0 / 1.3), 2);
  for (Point& p : many.points) {
    const std::vector<double> base = p.samples_ms;
    for (size_t i = 0; !base.empty() && p.samples_ms.size() < 50; ++i)
      p.samples_ms.push_back(base[i % base.size()] * (1.0 + 1e-6 * static_cast<double>(i + 1)));
  }
  const CompareResult floored = compare_pair(many, two);  // kept: row_at returns into it
  const CompareDelta& floor = row_at(floored, 64).deltas[0];
  EXPECT_TRUE(floor.few_samples);
  EXPECT_EQ(floor.verdict, Verdict::slower);
  // Six a side can reach p = 2 / C(12, 6) = 0.002: the test decides again.
  const Report six = samples_cut_to(testing::sample_report(), 6);
  const CompareResult six_a_side = compare_pair(six, sped_up(six, 1.0 / 1.3));
  const CompareDelta& tested = row_at(six_a_side, 64).deltas[0];
  EXPECT_FALSE(tested.few_samples);
  EXPECT_TRUE(tested.from_samples);
  EXPECT_EQ(tested.verdict, Verdict::slower);
}

// A deterministic step (a scripted device without noise) gives every sample the same time: hundreds of them
// are no more use to the rank test than three, and the verdict says why, not "few samples".
TEST(Compare, EveryStepEqualOnBothSidesSaysSoNotFewSamples) {
  Report a = testing::sample_report();
  for (Point& p : a.points)
    if (!p.samples_ms.empty()) p.samples_ms.assign(250, p.step_ms.mean);
  const CompareResult result = compare_pair(a, a);
  const CompareDelta& d = row_at(result, 64).deltas[0];
  EXPECT_TRUE(d.few_samples);
  EXPECT_TRUE(d.tied_samples);
  EXPECT_EQ(d.verdict, Verdict::same);
  EXPECT_THAT(format_compare(result, false), HasSubstr("same (steps all equal)"));
  EXPECT_THAT(format_compare(result, false), Not(HasSubstr("few samples")));
  // Three varied samples a side are still "few samples".
  const Report three = samples_cut_to(testing::sample_report(), 3);
  const CompareResult varied = compare_pair(three, three);  // kept: row_at returns into it
  EXPECT_TRUE(row_at(varied, 64).deltas[0].few_samples);
  EXPECT_FALSE(row_at(varied, 64).deltas[0].tied_samples);
}

// Three samples a side at 12% noise: a 7% change is inside the noise of both means (a t-test on 4 degrees of
// freedom at p < 0.01 needs about half the mean), so neither a batch nor the geometric mean calls it, and
// the gate passes. Nor does 22% either way. Steps twice as long give p = 0.003 at each of the six batches,
// 0.018 once adjusted for the six (Holm): no batch calls it, but the six together (the geomean) do, and the
// gate fails on that alone. Three times as long (or a third) are called at each batch.
TEST(Compare, FewNoisySamplesWithinTheirNoiseAreTheSame) {
  Report a = samples_cut_to(testing::sample_report(), 3);
  for (Point& p : a.points) {
    if (p.samples_ms.size() != 3) continue;
    const double m = p.samples_ms[0];
    p.samples_ms = {m * 0.88, m, m * 1.12};
  }
  const CompareResult result = compare_pair(a, sped_up(a, 1.0 / 1.07));
  const CompareDelta& d = row_at(result, 64).deltas[0];
  EXPECT_TRUE(d.few_samples);
  EXPECT_EQ(d.verdict, Verdict::same);
  ASSERT_EQ(result.geomean.deltas.size(), 1u);
  EXPECT_EQ(result.geomean.deltas[0].verdict, Verdict::same);
  EXPECT_TRUE(regressions(result, 5.0).empty());
  // Two runs of one command 3 steps a side at 12% noise are often 22% apart: a z-test on twice the means'
  // standard error called such reruns changed 6-10% of the time.
  EXPECT_EQ(row_at(compare_pair(a, sped_up(a, 1.22)), 64).deltas[0].verdict, Verdict::same);
  EXPECT_EQ(row_at(compare_pair(a, sped_up(a, 1.0 / 1.22)), 64).deltas[0].verdict, Verdict::same);
  const CompareResult twice = compare_pair(a, sped_up(a, 1.0 / 2.0));
  EXPECT_EQ(row_at(twice, 64).deltas[0].verdict, Verdict::same);
  EXPECT_EQ(row_at(twice, 64).deltas[0].p_adjusted_for, 6u);
  EXPECT_NEAR(*row_at(twice, 64).deltas[0].mean_p_value, 0.018, 0.001);
  ASSERT_EQ(regressions(twice, 5.0).size(), 1u);
  EXPECT_THAT(
      regressions(twice, 5.0)[0],
      ::testing::StartsWith("geomean over 6 batches: B is 50.0% slower than A beyond the means' combined "
                            "noise (p="));
  EXPECT_THAT(regressions(twice, 5.0)[0], ::testing::EndsWith(", though no batch alone was"));
  const std::vector<Regression> found = find_regressions(twice, 5.0);
  EXPECT_EQ(found[0].kind, "geomean");
  const nlohmann::json findings = regressions_json(twice, found);
  EXPECT_TRUE(findings[0]["batch"].is_null()) << findings.dump();
  EXPECT_TRUE(findings[0]["accumulation"].is_null()) << findings.dump();
  // Over one batch the geomean is that batch, which its row judged: no finding of its own.
  CompareResult one = twice;
  one.geomean.delta_batches[0] = 1;
  EXPECT_TRUE(find_regressions(one, 5.0).empty());
  EXPECT_EQ(row_at(compare_pair(a, sped_up(a, 3.0)), 64).deltas[0].verdict, Verdict::faster);
  // Beyond the noise (steps three times as long) it is called, and the gate fails.
  const CompareResult far = compare_pair(a, sped_up(a, 1.0 / 3.0));
  ASSERT_FALSE(regressions(far, 5.0).empty());
  EXPECT_THAT(regressions(far, 5.0)[0],
              HasSubstr("(too few samples for the rank test; Student's t on the means"));
  EXPECT_EQ(row_at(far, 64).deltas[0].verdict, Verdict::slower);
  EXPECT_EQ(far.geomean.deltas[0].verdict, Verdict::slower);
  EXPECT_TRUE(far.geomean.deltas[0].noise_checked);
  EXPECT_THAT(format_compare(far, false), HasSubstr("slower (threshold and noise)"));
  EXPECT_FALSE(regressions(far, 5.0).empty());
}

// Choosing between devices: each run at its own best batch, and the cost at its recommended batch.
TEST(Compare, BestAgainstBestAndTheRecommendedCost) {
  Report a = testing::sample_report();
  Report b = sped_up(a, 1.2);
  b.analysis.best_throughput.samples_per_second = *a.analysis.best_throughput.samples_per_second * 1.2;
  b.analysis.recommended_cost_per_million_samples = 0.61;
  const CompareResult result = compare_pair(a, b);
  const std::string best =
      fmt::format("best against best: B/A 1.200\u00d7 (B {} samples/s at batch {}",
                  report_format::human_rate(*b.analysis.best_throughput.samples_per_second),
                  *b.analysis.best_throughput.batch);
  EXPECT_TRUE(std::any_of(result.notes.begin(), result.notes.end(), [&](const std::string& n) {
    return n.starts_with(best);
  })) << ::testing::PrintToString(result.notes);
  EXPECT_THAT(format_compare(result, false), HasSubstr("($0.61 per million samples)"));
  EXPECT_EQ(to_json(result)["runs"][1]["recommended_cost_per_million_samples"], 0.61);
  EXPECT_TRUE(to_json(result)["runs"][0]["recommended_cost_per_million_samples"].is_null());
  EXPECT_EQ(to_json(result)["runs"][1]["best_throughput"]["batch"], *b.analysis.best_throughput.batch);
  // With a price in both (cards at different rates), what a million samples cost at each best, and the ratio;
  // without one in either, nothing said of cost; with one alone, that there is nothing to set it beside, and
  // how to give the other run its price.
  for (const std::string& note : result.notes) EXPECT_EQ(note.find("cost"), std::string::npos) << note;
  // MFU against a calibrated GEMM rate and against the datasheet's peak: said not to compare.
  {
    Report calibrated = b;
    calibrated.device.peak_flops_source = "calibrated by `batchsweep devices --calibrate` at 2026-12-01 (x)";
    Report sheet = a;
    sheet.device.peak_flops_source = "spec sheet (configs/gpus.json), dense";
    EXPECT_THAT(
        compare_pair(sheet, calibrated).notes,
        ::testing::Contains("MFU's peaks differ: A the spec sheet's dense peak, B a measured GEMM rate "
                            "(devices --calibrate) (their MFU % do not compare: the samples/s do)"));
    calibrated.device.peak_flops_source = sheet.device.peak_flops_source;
    for (const std::string& note : compare_pair(sheet, calibrated).notes)
      EXPECT_EQ(note.find("MFU"), std::string::npos) << note;
  }
  b.settings["price_per_hour"] = 3.0;
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(HasSubstr("); no cost beside it: A has no --price-per-hour (`batchsweep "
                                            "analyze` of its report with --price-per-hour USD --json FILE "
                                            "gives it one)")));
  a.settings["price_per_hour"] = 2.0;
  b.settings["price_per_hour"] = 3.0;
  const double cost_a = 2.0 * 1e6 / 3600 / *a.analysis.best_throughput.samples_per_second;
  const double cost_b = 3.0 * 1e6 / 3600 / *b.analysis.best_throughput.samples_per_second;
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(HasSubstr(
                  fmt::format("); a million samples there cost B ${:.4g}, A ${:.4g} (B/A {:.3f}\u00d7)",
                              cost_b, cost_a, cost_b / cost_a))));
}

// With three runs, each is judged against the baseline on every batch the two share: a third run that lacks
// batches (a short run, a search) must not take the others' verdicts, or their regressions, with it.
TEST(Compare, ARunLackingBatchesDoesNotHideAnotherRunsVerdicts) {
  const Report a = testing::sample_report();
  const Report b = sped_up(a, 0.8);  // 20% slower everywhere
  Report c = sped_up(a, 1.0);
  const int64_t kept = a.points.front().batch;
  std::erase_if(c.points, [&](const Point& p) { return p.batch != kept; });
  CompareOptions options;
  options.names = {"a.json", "b.json", "c.json"};
  const CompareResult result = compare_reports({a, b, c}, options);
  ASSERT_GT(result.rows.size(), 1u);
  size_t slower = 0;
  for (const CompareRow& row : result.rows) {
    ASSERT_EQ(row.runs.size(), 3u);
    EXPECT_EQ(row.runs[2].absent, row.batch != kept) << row.batch;
    if (row.runs[2].absent) {
      EXPECT_EQ(row.deltas[1].verdict, Verdict::not_comparable);
      EXPECT_TRUE(std::isnan(row.deltas[1].ratio));
    }
    slower += row.deltas[0].verdict == Verdict::slower;
  }
  EXPECT_GT(slower, 1u);
  // The gate finds B's regressions, and C's unswept batches are not failures.
  const std::vector<Regression> found = find_regressions(result, 5);
  EXPECT_EQ(static_cast<size_t>(std::count_if(found.begin(), found.end(),
                                              [](const Regression& r) { return r.kind == "slower"; })),
            slower);
  EXPECT_TRUE(std::none_of(found.begin(), found.end(), [](const Regression& r) { return r.run == 2; }));
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr("C did not sweep batches ")));
  // The shown geometric means keep to the batches every run ran; each run's ratio is over its own pair's, so
  // B's slowdown shows there too, and a note says so.
  EXPECT_EQ(result.geomean.batches, 1u);
  ASSERT_EQ(result.geomean.delta_batches.size(), 2u);
  EXPECT_GT(result.geomean.delta_batches[0], 1u);
  EXPECT_EQ(result.geomean.delta_batches[1], 1u);
  EXPECT_EQ(result.geomean.deltas[0].verdict, Verdict::slower);
  EXPECT_NEAR(result.geomean.deltas[0].ratio, 0.8, 1e-9);
  EXPECT_THAT(result.notes,
              ::testing::Contains(HasSubstr("geomean: each run's ratio to A is over the batches "
                                            "the two ran ok (B ")));
  const std::string table = format_compare(result, false);
  EXPECT_THAT(table, HasSubstr("not swept"));
  const nlohmann::json doc = to_json(result);
  EXPECT_EQ(doc["rows"][1]["runs"][2]["status"], "not_swept");
  EXPECT_TRUE(doc["rows"][1]["runs"][2]["samples_per_second"].is_null());
}

// A report's serving at a request rate: each run at its own best max batch where both serve at one rate, hold
// and percentile (B/A request latency, in the notes and the JSON); otherwise said not to be compared, and how
// to set one rate for all.
Serving serving_at(double rate, std::optional<int64_t> batch, double latency_ms, double se_ms) {
  Serving s;
  s.request_rate = rate;
  s.latency_percentile = 99;
  if (batch) {
    ServingBatch b;
    b.batch = *batch;
    b.latency_ms = latency_ms;
    b.latency_se_ms = se_ms;
    b.settled = true;
    s.batches.push_back(b);
    s.best = BatchChoice(*batch, 4000.0, "lowest p99 request latency", latency_ms);
  } else {
    s.best = BatchChoice(std::nullopt, std::nullopt, "every max batch saturates");
  }
  return s;
}

TEST(Compare, ServingAtOneRateIsComparedEachAtItsBestMaxBatch) {
  Report a = testing::sample_report();
  Report b = sped_up(a, 1.0);
  for (const std::string& note : compare_pair(a, b).notes) EXPECT_THAT(note, Not(HasSubstr("serving")));
  a.analysis.serving = serving_at(1000, 16, 8.0, 0.1);
  b.analysis.serving = serving_at(1000, 32, 4.0, 0.05);
  const CompareResult both = compare_pair(a, b);
  EXPECT_THAT(both.notes, ::testing::Contains(
                              "serving at 1000 requests/s: B/A 0.500\u00d7 in p99 request latency (B 4.00 "
                              "\u00b1 0.0500 ms at max batch 32, A 8.00 \u00b1 0.100 ms at max batch 16; "
                              "simulated from each run's steps)"))
      << ::testing::PrintToString(both.notes);
  const nlohmann::json doc = to_json(both);
  EXPECT_TRUE(doc["runs"][0]["serving"]["latency_ratio"].is_null());
  EXPECT_EQ(doc["runs"][1]["serving"]["latency_ratio"], 0.5);
  EXPECT_EQ(doc["runs"][1]["serving"]["best"]["batch"], 32);
  EXPECT_EQ(doc["runs"][1]["serving"]["best"]["latency_ms"], 4.0);
  EXPECT_EQ(doc["runs"][1]["serving"]["latency_se_ms"], 0.05);
  EXPECT_EQ(doc["runs"][1]["serving"]["request_rate"], 1000);
  // A hold makes another batcher.
  b.analysis.serving->max_queue_delay_ms = 2;
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains("serving not compared: A at 1000 requests/s (p99), B at 1000 requests/s, "
                                  "max queue delay 2 ms (p99) (compare --request-rate PER_S simulates every "
                                  "run at one rate, with one --max-queue-delay (0 unless given))"));
  EXPECT_TRUE(to_json(compare_pair(a, b))["runs"][1]["serving"]["latency_ratio"].is_null());
  // Another percentile: no compare flag aligns it.
  b.analysis.serving->max_queue_delay_ms = 0;
  b.analysis.serving->latency_percentile = 95;
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(HasSubstr("(their latency percentiles differ: analyze each at one "
                                            "--latency-percentile first)")));
  b.analysis.serving = serving_at(1000, std::nullopt, 0, 0);
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(HasSubstr("serving at 1000 requests/s: B serves at no max batch (every max "
                                            "batch saturates); A's p99 request latency is 8.00")));
  b.analysis.serving.reset();
  const CompareResult one = compare_pair(a, b);
  EXPECT_THAT(one.notes, ::testing::Contains(
                             HasSubstr("serving not compared: only A has a request rate (1000 requests/s)")));
  EXPECT_FALSE(to_json(one)["runs"][1].contains("serving"));
}

// Under one p99 budget, a run whose answer differs is noted (a tail-latency regression moves the budget's
// batch down); the gate fails where the baseline's answer is over the budget in a run by more than PCT%; each
// cell and run carries its p99; budgets that differ are said not to be compared, and the gate holds every run
// to the baseline's.
TEST(Compare, TheAnswerUnderTheLatencyBudgetIsCompared) {
  const Report a = testing::sample_report();  // settings.latency_slo_ms 3, latency_slo batch 64 (p99 2.04)
  Report b = sped_up(a, 1.0);
  b.analysis.latency_slo = BatchChoice{16, 7990.0, "p99 step 2 ms within the 3 ms budget", 2.0};
  const CompareResult lower = compare_pair(a, b);
  EXPECT_THAT(lower.notes,
              ::testing::Contains(HasSubstr(
                  "under the 3 ms p99 budget: B serves 7.99k samples/s at batch 16 (p99 2 ms), A")));
  EXPECT_TRUE(regressions(lower, 5).empty());  // noted: B's batch 64 is still within the budget
  const nlohmann::json doc = to_json(lower);
  EXPECT_EQ(doc["runs"][1]["latency_slo"]["batch"], 16);
  EXPECT_EQ(doc["runs"][1]["latency_slo"]["latency_ms"], 2.0);
  EXPECT_EQ(doc["runs"][1]["latency_slo"]["budget_ms"], 3.0);
  EXPECT_DOUBLE_EQ(doc["rows"][0]["runs"][0]["p99_ms"].get<double>(), a.points[0].step_ms.p99);

  // B's tail at batch 64 went to 4 ms (the mean did not move): 33% over the budget.
  for (Point& p : b.points)
    if (p.batch == 64) p.step_ms.p99 = 4.0;
  b.analysis.latency_slo = BatchChoice{std::nullopt, std::nullopt, "no batch meets the 3 ms p99 budget"};
  const CompareResult lost = compare_pair(a, b);
  EXPECT_THAT(lost.notes,
              ::testing::Contains(HasSubstr("under the 3 ms p99 budget: B has no batch within it")));
  EXPECT_THAT(
      regressions(lost, 5),
      ::testing::Contains("batch 64 (A's answer under the 3 ms p99 budget): B's p99 is 4 ms, 33.3% over "
                          "the budget (A 2.039 ms)"));
  EXPECT_TRUE(regressions(lost, 50).empty());  // within 50% of the budget: the edge's noise, for that gate
  // --fail-on-latency-regression gives the budget's finding its own PCT, whatever the throughput's; off,
  // none.
  const auto kinds = [&](const GateThresholds& gate) {
    std::vector<std::string> out;
    for (const Regression& r : find_regressions(lost, gate)) out.push_back(r.kind);
    return out;
  };
  EXPECT_THAT(kinds(GateThresholds{50, 5, true}), ::testing::Contains("latency_budget"));
  EXPECT_THAT(kinds(GateThresholds{5, 50, true}), ::testing::Not(::testing::Contains("latency_budget")));
  EXPECT_THAT(kinds(GateThresholds{0, std::nullopt, true}),
              ::testing::Not(::testing::Contains("latency_budget")));
  EXPECT_EQ(gate_flags(GateThresholds{5, std::nullopt, true}),
            "--fail-on-regression 5 --fail-on-latency-regression off");
  EXPECT_EQ(gate_flags(GateThresholds{5, 20, true}),
            "--fail-on-regression 5 --fail-on-latency-regression 20");
  EXPECT_EQ(gate_flags(uniform_gate(2.5)), "--fail-on-regression 2.5");
  // A breach under 1% (PCT 0 gates any) is said with its digits, not as "0.0% over".
  Report edge = b;
  for (Point& p : edge.points)
    if (p.batch == 64) p.step_ms.p99 = 3.0006;
  EXPECT_THAT(
      regressions(compare_pair(a, edge), 0),
      ::testing::Contains("batch 64 (A's answer under the 3 ms p99 budget): B's p99 is 3.001 ms, 0.02% "
                          "over the budget (A 2.039 ms)"));

  Report other = b;
  other.settings["latency_slo_ms"] = 5.0;
  EXPECT_THAT(compare_pair(a, other).notes,
              ::testing::Contains(
                  "latency budgets differ (A 3 ms p99, B 5 ms p99): the answers under them are not compared "
                  "(--fail-on-regression still holds every run to A's budget)"));
  // The gate holds every run to the baseline's budget: another budget, or none, does not switch it off.
  const std::string breach =
      "batch 64 (A's answer under the 3 ms p99 budget): B's p99 is 4 ms, 33.3% over the budget (A 2.039 ms)";
  EXPECT_THAT(regressions(compare_pair(a, other), 5), ::testing::Contains(breach));
  Report none = b;
  none.settings["latency_slo_ms"] = nullptr;
  EXPECT_THAT(
      compare_pair(a, none).notes,
      ::testing::Contains("latency budgets differ (A 3 ms p99, B none): the answers under them are not "
                          "compared (--fail-on-regression still holds every run to A's budget)"));
  EXPECT_THAT(regressions(compare_pair(a, none), 5), ::testing::Contains(breach));
  Report p95 = b;  // the same milliseconds on another percentile is another budget
  p95.settings["latency_percentile"] = 95;
  EXPECT_THAT(
      compare_pair(a, p95).notes,
      ::testing::Contains("latency budgets differ (A 3 ms p99, B 3 ms p95): the answers under them are not "
                          "compared (--fail-on-regression still holds every run to A's budget)"));
  EXPECT_THAT(regressions(compare_pair(a, p95), 5), ::testing::Contains(breach));
  for (const std::string& note : compare_pair(a, a).notes)
    EXPECT_EQ(note.find("budget"), std::string::npos) << note;
  // A run with no step times at A's answer (a report of rates alone): the budget gate cannot judge it, and a
  // warning beside the gate says so rather than let "passed" read as "held".
  Report bare = sped_up(a, 1.0);
  for (Point& p : bare.points)
    if (p.batch == 64) {
      p.samples_ms.clear();
      p.step_ms = StepStats{};
    }
  const CompareResult unjudged = compare_pair(a, bare);
  EXPECT_THAT(
      unjudged.short_notes,
      ::testing::Contains("B: batch 64 (A's answer under the 3 ms p99 budget) has no step times, so its "
                          "latency there was not judged against the budget"));
  EXPECT_TRUE(regressions(unjudged, 5).empty());
  // Latency not gated (--fail-on-latency-regression off): a note, not a warning beside the gate's answer.
  CompareOptions ungated;
  ungated.latency_gated = false;
  const CompareResult off = compare_reports({a, bare}, ungated);
  EXPECT_TRUE(off.short_notes.empty()) << ::testing::PrintToString(off.short_notes);
  EXPECT_THAT(off.notes, ::testing::Contains(::testing::HasSubstr("was not judged against the budget")));
}

// A point that stopped short of its targets (timeout, sample cap, noise settled) is named in a note.
TEST(Compare, PointsThatStoppedShortAreNoted) {
  const Report a = testing::sample_report();
  Report b = sped_up(a, 1.0);
  for (Point& p : b.points) {
    if (p.batch != 64 && p.batch != 16) continue;
    p.stop_reason = "timeout";
    p.noise_pct = p.batch == 64 ? 11.8 : 4.0;
  }
  const CompareResult result = compare_pair(a, b);
  EXPECT_THAT(
      result.notes,
      ::testing::Contains("B: batches 16, 64 stopped before meeting their measurement targets (noise up "
                          "to 11.8%), so their verdicts rest on noisier means"));
  // Kept apart too, for the CLI to say beside a gate's answer.
  ASSERT_EQ(result.short_notes.size(), 1u);
  EXPECT_EQ(result.short_notes[0].rfind("B: batches 16, 64 stopped before meeting", 0), 0u);
  for (const std::string& note : compare_pair(a, a).notes)
    EXPECT_EQ(note.find("stopped before meeting"), std::string::npos) << note;
  EXPECT_TRUE(compare_pair(a, a).short_notes.empty());
}

// A point timed while other processes competed for the CPUs (or the hypervisor took them) is named in a note,
// kept apart for the CLI to say beside a gate's answer: a verdict there may be the machine's load.
TEST(Compare, PointsTimedOnABusyHostAreNoted) {
  const Report a = testing::sample_report();
  Report b = sped_up(a, 1.0);
  const auto host = [](double others, double steal) {
    return test::host_figures(2.0, 3.6, others, steal, std::nullopt);
  };
  for (Point& p : b.points)
    p.host = p.batch == 16 ? host(0.8, 0.0) : p.batch == 64 ? host(1.3, 0.0) : host(0.01, 0.0);
  const CompareResult result = compare_pair(a, b);
  const std::string said =
      "B: batches 16, 64 were timed while other processes competed for its CPUs, taking up to 1.3 CPUs, so a "
      "verdict "
      "there may be the machine's load, not a change (the points' host figures)";
  EXPECT_THAT(result.notes, ::testing::Contains(said));
  EXPECT_THAT(result.short_notes, ::testing::Contains(said));
  // In the JSON, per cell, for a script that reads the gate rather than its notes.
  const nlohmann::json doc = to_json(result);
  for (const nlohmann::json& row : doc["rows"]) {
    const int64_t batch = row["batch"];
    EXPECT_EQ(row["runs"][1]["busy_host"], batch == 16 || batch == 64) << batch;
    EXPECT_EQ(row["runs"][0]["busy_host"], false) << batch;
  }
  // Steal alone says so too; a quiet host says nothing.
  for (Point& p : b.points) p.host = p.batch == 16 ? host(0.0, 20.0) : host(0.0, 0.0);
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(
                  "B: batch 16 was timed while the hypervisor took up to 20% of its CPU time (steal), so a "
                  "verdict there may be the machine's load, not a change (the points' host figures)"));
  // Both causes, each with its worst figure, over different points.
  for (Point& p : b.points)
    p.host = p.batch == 16 ? host(0.0, 12.0) : p.batch == 64 ? host(0.9, 0.0) : host(0.0, 0.0);
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(::testing::HasSubstr(
                  "B: batches 16, 64 were timed while other processes competed for its CPUs, taking up to "
                  "0.9 CPUs and the hypervisor took up to 12% of its CPU time (steal), so")));
  // A long wait in a window too short to read /proc/stat's ticks: the wait is named, not steal.
  const PointHost waited = test::host_figures(0.1, 0.1, std::nullopt, std::nullopt, 0.05);
  for (Point& p : b.points) p.host = p.batch == 16 ? waited : host(0.0, 0.0);
  EXPECT_THAT(compare_pair(a, b).notes,
              ::testing::Contains(::testing::HasSubstr(
                  "B: batch 16 was timed while its threads waited for a CPU, so a verdict there")));
  for (Point& p : b.points) p.host = host(0.01, 0.0);
  EXPECT_TRUE(compare_pair(a, b).short_notes.empty());
}

// A run whose own rounds disagreed at a batch: the machine changed speed during it, which a verdict may be.
TEST(Compare, PointsWhoseRoundsDisagreedAreNoted) {
  const Report a = testing::sample_report();
  Report b = sped_up(a, 1.0);
  for (Point& p : b.points) {
    if (p.status != PointStatus::ok) continue;
    const double ms = p.step_ms.mean;
    const double slow = p.batch == 64 ? 1.05 : 1.0;  // batch 64's second round 5% slower
    p.samples_ms = {ms,        ms * 1.001,        ms * 0.999,        ms,
                    ms * slow, ms * slow * 1.001, ms * slow * 0.999, ms * slow};
    p.rounds = {PointRound{4, "noise target", PointStatus::ok, {}},
                PointRound{4, "steps of round 1", PointStatus::ok, {}}};
  }
  const CompareResult result = compare_pair(a, b);
  const std::string said =
      "B: the rounds of batch 64 disagreed (up to 5.0% apart): the machine changed speed during that "
      "run, so a verdict there may be the machine's, not a change (its points' rounds[])";
  EXPECT_THAT(result.notes, ::testing::Contains(said));
  EXPECT_THAT(result.short_notes, ::testing::Contains(said));
  for (Point& p : b.points) p.rounds.clear();
  for (const std::string& note : compare_pair(a, b).notes)
    EXPECT_EQ(note.find("rounds"), std::string::npos) << note;
}

// With --rounds, the spread between a run's rounds is in its means' noise (round_noise): a round is a rerun
// of its point, and two runs differ as their rounds do. Rounds 8% apart at every batch in both runs: B's 6%
// is within that, though each round's steps are sure of it; the same steps without rounds are a change.
TEST(Compare, WithRoundsAChangeMustClearTheRoundsSpread) {
  Report a = testing::sample_report();
  const auto two_rounds = [](Report r, double scale) {
    for (Point& p : r.points) {
      if (p.status != PointStatus::ok) continue;
      const double ms = p.step_ms.mean * scale;
      p.samples_ms.clear();
      for (int i = 0; i < 40; ++i)
        p.samples_ms.push_back(ms * (i < 20 ? 0.96 : 1.04) * (i % 2 ? 1.002 : 0.998));
      p.rounds = {PointRound{20, "noise target", PointStatus::ok, {}},
                  PointRound{20, "steps of round 1", PointStatus::ok, {}}};
      p.samples_per_second = static_cast<double>(p.batch) / (ms / 1000);
    }
    return r;
  };
  a = two_rounds(a, 1.0);
  const Report b = two_rounds(a, 1.06);
  const CompareResult result = compare_pair(a, b);
  size_t judged = 0;
  for (const CompareRow& row : result.rows) {
    if (!row.deltas[0].from_samples) continue;
    ++judged;
    EXPECT_EQ(row.deltas[0].verdict, Verdict::same) << row.batch;
    EXPECT_TRUE(row.deltas[0].within_drift_noise) << row.batch;
  }
  EXPECT_GE(judged, 3u);
  EXPECT_EQ(result.geomean.deltas[0].verdict, Verdict::same);
  EXPECT_TRUE(regressions(result, 5.0).empty()) << ::testing::PrintToString(regressions(result, 5.0));
  // The geometric mean: round 2 is slower at every batch, so the mean of the batches moves round to round as
  // much as one batch does, and B's 10% is within that (the rows' errors taken as independent put it beyond).
  const CompareResult ten = compare_pair(a, two_rounds(a, 1.10));
  EXPECT_EQ(ten.geomean.deltas[0].verdict, Verdict::same);
  ASSERT_TRUE(ten.geomean.deltas[0].mean_p_value.has_value());
  EXPECT_GT(*ten.geomean.deltas[0].mean_p_value, 0.01);
  EXPECT_TRUE(regressions(ten, 5.0).empty()) << ::testing::PrintToString(regressions(ten, 5.0));
  // Far beyond the rounds' spread it is a regression.
  EXPECT_EQ(compare_pair(a, two_rounds(a, 3.0)).geomean.deltas[0].verdict, Verdict::slower);
  // The same steps without rounds: each batch's halves are drift its own noise allows for, but the rows'
  // errors taken as independent put the geometric mean's 6% beyond noise: a regression.
  Report a_once = a, b_once = b;
  for (Report* r : {&a_once, &b_once})
    for (Point& p : r->points) p.rounds.clear();
  const CompareResult once = compare_pair(a_once, b_once);
  EXPECT_EQ(once.geomean.deltas[0].verdict, Verdict::slower);
  EXPECT_FALSE(regressions(once, 5.0).empty());
}

// A gate's slower finding at a point timed on a busy host says so, in its line and in the JSON, so a CI job
// can rerun before it fails the build; a finding on a quiet host does not.
TEST(Compare, ASlowerFindingOnABusyHostSaysSo) {
  const Report a = testing::sample_report();
  Report b = sped_up(a, 0.5);
  const PointHost busy = test::host_figures(2.0, 2.0, 1.0, std::nullopt, 0.5);
  for (Point& p : b.points)
    if (p.batch == 64) p.host = busy;
  const CompareResult result = compare_pair(a, b);
  const std::vector<Regression> found = find_regressions(result, 5.0);
  ASSERT_FALSE(found.empty());
  bool saw_busy = false, saw_quiet = false;
  for (const Regression& r : found) {
    if (r.kind != "slower") continue;
    const bool busy_line = r.text.find(
                               "; timed on a busy host in B, so it may be the machine's load (rerun on "
                               "a quiet machine)") != std::string::npos;
    EXPECT_EQ(busy_line, r.batch == 64) << r.text;
    EXPECT_EQ(r.busy_host, r.batch == 64) << r.text;
    (r.batch == 64 ? saw_busy : saw_quiet) = true;
  }
  EXPECT_TRUE(saw_busy);
  EXPECT_TRUE(saw_quiet);
  for (const nlohmann::json& f : regressions_json(result, found))
    EXPECT_EQ(f["busy_host"], f["kind"] == "slower" && f["batch"] == 64) << f.dump();
  // Busy in the baseline only: named too.
  Report base = a;
  for (Point& p : base.points)
    if (p.batch == 64) p.host = busy;
  for (const Regression& r : find_regressions(compare_pair(base, sped_up(a, 0.5)), 5.0))
    if (r.kind == "slower" && r.batch == 64) {
      EXPECT_NE(r.text.find("busy host in A,"), std::string::npos) << r.text;
    }
}

// Steps that drift together (a busy machine; steps that would not settle) make the tests, which take each
// step as independent, call a shift no rerun reproduces. So where a point stopped short, or its steps drift
// (the batch means' spread beyond independent steps'), a change must clear the means' noise too, each
// allowing for drift; the text says which. Two modes alternating do not drift: the ranks decide there.
TEST(Compare, AChangeMustClearTheMeansNoise) {
  Report a = testing::sample_report();
  Point* base = nullptr;
  for (Point& p : a.points)
    if (p.batch == 64) base = &p;
  ASSERT_NE(base, nullptr);
  // Two modes, 1 and 3 ms: a 10% slowdown moves three pairs in four one way (the ranks are sure), while the
  // means' noise (each about 3.5% at 200 steps) is wider than the change.
  base->samples_ms.clear();
  for (int i = 0; i < 200; ++i) base->samples_ms.push_back(i % 2 == 0 ? 1.0 : 3.0);
  base->samples_per_second = 64 / 2.0e-3;
  Report b = sped_up(a, 1.0 / 1.1);
  const CompareResult met = compare_pair(a, b);
  const CompareDelta settled = row_at(met, 64).deltas[0];
  EXPECT_EQ(settled.verdict, Verdict::slower);
  EXPECT_FALSE(settled.within_drift_noise);
  EXPECT_FALSE(settled.drift_p_value.has_value());
  for (Point& p : b.points)
    if (p.batch == 64) p.stop_reason = "timeout";
  const CompareResult result = compare_pair(a, b);
  const CompareDelta& d = row_at(result, 64).deltas[0];
  EXPECT_EQ(d.verdict, Verdict::same);
  EXPECT_TRUE(d.short_within_noise);
  EXPECT_TRUE(d.within_drift_noise);
  EXPECT_TRUE(d.from_samples);
  EXPECT_THAT(format_compare(result, false), HasSubstr("same (stopped short, within the means' noise)"));
  EXPECT_EQ(to_json(result)["rows"][3]["deltas"][0]["short_within_noise"], true);
  // The other batches met their targets: their 10% is a regression, batch 64's is not.
  const std::vector<std::string> found = regressions(result, 5.0);
  EXPECT_TRUE(std::any_of(found.begin(), found.end(), [](const std::string& l) {
    return l.find("batch 16:") == 0;
  })) << ::testing::PrintToString(found);
  for (const std::string& line : found) EXPECT_EQ(line.find("batch 64:"), std::string::npos) << line;
  // A change beyond the means' noise is still one, stopped short or not.
  Report slower = sped_up(a, 1.0 / 1.5);
  for (Point& p : slower.points)
    if (p.batch == 64) p.stop_reason = "timeout";
  EXPECT_EQ(row_at(compare_pair(a, slower), 64).deltas[0].verdict, Verdict::slower);

  // Steps that drift together (a slow first half, then a fast one: a busy machine): stddev / sqrt(n) would
  // count each of 200 steps as evidence, and 40% would clear it; the batch means know the two halves are two
  // pieces of evidence, and the change is within their noise, targets met or not.
  base->samples_ms.clear();
  for (int i = 0; i < 200; ++i) base->samples_ms.push_back(i < 100 ? 3.0 : 1.0);
  Report drifted = sped_up(a, 1.0 / 1.4);
  const CompareResult drift_met = compare_pair(a, drifted);
  const CompareDelta& met_drift = row_at(drift_met, 64).deltas[0];
  EXPECT_EQ(met_drift.verdict, Verdict::same);
  EXPECT_TRUE(met_drift.within_drift_noise);
  EXPECT_FALSE(met_drift.short_within_noise);
  ASSERT_TRUE(met_drift.drift_p_value.has_value());
  EXPECT_GE(*met_drift.drift_p_value, 0.01);
  EXPECT_THAT(format_compare(drift_met, false),
              HasSubstr("same (within the means' noise, allowing for drift)"));
  EXPECT_EQ(to_json(drift_met)["rows"][3]["deltas"][0]["within_drift_noise"], true);
  for (Point& p : drifted.points)
    if (p.batch == 64) p.stop_reason = "noise settled";
  const CompareDelta drift = row_at(compare_pair(a, drifted), 64).deltas[0];
  EXPECT_EQ(drift.verdict, Verdict::same);
  EXPECT_TRUE(drift.short_within_noise);
}

// A point that timed one step (a step longer than --timeout) has no noise to clear: two runs
// 9% apart there are "same (one step: noise unknown)", not a regression, and a note names the batch with the
// change seen, for the gate to say on stderr.
TEST(Compare, OneStepThatStoppedShortCallsNoChange) {
  Report a = one_step_each(testing::sample_report());
  const Report b = sped_up(a, 1.0 / 1.1);
  const CompareResult result = compare_pair(a, b);
  const CompareDelta& d = row_at(result, 64).deltas[0];
  EXPECT_EQ(d.verdict, Verdict::same);
  EXPECT_TRUE(d.one_step);
  EXPECT_FALSE(d.from_samples);
  EXPECT_THAT(format_compare(result, false), HasSubstr("same (one step: noise unknown)"));
  EXPECT_EQ(to_json(result)["rows"][3]["deltas"][0]["one_step"], true);
  // Cells and deltas carry the runs' labels: one file given twice is told apart by them.
  EXPECT_EQ(to_json(result)["rows"][3]["runs"][0]["label"], "A");
  EXPECT_EQ(to_json(result)["rows"][3]["runs"][1]["label"], "B");
  EXPECT_EQ(to_json(result)["rows"][3]["deltas"][0]["label"], "B");
  EXPECT_EQ(to_json(result)["geomean"]["deltas"][0]["label"], "B");
  for (const std::string& line : regressions(result, 5.0))
    EXPECT_EQ(line.find("slower than A"), std::string::npos) << line;
  EXPECT_THAT(result.short_notes, ::testing::Contains(HasSubstr("B 9.1% slower at 64")));
  EXPECT_THAT(result.short_notes, ::testing::Contains(HasSubstr("one timed step, whose noise is unknown")));
  // No judged mean is made of rows nobody can judge: the geometric mean does not call them slower either.
  EXPECT_NE(result.geomean.deltas[0].verdict, Verdict::slower);
  // However the points stopped, one step against one has no noise to clear.
  for (Point& p : a.points) p.stop_reason = "noise target";
  const Report b2 = sped_up(a, 1.0 / 1.1);
  EXPECT_EQ(row_at(compare_pair(a, b2), 64).deltas[0].verdict, Verdict::same);
}

// One step against the other run's many: a change only beyond every one of them. A regression that made the
// step 20x longer than --timeout (one step) fails the gate; one step inside the baseline's spread does not.
TEST(Compare, OneStepAgainstManyIsAChangeOnlyBeyondEveryStep) {
  const Report a = testing::sample_report();
  const Report b = one_step_each(sped_up(a, 1.0 / 20));
  const CompareResult slow = compare_pair(a, b);
  const CompareDelta& d = row_at(slow, 64).deltas[0];
  EXPECT_EQ(d.verdict, Verdict::slower);
  EXPECT_TRUE(d.one_step);
  EXPECT_THAT(format_compare(slow, false),
              HasSubstr("slower (one step, beyond every step of the other run; p="));
  EXPECT_THAT(regressions(slow, 5),
              ::testing::Contains(HasSubstr("batch 64: B is 95.0% slower than A (one step")));
  // The same single step placed inside A's spread: within what A's own steps did, no change.
  Report inside = a;
  for (Point& p : inside.points) {
    if (p.status != PointStatus::ok || p.samples_ms.size() < 2) continue;
    const auto [low, high] = std::minmax_element(p.samples_ms.begin(), p.samples_ms.end());
    const double mid = (*low + *high) / 2;
    p.samples_ms = {mid};
    p.samples_per_second = static_cast<double>(p.batch) / (mid / 1000);
  }
  for (const CompareRow& row : compare_pair(a, inside).rows) {
    if (row.deltas[0].one_step) {
      EXPECT_EQ(row.deltas[0].verdict, Verdict::same) << row.batch;
    }
  }
  // Just past the slowest of three steps (7% over their mean, 1% apart): beyond every one of three happens
  // by chance half the time, and the prediction test on 2 degrees of freedom gives p = 0.026, so no change.
  // One step 20x longer than three is still one.
  const Report three = samples_cut_to(a, 3);
  Report past = three;
  for (Point& p : past.points) {
    if (p.status != PointStatus::ok || p.samples_ms.size() < 2) continue;
    const double one = summarize(p.samples_ms).mean * 1.07;
    p.samples_ms = {one};
    p.samples_per_second = static_cast<double>(p.batch) / (one / 1000);
  }
  const CompareResult near = compare_pair(three, past);
  EXPECT_EQ(row_at(near, 64).deltas[0].verdict, Verdict::same);
  EXPECT_TRUE(regressions(near, 5).empty());
  const CompareResult twenty = compare_pair(three, one_step_each(sped_up(three, 1.0 / 20)));
  EXPECT_EQ(row_at(twenty, 64).deltas[0].verdict, Verdict::slower);
  // Ten times longer than two steps 10% apart: t on one degree of freedom is 109, p = 0.006 < alpha.
  Report two = samples_cut_to(a, 2);
  for (Point& p : two.points) {
    if (p.status != PointStatus::ok || p.samples_ms.size() < 2) continue;
    p.samples_ms = {4.0, 4.4};
    p.samples_per_second = static_cast<double>(p.batch) / (4.2 / 1000);
  }
  Report ten = two;
  for (Point& p : ten.points) {
    if (p.status != PointStatus::ok || p.samples_ms.size() < 2) continue;
    p.samples_ms = {42.0};
    p.samples_per_second = static_cast<double>(p.batch) / (42.0 / 1000);
  }
  // At one batch; at each of six, p = 0.006 is 0.035 once adjusted for the six (Holm), and no change.
  const auto only_64 = [](Report r) {
    std::erase_if(r.points, [](const Point& p) { return p.batch != 64; });
    return r;
  };
  const CompareResult tenfold = compare_pair(only_64(two), only_64(ten));
  EXPECT_EQ(row_at(tenfold, 64).deltas[0].verdict, Verdict::slower);
  EXPECT_FALSE(regressions(tenfold, 5).empty());
  const CompareResult six = compare_pair(two, ten);
  EXPECT_EQ(row_at(six, 64).deltas[0].verdict, Verdict::same);
  EXPECT_NEAR(*row_at(six, 64).deltas[0].mean_p_value, 6 * *row_at(tenfold, 64).deltas[0].mean_p_value, 1e-9);
  EXPECT_THAT(format_compare(six, false),
              HasSubstr("same (one step, within the other run's spread: p=0.035)"));
  // Steps all equal on the other side (a deterministic step): any other step lies beyond them.
  Report flat = two;
  for (Point& p : flat.points)
    if (p.status == PointStatus::ok && p.samples_ms.size() == 2) {
      p.samples_ms = {4.0, 4.0, 4.0, 4.0};
      p.samples_per_second = static_cast<double>(p.batch) / (4.0 / 1000);
    }
  EXPECT_EQ(row_at(compare_pair(flat, ten), 64).deltas[0].verdict, Verdict::slower);
  // Within the other run's spread, judged "same" (not "noise unknown"), and the row is judged.
  const CompareResult within = compare_pair(three, past);
  EXPECT_FALSE(row_at(within, 64).deltas[0].unjudged());
  EXPECT_THAT(format_compare(within, false), HasSubstr("same (one step, within the other run's spread: p="));
}

// Many samples a side: the geometric mean's noise is small, and a 3% change over every batch is called.
TEST(Compare, TheGeometricMeanCallsAChangeBeyondItsNoise) {
  const Report a = testing::sample_report();
  const CompareResult result = compare_pair(a, sped_up(a, 1.0 / 1.03));
  EXPECT_EQ(result.geomean.deltas[0].verdict, Verdict::slower);
}

// With three runs a batch the baseline and the candidate swept but a third did not is still their compared
// row: a candidate that could not fit it is a failed batch there.
TEST(Compare, ABatchMissingFromAThirdRunIsStillCaught) {
  const Report a = testing::sample_report();
  const Report b = out_of_memory_at(a, 128);
  Report c = a;
  std::erase_if(c.points, [](const Point& p) { return p.batch == 128; });
  CompareOptions options;
  options.names = {"a.json", "b.json", "c.json"};
  const CompareResult result = compare_reports({a, b, c}, options);
  const auto lines = regressions(result, 50.0);
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "batch 128: ran in A, oom in B (out of memory)");
  EXPECT_TRUE(result.lost_fits.empty());
}

TEST(Compare, MismatchedModelsNameBothFiles) {
  const Report a = testing::sample_report();
  Report b = a;
  b.settings["model"]["name"] = "resnet-ish";
  try {
    (void)compare_pair(a, b);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a.json and b.json: different models (mlp-small vs resnet-ish)"));
  }
  CompareOptions allow;
  allow.allow_model_mismatch = true;
  const auto result = compare_pair(a, b, allow);
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr("models differ: A mlp-small, B resnet-ish")));
}

// One name, other layers: refused, and where --allow-model-mismatch lets it through, said in the notes (the
// names alone would make it look like one model's comparison).
TEST(Compare, ModelsWithOneNameAndOtherLayersAreNoted) {
  const Report a = testing::sample_report();
  Report b = a;
  b.settings["model"]["source"] = "wide.json";
  EXPECT_THROW((void)compare_pair(a, b), InputError);
  CompareOptions allow;
  allow.allow_model_mismatch = true;
  const auto result = compare_pair(a, b, allow);
  EXPECT_THAT(result.notes, ::testing::Contains(HasSubstr(
                                "A and B: different models, both named mlp-small (settings.model.source: "
                                "\"preset:mlp-small\" vs \"wide.json\")")));
  EXPECT_THAT(compare_pair(a, a).notes, ::testing::Not(::testing::Contains(HasSubstr("different models"))));
}

TEST(Compare, MismatchedModeOrSchemaIsAnError) {
  const Report a = testing::sample_report();
  Report b = a;
  b.settings["mode"] = "infer";
  CompareOptions allow;
  allow.allow_model_mismatch = true;
  EXPECT_THROW((void)compare_pair(a, b, allow), InputError);
  b = a;
  b.schema_version = 2;
  EXPECT_THROW((void)compare_pair(a, b), InputError);
  EXPECT_THROW((void)compare_reports({a}, {}), UsageError);
}

// A minimal report (schema_version and points, as the schema allows) says no mode: it conflicts with none.
TEST(Compare, AReportWithoutAModeComparesWithAnyMode) {
  Report a = testing::sample_report();
  Report b = a;
  b.settings = nlohmann::json::object();
  CompareOptions allow;
  allow.allow_model_mismatch = true;  // nor does it name its model
  const auto result = compare_pair(a, b, allow);
  EXPECT_FALSE(result.rows.empty());
  b = a;
  b.settings["mode"] = "infer";
  a.settings.erase("mode");
  EXPECT_NO_THROW((void)compare_pair(b, a, allow));
  // A mode-less baseline does not let a training run and an inference run through together.
  const Report train = testing::sample_report();
  EXPECT_THROW((void)compare_reports({a, train, b}, allow), InputError);
}

TEST(Compare, ThreeRunsAndDefaultNames) {
  const Report a = testing::sample_report();
  const auto result = compare_reports({a, sped_up(a, 1.1), sped_up(a, 0.9)}, {});
  ASSERT_EQ(result.runs.size(), 3u);
  EXPECT_EQ(result.runs[2].name, "run 3");
  EXPECT_EQ(result.rows[0].deltas.size(), 2u);
  EXPECT_EQ(result.rows[1].deltas[0].verdict, Verdict::faster);
  EXPECT_EQ(result.rows[1].deltas[1].verdict, Verdict::slower);
  const std::string text = format_compare(result, false);
  EXPECT_THAT(text, HasSubstr("C samples/s"));
  EXPECT_THAT(text, HasSubstr("C verdict"));
}

TEST(Compare, Printers) {
  const auto result = compare_pair(testing::sample_report(), testing::sample_candidate());
  const std::string plain = format_compare(result, false);
  EXPECT_THAT(plain, Not(HasSubstr("\x1b[")));
  EXPECT_THAT(plain, HasSubstr("A: knee batch 64 (stable), max fit batch 128, best batch 64 (31.9k "
                               "samples/s), recommended batch 64"));
  const std::string colored = format_compare(result, true);
  EXPECT_THAT(colored, HasSubstr("\x1b[31m"));  // the slower row
  EXPECT_THAT(colored, HasSubstr("\x1b[32m"));  // the faster row
  const std::string md = format_compare_markdown(result);
  EXPECT_THAT(md, HasSubstr("| batch | A samples/s | B samples/s | B/A | verdict |"));
  EXPECT_THAT(md, HasSubstr("- **A** (baseline): a.json"));
  EXPECT_THAT(
      md,
      HasSubstr(
          "only beyond every one of them and their spread (p < 0.01)._"));  // the console's rule, in full
  EXPECT_THAT(md, Not(HasSubstr("### Gate")));
  // With the gate, the markdown says its answer and each regression, as stderr does.
  const std::string gated = format_compare_markdown(result, 5.0);
  const std::vector<std::string> found = regressions(result, 5.0);
  ASSERT_FALSE(found.empty());
  EXPECT_THAT(gated, HasSubstr("### Gate: `--fail-on-regression 5`: **failed**\n\n- "));
  for (const std::string& line : found) EXPECT_THAT(gated, HasSubstr("- " + line + "\n"));
  const auto same = compare_pair(testing::sample_report(), testing::sample_report());
  EXPECT_THAT(
      format_compare_markdown(same, 5.0),
      HasSubstr("### Gate: `--fail-on-regression 5`: passed\n\nNo run is slower than the baseline, at a "
                "batch or over all of them, beyond noise and by more than 5%, lost a batch that fit, failed "
                "a batch the baseline "
                "ran, or went more than 5% over the baseline's latency budget."));
  // Under the minimum effect the throughput gate acts at it, and the section says so.
  EXPECT_THAT(
      format_compare_markdown(same, 0.5),
      HasSubstr("by more than 1% (compare calls no throughput change under 1%, so the gate acts there)"));
  // Without a baseline budget there is none to go over, and the sentence does not name one.
  Report unbudgeted = testing::sample_report();
  unbudgeted.settings["latency_slo_ms"] = nullptr;
  EXPECT_THAT(format_compare_markdown(compare_pair(unbudgeted, unbudgeted), 5.0),
              HasSubstr("by more than 5%, lost a batch that fit or failed a batch the baseline ran.\n"));

  const nlohmann::json doc = to_json(result);
  EXPECT_EQ(doc["baseline"], "a.json");
  EXPECT_EQ(doc["runs"][1]["precision"], "fp16");
  EXPECT_EQ(doc["runs"][0]["knee"]["batch"], 64);
  const auto& row4 = doc["rows"][1];
  EXPECT_EQ(row4["batch"], 4);
  EXPECT_EQ(row4["deltas"][0]["verdict"], "faster");
  EXPECT_EQ(row4["deltas"][0]["from_samples"], true);
  EXPECT_TRUE(row4["deltas"][0]["p_value"].is_number());
  EXPECT_TRUE(doc["rows"].back()["deltas"][0]["ratio"].is_null());  // 512: oom in both
  EXPECT_EQ(doc["geomean"]["batches"], 5);
}

}  // namespace

// Each run's p's are adjusted across its batches (Holm): a batch's p in a comparison of many is its p alone
// times at most the tests in its family, and the tails are a family of their own. 600 steps a side at every
// batch, B stalling (1.5x) every 25th step: each tail is judged, and adjusted for the others.
TEST(Compare, PValuesAreAdjustedAcrossTheBatches) {
  Report a = testing::sample_report();
  a.settings["mode"] = "infer";
  uint64_t state = 12345;
  const auto jitter = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + 0.03 * (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
  };
  Report b = a;
  for (size_t k = 0; k < a.points.size(); ++k) {
    Point &pa = a.points[k], &pb = b.points[k];
    if (pa.status != PointStatus::ok) continue;
    const double base = testing::roofline_step_ms(pa.batch);
    pa.samples_ms.clear();
    pb.samples_ms.clear();
    for (int i = 0; i < 600; ++i) {
      pa.samples_ms.push_back(base * jitter());
      pb.samples_ms.push_back(base * jitter() * (i % 25 == 24 ? 1.5 : 1.0));
    }
    pa.resumed_from.clear();
    pb.resumed_from.clear();
    for (Point* p : {&pa, &pb}) {
      p->step_ms = summarize(p->samples_ms);
      p->samples_per_second = static_cast<double>(p->batch) / (p->step_ms.mean / 1000);
    }
  }
  const auto only_64 = [](Report r) {
    std::erase_if(r.points, [](const Point& p) { return p.batch != 64; });
    return r;
  };
  const CompareResult all = compare_pair(a, b), one = compare_pair(only_64(a), only_64(b));
  size_t tested = 0;
  for (const CompareRow& row : all.rows) tested += row.deltas[0].tail_p_value.has_value();
  ASSERT_GT(tested, 1u);
  const CompareDelta &many = row_at(all, 64).deltas[0], &alone = row_at(one, 64).deltas[0];
  EXPECT_EQ(alone.p_adjusted_for, 1u);
  EXPECT_EQ(alone.tail_p_adjusted_for, 1u);
  EXPECT_EQ(many.p_adjusted_for, tested);
  EXPECT_EQ(many.tail_p_adjusted_for, tested);
  ASSERT_TRUE(many.tail_p_value && alone.tail_p_value && many.p_value && alone.p_value);
  EXPECT_GT(*many.tail_p_value, *alone.tail_p_value);
  EXPECT_LE(*many.tail_p_value, static_cast<double>(tested) * *alone.tail_p_value * (1 + 1e-12));
  EXPECT_GE(*many.p_value, *alone.p_value);
  EXPECT_LE(*many.p_value, std::min(1.0, static_cast<double>(tested) * *alone.p_value) * (1 + 1e-12));
  // A stall every 25th step is beyond noise at every batch, adjusted or not.
  EXPECT_EQ(many.tail_verdict, Verdict::slower);
  EXPECT_EQ(alone.tail_verdict, Verdict::slower);
  // The table colours a slower tail red where the gate judges it: inference, or training with
  // --fail-on-latency-regression (tail_gated_in_training); not in training without it, nor with it `off`.
  // B2 stalls as B does, its other steps quicker by as much: the same mean, a longer tail.
  Report tail_only = b;
  for (size_t k = 0; k < a.points.size(); ++k) {
    Point& p = tail_only.points[k];
    if (p.status != PointStatus::ok) continue;
    for (size_t i = 0; i < p.samples_ms.size(); ++i)
      p.samples_ms[i] = a.points[k].samples_ms[i] * (i % 25 == 24 ? 1.5 : 23.5 / 24);
    p.step_ms = summarize(p.samples_ms);
    p.samples_per_second = static_cast<double>(p.batch) / (p.step_ms.mean / 1000);
  }
  const auto red_rows = [](const CompareResult& r) {
    const std::string table = format_compare(r, true);
    size_t red = 0;
    for (size_t at = table.find("\x1b[31m"); at != std::string::npos; at = table.find("\x1b[31m", at + 1))
      ++red;
    return red;
  };
  const CompareResult inferred = compare_pair(a, tail_only);
  EXPECT_TRUE(inferred.tail_gated);
  for (const CompareRow& row : inferred.rows) EXPECT_NE(row.deltas[0].verdict, Verdict::slower) << row.batch;
  EXPECT_GT(red_rows(inferred), 0u);
  Report train_a = a, train_b = tail_only;
  train_a.settings["mode"] = train_b.settings["mode"] = "train";
  const CompareResult ungated = compare_pair(train_a, train_b);
  EXPECT_FALSE(ungated.tail_gated);
  EXPECT_EQ(red_rows(ungated), 0u);
  CompareOptions latency_flag;
  latency_flag.tail_gated_in_training = true;
  const CompareResult gated = compare_pair(train_a, train_b, latency_flag);
  EXPECT_TRUE(gated.tail_gated);
  EXPECT_EQ(red_rows(gated), red_rows(inferred));
  CompareOptions latency_off;
  latency_off.latency_gated = false;
  const CompareResult off = compare_pair(a, tail_only, latency_off);
  EXPECT_FALSE(off.tail_gated);
  EXPECT_EQ(red_rows(off), 0u);
  // A batch B took from A's own measurement (run --resume) is no test, and no family counts it.
  Report resumed = b;
  for (size_t k = 0; k < resumed.points.size(); ++k)
    if (resumed.points[k].batch == 16) {
      resumed.points[k] = a.points[k];
      resumed.points[k].resumed_from = a.created_at;
    }
  const CompareResult with_self = compare_pair(a, resumed);
  EXPECT_EQ(row_at(with_self, 64).deltas[0].p_adjusted_for, tested - 1);
  EXPECT_EQ(row_at(with_self, 16).deltas[0].p_adjusted_for, 0u);
  EXPECT_EQ(row_at(with_self, 16).deltas[0].verdict, Verdict::same);
  const nlohmann::json doc = to_json(all);
  EXPECT_EQ(doc["p_adjustment"], "holm");
  for (const nlohmann::json& row : doc["rows"]) {
    if (row["batch"] == 64) {
      EXPECT_EQ(row["deltas"][0]["tail_p_adjusted_for"], tested);
    }
  }
}

// A tail that moved in one slow stretch (24 consecutive steps half again as long) is not taken for a longer
// tail: the exact test sees 24 steps above the pooled p99 against a handful, but they all fall in one tenth
// of the run, and allowing for that the change is within noise: "same (drift)". The same 24 spread evenly
// (a stall every 25th step) are a longer tail.
TEST(Compare, ATailThatMovedInOneSlowStretchIsWithinDrift) {
  Report a = testing::sample_report();
  a.settings["mode"] = "infer";
  std::erase_if(a.points, [](const Point& p) { return p.batch != 64; });
  ASSERT_EQ(a.points.size(), 1u);
  uint64_t state = 99;
  const auto jitter = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + 0.03 * (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
  };
  Report stretch = a, stalls = a;
  Point &pa = a.points[0], &ps = stretch.points[0], &pe = stalls.points[0];
  for (Point* p : {&pa, &ps, &pe}) {
    p->samples_ms.clear();
    p->resumed_from.clear();
  }
  for (int i = 0; i < 600; ++i) {
    pa.samples_ms.push_back(2.0 * jitter());
    const double step = 2.0 * jitter();
    ps.samples_ms.push_back(step * (i >= 300 && i < 324 ? 1.5 : 1.0));
    pe.samples_ms.push_back(step * (i % 25 == 24 ? 1.5 : 1.0));
  }
  for (Point* p : {&pa, &ps, &pe}) {
    p->step_ms = summarize(p->samples_ms);
    p->samples_per_second = static_cast<double>(p->batch) / (p->step_ms.mean / 1000);
  }
  const CompareResult slow_stretch = compare_pair(a, stretch);
  const CompareDelta& d = slow_stretch.rows[0].deltas[0];
  EXPECT_EQ(d.tail_verdict, Verdict::same);
  EXPECT_TRUE(d.tail_within_drift_noise);
  ASSERT_TRUE(d.tail_p_value.has_value());
  EXPECT_LT(*d.tail_p_value, 0.005);  // the exact test alone would have called it
  EXPECT_THAT(format_compare(slow_stretch, false), HasSubstr("same (drift)"));
  EXPECT_EQ(to_json(slow_stretch)["rows"][0]["deltas"][0]["tail_within_drift_noise"], true);
  EXPECT_TRUE(regressions(slow_stretch, 5).empty());
  const CompareResult stalled = compare_pair(a, stalls);  // kept: `even` refers into it
  const CompareDelta& even = stalled.rows[0].deltas[0];
  EXPECT_EQ(even.tail_verdict, Verdict::slower);
  EXPECT_FALSE(even.tail_within_drift_noise);
}

}  // namespace bsw
