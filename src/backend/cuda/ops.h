// The CUDA op set: the same forward/backward pairs, arguments and conventions as backend/cpu
// (../ops.h: row-major, dimensions last, backward ADDS into gradients), on device pointers,
// queued on the compute stream (device.h). f32 and bf16/f16 storage with fp32 accumulation.
// Every op is checked against its CPU twin by tests/backend/cuda/parity_test.cpp (label gpu).
#pragma once
#include <cstdint>

#include "backend/ops.h"

namespace mg::cuda {

using cpu::Mat;
using cpu::MatOut;
using cpu::GradWrite;

void cast_from_f32(void* dst, DType dst_dtype, const float* src, int64_t n);
void cast_to_f32(float* dst, const void* src, DType src_dtype, int64_t n);
// cpu::store_rounded's contract (dst = x in dst_dtype, x = the stored value) in one pass.
void store_rounded(void* dst, DType dst_dtype, float* x, int64_t n);
bool has_inf_or_nan(const float* x, int64_t n);

// C[M,N] = alpha op(A) op(B) + beta C through cuBLASLt; A and B f32 (fp32 compute, no TF32) or
// both bf16/f16 (fp32 accumulation); C f32.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, Mat A,
          int64_t lda, Mat B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[N,OUT] = inp[N,IN] W[OUT,IN]^T + bias (the bias add fused into the GEMM epilogue). A
// 16-bit out is the GEMM's own output type; its bias is first rounded to that type (cuBLASLt's
// bias must have the output's type), then added to the fp32 sum before D's one rounding.
void linear_forward(MatOut out, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
// out = residual + (inp W^T + bias) in one GEMM: C = residual, D = out, bias in the epilogue.
void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT);
// dinp_write Set: dinp = (beta 0) instead of +=.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT,
                     GradWrite dinp_write = GradWrite::Add);

void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate);
// Deterministic: each column walks the tokens in order, as the CPU loop does (no atomics).
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H);

void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);
// bias_backward and dout16 = dout rounded to t (BF16/F16) in one pass over dout: a 16-bit
// linear layer's backward reads its f32 output gradient once.
void bias_backward_and_round(float* dbias, void* dout16, DType t, const float* dout, int64_t N,
                             int64_t C);

void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);

void gelu_forward(MatOut out, Mat inp, int64_t n);
void gelu_backward(float* dinp, Mat inp, const float* dout, int64_t n,
                   GradWrite write = GradWrite::Add);
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);

// RMSNorm: one warp per row; dweight as column sums in two fixed-order stages (no atomics).
void rmsnorm_forward(MatOut out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

void swiglu_forward(MatOut out, Mat inp, int64_t N, int64_t F);
void swiglu_backward(float* dinp, Mat inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write = GradWrite::Add);

using cpu::AttentionShape;
using cpu::Heads;
// positions (N) and inv_freq (rot_dim / 2) are device arrays; x f32 or 16-bit, dx f32.
void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);
void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);

// Flash attention over Q, K, V head views (GQA, position offsets, causal or not, segments), as
// the CPU op; lse saved, no S x S tensor. HD must be 32, 64 or 128. q/k/v and out f32: exact
// fp32 kernels on the CUDA cores; all BF16 or all F16 (a 16-bit model's stored activations):
// the tensor-core kernels, reading q, k, v and writing out in that dtype, with dO, P and dS
// rounded to it and fp32 accumulation. Backward is deterministic (no atomics): dK/dV of a KV
// head are summed by one block over its query heads in order.
void attention_forward(MatOut out, float* lse, const Heads& q, const Heads& k, const Heads& v,
                       const AttentionShape& a, const int32_t* seg_start = nullptr);
void attention_backward(const Heads& dq, const Heads& dk, const Heads& dv, const float* dout,
                        Mat out, const Heads& q, const Heads& k, const Heads& v,
                        const float* lse, const AttentionShape& a,
                        const int32_t* seg_start = nullptr, GradWrite write = GradWrite::Add);
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
  cuda::attention_backward(d.q, d.k, d.v, dout, out, f.q, f.k, f.v, lse, f.shape, seg_start,
                           write);
}

void cross_entropy_forward(float* losses, float* lse, const float* logits,
                           const int32_t* targets, int64_t N, int64_t V);
void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V);
void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V);
void cross_entropy_target_logit(float* target_logit, const float* logits,
                                const int32_t* targets, int64_t v_begin, int64_t N, int64_t V);
void cross_entropy_combine(float* losses, float* lse, const float* row_max,
                           const float* sum_exp, const int32_t* targets, int64_t N);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V);

// AdamW / SGD over a flat buffer; clip (the global-norm clip factor, 1 for none) scales the
// gradient as it is read, so clipping costs no separate pass.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float clip = 1.0f);
void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip = 1.0f);
// As the CPU op, on the device (acc is device memory): one block, a fixed order.
void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum);
// Sum of squares in double, reduced on the device in a fixed order (bitwise reproducible).
double sum_squares(const float* x, int64_t n);
// Each range reduced as sum_squares does, the per-range sums downloaded together and added on
// the host in order.
double sum_squares_ranges(const float* x, const cpu::Range* ranges, int64_t k);
void scale_inplace(float* x, float s, int64_t n);

// Heads between a strided view and a contiguous (N, n_heads, HD) buffer (--qk-layernorm).
void heads_gather(float* dst, const cpu::Heads& src, int64_t N, int64_t n_heads, int64_t HD);
void heads_scatter(const cpu::Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD);

}  // namespace mg::cuda
