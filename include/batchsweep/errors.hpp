// Typed errors and the exit codes they map to. Library code throws; only main() turns errors into exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace bsw {

// Process exit codes, documented in README.md and `--help`.
enum ExitCode : int {
  kExitOk = 0,
  kExitRuntime = 1,        // a backend or I/O failure while running
  kExitUsage = 2,          // bad flag, config or input file
  kExitRegression = 3,     // `compare --fail-on-regression` found one
  kExitNothingRan = 4,     // `run` finished, but no batch ran ok: there is nothing to recommend
  kExitInterrupted = 130,  // SIGINT; SIGTERM gives 143
};

// Base of every error batchsweep throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  [[nodiscard]] virtual int exit_code() const { return kExitRuntime; }
};

// Bad command-line usage; the message names the flag.
class UsageError : public Error {
 public:
  using Error::Error;
  [[nodiscard]] int exit_code() const override { return kExitUsage; }
};

// A model config that is not valid. what() is "<source>: <json path>: <message>".
class ConfigError : public Error {
 public:
  ConfigError(std::string source, std::string json_path, const std::string& message)
      : Error(source + ": " + (json_path.empty() ? std::string() : json_path + ": ") + message),
        source_(std::move(source)),
        json_path_(std::move(json_path)) {}
  [[nodiscard]] int exit_code() const override { return kExitUsage; }
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::string& json_path() const { return json_path_; }

 private:
  std::string source_;
  std::string json_path_;
};

// An input file (report, output path) that cannot be used; the message names the file.
class InputError : public Error {
 public:
  using Error::Error;
  [[nodiscard]] int exit_code() const override { return kExitUsage; }
};

// The device (or --memory-limit) cannot hold a plan. A measurement, not a crash: the sweep records an `oom`
// point.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A backend failed in a way that is not out-of-memory (driver error, library error, numerical failure).
class BackendError : public Error {
 public:
  using Error::Error;
};

// A library (cuDNN) has no way to run one of the plan's execution paths at this batch, though it accepted the
// path at batch 1. The sweep plans and prepares the point again on our own path, unless the user forced the
// library's path (--attention cudnn, --conv cudnn): then the point is an `error` with this message.
enum class RejectedPath { attention, conv };

class PathRejected : public BackendError {
 public:
  PathRejected(RejectedPath path, const std::string& message) : BackendError(message), path_(path) {}
  [[nodiscard]] RejectedPath path() const { return path_; }

 private:
  RejectedPath path_;
};

}  // namespace bsw
