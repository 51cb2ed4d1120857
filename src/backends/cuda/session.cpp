// The CUDA session: one cudaMalloc holds exactly the plan's buffers; a step runs forward, loss, backward and
// the optimizer over `accumulation` micro-batches on one stream (cuBLASLt GEMMs, kernels/*.cu elsewhere),
// timed with CUDA events, and from the second step on replays a CUDA graph captured from the first (plain
// launches when capture fails). Its math mirrors the CPU backend op for op, so the two are compared in
// tests/gpu.
#include "backends/cuda/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <set>
#include <string>
#include <unordered_map>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cudnn_graphs.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/kernels.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cuda {
namespace {

constexpr double kInitialLossScale = 65536.0;
constexpr int64_t kLossScaleGrowthInterval = 2000;
constexpr uint64_t kDataStream = 1u << 20;    // the CPU backend's streams of the synthetic data
constexpr uint64_t kTargetStream = 1u << 21;  // and of the targets
constexpr uint64_t kOtherProcessWarnBytes = uint64_t{1} << 30;     // more in use than when the sweep began
constexpr uint64_t kOtherProcessAtStartBytes = uint64_t{2} << 30;  // in use then, past our own context's

static_assert(kernels::kStepScalarsBytes <= 64, "workspace.scalars holds 16 fp32 slots");

// One plan buffer (or a slice of one) on the device.
struct Ref {
  void* ptr = nullptr;
  DType dtype = DType::f32;
  uint64_t elements = 0;
  [[nodiscard]] explicit operator bool() const { return ptr != nullptr; }
  [[nodiscard]] float* f32() const { return static_cast<float*>(ptr); }
  [[nodiscard]] int32_t* i32() const { return static_cast<int32_t*>(ptr); }
  // A view of n elements at offset; throws where it would overrun the buffer (a plan/backend disagreement).
  [[nodiscard]] Ref at(uint64_t offset, uint64_t n) const {
    if (ptr != nullptr && (offset > elements || n > elements - offset))
      throw BackendError(fmt::format(
          "cuda backend: {} elements at {} overrun a planned buffer of {} (a bug in the memory plan)", n,
          offset, elements));
    return Ref{static_cast<unsigned char*>(ptr) + offset * dtype_bytes(dtype), dtype, n};
  }
};

class CudaSession final : public Session, public CudaSessionProbe {
 public:
  CudaSession(const Graph& graph, const Plan& plan, const SessionOptions& options, int device,
              std::shared_ptr<CudnnGraphs> cudnn, uint64_t in_use_at_start)
      : graph_(graph),
        plan_(plan),
        options_(options),
        device_(device),
        s_(storage_dtype(plan.request.precision)),
        cudnn_(std::move(cudnn)),
        in_use_at_start_(in_use_at_start) {
    try {
      setup();
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaSession() override { release(); }
  CudaSession(const CudaSession&) = delete;
  CudaSession& operator=(const CudaSession&) = delete;

  StepResult step() override {
    try {
      return run_step();
    } catch (...) {
      // The step's copies may still be in flight: the next step must not rewrite the pinned scalars under
      // them.
      static_cast<void>(cudaStreamSynchronize(stream_));
      static_cast<void>(cudaGetLastError());
      throw;
    }
  }

  StepResult run_step() {
    BSW_CUDA(cudaSetDevice(device_));
    const bool train = plan_.request.mode == Mode::train;
    write_step_inputs();
    BSW_CUDA(cudaMemcpyAsync(scalars_dev_, host_scalars_, sizeof(kernels::StepScalars),
                             cudaMemcpyHostToDevice, stream_));
    BSW_CUDA(cudaEventRecord(start_, stream_));
    if (graph_exec_ != nullptr) {
      BSW_CUDA(cudaGraphLaunch(graph_exec_, stream_));
    } else {
      body();
    }
    BSW_CUDA(cudaEventRecord(stop_, stream_));
    BSW_CUDA(cudaMemcpyAsync(host_scalars_, scalars_dev_, sizeof(kernels::StepScalars),
                             cudaMemcpyDeviceToHost, stream_));
    BSW_CUDA(cudaStreamSynchronize(stream_));
    float ms = 0;
    BSW_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    ++steps_;

    StepResult r;
    r.step_ms = ms;
    if (host_scalars_->bad_label != 0)
      throw BackendError(
          "cross_entropy: a label is outside [0, classes) (the synthetic targets are corrupt)");
    if (train) {
      r.loss = static_cast<double>(host_scalars_->loss_sum) / static_cast<double>(plan_.request.accumulation);
      finish_train_step(r);
    } else {
      r.loss = std::numeric_limits<double>::quiet_NaN();
    }
    const bool first_step = steps_ == 1;
    if (options_.cuda_graphs && graph_exec_ == nullptr && graph_status_.empty()) {
      capture_graph();
      note_device_use();
    } else if (first_step) {
      note_device_use();
    }
    return r;
  }

  SessionMemory memory() const override {
    return {plan_.memory.total_bytes(), allocated_bytes_, device_used_bytes_};
  }

  DeviceTensor output() const override {
    if (last_output_.ptr == nullptr) throw BackendError("cuda backend: output: no step has run");
    BSW_CUDA(cudaSetDevice(device_));
    BSW_CUDA(cudaStreamSynchronize(stream_));
    DeviceTensor t{last_output_.dtype, last_output_.elements, {}};
    t.bytes.resize(last_output_.elements * dtype_bytes(last_output_.dtype));
    BSW_CUDA(cudaMemcpy(t.bytes.data(), last_output_.ptr, t.bytes.size(), cudaMemcpyDeviceToHost));
    return t;
  }

  nlohmann::json details() const override {
    nlohmann::json d = {
        {"device", device_},
        {"storage", std::string(to_string(s_))},
        {"math", plan_.request.precision == Precision::tf32
                     ? "tf32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)"
                 : s_ == DType::f32 ? "fp32"
                                    : "16-bit storage, fp32 accumulation"},
        {"gemm", "cuBLASLt (heuristic algorithm cached per shape)"},
        {"gemm_shapes", gemm_ ? gemm_->cached_shapes() : 0},
        {"conv", cudnn_conv() ? "cuDNN graph API (fprop, dgrad, wgrad), NCHW" : "im2col + cuBLASLt GEMM"},
        {"cuda_graphs", graph_exec_ != nullptr  ? std::string("captured, replayed from step 2")
                        : !options_.cuda_graphs ? std::string("off (plain launches)")
                        : graph_status_.empty() ? std::string("not captured yet (step 1 runs plain launches)")
                                                : graph_status_},
        {"memory_free_before_prepare_bytes", free_before_},
        {"steps", steps_},
        {"optimizer_steps", optimizer_steps_},
    };
    if (has_attention_)
      d["attention"] =
          fused_attention()
              ? "fused: cuDNN SDPA (flash attention) forward and backward, softmax statistics saved"
              : "non-fused: strided-batched cuBLASLt GEMMs with fp32 scores and a softmax kernel";
    if (!plan_.request.paths.note.empty()) d["paths_note"] = plan_.request.paths.note;
    if (cudnn_) d["cudnn_graphs"] = cudnn_->cached_graphs();
    if (gelu_epilogue_used_) d["gelu"] = "fused into the GEMM (CUBLASLT_EPILOGUE_GELU_AUX_BIAS / GELU_BIAS)";
    if (dgelu_epilogue_used_)
      d["gelu_backward"] =
          "fused with the bias gradient into the next linear's input-gradient GEMM "
          "(CUBLASLT_EPILOGUE_DGELU_BGRAD)";
    if (!unfused_epilogues_.empty())
      d["epilogues_unavailable"] = {
          {"note",
           "cuBLASLt offered no algorithm for these fused epilogues (epilogue MxNxK dtype), or their bias "
           "was not 16-byte aligned among the packed parameters; the plain GEMM and separate bias / GELU / "
           "bias-gradient kernels ran instead"},
          {"gemms", unfused_epilogues_}};
    if (plan_.request.precision == Precision::fp16 &&
        plan_.request.mode == Mode::train) {  // no loss in infer
      d["loss_scale"] = loss_scale_;
      d["skipped_steps"] = skipped_steps_;
    }
    if (!warnings_.empty()) d["warnings"] = warnings_;
    return d;
  }

 private:
  // ---- setup
  // ------------------------------------------------------------------------------------------------------
  void setup() {
    BSW_CUDA(cudaSetDevice(device_));
    const uint64_t total = plan_.memory.total_bytes();
    if (options_.memory_limit_bytes && total > *options_.memory_limit_bytes)
      throw OutOfMemory(fmt::format("the plan needs {} ({} bytes), over the memory limit of {}",
                                    format_bytes(total), total, format_bytes(*options_.memory_limit_bytes)));
    // device_used_bytes spans all of prepare: the arena, and whatever the stream, the cuBLASLt handle,
    // cuDNN's graphs and the initialisation kernels take beside it, as a user's nvidia-smi would see.
    // Other batches' cuDNN plans are dropped first: freed inside the window, they would shrink the delta.
    if (cudnn_) cudnn_->retain_batch(batch());
    size_t free_before = 0, device_total = 0;
    BSW_CUDA(cudaMemGetInfo(&free_before, &device_total));
    free_before_ = free_before;
    BSW_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BSW_CUDA(cudaEventCreate(&start_));
    BSW_CUDA(cudaEventCreate(&stop_));
    void* pinned = nullptr;
    BSW_CUDA(cudaMallocHost(&pinned, sizeof(kernels::StepScalars)));
    host_scalars_ = new (pinned) kernels::StepScalars{};

    if (total > free_before)
      throw OutOfMemory(fmt::format("the plan needs {} ({} bytes); the device has {} free of {}",
                                    format_bytes(total), total, format_bytes(free_before),
                                    format_bytes(device_total)));
    // cuDNN's plans for this batch are built before the arena, as they need none of its memory: built after
    // it, at the largest batch that fits, running short would pick a slower engine or read as a rejected
    // shape (and a fallback path), not as this batch's out of memory. What they took is in the free reading
    // the arena is checked against.
    for (const Op& op : graph_.ops) has_attention_ |= op.kind == OpKind::attention_core;
    build_cudnn_graphs();
    size_t free_for_arena = free_before;
    BSW_CUDA(cudaMemGetInfo(&free_for_arena, &device_total));
    if (total > free_for_arena)
      throw OutOfMemory(
          fmt::format("the plan needs {} ({} bytes); the device has {} free of {} after "
                      "cuDNN's plans for this batch",
                      format_bytes(total), total, format_bytes(free_for_arena), format_bytes(device_total)));
    try {
      BSW_CUDA(cudaMalloc(&arena_, std::max<uint64_t>(total, kBufferAlignment)));
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(fmt::format("the plan needs {} ({} bytes); cudaMalloc failed with {} free ({})",
                                    format_bytes(total), total, format_bytes(free_for_arena), e.what()));
    }
    allocated_bytes_ = total;
    // What this process holds beside the arena (its context, a few hundred MiB on a Hopper; cuBLASLt;
    // cuDNN's handle and plans) is in the reading taken when the backend first prepared: memory in use
    // beyond it since is another process's (or a leak). Memory in use at that first reading beyond what a
    // process's own context and libraries take was another process's already.
    const uint64_t in_use_before = device_total - free_before;
    const auto gib = [](uint64_t bytes) {
      return static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30);
    };
    if (in_use_at_start_ > kOtherProcessAtStartBytes)
      warnings_.push_back(fmt::format(
          "{:.1f} GiB of device memory was in use when the sweep began, more than batchsweep's own CUDA "
          "context and libraries take (under {:.0f} GiB): another process or session holds it, so timings "
          "and the largest batch may differ on an idle device",
          gib(in_use_at_start_), gib(kOtherProcessAtStartBytes)));
    if (in_use_before > in_use_at_start_ + kOtherProcessWarnBytes)
      warnings_.push_back(fmt::format(
          "{:.1f} GiB more device memory was in use before prepare than when the sweep began (another "
          "process or session): timings and the largest batch may differ on an idle device",
          gib(in_use_before - in_use_at_start_)));

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
    const Ref ws = need("workspace.cublaslt");
    gemm_ = std::make_unique<Gemm>(plan_.request.precision, ws.ptr, ws.elements * dtype_bytes(ws.dtype));
    scalars_dev_ = static_cast<kernels::StepScalars*>(need("workspace.scalars").ptr);

    for (const char* name : {"gradients", "optimizer.m", "optimizer.v", "optimizer.momentum"})
      if (const Ref r = ref(name))
        BSW_CUDA(cudaMemsetAsync(r.ptr, 0, r.elements * dtype_bytes(r.dtype), stream_));
    initialise_parameters();
    if (plan_.request.mode == Mode::infer || plan_.request.accumulation == 1) fill_data(0);
    BSW_CUDA(cudaStreamSynchronize(stream_));
    note_device_use();
  }

  // device_used_bytes: the most free memory fell since prepare began, read at its end, after the first step
  // (which loads its kernels and cuBLASLt's lazily and may grow the context's local memory) and after a
  // graph's instantiation and upload: what the timed steps hold, as nvidia-smi would show it then. Read
  // outside the timed events, once each.
  void note_device_use() {
    size_t free_now = 0, device_total = 0;
    if (cudaMemGetInfo(&free_now, &device_total) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return;
    }
    if (free_before_ >= free_now)
      device_used_bytes_ = std::max<uint64_t>(device_used_bytes_.value_or(0), free_before_ - free_now);
  }

  void release() noexcept {
    if (stream_ != nullptr) BSW_CUDA_NOEXCEPT(cudaStreamSynchronize(stream_));
    if (graph_exec_ != nullptr) BSW_CUDA_NOEXCEPT(cudaGraphExecDestroy(graph_exec_));
    graph_exec_ = nullptr;
    gemm_.reset();
    if (arena_ != nullptr) BSW_CUDA_NOEXCEPT(cudaFree(arena_));
    arena_ = nullptr;
    if (host_scalars_ != nullptr) BSW_CUDA_NOEXCEPT(cudaFreeHost(host_scalars_));
    host_scalars_ = nullptr;
    if (start_ != nullptr) BSW_CUDA_NOEXCEPT(cudaEventDestroy(start_));
    if (stop_ != nullptr) BSW_CUDA_NOEXCEPT(cudaEventDestroy(stop_));
    start_ = stop_ = nullptr;
    if (cudnn_) cudnn_->detach_stream();
    if (stream_ != nullptr) BSW_CUDA_NOEXCEPT(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }

  [[nodiscard]] Ref ref(const std::string& name) const {
    const auto it = buffers_.find(name);
    return it == buffers_.end() ? Ref{} : it->second;
  }
  [[nodiscard]] Ref need(const std::string& name) const {
    const Ref r = ref(name);
    if (!r) throw BackendError(fmt::format("cuda backend: the plan has no buffer '{}'", name));
    return r;
  }
  // Where op i's output is in training: ops[i].out, or for a residual add in place its input's buffer, which
  // it wrote over (input_of_[i], set by forward before the op runs).
  [[nodiscard]] Ref output_of(size_t i, const Op& op) const {
    if (op.shortcut_result_transient())
      return need(fmt::format("act.shortcut[{}]", op.ends_shortcut)).at(0, n_out(op));
    return op.output_is_input() ? input_of_[i].at(0, n_out(op)) : need(fmt::format("ops[{}].out", i));
  }
  // What an activation's derivative reads as z in training: the saved pre-activation (GELU, SiLU; an add in
  // place keeps it in its input's buffer) or the output (ReLU's z > 0 exactly where its output is; tanh's
  // derivative reads only the output).
  [[nodiscard]] Ref pre_or_out(size_t i, const Op& op) const {
    if (op.preactivation_is_input()) return input_of_[i].at(0, n_out(op));
    return op.saves_preactivation() ? need(fmt::format("ops[{}].pre", i)) : output_of(i, op);
  }
  // dz = dy * act'(z) in place in the gradient buffer, for op i's activation.
  void activation_gradient_in_place(size_t i, const Op& op, const Ref& dy) {
    kernels::activation_backward(op.activation, s_, pre_or_out(i, op).ptr, output_of(i, op).ptr, dy.ptr,
                                 dy.ptr, static_cast<int64_t>(n_out(op)), stream_);
  }
  [[nodiscard]] Ref master() const {
    const Ref m = ref("master_weights");
    return m ? m : need("parameters");
  }
  [[nodiscard]] int64_t batch() const { return plan_.request.batch; }
  [[nodiscard]] uint64_t n_in(const Op& op) const {
    return static_cast<uint64_t>(batch() * op.in_elements());
  }
  [[nodiscard]] uint64_t n_out(const Op& op) const {
    return static_cast<uint64_t>(batch() * op.out_elements());
  }
  [[nodiscard]] Ref params_of(const Op& op) const {
    return need("parameters")
        .at(static_cast<uint64_t>(op.params.front().offset), static_cast<uint64_t>(op.param_elements));
  }
  [[nodiscard]] float* grads_of(const Op& op) const {
    return need("gradients").f32() + op.params.front().offset;
  }

  [[nodiscard]] bool cudnn_conv() const { return plan_.request.paths.conv == ConvPath::cudnn; }
  [[nodiscard]] bool fused_attention() const {
    return plan_.request.paths.attention == AttentionPath::cudnn_sdpa;
  }
  // From the plan, not the arena: the graphs are built before the arena is allocated. The same product the
  // arena's buffer holds (elements x dtype, not the spec's rounded bytes): the graphs are cached by it.
  [[nodiscard]] uint64_t cudnn_workspace_size() const {
    const BufferSpec& ws = plan_.buffer("workspace.cudnn");
    return static_cast<uint64_t>(ws.elements) * dtype_bytes(ws.dtype);
  }

  // Builds this batch's cuDNN graphs now, so neither the first step nor its timing pays for them; a shape
  // cuDNN rejects at this batch throws PathRejected with cuDNN's reason (the sweep then runs our own path).
  void build_cudnn_graphs() {
    if (!cudnn_conv() && !fused_attention()) return;
    if (!cudnn_) throw BackendError("the plan uses cuDNN paths but cuDNN is not available in this backend");
    cudnn_->retain_batch(batch());
    const uint64_t limit = cudnn_workspace_size();
    bool narrow_wgrad = false;
    for (const Op& op : graph_.ops) {
      const bool on_cudnn = (op.kind == OpKind::conv2d && cudnn_conv()) ||
                            (op.kind == OpKind::attention_core && fused_attention());
      if (!on_cudnn) continue;
      const std::string error =
          cudnn_->op_support(graph_, op, batch(), plan_.request.precision, plan_.request.mode, limit);
      if (!error.empty())
        throw PathRejected(op.kind == OpKind::conv2d ? RejectedPath::conv : RejectedPath::attention,
                           fmt::format("{} at batch {}: {}", op.path, batch(), error));
      if (op.kind == OpKind::conv2d && plan_.request.mode == Mode::train &&
          plan_.request.precision == Precision::fp16 &&
          cudnn_->wgrad_dtype(conv_shape(op, batch(), plan_.request.precision), limit) == DType::f16)
        narrow_wgrad = true;
    }
    if (narrow_wgrad)
      warnings_.push_back(
          "cuDNN has no engine here that writes an fp32 weight gradient from fp16 operands: the "
          "convolutions' "
          "weight gradients are fp16, as PyTorch's autocast computes them (one past 65504 is inf, and the "
          "step "
          "is skipped and the loss scale halved, as GradScaler does)");
    cudnn_held_ = cudnn_->hold(batch());
  }

  // The same initialisation as the CPU backend: gamma 1, beta 0, embeddings uniform with std 0.02, weights
  // and biases uniform in +-1/sqrt(Op::fan_in()), one fill stream per parameter tensor in graph order. 16-bit
  // inference keeps no fp32 copy: each op's tensors are drawn into workspace.init, then cast.
  void initialise_parameters() {
    const bool direct = static_cast<bool>(ref("master_weights")) || s_ == DType::f32;
    uint64_t stream_id = 0;
    for (const Op& op : graph_.ops) {
      if (op.params.empty()) continue;
      const int64_t first = op.params.front().offset;
      float* base = direct ? master().f32() : need("workspace.init").f32() - first;
      for (const Op::Param& p : op.params) {
        float* dst = base + p.offset;
        if (p.name == "gamma") {
          kernels::fill_constant(DType::f32, dst, p.elements, 1.0f, stream_);
        } else if (p.name == "beta") {
          kernels::fill_constant(DType::f32, dst, p.elements, 0.0f, stream_);
        } else {
          const float bound = p.name == "tokens" || p.name == "positions"
                                  ? 0.02f * std::sqrt(3.0f)
                                  : 1.0f / std::sqrt(static_cast<float>(op.fan_in()));
          kernels::fill_uniform(DType::f32, dst, p.elements, bound,
                                kernels::fill_key(options_.seed, stream_id), stream_);
        }
        ++stream_id;
      }
      if (!direct)
        kernels::cast(
            DType::f32, base + first, s_,
            need("parameters").at(static_cast<uint64_t>(first), static_cast<uint64_t>(op.param_elements)).ptr,
            op.param_elements, stream_);
    }
    if (direct && s_ != DType::f32)
      kernels::cast(DType::f32, master().ptr, s_, need("parameters").ptr, graph_.parameters, stream_);
    // Batchnorm's running statistics start as PyTorch's: mean 0, variance 1.
    for (size_t i = 0; i < graph_.ops.size(); ++i) {
      if (graph_.ops[i].kind != OpKind::batchnorm) continue;
      const Ref running = need(fmt::format("ops[{}].running", i));
      const int64_t c = graph_.ops[i].channels;
      kernels::fill_constant(DType::f32, running.f32(), c, 0.0f, stream_);
      kernels::fill_constant(DType::f32, running.f32() + c, c, 1.0f, stream_);
    }
  }

  // Synthetic inputs and targets of micro-batch `micro`, indexed by global sample as on the CPU backend.
  void fill_data(int64_t micro) {
    const uint64_t b = static_cast<uint64_t>(batch());
    const uint64_t first_sample = static_cast<uint64_t>(micro) * b;
    const Ref input = need("data.input");
    const uint64_t per_sample = input.elements / b;
    const int64_t n = static_cast<int64_t>(input.elements);
    if (graph_.input_type == InputType::tokens) {
      kernels::fill_data_labels(input.i32(), n, options_.seed, kDataStream, first_sample * per_sample,
                                graph_.ops.front().vocab, stream_);
    } else {
      kernels::fill_data_values(input.dtype, input.ptr, n, options_.seed, kDataStream,
                                first_sample * per_sample, stream_);
    }
    const Ref targets = ref("data.targets");
    if (!targets) return;
    const uint64_t per_sample_targets = targets.elements / b;
    const int64_t nt = static_cast<int64_t>(targets.elements);
    if (graph_.loss == LossType::cross_entropy) {
      kernels::fill_data_labels(targets.i32(), nt, options_.seed, kTargetStream,
                                first_sample * per_sample_targets, graph_.loss_classes, stream_);
    } else {
      kernels::fill_data_values(targets.dtype, targets.ptr, nt, options_.seed, kTargetStream,
                                first_sample * per_sample_targets, stream_);
    }
  }

  // ---- the step's host-side state
  // -------------------------------------------------------------------------------
  void write_step_inputs() {
    kernels::StepScalars& s = *host_scalars_;
    s = kernels::StepScalars{};
    const bool fp16 = plan_.request.precision == Precision::fp16;
    const double scale = fp16 ? loss_scale_ : 1.0;
    s.grad_scale = static_cast<float>(scale / static_cast<double>(plan_.request.accumulation));
    s.inv_loss_scale = static_cast<float>(1.0 / scale);
    const OptimizerSpec& o = graph_.optimizer;
    const int64_t t = optimizer_steps_ + 1;
    s.t = static_cast<int32_t>(std::min<int64_t>(t, std::numeric_limits<int32_t>::max()));
    s.lr = static_cast<float>(o.learning_rate);
    s.momentum = static_cast<float>(o.momentum);
    if (o.type == OptimizerType::sgd) {
      s.sgd_weight_decay = static_cast<float>(o.weight_decay);
      s.nesterov = o.nesterov ? 1 : 0;
    }
    s.beta1 = static_cast<float>(o.beta1);
    s.beta2 = static_cast<float>(o.beta2);
    s.eps = static_cast<float>(o.eps);
    // The CPU reference's arithmetic: fp32 hyperparameters, bias corrections in double.
    const float beta1 = s.beta1, beta2 = s.beta2, lr = s.lr;
    const double td = static_cast<double>(t);
    const float bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), td));
    s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), td)));
    s.step_size = lr / bias_correction1;
    s.decay = 1.0f - lr * static_cast<float>(o.weight_decay);
  }

  void finish_train_step(StepResult& r) {
    const bool fp16 = plan_.request.precision == Precision::fp16;
    if (!fp16 && !std::isfinite(r.loss)) {
      r.finite = false;
      return;
    }
    if (host_scalars_->nonfinite != 0) {
      if (fp16) {
        r.skipped = true;
        ++skipped_steps_;
        if (loss_scale_ <= 1.0) r.finite = false;  // as the CPU reference: no lower scale can absorb it
        loss_scale_ = std::max(1.0, loss_scale_ / 2);
        clean_steps_ = 0;
      } else {
        r.finite = false;
      }
      return;
    }
    if (fp16 && ++clean_steps_ >= kLossScaleGrowthInterval) {
      loss_scale_ *= 2;
      clean_steps_ = 0;
    }
    ++optimizer_steps_;
  }

  // ---- CUDA graph
  // ------------------------------------------------------------------------------------------------
  // The point runs on plain launches: said in details and as a warning, since its steps then pay the launch
  // overhead the others' graph replays do not.
  void capture_failed(const std::string& why) {
    graph_status_ = fmt::format("capture failed, plain launches: {}", why);
    // One text for every point it happens to (the sweep says each session warning once); the points are
    // those whose execution.cuda_graphs says "capture failed".
    warnings_.push_back(fmt::format(
        "CUDA graph capture failed, so those points' steps are timed as plain launches, with launch overhead "
        "the graph replays of other points do not have (execution.cuda_graphs names them): {}",
        why));
  }

  void capture_graph() {
    cudaGraph_t graph = nullptr;
    const cudaError_t begin = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (begin != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      capture_failed(fmt::format("cudaStreamBeginCapture: {}", cudaGetErrorString(begin)));
      return;
    }
    try {
      body();
    } catch (const std::exception& e) {
      static_cast<void>(cudaStreamEndCapture(stream_, &graph));
      if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
      static_cast<void>(cudaGetLastError());
      capture_failed(e.what());
      return;
    }
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (end != cudaSuccess || graph == nullptr) {
      if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
      static_cast<void>(cudaGetLastError());
      capture_failed(fmt::format("cudaStreamEndCapture: {}", cudaGetErrorString(end)));
      return;
    }
    const cudaError_t instantiated = cudaGraphInstantiate(&graph_exec_, graph, 0);
    static_cast<void>(cudaGraphDestroy(graph));
    if (instantiated != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      graph_exec_ = nullptr;
      capture_failed(fmt::format("cudaGraphInstantiate: {}", cudaGetErrorString(instantiated)));
      return;
    }
    // Uploaded now, so the first replay (a timed step) does not pay for it.
    if (cudaGraphUpload(graph_exec_, stream_) != cudaSuccess) static_cast<void>(cudaGetLastError());
    graph_status_ = "captured";
  }

  // Everything between the step's two events: what the graph captures.
  void body() {
    if (plan_.request.mode == Mode::infer) {
      last_output_ = forward();  // where every replay of a captured step leaves it too
      return;
    }
    const Ref grads = need("gradients");
    BSW_CUDA(cudaMemsetAsync(grads.ptr, 0, grads.elements * sizeof(float), stream_));
    const int64_t accumulation = plan_.request.accumulation;
    // Every micro-batch's data is written inside the step, one accumulation or many, as a training loop
    // copies each batch in: the splits of one effective batch then write the same samples a step (1024x1
    // wrote none where 128x8 wrote eight micro-batches, a difference in their times that was not theirs).
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      fill_data(micro);
      const Ref output = forward();
      last_output_ = output;
      loss_and_gradient(output);
      backward();
    }
    // fp16 unscales the gradients and skips the update on an overflow, as GradScaler does. The other
    // precisions do as a framework without a scaler does: no pass over the gradients (8 bytes a parameter
    // each step, ~10% of a small-batch gpt2-small step); a non-finite loss ends the point
    // (finish_train_step).
    if (plan_.request.precision == Precision::fp16)
      kernels::unscale_and_check(grads.f32(), graph_.parameters, scalars_dev_, stream_);
    optimizer();
  }

  void optimizer() {
    const Ref m = master();
    const Ref params = need("parameters");
    const float* g = need("gradients").f32();
    const int64_t p = graph_.parameters;
    if (graph_.optimizer.type == OptimizerType::adamw) {
      kernels::adamw(m.f32(), params.ptr, s_, g, need("optimizer.m").f32(), need("optimizer.v").f32(), p,
                     scalars_dev_, stream_);
    } else {
      kernels::sgd(m.f32(), params.ptr, s_, g, ref("optimizer.momentum").f32(), p, scalars_dev_, stream_);
    }
  }

  // ---- forward
  // ----------------------------------------------------------------------------------------------------
  Ref forward() {
    const bool train = plan_.request.mode == Mode::train;
    residual_stack_.clear();
    return forward_ops(0, graph_.ops.size(), need("data.input"), train);
  }

  // Checkpointing: a block's forward again, from its input (kept) into the same buffers as the forward pass
  // used (its activations' views in the recompute arena, where the later blocks' have been since), just
  // before its backward reads them. Torch's checkpoint recomputes the same way. A block starts outside every
  // residual, so its residuals' stack starts empty.
  void recompute(const Graph::Block& block) {
    recomputing_ = true;
    residual_stack_.clear();
    forward_ops(block.first, block.last + 1, input_of_[block.first], true);
    recomputing_ = false;
  }

  // Ops [first, end) from `current`, their input; returns the buffer holding the last one's output.
  Ref forward_ops(size_t first, size_t end, Ref current, bool train) {
    // The plan sizes each to what the ops writing it hold: one no op writes (a single layer) is absent.
    const Ref ping = train ? Ref{} : ref("act.a");
    const Ref pong = train ? Ref{} : ref("act.b");
    for (size_t i = first; i < end; ++i) {
      const Op& op = graph_.ops[i];
      input_of_[i] = current;
      if (op.kind == OpKind::residual_save) {
        if (train) {
          residual_stack_.push_back(current);
        } else {
          const Ref stash = need(fmt::format("act.residual[{}]", op.residual_depth));
          // The input is in act.residual already, where the op before wrote it (Op::writes_residual), or
          // copied there; the residual's ops read it there, so the first writes act.a (the plan's
          // ping_pong_activations): a block's largest output lands in the same buffer each time.
          if (op.save_copies)
            BSW_CUDA(cudaMemcpyAsync(stash.ptr, current.ptr, n_in(op) * dtype_bytes(current.dtype),
                                     cudaMemcpyDeviceToDevice, stream_));
          current = stash.at(0, n_in(op));
          residual_stack_.push_back(current);
        }
        continue;
      }
      if (op.kind == OpKind::residual_branch) {
        // The add will add the shortcut's result; the inner ops start again from the residual's input.
        const Ref input = residual_stack_.back();
        residual_stack_.back() = current;
        current = input;
        continue;
      }
      // Inference: a shortcut's result waits for the add in act.shortcut; a residual's sum, and the input of
      // the residual an op opens, go to act.residual (Op::writes_residual); the rest ping-pong.
      Ref out = train ? output_of(i, op)
                : op.ends_shortcut >= 0
                    ? need(fmt::format("act.shortcut[{}]", op.ends_shortcut)).at(0, n_out(op))
                : op.writes_residual >= 0
                    ? need(fmt::format("act.residual[{}]", op.writes_residual)).at(0, n_out(op))
                    : (current.ptr == ping.ptr ? pong : ping).at(0, n_out(op));
      forward_op(i, op, current, out, train);
      current = out;
    }
    return current;
  }

  void forward_op(size_t i, const Op& op, const Ref& in, const Ref& out, bool train) {
    const int64_t b = batch();
    const Ref w = op.param_elements > 0 ? params_of(op) : Ref{};
    // The pre-activation: saved in training where backward needs it (GELU, SiLU); elsewhere the output
    // itself (the activation runs in place there: a training ReLU's or tanh's backward reads the output, and
    // inference keeps no pre-activation), as a fused epilogue would.
    Ref z;
    if (op.has_preactivation()) z = train ? pre_or_out(i, op) : out;
    switch (op.kind) {
      case OpKind::linear:
        linear_forward(op, in, w, z, out, train);
        return;
      case OpKind::conv2d:
        conv_forward(op, in, w, z, out);
        return;
      case OpKind::maxpool2d:
        kernels::maxpool_forward(s_, pool(op), in.ptr, out.ptr, stream_);
        return;
      case OpKind::avgpool2d:
        kernels::avgpool_forward(s_, pool(op), in.ptr, out.ptr, stream_);
        return;
      case OpKind::global_avgpool:
        kernels::global_avgpool_forward(s_, in.ptr, out.ptr, b, op.channels, op.spatial, op.tokens_layout,
                                        stream_);
        return;
      case OpKind::layernorm: {
        const Ref stats = train ? need(fmt::format("ops[{}].stats", i)) : need("act.stats");
        const int64_t rows = b * op.rows;
        kernels::layernorm_forward(s_, in.ptr, w.ptr, w.at(static_cast<uint64_t>(op.dim), 0).ptr, out.ptr,
                                   stats.f32(), stats.f32() + rows, rows, op.dim, stream_);
        return;
      }
      case OpKind::batchnorm: {
        // Normalized into the pre-activation where there is one (or the output), then the activation.
        const Ref normalized = op.has_preactivation() ? z : out;
        const Ref running = need(fmt::format("ops[{}].running", i));
        const int64_t c = op.channels;
        const void* beta = w.at(static_cast<uint64_t>(c), 0).ptr;
        if (train) {
          const Ref stats = need(fmt::format("ops[{}].stats", i));
          // Recomputing, it normalizes as before without moving the running statistics a second time.
          kernels::batchnorm_statistics(s_, in.ptr, stats.f32(), stats.f32() + c,
                                        recomputing_ ? nullptr : running.f32(),
                                        recomputing_ ? nullptr : running.f32() + c, b, c, op.spatial,
                                        kBatchNormMomentum, need("workspace.batchnorm").f32(), stream_);
          kernels::batchnorm_apply(s_, in.ptr, w.ptr, beta, stats.f32(), stats.f32() + c, false,
                                   normalized.ptr, b, c, op.spatial, stream_);
        } else {
          kernels::batchnorm_apply(s_, in.ptr, w.ptr, beta, running.f32(), running.f32() + c, true,
                                   normalized.ptr, b, c, op.spatial, stream_);
        }
        if (op.has_preactivation())
          kernels::activation_forward(op.activation, s_, normalized.ptr, out.ptr,
                                      static_cast<int64_t>(n_out(op)), stream_);
        return;
      }
      case OpKind::embedding:
        kernels::embedding_forward(s_, in.i32(), w.ptr, w.at(static_cast<uint64_t>(op.vocab * op.dim), 0).ptr,
                                   out.ptr, b, op.seq, op.dim, stream_);
        return;
      case OpKind::patch_embedding:
        patch_forward(op, in, w, out);
        return;
      case OpKind::attention_core:
        if (fused_attention()) {
          sdpa_forward(i, op, in, out, train);
        } else {
          attention_forward(op, in, train ? need(fmt::format("ops[{}].probs", i)) : need("act.probs"), out);
        }
        return;
      case OpKind::residual_add: {
        if (residual_stack_.empty())
          throw BackendError(fmt::format("{}: residual_add without a save", op.path));
        const Ref res = residual_stack_.back();
        residual_stack_.pop_back();
        // The sum into the pre-activation where there is one (or the output), then the activation.
        const Ref sum = op.has_preactivation() ? z : out;
        kernels::add(s_, in.ptr, res.ptr, sum.ptr, static_cast<int64_t>(n_out(op)), stream_);
        if (op.has_preactivation())
          kernels::activation_forward(op.activation, s_, sum.ptr, out.ptr, static_cast<int64_t>(n_out(op)),
                                      stream_);
        return;
      }
      case OpKind::residual_save:
      case OpKind::residual_branch:
        return;
    }
  }

  [[nodiscard]] kernels::PoolGeometry pool(const Op& op) const {
    return {batch(),   op.channels,   op.height,    op.width,  op.kernel,
            op.stride, op.out_height, op.out_width, op.padding};
  }
  [[nodiscard]] static kernels::ConvGeometry conv(const Op& op) {
    return {op.channels, op.height, op.width, op.kernel, op.stride, op.padding, op.out_height, op.out_width};
  }

  // Samples per im2col chunk: as many as workspace.im2col (and workspace.conv_out for conv2d) hold.
  [[nodiscard]] int64_t conv_chunk(const Op& op, bool with_conv_out) const {
    const kernels::ConvGeometry g = conv(op);
    const uint64_t per_col = static_cast<uint64_t>(g.patch() * g.spatial());
    uint64_t chunk = need("workspace.im2col").elements / per_col;
    if (with_conv_out)
      chunk = std::min(
          chunk, need("workspace.conv_out").elements / static_cast<uint64_t>(op.out_channels * g.spatial()));
    chunk = std::min<uint64_t>(chunk, static_cast<uint64_t>(batch()));
    if (chunk < 1)
      throw BackendError(fmt::format("{}: the planned im2col workspace cannot hold one sample", op.path));
    return static_cast<int64_t>(chunk);
  }

  void linear_forward(const Op& op, const Ref& in, const Ref& w, const Ref& z, const Ref& out, bool train) {
    const int64_t m = batch() * op.rows, k = op.in_features, n = op.out_features;
    GemmArgs g;
    g.trans_b = true;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = in.ptr;
    g.lda = k;
    g.b = w.ptr;
    g.ldb = k;
    g.ldc = n;
    g.ab_type = g.c_type = s_;
    const void* bias = op.bias ? w.at(static_cast<uint64_t>(k * n), 0).ptr : nullptr;
    const bool fuse_gelu = op.activation == Activation::gelu && bias != nullptr && s_ != DType::f32 &&
                           Gemm::gelu_epilogue_supported(n, out.ptr, train ? z.ptr : nullptr);
    if (fuse_gelu) {
      GemmArgs fused = g;
      fused.c = out.ptr;
      fused.bias = bias;
      if (train) {
        fused.epilogue = Epilogue::gelu_aux_bias;
        fused.aux = z.ptr;
        fused.ld_aux = n;
      } else {
        fused.epilogue = Epilogue::gelu_bias;
      }
      if (fused_gemm_available(fused)) {
        gelu_epilogue_used_ = true;
        gemm_->run(fused, stream_);
        return;
      }
    }
    g.c = op.has_preactivation() ? z.ptr : out.ptr;
    run_with_bias(g, bias);
    if (op.has_preactivation())
      kernels::activation_forward(op.activation, s_, z.ptr, out.ptr, m * n, stream_);
  }

  // C = op(A) op(B) (+ bias[N] on every row when bias is not null): the BIAS epilogue, or where cuBLASLt has
  // no algorithm for it, the plain product and a bias kernel.
  void run_with_bias(GemmArgs g, const void* bias) {
    if (bias != nullptr) {
      GemmArgs fused = g;
      fused.epilogue = Epilogue::bias;
      fused.bias = bias;
      if (fused_gemm_available(fused)) {
        gemm_->run(fused, stream_);
        return;
      }
    }
    gemm_->run(g, stream_);
    if (bias == nullptr) return;
    if (g.ldc != g.n) throw BackendError("run_with_bias: the bias kernel needs C's rows packed (ldc = N)");
    kernels::bias_add_nchw(s_, g.c, bias, g.m, g.n, 1, stream_);
  }

  // Whether cuBLASLt has an algorithm for a fused epilogue here; where it has none, the caller runs the plain
  // product and separate kernels (the CPU reference's sequence), and the report says so.
  bool fused_gemm_available(const GemmArgs& g) {
    if (gemm_->available(g)) return true;
    unfused_epilogues_.insert(
        fmt::format("{} {}x{}x{} {}", epilogue_name(g.epilogue), g.m, g.n, g.k, to_string(g.ab_type)));
    return false;
  }

  void conv_forward(const Op& op, const Ref& in, const Ref& w, const Ref& z, const Ref& out) {
    if (cudnn_conv()) {
      cudnn_conv_forward(op, in, w, z, out);
      return;
    }
    const kernels::ConvGeometry geo = conv(op);
    const int64_t hw = geo.spatial(), patch = geo.patch(), cout = op.out_channels;
    const int64_t chunk = conv_chunk(op, true);
    const Ref col = need("workspace.im2col"), perm = need("workspace.conv_out");
    const Ref target = op.has_preactivation() ? z : out;
    const void* bias = op.bias ? w.at(static_cast<uint64_t>(cout * patch), 0).ptr : nullptr;
    const uint64_t in_sample = static_cast<uint64_t>(op.in_elements()),
                   out_sample = static_cast<uint64_t>(cout * hw);
    for (int64_t n0 = 0; n0 < batch(); n0 += chunk) {
      const int64_t c = std::min(chunk, batch() - n0);
      kernels::im2col(s_, geo, in.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, col.ptr, c, stream_);
      GemmArgs g;  // perm[cout, c*HW] = W[cout, CKK] col[CKK, c*HW]
      g.m = cout;
      g.n = c * hw;
      g.k = patch;
      g.a = w.ptr;
      g.lda = patch;
      g.b = col.ptr;
      g.ldb = c * hw;
      g.c = perm.ptr;
      g.ldc = c * hw;
      g.ab_type = g.c_type = s_;
      gemm_->run(g, stream_);
      kernels::channels_to_nchw(s_, perm.ptr, bias, target.at(static_cast<uint64_t>(n0) * out_sample, 0).ptr,
                                c, cout, hw, stream_);
    }
    if (op.has_preactivation())
      kernels::activation_forward(op.activation, s_, z.ptr, out.ptr, static_cast<int64_t>(n_out(op)),
                                  stream_);
  }

  // y = conv(x, W) by cuDNN straight into NCHW, then the bias and the activation.
  void cudnn_conv_forward(const Op& op, const Ref& in, const Ref& w, const Ref& z, const Ref& out) {
    const Ref target = op.has_preactivation() ? z : out;
    const Ref ws = need("workspace.cudnn");
    cudnn_->conv(ConvPass::fprop, conv_shape(op, batch(), plan_.request.precision), in.ptr, w.ptr, target.ptr,
                 ws.ptr, cudnn_workspace_size(), stream_);
    if (op.bias)
      kernels::bias_add_nchw(s_, target.ptr,
                             w.at(static_cast<uint64_t>(op.out_channels * conv(op).patch()), 0).ptr, batch(),
                             op.out_channels, op.out_height * op.out_width, stream_);
    if (op.has_preactivation())
      kernels::activation_forward(op.activation, s_, z.ptr, out.ptr, static_cast<int64_t>(n_out(op)),
                                  stream_);
  }

  void patch_forward(const Op& op, const Ref& in, const Ref& w, const Ref& out) {
    const kernels::ConvGeometry geo = conv(op);
    const int64_t count = geo.spatial(), patch = geo.patch(), dim = op.dim;
    const int64_t chunk = conv_chunk(op, false);
    const Ref col = need("workspace.im2col");
    const uint64_t in_sample = static_cast<uint64_t>(op.in_elements()),
                   out_sample = static_cast<uint64_t>(count * dim);
    for (int64_t n0 = 0; n0 < batch(); n0 += chunk) {
      const int64_t c = std::min(chunk, batch() - n0);
      kernels::im2col(s_, geo, in.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, col.ptr, c, stream_);
      GemmArgs g;  // y[c*N, D] = col^T [c*N, CPP] W^T [CPP, D] + b
      g.trans_a = true;
      g.trans_b = true;
      g.m = c * count;
      g.n = dim;
      g.k = patch;
      g.a = col.ptr;
      g.lda = c * count;
      g.b = w.ptr;
      g.ldb = patch;
      g.c = out.at(static_cast<uint64_t>(n0) * out_sample, 0).ptr;
      g.ldc = dim;
      g.ab_type = g.c_type = s_;
      run_with_bias(g, w.at(static_cast<uint64_t>(dim * patch), 0).ptr);
    }
    kernels::add_positions(s_, out.ptr, w.at(static_cast<uint64_t>(dim * patch + dim), 0).ptr, batch(),
                           count * dim, stream_);
  }

  // Strided-batched GEMM over the B*heads attention matrices (row-major, [T, T] and [T, hd] blocks).
  void attention_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                      int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
                      int64_t stride_c, DType c_type, float alpha, int64_t count) {
    GemmArgs g;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.lda = lda;
    g.stride_a = stride_a;
    g.b = b;
    g.ldb = ldb;
    g.stride_b = stride_b;
    g.c = c;
    g.ldc = ldc;
    g.stride_c = stride_c;
    g.ab_type = s_;
    g.c_type = c_type;
    g.alpha = alpha;
    g.batch = count;
    gemm_->run(g, stream_);
  }

  struct AttentionViews {
    int64_t t, hd, bh;
    float scale;
    Ref q, k, v;
  };
  AttentionViews attention_views(const Op& op) const {
    const int64_t t = op.seq, hd = op.dim / op.heads, bh = batch() * op.heads;
    const uint64_t part = static_cast<uint64_t>(batch() * t * op.dim);
    const Ref qkv = need("workspace.qkv");
    return {t,
            hd,
            bh,
            1.0f / std::sqrt(static_cast<float>(hd)),
            qkv.at(0, part),
            qkv.at(part, part),
            qkv.at(2 * part, part)};
  }

  void attention_forward(const Op& op, const Ref& in, const Ref& probs, const Ref& out) {
    const AttentionViews a = attention_views(op);
    const int64_t t = a.t, hd = a.hd;
    kernels::split_heads(s_, in.ptr, a.q.ptr, batch(), t, 3, op.heads, hd, stream_);
    const Ref scores = need("workspace.attention");
    attention_gemm(false, true, t, t, hd, a.q.ptr, hd, t * hd, a.k.ptr, hd, t * hd, scores.ptr, t, t * t,
                   DType::f32, a.scale, a.bh);
    kernels::softmax_forward(s_, scores.f32(), probs.ptr, a.bh * t, t, op.causal, stream_);
    const Ref o = need("workspace.attn_o");
    attention_gemm(false, false, t, hd, t, probs.ptr, t, t * t, a.v.ptr, hd, t * hd, o.ptr, hd, t * hd, s_,
                   1.0f, a.bh);
    kernels::merge_heads(s_, o.ptr, out.ptr, batch(), t, 1, op.heads, hd, stream_);
  }

  // Fused attention: q, k and v are strided views of the op's [B, T, 3, heads, hd] input and the output is
  // written [B, T, heads, hd]; no head-major copies, no [T, T] matrices.
  void sdpa_forward(size_t i, const Op& op, const Ref& in, const Ref& out, bool train) {
    const auto d = static_cast<uint64_t>(op.dim);
    const Ref ws = need("workspace.cudnn");
    cudnn_->sdpa_forward(sdpa_shape(op, batch(), s_, train), in.ptr, in.at(d, 0).ptr, in.at(2 * d, 0).ptr,
                         out.ptr, train ? need(fmt::format("ops[{}].stats", i)).f32() : nullptr, ws.ptr,
                         cudnn_workspace_size(), stream_);
  }

  // ---- loss and backward
  // --------------------------------------------------------------------------------------------
  void loss_and_gradient(const Ref& output) {
    const Ref grad = need("grad.a");
    // workspace.loss: the mean's partial sums (kLossPartials doubles), then a loss per row or element.
    const Ref loss = need("workspace.loss");
    constexpr uint64_t kPartialFloats = 2 * kernels::kLossPartials;
    const int64_t n = graph_.loss == LossType::cross_entropy ? batch() * graph_.loss_rows
                                                             : static_cast<int64_t>(output.elements);
    if (loss.elements < kPartialFloats + static_cast<uint64_t>(n))
      throw BackendError("cuda backend: workspace.loss is smaller than the loss needs");
    auto* partials = static_cast<double*>(loss.ptr);
    float* row_loss = loss.f32() + kPartialFloats;
    if (graph_.loss == LossType::cross_entropy) {
      kernels::cross_entropy(s_, output.ptr, need("data.targets").i32(), grad.ptr, row_loss, n,
                             graph_.loss_classes, scalars_dev_, stream_);
    } else {
      kernels::mse(s_, output.ptr, need("data.targets").ptr, grad.ptr, row_loss, n, scalars_dev_, stream_);
    }
    kernels::accumulate_mean_loss(row_loss, n, partials, scalars_dev_, stream_);
  }

  void backward() {
    std::fill(dgelu_done_.begin(), dgelu_done_.end(), false);
    // Ping-pong: the plan sizes each to what it holds (grad.b is absent when no op has an input gradient).
    Ref current = need("grad.a");
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
        BSW_CUDA(cudaMemcpyAsync(stash.ptr, current.at(0, n_out(op)).ptr, n_out(op) * dtype_bytes(s_),
                                 cudaMemcpyDeviceToDevice, stream_));
        continue;
      }
      if (op.kind == OpKind::residual_branch) {
        // The inner path's gradient of the residual's input waits for the save; the shortcut's backward
        // starts from the add's output gradient.
        if (!graph_.ops[op.residual_partner].residual_without_gradient) {
          const Ref keep = need(fmt::format("grad.branch[{}]", op.residual_depth));
          BSW_CUDA(cudaMemcpyAsync(keep.ptr, current.at(0, n_out(op)).ptr, n_out(op) * dtype_bytes(s_),
                                   cudaMemcpyDeviceToDevice, stream_));
        }
        const Ref stash = need(fmt::format("grad.residual[{}]", op.residual_depth));
        BSW_CUDA(cudaMemcpyAsync(current.at(0, n_in(op)).ptr, stash.ptr, n_in(op) * dtype_bytes(s_),
                                 cudaMemcpyDeviceToDevice, stream_));
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
        const Ref sum = current.at(0, n_in(op));
        kernels::add(s_, sum.ptr, stash.ptr, sum.ptr, static_cast<int64_t>(n_in(op)), stream_);
        continue;
      }
      if (need_dx && !other) throw BackendError("cuda backend: the plan has no buffer 'grad.b'");
      backward_op(i, op, in, current, need_dx ? other.at(0, n_in(op)) : Ref{});
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

  void backward_op(size_t i, const Op& op, const Ref& in, const Ref& dy, const Ref& dx) {
    const int64_t b = batch();
    const Ref w = op.param_elements > 0 ? params_of(op) : Ref{};
    float* dw = op.param_elements > 0 ? grads_of(op) : nullptr;
    switch (op.kind) {
      case OpKind::linear:
        linear_backward(i, op, in, w, dy, dx, dw);
        return;
      case OpKind::conv2d:
        conv_backward(i, op, in, w, dy, dx, dw);
        return;
      case OpKind::maxpool2d:
        if (dx) kernels::maxpool_backward(s_, pool(op), in.ptr, dy.ptr, dx.ptr, stream_);
        return;
      case OpKind::avgpool2d:
        if (dx) kernels::avgpool_backward(s_, pool(op), dy.ptr, dx.ptr, stream_);
        return;
      case OpKind::global_avgpool:
        if (dx)
          kernels::global_avgpool_backward(s_, dy.ptr, dx.ptr, b, op.channels, op.spatial, op.tokens_layout,
                                           stream_);
        return;
      case OpKind::layernorm: {
        const Ref stats = need(fmt::format("ops[{}].stats", i));
        const int64_t rows = b * op.rows;
        kernels::layernorm_backward(s_, in.ptr, w.ptr, stats.f32(), stats.f32() + rows, dy.ptr, dx.ptr, dw,
                                    dw + op.dim, rows, op.dim, stream_);
        return;
      }
      case OpKind::batchnorm: {
        if (op.has_preactivation()) activation_gradient_in_place(i, op, dy);
        const Ref stats = need(fmt::format("ops[{}].stats", i));
        const int64_t c = op.channels;
        kernels::batchnorm_backward(s_, in.ptr, w.ptr, stats.f32(), stats.f32() + c, dy.ptr, dx.ptr, dw,
                                    dw + c, b, c, op.spatial, need("workspace.batchnorm").f32(), stream_);
        return;
      }
      case OpKind::embedding:
        kernels::embedding_backward(s_, in.i32(), dy.ptr, dw, dw + op.vocab * op.dim, b, op.seq, op.dim,
                                    stream_);
        return;
      case OpKind::patch_embedding:
        patch_backward(op, in, w, dy, dx, dw);
        return;
      case OpKind::attention_core:
        if (dx && fused_attention()) {
          sdpa_backward(i, op, in, dy, dx);
        } else if (dx) {
          attention_backward(i, op, in, dy, dx);
        }
        return;
      case OpKind::residual_save:
      case OpKind::residual_add:
      case OpKind::residual_branch:
        return;
    }
  }

  void linear_backward(size_t i, const Op& op, const Ref& in, const Ref& w, const Ref& dy, const Ref& dx,
                       float* dw) {
    const int64_t m = batch() * op.rows, k = op.in_features, n = op.out_features;
    if (dgelu_done_[i]) {
      // The next linear's GEMM already turned dy into dz and summed the bias gradient (DGELU_BGRAD).
    } else if (op.has_preactivation()) {
      activation_gradient_in_place(i, op, dy);
    }
    GemmArgs gw;  // dW[N, K] += dz^T [N, M] x [M, K]
    gw.trans_a = true;
    gw.m = n;
    gw.n = k;
    gw.k = m;
    gw.a = dy.ptr;
    gw.lda = n;
    gw.b = in.ptr;
    gw.ldb = k;
    gw.c = dw;
    gw.ldc = k;
    gw.ab_type = s_;
    gw.c_type = DType::f32;
    gw.beta = 1.0f;
    gemm_->run(gw, stream_);
    if (op.bias && !dgelu_done_[i]) kernels::column_sum_accumulate(s_, dy.ptr, dw + k * n, m, n, stream_);
    if (!dx) return;
    GemmArgs gx;  // dx[M, K] = dz[M, N] W[N, K]
    gx.m = m;
    gx.n = k;
    gx.k = n;
    gx.a = dy.ptr;
    gx.lda = n;
    gx.b = w.ptr;
    gx.ldb = k;
    gx.c = dx.ptr;
    gx.ldc = k;
    gx.ab_type = gx.c_type = s_;
    const Op* prev = i > 0 ? &graph_.ops[i - 1] : nullptr;
    const Ref bgrad = ref("workspace.bgrad");
    const bool fuse = bgrad && prev != nullptr && prev->kind == OpKind::linear &&
                      prev->activation == Activation::gelu && prev->bias &&
                      Gemm::gelu_epilogue_supported(k, dx.ptr, need(fmt::format("ops[{}].pre", i - 1)).ptr);
    if (!fuse) {
      gemm_->run(gx, stream_);
      return;
    }
    // dx becomes the previous linear's dz = (dz W) * gelu'(z_prev); its bias gradient lands in
    // workspace.bgrad, in the storage dtype (cuBLASLt writes bias gradients in C's type). In fp16 a large
    // loss-scaled sum can overflow there and skip the step, as PyTorch's autocast does with its fp16 bias
    // gradient; dynamic loss scaling then halves the scale.
    GemmArgs fused = gx;
    fused.epilogue = Epilogue::dgelu_bgrad;
    fused.aux = need(fmt::format("ops[{}].pre", i - 1)).ptr;
    fused.ld_aux = k;
    fused.bias = bgrad.ptr;
    if (!fused_gemm_available(fused)) {
      gemm_->run(gx, stream_);  // the previous linear's backward applies gelu' and sums its bias gradient
      return;
    }
    gemm_->run(fused, stream_);
    kernels::accumulate_f32(s_, bgrad.ptr, grads_of(*prev) + prev->in_features * prev->out_features, k,
                            stream_);
    dgelu_done_[i - 1] = true;
    dgelu_epilogue_used_ = true;
  }

  void conv_backward(size_t i, const Op& op, const Ref& in, const Ref& w, const Ref& dy, const Ref& dx,
                     float* dw) {
    const kernels::ConvGeometry geo = conv(op);
    const int64_t hw = geo.spatial(), patch = geo.patch(), cout = op.out_channels;
    if (op.has_preactivation()) activation_gradient_in_place(i, op, dy);
    if (op.bias) kernels::channel_sum_accumulate(s_, dy.ptr, dw + cout * patch, batch(), cout, hw, stream_);
    if (cudnn_conv()) {
      cudnn_conv_backward(op, in, w, dy, dx, dw);
      return;
    }
    const int64_t chunk = conv_chunk(op, true);
    const Ref col = need("workspace.im2col"), perm = need("workspace.conv_out");
    const uint64_t in_sample = static_cast<uint64_t>(op.in_elements()),
                   out_sample = static_cast<uint64_t>(cout * hw);
    for (int64_t n0 = 0; n0 < batch(); n0 += chunk) {
      const int64_t c = std::min(chunk, batch() - n0);
      kernels::nchw_to_channels(s_, dy.at(static_cast<uint64_t>(n0) * out_sample, 0).ptr, perm.ptr, c, cout,
                                hw, stream_);
      kernels::im2col(s_, geo, in.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, col.ptr, c, stream_);
      GemmArgs gw;  // dW[cout, CKK] += g[cout, c*HW] col^T [c*HW, CKK]
      gw.trans_b = true;
      gw.m = cout;
      gw.n = patch;
      gw.k = c * hw;
      gw.a = perm.ptr;
      gw.lda = c * hw;
      gw.b = col.ptr;
      gw.ldb = c * hw;
      gw.c = dw;
      gw.ldc = patch;
      gw.ab_type = s_;
      gw.c_type = DType::f32;
      gw.beta = 1.0f;
      gemm_->run(gw, stream_);
      if (!dx) continue;
      GemmArgs gx;  // dcol[CKK, c*HW] = W^T [CKK, cout] g[cout, c*HW]
      gx.trans_a = true;
      gx.m = patch;
      gx.n = c * hw;
      gx.k = cout;
      gx.a = w.ptr;
      gx.lda = patch;
      gx.b = perm.ptr;
      gx.ldb = c * hw;
      gx.c = col.ptr;
      gx.ldc = c * hw;
      gx.ab_type = gx.c_type = s_;
      gemm_->run(gx, stream_);
      kernels::col2im(s_, geo, col.ptr, dx.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, c, stream_);
    }
  }

  // cuDNN wgrad writes the batch's weight gradient (storage dtype) to workspace.conv_dw, which is added to
  // the fp32 gradients (they accumulate over micro-batches); dgrad writes dx.
  void cudnn_conv_backward(const Op& op, const Ref& in, const Ref& w, const Ref& dy, const Ref& dx,
                           float* dw) {
    const ConvShape shape = conv_shape(op, batch(), plan_.request.precision);
    const Ref ws = need("workspace.cudnn");
    // Sized fp32 for fp16 (cuDNN writes fp32 there where an engine takes it, else fp16), else storage.
    const Ref dw_batch = need("workspace.conv_dw");
    const int64_t weights = op.out_channels * conv(op).patch();
    const DType written = cudnn_->conv(ConvPass::wgrad, shape, in.ptr, dw_batch.ptr, dy.ptr, ws.ptr,
                                       cudnn_workspace_size(), stream_);
    kernels::accumulate_f32(written, dw_batch.ptr, dw, weights, stream_);
    if (dx)
      cudnn_->conv(ConvPass::dgrad, shape, dx.ptr, w.ptr, dy.ptr, ws.ptr, cudnn_workspace_size(), stream_);
  }

  void patch_backward(const Op& op, const Ref& in, const Ref& w, const Ref& dy, const Ref& dx, float* dw) {
    const kernels::ConvGeometry geo = conv(op);
    const int64_t count = geo.spatial(), patch = geo.patch(), dim = op.dim;
    kernels::column_sum_accumulate(s_, dy.ptr, dw + dim * patch, batch() * count, dim, stream_);
    kernels::column_sum_accumulate(s_, dy.ptr, dw + dim * patch + dim, batch(), count * dim, stream_);
    const int64_t chunk = conv_chunk(op, false);
    const Ref col = need("workspace.im2col");
    const uint64_t in_sample = static_cast<uint64_t>(op.in_elements()),
                   out_sample = static_cast<uint64_t>(count * dim);
    for (int64_t n0 = 0; n0 < batch(); n0 += chunk) {
      const int64_t c = std::min(chunk, batch() - n0);
      const void* dy_chunk = dy.at(static_cast<uint64_t>(n0) * out_sample, 0).ptr;
      kernels::im2col(s_, geo, in.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, col.ptr, c, stream_);
      GemmArgs gw;  // dW[D, CPP] += dy^T [D, c*N] col^T [c*N, CPP]
      gw.trans_a = true;
      gw.trans_b = true;
      gw.m = dim;
      gw.n = patch;
      gw.k = c * count;
      gw.a = dy_chunk;
      gw.lda = dim;
      gw.b = col.ptr;
      gw.ldb = c * count;
      gw.c = dw;
      gw.ldc = patch;
      gw.ab_type = s_;
      gw.c_type = DType::f32;
      gw.beta = 1.0f;
      gemm_->run(gw, stream_);
      if (!dx) continue;
      GemmArgs gx;  // dcol[CPP, c*N] = W^T [CPP, D] dy^T [D, c*N]
      gx.trans_a = true;
      gx.trans_b = true;
      gx.m = patch;
      gx.n = c * count;
      gx.k = dim;
      gx.a = w.ptr;
      gx.lda = patch;
      gx.b = dy_chunk;
      gx.ldb = dim;
      gx.c = col.ptr;
      gx.ldc = c * count;
      gx.ab_type = gx.c_type = s_;
      gemm_->run(gx, stream_);
      kernels::col2im(s_, geo, col.ptr, dx.at(static_cast<uint64_t>(n0) * in_sample, 0).ptr, c, stream_);
    }
  }

  void attention_backward(size_t i, const Op& op, const Ref& in, const Ref& dout, const Ref& dx) {
    const AttentionViews a = attention_views(op);
    const int64_t t = a.t, hd = a.hd;
    const Ref probs = need(fmt::format("ops[{}].probs", i));
    kernels::split_heads(s_, in.ptr, a.q.ptr, batch(), t, 3, op.heads, hd, stream_);
    const Ref d_o = need("workspace.attn_o");
    kernels::split_heads(s_, dout.ptr, d_o.ptr, batch(), t, 1, op.heads, hd, stream_);
    const Ref dqkv = need("workspace.dqkv");
    const uint64_t part = a.q.elements;
    const Ref dq = dqkv.at(0, part), dk = dqkv.at(part, part), dv = dqkv.at(2 * part, part);
    // dv = P^T dO
    attention_gemm(true, false, t, hd, t, probs.ptr, t, t * t, d_o.ptr, hd, t * hd, dv.ptr, hd, t * hd, s_,
                   1.0f, a.bh);
    // dP = dO v^T (fp32), then dS = P (dP - rowsum(P dP)) in place of P
    const Ref dp = need("workspace.attention");
    attention_gemm(false, true, t, t, hd, d_o.ptr, hd, t * hd, a.v.ptr, hd, t * hd, dp.ptr, t, t * t,
                   DType::f32, 1.0f, a.bh);
    kernels::softmax_backward(s_, probs.ptr, dp.f32(), a.bh * t, t, stream_);
    // dq = scale dS k;  dk = scale dS^T q
    attention_gemm(false, false, t, hd, t, probs.ptr, t, t * t, a.k.ptr, hd, t * hd, dq.ptr, hd, t * hd, s_,
                   a.scale, a.bh);
    attention_gemm(true, false, t, hd, t, probs.ptr, t, t * t, a.q.ptr, hd, t * hd, dk.ptr, hd, t * hd, s_,
                   a.scale, a.bh);
    kernels::merge_heads(s_, dqkv.ptr, dx.ptr, batch(), t, 3, op.heads, hd, stream_);
  }

  // dq|dk|dv land in dx with the input's [B, T, 3, heads, hd] layout; o is the op's saved output.
  void sdpa_backward(size_t i, const Op& op, const Ref& in, const Ref& dout, const Ref& dx) {
    const auto d = static_cast<uint64_t>(op.dim);
    const Ref ws = need("workspace.cudnn");
    cudnn_->sdpa_backward(sdpa_shape(op, batch(), s_, true), in.ptr, in.at(d, 0).ptr, in.at(2 * d, 0).ptr,
                          need(fmt::format("ops[{}].out", i)).ptr, dout.ptr,
                          need(fmt::format("ops[{}].stats", i)).f32(), dx.ptr, dx.at(d, 0).ptr,
                          dx.at(2 * d, 0).ptr, ws.ptr, cudnn_workspace_size(), stream_);
  }

  const Graph& graph_;
  Plan plan_;
  SessionOptions options_;
  int device_;
  DType s_;
  std::shared_ptr<CudnnGraphs> cudnn_;  // shared with the backend: graphs are built once per shape
  std::vector<std::shared_ptr<const void>> cudnn_held_;  // this batch's built graphs, alive while we are

  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* arena_ = nullptr;
  kernels::StepScalars* host_scalars_ = nullptr;  // pinned
  kernels::StepScalars* scalars_dev_ = nullptr;   // inside workspace.scalars
  std::unique_ptr<Gemm> gemm_;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::string graph_status_;

  uint64_t allocated_bytes_ = 0;
  std::optional<uint64_t> device_used_bytes_;
  uint64_t free_before_ = 0;
  uint64_t in_use_at_start_ = 0;  // see make_cuda_session
  std::vector<std::string> warnings_;
  std::unordered_map<std::string, Ref> buffers_;
  std::vector<Ref> input_of_ = std::vector<Ref>(graph_.ops.size());
  Ref last_output_;  // the last forward's result (output())
  std::vector<Ref> residual_stack_;
  // With checkpointing: for each op, the index of the block it ends (else -1); backward recomputes that
  // block's forward when it reaches the op.
  std::vector<int> block_ending_at_ = blocks_ending(graph_, plan_.request);
  bool recomputing_ = false;  // a block's forward again: batchnorm's running statistics stay as they are
  bool has_attention_ = false;
  bool gelu_epilogue_used_ = false;
  bool dgelu_epilogue_used_ = false;
  std::set<std::string> unfused_epilogues_;  // fused epilogues cuBLASLt had no algorithm for
  std::vector<bool> dgelu_done_ = std::vector<bool>(graph_.ops.size(), false);  // per op, this backward pass

  double loss_scale_ = kInitialLossScale;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Session> make_cuda_session(const Graph& graph, const Plan& plan,
                                           const SessionOptions& options, int device,
                                           std::shared_ptr<CudnnGraphs> cudnn, uint64_t in_use_at_start) {
  return std::make_unique<CudaSession>(graph, plan, options, device, std::move(cudnn), in_use_at_start);
}

}  // namespace bsw::cuda
