// The plain attention (materialized probabilities, full-matrix products): the reference the
// tiled flash kernels in backend/cpu/attention.cpp are checked against. The causal multi-head
// case on GPT-2's interleaved layout qkv [S, B, NH, 3, HD], out [S, B, NH*HD], probs
// [B, NH, S, S]; and the general case (grouped-query heads, offsets, masks) in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace mg::testing {

inline void reference_attention_forward(float* out, float* probs, const float* qkv, int64_t B,
                                        int64_t S, int64_t NH, int64_t HD,
                                        const int32_t* seg_start = nullptr) {
  const int64_t H = NH * HD, ld = B * 3 * H;
  const double scale = 1.0 / std::sqrt(double(HD));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * 3 * H + h * 3 * HD;
      const float *k = q + HD, *v = q + 2 * HD;
      float* p = probs + (b * NH + h) * S * S;
      for (int64_t t = 0; t < S; ++t) {
        const int64_t s0 = seg_start ? seg_start[b * S + t] : 0;
        std::vector<double> row(size_t(S), 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t j = s0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < HD; ++e) d += double(q[t * ld + e]) * k[j * ld + e];
          row[size_t(j)] = d * scale;
          mx = std::max(mx, row[size_t(j)]);
        }
        for (int64_t j = s0; j <= t; ++j) sum += std::exp(row[size_t(j)] - mx);
        for (int64_t j = 0; j < S; ++j)
          p[t * S + j] = j >= s0 && j <= t ? float(std::exp(row[size_t(j)] - mx) / sum) : 0.f;
        for (int64_t e = 0; e < HD; ++e) {
          double o = 0;
          for (int64_t j = s0; j <= t; ++j) o += double(p[t * S + j]) * v[j * ld + e];
          out[(t * B + b) * H + h * HD + e] = float(o);
        }
      }
    }
}

// dqkv += the gradient of sum(dout * out) through the forward above.
inline void reference_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                         const float* probs, int64_t B, int64_t S, int64_t NH,
                                         int64_t HD) {
  const int64_t H = NH * HD, ld = B * 3 * H;
  const double scale = 1.0 / std::sqrt(double(HD));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t off = b * 3 * H + h * 3 * HD;
      const float *q = qkv + off, *k = q + HD, *v = q + 2 * HD;
      float *dq = dqkv + off, *dk = dq + HD, *dv = dq + 2 * HD;
      const float* p = probs + (b * NH + h) * S * S;
      for (int64_t t = 0; t < S; ++t) {
        const float* dO = dout + (t * B + b) * H + h * HD;
        std::vector<double> dp(size_t(S), 0.0);
        double dot = 0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t e = 0; e < HD; ++e) dp[size_t(j)] += double(dO[e]) * v[j * ld + e];
          dot += p[t * S + j] * dp[size_t(j)];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double pj = p[t * S + j], ds = pj * (dp[size_t(j)] - dot) * scale;
          for (int64_t e = 0; e < HD; ++e) {
            dv[j * ld + e] += float(pj * dO[e]);
            dq[t * ld + e] += float(ds * k[j * ld + e]);
            dk[j * ld + e] += float(ds * q[t * ld + e]);
          }
        }
      }
    }
}

}  // namespace mg::testing

// The general attention of ops.h (grouped-query heads, Sq != Sk, position offsets, causal or
// not, segment starts) on contiguous tensors q [Sq, B, NH, HD], k and v [Sk, B, NKV, HD],
// out [Sq, B, NH*HD], in double: probs [B, NH, Sq, Sk] and lse [B, NH, Sq] (-inf, with out 0,
// where a query sees no key). Query head h reads key/value head h / (NH/NKV).

namespace mg::testing {

inline bool reference_key_visible(const cpu::AttentionShape& a, const int32_t* seg_start, int64_t b,
                                  int64_t t, int64_t j) {
  const int64_t q_pos = a.q_pos0 + t, k_pos = a.k_pos0 + j;
  if (a.causal && k_pos > q_pos) return false;
  return !seg_start || k_pos >= seg_start[b * a.Sq + t];
}

inline void reference_gqa_attention_forward(float* out, float* lse, std::vector<double>& probs,
                                            const float* q, const float* k, const float* v,
                                            const cpu::AttentionShape& a,
                                            const int32_t* seg_start = nullptr) {
  const int64_t B = a.B, Sq = a.Sq, Sk = a.Sk, NH = a.NH, NKV = a.NKV, HD = a.HD;
  const int64_t group = NH / NKV;
  const double scale = 1.0 / std::sqrt(double(HD));
  probs.assign(size_t(B * NH * Sq * Sk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < Sq; ++t) {
        const float* qr = q + ((t * B + b) * NH + h) * HD;
        std::vector<double> s(size_t(Sk), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          if (!reference_key_visible(a, seg_start, b, t, j)) continue;
          const float* kr = k + ((j * B + b) * NKV + g) * HD;
          double d = 0;
          for (int64_t e = 0; e < HD; ++e) d += double(qr[e]) * kr[e];
          s[size_t(j)] = d * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j)
          if (reference_key_visible(a, seg_start, b, t, j)) sum += std::exp(s[size_t(j)] - mx);
        double* p = probs.data() + ((b * NH + h) * Sq + t) * Sk;
        for (int64_t j = 0; j < Sk; ++j)
          if (reference_key_visible(a, seg_start, b, t, j))
            p[j] = std::exp(s[size_t(j)] - mx) / sum;
        lse[(b * NH + h) * Sq + t] = sum > 0 ? float(mx + std::log(sum)) : -INFINITY;
        for (int64_t e = 0; e < HD; ++e) {
          double o = 0;
          for (int64_t j = 0; j < Sk; ++j) o += p[j] * v[((j * B + b) * NKV + g) * HD + e];
          out[((t * B + b) * NH + h) * HD + e] = float(o);
        }
      }
    }
}

// dq, dk, dv += the gradient of sum(dout * out) through the forward above (summed in double).
inline void reference_gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                             const float* q, const float* k, const float* v,
                                             const std::vector<double>& probs,
                                             const cpu::AttentionShape& a) {
  const int64_t B = a.B, Sq = a.Sq, Sk = a.Sk, NH = a.NH, NKV = a.NKV, HD = a.HD;
  const int64_t group = NH / NKV;
  const double scale = 1.0 / std::sqrt(double(HD));
  std::vector<double> gq(size_t(Sq * B * NH * HD), 0.0), gk(size_t(Sk * B * NKV * HD), 0.0),
      gv(gk.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < Sq; ++t) {
        const int64_t qo = ((t * B + b) * NH + h) * HD;
        const double* p = probs.data() + ((b * NH + h) * Sq + t) * Sk;
        std::vector<double> dp(size_t(Sk), 0.0);
        double dot = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          const int64_t ko = ((j * B + b) * NKV + g) * HD;
          for (int64_t e = 0; e < HD; ++e) dp[size_t(j)] += double(dout[qo + e]) * v[ko + e];
          dot += p[j] * dp[size_t(j)];
        }
        for (int64_t j = 0; j < Sk; ++j) {
          const int64_t ko = ((j * B + b) * NKV + g) * HD;
          const double ds = p[j] * (dp[size_t(j)] - dot) * scale;
          for (int64_t e = 0; e < HD; ++e) {
            gv[size_t(ko + e)] += p[j] * dout[qo + e];
            gq[size_t(qo + e)] += ds * k[ko + e];
            gk[size_t(ko + e)] += ds * q[qo + e];
          }
        }
      }
    }
  for (size_t i = 0; i < gq.size(); ++i) dq[i] += float(gq[i]);
  for (size_t i = 0; i < gk.size(); ++i) dk[i] += float(gk[i]), dv[i] += float(gv[i]);
}

}  // namespace mg::testing
