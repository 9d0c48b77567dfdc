// f32 GEMM on oneDNN's JIT sgemm (AVX-512 kernels picked at run time; Debian's OpenBLAS 0.3.21
// misdetects this CPU as Prescott and is ~5x slower), and bias add/grad. The linear
// layer (Y = X W^T + b, W stored [out, in] as in Megatron) is in gemm_lowp.cpp with its
// 16-bit paths.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"

namespace mg::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc);
  MG_CHECK(st == dnnl_success, "dnnl_sgemm status ", int(st), " for M=", M, " N=", N, " K=", K);
}

void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) out[n * C + c] += bias[c];
}

// Column sums walked row by row (contiguous), each thread owning a block of columns.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  constexpr int64_t kCols = 256;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += kCols) {
    const int64_t c1 = std::min(C, c0 + kCols);
    double acc[kCols] = {};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += dout[n * C + c];
    for (int64_t c = c0; c < c1; ++c) dbias[c] += float(acc[c - c0]);
  }
}

}  // namespace mg::cpu
