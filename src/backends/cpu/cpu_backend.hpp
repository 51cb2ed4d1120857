// The CPU reference backend: real forward, backward and optimizer math for every layer, on seeded synthetic
// data, allocating exactly the plan's buffers. fp32 and tf32 (= fp32 on the CPU) compute in place; bf16/fp16
// store in 16 bits and compute in fp32 through the plan's workspaces; fp16 trains with dynamic loss scaling.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "batchsweep/backend.hpp"

namespace bsw::cpu {

[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend();

// The CPU session's extra surface for tests: read back the fp32 master copy of the parameters and the
// gradients of the last step, and the loss of the last step without a timing.
class CpuSessionProbe {
 public:
  virtual ~CpuSessionProbe() = default;
  [[nodiscard]] virtual std::vector<float> parameters_f32() const = 0;
  [[nodiscard]] virtual std::vector<float> gradients_f32() const = 0;  // unscaled, after the last step
  // A copy of an fp32 buffer of the plan by name (e.g. "ops[2].running"); throws BackendError otherwise.
  [[nodiscard]] virtual std::vector<float> buffer_f32(const std::string& name) const = 0;
  // The last step's network output (inference's result; training's logits, of its last micro-batch) in fp32;
  // throws BackendError before any step.
  [[nodiscard]] virtual std::vector<float> output_f32() const = 0;
  [[nodiscard]] virtual double loss_scale() const = 0;
  [[nodiscard]] virtual int64_t skipped_steps() const = 0;
  // fp16: sets the dynamic loss scale, the growth interval counting from here (tests force an overflow).
  virtual void set_loss_scale(double scale) = 0;
  // Re-initialise parameters from `values` (fp32, graph.parameters elements) — tests set identical weights.
  virtual void set_parameters(const std::vector<float>& values) = 0;
  // Training sessions: forward, loss and backward over the step's micro-batches without an optimizer update.
  // Returns the mean loss; gradients_f32() then holds d(loss)/d(parameters).
  [[nodiscard]] virtual double loss_and_gradients() = 0;
  // The last step's time spent generating its micro-batches' data (accumulation > 1), left out of step_ms.
  [[nodiscard]] virtual double untimed_data_ms() const = 0;
  // Fills every buffer a step computes into (saved activations, transients and workspaces; not views) with
  // `byte`, so that a test can see what a step reads before writing it, and what the plan sized but the
  // step never writes (written_bytes).
  virtual void poison_step_buffers(unsigned char byte) = 0;
  // Per poisoned buffer: how far into it a step wrote since poison_step_buffers(byte), in bytes (up to the
  // last byte that no longer holds `byte`; 0 where nothing was written).
  [[nodiscard]] virtual std::map<std::string, uint64_t> written_bytes(unsigned char byte) const = 0;
};

}  // namespace bsw::cpu
