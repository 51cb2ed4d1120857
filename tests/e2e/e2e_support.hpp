// Helpers for end-to-end tests: run the real batchsweep binary with arguments, capture exit code, stdout and
// stderr; scratch directories; reading JSON outputs.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace bsw::e2e {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory under the system temp dir, removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "bsw-e2e-XXXXXX").string();
    path_ = mkdtemp(templ.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// In a forked child: replaces it with BSW_BINARY run with `args` (exit 127 where that fails). Every e2e test
// that starts the binary itself (to signal it, limit it, or give it a terminal) goes through here.
[[noreturn]] inline void exec_batchsweep(const std::vector<std::string>& args) {
  std::vector<char*> argv{const_cast<char*>(BSW_BINARY)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(BSW_BINARY, argv.data());
  _exit(127);
}

// Runs BSW_BINARY with `args` (no shell), stdin from /dev/null, capturing both streams; `env` adds
// NAME=VALUE; `cwd`, when given, is the directory it runs in.
inline Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                  const std::filesystem::path& cwd = {}) {
  ScratchDir io;
  const std::string out_path = (io / "out").string(), err_path = (io / "err").string();
  const pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "r", stdin);
    freopen(out_path.c_str(), "w", stdout);
    freopen(err_path.c_str(), "w", stderr);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    exec_batchsweep(args);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  return nlohmann::json::parse(slurp(p));
}

inline std::string scripted(const std::string& name) {
  return std::string(BSW_TEST_DATA) + "/data/scripted/" + name;
}

}  // namespace bsw::e2e
