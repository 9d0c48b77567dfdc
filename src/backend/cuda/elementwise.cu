// Element-wise kernels: GELU (tanh approximation, as GPT-2), residual add, bias add and its
// column-sum gradient (optionally storing the rounded gradient in the same pass), f32 <->
// bf16/f16 casts (round to nearest even, as the CPU's), the inf/NaN check and in-place scaling.
// Grid-stride loops over n elements; 16-bit kernels are templated on the storage type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/check.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_reduce.cuh"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;

__device__ inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

template <typename TO, typename TI>
__global__ void gelu_forward_kernel(TO* out, const TI* inp, int64_t n) {
  MG_GRID_STRIDE(i, n) out[i] = from_f32<TO>(gelu(to_f32(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(float* dinp, const T* inp, const float* dout, int64_t n,
                                     bool set) {
  MG_GRID_STRIDE(i, n) {
    const float x = to_f32(inp[i]);
    const float t = tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    const float g = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    dinp[i] = set ? g : dinp[i] + g;
  }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, int64_t n) {
  MG_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da, float* db, const float* dout, int64_t n) {
  MG_GRID_STRIDE(i, n) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

__global__ void bias_add_kernel(float* out, const float* bias, int64_t N, int64_t C) {
  MG_GRID_STRIDE(i, N * C) out[i] += bias[i % C];
}

// Column sums in two fixed-order stages, so that a narrow matrix (C = 1280: 40 column blocks)
// still spreads over the whole GPU. Stage 1: block (x, g) of 32 x 8 threads sums 32 columns
// over row chunk g, each of the 8 rows of threads a strided set of the chunk's rows, the 8
// partials added in order into partial[g, c]; with out16 it also stores each element it reads
// rounded to T (a 16-bit backward's rounded dout, in the same pass). Stage 2: dbias[c] += the
// chunk partials in chunk order.
template <typename T>
__global__ void column_sum_chunks_kernel(float* partial, T* out16, const float* dout, int64_t N,
                                         int64_t C, int64_t rows_per_chunk) {
  __shared__ float part[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
  float s = 0.f;
  if (c < C)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) {
      const float x = dout[n * C + c];
      s += x;
      if (out16) out16[n * C + c] = from_f32<T>(x);
    }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += part[r][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

// dbias += column sums of dout [N, C]; out16 (T = bf16/f16, may be null) = dout rounded.
template <typename T>
void column_sums(float* dbias, T* out16, const float* dout, int64_t N, int64_t C) {
  const ColumnChunks k = column_chunks(N, C);
  Buffer partial(size_t(k.chunks * C) * sizeof(float));
  column_sum_chunks_kernel<T><<<dim3(unsigned(k.col_blocks), unsigned(k.chunks)), dim3(32, 8), 0,
                                compute_stream()>>>(partial.as<float>(), out16, dout, N, C,
                                                    k.rows_per_chunk);
  MG_CUDA_CHECK(cudaGetLastError());
  column_sum_finish_kernel<<<blocks_for(C), kThreads, 0, compute_stream()>>>(
      dbias, partial.as<float>(), k.chunks, C);
  MG_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
__global__ void narrow_kernel(T* dst, const float* src, int64_t n) {
  MG_GRID_STRIDE(i, n) dst[i] = from_f32<T>(src[i]);
}
template <typename T>
__global__ void widen_kernel(float* dst, const T* src, int64_t n) {
  MG_GRID_STRIDE(i, n) dst[i] = to_f32(src[i]);
}

// dst = x rounded to 16 bits, and x replaced by the rounded value: one pass.
template <typename T>
__global__ void store_rounded_kernel(T* dst, float* x, int64_t n) {
  MG_GRID_STRIDE(i, n) {
    const T r = from_f32<T>(x[i]);
    dst[i] = r;
    x[i] = to_f32(r);
  }
}

// f.template operator()<T>() for the 16-bit storage type of t; other dtypes are an error that
// names the op.
template <typename F>
void with_16bit(DType t, const char* op, F&& f) {
  MG_CHECK(t == DType::BF16 || t == DType::F16, op, ": no 16-bit storage ", dtype_name(t));
  with_storage(t, f);
}

__global__ void inf_nan_kernel(int* flag, const float* x, int64_t n) {
  int bad = 0;
  MG_GRID_STRIDE(i, n) bad |= !isfinite(x[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  MG_GRID_STRIDE(i, n) x[i] *= s;
}

}  // namespace

void gelu_forward(MatOut out, Mat inp, int64_t n) {
  if (n == 0) return;
  with_storage(out.dtype, [&]<typename TO>() {
    with_storage(inp.dtype, [&]<typename TI>() {
      gelu_forward_kernel<TO, TI><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
          static_cast<TO*>(out.data), static_cast<const TI*>(inp.data), n);
    });
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, Mat inp, const float* dout, int64_t n, GradWrite write) {
  if (n == 0) return;
  with_storage(inp.dtype, [&]<typename T>() {
    gelu_backward_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
        dinp, static_cast<const T*>(inp.data), dout, n, write == GradWrite::Set);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(out, a, b, n);
  MG_CUDA_CHECK(cudaGetLastError());
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  if (n == 0) return;
  residual_backward_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(da, db, dout, n);
  MG_CUDA_CHECK(cudaGetLastError());
}

void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) {
  if (N * C == 0) return;
  bias_add_kernel<<<blocks_for(N * C), kThreads, 0, compute_stream()>>>(out, bias, N, C);
  MG_CUDA_CHECK(cudaGetLastError());
}

void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  if (C == 0) return;
  column_sums<float>(dbias, nullptr, dout, N, C);
}

void bias_backward_and_round(float* dbias, void* dout16, DType t, const float* dout, int64_t N,
                             int64_t C) {
  if (C == 0 || N == 0) return;
  with_16bit(t, "bias_backward_and_round", [&]<typename T>() {
    column_sums<T>(dbias, static_cast<T*>(dout16), dout, N, C);
  });
}

void store_rounded(void* dst, DType t, float* x, int64_t n) {
  if (n == 0) return;
  if (t == DType::F32) {
    if (dst != x) copy_on_device(dst, x, size_t(n) * 4);
    return;
  }
  with_16bit(t, "store_rounded", [&]<typename T>() {
    store_rounded_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
        static_cast<T*>(dst), x, n);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void cast_from_f32(void* dst, DType t, const float* src, int64_t n) {
  if (n == 0) return;
  if (t == DType::F32) {
    if (dst != src) copy_on_device(dst, src, size_t(n) * 4);
    return;
  }
  with_16bit(t, "cast_from_f32", [&]<typename T>() {
    narrow_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream()>>>(static_cast<T*>(dst), src,
                                                                       n);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

void cast_to_f32(float* dst, const void* src, DType t, int64_t n) {
  if (n == 0) return;
  if (t == DType::F32) {
    if (dst != src) copy_on_device(dst, src, size_t(n) * 4);
    return;
  }
  with_16bit(t, "cast_to_f32", [&]<typename T>() {
    widen_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
        dst, static_cast<const T*>(src), n);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

bool has_inf_or_nan(const float* x, int64_t n) {
  if (n == 0) return false;
  static Buffer flag(sizeof(int));
  memset_zero(flag.get(), sizeof(int));
  inf_nan_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(flag.as<int>(), x, n);
  MG_CUDA_CHECK(cudaGetLastError());
  int host = 0;
  copy_to_host(&host, flag.get(), sizeof(int));
  return host != 0;
}

void scale_inplace(float* x, float s, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(x, s, n);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
