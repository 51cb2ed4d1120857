#include "backends/cpu/memory_limit.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <system_error>

#include "batchsweep/files.hpp"
#include "batchsweep/plan.hpp"

namespace bsw::cpu {
namespace {

// A limit file's value: a byte count, or nullopt for "max", absent files and v1's "unlimited" (2^63 less a
// page).
std::optional<uint64_t> read_limit(const std::filesystem::path& file) {
  std::string text = read_file_or_empty(file.string());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value >= (uint64_t{1} << 62)) return std::nullopt;
  return value;
}

// The smallest limit named `file` in `dir` and each directory above it up to `root`.
std::optional<uint64_t> smallest_up_to_root(const std::filesystem::path& root, std::string_view cgroup,
                                            const char* file) {
  std::optional<uint64_t> smallest;
  std::filesystem::path relative = std::filesystem::path(std::string(cgroup)).relative_path();
  for (;;) {
    if (const auto limit = read_limit(root / relative / file))
      smallest = smallest ? std::min(*smallest, *limit) : *limit;
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
  return smallest;
}

}  // namespace

MemoryLimit memory_limit(const MemorySources& sources) {
  MemoryLimit limit{sources.physical_bytes, "physical memory"};
  const auto consider = [&](std::optional<uint64_t> bytes, const char* source) {
    if (bytes && (limit.bytes == 0 || *bytes < limit.bytes)) limit = {*bytes, source};
  };
  // /proc/self/cgroup: "0::/path" (v2), "N:memory:/path" (v1; "N:cpu,memory:/path" where joined).
  std::istringstream lines(sources.proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      consider(smallest_up_to_root(sources.cgroup_root, path, "memory.max"), "cgroup memory.max");
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "memory")
        consider(smallest_up_to_root(sources.cgroup_root / controllers, path, "memory.limit_in_bytes"),
                 "cgroup memory.limit_in_bytes");
  }
  if (sources.address_space_limit) {
    const uint64_t left = *sources.address_space_limit > sources.mapped_bytes
                              ? *sources.address_space_limit - sources.mapped_bytes
                              : 0;
    // Never 0 (a device of no memory): one page, so that every plan is over the limit.
    consider(std::max<uint64_t>(left, 4096), "ulimit -v (address space left)");
  }
  return limit;
}

std::optional<uint64_t> available_memory(const MemorySources& sources) {
  std::istringstream in(sources.proc_meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> over_available_memory(uint64_t bytes, const MemorySources& sources) {
  const std::optional<uint64_t> available = available_memory(sources);
  if (!available || bytes <= *available) return std::nullopt;
  return fmt::format(
      "the plan needs {} ({} bytes), more than the {} of memory available now (MemAvailable: other processes "
      "hold the rest); touching it would push the machine into swap or its OOM killer",
      format_bytes(bytes), bytes, format_bytes(*available));
}

MemorySources this_process_memory() {
  MemorySources s;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) s.physical_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  s.cgroup_root = "/sys/fs/cgroup";
  s.proc_self_cgroup = read_file_or_empty("/proc/self/cgroup");
  s.proc_meminfo = read_file_or_empty("/proc/meminfo");
  struct rlimit as {};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    s.address_space_limit = static_cast<uint64_t>(as.rlim_cur);
    // /proc/self/statm: the first field is the virtual size in pages.
    std::istringstream statm(read_file_or_empty("/proc/self/statm"));
    uint64_t size_pages = 0;
    if (statm >> size_pages && page > 0) s.mapped_bytes = size_pages * static_cast<uint64_t>(page);
  }
  return s;
}

}  // namespace bsw::cpu
