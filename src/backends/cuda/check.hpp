// Checked CUDA, cuBLASLt and cuDNN calls (after nvbench's cuda_call.cuh): BSW_CUDA(call), BSW_CUBLAS(call)
// and BSW_CUDNN(call) throw bsw::BackendError carrying the file, the line and the call's text; out-of-memory
// codes throw bsw::OutOfMemory instead. The _NOEXCEPT forms are for destructors: they report on stderr and
// never throw.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

namespace bsw::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
void report_cuda_error(cudaError_t status, const char* call, const char* file, int line) noexcept;
// For a library failure that came back as a status (cuDNN's frontend, cuBLASLt): throws Error where an
// earlier kernel left the CUDA context unusable (the failure is not this call's), OutOfMemory where the call
// allocates (`allocates`) and next to no device memory is free; otherwise clears a non-sticky CUDA error the
// library left and returns, and the failure is the call's own. During a stream capture the synchronisation
// it makes is refused (and ends the capture): the failure is then taken as the call's, and the next plain
// step meets a broken context again.
void check_library_failure(const std::string& message, bool allocates = true);

// Text of a cuBLAS status ("CUBLAS_STATUS_ALLOC_FAILED").
[[nodiscard]] const char* cublas_status_name(cublasStatus_t status) noexcept;

}  // namespace bsw::cuda::detail

#define BSW_CUDA(call)                                                                    \
  do {                                                                                    \
    const cudaError_t bsw_cuda_status_ = (call);                                          \
    if (bsw_cuda_status_ != cudaSuccess)                                                  \
      ::bsw::cuda::detail::throw_cuda_error(bsw_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

#define BSW_CUDA_NOEXCEPT(call)                                                            \
  do {                                                                                     \
    const cudaError_t bsw_cuda_status_ = (call);                                           \
    if (bsw_cuda_status_ != cudaSuccess)                                                   \
      ::bsw::cuda::detail::report_cuda_error(bsw_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

#define BSW_CUBLAS(call)                                                                      \
  do {                                                                                        \
    const cublasStatus_t bsw_cublas_status_ = (call);                                         \
    if (bsw_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::bsw::cuda::detail::throw_cublas_error(bsw_cublas_status_, #call, __FILE__, __LINE__); \
  } while (false)

#define BSW_CUBLAS_NOEXCEPT(call) static_cast<void>(call)

#define BSW_CUDNN(call)                                                                     \
  do {                                                                                      \
    const cudnnStatus_t bsw_cudnn_status_ = (call);                                         \
    if (bsw_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                          \
      ::bsw::cuda::detail::throw_cudnn_error(bsw_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (false)

#define BSW_CUDNN_NOEXCEPT(call) static_cast<void>(call)

// Ends a kernel launcher: a launch that failed (bad configuration, a sticky earlier error) throws here.
#define BSW_CUDA_LAUNCHED() BSW_CUDA(cudaGetLastError())
