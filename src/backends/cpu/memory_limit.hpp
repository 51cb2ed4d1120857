// What the CPU backend may allocate: physical memory, or less where a limit says so. A container's memory
// limit (the cgroup's memory.max, or memory.limit_in_bytes under cgroup v1) kills a process that goes past
// it; an address-space limit (ulimit -v) fails its allocations. Taken as the device's memory, a plan beyond
// either is an over_limit point, a measurement, rather than a killed sweep.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace bsw::cpu {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "physical memory", "cgroup memory.max", "ulimit -v"
};

// Where the limits are read: the cgroup hierarchy's root (/sys/fs/cgroup) and this process's line of
// /proc/self/cgroup; the address-space limit and what is mapped already (nullopt: unlimited).
struct MemorySources {
  uint64_t physical_bytes = 0;
  std::filesystem::path cgroup_root;
  std::string proc_self_cgroup;
  std::optional<uint64_t> address_space_limit;
  uint64_t mapped_bytes = 0;
  std::string proc_meminfo;  // /proc/meminfo's text: MemAvailable
};

// The smallest limit of those in `sources`: under cgroup v2 the smallest memory.max from this process's
// cgroup up to the root, under v1 the memory controller's memory.limit_in_bytes likewise ("max", and v1's
// 2^63-ish "unlimited", set none); under ulimit -v, the limit less what is mapped already.
[[nodiscard]] MemoryLimit memory_limit(const MemorySources& sources);

// What the machine can give a new allocation now without swapping or its OOM killer: /proc/meminfo's
// MemAvailable (free memory and the page cache it can drop, less what the kernel keeps); nullopt where it
// does not say. The limit above is the device's size, what fits on this machine; this is what other
// processes leave of it at the moment.
[[nodiscard]] std::optional<uint64_t> available_memory(const MemorySources& sources);

// Why a plan of `bytes` cannot be allocated now, where more than available_memory: host memory overcommits,
// so the allocation itself would succeed and touching it would push the machine into swap (step times of
// the disk) or make the kernel kill a process, this one or another. nullopt where it fits.
[[nodiscard]] std::optional<std::string> over_available_memory(uint64_t bytes, const MemorySources& sources);

// The sources of this process now.
[[nodiscard]] MemorySources this_process_memory();

}  // namespace bsw::cpu
