// Causal multi-head attention core, flash-style (Dao et al. 2022) on the CPU: one (batch, head)
// pair per task; queries in blocks of kRows rows, keys/values in chunks of up to kCols columns
// that end at the block's diagonal and start at the earliest segment start among its rows, so
// nothing wholly masked is computed. Forward keeps a running row maximum m and sum l (online
// softmax) and rescales the output accumulator when m grows; it stores O and the log-sum-exp
// m + log(l) per row, never the S x S probabilities. Backward recomputes each chunk's
// P = exp(Q K^T / sqrt(HD) - lse) from the saved lse and applies dV += P^T dO,
// dS = P (dO V^T - rowsum(dO O)), dQ += dS K / sqrt(HD), dK += dS^T Q / sqrt(HD).
// A task first copies its head's Q, K, V (and dO) out of the interleaved rows into contiguous
// S x HD panels: in place their row stride B*3*NH*HD floats is a multiple of 4 KiB, so every
// row would fall into the same few L1 sets. Backward accumulates dQ, dK, dV in panels and adds
// them into dQKV at the end. The chunk GEMMs run single-threaded inside the task (oneDNN does
// not nest inside an OpenMP region).
// Wide key chunks keep the GEMMs few and large: at S = 256 a query block needs one chunk. Each
// thread's scratch (the panels, two kRows x kCols tiles, the accumulator, the row statistics)
// is reused across calls, so the steady state allocates nothing.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/vec_math.h"
#include "backend/cpu/half.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scratch {
  std::vector<float> s, dp, acc, m, l, d;
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

// dst[t * ld] += panel[t] for t < S.
void unpack_add(float* dst, int64_t ld, const float* panel, int64_t S, int64_t HD) {
  for (int64_t t = 0; t < S; ++t)
    for (int64_t e = 0; e < HD; ++e) dst[t * ld + e] += panel[t * HD + e];
}

Scratch& thread_scratch(int64_t HD, int64_t S) {
  thread_local Scratch w;
  w.reserve(HD, S);
  return w;
}

// The first key any row of [t0, t0 + nr) may see: the earliest segment start among them.
int64_t first_key(int64_t t0, int64_t nr, const int32_t* seg) {
  if (!seg) return 0;
  int64_t lo = seg[t0];
  for (int64_t r = 1; r < nr; ++r) lo = std::min<int64_t>(lo, seg[t0 + r]);
  return lo;
}

// Scores of query rows [t0, t0 + nr) against key columns [c0, c0 + nc), scaled, with -inf where
// a key is in the future or before the row's segment start (row stride kCols).
void chunk_scores(float* s, const float* q, const float* k, int64_t ld, int64_t t0, int64_t nr,
                  int64_t c0, int64_t nc, int64_t HD, float scale, const int32_t* seg) {
  gemm(false, true, nr, nc, HD, scale, q + t0 * ld, ld, k + c0 * ld, ld, 0.0f, s, kCols);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t t = t0 + r;
    const int64_t lo = std::clamp<int64_t>((seg ? seg[t] : 0) - c0, 0, nc);
    const int64_t hi = std::clamp<int64_t>(t + 1 - c0, lo, nc);  // visible: [lo, hi)
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

}  // namespace

void attention_forward(MatOut out, float* lse, Mat qkv, int64_t B, int64_t S, int64_t NH,
                       int64_t HD, const int32_t* seg_start) {
  timers::Scope timer(timers::kAttention);
  MG_CHECK(out.dtype == qkv.dtype, "attention out in ", dtype_name(out.dtype), " but qkv in ",
           dtype_name(qkv.dtype));
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Scratch& w = thread_scratch(HD, S);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const int64_t off = b * 3 * H + h * 3 * HD;
      pack(w.q.data(), qkv, off, ld_qkv, S, HD);
      pack(w.k.data(), qkv, off + HD, ld_qkv, S, HD);
      pack(w.v.data(), qkv, off + 2 * HD, ld_qkv, S, HD);
      const float *q = w.q.data(), *k = w.k.data(), *v = w.v.data();
      const int32_t* seg = seg_start ? seg_start + b * S : nullptr;
      for (int64_t t0 = 0; t0 < S; t0 += kRows) {
        const int64_t nr = std::min(kRows, S - t0), end = t0 + nr;
        std::fill(w.m.begin(), w.m.end(), kNegInf);
        std::fill(w.l.begin(), w.l.end(), 0.f);
        std::fill(w.acc.begin(), w.acc.end(), 0.f);
        for (int64_t c0 = first_key(t0, nr, seg); c0 < end; c0 += kCols) {
          const int64_t nc = std::min(kCols, end - c0);
          chunk_scores(w.s.data(), q, k, HD, t0, nr, c0, nc, HD, scale, seg);
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
            if (corr != 1.f) {
              float* a = w.acc.data() + r * HD;
              for (int64_t e = 0; e < HD; ++e) a[e] *= corr;
            }
          }
          gemm(false, false, nr, HD, nc, 1.0f, w.s.data(), kCols, v + c0 * HD, HD, 1.0f,
               w.acc.data(), HD);
        }
        for (int64_t r = 0; r < nr; ++r) {
          const float inv = 1.0f / w.l[r];
          store_row(out, (t0 + r) * ld_out + b * H + h * HD, w.acc.data() + r * HD, inv, HD);
          lse[bh * S + t0 + r] = w.m[r] + std::log(w.l[r]);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse,
                        int64_t B, int64_t S, int64_t NH, int64_t HD, const int32_t* seg_start,
                        GradWrite write) {
  timers::Scope timer(timers::kAttention);
  if (write == GradWrite::Set) std::fill(dqkv, dqkv + S * B * 3 * NH * HD, 0.f);
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Scratch& w = thread_scratch(HD, S);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const int64_t off = b * 3 * H + h * 3 * HD;
      pack(w.q.data(), qkv, off, ld_qkv, S, HD);
      pack(w.k.data(), qkv, off + HD, ld_qkv, S, HD);
      pack(w.v.data(), qkv, off + 2 * HD, ld_qkv, S, HD);
      pack(w.dout.data(), dout, b * H + h * HD, ld_out, S, HD);
      const float *q = w.q.data(), *k = w.k.data(), *v = w.v.data(), *dO = w.dout.data();
      float *dq = w.dq.data(), *dk = w.dk.data(), *dv = w.dv.data();
      std::fill(dk, dk + S * HD, 0.f);
      std::fill(dv, dv + S * HD, 0.f);
      const int64_t o_off = b * H + h * HD;
      const float* L = lse + bh * S;
      const int32_t* seg = seg_start ? seg_start + b * S : nullptr;
      float* D = w.d.data();  // rowsum(dO * O), O widened into the dq panel (still unused)
      pack(dq, out, o_off, ld_out, S, HD);
      for (int64_t t = 0; t < S; ++t) {
        float d = 0.f;
        for (int64_t e = 0; e < HD; ++e) d += dO[t * HD + e] * dq[t * HD + e];
        D[t] = d;
      }
      std::fill(dq, dq + S * HD, 0.f);
      for (int64_t t0 = 0; t0 < S; t0 += kRows) {
        const int64_t nr = std::min(kRows, S - t0), end = t0 + nr;
        for (int64_t c0 = first_key(t0, nr, seg); c0 < end; c0 += kCols) {
          const int64_t nc = std::min(kCols, end - c0);
          float* p = w.s.data();
          chunk_scores(p, q, k, HD, t0, nr, c0, nc, HD, scale, seg);
          for (int64_t r = 0; r < nr; ++r) exp_shifted(p + r * kCols, p + r * kCols, L[t0 + r], nc);
          // dV[c0:] += P^T dO[t0:]
          gemm(true, false, nc, HD, nr, 1.0f, p, kCols, dO + t0 * HD, HD, 1.0f, dv + c0 * HD, HD);
          // dP = dO V^T, then dS = P (dP - D) in place
          float* ds = w.dp.data();
          gemm(false, true, nr, nc, HD, 1.0f, dO + t0 * HD, HD, v + c0 * HD, HD, 0.0f, ds, kCols);
          for (int64_t r = 0; r < nr; ++r) {
            const float dr = D[t0 + r];
            float* dsr = ds + r * kCols;
            const float* pr = p + r * kCols;
            for (int64_t c = 0; c < nc; ++c) dsr[c] = pr[c] * (dsr[c] - dr);
          }
          gemm(false, false, nr, HD, nc, scale, ds, kCols, k + c0 * HD, HD, 1.0f, dq + t0 * HD, HD);
          gemm(true, false, nc, HD, nr, scale, ds, kCols, q + t0 * HD, HD, 1.0f, dk + c0 * HD, HD);
        }
      }
      unpack_add(dqkv + off, ld_qkv, dq, S, HD);
      unpack_add(dqkv + off + HD, ld_qkv, dk, S, HD);
      unpack_add(dqkv + off + 2 * HD, ld_qkv, dv, S, HD);
    }
  }
}

}  // namespace mg::cpu
