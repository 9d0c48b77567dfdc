// Fused softmax + cross-entropy over the (padded) vocab, one row per token. Only the row's
// log-sum-exp is kept for backward; no probability tensor is stored beside the logits, and the
// gradient overwrites the logits in place.
#include <cmath>

#include "backend/cpu/vec_math.h"
#include "backend/ops.h"

namespace mg::cpu {

void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float mx = row[0];
    for (int64_t j = 1; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
    row_max[n] = mx;
  }
}

void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) sum_exp[n] = float(sum_exp_shifted(logits + n * V, shift[n], V));
}

void cross_entropy_target_logit(float* target_logit, const float* logits, const int32_t* targets,
                                int64_t v_begin, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = int64_t(targets[n]) - v_begin;
    target_logit[n] = targets[n] >= 0 && t >= 0 && t < V ? logits[n * V + t] : 0.f;
  }
}

void cross_entropy_combine(float* losses, float* lse, const float* row_max, const float* sum_exp,
                           const int32_t* targets, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = row_max[n] + std::log(sum_exp[n]);
    losses[n] = targets[n] < 0 ? 0.f : lse[n] - losses[n];
  }
}

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int64_t N, int64_t V) {
  cross_entropy_row_max(lse, logits, N, V);
  cross_entropy_sum_exp(losses, logits, lse, N, V);
  for (int64_t n = 0; n < N; ++n) lse[n] += std::log(losses[n]);
  cross_entropy_target_logit(losses, logits, targets, 0, N, V);
  for (int64_t n = 0; n < N; ++n) losses[n] = targets[n] < 0 ? 0.f : lse[n] - losses[n];
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* drow = dlogits + n * V;
    const float d = targets[n] < 0 ? 0.f : dlosses[n];
    exp_shifted(drow, logits + n * V, lse[n], V);  // softmax; safe in place (elementwise)
    for (int64_t j = 0; j < V; ++j) drow[j] *= d;
    const int64_t t = int64_t(targets[n]) - v_begin;
    if (targets[n] >= 0 && t >= 0 && t < V) drow[t] -= d;
  }
}

}  // namespace mg::cpu
