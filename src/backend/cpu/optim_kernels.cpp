// Flat-buffer optimizer kernels: AdamW (Loshchilov & Hutter 2019, torch.optim.AdamW's exact
// formula), sum of squares for the global grad norm, and in-place scaling for clipping.
#include <cmath>

#include "backend/ops.h"

namespace mg::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t, float clip) {
  const float bc1 = 1.0f - std::pow(beta1, float(t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(beta2, float(t)));
  const float step = lr / bc1;
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * clip;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * clip + weight_decay * param[i];
    const float b = t == 1 ? g : momentum * buf[i] + g;
    buf[i] = b;
    param[i] -= lr * b;
  }
}

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum) {
  if (mask_sum <= 0) return;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(losses[i]) * mask[i];
  *acc += sum / mask_sum;
}

double sum_squares_ranges(const float* x, const Range* ranges, int64_t k) {
  double s = 0.0;
  for (int64_t i = 0; i < k; ++i) s += sum_squares(x + ranges[i].offset, ranges[i].n);
  return s;
}

void scale_inplace(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace mg::cpu
