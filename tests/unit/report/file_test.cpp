// Reading report files (every way a file can be unusable gives an InputError naming it) and the atomic
// writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/printers.hpp"
#include "batchsweep/report.hpp"
#include "golden/sample_report.hpp"

namespace bsw {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class ReportFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bsw_report_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  [[nodiscard]] std::string path(const std::string& name) const { return (dir_ / name).string(); }
  [[nodiscard]] std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
    return path(name);
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static std::string error_of(const std::string& p) {
    try {
      (void)read_report(p);
    } catch (const InputError& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      return e.what();
    }
    ADD_FAILURE() << "no InputError for " << p;
    return {};
  }

  fs::path dir_;
};

TEST_F(ReportFiles, ReadsWhatItWrites) {
  Report r = testing::sample_report();
  r.points[0].host = PointHost{1.5, 2.9, 2, 0.4, 0.0, 321};  // a cpu or cuda point's host figures
  r.points[1].host = PointHost{0.2, 0.3, 4, std::nullopt, std::nullopt, 0};
  const std::string p = path("report.json");
  write_file_atomic(p, format_json(r));
  EXPECT_EQ(to_json(read_report(p)), to_json(r));
}

TEST_F(ReportFiles, BestEffortReadGivesTheBytesOrNothing) {
  const std::string bytes("a\0b\nlast line without newline", 30);
  EXPECT_EQ(read_file_or_empty(write("bytes.bin", bytes)), bytes);
  EXPECT_EQ(read_file_or_empty(path("missing")), "");
  EXPECT_EQ(read_file_or_empty(dir_.string()), "");  // a directory opens but reads nothing
  EXPECT_EQ(read_file_or_empty(""), "");
}

TEST_F(ReportFiles, MissingFile) {
  EXPECT_EQ(error_of(path("nope.json")), path("nope.json") + ": no such file");
}

TEST_F(ReportFiles, Directory) {
  EXPECT_EQ(error_of(dir_.string()), dir_.string() + ": is a directory, expected a report file");
}

TEST_F(ReportFiles, EmptyFile) {
  EXPECT_EQ(error_of(write("empty.json", "")),
            path("empty.json") + ": file is empty, expected a batchsweep report (JSON)");
  EXPECT_THAT(error_of(write("blank.json", " \n\t")), StartsWith(path("blank.json") + ": file is empty"));
}

TEST_F(ReportFiles, InvalidJson) {
  const std::string message = error_of(write("bad.json", "{\"schema_version\": 1, \"points\": [}"));
  EXPECT_THAT(message, StartsWith(path("bad.json") + ": not valid JSON: line 1, column 34: syntax error"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("[json.exception")));
}

TEST_F(ReportFiles, FieldErrorsNameTheFile) {
  const std::string p = write("b.json", R"({"schema_version": 1, "points": [{"batch": 2, "status": "ok",
      "samples_per_second": "x"}]})");
  EXPECT_EQ(error_of(p), p + ": points[0].samples_per_second: expected a number");
  const std::string v2 = write("v2.json", R"({"schema_version": 2, "points": []})");
  EXPECT_EQ(error_of(v2), v2 + ": schema_version 2 is not supported (this batchsweep reads 1)");
}

// A key given twice (a hand-merged report) is refused naming its path: nlohmann would keep the last, so the
// point read would not be the one the reader saw.
TEST_F(ReportFiles, AKeyGivenTwiceIsRefused) {
  const std::string p = write("dup.json", R"({"schema_version": 1, "points": [{"batch": 2, "status": "ok",
      "samples_per_second": 10}, {"batch": 64, "batch": 65, "status": "ok", "samples_per_second": 10}]})");
  EXPECT_EQ(error_of(p),
            p + ": points[1].batch: is given twice in the same object; JSON keeps only the last, so "
                "remove one");
}

// An ok point's throughput and mean step come from its raw samples: a report where they disagree (edited by
// hand) would have the analysis read one speed and compare's tests another, so it is refused naming the
// field.
TEST_F(ReportFiles, AnOkPointsNumbersMustAgreeWithItsSamples) {
  const auto report = [&](const std::string& name, const std::string& point) {
    return write(name, R"({"schema_version": 1, "points": [)" + point + "]}");
  };
  const std::string zero = report("zero.json", R"({"batch": 2, "status": "ok", "samples_per_second": 0})");
  EXPECT_EQ(
      error_of(zero),
      zero + ": points[0].samples_per_second: must be > 0 on an ok point (it ran, so it has a throughput)");
  const std::string negative = report(
      "neg.json", R"({"batch": 2, "status": "ok", "samples_per_second": 2000, "samples_ms": [1, -1, 3]})");
  EXPECT_EQ(error_of(negative),
            negative + ": points[0].samples_ms[1]: a timed step must take 1e-09 to 3.2e+10 ms, got -1");
  const std::string edited = report(
      "edited.json", R"({"batch": 2, "status": "ok", "samples_per_second": 2000, "samples_ms": [1.2, 1.2]})");
  EXPECT_EQ(error_of(edited),
            edited +
                ": points[0].samples_per_second: 2000 disagrees with its samples_ms: effective "
                "batch 2 over a mean step of 1.2 ms is 1666.66667 samples/s");
  const std::string mean = report("mean.json", R"({"batch": 2, "status": "ok", "samples_per_second": 2000,
      "samples_ms": [1, 1], "step_ms": {"mean": 1.2}})");
  EXPECT_EQ(error_of(mean),
            mean + ": points[0].step_ms.mean: 1.2 ms disagrees with its samples_ms, whose mean is 1 ms");
  const std::string no_samples =
      report("stats.json", R"({"batch": 4, "accumulation": 2, "status": "ok", "samples_per_second": 2000,
      "step_ms": {"mean": 2}})");
  EXPECT_EQ(error_of(no_samples),
            no_samples +
                ": points[0].samples_per_second: 2000 disagrees with step_ms.mean: effective "
                "batch 8 over a mean step of 2 ms is 4000 samples/s");
  // A percentile edited by hand would have a latency budget read one latency and the samples say another.
  const std::string p99 = report("p99.json", R"({"batch": 2, "status": "ok", "samples_per_second": 2000,
      "samples_ms": [1, 1], "step_ms": {"mean": 1, "p99": 0.5}})");
  EXPECT_EQ(error_of(p99),
            p99 + ": points[0].step_ms.p99: 0.5 ms disagrees with its samples_ms, whose p99 is 1 ms");
  // Without samples the summary must hold together itself: a p99 under the fastest step meets any budget.
  const std::string order = report("order.json", R"({"batch": 16, "status": "ok", "samples_per_second": 1600,
      "step_ms": {"mean": 10, "p50": 10, "p90": 12, "p99": 2, "min": 9, "max": 12}})");
  EXPECT_EQ(error_of(order), order +
                                 ": points[0].step_ms.p99: 2 ms is below step_ms.p90 (12 ms): min, p50, p90, "
                                 "p95, p99 and max must not decrease");
  const std::string over = report("over.json", R"({"batch": 16, "status": "ok", "samples_per_second": 1000,
      "step_ms": {"mean": 16, "min": 9, "max": 12}})");
  EXPECT_EQ(error_of(over), over + ": points[0].step_ms.mean: 16 ms is above step_ms.max (12 ms)");
  const std::string partial = report("partial.json", R"({"batch": 16, "status": "ok",
      "samples_per_second": 1600, "step_ms": {"mean": 10, "p99": 11.5}})");
  EXPECT_EQ(read_report(partial).points.size(), 1u);
  const std::string below = report("below.json", R"({"batch": 2, "status": "oom", "samples_per_second": null,
      "step_ms": {"p99": -1}})");
  EXPECT_EQ(error_of(below), below + ": points[0].step_ms.p99: a step time must be >= 0 ms");
  // Consistent ones read, as does a failed point with samples kept for the record.
  const std::string fine = report("fine.json", R"({"batch": 4, "accumulation": 2, "status": "ok",
      "samples_per_second": 4000, "samples_ms": [1.5, 2.5], "step_ms": {"mean": 2}},
      {"batch": 8, "status": "error", "samples_per_second": null, "samples_ms": [9]})");
  EXPECT_EQ(read_report(fine).points.size(), 2u);
  // A report stored and written back rounded (6 significant digits, samples to the nanosecond) still reads;
  // an edit of 0.1% of the step does not.
  const std::string rounded = report("rounded.json", R"({"batch": 2, "status": "ok",
      "samples_per_second": 1960.78, "samples_ms": [1.010000001, 1.029999999],
      "step_ms": {"mean": 1.02, "median": 1.02, "stddev": 0.0141421, "min": 1.01, "max": 1.03, "p99": 1.0298}})");
  EXPECT_EQ(read_report(rounded).points.size(), 1u);
  const std::string stddev = report("stddev.json", R"({"batch": 2, "status": "ok",
      "samples_per_second": 1960.78, "samples_ms": [1.01, 1.03], "step_ms": {"stddev": 0.0151421}})");
  EXPECT_EQ(error_of(stddev), stddev +
                                  ": points[0].step_ms.stddev: 0.0151421 ms disagrees with its "
                                  "samples_ms, whose stddev is 0.0141421356 ms");
}

TEST_F(ReportFiles, DeepNestingIsRejectedBeforeParsing) {
  const std::string deep =
      "{\"schema_version\": 1, \"points\": [], \"settings\": {\"x\": " + std::string(100000, '[') +
      std::string(100000, ']') + "}}";
  EXPECT_EQ(error_of(write("deep.json", deep)),
            path("deep.json") + ": JSON nested deeper than 72 levels; not a batchsweep report");
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string in_strings =
      R"({"schema_version": 1, "points": [], "warnings": [")" + std::string(500, '[') + R"(\" {{{{"]})";
  EXPECT_EQ(read_report(write("strings.json", in_strings)).warnings.size(), 1u);
  // 60 levels is fine.
  const std::string ok_depth =
      "{\"schema_version\": 1, \"points\": [], \"settings\": {\"x\": " + std::string(60, '[') +
      std::string(60, ']') + "}}";
  EXPECT_NO_THROW((void)read_report(write("ok.json", ok_depth)));
}

TEST_F(ReportFiles, OverSizeLimit) {
  const std::string p = path("huge.json");
  {
    std::ofstream out(p, std::ios::binary);
    out << "{}";
  }
  fs::resize_file(p, kMaxReportBytes + 1);  // sparse: no real disk use
  EXPECT_EQ(error_of(p), p + ": 1073741825 bytes is over the 1 GiB limit for a report");
}

TEST_F(ReportFiles, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files regardless of permissions";
  const std::string p = write("secret.json", "{}");
  fs::permissions(p, fs::perms::none);
  EXPECT_THAT(error_of(p), StartsWith(p + ": cannot open: "));
}

// A legal name near NAME_MAX (250 bytes): its temporary must be a legal name too, beside it; one of multibyte
// characters is cut at a character's start.
TEST_F(ReportFiles, AnExportNamedNearTheLongestNameStillWrites) {
  // Whether every multibyte character in a name is whole (UTF-8: a lead byte, then its continuation bytes).
  const auto whole_characters = [](const std::string& name) {
    for (size_t i = 0; i < name.size();) {
      const auto lead = static_cast<unsigned char>(name[i]);
      const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : 4;
      if ((lead & 0xC0) == 0x80 || i + length > name.size()) return false;
      for (size_t k = 1; k < length; ++k)
        if ((static_cast<unsigned char>(name[i + k]) & 0xC0) != 0x80) return false;
      i += length;
    }
    return true;
  };
  // The temporary keeps 255 - len(".tmp.<pid>") bytes of the name: a run of 2-byte characters placed so that
  // the cut falls inside one, whatever the pid's digits.
  const size_t keep = 255 - (std::string(".tmp.") + std::to_string(::getpid())).size();
  const size_t ascii = keep % 2 == 0 ? 1 : 0;  // then the cut is at an odd offset into the characters
  std::string accented(ascii, 'a');
  while (accented.size() + 2 + 5 <= 255) accented += "\u00e9";  // past the cut, then ".json"
  accented += ".json";
  for (const std::string& name : {std::string(245, 'a') + ".json", accented}) {
    ASSERT_LE(name.size(), 255u);
    const std::string p = path(name);
    const std::string temp = temp_path_beside(p);
    EXPECT_LE(fs::path(temp).filename().string().size(), 255u) << temp;
    EXPECT_EQ(fs::path(temp).parent_path(), dir_);
    EXPECT_TRUE(whole_characters(fs::path(temp).filename().string())) << temp;
    write_file_atomic(p, "content");
    EXPECT_EQ(read(p), "content");
    fs::remove(p);
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(ReportFiles, AtomicWriteReplacesAndLeavesNoTemporary) {
  const std::string p = path("out.json");
  write_file_atomic(p, "first");
  write_file_atomic(p, "second, longer content");
  EXPECT_EQ(read(p), "second, longer content");
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "out.json");
  }
  EXPECT_EQ(files, 1u);
}

// A writer killed before its rename (kill -9: no handler runs) leaves its temporary beside the export; the
// next write there removes it once a minute old, but not a live writer's, a fresh one (a writer this process
// cannot see, in another process table), another host's, the host-less long-name form, or another file's.
TEST_F(ReportFiles, AtomicWriteRemovesTemporariesDeadWritersLeft) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid no process has now
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  std::string here = host;
  here.resize(std::min<size_t>(here.size(), 64));
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  const std::string removed = "r.json.tmp." + here + "." + dead;
  const std::string fresh = "r.json.tmp." + here + "." + std::to_string(child + 1);
  const std::vector<std::string> kept = {"r.json.tmp." + here + "." + live, "r.json.tmp.otherhost." + dead,
                                         "r.json.tmp." + dead, "r.csv.tmp." + here + "." + dead,
                                         "r.json.tmp." + here + ".x1"};
  const auto an_hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const std::string& name : kept) {
    static_cast<void>(write(name, "{\"partial"));
    fs::last_write_time(path(name), an_hour_ago);
  }
  static_cast<void>(write(removed, "{\"partial"));
  fs::last_write_time(path(removed), an_hour_ago);
  static_cast<void>(write(fresh, "{\"partial"));  // written now: kept, whoever wrote it
  write_file_atomic(path("r.json"), "{}");
  EXPECT_FALSE(fs::exists(path(removed))) << removed;
  EXPECT_TRUE(fs::exists(path(fresh))) << fresh;
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(path(name))) << name;
  EXPECT_EQ(read(path("r.json")), "{}");
}

// Replacing a file by renaming a new one over it must not reset its permissions (a 0444 report came back
// 0644).
TEST_F(ReportFiles, AtomicWriteKeepsTheFilesPermissions) {
  const std::string p = path("kept.json");
  write_file_atomic(p, "first");
  for (const fs::perms mode : {fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                               fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write}) {
    fs::permissions(p, mode);
    write_file_atomic(p, "again");
    EXPECT_EQ(fs::status(p).permissions(), mode);
    EXPECT_EQ(read(p), "again");
  }
}

TEST_F(ReportFiles, AtomicWriteToMissingDirectory) {
  const std::string p = path("no/such/dir/out.json");
  try {
    write_file_atomic(p, "x");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              p + ": cannot write: directory " + path("no/such/dir") + " does not exist");
  }
}

TEST_F(ReportFiles, AtomicWriteFailureLeavesExistingFile) {
  const std::string p = write("keep.json", "original");
  // A directory in the way of the rename: the write fails and the original stays.
  const std::string blocked = path("blocked");
  fs::create_directories(fs::path(blocked) / "child");
  EXPECT_THROW(write_file_atomic(blocked, "new"), InputError);
  EXPECT_TRUE(fs::is_directory(blocked));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr(".tmp.")));
  }
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    try {
      write_file_atomic(p, "replacement");
      ADD_FAILURE() << "wrote into a read-only directory";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), StartsWith(p + ": cannot write: "));
    }
    fs::permissions(dir_, fs::perms::owner_all);
  }
  EXPECT_EQ(read(p), "original");
}

// A write that fails part-way (here a file size limit, which root cannot bypass as it does permissions)
// throws, keeps the file it would have replaced and leaves no temporary file. Run in a child so the limit
// stays there.
TEST_F(ReportFiles, AFailedWriteKeepsTheOriginalEvenForRoot) {
  const std::string p = write("keep.json", "original");
  const pid_t child = ::fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing the process
    const rlimit limit{4, 4};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    try {
      write_file_atomic(p, std::string(1 << 16, 'x'));
    } catch (const InputError& e) {
      ::_exit(std::string(e.what()).rfind(p + ": cannot write", 0) == 0 ? 0 : 4);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: not an InputError, 3: setrlimit, 4: the message";
  EXPECT_EQ(read(p), "original");
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr(".tmp.")));
  }
}

// After a stop signal the pipe exports share the 10 s their readers get: a second stalled pipe, and a FIFO
// nobody opens, then get a second each (four stalled exports waited 40 s before), while a reader that keeps
// reading is still written to the end. In a child: the stop cannot be taken back in this process.
TEST_F(ReportFiles, AfterAStopSignalStalledPipesShareOneWait) {
  const std::string fifo = path("unread.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string results = path("results");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) {
      return std::chrono::duration<double>(Clock::now() - t).count();
    };
    int stalled_a[2], stalled_b[2], reading[2];
    if (::pipe(stalled_a) != 0 || ::pipe(stalled_b) != 0 || ::pipe(reading) != 0) ::_exit(3);
    const std::string big(256 * 1024, 'x');
    stop_waiting_writers();
    const Clock::time_point signalled = Clock::now();
    std::ofstream out(results);
    const bool a = write_fully(stalled_a[1], big);
    const bool a_timed_out = errno == ETIMEDOUT;
    out << "a " << a << " " << a_timed_out << " " << seconds_since(signalled) << "\n";
    Clock::time_point began = Clock::now();
    const bool b = write_fully(stalled_b[1], big);
    const bool b_timed_out = errno == ETIMEDOUT;
    out << "b " << b << " " << b_timed_out << " " << seconds_since(began) << "\n";
    // The reader is reading before the write begins (its first read blocks until there is something).
    size_t got = 0;
    std::thread reader([&] {
      char buffer[4096];
      for (ssize_t n = 1; n > 0;) {
        n = ::read(reading[0], buffer, sizeof(buffer));
        if (n > 0) got += static_cast<size_t>(n);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const bool c = write_fully(reading[1], big);
    ::close(reading[1]);
    reader.join();
    out << "c " << c << " " << (got == big.size()) << "\n";
    began = Clock::now();
    std::string why;
    try {
      write_file_atomic(fifo, "{}");
    } catch (const InputError& e) {
      why = e.what();
    }
    out << "d " << seconds_since(began) << " " << why << "\n";
    out.close();
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::istringstream lines(read(results));
  std::string name, rest;
  bool ok = true, timed_out = false;
  double seconds = 0;
  lines >> name >> ok >> timed_out >> seconds;
  EXPECT_EQ(name, "a");
  EXPECT_FALSE(ok);
  EXPECT_TRUE(timed_out);
  EXPECT_GE(seconds, 9.9) << "the first stalled pipe gets the full 10 s";
  EXPECT_LE(seconds, 12.0);
  lines >> name >> ok >> timed_out >> seconds;
  EXPECT_EQ(name, "b");
  EXPECT_FALSE(ok);
  EXPECT_TRUE(timed_out);
  EXPECT_GE(seconds, 0.9) << "a second's grace";
  EXPECT_LE(seconds, 3.0) << "not a 10 s of its own";
  bool all = false;
  lines >> name >> ok >> all;
  EXPECT_EQ(name, "c");
  EXPECT_TRUE(ok) << "a reader that keeps reading gets everything, after the 10 s too";
  EXPECT_TRUE(all);
  lines >> name >> seconds;
  std::getline(lines, rest);
  EXPECT_EQ(name, "d");
  EXPECT_LE(seconds, 3.0);
  EXPECT_THAT(rest,
              HasSubstr(fifo + ": cannot write: stopped; no process opened this pipe to read it in the 10 s "
                               "a stopped run gives its exports"));
}

TEST_F(ReportFiles, AtomicWriteDashIsStdout) {
  ::testing::internal::CaptureStdout();
  write_file_atomic("-", "to stdout\n");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "to stdout\n");
}

}  // namespace
}  // namespace bsw
