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
// The same arrivals and draws for every max batch (common random numbers), so their differences are the
// batcher's and not the dice's; a fixed seed, so one report always gives one answer.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
};

// The ok points of one micro-batch a step (the fastest where two share a batch), by batch, with steps to
// draw: their samples, else their mean step.
std::vector<Pool> pools_of(std::span<const Point> points) {
  std::vector<Pool> pools;
  for (const Point& p : points) {
    if (!is_ok(p) || p.accumulation != 1) continue;
    std::vector<double> ms;
    for (double v : p.samples_ms)
      if (std::isfinite(v) && v > 0) ms.push_back(v);
    if (ms.empty())
      ms.push_back(p.step_ms.mean > 0 ? p.step_ms.mean : 1000.0 * p.batch / p.samples_per_second);
    const auto same =
        std::find_if(pools.begin(), pools.end(), [&](const Pool& q) { return q.batch == p.batch; });
    if (same == pools.end()) {
      pools.push_back({p.batch, p.samples_per_second, std::move(ms)});
    } else if (p.samples_per_second > same->samples_per_second) {
      *same = {p.batch, p.samples_per_second, std::move(ms)};
    }
  }
  std::sort(pools.begin(), pools.end(), [](const Pool& a, const Pool& b) { return a.batch < b.batch; });
  return pools;
}

// Poisson arrivals in ms, drawn as far as they are read: the same stream for every max batch.
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

// The batcher with pools[top].batch as its max batch, `delay_ms` its hold, `pct` the latency percentile.
ServingBatch simulate(const std::vector<Pool>& pools, std::size_t top, double rate, double delay_ms,
                      double pct) {
  ServingBatch out;
  const Pool& largest = pools[top];
  out.batch = largest.batch;
  out.capacity_per_second = largest.samples_per_second;
  const auto max_batch = static_cast<std::size_t>(largest.batch);
  const std::size_t warm = kServingWarmupRequests, end = warm + kServingRequests;
  Arrivals at(rate, kServingSeed);
  Dice dice(kServingSeed ^ 0x5e57ULL);  // which measured step each step takes
  std::vector<double> latencies;
  latencies.reserve(kServingRequests);
  std::size_t next = 0, arrived = 0;  // the oldest waiting request; how many have arrived
  double free_at = 0, busy = 0, first_start = -1;
  int64_t steps = 0, served = 0;
  const auto arrive_until = [&](double t) {
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
    const auto runs_as =
        std::lower_bound(pools.begin(), pools.begin() + static_cast<std::ptrdiff_t>(top) + 1,
                         static_cast<int64_t>(k), [](const Pool& p, int64_t b) { return p.batch < b; });
    const double step = runs_as->ms[dice.below(runs_as->ms.size())];
    const double done = start + step;
    if (next + k > warm) {
      if (first_start < 0) first_start = start;
      busy += step;
      ++steps;
      served += static_cast<int64_t>(k);
    }
    for (std::size_t r = std::max(next, warm); r < std::min(next + k, end); ++r)
      latencies.push_back(done - at[r]);
    next += k;
    free_at = done;
  }
  out.utilization = free_at > first_start ? busy / (free_at - first_start) : 1.0;
  out.mean_batch = static_cast<double>(served) / static_cast<double>(std::max<int64_t>(steps, 1));
  double sum = 0;
  for (double v : latencies) sum += v;
  out.latency_mean_ms = sum / static_cast<double>(latencies.size());
  out.latency_p50_ms = percentile(latencies, 50);
  out.latency_ms = percentile(latencies, pct);
  return out;
}

}  // namespace

Serving simulate_serving(std::span<const Point> points, const AnalysisOptions& options) {
  Serving s;
  s.request_rate = options.request_rate.value_or(0);
  s.max_queue_delay_ms = options.max_queue_delay_ms;
  s.latency_percentile = options.latency_percentile;
  s.requests = kServingRequests;
  const std::vector<Pool> pools = pools_of(points);
  const std::string pct = latency_name(options.latency_percentile);
  const std::string rate = fmt::format("{} requests/s", format_rate(s.request_rate));
  if (pools.empty()) {
    s.best = BatchChoice(std::nullopt, std::nullopt, "no ok point of one micro-batch a step to serve from");
    return s;
  }
  for (std::size_t i = 0; i < pools.size(); ++i) {
    if (s.request_rate >= pools[i].samples_per_second) {
      ServingBatch b;
      b.batch = pools[i].batch;
      b.capacity_per_second = pools[i].samples_per_second;
      b.saturated = true;
      s.batches.push_back(b);
    } else {
      s.batches.push_back(simulate(pools, i, s.request_rate, s.max_queue_delay_ms, s.latency_percentile));
    }
  }
  const ServingBatch* lowest = nullptr;
  for (const ServingBatch& b : s.batches)
    if (!b.saturated && (!lowest || *b.latency_ms < *lowest->latency_ms)) lowest = &b;
  if (!lowest) {
    const ServingBatch& most = *std::max_element(s.batches.begin(), s.batches.end(),
                                                 [](const ServingBatch& a, const ServingBatch& b) {
                                                   return a.capacity_per_second < b.capacity_per_second;
                                                 });
    s.best = BatchChoice(std::nullopt, std::nullopt,
                         fmt::format("every max batch saturates at {}: the most one serves is {} requests/s "
                                     "(batch {}); the rate needs more throughput (a larger batch where it "
                                     "still rises, or more GPUs)",
                                     rate, format_rate(most.capacity_per_second), most.batch));
    return s;
  }
  const std::optional<double> budget = options.latency_slo_ms;
  if (budget && *lowest->latency_ms > *budget) {
    s.best =
        BatchChoice(std::nullopt, std::nullopt,
                    fmt::format("no max batch keeps the {} request latency within the {} ms budget at {} "
                                "(simulated from the measured steps): the lowest is {} ms (max batch {})",
                                pct, format_number(*budget), rate, latency_text(*lowest->latency_ms, *budget),
                                lowest->batch));
    return s;
  }
  // The smallest max batch as good as the lowest (and within the budget): less memory and less padding for
  // the same latency.
  double tie = *lowest->latency_ms * (1.0 + kServingTiePct / 100.0);
  if (budget) tie = std::min(tie, *budget);
  const ServingBatch* best = lowest;
  for (const ServingBatch& b : s.batches)
    if (!b.saturated && b.batch < best->batch && *b.latency_ms <= tie) best = &b;
  const double ms = *best->latency_ms;
  const double load = s.request_rate / best->capacity_per_second;
  const std::string figures = fmt::format(
      "{} {} ms, p50 {} ms; {:.3g} request{} per step; the rate is {} of its capacity, {} requests/s", pct,
      ms_text(ms), ms_text(*best->latency_p50_ms), *best->mean_batch,
      fmt::format("{:.3g}", *best->mean_batch) == "1" ? "" : "s", format_percent(load),
      format_rate(best->capacity_per_second));
  std::string why =
      best == lowest
          ? fmt::format("lowest {} request latency at {} (simulated from the measured steps): {}", pct, rate,
                        figures)
          : fmt::format(
                "the smallest max batch within {:g}% of the lowest {} request latency at {} (max batch "
                "{}'s {} ms; simulated from the measured steps): {}",
                kServingTiePct, pct, rate, lowest->batch, ms_text(*lowest->latency_ms), figures);
  if (load >= kServingNearCapacity)
    why += ", near it: a little more load or slower steps lengthen the queue fast";
  if (budget) why += fmt::format("; within the {} ms budget", format_number(*budget));
  s.best = BatchChoice(best->batch, best->capacity_per_second, why, ms);
  return s;
}

}  // namespace bsw
