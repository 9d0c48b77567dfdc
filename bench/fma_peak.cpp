// Measures the machine's fp32 peak: every OpenMP thread runs independent chains of fused
// multiply-adds on the widest vectors the CPU has (AVX-512 where present, else AVX2 + FMA).
// Prints GFLOP/s and the vector width; the training benchmarks divide achieved model FLOP/s by
// this to report MFU.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>

namespace {

// Independent accumulator chains: enough to hide FMA latency x ports, few enough that they and
// the two operands stay in registers (AVX-512 has 32 vector registers, AVX2 only 16; spilling
// them measured half the AVX2 peak).
constexpr int kChains512 = 16, kChains256 = 12;
constexpr long kIters = 384'000'000;  // FMAs per thread per repetition (a multiple of both)

// One repetition of one thread; returns a value that depends on every chain.
__attribute__((target("avx512f,fma"))) float chains512() {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(float(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kIters / kChains512; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains512; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sink = 0;
  for (float v : lanes) sink += v;
  return sink;
}

__attribute__((target("avx2,fma"))) float chains256() {
  __m256 acc[kChains256];
  for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_set1_ps(float(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kIters / kChains256; ++i)
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < kChains256; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float sink = 0;
  for (float v : lanes) sink += v;
  return sink;
}

}  // namespace

int main() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "fma_peak: this CPU has neither AVX-512 nor AVX2+FMA\n");
    return 1;
  }
  const int lanes = avx512 ? 16 : 8;
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {  // the best of 8: noise only slows a run down
    float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    int threads = 1;
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
      threads = omp_get_num_threads();
      sink += avx512 ? chains512() : chains256();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = double(threads) * double(kIters) * lanes * 2;
    if (flops / secs > best) best = flops / secs;
    if (sink == 12345.f) std::printf(" ");  // keep the result alive
  }
  std::printf("fp32_peak_gflops=%.1f threads=%d simd=%s\n", best / 1e9, omp_get_max_threads(),
              avx512 ? "avx512" : "avx2");
  return 0;
}
