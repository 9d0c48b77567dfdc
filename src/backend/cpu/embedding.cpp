// Embedding lookups (token and learned absolute position tables, GPT-2), with a row range so a
// vocab-parallel shard can look up only the ids it owns.
#include "backend/cpu/half.h"
#include "backend/ops.h"

namespace mg::cpu {

void embedding_forward(float* out, const int32_t* ids, Mat table, int64_t row_begin,
                       int64_t row_end, int64_t N, int64_t H, bool accumulate) {
  if (table.dtype != DType::F32) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* o = out + n * H;
      const int64_t id = ids[n];
      const bool in = id >= row_begin && id < row_end;
      for (int64_t c = 0; c < H; ++c) {
        const float v = in ? load_f32(table.data, table.dtype, (id - row_begin) * H + c) : 0.f;
        o[c] = accumulate ? o[c] + v : v;
      }
    }
    return;
  }
  const float* tab = static_cast<const float*>(table.data);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * H;
    const int64_t id = ids[n];
    if (id < row_begin || id >= row_end) {
      if (!accumulate)
        for (int64_t c = 0; c < H; ++c) o[c] = 0.f;
      continue;
    }
    const float* row = tab + (id - row_begin) * H;
    if (accumulate)
      for (int64_t c = 0; c < H; ++c) o[c] += row[c];
    else
      for (int64_t c = 0; c < H; ++c) o[c] = row[c];
  }
}

// Ids repeat (same token twice in a batch), so threads split the hidden dim, not the rows:
// every thread walks all rows and owns a disjoint column range, which needs no atomics.
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t row_begin,
                        int64_t row_end, int64_t N, int64_t H) {
  const int64_t chunk = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < H; c0 += chunk) {
    const int64_t c1 = c0 + chunk < H ? c0 + chunk : H;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids[n];
      if (id < row_begin || id >= row_end) continue;
      const float* d = dout + n * H;
      float* t = dtable + (id - row_begin) * H;
      for (int64_t c = c0; c < c1; ++c) t[c] += d[c];
    }
  }
}

}  // namespace mg::cpu
