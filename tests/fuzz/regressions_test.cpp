// Replays the fuzz seed corpora (tests/fuzz/corpus/) and the minimised findings (tests/fuzz/regressions/)
// through the same entry points the libFuzzer targets use, in every normal build: CTest label
// fuzz-regression. Corpus files named bad-* must be rejected with a typed error and every other corpus file
// accepted; a regression input may go either way but must never be a finding again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "fuzz/fuzz_entry.hpp"

namespace {

namespace fs = std::filesystem;
using bsw::fuzz::Outcome;
using bsw::fuzz::Verdict;

const fs::path kFuzzDir = fs::path(BSW_SOURCE_DIR) / "tests" / "fuzz";

enum class Target { model, report };
enum class Expect { accepted, rejected, no_finding };

struct Input {
  Target target;
  Expect expect;
  fs::path file;
  std::string test_name;  // [A-Za-z0-9_] only, unique
};

// gtest prints a failing parameter with this: the file, not the struct's bytes.
void PrintTo(const Input& input, std::ostream* os) {
  *os << input.file;
}

std::string sanitized(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The inputs of one folder, sorted by name; README files and dotfiles are documentation, not inputs.
void add_folder(std::vector<Input>& inputs, Target target, bool is_corpus, const fs::path& dir,
                const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.front() != '.' && name.rfind("README", 0) != 0)
      files.push_back(entry);
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    const Expect expect = !is_corpus                   ? Expect::no_finding
                          : name.rfind("bad-", 0) == 0 ? Expect::rejected
                                                       : Expect::accepted;
    inputs.push_back({target, expect, file, sanitized(prefix + "_" + name)});
  }
}

std::vector<Input> all_inputs() {
  std::vector<Input> inputs;
  add_folder(inputs, Target::model, true, kFuzzDir / "corpus" / "model", "corpus_model");
  add_folder(inputs, Target::report, true, kFuzzDir / "corpus" / "report", "corpus_report");
  add_folder(inputs, Target::model, false, kFuzzDir / "regressions" / "fuzz_model_config",
             "regression_model");
  add_folder(inputs, Target::report, false, kFuzzDir / "regressions" / "fuzz_report_reader",
             "regression_report");
  return inputs;
}

std::vector<uint8_t> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Verdict run(Target target, const std::string& text) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  return target == Target::model ? bsw::fuzz::fuzz_model_config(bytes) : bsw::fuzz::fuzz_report_reader(bytes);
}

class Replay : public testing::TestWithParam<Input> {};

TEST_P(Replay, IsNotAFinding) {
  const Input& input = GetParam();
  const std::vector<uint8_t> bytes = read_bytes(input.file);
  const Verdict verdict = input.target == Target::model ? bsw::fuzz::fuzz_model_config(bytes)
                                                        : bsw::fuzz::fuzz_report_reader(bytes);
  ASSERT_NE(verdict.outcome, Outcome::finding) << input.file << ": " << verdict.detail;
  if (input.expect == Expect::accepted) {
    EXPECT_EQ(verdict.outcome, Outcome::accepted) << input.file << " was rejected: " << verdict.detail;
  } else if (input.expect == Expect::rejected) {
    EXPECT_EQ(verdict.outcome, Outcome::rejected)
        << input.file << " was accepted; a bad-* seed must be refused";
  }
}

INSTANTIATE_TEST_SUITE_P(Fuzz, Replay, testing::ValuesIn(all_inputs()),
                         [](const testing::TestParamInfo<Input>& param_info) {
                           return param_info.param.test_name;
                         });

TEST(FuzzCorpus, EachTargetHasValidAndBrokenSeeds) {
  for (Target target : {Target::model, Target::report}) {
    int accepted = 0, rejected = 0;
    for (const Input& input : all_inputs()) {
      if (input.target != target) continue;
      accepted += input.expect == Expect::accepted;
      rejected += input.expect == Expect::rejected;
    }
    EXPECT_GE(accepted, 3) << "target " << static_cast<int>(target) << " needs valid seeds under "
                           << kFuzzDir;
    EXPECT_GE(rejected, 3) << "target " << static_cast<int>(target) << " needs bad-* seeds under "
                           << kFuzzDir;
  }
}

TEST(FuzzEntry, RejectsEmptyAndBinaryInputWithTypedErrors) {
  for (Target target : {Target::model, Target::report}) {
    const Verdict empty = run(target, "");
    EXPECT_EQ(empty.outcome, Outcome::rejected) << empty.detail;
    EXPECT_NE(empty.detail.find("empty"), std::string::npos) << empty.detail;
    const Verdict binary = run(target, std::string("\x7f"
                                                   "ELF\0\0\x01",
                                                   7));
    EXPECT_EQ(binary.outcome, Outcome::rejected) << binary.detail;
  }
}

TEST(FuzzEntry, RejectionsNameTheScratchFile) {
  const Verdict model = run(Target::model, "{");
  EXPECT_EQ(model.outcome, Outcome::rejected);
  EXPECT_NE(model.detail.find(bsw::fuzz::scratch_path("model")), std::string::npos) << model.detail;
  const Verdict report = run(Target::report, "[]");
  EXPECT_EQ(report.outcome, Outcome::rejected);
  EXPECT_NE(report.detail.find(bsw::fuzz::scratch_path("report")), std::string::npos) << report.detail;
}

TEST(FuzzEntry, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (Target target : {Target::model, Target::report}) {
    const Verdict verdict = run(target, deep);
    EXPECT_EQ(verdict.outcome, Outcome::rejected) << verdict.detail;
    EXPECT_NE(verdict.detail.find("nested deeper"), std::string::npos) << verdict.detail;
  }
}

TEST(FuzzEntry, MinimalReportRoundTrips) {
  const Verdict verdict = run(Target::report, R"({"schema_version": 1, "points": [{"batch": 4, "status": "ok",
                              "samples_per_second": 12.5}]})");
  EXPECT_EQ(verdict.outcome, Outcome::accepted) << verdict.detail;
  EXPECT_TRUE(verdict.detail.empty());
}

TEST(FuzzEntry, UnsupportedSchemaVersionIsRejected) {
  const Verdict wrong_version = run(Target::report, R"({"schema_version": 2, "points": []})");
  EXPECT_EQ(wrong_version.outcome, Outcome::rejected);
  EXPECT_NE(wrong_version.detail.find("schema_version 2"), std::string::npos) << wrong_version.detail;
}

TEST(FuzzEntry, ModelWithEveryDefaultRoundTrips) {
  const Verdict verdict = run(Target::model, R"({"name": "m", "input": {"type": "vector", "features": 8},
                                                 "layers": [{"type": "linear", "out_features": 2}]})");
  EXPECT_EQ(verdict.outcome, Outcome::accepted) << verdict.detail;
}

}  // namespace
