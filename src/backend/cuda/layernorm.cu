// LayerNorm over the last dim C: y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), one
// warp per row (two passes over the row: mean, then the centred variance, as the CPU). Backward:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, one warp per row; dw and db are column
// sums over the rows in a second kernel (fixed order, no atomics).
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int64_t N, int64_t C,
                                         float eps) {
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / float(C);
  float v = 0.f;
  for (int64_t c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(warp_sum(v) / float(C) + eps);
  T* y = out + n * C;
  for (int64_t c = lane; c < C; c += 32) y[c] = from_f32<T>((x[c] - m) * r * w[c] + b[c]);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* w, const float* mean,
                                                const float* rstd, int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const float* dy = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = dy[c] * w[c];
    sg += g;
    sgx += g * (x[c] - m) * r;
  }
  const float mean_g = warp_sum(sg) / float(C), mean_gx = warp_sum(sgx) / float(C);
  float* dx = dinp + n * C;
  for (int64_t c = lane; c < C; c += 32)
    dx[c] += r * (dy[c] * w[c] - mean_g - (x[c] - m) * r * mean_gx);
}

// 32 columns per block, 8 row-strided partial sums per column, added in a fixed order.
__global__ void layernorm_backward_params_kernel(float* dw, float* db, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  __shared__ float pw[8][33], pb[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.f, sb = 0.f;
  if (c < C)
    for (int64_t n = threadIdx.y; n < N; n += 8) {
      const float dy = dout[n * C + c];
      sw += dy * (inp[n * C + c] - mean[n]) * rstd[n];
      sb += dy;
    }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.f, tb = 0.f;
    for (int r = 0; r < 8; ++r) {
      tw += pw[r][threadIdx.x];
      tb += pb[r][threadIdx.x];
    }
    dw[c] += tw;
    db[c] += tb;
  }
}

}  // namespace

void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_storage(out.dtype, [&]<typename T>() {
    layernorm_forward_kernel<T><<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
        static_cast<T*>(out.data), mean, rstd, inp, weight, bias, N, C, eps);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernorm_backward_input_kernel<<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  MG_CUDA_CHECK(cudaGetLastError());
  layernorm_backward_params_kernel<<<unsigned((C + 31) / 32), dim3(32, 8), 0,
                                     compute_stream()>>>(dweight, dbias, dout, inp, mean, rstd,
                                                         N, C);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
