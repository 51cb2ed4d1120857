// Image kernels: im2col / col2im for the conv2d and patch-embedding GEMMs (a chunk of samples at a time,
// column layout [C*k*k, chunk*HW]), the [C, N*HW] <-> NCHW permutes (with the conv bias), the conv bias
// gradient, max and average pooling (padding as PyTorch's) and global average pooling, forward and backward.
// Backward kernels gather instead of scattering, so they need no atomics and are deterministic (except the
// bias gradient's slabs, which add atomically). Kernels first, then their launchers.
#include <algorithm>

#include "common.cuh"

namespace bsw::cuda::kernels {
namespace {

// About how many blocks the conv bias gradient spreads over (several per SM on any GPU we list).
constexpr int64_t kChannelSumBlocks = 2048;

template <class T>
__global__ void im2col_kernel(ConvGeometry g, const T* x, T* col, int64_t chunk) {
  const int64_t hw = g.hout * g.wout;
  const int64_t width = chunk * hw;
  const int64_t n_total = g.patch() * width;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t row = i / width, column = i % width;
    const int64_t n = column / hw, p = column % hw;
    const int64_t oh = p / g.wout, ow = p % g.wout;
    const int64_t c = row / (g.k * g.k), ki = (row / g.k) % g.k, kj = row % g.k;
    const int64_t ih = oh * g.stride - g.pad + ki, iw = ow * g.stride - g.pad + kj;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    col[i] = inside ? x[((n * g.cin + c) * g.h + ih) * g.w + iw] : from_f32<T>(0.0f);
  }
}

template <class T>
__global__ void col2im_kernel(ConvGeometry g, const T* col, T* dx, int64_t chunk) {
  const int64_t hw = g.hout * g.wout;
  const int64_t width = chunk * hw;
  const int64_t n_total = chunk * g.cin * g.h * g.w;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.cin,
                  n = i / (g.w * g.h * g.cin);
    float sum = 0.0f;
    for (int64_t ki = 0; ki < g.k; ++ki) {
      const int64_t oh_scaled = ih + g.pad - ki;
      if (oh_scaled < 0 || oh_scaled % g.stride != 0) continue;
      const int64_t oh = oh_scaled / g.stride;
      if (oh >= g.hout) continue;
      for (int64_t kj = 0; kj < g.k; ++kj) {
        const int64_t ow_scaled = iw + g.pad - kj;
        if (ow_scaled < 0 || ow_scaled % g.stride != 0) continue;
        const int64_t ow = ow_scaled / g.stride;
        if (ow >= g.wout) continue;
        sum += to_f32(col[((c * g.k + ki) * g.k + kj) * width + n * hw + oh * g.wout + ow]);
      }
    }
    dx[i] = from_f32<T>(sum);
  }
}

template <class T>
__global__ void channels_to_nchw_kernel(const T* in, const T* bias, T* out, int64_t chunk, int64_t channels,
                                        int64_t hw) {
  const int64_t n_total = chunk * channels * hw;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t p = i % hw, c = (i / hw) % channels, n = i / (hw * channels);
    float v = to_f32(in[c * chunk * hw + n * hw + p]);
    if (bias != nullptr) v += to_f32(bias[c]);
    out[i] = from_f32<T>(v);
  }
}

template <class T>
__global__ void bias_add_nchw_kernel(T* y, const T* bias, int64_t n_total, int64_t channels, int64_t hw) {
  for (int64_t i = global_index(); i < n_total; i += grid_stride())
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[(i / hw) % channels]));
}

template <class T>
__global__ void nchw_to_channels_kernel(const T* in, T* out, int64_t chunk, int64_t channels, int64_t hw) {
  const int64_t n_total = chunk * channels * hw;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t p = i % hw, c = (i / hw) % channels, n = i / (hw * channels);
    out[c * chunk * hw + n * hw + p] = in[i];
  }
}

// Block (c, s) sums channel c over samples [s * per_slab, (s + 1) * per_slab). One slab adds its total
// (deterministic); several add theirs atomically, as column_sum_kernel does.
template <class T>
__global__ void channel_sum_kernel(const T* in, float* out, int64_t batch, int64_t channels, int64_t hw,
                                   int64_t per_slab) {
  __shared__ float shared[32];
  const int64_t c = blockIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * per_slab, n1 = min(batch, n0 + per_slab);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < (n1 - n0) * hw; j += blockDim.x) {
    const int64_t n = n0 + j / hw, p = j % hw;
    sum += to_f32(in[(n * channels + c) * hw + p]);
  }
  const float total = block_sum(sum, shared);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) {
    out[c] += total;
  } else {
    atomicAdd(out + c, total);
  }
}

// The index (within the plane) of the maximum bsw::cpu picks: the first of equal maxima, a NaN always wins.
// Only the window's part inside the image: padding is never the maximum.
template <class T>
__device__ int64_t window_argmax(const PoolGeometry& g, const T* plane, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.stride - g.pad, w0 = ow * g.stride - g.pad;
  const int64_t i0 = max(h0, int64_t{0}), i1 = min(h0 + g.k, g.h);
  const int64_t j0 = max(w0, int64_t{0}), j1 = min(w0 + g.k, g.w);
  int64_t best_index = i0 * g.w + j0;
  float best = to_f32(plane[best_index]);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t index = i * g.w + j;
      const float v = to_f32(plane[index]);
      if (v > best || isnan(v)) {
        best = v;
        best_index = index;
      }
    }
  }
  return best_index;
}

template <class T>
__global__ void maxpool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t n_total = g.batch * g.c * g.hout * g.wout;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t ow = i % g.wout, oh = (i / g.wout) % g.hout, plane = i / (g.wout * g.hout);
    const T* xp = x + plane * g.h * g.w;
    y[i] = xp[window_argmax(g, xp, oh, ow)];
  }
}

// Output rows (or columns) whose window covers input row `ih`: [first, last] (empty when first > last). With
// padding, window oh spans padded rows [oh*stride, oh*stride + k), and input row ih is padded row ih + pad.
__device__ inline void covering(int64_t ih, int64_t pad, int64_t k, int64_t stride, int64_t out,
                                int64_t& first, int64_t& last) {
  const int64_t padded = ih + pad;
  first = padded >= k ? (padded - k) / stride + 1 : 0;
  last = min(padded / stride, out - 1);
}

template <class T>
__global__ void maxpool_backward_kernel(PoolGeometry g, const T* x, const T* dy, T* dx) {
  const int64_t n_total = g.batch * g.c * g.h * g.w;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const int64_t self = ih * g.w + iw;
    const T* xp = x + plane * g.h * g.w;
    const T* dyp = dy + plane * g.hout * g.wout;
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, g.pad, g.k, g.stride, g.hout, oh0, oh1);
    covering(iw, g.pad, g.k, g.stride, g.wout, ow0, ow1);
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        if (window_argmax(g, xp, oh, ow) == self) sum += to_f32(dyp[oh * g.wout + ow]);
    dx[i] = from_f32<T>(sum);
  }
}

template <class T>
__global__ void avgpool_forward_kernel(PoolGeometry g, const T* x, T* y) {
  const int64_t n_total = g.batch * g.c * g.hout * g.wout;
  const float inv_area = 1.0f / static_cast<float>(g.k * g.k);
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t ow = i % g.wout, oh = (i / g.wout) % g.hout, plane = i / (g.wout * g.hout);
    const T* xp = x + plane * g.h * g.w;
    // Padding counts as zeros in the k*k divisor (PyTorch's count_include_pad=True).
    const int64_t h0 = oh * g.stride - g.pad, w0 = ow * g.stride - g.pad;
    float sum = 0.0f;
    for (int64_t a = max(h0, int64_t{0}); a < min(h0 + g.k, g.h); ++a)
      for (int64_t b = max(w0, int64_t{0}); b < min(w0 + g.k, g.w); ++b) sum += to_f32(xp[a * g.w + b]);
    y[i] = from_f32<T>(sum * inv_area);
  }
}

template <class T>
__global__ void avgpool_backward_kernel(PoolGeometry g, const T* dy, T* dx) {
  const int64_t n_total = g.batch * g.c * g.h * g.w;
  const float inv_area = 1.0f / static_cast<float>(g.k * g.k);
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const T* dyp = dy + plane * g.hout * g.wout;
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, g.pad, g.k, g.stride, g.hout, oh0, oh1);
    covering(iw, g.pad, g.k, g.stride, g.wout, ow0, ow1);
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) sum += to_f32(dyp[oh * g.wout + ow]) * inv_area;
    dx[i] = from_f32<T>(sum);
  }
}

// Channels-first: one warp per (sample, channel) row of `spatial` values, eight rows a block, striding over
// the rows by the grid (which is capped, so no row count overflows its dimension).
template <class T>
__global__ void global_avgpool_rows_kernel(const T* x, T* y, int64_t rows, int64_t spatial) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 8;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.y; row < rows; row += stride) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < spatial; i += 32) sum += to_f32(x[row * spatial + i]);
    sum = warp_sum(sum);
    if (threadIdx.x == 0) y[row] = from_f32<T>(sum / static_cast<float>(spatial));
  }
}

// Tokens: y[n][c] = mean over t of x[n][t][c], one thread per (n, c).
template <class T>
__global__ void global_avgpool_tokens_kernel(const T* x, T* y, int64_t batch, int64_t channels,
                                             int64_t spatial) {
  const int64_t n_total = batch * channels;
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t c = i % channels, n = i / channels;
    float sum = 0.0f;
    for (int64_t t = 0; t < spatial; ++t) sum += to_f32(x[(n * spatial + t) * channels + c]);
    y[i] = from_f32<T>(sum / static_cast<float>(spatial));
  }
}

template <class T>
__global__ void global_avgpool_backward_kernel(const T* dy, T* dx, int64_t batch, int64_t channels,
                                               int64_t spatial, bool tokens_layout) {
  const int64_t n_total = batch * channels * spatial;
  const float inv = 1.0f / static_cast<float>(spatial);
  for (int64_t i = global_index(); i < n_total; i += grid_stride()) {
    const int64_t row = tokens_layout ? (i / (spatial * channels)) * channels + i % channels : i / spatial;
    dx[i] = from_f32<T>(to_f32(dy[row]) * inv);
  }
}

bool valid(const ConvGeometry& g) {
  return g.cin > 0 && g.h > 0 && g.w > 0 && g.k > 0 && g.stride > 0 && g.pad >= 0 && g.hout > 0 &&
         g.wout > 0 && (g.hout - 1) * g.stride + g.k <= g.h + 2 * g.pad &&
         (g.wout - 1) * g.stride + g.k <= g.w + 2 * g.pad;
}
bool valid(const PoolGeometry& g) {
  return g.batch >= 0 && g.c > 0 && g.k > 0 && g.stride > 0 && g.hout > 0 && g.wout > 0 && g.pad >= 0 &&
         2 * g.pad <= g.k && (g.hout - 1) * g.stride + g.k <= g.h + 2 * g.pad &&
         (g.wout - 1) * g.stride + g.k <= g.w + 2 * g.pad;
}

}  // namespace

void im2col(DType t, const ConvGeometry& g, const void* x, void* col, int64_t chunk, cudaStream_t stream) {
  BSW_REQUIRE(valid(g) && chunk >= 1, "im2col");
  const int64_t n = g.patch() * chunk * g.spatial();
  dispatch(t, "im2col", [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<T*>(col), chunk);
  });
  BSW_CUDA_LAUNCHED();
}

void col2im(DType t, const ConvGeometry& g, const void* col, void* dx, int64_t chunk, cudaStream_t stream) {
  BSW_REQUIRE(valid(g) && chunk >= 1, "col2im");
  const int64_t n = chunk * g.cin * g.h * g.w;
  dispatch(t, "col2im", [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(col), static_cast<T*>(dx), chunk);
  });
  BSW_CUDA_LAUNCHED();
}

void channels_to_nchw(DType t, const void* in, const void* bias, void* out, int64_t chunk, int64_t channels,
                      int64_t hw, cudaStream_t stream) {
  BSW_REQUIRE(chunk >= 1 && channels >= 1 && hw >= 1, "channels_to_nchw");
  const int64_t n = chunk * channels * hw;
  dispatch(t, "channels_to_nchw", [&](auto tag) {
    using T = decltype(tag);
    channels_to_nchw_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<const T*>(bias), static_cast<T*>(out), chunk, channels, hw);
  });
  BSW_CUDA_LAUNCHED();
}

void nchw_to_channels(DType t, const void* in, void* out, int64_t chunk, int64_t channels, int64_t hw,
                      cudaStream_t stream) {
  BSW_REQUIRE(chunk >= 1 && channels >= 1 && hw >= 1, "nchw_to_channels");
  const int64_t n = chunk * channels * hw;
  dispatch(t, "nchw_to_channels", [&](auto tag) {
    using T = decltype(tag);
    nchw_to_channels_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), chunk, channels, hw);
  });
  BSW_CUDA_LAUNCHED();
}

void bias_add_nchw(DType t, void* y, const void* bias, int64_t batch, int64_t channels, int64_t hw,
                   cudaStream_t stream) {
  BSW_REQUIRE(batch >= 1 && channels >= 1 && hw >= 1 && bias != nullptr, "bias_add_nchw");
  const int64_t n = batch * channels * hw;
  dispatch(t, "bias_add_nchw", [&](auto tag) {
    using T = decltype(tag);
    bias_add_nchw_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), n, channels, hw);
  });
  BSW_CUDA_LAUNCHED();
}

void channel_sum_accumulate(DType t, const void* in, float* out, int64_t batch, int64_t channels, int64_t hw,
                            cudaStream_t stream) {
  BSW_REQUIRE(batch >= 1 && channels >= 1 && channels <= 0x7FFFFFFF && hw >= 1, "channel_sum_accumulate");
  // One block per channel leaves most of the GPU idle (a conv has 16-512 channels) and each block walking
  // all of B*H*W: split the samples into slabs for about kChannelSumBlocks blocks, each at least
  // kThreads elements of work.
  const int64_t slabs_wanted = std::max<int64_t>(1, kChannelSumBlocks / channels);
  const int64_t slabs_useful = std::max<int64_t>(1, batch * hw / kThreads);
  const int64_t slabs = std::min({slabs_wanted, slabs_useful, batch, int64_t{65535}});
  const int64_t per_slab = (batch + slabs - 1) / slabs;
  const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>((batch + per_slab - 1) / per_slab));
  dispatch(t, "channel_sum_accumulate", [&](auto tag) {
    using T = decltype(tag);
    channel_sum_kernel<T>
        <<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in), out, batch, channels, hw, per_slab);
  });
  BSW_CUDA_LAUNCHED();
}

void maxpool_forward(DType t, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  BSW_REQUIRE(valid(g), "maxpool_forward");
  const int64_t n = g.batch * g.c * g.hout * g.wout;
  if (n == 0) return;
  dispatch(t, "maxpool_forward", [&](auto tag) {
    using T = decltype(tag);
    maxpool_forward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
  BSW_CUDA_LAUNCHED();
}

void maxpool_backward(DType t, const PoolGeometry& g, const void* x, const void* dy, void* dx,
                      cudaStream_t stream) {
  BSW_REQUIRE(valid(g), "maxpool_backward");
  const int64_t n = g.batch * g.c * g.h * g.w;
  if (n == 0) return;
  dispatch(t, "maxpool_backward", [&](auto tag) {
    using T = decltype(tag);
    maxpool_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        g, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  BSW_CUDA_LAUNCHED();
}

void avgpool_forward(DType t, const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  BSW_REQUIRE(valid(g), "avgpool_forward");
  const int64_t n = g.batch * g.c * g.hout * g.wout;
  if (n == 0) return;
  dispatch(t, "avgpool_forward", [&](auto tag) {
    using T = decltype(tag);
    avgpool_forward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
  BSW_CUDA_LAUNCHED();
}

void avgpool_backward(DType t, const PoolGeometry& g, const void* dy, void* dx, cudaStream_t stream) {
  BSW_REQUIRE(valid(g), "avgpool_backward");
  const int64_t n = g.batch * g.c * g.h * g.w;
  if (n == 0) return;
  dispatch(t, "avgpool_backward", [&](auto tag) {
    using T = decltype(tag);
    avgpool_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  BSW_CUDA_LAUNCHED();
}

void global_avgpool_forward(DType t, const void* x, void* y, int64_t batch, int64_t channels, int64_t spatial,
                            bool tokens_layout, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && channels > 0 && spatial > 0, "global_avgpool_forward");
  const int64_t rows = batch * channels;
  if (rows == 0) return;
  dispatch(t, "global_avgpool_forward", [&](auto tag) {
    using T = decltype(tag);
    if (tokens_layout) {
      global_avgpool_tokens_kernel<T><<<grid_for(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), batch, channels, spatial);
    } else {
      const auto blocks = static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, kMaxBlocks));
      global_avgpool_rows_kernel<T>
          <<<blocks, dim3(32, 8), 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, spatial);
    }
  });
  BSW_CUDA_LAUNCHED();
}

void global_avgpool_backward(DType t, const void* dy, void* dx, int64_t batch, int64_t channels,
                             int64_t spatial, bool tokens_layout, cudaStream_t stream) {
  BSW_REQUIRE(batch >= 0 && channels > 0 && spatial > 0, "global_avgpool_backward");
  const int64_t n = batch * channels * spatial;
  if (n == 0) return;
  dispatch(t, "global_avgpool_backward", [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), batch, channels, spatial, tokens_layout);
  });
  BSW_CUDA_LAUNCHED();
}

}  // namespace bsw::cuda::kernels
