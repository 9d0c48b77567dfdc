// Mixture-of-experts token movement on the GPU (and the KV cache's row scatter): the gather of
// tokens by expert (one thread per element), the weighted combine (one thread per output element, its k terms in order) and its
// backward (one warp per row: the row's input gradient, and its weight's gradient as the
// warp's sum of the dot product's lane partials). No atomics: results are deterministic, and
// equal the CPU's up to the dot product's summation order.
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_reduce.cuh"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

template <typename T>
__global__ void gather_rows_kernel(T* dst, const T* src, const int32_t* index, int64_t n,
                                   int64_t H) {
  MG_GRID_STRIDE(i, n * H) {
    const int64_t r = i / H, h = i % H;
    dst[i] = src[int64_t(index[r]) * H + h];
  }
}

template <typename T>
__global__ void scatter_rows_kernel(T* dst, int64_t dst_stride, const T* src, int64_t src_stride,
                                    const int32_t* index, int64_t n, int64_t width) {
  MG_GRID_STRIDE(i, n * width) {
    const int64_t r = i / width, j = i % width;
    dst[int64_t(index[r]) * dst_stride + j] = src[r * src_stride + j];
  }
}

__global__ void combine_rows_kernel(float* out, const float* rows, const int32_t* slot_row,
                                    const float* weights, int64_t T, int64_t k, int64_t H,
                                    bool accumulate) {
  MG_GRID_STRIDE(i, T * H) {
    const int64_t t = i / H, h = i % H;
    float acc = accumulate ? out[i] : 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = slot_row[t * k + j];
      if (r < 0) continue;
      acc += (weights ? weights[t * k + j] : 1.f) * rows[int64_t(r) * H + h];
    }
    out[i] = acc;
  }
}

constexpr int kWarpsPerBlock = 8;

__global__ void combine_rows_backward_kernel(float* drows, float* dweights, const float* rows,
                                             const float* dout, const int32_t* row_token,
                                             const int32_t* row_slot, const float* weights,
                                             int64_t n, int64_t H) {
  const int lane = threadIdx.x % 32;
  const int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t s = row_slot[i];
  const float w = weights[s];
  const float* g = dout + int64_t(row_token[i]) * H;
  const float* y = rows + i * H;
  float* d = drows + i * H;
  float dot = 0.f;
  for (int64_t h = lane; h < H; h += 32) {
    dot += y[h] * g[h];
    d[h] = w * g[h];
  }
  dot = warp_sum(dot);
  if (lane == 0) dweights[s] = dot;
}

}  // namespace

void gather_rows(void* dst, const void* src, const int32_t* index, int64_t n, int64_t H,
                 DType t) {
  if (n * H == 0) return;
  with_storage(t, [&]<typename T>() {
    gather_rows_kernel<T><<<blocks_for(n * H), kThreads, 0, compute_stream()>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), index, n, H);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void scatter_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                  const int32_t* index, int64_t n, int64_t width, DType t) {
  if (n * width == 0) return;
  with_storage(t, [&]<typename T>() {
    scatter_rows_kernel<T><<<blocks_for(n * width), kThreads, 0, compute_stream()>>>(
        static_cast<T*>(dst), dst_stride, static_cast<const T*>(src), src_stride, index, n,
        width);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void combine_rows(float* out, const float* rows, const int32_t* slot_row, const float* weights,
                  int64_t T, int64_t k, int64_t H, bool accumulate) {
  if (T * H == 0) return;
  combine_rows_kernel<<<blocks_for(T * H), kThreads, 0, compute_stream()>>>(
      out, rows, slot_row, weights, T, k, H, accumulate);
  MG_CUDA_CHECK(cudaGetLastError());
}

void combine_rows_backward(float* drows, float* dweights, const float* rows, const float* dout,
                           const int32_t* row_token, const int32_t* row_slot,
                           const float* weights, int64_t n, int64_t H) {
  if (n == 0) return;
  const unsigned blocks = unsigned((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  combine_rows_backward_kernel<<<blocks, 32 * kWarpsPerBlock, 0, compute_stream()>>>(
      drows, dweights, rows, dout, row_token, row_slot, weights, n, H);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
