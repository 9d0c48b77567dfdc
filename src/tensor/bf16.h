// Scalar bf16 <-> f32 conversions, round to nearest even by integer arithmetic (which
// vectorizes); NaN stays a quiet NaN. The CPU backend's casts and the MPI bf16 sum share them.
#pragma once
#include <cstdint>
#include <cstring>

namespace mg {

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

}  // namespace mg
