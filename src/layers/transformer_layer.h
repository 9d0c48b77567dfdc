// One GPT-2 transformer layer (pre-LayerNorm), tensor-parallel in Megatron's way:
//   x_mid = x + RowParallel(Attn(ColumnParallel_QKV(LN1(x))))      heads split across TP
//   y     = x_mid + RowParallel_FC2(GELU(ColumnParallel_FC1(LN2(x_mid))))
// Activations are sequence-first [S, B, H]; with sequence parallelism x, x_mid and y hold this
// rank's S/TP rows and the LayerNorm outputs are gathered before the column-parallel GEMMs.
// forward() fills a named cache of saved activations; backward() consumes it and ADDS into the
// parameter grads and into the incoming residual gradient.
// Mixed precision (LayerDims::dtype bf16/f16): GEMM weights and the saved GEMM inputs and
// outputs (LayerNorm outputs, QKV, attention output, FC1, GELU) are stored in 16 bits; GEMMs
// accumulate in fp32; LayerNorm, softmax, GELU and the residual stream compute in fp32 (the
// residual stream stays fp32, Megatron's --fp32-residual-connection). An op that produces a
// saved activation rounds it where it stores it, the op that reads one widens it, and forward
// goes on with the rounded value, so backward sees exactly what forward used. Grads are fp32
// (the main grads).
#pragma once
#include <cstdint>

#include "tensor/tensor.h"
#include "tensor_parallel/mappings.h"

namespace mg {

// Pointers into the flat parameter (or gradient) buffer for one layer (local TP shards). The
// GEMM weights are in the layer's dtype for parameters (f32 for grads); the 1-D parameters
// (LayerNorms, biases) are always f32 (under mixed precision: the model's f32 copies).
struct LayerWeights {
  float *ln1_w, *ln1_b;    // (H)
  void* qkv_w;             // (3H/TP, H): rows interleaved per head [q, k, v]
  float* qkv_b;            // (3H/TP)
  void* proj_w;            // (H, H/TP)
  float* proj_b;           // (H)
  float *ln2_w, *ln2_b;    // (H)
  void* fc1_w;             // (F/TP, H)
  float* fc1_b;            // (F/TP)
  void* fc2_w;             // (H, F/TP)
  float* fc2_b;            // (H)
};

struct LayerDims {
  int64_t B, S, H, NH, F;  // global sizes
  int64_t tp = 1;          // TP size
  bool sp = false;         // sequence parallel
  float eps;
  DType dtype = DType::F32;  // storage of GEMM weights and saved GEMM inputs/outputs
  Device device = Device::CPU;  // where the activations live (the compute device)
  int64_t rows() const { return S * B; }                    // full-sequence rows
  int64_t local_rows() const { return sp ? rows() / tp : rows(); }  // rows of x / y
  int64_t NH_local() const { return NH / tp; }
  int64_t H_local() const { return H / tp; }  // attention width on this rank
  int64_t F_local() const { return F / tp; }
  bool low_precision() const { return dtype != DType::F32; }
};

// Activations saved by forward for backward ([dtype]: the layer's dtype; others f32).
struct LayerCache {
  Tensor ln1, ln1_mean, ln1_rstd;  // (R, H) [dtype], (R), (R)
  Tensor ln1_full;                 // (S*B, H) [dtype] gathered LN1 output (sequence parallel)
  Tensor qkv;                      // (S*B, 3H/TP) [dtype]
  Tensor lse;                      // (B, NH/TP, S) attention log-sum-exp (flash attention)
  Tensor attn;                     // (S*B, H/TP) [dtype] attention output before the projection
  Tensor x_mid;                    // (R, H) residual stream after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (R, H) [dtype], (R), (R)
  Tensor ln2_full;                 // (S*B, H) [dtype] (sequence parallel only)
  Tensor fc1;                      // (S*B, F/TP) [dtype] pre-activation
  Tensor gelu;                     // (S*B, F/TP) [dtype]
  explicit LayerCache(const LayerDims& d);
};

// Scratch reused by every layer's forward and backward.
struct LayerScratch {
  Tensor full;            // (S*B, H) row-parallel partial sums / full-sequence grads
  Tensor d_ln;            // (R, H)
  Tensor d_qkv;           // (S*B, 3H/TP)
  Tensor d_attn;          // (S*B, H/TP)
  Tensor d_fc1, d_gelu;   // (S*B, F/TP)
  explicit LayerScratch(const LayerDims& d);
};

// y (R, H) from x (R, H). seg_start (B, S): optional per-position attention start.
void transformer_layer_forward(const tp::TPGroup& g, float* y, const float* x,
                               const LayerWeights& w, LayerCache& c, LayerScratch& s,
                               const LayerDims& d, const int32_t* seg_start = nullptr);
// On entry d_resid (R, H) holds dL/dy; on exit dL/dx. Param grads are added into gw.
void transformer_layer_backward(const tp::TPGroup& g, float* d_resid, const float* x,
                                const LayerWeights& w, const LayerWeights& gw,
                                const LayerCache& c, LayerScratch& s, const LayerDims& d,
                                const int32_t* seg_start = nullptr);

}  // namespace mg
