// Best-effort whole-file reads for the readers that learn from a file when it is there (/proc, cgroup files,
// an earlier export they may replace) and go on without it otherwise.
#include <fstream>
#include <sstream>
#include <string>

#include "batchsweep/files.hpp"

namespace bsw {

std::string read_file_or_empty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return {};
  return std::move(text).str();
}

}  // namespace bsw
