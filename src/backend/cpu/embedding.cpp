// Token + learned absolute position embedding (GPT-2): out = wte[token] + wpe[position].
#include "backend/ops.h"

namespace mg::cpu {

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* te = wte + int64_t(tokens[n]) * H;
    const float* pe = wpe + int64_t(positions[n]) * H;
    float* o = out + n * H;
    for (int64_t c = 0; c < H; ++c) o[c] = te[c] + pe[c];
  }
}

// Rows repeat (same token twice in a batch), so threads split the hidden dim, not the rows:
// every thread walks all rows and owns a disjoint column range, which needs no atomics.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t H) {
  const int64_t chunk = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < H; c0 += chunk) {
    const int64_t c1 = c0 + chunk < H ? c0 + chunk : H;
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * H;
      float* te = dwte + int64_t(tokens[n]) * H;
      float* pe = dwpe + int64_t(positions[n]) * H;
      for (int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  }
}

}  // namespace mg::cpu
