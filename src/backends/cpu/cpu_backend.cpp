// The CPU reference backend: a Session allocates the plan's buffers from one arena and runs real training or
// inference steps with the math of ops.hpp. Every tensor lives in a plan buffer; nothing else allocates
// tensor data.
#include "backends/cpu/cpu_backend.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/cpu/memory_limit.hpp"
#include "backends/cpu/ops.hpp"
#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"

extern "C" {
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace bsw::cpu {
namespace {

constexpr double kInitialLossScale = 65536.0;
constexpr int64_t kLossScaleGrowthInterval = 2000;

// One plan buffer inside the arena.
struct Ref {
  void* ptr = nullptr;
  DType dtype = DType::f32;
  uint64_t elements = 0;
  [[nodiscard]] float* f32() const { return static_cast<float*>(ptr); }
  [[nodiscard]] uint16_t* u16() const { return static_cast<uint16_t*>(ptr); }
  [[nodiscard]] int32_t* i32() const { return static_cast<int32_t*>(ptr); }
  [[nodiscard]] explicit operator bool() const { return ptr != nullptr; }
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

constexpr uint64_t kBufferBytes = uint64_t{128} << 20;  // Debian's x86-64 OpenBLAS maps this per thread

// Whether `count` regions of `bytes` each can still be mapped: reserved (no access, nothing committed) and
// released at once. An address-space limit counts them as OpenBLAS's buffers would be counted.
bool can_map(int count, uint64_t bytes) {
  std::vector<void*> maps;
  bool ok = true;
  for (int i = 0; i < count && ok; ++i) {
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      ok = false;
    else
      maps.push_back(p);
  }
  for (void* p : maps) ::munmap(p, bytes);
  return ok;
}

// OpenBLAS's worker threads keep the floating-point mode they started with (Debian's build does not hand them
// the caller's: no CONSISTENT_FPCSR), and they start as the library loads, before main. Stopped here under
// FlushDenormals, they start again at the next threaded GEMM as copies of this thread's mode. False where
// this OpenBLAS has no blas_thread_shutdown_ (an OpenMP build's threads start lazily, as copies anyway).
bool restart_blas_workers() {
  using Shutdown = int (*)();
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dlsym's result is the function
  const auto shutdown = reinterpret_cast<Shutdown>(::dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"));
  if (shutdown == nullptr) return false;
  shutdown();
  return true;
}

// Whether every thread of OpenBLAS's GEMM flushes subnormals: warm_blas's GEMM multiplies subnormal values
// by ones, threaded (256^3 is above OpenBLAS's threading threshold), and gets zeros only where each part did.
bool g_blas_flushes_denormals = false;

// OpenBLAS maps the calling thread's work buffer on its first large GEMM (each worker thread maps its own as
// the library loads: see blas_workers_starved), and where that mapping fails (an address-space limit, ulimit
// -v) it retries without end: one GEMM here, before a plan's arena takes what is left, maps it while there is
// room, so a plan beyond the limit fails its own allocation (an oom point) instead of hanging a step. Where
// the address space left cannot hold that buffer, the GEMM itself would hang: said instead. The same GEMM
// restarts the workers under FlushDenormals and checks that every part of it flushed.
void warm_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int threads = std::max(1, openblas_get_num_threads());
    if (this_process_memory().address_space_limit && !can_map(1, kBufferBytes + (uint64_t{64} << 10)))
      throw BackendError(fmt::format(
          "cpu backend: ulimit -v leaves too little address space for OpenBLAS's work buffer (about 128 "
          "MiB), "
          "which it would retry mapping without end: raise ulimit -v{}",
          threads > 1 ? fmt::format(", or run with OPENBLAS_NUM_THREADS=1 (its other {} one each)",
                                    threads == 2 ? std::string("thread holds")
                                                 : fmt::format("{} threads hold", threads - 1))
                      : std::string()));
    const FlushDenormals flush;
    restart_blas_workers();
    constexpr int64_t n = 256;
    std::vector<float> a(n * n, std::numeric_limits<float>::denorm_min() * 1024), w(n * n, 1.0f), y(n * n);
    linear_forward(a.data(), w.data(), nullptr, nullptr, y.data(), n, n, n, Activation::none);
    g_blas_flushes_denormals = std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; });
  });
}

class CpuSession final : public Session, public CpuSessionProbe {
 public:
  CpuSession(const Graph& graph, const Plan& plan, const SessionOptions& options)
      : graph_(graph), plan_(plan), options_(options), storage_(storage_dtype(plan.request.precision)) {
    warm_blas();  // before the arena: see warm_blas
    const FlushDenormals flush;
    allocate();
    initialise_parameters();
    if (plan_.request.mode == Mode::infer || plan_.request.accumulation == 1) fill_data(0);
  }

  ~CpuSession() override { std::free(arena_); }

  CpuSession(const CpuSession&) = delete;
  CpuSession& operator=(const CpuSession&) = delete;

  // The step's time leaves out the synthetic data of its micro-batches (with accumulation), generated
  // between them: a training loop's data arrives prefetched, and generating it on the CPU can cost as much
  // as a small model's step (a 65536-wide input: 4x the step).
  StepResult step() override {
    const FlushDenormals flush;  // see ops.hpp: a memorized batch's subnormals would slow the steps tenfold
    data_ms_ = 0;
    const auto start = std::chrono::steady_clock::now();
    StepResult result = plan_.request.mode == Mode::train ? train_step() : infer_step();
    result.step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() -
        data_ms_;
    return result;
  }

  double untimed_data_ms() const override { return data_ms_; }

  SessionMemory memory() const override {
    return {plan_.memory.total_bytes(), allocated_bytes_, std::nullopt};
  }

  nlohmann::json details() const override {
    nlohmann::json d = {{"math", "fp32 (OpenBLAS sgemm)"}, {"storage", std::string(to_string(storage_))}};
    if (plan_.request.precision == Precision::tf32) d["note"] = "tf32 runs as fp32 on the CPU";
    if (plan_.request.precision == Precision::fp16 && plan_.request.mode == Mode::train)  // no loss in infer
      d["loss_scale"] = loss_scale_;
    return d;
  }

  // ---- CpuSessionProbe
  // ---------------------------------------------------------------------------------------
  std::vector<float> parameters_f32() const override {
    std::vector<float> out(static_cast<size_t>(graph_.parameters));
    const Ref master = master_ref();
    if (master.dtype == DType::f32) {
      std::memcpy(out.data(), master.ptr, out.size() * sizeof(float));
    } else {
      convert_to_f32(master, out.data(), out.size());
    }
    return out;
  }
  std::vector<float> gradients_f32() const override {
    const Ref g = ref("gradients");
    if (!g) return {};
    return {g.f32(), g.f32() + graph_.parameters};
  }
  std::vector<float> buffer_f32(const std::string& name) const override {
    const Ref r = need(name);
    if (r.dtype != DType::f32) throw BackendError(fmt::format("buffer '{}' is not fp32", name));
    return {r.f32(), r.f32() + r.elements};
  }
  std::vector<float> output_f32() const override {
    if (last_output_.ptr == nullptr) throw BackendError("output_f32: no step has run");
    std::vector<float> out(last_output_.elements);
    convert_to_f32(last_output_, out.data(), last_output_.elements);
    return out;
  }
  void poison_step_buffers(unsigned char byte) override {
    for (const BufferSpec& b : plan_.buffers)
      if (is_step_buffer(b)) std::memset(need(b.name).ptr, byte, b.bytes);
  }
  std::map<std::string, uint64_t> written_bytes(unsigned char byte) const override {
    std::map<std::string, uint64_t> written;
    for (const BufferSpec& b : plan_.buffers) {
      if (!is_step_buffer(b)) continue;
      const auto* p = static_cast<const unsigned char*>(need(b.name).ptr);
      uint64_t end = b.bytes;
      while (end > 0 && p[end - 1] == byte) --end;
      written[b.name] = end;
    }
    return written;
  }
  static bool is_step_buffer(const BufferSpec& b) {
    return !b.is_view() &&
           (b.category == MemoryCategory::saved_activations || b.category == MemoryCategory::transient ||
            b.category == MemoryCategory::workspace);
  }
  double loss_scale() const override { return loss_scale_; }
  int64_t skipped_steps() const override { return skipped_steps_; }
  void set_loss_scale(double scale) override {
    loss_scale_ = scale;
    clean_steps_ = 0;
  }
  void set_parameters(const std::vector<float>& values) override {
    if (values.size() != static_cast<size_t>(graph_.parameters))
      throw BackendError(
          fmt::format("set_parameters: {} values for {} parameters", values.size(), graph_.parameters));
    const Ref master = master_ref();
    convert_from_f32(values.data(), master, values.size());
    sync_parameters_from_master();
  }

 private:
  // ---- buffers
  // ------------------------------------------------------------------------------------------------
  void allocate() {
    const uint64_t total = plan_.memory.total_bytes();
    if (options_.memory_limit_bytes && total > *options_.memory_limit_bytes)
      throw OutOfMemory(fmt::format("the plan needs {} ({} bytes), over the memory limit of {}",
                                    format_bytes(total), total, format_bytes(*options_.memory_limit_bytes)));
    // What fits on this machine (the device's memory) may not be free now: another process's share is an
    // out-of-memory point, as another tenant's is on a GPU, not a sweep the kernel kills.
    if (const std::optional<std::string> why = over_available_memory(total, this_process_memory()))
      throw OutOfMemory(*why);
    arena_ = std::aligned_alloc(kBufferAlignment, std::max<uint64_t>(total, kBufferAlignment));
    if (arena_ == nullptr)
      throw OutOfMemory(fmt::format("could not allocate {} ({} bytes) of host memory for the plan",
                                    format_bytes(total), total));
    allocated_bytes_ = total;
    auto* base = static_cast<unsigned char*>(arena_);
    uint64_t offset = 0;
    for (const BufferSpec& b : plan_.buffers) {
      if (b.is_view()) continue;
      buffers_[b.name] = Ref{base + offset, b.dtype, b.elements};
      offset += b.bytes;
    }
    // Views (the recompute arena's activations) share the memory of the buffer they are in.
    for (const BufferSpec& b : plan_.buffers)
      if (b.is_view())
        buffers_[b.name] =
            Ref{static_cast<unsigned char*>(need(b.within).ptr) + b.offset, b.dtype, b.elements};
    // Gradients and optimizer state start at zero; the rest is written before it is read.
    for (const char* name : {"gradients", "optimizer.m", "optimizer.v", "optimizer.momentum"})
      if (Ref r = ref(name)) std::memset(r.ptr, 0, r.elements * dtype_bytes(r.dtype));
  }

  [[nodiscard]] Ref ref(const std::string& name) const {
    const auto it = buffers_.find(name);
    return it == buffers_.end() ? Ref{} : it->second;
  }
  [[nodiscard]] Ref need(const std::string& name) const {
    Ref r = ref(name);
    if (!r) throw BackendError(fmt::format("cpu backend: the plan has no buffer '{}'", name));
    return r;
  }
  // An fp32 workspace and its size, or an empty one where the plan has none of that name (no op of this
  // model uses it).
  struct Workspace {
    float* ptr = nullptr;
    uint64_t elements = 0;
    const char* name = "";
  };
  [[nodiscard]] Workspace workspace(const char* name) const {
    const Ref r = ref(name);
    return {r.f32(), r.elements, name};
  }
  // The workspace where the step is in 16 bits (converting to fp32 there), else none.
  [[nodiscard]] Workspace workspace16(const char* name) const {
    return sixteen_bit() ? workspace(name) : Workspace{};
  }
  // The first `n` floats of a workspace. The plan sizes each for what the backend puts there: more is the
  // plan's bug, said rather than written over the next buffer.
  static float* fit(const Workspace& ws, uint64_t n) {
    if (n > ws.elements)
      throw BackendError(fmt::format("cpu backend: {} floats overrun {} ({}; a bug in the memory plan)", n,
                                     *ws.name ? ws.name : "a workspace the plan does not have", ws.elements));
    return ws.ptr;
  }
  [[nodiscard]] Ref master_ref() const {
    const Ref m = ref("master_weights");
    return m ? m : need("parameters");
  }
  [[nodiscard]] bool sixteen_bit() const { return storage_ != DType::f32; }

  // A view of `n` elements at element offset `offset` inside a buffer.
  // The plan sizes every buffer for what the backend puts there: a view past its end is the plan's bug, said
  // rather than written over the next buffer.
  static Ref slice(const Ref& r, uint64_t offset, uint64_t n) {
    if (r.ptr == nullptr || offset + n > r.elements)
      throw BackendError(
          fmt::format("cpu backend: {} elements at {} overrun a planned buffer of {} (a bug in "
                      "the memory plan)",
                      n, offset, r.elements));
    return Ref{static_cast<unsigned char*>(r.ptr) + offset * dtype_bytes(r.dtype), r.dtype, n};
  }

  static void convert_to_f32(const Ref& r, float* out, uint64_t n) {
    if (r.dtype == DType::bf16) {
      from_bf16(r.u16(), out, static_cast<int64_t>(n));
    } else if (r.dtype == DType::f16) {
      from_fp16(r.u16(), out, static_cast<int64_t>(n));
    } else {
      std::memcpy(out, r.ptr, n * sizeof(float));
    }
  }
  static void convert_from_f32(const float* in, const Ref& r, uint64_t n) {
    if (r.dtype == DType::bf16) {
      to_bf16(in, r.u16(), static_cast<int64_t>(n));
    } else if (r.dtype == DType::f16) {
      to_fp16(in, r.u16(), static_cast<int64_t>(n));
    } else if (in != r.ptr) {
      std::memcpy(r.ptr, in, n * sizeof(float));
    }
  }
  // fp32 view of a storage buffer: the buffer itself in fp32, else a converted copy in the workspace `ws`.
  static const float* load(const Ref& r, uint64_t n, const Workspace& ws) {
    if (r.dtype == DType::f32) return r.f32();
    float* out = fit(ws, n);
    convert_to_f32(r, out, n);
    return out;
  }
  // Where an fp32 result for buffer `r` is computed: in place for fp32 storage, else in `ws` (then commit()).
  static float* target(const Ref& r, const Workspace& ws) {
    return r.dtype == DType::f32 ? r.f32() : fit(ws, r.elements);
  }
  static void commit(const float* computed, const Ref& r, uint64_t n) {
    if (r.dtype != DType::f32) convert_from_f32(computed, r, n);
  }

  // ---- initialisation
  // -------------------------------------------------------------------------------------------
  // Seeded initialisation in fp32: into the master weights (or fp32 parameters), or — 16-bit inference, which
  // has no master copy — op by op through workspace.w, then converted into the parameters.
  void initialise_parameters() {
    const bool direct = ref("master_weights") || !sixteen_bit();
    uint64_t stream = 0;
    for (const Op& op : graph_.ops) {
      if (op.params.empty()) continue;
      const int64_t first = op.params.front().offset;
      float* w = direct ? master_ref().f32()
                        : fit(workspace("workspace.w"), static_cast<uint64_t>(op.param_elements)) - first;
      for (const Op::Param& p : op.params) {
        float* dst = w + p.offset;
        const int64_t n = p.elements;
        if (p.name == "gamma") {
          std::fill(dst, dst + n, 1.0f);
        } else if (p.name == "beta") {
          std::fill(dst, dst + n, 0.0f);
        } else if (p.name == "tokens" || p.name == "positions") {
          fill_uniform(dst, n, 0.02f * std::sqrt(3.0f), options_.seed, stream);  // std 0.02 (GPT-2)
        } else {
          fill_uniform(dst, n, 1.0f / std::sqrt(static_cast<float>(op.fan_in())), options_.seed, stream);
        }
        ++stream;
      }
      if (!direct) convert_from_f32(w + first, param_slice(op), static_cast<uint64_t>(op.param_elements));
    }
    if (direct) sync_parameters_from_master();
    // Batchnorm's running statistics start as PyTorch's: mean 0, variance 1.
    for (size_t i = 0; i < graph_.ops.size(); ++i) {
      if (graph_.ops[i].kind != OpKind::batchnorm) continue;
      float* running = need(fmt::format("ops[{}].running", i)).f32();
      const int64_t c = graph_.ops[i].channels;
      std::fill(running, running + c, 0.0f);
      std::fill(running + c, running + 2 * c, 1.0f);
    }
  }

  void sync_parameters_from_master() {
    if (!ref("master_weights")) return;
    convert_from_f32(need("master_weights").f32(), need("parameters"),
                     static_cast<uint64_t>(graph_.parameters));
  }

  // Synthetic inputs and targets of micro-batch `micro`, indexed by global sample so accumulation is exact.
  void fill_data(int64_t micro) {
    const uint64_t b = static_cast<uint64_t>(plan_.request.batch);
    const uint64_t first_sample = static_cast<uint64_t>(micro) * b;
    const Ref input = need("data.input");
    const uint64_t per_sample = input.elements / b;
    if (graph_.input_type == InputType::tokens) {
      const int64_t vocab = graph_.ops.front().vocab;
      for (uint64_t i = 0; i < input.elements; ++i)
        input.i32()[i] = data_label(options_.seed, kDataStream, first_sample * per_sample + i, vocab);
    } else {
      fill_values(input, first_sample * per_sample, kDataStream);
    }
    const Ref targets = ref("data.targets");
    if (!targets) return;
    const uint64_t per_sample_targets = targets.elements / b;
    if (graph_.loss == LossType::cross_entropy) {
      for (uint64_t i = 0; i < targets.elements; ++i)
        targets.i32()[i] = data_label(options_.seed, kTargetStream, first_sample * per_sample_targets + i,
                                      graph_.loss_classes);
    } else {
      fill_values(targets, first_sample * per_sample_targets, kTargetStream);
    }
  }

  void fill_values(const Ref& r, uint64_t first_index, uint64_t stream) {
    for (uint64_t i = 0; i < r.elements; ++i) {
      const float v = data_value(options_.seed, stream, first_index + i);
      if (r.dtype == DType::f32) {
        r.f32()[i] = v;
      } else if (r.dtype == DType::bf16) {
        r.u16()[i] = float_to_bf16(v);
      } else {
        r.u16()[i] = float_to_fp16(v);
      }
    }
  }

  // ---- forward
  // ----------------------------------------------------------------------------------------------------
  // Where op i reads its input and writes its output, per mode.
  struct Io {
    Ref in;   // storage (or i32 ids)
    Ref out;  // storage
  };

  [[nodiscard]] Ref param_slice(const Op& op) const {
    return slice(need("parameters"), static_cast<uint64_t>(op.params.front().offset),
                 static_cast<uint64_t>(op.param_elements));
  }
  [[nodiscard]] float* grad_slice(const Op& op) const {
    return need("gradients").f32() + op.params.front().offset;
  }
  [[nodiscard]] uint64_t batch() const { return static_cast<uint64_t>(plan_.request.batch); }
  [[nodiscard]] uint64_t n_in(const Op& op) const {
    return batch() * static_cast<uint64_t>(op.in_elements());
  }
  [[nodiscard]] uint64_t n_out(const Op& op) const {
    return batch() * static_cast<uint64_t>(op.out_elements());
  }

  // Runs the forward pass; returns the buffer holding the network output.
  Ref forward() {
    const bool train = plan_.request.mode == Mode::train;
    Ref current = need("data.input");
    // The plan sizes each to what the ops writing it hold: one no op writes (a single layer) is absent.
    Ref ping = train ? Ref{} : ref("act.a");
    Ref pong = train ? Ref{} : ref("act.b");
    for (size_t i = 0; i < graph_.ops.size(); ++i) {
      const Op& op = graph_.ops[i];
      if (op.kind == OpKind::residual_save) {
        input_of_[i] = current;
        if (!train) {
          // The input is in act.residual already, where the op before wrote it (Op::writes_residual), or
          // copied there; the residual's ops read it there, so the first writes act.a (the plan's
          // ping_pong_activations): a block's largest output lands in the same buffer each time.
          const Ref stash = need(fmt::format("act.residual[{}]", op.residual_depth));
          if (op.save_copies) std::memcpy(stash.ptr, current.ptr, n_in(op) * dtype_bytes(current.dtype));
          current = slice(stash, 0, n_in(op));
        }
        continue;
      }
      input_of_[i] = current;
      if (op.kind == OpKind::residual_branch) {  // the inner ops start again from the residual's input
        current = train ? input_of_.at(op.residual_partner)
                        : slice(need(fmt::format("act.residual[{}]", op.residual_depth)), 0, n_out(op));
        continue;
      }
      Ref out;
      if (train) {
        out = output_of(i, op);
      } else if (op.ends_shortcut >= 0) {  // waits for the add while the inner ops use act.a / act.b
        out = slice(need(fmt::format("act.shortcut[{}]", op.ends_shortcut)), 0, n_out(op));
      } else if (op.writes_residual >= 0) {  // a residual's sum, or the input of the residual it opens
        out = slice(need(fmt::format("act.residual[{}]", op.writes_residual)), 0, n_out(op));
      } else {
        out = current.ptr == ping.ptr ? pong : ping;
        out = slice(out, 0, n_out(op));
      }
      forward_op(i, op, current, out, train);
      current = out;
    }
    return current;
  }

  // What a residual add adds to its input: the shortcut's result, or the residual's saved input.
  [[nodiscard]] Ref residual_source(const Op& op, bool train) const {
    if (op.has_shortcut) {
      const size_t last = op.residual_branch_index - 1;  // the shortcut's last op
      return train ? output_of(last, graph_.ops[last])
                   : slice(need(fmt::format("act.shortcut[{}]", op.residual_depth)), 0, n_out(op));
    }
    return train ? input_of_.at(op.residual_partner)
                 : need(fmt::format("act.residual[{}]", op.residual_depth));
  }

  void forward_op(size_t i, const Op& op, const Ref& in_ref, const Ref& out_ref, bool train) {
    const uint64_t nin = n_in(op), nout = n_out(op);
    const int64_t b = plan_.request.batch;
    const Workspace ws_x = workspace16("workspace.x");
    const Workspace ws_y = workspace16("workspace.y");
    const Workspace ws_w = workspace16("workspace.w");
    const Workspace ws_aux = workspace16("workspace.aux");
    const float* x = op.kind == OpKind::embedding ? nullptr : load(in_ref, nin, ws_x);
    float* y = target(out_ref, ws_y);
    const float* w = op.param_elements > 0
                         ? load(param_slice(op), static_cast<uint64_t>(op.param_elements), ws_w)
                         : nullptr;
    // Pre-activation: saved in training (ops[i].pre) where backward needs it. Elsewhere (inference, and a
    // training ReLU or tanh, whose backward reads the output) there is none: the op computes into the output
    // and the activation runs in place there, as a fused epilogue would.
    Ref pre_ref;
    float* z = nullptr;
    if (train && op.saves_preactivation()) {
      pre_ref = preactivation_of(i, op);
      z = target(pre_ref, ws_aux);
    }
    switch (op.kind) {
      case OpKind::linear:
        linear_forward(x, w, op.bias ? w + op.in_features * op.out_features : nullptr, z, y, b * op.rows,
                       op.in_features, op.out_features, op.activation);
        break;
      case OpKind::conv2d: {
        const ConvShape s = conv_shape(op);
        const float* bias = op.bias ? w + op.out_channels * op.channels * op.kernel * op.kernel : nullptr;
        conv2d_forward(s, x, w, bias, z, y, op.activation, scratch_for(s));
        break;
      }
      case OpKind::maxpool2d:
        maxpool2d_forward(pool_shape(op), x, y);
        break;
      case OpKind::avgpool2d:
        avgpool2d_forward(pool_shape(op), x, y);
        break;
      case OpKind::global_avgpool:
        global_avgpool_forward(x, y, b, op.channels, op.spatial, op.tokens_layout);
        break;
      case OpKind::layernorm: {
        const Ref stats = train ? need(fmt::format("ops[{}].stats", i)) : need("act.stats");
        const int64_t rows = b * op.rows;
        layernorm_forward(x, w, w + op.dim, y, stats.f32(), stats.f32() + rows, rows, op.dim);
        break;
      }
      case OpKind::batchnorm: {
        // Normalized into the pre-activation where there is one (or into y), then the activation into y.
        float* normalized = z != nullptr ? z : y;
        float* running = need(fmt::format("ops[{}].running", i)).f32();
        const int64_t c = op.channels;
        if (train) {
          float* stats = need(fmt::format("ops[{}].stats", i)).f32();
          // Recomputing, it normalizes as before without moving the running statistics a second time.
          batchnorm_forward_train(x, w, w + c, normalized, stats, stats + c, recomputing_ ? nullptr : running,
                                  recomputing_ ? nullptr : running + c, b, c, op.spatial, kBatchNormMomentum);
        } else {
          batchnorm_forward_infer(x, w, w + c, running, running + c, normalized, b, c, op.spatial);
        }
        if (op.has_preactivation())
          activation_forward(op.activation, normalized, y, static_cast<int64_t>(nout));
        break;
      }
      case OpKind::embedding:
        embedding_forward(in_ref.i32(), w, w + op.vocab * op.dim, y, b, op.seq, op.dim);
        break;
      case OpKind::patch_embedding: {
        const PatchShape s{b, op.channels, op.height, op.width, op.kernel, op.dim};
        const int64_t wn = op.dim * op.channels * op.kernel * op.kernel;
        patch_embedding_forward(
            s, x, w, w + wn, w + wn + op.dim, y,
            fit(workspace("workspace.scratch"), static_cast<uint64_t>(patch_embedding_scratch_elements(s))));
        break;
      }
      case OpKind::attention_core: {
        // 16-bit inference keeps its fp32 probabilities in workspace.aux (the plan has no act.probs then).
        const Ref probs_ref =
            train ? need(fmt::format("ops[{}].probs", i)) : (sixteen_bit() ? Ref{} : need("act.probs"));
        float* probs = probs_ref ? target(probs_ref, ws_aux)
                                 : fit(ws_aux, static_cast<uint64_t>(b * op.heads * op.seq * op.seq));
        attention_forward(x, y, probs, b, op.seq, op.dim, op.heads, op.causal);
        if (train) commit(probs, probs_ref, probs_ref.elements);
        break;
      }
      case OpKind::residual_add: {
        const Ref res = residual_source(op, train);
        // sum = x + residual, into the pre-activation where there is one (or y), then the activation into y;
        // with 16-bit storage the residual is converted into sum's fp32 workspace, then added.
        float* sum = z != nullptr ? z : y;
        if (res.dtype == DType::f32) {
          add(x, res.f32(), sum, static_cast<int64_t>(nout));
        } else {
          convert_to_f32(res, sum, nout);
          add(x, sum, sum, static_cast<int64_t>(nout));
        }
        if (op.has_preactivation()) activation_forward(op.activation, sum, y, static_cast<int64_t>(nout));
        break;
      }
      case OpKind::residual_save:
      case OpKind::residual_branch:
        break;
    }
    if (pre_ref) commit(z, pre_ref, nout);
    commit(y, out_ref, nout);
  }

  // A conv's im2col columns (none for a pointwise one).
  float* scratch_for(const ConvShape& s) const {
    return fit(workspace("workspace.scratch"), static_cast<uint64_t>(conv2d_scratch_elements(s)));
  }
  ConvShape conv_shape(const Op& op) const {
    return ConvShape{plan_.request.batch, op.channels, op.height,  op.width,      op.out_channels,
                     op.kernel,           op.stride,   op.padding, op.out_height, op.out_width};
  }
  PoolShape pool_shape(const Op& op) const {
    return PoolShape{plan_.request.batch, op.channels,   op.height,    op.width,  op.kernel,
                     op.stride,           op.out_height, op.out_width, op.padding};
  }

  // ---- loss and backward
  // -------------------------------------------------------------------------------------------- Computes the
  // loss of the network output and writes its gradient (scaled) into grad.a. Returns the mean loss.
  double loss_and_gradient(const Ref& output, float grad_scale) {
    const uint64_t n = output.elements;
    const Workspace ws_x = workspace16("workspace.x");
    const Workspace ws_y = workspace16("workspace.y");
    const Workspace ws_dx = workspace16("workspace.dx");
    const float* logits = load(output, n, ws_x);
    const Ref grad = slice(need("grad.a"), 0, n);
    float* dlogits = target(grad, ws_dx);
    double loss = 0;
    if (graph_.loss == LossType::cross_entropy) {
      loss = cross_entropy(logits, need("data.targets").i32(), dlogits,
                           static_cast<int64_t>(batch()) * graph_.loss_rows, graph_.loss_classes, grad_scale);
    } else {
      const float* t = load(need("data.targets"), n, ws_y);
      loss = mse(logits, t, dlogits, static_cast<int64_t>(n), grad_scale);
    }
    commit(dlogits, grad, n);
    return loss;
  }

  void backward() {
    // Ping-pong: the plan sizes each to what it holds (grad.b is absent when no op has an input gradient).
    Ref current = need("grad.a");  // holds the gradient of the op's output
    Ref other = ref("grad.b");
    for (size_t i = graph_.ops.size(); i-- > 0;) {
      const Op& op = graph_.ops[i];
      if (const int k = block_ending_at_[i]; k >= 0) recompute(graph_.blocks[static_cast<size_t>(k)]);
      const Ref in = input_of_[i];
      const bool need_dx = op.input_gradient;
      if (op.kind == OpKind::residual_add) {
        if (op.has_preactivation()) activation_gradient_in_place(i, op, current);
        if (op.residual_without_gradient) continue;  // the other addend has no gradient to receive it
        const Ref stash = need(fmt::format("grad.residual[{}]", op.residual_depth));
        std::memcpy(stash.ptr, slice(current, 0, n_out(op)).ptr, n_out(op) * dtype_bytes(current.dtype));
        continue;  // the gradient flows unchanged into the inner layers
      }
      if (op.kind == OpKind::residual_branch) {
        // The inner path's gradient of the residual's input waits for the save; the shortcut's backward
        // starts from the add's output gradient.
        if (!graph_.ops[op.residual_partner].residual_without_gradient) {
          const Ref keep = need(fmt::format("grad.branch[{}]", op.residual_depth));
          std::memcpy(keep.ptr, slice(current, 0, n_out(op)).ptr, n_out(op) * dtype_bytes(current.dtype));
        }
        const Ref stash = need(fmt::format("grad.residual[{}]", op.residual_depth));
        std::memcpy(slice(current, 0, n_in(op)).ptr, stash.ptr, n_in(op) * dtype_bytes(current.dtype));
        continue;
      }
      if (op.kind == OpKind::residual_save) {
        if (!need_dx) {
          if (const auto resume = backward_resume(graph_, i)) {
            i = *resume + 1;
            continue;
          }
          break;
        }
        const Ref stash =
            need(fmt::format("{}[{}]", op.has_shortcut ? "grad.branch" : "grad.residual", op.residual_depth));
        const uint64_t n = n_in(op);
        const Ref sum = slice(current, 0, n);
        if (sixteen_bit()) {
          float* a = fit(workspace("workspace.dy"), n);
          float* bsum = fit(workspace("workspace.dx"), n);
          convert_to_f32(sum, a, n);
          convert_to_f32(stash, bsum, n);
          add(a, bsum, a, static_cast<int64_t>(n));
          convert_from_f32(a, sum, n);
        } else {
          add(sum.f32(), stash.f32(), sum.f32(), static_cast<int64_t>(n));
        }
        continue;
      }
      backward_op(i, op, in, current, need_dx ? slice(other, 0, n_in(op)) : Ref{});
      if (!need_dx) {
        // Nothing before it on its path has a gradient: on with a shortcut that has parameters, or done.
        if (const auto resume = backward_resume(graph_, i)) {
          i = *resume + 1;
          continue;
        }
        break;
      }
      std::swap(current, other);
    }
  }

  // Checkpointing: a block's forward again, from its input (kept) into the same buffers as the forward pass
  // used (its activations' views in the recompute arena, where the later blocks' have been since), just
  // before its backward reads them. Torch's checkpoint recomputes the same way.
  void recompute(const Graph::Block& block) {
    recomputing_ = true;
    for (size_t j = block.first; j <= block.last; ++j) {
      const Op& op = graph_.ops[j];
      if (op.kind == OpKind::residual_save || op.kind == OpKind::residual_branch) continue;
      forward_op(j, op, input_of_[j], output_of(j, op), true);
    }
    recomputing_ = false;
  }

  // Where op i's output and saved pre-activation are in training: ops[i].out and ops[i].pre, or for a
  // residual add in place its input's buffer, which it wrote over (input_of_[i], set by forward before the op
  // runs).
  [[nodiscard]] Ref output_of(size_t i, const Op& op) const {
    if (op.shortcut_result_transient())
      return slice(need(fmt::format("act.shortcut[{}]", op.ends_shortcut)), 0, n_out(op));
    return op.output_is_input() ? slice(input_of_[i], 0, n_out(op)) : need(fmt::format("ops[{}].out", i));
  }
  [[nodiscard]] Ref preactivation_of(size_t i, const Op& op) const {
    return op.preactivation_is_input() ? slice(input_of_[i], 0, n_out(op))
                                       : need(fmt::format("ops[{}].pre", i));
  }

  // A residual add's activation: its output gradient (in `grad`) becomes the sum's, in place.
  void activation_gradient_in_place(size_t i, const Op& op, const Ref& grad) {
    const uint64_t n = n_out(op);
    const float* y = load(output_of(i, op), n, workspace16("workspace.y"));
    const float* z =
        op.saves_preactivation() ? load(preactivation_of(i, op), n, workspace16("workspace.aux")) : y;
    const Ref g = slice(grad, 0, n);
    const float* dy = load(g, n, workspace16("workspace.dy"));
    float* dz = fit(workspace("workspace.z"), n);
    activation_backward(op.activation, z, y, dy, dz, static_cast<int64_t>(n));
    convert_from_f32(dz, g, n);
  }

  void backward_op(size_t i, const Op& op, const Ref& in_ref, const Ref& dy_ref, const Ref& dx_full) {
    const uint64_t nin = n_in(op), nout = n_out(op);
    const int64_t b = plan_.request.batch;
    const float* x = op.kind == OpKind::embedding ? nullptr : load(in_ref, nin, workspace16("workspace.x"));
    const float* dy = load(slice(dy_ref, 0, nout), nout, workspace16("workspace.dy"));
    const Ref dx_ref = dx_full ? slice(dx_full, 0, nin) : Ref{};
    float* dx = dx_ref ? target(dx_ref, workspace16("workspace.dx")) : nullptr;
    const float* w = op.param_elements > 0 ? load(param_slice(op), static_cast<uint64_t>(op.param_elements),
                                                  workspace16("workspace.w"))
                                           : nullptr;
    float* dw = op.param_elements > 0 ? grad_slice(op) : nullptr;
    auto saved = [&](const char* what, const Workspace& ws) {
      const Ref r = need(fmt::format("ops[{}].{}", i, what));
      return load(r, r.elements, ws);
    };
    // What the activation's derivative reads as z: the saved pre-activation, or for ReLU and tanh the
    // output (ReLU's z > 0 exactly where its output is; tanh's derivative reads only y).
    auto pre_or_out = [&](const Op& o, const float* y) -> const float* {
      if (!o.has_preactivation()) return nullptr;
      return o.saves_preactivation() ? saved("pre", workspace16("workspace.aux")) : y;
    };
    switch (op.kind) {
      case OpKind::linear: {
        const float* y = op.backward_reads_output() ? saved("out", workspace16("workspace.y")) : nullptr;
        const float* z = pre_or_out(op, y);
        float* dz = op.has_preactivation() ? fit(workspace("workspace.z"), nout) : nullptr;
        linear_backward(x, w, z, y, dy, dz, dx, dw, op.bias ? dw + op.in_features * op.out_features : nullptr,
                        b * op.rows, op.in_features, op.out_features, op.activation);
        break;
      }
      case OpKind::conv2d: {
        const float* y = op.backward_reads_output() ? saved("out", workspace16("workspace.y")) : nullptr;
        const float* z = pre_or_out(op, y);
        float* dz = op.has_preactivation() ? fit(workspace("workspace.z"), nout) : nullptr;
        const int64_t wn = op.out_channels * op.channels * op.kernel * op.kernel;
        conv2d_backward(conv_shape(op), x, w, z, y, dy, dz, dx, dw, op.bias ? dw + wn : nullptr,
                        op.activation, scratch_for(conv_shape(op)));
        break;
      }
      case OpKind::maxpool2d:  // finds each window's maximum again in the input; reads no output
        if (dx) maxpool2d_backward(pool_shape(op), x, dy, dx);
        break;
      case OpKind::avgpool2d:
        if (dx) avgpool2d_backward(pool_shape(op), dy, dx);
        break;
      case OpKind::global_avgpool:
        if (dx) global_avgpool_backward(dy, dx, b, op.channels, op.spatial, op.tokens_layout);
        break;
      case OpKind::layernorm: {
        const Ref stats = need(fmt::format("ops[{}].stats", i));
        const int64_t rows = b * op.rows;
        layernorm_backward(x, w, stats.f32(), stats.f32() + rows, dy, dx, dw, dw + op.dim, rows, op.dim);
        break;
      }
      case OpKind::batchnorm: {
        const float* y = op.backward_reads_output() ? saved("out", workspace16("workspace.y")) : nullptr;
        const float* g = dy;
        if (op.has_preactivation()) {
          float* dz = fit(workspace("workspace.z"), nout);
          activation_backward(op.activation, pre_or_out(op, y), y, dy, dz, static_cast<int64_t>(nout));
          g = dz;
        }
        const float* stats = need(fmt::format("ops[{}].stats", i)).f32();
        const int64_t c = op.channels;
        batchnorm_backward(x, w, stats, stats + c, g, dx, dw, dw + c, b, c, op.spatial);
        break;
      }
      case OpKind::embedding:
        embedding_backward(in_ref.i32(), dy, dw, dw + op.vocab * op.dim, b, op.seq, op.dim);
        break;
      case OpKind::patch_embedding: {
        const PatchShape s{b, op.channels, op.height, op.width, op.kernel, op.dim};
        const int64_t wn = op.dim * op.channels * op.kernel * op.kernel;
        patch_embedding_backward(
            s, x, w, dy, dx, dw, dw + wn, dw + wn + op.dim,
            fit(workspace("workspace.scratch"), static_cast<uint64_t>(patch_embedding_scratch_elements(s))));
        break;
      }
      case OpKind::attention_core: {
        const float* probs = saved("probs", workspace16("workspace.aux"));
        if (dx)
          attention_backward(
              x, probs, dy, dx, b, op.seq, op.dim, op.heads, op.causal,
              fit(workspace("workspace.scratch"), static_cast<uint64_t>(attention_scratch_elements(op.seq))));
        break;
      }
      case OpKind::residual_save:
      case OpKind::residual_add:
      case OpKind::residual_branch:
        break;
    }
    if (dx) commit(dx, dx_ref, nin);
  }

  // ---- steps
  // ---------------------------------------------------------------------------------------------------
  StepResult infer_step() {
    last_output_ = forward();
    StepResult r;
    r.loss = std::numeric_limits<double>::quiet_NaN();
    return r;
  }

  // Zeroes the gradients, then forward, loss and backward over every micro-batch; gradients are scaled by
  // `scale`.
  double accumulate_gradients(double scale) {
    const Ref grads = need("gradients");
    std::memset(grads.ptr, 0, static_cast<size_t>(graph_.parameters) * sizeof(float));
    const int64_t accumulation = plan_.request.accumulation;
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      if (accumulation > 1) {
        const auto start = std::chrono::steady_clock::now();
        fill_data(micro);
        data_ms_ +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      }
      const Ref output = forward();
      last_output_ = output;
      loss_sum += loss_and_gradient(output, static_cast<float>(scale / static_cast<double>(accumulation)));
      backward();
    }
    return loss_sum / static_cast<double>(accumulation);
  }

  double loss_and_gradients() override {
    if (plan_.request.mode != Mode::train) throw BackendError("loss_and_gradients needs a training session");
    const FlushDenormals flush;
    return accumulate_gradients(1.0);
  }

  StepResult train_step() {
    const Ref grads = need("gradients");
    const int64_t p = graph_.parameters;
    const bool fp16 = plan_.request.precision == Precision::fp16;
    const double scale = fp16 ? loss_scale_ : 1.0;
    StepResult r;
    r.loss = accumulate_gradients(scale);
    if (fp16) cpu::scale(grads.f32(), p, static_cast<float>(1.0 / scale));
    const bool finite = std::isfinite(r.loss) && all_finite(grads.f32(), p);
    if (!finite) {
      if (fp16) {
        // Overflow under loss scaling: skip the update and lower the scale, as torch.cuda.amp.GradScaler
        // does.
        r.skipped = true;
        ++skipped_steps_;
        // At the lowest scale the gradients overflow unscaled: the scaler cannot help, and every later step
        // would be skipped too (the weights no longer move), timing steps that train nothing.
        if (loss_scale_ <= 1.0) r.finite = false;
        loss_scale_ = std::max(1.0, loss_scale_ / 2);
        clean_steps_ = 0;
        return r;
      }
      r.finite = false;
      return r;
    }
    if (fp16 && ++clean_steps_ >= kLossScaleGrowthInterval) {
      loss_scale_ *= 2;
      clean_steps_ = 0;
    }
    optimizer_step();
    return r;
  }

  void optimizer_step() {
    ++optimizer_steps_;
    const OptimizerSpec& o = graph_.optimizer;
    float* w = master_ref().f32();
    const float* g = need("gradients").f32();
    const int64_t p = graph_.parameters;
    if (o.type == OptimizerType::adamw) {
      adamw_step(w, g, need("optimizer.m").f32(), need("optimizer.v").f32(), p,
                 static_cast<float>(o.learning_rate), static_cast<float>(o.beta1),
                 static_cast<float>(o.beta2), static_cast<float>(o.eps), static_cast<float>(o.weight_decay),
                 optimizer_steps_);
    } else {
      const SgdSettings settings{static_cast<float>(o.learning_rate), static_cast<float>(o.momentum),
                                 static_cast<float>(o.weight_decay), o.nesterov};
      sgd_step(w, g, ref("optimizer.momentum").f32(), p, settings, optimizer_steps_);
    }
    sync_parameters_from_master();
  }

  Graph graph_;
  Plan plan_;
  SessionOptions options_;
  DType storage_;
  void* arena_ = nullptr;
  uint64_t allocated_bytes_ = 0;
  std::unordered_map<std::string, Ref> buffers_;
  std::vector<Ref> input_of_ = std::vector<Ref>(graph_.ops.size());
  Ref last_output_;  // the last forward's result (output_f32)
  // With checkpointing: for each op, the index of the block it ends (else -1); backward recomputes that
  // block's forward when it reaches the op.
  std::vector<int> block_ending_at_ = blocks_ending(graph_, plan_.request);
  bool recomputing_ = false;  // a block's forward again: batchnorm's running statistics stay as they are
  double loss_scale_ = kInitialLossScale;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double data_ms_ = 0;  // this step's data generation between micro-batches, left out of its time
  int64_t optimizer_steps_ = 0;
};

class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  bool reports_out_of_memory() const override { return false; }
  std::optional<std::string> over_memory_now(uint64_t bytes) const override {
    return over_available_memory(bytes, this_process_memory());
  }

  DeviceInfo device(Precision precision) const override {
    DeviceInfo info;
    info.backend = "cpu";
    info.name = cpu_model_name();
    warm_blas();  // its buffers mapped before the address space left is measured
    const MemoryLimit limit = memory_limit(this_process_memory());
    info.memory_total_bytes = limit.bytes;
    info.details = {{"threads", openblas_get_num_threads()},
                    {"hardware_threads", std::thread::hardware_concurrency()},
                    {"blas", std::string(openblas_get_config())},
                    {"blas_core", std::string(openblas_get_corename())},
                    {"memory_limit", limit.source},
                    {"denormals", g_blas_flushes_denormals
                                      ? "flushed to zero (FTZ/DAZ), in OpenBLAS's threads too"
                                      : "flushed to zero (FTZ/DAZ) in batchsweep's thread; OpenBLAS's worker "
                                        "threads keep them"}};
    if (precision == Precision::tf32) info.details["note"] = "tf32 runs as fp32 on the CPU";
    if (precision == Precision::bf16 || precision == Precision::fp16)
      info.details["note"] = "16-bit storage, fp32 math on the CPU";
    return info;
  }

  std::unique_ptr<Session> prepare(const Graph& graph, const Plan& plan,
                                   const SessionOptions& options) override {
    if (plan.request.backend != BackendKind::cpu)
      throw BackendError(
          fmt::format("cpu backend given a plan made for the {} backend", to_string(plan.request.backend)));
    return std::make_unique<CpuSession>(graph, plan, options);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace bsw::cpu

namespace bsw {

namespace {

// This process's address space as the limit counts it (every mapping), and how many of OpenBLAS's 128 MiB
// work buffers it holds: anonymous read-write mappings, counted by whole buffers (the kernel merges adjacent
// ones: two workers' buffers read as one 256 MiB mapping). A thread's stack is one too, right above its guard
// page (---p): its size, `stack` bytes (glibc's default, from ulimit -s: 128 MiB or more would pass for a
// buffer), is left out of such a mapping. One read of /proc/self/maps, so the counts agree.
struct AddressSpace {
  uint64_t mapped = 0;
  int buffers = 0;
};
std::optional<AddressSpace> address_space(uint64_t stack) {
  std::ifstream in("/proc/self/maps");
  if (!in) return std::nullopt;
  AddressSpace space;
  std::string line;
  unsigned long long guard_end = 0;  // NOLINT(google-runtime-int): the last anonymous ---p's end
  while (std::getline(in, line)) {
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;  // NOLINT(google-runtime-int): for %llx
    char perms[5] = {};
    char device[32] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx %31s %llu %n", &begin, &end, perms, &offset, device,
                    &inode, &path_at) < 6 ||
        end < begin)
      continue;
    uint64_t size = end - begin;
    space.mapped += size;
    const bool anonymous =
        inode == 0 && line.find_first_not_of(' ', static_cast<size_t>(path_at)) == std::string::npos;
    if (anonymous && std::strcmp(perms, "rw-p") == 0) {
      if (begin == guard_end) size -= std::min(size, stack);  // a thread's stack (and what merged with it)
      space.buffers += static_cast<int>(size / cpu::kBufferBytes);
    }
    if (anonymous && std::strcmp(perms, "---p") == 0) guard_end = end;
  }
  return space;
}

// glibc's default thread stack size (OpenBLAS starts its workers with it); 8 MiB where it does not say.
uint64_t default_stack_bytes() {
  pthread_attr_t attr;
  size_t bytes = size_t{8} << 20;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &bytes);
    pthread_attr_destroy(&attr);
  }
  return bytes;
}

}  // namespace

BlasWorkers blas_workers_check() {
  rlimit limit{};
  const int threads = openblas_get_num_threads();
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || threads < 2)
    return BlasWorkers::fine;
  // The workers map their buffers as they start, which on a busy machine may be after main begins: judged
  // by what they still need, not by whether one buffer fits now (a worker yet to map would then take it, and
  // the process's own later mappings, a plan's arena, could take a slower one's room: it would retry without
  // end). Starved where the room left cannot hold the buffers the workers still need and the main thread's
  // (its first GEMM maps it: with one thread, the workers' room is its); else main waits until the workers
  // hold theirs, so nothing mapped later can take their room. Each buffer is allowed 64 KiB of slack.
  const uint64_t buffer = cpu::kBufferBytes + (uint64_t{64} << 10);
  const uint64_t stack = default_stack_bytes();
  const int workers = threads - 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    const std::optional<AddressSpace> space = address_space(stack);
    if (!space)  // no /proc: one retrying worker needs one buffer more
      return cpu::can_map(1, buffer) ? BlasWorkers::fine : BlasWorkers::starved;
    const int missing = workers - std::min(workers, space->buffers);
    const uint64_t room = limit.rlim_cur > space->mapped ? limit.rlim_cur - space->mapped : 0;
    if (room < static_cast<uint64_t>(missing + 1) * buffer) return BlasWorkers::starved;
    if (missing == 0) return BlasWorkers::fine;
    // Room for all, but a worker has not mapped its buffer in 5 s (a machine that busy, or an OpenBLAS
    // whose buffers are not Debian's 128 MiB): single-threaded is the side that cannot hang.
    if (std::chrono::steady_clock::now() >= deadline) return BlasWorkers::slow;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int blas_threads() {
  return openblas_get_num_threads();
}

}  // namespace bsw
