// The throwing side of check.hpp: formats "file:line: call: error name: description" and picks the error
// type.
#include "backends/cuda/check.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "batchsweep/errors.hpp"

namespace bsw::cuda::detail {
namespace {

// Only the file's name: full build paths make messages long without helping.
const char* base_name(const char* file) {
  const char* name = file;
  for (const char* p = file; *p != '\0'; ++p)
    if (*p == '/') name = p + 1;
  return name;
}

// Errors that leave the CUDA context unusable ("any further CUDA work will return the same error"): every
// later point would fail with it, blamed on its own batch, so the sweep stops instead.
bool sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorNvlinkUncorrectable:
    // What the runtime says after a fault the driver logged (an Xid): nothing after it can be trusted.
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

// Free device memory under which a library call's failure is taken as running out of it.
constexpr size_t kLibraryOutOfMemoryBytes = size_t{64} << 20;

constexpr const char* kContextUnusable =
    "the CUDA context is unusable after this error, so the sweep stops here (the points finished before it "
    "are in the report)";

}  // namespace

// A library call also fails when a kernel before it broke the context (an illegal address in a GEMM comes
// back as CUBLAS_STATUS_EXECUTION_FAILED): that is the sticky error's doing, which every later point would
// hit and blame on its own batch, so it stops the sweep as the sticky error itself does.
void check_library_failure(const std::string& message, bool allocates) {
  // A fault only the library saw may not be the runtime's last error yet: a synchronisation surfaces it (an
  // error path only; during a capture it is refused, which is not sticky).
  const cudaError_t synced = cudaDeviceSynchronize();
  const cudaError_t context = synced != cudaSuccess ? synced : cudaPeekAtLastError();
  if (sticky(context))
    throw Error(fmt::format("{} after {}: {}; {}", message, cudaGetErrorName(context),
                            cudaGetErrorString(context), kContextUnusable));
  // A library that loads its kernels lazily (cuBLASLt, cuDNN) or allocates inside a call fails for want of
  // memory with its own status (CUBLAS_STATUS_EXECUTION_FAILED, an internal error), not an allocation
  // failure: with next to nothing free that is this batch running out of memory, a measurement, not an
  // error of the backend.
  // A non-sticky error the library left is cleared either way, so the next batch does not meet it.
  static_cast<void>(cudaGetLastError());
  size_t free_bytes = 0, total_bytes = 0;
  if (allocates && synced == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
      free_bytes < kLibraryOutOfMemoryBytes)
    throw OutOfMemory(fmt::format("{}, with {} MiB of device memory free: taken as out of memory", message,
                                  free_bytes >> 20));
}

namespace {

[[noreturn]] void throw_library_error(const std::string& message) {
  check_library_failure(message);
  throw BackendError(message);
}

}  // namespace

const char* cublas_status_name(cublasStatus_t status) noexcept {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const std::string message = fmt::format("{}:{}: {}: {}: {}", base_name(file), line, call,
                                          cudaGetErrorName(status), cudaGetErrorString(status));
  if (status == cudaErrorMemoryAllocation) {
    static_cast<void>(
        cudaGetLastError());  // allocation failures are not sticky: clear them for the next call
    throw OutOfMemory(message);
  }
  if (sticky(status)) throw Error(fmt::format("{}; {}", message, kContextUnusable));
  throw BackendError(message);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const std::string message =
      fmt::format("{}:{}: {}: {}", base_name(file), line, call, cublas_status_name(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(message);
  throw_library_error(message);
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  const std::string message = fmt::format("{}:{}: {}: {} ({})", base_name(file), line, call,
                                          cudnnGetErrorString(status), static_cast<int>(status));
  // cuDNN 9 reports allocation failures as internal errors 4003 (host) and 4004 (device).
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    throw OutOfMemory(message);
  throw_library_error(message);
}

void report_cuda_error(cudaError_t status, const char* call, const char* file, int line) noexcept {
  std::fprintf(stderr, "batchsweep: warning: %s:%d: %s: %s: %s\n", base_name(file), line, call,
               cudaGetErrorName(status), cudaGetErrorString(status));
}

}  // namespace bsw::cuda::detail
