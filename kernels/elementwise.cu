// Elementwise kernels: seeded init and synthetic data (bit-identical to the CPU reference), dtype casts, the
// activations GELU (tanh approximation) / ReLU / SiLU / tanh forward and backward, residual add, fp32
// accumulation of a storage-dtype tensor, and the
// column sums behind bias and position gradients. Kernels first, then their launchers.
#include <algorithm>

#include "common.cuh"

namespace bsw::cuda::kernels {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// splitmix64's output function without the state increment: bsw::cpu's fill_uniform generator.
__host__ __device__ constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
// splitmix64 with its increment: the CPU backend's synthetic-data generator.
__device__ uint64_t splitmix64(uint64_t x) {
  return splitmix64_mix(x + kGolden);
}

__device__ uint64_t data_hash(uint64_t seed, uint64_t stream_id, uint64_t index) {
  return splitmix64(seed ^ splitmix64(stream_id ^ splitmix64(index)));
}

template <class T>
__global__ void fill_uniform_kernel(T* x, int64_t n, float bound, uint64_t key) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const uint64_t top24 = splitmix64_mix(key + (static_cast<uint64_t>(i) + 1) * kGolden) >> 40;
    const float unit = __fsub_rn(__fmul_rn(static_cast<float>(static_cast<uint32_t>(top24)), 0x1p-23f), 1.0f);
    x[i] = from_f32<T>(__fmul_rn(unit, bound));
  }
}

template <class T>
__global__ void fill_constant_kernel(T* x, int64_t n, float value) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) x[i] = from_f32<T>(value);
}

template <class T>
__global__ void fill_data_values_kernel(T* x, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t first) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const uint64_t h = data_hash(seed, stream_id, first + static_cast<uint64_t>(i));
    const double unit = __dsub_rn(__dmul_rn(static_cast<double>(h >> 11), 0x1.0p-52), 1.0);
    x[i] = from_f32<T>(static_cast<float>(unit));
  }
}

__global__ void fill_data_labels_kernel(int32_t* x, int64_t n, uint64_t seed, uint64_t stream_id,
                                        uint64_t first, uint64_t classes) {
  for (int64_t i = global_index(); i < n; i += grid_stride())
    x[i] = static_cast<int32_t>(data_hash(seed, stream_id, first + static_cast<uint64_t>(i)) % classes);
}

template <class From, class To>
__global__ void cast_kernel(const From* in, To* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = from_f32<To>(to_f32(in[i]));
}

__device__ __forceinline__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

__device__ __forceinline__ float activate(Activation act, float z) {
  switch (act) {
    case Activation::relu:
      return z > 0.0f ? z : 0.0f;
    case Activation::gelu:
      return 0.5f * z * (1.0f + tanhf(kGeluC * (z + kGeluA * z * z * z)));
    case Activation::silu:
      return z * sigmoid(z);
    case Activation::tanh:
      return tanhf(z);
    case Activation::none:
      break;
  }
  return z;
}

__device__ __forceinline__ float activate_grad(Activation act, float z, float y, float dy) {
  switch (act) {
    case Activation::relu:
      return z > 0.0f ? dy : 0.0f;
    case Activation::gelu: {
      const float z2 = z * z;
      const float t = tanhf(kGeluC * (z + kGeluA * z2 * z));
      return dy * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * z2));
    }
    case Activation::silu: {
      const float s = sigmoid(z);
      return dy * s * (1.0f + z * (1.0f - s));
    }
    case Activation::tanh:
      return dy * (1.0f - y * y);
    case Activation::none:
      break;
  }
  return dy;
}

template <class T>
__global__ void activation_forward_kernel(Activation act, const T* z, T* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) y[i] = from_f32<T>(activate(act, to_f32(z[i])));
}

template <class T>
__global__ void activation_backward_kernel(Activation act, const T* z, const T* y, const T* dy, T* dz,
                                           int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float yi = y != nullptr ? to_f32(y[i]) : 0.0f;
    dz[i] = from_f32<T>(activate_grad(act, to_f32(z[i]), yi, to_f32(dy[i])));
  }
}

template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride())
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
__global__ void accumulate_f32_kernel(const T* in, float* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] += to_f32(in[i]);
}

// Block (32 x 8) owns 32 columns and a slab of rows; partial sums meet in shared memory, then one atomicAdd
// per column and slab.
constexpr int64_t kColumnRowsPerSlab = 256;
template <class T>
__global__ void column_sum_kernel(const T* in, float* out, int64_t rows, int64_t cols,
                                  int64_t rows_per_slab) {
  __shared__ float partial[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slab;
  const int64_t r1 = min(rows, r0 + rows_per_slab);
  float sum = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) sum += to_f32(in[r * cols + c]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int j = 0; j < 8; ++j) total += partial[j][threadIdx.x];
    if (gridDim.y == 1) {
      out[c] += total;
    } else {
      atomicAdd(out + c, total);
    }
  }
}

}  // namespace

uint64_t fill_key(uint64_t seed, uint64_t stream_id) {
  return splitmix64_mix(seed ^ splitmix64_mix(stream_id + kGolden));
}

void fill_uniform(DType t, void* x, int64_t n, float bound, uint64_t key, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "fill_uniform");
  if (n == 0) return;
  dispatch(t, "fill_uniform", [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), n, bound, key);
  });
  BSW_CUDA_LAUNCHED();
}

void fill_constant(DType t, void* x, int64_t n, float value, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "fill_constant");
  if (n == 0) return;
  dispatch(t, "fill_constant", [&](auto tag) {
    using T = decltype(tag);
    fill_constant_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), n, value);
  });
  BSW_CUDA_LAUNCHED();
}

void fill_data_values(DType t, void* x, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                      cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "fill_data_values");
  if (n == 0) return;
  dispatch(t, "fill_data_values", [&](auto tag) {
    using T = decltype(tag);
    fill_data_values_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), n, seed, stream_id, first_index);
  });
  BSW_CUDA_LAUNCHED();
}

void fill_data_labels(int32_t* x, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                      int64_t classes, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0 && classes >= 1, "fill_data_labels");
  if (n == 0) return;
  fill_data_labels_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, seed, stream_id, first_index,
                                                                static_cast<uint64_t>(classes));
  BSW_CUDA_LAUNCHED();
}

void cast(DType from, const void* in, DType to, void* out, int64_t n, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "cast");
  if (n == 0) return;
  dispatch(from, "cast", [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch(to, "cast", [&](auto to_tag) {
      using To = decltype(to_tag);
      cast_kernel<From, To>
          <<<grid_for(n), kThreads, 0, stream>>>(static_cast<const From*>(in), static_cast<To*>(out), n);
    });
  });
  BSW_CUDA_LAUNCHED();
}

void activation_forward(Activation act, DType t, const void* z, void* y, int64_t n, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "activation_forward");
  if (n == 0 || (act == Activation::none && z == y)) return;
  dispatch(t, "activation_forward", [&](auto tag) {
    using T = decltype(tag);
    activation_forward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(act, static_cast<const T*>(z), static_cast<T*>(y), n);
  });
  BSW_CUDA_LAUNCHED();
}

void activation_backward(Activation act, DType t, const void* z, const void* y, const void* dy, void* dz,
                         int64_t n, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "activation_backward");
  if (n == 0 || (act == Activation::none && dz == dy)) return;
  BSW_REQUIRE(act == Activation::none || z != nullptr, "activation_backward");
  BSW_REQUIRE(act != Activation::tanh || y != nullptr, "activation_backward");
  dispatch(t, "activation_backward", [&](auto tag) {
    using T = decltype(tag);
    activation_backward_kernel<T>
        <<<grid_for(n), kThreads, 0, stream>>>(act, static_cast<const T*>(z), static_cast<const T*>(y),
                                               static_cast<const T*>(dy), static_cast<T*>(dz), n);
  });
  BSW_CUDA_LAUNCHED();
}

void add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "add");
  if (n == 0) return;
  dispatch(t, "add", [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                        static_cast<T*>(out), n);
  });
  BSW_CUDA_LAUNCHED();
}

void accumulate_f32(DType t, const void* in, float* out, int64_t n, cudaStream_t stream) {
  BSW_REQUIRE(n >= 0, "accumulate_f32");
  if (n == 0) return;
  dispatch(t, "accumulate_f32", [&](auto tag) {
    using T = decltype(tag);
    accumulate_f32_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(in), out, n);
  });
  BSW_CUDA_LAUNCHED();
}

void column_sum_accumulate(DType t, const void* in, float* out, int64_t rows, int64_t cols,
                           cudaStream_t stream) {
  BSW_REQUIRE(rows >= 0 && cols >= 0, "column_sum_accumulate");
  if (rows == 0 || cols == 0) return;
  const int64_t rows_per_slab = std::max(kColumnRowsPerSlab, (rows + 65534) / 65535);
  const int64_t slabs = (rows + rows_per_slab - 1) / rows_per_slab;
  BSW_REQUIRE((cols + 31) / 32 <= 0x7FFFFFFF, "column_sum_accumulate");
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(slabs));
  dispatch(t, "column_sum_accumulate", [&](auto tag) {
    using T = decltype(tag);
    column_sum_kernel<T>
        <<<grid, dim3(32, 8), 0, stream>>>(static_cast<const T*>(in), out, rows, cols, rows_per_slab);
  });
  BSW_CUDA_LAUNCHED();
}

}  // namespace bsw::cuda::kernels
