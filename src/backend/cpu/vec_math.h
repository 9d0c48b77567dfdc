// Vectorized exp and tanh for the CPU kernels, over one SIMD register type picked at compile
// time: 16 lanes with AVX-512, 8 lanes with AVX2 + FMA (e.g. AMD Zen 2/3), else scalar only.
// exp and tanh call glibc's libmvec (_ZGVeN16v_* / _ZGVdN8v_*, <= 4 ulp), several times faster
// than the scalar libm calls the compiler emits without -ffast-math.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define MG_SIMD 1
#endif

namespace mg::cpu {

#if defined(__AVX512F__)
extern "C" __m512 _ZGVeN16v_expf(__m512);
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
using vf = __m512;
constexpr int64_t kLanes = 16;
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm512_storeu_ps(p, x); }
inline vf vset(float x) { return _mm512_set1_ps(x); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }    // a b + c
inline vf vfnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
inline vf vexp(vf x) { return _ZGVeN16v_expf(x); }
inline vf vtanh(vf x) { return _ZGVeN16v_tanhf(x); }
#elif defined(MG_SIMD)
extern "C" __m256 _ZGVdN8v_expf(__m256);
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
using vf = __m256;
constexpr int64_t kLanes = 8;
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm256_storeu_ps(p, x); }
inline vf vset(float x) { return _mm256_set1_ps(x); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vfnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf vexp(vf x) { return _ZGVdN8v_expf(x); }
inline vf vtanh(vf x) { return _ZGVdN8v_tanhf(x); }
#endif

#if defined(MG_SIMD)
inline float vsum(vf x) {
  alignas(64) float l[kLanes];
  vstore(l, x);
  float s = 0.f;
  for (float v : l) s += v;
  return s;
}
inline float vmax_lanes(vf x) {
  alignas(64) float l[kLanes];
  vstore(l, x);
  float m = l[0];
  for (float v : l) m = std::max(m, v);
  return m;
}
#endif

// out[i] = exp(in[i] - shift)
inline void exp_shifted(float* out, const float* in, float shift, int64_t n) {
  int64_t i = 0;
#if defined(MG_SIMD)
  const vf s = vset(shift);
  for (; i + kLanes <= n; i += kLanes) vstore(out + i, vexp(vsub(vload(in + i), s)));
#endif
  for (; i < n; ++i) out[i] = std::exp(in[i] - shift);
}

// out[i] = exp(in[i] - shift); returns their sum, accumulated in fp32 lanes (in place is
// fine: elementwise).
inline float exp_shifted_sum(float* out, const float* in, float shift, int64_t n) {
  float total = 0.f;
  int64_t i = 0;
#if defined(MG_SIMD)
  const vf s = vset(shift);
  vf acc = vset(0.f);
  for (; i + kLanes <= n; i += kLanes) {
    const vf e = vexp(vsub(vload(in + i), s));
    vstore(out + i, e);
    acc = vadd(acc, e);
  }
  total = vsum(acc);
#endif
  for (; i < n; ++i) total += (out[i] = std::exp(in[i] - shift));
  return total;
}

// max_i in[i] (-inf when n == 0).
inline float row_max(const float* in, int64_t n) {
  float mx = -INFINITY;
  int64_t i = 0;
#if defined(MG_SIMD)
  vf acc = vset(-INFINITY);
  for (; i + kLanes <= n; i += kLanes) acc = vmax(acc, vload(in + i));
  mx = vmax_lanes(acc);
#endif
  for (; i < n; ++i) mx = std::max(mx, in[i]);
  return mx;
}

// sum_i exp(in[i] - shift), accumulated in fp32 lanes then double.
inline double sum_exp_shifted(const float* in, float shift, int64_t n) {
  double total = 0;
  int64_t i = 0;
#if defined(MG_SIMD)
  const vf s = vset(shift);
  vf acc = vset(0.f);
  for (; i + kLanes <= n; i += kLanes) acc = vadd(acc, vexp(vsub(vload(in + i), s)));
  alignas(64) float lanes[kLanes];
  vstore(lanes, acc);
  for (float v : lanes) total += v;
#endif
  for (; i < n; ++i) total += std::exp(in[i] - shift);
  return total;
}

}  // namespace mg::cpu
