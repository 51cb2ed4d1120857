// Test support, not part of the installed tool: trains a model on the CPU backend in fp32 exactly as a sweep
// point does (same plan, same seeded initialisation, same synthetic data) for a few steps and writes what a
// peer needs to repeat those steps: every parameter tensor before and after (optionally with the weights
// scaled), the inputs and targets of each micro-batch, the loss of every step, the gradients of the first and
// last step and batchnorm's running statistics. tests/peers/test_numerics_vs_torch.py replays the steps in
// PyTorch and compares.
//
// Output: <out>.json (an index, nlohmann) and <out>.bin (the arrays, native byte order, which is
// little-endian on every host the CPU backend builds for), each array at a byte offset the index gives.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/ops.hpp"
#include "batchsweep/backend.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"

namespace {

using bsw::Graph;
using bsw::Op;
using bsw::OpKind;

// The CPU backend's synthetic data (bsw::cpu::data_value and data_label, src/backends/cpu/ops.hpp): float
// inputs and targets are checked against the session's own buffers after the run; token ids and labels are
// checked by the peer's loss.
using bsw::cpu::data_label;
using bsw::cpu::data_value;
using bsw::cpu::kDataStream;
using bsw::cpu::kTargetStream;

struct Options {
  std::string model;
  int64_t batch = 2;
  int64_t accumulation = 1;
  int64_t steps = 2;
  uint64_t seed = 1234;       // SessionOptions' default, as `batchsweep run` without --seed
  double weight_scale = 1.0;  // multiplies every linear / conv / patch weight after the seeded initialisation
  std::string out;
};

// The arrays file and, for the index, where each array starts.
class ArrayWriter {
 public:
  explicit ArrayWriter(const std::string& path) : file_(path, std::ios::binary | std::ios::trunc) {
    if (!file_) throw std::runtime_error(fmt::format("cannot write {}", path));
  }
  template <typename T>
  nlohmann::json add(const std::vector<T>& values, const char* dtype) {
    const nlohmann::json entry = {{"offset", bytes_}, {"count", values.size()}, {"dtype", dtype}};
    file_.write(reinterpret_cast<const char*>(values.data()),
                static_cast<std::streamsize>(values.size() * sizeof(T)));
    bytes_ += values.size() * sizeof(T);
    return entry;
  }
  void close() {
    file_.close();
    if (!file_) throw std::runtime_error("writing the arrays failed");
  }

 private:
  std::ofstream file_;
  uint64_t bytes_ = 0;
};

// The shape of one parameter tensor, as PyTorch holds it (linear weight [out, in], conv [cout, cin, k, k]).
std::vector<int64_t> param_shape(const Op& op, const std::string& name) {
  switch (op.kind) {
    case OpKind::linear:
      if (name == "weight") return {op.out_features, op.in_features};
      return {op.out_features};
    case OpKind::conv2d:
      if (name == "weight") return {op.out_channels, op.channels, op.kernel, op.kernel};
      return {op.out_channels};
    case OpKind::layernorm:
      return {op.dim};
    case OpKind::batchnorm:
      return {op.channels};
    case OpKind::embedding:
      if (name == "tokens") return {op.vocab, op.dim};
      return {op.seq, op.dim};
    case OpKind::patch_embedding:
      if (name == "weight") return {op.dim, op.channels, op.kernel, op.kernel};
      if (name == "bias") return {op.dim};
      return {op.seq, op.dim};
    default:
      throw std::runtime_error(fmt::format("{}: unexpected parameter {}", op.path, name));
  }
}

nlohmann::json parameter_index(const Graph& graph) {
  nlohmann::json params = nlohmann::json::array();
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    for (const Op::Param& p : op.params) {
      const std::vector<int64_t> shape = param_shape(op, p.name);
      int64_t elements = 1;
      for (const int64_t d : shape) elements *= d;
      if (elements != p.elements)
        throw std::runtime_error(fmt::format("{}.{}: shape of {} elements for a tensor of {}", op.path,
                                             p.name, elements, p.elements));
      params.push_back({{"op", i},
                        {"path", op.path},
                        {"kind", std::string(bsw::to_string(op.kind))},
                        {"name", p.name},
                        {"offset", p.offset},
                        {"elements", p.elements},
                        {"shape", shape}});
    }
  }
  return params;
}

// Inputs and targets of every micro-batch of a step (the same each step), concatenated micro-batch by
// micro-batch, as the session's fill_data draws them.
struct Data {
  std::vector<float> input_f32, target_f32;
  std::vector<int32_t> input_i32, target_i32;
  uint64_t input_per_sample = 0, target_per_sample = 0;
};

Data make_data(const Graph& graph, const bsw::Plan& plan, const Options& o) {
  Data d;
  const auto b = static_cast<uint64_t>(o.batch);
  const uint64_t samples = b * static_cast<uint64_t>(o.accumulation);
  d.input_per_sample = plan.buffer("data.input").elements / b;
  d.target_per_sample = plan.buffer("data.targets").elements / b;
  for (uint64_t i = 0; i < samples * d.input_per_sample; ++i) {
    if (graph.input_type == bsw::InputType::tokens)
      d.input_i32.push_back(data_label(o.seed, kDataStream, i, graph.ops.front().vocab));
    else
      d.input_f32.push_back(data_value(o.seed, kDataStream, i));
  }
  for (uint64_t i = 0; i < samples * d.target_per_sample; ++i) {
    if (graph.loss == bsw::LossType::cross_entropy)
      d.target_i32.push_back(data_label(o.seed, kTargetStream, i, graph.loss_classes));
    else
      d.target_f32.push_back(data_value(o.seed, kTargetStream, i));
  }
  return d;
}

// The last micro-batch's slice of `all` (what the session's buffer holds after a step) equals `held`.
void check_last_micro_batch(const std::vector<float>& all, const std::vector<float>& held, const char* what) {
  if (held.size() > all.size() || held.empty())
    throw std::runtime_error(fmt::format("{}: {} values held, {} drawn", what, held.size(), all.size()));
  const size_t first = all.size() - held.size();
  for (size_t i = 0; i < held.size(); ++i)
    if (all[first + i] != held[i])
      throw std::runtime_error(
          fmt::format("{}: the repeated data generator differs from the session's at "
                      "element {} ({} vs {})",
                      what, i, all[first + i], held[i]));
}

// Larger (or smaller) weights than the sweep's initialisation: pre-activations where GELU's tanh form and erf
// form part, layernorm inputs small enough for its eps to matter. Biases, norms and embeddings stay.
void scale_weights(const Graph& graph, bsw::cpu::CpuSessionProbe& probe, float factor) {
  std::vector<float> values = probe.parameters_f32();
  for (const Op& op : graph.ops)
    for (const Op::Param& p : op.params)
      if (p.name == "weight")
        for (int64_t i = p.offset; i < p.offset + p.elements; ++i) values[static_cast<size_t>(i)] *= factor;
  probe.set_parameters(values);
}

int run(const Options& o) {
  const bsw::ModelSpec model = bsw::load_model(o.model);
  const Graph graph = bsw::lower(model);
  const bsw::Plan plan = bsw::make_plan(
      graph, {o.batch, bsw::Precision::fp32, bsw::Mode::train, o.accumulation, bsw::BackendKind::cpu});
  bsw::SessionOptions session_options;
  session_options.seed = o.seed;
  const std::unique_ptr<bsw::Session> session =
      bsw::cpu::make_cpu_backend()->prepare(graph, plan, session_options);
  auto* probe = dynamic_cast<bsw::cpu::CpuSessionProbe*>(session.get());
  if (probe == nullptr) throw std::runtime_error("the CPU session has no probe");

  if (o.weight_scale != 1.0) scale_weights(graph, *probe, static_cast<float>(o.weight_scale));

  ArrayWriter arrays(o.out + ".bin");
  nlohmann::json index = {{"model", bsw::to_json(model)},
                          {"source", model.source},
                          {"batch", o.batch},
                          {"accumulation", o.accumulation},
                          {"steps", o.steps},
                          {"seed", o.seed},
                          {"weight_scale", o.weight_scale},
                          {"parameter_count", graph.parameters},
                          {"loss_rows", graph.loss_rows},
                          {"loss_classes", graph.loss_classes},
                          {"input_shape", graph.input_shape},
                          {"output_shape", graph.output_shape},
                          {"params", parameter_index(graph)}};
  nlohmann::json& a = index["arrays"];
  a["params_before"] = arrays.add(probe->parameters_f32(), "f32");

  const Data data = make_data(graph, plan, o);
  index["input_per_sample"] = data.input_per_sample;
  index["target_per_sample"] = data.target_per_sample;
  a["inputs"] =
      data.input_i32.empty() ? arrays.add(data.input_f32, "f32") : arrays.add(data.input_i32, "i32");
  a["targets"] =
      data.target_i32.empty() ? arrays.add(data.target_f32, "f32") : arrays.add(data.target_i32, "i32");

  nlohmann::json losses = nlohmann::json::array();
  for (int64_t s = 0; s < o.steps; ++s) {
    const bsw::StepResult r = session->step();
    if (!r.finite || r.skipped) throw std::runtime_error(fmt::format("step {}: not finite or skipped", s));
    losses.push_back(r.loss);
    if (s == 0) a["grads_first"] = arrays.add(probe->gradients_f32(), "f32");
  }
  index["losses"] = losses;
  a["grads_last"] = arrays.add(probe->gradients_f32(), "f32");
  a["params_after"] = arrays.add(probe->parameters_f32(), "f32");

  nlohmann::json running = nlohmann::json::array();
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (graph.ops[i].kind != OpKind::batchnorm) continue;
    running.push_back({{"op", i},
                       {"channels", graph.ops[i].channels},
                       {"values", arrays.add(probe->buffer_f32(fmt::format("ops[{}].running", i)), "f32")}});
  }
  index["batchnorm_running"] = running;
  arrays.close();

  if (graph.input_type != bsw::InputType::tokens)
    check_last_micro_batch(data.input_f32, probe->buffer_f32("data.input"), "inputs");
  if (graph.loss == bsw::LossType::mse)
    check_last_micro_batch(data.target_f32, probe->buffer_f32("data.targets"), "targets");

  std::ofstream json(o.out + ".json", std::ios::trunc);
  json << index.dump() << '\n';
  if (!json) throw std::runtime_error(fmt::format("cannot write {}.json", o.out));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a model on batchsweep's CPU backend (fp32) and writes the trace a peer replays."};
  Options o;
  app.add_option("--model", o.model, "Preset name or model config file")->required();
  app.add_option("--batch", o.batch, "Micro-batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--accumulation", o.accumulation, "Micro-batches per optimizer step")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  app.add_option("--steps", o.steps, "Optimizer steps")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--seed", o.seed, "Seed of the weights and data (as `batchsweep run --seed`)");
  app.add_option("--weight-scale", o.weight_scale,
                 "Multiply the initial weights (sensitivity cases; default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "Output prefix: <out>.json and <out>.bin")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_trace: %s\n", e.what());
    return 1;
  }
}
