// cuBLASLt GEMMs: row-major arguments mapped to column-major (C^T = op(B)^T op(A)^T), descriptors and the
// heuristic's first algorithm cached per shape, epilogues for bias and GELU, and pointer alignments passed to
// the heuristic so an algorithm never assumes more alignment than a tensor has.
#include "backends/cuda/gemm.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/check.hpp"
#include "batchsweep/errors.hpp"

namespace bsw::cuda {

struct Gemm::Entry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Entry() {
    if (a != nullptr) BSW_CUBLAS_NOEXCEPT(cublasLtMatrixLayoutDestroy(a));
    if (b != nullptr) BSW_CUBLAS_NOEXCEPT(cublasLtMatrixLayoutDestroy(b));
    if (c != nullptr) BSW_CUBLAS_NOEXCEPT(cublasLtMatrixLayoutDestroy(c));
    if (desc != nullptr) BSW_CUBLAS_NOEXCEPT(cublasLtMatmulDescDestroy(desc));
  }
};

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::none:
      return "DEFAULT";
    case Epilogue::bias:
      return "BIAS";
    case Epilogue::gelu_bias:
      return "GELU_BIAS";
    case Epilogue::gelu_aux_bias:
      return "GELU_AUX_BIAS";
    case Epilogue::dgelu_bgrad:
      return "DGELU_BGRAD";
  }
  return "?";
}

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::i32:
      break;
  }
  throw BackendError("gemm: int32 tensors cannot be multiplied");
}

// The alignment fused epilogues' bias and aux pointers need (see Gemm::find).
constexpr uint32_t kEpilogueAlignment = 16;

// Largest power of two (up to 256) dividing the address: the alignment the heuristic may assume.
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

cublasLtEpilogue_t epilogue_of(Epilogue e) {
  switch (e) {
    case Epilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_bias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::gelu_aux_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::dgelu_bgrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

cublasLtMatrixLayout_t make_layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  BSW_CUBLAS(cublasLtMatrixLayoutCreate(&layout, cuda_type(t), static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    BSW_CUBLAS(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    BSW_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof(stride)));
  }
  return layout;
}

void check_args(const GemmArgs& g) {
  const auto fail = [&](const char* what) {
    throw BackendError(fmt::format("gemm [{}x{}x{}, batch {}]: {}", g.m, g.n, g.k, g.batch, what));
  };
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.batch < 1) fail("every dimension must be positive");
  if (g.batch > 0x7FFFFFFF) fail("batch count above 2^31");
  if (g.lda < (g.trans_a ? g.m : g.k)) fail("lda is smaller than a row of A");
  if (g.ldb < (g.trans_b ? g.k : g.n)) fail("ldb is smaller than a row of B");
  if (g.ldc < g.n) fail("ldc is smaller than a row of C");
  if (g.a == nullptr || g.b == nullptr || g.c == nullptr) fail("a null operand");
  if (g.epilogue != Epilogue::none && g.bias == nullptr) fail("a bias epilogue without a bias");
  const bool with_aux = g.epilogue == Epilogue::gelu_aux_bias || g.epilogue == Epilogue::dgelu_bgrad;
  if (with_aux && (g.aux == nullptr || g.ld_aux < g.n || g.ld_aux % 8 != 0))
    fail("a GELU aux epilogue needs an aux buffer whose leading dimension is a multiple of 8 and at least N");
  if (g.epilogue != Epilogue::none && g.batch != 1)
    fail("bias epilogues take one product (the bias batch stride is not set)");
  if (g.epilogue == Epilogue::dgelu_bgrad && g.beta != 0.0f)
    fail("dgelu_bgrad writes C and the bias gradient: no beta");
}

}  // namespace

Gemm::Gemm(Precision precision, void* workspace, uint64_t workspace_bytes)
    : precision_(precision), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  BSW_CUBLAS(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  cache_.clear();
  if (handle_ != nullptr) BSW_CUBLAS_NOEXCEPT(cublasLtDestroy(handle_));
}

std::string Gemm::version() {
  const size_t v = cublasLtGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

bool Gemm::gelu_epilogue_supported(int64_t n, const void* c, const void* aux) {
  return n % 8 == 0 && alignment(c) >= kEpilogueAlignment &&
         (aux == nullptr || alignment(aux) >= kEpilogueAlignment);
}

Gemm::Entry* Gemm::find(const GemmArgs& g) {
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldc,
                static_cast<int>(g.ab_type),
                static_cast<int>(g.c_type),
                g.batch,
                g.stride_a,
                g.stride_b,
                g.stride_c,
                static_cast<int>(g.epilogue),
                g.ld_aux,
                alignment(g.a),
                alignment(g.b),
                alignment(g.c),
                g.bias != nullptr ? alignment(g.bias) : 0u,
                g.aux != nullptr ? alignment(g.aux) : 0u,
                g.beta != 0.0f};
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.get();
  if (unsupported_.count(key) != 0) return nullptr;
  // No preference describes the bias pointer's alignment, and an algorithm may load it 16 bytes at a time
  // (a misaligned-address fault, sticky: the sweep would end). A bias packed among the parameters at an
  // offset that is not a multiple of 16 bytes (the second bias of a 784-100-10 MLP in 16 bits, after the
  // first layer's 100-element bias) is not 16-byte aligned,
  // where PyTorch's, a tensor of its own, always is: such a product runs unfused, as where cuBLASLt has no
  // algorithm.
  if ((g.epilogue != Epilogue::none && alignment(g.bias) < kEpilogueAlignment) ||
      (g.aux != nullptr && alignment(g.aux) < kEpilogueAlignment)) {
    unsupported_.insert(key);
    return nullptr;
  }

  auto e = std::make_unique<Entry>();
  const cublasComputeType_t compute =
      precision_ == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  BSW_CUBLAS(cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F));
  // Column-major view: C^T [N, M] = op(B)^T [N, K] op(A)^T [K, M], so B is cuBLASLt's first operand.
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  BSW_CUBLAS(
      cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  BSW_CUBLAS(
      cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  const cublasLtEpilogue_t epilogue = epilogue_of(g.epilogue);
  BSW_CUBLAS(
      cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (g.epilogue != Epilogue::none)
    BSW_CUBLAS(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  if (g.epilogue == Epilogue::gelu_aux_bias || g.epilogue == Epilogue::dgelu_bgrad) {
    BSW_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                              sizeof(g.aux)));
    BSW_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g.ld_aux,
                                              sizeof(g.ld_aux)));
  }
  // First operand: B, stored row-major [K, N] (col-major [N, K]) or, transposed, [N, K] (col-major [K, N]).
  e->a = make_layout(g.ab_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb, g.batch, g.stride_b);
  e->b = make_layout(g.ab_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda, g.batch, g.stride_a);
  e->c = make_layout(g.c_type, g.n, g.m, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  BSW_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  const auto destroy_preference = [&] { BSW_CUBLAS_NOEXCEPT(cublasLtMatmulPreferenceDestroy(preference)); };
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  try {
    const uint64_t bytes = workspace_bytes_;
    BSW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &bytes, sizeof(bytes)));
    const uint32_t align_first = alignment(g.b), align_second = alignment(g.a), align_c = alignment(g.c);
    BSW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &align_first, sizeof(align_first)));
    BSW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &align_second, sizeof(align_second)));
    BSW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &align_c, sizeof(align_c)));
    BSW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &align_c, sizeof(align_c)));
    // NOT_SUPPORTED is cuBLASLt's "no algorithm for this configuration" (as is a zero count, or a result
    // whose state is not success). An epilogue with a type combination cuBLASLt does not take is refused
    // with INVALID_VALUE instead (cublasLt.h): for a fused epilogue that is an answer too, and the caller
    // falls back; for a plain product it is our error, and thrown.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, e->desc, e->a, e->b, e->c, e->c,
                                                                 preference, 1, &result, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED ||
        (status == CUBLAS_STATUS_INVALID_VALUE && g.epilogue != Epilogue::none))
      found = 0;
    else
      BSW_CUBLAS(status);
    if (found > 0 && result.state != CUBLAS_STATUS_SUCCESS) found = 0;
  } catch (...) {
    destroy_preference();
    throw;
  }
  destroy_preference();
  if (found < 1) {
    unsupported_.insert(key);
    return nullptr;
  }
  e->algo = result.algo;
  return cache_.emplace(key, std::move(e)).first->second.get();
}

namespace {

// Bytes per element of a GEMM operand type.
uint64_t element_bytes(DType t) {
  return t == DType::f32 ? 4 : 2;
}

// The products [first, first + count) of a batched product: the same shapes with the pointers moved on.
GemmArgs batch_slice(const GemmArgs& g, int64_t first, int64_t count) {
  GemmArgs part = g;
  part.batch = count;
  const auto advance = [&](const void* p, int64_t stride, DType t) {
    return static_cast<const char*>(p) + static_cast<uint64_t>(first * stride) * element_bytes(t);
  };
  part.a = advance(g.a, g.stride_a, g.ab_type);
  part.b = advance(g.b, g.stride_b, g.ab_type);
  part.c = const_cast<char*>(advance(g.c, g.stride_c, g.c_type));
  return part;
}

}  // namespace

bool Gemm::available(const GemmArgs& g) {
  check_args(g);
  // Every slice run() would run: the last is shorter, and each one's pointers have their own alignment.
  // Repeated shapes are answered from the cache.
  for (int64_t first = 0; first < g.batch; first += kMaxBatchCount) {
    const GemmArgs slice =
        g.batch > kMaxBatchCount ? batch_slice(g, first, std::min(kMaxBatchCount, g.batch - first)) : g;
    if (find(slice) == nullptr) return false;
  }
  return true;
}

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
  check_args(g);
  if (g.batch > kMaxBatchCount) {
    for (int64_t first = 0; first < g.batch; first += kMaxBatchCount)
      run(batch_slice(g, first, std::min(kMaxBatchCount, g.batch - first)), stream);
    return;
  }
  Entry* found = find(g);
  if (found == nullptr) {
    // cuBLASLt documents rows, columns and leading dimensions as usually supported only where they fit
    // int32: past that, that is the likely cause, and the message says so.
    constexpr int64_t kInt32Max = 0x7FFFFFFF;
    const int64_t widest = std::max({g.m, g.n, g.k, g.lda, g.ldb, g.ldc});
    const std::string beyond =
        widest > kInt32Max
            ? fmt::format(
                  "; a dimension of {} is past 2^31 - 1, where cuBLASLt supports few shapes (a "
                  "smaller batch, or shorter sequences, keeps it within)",
                  widest)
            : std::string();
    throw BackendError(
        fmt::format("cuBLASLt has no algorithm for a {} GEMM {}x{}x{} (trans {}{}, batch {}, {} output, "
                    "epilogue {}) with a {} byte workspace{}",
                    to_string(g.ab_type), g.m, g.n, g.k, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N',
                    g.batch, to_string(g.c_type), epilogue_name(g.epilogue), workspace_bytes_, beyond));
  }
  Entry& e = *found;
  if (g.epilogue != Epilogue::none)
    BSW_CUBLAS(
        cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  if (g.epilogue == Epilogue::gelu_aux_bias || g.epilogue == Epilogue::dgelu_bgrad)
    BSW_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                              sizeof(g.aux)));
  BSW_CUBLAS(cublasLtMatmul(handle_, e.desc, &g.alpha, g.b, e.a, g.a, e.b, &g.beta, g.c, e.c, g.c, e.c,
                            &e.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace bsw::cuda
