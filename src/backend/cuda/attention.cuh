// Shared by the two CUDA attention implementations: the f32 reference kernels (attention.cu)
// and the tensor-core kernels for 16-bit models (attention_tc.cu). Layout as the CPU:
// qkv[S,B,NH,3,HD] (q, k, v per head), out[S,B,NH*HD], lse[B,NH,S], seg_start (B, S).
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace mg::cuda::attn {

struct Geometry {
  int64_t B, S, NH, ld_qkv, ld_out;  // row strides of qkv and out
};

inline Geometry geometry(int64_t B, int64_t S, int64_t NH, int64_t HD) {
  return {B, S, NH, B * 3 * NH * HD, B * NH * HD};
}

// Row t of part (0 q, 1 k, 2 v) of head h of batch b (T: the storage type of qkv).
template <typename T>
__device__ inline const T* qkv_row(const T* qkv, const Geometry& g, int64_t b, int64_t h,
                                   int64_t t, int part, int HD) {
  return qkv + t * g.ld_qkv + b * 3 * g.NH * HD + h * 3 * HD + part * HD;
}

// Query q sees key k: causal, and not across a segment start (--reset-attention-mask).
__device__ inline bool visible(int64_t q, int64_t k, const int32_t* seg) {
  return k <= q && (!seg || k >= seg[q]);
}

// The tensor-core kernels (attention_tc.cu): qkv and out stored in `operands` (BF16 or F16),
// q, k, v, dO and the probabilities on the tensor cores in that dtype, scores, softmax and
// every sum in fp32. HD 32, 64 or 128.
bool tc_supported(int64_t HD, DType operands);
void tc_forward(void* out, float* lse, const void* qkv, const Geometry& g, int64_t HD,
                DType operands, const int32_t* seg_start);
// dqkv += the gradient (= with set); D[bh, t] = rowsum(dO * O), computed by the caller.
void tc_backward(float* dqkv, const float* dout, const void* qkv, const float* lse,
                 const float* D, const Geometry& g, int64_t HD, DType operands,
                 const int32_t* seg_start, bool set);

}  // namespace mg::cuda::attn
