#include "sweep/host_load.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "batchsweep/analysis.hpp"
#include "batchsweep/files.hpp"

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

std::optional<std::map<int, uint64_t>> thread_run_delays() {
  std::map<int, uint64_t> delays;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string tid = it->path().filename().string();
    int id = 0;
    if (std::from_chars(tid.data(), tid.data() + tid.size(), id).ec != std::errc()) continue;
    std::ifstream in(it->path() / "schedstat");
    uint64_t on_cpu = 0, delay = 0;
    if (!(in >> on_cpu >> delay)) continue;  // a thread that just exited
    delays[id] = delay;
  }
  if (ec || delays.empty()) return std::nullopt;
  // A kernel without schedstat accounting reads 0 for every thread: nothing known, not no waiting.
  if (std::all_of(delays.begin(), delays.end(), [](const auto& d) { return d.second == 0; }))
    return std::nullopt;
  return delays;
}

double waited_between(const std::map<int, uint64_t>& from, const std::map<int, uint64_t>& to) {
  uint64_t ns = 0;
  for (const auto& [tid, delay] : to) {
    const auto before = from.find(tid);
    const uint64_t start = before == from.end() ? 0 : before->second;
    if (delay > start) ns += delay - start;
  }
  return static_cast<double>(ns) * 1e-9;
}

HostSnapshot host_snapshot(const std::vector<int>& cpus) {
  HostSnapshot s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0)
    s.cpu_s = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) * 1e-9;
  s.run_delays = thread_run_delays();
  s.ticks = parse_proc_stat(read_file_or_empty("/proc/stat"), cpus);
  return s;
}

PointHost host_load(const HostSnapshot& from, const HostSnapshot& to, int cpus, double ticks_per_s) {
  PointHost h;
  h.wall_s = std::max(0.0, to.wall_s - from.wall_s);
  h.cpu_s = std::max(0.0, to.cpu_s - from.cpu_s);
  h.cpus = cpus;
  if (from.run_delays && to.run_delays) h.waited_s = waited_between(*from.run_delays, *to.run_delays);
  if (!from.ticks || !to.ticks || ticks_per_s <= 0 || to.ticks->total < from.ticks->total) return h;
  const double total = static_cast<double>(to.ticks->total - from.ticks->total);
  if (total > 0) h.steal_pct = 100.0 * static_cast<double>(to.ticks->steal - from.ticks->steal) / total;
  // A tick is 10 ms on each CPU: over 0.2 s the busy time is known to about a tenth of a CPU.
  if (h.wall_s >= 0.2) {
    const double busy_s = static_cast<double>(to.ticks->busy - from.ticks->busy) / ticks_per_s;
    h.others_cores = std::max(0.0, busy_s - h.cpu_s) / h.wall_s;
  }
  return h;
}

std::string host_load_warning(const std::vector<Point>& points) {
  std::vector<std::string> busy, stolen;
  const PointHost* worst_busy = nullptr;
  const PointHost* worst_steal = nullptr;
  // The worst: the largest share of the window its threads waited (else, without schedstat, the busiest).
  const auto weight = [](const PointHost& h) {
    return h.waited_s ? *h.waited_s / h.wall_s : h.others_cores.value_or(0.0);
  };
  for (const Point& p : points) {
    // Points taken by --resume too: the earlier run's warning said so of many points at once, which a
    // resumed report does not carry, and their step times are as much the load's.
    if (!p.host) continue;
    const PointHost& h = *p.host;
    if (h.contended()) {
      busy.push_back(batch_label(p.batch, p.accumulation));
      if (worst_busy == nullptr || weight(h) > weight(*worst_busy)) worst_busy = &h;
    }
    if (h.stolen()) {
      stolen.push_back(batch_label(p.batch, p.accumulation));
      if (worst_steal == nullptr || *h.steal_pct > *worst_steal->steal_pct) worst_steal = &h;
    }
  }
  std::vector<std::string> parts;
  if (worst_busy != nullptr) {
    const PointHost& h = *worst_busy;
    std::vector<std::string> figures;
    if (h.waited_s)
      figures.push_back(
          fmt::format("its threads waited {:.3g} s for a CPU in {:.3g} s timed", *h.waited_s, h.wall_s));
    if (h.others_cores) {
      // As printed: 0.996 reads "1", one CPU, not "1 CPUs".
      const std::string cores = fmt::format("{:.2g}", *h.others_cores);
      figures.push_back(fmt::format("other processes kept {} CPU{} busy of the {} it may use", cores,
                                    cores == "1" ? "" : "s", h.cpus));
    }
    parts.push_back(fmt::format("other processes competed for the CPUs while {} {} timed (at worst {})",
                                busy.size() == 1 ? "batch" : "batches", fmt::join(busy, ", "),
                                fmt::join(figures, ", and ")));
  }
  if (worst_steal != nullptr)
    parts.push_back(fmt::format(
        "the hypervisor took up to {:.0f}% of the CPUs' time (steal) while {} {} timed",
        *worst_steal->steal_pct, stolen.size() == 1 ? "batch" : "batches", fmt::join(stolen, ", ")));
  if (parts.empty()) return {};
  const bool several = busy.size() + stolen.size() > 1;
  return fmt::format(
      "{}: {} step times measure the machine's load as well as the model; rerun when the machine is idle, or "
      "give batchsweep CPUs of its own (taskset -c), before trusting {} (each point's host figures are in "
      "the "
      "report)",
      fmt::join(parts, "; and "), several ? "their" : "its", several ? "them" : "it");
}

}  // namespace bsw::sweep_detail
