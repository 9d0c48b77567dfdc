// Hidden dropout on the GPU: out = residual + x * f (or x * f), dx (+)= dout * f, one thread per
// element, f drawn from the mask core/dropout_mask.h defines (the CPU's very bits).
#include "backend/cuda/check.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/ops.h"

namespace mg::cuda {

namespace {

__global__ void dropout_forward_kernel(float* out, const float* x, const float* residual,
                                       int64_t R, int64_t C, DropoutRows d) {
  MG_GRID_STRIDE(i, R * C) {
    const float y = x[i] * d.factor(i / C, i % C);
    out[i] = residual ? residual[i] + y : y;
  }
}

__global__ void dropout_backward_kernel(float* dx, const float* dout, int64_t R, int64_t C,
                                        DropoutRows d, bool set) {
  MG_GRID_STRIDE(i, R * C) {
    const float g = dout[i] * d.factor(i / C, i % C);
    dx[i] = set ? g : dx[i] + g;
  }
}

}  // namespace

void dropout_forward(float* out, const float* x, const float* residual, int64_t R, int64_t C,
                     const DropoutRows& d) {
  if (R * C == 0) return;
  dropout_forward_kernel<<<blocks_for(R * C), kThreads, 0, compute_stream()>>>(out, x, residual,
                                                                              R, C, d);
  MG_CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(float* dx, const float* dout, int64_t R, int64_t C, const DropoutRows& d,
                      GradWrite write) {
  if (R * C == 0) return;
  dropout_backward_kernel<<<blocks_for(R * C), kThreads, 0, compute_stream()>>>(
      dx, dout, R, C, d, write == GradWrite::Set);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
