// f32 <-> bf16/f16 conversions over buffers (scalar rules in half.h; f32 -> 16 bits 16 lanes at
// a time with AVX-512, bf16 by the same integer rule, f16 with the conversion instructions, 8
// with F16C on AVX2 machines; bf16 -> f32, a shift, vectorizes as written), and the inf/NaN
// check of the loss scaler.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/half.h"
#include "backend/ops.h"
#include "core/timers.h"
#include "core/error.h"

namespace mg::cpu {

namespace {

// GCC 12 flags the _mm512_undefined_* pass-through operand inside its own conversion
// intrinsics as maybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
void f32_to_f16(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = f16_from_f32(src[i]);
}
void f16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f32_from_f16(src[i]);
}
// bf16 16 lanes at a time with AVX-512: the same integer rule as half.h's bf16_from_f32
// (round to nearest even by adding 0x7fff + the kept LSB; a NaN keeps its top bits, made quiet).
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512F__
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i quiet = _mm512_set1_epi32(0x400000);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, bias));
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(u, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}
#pragma GCC diagnostic pop

constexpr int64_t kChunk = 1 << 14;  // elements per parallel task

}  // namespace

void cast_from_f32(void* dst, DType t, const float* src, int64_t n) {
  timers::Scope timer(timers::kCast);
  if (t == DType::F32) {
    if (dst != src && n > 0) std::memcpy(dst, src, size_t(n) * 4);  // n = 0: dst may be null
    return;
  }
  MG_CHECK(t == DType::BF16 || t == DType::F16, "cast to ", dtype_name(t));
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    if (t == DType::BF16) f32_to_bf16(d + c, src + c, e - c);
    else f32_to_f16(d + c, src + c, e - c);
  }
}

void cast_to_f32(float* dst, const void* src, DType t, int64_t n) {
  timers::Scope timer(timers::kCast);
  if (t == DType::F32) {
    if (dst != src && n > 0) std::memcpy(dst, src, size_t(n) * 4);  // n = 0: dst may be null
    return;
  }
  MG_CHECK(t == DType::BF16 || t == DType::F16, "cast from ", dtype_name(t));
  const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    if (t == DType::BF16)
      for (int64_t i = c; i < e; ++i) dst[i] = f32_from_bf16(s[i]);  // GCC vectorizes this
    else f16_to_f32(dst + c, s + c, e - c);
  }
}

void store_rounded(void* dst, DType t, float* x, int64_t n) {
  cast_from_f32(dst, t, x, n);
  if (t != DType::F32) cast_to_f32(x, dst, t, n);
}

bool has_inf_or_nan(const float* x, int64_t n) {
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return bad != 0;
}

}  // namespace mg::cpu
