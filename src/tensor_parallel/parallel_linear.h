// ColumnParallelLinear and RowParallelLinear (Shoeybi et al. 2019), composed of the conjugate
// pairs: Y = X A + b with A split by output columns (column-parallel: weight [OUT/TP, IN],
// input replicated or gathered from the sequence-parallel region, output stays split) or by
// input rows (row-parallel: weight [OUT, IN/TP], input split, partial outputs summed by
// all-reduce or reduce-scatter, bias added after the reduction). Rows = S x B; R = rows/TP
// under sequence parallelism, rows otherwise. Inputs and weights share one dtype (f32, or
// bf16/f16 under mixed precision); grads are f32, outputs f32 (a column-parallel output may also
// be stored in the 16-bit dtype).
#pragma once
#include <cstdint>

#include "backend/ops.h"
#include "tensor_parallel/mappings.h"

namespace mg::tp {

struct LinearShape {
  int64_t rows;     // S x B (full sequence)
  int64_t in, out;  // local feature sizes as stored in the weight
};

// Column-parallel. x_local: (R, in) in weight's dtype. x_full: (rows, in) buffer that receives
// the gathered input under SP (unused otherwise); the input used is kept for backward.
void column_parallel_forward(const TPGroup& g, cpu::MatOut y, const void* x_local, void* x_full,
                             cpu::Mat weight, const float* bias, const LinearShape& s);
// dx_full: (rows, in) scratch; dx_local: (R, in) receives (=) the input grad and may alias
// dx_full when not sequence-parallel.
void column_parallel_backward(const TPGroup& g, float* dx_local, float* dx_full, float* dweight,
                              float* dbias, const float* dy, cpu::Mat x_used, cpu::Mat weight,
                              const LinearShape& s);

// Row-parallel. x: (rows, in_local); partial: (rows, out) scratch; y_local: (R, out) =
// residual (R, out) + the layer's output: the residual add of a transformer block, which on a
// single TP rank rides in the GEMM's epilogue on the GPU. With dropout (Megatron's
// bias-dropout-add): residual + dropout(output), the mask over this rank's (R, out) rows.
void row_parallel_forward(const TPGroup& g, float* y_local, float* partial, cpu::Mat x,
                          cpu::Mat weight, const float* bias, const float* residual,
                          const LinearShape& s, const DropoutRows* dropout = nullptr);
// The second half of row_parallel_forward: partial (rows, width) TP-partial sums (overwritten)
// reduced over TP (all-reduce, or reduce-scatter under SP), + bias, then y_local (R, width) =
// residual + dropout(that).
void reduce_bias_dropout_add(const TPGroup& g, float* y_local, float* partial, const float* bias,
                             const float* residual, int64_t rows, int64_t width,
                             const DropoutRows* dropout = nullptr);
// dy_local: (R, out); dy_full: (rows, out) scratch under SP; dx: (rows, in_local) receives (=)
// the input grad.
void row_parallel_backward(const TPGroup& g, float* dx, float* dweight, float* dbias,
                           const float* dy_local, float* dy_full, cpu::Mat x, cpu::Mat weight,
                           const LinearShape& s);

}  // namespace mg::tp
