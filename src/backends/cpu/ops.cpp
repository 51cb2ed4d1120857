// The CPU reference math, part 1: activations, linear (OpenBLAS sgemm), elementwise ops, losses, optimizers,
// 16-bit conversions and the deterministic initialisers. Contracts are in ops.hpp.
#include "backends/cpu/ops.hpp"

#include <cblas.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "batchsweep/errors.hpp"

namespace bsw::cpu {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

[[nodiscard]] inline float gelu(float z) {
  const float t = std::tanh(kGeluC * (z + kGeluA * z * z * z));
  return 0.5f * z * (1.0f + t);
}

[[nodiscard]] inline float gelu_grad(float z) {
  const float z2 = z * z;
  const float t = std::tanh(kGeluC * (z + kGeluA * z2 * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * z2);
}

[[nodiscard]] inline float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

// splitmix64's output function (Steele, Lea & Flood 2014), without the state increment.
[[nodiscard]] constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

[[nodiscard]] constexpr uint64_t fill_key(uint64_t seed, uint64_t stream) {
  return splitmix64_mix(seed ^ splitmix64_mix(stream + kGolden));
}

[[nodiscard]] constexpr uint64_t fill_bits(uint64_t key, uint64_t index) {
  return splitmix64_mix(key + (index + 1) * kGolden);
}

}  // namespace

// ---- elementwise activations
// -----------------------------------------------------------------------------------

void activation_forward(Activation act, const float* z, float* y, int64_t n) {
  switch (act) {
    case Activation::none:
      if (y != z) std::copy(z, z + n, y);
      return;
    case Activation::relu:
      for (int64_t i = 0; i < n; ++i) y[i] = z[i] > 0.0f ? z[i] : 0.0f;
      return;
    case Activation::gelu:
      for (int64_t i = 0; i < n; ++i) y[i] = gelu(z[i]);
      return;
    case Activation::silu:
      for (int64_t i = 0; i < n; ++i) y[i] = z[i] * sigmoid(z[i]);
      return;
    case Activation::tanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(z[i]);
      return;
  }
}

void activation_backward(Activation act, const float* z, const float* y, const float* dy, float* dz,
                         int64_t n) {
  switch (act) {
    case Activation::none:
      if (dz != dy) std::copy(dy, dy + n, dz);
      return;
    case Activation::relu:
      for (int64_t i = 0; i < n; ++i) dz[i] = z[i] > 0.0f ? dy[i] : 0.0f;
      return;
    case Activation::gelu:
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * gelu_grad(z[i]);
      return;
    case Activation::silu:
      for (int64_t i = 0; i < n; ++i) {
        const float s = sigmoid(z[i]);
        dz[i] = dy[i] * s * (1.0f + z[i] * (1.0f - s));
      }
      return;
    case Activation::tanh:
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
      return;
  }
}

// ---- linear
// ------------------------------------------------------------------------------------------------------

void linear_forward(const float* x, const float* w, const float* b, float* z, float* y, int64_t m, int64_t k,
                    int64_t n, Activation act) {
  float* out = (act != Activation::none && z != nullptr) ? z : y;
  float beta = 0.0f;
  if (b != nullptr) {
    for (int64_t r = 0; r < m; ++r) std::copy(b, b + n, out + r * n);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w, static_cast<blasint>(k), beta,
              out, static_cast<blasint>(n));
  if (act != Activation::none) activation_forward(act, out, y, m * n);
}

void linear_backward(const float* x, const float* w, const float* z, const float* y, const float* dy,
                     float* scratch_dz, float* dx, float* dw, float* db, int64_t m, int64_t k, int64_t n,
                     Activation act) {
  const float* g = dy;
  if (act != Activation::none) {
    activation_backward(act, z, y, dy, scratch_dz, m * n);
    g = scratch_dz;
  }
  // dw[N,K] += g^T[N,M] x[M,K]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
              static_cast<blasint>(m), 1.0f, g, static_cast<blasint>(n), x, static_cast<blasint>(k), 1.0f, dw,
              static_cast<blasint>(k));
  if (db != nullptr) {
    for (int64_t r = 0; r < m; ++r) {
      const float* row = g + r * n;
      for (int64_t c = 0; c < n; ++c) db[c] += row[c];
    }
  }
  // dx[M,K] = g[M,N] w[N,K]
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(k),
                static_cast<blasint>(n), 1.0f, g, static_cast<blasint>(n), w, static_cast<blasint>(k), 0.0f,
                dx, static_cast<blasint>(k));
  }
}

// ---- elementwise
// -------------------------------------------------------------------------------------------------

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---- losses
// ------------------------------------------------------------------------------------------------------

double cross_entropy(const float* logits, const int32_t* labels, float* dlogits, int64_t rows,
                     int64_t classes, float grad_scale) {
  double total = 0.0;
  const double dscale = static_cast<double>(grad_scale) / static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * classes;
    const int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      throw BackendError("cross_entropy: label " + std::to_string(label) + " of row " + std::to_string(r) +
                         " is outside [0, " + std::to_string(classes) + ")");
    }
    const float max_logit = *std::max_element(row, row + classes);
    double sum_exp = 0.0;
    if (dlogits == nullptr) {
      for (int64_t c = 0; c < classes; ++c) sum_exp += std::exp(row[c] - max_logit);
    } else {
      // exp once per logit: keep it in dlogits, then normalise in place.
      float* drow = dlogits + r * classes;
      for (int64_t c = 0; c < classes; ++c) {
        drow[c] = std::exp(row[c] - max_logit);
        sum_exp += drow[c];
      }
      const float p_scale = static_cast<float>(dscale / sum_exp);
      for (int64_t c = 0; c < classes; ++c) drow[c] *= p_scale;
      drow[label] -= static_cast<float>(dscale);
    }
    const double log_sum_exp = static_cast<double>(max_logit) + std::log(sum_exp);
    total += log_sum_exp - static_cast<double>(row[label]);
  }
  return total / static_cast<double>(rows);
}

double mse(const float* y, const float* target, float* dy, int64_t n, float grad_scale) {
  double total = 0.0;
  const float dscale = static_cast<float>(2.0 * static_cast<double>(grad_scale) / static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float diff = y[i] - target[i];
    total += static_cast<double>(diff) * static_cast<double>(diff);
    if (dy != nullptr) dy[i] = diff * dscale;
  }
  return total / static_cast<double>(n);
}

// ---- optimizers
// --------------------------------------------------------------------------------------------------

void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int64_t t) {
  const double t_d = static_cast<double>(t);
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t_d));
  const float bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t_d)));
  const float step_size = lr / bias_correction1;
  const float decay = 1.0f - lr * weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    w[i] = w[i] * decay - step_size * (mi / denom);
  }
}

void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdSettings& s, int64_t t) {
  const bool momentum = s.momentum != 0.0f && buf != nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (s.weight_decay != 0.0f) d += s.weight_decay * w[i];
    if (momentum) {
      const float b = t <= 1 ? d : s.momentum * buf[i] + d;
      buf[i] = b;
      d = s.nesterov ? d + s.momentum * b : b;
    } else if (buf != nullptr) {
      buf[i] = d;
    }
    w[i] -= s.lr * d;
  }
}

// ---- 16-bit storage
// ----------------------------------------------------------------------------------------------

uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep sign and payload top, force quiet
  }
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t float_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) {  // NaN: quiet, keep the top of the payload
    return static_cast<uint16_t>(sign | 0x7E00u | ((mag >> 13) & 0x03FFu));
  }
  if (mag >= 0x477FF000u) {  // >= 65520 (half-way past 65504) rounds to Inf; also Inf itself
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (mag >= 0x38800000u) {  // normal half (>= 2^-14): rebias the exponent by -112, round to nearest even
    const uint32_t odd = (mag >> 13) & 1u;
    const uint32_t rounded = mag - 0x38000000u + 0x0FFFu + odd;
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half (or zero): count units of 2^-24, rounding to nearest even.
  const uint32_t exponent = mag >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
  const uint32_t mantissa = (mag & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - exponent;  // value / 2^-24 = mantissa / 2^shift, 14 <= shift <= 24
  uint32_t units = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (remainder > half || (remainder == half && (units & 1u) != 0)) ++units;
  return static_cast<uint16_t>(sign | units);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x03FFu;
  if (exponent == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // zero or subnormal: mantissa * 2^-24, exact in fp32
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

void to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
void from_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
void to_fp16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}
void from_fp16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}

// ---- checks and init
// ---------------------------------------------------------------------------------------------

bool all_finite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t non_finite = 0;
    for (int64_t i = start; i < end; ++i) {
      non_finite |= static_cast<uint32_t>((std::bit_cast<uint32_t>(x[i]) & 0x7F800000u) == 0x7F800000u);
    }
    if (non_finite != 0) return false;
  }
  return true;
}

void scale(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void fill_uniform(float* x, int64_t n, float bound, uint64_t seed, uint64_t stream) {
  const uint64_t key = fill_key(seed, stream);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t top24 = fill_bits(key, static_cast<uint64_t>(i)) >> 40;
    const float unit = static_cast<float>(static_cast<uint32_t>(top24)) * 0x1p-23f - 1.0f;  // exact, [-1, 1)
    x[i] = unit * bound;
  }
}

void fill_labels(int32_t* x, int64_t n, int32_t classes, uint64_t seed, uint64_t stream) {
  if (classes < 1) {
    throw BackendError("fill_labels: classes must be at least 1, got " + std::to_string(classes));
  }
  const uint64_t key = fill_key(seed, stream);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t top32 = fill_bits(key, static_cast<uint64_t>(i)) >> 32;
    x[i] = static_cast<int32_t>((top32 * static_cast<uint64_t>(classes)) >> 32);
  }
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr uint64_t kFlushBits = 0x8040;  // MXCSR FTZ (bit 15) and DAZ (bit 6)
uint64_t float_mode() {
  return _mm_getcsr();
}
void set_float_mode(uint64_t mode) {
  _mm_setcsr(static_cast<unsigned>(mode));
}
#elif defined(__aarch64__)
constexpr uint64_t kFlushBits = uint64_t{1} << 24;  // FPCR FZ
uint64_t float_mode() {
  uint64_t fpcr = 0;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
void set_float_mode(uint64_t mode) {
  __asm__ __volatile__("msr fpcr, %0" : : "r"(mode));
}
#else
constexpr uint64_t kFlushBits = 0;  // no control here: subnormals stay
uint64_t float_mode() {
  return 0;
}
void set_float_mode(uint64_t) {}
#endif

}  // namespace

FlushDenormals::FlushDenormals() : saved_(float_mode()) {
  set_float_mode(saved_ | kFlushBits);
}

FlushDenormals::~FlushDenormals() {
  set_float_mode(saved_);
}

bool denormals_flushed() {
  return kFlushBits != 0 && (float_mode() & kFlushBits) == kFlushBits;
}

namespace {
// The bits of element `index` of a data stream: splitmix64 (its increment, then its output function) applied
// three times, over the index, the stream and the seed.
uint64_t data_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto splitmix64 = [](uint64_t x) { return splitmix64_mix(x + kGolden); };
  return splitmix64(seed ^ splitmix64(stream ^ splitmix64(index)));
}
}  // namespace

float data_value(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(static_cast<double>(data_bits(seed, stream, index) >> 11) * 0x1.0p-53 * 2.0 -
                            1.0);
}

int32_t data_label(uint64_t seed, uint64_t stream, uint64_t index, int64_t classes) {
  return static_cast<int32_t>(data_bits(seed, stream, index) % static_cast<uint64_t>(classes));
}

}  // namespace bsw::cpu
