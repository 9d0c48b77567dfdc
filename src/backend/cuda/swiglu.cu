// SwiGLU (Shazeer 2020) on rows stacked [gate | up] (N, 2F): out = silu(gate) * up, silu(x) =
// x sigmoid(x). Backward: dgate = dout up silu'(gate), silu'(x) = s (1 + x (1 - s)) with
// s = sigmoid(x); dup = dout silu(gate). One thread per (row, f), grid-stride; inputs f32 or
// 16-bit (widened on load), outputs rounded once at the store (as gelu in elementwise.cu).
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename TO, typename TI>
__global__ void swiglu_forward_kernel(TO* out, const TI* inp, int64_t N, int64_t F) {
  MG_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float g = to_f32(inp[n * 2 * F + f]), u = to_f32(inp[n * 2 * F + F + f]);
    out[i] = from_f32<TO>(g * sigmoid(g) * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(float* dinp, const T* inp, const float* dout, int64_t N,
                                       int64_t F, bool set) {
  MG_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const int64_t ig = n * 2 * F + f, iu = ig + F;
    const float g = to_f32(inp[ig]), u = to_f32(inp[iu]), dy = dout[i];
    const float s = sigmoid(g);
    const float dg = dy * u * s * (1.0f + g * (1.0f - s)), du = dy * g * s;
    dinp[ig] = set ? dg : dinp[ig] + dg;
    dinp[iu] = set ? du : dinp[iu] + du;
  }
}

}  // namespace

void swiglu_forward(MatOut out, Mat inp, int64_t N, int64_t F) {
  if (N * F == 0) return;
  with_storage(out.dtype, [&]<typename TO>() {
    with_storage(inp.dtype, [&]<typename TI>() {
      swiglu_forward_kernel<TO, TI><<<blocks_for(N * F), kThreads, 0, compute_stream()>>>(
          static_cast<TO*>(out.data), static_cast<const TI*>(inp.data), N, F);
    });
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(float* dinp, Mat inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write) {
  if (N * F == 0) return;
  with_storage(inp.dtype, [&]<typename T>() {
    swiglu_backward_kernel<T><<<blocks_for(N * F), kThreads, 0, compute_stream()>>>(
        dinp, static_cast<const T*>(inp.data), dout, N, F, write == GradWrite::Set);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
