// The fuzz entry points (see fuzz_entry.hpp): bytes -> scratch file -> the real loader, with every outcome
// classified as expected (accepted or a typed rejection) or a finding.
#include "fuzz/fuzz_entry.hpp"

#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <typeinfo>

#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/report.hpp"

namespace bsw::fuzz {
namespace {

using nlohmann::json;

// One scratch file per process and target, removed when the process exits normally (libFuzzer's
// -max_total_time and -runs both end through exit()).
class ScratchFile {
 public:
  explicit ScratchFile(std::string path) : path_(std::move(path)) {}
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

  // Replaces the file's content with `bytes`. A failure here is the harness's, not the reader's: it throws
  // std::runtime_error, which the caller reports as a finding with this message.
  void write(std::span<const uint8_t> bytes) const {
    struct Closer {
      void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::unique_ptr<std::FILE, Closer> file(std::fopen(path_.c_str(), "wb"));
    if (!file) throw std::runtime_error("fuzz harness: cannot create " + path_);
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size())
      throw std::runtime_error("fuzz harness: cannot write " + path_);
    if (std::fclose(file.release()) != 0) throw std::runtime_error("fuzz harness: cannot close " + path_);
  }

 private:
  std::string path_;
};

const ScratchFile& scratch(const std::string& target) {
  if (target == "model") {
    static const ScratchFile model_file(scratch_path("model"));
    return model_file;
  }
  static const ScratchFile report_file(scratch_path("report"));
  return report_file;
}

Verdict accepted() {
  return {Outcome::accepted, {}};
}

Verdict rejected(const std::exception& e) {
  return {Outcome::rejected, e.what()};
}

Verdict finding(std::string detail) {
  return {Outcome::finding, std::move(detail)};
}

// The exception's type as C++ spells it, e.g. nlohmann::json_abi_v3_11_2::detail::out_of_range.
std::string type_name(const std::exception& e) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? demangled.get() : typeid(e).name();
}

Verdict unexpected_exception(const std::exception& e) {
  return finding("unexpected exception " + type_name(e) + ": " + e.what());
}

// The JSON's text form must read back to the same JSON (numbers keep their value, strings their bytes).
std::string text_round_trip_problem(const json& doc) {
  const std::string text = doc.dump();
  const json back = json::parse(text);
  if (back != doc) return "dump() does not parse back to the same JSON: " + text.substr(0, 512);
  return {};
}

Verdict check_model_round_trip(const ModelSpec& model) {
  const json first = to_json(model);
  if (std::string problem = text_round_trip_problem(first); !problem.empty()) return finding(problem);
  ModelSpec again;
  try {
    again = parse_model(first, "round trip");
  } catch (const std::exception& e) {
    return finding(std::string("parse_model(to_json(model)) throws: ") + e.what() +
                   "\nto_json: " + first.dump().substr(0, 512));
  }
  const json second = to_json(again);
  if (second != first) {
    return finding("parse_model(to_json(model)) is a different model:\nfirst:  " +
                   first.dump().substr(0, 512) + "\nsecond: " + second.dump().substr(0, 512));
  }
  return accepted();
}

Verdict check_report_round_trip(const Report& report) {
  const json first = to_json(report);
  if (std::string problem = text_round_trip_problem(first); !problem.empty()) return finding(problem);
  Report again;
  try {
    again = report_from_json(json::parse(first.dump()), "round trip");
  } catch (const std::exception& e) {
    return finding(std::string("report_from_json(to_json(report)) throws: ") + e.what());
  }
  const json second = to_json(again);
  if (second != first) {
    return finding("to_json(report_from_json(to_json(report))) differs from to_json(report): " +
                   json::diff(first, second).dump().substr(0, 1024));
  }
  return accepted();
}

}  // namespace

std::string scratch_path(const std::string& target) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const char* chosen = std::getenv("BSW_FUZZ_SCRATCH_DIR");
  fs::path dir = chosen && *chosen ? fs::path(chosen) : fs::path("/dev/shm");
  if (!fs::is_directory(dir, ec)) dir = fs::temp_directory_path();
  return (dir / ("batchsweep-fuzz-" + target + "-" + std::to_string(::getpid()) + ".json")).string();
}

Verdict fuzz_model_config(std::span<const uint8_t> bytes) {
  try {
    const ScratchFile& file = scratch("model");
    file.write(bytes);
    ModelSpec model;
    try {
      model = load_model(file.path());
    } catch (const Error& e) {
      return rejected(e);
    }
    return check_model_round_trip(model);
  } catch (const std::exception& e) {
    return unexpected_exception(e);
  } catch (...) {
    return finding("an exception not derived from std::exception");
  }
}

Verdict fuzz_report_reader(std::span<const uint8_t> bytes) {
  try {
    const ScratchFile& file = scratch("report");
    file.write(bytes);
    Report report;
    try {
      report = read_report(file.path());
    } catch (const InputError& e) {
      return rejected(e);
    }
    return check_report_round_trip(report);
  } catch (const std::exception& e) {
    return unexpected_exception(e);
  } catch (...) {
    return finding("an exception not derived from std::exception");
  }
}

}  // namespace bsw::fuzz
