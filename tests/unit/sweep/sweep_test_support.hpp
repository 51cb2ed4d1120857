// Shared pieces of the sweep tests: a tiny graph lowered from a ModelSpec built in code, scripted devices,
// and observers that record or interrupt.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/scripted/scripted_backend.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw::testing {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// 16 features -> linear 32 (relu) -> linear 4: a few hundred bytes per sample.
inline Graph tiny_graph() {
  ModelSpec model;
  model.name = "tiny";
  model.source = "test:tiny";
  model.input.type = InputType::vector;
  model.input.features = 16;
  LayerSpec hidden;
  hidden.type = LayerType::linear;
  hidden.json_path = "layers[0]";
  hidden.out_features = 32;
  hidden.activation = Activation::relu;
  LayerSpec head;
  head.type = LayerType::linear;
  head.json_path = "layers[1]";
  head.out_features = 4;
  model.layers = {hidden, head};
  return lower(model);
}

// A roofline device: micro_ms(b) = max(t0_ms, b / samples_per_ms), 80 GiB.
inline ScriptedConfig roofline(double t0_ms = 2.0, double samples_per_ms = 128.0, double noise_pct = 0.0) {
  ScriptedConfig config;
  config.name = "scripted-test";
  config.source = "test";
  config.memory_total_bytes = 80 * kGiB;
  config.t0_ms = t0_ms;
  config.samples_per_ms = samples_per_ms;
  config.noise_pct = noise_pct;
  return config;
}

inline uint64_t planned_bytes(const Graph& graph, int64_t batch, int64_t accumulation = 1) {
  return make_plan(graph,
                   PlanRequest{batch, Precision::fp32, Mode::train, accumulation, BackendKind::scripted})
      .memory.total_bytes();
}

inline SweepSettings list_settings(std::vector<int64_t> batches) {
  SweepSettings settings;
  settings.batches.batches = std::move(batches);
  return settings;
}

// Records every callback; should_stop answers `stop_when` (given the observer) when set.
class RecordingObserver : public SweepObserver {
 public:
  void on_point_start(const PointStart& start) override { starts.push_back(start); }
  void on_probe_start(int64_t batch, int64_t /*accumulation*/) override { probes.push_back(batch); }
  void on_point_done(const Point& point, const std::vector<Point>& all_so_far) override {
    done.push_back(point);
    sizes_seen.push_back(all_so_far.size());
  }
  void on_point_taken(const Point& point, const std::vector<Point>& all_so_far) override {
    taken.push_back(point.batch);
    events.push_back("taken " + std::to_string(point.batch));
    on_point_done(point, all_so_far);
  }
  void on_measuring() override { events.push_back("measuring"); }
  bool should_stop() override {
    ++stop_questions;
    return stop_when && stop_when(*this);
  }
  void on_sweep_end(bool interrupted) override {
    ended = true;
    ended_interrupted = interrupted;
  }

  std::vector<PointStart> starts;
  std::vector<int64_t> probes;  // batches of prepare-only probes, in order
  std::vector<Point> done;
  std::vector<int64_t> taken;  // the batches of the points taken from resume_points, in order (also in done)
  std::vector<std::string> events;  // "taken N" and "measuring", in order
  std::vector<std::size_t> sizes_seen;
  int stop_questions = 0;
  bool ended = false;
  bool ended_interrupted = false;
  std::function<bool(const RecordingObserver&)> stop_when;
};

inline bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

inline const Point* find_point(const std::vector<Point>& points, int64_t batch, int64_t accumulation = 1) {
  for (const Point& p : points)
    if (p.batch == batch && p.accumulation == accumulation) return &p;
  return nullptr;
}

}  // namespace bsw::testing
