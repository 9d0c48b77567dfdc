// The CUDA op set: the op list of backend/op_list.inc (the same forward/backward pairs,
// arguments and conventions as the CPU twins, each contract written there once) on device
// pointers, queued on the compute stream (device.h); f32 and bf16/f16 storage with fp32
// accumulation; plus the GPU-only entry points below. One .cu per op (kernels + launcher).
// Every op is checked against its CPU twin by tests/backend/cuda/parity_test.cpp (label gpu).
// GPU specifics: reductions run in a fixed order (bitwise reproducible, no float atomics);
// sum_squares reduces on the device and sum_squares_ranges downloads the per-range sums
// together; AdamW/SGD scale by the clip factor as they read the gradient; RoPE's positions and
// inv_freq are device arrays.
#pragma once
#include <cstdint>

#include "backend/ops.h"

namespace mg::cuda {

using cpu::AttentionShape;
using cpu::GradWrite;
using cpu::Heads;
using cpu::Mat;
using cpu::MatOut;
using cpu::Range;

#include "backend/declare_ops.inc"

// C[M,N] = alpha op(A) op(B) + beta C through cuBLASLt; A and B f32 (fp32 compute, no TF32) or
// both bf16/f16 (fp32 accumulation); C f32.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, Mat A,
          int64_t lda, Mat B, int64_t ldb, float beta, float* C, int64_t ldc);

// bias_backward and dout16 = dout rounded to t (BF16/F16) in one pass over dout: a 16-bit
// linear layer's backward reads its f32 output gradient once.
void bias_backward_and_round(float* dbias, void* dout16, DType t, const float* dout, int64_t N,
                             int64_t C);

// GPT-2's causal MHA on interleaved qkv[S,B,NH,3,HD], as views for the calls above.
inline void attention_forward(MatOut out, float* lse, Mat qkv, int64_t B, int64_t S, int64_t NH,
                              int64_t HD, const int32_t* seg_start = nullptr) {
  const cpu::FusedQKV f = cpu::fused_qkv(qkv.data, qkv.dtype, B, S, NH, NH, HD);
  cuda::attention_forward(out, lse, f.q, f.k, f.v, f.shape, seg_start);  // not cpu:: by ADL
}
inline void attention_backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse,
                               int64_t B, int64_t S, int64_t NH, int64_t HD,
                               const int32_t* seg_start = nullptr,
                               GradWrite write = GradWrite::Add) {
  const cpu::FusedQKV f = cpu::fused_qkv(qkv.data, qkv.dtype, B, S, NH, NH, HD);
  const cpu::FusedQKV d = cpu::fused_qkv(dqkv, DType::F32, B, S, NH, NH, HD);
  cuda::attention_backward(d.q, d.k, d.v, dout, out, f.q, f.k, f.v, lse, f.shape, seg_start, write);
}

}  // namespace mg::cuda
