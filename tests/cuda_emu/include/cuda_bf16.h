// CUDA emulation: bfloat16 (tests/cuda_emu/README.md). Stored as the top 16 bits of an f32,
// rounded to nearest even (NaN stays a quiet NaN), as __float2bfloat16_rn on the GPU.
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
  __nv_bfloat16() = default;
  explicit operator float() const {
    const uint32_t w = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  __nv_bfloat16 r;
  if ((w & 0x7fffffffu) > 0x7f800000u) {
    r.bits = uint16_t((w >> 16) | 0x40u);
  } else {
    w += 0x7fffu + ((w >> 16) & 1u);
    r.bits = uint16_t(w >> 16);
  }
  return r;
}
inline float __bfloat162float(__nv_bfloat16 x) { return float(x); }
