// Internal to src/sweep: what else the host's CPUs did while a point was timed. A busy machine (another job
// on a shared runner, a build, a hypervisor taking the CPU) makes step times measure its load, not the model:
// the sweep records per point this process's CPU time, the CPU time other processes took on the CPUs it may
// run on (from /proc/stat), the hypervisor's steal and how long its threads waited for a CPU (their
// schedstat) (PointHost), and warns where other processes competed for the CPUs it used.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/report.hpp"

namespace bsw::sweep_detail {

// CPU time in clock ticks, summed over the CPUs this process may run on, from /proc/stat.
struct CpuTicks {
  uint64_t busy = 0;   // user, nice, system, irq, softirq (guest time is within user)
  uint64_t steal = 0;  // taken by the hypervisor
  uint64_t total = 0;  // busy + idle + iowait + steal
};

// Sums the `cpuN` lines of a /proc/stat text for N in `cpus` (every one where `cpus` is empty); nullopt where
// none of them is found or one cannot be read.
[[nodiscard]] std::optional<CpuTicks> parse_proc_stat(std::string_view text, const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity); empty where that cannot be read.
[[nodiscard]] std::vector<int> affinity_cpus();

// The run delay (ns ready to run but waiting for a CPU) of each thread of this process, by thread id, from
// /proc/self/task/<tid>/schedstat ("<on-CPU ns> <run delay ns> <timeslices>"); nullopt where unreadable.
[[nodiscard]] std::optional<std::map<int, uint64_t>> thread_run_delays();

// The waiting between two readings of thread_run_delays, in seconds: each thread's growth, and the whole of
// a thread that started between them.
[[nodiscard]] double waited_between(const std::map<int, uint64_t>& from, const std::map<int, uint64_t>& to);

struct HostSnapshot {
  double wall_s = 0;  // steady clock
  double cpu_s = 0;   // this process, every thread
  std::optional<std::map<int, uint64_t>> run_delays;
  std::optional<CpuTicks> ticks;
};

// Now, for the CPUs in `cpus`.
[[nodiscard]] HostSnapshot host_snapshot(const std::vector<int>& cpus);

// The load between two snapshots, on `cpus` CPUs. `ticks_per_s` is sysconf(_SC_CLK_TCK). Other processes'
// CPU time is null over windows under 0.2 s (too short for the ticks' resolution) or without the ticks.
[[nodiscard]] PointHost host_load(const HostSnapshot& from, const HostSnapshot& to, int cpus,
                                  double ticks_per_s);

// One warning for the points whose host was contended or stolen ("" where none was), naming the batches and
// the worst figures.
[[nodiscard]] std::string host_load_warning(const std::vector<Point>& points);

}  // namespace bsw::sweep_detail
