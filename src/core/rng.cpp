#include "core/rng.h"

#include <cmath>

#include "core/philox.h"

namespace mg {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const Philox4 r = philox4x32_10({{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint64_t stream, int64_t start) {
  const std::array<uint32_t, 2> key = {uint32_t(seed), uint32_t(seed >> 32) ^ 0x5eedu};
  constexpr double kTwoPi = 6.283185307179586;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    // Element i is one half of the Box-Muller pair (i / 2) % 2 of Philox block i / 4.
    const int64_t i = start + k, block = i / 4;
    const int pair = int((i / 2) % 2);
    auto r = philox4x32({uint32_t(block), uint32_t(uint64_t(block) >> 32), uint32_t(stream),
                         uint32_t(stream >> 32)},
                        key);
    const double u1 = (double(r[2 * pair]) + 1.0) / 4294967296.0;  // (0, 1]: never log(0)
    const double u2 = double(r[2 * pair + 1]) / 4294967296.0;
    const double rad = std::sqrt(-2.0 * std::log(u1));
    out[k] = float(std * rad * (i % 2 == 0 ? std::cos(kTwoPi * u2) : std::sin(kTwoPi * u2)));
  }
}

uint64_t stream_id(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return h;
}

}  // namespace mg
