// Would an own AVX2 GEMM beat oneDNN here? A textbook BLIS-style packed GEMM (6 x 16 register
// tile of 12 ymm accumulators, broadcast-FMA micro-kernel, A packed in MC x KC blocks, B in
// KC x NC panels, the larger output dimension split across the OpenMP threads) against
// dnnl_sgemm on GPT-2 124M's fifteen GEMMs of one training step (micro-batch 4 x seq 256 rows;
// forward, input-gradient and weight-gradient shapes, the per-layer ones weighted x 12).
// Validates each result against oneDNN before timing. Usage: gemm_microkernel [KC MC NC].
// Measured on the AMD Zen 3 development machine (docs/benchmarks.md): 10-15% slower than
// oneDNN at every blocking tried, so the backend keeps oneDNN.
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
constexpr int MR = 6, NR = 16;
int KC = 256, MC = 144, NC = 3072;
// A element (i,k) at A[i*rsa + k*csa]; B element (k,j) at B[k*rsb + j*csb]
static void pack_a(float* dst, const float* A, long rsa, long csa, int mc, int kc) {
  for (int i0 = 0; i0 < mc; i0 += MR) {
    int mr = std::min(MR, mc - i0);
    for (int k = 0; k < kc; ++k) {
      for (int i = 0; i < mr; ++i) dst[i] = A[(i0 + i) * rsa + k * csa];
      for (int i = mr; i < MR; ++i) dst[i] = 0;
      dst += MR;
    }
  }
}
static void pack_b(float* dst, const float* B, long rsb, long csb, int kc, int nc) {
  for (int j0 = 0; j0 < nc; j0 += NR) {
    int nr = std::min(NR, nc - j0);
    if (csb == 1 && nr == NR) {
      for (int k = 0; k < kc; ++k) {
        std::memcpy(dst, B + k * rsb + j0, NR * 4);
        dst += NR;
      }
    } else
      for (int k = 0; k < kc; ++k) {
        for (int j = 0; j < nr; ++j) dst[j] = B[k * rsb + (j0 + j) * csb];
        for (int j = nr; j < NR; ++j) dst[j] = 0;
        dst += NR;
      }
  }
}
// C[6x16] (+)= Ap * Bp
static inline void kernel(int kc, const float* a, const float* b, float* c, long ldc, bool acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x;
    x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += MR;
    b += NR;
  }
  __m256 r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int i = 0; i < 6; ++i) {
    float* ci = c + i * ldc;
    if (acc) {
      _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), r[2 * i]));
      _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), r[2 * i + 1]));
    } else {
      _mm256_storeu_ps(ci, r[2 * i]);
      _mm256_storeu_ps(ci + 8, r[2 * i + 1]);
    }
  }
}
// single-thread C[M,N] += A B over a column range
static void gemm_st(int M, int N, int K, const float* A, long rsa, long csa, const float* B,
                    long rsb, long csb, float* C, long ldc, float* pa, float* pb) {
  alignas(32) float tmp[MR * NR];
  for (int jc = 0; jc < N; jc += NC) {
    int nc = std::min(NC, N - jc);
    for (int pc = 0; pc < K; pc += KC) {
      int kc = std::min(KC, K - pc);
      pack_b(pb, B + pc * rsb + jc * csb, rsb, csb, kc, nc);
      for (int ic = 0; ic < M; ic += MC) {
        int mc = std::min(MC, M - ic);
        pack_a(pa, A + ic * rsa + pc * csa, rsa, csa, mc, kc);
        for (int jr = 0; jr < nc; jr += NR) {
          int nr = std::min(NR, nc - jr);
          for (int ir = 0; ir < mc; ir += MR) {
            int mr = std::min(MR, mc - ir);
            float* c = C + (ic + ir) * ldc + jc + jr;
            const float* a = pa + ir * kc;
            const float* b = pb + jr * kc;
            if (mr == MR && nr == NR) kernel(kc, a, b, c, ldc, true);
            else {
              kernel(kc, a, b, tmp, NR, false);
              for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nr; ++j) c[i * ldc + j] += tmp[i * NR + j];
            }
          }
        }
      }
    }
  }
}
static void gemm_mt(bool ta, bool tb, int M, int N, int K, const float* A, long lda, const float* B,
                    long ldb, float* C, long ldc) {
  long rsa = ta ? 1 : lda, csa = ta ? lda : 1, rsb = tb ? 1 : ldb, csb = tb ? ldb : 1;
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    static thread_local std::vector<float> pa, pb;
    pa.resize(MC * KC + 64);
    pb.resize(size_t(KC) * NC + 64);
    if (N >= M) {
      int n0 = (long(N / NR) * t / T) * NR, n1 = t == T - 1 ? N : (long(N / NR) * (t + 1) / T) * NR;
      gemm_st(M, n1 - n0, K, A, rsa, csa, B + n0 * csb, rsb, csb, C + n0, ldc, pa.data(),
              pb.data());
    } else {
      int m0 = (long(M / MR) * t / T) * MR, m1 = t == T - 1 ? M : (long(M / MR) * (t + 1) / T) * MR;
      gemm_st(m1 - m0, N, K, A + m0 * rsa, rsa, csa, B, rsb, csb, C + m0 * ldc, ldc, pa.data(),
              pb.data());
    }
  }
}
template <class F>
double best(F f) {
  f();
  double b = 1e9;
  for (int r = 0; r < 3; ++r) {
    auto t = std::chrono::steady_clock::now();
    f();
    b = std::min(b, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return b;
}
int main(int argc, char** argv) {
  if (argc > 1) {
    KC = atoi(argv[1]);
    MC = atoi(argv[2]);
    NC = atoi(argv[3]);
  }
  struct S {
    const char* n;
    bool ta, tb;
    int M, N, K;
  };
  int T = 1024;
  S sh[] = {{"qkv_f", 0, 1, T, 2304, 768},  {"qkv_di", 0, 0, T, 768, 2304},
            {"qkv_dw", 1, 0, 2304, 768, T}, {"fc1_f", 0, 1, T, 3072, 768},
            {"fc1_di", 0, 0, T, 768, 3072}, {"fc1_dw", 1, 0, 3072, 768, T},
            {"fc2_f", 0, 1, T, 768, 3072},  {"fc2_di", 0, 0, T, 3072, 768},
            {"fc2_dw", 1, 0, 768, 3072, T}, {"prj_f", 0, 1, T, 768, 768},
            {"prj_di", 0, 0, T, 768, 768},  {"prj_dw", 1, 0, 768, 768, T},
            {"lg_f", 0, 1, T, 50304, 768},  {"lg_di", 0, 0, T, 768, 50304},
            {"lg_dw", 1, 0, 50304, 768, T}};
  double to = 0, tm = 0;
  for (auto& x : sh) {
    long lda = x.ta ? x.M : x.K, ldb = x.tb ? x.K : x.N;
    std::vector<float> A((size_t)x.M * x.K), B((size_t)x.K * x.N), C((size_t)x.M * x.N, 0.f),
        C2((size_t)x.M * x.N, 0.f);
    for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.1f * (i % 977));
    for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.07f * (i % 1013));
    double fl = 2.0 * x.M * x.N * x.K;
    double a = best([&] {
      dnnl_sgemm(x.ta ? 'T' : 'N', x.tb ? 'T' : 'N', x.M, x.N, x.K, 1.f, A.data(), lda, B.data(),
                 ldb, 1.f, C.data(), x.N);
    });
    double b = best(
        [&] { gemm_mt(x.ta, x.tb, x.M, x.N, x.K, A.data(), lda, B.data(), ldb, C2.data(), x.N); });
    double err = 0, mx = 0;
    for (size_t i = 0; i < C.size(); ++i) {
      err = std::max(err, (double)std::fabs(C[i] - C2[i]));
      mx = std::max(mx, (double)std::fabs(C[i]));
    }
    double w = (x.n[0] == 'l' && x.n[1] == 'g') ? 1 : 12;
    to += w * a;
    tm += w * b;
    printf("%-8s onednn %6.1f  mine %6.1f GF/s  relerr %.1e\n", x.n, fl / a / 1e9, fl / b / 1e9,
           err / mx);
  }
  printf("step: onednn %.0f ms, mine %.0f ms\n", to * 1e3, tm * 1e3);
}
