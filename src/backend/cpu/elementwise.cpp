// Element-wise ops: GELU (tanh approximation, Hendrycks & Gimpel 2016, as GPT-2 uses) and the
// residual add.
#include <cmath>

#include "backend/ops.h"

namespace mg::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
}

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx, u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    const float t = std::tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace mg::cpu
