// RMSNorm (Zhang & Sennrich 2019) over the last dim: y = x * rstd * gamma, rstd =
// 1/sqrt(mean(x^2) + eps), gamma = w + offset (offset 1: zero-centred w); no mean subtraction and
// no bias. Backward, with xhat = x * rstd and g = dy * gamma:
// dx = rstd * (g - xhat * mean(g * xhat)), dw = sum over rows of dy * xhat.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/staging.h"
#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

void rmsnorm_forward(MatOut out16, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, float weight_offset) {
  timers::Scope timer(timers::kLayerNorm);
  float* out = f32_result(out16, N * C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float ms = 0.f;
    for (int64_t c = 0; c < C; ++c) ms += x[c] * x[c];
    ms /= float(C);
    const float r = 1.0f / std::sqrt(ms + eps);
    float* y = out + n * C;
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * r * (weight[c] + weight_offset);
    rstd[n] = r;
  }
  store_result(out16, out, N * C);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C,
                      float weight_offset) {
  timers::Scope timer(timers::kLayerNorm);
  // Each thread sums its rows' weight grads privately; the partials are added at the end in
  // thread order, so the result depends on the thread count only, not on scheduling.
  const int nthreads = omp_get_max_threads();
  std::vector<float> partial(size_t(nthreads) * C, 0.f);
#pragma omp parallel
  {
    float* dw = partial.data() + size_t(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float r = rstd[n];
      float mean_gx = 0.f;
      for (int64_t c = 0; c < C; ++c) mean_gx += dy[c] * (weight[c] + weight_offset) * (x[c] * r);
      mean_gx /= float(C);
      float* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = x[c] * r;
        dw[c] += dy[c] * xhat;
        dx[c] += r * (dy[c] * (weight[c] + weight_offset) - xhat * mean_gx);
      }
    }
  }
  for (int t = 0; t < nthreads; ++t) {
    const float* dw = partial.data() + size_t(t) * C;
    for (int64_t c = 0; c < C; ++c) dweight[c] += dw[c];
  }
}

}  // namespace mg::cpu
