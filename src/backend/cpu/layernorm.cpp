// LayerNorm (Ba et al. 2016) over the last dim: y = (x - mean) * rstd * gamma + b,
// rstd = 1/sqrt(var + eps), gamma = w + offset (offset 1: zero-centred w). Backward follows the
// standard closed form: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/staging.h"
#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

void layernorm_forward(MatOut out16, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                       float weight_offset) {
  timers::Scope timer(timers::kLayerNorm);
  float* out = f32_result(out16, N * C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float m = 0.f;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= float(C);
    float var = 0.f;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= float(C);
    const float r = 1.0f / std::sqrt(var + eps);
    float* y = out + n * C;
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * (weight[c] + weight_offset) + bias[c];
    mean[n] = m;
    rstd[n] = r;
  }
  store_result(out16, out, N * C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, float weight_offset) {
  timers::Scope timer(timers::kLayerNorm);
  // Each thread sums its rows' parameter grads privately; the partials are added at the end.
  const int nthreads = omp_get_max_threads();
  std::vector<float> partial(size_t(nthreads) * 2 * C, 0.f);
#pragma omp parallel
  {
    float* dw = partial.data() + size_t(omp_get_thread_num()) * 2 * C;
    float* db = dw + C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float m = mean[n], r = rstd[n];
      float mean_g = 0.f, mean_gx = 0.f;
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * r;
        const float g = dy[c] * (weight[c] + weight_offset);
        mean_g += g;
        mean_gx += g * xhat;
      }
      mean_g /= float(C);
      mean_gx /= float(C);
      float* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * r;
        dw[c] += dy[c] * xhat;
        db[c] += dy[c];
        dx[c] += r * (dy[c] * (weight[c] + weight_offset) - mean_g - xhat * mean_gx);
      }
    }
  }
  for (int t = 0; t < nthreads; ++t) {
    const float* dw = partial.data() + size_t(t) * 2 * C;
    for (int64_t c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += dw[C + c];
    }
  }
}

}  // namespace mg::cpu
