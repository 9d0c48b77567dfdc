// Heads between a strided view (the Q or K heads of fused QKV rows) and a contiguous
// (N, n_heads, HD) buffer, as the CPU twin (backend/cpu/heads_copy.cpp): a gather widened to
// f32 and a scatter rounded to the view's dtype. One thread per element, grid-stride.
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

// Element i of the contiguous buffer: row n, head h, channel e; its offset in the view.
__device__ inline int64_t view_offset(int64_t i, int64_t n_heads, int64_t HD, int64_t row_stride,
                                      int64_t group_stride, int64_t per_group) {
  const int64_t e = i % HD, h = i / HD % n_heads, n = i / (HD * n_heads);
  return n * row_stride + (h / per_group) * group_stride + (h % per_group) * HD + e;
}

template <typename T>
__global__ void heads_gather_kernel(float* dst, const T* src, int64_t N, int64_t n_heads,
                                    int64_t HD, int64_t row_stride, int64_t group_stride,
                                    int64_t per_group) {
  MG_GRID_STRIDE(i, N * n_heads * HD) {
    dst[i] = to_f32(src[view_offset(i, n_heads, HD, row_stride, group_stride, per_group)]);
  }
}

template <typename TD, typename TS>
__global__ void heads_scatter_kernel(TD* dst, const TS* src, int64_t N, int64_t n_heads,
                                     int64_t HD, int64_t row_stride, int64_t group_stride,
                                     int64_t per_group) {
  MG_GRID_STRIDE(i, N * n_heads * HD) {
    dst[view_offset(i, n_heads, HD, row_stride, group_stride, per_group)] =
        from_f32<TD>(to_f32(src[i]));
  }
}

}  // namespace

void heads_gather(float* dst, const Heads& src, int64_t N, int64_t n_heads, int64_t HD) {
  const int64_t n = N * n_heads * HD;
  if (n == 0) return;
  with_storage(src.dtype, [&]<typename T>() {
    heads_gather_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
        dst, static_cast<const T*>(src.data), N, n_heads, HD, src.row_stride, src.group_stride,
        src.heads_per_group);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

// A 16-bit source into a view of the same dtype converts exactly (widen, then the same value).
void heads_scatter(const Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD) {
  const int64_t n = N * n_heads * HD;
  if (n == 0) return;
  MG_CHECK(src.dtype == DType::F32 || src.dtype == dst.dtype, "heads_scatter: source ",
           dtype_name(src.dtype), " into a ", dtype_name(dst.dtype), " view");
  with_storage(dst.dtype, [&]<typename TD>() {
    with_storage(src.dtype, [&]<typename TS>() {
      heads_scatter_kernel<TD, TS><<<blocks_for(n), kThreads, 0, compute_stream()>>>(
          static_cast<TD*>(dst.data), static_cast<const TS*>(src.data), N, n_heads, HD,
          dst.row_stride, dst.group_stride, dst.heads_per_group);
    });
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
