// The part of cuBLASLt that src/backends/cuda/gemm.cpp calls, on the CPU emulator (runtime.hpp): column-major
// D = epilogue(alpha op(A) op(B) + beta C) in fp32 accumulation, for fp32, bf16 and fp16 matrices, with the
// DEFAULT, BIAS, GELU_BIAS, GELU_AUX_BIAS and DGELU_BGRAD epilogues.
//
// It is a strict fake: its worth is catching our mistakes without a GPU. The heuristic only answers for a
// consistent problem (shapes that match the transposes, leading dimensions, supported types, the GELU aux
// rules) and records in the algorithm what it was chosen for: the problem, the workspace and the pointer
// alignments the preference promised. cublasLtMatmul refuses (CUBLAS_STATUS_INVALID_VALUE, and a launch error
// naming the operand, see bsw::emu::set_launch_error) an operand outside every live device allocation, a
// pointer less aligned than promised, an algorithm chosen for another problem, a workspace smaller than the
// algorithm's, a missing bias or aux buffer, and outputs that overlap an input or each other. The product is
// then queued on the stream as a closure holding copies of every parameter, so a captured graph replays what
// was asked at capture time, whatever the cached descriptors say by then (as cuBLASLt freezes them).
// BSW_EMU_CUBLASLT_REFUSE (epilogue names, comma-separated) makes the heuristic answer NOT_SUPPORTED for
// those epilogues, as a cuBLASLt without kernels for them does; BSW_EMU_CUBLASLT_REFUSE_BATCH (a batch count)
// does the same for products of that many batches.
//
// Numbers: inputs are widened to fp32 (FAST_TF32 rounds fp32 inputs to 10 mantissa bits, to nearest with ties
// away from zero as PTX's cvt.rna.tf32.f32), products are summed in fp32 in order of k, and outputs are
// rounded to nearest even. GELU is the tanh form 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)));
// DGELU_BGRAD multiplies by its exact derivative and writes each row's sum of the result (fp32 sum, stored in
// the bias type) to the bias pointer. Bias and aux vectors have D's type, as cuBLASLt's documentation says
// for non-fp8 kernels.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime.hpp"

struct cublasLtContext {
  uint64_t magic;
};

namespace {

constexpr uint64_t kHandleMagic = 0x4C74'4861'6E64'6C65;  // "LtHandle"
constexpr uint64_t kAlgoMagic = 0x4661'6B65'416C'676F;    // "FakeAlgo"
constexpr uint32_t kDefaultAlignment = 256;               // MIN_ALIGNMENT_*_BYTES' documented default
// The most alignment an algorithm is taken to rely on for the bias and aux pointers, which no preference
// attribute describes (the heuristic reads the pointers' values instead).
constexpr uint32_t kEpilogueAlignmentCap = 16;
constexpr float kGeluScale = 0.7978845608f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

void complain(const std::string& message) {
  std::cerr << "[fake cuBLASLt] " << message << "\n";
}

// ---- numbers ----

float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}

float bf16_to_float(uint16_t h) {
  return float_of(static_cast<uint32_t>(h) << 16);
}

uint16_t float_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return float_of(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -v : v;
  }
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // from 65520 up: infinity
  if (a < 0x38800000u)  // below 2^-14: a subnormal, a multiple of 2^-24 (the scaling is exact)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(std::ldexp(float_of(a), 24))));
  uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3FFu);
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

float round_tf32(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7F800000u) == 0x7F800000u) return f;  // Inf and NaN unchanged
  return float_of((u + 0x1000u) & 0xFFFFE000u);
}

float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x)));
}

float gelu_grad(float x) {
  const float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// ---- element types ----

std::size_t element_bytes(int32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F:
      return 2;
    default:
      return 0;
  }
}

std::string type_name(int32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    case CUDA_R_16F:
      return "CUDA_R_16F";
    default:
      return fmt::format("cudaDataType {}", type);
  }
}

std::string compute_name(int32_t compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
      return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return "CUBLAS_COMPUTE_32F_FAST_TF32";
    default:
      return fmt::format("cublasComputeType_t {}", compute);
  }
}

float load(int32_t type, const void* base, int64_t index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_16BF:
      return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return f16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
}

void store(int32_t type, void* base, int64_t index, float v) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[index] = v;
      return;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(base)[index] = float_to_bf16(v);
      return;
    default:
      static_cast<uint16_t*>(base)[index] = float_to_f16(v);
      return;
  }
}

// out[r + c * rows] = element offset + r * row_step + c * col_step of base, widened to fp32 (tf32-rounded).
template <class Widen>
void gather_as(const void* base, int64_t offset, int64_t rows, int64_t cols, int64_t row_step,
               int64_t col_step, bool tf32, float* out, Widen widen) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const float v = widen(base, offset + r * row_step + c * col_step);
      out[r + c * rows] = tf32 ? round_tf32(v) : v;
    }
}

void gather(int32_t type, const void* base, int64_t offset, int64_t rows, int64_t cols, int64_t row_step,
            int64_t col_step, bool tf32, float* out) {
  switch (type) {
    case CUDA_R_32F:
      gather_as(base, offset, rows, cols, row_step, col_step, tf32, out,
                [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; });
      return;
    case CUDA_R_16BF:
      gather_as(base, offset, rows, cols, row_step, col_step, false, out,
                [](const void* p, int64_t i) { return bf16_to_float(static_cast<const uint16_t*>(p)[i]); });
      return;
    default:
      gather_as(base, offset, rows, cols, row_step, col_step, false, out,
                [](const void* p, int64_t i) { return f16_to_float(static_cast<const uint16_t*>(p)[i]); });
      return;
  }
}

// Largest power of two (up to 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// ---- descriptors ----

struct Layout {
  int32_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
  int64_t plane_offset = 0;
  uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
};

struct Desc {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_stride = 0;
  int32_t aux_type = -1, bias_type = -1;
};

struct Preference {
  uint64_t workspace = 0;
  uint32_t alignment[4] = {kDefaultAlignment, kDefaultAlignment, kDefaultAlignment, kDefaultAlignment};
};

// What an algorithm from the heuristic carries in cublasLtMatmulAlgo_t::data.
struct AlgoData {
  uint64_t magic;
  uint64_t problem;    // fingerprint of the descriptors it was chosen for (pointers aside)
  uint64_t workspace;  // bytes it may use: the preference's MAX_WORKSPACE_BYTES
  uint32_t alignment[4];
  uint32_t bias_alignment, aux_alignment;
};
static_assert(sizeof(AlgoData) <= sizeof(cublasLtMatmulAlgo_t));
static_assert(std::is_trivially_copyable_v<AlgoData>);

// Live objects. The descriptors' identity is the block allocated by Create; their state lives here, so a
// destroyed or foreign descriptor is recognised.
struct Registry {
  std::mutex mutex;
  std::set<const void*> handles;
  std::map<const void*, Desc> descs;
  std::map<const void*, Layout> layouts;
  std::map<const void*, Preference> preferences;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: descriptors may be destroyed during static destruction
  return *r;
}

template <class T>
cublasStatus_t assign(T& field, const void* buf, size_t size, const char* call, const char* attribute) {
  if (buf == nullptr || size != sizeof(T)) {
    complain(fmt::format("{}({}): {} bytes given, the attribute holds {}", call, attribute,
                         buf == nullptr ? 0 : size, sizeof(T)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the problem ----

enum EpilogueFlags : unsigned {
  kBiasRead = 1,
  kBiasWritten = 2,
  kAuxRead = 4,
  kAuxWritten = 8,
  kGelu = 16,
  kDgelu = 32,
};

bool epilogue_flags(uint32_t epilogue, unsigned* flags) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      *flags = 0;
      return true;
    case CUBLASLT_EPILOGUE_BIAS:
      *flags = kBiasRead;
      return true;
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      *flags = kBiasRead | kGelu;
      return true;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      *flags = kBiasRead | kGelu | kAuxWritten;
      return true;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      *flags = kAuxRead | kBiasWritten | kDgelu;
      return true;
    default:
      return false;
  }
}

std::string epilogue_name(uint32_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "DGELU_BGRAD";
    default:
      return fmt::format("epilogue {}", epilogue);
  }
}

// BSW_EMU_CUBLASLT_REFUSE: a comma-separated list of epilogue names (as epilogue_name writes them) for which
// the heuristic finds no algorithm, read at each call.
bool epilogue_refused(uint32_t epilogue) {
  const char* v = std::getenv("BSW_EMU_CUBLASLT_REFUSE");
  if (v == nullptr) return false;
  const std::string name = epilogue_name(epilogue), list = v;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (list.compare(begin, end - begin, name) == 0) return true;
    begin = end + 1;
  }
  return false;
}

struct Problem {
  Desc desc;
  Layout a, b, c, d;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  unsigned flags = 0;
  int32_t bias_type = CUDA_R_32F, aux_type = CUDA_R_32F;
};

struct Verdict {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string why;
  explicit operator bool() const { return status == CUBLAS_STATUS_SUCCESS; }
};

Verdict refuse(cublasStatus_t status, std::string why) {
  return {status, std::move(why)};
}

std::string describe(const Layout& l) {
  return fmt::format("{} {}x{}, ld {}, batch {}, stride {}", type_name(l.type), l.rows, l.cols, l.ld, l.batch,
                     l.stride);
}

Verdict check_layout(const char* name, const Layout& l) {
  if (element_bytes(l.type) == 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("matrix {}: {} is not emulated (CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F are)", name,
                              type_name(l.type)));
  if (l.order != CUBLASLT_ORDER_COL)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("matrix {}: only column-major order is emulated (order {})", name, l.order));
  if (l.plane_offset != 0 || l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("matrix {}: planar-complex and pointer-array batches are not emulated", name));
  if (l.rows == 0 || l.cols == 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("matrix {} ({}): empty matrices are not emulated", name, describe(l)));
  if (l.rows > INT32_MAX || l.cols > INT32_MAX)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("matrix {} ({}): dimensions above 2^31 - 1", name, describe(l)));
  if (l.ld < static_cast<int64_t>(l.rows))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("matrix {} ({}): leading dimension {} below its {} rows", name, describe(l),
                              l.ld, l.rows));
  if (l.batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt::format("matrix {}: batch count {}", name, l.batch));
  if (l.stride < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("matrix {}: negative batch stride {}", name, l.stride));
  return {};
}

// Everything the descriptors alone decide: the heuristic and cublasLtMatmul both ask it.
Verdict check_problem(const Desc& desc, const Layout& a, const Layout& b, const Layout& c, const Layout& d,
                      Problem* out) {
  Problem& p = *out;
  p.desc = desc;
  p.a = a;
  p.b = b;
  p.c = c;
  p.d = d;
  if (desc.compute != CUBLAS_COMPUTE_32F && desc.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("{} is not emulated (CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_FAST_TF32 are)",
                              compute_name(desc.compute)));
  if (desc.scale != CUDA_R_32F)
    return refuse(
        CUBLAS_STATUS_NOT_SUPPORTED,
        fmt::format("scale type {} with a 32F compute type (CUDA_R_32F is)", type_name(desc.scale)));
  if (desc.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(
        CUBLAS_STATUS_NOT_SUPPORTED,
        fmt::format("pointer mode {} is not emulated (host alpha and beta are)", desc.pointer_mode));
  for (const int32_t t : {desc.trans_a, desc.trans_b})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("operation {} is not emulated (N and T are)", t));
  if (desc.trans_c != CUBLAS_OP_N) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC must be CUBLAS_OP_N");
  for (const auto& [name, l] : {std::pair<const char*, const Layout&>{"A", a}, {"B", b}, {"C", c}, {"D", d}})
    if (Verdict v = check_layout(name, l); !v) return v;

  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  p.m = static_cast<int64_t>(d.rows);
  p.n = static_cast<int64_t>(d.cols);
  p.k = static_cast<int64_t>(ta ? a.rows : a.cols);
  const auto op_a_rows = static_cast<int64_t>(ta ? a.cols : a.rows);
  const auto op_b_rows = static_cast<int64_t>(tb ? b.cols : b.rows);
  const auto op_b_cols = static_cast<int64_t>(tb ? b.rows : b.cols);
  if (op_a_rows != p.m || op_b_rows != p.k || op_b_cols != p.n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("op(A) is {}x{} (A {}, {}), op(B) is {}x{} (B {}, {}), D is {}x{}: not an "
                              "m x k times k x n product",
                              op_a_rows, p.k, describe(a), ta ? 'T' : 'N', op_b_rows, op_b_cols, describe(b),
                              tb ? 'T' : 'N', p.m, p.n));
  if (c.rows != d.rows || c.cols != d.cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("C ({}) and D ({}) differ in shape", describe(c), describe(d)));
  if (a.batch != b.batch || a.batch != c.batch || a.batch != d.batch)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt::format("batch counts differ: A {}, B {}, C {}, D {}",
                                                           a.batch, b.batch, c.batch, d.batch));
  p.batch = d.batch;

  if (a.type != b.type || c.type != d.type || (d.type != a.type && d.type != CUDA_R_32F))
    return refuse(
        CUBLAS_STATUS_NOT_SUPPORTED,
        fmt::format("types A {}, B {}, C {}, D {}: A and B must match, C and D must match and be A's "
                    "type or CUDA_R_32F",
                    type_name(a.type), type_name(b.type), type_name(c.type), type_name(d.type)));
  if (desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && (a.type != CUDA_R_32F || d.type != CUDA_R_32F))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("CUBLAS_COMPUTE_32F_FAST_TF32 takes CUDA_R_32F matrices only (A {}, D {})",
                              type_name(a.type), type_name(d.type)));

  if (!epilogue_flags(desc.epilogue, &p.flags))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fmt::format("{} is not emulated (DEFAULT, BIAS, GELU_BIAS, GELU_AUX_BIAS, DGELU_BGRAD are)",
                              epilogue_name(desc.epilogue)));
  const std::string epi = epilogue_name(desc.epilogue);
  p.bias_type = desc.bias_type == -1 ? d.type : desc.bias_type;
  p.aux_type = desc.aux_type == -1 ? d.type : desc.aux_type;
  if ((p.flags & (kBiasRead | kBiasWritten)) != 0) {
    if (p.bias_type != d.type)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    fmt::format("{}: bias type {} with D {}: bias vectors have D's type", epi,
                                type_name(p.bias_type), type_name(d.type)));
    if (desc.bias_stride < 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: negative bias batch stride {}", epi, desc.bias_stride));
    if ((p.flags & kBiasWritten) != 0 && p.batch > 1 && desc.bias_stride < p.m)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: {} batches write bias gradients of {} elements {} apart: they overlap",
                                epi, p.batch, p.m, desc.bias_stride));
  }
  if ((p.flags & (kAuxRead | kAuxWritten)) != 0) {
    if (p.aux_type != d.type)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{}: aux type {} with D {}: GELU aux has D's type", epi,
                                type_name(p.aux_type), type_name(d.type)));
    // Without an aux pointer the heuristic answers (cuBLASLt does); cublasLtMatmul refuses it.
    if (desc.aux != nullptr) {
      if (desc.aux_ld < p.m || desc.aux_ld % 8 != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      fmt::format("{}: EPILOGUE_AUX_LD {} must be a multiple of 8 and at least D's {} rows",
                                  epi, desc.aux_ld, p.m));
      if (p.batch > 1 && (desc.aux_stride < 0 || desc.aux_stride % 8 != 0))
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      fmt::format("{}: EPILOGUE_AUX_BATCH_STRIDE {} must be a non-negative multiple of 8",
                                  epi, desc.aux_stride));
      if ((p.flags & kAuxWritten) != 0 && p.batch > 1 && desc.aux_stride < (p.n - 1) * desc.aux_ld + p.m)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      fmt::format("{}: {} batches write {}x{} aux matrices (ld {}) {} elements apart "
                                  "(EPILOGUE_AUX_BATCH_STRIDE): they overlap",
                                  epi, p.batch, p.m, p.n, desc.aux_ld, desc.aux_stride));
    }
  }
  return {};
}

uint64_t fingerprint(const Problem& p) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  const auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xFFu;
      h *= 1099511628211ull;
    }
  };
  const Desc& d = p.desc;
  for (const int64_t v : {int64_t{d.compute}, int64_t{d.scale}, int64_t{d.pointer_mode}, int64_t{d.trans_a},
                          int64_t{d.trans_b}, int64_t{d.trans_c}, int64_t{d.epilogue}, d.bias_stride,
                          d.aux_ld, d.aux_stride, int64_t{d.aux_type}, int64_t{d.bias_type}})
    mix(v);
  for (const Layout* l : {&p.a, &p.b, &p.c, &p.d})
    for (const int64_t v :
         {int64_t{l->type}, static_cast<int64_t>(l->rows), static_cast<int64_t>(l->cols), l->ld,
          int64_t{l->order}, int64_t{l->batch}, l->stride, l->plane_offset, int64_t{l->batch_mode}})
      mix(v);
  return h;
}

// ---- operands in memory ----

// A strided-batched column-major matrix (vectors are one column) at a device address.
struct Span {
  const char* name;
  const void* p;
  int32_t type;
  int64_t rows, cols, ld, batch, stride;
  bool written;
};

Span span_of(const char* name, const void* p, const Layout& l, bool written) {
  return {name,    p,        l.type, static_cast<int64_t>(l.rows), static_cast<int64_t>(l.cols), l.ld,
          l.batch, l.stride, written};
}

// Bytes from the first element to past the last; false on overflow.
bool span_bytes(const Span& s, uint64_t* bytes) {
  uint64_t batches = 0, columns = 0, elements = 0;
  const auto es = static_cast<uint64_t>(element_bytes(s.type));
  if (__builtin_mul_overflow(static_cast<uint64_t>(s.batch - 1), static_cast<uint64_t>(s.stride), &batches) ||
      __builtin_mul_overflow(static_cast<uint64_t>(s.cols - 1), static_cast<uint64_t>(s.ld), &columns) ||
      __builtin_add_overflow(batches, columns, &elements) ||
      __builtin_add_overflow(elements, static_cast<uint64_t>(s.rows), &elements))
    return false;
  return !__builtin_mul_overflow(elements, es, bytes);
}

std::string describe(const Span& s) {
  uint64_t bytes = 0;
  const bool sized = span_bytes(s, &bytes);
  return fmt::format("{} at {} ({} {}x{}, ld {}, batch {}, stride {}: {} bytes)", s.name, s.p,
                     type_name(s.type), s.rows, s.cols, s.ld, s.batch, s.stride,
                     sized ? fmt::format("{}", bytes) : "2^64+");
}

using Interval = std::pair<uintptr_t, uintptr_t>;
constexpr int64_t kMaxIntervals = int64_t{1} << 22;

// The byte intervals a span covers (one per column and batch), sorted by start; empty when too many to list.
std::vector<Interval> intervals(const Span& s) {
  std::vector<Interval> out;
  if (s.batch * s.cols > kMaxIntervals) return out;
  const auto es = static_cast<uintptr_t>(element_bytes(s.type));
  const auto base = reinterpret_cast<uintptr_t>(s.p);
  out.reserve(static_cast<std::size_t>(s.batch * s.cols));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t c = 0; c < s.cols; ++c) {
      const uintptr_t start = base + static_cast<uintptr_t>(b * s.stride + c * s.ld) * es;
      out.emplace_back(start, start + static_cast<uintptr_t>(s.rows) * es);
    }
  std::sort(out.begin(), out.end());
  return out;
}

// Whether two of a span's elements share bytes (a written span's batches or columns would race).
bool overlaps_itself(const Span& s) {
  if (s.ld >= s.rows && (s.batch == 1 || s.stride >= (s.cols - 1) * s.ld + s.rows)) return false;
  const std::vector<Interval> list = intervals(s);
  for (std::size_t i = 1; i < list.size(); ++i)
    if (list[i].first < list[i - 1].second) return true;
  return false;
}

bool overlap(const Span& x, const Span& y) {
  uint64_t xb = 0, yb = 0;
  if (!span_bytes(x, &xb) || !span_bytes(y, &yb)) return false;
  const auto x0 = reinterpret_cast<uintptr_t>(x.p), y0 = reinterpret_cast<uintptr_t>(y.p);
  if (x0 + xb <= y0 || y0 + yb <= x0) return false;
  const std::vector<Interval> a = intervals(x), b = intervals(y);
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].first < b[j].second && b[j].first < a[i].second) return true;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return false;
}

// ---- execution ----

// Everything one cublasLtMatmul needs, copied at call time.
struct Job {
  Problem p;
  const void* a;
  const void* b;
  const void* c;
  void* d;
  const void* bias;
  void* aux;
  float alpha, beta;
  std::vector<Span> spans;
};

void execute(const Job& job) {
  for (const Span& s : job.spans) {
    uint64_t bytes = 0;
    if (!span_bytes(s, &bytes) || !bsw::emu::device_range_ok(s.p, bytes)) {
      bsw::emu::set_launch_error(
          cudaErrorIllegalAddress,
          fmt::format("cublasLtMatmul (run from a stream or graph): {} is no longer inside "
                      "one live device allocation",
                      describe(s)));
      return;
    }
  }
  const Problem& p = job.p;
  const Desc& desc = p.desc;
  const int64_t m = p.m, n = p.n, k = p.k;
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  const bool tf32 = desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      acc(static_cast<std::size_t>(m * n)), grad(static_cast<std::size_t>(m));
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    // op(A) [m x k] and op(B) [k x n], column-major and contiguous.
    gather(p.a.type, job.a, batch * p.a.stride, m, k, ta ? p.a.ld : 1, ta ? 1 : p.a.ld, tf32, a.data());
    gather(p.b.type, job.b, batch * p.b.stride, k, n, tb ? p.b.ld : 1, tb ? 1 : p.b.ld, tf32, b.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      float* out = acc.data() + j * m;
      for (int64_t q = 0; q < k; ++q) {
        const float bq = b[static_cast<std::size_t>(q + j * k)];
        const float* column = a.data() + q * m;
        for (int64_t i = 0; i < m; ++i) out[i] += column[i] * bq;
      }
    }
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float v = job.alpha * acc[static_cast<std::size_t>(i + j * m)];
        if (job.beta != 0.0f) v += job.beta * load(p.c.type, job.c, batch * p.c.stride + i + j * p.c.ld);
        if ((p.flags & kBiasRead) != 0) v += load(p.bias_type, job.bias, batch * desc.bias_stride + i);
        const int64_t aux_index = batch * desc.aux_stride + i + j * desc.aux_ld;
        if ((p.flags & kAuxWritten) != 0) store(p.aux_type, job.aux, aux_index, v);
        if ((p.flags & kGelu) != 0) v = gelu(v);
        if ((p.flags & kDgelu) != 0) v *= gelu_grad(load(p.aux_type, job.aux, aux_index));
        if ((p.flags & kBiasWritten) != 0) grad[static_cast<std::size_t>(i)] += v;
        store(p.d.type, job.d, batch * p.d.stride + i + j * p.d.ld, v);
      }
    if ((p.flags & kBiasWritten) != 0)
      for (int64_t i = 0; i < m; ++i)
        store(p.bias_type, const_cast<void*>(job.bias), batch * desc.bias_stride + i,
              grad[static_cast<std::size_t>(i)]);
  }
}

cudaError_t launch_error_of(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return cudaErrorInvalidResourceHandle;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

// ---- handle ----

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext{kHandleMagic};
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.handles.insert(*lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.handles.erase(lightHandle) == 0) {
    complain(fmt::format("cublasLtDestroy: {} is not a live handle", static_cast<const void*>(lightHandle)));
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

size_t CUBLASWINAPI cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

// ---- matmul descriptor ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *matmulDesc = new cublasLtMatmulDescOpaque_t{};
  Desc d;
  d.compute = computeType;
  d.scale = scaleType;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.descs[*matmulDesc] = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_SUCCESS;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.descs.erase(matmulDesc) == 0) {
    complain(fmt::format("cublasLtMatmulDescDestroy: {} is not a live descriptor",
                         static_cast<const void*>(matmulDesc)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
  constexpr const char* call = "cublasLtMatmulDescSetAttribute";
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.descs.find(matmulDesc);
  if (it == r.descs.end()) {
    complain(fmt::format("{}: {} is not a live descriptor", call, static_cast<const void*>(matmulDesc)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Desc& d = it->second;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return assign(d.compute, buf, sizeInBytes, call, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return assign(d.scale, buf, sizeInBytes, call, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return assign(d.pointer_mode, buf, sizeInBytes, call, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_TRANSC: {
      int32_t op = 0;
      const char* name = attr == CUBLASLT_MATMUL_DESC_TRANSA   ? "TRANSA"
                         : attr == CUBLASLT_MATMUL_DESC_TRANSB ? "TRANSB"
                                                               : "TRANSC";
      if (const cublasStatus_t s = assign(op, buf, sizeInBytes, call, name); s != CUBLAS_STATUS_SUCCESS)
        return s;
      if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C) {
        complain(fmt::format("{}({}): {} is not a cublasOperation_t", call, name, op));
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      (attr == CUBLASLT_MATMUL_DESC_TRANSA   ? d.trans_a
       : attr == CUBLASLT_MATMUL_DESC_TRANSB ? d.trans_b
                                             : d.trans_c) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return assign(d.epilogue, buf, sizeInBytes, call, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return assign(d.bias, buf, sizeInBytes, call, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return assign(d.bias_stride, buf, sizeInBytes, call, "BIAS_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return assign(d.aux, buf, sizeInBytes, call, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return assign(d.aux_ld, buf, sizeInBytes, call, "EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return assign(d.aux_stride, buf, sizeInBytes, call, "EPILOGUE_AUX_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return assign(d.aux_type, buf, sizeInBytes, call, "EPILOGUE_AUX_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return assign(d.bias_type, buf, sizeInBytes, call, "BIAS_DATA_TYPE");
    default: {
      const int v = static_cast<int>(attr);
      const bool known =
          (v >= 0 && v <= 8) || (v >= 10 && v <= 15) || (v >= 17 && v <= 26) || (v >= 31 && v <= 38);
      complain(fmt::format("{}: attribute {} {}", call, v,
                           known ? "is not emulated" : "is not a cublasLtMatmulDescAttributes_t"));
      return known ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
    }
  }
}

// ---- matrix layout ----

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *matLayout = new cublasLtMatrixLayoutOpaque_t{};
  Layout l;
  l.type = type;
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.layouts[*matLayout] = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (matLayout == nullptr) return CUBLAS_STATUS_SUCCESS;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.layouts.erase(matLayout) == 0) {
    complain(fmt::format("cublasLtMatrixLayoutDestroy: {} is not a live layout",
                         static_cast<const void*>(matLayout)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t sizeInBytes) {
  constexpr const char* call = "cublasLtMatrixLayoutSetAttribute";
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.layouts.find(matLayout);
  if (it == r.layouts.end()) {
    complain(fmt::format("{}: {} is not a live layout", call, static_cast<const void*>(matLayout)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Layout& l = it->second;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t type = 0;
      const cublasStatus_t s = assign(type, buf, sizeInBytes, call, "TYPE");
      if (s == CUBLAS_STATUS_SUCCESS) l.type = static_cast<int32_t>(type);
      return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return assign(l.order, buf, sizeInBytes, call, "ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return assign(l.rows, buf, sizeInBytes, call, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return assign(l.cols, buf, sizeInBytes, call, "COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return assign(l.ld, buf, sizeInBytes, call, "LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return assign(l.batch, buf, sizeInBytes, call, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return assign(l.stride, buf, sizeInBytes, call, "STRIDED_BATCH_OFFSET");
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET:
      return assign(l.plane_offset, buf, sizeInBytes, call, "PLANE_OFFSET");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
      return assign(l.batch_mode, buf, sizeInBytes, call, "BATCH_MODE");
    default:
      complain(fmt::format("{}: attribute {} is not a cublasLtMatrixLayoutAttribute_t", call,
                           static_cast<int>(attr)));
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---- preference ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.preferences[*pref] = Preference{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.preferences.erase(pref) == 0) {
    complain(fmt::format("cublasLtMatmulPreferenceDestroy: {} is not a live preference",
                         static_cast<const void*>(pref)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  constexpr const char* call = "cublasLtMatmulPreferenceSetAttribute";
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.preferences.find(pref);
  if (it == r.preferences.end()) {
    complain(fmt::format("{}: {} is not a live preference", call, static_cast<const void*>(pref)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Preference& p = it->second;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return assign(p.workspace, buf, sizeInBytes, call, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return assign(p.alignment[0], buf, sizeInBytes, call, "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return assign(p.alignment[1], buf, sizeInBytes, call, "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return assign(p.alignment[2], buf, sizeInBytes, call, "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return assign(p.alignment[3], buf, sizeInBytes, call, "MIN_ALIGNMENT_D_BYTES");
    default:
      complain(
          fmt::format("{}: attribute {} is not emulated (MAX_WORKSPACE_BYTES and MIN_ALIGNMENT_*_BYTES are)",
                      call, static_cast<int>(attr)));
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---- heuristic ----

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  constexpr const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (returnAlgoCount != nullptr) *returnAlgoCount = 0;
  Desc desc;
  Layout layouts[4];
  Preference pref;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (r.handles.count(lightHandle) == 0) {
      complain(fmt::format("{}: {} is not a live handle", call, static_cast<const void*>(lightHandle)));
      return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    const auto d = r.descs.find(operationDesc);
    const auto p = r.preferences.find(preference);
    const cublasLtMatrixLayout_t given[4] = {Adesc, Bdesc, Cdesc, Ddesc};
    bool found = d != r.descs.end() && p != r.preferences.end();
    for (int i = 0; found && i < 4; ++i) {
      const auto l = r.layouts.find(given[i]);
      found = l != r.layouts.end();
      if (found) layouts[i] = l->second;
    }
    if (!found || requestedAlgoCount < 1 || heuristicResultsArray == nullptr || returnAlgoCount == nullptr) {
      complain(fmt::format("{}: a descriptor that is not live, or no room for results (requested {})", call,
                           requestedAlgoCount));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    desc = d->second;
    pref = p->second;
  }
  Problem problem;
  if (Verdict v = check_problem(desc, layouts[0], layouts[1], layouts[2], layouts[3], &problem); !v) {
    complain(fmt::format("{}: no algorithm: {}", call, v.why));
    return v.status;
  }
  // A GPU whose cuBLASLt has no kernel for an epilogue answers NOT_SUPPORTED with no result; the knob
  // plays that GPU (quietly, as the real library is).
  if (epilogue_refused(desc.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (const char* v = std::getenv("BSW_EMU_CUBLASLT_REFUSE_BATCH");
      v != nullptr && std::to_string(problem.batch) == v)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  AlgoData data{};
  data.magic = kAlgoMagic;
  data.problem = fingerprint(problem);
  data.workspace = pref.workspace;
  static const char* const kNames[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    const auto es = static_cast<uint32_t>(element_bytes(layouts[i].type));
    if (pref.alignment[i] < es) {
      complain(
          fmt::format("{}: no algorithm: matrix {} is promised only {}-byte alignment ({} elements are {} "
                      "bytes)",
                      call, kNames[i], pref.alignment[i], type_name(layouts[i].type), es));
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    data.alignment[i] = pref.alignment[i];
  }
  // The heuristic reads the bias and aux pointers' values for their alignment (cuBLASLt's documentation).
  const auto epilogue_alignment = [&](const void* p, int32_t type, const char* name, uint32_t* out) {
    const auto es = static_cast<uint32_t>(element_bytes(type));
    if (p == nullptr) {
      *out = es;
      return true;
    }
    const uint32_t a = alignment_of(p);
    if (a < es) {
      complain(fmt::format("{}: no algorithm: the {} pointer {} is not aligned to its {}-byte elements", call,
                           name, p, es));
      return false;
    }
    *out = std::min(a, kEpilogueAlignmentCap);
    return true;
  };
  if (!epilogue_alignment((problem.flags & (kBiasRead | kBiasWritten)) != 0 ? desc.bias : nullptr,
                          problem.bias_type, "bias", &data.bias_alignment) ||
      !epilogue_alignment((problem.flags & (kAuxRead | kAuxWritten)) != 0 ? desc.aux : nullptr,
                          problem.aux_type, "aux", &data.aux_alignment))
    return CUBLAS_STATUS_NOT_SUPPORTED;

  cublasLtMatmulHeuristicResult_t& result = heuristicResultsArray[0];
  result = cublasLtMatmulHeuristicResult_t{};
  std::memcpy(result.algo.data, &data, sizeof(data));
  result.workspaceSize = static_cast<size_t>(pref.workspace);
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matmul ----

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspaceSizeInBytes,
                                           cudaStream_t stream) {
  const auto fail = [](cublasStatus_t status, const std::string& why) {
    bsw::emu::set_launch_error(launch_error_of(status), std::string("cublasLtMatmul: ").append(why));
    return status;
  };
  Desc desc;
  Layout layouts[4];
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (r.handles.count(lightHandle) == 0)
      return fail(CUBLAS_STATUS_NOT_INITIALIZED,
                  fmt::format("{} is not a live handle", static_cast<const void*>(lightHandle)));
    const auto d = r.descs.find(computeDesc);
    if (d == r.descs.end())
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("{} is not a live matmul descriptor", static_cast<const void*>(computeDesc)));
    desc = d->second;
    const cublasLtMatrixLayout_t given[4] = {Adesc, Bdesc, Cdesc, Ddesc};
    static const char* const kNames[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
      const auto l = r.layouts.find(given[i]);
      if (l == r.layouts.end())
        return fail(CUBLAS_STATUS_INVALID_VALUE, fmt::format("the layout of {} ({}) is not a live layout",
                                                             kNames[i], static_cast<const void*>(given[i])));
      layouts[i] = l->second;
    }
  }
  if (alpha == nullptr || beta == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
  // BSW_EMU_CUBLASLT_NEEDS_FREE_MIB: a kernel loaded lazily on its first launch needs that much free device
  // memory; short of it the call fails as the real library's does, EXECUTION_FAILED with no runtime error.
  if (const char* v = std::getenv("BSW_EMU_CUBLASLT_NEEDS_FREE_MIB"); v != nullptr) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
        free_bytes < (std::strtoull(v, nullptr, 10) << 20))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  Problem problem;
  if (Verdict v = check_problem(desc, layouts[0], layouts[1], layouts[2], layouts[3], &problem); !v)
    return fail(v.status, v.why);
  const std::string epi = epilogue_name(desc.epilogue);

  // The algorithm: what it was chosen for and what it was promised.
  AlgoData data{};
  if (algo != nullptr) {
    std::memcpy(&data, algo->data, sizeof(data));
    if (data.magic != kAlgoMagic)
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  "the algorithm did not come from cublasLtMatmulAlgoGetHeuristic");
    if (data.problem != fingerprint(problem))
      return fail(
          CUBLAS_STATUS_INVALID_VALUE,
          fmt::format("the algorithm was chosen for another problem than this one (A {}, B {}, C {}, D {}, "
                      "trans {}{}, {}, {})",
                      describe(problem.a), describe(problem.b), describe(problem.c), describe(problem.d),
                      desc.trans_a == CUBLAS_OP_T ? 'T' : 'N', desc.trans_b == CUBLAS_OP_T ? 'T' : 'N', epi,
                      compute_name(desc.compute)));
  } else {  // cuBLASLt picks one itself, assuming what the pointers have
    for (int i = 0; i < 4; ++i) data.alignment[i] = static_cast<uint32_t>(element_bytes(layouts[i].type));
    data.bias_alignment = static_cast<uint32_t>(element_bytes(problem.bias_type));
    data.aux_alignment = static_cast<uint32_t>(element_bytes(problem.aux_type));
  }
  if (workspaceSizeInBytes < data.workspace)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                fmt::format("a {}-byte workspace for an algorithm chosen with up to {} bytes of workspace",
                            workspaceSizeInBytes, data.workspace));
  if (workspaceSizeInBytes > 0 &&
      (workspace == nullptr || !bsw::emu::device_range_ok(workspace, workspaceSizeInBytes)))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                fmt::format("the workspace [{}, +{} bytes) is not inside one live device allocation",
                            workspace, workspaceSizeInBytes));

  Job job;
  job.p = problem;
  job.alpha = *static_cast<const float*>(alpha);
  job.beta = *static_cast<const float*>(beta);
  job.a = A;
  job.b = B;
  job.c = C;
  job.d = D;
  job.bias = desc.bias;
  job.aux = desc.aux;
  const bool reads_c = job.beta != 0.0f;
  const bool uses_bias = (problem.flags & (kBiasRead | kBiasWritten)) != 0;
  const bool uses_aux = (problem.flags & (kAuxRead | kAuxWritten)) != 0;
  if (A == nullptr || B == nullptr || D == nullptr || (reads_c && C == nullptr))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                fmt::format("a null matrix: A {}, B {}, C {} (beta {}), D {}", A, B, C, job.beta, D));
  if (uses_bias && desc.bias == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                fmt::format("{} without CUBLASLT_MATMUL_DESC_BIAS_POINTER", epi));
  if (uses_aux && desc.aux == nullptr)
    return fail(
        (problem.flags & kAuxWritten) != 0 ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE,
        fmt::format("{} without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", epi));

  // Every operand inside one live allocation, as aligned as the algorithm was promised.
  std::vector<Span>& spans = job.spans;
  std::vector<uint32_t> promised;
  spans.push_back(span_of("A", A, problem.a, false));
  promised.push_back(data.alignment[0]);
  spans.push_back(span_of("B", B, problem.b, false));
  promised.push_back(data.alignment[1]);
  if (reads_c) {
    spans.push_back(span_of("C", C, problem.c, false));
    promised.push_back(data.alignment[2]);
  }
  spans.push_back(span_of("D", D, problem.d, true));
  promised.push_back(data.alignment[3]);
  if (uses_bias) {
    spans.push_back({(problem.flags & kBiasWritten) != 0 ? "bias gradient" : "bias", desc.bias,
                     problem.bias_type, problem.m, 1, problem.m, problem.batch, desc.bias_stride,
                     (problem.flags & kBiasWritten) != 0});
    promised.push_back(data.bias_alignment);
  }
  if (uses_aux) {
    spans.push_back({"aux", desc.aux, problem.aux_type, problem.m, problem.n, desc.aux_ld, problem.batch,
                     desc.aux_stride, (problem.flags & kAuxWritten) != 0});
    promised.push_back(data.aux_alignment);
  }
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    uint64_t bytes = 0;
    if (!span_bytes(s, &bytes) || !bsw::emu::device_range_ok(s.p, bytes))
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("{} is not inside one live device allocation", describe(s)));
    if (alignment_of(s.p) < promised[i])
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("{} is {}-byte aligned; the algorithm was chosen for {}-byte alignment",
                              describe(s), alignment_of(s.p), promised[i]));
  }
  // In place (C == D) needs C's layout to be D's; otherwise no output may share bytes with another operand.
  const bool in_place = reads_c && C == D;
  if (in_place && (problem.c.type != problem.d.type || problem.c.ld != problem.d.ld ||
                   problem.c.stride != problem.d.stride))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                fmt::format("C and D are the same pointer with different layouts (C {}, D {})",
                            describe(problem.c), describe(problem.d)));
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (!spans[i].written) continue;
    if (overlaps_itself(spans[i]))
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  fmt::format("{} is written and its columns or batches overlap", describe(spans[i])));
    for (std::size_t j = 0; j < spans.size(); ++j) {
      if (j == i || (in_place && std::string(spans[i].name) == "D" && std::string(spans[j].name) == "C"))
        continue;
      if (j < i && spans[j].written) continue;  // that pair was checked from the other side
      if (overlap(spans[i], spans[j]))
        return fail(CUBLAS_STATUS_INVALID_VALUE,
                    fmt::format("{} is written and overlaps {}", describe(spans[i]), describe(spans[j])));
    }
  }

  const cudaError_t queued = bsw::emu::enqueue(stream, [job = std::move(job)] { execute(job); });
  if (queued != cudaSuccess) {
    bsw::emu::set_launch_error(queued,
                               fmt::format("cublasLtMatmul: stream {} refused the work ({})",
                                           static_cast<const void*>(stream), static_cast<int>(queued)));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
