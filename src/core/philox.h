// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind every random value
// here (core/rng.h's weights, core/dropout_mask.h's masks): the 128-bit output at (counter,
// key) depends on nothing else. Header-only and host/device, so a CUDA kernel draws exactly the
// bits the CPU draws.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define MG_HOST_DEVICE __host__ __device__
#else
#define MG_HOST_DEVICE
#endif

namespace mg {

struct Philox4 {
  uint32_t v[4];
};

MG_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c.v[0], p1 = uint64_t(kM1) * c.v[2];
    c = {{uint32_t(p1 >> 32) ^ c.v[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.v[3] ^ k1,
          uint32_t(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

}  // namespace mg
