#include "sweep/host_load.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "batchsweep/analysis.hpp"

namespace bsw::sweep_detail {

std::optional<CpuTicks> parse_proc_stat(std::string_view text, const std::vector<int>& cpus) {
  CpuTicks sum;
  size_t found = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    // "cpuN user nice system idle iowait irq softirq steal [guest guest_nice]"; "cpu " is the sum.
    if (!line.starts_with("cpu") || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    int cpu = 0;
    const char* p = line.data() + 3;
    const char* last = line.data() + line.size();
    auto [after, error] = std::from_chars(p, last, cpu);
    if (error != std::errc()) return std::nullopt;
    if (!cpus.empty() && std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    uint64_t field[8] = {};
    for (uint64_t& value : field) {
      while (after < last && *after == ' ') ++after;
      const auto [next, field_error] = std::from_chars(after, last, value);
      if (field_error != std::errc()) return std::nullopt;
      after = next;
    }
    const auto [user, nice, system, idle, iowait, irq, softirq, steal] = field;
    sum.busy += user + nice + system + irq + softirq;
    sum.steal += steal;
    sum.total += user + nice + system + idle + iowait + irq + softirq + steal;
    ++found;
  }
  if (found == 0 || (!cpus.empty() && found != cpus.size())) return std::nullopt;
  return sum;
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

HostSnapshot host_snapshot(const std::vector<int>& cpus) {
  HostSnapshot s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0)
    s.cpu_s = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) * 1e-9;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) s.involuntary_switches = usage.ru_nivcsw;
  std::ifstream in("/proc/stat");
  std::ostringstream text;
  text << in.rdbuf();
  s.ticks = parse_proc_stat(text.str(), cpus);
  return s;
}

PointHost host_load(const HostSnapshot& from, const HostSnapshot& to, int cpus, double ticks_per_s) {
  PointHost h;
  h.wall_s = std::max(0.0, to.wall_s - from.wall_s);
  h.cpu_s = std::max(0.0, to.cpu_s - from.cpu_s);
  h.cpus = cpus;
  h.involuntary_switches = std::max<int64_t>(0, to.involuntary_switches - from.involuntary_switches);
  if (!from.ticks || !to.ticks || ticks_per_s <= 0 || to.ticks->total < from.ticks->total) return h;
  const double total = static_cast<double>(to.ticks->total - from.ticks->total);
  if (total > 0) h.steal_pct = 100.0 * static_cast<double>(to.ticks->steal - from.ticks->steal) / total;
  // A tick is 10 ms on each CPU: over half a second the busy time is known to a few percent of a CPU.
  if (h.wall_s >= 0.5) {
    const double busy_s = static_cast<double>(to.ticks->busy - from.ticks->busy) / ticks_per_s;
    h.others_cores = std::max(0.0, busy_s - h.cpu_s) / h.wall_s;
  }
  return h;
}

std::string host_load_warning(const std::vector<Point>& points) {
  std::vector<std::string> busy, stolen;
  const PointHost* worst_busy = nullptr;
  const PointHost* worst_steal = nullptr;
  for (const Point& p : points) {
    // Points taken by --resume too: the earlier run's warning said so of many points at once, which a
    // resumed report does not carry, and their step times are as much the load's.
    if (!p.host) continue;
    const PointHost& h = *p.host;
    if (h.contended()) {
      busy.push_back(batch_label(p.batch, p.accumulation));
      if (worst_busy == nullptr || *h.others_cores > *worst_busy->others_cores) worst_busy = &h;
    }
    if (h.stolen()) {
      stolen.push_back(batch_label(p.batch, p.accumulation));
      if (worst_steal == nullptr || *h.steal_pct > *worst_steal->steal_pct) worst_steal = &h;
    }
  }
  std::vector<std::string> parts;
  if (worst_busy != nullptr)
    parts.push_back(
        fmt::format("other processes competed for the CPUs while {} {} timed (up to {:.2g} of the {} CPUs "
                    "this process may "
                    "use, beside its own {:.2g}; the scheduler preempted its threads {:.0f} times a second)",
                    busy.size() == 1 ? "batch" : "batches", fmt::join(busy, ", "), *worst_busy->others_cores,
                    worst_busy->cpus, worst_busy->cpu_s / worst_busy->wall_s,
                    static_cast<double>(worst_busy->involuntary_switches) / worst_busy->wall_s));
  if (worst_steal != nullptr)
    parts.push_back(fmt::format(
        "the hypervisor took up to {:.0f}% of the CPUs' time (steal) while {} {} timed",
        *worst_steal->steal_pct, stolen.size() == 1 ? "batch" : "batches", fmt::join(stolen, ", ")));
  if (parts.empty()) return {};
  return fmt::format(
      "{}: {} step times measure the machine's load as well as the model; rerun on an idle machine before "
      "trusting {} (each point's host figures are in the report)",
      fmt::join(parts, "; and "), busy.size() + stolen.size() > 1 ? "their" : "its",
      busy.size() + stolen.size() > 1 ? "them" : "it");
}

}  // namespace bsw::sweep_detail
