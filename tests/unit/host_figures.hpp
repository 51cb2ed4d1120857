// A point's host figures for tests of what reads them (the knee, compare's notes and gate, the host-load
// warning): a window of `wall_s` seconds on `cpus` CPUs, this process's CPU time, other processes' load, the
// hypervisor's steal and this process's wait for a CPU.
#pragma once

#include <optional>

#include "batchsweep/report.hpp"

namespace bsw::test {

inline PointHost host_figures(double wall_s, double cpu_s, std::optional<double> others_cores,
                              std::optional<double> steal_pct, std::optional<double> waited_s, int cpus = 2) {
  PointHost h;
  h.wall_s = wall_s;
  h.cpu_s = cpu_s;
  h.cpus = cpus;
  h.others_cores = others_cores;
  h.steal_pct = steal_pct;
  h.waited_s = waited_s;
  return h;
}

}  // namespace bsw::test
