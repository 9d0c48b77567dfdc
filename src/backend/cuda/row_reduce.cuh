// Reductions the norm and bias-gradient kernels share: a warp's sum (one warp per row), and
// column sums in two fixed-order stages (row chunks, then the chunks in order) whose plan depends
// only on N and C, so results do not depend on the GPU and need no atomics.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.cuh"

namespace mg::cuda {
namespace {

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Stage 1's grid: blocks of 32 columns x 8 thread rows over row chunks, about 1024 blocks in
// all, chunks of at least 64 rows (so a narrow C, e.g. 1280 = 40 column blocks, fills the GPU).
struct ColumnChunks {
  int64_t col_blocks, chunks, rows_per_chunk;
};
inline ColumnChunks column_chunks(int64_t N, int64_t C) {
  const int64_t col_blocks = (C + 31) / 32;
  const int64_t chunks = std::max<int64_t>(1, std::min((N + 63) / 64, 1024 / col_blocks));
  return {col_blocks, chunks, (N + chunks - 1) / chunks};
}

// Stage 2: out[c] += partial[g, c] over the chunks g in order.
__global__ void column_sum_finish_kernel(float* out, const float* partial, int64_t chunks,
                                         int64_t C) {
  MG_GRID_STRIDE(c, C) {
    float t = 0.f;
    for (int64_t g = 0; g < chunks; ++g) t += partial[g * C + c];
    out[c] += t;
  }
}

}  // namespace
}  // namespace mg::cuda
