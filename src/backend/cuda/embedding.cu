// Embedding lookup and its gradient for a (possibly vocab-parallel) table holding rows
// [row_begin, row_end). Forward: one thread per output element. Backward without atomics:
// one thread per column walks the tokens in order and adds into its rows, the order of the CPU
// loop, so repeated tokens sum identically on every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"

namespace mg::cuda {

namespace {

template <typename T>
__device__ float widen(T x);
template <>
__device__ float widen<float>(float x) { return x; }
template <>
__device__ float widen<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ float widen<__half>(__half x) { return __half2float(x); }

template <typename T>
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const T* table,
                                         int64_t row_begin, int64_t row_end, int64_t N, int64_t H,
                                         bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * H;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / H, c = i % H, id = ids[n];
    const bool mine = id >= row_begin && id < row_end;
    const float v = mine ? widen<T>(table[(id - row_begin) * H + c]) : 0.f;
    if (accumulate)
      out[i] += v;
    else
      out[i] = v;
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids,
                                          int64_t row_begin, int64_t row_end, int64_t N,
                                          int64_t H) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= H) return;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    if (id >= row_begin && id < row_end) dtable[(id - row_begin) * H + c] += dout[n * H + c];
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate) {
  if (N * H == 0) return;
  const unsigned blocks = blocks_for(N * H);
  cudaStream_t s = compute_stream();
  switch (table.dtype) {
    case DType::F32:
      embedding_forward_kernel<<<blocks, kThreads, 0, s>>>(
          out, ids, static_cast<const float*>(table.data), row_begin, row_end, N, H, accumulate);
      break;
    case DType::BF16:
      embedding_forward_kernel<<<blocks, kThreads, 0, s>>>(
          out, ids, static_cast<const __nv_bfloat16*>(table.data), row_begin, row_end, N, H,
          accumulate);
      break;
    case DType::F16:
      embedding_forward_kernel<<<blocks, kThreads, 0, s>>>(
          out, ids, static_cast<const __half*>(table.data), row_begin, row_end, N, H,
          accumulate);
      break;
    default:
      MG_CHECK(false, "embedding table of dtype ", dtype_name(table.dtype));
  }
  MG_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H) {
  if (N * H == 0) return;
  embedding_backward_kernel<<<unsigned((H + 127) / 128), 128, 0, compute_stream()>>>(
      dtable, dout, ids, row_begin, row_end, N, H);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
