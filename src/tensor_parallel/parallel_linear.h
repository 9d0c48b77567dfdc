// ColumnParallelLinear and RowParallelLinear (Shoeybi et al. 2019), composed of the conjugate
// pairs: Y = X A + b with A split by output columns (column-parallel: weight [OUT/TP, IN],
// input replicated or gathered from the sequence-parallel region, output stays split) or by
// input rows (row-parallel: weight [OUT, IN/TP], input split, partial outputs summed by
// all-reduce or reduce-scatter, bias added after the reduction). Rows = S x B; R = rows/TP
// under sequence parallelism, rows otherwise.
#pragma once
#include <cstdint>

#include "tensor_parallel/mappings.h"

namespace mg::tp {

struct LinearShape {
  int64_t rows;      // S x B (full sequence)
  int64_t in, out;   // local feature sizes as stored in the weight
};

// Column-parallel. x_local: (R, in). x_full: (rows, in) buffer that receives the gathered
// input under SP (may be x_local otherwise); returns the input actually used (kept for backward).
const float* column_parallel_forward(const TPGroup& g, float* y, const float* x_local,
                                     float* x_full, const float* weight, const float* bias,
                                     const LinearShape& s);
// dx_full: (rows, in) scratch, zeroed here; dx_local: (R, in) receives (=) the input grad and
// may alias dx_full when not sequence-parallel.
void column_parallel_backward(const TPGroup& g, float* dx_local, float* dx_full, float* dweight,
                              float* dbias, const float* dy, const float* x_used,
                              const float* weight, const LinearShape& s);

// Row-parallel. x: (rows, in_local); partial: (rows, out) scratch; y_local: (R, out).
void row_parallel_forward(const TPGroup& g, float* y_local, float* partial, const float* x,
                          const float* weight, const float* bias, const LinearShape& s);
// dy_local: (R, out); dy_full: (rows, out) scratch under SP; dx: (rows, in_local) +=.
void row_parallel_backward(const TPGroup& g, float* dx, float* dweight, float* dbias,
                           const float* dy_local, float* dy_full, const float* x,
                           const float* weight, const LinearShape& s);

}  // namespace mg::tp
