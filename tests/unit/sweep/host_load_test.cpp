// The host's load over a point's timed window: /proc/stat read for the CPUs this process may use, the load
// between two snapshots, when other processes competed, and the warning that says so.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "sweep/host_load.hpp"
#include "unit/host_figures.hpp"

namespace bsw::sweep_detail {
namespace {

// The aggregate line, then cpu0..cpu3: user nice system idle iowait irq softirq steal guest guest_nice.
constexpr std::string_view kStat =
    "cpu  100 0 50 1000 10 0 5 20 0 0\n"
    "cpu0 10 1 5 100 1 1 1 2 3 0\n"
    "cpu1 20 0 10 200 2 0 1 4 0 0\n"
    "cpu2 30 0 15 300 3 0 1 6 0 0\n"
    "cpu3 40 0 20 400 4 0 2 8 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n";

TEST(HostLoad, ProcStatIsSummedOverTheCpusThisProcessMayUse) {
  const auto all = parse_proc_stat(kStat, {});
  ASSERT_TRUE(all.has_value());
  // busy = user + nice + system + irq + softirq; total adds idle, iowait and steal (guest is within user).
  EXPECT_EQ(all->busy, (10 + 1 + 5 + 1 + 1) + (20 + 10 + 1) + (30 + 15 + 1) + (40 + 20 + 2));
  EXPECT_EQ(all->steal, 2u + 4 + 6 + 8);
  EXPECT_EQ(all->total, all->busy + (100 + 1 + 2) + (200 + 2 + 4) + (300 + 3 + 6) + (400 + 4 + 8));
  const auto some = parse_proc_stat(kStat, {1, 3});
  ASSERT_TRUE(some.has_value());
  EXPECT_EQ(some->busy, (20u + 10 + 1) + (40 + 20 + 2));
  EXPECT_EQ(some->steal, 4u + 8);
  // A CPU of the affinity /proc/stat does not list, a malformed line, or no CPU line: unknown, not 0.
  EXPECT_FALSE(parse_proc_stat(kStat, {1, 7}).has_value());
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 three 4 5 6 7 8\n", {}).has_value());
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3\n", {}).has_value());
  EXPECT_FALSE(parse_proc_stat("intr 1\n", {}).has_value());
  // Older kernels' lines without guest fields still hold the eight read.
  EXPECT_TRUE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n", {}).has_value());
}

TEST(HostLoad, OtherProcessesCpuTimeIsTheCpusBusyTimeLessThisProcesss) {
  HostSnapshot from, to;
  from.wall_s = 10.0;
  to.wall_s = 12.0;
  from.cpu_s = 1.0;
  to.cpu_s = 4.0;  // this process: 1.5 CPUs over the 2 s
  from.run_delays = std::map<int, uint64_t>{{100, 1'000'000'000}, {101, 0}};
  to.run_delays = std::map<int, uint64_t>{{100, 1'300'000'000}, {101, 50'000'000}, {102, 150'000'000}};
  from.ticks = CpuTicks{1000, 10, 5000};
  to.ticks = CpuTicks{1000 + 360, 10 + 20, 5000 + 400};  // 3.6 CPU-s busy at 100 ticks/s, 20 of 400 stolen
  const PointHost h = host_load(from, to, 2, 100.0);
  EXPECT_DOUBLE_EQ(h.wall_s, 2.0);
  EXPECT_DOUBLE_EQ(h.cpu_s, 3.0);
  EXPECT_EQ(h.cpus, 2);
  // 0.3 s more for one thread, 0.05 s for another, and all of a thread started since: 0.15 s.
  ASSERT_TRUE(h.waited_s.has_value());
  EXPECT_NEAR(*h.waited_s, 0.5, 1e-9);
  ASSERT_TRUE(h.others_cores.has_value());
  EXPECT_NEAR(*h.others_cores, (3.6 - 3.0) / 2.0, 1e-12);
  ASSERT_TRUE(h.steal_pct.has_value());
  EXPECT_NEAR(*h.steal_pct, 5.0, 1e-12);
  EXPECT_TRUE(h.contended());  // its threads waited 25% of the window while others took 0.3 CPUs
  EXPECT_TRUE(h.stolen());
  // Without the threads' waits (no schedstat): 0.3 others + 1.5 own on 2 CPUs left under a quarter idle, but
  // the same on 8 CPUs left room.
  HostSnapshot from_no_wait = from, to_no_wait = to;
  from_no_wait.run_delays.reset();
  EXPECT_FALSE(host_load(from_no_wait, to_no_wait, 2, 100.0).waited_s.has_value());
  EXPECT_TRUE(host_load(from_no_wait, to_no_wait, 2, 100.0).contended());
  EXPECT_FALSE(host_load(from_no_wait, to_no_wait, 8, 100.0).contended());
  // Under 0.2 s the ticks (10 ms a CPU) cannot tell how busy the others were; the waits still can.
  to.wall_s = 10.15;
  const PointHost short_window = host_load(from, to, 2, 100.0);
  EXPECT_FALSE(short_window.others_cores.has_value());
  EXPECT_TRUE(short_window.contended());  // 0.5 s waited in 0.15 s
  // ... but then a wait of 10% alone: a few wake-ups of its own threads are not competition.
  PointHost brief = short_window;
  brief.waited_s = 0.012;  // 8% of the 0.15 s
  EXPECT_FALSE(brief.contended());
  brief.waited_s = 0.02;
  EXPECT_TRUE(brief.contended());
  // Without /proc/stat: the process's own figures only.
  to.wall_s = 12.0;
  to.ticks.reset();
  const PointHost no_stat = host_load(from, to, 2, 100.0);
  EXPECT_FALSE(no_stat.others_cores.has_value());
  EXPECT_FALSE(no_stat.steal_pct.has_value());
  EXPECT_DOUBLE_EQ(no_stat.cpu_s, 3.0);
}

TEST(HostLoad, OnlyWaitingForACpuOthersKeptBusyIsContention) {
  PointHost idle;
  idle.wall_s = 2.0;
  idle.cpu_s = 3.9;  // this process's two threads, busy
  idle.cpus = 2;
  idle.others_cores = 0.02;  // a daemon's ticks
  idle.steal_pct = 0.0;
  idle.waited_s = 0.1;  // wake-ups of its own threads: 5% of the window, with the machine otherwise idle
  EXPECT_FALSE(idle.contended());
  EXPECT_FALSE(idle.stolen());
  // A second process as busy as a CPU, and its threads waited: contended.
  idle.others_cores = 0.9;
  idle.waited_s = 0.6;
  EXPECT_TRUE(idle.contended());
  // One thread of its own and another process on the other CPU: no wait, no competition (a walk found this
  // warned of, the step times as fast as on an idle machine).
  PointHost apart = idle;
  apart.cpu_s = 1.96;
  apart.others_cores = 1.0;
  apart.waited_s = 0.01;
  EXPECT_FALSE(apart.contended());
}

Point point_with_host(int64_t batch, double others, double steal) {
  Point p;
  p.batch = batch;
  p.effective_batch = batch;
  p.host = test::host_figures(2.0, 3.0, others, steal, others >= 0.25 ? 0.5 : 0.0);  // 1.5 CPUs of its own
  return p;
}

TEST(HostLoad, OneWarningNamesTheBatchesAndTheWorstFigures) {
  EXPECT_EQ(host_load_warning({point_with_host(8, 0.01, 0.0), point_with_host(16, 0.0, 1.0)}), "");
  std::vector<Point> points = {point_with_host(8, 0.5, 0.0), point_with_host(16, 0.01, 0.0),
                               point_with_host(32, 0.9, 12.0)};
  points[2].host->waited_s = 0.8;  // the worst: its threads waited 40% of the window
  const std::string w = host_load_warning(points);
  EXPECT_EQ(
      w,
      "other processes competed for the CPUs while batches 8, 32 timed (at worst its threads waited 0.8 s "
      "for a CPU in 2 s timed, and other processes kept 0.9 CPUs busy of the 2 it may use); and the "
      "hypervisor took up to 12% of the CPUs' time (steal) while batch 32 timed: their step times measure "
      "the machine's load as well as the model; rerun when the machine is idle, or give batchsweep CPUs of "
      "its own (taskset -c), before trusting them (each point's host figures are in the report)");
  // A point taken by --resume is as much the load's: named too (the earlier run's warning, about many points
  // at once, is not carried into the resumed report).
  points[0].resumed_from = "2026-12-01T00:00:00Z";
  EXPECT_EQ(host_load_warning(points), w);
}

TEST(HostLoad, ASnapshotOfThisProcessReadsItsCpuClockAndProcStat) {
  const std::vector<int> cpus = affinity_cpus();
  ASSERT_FALSE(cpus.empty());
  const HostSnapshot from = host_snapshot(cpus);
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + 1e-9 * i;  // some CPU time of its own
  const HostSnapshot to = host_snapshot(cpus);
  EXPECT_GT(to.cpu_s, from.cpu_s);
  EXPECT_GT(to.wall_s, from.wall_s);
  // Debian's kernel keeps schedstat: this thread's run delay is read, and does not shrink.
  if (from.run_delays && to.run_delays) {
    EXPECT_GE(waited_between(*from.run_delays, *to.run_delays), 0.0);
  }
  EXPECT_TRUE(from.ticks.has_value());  // Linux: /proc/stat lists every CPU of the affinity
  const PointHost h = host_load(from, to, static_cast<int>(cpus.size()), 100.0);
  EXPECT_GT(h.cpu_s, 0.0);
}

}  // namespace
}  // namespace bsw::sweep_detail
