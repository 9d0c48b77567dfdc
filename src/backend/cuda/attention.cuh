// Shared by the two CUDA attention implementations: the f32 reference kernels (attention.cu)
// and the tensor-core kernels for 16-bit models (attention_tc.cu). Layout as the CPU op
// (backend/ops.h): q, k, v (and dq, dk, dv) are head views into row-major activations, query
// row t*B + b for t < Sq, key row t*B + b for t < Sk; out (Sq*B, NH*HD) contiguous; lse and
// D = rowsum(dO O) (B, NH, Sq); seg_start (B, Sq). Query head h reads KV head h / (NH/NKV).
#pragma once
#include <cstdint>

#include "backend/cuda/heads.cuh"
#include "backend/ops.h"
#include "core/dropout_mask.h"
#include "tensor/dtype.h"

namespace mg::cuda::attn {

// One call's shape (cpu::AttentionShape) and the strides of its views (dq, dk, dv in backward).
struct Geometry {
  int64_t B, Sq, Sk, NH, NKV, HD, q_pos0, k_pos0;
  bool causal;
  HeadView q, k, v, dq, dk, dv;
  AttentionDropout drop;  // attention-probability dropout (every kernel applies it)

  __host__ __device__ int64_t group() const { return NH / NKV; }  // query heads per KV head
  // Element offsets: query t of (batch b, query head h); key/value j of (b, KV head g); the
  // output row of query t; the lse/D entry of query t.
  __device__ int64_t q_at(int64_t b, int64_t h, int64_t t) const { return q.at(t * B + b, h, HD); }
  __device__ int64_t k_at(int64_t b, int64_t g, int64_t j) const { return k.at(j * B + b, g, HD); }
  __device__ int64_t v_at(int64_t b, int64_t g, int64_t j) const { return v.at(j * B + b, g, HD); }
  __device__ int64_t out_at(int64_t b, int64_t h, int64_t t) const {
    return (t * B + b) * NH * HD + h * HD;
  }
  __device__ int64_t stat_at(int64_t b, int64_t h, int64_t t) const {
    return (b * NH + h) * Sq + t;
  }
  // Query t sees key j: causal by absolute position, and not before the query's segment start
  // (seg: this batch's row of seg_start, or null). Callers check t < Sq and j < Sk.
  __device__ bool visible(int64_t t, int64_t j, const int32_t* seg) const {
    const int64_t kp = k_pos0 + j;
    return (!causal || kp <= q_pos0 + t) && (!seg || kp >= seg[t]);
  }
  // The dropout factor (0 or 1/(1-p); 1 without dropout) of query t of (b, h) against key j:
  // the mask core/dropout_mask.h defines, so the CPU and the GPU drop the same elements.
  __device__ float drop_factor(int64_t b, int64_t h, int64_t t, int64_t j) const {
    if (!drop.active()) return 1.f;
    return dropout_factor(drop.key, drop.sample0 + b, drop.head0 + h, q_pos0 + t, k_pos0 + j);
  }
  // Queries [.., t_end) see no key at or past key_end(t_end) (causal); [0, Sk) otherwise.
  __device__ int64_t key_end(int64_t t_end) const {
    if (!causal) return Sk;
    const int64_t e = q_pos0 + t_end - k_pos0;
    return e < 0 ? 0 : (e > Sk ? Sk : e);
  }
  // Keys [j0, ..) are seen by no query before query_begin(j0) (causal); 0 otherwise.
  __device__ int64_t query_begin(int64_t j0) const {
    if (!causal) return 0;
    const int64_t t = k_pos0 + j0 - q_pos0;
    return t < 0 ? 0 : (t > Sq ? Sq : t);
  }
};

inline Geometry geometry(const cpu::AttentionShape& a, const cpu::Heads& q, const cpu::Heads& k,
                         const cpu::Heads& v) {
  const HeadView none{0, 0, 1};
  return {a.B, a.Sq, a.Sk, a.NH, a.NKV, a.HD, a.q_pos0, a.k_pos0, a.causal,
          head_view(q), head_view(k), head_view(v), none, none, none, a.dropout};
}

// Typed operand pointers (T: float, or the 16-bit storage type) and the f32 gradients.
template <typename T>
struct QKV {
  const T *q, *k, *v;
};
struct Grads {
  float *dq, *dk, *dv;
};

// The tensor-core kernels (attention_tc.cu): q/k/v and out stored in `operands` (BF16 or F16),
// q, k, v, dO and the probabilities on the tensor cores in that dtype, scores, softmax and
// every sum in fp32. HD 32, 64 or 128.
bool tc_supported(int64_t HD, DType operands);
void tc_forward(void* out, float* lse, QKV<void> x, const Geometry& g, DType operands,
                const int32_t* seg_start);
// dq, dk, dv += the gradient (= with set); D[b, h, t] = rowsum(dO * O), computed by the caller.
void tc_backward(Grads d, const float* dout, QKV<void> x, const float* lse, const float* D,
                 const Geometry& g, DType operands, const int32_t* seg_start, bool set);

}  // namespace mg::cuda::attn
