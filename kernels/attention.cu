// Kernels of the non-fused attention path: head split/merge permutes between [B, T, parts, heads, hd] and
// [parts, B, heads, T, hd] (so q k^T and P v become strided-batched GEMMs), and the row softmax over fp32
// scores with the causal mask, forward and backward (one warp per row). Kernels first, then their launchers.
#include "common.cuh"

namespace bsw::cuda::kernels {
namespace {

template <class T>
__global__ void split_heads_kernel(const T* in, T* out, int64_t batch, int64_t seq, int64_t parts,
                                   int64_t heads, int64_t hd) {
  const int64_t n_total = parts * batch * heads * seq * hd;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t d = i % hd, t = (i / hd) % seq, h = (i / (hd * seq)) % heads;
    const int64_t n = (i / (hd * seq * heads)) % batch, p = i / (hd * seq * heads * batch);
    out[i] = in[(((n * seq + t) * parts + p) * heads + h) * hd + d];
  }
}

template <class T>
__global__ void merge_heads_kernel(const T* in, T* out, int64_t batch, int64_t seq, int64_t parts,
                                   int64_t heads, int64_t hd) {
  const int64_t n_total = parts * batch * heads * seq * hd;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t d = i % hd, h = (i / hd) % heads, p = (i / (hd * heads)) % parts;
    const int64_t t = (i / (hd * heads * parts)) % seq, n = i / (hd * heads * parts * seq);
    out[i] = in[(((p * batch + n) * heads + h) * seq + t) * hd + d];
  }
}

constexpr int kWarpsPerBlock = 8;

template <class T>
__global__ void softmax_forward_kernel(const float* scores, T* probs, int64_t rows, int64_t seq,
                                       bool causal) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t len = causal ? row % seq + 1 : seq;
  const float* s = scores + row * seq;
  T* p = probs + row * seq;
  float m = -INFINITY;
  for (int64_t j = lane; j < len; j += 32) m = fmaxf(m, s[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int64_t j = lane; j < len; j += 32) sum += expf(s[j] - m);
  const float inv = 1.0f / warp_sum(sum);
  for (int64_t j = lane; j < seq; j += 32) p[j] = from_f32<T>(j < len ? expf(s[j] - m) * inv : 0.0f);
}

template <class T>
__global__ void softmax_backward_kernel(T* probs, const float* dprobs, int64_t rows, int64_t seq) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  T* p = probs + row * seq;
  const float* dp = dprobs + row * seq;
  float dot = 0.0f;
  for (int64_t j = lane; j < seq; j += 32) dot += to_f32(p[j]) * dp[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < seq; j += 32) {
    const float pj = to_f32(p[j]);
    p[j] = from_f32<T>(pj == 0.0f ? 0.0f : pj * (dp[j] - dot));
  }
}

}  // namespace

void split_heads(DType t, const void* in, void* out, int64_t batch, int64_t seq, int64_t parts, int64_t heads,
                 int64_t head_dim, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 1 && seq >= 1 && parts >= 1 && heads >= 1 && head_dim >= 1, "split_heads");
  const int64_t n = parts * batch * heads * seq * head_dim;
  dispatch(t, "split_heads", [&](auto tag) {
    using T = decltype(tag);
    split_heads_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), batch, seq, parts, heads, head_dim);
  });
  BSW_CUDA_LAUNCHED();
}

void merge_heads(DType t, const void* in, void* out, int64_t batch, int64_t seq, int64_t parts, int64_t heads,
                 int64_t head_dim, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 1 && seq >= 1 && parts >= 1 && heads >= 1 && head_dim >= 1, "merge_heads");
  const int64_t n = parts * batch * heads * seq * head_dim;
  dispatch(t, "merge_heads", [&](auto tag) {
    using T = decltype(tag);
    merge_heads_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), batch, seq, parts, heads, head_dim);
  });
  BSW_CUDA_LAUNCHED();
}

void softmax_forward(DType t, const float* scores, void* probs, int64_t rows, int64_t seq, bool causal,
                     cudaStream_t stream) {
  BSW_REQUIRE(rows >= 1 && seq >= 1 && rows % seq == 0, "softmax_forward");
  BSW_REQUIRE((rows + kWarpsPerBlock - 1) / kWarpsPerBlock <= 0x7FFFFFFF, "softmax_forward");
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  dispatch(t, "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<T>
        <<<grid, dim3(32, kWarpsPerBlock), 0, stream>>>(scores, static_cast<T*>(probs), rows, seq, causal);
  });
  BSW_CUDA_LAUNCHED();
}

void softmax_backward(DType t, void* probs, const float* dprobs, int64_t rows, int64_t seq,
                      cudaStream_t stream) {
  BSW_REQUIRE(rows >= 1 && seq >= 1, "softmax_backward");
  BSW_REQUIRE((rows + kWarpsPerBlock - 1) / kWarpsPerBlock <= 0x7FFFFFFF, "softmax_backward");
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  dispatch(t, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T>
        <<<grid, dim3(32, kWarpsPerBlock), 0, stream>>>(static_cast<T*>(probs), dprobs, rows, seq);
  });
  BSW_CUDA_LAUNCHED();
}

}  // namespace bsw::cuda::kernels
