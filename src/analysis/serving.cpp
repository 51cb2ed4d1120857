// Serving at a request rate (run/analyze --request-rate): which max batch a dynamic batcher should use, from
// the sweep's measured steps. The model (README "Serving"):
//   - requests arrive one sample each, at random (a Poisson process) at the rate;
//   - one batcher feeds one model instance, first come first served. When the instance is free and requests
//     wait, it starts a step at once where `max batch` of them wait; else it holds them until that many
//     have arrived or the oldest has waited --max-queue-delay, whichever comes first (Triton's dynamic
//     batcher; with the default delay 0 it takes whatever waits);
//   - a step of k requests runs as the smallest swept batch of k or more (CUDA graphs and engines are built
//     for fixed batches; vLLM pads the same way), and takes one of that batch's measured steps, drawn at
//     random: the step-time spread the sweep saw reaches the requests;
//   - a request's latency runs from its arrival to the end of its step: queueing, the hold and the step,
//     nothing before or after it (no transfer, tokenizer, network).
// Each max batch runs kServingReplications independent replications, whose spread gives the figures' errors,
// and two of them again from a backlog, which says whether the queue forgot how it started (see
// analysis.hpp for when a row is settled). The same arrivals and draws for every max batch (common random
// numbers), so their differences are the batcher's and not the dice's; fixed seeds, so one report always
// gives one answer.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include "analysis/curve.hpp"
#include "batchsweep/analysis.hpp"
#include "batchsweep/stats.hpp"

namespace bsw {
namespace {

using analysis_detail::format_number;
using analysis_detail::format_percent;
using analysis_detail::format_rate;
using analysis_detail::is_ok;
using analysis_detail::latency_text;

// A latency in ms with three significant digits, zeros kept (4.00), and every integer digit (1234).
std::string ms_text(double ms) {
  if (!(ms > 0)) return fmt::format("{}", ms);
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(ms))));
  return fmt::format("{:.{}f}", ms, decimals);
}

// A standard error in ms: under the shortest step a report holds, rounding noise, said as 0.
std::string error_text(double ms) {
  return ms < kShortestStepMs ? std::string("0") : ms_text(ms);
}

// splitmix64: the same stream on every platform (std::*_distribution is not).
class Dice {
 public:
  explicit Dice(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(unit() * static_cast<double>(n)); }

 private:
  uint64_t state_;
};

// One swept batch a step can run as: its throughput and its measured steps.
struct Pool {
  int64_t batch = 0;
  double samples_per_second = 0;
  std::vector<double> ms;
  bool mean_only = false;  // the point kept no steps (a hand-made or trimmed report): its mean step alone
};

// The ok points of one micro-batch a step that a batcher can serve from.
bool servable(const Point& p) {
  return is_ok(p) && p.accumulation == 1;
}

// A servable point too large a max batch to simulate request by request (kServingMostMaxBatch).
bool past_the_limit(const Point& p) {
  return servable(p) && p.batch > kServingMostMaxBatch;
}

// The servable points up to kServingMostMaxBatch (the fastest where two share a batch), by batch, with steps
// to draw: their samples, else their mean step.
std::vector<Pool> pools_of(std::span<const Point> points) {
  std::vector<Pool> pools;
  for (const Point& p : points) {
    if (!servable(p) || past_the_limit(p)) continue;
    std::vector<double> ms;
    for (double v : p.samples_ms)
      if (std::isfinite(v) && v > 0) ms.push_back(v);
    const bool mean_only = ms.empty();
    if (mean_only)
      ms.push_back(p.step_ms.mean > 0 ? p.step_ms.mean : 1000.0 * p.batch / p.samples_per_second);
    const auto same =
        std::find_if(pools.begin(), pools.end(), [&](const Pool& q) { return q.batch == p.batch; });
    if (same == pools.end()) {
      pools.push_back({p.batch, p.samples_per_second, std::move(ms), mean_only});
    } else if (p.samples_per_second > same->samples_per_second) {
      *same = {p.batch, p.samples_per_second, std::move(ms), mean_only};
    }
  }
  std::sort(pools.begin(), pools.end(), [](const Pool& a, const Pool& b) { return a.batch < b.batch; });
  return pools;
}

}  // namespace

std::vector<int64_t> serving_mean_only_batches(std::span<const Point> points) {
  std::vector<int64_t> batches;
  for (const Pool& p : pools_of(points))
    if (p.mean_only) batches.push_back(p.batch);
  return batches;
}

std::vector<int64_t> serving_unsimulated_batches(std::span<const Point> points) {
  std::vector<int64_t> batches;
  for (const Point& p : points)
    if (past_the_limit(p)) batches.push_back(p.batch);
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  return batches;
}

namespace {

// Where the steps drawn come from, for the reasons: the measured steps, and any batch's mean step alone.
std::string steps_source(const std::vector<Pool>& pools) {
  std::vector<std::string> mean_only;
  for (const Pool& p : pools)
    if (p.mean_only) mean_only.push_back(std::to_string(p.batch));
  if (mean_only.empty()) return "simulated from the measured steps";
  return fmt::format(
      "simulated from the measured steps and, for batch{} {}, which the report keeps no steps of, the mean "
      "step alone: {} spread is not simulated, and the tail reads short",
      mean_only.size() > 1 ? "es" : "", fmt::join(mean_only, ", "), mean_only.size() > 1 ? "their" : "its");
}

// A max batch's steps are drawn from the swept batches that hold its steps, from about half its mean step
// (fewer requests are rare, and ran in few steps) up to the max batch: where one of those holds fewer
// measured steps than the percentile needs (100 / (100 - P), run --request-rate's --min-samples), the
// simulated tail is the slowest few of them, and any error given is the simulation's alone. Said, for the
// reasons (`with_error`: the reason gives one); else empty.
std::string thin_steps(const std::vector<Pool>& pools, int64_t max_batch, double mean_batch, double pct,
                       bool with_error) {
  const auto first = std::find_if(pools.begin(), pools.end(), [&](const Pool& p) {
    return static_cast<double>(p.batch) >= std::floor(mean_batch / 2);
  });
  const Pool* thinnest = nullptr;
  for (auto it = first; it != pools.end(); ++it)
    if (it->batch <= max_batch && !it->mean_only && (!thinnest || it->ms.size() < thinnest->ms.size()))
      thinnest = &*it;
  if (!thinnest || !analysis_detail::too_few_steps(thinnest->ms.size(), pct)) return {};
  const double need = std::ceil(100.0 / (100.0 - pct) - 1e-6);
  return fmt::format(
      "; its steps are drawn from as few as {} measured (batch {}), under the {:.0f} a {} needs, so the tail "
      "is the slowest of those few{}: measure at least {:.0f} steps a batch (--min-samples {:.0f}, run "
      "--request-rate's default)",
      thinnest->ms.size(), thinnest->batch, need, latency_name(pct),
      with_error ? " and the \u00b1 is the simulation's alone" : "", need, need);
}

// A step of k requests runs as the smallest swept batch that holds k: where the max batch's steps hold on
// average well under the swept batch they run as (a quarter more), a dynamic-shape engine, which runs k as
// k, would serve them faster than this says. Said, with batches about the mean step to sweep (from 0.8 to
// 1.5 of it, below the swept batch, in steps of an eighth of it: 128:240:+16 for steps of 160 requests that
// ran as 256); else empty.
std::string padded_steps(const std::vector<Pool>& pools, double mean_batch) {
  const auto holds = std::find_if(pools.begin(), pools.end(),
                                  [&](const Pool& p) { return static_cast<double>(p.batch) >= mean_batch; });
  if (holds == pools.end() || static_cast<double>(holds->batch) <= 1.25 * mean_batch) return {};
  const int64_t below = holds == pools.begin() ? 0 : std::prev(holds)->batch;
  if (holds->batch - below < 2) return {};
  int64_t step = std::max<int64_t>(1, static_cast<int64_t>(mean_batch / 8));
  if (step >= 8) step = step / 8 * 8;
  const int64_t low = std::max(below + 1, static_cast<int64_t>(std::floor(0.8 * mean_batch)));
  const int64_t high = std::min(holds->batch - 1, static_cast<int64_t>(std::ceil(1.5 * mean_batch)));
  const int64_t from = (low + step - 1) / step * step, to = high / step * step;
  const std::string range =
      from < to    ? fmt::format("{}:{}:+{}", from, to, step)
      : from == to ? std::to_string(from)
                   : std::to_string(std::min(holds->batch - 1, static_cast<int64_t>(std::ceil(mean_batch))));
  return fmt::format(
      "; its steps of {:.3g} requests on average run as batch {}, the smallest swept that holds them, as an "
      "engine built for fixed batches (or a CUDA graph) pads them; a dynamic-shape engine (TensorRT under "
      "Triton) runs them as they are: --batch {} times batches about them",
      mean_batch, holds->batch, range);
}

// Poisson arrivals in ms, drawn as far as they are read: one stream, which every max batch reads.
class Arrivals {
 public:
  Arrivals(double rate_per_s, uint64_t seed) : dice_(seed), mean_gap_ms_(1000.0 / rate_per_s) {}
  double operator[](std::size_t i) {
    while (at_.size() <= i) grow();
    return at_[i];
  }
  // Draws until arrival i is drawn or one comes after t (a batcher's hold reads no further than its end).
  void reach(std::size_t i, double t) {
    while (at_.size() <= i && (at_.empty() || at_.back() <= t)) grow();
  }
  [[nodiscard]] bool drawn(std::size_t i) const { return i < at_.size(); }

 private:
  void grow() {
    last_ += -std::log1p(-dice_.unit()) * mean_gap_ms_;
    at_.push_back(last_);
  }
  Dice dice_;
  double mean_gap_ms_;
  double last_ = 0;
  std::vector<double> at_;
};

// One replication: its own arrivals and draws, its own warm-up, its timed requests' latencies in arrival
// order.
struct Replication {
  std::vector<double> latencies;
  // The time steps ran, and the time from the first timed step's start to the last's end.
  double busy = 0, span = 0;
  int64_t steps = 0, served = 0;
  std::size_t largest_step = 0;  // the most requests one step took
};

// The batcher with pools[top].batch as its max batch and `delay_ms` its hold, over `at`'s arrivals: `warm`
// requests, then `timed` ones; with a `backlog` of requests waiting at time 0 before them (whose latency is
// not timed).
Replication replicate(const std::vector<Pool>& pools, std::size_t top, Arrivals& arrivals, uint64_t draw_seed,
                      double delay_ms, std::size_t warm, std::size_t timed, std::size_t backlog = 0) {
  Replication rep;
  const auto max_batch = static_cast<std::size_t>(pools[top].batch);
  warm += backlog;
  const std::size_t end = warm + timed;
  struct {
    Arrivals& stream;
    std::size_t backlog;
    double operator[](std::size_t i) { return i < backlog ? 0.0 : stream[i - backlog]; }
    void reach(std::size_t i, double t) {
      if (i >= backlog) stream.reach(i - backlog, t);
    }
    [[nodiscard]] bool drawn(std::size_t i) const { return i < backlog || stream.drawn(i - backlog); }
  } at{arrivals, backlog};
  Dice dice(draw_seed);  // which measured step each step takes
  rep.latencies.reserve(timed);
  std::size_t next = 0, arrived = 0;  // the oldest waiting request; how many have arrived
  double free_at = 0, first_start = -1;
  const auto arrive_until = [&](double t) {
    arrived = std::max(arrived, backlog);  // all there at time 0: millions, for a max batch of millions
    while (at[arrived] <= t) ++arrived;
  };
  while (next < end) {
    const double ready = std::max(free_at, at[next]);
    arrive_until(ready);
    double start = ready;
    if (arrived - next < max_batch) {
      // Held until the batch fills or the oldest has waited the delay, whichever comes first.
      const double deadline = at[next] + delay_ms;
      const std::size_t last = next + max_batch - 1;
      at.reach(last, deadline);
      const double full = at.drawn(last) ? at[last] : std::numeric_limits<double>::infinity();
      start = std::max(ready, std::min(deadline, full));
      arrive_until(start);
    }
    const std::size_t k = std::min(arrived - next, max_batch);
    rep.largest_step = std::max(rep.largest_step, k);
    const auto runs_as =
        std::lower_bound(pools.begin(), pools.begin() + static_cast<std::ptrdiff_t>(top) + 1,
                         static_cast<int64_t>(k), [](const Pool& p, int64_t b) { return p.batch < b; });
    const double step = runs_as->ms[dice.below(runs_as->ms.size())];
    if (next + k > warm) {
      if (first_start < 0) first_start = start;
      rep.busy += step;
      ++rep.steps;
      rep.served += static_cast<int64_t>(k);
    }
    // The wait, then the step: a difference of two arrival-scale times only where there was a wait, so a
    // step of microseconds after days of arrivals keeps its digits.
    for (std::size_t r = std::max(next, warm); r < std::min(next + k, end); ++r)
      rep.latencies.push_back((start - at[r]) + step);
    next += k;
    free_at = start + step;
  }
  rep.span = free_at - first_start;
  return rep;
}

// The seeds: `base` (serving_seed) for the whole simulation; replication r's arrivals from base + r, and its
// step draws from this, one place, so that its backlog start draws as it does.
uint64_t serving_seed(const AnalysisOptions& options) {
  // Hashed: a multiple of splitmix64's own increment would start seed N's streams N draws into seed 0's.
  return options.serving_seed == 0 ? kServingSeed : Dice(kServingSeed + options.serving_seed).next();
}
uint64_t draw_seed(uint64_t base, std::size_t r) {
  return base ^ (0x5e57ULL + r);
}

// Mean and standard error of the mean of independent values.
std::pair<double, double> mean_and_error(const std::vector<double>& values) {
  const StepStats stats = summarize(values);
  return {stats.mean, stats.stddev / std::sqrt(static_cast<double>(values.size()))};
}

// The standard error of the percentile `pct` of every request pooled (`sorted`, whose value is `value`), by
// Woodruff's interval: the share of requests above it is a mean, whose error the sections below give; the
// percentiles that share's ±kServingErrorZ errors away bound the latency's interval, and its half-width over
// kServingErrorZ is the error. A tail made of a few long steps' requests (a stall's batch, and the queue
// behind it) is clustered: one step puts a hundred requests above the percentile, or none. The spread of
// the replications' own percentiles can miss that (all eight without a stall read alike, and the error as
// nothing); a count of requests above it cannot, and the interval then spans the gap between a stall's
// latency and a normal step's, as the answer would move across it on another seed.
double percentile_error(const std::vector<double>& sorted, const std::vector<std::vector<double>>& in_order,
                        double pct, double value) {
  // Each replication cut into kServingSections consecutive sections, longer than the queue's memory away
  // from capacity (where a row is settled), so that their counts are near independent.
  std::vector<double> shares;
  for (const auto& latencies : in_order) {
    const std::size_t n = latencies.size();
    for (std::size_t s = 0; s < kServingSections; ++s) {
      const std::size_t begin = n * s / kServingSections, end = n * (s + 1) / kServingSections;
      if (end == begin) continue;
      std::size_t above = 0;
      for (std::size_t i = begin; i < end; ++i) above += latencies[i] > value ? 1 : 0;
      shares.push_back(static_cast<double>(above) / static_cast<double>(end - begin));
    }
  }
  const double total = static_cast<double>(sorted.size());
  const double tail = std::clamp(1.0 - pct / 100.0, 0.0, 1.0);
  // No fewer than independent requests would give (a queue's clustering only adds to it).
  const double share_se = std::max(shares.size() > 1 ? mean_and_error(shares).second : 0.0,
                                   std::sqrt(tail * (1.0 - tail) / total));
  const double reach = 100.0 * kServingErrorZ * share_se;
  const double low = sorted_percentile(sorted, std::max(0.0, pct - reach));
  const double high = sorted_percentile(sorted, std::min(100.0, pct + reach));
  return std::max(high - value, value - low) / kServingErrorZ;
}

struct Simulated {
  ServingBatch row;
  std::size_t largest_step = 0;  // the most requests one step took, over every replication
};

// kServingReplications independent replications of the batcher with pools[top].batch as its max batch, each
// `timed` requests long after its warm-up; the figures pool their requests, and their errors come from the
// spread between the replications. Those are independent, but each may be shorter than the queue's memory and
// all read alike from the same empty start: the backlog start below tells that.
Simulated simulate(const std::vector<Pool>& pools, std::size_t top, std::vector<Arrivals>& arrivals,
                   double rate, double delay_ms, double pct, std::size_t timed, uint64_t seed) {
  Simulated sim;
  ServingBatch& out = sim.row;
  const auto max_batch = static_cast<std::size_t>(pools[top].batch);
  // kServingWarmupSteps full steps' worth of requests, so that a queue of large batches fills too; capped
  // for max batches of thousands to millions (analysis.hpp).
  const std::size_t warm =
      std::clamp(kServingWarmupSteps * max_batch, kServingWarmupRequests, kServingWarmupMostRequests);
  std::vector<double> all, means, percentiles;
  std::vector<std::vector<double>> in_order;  // each replication's latencies, in arrival order
  all.reserve(timed * arrivals.size());
  double busy = 0, span = 0;
  int64_t steps = 0, served = 0;
  for (std::size_t r = 0; r < arrivals.size(); ++r) {
    Replication rep = replicate(pools, top, arrivals[r], draw_seed(seed, r), delay_ms, warm, timed);
    busy += rep.busy;
    span += rep.span;
    steps += rep.steps;
    served += rep.served;
    sim.largest_step = std::max(sim.largest_step, rep.largest_step);
    double sum = 0;
    for (double v : rep.latencies) sum += v;
    means.push_back(sum / static_cast<double>(rep.latencies.size()));
    // Its latencies sorted where they join the pool (for its own percentile), and kept in arrival order
    // (for the sections' counts) without a copy.
    const auto begin = static_cast<std::ptrdiff_t>(all.size());
    all.insert(all.end(), rep.latencies.begin(), rep.latencies.end());
    const std::span<double> own(all.begin() + begin, all.end());
    std::sort(own.begin(), own.end());
    percentiles.push_back(sorted_percentile(own, pct));
    in_order.push_back(std::move(rep.latencies));
  }
  out.requests = static_cast<int64_t>(all.size());
  out.timed_steps = steps;
  out.utilization = span > 0 ? busy / span : 1.0;
  out.mean_batch = static_cast<double>(served) / static_cast<double>(std::max<int64_t>(steps, 1));
  const auto [mean, mean_se] = mean_and_error(means);
  out.latency_mean_ms = mean;
  out.latency_mean_se_ms = mean_se;
  std::sort(all.begin(), all.end());
  out.latency_p50_ms = sorted_percentile(all, 50);
  out.latency_ms = sorted_percentile(all, pct);
  // Two estimates of the percentile's error, and the larger: the spread of the replications' own
  // percentiles over the square root of their number (which the pooled one matches to first order), and
  // Woodruff's interval (below). Where a tail is a few long steps' requests each misses it on some seeds
  // (bench/serving_check.py --seeds).
  out.latency_se_ms =
      std::max(mean_and_error(percentiles).second, percentile_error(all, in_order, pct, *out.latency_ms));
  // The same replications started with kServingBacklog max batches waiting: a queue that forgets its start
  // within the warm-up gives the same mean; one that does not (near its capacity, where it wanders longer
  // than any simulation) reads higher, and the empty start read low.
  // The percentile moves too: a backlog's requests lengthen the tail before they move the mean.
  double bias = 0;
  for (std::size_t r = 0; r < kServingStartChecks && r < arrivals.size(); ++r) {
    Replication full = replicate(pools, top, arrivals[r], draw_seed(seed, r), delay_ms, warm, timed,
                                 kServingBacklog * max_batch);
    double sum = 0;
    for (double v : full.latencies) sum += v;
    bias = std::max(bias, std::fabs(sum / static_cast<double>(full.latencies.size()) / means[r] - 1.0));
    std::sort(full.latencies.begin(), full.latencies.end());
    bias = std::max(bias, std::fabs(sorted_percentile(full.latencies, pct) / percentiles[r] - 1.0));
  }
  out.start_bias = bias;
  // Near its capacity a queue of steps wanders for about 1/(1 - load)^2 of them: a replication shorter
  // than that has not seen the queue it would build, and reads low from its empty start (an M/D/1 queue at
  // 96% load needs 625 steps; a max batch of 256 at 96% serves 25,000 requests in 100).
  const double steps_each = static_cast<double>(steps) / static_cast<double>(arrivals.size());
  out.settled = steps >= kServingMinSteps && mean_se <= kServingMaxRelativeError * mean &&
                *out.latency_se_ms <= kServingMaxRelativeError * *out.latency_ms &&
                bias <= kServingMaxRelativeError &&
                steps_each >= serving_relaxation_steps(rate, pools[top].samples_per_second);
  return sim;
}

std::string requests_per_step(double mean_batch) {
  const std::string n = fmt::format("{:.3g}", mean_batch);
  return fmt::format("{} request{} per step", n, n == "1" ? "" : "s");
}

// Whether a table keeps the budget beyond its own noise: some settled, unsaturated max batch's latency and
// twice that estimate's standard error within it. The search keeps the highest rate that passes, so a point
// estimate alone would favour a lucky one. Any row, not only the answer: the answer is the smallest max batch
// as fast as the lowest within their errors, and a noisier one of those failing the test does not make the
// rate unserved where the lowest keeps it ("no max batch is known to keep it" is said of every row).
// A row whose latency an answer may rest on: settled, unsaturated, with a latency.
bool usable_row(const ServingBatch& b) {
  return !b.saturated && b.settled && b.latency_ms;
}

bool within_budget_beyond_noise(const Serving& table, double budget) {
  if (!table.best.latency_ms) return false;
  return std::any_of(table.batches.begin(), table.batches.end(), [&](const ServingBatch& b) {
    return usable_row(b) && *b.latency_ms + 2.0 * b.latency_se_ms.value_or(0.0) <= budget;
  });
}

// The lowest settled, unsaturated row in a table, where it has one.
const ServingBatch* lowest_latency(const Serving& table) {
  const ServingBatch* lowest = nullptr;
  for (const ServingBatch& b : table.batches)
    if (usable_row(b) && (!lowest || *b.latency_ms < *lowest->latency_ms)) lowest = &b;
  return lowest;
}

// --request-rate max (analysis.hpp): the most requests/s served within the budget, and the table there. Each
// probe is the table simulate_serving gives at that rate, so the answer is one of the tables searched.
Serving most_within_budget(std::span<const Point> points, const AnalysisOptions& options) {
  const std::vector<Pool> pools = pools_of(points);
  AnalysisOptions at = options;
  const double budget = *options.latency_slo_ms;
  const std::string pct = latency_name(options.latency_percentile);
  // No rate served: the table is the last rate tried, which is itself not served (unserved_above equals it).
  const auto none_found = [&](Serving table, const std::string& why) {
    table.most_within_budget = true;
    table.unserved_above = table.request_rate;
    table.best = BatchChoice(std::nullopt, std::nullopt, why);
    return table;
  };
  if (pools.empty()) {
    at.request_rate = 1.0;  // no rate to search: the table says there is nothing to serve from
    Serving none = simulate_serving(points, at);
    return none_found(none, none.best.reason);
  }
  double top = 0, fastest_step = std::numeric_limits<double>::infinity();
  for (const Pool& p : pools) {
    top = std::max(top, p.samples_per_second);
    fastest_step = std::min(fastest_step, *std::min_element(p.ms.begin(), p.ms.end()));
  }
  const auto table_at = [&](double rate) {
    at.request_rate = rate;
    return simulate_serving(points, at);
  };
  // Every request takes a step at least: under the fastest step measured no rate keeps the budget.
  if (budget < fastest_step) {
    Serving none = table_at(top / 2);
    return none_found(none,
                      fmt::format("no max batch keeps the {} request latency within the {} ms budget at "
                                  "any rate: every request takes a step, and the fastest measured is {} ms",
                                  pct, format_number(budget), ms_text(fastest_step)));
  }
  double hi = top, lo = top / 2;  // at the largest capacity every max batch saturates
  Serving found = table_at(lo);
  // Less load does not always shorten the lowest latency from one halving to the next (a smaller max batch
  // may only then stop saturating; a hold fills batches later), so the floor alone ends the halving.
  bool served = true;
  for (int halvings = 1; !within_budget_beyond_noise(found, budget); ++halvings) {
    hi = lo;
    if (halvings >= kServingRateHalvings) {
      served = false;
      break;
    }
    lo /= 2;
    found = table_at(lo);
  }
  const auto bisect = [&] {
    while (hi / lo > 1 + kServingRateTolerance) {
      const double mid = std::sqrt(lo * hi);
      Serving table = table_at(mid);
      if (within_budget_beyond_noise(table, budget)) {
        lo = mid;
        found = std::move(table);
      } else {
        hi = mid;
      }
    }
  };
  if (served) bisect();
  // A hold serves some loads faster than lower ones (its batches fill sooner), so the rates served can have
  // gaps: rates from the largest capacity down, kServingRateScanStep apart on a log scale (evenly, where
  // fewer reach the rate found not served), at most kServingRateScanMost of them; the first served, with
  // the one above it, bounds a bisection again. Also where the halving found no rate served at all.
  const double floor = hi;
  const double span = std::log(top / floor);
  const int steps = std::max(
      1,
      std::min(kServingRateScanMost, static_cast<int>(std::ceil(span / std::log1p(kServingRateScanStep)))));
  const double step = std::min(span / steps, std::log1p(kServingRateScanStep));
  for (int i = 1; i <= steps; ++i) {
    const double rate = top * std::exp(-step * i);
    if (rate <= floor * (1 + 1e-12)) break;  // known not served
    Serving table = table_at(rate);
    if (!within_budget_beyond_noise(table, budget)) continue;
    lo = rate;
    hi = top * std::exp(-step * (i - 1));
    found = std::move(table);
    served = true;
    bisect();
    break;
  }
  if (!served) {
    lo = floor;  // `found` is its table, the halving's last
    const ServingBatch* lowest = lowest_latency(found);
    return none_found(
        found,
        fmt::format("no max batch keeps the {} request latency within the {} ms budget at any rate tried, "
                    "down to {} requests/s{}",
                    pct, format_number(budget), format_rate(lo),
                    lowest
                        ? fmt::format(": the lowest is {} \u00b1 {} ms (max batch {}), and a rate is served "
                                      "only where that latency plus twice its error is within the budget",
                                      latency_text(*lowest->latency_ms, budget),
                                      error_text(lowest->latency_se_ms.value_or(0.0)), lowest->batch)
                        : std::string()));
  }
  found.most_within_budget = true;
  found.unserved_above = hi;
  found.best.reason = fmt::format(
      "the most requests/s found within the {} ms {} budget, {} (to {:g}%; at {} no max batch is known to "
      "keep "
      "it, with twice the simulation's error): {}",
      format_number(budget), pct, format_rate(lo), kServingRateTolerance * 100, format_rate(hi),
      found.best.reason);
  return found;
}

}  // namespace

Serving simulate_serving(std::span<const Point> points, const AnalysisOptions& options) {
  if (is_request_rate_max(options.request_rate)) return most_within_budget(points, options);
  Serving s;
  s.request_rate = options.request_rate.value_or(0);
  s.max_queue_delay_ms = options.max_queue_delay_ms;
  s.latency_percentile = options.latency_percentile;
  s.requests = static_cast<int64_t>(kServingRequests);
  s.replications = static_cast<int64_t>(kServingReplications);
  const std::vector<Pool> pools = pools_of(points);
  const std::string pct = latency_name(options.latency_percentile);
  const std::string rate = fmt::format("{} requests/s", format_rate(s.request_rate));
  if (pools.empty()) {
    const std::vector<int64_t> above = serving_unsimulated_batches(points);
    s.best = BatchChoice(
        std::nullopt, std::nullopt,
        above.empty()
            ? std::string("no ok point of one micro-batch a step to serve from")
            : fmt::format("every ok point of one micro-batch a step is above max batch {}, the most "
                          "simulated request by request (batch {}): sweep smaller batches to serve from",
                          kServingMostMaxBatch, fmt::join(above, ", ")));
    return s;
  }
  std::vector<Arrivals> arrivals;
  for (std::size_t r = 0; r < kServingReplications; ++r)
    arrivals.emplace_back(s.request_rate, serving_seed(options) + r);
  const std::size_t timed = kServingRequests / kServingReplications;
  // A max batch no step filled: every larger one runs the very same steps (it holds no longer and pads the
  // same), so its row is that one's.
  std::optional<ServingBatch> unfilled;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    ServingBatch b;
    if (s.request_rate >= pools[i].samples_per_second) {
      b.saturated = true;
    } else if (unfilled) {
      b = *unfilled;
    } else {
      Simulated sim = simulate(pools, i, arrivals, s.request_rate, s.max_queue_delay_ms, s.latency_percentile,
                               timed, serving_seed(options));
      // Unsettled away from its capacity (a few long steps, heavy-tailed ones): more requests settle it.
      if (!sim.row.settled && s.request_rate < kServingNearCapacity * pools[i].samples_per_second)
        sim = simulate(pools, i, arrivals, s.request_rate, s.max_queue_delay_ms, s.latency_percentile,
                       timed * kServingLonger, serving_seed(options));
      b = sim.row;
      if (sim.largest_step < static_cast<std::size_t>(pools[i].batch)) unfilled = b;
    }
    b.batch = pools[i].batch;
    b.capacity_per_second = pools[i].samples_per_second;
    s.batches.push_back(b);
  }
  // The smallest batch left out (past kServingMostMaxBatch) that could serve the rate: said where no row
  // does.
  const Point* could = nullptr;
  for (const Point& p : points)
    if (past_the_limit(p) && p.samples_per_second > s.request_rate &&
        (could == nullptr || p.batch < could->batch))
      could = &p;
  const std::string left_out =
      could == nullptr ? std::string()
                       : fmt::format(
                             "; batch {} serves up to {} requests/s, but a max batch above {} is not "
                             "simulated (request by request, steps that large take gigabytes)",
                             could->batch, format_rate(could->samples_per_second), kServingMostMaxBatch);
  const ServingBatch* lowest = lowest_latency(s);
  if (!lowest) {
    const ServingBatch& most = *std::max_element(s.batches.begin(), s.batches.end(),
                                                 [](const ServingBatch& a, const ServingBatch& b) {
                                                   return a.capacity_per_second < b.capacity_per_second;
                                                 });
    const bool any_unsettled = std::any_of(s.batches.begin(), s.batches.end(),
                                           [](const ServingBatch& b) { return !b.saturated && !b.settled; });
    s.best = BatchChoice(
        std::nullopt, std::nullopt,
        any_unsettled
            ? fmt::format(
                  "no max batch serves {} with a latency the simulation can pin down: each saturates, or its "
                  "latency is not known to {:g}% in the requests simulated (near its capacity a queue "
                  "wanders "
                  "longer than any simulation); the most any serves is {} requests/s (batch {})",
                  rate, kServingMaxRelativeError * 100, format_rate(most.capacity_per_second), most.batch)
            : fmt::format(
                  "every max batch saturates at {}: the most one serves is {} requests/s (batch {}); the "
                  "rate needs more throughput (a larger batch where it still rises, or more GPUs)",
                  rate, format_rate(most.capacity_per_second), most.batch) +
                  left_out);
    return s;
  }
  const std::optional<double> budget = options.latency_slo_ms;
  // The smallest max batch as good as the lowest (within the tie, or the two estimates' noise, and within the
  // budget): less memory and less padding for the same latency.
  const auto smallest_as_low = [&](const ServingBatch* low) {
    const ServingBatch* chosen = low;
    for (const ServingBatch& b : s.batches) {
      if (!usable_row(b) || b.batch >= chosen->batch) continue;
      const double margin = std::max(kServingTiePct / 100.0 * *low->latency_ms,
                                     2.0 * std::hypot(*b.latency_se_ms, *low->latency_se_ms));
      if (*b.latency_ms <= *low->latency_ms + margin && (!budget || *b.latency_ms <= *budget)) chosen = &b;
    }
    return chosen;
  };
  if (const ServingBatch* tentative = smallest_as_low(lowest);
      tentative != lowest && *tentative->latency_ms > (1.0 + kServingTiePct / 100.0) * *lowest->latency_ms) {
    // Within the simulation's noise of the lowest but not within the tie: a difference this simulation could
    // not resolve, which a longer one may (a max batch 15% slower was taken as "as low"). The two rows are
    // simulated again, kServingLonger times as long, and the choice made on those.
    for (const ServingBatch* row : {tentative, lowest}) {
      const auto i = static_cast<std::size_t>(row - s.batches.data());
      if (row->requests >= static_cast<int64_t>(timed * kServingLonger * arrivals.size()))
        continue;  // long already
      Simulated sim = simulate(pools, i, arrivals, s.request_rate, s.max_queue_delay_ms, s.latency_percentile,
                               timed * kServingLonger, serving_seed(options));
      if (!sim.row.settled) continue;  // the shorter estimate stands
      // The rows that are this one's by construction (larger max batches no step filled) take it too.
      const ServingBatch before = s.batches[i];
      for (std::size_t j = 0; j < s.batches.size(); ++j) {
        ServingBatch& other = s.batches[j];
        if (j != i && (j < i || other.saturated || other.latency_ms != before.latency_ms ||
                       other.latency_mean_ms != before.latency_mean_ms || other.requests != before.requests))
          continue;
        ServingBatch refreshed = sim.row;
        refreshed.batch = pools[j].batch;
        refreshed.capacity_per_second = pools[j].samples_per_second;
        other = refreshed;
      }
    }
    lowest = lowest_latency(s);
  }
  if (budget && *lowest->latency_ms > *budget) {
    s.best = BatchChoice(
        std::nullopt, std::nullopt,
        fmt::format("no max batch keeps the {} request latency within the {} ms budget at {} "
                    "({}): the lowest is {} ms (max batch {})",
                    pct, format_number(*budget), rate, steps_source(pools),
                    latency_text(*lowest->latency_ms, *budget), lowest->batch) +
            thin_steps(pools, lowest->batch, *lowest->mean_batch, options.latency_percentile, false));
    return s;
  }
  const ServingBatch* best = smallest_as_low(lowest);
  const double ms = *best->latency_ms;
  const double load = s.request_rate / best->capacity_per_second;
  // Near a budget, enough digits to read which side of it the latency is.
  std::string figures =
      fmt::format("{} {} \u00b1 {} ms", pct, budget ? latency_text(ms, *budget) : ms_text(ms),
                  error_text(*best->latency_se_ms));
  if (options.latency_percentile != 50) figures += fmt::format(", p50 {} ms", ms_text(*best->latency_p50_ms));
  figures +=
      fmt::format("; {}; the rate is {} of its capacity, {} requests/s", requests_per_step(*best->mean_batch),
                  format_percent(load), format_rate(best->capacity_per_second));
  std::string why =
      best == lowest
          ? fmt::format("lowest {} request latency at {} ({}): {}", pct, rate, steps_source(pools), figures)
          : fmt::format(
                "the smallest max batch as low as the lowest {} request latency at {} (max batch {}'s {} "
                "ms, within {:g}% or the simulation's noise; {}): {}",
                pct, rate, lowest->batch, ms_text(*lowest->latency_ms), kServingTiePct, steps_source(pools),
                figures);
  if (load >= kServingNearCapacity)
    why += ", near it: a little more load or slower steps lengthen the queue fast";
  why += thin_steps(pools, best->batch, *best->mean_batch, options.latency_percentile, true);
  why += padded_steps(pools, *best->mean_batch);
  if (budget) why += fmt::format("; within the {} ms budget", format_number(*budget));
  s.best = BatchChoice(best->batch, best->capacity_per_second, why, ms);
  return s;
}

}  // namespace bsw
