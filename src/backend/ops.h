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

// RMSNorm over the last dim C: out = inp / sqrt(mean(inp^2) + eps) * weight; saves rstd[N].
// out is f32 or 16-bit (rounded at the store).
void rmsnorm_forward(MatOut out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

// SwiGLU on rows stacked [gate | up]: out[n, f] = silu(inp[n, f]) * inp[n, F + f], silu(x) =
// x sigmoid(x); inp (N, 2F), out (N, F); f32 or 16-bit (computed in fp32, rounded once).
void swiglu_forward(MatOut out, Mat inp, int64_t N, int64_t F);
// dinp (N, 2F): [dgate | dup].
void swiglu_backward(float* dinp, Mat inp, const float* dout, int64_t N, int64_t F,
                     GradWrite write = GradWrite::Add);

// Attention heads inside a row-major activation (rows are tokens, sequence-first: row = t*B +
// b): head h of row n starts at element n*row_stride + (h / heads_per_group)*group_stride +
// (h % heads_per_group)*HD of data. Megatron's fused QKV rows [NG, (NH/NG + 2), HD] give the Q
// view (heads_per_group NH/NG) and the K and V views (one head per group) of one buffer; a
// contiguous (N, NH*HD) tensor is {row_stride NH*HD, group_stride HD, heads_per_group 1}.
struct Heads {
  void* data;
  DType dtype;  // f32, or bf16/f16 in a 16-bit model (gradients are always f32)
  int64_t row_stride, group_stride, heads_per_group = 1;
  // The same view moved by `elements` (e.g. to the K heads of a fused QKV buffer).
  Heads shifted(int64_t elements) const {
    return {static_cast<char*>(data) + elements * int64_t(dtype_size(dtype)), dtype, row_stride,
            group_stride, heads_per_group};
  }
  int64_t offset(int64_t row, int64_t head, int64_t HD) const {
    return row * row_stride + (head / heads_per_group) * group_stride +
           (head % heads_per_group) * HD;
  }
};

// Copies n_heads heads of N rows between a Heads view and a contiguous buffer (N, n_heads, HD)
// (e.g. to normalize each head over its HD channels, --qk-layernorm): heads_gather widens the
// view's values to f32; heads_scatter stores src (f32 or the view's dtype) into the view,
// rounded to its dtype.
void heads_gather(float* dst, const Heads& src, int64_t N, int64_t n_heads, int64_t HD);
void heads_scatter(const Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD);

// Rotary position embedding (Su et al. 2021) in place on n_heads heads of N rows: channel pairs
// (c, c + rot_dim/2) (rotate-half, Megatron's default) or (2c, 2c + 1) (interleaved) of the
// first rot_dim channels turn by angle positions[n] * inv_freq[c], c < rot_dim/2, the angle
// formed in fp32 as Megatron and Hugging Face form it; channels past rot_dim pass unchanged.
void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);
// The transpose: rotates the f32 gradient dx (in place) by the opposite angles.
void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved);

// The geometry of one attention call. Query rows are t*B + b for t < Sq, key rows t*B + b for
// t < Sk. Query head h reads key/value head h / (NH/NKV) (grouped-query attention; NKV = NH is
// multi-head attention). Query t sits at position q_pos0 + t, key t at k_pos0 + t; with causal,
// a query sees the keys at positions <= its own (context parallelism and a KV cache shift the
// two offsets).
struct AttentionShape {
  int64_t B, Sq, Sk, NH, NKV, HD;
  int64_t q_pos0 = 0, k_pos0 = 0;
  bool causal = true;
};

// Flash-style attention core: out (Sq*B, NH*HD) contiguous = softmax(q k^T / sqrt(HD) with the
// causal mask) v; only lse (B, NH, Sq) (the log-sum-exp of each row's scores) is saved, no
// S x S tensor. seg_start (B, Sq) may be null; else query t of sample b sees only keys at
// positions >= seg_start[b*Sq + t] (Megatron's --reset-attention-mask: no attention across an
// EOD). q/k/v and out are f32 or all in a 16-bit model's dtype (widened on load, rounded at the
// store); the CPU computes in fp32.
void attention_forward(MatOut out, float* lse, const Heads& q, const Heads& k, const Heads& v,
                       const AttentionShape& a, const int32_t* seg_start = nullptr);
// dq, dk, dv (f32 views, which may share one fused buffer) receive the gradients (+=, or = with
// GradWrite::Set); recomputes the probabilities from q, k and lse; needs the forward's out.
void attention_backward(const Heads& dq, const Heads& dk, const Heads& dv, const float* dout,
                        Mat out, const Heads& q, const Heads& k, const Heads& v,
                        const float* lse, const AttentionShape& a,
                        const int32_t* seg_start = nullptr, GradWrite write = GradWrite::Add);

// GPT-2's causal multi-head case on Megatron's interleaved rows qkv[S,B,NH,3,HD] (per head: q,
// k, v), as views for the calls above.
struct FusedQKV {
  Heads q, k, v;
  AttentionShape shape;
};
inline FusedQKV fused_qkv(const void* qkv, DType t, int64_t B, int64_t S, int64_t NH,
                          int64_t NG, int64_t HD) {
  const int64_t per_group = NH / NG + 2;
  const Heads q{const_cast<void*>(qkv), t, NG * per_group * HD, per_group * HD, NH / NG};
  Heads kv = q;
  kv.heads_per_group = 1;
  return {q, kv.shifted((NH / NG) * HD), kv.shifted((NH / NG + 1) * HD), {B, S, S, NH, NG, HD}};
}
inline void attention_forward(MatOut out, float* lse, Mat qkv, int64_t B, int64_t S, int64_t NH,
                              int64_t HD, const int32_t* seg_start = nullptr) {
  const FusedQKV f = fused_qkv(qkv.data, qkv.dtype, B, S, NH, NH, HD);
  attention_forward(out, lse, f.q, f.k, f.v, f.shape, seg_start);
}
inline void attention_backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse,
                               int64_t B, int64_t S, int64_t NH, int64_t HD,
                               const int32_t* seg_start = nullptr,
                               GradWrite write = GradWrite::Add) {
  const FusedQKV f = fused_qkv(qkv.data, qkv.dtype, B, S, NH, NH, HD);
  const FusedQKV d = fused_qkv(dqkv, DType::F32, B, S, NH, NH, HD);
  attention_backward(d.q, d.k, d.v, dout, out, f.q, f.k, f.v, lse, f.shape, seg_start, write);
}

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
