// Scalar bf16/f16 <-> f32 conversions, round to nearest even (bf16 by integer arithmetic, which
// vectorizes; f16 by the F16C instructions, saturating to inf as a GPU cast does).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

#ifndef __F16C__
#error "f16 conversions need F16C (any x86-64 CPU since 2012): build with -march=native"
#endif

namespace mg::cpu {

inline uint16_t bf16_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float f32_from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f16_from_f32(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
inline float f32_from_f16(uint16_t h) { return _cvtsh_ss(h); }

// Element i of a buffer of dtype t (F32, BF16 or F16) as f32.
inline float load_f32(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::BF16 ? f32_from_bf16(h) : f32_from_f16(h);
}

}  // namespace mg::cpu
