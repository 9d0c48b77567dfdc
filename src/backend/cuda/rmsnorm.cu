// RMSNorm over the last dim C (Zhang & Sennrich 2019): y = x rstd gamma, rstd = 1/sqrt(mean(x^2)
// + eps), gamma = w + offset (1 for zero-centred w), one warp per row. Backward: dx = rstd (g -
// xhat mean(g xhat)), g = dy gamma, xhat = x rstd, one warp per row; dw = column sums of dy xhat
// over row chunks, then over the chunks (a fixed order that depends only on N and C, no
// atomics), as layernorm.cu's weight gradient.
#include <algorithm>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_reduce.cuh"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const float* inp, const float* w,
                                       int64_t N, int64_t C, float eps, float w_offset) {
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += x[c] * x[c];
  const float r = rsqrtf(warp_sum(s) / float(C) + eps);
  T* y = out + n * C;
  for (int64_t c = lane; c < C; c += 32) y[c] = from_f32<T>(x[c] * r * (w[c] + w_offset));
  if (lane == 0) rstd[n] = r;
}

__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                              const float* w, const float* rstd, int64_t N,
                                              int64_t C, float w_offset) {
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const float* dy = dout + n * C;
  const float r = rstd[n];
  float sgx = 0.f;
  for (int64_t c = lane; c < C; c += 32) sgx += dy[c] * (w[c] + w_offset) * x[c] * r;
  const float mean_gx = warp_sum(sgx) / float(C);
  float* dx = dinp + n * C;
  for (int64_t c = lane; c < C; c += 32) dx[c] += r * (dy[c] * (w[c] + w_offset) - x[c] * r * mean_gx);
}

// Stage 1: block (x, g) of 32 x 8 threads sums dy xhat over row chunk g for 32 columns, each
// row of threads a strided set of the chunk's rows, the 8 partials added in order into
// partial[g, c]. Stage 2: dw[c] += the chunk partials in chunk order.
__global__ void rmsnorm_weight_chunks_kernel(float* partial, const float* dout, const float* inp,
                                             const float* rstd, int64_t N, int64_t C,
                                             int64_t rows_per_chunk) {
  __shared__ float pw[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
  float sw = 0.f;
  if (c < C)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8)
      sw += dout[n * C + c] * inp[n * C + c] * rstd[n];
  pw[threadIdx.y][threadIdx.x] = sw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += pw[r][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

}  // namespace

void rmsnorm_forward(MatOut out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, float weight_offset) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_storage(out.dtype, [&]<typename T>() {
    rmsnorm_forward_kernel<T><<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
        static_cast<T*>(out.data), rstd, inp, weight, N, C, eps, weight_offset);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C,
                      float weight_offset) {
  if (N == 0 || C == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  rmsnorm_backward_input_kernel<<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
      dinp, dout, inp, weight, rstd, N, C, weight_offset);
  MG_CUDA_CHECK(cudaGetLastError());
  const ColumnChunks k = column_chunks(N, C);
  Buffer partial(size_t(k.chunks * C) * sizeof(float));
  rmsnorm_weight_chunks_kernel<<<dim3(unsigned(k.col_blocks), unsigned(k.chunks)), dim3(32, 8), 0,
                                 compute_stream()>>>(partial.as<float>(), dout, inp, rstd, N, C,
                                                     k.rows_per_chunk);
  MG_CUDA_CHECK(cudaGetLastError());
  column_sum_finish_kernel<<<blocks_for(C), kThreads, 0, compute_stream()>>>(
      dweight, partial.as<float>(), k.chunks, C);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
