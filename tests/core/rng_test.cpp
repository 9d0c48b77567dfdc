// Philox4x32-10 against the Random123 known-answer vectors, and the normal fill's statistics and
// independence from how a buffer is split.
#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mg {
namespace {

TEST(Philox, KnownAnswers) {
  // Random123 kat_vectors: philox4x32 10 rounds.
  auto zero = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones =
      philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
  auto pi =
      philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(FillNormal, MomentsMatchStd) {
  std::vector<float> x(200000);
  fill_normal(x.data(), int64_t(x.size()), 0.02f, 1234, 7);
  double m = 0, v = 0;
  for (float f : x) m += f;
  m /= double(x.size());
  for (float f : x) v += (f - m) * (f - m);
  v /= double(x.size());
  EXPECT_NEAR(m, 0.0, 5 * 0.02 / std::sqrt(double(x.size())));
  EXPECT_NEAR(std::sqrt(v), 0.02, 0.02 * 0.01);
}

TEST(FillNormal, PrefixIsStableAndStreamsDiffer) {
  std::vector<float> a(1001), b(37), c(37);
  fill_normal(a.data(), 1001, 1.f, 42, 3);
  fill_normal(b.data(), 37, 1.f, 42, 3);
  fill_normal(c.data(), 37, 1.f, 42, 4);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(a[i], b[i]);
  int same = 0;
  for (int i = 0; i < 37; ++i) same += b[i] == c[i];
  EXPECT_EQ(same, 0);
}

}  // namespace
}  // namespace mg
