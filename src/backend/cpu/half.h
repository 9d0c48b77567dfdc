// Scalar bf16/f16 <-> f32 conversions, round to nearest even (bf16: tensor/bf16.h; f16 by the
// F16C instructions, saturating to inf as a GPU cast does).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/bf16.h"
#include "tensor/dtype.h"

#ifndef __F16C__
#error "f16 conversions need F16C (any x86-64 CPU since 2012): build with -march=native"
#endif

namespace mg::cpu {

using mg::bf16_from_f32;  // tensor/bf16.h
using mg::f32_from_bf16;
inline uint16_t f16_from_f32(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
inline float f32_from_f16(uint16_t h) { return _cvtsh_ss(h); }

// Element i of a buffer of dtype t (F32, BF16 or F16) as f32.
inline float load_f32(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::BF16 ? f32_from_bf16(h) : f32_from_f16(h);
}

}  // namespace mg::cpu
