// Hidden dropout on the CPU: out = residual + x * f (or x * f), dx = dout * f, with f the
// element's mask factor (core/dropout_mask.h), drawn again wherever it is needed: each row's
// factors are drawn into a per-thread buffer (one Philox draw per four hidden units).
#include <vector>

#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {
// body(o, f) for each row r: o = r * C, f = its C factors (a per-thread buffer).
template <typename Body>
void for_each_row(int64_t R, int64_t C, const DropoutRows& d, Body&& body) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    thread_local std::vector<float> f;
    if (f.size() < size_t(C)) f.resize(size_t(C));
    d.row(f.data(), r, C);
    body(r * C, f.data());
  }
}
}  // namespace

void dropout_forward(float* out, const float* x, const float* residual, int64_t R, int64_t C,
                     const DropoutRows& d) {
  timers::Scope timer(timers::kGeluResidual);
  for_each_row(R, C, d, [&](int64_t o, const float* f) {
    for (int64_t c = 0; c < C; ++c)
      out[o + c] = (residual ? residual[o + c] : 0.f) + x[o + c] * f[c];
  });
}

void dropout_backward(float* dx, const float* dout, int64_t R, int64_t C, const DropoutRows& d,
                      GradWrite write) {
  timers::Scope timer(timers::kGeluResidual);
  const bool set = write == GradWrite::Set;
  for_each_row(R, C, d, [&](int64_t o, const float* f) {
    for (int64_t c = 0; c < C; ++c) dx[o + c] = (set ? 0.f : dx[o + c]) + dout[o + c] * f[c];
  });
}

}  // namespace mg::cpu
