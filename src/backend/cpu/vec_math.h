// 16-wide exp and tanh for the CPU kernels. With AVX-512 they call glibc's libmvec
// (_ZGVeN16v_expf / _ZGVeN16v_tanhf, <= 4 ulp), which is several times faster than the scalar
// libm calls the compiler emits without -ffast-math; otherwise they fall back to scalar libm.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
extern "C" __m512 _ZGVeN16v_expf(__m512);
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
#endif

namespace mg::cpu {

// out[i] = exp(in[i] - shift)
inline void exp_shifted(float* out, const float* in, float shift, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(in + i), s)));
#endif
  for (; i < n; ++i) out[i] = std::exp(in[i] - shift);
}

// out[i] = exp(in[i] - shift); returns their sum, accumulated in 16 fp32 lanes (in place is
// fine: elementwise).
inline float exp_shifted_sum(float* out, const float* in, float shift, int64_t n) {
  float total = 0.f;
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(in + i), s));
    _mm512_storeu_ps(out + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (float x : lanes) total += x;
#endif
  for (; i < n; ++i) total += (out[i] = std::exp(in[i] - shift));
  return total;
}

// max_i in[i] (-inf when n == 0).
inline float row_max(const float* in, int64_t n) {
  float mx = -INFINITY;
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 acc = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(acc, _mm512_loadu_ps(in + i));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (float x : lanes) mx = std::max(mx, x);
#endif
  for (; i < n; ++i) mx = std::max(mx, in[i]);
  return mx;
}

// sum_i exp(in[i] - shift), accumulated in fp32 lanes then double.
inline double sum_exp_shifted(const float* in, float shift, int64_t n) {
  double total = 0;
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16)
    acc = _mm512_add_ps(acc, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(in + i), s)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (float v : lanes) total += v;
#endif
  for (; i < n; ++i) total += std::exp(in[i] - shift);
  return total;
}

#if defined(__AVX512F__)
inline __m512 tanh16(__m512 x) { return _ZGVeN16v_tanhf(x); }
#endif

}  // namespace mg::cpu
