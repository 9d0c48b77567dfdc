// Element-wise ops: GELU (tanh approximation, Hendrycks & Gimpel 2016, as GPT-2 uses) and the
// residual add.
#include <algorithm>
#include <cmath>

#include "backend/cpu/staging.h"
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
constexpr int64_t kBlock = 1024;  // elements per parallel work item (a multiple of kLanes)
}  // namespace

void gelu_forward(MatOut out16, Mat inp16, int64_t n) {
  timers::Scope timer(timers::kGeluResidual);
  const float* inp = f32_operand(inp16, n);
  float* out = f32_result(out16, n);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int64_t i = b;
#if defined(MG_SIMD)
    const vf c = vset(kSqrt2OverPi), k = vset(0.044715f), half = vset(0.5f), one = vset(1.0f);
    for (; i + kLanes <= e; i += kLanes) {
      const vf x = vload(inp + i);
      const vf x3 = vmul(vmul(x, x), x);
      const vf t = vtanh(vmul(c, vfmadd(k, x3, x)));
      vstore(out + i, vmul(vmul(half, x), vadd(one, t)));
    }
#endif
    for (; i < e; ++i) out[i] = gelu_scalar(inp[i]);
  }
  store_result(out16, out, n);
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx, u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_backward(float* dinp, Mat inp16, const float* dout, int64_t n, GradWrite write) {
  timers::Scope timer(timers::kGeluResidual);
  if (write == GradWrite::Set) std::fill(dinp, dinp + n, 0.f);
  const float* inp = f32_operand(inp16, n);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    int64_t i = b;
#if defined(MG_SIMD)
    const vf c = vset(kSqrt2OverPi), k = vset(0.044715f), k3 = vset(3.0f * 0.044715f),
             half = vset(0.5f), one = vset(1.0f);
    for (; i + kLanes <= e; i += kLanes) {
      const vf x = vload(inp + i);
      const vf x2 = vmul(x, x);
      const vf t = vtanh(vmul(c, vfmadd(vmul(k, x2), x, x)));
      const vf du = vmul(c, vfmadd(k3, x2, one));
      // 0.5 (1 + t) + 0.5 x (1 - t^2) du
      const vf sech2 = vfnmadd(t, t, one);
      const vf g = vmul(half, vfmadd(vmul(x, sech2), du, vadd(one, t)));
      vstore(dinp + i, vfmadd(vload(dout + i), g, vload(dinp + i)));
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
