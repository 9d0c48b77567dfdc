// Element-wise ops: GELU (tanh approximation, Hendrycks & Gimpel 2016, as GPT-2 uses) and the
// residual add.
#include <algorithm>
#include <cmath>

#include "backend/cpu/vec_math.h"
#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
}

namespace {
inline float gelu_scalar(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
inline float gelu_grad_scalar(float x) {
  const float t = std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
constexpr int64_t kBlock = 1024;  // elements per parallel work item (a multiple of 16)
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int64_t i = b;
#if defined(__AVX512F__)
    const __m512 c = _mm512_set1_ps(kSqrt2OverPi), k = _mm512_set1_ps(0.044715f),
                 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= e; i += 16) {
      const __m512 x = _mm512_loadu_ps(inp + i);
      const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
      const __m512 t = tanh16(_mm512_mul_ps(c, _mm512_fmadd_ps(k, x3, x)));
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, t)));
    }
#endif
    for (; i < e; ++i) out[i] = gelu_scalar(inp[i]);
  }
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx, u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int64_t i = b;
#if defined(__AVX512F__)
    const __m512 c = _mm512_set1_ps(kSqrt2OverPi), k = _mm512_set1_ps(0.044715f),
                 k3 = _mm512_set1_ps(3.0f * 0.044715f), half = _mm512_set1_ps(0.5f),
                 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= e; i += 16) {
      const __m512 x = _mm512_loadu_ps(inp + i);
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 t = tanh16(_mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(k, x2), x, x)));
      const __m512 du = _mm512_mul_ps(c, _mm512_fmadd_ps(k3, x2, one));
      // 0.5 (1 + t) + 0.5 x (1 - t^2) du
      const __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
      const __m512 g = _mm512_mul_ps(
          half, _mm512_fmadd_ps(_mm512_mul_ps(x, sech2), du, _mm512_add_ps(one, t)));
      _mm512_storeu_ps(dinp + i,
                       _mm512_fmadd_ps(_mm512_loadu_ps(dout + i), g, _mm512_loadu_ps(dinp + i)));
    }
#endif
    for (; i < e; ++i) dinp[i] += dout[i] * gelu_grad_scalar(inp[i]);
  }
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace mg::cpu
