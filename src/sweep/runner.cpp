// The runner: one point at a time — plan against the memory budget, prepare, warm up, time steps until the
// stopping criterion holds — and run_sweep, which hands the choice of batches to a strategy (list, auto,
// effective batch).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <typeinfo>

#include "batchsweep/analysis.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/stats.hpp"
#include "batchsweep/sweep.hpp"
#include "sweep/host_load.hpp"
#include "sweep/point_runner.hpp"

namespace bsw {
namespace sweep_detail {
namespace {

// A TFLOP/s rate for a message: 3 significant digits below 1000 (0.001, 66.9), whole numbers above (2030).
std::string tflops_text(double tflops) {
  return tflops >= 1000 ? fmt::format("{:.0f}", tflops) : fmt::format("{:.3g}", tflops);
}

bool point_order(const Point& a, const Point& b) {
  if (a.effective_batch != b.effective_batch) return a.effective_batch < b.effective_batch;
  return a.batch < b.batch;
}

double pct(uint64_t part, uint64_t whole) {
  return 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

PointRunner::PointRunner(Backend& backend, const Graph& graph, const SweepSettings& settings,
                         SweepObserver& observer)
    : backend_(backend),
      graph_(graph),
      settings_(settings),
      observer_(observer),
      device_(backend.device(settings.precision)),
      paths_(resolve_execution_paths(backend, graph, settings)),
      session_options_(settings.session),
      measure_host_(backend.kind() == BackendKind::cpu || backend.kind() == BackendKind::cuda),
      host_cpus_(measure_host_ ? affinity_cpus() : std::vector<int>()) {
  if (backend.kind() == BackendKind::cuda && settings.stopping.warmup_steps == 0 &&
      warmup_time_s(settings.stopping, backend.kind()) == 0)
    warn(
        "--warmup 0 on cuda: each point's first timed step includes one-time work (cuBLASLt heuristics, "
        "loading kernels on first use, capturing the CUDA graph); use --warmup 1 or more for steady-state "
        "numbers");
  if (settings.memory_limit_bytes) {
    budget_bytes_ = *settings.memory_limit_bytes;
    budget_name_ = "--memory-limit";
    if (!session_options_.memory_limit_bytes)
      session_options_.memory_limit_bytes = settings.memory_limit_bytes;
  }
  const uint64_t device_bytes = device_.memory_total_bytes;
  if (device_bytes > 0 && (budget_bytes_ == 0 || device_bytes < budget_bytes_)) {
    if (budget_bytes_ > 0)
      warn(fmt::format("--memory-limit {} is above the device's {}; the device's memory is the budget",
                       format_bytes(budget_bytes_), format_bytes(device_bytes)));
    budget_bytes_ = device_bytes;
    budget_name_ = "device memory";
  }
}

PlanRequest PointRunner::request(int64_t batch, int64_t accumulation) const {
  return request(batch, accumulation, paths_);
}

PlanRequest PointRunner::request(int64_t batch, int64_t accumulation, const ExecutionPaths& paths) const {
  return PlanRequest{batch,
                     settings_.precision,
                     settings_.mode,
                     accumulation,
                     backend_.kind(),
                     paths,
                     settings_.checkpointing,
                     settings_.checkpoint_blocks};
}

void PointRunner::check_plannable() const {
  bsw::check_plannable(graph_, request(1, 1));
}

std::optional<std::string> PointRunner::plan_over_budget(int64_t batch, int64_t accumulation) const {
  return plan_over_budget(request(batch, accumulation));
}

namespace {

// --attention cudnn forced, and a plan on our own attention: past the sequences cuDNN's fused attention runs
// (kCudnnSdpaMostSequences), make_plan plans that, and the point cannot run as asked.
bool lost_forced_attention(const PathChoice& forced, const Plan& plan) {
  return forced.attention == AttentionPath::cudnn_sdpa &&
         plan.request.paths.attention != AttentionPath::cudnn_sdpa;
}

}  // namespace

std::optional<std::string> PointRunner::plan_over_budget(const PlanRequest& request) const {
  if (budget_bytes_ == 0) return std::nullopt;
  Plan plan;
  try {
    plan = make_plan(graph_, request);
  } catch (const UsageError& e) {
    if (request.batch < 1 || request.accumulation < 1) throw;
    return fmt::format("the plan is too large to size: {}", e.what());  // beyond 64 bits: it cannot fit
  }
  // A forced path the plan could not keep: not a question of memory, and prepare_point says why it cannot
  // run.
  if (lost_forced_attention(settings_.paths, plan)) return std::nullopt;
  const MemoryBreakdown& memory = plan.memory;
  const uint64_t planned_bytes = memory.total_bytes();
  // The same comparison as max_fit_batch (plan.cpp), so the plan's edge and this check agree to the byte.
  const uint64_t usable = usable_bytes(budget_bytes_);
  if (planned_bytes <= usable) return std::nullopt;
  // At the edge the two round alike ("7.60 MiB exceeds ... (7.60 MiB)"): then the bytes say it.
  const bool alike = format_bytes(planned_bytes) == format_bytes(usable);
  // The model's state is the same at every batch: where it alone is over, no smaller batch will fit, and a
  // user retrying with one should be told so (plan --memory says it too).
  const uint64_t state =
      memory.parameters + memory.master_weights + memory.gradients + memory.optimizer_state;
  return fmt::format(
      "planned {} exceeds {:.0f}% of the {} {} ({}){}",
      alike ? fmt::format("{} B", planned_bytes) : format_bytes(planned_bytes), kMemorySafetyFraction * 100.0,
      format_bytes(budget_bytes_), budget_name_, alike ? fmt::format("{} B", usable) : format_bytes(usable),
      state > usable
          ? fmt::format("; the model's state alone ({}) is over it, at every batch", format_bytes(state))
          : std::string());
}

std::optional<std::string> PointRunner::over_memory_now(int64_t batch, int64_t accumulation) const {
  if (backend_.reports_out_of_memory()) return std::nullopt;  // only preparing can tell
  uint64_t planned_bytes = 0;
  try {
    planned_bytes = make_plan(graph_, request(batch, accumulation)).memory.total_bytes();
  } catch (const UsageError& e) {
    return fmt::format("the plan is too large to size: {}", e.what());
  }
  return backend_.over_memory_now(planned_bytes);
}

std::optional<int64_t> PointRunner::plan_max_fit(int64_t accumulation) const {
  if (budget_bytes_ == 0) return std::nullopt;
  try {
    const auto fit = max_fit_batch(graph_, request(1, accumulation), budget_bytes_);
    if (!fit) return std::nullopt;
    return std::min(*fit, kMaxBatch);
  } catch (const UsageError&) {
    return std::nullopt;  // some plan on the way did not fit in 64 bits: fall back to probing
  }
}

const Point* PointRunner::find(int64_t batch, int64_t accumulation) const {
  const auto it = std::find_if(points_.begin(), points_.end(), [&](const Point& p) {
    return p.batch == batch && p.accumulation == accumulation;
  });
  return it == points_.end() ? nullptr : &*it;
}

const Point* PointRunner::resumable(int64_t batch, int64_t accumulation) const {
  const auto& earlier = settings_.resume_points;
  const auto it = std::find_if(earlier.begin(), earlier.end(), [&](const Point& p) {
    return p.status == PointStatus::ok && p.batch == batch && p.accumulation == accumulation;
  });
  return it == earlier.end() ? nullptr : &*it;
}

void PointRunner::set_planned_total(int total, bool estimate) {
  // A strategy counts its own round; --rounds measures each of those points again, where it ran ok (which
  // run_rounds knows, and says, once the first round is done).
  const auto rounds = static_cast<int>(settings_.rounds);
  planned_total_ = total * rounds;
  total_is_estimate_ = estimate || rounds > 1;
}

void PointRunner::insert(Point point, bool taken) {
  const auto at = std::upper_bound(points_.begin(), points_.end(), point, point_order);
  notify_done(*points_.insert(at, std::move(point)), taken);
}

void PointRunner::notify_done(const Point& stored, bool taken) {
  observer_.on_warnings(warnings_so_far());
  const auto tell = [&](const std::vector<Point>& all) {
    if (taken) {
      observer_.on_point_taken(stored, all);
    } else {
      observer_.on_point_done(stored, all);
    }
  };
  // (points_ itself where nothing is resumed: a copy per point, samples and all, made a long sweep
  // quadratic.)
  if (settings_.resume_points.empty()) {
    tell(points_);
  } else {
    tell(points_with_unreached());
  }
}

void PointRunner::record_unfit(int64_t batch, int64_t accumulation, PointStatus status, std::string reason,
                               bool refinement) {
  Point point;
  point.batch = batch;
  point.accumulation = accumulation;
  point.effective_batch = batch * accumulation;
  point.status = status;
  point.reason = std::move(reason);
  point.stop_reason = std::string(to_string(status));
  point.refinement = refinement;
  try {
    point.memory.planned_bytes = make_plan(graph_, request(batch, accumulation)).memory.total_bytes();
  } catch (const UsageError&) {
    // The plan does not fit in 64 bits: planned_bytes stays 0 and the reason says why.
  }
  ++started_;
  insert(std::move(point));
}

void PointRunner::add_memory_warning(const Point& point) {
  if (budget_bytes_ == 0) return;
  const uint64_t used_bytes =
      std::max(point.memory.planned_bytes, point.memory.device_used_bytes.value_or(0));
  if (static_cast<double>(used_bytes) <= settings_.memory_warn_fraction * static_cast<double>(budget_bytes_))
    return;
  const bool measured =
      point.memory.device_used_bytes && *point.memory.device_used_bytes > point.memory.planned_bytes;
  // One decimal: 94.6% said "95%", beside the 95% over which a plan is refused.
  warn(fmt::format("batch {} uses {:.1f}% of the {} ({} {} of {}): close to out-of-memory",
                   batch_label(point.batch, point.accumulation), pct(used_bytes, budget_bytes_), budget_name_,
                   measured ? "device-used" : "planned", format_bytes(used_bytes),
                   format_bytes(budget_bytes_)));
}

std::optional<FitProbe> PointRunner::probe(int64_t batch, int64_t accumulation) {
  if (observer_.should_stop()) {
    interrupted_ = true;
    return std::nullopt;
  }
  if (auto over = plan_over_budget(batch, accumulation)) {
    ++probed_;
    return FitProbe{Fit::over_limit, std::move(*over)};
  }
  if (resumable(batch, accumulation) != nullptr) return FitProbe{Fit::fits, {}};  // the earlier run ran it
  ++probed_;
  // Where only the plan can say no, preparing (gigabytes allocated and filled) would teach nothing — but
  // memory other processes hold now can (the CPU's MemAvailable), as it would at prepare.
  if (!backend_.reports_out_of_memory()) {
    if (auto now = over_memory_now(batch, accumulation)) return FitProbe{Fit::oom, std::move(*now)};
    return FitProbe{Fit::fits, {}};
  }
  observer_.on_measuring();  // a probe's prepare may take as long as a point
  observer_.on_probe_start(batch, accumulation);
  struct ProbeDone {  // also when prepare_point throws
    SweepObserver& observer;
    ~ProbeDone() { observer.on_probe_done(); }
  } probe_done{observer_};
  Prepared prepared = prepare_point(batch, accumulation);
  switch (prepared.status) {
    case PointStatus::ok:
      return FitProbe{Fit::fits, {}};
    case PointStatus::oom:
      return FitProbe{Fit::oom, std::move(prepared.reason)};
    case PointStatus::over_limit:
      return FitProbe{Fit::over_limit, std::move(prepared.reason)};
    case PointStatus::error:
      break;
  }
  return FitProbe{Fit::error, std::move(prepared.reason)};
}

std::optional<ExecutionPaths> PointRunner::fallback_paths(const ExecutionPaths& paths,
                                                          const PathRejected& rejected) {
  ExecutionPaths fallback = paths;
  std::string_view what;
  if (rejected.path() == RejectedPath::attention) {
    if (settings_.paths.attention == AttentionPath::cudnn_sdpa ||
        paths.attention != AttentionPath::cudnn_sdpa)
      return std::nullopt;
    fallback.attention = AttentionPath::explicit_softmax;
    what = "attention";
  } else {
    if (settings_.paths.conv == ConvPath::cudnn || paths.conv != ConvPath::cudnn) return std::nullopt;
    fallback.conv = ConvPath::im2col_gemm;
    what = "convolution";
  }
  const std::string note =
      fmt::format("cuDNN rejected {}: our own {} path ran at this batch", rejected.what(), what);
  fallback.note = fallback.note.empty() ? note : fmt::format("{}; {}", fallback.note, note);
  if (fallbacks_warned_.insert(rejected.path()).second)
    warn(fmt::format(
        "cuDNN accepted the model's {} at batch 1 but rejected {}: that point, and any other it rejects, ran "
        "(and was planned with) our own {} path; each such point's execution.paths_note says so",
        what, rejected.what(), what));
  return fallback;
}

PointRunner::Prepared PointRunner::prepare_point(int64_t batch, int64_t accumulation, int round) {
  ExecutionPaths paths = paths_;
  SessionOptions options = session_options_;
  options.round = round;
  Prepared prepared{nullptr, make_plan(graph_, request(batch, accumulation, paths)), PointStatus::ok, {}};
  if (lost_forced_attention(settings_.paths, prepared.plan)) {
    prepared.status = PointStatus::error;
    prepared.reason = fmt::format(
        "--attention cudnn: cuDNN's fused attention runs at most {} sequences at once, and batch {} is more "
        "(--attention auto runs our own attention there)",
        kCudnnSdpaMostSequences, batch);
    return prepared;
  }
  // Each retry takes one library path away (attention, conv), so this ends after three attempts at most.
  for (;;) {
    try {
      prepared.session = backend_.prepare(graph_, prepared.plan, options);
      return prepared;
    } catch (const OutOfMemory& e) {
      prepared.status = PointStatus::oom;
      prepared.reason = e.what();
    } catch (const PathRejected& e) {
      auto fallback = fallback_paths(paths, e);
      if (fallback) {
        paths = std::move(*fallback);
        const PlanRequest again = request(batch, accumulation, paths);
        std::optional<std::string> over = plan_over_budget(again);
        try {
          prepared.plan = make_plan(graph_, again);
        } catch (const UsageError& size) {
          prepared.plan = Plan{};  // beyond 64 bits: no planned bytes to show
          over = fmt::format("the plan is too large to size: {}", size.what());
        }
        if (!over) continue;
        prepared.status = PointStatus::over_limit;
        prepared.reason = fmt::format("{}; on our own path: {}", paths.note, *over);
        return prepared;
      }
      prepared.status = PointStatus::error;
      prepared.reason = e.what();
    } catch (const BackendError& e) {
      prepared.status = PointStatus::error;
      prepared.reason = e.what();
    }
    return prepared;
  }
}

std::optional<Point> PointRunner::measure(int64_t batch, int64_t accumulation, bool refinement) {
  try {
    return measure_point(batch, accumulation, refinement);
  } catch (const Error& e) {
    // A failure that stops the sweep (a CUDA context an error left unusable) names the batch it stopped at;
    // the errors a point records, and input or usage errors, are not this kind.
    if (typeid(e) != typeid(Error)) throw;
    throw Error(fmt::format("batch {}: {}", batch_label(batch, accumulation), e.what()));
  }
}

std::optional<Point> PointRunner::measure_point(int64_t batch, int64_t accumulation, bool refinement) {
  if (observer_.should_stop()) {
    interrupted_ = true;
    return std::nullopt;
  }
  observer_.on_point_start(PointStart{++started_, std::max(planned_total_, started_), total_is_estimate_,
                                      batch, accumulation, refinement});

  if (auto over = plan_over_budget(batch, accumulation)) {
    ++probed_;
    --started_;  // record_unfit counts it
    record_unfit(batch, accumulation, PointStatus::over_limit, std::move(*over), refinement);
    return *find(batch, accumulation);
  }
  if (const Point* earlier = resumable(batch, accumulation)) {
    Point point = *earlier;
    point.refinement = refinement;  // what this sweep's search asked it for
    ++resumed_;
    first_round_order_.emplace_back(batch, accumulation);
    add_memory_warning(point);  // against this run's budget and --memory-warn, not the earlier run's
    insert(point, /*taken=*/true);
    return *find(batch, accumulation);
  }
  observer_.on_measuring();
  Point point;
  point.batch = batch;
  point.accumulation = accumulation;
  point.effective_batch = batch * accumulation;
  point.refinement = refinement;

  NoiseCriterion criterion(settings_.stopping);  // the per-point wall clock starts before prepare and warm-up
  Prepared prepared = prepare_point(batch, accumulation);
  const Plan& plan = prepared.plan;
  point.memory.planned_bytes = plan.memory.total_bytes();
  std::unique_ptr<Session> session = std::move(prepared.session);
  if (!session) {
    point.status = prepared.status;
    point.reason = std::move(prepared.reason);
    ++probed_;
    point.stop_reason = std::string(to_string(point.status));
    insert(point);
    return point;
  }
  ++measured_;
  const bool finished = time_steps(*session, point, criterion);
  for (std::string& warning : observer_.on_timed_end(point)) warnings_.push_back(std::move(warning));
  if (!finished) {
    --measured_;  // interrupted: the point is dropped, so it was not measured
    return std::nullopt;
  }
  observer_.on_measured_points(measured_);
  const SessionMemory memory = session->memory();
  point.memory.measured_bytes = memory.allocated_bytes;
  point.memory.device_used_bytes = memory.device_used_bytes;
  point.execution = session->details();
  add_session_warnings(point);
  session.reset();  // release the device before anything else is prepared

  summarize_point(point, plan, criterion);
  // With --rounds, this is round 1 of the point.
  first_round_order_.emplace_back(batch, accumulation);
  measured_now_.insert({batch, accumulation});
  if (settings_.rounds > 1 && point.status == PointStatus::ok)
    point.rounds.push_back(
        {static_cast<int64_t>(point.samples_ms.size()), point.stop_reason, PointStatus::ok, {}});
  add_memory_warning(point);
  add_model_warnings(point);
  insert(point);
  return point;
}

bool PointRunner::time_steps(Session& session, Point& point, NoiseCriterion& criterion) {
  int64_t skipped_steps = 0;
  // A training loss that grew until it overflowed is the synthetic data diverging under the model's learning
  // rate, not the batch failing: the reason says so, and what to change (the rate does not change the step).
  std::optional<double> last_loss;
  const bool fp16_train = settings_.precision == Precision::fp16 && settings_.mode == Mode::train;
  bool updated = false;  // a step of this point updated the weights (neither skipped nor non-finite)
  const auto non_finite_reason = [&](const std::string& where, std::optional<double> last) {
    // fp16 skips an overflowing step and lowers the loss scale; only an overflow at the lowest scale, 1,
    // comes back non-finite: the gradients overflow unscaled, so the weights have grown past fp16.
    // Where no step of the point updated the weights, they overflow as initialised: no learning rate helps.
    if (fp16_train && !updated)
      return fmt::format(
          "non-finite gradients (NaN/Inf) at {}: they overflow fp16 at the lowest loss scale (1) and no step "
          "updated the weights, so the model overflows fp16 as initialised: use bf16 or fp32",
          where);
    if (fp16_train)
      return fmt::format(
          "non-finite gradients (NaN/Inf) at {}{}: they overflow fp16 at the lowest loss scale (1), so every "
          "step would skip its update; training diverged on the synthetic data: lower the model's "
          "optimizer.learning_rate (it does not change the step time), or use bf16",
          where, last ? fmt::format(" after a loss of {:.3g}", *last) : std::string());
    // Inference has no loss: a step there reports a non-finite output.
    std::string reason = fmt::format("non-finite {} (NaN/Inf) at {}",
                                     settings_.mode == Mode::train ? "loss" : "output", where);
    // A step that trained came first, and only the weights changed since: however small the loss before
    // (a learning rate of 1e20 overflows in one step), the training diverged.
    if (settings_.mode == Mode::train && last)
      reason += fmt::format(
          " after a loss of {:.3g}: training diverged on the synthetic data; lower the model's "
          "optimizer.learning_rate (it does not change the step time)",
          *last);
    return reason;
  };
  warmup_cut_.clear();
  try {
    const double warmup_start_s = criterion.elapsed_s();
    const int64_t warmup_steps = settings_.stopping.warmup_steps;
    const double warmup_time = warmup_time_s(settings_.stopping, backend_.kind());
    // --warmup steps, then more until --warmup-time has passed since the first ended: the first holds the
    // one-time work (kernel loading, heuristics, graph capture), with the GPU mostly idle, so it warms
    // nothing.
    double clock_start_s = warmup_start_s;
    for (int64_t warm = 1;; ++warm) {
      const double now_s = criterion.elapsed_s();
      const double warmed_s = now_s - warmup_start_s;
      const bool time_done = warmup_time == 0 || (warm > 1 && now_s - clock_start_s >= warmup_time);
      if (warm > warmup_steps && time_done) break;
      // Steps so slow that warming up alone has spent the --timeout: time one now. (A slow prepare does not
      // cut warm-up: the first steps' one-time work must stay out of the sample.)
      if (warm > 1 && warmed_s >= settings_.stopping.timeout_s) {
        warmup_cut_ =
            warm <= warmup_steps
                ? fmt::format("warm-up cut to {} of {} steps by the {:g} s --timeout", warm - 1, warmup_steps,
                              settings_.stopping.timeout_s)
                : fmt::format(
                      "warm-up cut to {} steps, short of the {:g} s --warmup-time{}, by the "
                      "{:g} s --timeout",
                      warm - 1, warmup_time, settings_.stopping.warmup_time_s ? "" : " (the cuda default)",
                      settings_.stopping.timeout_s);
        break;
      }
      if (observer_.should_stop()) {
        interrupted_ = true;
        return false;
      }
      const StepResult warm_result = session.step();
      if (!warm_result.finite) {
        point.status = PointStatus::error;
        point.reason = non_finite_reason(fmt::format("warm-up step {}", warm), last_loss);
        return true;
      }
      if (std::isfinite(warm_result.loss)) last_loss = warm_result.loss;
      updated = updated || !warm_result.skipped;
      if (warm == 1) clock_start_s = criterion.elapsed_s();
    }
    observer_.on_timed_start(point);
    const std::optional<HostSnapshot> host_from =
        measure_host_ ? std::optional<HostSnapshot>(host_snapshot(host_cpus_)) : std::nullopt;
    for (int64_t step = 1;; ++step) {
      if (observer_.should_stop()) {
        interrupted_ = true;
        return false;
      }
      const StepResult result = session.step();
      if (!std::isfinite(result.step_ms) || result.step_ms < 0)
        throw BackendError(
            fmt::format("the backend reported a step time of {} ms at step {}", result.step_ms, step));
      point.samples_ms.push_back(result.step_ms);
      criterion.add_measurement(result.step_ms);
      if (result.skipped) ++skipped_steps;
      // Loss scaling skips steps in fp16 training; an inference step has no loss to scale.
      if ((settings_.precision == Precision::fp16 && settings_.mode == Mode::train) || skipped_steps > 0)
        point.skipped_steps = skipped_steps;
      if (!result.finite) {
        point.status = PointStatus::error;
        point.reason = non_finite_reason(fmt::format("step {}", step), last_loss);
        return true;
      }
      if (std::isfinite(result.loss)) last_loss = result.loss;
      updated = updated || !result.skipped;
      if (settings_.mode == Mode::train && std::isfinite(result.loss)) point.loss = result.loss;
      if (criterion.is_finished()) {
        if (host_from) {
          const int cpus = host_cpus_.empty()
                               ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                               : static_cast<int>(host_cpus_.size());
          point.host = host_load(*host_from, host_snapshot(host_cpus_), cpus,
                                 static_cast<double>(sysconf(_SC_CLK_TCK)));
        }
        return true;
      }
    }
  } catch (const OutOfMemory& e) {
    point.status = PointStatus::oom;
    point.reason = e.what();
  } catch (const BackendError& e) {
    point.status = PointStatus::error;
    point.reason = e.what();
  }
  return true;
}

void PointRunner::rates(Point& point, const Plan& plan) const {
  const double mean_s = point.step_ms.mean / 1000.0;
  if (!(mean_s > 0)) return;
  point.samples_per_second = static_cast<double>(point.effective_batch) / mean_s;
  if (graph_.tokens_per_sample > 0)
    point.tokens_per_second = point.samples_per_second * static_cast<double>(graph_.tokens_per_sample);
  const double flops_per_second = plan.flops_per_step / mean_s;
  point.tflops = flops_per_second / 1e12;
  if (device_.peak_flops && *device_.peak_flops > 0) point.mfu = flops_per_second / *device_.peak_flops;
}

void PointRunner::summarize_point(Point& point, const Plan& plan, const NoiseCriterion& criterion) {
  if (!point.samples_ms.empty()) {
    point.step_ms = summarize(point.samples_ms);
    // One sample has no spread to measure: its noise is unknown, not 0%.
    if (point.samples_ms.size() >= 2) point.noise_pct = relative_noise(point.samples_ms) * 100.0;
  }
  // A step the clock could not resolve (every sample 0 ms) has no throughput to report: an ok point
  // without one would be a rate of 0 or infinity, which no reader takes.
  if (point.status == PointStatus::ok && !(point.step_ms.mean > 0)) {
    point.status = PointStatus::error;
    point.reason = "the timer measured 0 ms for every step: too short to time";
  }
  if (point.status != PointStatus::ok) {
    // Samples of a failed point are kept for the record, but it has no throughput.
    point.stop_reason = point.reason.starts_with("non-finite") ? "non-finite loss" : to_string(point.status);
    return;
  }
  point.stop_reason = criterion.stop_reason();
  rates(point, plan);
  if (point.mfu && *point.mfu > 1.0 && point.tflops)
    warn(
        fmt::format("batch {}: {} TFLOP/s is {:.0f}% of the device peak ({} TFLOP/s, {}): the peak or the "
                    "step timing is wrong{}",
                    batch_label(point.batch, point.accumulation), tflops_text(*point.tflops),
                    *point.mfu * 100, tflops_text(*device_.peak_flops / 1e12),
                    device_.peak_flops_source.empty() ? "source unknown" : device_.peak_flops_source,
                    // Only a GPU can be calibrated; a script's peak is the script's.
                    device_.backend == "cuda" ? "; run `batchsweep devices --calibrate`" : ""));
  // fp16 steps that overflowed skip the optimizer: shorter than a real step, so many of them flatter the
  // throughput. A few are the loss scaler finding its level.
  if (point.skipped_steps && *point.skipped_steps * 20 > static_cast<int64_t>(point.samples_ms.size()))
    warn(fmt::format(
        "batch {}: {} of {} timed steps overflowed in fp16 and skipped the optimizer update "
        "(the loss scale was lowered); they are shorter than a real step, so its throughput "
        "is optimistic",
        batch_label(point.batch, point.accumulation), *point.skipped_steps, point.samples_ms.size()));
  // One entry per point: a cut warm-up joins the point's timeout warning.
  // The report's own interval for the mean, so the warning and samples_per_second_ci95_pct agree (with
  // --rounds the report's pools every round: round 1's warning keeps its own).
  std::optional<std::string> warning = criterion.warning(
      settings_.rounds > 1 || point.status != PointStatus::ok ? std::nullopt : throughput_ci95_pct(point));
  if (!warmup_cut_.empty()) warning = warning ? fmt::format("{} ({})", *warning, warmup_cut_) : warmup_cut_;
  // With --rounds this is round 1's: its noise and the mean's precision are that round's, not those of the
  // point the report holds, which pools every round (a drift between rounds widens them).
  if (warning && settings_.rounds > 1 && point.status == PointStatus::ok)
    warning = fmt::format("round 1 (the report's point pools every round): {}", *warning);
  if (warning)
    stop_warnings_.push_back({point.batch, point.accumulation, std::move(*warning), point.samples_ms.size(),
                              !warmup_cut_.empty()});
}

// What prepare or the steps warned about (memory other processes hold, a fallback): said once per sweep,
// however many points repeat it.
void PointRunner::add_session_warnings(const Point& point) {
  const auto it = point.execution.find("warnings");
  if (it == point.execution.end() || !it->is_array()) return;
  for (const auto& w : *it)
    if (w.is_string() && session_warnings_seen_.insert(w.get<std::string>()).second)
      warn(w.get<std::string>());
}

void PointRunner::add_model_warnings(const Point& point) {
  if (settings_.mode != Mode::train || single_value_batchnorm_warned_) return;
  const auto single = std::find_if(graph_.ops.begin(), graph_.ops.end(), [&](const Op& op) {
    return op.kind == OpKind::batchnorm && point.batch * op.spatial == 1;
  });
  if (single == graph_.ops.end()) return;
  single_value_batchnorm_warned_ = true;
  warn(fmt::format(
      "batch {}: the batchnorm at {} has one value per channel in training, so it normalizes "
      "every value to 0 and passes on only its beta; PyTorch raises an error there (\"Expected more "
      "than 1 value per channel when training\"), so this point has no PyTorch equivalent",
      batch_label(point.batch, point.accumulation), single->path));
}

std::vector<std::string> PointRunner::stop_warning_lines() const {
  std::vector<std::string> lines;
  if (stop_warnings_.size() <= kStopWarningsListed) {
    for (const StopWarning& w : stop_warnings_)
      lines.push_back(fmt::format("batch {}: {}", batch_label(w.batch, w.accumulation), w.why));
    return lines;
  }
  // Listed by batch (a search or a resume runs them out of order); the one quoted is the first that ran.
  std::vector<StopWarning> sorted = stop_warnings_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const StopWarning& a, const StopWarning& b) {
    return a.batch != b.batch ? a.batch < b.batch : a.accumulation < b.accumulation;
  });
  std::vector<std::string> labels, single, cut;
  for (const StopWarning& w : sorted) {
    labels.push_back(w.round > 1 ? fmt::format("{} (round {})", batch_label(w.batch, w.accumulation), w.round)
                                 : batch_label(w.batch, w.accumulation));
    if (w.samples == 1) single.push_back(labels.back());
    if (w.warmup_cut) cut.push_back(labels.back());
  }
  const StopWarning& first = stop_warnings_.front();
  // The quoted one may be the mildest: those whose numbers rest on least are named whatever it says.
  std::string worst;
  if (!single.empty())
    worst +=
        fmt::format("; {} {} timed a single step (noise unknown: {} throughput and latency are one step's)",
                    single.size() == 1 ? "batch" : "batches", fmt::join(single, ", "),
                    single.size() == 1 ? "its" : "their");
  if (!cut.empty())
    worst += fmt::format("; the --timeout cut the warm-up of {} {}", cut.size() == 1 ? "batch" : "batches",
                         fmt::join(cut, ", "));
  // With --rounds a point may stop short in several rounds: the points are counted, and the rounds listed.
  std::set<std::pair<int64_t, int64_t>> points;
  for (const StopWarning& w : stop_warnings_) points.insert({w.batch, w.accumulation});
  lines.push_back(fmt::format(
      "{} point{} stopped before meeting their measurement targets{} ({} {}); the first measured, batch "
      "{}: {}{}. Each point's stop_reason and noise_pct are in the report",
      points.size(), points.size() == 1 ? "" : "s",
      points.size() < stop_warnings_.size() ? fmt::format(", in {} rounds", stop_warnings_.size()) : "",
      points.size() == 1 ? "batch" : "batches", fmt::join(labels, ", "),
      batch_label(first.batch, first.accumulation), first.why, worst));
  return lines;
}

std::vector<std::string> PointRunner::warnings_so_far() const {
  std::vector<std::string> all = warnings_;
  for (std::string& line : stop_warning_lines()) all.push_back(std::move(line));
  if (std::string busy = host_load_warning(points_); !busy.empty()) all.push_back(std::move(busy));
  return all;
}

std::vector<Point> PointRunner::unreached_resume_points() const {
  std::vector<Point> kept;
  for (const Point& p : settings_.resume_points) {
    if (p.status != PointStatus::ok || find(p.batch, p.accumulation) != nullptr) continue;
    // This sweep's kind of point only: its accumulation, or the splits of its effective batch.
    if (settings_.effective_batch ? p.effective_batch != *settings_.effective_batch
                                  : p.accumulation != settings_.accumulation)
      continue;
    // Not where this run found the memory wanting: over the budget, or above a batch that did not fit.
    if (plan_over_budget(p.batch, p.accumulation)) continue;
    const bool above_unfit = std::any_of(points_.begin(), points_.end(), [&](const Point& q) {
      return did_not_fit(q.status) && q.accumulation == p.accumulation && q.batch <= p.batch;
    });
    if (!above_unfit) kept.push_back(p);
  }
  return kept;
}

std::vector<Point> PointRunner::points_with_unreached() const {
  std::vector<Point> all = points_;
  for (Point& p : unreached_resume_points()) all.push_back(std::move(p));
  std::stable_sort(all.begin(), all.end(), point_order);
  return all;
}

SweepOutcome PointRunner::finish(std::string search_summary) {
  for (std::string& line : stop_warning_lines()) warn(std::move(line));
  if (std::string busy = host_load_warning(points_); !busy.empty()) warn(std::move(busy));
  // The earlier points an interrupted sweep keeps are judged against this run's memory budget too (the
  // earlier run's memory warnings are not carried).
  if (interrupted_)
    for (const Point& p : unreached_resume_points()) add_memory_warning(p);
  observer_.on_sweep_end(interrupted_);
  SweepOutcome outcome;
  // Interrupted, the earlier points this sweep had not reached stay in its report, so resuming again takes
  // them; finished, it holds what it asked for.
  outcome.points = interrupted_ ? points_with_unreached() : points_;
  outcome.warnings = warnings_;
  outcome.interrupted = interrupted_;
  outcome.measured_points = measured_;
  outcome.probed_points = probed_;
  outcome.resumed_points = resumed_;
  outcome.search_summary = std::move(search_summary);
  outcome.untimed_fit = untimed_fit_;
  return outcome;
}

void run_batch_list(PointRunner& runner, const std::vector<int64_t>& batches, int64_t accumulation) {
  runner.set_planned_total(static_cast<int>(batches.size()), false);
  for (const int64_t batch : batches) {
    if (!runner.measure(batch, accumulation, false)) return;
  }
  // Where the first batch above the largest that ran ok was over the memory limit, the plan knows the edge:
  // its largest fit between them is named (untimed), rather than leave the batches between to a --batch
  // range that would mostly be over the limit too. Where the largest that ran ok is the plan's largest fit,
  // the batch after it is recorded over_limit (refinement; as --batch auto records its edge), so max fit
  // and the recommendation name the edge, not a range of batches that would all be over the limit.
  const Point* largest_ok = nullptr;
  for (const Point& p : runner.points())
    if (p.accumulation == accumulation && p.status == PointStatus::ok &&
        (largest_ok == nullptr || p.batch > largest_ok->batch))
      largest_ok = &p;
  if (largest_ok == nullptr) return;
  const Point* above = nullptr;
  for (const Point& p : runner.points())
    if (p.accumulation == accumulation && p.batch > largest_ok->batch && p.status != PointStatus::ok &&
        (above == nullptr || p.batch < above->batch))
      above = &p;
  if (above == nullptr || above->status != PointStatus::over_limit) return;
  const std::optional<int64_t> plan_fit = runner.plan_max_fit(accumulation);
  if (plan_fit && *plan_fit == largest_ok->batch && *plan_fit + 1 < above->batch) {
    if (std::optional<std::string> over = runner.plan_over_budget(*plan_fit + 1, accumulation))
      runner.record_unfit(*plan_fit + 1, accumulation, PointStatus::over_limit, std::move(*over), true);
    return;
  }
  if (!plan_fit || *plan_fit <= largest_ok->batch || *plan_fit >= above->batch) return;
  if (runner.over_memory_now(*plan_fit, accumulation)) return;  // within the limit, but not free now
  runner.set_untimed_fit(UntimedFit{
      *plan_fit,
      fmt::format("by the plan, the largest within the memory limit (batch {} was over_limit); not "
                  "swept: --batch {} measures it",
                  above->batch, *plan_fit)});
}

}  // namespace sweep_detail

ExecutionPaths resolve_execution_paths(Backend& backend, const Graph& graph, const SweepSettings& settings) {
  const PathChoice& choice = settings.paths;
  if (backend.kind() != BackendKind::cuda) {
    if (choice.attention == AttentionPath::cudnn_sdpa)
      throw UsageError(
          fmt::format("--attention cudnn: only the cuda backend has a cuDNN path (this sweep runs on "
                      "{})",
                      to_string(backend.kind())));
    if (choice.conv == ConvPath::cudnn)
      throw UsageError(
          fmt::format("--conv cudnn: only the cuda backend has a cuDNN path (this sweep runs on {})",
                      to_string(backend.kind())));
    return {};
  }
  const ExecutionPaths requested = requested_cuda_paths(graph, settings.precision, choice);
  ExecutionPaths paths = backend.execution_paths(graph, settings.precision, settings.mode, requested);
  // The note says what --attention/--conv auto would do; forced, the sweep does not start.
  if (choice.attention == AttentionPath::cudnn_sdpa && paths.attention != AttentionPath::cudnn_sdpa)
    throw UsageError(fmt::format(
        "--attention cudnn: cuDNN cannot run this model's attention here; --attention auto would run our own "
        "path ({})",
        paths.note));
  if (choice.conv == ConvPath::cudnn && paths.conv != ConvPath::cudnn)
    throw UsageError(fmt::format(
        "--conv cudnn: cuDNN cannot run this model's convolutions here; --conv auto would run our own path "
        "({})",
        paths.note));
  return paths;
}

void validate(const StoppingSettings& stopping) {
  const auto fail = [](std::string_view flag, const std::string& why) {
    throw UsageError(fmt::format("{}: {}", flag, why));
  };
  if (stopping.warmup_steps < 0)
    fail("--warmup", fmt::format("must be at least 0, got {}", stopping.warmup_steps));
  if (stopping.warmup_time_s && !(std::isfinite(*stopping.warmup_time_s) && *stopping.warmup_time_s >= 0))
    fail("--warmup-time", fmt::format("must be a number of seconds >= 0, got {}", *stopping.warmup_time_s));
  if (stopping.min_samples < 1)
    fail("--min-samples", fmt::format("must be at least 1, got {}", stopping.min_samples));
  if (!(std::isfinite(stopping.min_time_s) && stopping.min_time_s >= 0))
    fail("--min-time", fmt::format("must be a number of seconds >= 0, got {}", stopping.min_time_s));
  if (!(std::isfinite(stopping.max_noise_pct) && stopping.max_noise_pct > 0))
    fail("--max-noise", fmt::format("must be a percentage > 0, got {}", stopping.max_noise_pct));
  if (!(std::isfinite(stopping.timeout_s) && stopping.timeout_s > 0))
    fail("--timeout", fmt::format("must be a number of seconds > 0, got {}", stopping.timeout_s));
  if (stopping.max_samples < 1 || stopping.max_samples > kMaxSampleCap)
    fail("--max-samples", fmt::format("must be in 1..{}, got {}", kMaxSampleCap, stopping.max_samples));
  if (stopping.max_samples < stopping.min_samples)
    fail("--min-samples", fmt::format("{} is above the sample cap {} (--max-samples)", stopping.min_samples,
                                      stopping.max_samples));
}

SweepOutcome run_sweep(Backend& backend, const Graph& graph, const SweepSettings& settings,
                       SweepObserver& observer) {
  if (settings.accumulation < 1)
    throw UsageError(fmt::format("--accumulation: must be at least 1, got {}", settings.accumulation));
  if (!settings.effective_batch && !settings.batches.auto_search && settings.batches.batches.empty())
    throw UsageError("--batch: no batches to measure");
  if (settings.accumulation > kMaxBatch)
    throw UsageError(
        fmt::format("--accumulation: must be in 1..{} (2^24), got {}", kMaxBatch, settings.accumulation));
  if (!settings.effective_batch && !settings.batches.auto_search) {
    // Samples per optimizer step share the batch's 2^24 cap (a step of more would run for hours,
    // uninterruptible).
    check_samples_per_step(
        *std::max_element(settings.batches.batches.begin(), settings.batches.batches.end()),
        settings.accumulation);
  }
  if (!(settings.memory_warn_fraction > 0 && settings.memory_warn_fraction <= 1))
    throw UsageError(
        fmt::format("memory warning fraction must be in (0, 1], got {}", settings.memory_warn_fraction));
  if (settings.latency_slo_ms && !(std::isfinite(*settings.latency_slo_ms) && *settings.latency_slo_ms > 0))
    throw UsageError(
        fmt::format("--latency-slo: must be a step time in ms > 0, got {}", *settings.latency_slo_ms));
  if (!is_latency_percentile(settings.latency_percentile))
    throw UsageError(fmt::format("--latency-percentile: must be {}, got {:g}", kLatencyPercentileRule,
                                 settings.latency_percentile));
  validate(settings.stopping);
  if (settings.rounds < 1 || settings.rounds > kMaxRounds)
    throw UsageError(fmt::format("--rounds: must be in 1..{}, got {}", kMaxRounds, settings.rounds));

  sweep_detail::PointRunner runner(backend, graph, settings, observer);
  runner.check_plannable();
  std::string summary;
  try {
    if (settings.effective_batch) {
      sweep_detail::run_effective_batch(runner, *settings.effective_batch, summary);
    } else if (settings.batches.auto_search) {
      sweep_detail::run_auto_search(runner, summary);
    } else {
      sweep_detail::run_batch_list(runner, settings.batches.batches, settings.accumulation);
    }
    runner.run_rounds();
  } catch (const Error&) {
    // A fatal error ends the sweep: the warnings on the points it finished go with their report.
    observer.on_warnings(runner.warnings_so_far());
    throw;
  }
  return runner.finish(std::move(summary));
}

}  // namespace bsw
