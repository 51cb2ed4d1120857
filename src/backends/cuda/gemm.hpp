// GEMMs through cuBLASLt, described in row-major terms (as the CPU reference's cblas calls are) and mapped
// onto cuBLASLt's column-major convention by swapping the operands. The heuristic's algorithm and the
// descriptors are cached per shape, so a step only pays for them the first time it meets a shape.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "batchsweep/plan.hpp"

namespace bsw::cuda {

enum class Epilogue {
  none,
  bias,           // C = op(A) op(B) + bias[N]
  gelu_bias,      // C = gelu(op(A) op(B) + bias[N])                      (inference)
  gelu_aux_bias,  // C = gelu(z), aux = z = op(A) op(B) + bias[N]        (training: z saved for backward)
  dgelu_bgrad,    // C = (op(A) op(B)) * gelu'(aux), bias[N] = column sums of C, overwritten (backward: the
                  // next linear's input gradient becomes this linear's pre-activation gradient and bias grad)
};

// cuBLASLt's name of the epilogue ("GELU_AUX_BIAS").
[[nodiscard]] const char* epilogue_name(Epilogue e);

// Row-major C[M, N] = alpha * op(A) op(B) + beta * C, op(A) [M, K], op(B) [K, N]; `batch` independent
// products at the given element strides. A and B share ab_type; C has c_type (the storage dtype, or f32 for
// weight gradients).
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  DType ab_type = DType::f32, c_type = DType::f32;
  float alpha = 1, beta = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;  // [N], c_type (dgelu_bgrad: written)
  void* aux = nullptr;         // gelu_aux_bias (written), dgelu_bgrad (read): row-major [M, ld_aux], c_type
  int64_t ld_aux = 0;          // a multiple of 8, at least N
};

class Gemm {
 public:
  // precision picks the compute type: tf32 -> CUBLAS_COMPUTE_32F_FAST_TF32, everything else
  // CUBLAS_COMPUTE_32F.
  Gemm(Precision precision, void* workspace, uint64_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Throws BackendError for an impossible shape or when cuBLASLt has no algorithm for it. A batched product
  // of more than kMaxBatchCount runs as several: cuBLASLt's kernels put the batch index in the grid's y or z
  // dimension, and have been reported to find no algorithm (or skip batches) past it; the non-fused
  // attention path asks for batch * heads products, which a batch sweep easily takes past 65535.
  void run(const GemmArgs& args, cudaStream_t stream);
  static constexpr int64_t kMaxBatchCount = 65535;

  // Whether cuBLASLt has an algorithm for these arguments (pointers included: alignment counts), asked of
  // the heuristic once per shape and cached either way; past kMaxBatchCount, for every slice run() runs. A
  // fused epilogue is only worth asking for where it is available; the caller falls back to a plain product
  // and separate kernels where it is not. Throws BackendError for an impossible shape.
  [[nodiscard]] bool available(const GemmArgs& args);

  [[nodiscard]] std::size_t cached_shapes() const { return cache_.size(); }
  [[nodiscard]] static std::string version();

  // Epilogues with a GELU need the aux leading dimension a multiple of 8 and 16-byte aligned pointers.
  [[nodiscard]] static bool gelu_epilogue_supported(int64_t n, const void* c, const void* aux);

 private:
  struct Entry;
  using Key =
      std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t, int64_t,
                 int64_t, int64_t, int, int64_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, bool>;

  // The cached entry for these arguments, or nullptr when cuBLASLt has no algorithm for them.
  Entry* find(const GemmArgs& args);

  Precision precision_;
  void* workspace_;
  uint64_t workspace_bytes_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Entry>> cache_;
  std::set<Key> unsupported_;
};

}  // namespace bsw::cuda
