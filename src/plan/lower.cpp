// Lowers a ModelSpec to primitive ops with per-sample shapes, checking shapes through the whole stack, and
// counts parameters and forward FLOPs by the conventions of the model format (README "Conventions").
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <utility>

#include "batchsweep/errors.hpp"
#include "batchsweep/plan.hpp"
#include "op_names.hpp"

namespace bsw {
namespace {

// Per-sample element counts above this are refused: with batches up to 2^24 every buffer size then fits in 64
// bits.
constexpr int64_t kMaxSampleElements = int64_t{1} << 36;
constexpr int64_t kMaxParameters = int64_t{1} << 40;
constexpr int kMaxResidualDepth = 32;

std::string shape_text(const std::vector<int64_t>& s) {
  if (s.empty()) return "[]";
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Lowerer {
 public:
  explicit Lowerer(const ModelSpec& model) : model_(model) {}

  Graph run() {
    graph_.model_name = model_.name;
    graph_.input_type = model_.input.type;
    graph_.loss = model_.loss;
    graph_.optimizer = model_.optimizer;
    const InputSpec& in = model_.input;
    switch (in.type) {
      case InputType::vector:
        shape_ = {in.features};
        break;
      case InputType::image:
        shape_ = {in.channels, in.height, in.width};
        break;
      case InputType::tokens:
        shape_ = {in.sequence_length};
        token_ids_ = true;
        graph_.tokens_per_sample = in.sequence_length;
        break;
    }
    check_elements(shape_, "input");
    graph_.input_shape = shape_;
    if (model_.layers.empty()) fail("layers", "a model needs at least one layer");
    for (const LayerSpec& layer : model_.layers) lower_repeated(layer, 0);
    if (token_ids_) fail("layers", "token inputs need an `embedding` layer first");
    if (graph_.ops.empty())
      fail("layers", "no layer computes anything (a model of only `flatten` has nothing to run)");
    graph_.output_shape = shape_;
    finish_loss();
    mark_input_gradients();
    route_inference();
    graph_.train_flops_per_sample = 3.0 * graph_.forward_flops_per_sample - skipped_input_gradient_flops();
    return std::move(graph_);
  }

 private:
  // Op::writes_residual and Op::save_copies, walking the ops with where each one's input is in inference.
  void route_inference() {
    int current = -1;  // the act.residual depth holding the current tensor; -1: elsewhere
    std::vector<Op>& ops = graph_.ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      Op& op = ops[i];
      switch (op.kind) {
        case OpKind::residual_save:
          op.save_copies = current != op.residual_depth;
          current = op.residual_depth;
          break;
        case OpKind::residual_branch:  // the inner ops start again from the residual's input
          current = op.residual_depth;
          break;
        case OpKind::residual_add:  // the last op of a shortcut writes act.shortcut, whatever it is
          op.writes_residual = op.ends_shortcut >= 0 ? -1 : op.residual_depth;
          current = op.writes_residual;
          break;
        default: {
          const int next_save =
              i + 1 < ops.size() && ops[i + 1].kind == OpKind::residual_save ? ops[i + 1].residual_depth : -1;
          op.writes_residual =
              next_save >= 0 && op.ends_shortcut < 0 && current != next_save ? next_save : -1;
          current = op.writes_residual;
        }
      }
    }
  }

  // Op::input_gradient: whether the op's input has a gradient, i.e. whether an op with parameters feeds it:
  // false up to and including the first op with parameters. A residual's paths both start from its input,
  // and its add's output has a gradient where either addend has one.
  void mark_input_gradients() {
    struct Open {
      bool input = false;     // the residual's input has a gradient
      bool shortcut = false;  // the shortcut's result has one
    };
    std::vector<Open> open;
    bool learned = false;
    for (Op& op : graph_.ops) {
      op.input_gradient = learned;
      switch (op.kind) {
        case OpKind::residual_save:
          open.push_back({learned, false});
          op.residual_without_gradient = !learned;
          break;
        case OpKind::residual_branch:
          open.back().shortcut = learned;
          learned = open.back().input;
          break;
        case OpKind::residual_add: {
          const Open r = open.back();
          open.pop_back();
          const bool other = op.has_shortcut ? r.shortcut : r.input;
          op.residual_without_gradient = !other;
          learned = learned || other;
          break;
        }
        default:
          learned = learned || op.param_elements > 0;
          break;
      }
    }
  }

  // An op with parameters whose input has no gradient (the first on each path from the data) computes no
  // input gradient: for the ops with FLOPs, that work equals their forward.
  [[nodiscard]] double skipped_input_gradient_flops() const {
    double skipped = 0;
    for (const Op& op : graph_.ops) {
      if (op.param_elements == 0 || op.input_gradient) continue;
      const bool matmul =
          op.kind == OpKind::linear || op.kind == OpKind::conv2d || op.kind == OpKind::patch_embedding;
      if (matmul) skipped += op.forward_flops;
    }
    return skipped;
  }

  // A repeated layer's copies share one JSON path: the message says which copy failed (the first maps in ->
  // out, the rest out -> out, so a later copy may fail where the first did not).
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw ConfigError(model_.source, path, message + repeat_note_);
  }

  // For an op's path ("layers[2]#1.layers[0].attn.qkv"): the error names the layer's JSON path
  // ("layers[2].layers[0]"; repeat_note_ says which copy) and the part of it in words.
  [[noreturn]] void fail_op(const std::string& path, const std::string& message) const {
    const detail::OpName name = detail::split_op_path(path);
    fail(name.json_path, name.part.empty() ? message : fmt::format("in its {}, {}", name.part, message));
  }

  int64_t numel(const std::vector<int64_t>& s) const {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }

  // Checked product of a shape: refuses per-sample sizes that would overflow once multiplied by a batch.
  void check_elements(const std::vector<int64_t>& s, const std::string& path) const {
    __int128 n = 1;
    for (int64_t d : s) {
      if (d <= 0) fail_op(path, fmt::format("shape {} has a non-positive dimension", shape_text(s)));
      n *= d;
      if (n > kMaxSampleElements)
        fail_op(path, fmt::format("shape {} has more than 2^36 elements per sample: sizes would overflow",
                                  shape_text(s)));
    }
  }

  void require_not_ids(const LayerSpec& l) const {
    if (token_ids_)
      fail(l.json_path,
           fmt::format("`{}` cannot take token ids: put an `embedding` layer first", to_string(l.type)));
  }

  void require_image(const LayerSpec& l) const {
    require_not_ids(l);
    if (shape_.size() != 3)
      fail(l.json_path, fmt::format("`{}` needs an image-shaped input [channels, height, width], got {}",
                                    to_string(l.type), shape_text(shape_)));
  }

  void require_tokens(const LayerSpec& l) const {
    require_not_ids(l);
    if (shape_.size() != 2)
      fail(l.json_path, fmt::format("`{}` needs a token sequence [tokens, dim], got {}", to_string(l.type),
                                    shape_text(shape_)));
  }

  Op& push(OpKind kind, std::string path, std::vector<int64_t> out_shape) {
    check_elements(out_shape, path);
    Op op;
    op.kind = kind;
    op.path = std::move(path);
    op.in_shape = shape_;
    op.out_shape = std::move(out_shape);
    // The add closes its residual (open_residuals_ pops after the push): it is inside the one around that.
    const size_t open = open_residuals_.size() - (kind == OpKind::residual_add ? 1 : 0);
    op.enclosing_save = open == 0 ? -1 : static_cast<int64_t>(open_residuals_[open - 1]);
    graph_.ops.push_back(std::move(op));
    shape_ = graph_.ops.back().out_shape;
    return graph_.ops.back();
  }

  // A parameter tensor of the product of `factors` elements (none where one is 0), multiplied in 128 bits so
  // that dimensions up to 2^31 each cannot wrap past the 2^40 limit into a small or vanished tensor.
  void add_param(Op& op, const std::string& name, std::initializer_list<int64_t> factors,
                 const std::string& path) {
    __int128 product = 1;
    for (const int64_t f : factors) {
      if (f <= 0) return;
      product *= f;
      if (product > kMaxParameters) fail_op(path, "more than 2^40 parameters: sizes would overflow");
    }
    const auto elements = static_cast<int64_t>(product);
    if (graph_.parameters + elements > kMaxParameters)
      fail_op(path, "more than 2^40 parameters: sizes would overflow");
    op.params.push_back({name, graph_.parameters, elements});
    op.param_elements += elements;
    graph_.parameters += elements;
  }

  void add_flops(Op& op, double flops) {
    op.forward_flops = flops;
    graph_.forward_flops_per_sample += flops;
  }

  // An op's path: its layer's JSON path, with "#k" after each repeated layer it is in (copy k), so the ops of
  // a repeated residual's copies are told apart ("layers[2]#1.layers[0]").
  [[nodiscard]] std::string op_path(const std::string& json_path) const {
    for (auto it = copies_.rbegin(); it != copies_.rend(); ++it) {
      const std::string& from = it->first;
      if (json_path.starts_with(from) && json_path.size() > from.size() && json_path[from.size()] == '.')
        return it->second + json_path.substr(from.size());
    }
    return json_path;
  }

  void lower_repeated(const LayerSpec& layer, int depth) {
    const std::string outer = repeat_note_;
    const std::string base = op_path(layer.json_path);
    for (int64_t r = 0; r < layer.repeat; ++r) {
      const std::string path = layer.repeat > 1 ? fmt::format("{}#{}", base, r) : base;
      if (layer.repeat > 1) copies_.emplace_back(layer.json_path, path);
      if (layer.repeat > 1)
        repeat_note_ = fmt::format(" (in copy #{} of the {} that {}'s `repeat` makes, counting from #0{}{}",
                                   r, layer.repeat, layer.json_path, outer.empty() ? ")" : "; ",
                                   std::string_view(outer).substr(outer.empty() ? 0 : 2));
      const size_t first = graph_.ops.size();
      lower_layer(layer, path, depth);
      const bool block = layer.type == LayerType::transformer_block || layer.type == LayerType::residual;
      if (depth == 0 && block) graph_.blocks.push_back({first, graph_.ops.size() - 1});
      if (layer.repeat > 1) copies_.pop_back();
    }
    repeat_note_ = outer;
  }

  void linear(const LayerSpec& l, const std::string& path, int64_t out_features, bool bias, Activation act) {
    require_not_ids(l);
    const int64_t in = shape_.back();
    std::vector<int64_t> out = shape_;
    out.back() = out_features;
    const int64_t rows = numel(shape_) / in;
    Op& op = push(OpKind::linear, path, out);
    op.rows = rows;
    op.in_features = in;
    op.out_features = out_features;
    op.bias = bias;
    op.activation = act;
    add_param(op, "weight", {in, out_features}, path);
    if (bias) add_param(op, "bias", {out_features}, path);
    add_flops(op,
              2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out_features));
  }

  void layernorm(const LayerSpec& l, const std::string& path) {
    require_not_ids(l);
    const int64_t dim = shape_.back();
    const int64_t rows = numel(shape_) / dim;
    Op& op = push(OpKind::layernorm, path, shape_);
    op.rows = rows;
    op.dim = dim;
    add_param(op, "gamma", {dim}, path);
    add_param(op, "beta", {dim}, path);
  }

  // Per channel of an image [C, H, W] (BatchNorm2d) or per feature of a vector [F] (BatchNorm1d). A token
  // sequence [T, D] would normalize over PyTorch's channel dim T, which nobody means: refused.
  void batchnorm(const LayerSpec& l, const std::string& path) {
    if (token_ids_)
      fail(l.json_path,
           "`batchnorm` normalizes an image or a vector, not token ids (a token sequence "
           "normalizes with `layernorm`)");
    int64_t channels = 0, spatial = 1;
    if (shape_.size() == 3) {
      channels = shape_[0];
      spatial = shape_[1] * shape_[2];
    } else if (shape_.size() == 1) {
      channels = shape_[0];
    } else {
      fail(l.json_path, fmt::format("`batchnorm` needs an image [C, H, W] or a vector [F], got {} (a token "
                                    "sequence normalizes with `layernorm`)",
                                    shape_text(shape_)));
    }
    // The CUDA kernels put channels on a grid dimension: more than 2^31 - 1 (a vector that wide) is refused
    // here, before any batch is planned.
    if (channels > std::numeric_limits<int32_t>::max())
      fail(l.json_path, fmt::format("`batchnorm` over {} channels: at most 2^31 - 1", channels));
    Op& op = push(OpKind::batchnorm, path, shape_);
    op.channels = channels;
    op.spatial = spatial;
    op.activation = l.activation;
    add_param(op, "gamma", {channels}, path);
    add_param(op, "beta", {channels}, path);
  }

  void attention(const LayerSpec& l, const std::string& path) {
    require_tokens(l);
    const int64_t seq = shape_[0], dim = shape_[1];
    if (l.heads <= 0) fail(l.json_path + ".heads", "must be a positive integer");
    if (dim % l.heads != 0)
      fail(l.json_path + ".heads", fmt::format("{} does not divide dim {}", l.heads, dim));
    linear(l, path + ".qkv", 3 * dim, true, Activation::none);
    Op& core = push(OpKind::attention_core, path + ".core", {seq, dim});
    core.seq = seq;
    core.dim = dim;
    core.heads = l.heads;
    core.causal = l.causal;
    // q k^T and p v: 2 * T * T * D each, counted in full also when causal (README conventions).
    add_flops(core, 4.0 * static_cast<double>(seq) * static_cast<double>(seq) * static_cast<double>(dim));
    linear(l, path + ".out", dim, true, Activation::none);
  }

  void residual_open(const std::string& path, int depth, bool has_shortcut = false) {
    if (depth >= kMaxResidualDepth) fail_op(path, "residual nesting too deep (more than 32 levels)");
    Op& op = push(OpKind::residual_save, path + ".save", shape_);
    op.residual_depth = depth;
    op.has_shortcut = has_shortcut;
    open_residuals_.push_back(graph_.ops.size() - 1);
    graph_.max_residual_depth = std::max(graph_.max_residual_depth, depth + 1);
  }

  // After a residual's shortcut layers: their result waits for the add, and the inner layers start again
  // from the residual's input.
  void residual_branch(const LayerSpec& l, const std::vector<int64_t>& in_shape, const std::string& path,
                       int depth) {
    const size_t save = open_residuals_.back();
    graph_.ops[save].residual_branch_index = graph_.ops.size();  // the branch pushed below
    if (graph_.ops.size() - 1 == save)
      fail(l.json_path + ".shortcut",
           "the shortcut computes nothing (a `flatten` alone is no projection): "
           "leave `shortcut` out for the identity");
    graph_.ops.back().ends_shortcut = depth;
    shortcut_shapes_.push_back(shape_);
    Op& op = push(OpKind::residual_branch, path + ".branch", in_shape);  // in: the shortcut's result
    op.residual_depth = depth;
    op.residual_partner = save;
    op.has_shortcut = true;
    shape_ = in_shape;
  }

  void residual_close(const std::vector<int64_t>& in_shape, const std::string& path, int depth,
                      Activation activation = Activation::none, bool has_shortcut = false) {
    std::vector<int64_t> other = in_shape;
    if (has_shortcut) {
      other = shortcut_shapes_.back();
      shortcut_shapes_.pop_back();
      if (shape_ != other)
        fail_op(path, fmt::format(
                          "residual: the shortcut makes {} and the inner layers {}; they must match to be "
                          "added (in torchvision's blocks the shortcut's 1x1 conv has the block's stride and "
                          "out_channels, and the inner 3x3 conv padding 1)",
                          shape_text(other), shape_text(shape_)));
    } else if (shape_ != in_shape) {
      fail_op(
          path,
          fmt::format("residual: inner layers change the shape from {} to {}; they must keep it so the input "
                      "can be added, or the residual needs a `shortcut` that projects its input to {} (a 1x1 "
                      "conv with the inner layers' stride, then a batchnorm, as torchvision's downsample)",
                      shape_text(in_shape), shape_text(shape_), shape_text(shape_)));
    }
    const Op& inner = graph_.ops.back();  // the last inner op (or the save or branch, for no inner op)
    // The sum goes over the inner layer's output, also with an activation after the add: a ReLU or tanh runs
    // in place there (torchvision's BasicBlock: out += identity, then an in-place ReLU); a GELU or SiLU keeps
    // the sum there as its pre-activation and writes its own output.
    const bool in_place = inner.kind != OpKind::residual_save && inner.kind != OpKind::residual_branch &&
                          !inner.backward_reads_output();
    const size_t branch = has_shortcut ? graph_.ops[open_residuals_.back()].residual_branch_index : 0;
    Op& op = push(OpKind::residual_add, path + ".add", shape_);
    op.residual_depth = depth;
    op.activation = activation;
    op.adds_in_place = in_place;
    op.residual_partner = open_residuals_.back();
    op.has_shortcut = has_shortcut;
    op.residual_branch_index = branch;
    open_residuals_.pop_back();
  }

  void conv_like(const LayerSpec& l, const std::string& path, OpKind kind, int64_t k, int64_t stride,
                 int64_t pad) {
    require_image(l);
    const int64_t c = shape_[0], h = shape_[1], w = shape_[2];
    if (k <= 0) fail(l.json_path + ".kernel_size", "must be a positive integer");
    if (stride <= 0) fail(l.json_path + ".stride", "must be a positive integer");
    // PyTorch's rule for pools: a window that is all padding would have no value (max) or divide zeros (avg).
    if (kind != OpKind::conv2d && 2 * pad > k)
      fail(l.json_path + ".padding",
           fmt::format("{} is more than half the kernel size {} (PyTorch's limit for pooling)", pad, k));
    if (h + 2 * pad < k || w + 2 * pad < k)
      fail(l.json_path + ".kernel_size",
           fmt::format("kernel {} is larger than the {}x{} input{}", k, h, w,
                       pad ? fmt::format(" padded by {}", pad) : std::string()));
    const int64_t hout = (h + 2 * pad - k) / stride + 1;
    const int64_t wout = (w + 2 * pad - k) / stride + 1;
    const int64_t cout = kind == OpKind::conv2d ? l.out_channels : c;
    Op& op = push(kind, path, {cout, hout, wout});
    op.channels = c;
    op.height = h;
    op.width = w;
    op.out_channels = cout;
    op.kernel = k;
    op.stride = stride;
    op.padding = pad;
    op.out_height = hout;
    op.out_width = wout;
    if (kind == OpKind::conv2d) {
      op.bias = l.bias;
      op.activation = l.activation;
      add_param(op, "weight", {cout, c, k, k}, path);
      if (l.bias) add_param(op, "bias", {cout}, path);
      add_flops(op, 2.0 * static_cast<double>(cout) * static_cast<double>(c * k * k) *
                        static_cast<double>(hout * wout));
    }
  }

  void lower_layer(const LayerSpec& l, const std::string& path, int depth) {
    switch (l.type) {
      case LayerType::linear:
        if (l.out_features <= 0) fail(l.json_path + ".out_features", "must be a positive integer");
        linear(l, path, l.out_features, l.bias, l.activation);
        break;
      case LayerType::conv2d:
        if (l.out_channels <= 0) fail(l.json_path + ".out_channels", "must be a positive integer");
        if (l.padding < 0) fail(l.json_path + ".padding", "must not be negative");
        conv_like(l, path, OpKind::conv2d, l.kernel_size, l.stride, l.padding);
        break;
      case LayerType::maxpool2d:
        conv_like(l, path, OpKind::maxpool2d, l.kernel_size, l.stride, l.padding);
        break;
      case LayerType::avgpool2d:
        conv_like(l, path, OpKind::avgpool2d, l.kernel_size, l.stride, l.padding);
        break;
      case LayerType::global_avgpool: {
        require_not_ids(l);
        if (shape_.size() == 3) {
          const int64_t c = shape_[0], s = shape_[1] * shape_[2];
          Op& op = push(OpKind::global_avgpool, path, {c});
          op.channels = c;
          op.spatial = s;
        } else if (shape_.size() == 2) {
          const int64_t t = shape_[0], d = shape_[1];
          Op& op = push(OpKind::global_avgpool, path, {d});
          op.channels = d;
          op.spatial = t;
          op.tokens_layout = true;
        } else {
          fail(l.json_path, fmt::format("`global_avgpool` needs an image [C, H, W] or tokens [T, D], got {}",
                                        shape_text(shape_)));
        }
        break;
      }
      case LayerType::flatten:
        require_not_ids(l);
        shape_ = {numel(shape_)};
        break;
      case LayerType::layernorm:
        layernorm(l, path);
        break;
      case LayerType::batchnorm:
        batchnorm(l, path);
        break;
      case LayerType::embedding: {
        if (!token_ids_)
          fail(l.json_path, fmt::format("`embedding` needs token ids (input type \"tokens\"), got {}",
                                        shape_text(shape_)));
        if (l.dim <= 0) fail(l.json_path + ".dim", "must be a positive integer");
        token_ids_ = false;
        const int64_t seq = shape_[0];
        Op& op = push(OpKind::embedding, path, {seq, l.dim});
        op.seq = seq;
        op.dim = l.dim;
        op.vocab = model_.input.vocab_size;
        add_param(op, "tokens", {op.vocab, l.dim}, path);
        add_param(op, "positions", {seq, l.dim}, path);
        break;
      }
      case LayerType::patch_embedding: {
        require_image(l);
        const int64_t p = l.patch_size, c = shape_[0], h = shape_[1], w = shape_[2];
        if (p <= 0) fail(l.json_path + ".patch_size", "must be a positive integer");
        if (l.dim <= 0) fail(l.json_path + ".dim", "must be a positive integer");
        if (h % p != 0 || w % p != 0)
          fail(l.json_path + ".patch_size", fmt::format("{} does not divide the {}x{} image", p, h, w));
        const int64_t n = (h / p) * (w / p);
        Op& op = push(OpKind::patch_embedding, path, {n, l.dim});
        op.channels = c;
        op.height = h;
        op.width = w;
        op.kernel = p;
        op.stride = p;
        op.out_height = h / p;
        op.out_width = w / p;
        op.seq = n;
        op.dim = l.dim;
        op.bias = true;
        add_param(op, "weight", {l.dim, c, p, p}, path);
        add_param(op, "bias", {l.dim}, path);
        add_param(op, "positions", {n, l.dim}, path);
        add_flops(op,
                  2.0 * static_cast<double>(l.dim) * static_cast<double>(c * p * p) * static_cast<double>(n));
        break;
      }
      case LayerType::attention:
        attention(l, path);
        break;
      case LayerType::transformer_block: {
        require_tokens(l);
        if (l.mlp_ratio <= 0) fail(l.json_path + ".mlp_ratio", "must be a positive integer");
        const std::vector<int64_t> in = shape_;
        const int64_t dim = shape_[1];
        residual_open(path + ".attn", depth);
        layernorm(l, path + ".ln1");
        attention(l, path + ".attn");
        residual_close(in, path + ".attn", depth);
        residual_open(path + ".mlp", depth);
        layernorm(l, path + ".ln2");
        // The hidden layer [tokens, mlp_ratio x dim] is named by the field that sizes it, before its product
        // could overflow.
        if (static_cast<__int128>(l.mlp_ratio) * dim * shape_[0] > kMaxSampleElements)
          fail(l.json_path + ".mlp_ratio",
               fmt::format("{} x the width {} over {} tokens makes an MLP hidden layer of more than 2^36 "
                           "elements per sample: sizes would overflow",
                           l.mlp_ratio, dim, shape_[0]));
        linear(l, path + ".mlp.fc", l.mlp_ratio * dim, true, Activation::gelu);
        linear(l, path + ".mlp.proj", dim, true, Activation::none);
        residual_close(in, path + ".mlp", depth);
        break;
      }
      case LayerType::residual: {
        if (l.layers.empty()) fail(l.json_path + ".layers", "a residual needs at least one inner layer");
        require_not_ids(l);
        const std::vector<int64_t> in = shape_;
        const bool has_shortcut = !l.shortcut.empty();
        residual_open(path, depth, has_shortcut);
        // The shortcut first, from the input, then the inner layers from the input again: the add then goes
        // over the inner layers' output (torchvision: out += identity) and the projected identity waits.
        if (has_shortcut) {
          for (const LayerSpec& s : l.shortcut) lower_repeated(s, depth + 1);
          residual_branch(l, in, path, depth);
        }
        for (const LayerSpec& inner : l.layers) lower_repeated(inner, depth + 1);
        residual_close(in, path, depth, l.activation, has_shortcut);
        break;
      }
    }
  }

  void finish_loss() {
    const auto& out = shape_;
    if (model_.loss == LossType::cross_entropy) {
      if (out.size() == 1) {
        graph_.loss_rows = 1;
        graph_.loss_classes = out[0];
      } else if (out.size() == 2) {
        graph_.loss_rows = out[0];
        graph_.loss_classes = out[1];
        // A language model's [tokens, classes] is one label a token; an image's patches are seldom labelled
        // one by one: a ViT whose global_avgpool was left out plans and runs, as a different model.
        if (model_.input.type == InputType::image)
          graph_.notes.push_back(fmt::format(
              "{}: the output is [{}, {}] from an image input: cross_entropy takes one label per patch "
              "(token); an image classifier pools the patches first (`global_avgpool` before the last "
              "`linear`, as the vit-base preset does)",
              model_.source, out[0], out[1]));
      } else {
        fail("loss", fmt::format("cross_entropy needs a [classes] or [tokens, classes] output, got {} (add "
                                 "`global_avgpool` or `flatten` and a `linear`)",
                                 shape_text(out)));
      }
      if (graph_.loss_classes < 2)
        fail("loss",
             fmt::format("cross_entropy needs at least 2 classes, the output has {}", graph_.loss_classes));
      if (graph_.loss_classes > std::numeric_limits<int32_t>::max())
        fail("loss", "cross_entropy: too many classes for 32-bit labels");
    } else {
      graph_.loss_rows = numel(out);
      graph_.loss_classes = 0;
    }
  }

  const ModelSpec& model_;
  Graph graph_;
  std::vector<int64_t> shape_;
  std::vector<size_t> open_residuals_;  // the residual_save op of each open residual, innermost last
  std::vector<std::vector<int64_t>> shortcut_shapes_;  // the shortcut result's shape, per open branch
  std::vector<std::pair<std::string, std::string>>
      copies_;  // (JSON path, op path) of the repeats being lowered
  // " (in copy #2 of the 3 that layers[0]'s `repeat` makes, counting from #0)" while lowering a repeated
  // layer
  std::string repeat_note_;
  bool token_ids_ = false;
};

}  // namespace

int64_t Op::in_elements() const {
  int64_t n = 1;
  for (int64_t d : in_shape) n *= d;
  return n;
}

int64_t Op::fan_in() const {
  switch (kind) {
    case OpKind::linear:
      return in_features;
    case OpKind::conv2d:
    case OpKind::patch_embedding:
      return channels * kernel * kernel;
    default:
      return 1;
  }
}

int64_t Op::out_elements() const {
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  return n;
}

Graph lower(const ModelSpec& model) {
  return Lowerer(model).run();
}

std::optional<size_t> backward_resume(const Graph& g, size_t stopped) {
  size_t at = stopped;
  for (int64_t r = g.ops.at(stopped).enclosing_save; r >= 0;
       r = g.ops[static_cast<size_t>(r)].enclosing_save) {
    const Op& save = g.ops[static_cast<size_t>(r)];
    if (save.has_shortcut) {
      const size_t branch = save.residual_branch_index;
      if (at > branch && g.ops[branch].input_gradient) return branch;
    }
    at = static_cast<size_t>(r);
  }
  return std::nullopt;
}

}  // namespace bsw
