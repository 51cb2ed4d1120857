// cuDNN graphs through the frontend (see cudnn_graphs.hpp). Tensor UIDs are fixed per role so one variant
// pack layout serves every shape; graphs are keyed by every number that shapes them, including the workspace
// limit their plan was chosen under.
#include "backends/cuda/cudnn_graphs.hpp"

#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backends/cuda/check.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cuda {
namespace fe = cudnn_frontend;
namespace {

// Tensor UIDs by role.
enum Uid : int64_t { kX = 1, kW, kY, kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Entry {
  int64_t batch = 0;
  std::shared_ptr<fe::graph::Graph> graph;  // null when unsupported
  int64_t workspace_bytes = 0;
  std::string error;            // why unsupported
  DType dw_dtype = DType::f32;  // what a wgrad writes, for fp16: f32 where an engine takes it, else f16
};

fe::DataType_t io_type(DType t) {
  switch (t) {
    case DType::f32:
      return fe::DataType_t::FLOAT;
    case DType::bf16:
      return fe::DataType_t::BFLOAT16;
    case DType::f16:
      return fe::DataType_t::HALF;
    case DType::i32:
      break;
  }
  throw BackendError("cuDNN graphs: integer tensors are not supported");
}

std::vector<int64_t> nchw_strides(int64_t c, int64_t h, int64_t w) {
  return {c * h * w, h * w, w, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                     std::vector<int64_t> dims,
                                                     std::vector<int64_t> strides) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

const char* pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::fprop:
      return "fprop";
    case ConvPass::dgrad:
      return "dgrad";
    case ConvPass::wgrad:
      return "wgrad";
  }
  return "?";
}

std::string conv_key(ConvPass pass, const ConvShape& s, uint64_t limit) {
  return fmt::format("conv {} n{} c{} {}x{} k{} r{} s{} p{} {} a{} ws{}", pass_name(pass), s.batch,
                     s.channels, s.height, s.width, s.out_channels, s.kernel, s.stride, s.padding,
                     to_string(s.precision), s.w_alignment, limit);
}

std::string sdpa_key(bool backward, const SdpaShape& s, uint64_t limit) {
  return fmt::format("sdpa {} b{} h{} t{} d{} {} {} {} ws{}", backward ? "bwd" : "fwd", s.batch, s.heads,
                     s.seq, s.head_dim, s.causal ? "causal" : "full", to_string(s.dtype),
                     s.training ? "train" : "infer", limit);
}

}  // namespace

ConvShape conv_shape(const Op& op, int64_t batch, Precision precision) {
  ConvShape s;
  s.batch = batch;
  s.channels = op.channels;
  s.height = op.height;
  s.width = op.width;
  s.out_channels = op.out_channels;
  s.kernel = op.kernel;
  s.stride = op.stride;
  s.padding = op.padding;
  s.out_height = op.out_height;
  s.out_width = op.out_width;
  s.precision = precision;
  // The arena and every buffer start on 256 bytes; the weights sit at their offset in the packed parameters.
  const uint64_t offset_bytes =
      static_cast<uint64_t>(op.params.front().offset) * dtype_bytes(storage_dtype(precision));
  while (s.w_alignment > 1 && offset_bytes % static_cast<uint64_t>(s.w_alignment) != 0) s.w_alignment /= 2;
  return s;
}

SdpaShape sdpa_shape(const Op& op, int64_t batch, DType dtype, bool training) {
  return SdpaShape{batch, op.heads, op.seq, op.dim / op.heads, op.causal, dtype, training};
}

std::string cudnn_limit(const ConvShape& s, size_t cudnn_version) {
  if (cudnn_version >= kCudnnLargeTensorVersion) return {};
  const int64_t input = s.batch * s.channels * s.height * s.width;
  const int64_t output = s.batch * s.out_channels * s.out_height * s.out_width;
  const int64_t larger = std::max(input, output);
  if (larger <= kCudnnIndexedElements) return {};
  return fmt::format(
      "its {} holds {} elements, past the 2^31 - 1 that cuDNN {}.{} indexes (64-bit indexing came in 9.3)",
      input >= output ? "input" : "output", larger, cudnn_version / 10000, cudnn_version / 100 % 100);
}

std::string cudnn_limit(const SdpaShape& s) {
  if (s.batch <= kCudnnSdpaMostSequences) return {};
  return fmt::format(
      "cuDNN's fused attention runs at most {} sequences at once, and this batch has {} (its execute fails "
      "past that; PyTorch sends such a batch to another attention too)",
      kCudnnSdpaMostSequences, s.batch);
}

// The frontend's errors carry a code and a message; a device allocation failure is known only by its text
// (CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, or CUDA's "out of memory"). ALLOC_FAILED alone is
// the host's (CUDNN_STATUS_ALLOC_FAILED is an alias of ..._HOST_ALLOCATION_FAILED).
static bool device_allocation_failed(const std::string& message) {
  return message.find("DEVICE_ALLOCATION_FAILED") != std::string::npos ||
         message.find("out of memory") != std::string::npos;
}

struct CudnnGraphs::Cache {
  int device = 0;
  cudnnHandle_t handle = nullptr;
  std::map<std::string, Entry> entries;

  // validate -> operation graph -> heuristics (A, then the fallback list) -> filters -> support -> plan.
  // frontend_workspace: what the frontend adds to the engine's own workspace (SDPA backward's dQ accumulator
  // and softmax sums); the engine filter gets what is left of the limit.
  Entry finish(std::shared_ptr<fe::graph::Graph> g, uint64_t workspace_limit, bool strict_fp32,
               uint64_t frontend_workspace = 0) {
    Entry e;
    if (frontend_workspace > workspace_limit) {
      e.error = fmt::format("cuDNN: the frontend alone needs {} bytes of workspace, over the planned {}",
                            frontend_workspace, workspace_limit);
      return e;
    }
    auto fail = [&](const char* stage, fe::error_t status) {
      // The frontend's error holds a code and a message; a cuDNN allocation failure (loading kernels,
      // building a plan) is known only by its text. Out of memory is a measurement of this batch, not a
      // rejection of the shape: thrown, so the point is oom and nothing is remembered.
      const std::string& message = status.get_message();
      if (device_allocation_failed(message))
        throw OutOfMemory(fmt::format("cuDNN {} ran out of device memory: {}", stage, message));
      e.error = fmt::format("cuDNN {}: {}", stage, message);
      // Remembered as cuDNN rejecting this shape only where the failure is the build's own: not a context an
      // earlier kernel broke (the sweep stops), nor, where the stage allocates (building the plans), one with
      // next to no memory free (this batch's oom). A shape validate or check_support rejects stays rejected
      // however little memory is free, so that the fallbacks (an fp16 dW, im2col) still run.
      detail::check_library_failure(e.error, std::string_view(stage) == "build_plans");
      return e;
    };
    if (auto s = g->validate(); s.is_bad()) return fail("validate", s);
    if (auto s = g->build_operation_graph(handle); s.is_bad()) return fail("build_operation_graph", s);
    if (auto s = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); s.is_bad())
      return fail("heuristics", s);
    // fp32 means fp32: no engine that rounds the inputs to TF32 (or lower) on tensor cores. In every
    // precision, no engine that converts the inputs below the precision asked for (PyTorch drops them too).
    if (strict_fp32)
      g->deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
    else
      g->deselect_numeric_notes({fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
    g->deselect_workspace_greater_than(static_cast<int64_t>(workspace_limit - frontend_workspace));
    if (auto s = g->check_support(handle); s.is_bad()) return fail("check_support", s);
    if (auto s = g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); s.is_bad())
      return fail("build_plans", s);
    if (auto s = g->get_workspace_size(e.workspace_bytes); s.is_bad()) return fail("get_workspace_size", s);
    if (e.workspace_bytes > static_cast<int64_t>(workspace_limit)) {
      e.error = fmt::format("cuDNN: the chosen plan needs {} bytes of workspace, over the planned {}",
                            e.workspace_bytes, workspace_limit);
      return e;
    }
    e.graph = std::move(g);
    return e;
  }

  // fp16 weight gradients carry the loss scale (65536 at first): an fp32 dW keeps them finite, as on the
  // im2col path. Where no engine writes fp32 from fp16 operands, an fp16 dW, as PyTorch's autocast computes
  // it: a gradient past 65504 is inf, and the step is skipped and the scale halved, as GradScaler does.
  // bf16 has fp32's range and stays 16-bit.
  Entry build_conv(ConvPass pass, const ConvShape& s, uint64_t workspace_limit) {
    if (pass != ConvPass::wgrad || s.precision != Precision::fp16)
      return build_conv(pass, s, workspace_limit, {});
    Entry wide = build_conv(pass, s, workspace_limit, DType::f32);
    // Only where no engine takes the fp32 output: a plan over the workspace is not that.
    if (wide.graph || wide.error.find("workspace") != std::string::npos) return wide;
    Entry narrow = build_conv(pass, s, workspace_limit, DType::f16);
    if (!narrow.graph) return wide;  // the first reason
    narrow.dw_dtype = DType::f16;
    return narrow;
  }

  Entry build_conv(ConvPass pass, const ConvShape& s, uint64_t workspace_limit,
                   std::optional<DType> dw_type) {
    auto g = std::make_shared<fe::graph::Graph>();
    const fe::DataType_t io = io_type(storage_dtype(s.precision));
    g->set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const std::vector<int64_t> x_dims{s.batch, s.channels, s.height, s.width};
    const std::vector<int64_t> w_dims{s.out_channels, s.channels, s.kernel, s.kernel};
    const std::vector<int64_t> y_dims{s.batch, s.out_channels, s.out_height, s.out_width};
    const auto x_strides = nchw_strides(s.channels, s.height, s.width);
    const auto w_strides = nchw_strides(s.channels, s.kernel, s.kernel);
    const auto y_strides = nchw_strides(s.out_channels, s.out_height, s.out_width);
    const std::vector<int64_t> pad{s.padding, s.padding}, stride{s.stride, s.stride}, dilation{1, 1};
    switch (pass) {
      case ConvPass::fprop: {
        auto x = tensor(*g, "x", kX, x_dims, x_strides);
        auto w = tensor(*g, "w", kW, w_dims, w_strides);
        w->set_alignment(s.w_alignment);
        auto y = g->conv_fprop(
            x, w,
            fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
        y->set_output(true).set_uid(kY).set_dim(y_dims).set_stride(y_strides);
        break;
      }
      case ConvPass::dgrad: {
        auto dy = tensor(*g, "dy", kY, y_dims, y_strides);
        auto w = tensor(*g, "w", kW, w_dims, w_strides);
        w->set_alignment(s.w_alignment);
        auto dx = g->conv_dgrad(
            dy, w,
            fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
        dx->set_output(true).set_uid(kX).set_dim(x_dims).set_stride(x_strides);
        break;
      }
      case ConvPass::wgrad: {
        auto dy = tensor(*g, "dy", kY, y_dims, y_strides);
        auto x = tensor(*g, "x", kX, x_dims, x_strides);
        auto dw = g->conv_wgrad(
            dy, x,
            fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
        dw->set_output(true).set_uid(kW).set_dim(w_dims).set_stride(w_strides);
        if (dw_type) dw->set_data_type(io_type(*dw_type));
        break;
      }
    }
    return finish(std::move(g), workspace_limit, s.precision == Precision::fp32);
  }

  Entry build_sdpa(bool backward, const SdpaShape& s, uint64_t workspace_limit) {
    if (s.dtype != DType::bf16 && s.dtype != DType::f16) {
      Entry e;
      e.error = "cuDNN SDPA runs in fp16 or bf16 only";
      return e;
    }
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(io_type(s.dtype))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t d_model = s.heads * s.head_dim;
    const std::vector<int64_t> dims{s.batch, s.heads, s.seq, s.head_dim};
    const std::vector<int64_t> qkv_strides{s.seq * 3 * d_model, s.head_dim, 3 * d_model, 1};
    const std::vector<int64_t> o_strides{s.seq * d_model, s.head_dim, d_model, 1};
    const std::vector<int64_t> stats_dims{s.batch, s.heads, s.seq, 1};
    const std::vector<int64_t> stats_strides{s.heads * s.seq, s.seq, 1, 1};
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    auto q = tensor(*g, "q", kQ, dims, qkv_strides);
    auto k = tensor(*g, "k", kK, dims, qkv_strides);
    auto v = tensor(*g, "v", kV, dims, qkv_strides);
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("sdpa")
                         .set_generate_stats(s.training)
                         .set_attn_scale(scale)
                         .set_causal_mask(s.causal)
                         .set_implementation(fe::AttentionImplementation_t::COMPOSITE);
      auto [o, stats] = g->sdpa(q, k, v, options);
      o->set_output(true).set_uid(kO).set_dim(dims).set_stride(o_strides);
      if (s.training)
        stats->set_output(true)
            .set_uid(kStats)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim(stats_dims)
            .set_stride(stats_strides);
    } else {
      auto o = tensor(*g, "o", kO, dims, o_strides);
      auto d_o = tensor(*g, "dO", kDO, dims, o_strides);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(kStats)
                                 .set_dim(stats_dims)
                                 .set_stride(stats_strides)
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("sdpa_backward")
                         .set_attn_scale(scale)
                         .set_causal_mask(s.causal);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
      dq->set_output(true).set_uid(kDQ).set_dim(dims).set_stride(qkv_strides);
      dk->set_output(true).set_uid(kDK).set_dim(dims).set_stride(qkv_strides);
      dv->set_output(true).set_uid(kDV).set_dim(dims).set_stride(qkv_strides);
    }
    // The frontend's own share of the backward workspace: the fp32 dQ accumulator and the softmax sums, and
    // on cuDNN 9.15 and older, for a sequence that is not a multiple of 128, two int32 sequence lengths per
    // sample for the padding mask it adds (scaled_dot_product_flash_attention.h, get_fe_workspace_size_node).
    uint64_t frontend = 0;
    if (backward) {
      frontend = static_cast<uint64_t>(s.batch * s.heads * s.seq * (s.head_dim + 1) * 4);
      if (s.seq % 128 != 0 && cudnnGetVersion() <= 91500) frontend += static_cast<uint64_t>(s.batch) * 8;
    }
    return finish(std::move(g), workspace_limit, false, frontend);
  }

  // The cached graph of `key`, built on first use. A build that runs out of device memory is not remembered
  // (OutOfMemory reaches the caller), nor one that met a sticky CUDA error (a plain Error, which stops the
  // sweep: it is no rejection of this shape by cuDNN); any other exception becomes the entry's error.
  const Entry& get(const std::string& key, int64_t batch, const std::function<Entry()>& build) {
    auto it = entries.find(key);
    if (it != entries.end()) return it->second;
    Entry e;
    try {
      BSW_CUDA(cudaSetDevice(device));
      e = build();
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& ex) {
      if (typeid(ex) == typeid(Error)) throw;  // the context is unusable (throw_cuda_error)
      e = Entry{};
      e.error = fmt::format("cuDNN graph build failed: {}", ex.what());
    } catch (const std::exception& ex) {
      e = Entry{};
      e.error = fmt::format("cuDNN graph build failed: {}", ex.what());
    }
    e.batch = batch;
    return entries.emplace(key, std::move(e)).first->second;
  }

  const Entry& conv_entry(ConvPass pass, const ConvShape& shape, uint64_t limit) {
    return get(conv_key(pass, shape, limit), shape.batch, [&] { return build_conv(pass, shape, limit); });
  }

  const Entry& sdpa_entry(bool backward, const SdpaShape& shape, uint64_t limit) {
    return get(sdpa_key(backward, shape, limit), shape.batch,
               [&] { return build_sdpa(backward, shape, limit); });
  }

  void execute(const Entry& e, const char* what, std::unordered_map<int64_t, void*>& pack, void* workspace,
               uint64_t workspace_bytes, cudaStream_t stream) {
    if (!e.graph) throw BackendError(fmt::format("{}: {}", what, e.error));
    if (static_cast<uint64_t>(e.workspace_bytes) > workspace_bytes)
      throw BackendError(
          fmt::format("{}: the plan needs {} bytes of cuDNN workspace, workspace.cudnn holds {}", what,
                      e.workspace_bytes, workspace_bytes));
    BSW_CUDNN(cudnnSetStream(handle, stream));
    if (auto s = e.graph->execute(handle, pack, workspace); s.is_bad()) {
      const std::string message = s.get_message();
      if (device_allocation_failed(message))
        throw OutOfMemory(fmt::format("{}: cuDNN execute ran out of device memory: {}", what, message));
      const std::string failure = fmt::format("{}: cuDNN execute: {}", what, message);
      detail::check_library_failure(failure);
      throw BackendError(failure);
    }
  }
};

CudnnGraphs::CudnnGraphs(int device) : cache_(std::make_unique<Cache>()) {
  cache_->device = device;
  BSW_CUDA(cudaSetDevice(device));
  BSW_CUDNN(cudnnCreate(&cache_->handle));
}

void CudnnGraphs::retain_batch(int64_t batch) {
  std::erase_if(cache_->entries, [&](const auto& entry) { return entry.second.batch != batch; });
}

void CudnnGraphs::detach_stream() noexcept {
  if (cache_->handle != nullptr) BSW_CUDNN_NOEXCEPT(cudnnSetStream(cache_->handle, nullptr));
}

std::vector<std::shared_ptr<const void>> CudnnGraphs::hold(int64_t batch) const {
  std::vector<std::shared_ptr<const void>> held;
  for (const auto& [key, entry] : cache_->entries)
    if (entry.batch == batch && entry.graph) held.push_back(entry.graph);
  return held;
}

CudnnGraphs::~CudnnGraphs() {
  cache_->entries.clear();
  if (cache_->handle != nullptr) BSW_CUDNN_NOEXCEPT(cudnnDestroy(cache_->handle));
}

std::string CudnnGraphs::conv_support(ConvPass pass, const ConvShape& shape, uint64_t workspace_limit) {
  return cache_->conv_entry(pass, shape, workspace_limit).error;
}

DType CudnnGraphs::wgrad_dtype(const ConvShape& shape, uint64_t workspace_limit) {
  const Entry& e = cache_->conv_entry(ConvPass::wgrad, shape, workspace_limit);
  return shape.precision == Precision::fp16 ? e.dw_dtype : storage_dtype(shape.precision);
}

std::string CudnnGraphs::sdpa_support(bool backward, const SdpaShape& shape, uint64_t workspace_limit) {
  return cache_->sdpa_entry(backward, shape, workspace_limit).error;
}

std::string CudnnGraphs::op_support(const Graph& graph, const Op& op, int64_t batch, Precision precision,
                                    Mode mode, uint64_t workspace_limit) {
  const bool train = mode == Mode::train;
  std::string error;
  if (op.kind == OpKind::conv2d) {
    const ConvShape shape = conv_shape(op, batch, precision);
    error = cudnn_limit(shape, cudnnGetVersion());
    if (error.empty()) error = conv_support(ConvPass::fprop, shape, workspace_limit);
    if (error.empty() && train) error = conv_support(ConvPass::wgrad, shape, workspace_limit);
    // A conv whose input has no gradient (it reads the data, or something computed from it without
    // parameters, on its path) computes no input gradient: the session runs no dgrad for it, so none is
    // checked.
    if (error.empty() && train && op.input_gradient)
      error = conv_support(ConvPass::dgrad, shape, workspace_limit);
  } else if (op.kind == OpKind::attention_core) {
    const SdpaShape shape = sdpa_shape(op, batch, storage_dtype(precision), train);
    error = cudnn_limit(shape);
    if (error.empty()) error = sdpa_support(false, shape, workspace_limit);
    if (error.empty() && train) error = sdpa_support(true, shape, workspace_limit);
  }
  return error;
}

DType CudnnGraphs::conv(ConvPass pass, const ConvShape& shape, void* x, void* w, void* y, void* workspace,
                        uint64_t workspace_bytes, cudaStream_t stream) {
  const Entry& e = cache_->conv_entry(pass, shape, workspace_bytes);
  std::unordered_map<int64_t, void*> pack{{kX, x}, {kW, w}, {kY, y}};
  // Constant names: this runs every step (outside CUDA-graph replay), and `what` only names an error.
  static constexpr const char* kWhat[] = {"cuDNN conv fprop", "cuDNN conv dgrad", "cuDNN conv wgrad"};
  cache_->execute(e, kWhat[static_cast<int>(pass)], pack, workspace, workspace_bytes, stream);
  return pass == ConvPass::wgrad && shape.precision == Precision::fp16 ? e.dw_dtype
                                                                       : storage_dtype(shape.precision);
}

void CudnnGraphs::sdpa_forward(const SdpaShape& shape, const void* q, const void* k, const void* v, void* o,
                               float* stats, void* workspace, uint64_t workspace_bytes, cudaStream_t stream) {
  if (shape.training && stats == nullptr)
    throw BackendError("cuDNN SDPA forward: training needs the statistics");
  const Entry& e = cache_->sdpa_entry(false, shape, workspace_bytes);
  std::unordered_map<int64_t, void*> pack{
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, o}};
  if (shape.training) pack[kStats] = stats;
  cache_->execute(e, "cuDNN SDPA forward", pack, workspace, workspace_bytes, stream);
}

void CudnnGraphs::sdpa_backward(const SdpaShape& shape, const void* q, const void* k, const void* v,
                                const void* o, const void* d_o, const float* stats, void* dq, void* dk,
                                void* dv, void* workspace, uint64_t workspace_bytes, cudaStream_t stream) {
  const Entry& e = cache_->sdpa_entry(true, shape, workspace_bytes);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)},
                                          {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(v)},
                                          {kO, const_cast<void*>(o)},
                                          {kDO, const_cast<void*>(d_o)},
                                          {kStats, const_cast<float*>(stats)},
                                          {kDQ, dq},
                                          {kDK, dk},
                                          {kDV, dv}};
  cache_->execute(e, "cuDNN SDPA backward", pack, workspace, workspace_bytes, stream);
}

std::string cudnn_frontend_version() {
  return fmt::format("{}.{}.{}", CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                     CUDNN_FRONTEND_PATCH_VERSION);
}

size_t CudnnGraphs::cached_graphs() const {
  return cache_->entries.size();
}

}  // namespace bsw::cuda
