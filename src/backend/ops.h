// The op set a GPT needs, as forward/backward pairs on contiguous f32 buffers (CPU backend).
// Mixed precision (--bf16/--fp16): linear layers and embeddings also read 16-bit weights and
// inputs (Mat), accumulating in fp32; everything else computes in fp32 on staged copies.
// Conventions (llm.c style): dimensions come last; row-major; a backward ADDS (+=) into every
// input and parameter gradient it produces, so callers zero scratch gradients and micro-batches
// accumulate. Exceptions are marked. Shapes use B (batch), S (sequence), H (hidden), NH (heads),
// HD (head dim), V (padded vocab), N = B*S rows.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace mg::cpu {

// A read-only matrix operand in f32, bf16 or f16 (a plain float* converts implicitly).
struct Mat {
  const void* data;
  DType dtype;
  Mat(const float* p) : data(p), dtype(DType::F32) {}  // NOLINT: implicit on purpose
  Mat(const void* p, DType t) : data(p), dtype(t) {}
};

// A written operand: f32, or bf16/f16 storage into which an op rounds its fp32 results (round
// to nearest even, the values cast_from_f32 gives), so a 16-bit activation needs no f32 copy
// and no separate rounding pass.
struct MatOut {
  void* data;
  DType dtype;
  MatOut(float* p) : data(p), dtype(DType::F32) {}  // NOLINT: implicit on purpose
  MatOut(void* p, DType t) : data(p), dtype(t) {}
};

// How a backward writes an input gradient: added into it (the convention above) or stored
// (Set), which spares the caller a zeroing pass and the GPU the read of those zeros.
enum class GradWrite { Add, Set };

// Conversions between f32 and 16-bit storage, round-to-nearest-even (bf16: NaN kept quiet;
// f16: values beyond 65504 become +-inf, as a GPU's cast does).
void cast_from_f32(void* dst, DType dst_dtype, const float* src, int64_t n);
void cast_to_f32(float* dst, const void* src, DType src_dtype, int64_t n);
// Stores x in dst's dtype and replaces x by the stored (rounded) value, so an op that goes on
// with x computes on exactly what a 16-bit pipeline would have kept. No-op copy for f32.
void store_rounded(void* dst, DType dst_dtype, float* x, int64_t n);
// True when any element is inf or NaN.
bool has_inf_or_nan(const float* x, int64_t n);

// C[M,N] (= or +=) op(A) op(B) with 16-bit A and B of the same dtype and fp32 accumulation
// (oneDNN matmul; where the CPU has no such kernel, e.g. f16 without AVX512_FP16, the
// operands are widened to f32 and go through sgemm).
void gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Mat A, int64_t lda,
               Mat B, int64_t ldb, bool accumulate, float* C, int64_t ldc);
// Whether gemm_lowp runs natively in dtype on this CPU (reported by benchmarks and logs).
bool native_lowp_gemm(DType dtype);

// C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is [M,K] (A^T stored [K,M] when trans_a).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// out[N,OUT] = inp[N,IN] W[OUT,IN]^T + bias[OUT] (bias may be null). Megatron's weight layout.
// inp and weight share one dtype; bias is f32; out is f32, or 16-bit: the fp32 sum plus the bias
// rounded to out's dtype (a 16-bit model's biases are 16-bit values already), rounded once.
void linear_forward(MatOut out, Mat inp, Mat weight, const float* bias, int64_t N, int64_t IN,
                    int64_t OUT);
// out[N,OUT] = residual + (inp W^T + bias), f32: a linear layer whose output joins the residual
// stream (a row-parallel layer on one tensor-parallel rank). The CPU runs the GEMM, the bias
// add and the residual add in turn; the GPU one GEMM whose epilogue adds both.
void linear_residual_forward(float* out, Mat inp, Mat weight, const float* bias,
                             const float* residual, int64_t N, int64_t IN, int64_t OUT);
// dinp += dout W (= with GradWrite::Set); dweight += dout^T inp; dbias += colsum(dout).
// dinp/dbias may be null.
// With 16-bit inp/weight, dout is rounded to that dtype for the GEMMs (as a 16-bit backward
// would hold it); dbias sums the f32 dout; dinp and dweight (the main grad) stay f32.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, Mat inp,
                     Mat weight, int64_t N, int64_t IN, int64_t OUT,
                     GradWrite dinp_write = GradWrite::Add);

// out[n,:] (= or +=) table[ids[n] - row_begin,:] for ids in [row_begin, row_end); rows whose id
// falls outside get 0 (or nothing when accumulating). The table holds rows [row_begin, row_end)
// of a (possibly vocab-parallel) embedding.
void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate);
// dtable[ids[n] - row_begin,:] += dout[n,:] for ids in range.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H);

// out[n,:] += bias; dbias += column sums of dout.
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);

// LayerNorm over the last dim C, eps as given; saves mean[N], rstd[N] for backward. out is f32
// or 16-bit (rounded at the store).
void layernorm_forward(MatOut out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// out = GELU(inp), computed in fp32 from inp as stored; either may be 16-bit (rounded once).
void gelu_forward(MatOut out, Mat inp, int64_t n);
// inp: the forward's input, f32 or as a 16-bit model stored it.
void gelu_backward(float* dinp, Mat inp, const float* dout, int64_t n,
                   GradWrite write = GradWrite::Add);

// out = a + b
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);

// Causal multi-head self-attention core on Megatron's sequence-first layout and interleaved
// QKV rows: qkv[S,B,NH,3,HD] (per head: q, k, v), out[S,B,NH*HD] = softmax(q k^T / sqrt(HD)
// with the causal mask) v. Flash-style: tiled over queries and keys with an online softmax;
// only lse[B,NH,S] (the log-sum-exp of each row's scores) is saved, no S x S tensor.
// seg_start (B, S) may be null; else position t of row b attends only to [seg_start, t]
// (Megatron's --reset-attention-mask: no attention across an EOD). qkv and out are f32 or, in a
// 16-bit model, that dtype (widened on load, rounded at the store); the CPU computes in fp32.
void attention_forward(MatOut out, float* lse, Mat qkv, int64_t B, int64_t S, int64_t NH,
                       int64_t HD, const int32_t* seg_start = nullptr);
// dqkv += ...; recomputes the probabilities from qkv and lse; needs the forward's out.
void attention_backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse,
                        int64_t B, int64_t S, int64_t NH, int64_t HD,
                        const int32_t* seg_start = nullptr, GradWrite write = GradWrite::Add);

// Fused softmax + cross-entropy over V logits per row: losses[n] = logsumexp(logits[n]) -
// logits[n, targets[n]]; lse[n] saved. targets[n] < 0 means "ignore": loss 0.
void cross_entropy_forward(float* losses, float* lse, const float* logits,
                           const int32_t* targets, int64_t N, int64_t V);
// The pieces a vocab-parallel cross-entropy combines across ranks, on a shard holding vocab
// columns [v_begin, v_begin + V): row maxima, sums of exp(logit - shift[n]), and the target
// logit where this shard owns the target (0 elsewhere).
void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V);
void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V);
void cross_entropy_target_logit(float* target_logit, const float* logits,
                                const int32_t* targets, int64_t v_begin, int64_t N, int64_t V);
// The last step of a (vocab-parallel) cross-entropy, once the pieces above are reduced over
// the shards: lse[n] = row_max[n] + log(sum_exp[n]); on entry losses holds the target logits,
// on return losses[n] = lse[n] - target (0 where targets[n] < 0). lse may alias row_max.
void cross_entropy_combine(float* losses, float* lse, const float* row_max,
                           const float* sum_exp, const int32_t* targets, int64_t N);
// dlogits[n,:] = dlosses[n] * (softmax(logits[n]) - onehot(targets[n] - v_begin)), with
// softmax = exp(logit - lse[n]). OVERWRITES dlogits, which may alias logits (the logits are not
// needed after their gradient is formed).
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V);

// AdamW (decoupled weight decay, torch.optim.AdamW's formula) on n elements, step t >= 1:
// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
// g is grad * clip (the global-norm clip factor, rounded as a stored clipped grad would be), so
// clipping costs no pass of its own; the grad buffer is left as it was.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float clip = 1.0f);

// SGD with momentum (torch.optim.SGD, no dampening): g += wd p; buf = g (t = 1) or
// momentum buf + g; p -= lr buf.
void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip = 1.0f);

// *acc += sum(losses * mask) / mask_sum over n elements, summed in double (nothing when
// mask_sum is 0): a micro-batch's masked mean loss added to an iteration's running sum.
void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum);

// Sum of squares in double (for the global grad norm), and in-place scaling.
double sum_squares(const float* x, int64_t n);
// Elements [offset, offset + n) of a flat buffer.
struct Range {
  int64_t offset, n;
};
// The sum over ranges[0..k) of sum_squares(x + offset, n), added in that order: a grad norm's
// local part in one call (on the GPU one download in all, not one per range).
double sum_squares_ranges(const float* x, const Range* ranges, int64_t k);
void scale_inplace(float* x, float s, int64_t n);

}  // namespace mg::cpu
