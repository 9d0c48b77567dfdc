// CUDA emulation: IEEE half (tests/cuda_emu/README.md), through the compiler's _Float16, whose
// conversion from float rounds to nearest even as __float2half_rn.
#pragma once

struct __half {
  _Float16 v;
  __half() = default;
  explicit operator float() const { return float(v); }
};

inline __half __float2half_rn(float f) {
  __half r;
  r.v = static_cast<_Float16>(f);
  return r;
}
inline float __half2float(__half x) { return float(x.v); }
