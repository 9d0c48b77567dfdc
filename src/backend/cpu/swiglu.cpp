// SwiGLU (Shazeer 2020), the Llama MLP's activation on fc1's stacked output [gate | up]:
// y = silu(gate) * up, silu(x) = x s(x), s = sigmoid. Backward: dup = dy silu(gate),
// dgate = dy up s (1 + gate (1 - s)). The sigmoid's exp runs vectorized (libmvec, vec_math.h).
#include <cmath>

#include "backend/cpu/staging.h"
#include "backend/cpu/vec_math.h"
#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }
#if defined(MG_SIMD)
inline vf vsigmoid(vf x) {
  const vf one = vset(1.0f);
  return vdiv(one, vadd(one, vexp(vsub(vset(0.0f), x))));
}
#endif
}  // namespace

void swiglu_forward(MatOut out16, Mat inp16, int64_t N, int64_t F) {
  timers::Scope timer(timers::kGeluResidual);
  const float* inp = f32_operand(inp16, N * 2 * F);  // (N, 2F)
  float* out = f32_result(out16, N * F);             // (N, F)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    float* y = out + n * F;
    int64_t f = 0;
#if defined(MG_SIMD)
    for (; f + kLanes <= F; f += kLanes) {
      const vf x = vload(gate + f);
      vstore(y + f, vmul(vmul(x, vsigmoid(x)), vload(up + f)));
    }
#endif
    for (; f < F; ++f) y[f] = gate[f] * sigmoid_scalar(gate[f]) * up[f];
  }
  store_result(out16, out, N * F);
}

void swiglu_backward(float* dinp, Mat inp16, const float* dout, int64_t N, int64_t F,
                     GradWrite write) {
  timers::Scope timer(timers::kGeluResidual);
  const float* inp = f32_operand(inp16, N * 2 * F);
  const bool set = write == GradWrite::Set;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + n * F;
    float* dgate = dinp + n * 2 * F;  // (N, 2F): [dgate | dup]
    float* dup = dgate + F;
    int64_t f = 0;
#if defined(MG_SIMD)
    const vf one = vset(1.0f);
    for (; f + kLanes <= F; f += kLanes) {
      const vf x = vload(gate + f), s = vsigmoid(x), d = vload(dy + f);
      vf dg = vmul(vmul(d, vload(up + f)), vmul(s, vfmadd(x, vsub(one, s), one)));
      vf du = vmul(d, vmul(x, s));
      if (!set) {
        dg = vadd(vload(dgate + f), dg);
        du = vadd(vload(dup + f), du);
      }
      vstore(dgate + f, dg);
      vstore(dup + f, du);
    }
#endif
    for (; f < F; ++f) {
      const float x = gate[f], s = sigmoid_scalar(x);
      const float dg = dy[f] * up[f] * (s * (1.0f + x * (1.0f - s)));
      const float du = dy[f] * (x * s);
      dgate[f] = set ? dg : dgate[f] + dg;
      dup[f] = set ? du : dup[f] + du;
    }
  }
}

}  // namespace mg::cpu
