// cuDNN graphs (cuDNN 9's graph API through NVIDIA's header-only frontend): convolution fprop / dgrad / wgrad
// and fused SDPA (flash) attention forward / backward. Each is built once per shape and cached; cuDNN's
// heuristics choose the plan among those whose workspace fits the plan's workspace.cudnn, so the workspace
// the step uses is the one the planner counted. A shape cuDNN rejects is remembered with the reason, which
// the backend uses to fall back to its own path and to say why in the report.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchsweep/plan.hpp"

namespace bsw::cuda {

// NCHW input [batch, channels, height, width], weights [out_channels, channels, kernel, kernel], zero
// padding.
struct ConvShape {
  int64_t batch = 1, channels = 0, height = 0, width = 0, out_channels = 0, kernel = 1, stride = 1,
          padding = 0;
  int64_t out_height = 0, out_width = 0;
  Precision precision = Precision::fp32;  // fp32: no tensor-core (TF32) engines; tf32 allows them
  // Bytes the weight pointer is aligned to (parameters are packed, so a conv's weights may start 2 or 8
  // bytes into a 16-byte line); cuDNN otherwise assumes 16 when it picks engines.
  int64_t w_alignment = 16;
};
[[nodiscard]] ConvShape conv_shape(const Op& op, int64_t batch, Precision precision);

// Attention over our qkv layout: q|k|v [batch, seq, 3, heads, head_dim] in, out [batch, seq, heads,
// head_dim]. Statistics (training) are [batch, heads, seq] fp32. The forward pass uses cuDNN's long-standing
// composite (flash) SDPA implementation on every cuDNN version.
struct SdpaShape {
  int64_t batch = 1, heads = 1, seq = 1, head_dim = 1;
  bool causal = false;
  DType dtype = DType::bf16;  // bf16 or f16
  bool training = true;       // forward also writes the statistics the backward pass reads
};
[[nodiscard]] SdpaShape sdpa_shape(const Op& op, int64_t batch, DType dtype, bool training);

enum class ConvPass { fprop, dgrad, wgrad };

// Limits cuDNN's own support check does not catch (the graph builds, then execute fails or indexes past the
// tensor): why `shape` is past one, else empty. op_support applies them, so such a point runs our own path.
// - SDPA over more than kCudnnSdpaMostSequences sequences (plan.hpp; make_plan plans such a batch on our own
//   attention already, so this is a guard).
// - A convolution whose input or output holds more than 2^31 - 1 elements, before cuDNN 9.3 (which added
//   64-bit indexing): cudnn_version as cudnnGetVersion() gives it, e.g. 91900 for 9.19.0.
inline constexpr int64_t kCudnnIndexedElements = 0x7FFFFFFF;
inline constexpr size_t kCudnnLargeTensorVersion = 90300;
[[nodiscard]] std::string cudnn_limit(const ConvShape& shape, size_t cudnn_version);
[[nodiscard]] std::string cudnn_limit(const SdpaShape& shape);

// The cuDNN frontend's version these graphs were compiled with, e.g. "1.32.0".
[[nodiscard]] std::string cudnn_frontend_version();

class CudnnGraphs {
 public:
  explicit CudnnGraphs(int device);  // creates the cuDNN handle on `device`; throws BackendError
  ~CudnnGraphs();
  CudnnGraphs(const CudnnGraphs&) = delete;
  CudnnGraphs& operator=(const CudnnGraphs&) = delete;

  // Builds (once per shape and limit) the graph; empty when cuDNN runs it within workspace_limit bytes, else
  // why not ("cuDNN: ... not supported ..."). Throws OutOfMemory when the build ran out of device memory
  // (not remembered: a smaller batch may build).
  [[nodiscard]] std::string conv_support(ConvPass pass, const ConvShape& shape, uint64_t workspace_limit);
  [[nodiscard]] std::string sdpa_support(bool backward, const SdpaShape& shape, uint64_t workspace_limit);
  // What wgrad writes at this shape (built as conv_support builds it): the storage dtype, but for fp16 f32
  // where an engine takes that, else f16.
  [[nodiscard]] DType wgrad_dtype(const ConvShape& shape, uint64_t workspace_limit);
  // Every pass `op` of `graph` needs at this batch (conv2d: fprop, and in training wgrad and, unless it reads
  // the network input, dgrad; attention_core: forward, and backward in training), checked as above: empty
  // when cuDNN runs them all, else the first reason. Other ops need nothing from cuDNN.
  [[nodiscard]] std::string op_support(const Graph& graph, const Op& op, int64_t batch, Precision precision,
                                       Mode mode, uint64_t workspace_limit);

  // Drops the graphs built for other batches: a sweep meets each batch once, and built plans hold memory
  // (loaded kernels) that no plan counts.
  void retain_batch(int64_t batch);
  // Points the handle back at the default stream: called before a session destroys the stream it ran on,
  // so the handle, which outlives sessions, never refers to a destroyed stream.
  void detach_stream() noexcept;
  // Keeps the built graphs of `batch` alive for as long as the caller holds the result (a session whose CUDA
  // graph replays their kernels), whatever retain_batch later drops from the cache.
  [[nodiscard]] std::vector<std::shared_ptr<const void>> hold(int64_t batch) const;

  // The passes, on `stream` (graph-capturable). Tensors by role: fprop x, w -> y; dgrad dy (in y), w -> dx
  // (in x); wgrad x, dy (in y) -> dw (in w). Throws BackendError when the shape is unsupported. Returns the
  // dtype written: the storage dtype, but fp16's wgrad writes f32 where an engine takes that, else f16.
  DType conv(ConvPass pass, const ConvShape& shape, void* x, void* w, void* y, void* workspace,
             uint64_t workspace_bytes, cudaStream_t stream);
  // q, k, v point at the q|k|v parts of one qkv buffer (strided views); stats may be null in inference.
  void sdpa_forward(const SdpaShape& shape, const void* q, const void* k, const void* v, void* o,
                    float* stats, void* workspace, uint64_t workspace_bytes, cudaStream_t stream);
  void sdpa_backward(const SdpaShape& shape, const void* q, const void* k, const void* v, const void* o,
                     const void* d_o, const float* stats, void* dq, void* dk, void* dv, void* workspace,
                     uint64_t workspace_bytes, cudaStream_t stream);

  [[nodiscard]] size_t cached_graphs() const;

 private:
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace bsw::cuda
