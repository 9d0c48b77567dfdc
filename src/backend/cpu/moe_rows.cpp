// Mixture-of-experts token movement: the gather of tokens by expert, the weighted combine of
// the experts' rows per token, and its backward; and the KV cache's row scatter. Parallel over output rows (each written by one
// thread, its terms in a fixed order), so results do not depend on the thread count.
#include <cstring>

#include "backend/ops.h"

namespace mg::cpu {

void gather_rows(void* dst, const void* src, const int32_t* index, int64_t n, int64_t H, DType t) {
  const size_t row_bytes = size_t(H) * dtype_size(t);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(dst) + size_t(i) * row_bytes,
                static_cast<const char*>(src) + size_t(index[i]) * row_bytes, row_bytes);
}

void scatter_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                  const int32_t* index, int64_t n, int64_t width, DType t) {
  const size_t es = dtype_size(t);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(dst) + size_t(index[i] * dst_stride) * es,
                static_cast<const char*>(src) + size_t(i * src_stride) * es, size_t(width) * es);
}

void combine_rows(float* out, const float* rows, const int32_t* slot_row, const float* weights,
                  int64_t T, int64_t k, int64_t H, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * H;
    if (!accumulate) std::memset(o, 0, size_t(H) * sizeof(float));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = slot_row[t * k + j];
      if (r < 0) continue;
      const float w = weights ? weights[t * k + j] : 1.f;
      const float* src = rows + int64_t(r) * H;
      for (int64_t h = 0; h < H; ++h) o[h] += w * src[h];
    }
  }
}

void combine_rows_backward(float* drows, float* dweights, const float* rows, const float* dout,
                           const int32_t* row_token, const int32_t* row_slot, const float* weights,
                           int64_t n, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = row_slot[i];
    const float w = weights[s];
    const float* g = dout + int64_t(row_token[i]) * H;
    const float* y = rows + i * H;
    float* d = drows + i * H;
    double dot = 0;
    for (int64_t h = 0; h < H; ++h) {
      dot += double(y[h]) * double(g[h]);
      d[h] = w * g[h];
    }
    dweights[s] = float(dot);
  }
}

}  // namespace mg::cpu
