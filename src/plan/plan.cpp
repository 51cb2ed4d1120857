// The planner: every buffer a backend allocates for one (graph, batch, precision, mode, accumulation,
// backend), itemised by category, plus FLOPs per step. Backends allocate exactly Plan::buffers — nothing else
// holds tensor data.
//
// Buffer layout (B = micro-batch, S = storage dtype: f32 for fp32/tf32, bf16/f16 otherwise):
//   parameters (S, all op parameters in one flat buffer), master_weights (f32, 16-bit only), gradients (f32),
//   optimizer.m / optimizer.v (adamw) or optimizer.momentum (sgd, momentum ≠ 0) (f32)       — training only
//   but parameters data.input (i32 token ids, or S), data.targets (i32 labels, or S for mse)       — targets
//   in training only train: ops[i].out (S) for every op with an output; ops[i].pre (S) before a GELU or SiLU;
//   ops[i].stats (f32,
//          mean+rstd per row) for layernorm, mean+1/std per channel for batchnorm; ops[i].probs (S, [B,
//          heads, T, T]) for attention on the explicit path, ops[i].stats (f32, [B, heads, T] softmax
//          statistics) on the cuDNN SDPA path — saved_activations; grad.a / grad.b (S) ping-pong activation
//          gradients (no gradient of the network input) and grad.residual[d] (S) per residual depth (none for
//          a residual of the network input), grad.branch[d] (S) for residuals with a shortcut,
//          act.shortcut[d] (S) for a shortcut's result that backward does not read — transient
//   infer: act.a / act.b (S) ping-pong (each as large as the outputs written to it), act.residual[d] (S: a
//          residual's input and its add's sum, Op::writes_residual),
//   act.shortcut[d] (S), act.stats (f32), act.probs
//          (S) — transient
//   both: ops[i].running (f32, running mean+variance per channel) for batchnorm — parameters (model state)
//   workspaces per backend, see append_workspaces().
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "batchsweep/errors.hpp"
#include "batchsweep/plan.hpp"
#include "op_names.hpp"

namespace bsw {

namespace {

// Sizes past this are refused by Builder::add as larger than 2^62 bytes.
constexpr unsigned __int128 kSizeCap = (static_cast<unsigned __int128>(1) << 62) + 1;

// The product of sizes, held just above 2^62 where it would go beyond: a plan past 2^62 bytes is refused as
// too large (Builder::add), never wrapped into a small one. A few times the cap still fits 64 bits.
uint64_t sat_mul(std::initializer_list<uint64_t> factors) {
  unsigned __int128 product = 1;
  for (const uint64_t f : factors) product = std::min(product * f, kSizeCap);
  return static_cast<uint64_t>(product);
}

}  // namespace

std::string_view to_string(Precision v) {
  switch (v) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::fp16:
      return "fp16";
    case Precision::bf16:
      return "bf16";
  }
  return "?";
}

std::string_view to_string(AttentionPath v) {
  return v == AttentionPath::cudnn_sdpa ? "cudnn_sdpa" : "explicit_softmax";
}

std::string_view to_string(ConvPath v) {
  return v == ConvPath::cudnn ? "cudnn" : "im2col_gemm";
}

std::string_view to_string(Mode v) {
  return v == Mode::train ? "train" : "infer";
}

std::string_view to_string(BackendKind v) {
  switch (v) {
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
    case BackendKind::scripted:
      return "scripted";
  }
  return "?";
}

std::string_view to_string(DType v) {
  switch (v) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

std::string_view to_string(OpKind v) {
  switch (v) {
    case OpKind::linear:
      return "linear";
    case OpKind::conv2d:
      return "conv2d";
    case OpKind::maxpool2d:
      return "maxpool2d";
    case OpKind::avgpool2d:
      return "avgpool2d";
    case OpKind::global_avgpool:
      return "global_avgpool";
    case OpKind::layernorm:
      return "layernorm";
    case OpKind::batchnorm:
      return "batchnorm";
    case OpKind::embedding:
      return "embedding";
    case OpKind::patch_embedding:
      return "patch_embedding";
    case OpKind::attention_core:
      return "attention_core";
    case OpKind::residual_save:
      return "residual_save";
    case OpKind::residual_add:
      return "residual_add";
    case OpKind::residual_branch:
      return "residual_branch";
  }
  return "?";
}

std::string_view to_string(MemoryCategory v) {
  switch (v) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::master_weights:
      return "master_weights";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::saved_activations:
      return "saved_activations";
    case MemoryCategory::transient:
      return "transient";
    case MemoryCategory::workspace:
      return "workspace";
    case MemoryCategory::data:
      return "data";
  }
  return "?";
}

uint64_t dtype_bytes(DType t) {
  return t == DType::bf16 || t == DType::f16 ? 2 : 4;
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    default:
      return DType::f32;
  }
}

const BufferSpec* Plan::find(std::string_view name) const {
  for (const BufferSpec& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

const BufferSpec& Plan::buffer(std::string_view name) const {
  if (const BufferSpec* b = find(name)) return *b;
  throw std::out_of_range(fmt::format("plan has no buffer named '{}'", name));
}

namespace {

constexpr uint64_t kCublasLtWorkspaceBytes = uint64_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr uint64_t kCudaIm2colElements = uint64_t{1}
                                         << 25;  // im2col columns per conv op, per chunk of samples
constexpr uint64_t kCudnnConvWorkspaceBytes = uint64_t{64} << 20;
constexpr uint64_t kCudnnSdpaBaseWorkspaceBytes = uint64_t{16} << 20;
constexpr uint64_t kCudaScalars = 16;  // fp32 slots of the CUDA step's device scalars
// fp32 slots ahead of the per-row losses in workspace.loss: the loss mean's 256 partial sums, in double
// (kernels::kLossPartials, src/backends/cuda/kernels.hpp).
constexpr uint64_t kCudaLossPartialFloats = 512;

class Builder {
 public:
  Builder(const Graph& g, const PlanRequest& r) : g_(g), r_(r), s_(storage_dtype(r.precision)) {}

  Plan build() {
    Plan plan;
    plan.request = r_;
    const bool train = r_.mode == Mode::train;
    const uint64_t p = static_cast<uint64_t>(g_.parameters);
    add("parameters", MemoryCategory::parameters, s_, p);
    // Batch normalization's running mean and variance (fp32, PyTorch's buffers): the model's state in both
    // modes, updated by training steps and read by inference.
    for (size_t i = 0; i < g_.ops.size(); ++i)
      if (g_.ops[i].kind == OpKind::batchnorm)
        add(fmt::format("ops[{}].running", i), MemoryCategory::parameters, DType::f32,
            2 * static_cast<uint64_t>(g_.ops[i].channels), static_cast<int>(i));
    if (train) {
      if (s_ != DType::f32) add("master_weights", MemoryCategory::master_weights, DType::f32, p);
      add("gradients", MemoryCategory::gradients, DType::f32, p);
      if (g_.optimizer.type == OptimizerType::adamw) {
        add("optimizer.m", MemoryCategory::optimizer_state, DType::f32, p);
        add("optimizer.v", MemoryCategory::optimizer_state, DType::f32, p);
      } else if (g_.optimizer.momentum != 0.0) {
        // Plain SGD (momentum 0) keeps no state, as torch.optim.SGD keeps no momentum buffer.
        add("optimizer.momentum", MemoryCategory::optimizer_state, DType::f32, p);
      }
    }
    add_data(train);
    if (train) {
      add_training_activations();
    } else {
      add_inference_activations();
    }
    append_workspaces();

    plan.buffers = std::move(buffers_);
    for (const BufferSpec& b : plan.buffers)
      if (!b.is_view()) item(plan.memory, b.category) += b.bytes;
    const double forward = g_.forward_flops_per_sample;
    plan.flops_per_sample = train ? g_.train_flops_per_sample : forward;
    const std::vector<int> ends = blocks_ending(g_, r_);
    for (size_t last = 0; last < ends.size(); ++last)
      if (ends[last] >= 0)
        for (size_t i = g_.blocks[static_cast<size_t>(ends[last])].first; i <= last; ++i)
          plan.recompute_flops_per_sample += g_.ops[i].forward_flops;
    plan.flops_per_step = plan.flops_per_sample * static_cast<double>(r_.batch) *
                          static_cast<double>(train ? r_.accumulation : 1);
    return plan;
  }

 private:
  static uint64_t& item(MemoryBreakdown& m, MemoryCategory c) {
    switch (c) {
      case MemoryCategory::parameters:
        return m.parameters;
      case MemoryCategory::master_weights:
        return m.master_weights;
      case MemoryCategory::gradients:
        return m.gradients;
      case MemoryCategory::optimizer_state:
        return m.optimizer_state;
      case MemoryCategory::saved_activations:
        return m.saved_activations;
      case MemoryCategory::transient:
        return m.transient;
      case MemoryCategory::workspace:
        return m.workspace;
      case MemoryCategory::data:
        return m.data;
    }
    return m.transient;
  }

  uint64_t batch() const { return static_cast<uint64_t>(r_.batch); }

  void add(std::string name, MemoryCategory c, DType t, uint64_t elements, int op = -1) {
    if (elements == 0) return;
    const unsigned __int128 raw = static_cast<unsigned __int128>(elements) * dtype_bytes(t);
    const unsigned __int128 rounded = (raw + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    total_ += rounded;
    if (total_ > (static_cast<unsigned __int128>(1) << 62))
      throw UsageError(fmt::format(
          "the plan at batch {} is larger than 2^62 bytes (passed at {}{})", r_.batch, name,
          op >= 0 ? fmt::format(", {}", detail::op_text(g_.ops[static_cast<size_t>(op)].path)) : ""));
    buffers_.push_back({std::move(name), c, t, elements, static_cast<uint64_t>(rounded), op, {}, 0});
  }

  void add_data(bool train) {
    const uint64_t in =
        static_cast<uint64_t>(g_.tokens_per_sample > 0 ? g_.tokens_per_sample : numel(g_.input_shape));
    add("data.input", MemoryCategory::data, g_.input_type == InputType::tokens ? DType::i32 : s_,
        batch() * in);
    if (!train) return;
    if (g_.loss == LossType::cross_entropy) {
      add("data.targets", MemoryCategory::data, DType::i32, batch() * static_cast<uint64_t>(g_.loss_rows));
    } else {
      add("data.targets", MemoryCategory::data, s_, batch() * static_cast<uint64_t>(numel(g_.output_shape)));
    }
  }

  static int64_t numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }

  static bool has_output(const Op& op) {
    return op.kind != OpKind::residual_save && op.kind != OpKind::residual_branch;
  }
  static uint64_t probs_elements(const Op& op) {
    return sat_mul(
        {static_cast<uint64_t>(op.heads), static_cast<uint64_t>(op.seq), static_cast<uint64_t>(op.seq)});
  }

  // Largest per-sample tensor each of inference's ping-pong buffers (act.a, act.b) holds, following the
  // backends' rule: an op writes act.a unless its input is in act.a, then act.b; the network input (in
  // data.input), a residual's input and its add's sum (act.residual, see Op::writes_residual) and a
  // shortcut's result (act.shortcut) are in neither. So the LM head's logits size one buffer, not both: the
  // other holds only its input. A residual's first op reads act.residual, so every block starts over at
  // act.a: a transformer block's 4·T·D MLP hidden layer lands in act.b in every block, not in act.a and act.b
  // by turns.
  std::pair<uint64_t, uint64_t> ping_pong_activations() const {
    enum class In { other, a, b };
    In current = In::other;
    uint64_t a = 0, b = 0;
    for (const Op& op : g_.ops) {
      if (op.kind == OpKind::residual_save || op.kind == OpKind::residual_branch || op.ends_shortcut >= 0 ||
          op.writes_residual >= 0) {
        current = In::other;  // in act.residual (or act.shortcut, for a shortcut's last op)
        continue;
      }
      const uint64_t out = static_cast<uint64_t>(op.out_elements());
      if (current == In::a) {
        b = std::max(b, out);
        current = In::b;
      } else {
        a = std::max(a, out);
        current = In::a;
      }
    }
    return {a, b};
  }

  // Largest per-sample gradient each of training's ping-pong buffers (grad.a, grad.b) holds, following the
  // backends' backward(): the loss writes the output's gradient into grad.a; an op with an input gradient
  // writes it into the other buffer, which then holds the current gradient; a residual's branch copies the
  // add's output gradient into the current one and its save adds into it; an op without an input gradient
  // ends its path (backward resumes at a shortcut's branch, or is done). So an LM's logits gradient sizes
  // grad.a alone: grad.b holds only the hidden states' gradients.
  std::pair<uint64_t, uint64_t> ping_pong_gradients() const {
    std::array<uint64_t, 2> held{0, 0};
    size_t current = 0;
    auto hold = [&held](size_t which, int64_t elements) {
      held[which] = std::max(held[which], static_cast<uint64_t>(elements));
    };
    if (g_.ops.empty()) return {0, 0};
    hold(current, g_.ops.back().out_elements());
    for (size_t i = g_.ops.size(); i-- > 0;) {
      const Op& op = g_.ops[i];
      const bool ends_path = (op.kind == OpKind::residual_save || has_output(op)) && !op.input_gradient &&
                             op.kind != OpKind::residual_add;
      if (ends_path) {
        if (const auto resume = backward_resume(g_, i)) {
          i = *resume + 1;
          continue;
        }
        break;
      }
      if (op.kind == OpKind::residual_add) {
        hold(current, op.out_elements());
      } else if (op.kind == OpKind::residual_branch || op.kind == OpKind::residual_save) {
        hold(current, op.in_elements());
      } else {
        current = 1 - current;
        hold(current, op.in_elements());
      }
    }
    return {held[0], held[1]};
  }

  // Largest per-sample input gradient a backend computes: the input of every op after the first with
  // parameters (Op::input_gradient).
  uint64_t max_input_gradient() const {
    uint64_t m = 0;
    for (const Op& op : g_.ops)
      if (op.input_gradient) m = std::max(m, static_cast<uint64_t>(op.in_elements()));
    return m;
  }

  // The ops whose output gradient the CPU backend's backward converts to fp32 (workspace.dy), as it walks
  // them: from the last op down, a residual's add and branch passing the gradient on, until an op (a
  // residual's save included) that computes no input gradient ends that path (backward_resume: on with a
  // shortcut's, else done).
  std::vector<bool> backward_reaches() const {
    std::vector<bool> reached(g_.ops.size(), false);
    for (size_t i = g_.ops.size(); i-- > 0;) {
      const Op& op = g_.ops[i];
      // A save converts the gradient of its input where it has one (to add the stashed one), an add the
      // gradient of its sum where an activation follows it; a branch only moves gradients.
      switch (op.kind) {
        case OpKind::residual_save:
          reached[i] = op.input_gradient;
          break;
        case OpKind::residual_add:
          reached[i] = op.has_preactivation();
          break;
        case OpKind::residual_branch:
          break;
        default:
          reached[i] = true;
      }
      if (op.kind == OpKind::residual_add || op.kind == OpKind::residual_branch || op.input_gradient)
        continue;
      if (const std::optional<size_t> resume = backward_resume(g_, i)) {
        i = *resume + 1;
        continue;
      }
      break;
    }
    return reached;
  }

  // Per residual depth, the largest per-sample tensor of the ops `size` picks (0: none).
  template <typename Size>
  std::vector<uint64_t> per_depth(Size size) const {
    std::vector<uint64_t> sizes(static_cast<size_t>(g_.max_residual_depth), 0);
    for (const Op& op : g_.ops)
      if (const auto [depth, elements] = size(op); depth >= 0)
        sizes[static_cast<size_t>(depth)] = std::max(sizes[static_cast<size_t>(depth)], elements);
    return sizes;
  }
  using DepthSize = std::pair<int, uint64_t>;
  static constexpr DepthSize kNone{-1, 0};
  // Inference: act.residual[d], every residual's input, kept while its inner ops (and shortcut) run, and
  // every output written there (Op::writes_residual: a residual's sum, an op making a residual's input).
  std::vector<uint64_t> residual_inputs() const {
    return per_depth([](const Op& op) {
      if (op.kind == OpKind::residual_save)
        return DepthSize{op.residual_depth, static_cast<uint64_t>(op.in_elements())};
      return op.writes_residual >= 0 ? DepthSize{op.writes_residual, static_cast<uint64_t>(op.out_elements())}
                                     : kNone;
    });
  }
  // Training: grad.residual[d], the add's output gradient, kept for the saved input (or the shortcut) while
  // backward runs the inner ops; none where that addend has no gradient (the network input's).
  std::vector<uint64_t> residual_gradients() const {
    return per_depth([](const Op& op) {
      return op.kind == OpKind::residual_add && !op.residual_without_gradient
                 ? DepthSize{op.residual_depth, static_cast<uint64_t>(op.out_elements())}
                 : kNone;
    });
  }
  // Training: grad.branch[d], the inner path's gradient of a residual's input, kept while backward runs the
  // shortcut, for the save to add; only where the input has a gradient.
  std::vector<uint64_t> branch_gradients() const {
    return per_depth([](const Op& op) {
      return op.kind == OpKind::residual_save && op.has_shortcut && !op.residual_without_gradient
                 ? DepthSize{op.residual_depth, static_cast<uint64_t>(op.in_elements())}
                 : kNone;
    });
  }
  // act.shortcut[d]: a shortcut's result waiting for the add (inference: every one; training: those
  // backward does not read, see Op::shortcut_result_transient).
  std::vector<uint64_t> shortcut_results(bool train) const {
    return per_depth([train](const Op& op) {
      const bool waits = op.ends_shortcut >= 0 && (!train || op.shortcut_result_transient());
      return waits ? DepthSize{op.ends_shortcut, static_cast<uint64_t>(op.out_elements())} : kNone;
    });
  }
  void add_per_depth(const char* name, MemoryCategory category, const std::vector<uint64_t>& sizes) {
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d] > 0) add(fmt::format("{}[{}]", name, d), category, s_, batch() * sizes[d]);
  }

  void add_training_activations() {
    const uint64_t b = batch();
    // With checkpointing, a block's activations other than its output are views into one arena, laid out
    // from its start for each block in turn: only one block's are alive at a time (its forward, or its
    // recomputation just before its backward).
    std::vector<int> block_of(g_.ops.size(), -1);
    std::vector<bool> kept(g_.ops.size(), false);
    const std::vector<bool> checkpointed = checkpointed_blocks(g_, r_);
    // --checkpoint-blocks N: the blocks after the first N keep every activation, and backward is done with
    // them (the last blocks' backward runs first) before it recomputes a checkpointed one. So their
    // activations, outputs included, are views in the arena too, one after another from its start, where a
    // recomputation then writes over them, as autograd has freed them by then (torch.utils.checkpoint's and
    // Megatron's peak: the kept outputs and max(L - N, 1) blocks, not L - N + 1).
    std::vector<bool> overlaid(g_.ops.size(), false);
    const bool some_checkpointed =
        std::find(checkpointed.begin(), checkpointed.end(), true) != checkpointed.end();
    for (size_t k = 0; k < g_.blocks.size(); ++k) {
      const Graph::Block& blk = g_.blocks[k];
      if (checkpointed[k]) {
        for (size_t i = blk.first; i <= blk.last; ++i) block_of[i] = static_cast<int>(k);
        kept[block_output_storage(blk)] = true;
      } else if (some_checkpointed) {
        for (size_t i = blk.first; i <= blk.last; ++i) overlaid[i] = true;
      }
    }
    struct View {
      std::string name;
      DType dtype;
      uint64_t elements;
      int op;
    };
    std::vector<std::vector<View>> views(g_.blocks.size());
    std::vector<View> later;  // the blocks that keep every activation, with some checkpointed before them
    auto save = [&](std::string name, DType t, uint64_t elements, size_t i, bool is_output) {
      if (overlaid[i]) {
        if (elements > 0) later.push_back({std::move(name), t, elements, static_cast<int>(i)});
        return;
      }
      const int k = block_of[i];
      if (k < 0 || (is_output && kept[i])) {
        add(std::move(name), MemoryCategory::saved_activations, t, elements, static_cast<int>(i));
        return;
      }
      if (elements > 0)
        views[static_cast<size_t>(k)].push_back({std::move(name), t, elements, static_cast<int>(i)});
    };
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const Op& op = g_.ops[i];
      if (!has_output(op)) continue;
      const uint64_t out = b * static_cast<uint64_t>(op.out_elements());
      // An in-place add's sum lives in the previous op's ops[i].out: as its output, or as the pre-activation
      // of a GELU or SiLU after it.
      // A shortcut's result that backward does not read waits for the add in act.shortcut[d] (transient).
      if (!op.output_is_input() && !op.shortcut_result_transient())
        save(fmt::format("ops[{}].out", i), s_, out, i, true);
      if (op.saves_preactivation() && !op.preactivation_is_input())
        save(fmt::format("ops[{}].pre", i), s_, out, i, false);
      if (op.kind == OpKind::layernorm)
        save(fmt::format("ops[{}].stats", i), DType::f32, 2 * b * static_cast<uint64_t>(op.rows), i, false);
      if (op.kind == OpKind::batchnorm)  // the batch's mean and 1/std per channel (save_mean, save_invstd)
        save(fmt::format("ops[{}].stats", i), DType::f32, 2 * static_cast<uint64_t>(op.channels), i, false);
      if (op.kind == OpKind::attention_core && fused_attention())
        save(fmt::format("ops[{}].stats", i), DType::f32, b * static_cast<uint64_t>(op.heads * op.seq), i,
             false);
      else if (op.kind == OpKind::attention_core)
        save(fmt::format("ops[{}].probs", i), s_, sat_mul({b, probs_elements(op)}), i, false);
    }
    views.push_back(std::move(later));  // laid out from the arena's start as one more "block"
    add_recompute_arena(views);
    const auto [grad_a, grad_b] = ping_pong_gradients();
    add("grad.a", MemoryCategory::transient, s_, b * grad_a);
    add("grad.b", MemoryCategory::transient, s_, b * grad_b);
    // None at a depth where every residual adds the network input (or a shortcut of it without parameters).
    add_per_depth("grad.residual", MemoryCategory::transient, residual_gradients());
    add_per_depth("grad.branch", MemoryCategory::transient, branch_gradients());
    add_per_depth("act.shortcut", MemoryCategory::transient, shortcut_results(true));
  }

  // The buffer holding a block's output: its last op's, or where that op adds in place (the inner path's
  // last output), the op whose buffer it wrote over.
  size_t block_output_storage(const Graph::Block& blk) const {
    size_t j = blk.last;
    while (j > blk.first && g_.ops[j].output_is_input()) --j;
    return j;
  }

  template <typename View>
  void add_recompute_arena(const std::vector<std::vector<View>>& views) {
    unsigned __int128 arena = 0;
    std::vector<BufferSpec> placed;
    for (const std::vector<View>& block : views) {
      unsigned __int128 offset = 0;
      for (const View& v : block) {
        const unsigned __int128 raw = static_cast<unsigned __int128>(v.elements) * dtype_bytes(v.dtype);
        const unsigned __int128 rounded = (raw + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
        placed.push_back({v.name, MemoryCategory::saved_activations, v.dtype, v.elements,
                          static_cast<uint64_t>(std::min(rounded, kSizeCap)), v.op, "recompute",
                          static_cast<uint64_t>(std::min(offset, kSizeCap))});
        offset = std::min(offset + rounded, kSizeCap);
      }
      arena = std::max(arena, offset);
    }
    if (arena == 0) return;
    add("recompute", MemoryCategory::saved_activations, DType::f32,
        static_cast<uint64_t>(arena / dtype_bytes(DType::f32)));
    for (BufferSpec& v : placed) buffers_.push_back(std::move(v));
  }

  void add_inference_activations() {
    const uint64_t b = batch();
    const auto [act_a, act_b] = ping_pong_activations();
    add("act.a", MemoryCategory::transient, s_, b * act_a);
    add("act.b", MemoryCategory::transient, s_, b * act_b);
    add_per_depth("act.residual", MemoryCategory::transient, residual_inputs());
    add_per_depth("act.shortcut", MemoryCategory::transient, shortcut_results(false));
    uint64_t stats = 0, probs = 0;
    for (const Op& op : g_.ops) {
      if (op.kind == OpKind::layernorm) stats = std::max(stats, 2 * b * static_cast<uint64_t>(op.rows));
      if (op.kind == OpKind::attention_core && !fused_attention())
        probs = std::max(probs, sat_mul({b, probs_elements(op)}));
    }
    add("act.stats", MemoryCategory::transient, DType::f32, stats);
    // The CPU's 16-bit inference computes the probabilities in fp32, in workspace.aux, and keeps them there.
    if (!(r_.backend == BackendKind::cpu && s_ != DType::f32))
      add("act.probs", MemoryCategory::transient, s_, probs);
  }

  // Per-sample-independent scratch of one op on the CPU: im2col for a conv (none for a 1x1, stride-1,
  // unpadded one, whose input is its own), the patch gather, and in training attention's T x T score
  // gradients.
  static uint64_t cpu_op_scratch(const Op& op, bool train) {
    switch (op.kind) {
      case OpKind::conv2d:
        if (op.kernel == 1 && op.stride == 1 && op.padding == 0) return 0;
        return sat_mul({static_cast<uint64_t>(op.channels * op.kernel * op.kernel),
                        static_cast<uint64_t>(op.out_height * op.out_width)});
      case OpKind::patch_embedding:
        return sat_mul(
            {static_cast<uint64_t>(op.seq), static_cast<uint64_t>(op.channels * op.kernel * op.kernel)});
      case OpKind::attention_core:
        return train ? sat_mul({static_cast<uint64_t>(op.seq), static_cast<uint64_t>(op.seq)}) : 0;
      default:
        return 0;
    }
  }

  void append_workspaces() {
    switch (r_.backend) {
      case BackendKind::cpu:
        append_cpu_workspaces();
        break;
      case BackendKind::cuda:
        append_cuda_workspaces();
        break;
      case BackendKind::scripted:
        break;
    }
  }

  // CPU: fp32 math everywhere. workspace.z holds pre-activations' gradients (training; inference computes
  // into the output and activates it in place); workspace.scratch the per-op scratch. With 16-bit storage
  // every op converts its operands to fp32 first: workspace.x (input), .y (output), .dy, .dx (training), .w
  // (the op's parameters), .aux (a saved pre-activation, or attention probabilities, in fp32).
  // A residual's save and branch convert nothing (they mark where its input is kept and the inner ops
  // start again), and the loss, which reads the logits in fp32, runs in training only.
  void append_cpu_workspaces() {
    const uint64_t b = batch();
    const bool train = r_.mode == Mode::train;
    uint64_t z = 0, scratch = 0, x = 0, y = 0, w = 0, aux = 0, dy = 0;
    const uint64_t dx = b * max_input_gradient();
    const std::vector<bool> reached = backward_reaches();
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const Op& op = g_.ops[i];
      // workspace.dy holds the output gradient of an op backward reaches (or a residual sum's), in fp32.
      if (train && reached[i]) dy = std::max(dy, b * static_cast<uint64_t>(op.out_elements()));
      const uint64_t in = b * static_cast<uint64_t>(op.in_elements());
      const uint64_t out = b * static_cast<uint64_t>(op.out_elements());
      if (train && op.has_preactivation()) z = std::max(z, out);
      scratch = std::max(scratch, cpu_op_scratch(op, train));
      if (op.kind == OpKind::residual_save || op.kind == OpKind::residual_branch) continue;
      if (op.kind != OpKind::embedding) x = std::max(x, in);  // token ids are read as they are
      y = std::max(y, out);
      w = std::max(w, static_cast<uint64_t>(op.param_elements));
      // aux holds in fp32 the pre-activation training's GELU and SiLU keep (ReLU and tanh, and every
      // activation in inference, run in place on the output).
      if (train && op.saves_preactivation()) aux = std::max(aux, out);
      if (op.kind == OpKind::attention_core) aux = std::max(aux, sat_mul({b, probs_elements(op)}));
    }
    // The loss reads the logits (and mse targets) in fp32 and writes their gradient in fp32.
    const uint64_t logits = train ? b * static_cast<uint64_t>(numel(g_.output_shape)) : 0;
    add("workspace.z", MemoryCategory::workspace, DType::f32, z);
    add("workspace.scratch", MemoryCategory::workspace, DType::f32, scratch);
    if (s_ == DType::f32) return;
    add("workspace.x", MemoryCategory::workspace, DType::f32, std::max(x, logits));
    add("workspace.y", MemoryCategory::workspace, DType::f32, std::max(y, logits));
    add("workspace.w", MemoryCategory::workspace, DType::f32, w);
    add("workspace.aux", MemoryCategory::workspace, DType::f32, aux);
    if (train) {
      add("workspace.dy", MemoryCategory::workspace, DType::f32, dy);
      add("workspace.dx", MemoryCategory::workspace, DType::f32, std::max(dx, logits));
    }
  }

  // CUDA (src/backends/cuda): workspace.cublaslt (32 MiB, NVIDIA's recommendation on Hopper); the non-fused
  // attention path's fp32 scores and score gradients (workspace.attention, [B, heads, T, T]), its head-major
  // copies of q|k|v and of the output (workspace.qkv, workspace.attn_o) and, in training, of dq|dk|dv
  // (workspace.dqkv); conv and patch-embedding im2col columns and
  // the conv GEMM's [C, chunk*HW] output for a chunk of samples (workspace.im2col, workspace.conv_out; the
  // chunk keeps the columns under 2^25 elements per op); the loss mean's partial sums and per-row losses
  // (workspace.loss) and the step's device scalars (workspace.scalars, 64 bytes); in training, batchnorm's
  // per-slice partial statistics (workspace.batchnorm, see cuda_batchnorm_slabs).
  void append_cuda_workspaces() {
    const uint64_t b = batch();
    const bool train = r_.mode == Mode::train;
    add("workspace.cublaslt", MemoryCategory::workspace, DType::f32, kCublasLtWorkspaceBytes / 4);
    const uint64_t cudnn = cudnn_workspace_bytes(g_, r_);
    if (cudnn > 0) add("workspace.cudnn", MemoryCategory::workspace, DType::f32, cudnn / 4);
    uint64_t scores = 0, heads = 0, col = 0, conv_out = 0, conv_dw = 0;
    for (const Op& op : g_.ops) {
      if (op.kind == OpKind::attention_core && !fused_attention()) {
        scores = std::max(scores, sat_mul({b, probs_elements(op)}));
        heads = std::max(heads, b * static_cast<uint64_t>(op.seq * op.dim));
      }
      if (op.kind == OpKind::conv2d && r_.paths.conv == ConvPath::cudnn) {
        conv_dw =
            std::max(conv_dw, static_cast<uint64_t>(op.out_channels * op.channels * op.kernel * op.kernel));
        continue;
      }
      if (op.kind == OpKind::conv2d || op.kind == OpKind::patch_embedding) {
        const uint64_t spatial = static_cast<uint64_t>(op.out_height * op.out_width);
        const uint64_t per_sample =
            sat_mul({static_cast<uint64_t>(op.channels * op.kernel * op.kernel), spatial});
        const uint64_t chunk = std::min(b, std::max<uint64_t>(1, kCudaIm2colElements / per_sample));
        col = std::max(col, chunk * per_sample);
        if (op.kind == OpKind::conv2d)
          conv_out = std::max(conv_out, chunk * static_cast<uint64_t>(op.out_channels) * spatial);
      }
    }
    uint64_t batchnorm = 0;
    for (const Op& op : g_.ops)
      if (train && op.kind == OpKind::batchnorm)
        batchnorm = std::max(batchnorm, cuda_batchnorm_workspace_floats(r_.batch, op.channels, op.spatial));
    add("workspace.batchnorm", MemoryCategory::workspace, DType::f32, batchnorm);
    add("workspace.attention", MemoryCategory::workspace, DType::f32, scores);
    add("workspace.qkv", MemoryCategory::workspace, s_, 3 * heads);
    add("workspace.attn_o", MemoryCategory::workspace, s_, heads);
    if (train) add("workspace.dqkv", MemoryCategory::workspace, s_, 3 * heads);
    add("workspace.im2col", MemoryCategory::workspace, s_, col);
    add("workspace.conv_out", MemoryCategory::workspace, s_, conv_out);
    // cuDNN's weight gradient lands here (storage dtype), then is added to the fp32 gradients.
    // fp16 keeps it in fp32: the loss-scaled weight gradient would overflow fp16.
    if (train && conv_dw > 0)
      add("workspace.conv_dw", MemoryCategory::workspace, r_.precision == Precision::fp16 ? DType::f32 : s_,
          conv_dw);
    // 16-bit training: a linear+GELU+bias followed by a linear gets its GELU backward and bias gradient from
    // the next linear's input-gradient GEMM (cuBLASLt DGELU_BGRAD); the bias gradient lands here first.
    uint64_t bgrad = 0;
    for (size_t i = 0; train && s_ != DType::f32 && i + 1 < g_.ops.size(); ++i)
      if (dgelu_fusable(g_.ops[i], g_.ops[i + 1]))
        bgrad = std::max(bgrad, static_cast<uint64_t>(g_.ops[i].out_features));
    add("workspace.bgrad", MemoryCategory::workspace, s_, bgrad);
    const uint64_t rows = b * static_cast<uint64_t>(g_.loss_rows);
    if (train)  // inference computes no loss
      add("workspace.loss", MemoryCategory::workspace, DType::f32,
          kCudaLossPartialFloats + std::max<uint64_t>(rows, 1));
    add("workspace.scalars", MemoryCategory::workspace, DType::f32, kCudaScalars);
    // 16-bit inference has no fp32 master copy: parameters are drawn in fp32 one op at a time, then cast.
    if (!train && s_ != DType::f32) {
      uint64_t largest = 0;
      for (const Op& op : g_.ops) largest = std::max(largest, static_cast<uint64_t>(op.param_elements));
      add("workspace.init", MemoryCategory::workspace, DType::f32, largest);
    }
  }

  [[nodiscard]] static bool dgelu_fusable(const Op& op, const Op& next) {
    return op.kind == OpKind::linear && op.activation == Activation::gelu && op.bias &&
           next.kind == OpKind::linear;
  }

  [[nodiscard]] bool fused_attention() const { return r_.paths.attention == AttentionPath::cudnn_sdpa; }

  const Graph& g_;
  const PlanRequest& r_;
  DType s_;
  std::vector<BufferSpec> buffers_;
  unsigned __int128 total_ = 0;
};

}  // namespace

int64_t cuda_batchnorm_slabs(int64_t batch, int64_t channels, int64_t spatial) {
  constexpr int64_t kBlocks = 1024;  // a few per SM on the largest GPUs
  const int64_t channel_blocks = spatial == 1 ? (channels + 31) / 32 : channels;
  const int64_t want = (kBlocks + channel_blocks - 1) / std::max<int64_t>(channel_blocks, 1);
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(batch, 1));
}

Plan make_plan(const Graph& graph, const PlanRequest& request) {
  if (request.batch < 1)
    throw UsageError(fmt::format("--batch: {} is not a positive batch size", request.batch));
  // The sizes below multiply per-sample sizes (at most 2^36 elements) by the batch in 64 bits.
  if (request.batch > kMaxBatch)
    throw UsageError(fmt::format("--batch: {} is over the largest batch, 2^24", request.batch));
  if (request.accumulation < 1)
    throw UsageError(fmt::format("--accumulation: {} must be at least 1", request.accumulation));
  if (request.checkpoint_blocks < 0)
    throw UsageError(
        fmt::format("--checkpoint-blocks: {} is not a count of blocks", request.checkpoint_blocks));
  if (request.checkpointing && request.checkpoint_blocks > 0 && request.mode == Mode::train) {
    const size_t reached = recomputable_blocks(graph).size();
    if (static_cast<uint64_t>(request.checkpoint_blocks) > reached)
      throw UsageError(
          fmt::format("--checkpoint-blocks: {} is more than the {} block{} of model '{}' that "
                      "backward recomputes",
                      request.checkpoint_blocks, reached, reached == 1 ? "" : "s", graph.model_name));
  }
  PlanRequest normalised = request;
  if (request.backend != BackendKind::cuda) normalised.paths = ExecutionPaths{};
  if (normalised.paths.attention == AttentionPath::cudnn_sdpa && request.batch > kCudnnSdpaMostSequences &&
      graph.has(OpKind::attention_core)) {
    normalised.paths.attention = AttentionPath::explicit_softmax;
    const std::string note = fmt::format(
        "attention: cuDNN's fused attention runs at most {} sequences at once, so batch {} runs our explicit "
        "path",
        kCudnnSdpaMostSequences, request.batch);
    normalised.paths.note = normalised.paths.note.empty() ? note : normalised.paths.note + "; " + note;
  }
  if (normalised.paths.attention == AttentionPath::cudnn_sdpa &&
      storage_dtype(request.precision) == DType::f32)
    throw UsageError(
        fmt::format("cuDNN SDPA attention needs fp16 or bf16, not {}", to_string(request.precision)));
  return Builder(graph, normalised).build();
}

std::vector<size_t> recomputable_blocks(const Graph& graph) {
  std::vector<size_t> reached_blocks;
  for (size_t k = 0; k < graph.blocks.size(); ++k) {
    // A block with no parameters whose ops have no input gradient comes before every layer that learns:
    // backward stops before it, and nothing recomputes it.
    const Graph::Block& b = graph.blocks[k];
    bool reached = false;
    for (size_t i = b.first; i <= b.last && !reached; ++i)
      reached = graph.ops[i].input_gradient || graph.ops[i].param_elements > 0;
    if (reached) reached_blocks.push_back(k);
  }
  return reached_blocks;
}

std::vector<bool> checkpointed_blocks(const Graph& graph, const PlanRequest& request) {
  std::vector<bool> checkpointed(graph.blocks.size(), false);
  if (!request.checkpointing || request.mode != Mode::train) return checkpointed;
  if (request.checkpoint_blocks <= 0) return std::vector<bool>(graph.blocks.size(), true);
  std::fill(checkpointed.begin(), checkpointed.end(), true);
  const std::vector<size_t> reached = recomputable_blocks(graph);
  for (size_t n = static_cast<size_t>(request.checkpoint_blocks); n < reached.size(); ++n)
    checkpointed[reached[n]] = false;
  return checkpointed;
}

std::vector<int> blocks_ending(const Graph& graph, const PlanRequest& request) {
  std::vector<int> ends(graph.ops.size(), -1);
  const std::vector<bool> checkpointed = checkpointed_blocks(graph, request);
  for (const size_t k : recomputable_blocks(graph))
    if (checkpointed[k]) ends.at(graph.blocks[k].last) = static_cast<int>(k);
  return ends;
}

ExecutionPaths preferred_cuda_paths(const Graph& graph, Precision precision) {
  ExecutionPaths paths;
  bool attention = false, sdpa_ok = storage_dtype(precision) != DType::f32;
  for (const Op& op : graph.ops) {
    if (op.kind == OpKind::conv2d) paths.conv = ConvPath::cudnn;
    if (op.kind != OpKind::attention_core) continue;
    attention = true;
    const int64_t head_dim = op.dim / op.heads;
    sdpa_ok = sdpa_ok && head_dim % 8 == 0 && head_dim <= 128;
  }
  if (attention && sdpa_ok) paths.attention = AttentionPath::cudnn_sdpa;
  return paths;
}

ExecutionPaths requested_cuda_paths(const Graph& graph, Precision precision, const PathChoice& choice) {
  ExecutionPaths paths = preferred_cuda_paths(graph, precision);
  if (choice.attention) {
    if (*choice.attention == AttentionPath::cudnn_sdpa && storage_dtype(precision) == DType::f32)
      throw UsageError(
          fmt::format("--attention cudnn: cuDNN SDPA runs in fp16 or bf16, not {} (use --precision "
                      "bf16 or fp16, or --attention explicit)",
                      to_string(precision)));
    paths.attention = *choice.attention;
  }
  if (choice.conv) paths.conv = *choice.conv;
  return paths;
}

uint64_t cudnn_workspace_bytes(const Graph& graph, const PlanRequest& request) {
  if (request.backend != BackendKind::cuda) return 0;
  uint64_t bytes = 0;
  for (const Op& op : graph.ops) {
    if (op.kind == OpKind::conv2d && request.paths.conv == ConvPath::cudnn) {
      // NCHW engines may transpose x, w and y (or dy, w, dx) to NHWC in the workspace.
      const uint64_t tensors =
          sat_mul({sat_mul({static_cast<uint64_t>(request.batch),
                            static_cast<uint64_t>(op.in_elements() + op.out_elements())}) +
                       static_cast<uint64_t>(op.param_elements),
                   dtype_bytes(storage_dtype(request.precision))});
      bytes = std::max({bytes, kCudnnConvWorkspaceBytes, tensors});
    }
    if (op.kind != OpKind::attention_core || request.paths.attention != AttentionPath::cudnn_sdpa) continue;
    uint64_t sdpa = kCudnnSdpaBaseWorkspaceBytes;
    if (request.mode == Mode::train)
      sdpa += sat_mul({static_cast<uint64_t>(request.batch), static_cast<uint64_t>(op.heads * op.seq),
                       static_cast<uint64_t>(op.dim / op.heads + 2), 4});
    bytes = std::max(bytes, sdpa);
  }
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

std::optional<int64_t> fewest_checkpoint_blocks(const Graph& graph, PlanRequest request,
                                                uint64_t memory_bytes) {
  const uint64_t budget = usable_bytes(memory_bytes);
  auto fits = [&](int64_t blocks) {
    request.checkpointing = blocks > 0;
    request.checkpoint_blocks = blocks;
    return make_plan(graph, request).memory.total_bytes() <= budget;
  };
  if (fits(0)) return 0;
  const auto all = static_cast<int64_t>(recomputable_blocks(graph).size());
  for (int64_t n = 1; n <= all; ++n)
    if (fits(n)) return n;
  return std::nullopt;
}

void check_plannable(const Graph& graph, PlanRequest request) {
  request.batch = 1;
  request.accumulation = 1;
  try {
    (void)make_plan(graph, request);
  } catch (const UsageError& e) {
    throw UsageError(
        fmt::format("model '{}': no batch of it can be planned: {}", graph.model_name, e.what()));
  }
}

std::optional<int64_t> max_fit_batch(const Graph& graph, PlanRequest request, uint64_t memory_bytes) {
  const uint64_t budget = usable_bytes(memory_bytes);
  auto fits = [&](int64_t b) {
    request.batch = b;
    try {
      return make_plan(graph, request).memory.total_bytes() <= budget;
    } catch (const UsageError&) {
      // Past 2^62 bytes (a --memory of exabytes lets the doubling get there): larger than any memory, so it
      // does not fit. Batch 1's error is the config's own, and said.
      if (b == 1) throw;
      return false;
    }
  };
  if (!fits(1)) return std::nullopt;
  // Memory grows monotonically with the batch: double to find an upper bound, then bisect.
  int64_t lo = 1, hi = 2;
  while (hi <= kMaxBatch && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMaxBatch) return kMaxBatch;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr std::array<std::string_view, 6> kNames{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  // Move up while the value would print as 1024.00 or more.
  while (unit + 1 < kNames.size() && value >= 1024.0 - 0.005) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kNames[unit]);
}

}  // namespace bsw
