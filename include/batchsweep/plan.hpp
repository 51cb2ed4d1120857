// The plan: a ModelSpec lowered to primitive ops with per-sample shapes (the Graph), and for one
// (batch, precision, mode, accumulation, backend) every buffer a backend allocates, with its exact byte size.
// This is the single source of buffer sizes and FLOP counts; backends allocate exactly Plan::buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/model.hpp"

namespace bsw {

enum class Precision { fp32, tf32, fp16, bf16 };
enum class Mode { train, infer };
enum class BackendKind { cpu, cuda, scripted };
enum class DType { f32, bf16, f16, i32 };

[[nodiscard]] std::string_view to_string(Precision v);
[[nodiscard]] std::string_view to_string(Mode v);
[[nodiscard]] std::string_view to_string(BackendKind v);
[[nodiscard]] std::string_view to_string(DType v);
[[nodiscard]] uint64_t dtype_bytes(DType t);
// Storage type of activations and parameters: f32 for fp32/tf32, bf16/f16 otherwise.
[[nodiscard]] DType storage_dtype(Precision p);

// ---------------------------------------------------------------------------------------------------------------
// Graph: primitive ops. Shapes are per sample, batch-first, row-major:
//   vector [F]; image [C, H, W]; tokens [T, D]; token ids [T] (i32).
// Linear acts on the last dimension: rows = numel(in) / in_features.
// ---------------------------------------------------------------------------------------------------------------
enum class OpKind {
  linear,          // y = act(x W^T + b); W [out, in], b [out]
  conv2d,          // NCHW, W [cout, cin, k, k], b [cout], zero padding, then act
  maxpool2d,       // out = (h + 2 * padding - k) / stride + 1; padding (<= k/2) is never the maximum
  avgpool2d,       // the same windows; padding counts as zeros in the k*k divisor
  global_avgpool,  // image [C, H, W] -> [C] (spatial = H*W, channels = C); tokens [T, D] -> [D] (mean over T)
  layernorm,       // over the last dim, gamma [dim], beta [dim], eps 1e-5
  batchnorm,       // per channel over the batch and spatial positions (image [C, H, W]: BatchNorm2d; vector
                   // [F]: BatchNorm1d, spatial 1), gamma [C], beta [C], eps 1e-5, then act. Training
                   // normalizes with the batch's mean and biased variance and moves the running mean and
                   // (unbiased) variance by momentum 0.1; inference normalizes with the running ones.
  embedding,       // ids [T] -> [T, D]: token table [vocab, D] + position table [T, D]
  patch_embedding,  // image [C, H, W] -> [N, D], N = (H/p)(W/p): conv k=p stride=p (W [D, C, p, p], b [D]) +
                    // pos [N, D]
  attention_core,   // qkv [T, 3D] (q | k | v, heads interleaved as [h, hd]) -> [T, D]; softmax(q k^T /
                    // sqrt(hd)) v
  residual_save,    // pushes its input on the residual stack (no buffer, no math)
  residual_add,     // out = act(in + popped residual input), or + the shortcut's result where there is one
  // Between a residual's shortcut ops and its inner ops (a residual with a `shortcut`: save, shortcut ops,
  // branch, inner ops, add): its input is the shortcut's result, its output the residual's input again, which
  // the inner ops read. No buffer, no math; backward keeps the inner path's input gradient for the save to
  // add.
  residual_branch,
};
[[nodiscard]] std::string_view to_string(OpKind v);
// How far one training step moves batchnorm's running statistics (PyTorch's default momentum).
inline constexpr float kBatchNormMomentum = 0.1f;

struct Op {
  OpKind kind = OpKind::linear;
  std::string path;  // JSON path of the layer it came from, e.g. "layers[1][0].attention.qkv"
  std::vector<int64_t> in_shape, out_shape;  // per sample

  // linear
  int64_t rows = 1, in_features = 0, out_features = 0;
  bool bias = false;
  Activation activation = Activation::none;
  // conv2d, pools, patch_embedding (kernel = patch), global_avgpool and batchnorm (channels, spatial)
  int64_t channels = 0, height = 0, width = 0, out_channels = 0, kernel = 0, stride = 1, padding = 0;
  int64_t out_height = 0, out_width = 0, spatial = 0;
  bool tokens_layout = false;  // global_avgpool over [T, D]
  // layernorm (rows, dim), embedding (vocab, seq, dim), attention_core (seq, heads, dim), patch_embedding
  // (seq, dim)
  int64_t dim = 0, vocab = 0, seq = 0, heads = 0;
  bool causal = false;
  int residual_depth = -1;  // residual_save / residual_add: nesting depth of the residual (0 = outermost)
  // Whether backward computes the gradient of this op's input: only where an earlier op has parameters. The
  // data does not require grad, and neither does anything computed from it before the first layer that learns
  // (PyTorch's autograd computes no gradient there either), so backward stops at the first op with
  // parameters. Through a residual with a shortcut both paths start from the residual's input: each path's
  // first op with parameters computes no input gradient when that input has none, and backward then goes on
  // with the other path (residual_branch: whether the shortcut's result has a gradient).
  bool input_gradient = true;
  // residual_save: the saved input has no gradient (input_gradient of the save is false). residual_add: the
  // addend other than its input (the saved input, or the shortcut's result) has none, so backward stashes no
  // gradient for it, and the plan has no grad.residual[d] for it.
  bool residual_without_gradient = false;
  size_t residual_partner = 0;  // residual_add, residual_branch: the index of its residual_save
  // residual_save, residual_branch, residual_add: the residual has a `shortcut` (its add adds the shortcut's
  // result, not the saved input). residual_branch_index (save and add): the residual's residual_branch.
  bool has_shortcut = false;
  size_t residual_branch_index = 0;
  // The residual_save of the innermost residual this op is inside (its inner ops or shortcut), else -1.
  int64_t enclosing_save = -1;
  // The last op of a residual's shortcut: that residual's depth (else -1). Its result waits for the add in
  // act.shortcut[depth]: always in inference, and in training where backward does not read it
  // (shortcut_result_transient()), as PyTorch frees the projected identity after the add; else in its
  // ops[i].out.
  int ends_shortcut = -1;
  // residual_add in training: the sum overwrites its input, the output of the op before it, which backward
  // does not read (see backward_reads_output), so the add keeps no ops[i].out of its own. PyTorch frees that
  // addend after the add, which saves nothing for backward (torchvision's ResNet adds in place: out +=
  // identity). A ReLU or tanh after the add runs in place there too (its backward reads that buffer, as
  // torchvision's in-place ReLU saves it); a GELU or SiLU after it keeps the sum there as its pre-activation
  // (no ops[i].pre) and writes its own ops[i].out. output_is_input() and
  // preactivation_is_input() say which.
  bool adds_in_place = false;
  // Inference's buffers (training keeps each output in its own ops[i].out): the depth d of the
  // act.residual[d] this op writes its output into, else -1 (act.a / act.b, or act.shortcut for a shortcut's
  // last op). A residual add writes its sum there, over the saved input nothing reads after it (PyTorch's
  // `x = x + f(x)` lets the old x go); the op just before a residual save writes the block's input there,
  // where the block keeps it, unless it reads that buffer itself. So a block's input is never copied: a
  // transformer's residual stream and a ResNet's block outputs stay in act.residual[0].
  int writes_residual = -1;
  // residual_save in inference: whether it copies its input into act.residual[d], where no op before could
  // write it (the network input, an outer residual's saved input, an op reading act.residual[d] itself).
  bool save_copies = true;
  // Where a training residual add's output and pre-activation live: its input's buffer (the inner layer's
  // output it wrote over) or its own ops[i].out / ops[i].pre.
  [[nodiscard]] bool output_is_input() const { return adds_in_place && !saves_preactivation(); }
  [[nodiscard]] bool preactivation_is_input() const { return adds_in_place && saves_preactivation(); }

  // Parameter tensors of this op, in order, inside the flat parameter buffer.
  struct Param {
    std::string name;    // "weight", "bias", "gamma", "beta", "tokens", "positions"
    int64_t offset = 0;  // elements from the start of the flat parameter buffer
    int64_t elements = 0;
  };
  std::vector<Param> params;
  int64_t param_elements = 0;  // sum of params[i].elements
  double forward_flops = 0;    // per sample; matmul/conv work only, multiply-add = 2

  [[nodiscard]] int64_t in_elements() const;   // per sample
  [[nodiscard]] int64_t out_elements() const;  // per sample
  [[nodiscard]] bool has_preactivation() const { return activation != Activation::none; }
  // Whether training keeps the pre-activation (ops[i].pre) for backward: GELU and SiLU differentiate from
  // their input; ReLU and tanh from their output, which is saved anyway (PyTorch's ReLU and Tanh save their
  // result, not their input), so they run in place on it.
  [[nodiscard]] bool saves_preactivation() const {
    return activation == Activation::gelu || activation == Activation::silu;
  }
  // Whether backward reads this op's own output: ReLU and tanh differentiate from it, and attention's
  // backward reads O (cuDNN SDPA; the explicit path reads the probabilities, kept apart).
  [[nodiscard]] bool backward_reads_output() const {
    return (has_preactivation() && !saves_preactivation()) || kind == OpKind::attention_core;
  }
  [[nodiscard]] bool shortcut_result_transient() const {
    return ends_shortcut >= 0 && kind != OpKind::residual_add && kind != OpKind::residual_save &&
           kind != OpKind::residual_branch && !backward_reads_output();
  }
  // Inputs feeding one output: in_features (linear), channels * kernel^2 (conv2d, patch_embedding), else 1.
  // Weights and biases are initialised uniform in +-1/sqrt(fan_in) on every backend (PyTorch's default
  // bound).
  [[nodiscard]] int64_t fan_in() const;
};

struct Graph {
  std::string model_name;
  InputType input_type = InputType::vector;
  std::vector<int64_t> input_shape;   // per sample (token ids: [T])
  std::vector<int64_t> output_shape;  // per sample, the last op's output
  std::vector<Op> ops;
  LossType loss = LossType::cross_entropy;
  OptimizerSpec optimizer;
  int64_t loss_rows = 1;     // cross_entropy: predictions per sample (T for [T, C] outputs, else 1)
  int64_t loss_classes = 0;  // cross_entropy: classes (last dim of the output)
  // What lowering found that runs but is likely not what was meant (said as warnings by plan and run).
  std::vector<std::string> notes;
  int64_t parameters = 0;
  double forward_flops_per_sample = 0;
  // 3x forward (forward, input gradients, weight gradients) less the input gradient of the first op with
  // parameters on each path from the data (one, or two through a residual with a shortcut), which nothing
  // needs and no backend computes (linear, conv2d and patch_embedding: as many FLOPs as its forward; see
  // Op::input_gradient). Megatron's model-FLOPs formula counts the same; PyTorch's
  // flop counter adds the recomputed attention scores of its flash backward.
  double train_flops_per_sample = 0;
  int64_t tokens_per_sample = 0;  // T for token inputs, else 0
  int max_residual_depth = 0;     // number of residual nesting levels
  // The blocks --checkpointing recomputes: each copy of a top-level `transformer_block` or `residual`, as
  // the op range [first, last] (last is its residual add). Hugging Face's gradient checkpointing wraps each
  // decoder layer the same way; the layers between blocks (embeddings, heads) keep their activations.
  struct Block {
    size_t first = 0, last = 0;
  };
  std::vector<Block> blocks;

  // Whether any op is of `kind` (a model with attention, with a convolution: what a CUDA path choice
  // touches).
  [[nodiscard]] bool has(OpKind kind) const {
    for (const Op& op : ops)
      if (op.kind == kind) return true;
    return false;
  }
};

// Lowers a ModelSpec, checking shapes through the whole stack. Throws ConfigError naming model.source and the
// layer's JSON path (e.g. "layers[2].heads: 12 does not divide dim 768").
[[nodiscard]] Graph lower(const ModelSpec& model);

// Backward walks the ops in reverse. Where an op computes no input gradient (input_gradient false), nothing
// before it on its path has one either, and backward goes on at the branch of the innermost enclosing
// residual whose inner path holds that op and whose shortcut's result has a gradient (the shortcut has
// parameters): the index of that residual_branch, or nullopt when backward is done.
[[nodiscard]] std::optional<size_t> backward_resume(const Graph& g, size_t stopped);

// ---------------------------------------------------------------------------------------------------------------
// Plan: buffers for one configuration.
// ---------------------------------------------------------------------------------------------------------------
enum class MemoryCategory {
  parameters,         // the weights the step computes with (storage dtype)
  master_weights,     // fp32 copy updated by the optimizer (fp16/bf16 only)
  gradients,          // fp32, one per parameter, accumulated over micro-batches
  optimizer_state,    // adamw m and v, or sgd momentum (fp32)
  saved_activations,  // forward outputs kept for backward (train), the recompute arena included
  transient,          // activation gradients, residual stashes; in inference the ping-pong activations
  workspace,          // backend and library workspaces (precision conversion, im2col, cuBLASLt, cuDNN)
  data,               // the synthetic inputs and targets of one micro-batch
};
[[nodiscard]] std::string_view to_string(MemoryCategory v);

struct BufferSpec {
  std::string
      name;  // unique within the plan, e.g. "parameters", "ops[3].out", "grad.a", "workspace.cublaslt"
  MemoryCategory category = MemoryCategory::transient;
  DType dtype = DType::f32;
  uint64_t elements = 0;
  uint64_t bytes = 0;  // elements * dtype_bytes, rounded up to kBufferAlignment
  int op = -1;         // index into Graph::ops, when the buffer belongs to one op
  // A view inside another buffer (the recompute arena of --checkpointing): `offset` bytes into the buffer
  // named `within`, which holds its memory. A view is listed with its size but counted once, in its arena.
  std::string within;
  uint64_t offset = 0;
  [[nodiscard]] bool is_view() const { return !within.empty(); }
};

// Every buffer starts on this boundary (and so its size is rounded up to it), on every backend.
inline constexpr uint64_t kBufferAlignment = 256;

// How the CUDA backend runs attention and convolutions; the planner sizes their buffers from it (the other
// backends have one path each and ignore it).
//   attention: explicit_softmax — strided-batched GEMMs with the [B, heads, T, T] probabilities saved for
//              backward (our kernels, every precision); cudnn_sdpa — cuDNN's fused flash attention, which
//              keeps only per-row softmax statistics ([B, heads, T] fp32) and needs fp16/bf16.
//   conv:      im2col_gemm — im2col columns and a cuBLASLt GEMM; cudnn — cuDNN fprop/dgrad/wgrad.
enum class AttentionPath { explicit_softmax, cudnn_sdpa };
enum class ConvPath { im2col_gemm, cudnn };
[[nodiscard]] std::string_view to_string(AttentionPath v);
[[nodiscard]] std::string_view to_string(ConvPath v);

struct ExecutionPaths {
  AttentionPath attention = AttentionPath::explicit_softmax;
  ConvPath conv = ConvPath::im2col_gemm;
  std::string note;  // why a preferred path was not taken (cuDNN's reason), for the report; empty otherwise
};

// cuDNN's fused attention (SDPA) runs at most this many sequences at once: its graph builds past that and its
// execute fails (seen with cuDNN 9.2 on H100; PyTorch routes such a batch to another attention too). A
// larger micro-batch is planned, and run, on our explicit attention: make_plan switches it, and says so in
// the request's paths.note.
inline constexpr int64_t kCudnnSdpaMostSequences = 65535;

struct PlanRequest {
  int64_t batch = 1;  // micro-batch
  Precision precision = Precision::fp32;
  Mode mode = Mode::train;
  int64_t accumulation = 1;
  BackendKind backend = BackendKind::cpu;
  ExecutionPaths paths{};  // cuda only
  // Training with activation checkpointing (torch.utils.checkpoint per block): each of Graph::blocks keeps
  // its output only; its other activations live in one arena (buffer "recompute", as large as the largest
  // block's) and backward runs the block's forward again before its backward. No effect in inference.
  bool checkpointing = false;
  // With checkpointing: how many of the blocks backward reaches are checkpointed, the first ones in forward
  // order (Megatron's "block" recompute method); the others keep every activation, laid over the arena from
  // its start (backward is done with them before it recomputes a checkpointed block). 0: all of them.
  int64_t checkpoint_blocks = 0;
};

// What the user asked for (--attention, --conv); nullopt leaves the choice to the backend.
struct PathChoice {
  std::optional<AttentionPath> attention;
  std::optional<ConvPath> conv;
};

// The paths the CUDA backend takes when cuDNN accepts the shapes: cuDNN convolutions whenever the graph has a
// conv2d; cuDNN SDPA in fp16/bf16 when every attention op's head dim is a multiple of 8 and at most 128.
// The backend checks support on the device and falls back to the explicit path (Backend::execution_paths).
[[nodiscard]] ExecutionPaths preferred_cuda_paths(const Graph& graph, Precision precision);
// preferred_cuda_paths with the user's choices on top. Throws UsageError naming --attention when cuDNN SDPA
// is forced in fp32/tf32.
[[nodiscard]] ExecutionPaths requested_cuda_paths(const Graph& graph, Precision precision,
                                                  const PathChoice& choice);

// Bytes of cuDNN workspace the plan reserves (workspace.cudnn) for one (graph, request): when a conv2d runs
// through cuDNN, 64 MiB or, if larger, its input, output and weights at this batch (room for NCHW engines
// that transpose to NHWC); for cuDNN SDPA, 16 MiB plus, in training, the backward pass's fp32 dQ accumulator
// and softmax sums (B * heads * T * (head_dim + 2) * 4 bytes). The CUDA backend only builds cuDNN plans whose
// workspace fits this budget.
[[nodiscard]] uint64_t cudnn_workspace_bytes(const Graph& graph, const PlanRequest& request);

// The CUDA batchnorm kernels reduce each channel in `slabs` slices of the batch (enough blocks to fill a
// large GPU, at most one slice per sample; a vector's blocks take 32 channels each, so it gets 32 times as
// many slices), then combine the slices; workspace.batchnorm holds, per channel, three floats per slice and
// two more (training only).
[[nodiscard]] int64_t cuda_batchnorm_slabs(int64_t batch, int64_t channels, int64_t spatial);
[[nodiscard]] inline uint64_t cuda_batchnorm_workspace_floats(int64_t batch, int64_t channels,
                                                              int64_t spatial) {
  return static_cast<uint64_t>(channels) *
         static_cast<uint64_t>(3 * cuda_batchnorm_slabs(batch, channels, spatial) + 2);
}

struct MemoryBreakdown {
  uint64_t parameters = 0, master_weights = 0, gradients = 0, optimizer_state = 0;
  uint64_t saved_activations = 0, transient = 0, workspace = 0, data = 0;
  [[nodiscard]] uint64_t total_bytes() const {
    return parameters + master_weights + gradients + optimizer_state + saved_activations + transient +
           workspace + data;
  }
};

struct Plan {
  PlanRequest request;
  std::vector<BufferSpec> buffers;
  MemoryBreakdown memory;
  double flops_per_sample = 0;  // Graph::forward_flops_per_sample, or train_flops_per_sample in training
  double flops_per_step = 0;    // flops_per_sample * batch * accumulation
  // With checkpointing: the blocks' forward FLOPs per sample that backward runs again. Not in
  // flops_per_sample (model FLOPs, which MFU counts, as Megatron's does); the hardware does this work too.
  double recompute_flops_per_sample = 0;

  // The buffer of that name; throws std::out_of_range naming it when absent.
  [[nodiscard]] const BufferSpec& buffer(std::string_view name) const;
  [[nodiscard]] const BufferSpec* find(std::string_view name) const;
};

// With checkpointing in training: for each op, the index into graph.blocks of the block it ends, else -1
// (all -1 otherwise). Backward recomputes that block's forward when it reaches the op: every block but those
// before the first layer that learns, where backward stops.
[[nodiscard]] std::vector<int> blocks_ending(const Graph& graph, const PlanRequest& request);

// The blocks backward reaches (indices into graph.blocks, in forward order): those checkpointing recomputes,
// and those --checkpoint-blocks counts. Not a block before every layer that learns.
[[nodiscard]] std::vector<size_t> recomputable_blocks(const Graph& graph);

// For each of graph.blocks, whether it keeps only its output (its other activations in the recompute arena):
// none without checkpointing or in inference; with request.checkpoint_blocks N, the first N recomputable
// ones (and those backward never reaches, which keep nothing it reads); else every block.
[[nodiscard]] std::vector<bool> checkpointed_blocks(const Graph& graph, const PlanRequest& request);

// Throws UsageError for a batch outside 1..kMaxBatch or accumulation < 1, and OutOfMemory-free: buffer sizes
// are per-sample sizes (at most 2^36 elements) times the batch, totals are summed in 128 bits, and a plan
// whose total would pass 2^62 bytes throws UsageError naming the batch.
[[nodiscard]] Plan make_plan(const Graph& graph, const PlanRequest& request);

// Fraction of a memory budget a plan may take in plan --memory / run --memory-limit: the rest is headroom for
// the runtime (CUDA context, allocator fragmentation, the framework). Documented in README.md.
inline constexpr double kMemorySafetyFraction = 0.95;

// The bytes a plan may take of a budget of memory_bytes: kMemorySafetyFraction of it, in integers (95/100),
// so a plan of exactly 95% fits, where 0.95 as a double (0.94999...) refused it by a byte. plan --memory and
// run's over_limit both compare with it.
[[nodiscard]] constexpr uint64_t usable_bytes(uint64_t memory_bytes) {
  static_assert(kMemorySafetyFraction == 0.95, "usable_bytes computes 95/100");
  return static_cast<uint64_t>(static_cast<unsigned __int128>(memory_bytes) * 95 / 100);
}

// The largest batch batchsweep plans or sweeps (2^24).
inline constexpr int64_t kMaxBatch = int64_t{1} << 24;

// The largest micro-batch an accumulation allows: 2^24 samples per step, batch x accumulation, as a batch
// alone (a step of more would run for hours, and is not cut between steps). Used by the batch grammar, the
// auto search and plan's "every batch fits" line, so all three stop at the same edge.
[[nodiscard]] constexpr int64_t max_micro_batch(int64_t accumulation) {
  return kMaxBatch / (accumulation > 1 ? accumulation : 1);
}

// A model whose plan passes 2^62 bytes at batch 1 (an attention over 2^31 tokens) has no batch that can be
// planned: throws UsageError naming the model and where the plan passed it. plan and run call it first, so
// that such a model is refused as the config's error (exit 2), not every batch over_limit.
void check_plannable(const Graph& graph, PlanRequest request);

// The largest batch whose plan fits in memory_bytes * kMemorySafetyFraction, or nullopt when batch 1 does
// not. kMaxBatch means "at least kMaxBatch": memory is not what limits the batch.
[[nodiscard]] std::optional<int64_t> max_fit_batch(const Graph& graph, PlanRequest request,
                                                   uint64_t memory_bytes);

// Training: the fewest blocks --checkpoint-blocks may checkpoint (the first ones backward reaches) for
// `request`'s batch to fit in usable_bytes(memory_bytes); nullopt where it does not fit even with every one.
// 0 where it fits without checkpointing. Memory falls with the count while the blocks kept whole outweigh the
// largest checkpointed one (each block checkpointed frees its activations but its output); past that it can
// rise by a block's output (a large early block then sets the arena, as it sets PyTorch's peak), so every
// count is tried in turn (not bisected), and the smallest plan may be short of all of them.
[[nodiscard]] std::optional<int64_t> fewest_checkpoint_blocks(const Graph& graph, PlanRequest request,
                                                              uint64_t memory_bytes);

// "512 B", "1.50 KiB", "74.10 GiB": binary units, two decimals above bytes. For messages about plans and
// memory (the backends' out-of-memory reasons, the sweep's warnings).
[[nodiscard]] std::string format_bytes(uint64_t bytes);

}  // namespace bsw
