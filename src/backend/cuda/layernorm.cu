// LayerNorm over the last dim C: y = (x - mean) * rstd * gamma + b, rstd = 1/sqrt(var + eps),
// gamma = w + offset (1 for zero-centred w), one warp per row (two passes over the row: mean,
// then the centred variance, as the CPU). Backward: dx = rstd (g - mean(g) - xhat mean(g xhat)),
// g = dy gamma, one warp per row; dw and db are column sums over row chunks, then over the
// chunks (fixed order, no atomics).
#include <algorithm>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_reduce.cuh"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int64_t N, int64_t C,
                                         float eps, float w_offset) {
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
  for (int64_t c = lane; c < C; c += 32)
    y[c] = from_f32<T>((x[c] - m) * r * (w[c] + w_offset) + b[c]);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* w, const float* mean,
                                                const float* rstd, int64_t N, int64_t C,
                                                float w_offset) {
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const float* dy = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = dy[c] * (w[c] + w_offset);
    sg += g;
    sgx += g * (x[c] - m) * r;
  }
  const float mean_g = warp_sum(sg) / float(C), mean_gx = warp_sum(sgx) / float(C);
  float* dx = dinp + n * C;
  for (int64_t c = lane; c < C; c += 32)
    dx[c] += r * (dy[c] * (w[c] + w_offset) - mean_g - (x[c] - m) * r * mean_gx);
}

// dw and db in two fixed-order stages (as the bias column sums of elementwise.cu), so that a
// narrow C (1280: 40 column blocks) still fills the GPU. Stage 1: block (x, g) of 32 x 8 threads
// sums 32 columns over row chunk g, each row of threads a strided set of the chunk's rows, the 8
// partials added in order into partial[g, c] (dw) and partial[g, C + c] (db). Stage 2: the chunk
// partials in chunk order, added into dw and db.
__global__ void layernorm_params_chunks_kernel(float* partial, const float* dout,
                                               const float* inp, const float* mean,
                                               const float* rstd, int64_t N, int64_t C,
                                               int64_t rows_per_chunk) {
  __shared__ float pw[8][33], pb[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
  float sw = 0.f, sb = 0.f;
  if (c < C)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) {
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
    partial[blockIdx.y * 2 * C + c] = tw;
    partial[blockIdx.y * 2 * C + C + c] = tb;
  }
}

__global__ void layernorm_params_finish_kernel(float* dw, float* db, const float* partial,
                                               int64_t chunks, int64_t C) {
  MG_GRID_STRIDE(i, 2 * C) {
    float t = 0.f;
    for (int64_t g = 0; g < chunks; ++g) t += partial[g * 2 * C + i];
    if (i < C) dw[i] += t;
    else db[i - C] += t;
  }
}

}  // namespace

void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                       float weight_offset) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_storage(out.dtype, [&]<typename T>() {
    layernorm_forward_kernel<T><<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
        static_cast<T*>(out.data), mean, rstd, inp, weight, bias, N, C, eps, weight_offset);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C, float weight_offset) {
  if (N == 0) return;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  layernorm_backward_input_kernel<<<blocks, dim3(32, kWarpsPerBlock), 0, compute_stream()>>>(
      dinp, dout, inp, weight, mean, rstd, N, C, weight_offset);
  MG_CUDA_CHECK(cudaGetLastError());
  const ColumnChunks k = column_chunks(N, C);
  Buffer partial(size_t(k.chunks * 2 * C) * sizeof(float));
  layernorm_params_chunks_kernel<<<dim3(unsigned(k.col_blocks), unsigned(k.chunks)), dim3(32, 8),
                                   0, compute_stream()>>>(partial.as<float>(), dout, inp, mean,
                                                          rstd, N, C, k.rows_per_chunk);
  MG_CUDA_CHECK(cudaGetLastError());
  layernorm_params_finish_kernel<<<blocks_for(2 * C), kThreads, 0, compute_stream()>>>(
      dweight, dbias, partial.as<float>(), k.chunks, C);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
