// Causal multi-head attention core: P = softmax(mask(Q K^T / sqrt(HD))), O = P V, one (batch,
// head) pair per task. Activations are sequence-first [S, B, ...] as in Megatron; Q, K, V are
// read in place from the interleaved QKV rows (row stride B*3*NH*HD), so no transposes are made. Backward: dP = dO V^T, dV = P^T dO,
// dS = P * (dP - rowsum(P * dP)), dQ = dS K / sqrt(HD), dK = dS^T Q / sqrt(HD).
// The GEMMs inside a task run single-threaded (oneDNN does not nest inside an OpenMP region).
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/vec_math.h"
#include "backend/ops.h"

namespace mg::cpu {

void attention_forward(float* out, float* probs, const float* qkv, int64_t B, int64_t S,
                       int64_t NH, int64_t HD, const int32_t* seg_start) {
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const float* q = qkv + b * 3 * H + h * 3 * HD;
    const float* k = q + HD;
    const float* v = q + 2 * HD;
    float* p = probs + bh * S * S;
    gemm(false, true, S, S, HD, scale, q, ld_qkv, k, ld_qkv, 0.0f, p, S);
    for (int64_t t = 0; t < S; ++t) {
      float* row = p + t * S;
      const int64_t s0 = seg_start ? seg_start[b * S + t] : 0;  // masked columns get 0
      for (int64_t j = 0; j < s0; ++j) row[j] = 0.f;
      float mx = row[s0];
      for (int64_t j = s0 + 1; j <= t; ++j) mx = row[j] > mx ? row[j] : mx;
      exp_shifted(row + s0, row + s0, mx, t + 1 - s0);
      float sum = 0.f;
      for (int64_t j = s0; j <= t; ++j) sum += row[j];
      const float inv = 1.0f / sum;
      for (int64_t j = s0; j <= t; ++j) row[j] *= inv;
      for (int64_t j = t + 1; j < S; ++j) row[j] = 0.f;
    }
    gemm(false, false, S, HD, S, 1.0f, p, S, v, ld_qkv, 0.0f, out + b * H + h * HD, ld_out);
  }
}

int64_t attention_backward_scratch(int64_t S) { return int64_t(omp_get_max_threads()) * S * S; }

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int64_t B, int64_t S, int64_t NH, int64_t HD) {
  const int64_t H = NH * HD, ld_qkv = B * 3 * H, ld_out = B * H;
  const float scale = 1.0f / std::sqrt(float(HD));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const int64_t off = b * 3 * H + h * 3 * HD;
    const float *q = qkv + off, *k = q + HD, *v = q + 2 * HD;
    float *dq = dqkv + off, *dk = dq + HD, *dv = dq + 2 * HD;
    const float* p = probs + bh * S * S;
    const float* dO = dout + b * H + h * HD;
    float* dp = scratch + int64_t(omp_get_thread_num()) * S * S;
    gemm(false, true, S, S, HD, 1.0f, dO, ld_out, v, ld_qkv, 0.0f, dp, S);
    gemm(true, false, S, HD, S, 1.0f, p, S, dO, ld_out, 1.0f, dv, ld_qkv);
    for (int64_t t = 0; t < S; ++t) {
      const float* prow = p + t * S;
      float* drow = dp + t * S;
      float dot = 0.f;
      for (int64_t j = 0; j <= t; ++j) dot += prow[j] * drow[j];
      for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot);
      for (int64_t j = t + 1; j < S; ++j) drow[j] = 0.f;
    }
    gemm(false, false, S, HD, S, scale, dp, S, k, ld_qkv, 1.0f, dq, ld_qkv);
    gemm(true, false, S, HD, S, scale, dp, S, q, ld_qkv, 1.0f, dk, ld_qkv);
  }
}

}  // namespace mg::cpu
