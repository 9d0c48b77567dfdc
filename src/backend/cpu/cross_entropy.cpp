// Fused softmax + cross-entropy over the (padded) vocab, one row per token. Only the row's
// log-sum-exp is kept for backward; no probability tensor is stored beside the logits, and the
// gradient overwrites the logits in place.
#include <cmath>

#include "backend/cpu/vec_math.h"
#include "backend/ops.h"

namespace mg::cpu {

void cross_entropy_forward(float* losses, float* lse, const float* logits,
                           const int32_t* targets, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float mx = row[0];
    for (int64_t j = 1; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
    const float l = mx + float(std::log(sum_exp_shifted(row, mx, V)));
    lse[n] = l;
    losses[n] = targets[n] < 0 ? 0.f : l - row[targets[n]];
  }
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float* drow = dlogits + n * V;
    const float d = targets[n] < 0 ? 0.f : dlosses[n];
    const float l = lse[n];
    exp_shifted(drow, row, l, V);  // softmax; safe in place (elementwise)
    for (int64_t j = 0; j < V; ++j) drow[j] *= d;
    if (targets[n] >= 0) drow[targets[n]] -= d;
  }
}

}  // namespace mg::cpu
