// The CPU backend's op set (backend/cpu/, always built: the oracle every CUDA kernel is tested
// against): the operand types every backend shares, the op list (backend/op_list.inc, where each
// op's contract is written), and the CPU-only GEMM entry points.
// Mixed precision (--bf16/--fp16): linear layers and embeddings also read 16-bit weights and
// inputs (Mat), accumulating in fp32; norms, softmax and activations compute in fp32.
#pragma once
#include <cstdint>

#include "core/dropout_mask.h"
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

// The geometry of one attention call. Query rows are t*B + b for t < Sq, key rows t*B + b for
// t < Sk. Query head h reads key/value head h / (NH/NKV) (grouped-query attention; NKV = NH is
// multi-head attention). Query t sits at position q_pos0 + t, key t at k_pos0 + t; with causal,
// a query sees the keys at positions <= its own (context parallelism and a KV cache shift the
// two offsets).
// The CPU kernel's causal query block: each block of this many query rows computes the keys up to
// its last row, (n + 1) / 2n of the square for n blocks.
constexpr int64_t kAttentionQueryBlock = 64;

struct AttentionShape {
  int64_t B, Sq, Sk, NH, NKV, HD;
  int64_t q_pos0 = 0, k_pos0 = 0;
  bool causal = true;
  AttentionDropout dropout{};  // attention-probability dropout (inactive by default)
};

// Elements [offset, offset + n) of a flat buffer.
struct Range {
  int64_t offset, n;
};

// C[M,N] (= or +=) op(A) op(B) with 16-bit A and B of the same dtype and fp32 accumulation
// (oneDNN matmul; where the CPU has no such kernel, e.g. f16 without AVX512_FP16, the
// operands are widened to f32 and go through sgemm).
void gemm_lowp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Mat A, int64_t lda,
               Mat B, int64_t ldb, bool accumulate, float* C, int64_t ldc);
// Whether gemm_lowp runs natively in dtype on this CPU (reported by benchmarks and logs).
bool native_lowp_gemm(DType dtype);

// C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is [M,K] (A^T stored [K,M] when trans_a).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

#include "backend/declare_ops.inc"

// The Q, K and V views of Megatron's fused QKV rows qkv[S, B, NG, NH/NG + 2, HD] (per group: its
// query heads, then k, then v) and the causal self-attention shape over them; NG = NH is GPT-2's
// interleaved [q, k, v] per head, which the two old-signature wrappers below take.
struct FusedQKV {
  Heads q, k, v;
  AttentionShape shape;
};
inline FusedQKV fused_qkv(const void* qkv, DType t, int64_t B, int64_t S, int64_t NH, int64_t NG,
                          int64_t HD) {
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

}  // namespace mg::cpu
