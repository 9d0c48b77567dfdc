// Hidden dropout on the CPU: out = residual + x * f (or x * f), dx = dout * f, with f the
// element's mask factor (core/dropout_mask.h), drawn again wherever it is needed: each row's
// factors are drawn into a per-thread buffer (one Philox draw per four hidden units).
#include <vector>

#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {
float* row_buffer(int64_t C) {
  thread_local std::vector<float> f;
  if (f.size() < size_t(C)) f.resize(size_t(C));
  return f.data();
}
}  // namespace

void dropout_forward(float* out, const float* x, const float* residual, int64_t R, int64_t C,
                     const DropoutRows& d) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    float* f = row_buffer(C);
    d.row(f, r, C);
    const int64_t o = r * C;
    if (residual)
      for (int64_t c = 0; c < C; ++c) out[o + c] = residual[o + c] + x[o + c] * f[c];
    else
      for (int64_t c = 0; c < C; ++c) out[o + c] = x[o + c] * f[c];
  }
}

void dropout_backward(float* dx, const float* dout, int64_t R, int64_t C, const DropoutRows& d,
                      GradWrite write) {
  timers::Scope timer(timers::kGeluResidual);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    float* f = row_buffer(C);
    d.row(f, r, C);
    const int64_t o = r * C;
    if (write == GradWrite::Set)
      for (int64_t c = 0; c < C; ++c) dx[o + c] = dout[o + c] * f[c];
    else
      for (int64_t c = 0; c < C; ++c) dx[o + c] += dout[o + c] * f[c];
  }
}

}  // namespace mg::cpu
