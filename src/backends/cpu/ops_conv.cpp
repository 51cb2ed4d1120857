// The CPU reference math, part 2: image ops. conv2d (im2col per sample + OpenBLAS sgemm), max/avg pooling,
// global average pooling and the ViT patch embedding (gather patches + sgemm). Contracts are in ops.hpp.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/ops.hpp"

namespace bsw::cpu {
namespace {

[[nodiscard]] inline blasint bi(int64_t v) {
  return static_cast<blasint>(v);
}

// A 1x1, stride-1, unpadded convolution reads the input as its own im2col matrix.
[[nodiscard]] bool conv_is_pointwise(const ConvShape& s) {
  return s.k == 1 && s.stride == 1 && s.pad == 0;
}

// col[(c*k + ki)*k + kj][oh*wout + ow] = x[c][oh*stride - pad + ki][ow*stride - pad + kj], zero outside.
void im2col(const ConvShape& s, const float* x, float* col) {
  const int64_t spatial = s.hout * s.wout;
  for (int64_t c = 0; c < s.cin; ++c) {
    const float* xc = x + c * s.h * s.w;
    for (int64_t ki = 0; ki < s.k; ++ki) {
      for (int64_t kj = 0; kj < s.k; ++kj) {
        float* row = col + ((c * s.k + ki) * s.k + kj) * spatial;
        for (int64_t oh = 0; oh < s.hout; ++oh) {
          float* out = row + oh * s.wout;
          const int64_t ih = oh * s.stride - s.pad + ki;
          if (ih < 0 || ih >= s.h) {
            std::fill(out, out + s.wout, 0.0f);
            continue;
          }
          const float* xrow = xc + ih * s.w;
          for (int64_t ow = 0; ow < s.wout; ++ow) {
            const int64_t iw = ow * s.stride - s.pad + kj;
            out[ow] = (iw >= 0 && iw < s.w) ? xrow[iw] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of im2col: dx (one sample, overwritten) = sum of dcol entries over every place each pixel was
// read.
void col2im(const ConvShape& s, const float* dcol, float* dx) {
  const int64_t spatial = s.hout * s.wout;
  std::fill(dx, dx + s.cin * s.h * s.w, 0.0f);
  for (int64_t c = 0; c < s.cin; ++c) {
    float* dxc = dx + c * s.h * s.w;
    for (int64_t ki = 0; ki < s.k; ++ki) {
      for (int64_t kj = 0; kj < s.k; ++kj) {
        const float* row = dcol + ((c * s.k + ki) * s.k + kj) * spatial;
        for (int64_t oh = 0; oh < s.hout; ++oh) {
          const int64_t ih = oh * s.stride - s.pad + ki;
          if (ih < 0 || ih >= s.h) continue;
          const float* in = row + oh * s.wout;
          float* dxrow = dxc + ih * s.w;
          for (int64_t ow = 0; ow < s.wout; ++ow) {
            const int64_t iw = ow * s.stride - s.pad + kj;
            if (iw >= 0 && iw < s.w) dxrow[iw] += in[ow];
          }
        }
      }
    }
  }
}

// Index within a pooling window of the maximum PyTorch picks: the first of equal maxima; a NaN always wins
// (the last NaN when there are several), as in ATen's `if (val > maxval || isnan(val))`.
// The window's part inside the image: padding is never the maximum (PyTorch pads with -inf).
[[nodiscard]] int64_t window_argmax(const PoolShape& s, const float* xc, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * s.stride - s.pad, w0 = ow * s.stride - s.pad;
  const int64_t i0 = std::max<int64_t>(h0, 0), i1 = std::min(h0 + s.k, s.h);
  const int64_t j0 = std::max<int64_t>(w0, 0), j1 = std::min(w0 + s.k, s.w);
  int64_t best_index = i0 * s.w + j0;
  float best = xc[best_index];
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t index = i * s.w + j;
      const float v = xc[index];
      if (v > best || std::isnan(v)) {
        best = v;
        best_index = index;
      }
    }
  }
  return best_index;
}

// Patch gather for one sample: patches[n][(c*p + i)*p + j] = x[c][ph*p + i][pw*p + j], n = ph*(W/p) + pw.
void gather_patches(const PatchShape& s, const float* x, float* patches) {
  const int64_t grid_w = s.w / s.patch;
  const int64_t count = (s.h / s.patch) * grid_w;
  const int64_t row_len = s.c * s.patch * s.patch;
  for (int64_t n = 0; n < count; ++n) {
    const int64_t ph = n / grid_w;
    const int64_t pw = n % grid_w;
    float* row = patches + n * row_len;
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t i = 0; i < s.patch; ++i) {
        const float* src = x + (c * s.h + ph * s.patch + i) * s.w + pw * s.patch;
        std::copy(src, src + s.patch, row + (c * s.patch + i) * s.patch);
      }
    }
  }
}

// The adjoint of gather_patches: dx (one sample, overwritten; pixels outside every patch get 0).
void scatter_patches(const PatchShape& s, const float* dpatches, float* dx) {
  const int64_t grid_w = s.w / s.patch;
  const int64_t count = (s.h / s.patch) * grid_w;
  const int64_t row_len = s.c * s.patch * s.patch;
  if (s.h % s.patch != 0 || s.w % s.patch != 0) std::fill(dx, dx + s.c * s.h * s.w, 0.0f);
  for (int64_t n = 0; n < count; ++n) {
    const int64_t ph = n / grid_w;
    const int64_t pw = n % grid_w;
    const float* row = dpatches + n * row_len;
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t i = 0; i < s.patch; ++i) {
        const float* src = row + (c * s.patch + i) * s.patch;
        std::copy(src, src + s.patch, dx + (c * s.h + ph * s.patch + i) * s.w + pw * s.patch);
      }
    }
  }
}

}  // namespace

// ---- conv2d
// ------------------------------------------------------------------------------------------------------

int64_t conv2d_scratch_elements(const ConvShape& s) {
  return conv_is_pointwise(s) ? 0 : s.cin * s.k * s.k * s.hout * s.wout;
}

void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b, float* z, float* y,
                    Activation act, float* scratch) {
  const int64_t spatial = s.hout * s.wout;
  const int64_t patch = s.cin * s.k * s.k;
  const int64_t in_sample = s.cin * s.h * s.w;
  const int64_t out_sample = s.cout * spatial;
  float* out = (act != Activation::none && z != nullptr) ? z : y;
  const bool pointwise = conv_is_pointwise(s);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xs = x + n * in_sample;
    float* os = out + n * out_sample;
    const float* col = xs;
    if (!pointwise) {
      im2col(s, xs, scratch);
      col = scratch;
    }
    float beta = 0.0f;
    if (b != nullptr) {
      for (int64_t co = 0; co < s.cout; ++co) std::fill(os + co * spatial, os + (co + 1) * spatial, b[co]);
      beta = 1.0f;
    }
    // out[cout, HW] = W[cout, CKK] col[CKK, HW]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(s.cout), bi(spatial), bi(patch), 1.0f, w,
                bi(patch), col, bi(spatial), beta, os, bi(spatial));
  }
  if (act != Activation::none) activation_forward(act, out, y, s.batch * out_sample);
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* z, const float* y,
                     const float* dy, float* scratch_dz, float* dx, float* dw, float* db, Activation act,
                     float* scratch) {
  const int64_t spatial = s.hout * s.wout;
  const int64_t patch = s.cin * s.k * s.k;
  const int64_t in_sample = s.cin * s.h * s.w;
  const int64_t out_sample = s.cout * spatial;
  const float* g = dy;
  if (act != Activation::none) {
    activation_backward(act, z, y, dy, scratch_dz, s.batch * out_sample);
    g = scratch_dz;
  }
  const bool pointwise = conv_is_pointwise(s);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xs = x + n * in_sample;
    const float* gs = g + n * out_sample;
    const float* col = xs;
    if (!pointwise) {
      im2col(s, xs, scratch);
      col = scratch;
    }
    // dW[cout, CKK] += g[cout, HW] col[CKK, HW]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(s.cout), bi(patch), bi(spatial), 1.0f, gs,
                bi(spatial), col, bi(spatial), 1.0f, dw, bi(patch));
    if (db != nullptr) {
      for (int64_t co = 0; co < s.cout; ++co) {
        const float* row = gs + co * spatial;
        float sum = 0.0f;
        for (int64_t i = 0; i < spatial; ++i) sum += row[i];
        db[co] += sum;
      }
    }
    if (dx == nullptr) continue;
    // dcol[CKK, HW] = W[cout, CKK]^T g[cout, HW]; written straight into dx when the conv is pointwise.
    float* dcol = pointwise ? dx + n * in_sample : scratch;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(patch), bi(spatial), bi(s.cout), 1.0f, w,
                bi(patch), gs, bi(spatial), 0.0f, dcol, bi(spatial));
    if (!pointwise) col2im(s, dcol, dx + n * in_sample);
  }
}

// ---- pooling
// -----------------------------------------------------------------------------------------------------

void maxpool2d_forward(const PoolShape& s, const float* x, float* y) {
  for (int64_t plane = 0; plane < s.batch * s.c; ++plane) {
    const float* xc = x + plane * s.h * s.w;
    float* yc = y + plane * s.hout * s.wout;
    for (int64_t oh = 0; oh < s.hout; ++oh) {
      for (int64_t ow = 0; ow < s.wout; ++ow) yc[oh * s.wout + ow] = xc[window_argmax(s, xc, oh, ow)];
    }
  }
}

void maxpool2d_backward(const PoolShape& s, const float* x, const float* dy, float* dx) {
  std::fill(dx, dx + s.batch * s.c * s.h * s.w, 0.0f);
  for (int64_t plane = 0; plane < s.batch * s.c; ++plane) {
    const float* xc = x + plane * s.h * s.w;
    const float* dyc = dy + plane * s.hout * s.wout;
    float* dxc = dx + plane * s.h * s.w;
    for (int64_t oh = 0; oh < s.hout; ++oh) {
      for (int64_t ow = 0; ow < s.wout; ++ow) dxc[window_argmax(s, xc, oh, ow)] += dyc[oh * s.wout + ow];
    }
  }
}

void avgpool2d_forward(const PoolShape& s, const float* x, float* y) {
  const float inv_area = 1.0f / static_cast<float>(s.k * s.k);
  for (int64_t plane = 0; plane < s.batch * s.c; ++plane) {
    const float* xc = x + plane * s.h * s.w;
    float* yc = y + plane * s.hout * s.wout;
    for (int64_t oh = 0; oh < s.hout; ++oh) {
      for (int64_t ow = 0; ow < s.wout; ++ow) {
        // Padding counts as zeros in the k*k divisor (PyTorch's count_include_pad=True).
        const int64_t h0 = oh * s.stride - s.pad, w0 = ow * s.stride - s.pad;
        float sum = 0.0f;
        for (int64_t i = std::max<int64_t>(h0, 0); i < std::min(h0 + s.k, s.h); ++i)
          for (int64_t j = std::max<int64_t>(w0, 0); j < std::min(w0 + s.k, s.w); ++j) sum += xc[i * s.w + j];
        yc[oh * s.wout + ow] = sum * inv_area;
      }
    }
  }
}

void avgpool2d_backward(const PoolShape& s, const float* dy, float* dx) {
  const float inv_area = 1.0f / static_cast<float>(s.k * s.k);
  std::fill(dx, dx + s.batch * s.c * s.h * s.w, 0.0f);
  for (int64_t plane = 0; plane < s.batch * s.c; ++plane) {
    const float* dyc = dy + plane * s.hout * s.wout;
    float* dxc = dx + plane * s.h * s.w;
    for (int64_t oh = 0; oh < s.hout; ++oh) {
      for (int64_t ow = 0; ow < s.wout; ++ow) {
        const float share = dyc[oh * s.wout + ow] * inv_area;
        const int64_t h0 = oh * s.stride - s.pad, w0 = ow * s.stride - s.pad;
        for (int64_t i = std::max<int64_t>(h0, 0); i < std::min(h0 + s.k, s.h); ++i)
          for (int64_t j = std::max<int64_t>(w0, 0); j < std::min(w0 + s.k, s.w); ++j)
            dxc[i * s.w + j] += share;
      }
    }
  }
}

void global_avgpool_forward(const float* x, float* y, int64_t batch, int64_t channels, int64_t spatial,
                            bool tokens_layout) {
  const double inv = 1.0 / static_cast<double>(spatial);
  if (!tokens_layout) {
    for (int64_t row = 0; row < batch * channels; ++row) {
      const float* xr = x + row * spatial;
      double sum = 0.0;
      for (int64_t i = 0; i < spatial; ++i) sum += xr[i];
      y[row] = static_cast<float>(sum * inv);
    }
    return;
  }
  for (int64_t n = 0; n < batch; ++n) {
    const float* xs = x + n * spatial * channels;
    float* ys = y + n * channels;
    std::fill(ys, ys + channels, 0.0f);
    for (int64_t t = 0; t < spatial; ++t) {
      const float* row = xs + t * channels;
      for (int64_t c = 0; c < channels; ++c) ys[c] += row[c];
    }
    const float invf = static_cast<float>(inv);
    for (int64_t c = 0; c < channels; ++c) ys[c] *= invf;
  }
}

void global_avgpool_backward(const float* dy, float* dx, int64_t batch, int64_t channels, int64_t spatial,
                             bool tokens_layout) {
  const float inv = static_cast<float>(1.0 / static_cast<double>(spatial));
  if (!tokens_layout) {
    for (int64_t row = 0; row < batch * channels; ++row) {
      std::fill(dx + row * spatial, dx + (row + 1) * spatial, dy[row] * inv);
    }
    return;
  }
  for (int64_t n = 0; n < batch; ++n) {
    const float* dys = dy + n * channels;
    float* dxs = dx + n * spatial * channels;
    for (int64_t t = 0; t < spatial; ++t) {
      float* row = dxs + t * channels;
      for (int64_t c = 0; c < channels; ++c) row[c] = dys[c] * inv;
    }
  }
}

// ---- patch embedding
// ---------------------------------------------------------------------------------------------

int64_t patch_embedding_scratch_elements(const PatchShape& s) {
  return (s.h / s.patch) * (s.w / s.patch) * s.c * s.patch * s.patch;
}

void patch_embedding_forward(const PatchShape& s, const float* x, const float* w, const float* b,
                             const float* positions, float* y, float* scratch) {
  const int64_t count = (s.h / s.patch) * (s.w / s.patch);
  const int64_t row_len = s.c * s.patch * s.patch;
  const int64_t in_sample = s.c * s.h * s.w;
  const int64_t out_sample = count * s.dim;
  for (int64_t n = 0; n < s.batch; ++n) {
    float* ys = y + n * out_sample;
    for (int64_t p = 0; p < count; ++p) {
      float* row = ys + p * s.dim;
      for (int64_t d = 0; d < s.dim; ++d) {
        row[d] = (b != nullptr ? b[d] : 0.0f) + (positions != nullptr ? positions[p * s.dim + d] : 0.0f);
      }
    }
    gather_patches(s, x + n * in_sample, scratch);
    // y[N, D] += patches[N, CPP] W[D, CPP]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(count), bi(s.dim), bi(row_len), 1.0f, scratch,
                bi(row_len), w, bi(row_len), 1.0f, ys, bi(s.dim));
  }
}

void patch_embedding_backward(const PatchShape& s, const float* x, const float* w, const float* dy, float* dx,
                              float* dw, float* db, float* dpositions, float* scratch) {
  const int64_t count = (s.h / s.patch) * (s.w / s.patch);
  const int64_t row_len = s.c * s.patch * s.patch;
  const int64_t in_sample = s.c * s.h * s.w;
  const int64_t out_sample = count * s.dim;
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* dys = dy + n * out_sample;
    for (int64_t p = 0; p < count; ++p) {
      const float* row = dys + p * s.dim;
      for (int64_t d = 0; d < s.dim; ++d) {
        if (db != nullptr) db[d] += row[d];
        if (dpositions != nullptr) dpositions[p * s.dim + d] += row[d];
      }
    }
    gather_patches(s, x + n * in_sample, scratch);
    // dW[D, CPP] += dy[N, D]^T patches[N, CPP]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(s.dim), bi(row_len), bi(count), 1.0f, dys,
                bi(s.dim), scratch, bi(row_len), 1.0f, dw, bi(row_len));
    if (dx == nullptr) continue;
    // dpatches[N, CPP] = dy[N, D] W[D, CPP]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(count), bi(row_len), bi(s.dim), 1.0f, dys,
                bi(s.dim), w, bi(row_len), 0.0f, scratch, bi(row_len));
    scatter_patches(s, scratch, dx + n * in_sample);
  }
}

}  // namespace bsw::cpu
