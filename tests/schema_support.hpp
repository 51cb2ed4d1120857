// Validation of a report file against the published JSON Schema (configs/schema/report-v1.schema.json) by
// tests/validate_schema.py, for the unit tests of the writer and the end-to-end tests of real runs. It needs
// a python3 with the jsonschema module: the one on PATH, else Debian's /usr/bin/python3 (python3-jsonschema,
// which scripts/bootstrap.sh installs); tests skip with the reason when neither has it.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace bsw::testing {

// Exit status of `command` run by the shell, or -1 when it did not exit normally.
inline int shell_status(const std::string& command) {
  const int status = std::system(command.c_str());
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The first python3 that imports jsonschema, or "" when none does.
inline const std::string& python_with_jsonschema() {
  static const std::string found = [] {
    for (const char* python : {"python3", "/usr/bin/python3"})
      if (shell_status(std::string(python) + " -c 'import jsonschema' >/dev/null 2>&1") == 0)
        return std::string(python);
    return std::string();
  }();
  return found;
}

inline constexpr const char* kNoJsonschema =
    "no python3 with the jsonschema module (Debian: python3-jsonschema; scripts/bootstrap.sh installs it)";

// 0 when the file is valid against configs/schema/<schema>, 1 when not (the errors on stderr), other values
// when the check failed.
inline int validate_file(const std::string& schema, const std::filesystem::path& file) {
  return shell_status(python_with_jsonschema() + " '" + BSW_SOURCE_DIR + "/tests/validate_schema.py' '" +
                      BSW_SOURCE_DIR + "/configs/schema/" + schema + "' '" + file.string() + "'");
}

// 0 when the file is a valid report, 1 when not (the errors on stderr), other values when the check failed.
inline int validate_report_file(const std::filesystem::path& file) {
  return validate_file("report-v1.schema.json", file);
}

}  // namespace bsw::testing
