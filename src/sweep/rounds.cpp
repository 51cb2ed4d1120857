// run --rounds N: after the strategy's own round, every point that ran ok is measured N - 1 more times, each
// round in the order of batch, descending in even rounds and ascending in odd ones, each timing as many steps
// as the point's round 1 did (so every round weighs the same in its pooled mean). A sweep that measures each
// batch once in ascending order confounds the batch with the time it ran at: a GPU that heats up and clocks
// down, or a machine that gets busier, makes the larger batches look slower and moves the knee. With the
// order reversed every other round, a steady drift reaches every batch's pooled steps alike (exactly, for an
// even N and points of equal length), and the rounds' means show how far a rerun would move each number.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ranges>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/stats.hpp"
#include "sweep/point_runner.hpp"

namespace bsw::sweep_detail {
namespace {

// The rounds a point has finished: its entries, or 1 for a point measured once (a resumed point from a
// sweep without --rounds).
int rounds_done(const Point& p) {
  return p.rounds.empty() ? 1 : static_cast<int>(p.rounds.size());
}

bool round_failed(const Point& p) {
  return std::any_of(p.rounds.begin(), p.rounds.end(),
                     [](const PointRound& r) { return r.status != PointStatus::ok; });
}

// Whether round `round` measures the point: ok in every round so far, and short of that round.
bool due(const Point& p, int round) {
  return p.status == PointStatus::ok && !round_failed(p) && rounds_done(p) < round;
}

// The telemetry of two rounds' timed windows as one: energies add up, means weigh by each window's timed
// milliseconds, extremes take the extreme; a clock median is the mean of the two medians (the samples
// behind them are gone), the throttle reasons are both rounds'.
PointTelemetry merged(const PointTelemetry& a, double a_ms, const PointTelemetry& b, double b_ms,
                      int64_t samples_processed) {
  const auto weighted = [&](const std::optional<double>& x, const std::optional<double>& y) {
    if (!x || !y) return x ? x : y;
    const double total = a_ms + b_ms;
    return std::optional<double>(total > 0 ? (*x * a_ms + *y * b_ms) / total : (*x + *y) / 2);
  };
  const auto both = [](const std::optional<double>& x, const std::optional<double>& y, auto pick) {
    if (!x || !y) return x ? x : y;
    return std::optional<double>(pick(*x, *y));
  };
  const auto larger = [](double x, double y) { return std::max(x, y); };
  const auto smaller = [](double x, double y) { return std::min(x, y); };
  const auto middle = [](double x, double y) { return (x + y) / 2; };
  PointTelemetry t;
  t.power_w_mean = weighted(a.power_w_mean, b.power_w_mean);
  t.power_w_max = both(a.power_w_max, b.power_w_max, larger);
  // Energy of both windows, only where both have one: one window's energy over both windows' samples
  // would be a fraction of the truth.
  if (a.energy_j && b.energy_j) {
    t.energy_j = *a.energy_j + *b.energy_j;
    if (samples_processed > 0) t.joules_per_sample = *t.energy_j / static_cast<double>(samples_processed);
  }
  t.sm_clock_mhz_min = both(a.sm_clock_mhz_min, b.sm_clock_mhz_min, smaller);
  t.sm_clock_mhz_median = both(a.sm_clock_mhz_median, b.sm_clock_mhz_median, middle);
  t.mem_clock_mhz_min = both(a.mem_clock_mhz_min, b.mem_clock_mhz_min, smaller);
  t.mem_clock_mhz_median = both(a.mem_clock_mhz_median, b.mem_clock_mhz_median, middle);
  t.utilization_pct = weighted(a.utilization_pct, b.utilization_pct);
  t.memory_utilization_pct = weighted(a.memory_utilization_pct, b.memory_utilization_pct);
  t.temperature_c = both(a.temperature_c, b.temperature_c, larger);
  t.throttle_reasons = a.throttle_reasons;
  for (const std::string& r : b.throttle_reasons)
    if (std::find(t.throttle_reasons.begin(), t.throttle_reasons.end(), r) == t.throttle_reasons.end())
      t.throttle_reasons.push_back(r);
  return t;
}

// Two rounds' host windows as one: times add up, rates weigh by each window's wall time.
PointHost merged(const PointHost& a, const PointHost& b) {
  PointHost h;
  h.wall_s = a.wall_s + b.wall_s;
  h.cpu_s = a.cpu_s + b.cpu_s;
  h.cpus = std::max(a.cpus, b.cpus);
  const auto weighted = [&](const std::optional<double>& x, const std::optional<double>& y) {
    if (!x || !y) return std::optional<double>();  // one window unknown: the whole is unknown
    return std::optional<double>(h.wall_s > 0 ? (*x * a.wall_s + *y * b.wall_s) / h.wall_s : (*x + *y) / 2);
  };
  h.others_cores = weighted(a.others_cores, b.others_cores);
  h.steal_pct = weighted(a.steal_pct, b.steal_pct);
  if (a.waited_s && b.waited_s) h.waited_s = *a.waited_s + *b.waited_s;
  return h;
}

double sum(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

}  // namespace

void PointRunner::run_rounds() {
  const int rounds = static_cast<int>(settings_.rounds);
  if (rounds > 1 && !interrupted_) {
    // Round 1's order as it ran (a list ascending, --effective-batch from the largest micro-batch down, a
    // search's refinements last), then any point it did not record, by batch.
    std::vector<std::pair<int64_t, int64_t>> first;
    for (const auto& key : first_round_order_)
      if (std::find(first.begin(), first.end(), key) == first.end()) first.push_back(key);
    for (const Point& p : points_)
      if (std::find(first.begin(), first.end(), std::pair(p.batch, p.accumulation)) == first.end())
        first.emplace_back(p.batch, p.accumulation);
    for (int round = 2; round <= rounds && !interrupted_; ++round) {
      // Round 1 (the whole sweep) finished: whatever stops the sweep from here, every batch is in.
      observer_.on_round_begun(round);
      // The measurements left, exact now that round 1 is done (less any whose round fails later).
      int left = 0;
      for (int later = round; later <= rounds; ++later)
        left += static_cast<int>(
            std::count_if(points_.begin(), points_.end(), [&](const Point& p) { return due(p, later); }));
      planned_total_ = started_ + left;
      total_is_estimate_ = false;
      std::vector<std::pair<int64_t, int64_t>> order;
      for (const auto& [batch, accumulation] : first) {
        const Point* p = find(batch, accumulation);
        if (p != nullptr && due(*p, round)) order.emplace_back(batch, accumulation);
      }
      if (round % 2 == 0) std::reverse(order.begin(), order.end());  // round 1's order, reversed
      for (const auto& [batch, accumulation] : order)
        if (!measure_round(batch, accumulation, round)) break;
    }
    // Stopped before reaching them: the points measured once (taken by --resume from a sweep without
    // --rounds) get their round 1 entry too, so every ok point it measured or took has its rounds[].
    for (Point& p : points_)
      if (p.status == PointStatus::ok && p.rounds.empty())
        p.rounds.push_back({static_cast<int64_t>(p.samples_ms.size()), p.stop_reason, PointStatus::ok, {}});
  }
  warn_disagreeing_rounds();
}

void PointRunner::warn_disagreeing_rounds() {
  // The rounds that disagree: the machine changed speed between them. Said per point where few, else once;
  // also for an interrupted sweep, and for rounds a resumed report brought.
  std::vector<std::string> apart;
  std::string first;
  for (const Point& p : points_) {
    const std::optional<RoundsAgreement> agreement = rounds_agreement(p);
    if (!agreement || !agreement->disagree) continue;
    apart.push_back(batch_label(p.batch, p.accumulation));
    if (!first.empty()) continue;
    const auto ms = [](double v) { return fmt::format("{:.4g}", v); };
    // Up to six means listed; more are their extremes.
    const std::string means =
        agreement->means_ms.size() <= 6
            ? fmt::format("{} ms", fmt::join(agreement->means_ms | std::views::transform(ms), ", "))
            : fmt::format("fastest {} ms in round {}, slowest {} ms in round {}",
                          ms(*std::min_element(agreement->means_ms.begin(), agreement->means_ms.end())),
                          agreement->fastest,
                          ms(*std::max_element(agreement->means_ms.begin(), agreement->means_ms.end())),
                          agreement->slowest);
    first = fmt::format("its {} rounds' mean steps differ by {:.1f}% ({}; {})", agreement->means_ms.size(),
                        agreement->spread_pct, means,
                        *agreement->p_value < 1e-12 ? std::string("p < 1e-12")
                                                    : fmt::format("p = {:.2g}", *agreement->p_value));
  }
  if (apart.empty()) return;
  const std::string why =
      "the machine ran at another speed in another round (clocks, temperature, other processes), so a rerun "
      "may see either; the pooled figures average the rounds, and each point's rounds[] in the JSON has its "
      "own";
  if (apart.size() == 1) {
    warn(fmt::format("batch {}: {}, more than their noise explains: {}", apart.front(), first, why));
  } else {
    warn(fmt::format("the rounds of batches {} disagree, more than their noise explains (batch {}: {}): {}",
                     fmt::join(apart, ", "), apart.front(), first, why));
  }
}

bool PointRunner::measure_round(int64_t batch, int64_t accumulation, int round) {
  if (observer_.should_stop()) {
    interrupted_ = true;
    return false;
  }
  Point* const found = find(batch, accumulation);
  if (found == nullptr) return true;
  Point& stored = *found;
  observer_.on_point_start(PointStart{++started_, std::max(planned_total_, started_), total_is_estimate_,
                                      batch, accumulation, stored.refinement, round,
                                      static_cast<int>(settings_.rounds)});
  // A point measured once before (a resumed one, from a sweep without --rounds) becomes its round 1.
  if (stored.rounds.empty())
    stored.rounds.push_back(
        {static_cast<int64_t>(stored.samples_ms.size()), stored.stop_reason, PointStatus::ok, {}});
  const std::string label = batch_label(batch, accumulation);
  const auto failed = [&](PointStatus status, std::string reason) {
    warn(fmt::format("batch {}: round {} failed ({}: {}); its figures are {}, and it ran no more rounds",
                     label, round, to_string(status), reason,
                     round == 2 ? std::string("round 1's") : fmt::format("rounds 1-{} pooled", round - 1)));
    stored.rounds.push_back({0, {}, status, std::move(reason)});
    notify_done(stored);
    return true;
  };

  Point fresh;  // this round alone
  fresh.batch = batch;
  fresh.accumulation = accumulation;
  fresh.effective_batch = batch * accumulation;
  fresh.refinement = stored.refinement;
  NoiseCriterion criterion(settings_.stopping);
  criterion.set_round_steps(std::max<int64_t>(1, stored.rounds.front().steps));
  Prepared prepared = prepare_point(batch, accumulation, round);
  std::unique_ptr<Session> session = std::move(prepared.session);
  if (!session) return failed(prepared.status, std::move(prepared.reason));
  const bool finished = time_steps(*session, fresh, criterion);
  for (std::string& warning : observer_.on_timed_end(fresh)) warnings_.push_back(std::move(warning));
  if (!finished) return false;  // interrupted: this round is dropped, the point keeps the rounds before it
  // A point taken from --resume that this run measured again, a round through, was measured by this run too.
  if (!stored.resumed_from.empty() && measured_now_.insert({batch, accumulation}).second) {
    ++measured_;
    observer_.on_measured_points(measured_);
  }
  const SessionMemory memory = session->memory();
  fresh.execution = session->details();
  add_session_warnings(fresh);
  session.reset();
  if (fresh.status != PointStatus::ok) return failed(fresh.status, std::move(fresh.reason));
  if (fresh.samples_ms.empty() || !(sum(fresh.samples_ms) > 0))
    return failed(PointStatus::error, "the timer measured 0 ms for every step: too short to time");

  // Pooled into the point: its steps after the earlier rounds', and every figure from all of them.
  const double before_ms = sum(stored.samples_ms), round_ms = sum(fresh.samples_ms);
  stored.samples_ms.insert(stored.samples_ms.end(), fresh.samples_ms.begin(), fresh.samples_ms.end());
  const std::string stop = criterion.stop_reason();
  stored.rounds.push_back({static_cast<int64_t>(fresh.samples_ms.size()), stop, PointStatus::ok, {}});
  // The point's stop_reason is the weakest of its rounds': a round the timeout cut says so.
  if (stop == "timeout") stored.stop_reason = stop;
  if (fresh.skipped_steps) stored.skipped_steps = stored.skipped_steps.value_or(0) + *fresh.skipped_steps;
  if (fresh.loss) stored.loss = fresh.loss;
  stored.memory.measured_bytes = std::max(stored.memory.measured_bytes.value_or(0), memory.allocated_bytes);
  if (memory.device_used_bytes)
    stored.memory.device_used_bytes =
        std::max(stored.memory.device_used_bytes.value_or(0), *memory.device_used_bytes);
  if (stored.host && fresh.host) {
    stored.host = merged(*stored.host, *fresh.host);
  } else {
    stored.host.reset();  // one round's window is not the point's
  }
  if (stored.telemetry && fresh.telemetry) {
    stored.telemetry = merged(*stored.telemetry, before_ms, *fresh.telemetry, round_ms,
                              static_cast<int64_t>(stored.samples_ms.size()) * stored.effective_batch);
  } else if (stored.telemetry || fresh.telemetry) {
    stored.telemetry.reset();
  }
  stored.step_ms = summarize(stored.samples_ms);
  stored.noise_pct = relative_noise(stored.samples_ms) * 100.0;
  rates(stored, prepared.plan);
  if (std::optional<std::string> warning = criterion.warning()) {
    std::string why = fmt::format("round {}: {}", round, *warning);
    if (!warmup_cut_.empty()) why += fmt::format(" ({})", warmup_cut_);
    stop_warnings_.push_back(
        {batch, accumulation, std::move(why), fresh.samples_ms.size(), !warmup_cut_.empty(), round});
  } else if (!warmup_cut_.empty()) {
    stop_warnings_.push_back({batch, accumulation, fmt::format("round {}: {}", round, warmup_cut_),
                              fresh.samples_ms.size(), true, round});
  }
  notify_done(stored);
  return true;
}

}  // namespace bsw::sweep_detail
