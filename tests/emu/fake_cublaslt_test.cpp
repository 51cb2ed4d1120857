// Tests of the emulator's fake cuBLASLt (fake_cublaslt.cpp): its products against a double-precision
// reference (every transpose pair, odd shapes, padded leading dimensions, strided batches, fp32/bf16/fp16
// inputs with same-type or fp32 outputs, TF32 rounding, beta, each epilogue and DGELU_BGRAD's bias gradient),
// its strict checks (alignment, ranges, aux rules, workspace, overlaps, reused algorithms), graph capture
// freezing the parameters; and our wrapper bsw::cuda::Gemm (src/backends/cuda/gemm.hpp) through it against a
// row-major reference. Device buffers come from the fake runtime's cudaMalloc, so range checks apply.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/ops.hpp"
#include "backends/cuda/gemm.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/plan.hpp"
#include "runtime.hpp"

namespace {

constexpr float kSentinel = 96.0f;  // exact in every type: marks elements nobody may write

std::size_t bytes_of(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

float quantize(float v, cudaDataType_t t) {
  if (t == CUDA_R_16BF) return bsw::cpu::bf16_to_float(bsw::cpu::float_to_bf16(v));
  if (t == CUDA_R_16F) return bsw::cpu::fp16_to_float(bsw::cpu::float_to_fp16(v));
  return v;
}

// Round to 10 mantissa bits, to nearest with ties away from zero (PTX cvt.rna.tf32.f32), by arithmetic.
double tf32(float v) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(v), &exponent);  // [0.5, 1)
  return std::ldexp(std::round(std::ldexp(mantissa, 11)), exponent - 11);
}

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double gelu_grad(double x) {
  const double k = 0.7978845608028654, c = 0.044715, t = std::tanh(k * (x + c * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
}

// Relative error an output of type t may carry from its final rounding.
double output_tolerance(cudaDataType_t t) {
  return t == CUDA_R_16BF ? 1.0 / 256 : t == CUDA_R_16F ? 1.0 / 1024 : 1e-6;
}

// A cudaMalloc'd buffer with an fp32 host mirror.
class Buffer {
 public:
  Buffer(cudaDataType_t type, std::size_t elements, float fill = kSentinel)
      : type_(type), host_(elements, fill) {
    EXPECT_EQ(cudaMalloc(&dev_, std::max<std::size_t>(bytes(), 1)), cudaSuccess);
  }
  ~Buffer() { static_cast<void>(cudaFree(dev_)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  [[nodiscard]] std::size_t bytes() const { return host_.size() * bytes_of(type_); }
  [[nodiscard]] void* dev() const { return dev_; }
  [[nodiscard]] cudaDataType_t type() const { return type_; }
  std::vector<float>& host() { return host_; }
  float& operator[](std::size_t i) { return host_[i]; }

  void upload() {
    std::vector<unsigned char> raw(bytes());
    for (std::size_t i = 0; i < host_.size(); ++i) {
      if (type_ == CUDA_R_32F) {
        std::memcpy(raw.data() + 4 * i, &host_[i], 4);
      } else {
        const uint16_t h =
            type_ == CUDA_R_16BF ? bsw::cpu::float_to_bf16(host_[i]) : bsw::cpu::float_to_fp16(host_[i]);
        std::memcpy(raw.data() + 2 * i, &h, 2);
      }
    }
    ASSERT_EQ(cudaMemcpy(dev_, raw.data(), raw.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download() {
    std::vector<unsigned char> raw(bytes());
    ASSERT_EQ(cudaMemcpy(raw.data(), dev_, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (std::size_t i = 0; i < host_.size(); ++i) {
      if (type_ == CUDA_R_32F) {
        std::memcpy(&host_[i], raw.data() + 4 * i, 4);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        host_[i] = type_ == CUDA_R_16BF ? bsw::cpu::bf16_to_float(h) : bsw::cpu::fp16_to_float(h);
      }
    }
  }
  // Random values in [-1, 1) that the type holds exactly.
  void randomize(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : host_) v = quantize(dist(rng), type_);
  }

 private:
  cudaDataType_t type_;
  std::vector<float> host_;
  void* dev_ = nullptr;
};

void expect_close(const std::string& what, float got, double want, double scale, cudaDataType_t t) {
  const double bound = output_tolerance(t) * std::fabs(want) + 2e-5 * scale + 1e-6;
  EXPECT_LE(std::fabs(static_cast<double>(got) - want), bound)
      << what << ": got " << got << ", want " << want << " (bound " << bound << ")";
}

// ---- the fake against a column-major reference -----------------------------------------------------------

struct Case {
  cudaDataType_t ab = CUDA_R_32F, cd = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 13, n = 7, k = 9;
  int64_t pad_a = 0, pad_b = 0, pad_d = 0;  // leading dimension = rows + pad
  int32_t batch = 1;
  int64_t gap = 0;  // elements between one batch's matrix and the next
  float alpha = 1, beta = 0;
  bool separate_c = false;  // C in its own buffer with ld = rows + pad_c (else C is D)
  int64_t pad_c = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t aux_ld = 0;
  uint32_t seed = 1;
};

std::string describe(const Case& c) {
  return fmt::format("ab {} cd {} compute {} trans {}{} m {} n {} k {} batch {} alpha {} beta {} epilogue {}",
                     static_cast<int>(c.ab), static_cast<int>(c.cd), static_cast<int>(c.compute),
                     c.ta == CUBLAS_OP_T ? 'T' : 'N', c.tb == CUBLAS_OP_T ? 'T' : 'N', c.m, c.n, c.k, c.batch,
                     c.alpha, c.beta, static_cast<int>(c.epilogue));
}

// One matrix's geometry in a batch.
struct Geometry {
  int64_t rows, cols, ld, stride;
  [[nodiscard]] std::size_t elements(int32_t batch) const {
    return static_cast<std::size_t>((batch - 1) * stride + (cols - 1) * ld + rows);
  }
  [[nodiscard]] std::size_t at(int64_t b, int64_t i, int64_t j) const {
    return static_cast<std::size_t>(b * stride + i + j * ld);
  }
};

Geometry geometry(int64_t rows, int64_t cols, int64_t pad, int64_t gap) {
  const int64_t ld = rows + pad;
  return {rows, cols, ld, (cols - 1) * ld + rows + gap};
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, const Geometry& g, int32_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  EXPECT_EQ(
      cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(g.rows), static_cast<uint64_t>(g.cols), g.ld),
      CUBLAS_STATUS_SUCCESS);
  if (batch > 1) {
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &g.stride,
                                               sizeof(g.stride)),
              CUBLAS_STATUS_SUCCESS);
  }
  return l;
}

// Descriptors destroyed at scope end.
// Elements no product covers (padding between leading dimensions, rows or columns past the matrix) must keep
// the value they had before the call.
void expect_unwritten_kept(const std::vector<float>& now, const std::vector<float>& before,
                           const std::vector<bool>& written, const char* what) {
  for (std::size_t i = 0; i < written.size(); ++i) {
    if (!written[i]) {
      EXPECT_EQ(now[i], before[i]) << what << " element " << i << " that no product covers was written";
    }
  }
}

struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
      EXPECT_EQ(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);  // null is fine, as in cuBLASLt
    EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), CUBLAS_STATUS_SUCCESS);
  }
};

class FakeCublasLt : public ::testing::Test {
 protected:
  static constexpr uint64_t kWorkspaceBytes = 1 << 20;

  void SetUp() override {
    ASSERT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspaceBytes), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaFree(workspace_), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    EXPECT_EQ(cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error nobody consumed: " << bsw::emu::error_log();
  }

  // The heuristic's status; *algo is set when it found one.
  cublasStatus_t heuristic(const Descriptors& ds, cublasLtMatmulAlgo_t* algo, int* found) {
    cublasLtMatmulHeuristicResult_t result{};
    *found = -1;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle_, ds.desc, ds.a, ds.b, ds.c, ds.d, ds.pref, 1, &result, found);
    if (s == CUBLAS_STATUS_SUCCESS && *found == 1) *algo = result.algo;
    return s;
  }
  // Packed fp32 D[m, n] = A[m, k] B[k, n] (C is D): descriptor, layouts, preference and the algorithm.
  void plain_fp32(Descriptors& ds, int64_t m, int64_t n, int64_t k, cublasLtMatmulAlgo_t* algo) {
    ASSERT_EQ(cublasLtMatmulDescCreate(&ds.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ds.a = make_layout(CUDA_R_32F, {m, k, m, 0}, 1);
    ds.b = make_layout(CUDA_R_32F, {k, n, k, 0}, 1);
    ds.c = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
    ds.d = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
    make_preference(ds);
    int found = 0;
    ASSERT_EQ(heuristic(ds, algo, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(found, 1);
  }
  // D = A B (alpha 1, beta 0, C is D) on stream_.
  cublasStatus_t matmul(const Descriptors& ds, const void* a, const void* b, void* d,
                        const cublasLtMatmulAlgo_t* algo, uint64_t workspace_bytes = kWorkspaceBytes) {
    const float alpha = 1, beta = 0;
    return cublasLtMatmul(handle_, ds.desc, &alpha, a, ds.a, b, ds.b, &beta, d, ds.c, d, ds.d, algo,
                          workspace_, workspace_bytes, stream_);
  }
  void make_preference(Descriptors& ds, uint64_t workspace = kWorkspaceBytes) {
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&ds.pref), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace, sizeof(workspace)),
              CUBLAS_STATUS_SUCCESS);
  }

  void check(const Case& c);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
};

void FakeCublasLt::check(const Case& c) {
  SCOPED_TRACE(describe(c));
  const bool ta = c.ta == CUBLAS_OP_T, tb = c.tb == CUBLAS_OP_T;
  const Geometry ga = geometry(ta ? c.k : c.m, ta ? c.m : c.k, c.pad_a, c.gap);
  const Geometry gb = geometry(tb ? c.n : c.k, tb ? c.k : c.n, c.pad_b, c.gap);
  const Geometry gd = geometry(c.m, c.n, c.pad_d, c.gap);
  const Geometry gc = c.separate_c ? geometry(c.m, c.n, c.pad_c, c.gap) : gd;
  const bool bias_in = c.epilogue == CUBLASLT_EPILOGUE_BIAS || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                       c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool bgrad = c.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  const bool aux_out = c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu_out = c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || aux_out;
  const Geometry gaux{c.m, c.n, c.aux_ld, 0};

  Buffer a(c.ab, ga.elements(c.batch)), b(c.ab, gb.elements(c.batch)), d(c.cd, gd.elements(c.batch));
  Buffer cbuf(c.cd, c.separate_c ? gc.elements(c.batch) : 1);
  Buffer bias(c.cd, static_cast<std::size_t>(c.m)), aux(c.cd, (bgrad || aux_out) ? gaux.elements(1) : 1);
  a.randomize(c.seed);
  b.randomize(c.seed + 1);
  Buffer& cref = c.separate_c ? cbuf : d;
  if (c.beta != 0.0f) cref.randomize(c.seed + 2);
  if (bias_in) bias.randomize(c.seed + 3);
  if (bgrad) {
    aux.randomize(c.seed + 4);
    for (float& v : aux.host()) v = quantize(3.0f * v, c.cd);  // GELU inputs over [-3, 3)
  }
  for (Buffer* buf : {&a, &b, &d, &cbuf, &bias, &aux}) buf->upload();
  const std::vector<float> d_before = d.host(), aux_before = aux.host();

  Descriptors ds;
  ASSERT_EQ(cublasLtMatmulDescCreate(&ds.desc, c.compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ds.set(CUBLASLT_MATMUL_DESC_TRANSA, c.ta);
  ds.set(CUBLASLT_MATMUL_DESC_TRANSB, c.tb);
  ds.set(CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
  if (bias_in || bgrad) ds.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.dev());
  if (bgrad || aux_out) {
    ds.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.dev());
    ds.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.aux_ld);
  }
  ds.a = make_layout(c.ab, ga, c.batch);
  ds.b = make_layout(c.ab, gb, c.batch);
  ds.c = make_layout(c.cd, gc, c.batch);
  ds.d = make_layout(c.cd, gd, c.batch);
  make_preference(ds);
  cublasLtMatmulAlgo_t algo{};
  int found = 0;
  ASSERT_EQ(heuristic(ds, &algo, &found), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  ASSERT_EQ(cublasLtMatmul(handle_, ds.desc, &c.alpha, a.dev(), ds.a, b.dev(), ds.b, &c.beta, cref.dev(),
                           ds.c, d.dev(), ds.d, &algo, workspace_, kWorkspaceBytes, stream_),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  d.download();
  bias.download();
  aux.download();

  const bool round_tf32 = c.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const auto input = [&](float v) { return round_tf32 ? tf32(v) : static_cast<double>(v); };
  std::vector<bool> written(d.host().size(), false), aux_written(aux.host().size(), false);
  for (int32_t batch = 0; batch < c.batch; ++batch) {
    std::vector<double> row_sum(static_cast<std::size_t>(c.m), 0.0),
        row_scale(static_cast<std::size_t>(c.m), 0.0);
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t i = 0; i < c.m; ++i) {
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const double x = input(a[ta ? ga.at(batch, q, i) : ga.at(batch, i, q)]);
          const double y = input(b[tb ? gb.at(batch, j, q) : gb.at(batch, q, j)]);
          sum += x * y;
          scale += std::fabs(x * y);
        }
        double v = c.alpha * sum;
        scale *= std::fabs(c.alpha);
        if (c.beta != 0.0f) {
          const double cv = c.separate_c ? cbuf[gc.at(batch, i, j)] : d_before[gd.at(batch, i, j)];
          v += c.beta * cv;
          scale += std::fabs(c.beta * cv);
        }
        if (bias_in) {
          v += bias[static_cast<std::size_t>(i)];
          scale += std::fabs(bias[static_cast<std::size_t>(i)]);
        }
        const std::string where = fmt::format("({}, {}, {})", batch, i, j);
        if (aux_out) {
          expect_close(fmt::format("aux {}", where), aux[gaux.at(0, i, j)], v, scale, c.cd);
          aux_written[gaux.at(0, i, j)] = true;
        }
        if (gelu_out) v = gelu(v);
        if (bgrad) {
          const double g = gelu_grad(aux[gaux.at(0, i, j)]);
          v *= g;
          scale *= std::fabs(g);
          row_sum[static_cast<std::size_t>(i)] += v;
          row_scale[static_cast<std::size_t>(i)] += scale;
        }
        expect_close(fmt::format("D {}", where), d[gd.at(batch, i, j)], v, scale, c.cd);
        written[gd.at(batch, i, j)] = true;
      }
    if (bgrad)
      for (int64_t i = 0; i < c.m; ++i)
        expect_close(fmt::format("bias gradient {}", i), bias[static_cast<std::size_t>(i)],
                     row_sum[static_cast<std::size_t>(i)], row_scale[static_cast<std::size_t>(i)], c.cd);
  }
  expect_unwritten_kept(d.host(), d_before, written, "D");
  if (aux_out) expect_unwritten_kept(aux.host(), aux_before, aux_written, "aux");
}

TEST_F(FakeCublasLt, EveryTransposePairOddShapesPaddedLeadingDimensions) {
  for (const cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (const cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      Case c;
      c.ta = ta;
      c.tb = tb;
      c.pad_a = 3;
      c.pad_b = 1;
      c.pad_d = 2;
      c.alpha = 0.75f;
      check(c);
      c.m = 1;
      c.n = 5;
      c.k = 1;
      check(c);
    }
}

TEST_F(FakeCublasLt, StridedBatchesWithGaps) {
  Case c;
  c.batch = 3;
  c.gap = 5;
  c.ta = CUBLAS_OP_T;
  c.pad_d = 1;
  check(c);
  c.ab = c.cd = CUDA_R_16BF;
  c.tb = CUBLAS_OP_T;
  c.beta = 0.5f;
  check(c);
}

TEST_F(FakeCublasLt, SixteenBitInputsWithSameTypeOrFp32Outputs) {
  const std::pair<cudaDataType_t, cudaDataType_t> types[] = {{CUDA_R_16BF, CUDA_R_16BF},
                                                             {CUDA_R_16BF, CUDA_R_32F},
                                                             {CUDA_R_16F, CUDA_R_16F},
                                                             {CUDA_R_16F, CUDA_R_32F}};
  for (const auto& [ab, cd] : types) {
    Case c;
    c.ab = ab;
    c.cd = cd;
    c.m = 16;
    c.n = 11;
    c.k = 33;
    c.tb = CUBLAS_OP_T;
    c.pad_a = 8;
    check(c);
  }
}

TEST_F(FakeCublasLt, BetaAccumulatesInPlaceOrFromAnotherC) {
  Case c;
  c.beta = 1.0f;
  check(c);  // C is D
  c.beta = -0.5f;
  c.alpha = 2.0f;
  c.separate_c = true;
  c.pad_c = 4;
  c.pad_d = 1;
  c.ab = c.cd = CUDA_R_16BF;
  check(c);
}

TEST_F(FakeCublasLt, BetaZeroNeverReadsC) {
  // cudaMalloc'd memory holds NaN: with beta 0 none of it may reach D.
  const int64_t m = 4, n = 3, k = 2;
  Buffer a(CUDA_R_32F, m * k), b(CUDA_R_32F, k * n);
  a.randomize(7);
  b.randomize(8);
  a.upload();
  b.upload();
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, m * n * 4), cudaSuccess);
  Descriptors ds;
  cublasLtMatmulAlgo_t algo{};
  ASSERT_NO_FATAL_FAILURE(plain_fp32(ds, m, n, k, &algo));
  ASSERT_EQ(matmul(ds, a.dev(), b.dev(), d, &algo), CUBLAS_STATUS_SUCCESS);
  std::vector<float> out(m * n);
  ASSERT_EQ(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const float v : out) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(FakeCublasLt, FastTf32RoundsFp32InputsToTenMantissaBits) {
  // a = 1 + 2^-11 + 2^-12 lies 0.75 of a TF32 ulp above 1: rounding gives 1 + 2^-10 (truncation would give
  // 1); b = 1 - 2^-12 rounds to 1. In fp32 compute the product is exact.
  const float av = 1.0f + 0x1p-11f + 0x1p-12f, bv = 1.0f - 0x1p-12f;
  Buffer a(CUDA_R_32F, 1, av), b(CUDA_R_32F, 1, bv), d(CUDA_R_32F, 1, 0.0f);
  a.upload();
  b.upload();
  for (const cublasComputeType_t compute : {CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F}) {
    Descriptors ds;
    ASSERT_EQ(cublasLtMatmulDescCreate(&ds.desc, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    for (cublasLtMatrixLayout_t* l : {&ds.a, &ds.b, &ds.c, &ds.d})
      *l = make_layout(CUDA_R_32F, {1, 1, 1, 0}, 1);
    make_preference(ds);
    cublasLtMatmulAlgo_t algo{};
    int found = 0;
    ASSERT_EQ(heuristic(ds, &algo, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(matmul(ds, a.dev(), b.dev(), d.dev(), &algo), CUBLAS_STATUS_SUCCESS);
    d.download();
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
      EXPECT_EQ(d[0], 1.0f + 0x1p-10f);
    else
      EXPECT_EQ(d[0], av * bv);
  }
  // And against the reference over a whole product.
  Case c;
  c.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  c.ta = CUBLAS_OP_T;
  c.k = 40;
  check(c);
}

TEST_F(FakeCublasLt, SixteenBitOutputsRoundToNearestEven) {
  // D = A [2 x 2] times a column of ones, each row's fp32 sum a tie between two 16-bit neighbours: row 0
  // lies between an odd and an even neighbour (rounds up), row 1 between 1 (even) and its successor (down).
  for (const cudaDataType_t t : {CUDA_R_16BF, CUDA_R_16F}) {
    const float ulp = t == CUDA_R_16BF ? 0x1p-7f : 0x1p-10f;
    Buffer a(t, 4), b(t, 2, 1.0f), d(t, 2, 0.0f);
    a[0] = 1.0f + ulp;  // column-major: A(0, 0), A(1, 0), A(0, 1), A(1, 1)
    a[1] = 1.0f;
    a[2] = a[3] = ulp / 2;
    for (Buffer* buf : {&a, &b, &d}) buf->upload();
    Descriptors ds;
    ASSERT_EQ(cublasLtMatmulDescCreate(&ds.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ds.a = make_layout(t, {2, 2, 2, 0}, 1);
    ds.b = make_layout(t, {2, 1, 2, 0}, 1);
    ds.c = make_layout(t, {2, 1, 2, 0}, 1);
    ds.d = make_layout(t, {2, 1, 2, 0}, 1);
    make_preference(ds);
    cublasLtMatmulAlgo_t algo{};
    int found = 0;
    ASSERT_EQ(heuristic(ds, &algo, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(matmul(ds, a.dev(), b.dev(), d.dev(), &algo), CUBLAS_STATUS_SUCCESS);
    d.download();
    EXPECT_EQ(d[0], 1.0f + 2 * ulp) << "type " << t;
    EXPECT_EQ(d[1], 1.0f) << "type " << t;
  }
}

TEST_F(FakeCublasLt, BiasEpilogueBroadcastsOverColumns) {
  Case c;
  c.epilogue = CUBLASLT_EPILOGUE_BIAS;
  c.beta = 0.5f;
  check(c);
  c.ab = c.cd = CUDA_R_16F;
  c.batch = 2;  // one bias for every batch (BIAS_BATCH_STRIDE 0)
  c.tb = CUBLAS_OP_T;
  check(c);
}

TEST_F(FakeCublasLt, GeluBiasAndGeluAuxBias) {
  for (const cudaDataType_t t : {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F}) {
    Case c;
    c.ab = c.cd = t;
    c.m = 16;
    c.k = 12;
    c.alpha = 2.0f;  // spread the GELU inputs over [-3, 3] or so
    c.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    check(c);
    c.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    c.aux_ld = 24;  // past D's 16 rows: the padding must stay untouched
    check(c);
    c.m = 13;
    c.aux_ld = 16;
    check(c);
  }
}

TEST_F(FakeCublasLt, DgeluBgradWritesTheGeluGradientAndEachRowsSum) {
  for (const cudaDataType_t t : {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F}) {
    Case c;
    c.ab = c.cd = t;
    c.m = 24;
    c.n = 10;
    c.k = 6;
    c.alpha = 1.5f;
    c.tb = CUBLAS_OP_T;
    c.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    c.aux_ld = 32;
    check(c);
  }
}

TEST_F(FakeCublasLt, GraphCaptureFreezesTheParametersOfTheCall) {
  // Captured with alpha 2 and bias b1; before the replay the descriptor points at b2 and alpha is 5. The
  // replay must use 2 and b1, as cuBLASLt does.
  const int64_t m = 8, n = 2, k = 1;
  Buffer a(CUDA_R_32F, m * k, 1.0f), b(CUDA_R_32F, k * n, 1.0f), d(CUDA_R_32F, m * n, 0.0f);
  Buffer b1(CUDA_R_32F, m, 10.0f), b2(CUDA_R_32F, m, 20.0f);
  for (Buffer* buf : {&a, &b, &d, &b1, &b2}) buf->upload();
  Descriptors ds;
  ASSERT_EQ(cublasLtMatmulDescCreate(&ds.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ds.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  ds.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, b1.dev());
  ds.a = make_layout(CUDA_R_32F, {m, k, m, 0}, 1);
  ds.b = make_layout(CUDA_R_32F, {k, n, k, 0}, 1);
  ds.c = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
  ds.d = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
  make_preference(ds);
  cublasLtMatmulAlgo_t algo{};
  int found = 0;
  ASSERT_EQ(heuristic(ds, &algo, &found), CUBLAS_STATUS_SUCCESS);
  float alpha = 2, beta = 0;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cublasLtMatmul(handle_, ds.desc, &alpha, a.dev(), ds.a, b.dev(), ds.b, &beta, d.dev(), ds.c,
                           d.dev(), ds.d, &algo, workspace_, kWorkspaceBytes, stream_),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  d.download();
  EXPECT_EQ(d[0], 0.0f) << "a captured matmul ran before its graph was launched";
  alpha = 5;
  ds.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, b2.dev());
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  d.download();
  for (const float v : d.host()) EXPECT_EQ(v, 12.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(FakeCublasLt, AGraphReplayedAfterItsBufferWasFreedFails) {
  const int64_t m = 8, n = 2, k = 1;
  Buffer a(CUDA_R_32F, m * k, 1.0f), b(CUDA_R_32F, k * n, 1.0f);
  a.upload();
  b.upload();
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, m * n * 4), cudaSuccess);
  Descriptors ds;
  cublasLtMatmulAlgo_t algo{};
  ASSERT_NO_FATAL_FAILURE(plain_fp32(ds, m, n, k, &algo));
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(matmul(ds, a.dev(), b.dev(), d, &algo), CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("no longer inside"),
            std::string::npos);
  // An illegal address poisons the context, as on a GPU, until the device is reset.
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorIllegalAddress);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

// ---- strict checks
// -----------------------------------------------------------------------------------------

// A small fp32 problem whose buffers and descriptors the strict tests bend one at a time.
class FakeCublasLtStrict : public FakeCublasLt {
 protected:
  static constexpr int64_t m = 16, n = 8, k = 4;

  void SetUp() override {
    FakeCublasLt::SetUp();
    // One element more than needed, so a pointer shifted by one stays inside its allocation.
    a_ = std::make_unique<Buffer>(CUDA_R_32F, m * k + 1, 1.0f);
    b_ = std::make_unique<Buffer>(CUDA_R_32F, k * n + 1, 1.0f);
    d_ = std::make_unique<Buffer>(CUDA_R_32F, m * n + 1, 0.0f);
    bias_ = std::make_unique<Buffer>(CUDA_R_32F, m + 1, 0.0f);
    aux_ = std::make_unique<Buffer>(CUDA_R_32F, 32 * n, 0.0f);
    for (Buffer* buf : {a_.get(), b_.get(), d_.get(), bias_.get(), aux_.get()}) buf->upload();
    ASSERT_EQ(cublasLtMatmulDescCreate(&ds_.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ds_.a = make_layout(CUDA_R_32F, {m, k, m, 0}, 1);
    ds_.b = make_layout(CUDA_R_32F, {k, n, k, 0}, 1);
    ds_.c = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
    ds_.d = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
    make_preference(ds_);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    d_.reset();
    bias_.reset();
    aux_.reset();
    FakeCublasLt::TearDown();
  }

  cublasStatus_t matmul(const void* a, const void* b, void* d, const cublasLtMatmulAlgo_t* algo,
                        uint64_t workspace_bytes = kWorkspaceBytes) {
    return FakeCublasLt::matmul(ds_, a, b, d, algo, workspace_bytes);
  }
  cublasStatus_t matmul(const cublasLtMatmulAlgo_t* algo) {
    return matmul(a_->dev(), b_->dev(), d_->dev(), algo);
  }
  cublasLtMatmulAlgo_t algo() {
    cublasLtMatmulAlgo_t out{};
    int found = 0;
    EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(found, 1);
    return out;
  }
  // The launch error a refused matmul left: its code, and a message containing `words`.
  static void expect_launch_error(cudaError_t code, const std::string& words) {
    const cudaError_t e = cudaGetLastError();
    EXPECT_EQ(e, code);
    const std::string message = cudaGetErrorString(e);
    EXPECT_NE(message.find(words), std::string::npos) << message;
  }

  Descriptors ds_;
  std::unique_ptr<Buffer> a_, b_, d_, bias_, aux_;
};

TEST_F(FakeCublasLtStrict, TheUnbentProblemRuns) {
  const cublasLtMatmulAlgo_t chosen = algo();
  ASSERT_EQ(matmul(&chosen), CUBLAS_STATUS_SUCCESS);
  d_->download();
  EXPECT_EQ((*d_)[0], static_cast<float>(k));
  // Without an algorithm cuBLASLt chooses one itself.
  ASSERT_EQ(matmul(nullptr), CUBLAS_STATUS_SUCCESS);
}

TEST_F(FakeCublasLtStrict, TheBiasPointerKeepsTheAlignmentTheHeuristicSaw) {
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_->dev());  // 256-byte aligned: taken as 16
  const cublasLtMatmulAlgo_t aligned = algo();
  const void* shifted = static_cast<const float*>(bias_->dev()) + 1;
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, shifted);
  EXPECT_EQ(matmul(&aligned), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "bias at");
  const cublasLtMatmulAlgo_t for_shifted = algo();  // the heuristic sees the 4-byte aligned pointer
  EXPECT_EQ(matmul(&for_shifted), CUBLAS_STATUS_SUCCESS);
}

TEST_F(FakeCublasLtStrict, APointerLessAlignedThanPromisedIsRefused) {
  const cublasLtMatmulAlgo_t chosen = algo();  // default promise: 256 bytes
  const auto* shifted = static_cast<const float*>(a_->dev()) + 1;
  EXPECT_EQ(matmul(shifted, b_->dev(), d_->dev(), &chosen), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "A at");
  // Promised 4 bytes, the same pointer is fine.
  const uint32_t four = 4;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(ds_.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four,
                                                 sizeof(four)),
            CUBLAS_STATUS_SUCCESS);
  const cublasLtMatmulAlgo_t relaxed = algo();
  EXPECT_EQ(matmul(shifted, b_->dev(), d_->dev(), &relaxed), CUBLAS_STATUS_SUCCESS);
  // A promise below the element size finds no algorithm.
  const uint32_t two = 2;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(ds_.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &two,
                                                 sizeof(two)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t none{};
  int found = -1;
  EXPECT_EQ(heuristic(ds_, &none, &found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
}

TEST_F(FakeCublasLtStrict, AnOperandPastItsAllocationIsRefused) {
  const cublasLtMatmulAlgo_t chosen = algo();
  Buffer short_b(CUDA_R_32F, k * n - 1, 1.0f);
  short_b.upload();
  EXPECT_EQ(matmul(a_->dev(), short_b.dev(), d_->dev(), &chosen), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "B at");
  std::vector<float> host(m * k);
  EXPECT_EQ(matmul(host.data(), b_->dev(), d_->dev(), &chosen), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "not inside one live device allocation");
  // A bias vector one element short.
  Buffer short_bias(CUDA_R_32F, m - 1, 0.0f);
  short_bias.upload();
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, short_bias.dev());
  const cublasLtMatmulAlgo_t with_bias = algo();
  EXPECT_EQ(matmul(&with_bias), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "bias at");
}

TEST_F(FakeCublasLtStrict, GeluAuxLeadingDimensionRules) {
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_->dev());
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_->dev());
  cublasLtMatmulAlgo_t out{};
  int found = -1;
  for (const int64_t bad : {int64_t{20}, int64_t{8}, int64_t{0}}) {  // not a multiple of 8; below 16 rows
    ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, bad);
    EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_INVALID_VALUE) << "aux ld " << bad;
    EXPECT_EQ(found, 0);
  }
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16});
  const cublasLtMatmulAlgo_t good = algo();
  EXPECT_EQ(matmul(&good), CUBLAS_STATUS_SUCCESS);
  // An aux type that is not D's.
  const int32_t f16 = CUDA_R_16F;
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, f16);
  EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(FakeCublasLtStrict, EpiloguesWithoutTheirBuffersAreRefusedByTheMatmul) {
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  const cublasLtMatmulAlgo_t bias = algo();  // the heuristic answers without the pointer, as cuBLASLt does
  EXPECT_EQ(matmul(&bias), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "BIAS_POINTER");
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU_BGRAD);
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_->dev());
  const cublasLtMatmulAlgo_t dgelu = algo();
  EXPECT_EQ(matmul(&dgelu), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "AUX_POINTER");
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  const cublasLtMatmulAlgo_t gelu_aux = algo();
  EXPECT_EQ(matmul(&gelu_aux), CUBLAS_STATUS_NOT_SUPPORTED);
  expect_launch_error(cudaErrorNotSupported, "AUX_POINTER");
}

TEST_F(FakeCublasLtStrict, AWorkspaceSmallerThanTheAlgorithmsIsRefused) {
  const cublasLtMatmulAlgo_t chosen = algo();
  EXPECT_EQ(matmul(a_->dev(), b_->dev(), d_->dev(), &chosen, kWorkspaceBytes / 2),
            CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "workspace");
  // Claiming more workspace than the allocation holds.
  EXPECT_EQ(matmul(a_->dev(), b_->dev(), d_->dev(), &chosen, kWorkspaceBytes + 256),
            CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "workspace");
}

TEST_F(FakeCublasLtStrict, AnAlgorithmChosenForAnotherProblemIsRefused) {
  const cublasLtMatmulAlgo_t chosen = algo();
  const cublasOperation_t t = CUBLAS_OP_T;
  ds_.set(CUBLASLT_MATMUL_DESC_TRANSB, t);  // B [4 x 8] now reads as op(B) [8 x 4]: the shapes no longer fit
  EXPECT_EQ(matmul(&chosen), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "op(A)");
  const cublasOperation_t n_op = CUBLAS_OP_N;
  ds_.set(CUBLASLT_MATMUL_DESC_TRANSB, n_op);
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  ds_.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_->dev());
  EXPECT_EQ(matmul(&chosen), CUBLAS_STATUS_INVALID_VALUE);  // chosen without the epilogue
  expect_launch_error(cudaErrorInvalidValue, "another problem");
  cublasLtMatmulAlgo_t forged{};
  EXPECT_EQ(matmul(&forged), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "did not come from");
}

TEST_F(FakeCublasLtStrict, OutputsMayNotOverlapInputsOrThemselves) {
  const cublasLtMatmulAlgo_t chosen = algo();
  Buffer big(CUDA_R_32F, 4 * m * n, 1.0f);
  big.upload();
  // D over A's elements.
  EXPECT_EQ(matmul(big.dev(), b_->dev(), big.dev(), &chosen), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "overlaps");
  // Batches of D written 0 elements apart.
  const int32_t two = 2;
  const int64_t zero = 0, a_stride = m * k, b_stride = k * n;
  for (cublasLtMatrixLayout_t l : {ds_.a, ds_.b, ds_.c, ds_.d})
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof(two)),
              CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &a_stride,
                                             sizeof(a_stride)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &b_stride,
                                             sizeof(b_stride)),
            CUBLAS_STATUS_SUCCESS);
  for (cublasLtMatrixLayout_t l : {ds_.c, ds_.d})
    ASSERT_EQ(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &zero, sizeof(zero)),
        CUBLAS_STATUS_SUCCESS);
  Buffer a2(CUDA_R_32F, 2 * m * k, 1.0f), b2(CUDA_R_32F, 2 * k * n, 1.0f);
  a2.upload();
  b2.upload();
  const cublasLtMatmulAlgo_t batched = algo();
  EXPECT_EQ(matmul(a2.dev(), b2.dev(), d_->dev(), &batched), CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "overlap");
}

TEST_F(FakeCublasLtStrict, InconsistentProblemsGetNoAlgorithm) {
  cublasLtMatmulAlgo_t out{};
  int found = -1;
  // Shapes: A [16 x 4] with D [16 x 8] needs B [4 x 8]; a B with 5 rows does not fit.
  Descriptors wrong;
  ASSERT_EQ(cublasLtMatmulDescCreate(&wrong.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  wrong.a = make_layout(CUDA_R_32F, {m, k, m, 0}, 1);
  wrong.b = make_layout(CUDA_R_32F, {k + 1, n, k + 1, 0}, 1);
  wrong.c = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
  wrong.d = make_layout(CUDA_R_32F, {m, n, m, 0}, 1);
  make_preference(wrong);
  EXPECT_EQ(heuristic(wrong, &out, &found), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(found, 0);
  // A leading dimension below the rows.
  const int64_t small_ld = m - 1;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_LD, &small_ld, sizeof(small_ld)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_INVALID_VALUE);
  const int64_t ld = m;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld)),
            CUBLAS_STATUS_SUCCESS);
  // Batch counts that differ.
  const int32_t two = 2;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof(two)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_INVALID_VALUE);
  const int32_t one = 1;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one, sizeof(one)),
            CUBLAS_STATUS_SUCCESS);
  // Type combinations: A f16 with B bf16; bf16 in with f16 out; TF32 with bf16 inputs.
  const auto types = [&](cudaDataType_t a, cudaDataType_t b, cudaDataType_t cd, cublasComputeType_t compute) {
    Descriptors t;
    EXPECT_EQ(cublasLtMatmulDescCreate(&t.desc, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    t.a = make_layout(a, {m, k, m, 0}, 1);
    t.b = make_layout(b, {k, n, k, 0}, 1);
    t.c = make_layout(cd, {m, n, m, 0}, 1);
    t.d = make_layout(cd, {m, n, m, 0}, 1);
    make_preference(t);
    cublasLtMatmulAlgo_t algo_out{};
    int count = -1;
    const cublasStatus_t s = heuristic(t, &algo_out, &count);
    EXPECT_EQ(count, s == CUBLAS_STATUS_SUCCESS ? 1 : 0);
    return s;
  };
  EXPECT_EQ(types(CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(types(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(types(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_TF32),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(types(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(types(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
  // An epilogue the fake does not emulate.
  ds_.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU);
  EXPECT_EQ(heuristic(ds_, &out, &found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
}

TEST_F(FakeCublasLtStrict, AttributeSettersCheckSizesAndNames) {
  const int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(ds_.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t bogus = 7;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(ds_.desc, CUBLASLT_MATMUL_DESC_TRANSA, &bogus, sizeof(bogus)),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t ld32 = 16;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(ds_.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld32, sizeof(ld32)),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t workspace32 = 1024;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(ds_.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace32, sizeof(workspace32)),
            CUBLAS_STATUS_INVALID_VALUE);
  const float waves = 1.0f;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(ds_.pref, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &waves,
                                                 sizeof(waves)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                ds_.pref, static_cast<cublasLtMatmulPreferenceAttributes_t>(99), &waves, sizeof(waves)),
            CUBLAS_STATUS_INVALID_VALUE);
  // A destroyed descriptor is no longer accepted.
  cublasLtMatmulDesc_t gone = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&gone, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescDestroy(gone), CUBLAS_STATUS_SUCCESS);
  const cublasLtMatmulAlgo_t chosen = algo();
  const float alpha = 1, beta = 0;
  EXPECT_EQ(cublasLtMatmul(handle_, gone, &alpha, a_->dev(), ds_.a, b_->dev(), ds_.b, &beta, d_->dev(), ds_.c,
                           d_->dev(), ds_.d, &chosen, workspace_, kWorkspaceBytes, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  expect_launch_error(cudaErrorInvalidValue, "not a live matmul descriptor");
  EXPECT_EQ(cublasLtGetVersion(), static_cast<size_t>(CUBLAS_VERSION));
}

// ---- bsw::cuda::Gemm through the fake, against a row-major reference
// ---------------------------------------

cudaDataType_t cuda_type(bsw::DType t) {
  return t == bsw::DType::bf16 ? CUDA_R_16BF : t == bsw::DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

struct RowMajor {
  bsw::DType ab = bsw::DType::f32, c = bsw::DType::f32;
  bool trans_a = false, trans_b = false;
  int64_t m = 5, n = 6, k = 7;
  int64_t pad = 0;  // added to every leading dimension
  int64_t batch = 1, gap = 0;
  float alpha = 1, beta = 0;
  bsw::cuda::Epilogue epilogue = bsw::cuda::Epilogue::none;
  int64_t ld_aux = 0;
  uint32_t seed = 11;
};

class FakeCublasLtGemm : public ::testing::Test {
 protected:
  static constexpr uint64_t kWorkspaceBytes = 1 << 20;

  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspaceBytes), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cudaFree(workspace_), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error nobody consumed: " << bsw::emu::error_log();
  }

  // Runs the GemmArgs r describes through gemm, on fresh buffers, and checks every output.
  void check(bsw::cuda::Gemm& gemm, const RowMajor& r);

  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
};

void FakeCublasLtGemm::check(bsw::cuda::Gemm& gemm, const RowMajor& r) {
  using bsw::cuda::Epilogue;
  SCOPED_TRACE(fmt::format("row-major trans {}{} m {} n {} k {} batch {} epilogue {}", r.trans_a ? 'T' : 'N',
                           r.trans_b ? 'T' : 'N', r.m, r.n, r.k, r.batch, static_cast<int>(r.epilogue)));
  const cudaDataType_t ab = cuda_type(r.ab), ct = cuda_type(r.c);
  // Row-major A is [trans_a ? k : m] rows of lda, B [trans_b ? n : k] rows of ldb, C [m] rows of ldc.
  const int64_t lda = (r.trans_a ? r.m : r.k) + r.pad, ldb = (r.trans_b ? r.k : r.n) + r.pad,
                ldc = r.n + r.pad;
  const int64_t rows_a = r.trans_a ? r.k : r.m, rows_b = r.trans_b ? r.n : r.k;
  const int64_t sa = rows_a * lda + r.gap, sb = rows_b * ldb + r.gap, sc = r.m * ldc + r.gap;
  const bool bias_in = r.epilogue == Epilogue::bias || r.epilogue == Epilogue::gelu_bias ||
                       r.epilogue == Epilogue::gelu_aux_bias;
  const bool bgrad = r.epilogue == Epilogue::dgelu_bgrad, aux_out = r.epilogue == Epilogue::gelu_aux_bias;
  Buffer a(ab, static_cast<std::size_t>((r.batch - 1) * sa + rows_a * lda));
  Buffer b(ab, static_cast<std::size_t>((r.batch - 1) * sb + rows_b * ldb));
  Buffer c(ct, static_cast<std::size_t>((r.batch - 1) * sc + r.m * ldc));
  Buffer bias(ct, static_cast<std::size_t>(r.n));
  Buffer aux(ct, (bgrad || aux_out) ? static_cast<std::size_t>(r.m * r.ld_aux) : 1);
  a.randomize(r.seed);
  b.randomize(r.seed + 1);
  if (r.beta != 0.0f) c.randomize(r.seed + 2);
  if (bias_in) bias.randomize(r.seed + 3);
  if (bgrad) {
    aux.randomize(r.seed + 4);
    for (float& v : aux.host()) v = quantize(3.0f * v, ct);
  }
  for (Buffer* buf : {&a, &b, &c, &bias, &aux}) buf->upload();
  const std::vector<float> c_before = c.host(), aux_before = aux.host();

  bsw::cuda::GemmArgs g;
  g.trans_a = r.trans_a;
  g.trans_b = r.trans_b;
  g.m = r.m;
  g.n = r.n;
  g.k = r.k;
  g.a = a.dev();
  g.lda = lda;
  g.b = b.dev();
  g.ldb = ldb;
  g.c = c.dev();
  g.ldc = ldc;
  g.ab_type = r.ab;
  g.c_type = r.c;
  g.alpha = r.alpha;
  g.beta = r.beta;
  g.batch = r.batch;
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = sc;
  g.epilogue = r.epilogue;
  if (bias_in || bgrad) g.bias = bias.dev();
  if (bgrad || aux_out) {
    g.aux = aux.dev();
    g.ld_aux = r.ld_aux;
  }
  ASSERT_NO_THROW(gemm.run(g, stream_));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  c.download();
  bias.download();
  aux.download();

  std::vector<bool> written(c.host().size(), false), aux_written(aux.host().size(), false);
  for (int64_t batch = 0; batch < r.batch; ++batch) {
    std::vector<double> col_sum(static_cast<std::size_t>(r.n), 0.0),
        col_scale(static_cast<std::size_t>(r.n), 0.0);
    for (int64_t i = 0; i < r.m; ++i)
      for (int64_t j = 0; j < r.n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < r.k; ++q) {
          const double x = a[static_cast<std::size_t>(batch * sa + (r.trans_a ? q * lda + i : i * lda + q))];
          const double y = b[static_cast<std::size_t>(batch * sb + (r.trans_b ? j * ldb + q : q * ldb + j))];
          sum += x * y;
          scale += std::fabs(x * y);
        }
        const auto at = static_cast<std::size_t>(batch * sc + i * ldc + j);
        double v = r.alpha * sum;
        scale *= std::fabs(r.alpha);
        if (r.beta != 0.0f) {
          v += r.beta * c_before[at];
          scale += std::fabs(r.beta * c_before[at]);
        }
        if (bias_in) {
          v += bias[static_cast<std::size_t>(j)];
          scale += std::fabs(bias[static_cast<std::size_t>(j)]);
        }
        const std::string where = fmt::format("({}, {}, {})", batch, i, j);
        const auto aux_at = static_cast<std::size_t>(i * r.ld_aux + j);
        if (aux_out) {
          expect_close(fmt::format("aux {}", where), aux[aux_at], v, scale, ct);
          aux_written[aux_at] = true;
        }
        if (r.epilogue == Epilogue::gelu_bias || aux_out) v = gelu(v);
        if (bgrad) {
          const double gr = gelu_grad(aux[aux_at]);
          v *= gr;
          scale *= std::fabs(gr);
          col_sum[static_cast<std::size_t>(j)] += v;
          col_scale[static_cast<std::size_t>(j)] += scale;
        }
        expect_close(fmt::format("C {}", where), c[at], v, scale, ct);
        written[at] = true;
      }
    if (bgrad)
      for (int64_t j = 0; j < r.n; ++j)
        expect_close(fmt::format("bias gradient {}", j), bias[static_cast<std::size_t>(j)],
                     col_sum[static_cast<std::size_t>(j)], col_scale[static_cast<std::size_t>(j)], ct);
  }
  expect_unwritten_kept(c.host(), c_before, written, "C");
  if (aux_out) expect_unwritten_kept(aux.host(), aux_before, aux_written, "aux");
}

TEST_F(FakeCublasLtGemm, EveryTransposePairWithPaddingAlphaAndBeta) {
  bsw::cuda::Gemm gemm(bsw::Precision::fp32, workspace_, kWorkspaceBytes);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      RowMajor r;
      r.trans_a = ta;
      r.trans_b = tb;
      r.pad = 3;
      r.alpha = 0.5f;
      r.beta = 0.25f;
      check(gemm, r);
      r.m = 9;
      r.n = 1;
      r.k = 2;
      r.beta = 0;
      check(gemm, r);
    }
  EXPECT_EQ(gemm.cached_shapes(), 8u);
}

TEST_F(FakeCublasLtGemm, StridedBatchesLikeTheAttentionGemms) {
  bsw::cuda::Gemm gemm(bsw::Precision::bf16, workspace_, kWorkspaceBytes);
  RowMajor r;  // scores = scale q k^T in fp32 from bf16 q, k
  r.ab = bsw::DType::bf16;
  r.c = bsw::DType::f32;
  r.trans_b = true;
  r.m = r.n = 7;
  r.k = 4;
  r.batch = 3;
  r.alpha = 0.5f;
  check(gemm, r);
  r.c = bsw::DType::bf16;  // o = P v, with gaps between the batches
  r.trans_b = false;
  r.n = 4;
  r.k = 7;
  r.gap = 8;
  r.alpha = 1;
  check(gemm, r);
  r.trans_a = true;  // dv = P^T dO
  check(gemm, r);
}

// Past cuBLASLt's 65535 batches (the grid's y/z limit) a product runs in slices, each checked; available()
// asks for every slice run() will run, the shorter last one included.
TEST_F(FakeCublasLtGemm, BatchesPastTheGridLimitRunInSlicesAndAreAllAsked) {
  constexpr int64_t kBatch = bsw::cuda::Gemm::kMaxBatchCount + 7;
  {
    bsw::cuda::Gemm gemm(bsw::Precision::fp32, workspace_, kWorkspaceBytes);
    RowMajor r;
    r.m = 2;
    r.n = 3;
    r.k = 4;
    r.batch = kBatch;
    check(gemm, r);
    EXPECT_EQ(gemm.cached_shapes(), 2u);  // 65535 products, then 7
  }
  bsw::cuda::Gemm gemm(bsw::Precision::fp32, workspace_, kWorkspaceBytes);
  Buffer a(CUDA_R_32F, static_cast<std::size_t>(kBatch * 8)),
      b(CUDA_R_32F, static_cast<std::size_t>(kBatch * 12)),
      c(CUDA_R_32F, static_cast<std::size_t>(kBatch * 6));
  bsw::cuda::GemmArgs g;
  g.m = 2;
  g.n = 3;
  g.k = 4;
  g.a = a.dev();
  g.lda = 4;
  g.b = b.dev();
  g.ldb = 3;
  g.c = c.dev();
  g.ldc = 3;
  g.batch = kBatch;
  g.stride_a = 8;
  g.stride_b = 12;
  g.stride_c = 6;
  EXPECT_TRUE(gemm.available(g));
  EXPECT_EQ(gemm.cached_shapes(), 2u);
  // Where only the short last slice has no algorithm, the product is not available (run() would throw).
  ASSERT_EQ(setenv("BSW_EMU_CUBLASLT_REFUSE_BATCH", "7", 1), 0);
  struct Unset {  // whatever happens below, later tests see the real heuristic
    ~Unset() { unsetenv("BSW_EMU_CUBLASLT_REFUSE_BATCH"); }
  } unset;
  bsw::cuda::Gemm refusing(bsw::Precision::fp32, workspace_, kWorkspaceBytes);
  EXPECT_FALSE(refusing.available(g));
  EXPECT_THROW(refusing.run(g, stream_), bsw::BackendError);
}

TEST_F(FakeCublasLtGemm, Tf32PrecisionRunsInFastTf32) {
  // 1 + 2^-11 + 2^-12 times 1 gives 1 + 2^-10 when the inputs are rounded to TF32, itself in fp32.
  Buffer a(CUDA_R_32F, 1, 1.0f + 0x1p-11f + 0x1p-12f), b(CUDA_R_32F, 1, 1.0f), c(CUDA_R_32F, 1, 0.0f);
  for (Buffer* buf : {&a, &b, &c}) buf->upload();
  bsw::cuda::GemmArgs g;
  g.m = g.n = g.k = 1;
  g.a = a.dev();
  g.lda = 1;
  g.b = b.dev();
  g.ldb = 1;
  g.c = c.dev();
  g.ldc = 1;
  for (const bsw::Precision p : {bsw::Precision::tf32, bsw::Precision::fp32}) {
    bsw::cuda::Gemm gemm(p, workspace_, kWorkspaceBytes);
    ASSERT_NO_THROW(gemm.run(g, stream_));
    c.download();
    EXPECT_EQ(c[0], p == bsw::Precision::tf32 ? 1.0f + 0x1p-10f : 1.0f + 0x1p-11f + 0x1p-12f);
  }
}

TEST_F(FakeCublasLtGemm, BiasAndGeluEpilogues) {
  using bsw::cuda::Epilogue;
  for (const bsw::DType t : {bsw::DType::f32, bsw::DType::bf16, bsw::DType::f16}) {
    bsw::cuda::Gemm gemm(t == bsw::DType::f32 ? bsw::Precision::fp32 : bsw::Precision::bf16, workspace_,
                         kWorkspaceBytes);
    RowMajor r;  // linear: y[M, N] = x[M, K] W[N, K]^T + b
    r.ab = r.c = t;
    r.trans_b = true;
    r.m = 6;
    r.n = 16;
    r.k = 12;
    r.alpha = 1.5f;
    r.epilogue = Epilogue::bias;
    check(gemm, r);
    r.epilogue = Epilogue::gelu_bias;
    check(gemm, r);
    r.epilogue = Epilogue::gelu_aux_bias;
    r.ld_aux = 16;
    check(gemm, r);
    r.ld_aux = 24;  // aux rows longer than N: the tail stays untouched
    check(gemm, r);
  }
}

TEST_F(FakeCublasLtGemm, DgeluBgradWritesColumnSums) {
  using bsw::cuda::Epilogue;
  for (const bsw::DType t : {bsw::DType::bf16, bsw::DType::f16, bsw::DType::f32}) {
    bsw::cuda::Gemm gemm(bsw::Precision::bf16, workspace_, kWorkspaceBytes);
    RowMajor r;  // dx[M, K] = dz[M, N] W[N, K], times gelu'(z_prev), bias gradient [K]
    r.ab = r.c = t;
    r.m = 10;
    r.n = 8;
    r.k = 5;
    r.epilogue = Epilogue::dgelu_bgrad;
    r.ld_aux = 8;
    check(gemm, r);
    r.trans_a = true;
    r.ld_aux = 16;
    check(gemm, r);
  }
}

TEST_F(FakeCublasLtGemm, ACachedShapeTakesEachCallsPointers) {
  using bsw::cuda::Epilogue;
  bsw::cuda::Gemm gemm(bsw::Precision::bf16, workspace_, kWorkspaceBytes);
  RowMajor r;
  r.ab = r.c = bsw::DType::bf16;
  r.trans_b = true;
  r.m = 4;
  r.n = 8;
  r.k = 3;
  r.epilogue = Epilogue::gelu_aux_bias;
  r.ld_aux = 8;
  check(gemm, r);
  r.seed = 99;  // the same shape with new buffers (cudaMalloc: the same 256-byte alignment)
  check(gemm, r);
  EXPECT_EQ(gemm.cached_shapes(), 1u);
}

TEST_F(FakeCublasLtGemm, ImpossibleArgumentsThrow) {
  bsw::cuda::Gemm gemm(bsw::Precision::fp32, workspace_, kWorkspaceBytes);
  Buffer a(CUDA_R_32F, 64), b(CUDA_R_32F, 64), c(CUDA_R_32F, 64);
  bsw::cuda::GemmArgs g;
  g.m = g.n = g.k = 4;
  g.a = a.dev();
  g.lda = 4;
  g.b = b.dev();
  g.ldb = 4;
  g.c = c.dev();
  g.ldc = 3;  // below N
  EXPECT_THROW(gemm.run(g, stream_), bsw::BackendError);
  g.ldc = 4;
  g.epilogue = bsw::cuda::Epilogue::gelu_aux_bias;
  g.bias = a.dev();
  g.aux = b.dev();
  g.ld_aux = 4;  // not a multiple of 8
  EXPECT_THROW(gemm.run(g, stream_), bsw::BackendError);
}

}  // namespace
