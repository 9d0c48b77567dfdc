#include "tensor_parallel/parallel_linear.h"

#include "backend/dispatch.h"
#include "core/error.h"

namespace mg::tp {

using ops::GradWrite;

namespace {
int64_t local_rows(const TPGroup& g, int64_t rows) {
  return g.sequence_parallel ? rows / g.size() : rows;
}
}  // namespace

void column_parallel_forward(const TPGroup& g, cpu::MatOut y, const void* x_local, void* x_full,
                             cpu::Mat weight, const float* bias, const LinearShape& s) {
  const void* x = x_local;
  if (g.sequence_parallel) {
    gather_from_sp_region_forward(g, x_local, x_full, local_rows(g, s.rows) * s.in, weight.dtype);
    x = x_full;
  }  // else copy_to_region: identity
  ops::linear_forward(y, {x, weight.dtype}, weight, bias, s.rows, s.in, s.out);
}

void column_parallel_backward(const TPGroup& g, float* dx_local, float* dx_full, float* dweight,
                              float* dbias, const float* dy, cpu::Mat x_used, cpu::Mat weight,
                              const LinearShape& s) {
  if (g.size() == 1 && !g.sequence_parallel)  // nothing to reduce: the GEMM writes dx_local
    return ops::linear_backward(dx_local, dweight, dbias, dy, x_used, weight, s.rows, s.in, s.out,
                                GradWrite::Set);
  ops::linear_backward(dx_full, dweight, dbias, dy, x_used, weight, s.rows, s.in, s.out,
                       GradWrite::Set);
  if (g.sequence_parallel) {
    gather_from_sp_region_backward(g, dx_full, dx_local, local_rows(g, s.rows) * s.in);
  } else {
    copy_to_region_backward(g, dx_full, s.rows * s.in);
    if (dx_local != dx_full)
      ops::copy(dx_local, ops::device(), dx_full, ops::device(), s.rows * s.in * sizeof(float));
  }
}

void row_parallel_forward(const TPGroup& g, float* y_local, float* partial, cpu::Mat x,
                          cpu::Mat weight, const float* bias, const float* residual,
                          const LinearShape& s, const DropoutRows* dropout) {
  const int64_t R = local_rows(g, s.rows);
  MG_CHECK(residual, "row_parallel_forward needs the residual stream it adds into");
  if (!dropout && g.size() == 1 && !g.sequence_parallel)  // nothing to reduce
    return ops::linear_residual_forward(y_local, x, weight, bias, residual, s.rows, s.in, s.out);
  ops::linear_forward(partial, x, weight, nullptr, s.rows, s.in, s.out);
  reduce_bias_dropout_add(g, y_local, partial, bias, residual, s.rows, s.out, dropout);
}

void reduce_bias_dropout_add(const TPGroup& g, float* y_local, float* partial, const float* bias,
                             const float* residual, int64_t rows, int64_t width,
                             const DropoutRows* dropout) {
  const int64_t R = local_rows(g, rows);
  // The reduced output (+ bias) lands in `out`; then the residual add, through the mask.
  float* out = y_local;
  if (g.sequence_parallel) {
    reduce_scatter_to_sp_forward(g, partial, y_local, R * width);
  } else {
    if (g.size() > 1) reduce_from_region_forward(g, partial, rows * width);
    if (dropout) out = partial;
    else ops::copy(y_local, ops::device(), partial, ops::device(), rows * width * sizeof(float));
  }
  if (bias) ops::bias_add_forward(out, bias, R, width);
  if (dropout) return ops::dropout_forward(y_local, out, residual, R, width, *dropout);
  ops::residual_forward(y_local, residual, y_local, R * width);
}

void row_parallel_backward(const TPGroup& g, float* dx, float* dweight, float* dbias,
                           const float* dy_local, float* dy_full, cpu::Mat x, cpu::Mat weight,
                           const LinearShape& s) {
  const int64_t R = local_rows(g, s.rows);
  if (!g.sequence_parallel)  // dy is dy_local: its bias grad rides in the linear backward
    return ops::linear_backward(dx, dweight, dbias, dy_local, x, weight, s.rows, s.in, s.out,
                                GradWrite::Set);
  if (dbias) ops::bias_backward(dbias, dy_local, R, s.out);
  reduce_scatter_to_sp_backward(g, dy_local, dy_full, R * s.out);
  ops::linear_backward(dx, dweight, nullptr, dy_full, x, weight, s.rows, s.in, s.out,
                       GradWrite::Set);
}

}  // namespace mg::tp
