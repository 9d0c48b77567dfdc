// The dropout mask (core/dropout_mask.h; its Philox is checked against Random123's known answers
// in rng_test.cpp): the drop fraction within binomial bounds, independent masks per site, layer,
// iteration and seed, and the independence from the layout: a block of rows (a micro-batch's
// later samples, an SP rank's tokens) draws exactly the factors the whole batch draws there.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dropout_mask.h"

namespace mg {
namespace {

// Fraction of dropped elements among n within 5 standard deviations of p.
void expect_binomial(int64_t dropped, int64_t n, double p, const char* what) {
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_LT(std::abs(double(dropped) - n * p), 5 * sigma)
      << what << ": " << dropped << " of " << n << " dropped at p " << p;
}

TEST(DropoutMask, FractionWithinBinomialBounds) {
  for (float p : {0.1f, 0.5f, 0.02f}) {
    const DropoutKey key = dropout_key(p, 1234, 7, 3, DropoutSite::MlpOut);
    EXPECT_FLOAT_EQ(key.scale, 1.f / (1.f - p));
    const int64_t B = 4, S = 64, H = 96;
    DropoutRows rows{key, 100, B, 0, 0};
    std::vector<float> f(static_cast<size_t>(H));
    int64_t dropped = 0;
    for (int64_t r = 0; r < S * B; ++r) {
      rows.row(f.data(), r, H);
      for (int64_t c = 0; c < H; ++c) {
        ASSERT_TRUE(f[size_t(c)] == 0.f || f[size_t(c)] == key.scale);
        ASSERT_EQ(f[size_t(c)], rows.factor(r, c)) << "the row draw and the element draw agree";
        dropped += f[size_t(c)] == 0.f;
      }
    }
    expect_binomial(dropped, S * B * H, p, "hidden");
    // Attention probabilities: heads x queries x keys of two samples.
    const DropoutKey ak = dropout_key(p, 1234, 7, 3, DropoutSite::AttentionProbs);
    int64_t adrop = 0, an = 0;
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t t = 0; t < 64; ++t)
          for (int64_t j = 0; j < 64; ++j, ++an) adrop += dropout_factor(ak, s, h, t, j) == 0.f;
    expect_binomial(adrop, an, p, "attention");
  }
}

TEST(DropoutMask, SitesLayersIterationsAndSeedsDrawApart) {
  const DropoutKey base = dropout_key(0.5f, 1, 2, 3, DropoutSite::MlpOut);
  for (const DropoutKey& other : {dropout_key(0.5f, 9, 2, 3, DropoutSite::MlpOut),
                                  dropout_key(0.5f, 1, 5, 3, DropoutSite::MlpOut),
                                  dropout_key(0.5f, 1, 2, 4, DropoutSite::MlpOut),
                                  dropout_key(0.5f, 1, 2, 3, DropoutSite::AttentionOut)}) {
    int64_t same = 0, n = 4096;
    for (int64_t i = 0; i < n; ++i)
      same +=
          dropout_factor(base, 0, 0, i / 64, i % 64) == dropout_factor(other, 0, 0, i / 64, i % 64);
    expect_binomial(same, n, 0.5, "agreement of two independent masks");
  }
  EXPECT_FALSE(dropout_key(0.f, 1, 2, 3, DropoutSite::MlpOut).active());
}

TEST(DropoutMask, LayoutIndependent) {
  const DropoutKey key = dropout_key(0.3f, 42, 1, 0, DropoutSite::Embedding);
  const int64_t B = 4, S = 8, H = 12;
  const DropoutRows whole{key, 10, B, 0, 0};
  // Micro-batches of 2 samples (sample0 10 and 12) and SP ranks of 2 tokens (t0 0, 2, 4, 6).
  for (int64_t half = 0; half < 2; ++half)
    for (int64_t sp = 0; sp < 4; ++sp) {
      const DropoutRows part{key, 10 + 2 * half, 2, 2 * sp, 0};
      for (int64_t r = 0; r < 2 * 2; ++r)  // 2 tokens x 2 samples
        for (int64_t c = 0; c < H; ++c) {
          const int64_t t = 2 * sp + r / 2, b = 2 * half + r % 2;
          ASSERT_EQ(part.factor(r, c), whole.factor(t * B + b, c));
        }
    }
  (void)S;
}

}  // namespace
}  // namespace mg
