// GEMM against a double-precision triple loop, for every transpose combination, leading
// dimensions wider than the matrix, and beta = 0 / 1 (accumulate into the output).
#include <gtest/gtest.h>

#include "backend/ops.h"
#include "testing/fd_check.h"

namespace mg {
namespace {

struct Case {
  bool ta, tb;
  float beta;
};

class GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmTest, MatchesNaive) {
  const auto [ta, tb, beta] = GetParam();
  const int64_t M = 37, N = 29, K = 53, pad = 3;
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  auto A = testing::random_vec((ta ? K : M) * lda, 1),
       B = testing::random_vec((tb ? N : K) * ldb, 2);
  auto C = testing::random_vec(M * ldc, 3);
  auto ref = C;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + i] : A[i * lda + k]) *
             double(tb ? B[j * ldb + k] : B[k * ldb + j]);
      ref[i * ldc + j] = float(0.5 * s + beta * double(C[i * ldc + j]));
    }
  cpu::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      ASSERT_NEAR(C[i * ldc + j], ref[i * ldc + j], 1e-4) << i << "," << j;
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         ::testing::Values(Case{false, false, 0.f}, Case{false, true, 1.f},
                                           Case{true, false, 1.f}, Case{true, true, 0.f},
                                           Case{false, true, 0.f}, Case{true, false, 0.f}));

}  // namespace
}  // namespace mg
