// Helpers of the GPU tests (built for a GPU as test_gpu and for the CPU emulator as test_gpu_emu): skip
// without a device, device arrays that upload fp32 data in a storage dtype (and download it as fp32), NaN
// poisoning of outputs, and the relative error ||out - ref|| / ||ref|| the tolerances are written in (fp32
// 1e-5, tf32 1e-3, bf16/fp16 1e-2).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "batchsweep/plan.hpp"

#define BSW_REQUIRE_DEVICE()                                                 \
  do {                                                                       \
    if (::bsw::cuda::device_count() == 0)                                    \
      GTEST_SKIP() << "no CUDA device: " << ::bsw::cuda::no_device_reason(); \
  } while (false)

// cuDNN runs only on a GPU: the CPU emulator of the runtime (tests/emu) does not reach it.
#ifdef BSW_CUDA_EMULATOR
#define BSW_REQUIRE_CUDNN() \
  GTEST_SKIP() << "cuDNN is not emulated on the CPU (tests/emu): this test needs a GPU"
#else
#define BSW_REQUIRE_CUDNN() BSW_REQUIRE_DEVICE()
#endif

namespace bsw::gputest {

// True when this suite runs on the CPU emulator (test_gpu_emu) rather than a GPU: a few tests shrink their
// problems there, as every GEMM is computed on the CPU.
#ifdef BSW_CUDA_EMULATOR
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

[[nodiscard]] inline double tolerance(DType t) {
  return t == DType::f32 ? 1e-5 : 1e-2;
}

// Rounds values to what a tensor of dtype t can hold, so the CPU reference sees exactly the GPU's inputs.
[[nodiscard]] inline std::vector<float> quantize(std::vector<float> v, DType t) {
  for (float& x : v) {
    if (t == DType::bf16) x = cpu::bf16_to_float(cpu::float_to_bf16(x));
    if (t == DType::f16) x = cpu::fp16_to_float(cpu::float_to_fp16(x));
  }
  return v;
}

// Added to every test's own seed: fresh inputs on each GPU run (issue 4), the same inputs on every emulator
// run (CI stays deterministic), and BSW_GPU_TEST_SEED=N to reproduce a run; said once on stderr.
[[nodiscard]] inline uint32_t input_seed() {
  static const uint32_t seed = [] {
    uint32_t s = 0;
    if (const char* v = std::getenv("BSW_GPU_TEST_SEED"); v != nullptr && *v != '\0') {
      s = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (!kEmulated) {
      s = std::random_device{}();
    }
    std::fprintf(stderr, "gpu tests: input seed %u (BSW_GPU_TEST_SEED=%u reproduces these inputs)\n", s, s);
    return s;
  }();
  return seed;
}

[[nodiscard]] inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f,
                                                      float hi = 1.0f) {
  std::mt19937 rng(seed + input_seed());
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

[[nodiscard]] inline double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  if (norm == 0) return std::sqrt(diff);
  return std::sqrt(diff / norm);  // NaN (a poisoned output left unwritten) fails every bound
}

// A device array of n elements of dtype t.
class DeviceArray {
 public:
  DeviceArray(DType t, size_t n) : type_(t), n_(n) {
    BSW_CUDA(cudaMalloc(&ptr_, std::max<size_t>(bytes(), 1)));
    poison();
  }
  DeviceArray(DType t, const std::vector<float>& values) : DeviceArray(t, values.size()) { upload(values); }
  ~DeviceArray() { BSW_CUDA_NOEXCEPT(cudaFree(ptr_)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  [[nodiscard]] size_t bytes() const { return n_ * dtype_bytes(type_); }
  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] float* f32() const { return static_cast<float*>(ptr_); }
  [[nodiscard]] int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  [[nodiscard]] DType type() const { return type_; }

  // All bits set: NaN in every floating-point dtype.
  void poison() { BSW_CUDA(cudaMemset(ptr_, 0xFF, bytes())); }

  void upload(const std::vector<float>& values) {
    std::vector<unsigned char> host(bytes());
    for (size_t i = 0; i < n_; ++i) {
      if (type_ == DType::f32) {
        std::memcpy(host.data() + 4 * i, &values[i], 4);
      } else if (type_ == DType::i32) {
        const auto v = static_cast<int32_t>(values[i]);
        std::memcpy(host.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h =
            type_ == DType::bf16 ? cpu::float_to_bf16(values[i]) : cpu::float_to_fp16(values[i]);
        std::memcpy(host.data() + 2 * i, &h, 2);
      }
    }
    BSW_CUDA(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }

  [[nodiscard]] std::vector<float> download() const {
    BSW_CUDA(cudaDeviceSynchronize());
    std::vector<unsigned char> host(bytes());
    BSW_CUDA(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) {
      if (type_ == DType::f32) {
        std::memcpy(&out[i], host.data() + 4 * i, 4);
      } else if (type_ == DType::i32) {
        int32_t v = 0;
        std::memcpy(&v, host.data() + 4 * i, 4);
        out[i] = static_cast<float>(v);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, host.data() + 2 * i, 2);
        out[i] = type_ == DType::bf16 ? cpu::bf16_to_float(h) : cpu::fp16_to_float(h);
      }
    }
    return out;
  }

 private:
  DType type_;
  size_t n_;
  void* ptr_ = nullptr;
};

[[nodiscard]] inline std::string dtype_name(const testing::TestParamInfo<DType>& info) {
  return std::string(to_string(info.param));
}

}  // namespace bsw::gputest
