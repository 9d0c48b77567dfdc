// The reference of the communicators' bf16 sums (communicator.h), in fp64: every rank can
// build every rank's inputs, rounded to bf16 by nearbyint on a scaled double (not the library's
// bit trick). Over 2 ranks each element is added once, so the result is exactly round(a + b);
// over p ranks the partial sums are rounded, so the result is a bf16 value within the bound of
// p - 1 roundings, gamma_{p-1} = (p-1)u / (1 - (p-1)u) with u = 2^-8, times the sum of
// |inputs|, of the exact sum of the rounded inputs.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mg::testing {

// Round to 8 significant bits, ties to even (the default rounding mode of nearbyint).
inline double round_bf16(double x) {
  if (x == 0) return 0;
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(x, 8 - e)), e - 8);
}
inline uint16_t bits(double bf16_value) {
  const float f = float(bf16_value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xffffu, 0u) << bf16_value << " is not a bf16 value";
  return uint16_t(u >> 16);
}
inline double value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rank r's element i, rounded to bf16: mixed signs and magnitudes 2^-4 .. 2^3, so sums round.
inline double input(int r, int64_t i) {
  uint64_t h = uint64_t(r) * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull + 1;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const double unit = double(h >> 11) / double(1ull << 53);  // [0, 1)
  return round_bf16((2 * unit - 1) * std::ldexp(1.0, int(h % 8) - 4));
}

// Checks out[j] (element `first + j` of the full vector) against the reference.
inline void expect_bf16_sums(const std::vector<uint16_t>& out, int64_t first, int p) {
  const double u = std::ldexp(1.0, -8), gamma = (p - 1) * u / (1 - (p - 1) * u);
  int64_t rounded = 0;
  for (size_t j = 0; j < out.size(); ++j) {
    const int64_t i = first + int64_t(j);
    double exact = 0, magnitude = 0;
    for (int r = 0; r < p; ++r) exact += input(r, i), magnitude += std::fabs(input(r, i));
    const double got = value(out[j]);
    if (p == 2) ASSERT_EQ(got, round_bf16(exact)) << "element " << i;
    else ASSERT_LE(std::fabs(got - exact), gamma * magnitude) << "element " << i;
    rounded += got != exact;
  }
  // The inputs make most sums inexact in bf16: the test would see an fp32 sum.
  EXPECT_GT(rounded, int64_t(out.size()) / 2);
}

}  // namespace mg::testing
