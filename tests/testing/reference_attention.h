// The plain causal attention (materialized probabilities, full-matrix GEMMs): the reference the
// tiled flash kernels in backend/cpu/attention.cpp are checked against. Layout as ops.h:
// qkv [S, B, NH, 3, HD], out [S, B, NH*HD]; probs [B, NH, S, S].
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

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
