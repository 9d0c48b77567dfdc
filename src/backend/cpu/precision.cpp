// f32 <-> bf16/f16 conversions over buffers (scalar rules in half.h; f16 16 lanes at a time
// with the AVX-512 conversion instructions, 8 with F16C on AVX2 machines), and the inf/NaN
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
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f32_from_f16(src[i]);
}
#pragma GCC diagnostic pop

constexpr int64_t kChunk = 1 << 14;  // elements per parallel task

}  // namespace

void cast_from_f32(void* dst, DType t, const float* src, int64_t n) {
  timers::Scope timer(timers::kCast);
  if (t == DType::F32) {
    if (dst != src) std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  MG_CHECK(t == DType::BF16 || t == DType::F16, "cast to ", dtype_name(t));
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    if (t == DType::BF16)
      for (int64_t i = c; i < e; ++i) d[i] = bf16_from_f32(src[i]);
    else
      f32_to_f16(d + c, src + c, e - c);
  }
}

void cast_to_f32(float* dst, const void* src, DType t, int64_t n) {
  timers::Scope timer(timers::kCast);
  if (t == DType::F32) {
    if (dst != src) std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  MG_CHECK(t == DType::BF16 || t == DType::F16, "cast from ", dtype_name(t));
  const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    if (t == DType::BF16)
      for (int64_t i = c; i < e; ++i) dst[i] = f32_from_bf16(s[i]);
    else
      f16_to_f32(dst + c, s + c, e - c);
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
