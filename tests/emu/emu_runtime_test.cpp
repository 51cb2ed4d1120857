// The emulator itself: kernels written here run through the same launch path as kernels/*.cu, and the checks
// that make the emulator worth running (barriers, warp collectives, exited lanes, guard pages, allocation
// failures, capture rules) are shown to fire. If these pass, a passing gpu test on the emulator means what it
// says: the code did what CUDA's programming model would have it do.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <vector>

#include "backends/cuda/check.hpp"
#include "batchsweep/errors.hpp"
#include "cuda_emu.hpp"

namespace {

// One value per thread, summed per block by warp shuffles and a shared-memory barrier (the block_sum of
// kernels/common.cuh).
__global__ void block_sum_kernel(const float* x, float* out, int n) {
  __shared__ float partial[32];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float v = i < n ? x[i] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
    out[blockIdx.x] = total;
  }
}

// The same without the barrier: thread 0 reads partial sums other warps have not written yet. (Kernels in
// kernels/*.cu get the shared_memory call from the translation; these are written for the emulator directly.)
__global__ void racy_block_sum_kernel(const float* x, float* out, int n) {
  __shared__ float partial[32];
  ::bsw::emu::shared_memory(partial, sizeof(partial));
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float v = i < n ? x[i] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  if (threadIdx.x == 0) {
    float total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
    out[blockIdx.x] = total;
  }
}

// Lanes past n return before a full-mask shuffle: undefined on a GPU (it may hang), an error here.
__global__ void early_exit_shuffle_kernel(const float* x, float* out, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= n) return;
  out[i] = __shfl_xor_sync(0xFFFFFFFFu, x[i], 1);
}

__global__ void write_past_end_kernel(float* y, int n) {
  if (threadIdx.x == 0) y[n + 64] = 1.0f;
}

__global__ void fill_kernel(float* y, float value, int n) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    y[i] = value;
}

__global__ void any_kernel(const int* flags, int* out) {
  const int any = __any_sync(0xFFFFFFFFu, flags[threadIdx.x]);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = any;
}

struct Device {
  float* p = nullptr;
  explicit Device(size_t n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), cudaSuccess);
  }
  ~Device() { static_cast<void>(cudaFree(p)); }
};

std::vector<float> download(const float* p, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(Emulator, BlockReductionWithShufflesAndABarrier) {
  constexpr int n = 1000;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 1.0f);
  Device dx(n), dout(4);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  block_sum_kernel | bsw::emu::Launch{4, 256}(dx.p, dout.p, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << bsw::emu::error_log();
  const std::vector<float> out = download(dout.p, 4);
  for (int b = 0; b < 4; ++b) {
    const int lo = b * 256, hi = std::min(n, lo + 256);
    EXPECT_FLOAT_EQ(out[b], static_cast<float>((lo + 1 + hi) * (hi - lo)) / 2.0f) << b;
  }
}

TEST(Emulator, AMissingBarrierGivesTheWrongSum) {
  constexpr int n = 256;
  std::vector<float> x(n, 1.0f);
  Device dx(n), dout(1);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dout.p, 0, sizeof(float)), cudaSuccess);
  racy_block_sum_kernel | bsw::emu::Launch{1, 256}(dx.p, dout.p, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // Warp 0 runs to the end before warps 1..7 start, so thread 0 sums slots this block has not written: NaN,
  // on every launch (shared memory starts NaN-filled in each block).
  EXPECT_TRUE(std::isnan(download(dout.p, 1)[0]));
  racy_block_sum_kernel | bsw::emu::Launch{1, 256}(dx.p, dout.p, n);
  EXPECT_TRUE(std::isnan(download(dout.p, 1)[0])) << "the second launch sees no stale sums either";
}

__global__ void two_barriers_kernel(float* y) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  y[threadIdx.x] = 1.0f;
}

__global__ void mixed_masks_kernel(float* y) {
  const unsigned mask = threadIdx.x < 16 ? 0x0000FFFFu : 0xFFFFFFFFu;
  y[threadIdx.x] = __shfl_xor_sync(mask, 1.0f, 1);
}

TEST(Emulator, DivergentBarriersAndMismatchedMasksFailTheLaunch) {
  Device y(32);
  two_barriers_kernel | bsw::emu::Launch{1, 32}(y.p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(bsw::emu::error_log().find("different __syncthreads() calls"), std::string::npos);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  mixed_masks_kernel | bsw::emu::Launch{1, 32}(y.p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_NE(bsw::emu::error_log().find("same mask"), std::string::npos);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
}

TEST(Emulator, AHostPointerArgumentIsAnIllegalAddress) {
  std::vector<float> host(32);
  fill_kernel | bsw::emu::Launch{1, 32}(host.data(), 1.0f, 32);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(host[0], 0.0f) << "the kernel did not run";
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
}

TEST(Emulator, AShuffleAfterLanesExitedFailsTheLaunch) {
  Device dx(32), dout(32);
  ASSERT_EQ(cudaMemset(dx.p, 0, 32 * sizeof(float)), cudaSuccess);
  early_exit_shuffle_kernel | bsw::emu::Launch{1, 32}(dx.p, dout.p, 20);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("has exited"), std::string::npos)
      << cudaGetErrorString(cudaErrorLaunchFailure);
  // A fault poisons the context, as on a GPU: every synchronising call says so until the device is reset.
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaErrorLaunchFailure);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  early_exit_shuffle_kernel | bsw::emu::Launch{1, 32}(dx.p, dout.p, 32);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(Emulator, AnyIsTheWarpsOr) {
  std::vector<int> flags(64, 0);
  flags[40] = 1;
  int* d_flags = nullptr;
  int* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_flags), 64 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), 2 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_flags, flags.data(), 64 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  any_kernel | bsw::emu::Launch{1, 64}(d_flags, d_out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  int out[2] = {-1, -1};
  ASSERT_EQ(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 1);
  static_cast<void>(cudaFree(d_flags));
  static_cast<void>(cudaFree(d_out));
}

TEST(Emulator, BadLaunchConfigurationsAreRefused) {
  Device y(8);
  fill_kernel | bsw::emu::Launch{1, 2048}(y.p, 1.0f, 8);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  fill_kernel | bsw::emu::Launch{0, 32}(y.p, 1.0f, 8);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

void write_past_an_allocation() {
  Device y(256);
  write_past_end_kernel | bsw::emu::Launch{1, 32}(y.p, 256);
}

TEST(EmulatorDeathTest, AWritePastAnAllocationFaults) {
  EXPECT_DEATH(write_past_an_allocation(), "");
}

TEST(Emulator, AllocationsAreNaNPoisonedAndAccounted) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  {
    Device y(1000);
    size_t free_now = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
    EXPECT_EQ(free_before - free_now, 1000 * sizeof(float));
    for (float v : download(y.p, 1000)) EXPECT_TRUE(std::isnan(v));
  }
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_after, free_before);
}

TEST(Emulator, AnAllocationOverTheDeviceFailsAndTheErrorIsReadOnce) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, free_bytes + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(Emulator, CopiesOutsideAnAllocationAreRefused) {
  Device y(16);
  std::vector<float> h(32);
  EXPECT_EQ(cudaMemcpy(y.p, h.data(), 32 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), y.p + 8, 16 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  static_cast<void>(cudaGetLastError());
}

TEST(Emulator, CaptureRecordsWorkThatTheGraphReplays) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  Device y(64);
  ASSERT_EQ(cudaMemset(y.p, 0, 64 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  fill_kernel | bsw::emu::Launch{2, 32, 0, s}(y.p, 3.0f, 64);
  // A synchronous copy during the capture: the real runtime refuses it and invalidates the capture.
  float first = -1.0f;
  EXPECT_EQ(cudaMemcpy(&first, y.p, sizeof(float), cudaMemcpyDeviceToHost),
            cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  static_cast<void>(cudaGetLastError());
  EXPECT_EQ(download(y.p, 64)[0], 0.0f) << "captured work does not run until the graph is launched";

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  fill_kernel | bsw::emu::Launch{2, 32, 0, s}(y.p, 5.0f, 64);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(download(y.p, 64)[63], 0.0f);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(y.p, 64)[63], 5.0f);
  static_cast<void>(cudaGraphExecDestroy(exec));
  static_cast<void>(cudaGraphDestroy(graph));
  static_cast<void>(cudaStreamDestroy(s));
}

TEST(Emulator, AFaultInAReplayedGraphReachesTheNextSynchronisation) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  Device dx(32), dout(32);
  ASSERT_EQ(cudaMemset(dx.p, 0, 32 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  early_exit_shuffle_kernel | bsw::emu::Launch{1, 32, 0, s}(dx.p, dout.p, 20);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorLaunchFailure);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  static_cast<void>(cudaGraphExecDestroy(exec));
  static_cast<void>(cudaGraphDestroy(graph));
  static_cast<void>(cudaStreamDestroy(s));
}

}  // namespace

// An error that leaves the context unusable stops the sweep (bsw::Error, exit 1); other launch errors are a
// failed point (BackendError), and an allocation failure an oom point.
TEST(CudaErrors, StickyErrorsStopTheSweepOthersFailAPoint) {
  using bsw::cuda::detail::throw_cuda_error;
  const auto kind = [](cudaError_t status) -> std::string {
    try {
      throw_cuda_error(status, "call()", __FILE__, __LINE__);
    } catch (const bsw::OutOfMemory&) {
      return "oom";
    } catch (const bsw::BackendError&) {
      return "point";
    } catch (const bsw::Error& e) {
      EXPECT_NE(std::string(e.what()).find("the CUDA context is unusable"), std::string::npos) << e.what();
      return "sweep";
    }
    return "none";
  };
  EXPECT_EQ(kind(cudaErrorIllegalAddress), "sweep");
  EXPECT_EQ(kind(cudaErrorLaunchFailure), "sweep");
  EXPECT_EQ(kind(cudaErrorAssert), "sweep");
  EXPECT_EQ(kind(cudaErrorInvalidValue), "point");
  EXPECT_EQ(kind(cudaErrorInvalidConfiguration), "point");
  EXPECT_EQ(kind(cudaErrorMemoryAllocation), "oom");
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
}

// A cuBLAS or cuDNN failure after a kernel broke the context is the sticky error's: it stops the sweep too;
// the same failure in a healthy context fails only its point.
TEST(CudaErrors, ALibraryFailureInABrokenContextStopsTheSweep) {
  using bsw::cuda::detail::throw_cublas_error;
  using bsw::cuda::detail::throw_cudnn_error;
  const auto kind = [](const std::function<void()>& fail) -> std::string {
    try {
      fail();
    } catch (const bsw::BackendError&) {
      return "point";
    } catch (const bsw::Error& e) {
      EXPECT_NE(std::string(e.what()).find("after cudaErrorLaunchFailure"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the CUDA context is unusable"), std::string::npos) << e.what();
      return "sweep";
    }
    return "none";
  };
  const auto cublas = [] { throw_cublas_error(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul()", "f", 1); };
  const auto cudnn = [] { throw_cudnn_error(CUDNN_STATUS_EXECUTION_FAILED, "execute()", "f", 1); };
  EXPECT_EQ(kind(cublas), "point");
  EXPECT_EQ(kind(cudnn), "point");
  Device dx(32), dout(32);
  ASSERT_EQ(cudaMemset(dx.p, 0, 32 * sizeof(float)), cudaSuccess);
  early_exit_shuffle_kernel | bsw::emu::Launch{1, 32}(dx.p, dout.p, 20);  // a fault: the context breaks
  EXPECT_EQ(kind(cublas), "sweep");
  EXPECT_EQ(kind(cudnn), "sweep");
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(kind(cublas), "point");
}
