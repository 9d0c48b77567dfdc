// Causal multi-head attention core, flash-style (Dao et al. 2022) on the CPU: one (batch, head)
// pair per task; queries in blocks of kBlock rows, keys/values in blocks of kBlock columns, only
// blocks on or below the diagonal (and not wholly before a row's segment start) are visited.
// Forward keeps a running row maximum m and sum l (online softmax) and rescales the output
// accumulator when m grows; it stores O and the log-sum-exp m + log(l) per row, never the S x S
// probabilities. Backward recomputes each block's P = exp(Q K^T / sqrt(HD) - lse) from the saved
// lse and applies dV += P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ += dS K / sqrt(HD),
// dK += dS^T Q / sqrt(HD). Per task the scratch is a few kBlock x kBlock tiles.
// Q, K, V are read in place from the interleaved QKV rows (row stride B*3*NH*HD) and the block
// GEMMs run single-threaded inside the task (oneDNN does not nest inside an OpenMP region).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/vec_math.h"
#include "backend/ops.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {

constexpr int64_t kBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tiles {
  std::vector<float> s, dp, acc;
  std::vector<float> m, l;
  Tiles(int64_t HD) : s(kBlock * kBlock), dp(kBlock * kBlock), acc(kBlock * HD), m(kBlock), l(kBlock) {}
};

// Scores of query rows [t0, t0 + nr) against key columns [c0, c0 + nc), scaled, with -inf where
// a key is in the future or before the row's segment start.
void block_scores(float* s, const float* q, const float* k, int64_t ld, int64_t t0, int64_t nr,
                  int64_t c0, int64_t nc, int64_t HD, float scale, const int32_t* seg) {
  gemm(false, true, nr, nc, HD, scale, q + t0 * ld, ld, k + c0 * ld, ld, 0.0f, s, kBlock);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t t = t0 + r, lo = seg ? seg[t] : 0;
    float* row = s + r * kBlock;
    for (int64_t c = 0; c < nc; ++c)
      if (c0 + c > t || c0 + c < lo) row[c] = kNegInf;
  }
}

// The key blocks a query block needs: from the earliest segment start among its rows up to
// the diagonal.
int64_t first_key_block(int64_t t0, int64_t nr, const int32_t* seg) {
  if (!seg) return 0;
  int64_t lo = seg[t0];
  for (int64_t r = 1; r < nr; ++r) lo = std::min<int64_t>(lo, seg[t0 + r]);
  return lo / kBlock;
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t S,
                       int64_t NH, int64_t HD, const int32_t* seg_start) {
  timers::Scope timer(timers::kAttention);
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Tiles w(HD);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * 3 * H + h * 3 * HD;
      const float *k = q + HD, *v = q + 2 * HD;
      const int32_t* seg = seg_start ? seg_start + b * S : nullptr;
      for (int64_t t0 = 0; t0 < S; t0 += kBlock) {
        const int64_t nr = std::min(kBlock, S - t0);
        std::fill(w.m.begin(), w.m.end(), kNegInf);
        std::fill(w.l.begin(), w.l.end(), 0.f);
        std::fill(w.acc.begin(), w.acc.end(), 0.f);
        for (int64_t jb = first_key_block(t0, nr, seg); jb * kBlock <= t0 + nr - 1; ++jb) {
          const int64_t c0 = jb * kBlock, nc = std::min(kBlock, S - c0);
          block_scores(w.s.data(), q, k, ld_qkv, t0, nr, c0, nc, HD, scale, seg);
          for (int64_t r = 0; r < nr; ++r) {
            float* row = w.s.data() + r * kBlock;
            float mx = w.m[r];
            for (int64_t c = 0; c < nc; ++c) mx = std::max(mx, row[c]);
            if (mx == kNegInf) {  // nothing visible yet in this row
              for (int64_t c = 0; c < nc; ++c) row[c] = 0.f;
              continue;
            }
            const float corr = w.m[r] == kNegInf ? 0.f : std::exp(w.m[r] - mx);
            exp_shifted(row, row, mx, nc);  // exp(-inf) = 0 for masked entries
            float sum = 0.f;
            for (int64_t c = 0; c < nc; ++c) sum += row[c];
            w.l[r] = w.l[r] * corr + sum;
            w.m[r] = mx;
            float* a = w.acc.data() + r * HD;
            for (int64_t e = 0; e < HD; ++e) a[e] *= corr;
          }
          gemm(false, false, nr, HD, nc, 1.0f, w.s.data(), kBlock, v + c0 * ld_qkv, ld_qkv, 1.0f,
               w.acc.data(), HD);
        }
        for (int64_t r = 0; r < nr; ++r) {
          const float inv = 1.0f / w.l[r];
          float* o = out + (t0 + r) * ld_out + b * H + h * HD;
          for (int64_t e = 0; e < HD; ++e) o[e] = w.acc[r * HD + e] * inv;
          lse[bh * S + t0 + r] = w.m[r] + std::log(w.l[r]);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* qkv,
                        const float* lse, int64_t B, int64_t S, int64_t NH, int64_t HD,
                        const int32_t* seg_start) {
  timers::Scope timer(timers::kAttention);
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel
  {
    Tiles w(HD);
    auto D = std::vector<float>(size_t(S));  // rowsum(dO * O)
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const int64_t off = b * 3 * H + h * 3 * HD;
      const float *q = qkv + off, *k = q + HD, *v = q + 2 * HD;
      float *dq = dqkv + off, *dk = dq + HD, *dv = dq + 2 * HD;
      const float* dO = dout + b * H + h * HD;
      const float* O = out + b * H + h * HD;
      const float* L = lse + bh * S;
      const int32_t* seg = seg_start ? seg_start + b * S : nullptr;
      for (int64_t t = 0; t < S; ++t) {  // D = rowsum(dO * O)
        float d = 0.f;
        for (int64_t e = 0; e < HD; ++e) d += dO[t * ld_out + e] * O[t * ld_out + e];
        D[size_t(t)] = d;
      }
      for (int64_t t0 = 0; t0 < S; t0 += kBlock) {
        const int64_t nr = std::min(kBlock, S - t0);
        for (int64_t jb = first_key_block(t0, nr, seg); jb * kBlock <= t0 + nr - 1; ++jb) {
          const int64_t c0 = jb * kBlock, nc = std::min(kBlock, S - c0);
          float* p = w.s.data();
          block_scores(p, q, k, ld_qkv, t0, nr, c0, nc, HD, scale, seg);
          for (int64_t r = 0; r < nr; ++r) exp_shifted(p + r * kBlock, p + r * kBlock, L[t0 + r], nc);
          // dV[c0:] += P^T dO[t0:]
          gemm(true, false, nc, HD, nr, 1.0f, p, kBlock, dO + t0 * ld_out, ld_out, 1.0f,
               dv + c0 * ld_qkv, ld_qkv);
          // dP = dO V^T, then dS = P (dP - D) in place
          float* ds = w.dp.data();
          gemm(false, true, nr, nc, HD, 1.0f, dO + t0 * ld_out, ld_out, v + c0 * ld_qkv, ld_qkv,
               0.0f, ds, kBlock);
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t c = 0; c < nc; ++c)
              ds[r * kBlock + c] = p[r * kBlock + c] * (ds[r * kBlock + c] - D[size_t(t0 + r)]);
          gemm(false, false, nr, HD, nc, scale, ds, kBlock, k + c0 * ld_qkv, ld_qkv, 1.0f,
               dq + t0 * ld_qkv, ld_qkv);
          gemm(true, false, nc, HD, nr, scale, ds, kBlock, q + t0 * ld_qkv, ld_qkv, 1.0f,
               dk + c0 * ld_qkv, ld_qkv);
        }
      }
    }
  }
}

}  // namespace mg::cpu
