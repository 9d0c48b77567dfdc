// Attention core, flash-style (Dao et al. 2022) on the CPU, for multi-head and grouped-query
// attention (query head h reads key/value head h / (NH/NKV)), causal or not, with query and key
// positions offset (a KV cache, context parallelism). Queries in blocks of kRows rows, keys/values
// in chunks of up to kCols columns that end at the block's last visible key and start at the
// earliest segment start among its rows, so nothing wholly masked is computed. Forward: one
// (batch, head) pair per task; a running row maximum m and sum l (online softmax) rescale the
// output accumulator when m grows; it stores O and the log-sum-exp m + log(l) per row, never
// the Sq x Sk probabilities. A query that sees no key gets O = 0 and lse = -inf.
// Backward: one (batch, kv head) pair per task, so each dK/dV head has one writer; it loops over
// the group's query heads, recomputes each chunk's P = exp(Q K^T / sqrt(HD) - lse) from the
// saved lse and applies dV += P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ += dS K / sqrt(HD),
// dK += dS^T Q / sqrt(HD), accumulating dK, dV over the group in panels written once at the end.
// A task first copies its heads' Q, K, V (and dO) out of the strided rows into contiguous
// S x HD panels: in place the row stride of a fused QKV buffer (B*3*NH*HD floats for GPT-2) is a
// multiple of 4 KiB, so every row would fall into the same few L1 sets. The chunk GEMMs run
// single-threaded inside the task (oneDNN does not nest inside an OpenMP region).
// Wide key chunks keep the GEMMs few and large: at S = 256 a query block needs one chunk. Each
// thread's scratch (the panels, two kRows x kCols tiles, the accumulator, the row statistics)
// is reused across calls, so the steady state allocates nothing.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/half.h"
#include "backend/cpu/vec_math.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {

constexpr int64_t kRows = kAttentionQueryBlock;
constexpr int64_t kCols = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scratch {
  std::vector<float> s, dp, acc, m, l, d, drop;  // drop: a row's dropout factors (kCols)
  std::vector<float> q, k, v, dout, dq, dk, dv;  // S x HD panels of one (batch, head)
  void reserve(int64_t HD, int64_t S) {
    const auto grow = [](std::vector<float>& x, int64_t n) {
      if (x.size() < size_t(n)) x.resize(size_t(n));
    };
    grow(s, kRows * kCols);
    grow(dp, kRows * kCols);
    grow(acc, kRows * HD);
    grow(m, kRows);
    grow(l, kRows);
    grow(d, S);
    grow(drop, kCols);
    for (auto* x : {&q, &k, &v, &dout, &dq, &dk, &dv}) grow(*x, S * HD);
  }
};

// panel[t] = src[off + t * ld] for t < S, HD values each, widened to f32 (src f32 or 16-bit).
void pack(float* panel, Mat src, int64_t off, int64_t ld, int64_t S, int64_t HD) {
  if (src.dtype == DType::F32) {
    const float* x = static_cast<const float*>(src.data) + off;
    for (int64_t t = 0; t < S; ++t) std::copy(x + t * ld, x + t * ld + HD, panel + t * HD);
    return;
  }
  const uint16_t* x = static_cast<const uint16_t*>(src.data) + off;
  const bool bf16 = src.dtype == DType::BF16;
  for (int64_t t = 0; t < S; ++t) {
    const uint16_t* r = x + t * ld;
    float* p = panel + t * HD;
    if (bf16)
      for (int64_t e = 0; e < HD; ++e) p[e] = f32_from_bf16(r[e]);
    else
      for (int64_t e = 0; e < HD; ++e) p[e] = f32_from_f16(r[e]);
  }
}

// The S x HD panel of head h of sample b (rows t*B + b).
void pack_head(float* panel, const Heads& x, int64_t b, int64_t h, int64_t B, int64_t S,
               int64_t HD) {
  pack(panel, Mat(x.data, x.dtype), x.offset(b, h, HD), B * x.row_stride, S, HD);
}

// Head h of sample b (+)= panel: each element of the f32 view written once.
void unpack_head(const Heads& dst, int64_t b, int64_t h, int64_t B, int64_t S, int64_t HD,
                 const float* panel, GradWrite write) {
  float* x = static_cast<float*>(dst.data) + dst.offset(b, h, HD);
  const int64_t ld = B * dst.row_stride;
  for (int64_t t = 0; t < S; ++t) {
    if (write == GradWrite::Set) std::copy(panel + t * HD, panel + (t + 1) * HD, x + t * ld);
    else
      for (int64_t e = 0; e < HD; ++e) x[t * ld + e] += panel[t * HD + e];
  }
}

Scratch& thread_scratch(int64_t HD, int64_t S) {
  thread_local Scratch w;
  w.reserve(HD, S);
  return w;
}

// The keys query t of one sample sees: indices [lo(t), hi(t)), clamped to [0, Sk) by the
// callers. Query t sits at key index t + shift (shift = q_pos0 - k_pos0); a segment start is an
// absolute position.
struct KeyRange {
  const int32_t* seg;  // (Sq) this sample's segment starts, or null
  int64_t k_pos0, shift, Sk;
  bool causal;
  int64_t lo(int64_t t) const { return seg ? seg[t] - k_pos0 : 0; }
  int64_t hi(int64_t t) const { return causal ? t + shift + 1 : Sk; }
  // The key chunks of query rows [t0, t0 + nr) cover [first(..), end(..)): from the earliest
  // segment start among them to the last row's last key (hi grows with t).
  int64_t first(int64_t t0, int64_t nr) const {
    if (!seg) return 0;
    int64_t m = lo(t0);
    for (int64_t r = 1; r < nr; ++r) m = std::min(m, lo(t0 + r));
    return std::max<int64_t>(m, 0);
  }
  int64_t end(int64_t t0, int64_t nr) const { return std::min(hi(t0 + nr - 1), Sk); }
};

KeyRange key_range(const AttentionShape& a, const int32_t* seg_start, int64_t b) {
  return {seg_start ? seg_start + b * a.Sq : nullptr, a.k_pos0, a.q_pos0 - a.k_pos0, a.Sk,
          a.causal};
}

// Scores of query rows [t0, t0 + nr) against key columns [c0, c0 + nc), scaled, with -inf where
// a row does not see the key (row stride kCols).
void chunk_scores(float* s, const float* q, const float* k, int64_t ld, int64_t t0, int64_t nr,
                  int64_t c0, int64_t nc, int64_t HD, float scale, const KeyRange& keys) {
  gemm(false, true, nr, nc, HD, scale, q + t0 * ld, ld, k + c0 * ld, ld, 0.0f, s, kCols);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t t = t0 + r;
    const int64_t lo = std::clamp<int64_t>(keys.lo(t) - c0, 0, nc);
    const int64_t hi = std::clamp<int64_t>(keys.hi(t) - c0, lo, nc);  // visible: [lo, hi)
    float* row = s + r * kCols;
    std::fill(row, row + lo, kNegInf);
    std::fill(row + hi, row + nc, kNegInf);
  }
}

// out[off + e] = acc[e] * inv for e < HD, rounded when out is 16-bit.
void store_row(MatOut out, int64_t off, const float* acc, float inv, int64_t HD) {
  if (out.dtype == DType::F32) {
    float* o = static_cast<float*>(out.data) + off;
    for (int64_t e = 0; e < HD; ++e) o[e] = acc[e] * inv;
    return;
  }
  uint16_t* o = static_cast<uint16_t*>(out.data) + off;
  const bool bf16 = out.dtype == DType::BF16;
  for (int64_t e = 0; e < HD; ++e)
    o[e] = bf16 ? bf16_from_f32(acc[e] * inv) : f16_from_f32(acc[e] * inv);
}

void check_shape(const AttentionShape& a) {
  MG_CHECK(a.B >= 0 && a.Sq >= 0 && a.Sk >= 0 && a.HD > 0, "attention shape B ", a.B, " Sq ", a.Sq,
           " Sk ", a.Sk, " HD ", a.HD);
  MG_CHECK(a.NKV > 0 && a.NH % a.NKV == 0, "attention needs NH (", a.NH, ") a multiple of NKV (",
           a.NKV, ")");
}

// Attention dropout: f[c] = the mask factor of query t (of sample b, local head h) against key
// c0 + c, c < nc; drop_row multiplies a chunk's row by them.
void row_factors(float* f, const AttentionShape& a, int64_t b, int64_t h, int64_t t, int64_t c0,
                 int64_t nc) {
  const AttentionDropout& d = a.dropout;
  dropout_factors(f, d.key, d.sample0 + b, d.head0 + h, a.q_pos0 + t, a.k_pos0 + c0, nc);
}
void drop_row(float* row, float* f, const AttentionShape& a, int64_t b, int64_t h, int64_t t,
              int64_t c0, int64_t nc) {
  row_factors(f, a, b, h, t, c0, nc);
  for (int64_t c = 0; c < nc; ++c) row[c] *= f[c];
}

}  // namespace

void attention_forward(MatOut out, float* lse, const Heads& q_heads, const Heads& k_heads,
                       const Heads& v_heads, const AttentionShape& a, const int32_t* seg_start) {
  timers::Scope timer(timers::kAttention);
  check_shape(a);
  for (const Heads* x : {&q_heads, &k_heads, &v_heads})
    MG_CHECK(x->dtype == out.dtype, "attention out in ", dtype_name(out.dtype), " but q/k/v in ",
             dtype_name(x->dtype));
  const int64_t B = a.B, Sq = a.Sq, Sk = a.Sk, NH = a.NH, HD = a.HD, group = a.NH / a.NKV;
  const int64_t H = NH * HD, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Scratch& w = thread_scratch(HD, std::max(Sq, Sk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      pack_head(w.q.data(), q_heads, b, h, B, Sq, HD);
      pack_head(w.k.data(), k_heads, b, h / group, B, Sk, HD);
      pack_head(w.v.data(), v_heads, b, h / group, B, Sk, HD);
      const float *q = w.q.data(), *k = w.k.data(), *v = w.v.data();
      const KeyRange keys = key_range(a, seg_start, b);
      for (int64_t t0 = 0; t0 < Sq; t0 += kRows) {
        const int64_t nr = std::min(kRows, Sq - t0), end = keys.end(t0, nr);
        std::fill(w.m.begin(), w.m.end(), kNegInf);
        std::fill(w.l.begin(), w.l.end(), 0.f);
        std::fill(w.acc.begin(), w.acc.end(), 0.f);
        for (int64_t c0 = keys.first(t0, nr); c0 < end; c0 += kCols) {
          const int64_t nc = std::min(kCols, end - c0);
          chunk_scores(w.s.data(), q, k, HD, t0, nr, c0, nc, HD, scale, keys);
          for (int64_t r = 0; r < nr; ++r) {
            float* row = w.s.data() + r * kCols;
            const float mx = std::max(w.m[r], row_max(row, nc));
            if (mx == kNegInf) {  // nothing visible yet in this row
              std::fill(row, row + nc, 0.f);
              continue;
            }
            const float corr = w.m[r] == kNegInf ? 0.f : std::exp(w.m[r] - mx);
            const float sum = exp_shifted_sum(row, row, mx, nc);  // exp(-inf) = 0 when masked
            w.l[r] = w.l[r] * corr + sum;
            w.m[r] = mx;
            // Dropout after the normalizer's sum: l counts every probability, V sees the kept.
            if (a.dropout.active()) drop_row(row, w.drop.data(), a, b, h, t0 + r, c0, nc);
            if (corr != 1.f) {
              float* acc = w.acc.data() + r * HD;
              for (int64_t e = 0; e < HD; ++e) acc[e] *= corr;
            }
          }
          gemm(false, false, nr, HD, nc, 1.0f, w.s.data(), kCols, v + c0 * HD, HD, 1.0f,
               w.acc.data(), HD);
        }
        for (int64_t r = 0; r < nr; ++r) {
          const float inv = w.l[r] > 0.f ? 1.0f / w.l[r] : 0.f;  // l = 0: no key seen, O = 0
          store_row(out, (t0 + r) * ld_out + b * H + h * HD, w.acc.data() + r * HD, inv, HD);
          lse[bh * Sq + t0 + r] = w.m[r] + std::log(w.l[r]);
        }
      }
    }
  }
}

void attention_backward(const Heads& dq_heads, const Heads& dk_heads, const Heads& dv_heads,
                        const float* dout, Mat out, const Heads& q_heads, const Heads& k_heads,
                        const Heads& v_heads, const float* lse, const AttentionShape& a,
                        const int32_t* seg_start, GradWrite write) {
  timers::Scope timer(timers::kAttention);
  check_shape(a);
  for (const Heads* x : {&dq_heads, &dk_heads, &dv_heads})
    MG_CHECK(x->dtype == DType::F32, "attention gradients in ", dtype_name(x->dtype), ", not f32");
  const int64_t B = a.B, Sq = a.Sq, Sk = a.Sk, NH = a.NH, NKV = a.NKV, HD = a.HD;
  const int64_t group = NH / NKV, H = NH * HD, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Scratch& w = thread_scratch(HD, std::max(Sq, Sk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < B * NKV; ++bg) {
      const int64_t b = bg / NKV, g = bg % NKV;
      pack_head(w.k.data(), k_heads, b, g, B, Sk, HD);
      pack_head(w.v.data(), v_heads, b, g, B, Sk, HD);
      const float *k = w.k.data(), *v = w.v.data(), *q = w.q.data(), *dO = w.dout.data();
      float *dq = w.dq.data(), *dk = w.dk.data(), *dv = w.dv.data();
      std::fill(dk, dk + Sk * HD, 0.f);
      std::fill(dv, dv + Sk * HD, 0.f);
      const KeyRange keys = key_range(a, seg_start, b);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        pack_head(w.q.data(), q_heads, b, h, B, Sq, HD);
        pack(w.dout.data(), dout, b * H + h * HD, ld_out, Sq, HD);
        const float* L = lse + (b * NH + h) * Sq;
        float* D = w.d.data();  // rowsum(dO * O), O widened into the dq panel (still unused)
        pack(dq, out, b * H + h * HD, ld_out, Sq, HD);
        for (int64_t t = 0; t < Sq; ++t) {
          float d = 0.f;
          for (int64_t e = 0; e < HD; ++e) d += dO[t * HD + e] * dq[t * HD + e];
          D[t] = d;
        }
        std::fill(dq, dq + Sq * HD, 0.f);
        for (int64_t t0 = 0; t0 < Sq; t0 += kRows) {
          const int64_t nr = std::min(kRows, Sq - t0), end = keys.end(t0, nr);
          for (int64_t c0 = keys.first(t0, nr); c0 < end; c0 += kCols) {
            const int64_t nc = std::min(kCols, end - c0);
            float* p = w.s.data();
            chunk_scores(p, q, k, HD, t0, nr, c0, nc, HD, scale, keys);
            for (int64_t r = 0; r < nr; ++r) {
              float* pr = p + r * kCols;
              if (L[t0 + r] == kNegInf)  // a row that sees no key: P = 0, not exp(-inf + inf)
                std::fill(pr, pr + nc, 0.f);
              else exp_shifted(pr, pr, L[t0 + r], nc);
            }
            float* ds = w.dp.data();
            if (!a.dropout.active()) {
              // dV[c0:] += P^T dO[t0:]
              gemm(true, false, nc, HD, nr, 1.0f, p, kCols, dO + t0 * HD, HD, 1.0f, dv + c0 * HD,
                   HD);
              // dP = dO V^T, then dS = P (dP - D) in place
              gemm(false, true, nr, nc, HD, 1.0f, dO + t0 * HD, HD, v + c0 * HD, HD, 0.0f, ds,
                   kCols);
              for (int64_t r = 0; r < nr; ++r) {
                const float dr = D[t0 + r];
                float* dsr = ds + r * kCols;
                const float* pr = p + r * kCols;
                for (int64_t c = 0; c < nc; ++c) dsr[c] = pr[c] * (dsr[c] - dr);
              }
            } else {
              // With the mask M (factors 0 or 1/(1-p)), O = (P o M) V: dV += (P o M)^T dO and
              // dS = P o (M o (dO V^T) - D), D = rowsum(dO O) as without dropout.
              gemm(false, true, nr, nc, HD, 1.0f, dO + t0 * HD, HD, v + c0 * HD, HD, 0.0f, ds,
                   kCols);
              float* f = w.drop.data();
              for (int64_t r = 0; r < nr; ++r) {
                const float dr = D[t0 + r];
                float* dsr = ds + r * kCols;
                float* pr = p + r * kCols;
                row_factors(f, a, b, h, t0 + r, c0, nc);
                for (int64_t c = 0; c < nc; ++c) {
                  dsr[c] = pr[c] * (f[c] * dsr[c] - dr);
                  pr[c] *= f[c];
                }
              }
              gemm(true, false, nc, HD, nr, 1.0f, p, kCols, dO + t0 * HD, HD, 1.0f, dv + c0 * HD,
                   HD);
            }
            gemm(false, false, nr, HD, nc, scale, ds, kCols, k + c0 * HD, HD, 1.0f, dq + t0 * HD,
                 HD);
            gemm(true, false, nc, HD, nr, scale, ds, kCols, q + t0 * HD, HD, 1.0f, dk + c0 * HD,
                 HD);
          }
        }
        unpack_head(dq_heads, b, h, B, Sq, HD, dq, write);
      }
      unpack_head(dk_heads, b, g, B, Sk, HD, dk, write);
      unpack_head(dv_heads, b, g, B, Sk, HD, dv, write);
    }
  }
}

}  // namespace mg::cpu
