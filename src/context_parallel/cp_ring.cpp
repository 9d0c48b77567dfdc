// Ring attention (--cp-comm-type p2p), Megatron's load-balanced variant: the visiting K/V block
// meets each local query chunk chunk by chunk; a pair runs one ops::attention_forward /
// backward at its chunks' global positions (the kernel masks by position), a pair wholly in the
// causal future is skipped. Partial results merge by their log-sum-exp (cp_attention.h).
// The travelling block is one byte buffer [K | V] in the dtype (+ [dK | dV] in f32 backward),
// sent as one message; exchanges are blocking batch_isend_irecv calls between the steps.
#include "context_parallel/cp_ring.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "context_parallel/cp_buffers.h"
#include "core/error.h"

namespace mg::cp {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The geometry both directions share.
struct Ring {
  CpLayout l;
  int64_t B, NH, NKV, HD, c, rows;                            // rows: S_local * B
  size_t e;                                                   // bytes per q/k/v element
  int64_t kv() const { return rows * NKV * HD; }              // elements of one K or V block
  int64_t kv_bytes() const { return 2 * kv() * int64_t(e); }  // [K | V]
  int next() const { return (l.rank + 1) % l.size; }
  int prev() const { return (l.rank + l.size - 1) % l.size; }
  int owner(int step) const { return (l.rank - step + l.size) % l.size; }
};

Ring ring(const CpAttention& cp, const ops::AttentionShape& a, DType t) {
  const CpLayout l = cp_layout(cp, a.Sq);
  return {l, a.B, a.NH, a.NKV, a.HD, l.chunk(), a.Sq * a.B, dtype_size(t)};
}

// The shape of the pair (local query chunk qh, chunk kh of the block of rank `owner`), or false
// when every key of it is in the queries' causal future.
bool pair_shape(ops::AttentionShape& p, const Ring& r, const ops::AttentionShape& a, int qh,
                int owner, int kh) {
  const int64_t qi = r.l.chunk_index(qh), ki = CpLayout{r.l.size, owner, r.l.S}.chunk_index(kh);
  if (ki > qi) return false;
  p = a;
  p.Sq = p.Sk = r.c;
  p.q_pos0 = qi * r.c;
  p.k_pos0 = ki * r.c;
  return true;
}

// The first row (t*B + b) of local chunk `half`.
int64_t first_row(const Ring& r, int half) { return half * r.c * r.B; }

// Sends the block to the next rank and receives the previous rank's into `into` (bytes each).
void pass_on(Communicator& comm, const Ring& r, std::vector<float>& block, std::vector<float>& into,
             int64_t bytes) {
  comm.batch_isend_irecv(
      {{true, block.data(), bytes / 4, r.next()}, {false, into.data(), bytes / 4, r.prev()}});
}

// Merges a pair's (o_p, lse_p) of local chunk `half` into the running (acc, m):
// lse = log(exp(m) + exp(lse_p)), acc = acc exp(m - lse) + o_p exp(lse_p - lse).
void merge(std::vector<float>& acc, float* m, const Ring& r, int half, const float* o_p,
           const float* lse_p) {
  const int64_t H = r.NH * r.HD;
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t h = 0; h < r.NH; ++h)
      for (int64_t t = 0; t < r.c; ++t) {
        const float lp = lse_p[(b * r.NH + h) * r.c + t];
        if (lp == kNegInf) continue;  // no visible key in this pair
        const int64_t tl = half * r.c + t;
        float& lm = m[(b * r.NH + h) * r.l.local_length() + tl];
        const float hi = std::max(lm, lp), lo = std::min(lm, lp);
        const float lse = lo == kNegInf ? hi : hi + std::log1p(std::exp(lo - hi));
        const float wa = lm == kNegInf ? 0.f : std::exp(lm - lse), wb = std::exp(lp - lse);
        float* o = acc.data() + (tl * r.B + b) * H + h * r.HD;
        const float* p = o_p + (t * r.B + b) * H + h * r.HD;
        for (int64_t i = 0; i < r.HD; ++i) o[i] = o[i] * wa + p[i] * wb;
        lm = lse;
      }
}

}  // namespace

void ring_attention_forward(const CpAttention& cp, ops::MatOut out, float* lse, const ops::Heads& q,
                            const ops::Heads& k, const ops::Heads& v, const ops::AttentionShape& a,
                            const int32_t* seg_start) {
  const Ring r = ring(cp, a, q.dtype);
  const DType t = q.dtype;
  std::vector<float> block = byte_buffer(r.kv_bytes()), next = byte_buffer(r.kv_bytes());
  copy_heads(block.data(), k, r.rows, 0, r.NKV, r.HD);
  copy_heads(reinterpret_cast<char*>(block.data()) + r.kv() * r.e, v, r.rows, 0, r.NKV, r.HD);
  std::vector<float> acc(size_t(r.rows * r.NH * r.HD), 0.f), lse_p(size_t(r.B * r.NH * r.c));
  std::vector<float> o_p(size_t(r.c * r.B * r.NH * r.HD));
  std::vector<float> o_stored = byte_buffer(int64_t(o_p.size() * r.e));
  std::fill(lse, lse + r.B * r.NH * r.l.local_length(), kNegInf);
  std::vector<int32_t> seg[2];
  if (seg_start)
    for (int h = 0; h < 2; ++h) seg[h] = half_columns(seg_start, r.B, r.l.local_length(), h);
  for (int step = 0; step < r.l.size; ++step) {
    const ops::Heads kb = contiguous_heads(block.data(), t, r.NKV, r.HD);
    const ops::Heads vb = kb.shifted(r.kv());
    for (int qh = 0; qh < 2; ++qh)
      for (int kh = 0; kh < 2; ++kh) {
        ops::AttentionShape p;
        if (!pair_shape(p, r, a, qh, r.owner(step), kh)) continue;
        const int64_t qoff = first_row(r, qh), koff = first_row(r, kh) * r.NKV * r.HD;
        // The kernel stores out in the operands' dtype: the merge reads its widened values.
        ops::attention_forward(ops::MatOut(o_stored.data(), t), lse_p.data(),
                               q.shifted(qoff * q.row_stride), kb.shifted(koff), vb.shifted(koff),
                               p, seg_start ? seg[qh].data() : nullptr);
        ops::cast_to_f32(o_p.data(), o_stored.data(), t, int64_t(o_p.size()));
        merge(acc, lse, r, qh, o_p.data(), lse_p.data());
      }
    if (step + 1 < r.l.size) {
      pass_on(*cp.comm, r, block, next, r.kv_bytes());
      std::swap(block, next);
    }
  }
  ops::cast_from_f32(out.data, out.dtype, acc.data(), int64_t(acc.size()));
}

void ring_attention_backward(const CpAttention& cp, const ops::Heads& dq, const ops::Heads& dk,
                             const ops::Heads& dv, const float* dout, ops::Mat out,
                             const ops::Heads& q, const ops::Heads& k, const ops::Heads& v,
                             const float* lse, const ops::AttentionShape& a,
                             const int32_t* seg_start, ops::GradWrite write) {
  const Ring r = ring(cp, a, q.dtype);
  const DType t = q.dtype;
  // The travelling buffer: [K | V] in the dtype, then [dK | dV] in f32.
  const int64_t grad_bytes = 2 * r.kv() * 4, bytes = r.kv_bytes() + grad_bytes;
  std::vector<float> block = byte_buffer(bytes), next = byte_buffer(bytes);
  char* kv = reinterpret_cast<char*>(block.data());
  copy_heads(kv, k, r.rows, 0, r.NKV, r.HD);
  copy_heads(kv + r.kv() * r.e, v, r.rows, 0, r.NKV, r.HD);
  std::fill(block.begin() + r.kv_bytes() / 4, block.end(), 0.f);
  std::vector<float> dq_acc(size_t(r.rows * r.NH * r.HD), 0.f);
  const ops::Heads dq_all = contiguous_heads(dq_acc.data(), DType::F32, r.NH, r.HD);
  std::vector<float> lse_h[2];
  std::vector<int32_t> seg[2];
  for (int h = 0; h < 2; ++h) {
    lse_h[h] = half_columns(lse, r.B * r.NH, r.l.local_length(), h);
    if (seg_start) seg[h] = half_columns(seg_start, r.B, r.l.local_length(), h);
  }
  const int64_t H = r.NH * r.HD;
  for (int step = 0; step < r.l.size; ++step) {
    char* base = reinterpret_cast<char*>(block.data());
    const ops::Heads kb = contiguous_heads(base, t, r.NKV, r.HD), vb = kb.shifted(r.kv());
    const ops::Heads dkb = contiguous_heads(base + r.kv_bytes(), DType::F32, r.NKV, r.HD);
    const ops::Heads dvb = dkb.shifted(r.kv());
    for (int qh = 0; qh < 2; ++qh)
      for (int kh = 0; kh < 2; ++kh) {
        ops::AttentionShape p;
        if (!pair_shape(p, r, a, qh, r.owner(step), kh)) continue;
        const int64_t qrow = first_row(r, qh), koff = first_row(r, kh) * r.NKV * r.HD;
        const ops::Mat out_q(static_cast<const char*>(out.data) + qrow * H * r.e, out.dtype);
        ops::attention_backward(dq_all.shifted(qrow * H), dkb.shifted(koff), dvb.shifted(koff),
                                dout + qrow * H, out_q, q.shifted(qrow * q.row_stride),
                                kb.shifted(koff), vb.shifted(koff), lse_h[qh].data(), p,
                                seg_start ? seg[qh].data() : nullptr, ops::GradWrite::Add);
      }
    if (step + 1 < r.l.size) {
      pass_on(*cp.comm, r, block, next, bytes);
      std::swap(block, next);
    }
  }
  // The block in hand is the next rank's: one more hop takes each dK/dV home (the K/V stay).
  std::vector<float> grads(size_t(grad_bytes / 4)), mine(size_t(grad_bytes / 4));
  std::copy(block.begin() + r.kv_bytes() / 4, block.end(), grads.begin());
  if (r.l.size > 1) pass_on(*cp.comm, r, grads, mine, grad_bytes);
  else mine = grads;
  write_heads(dq, dq_acc.data(), r.rows, r.NH, r.HD, write);
  write_heads(dk, mine.data(), r.rows, r.NKV, r.HD, write);
  write_heads(dv, mine.data() + r.kv(), r.rows, r.NKV, r.HD, write);
}

}  // namespace mg::cp
