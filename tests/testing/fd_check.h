// Test helpers: central finite differences against analytic gradients, random fills, and a
// relative L2 error. The loss is accumulated in double so float rounding of the op's outputs
// does not swamp the difference quotient.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace mg::testing {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * double(w[i]);
  return s;
}

inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h on up to max_samples
// evenly spread elements of x; fails if the relative L2 error exceeds tol.
inline void fd_check(const std::string& what, std::vector<float>& x,
                     const std::vector<float>& analytic, const std::function<double()>& loss,
                     float h = 1e-2f, double tol = 5e-3, size_t max_samples = 96) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<double> num, ana;
  const size_t stride = std::max<size_t>(1, x.size() / max_samples);
  for (size_t i = 0; i < x.size(); i += stride) {
    const float orig = x[i];
    x[i] = orig + h;
    const double lp = loss();
    x[i] = orig - h;
    const double lm = loss();
    x[i] = orig;
    num.push_back((lp - lm) / (2.0 * h));
    ana.push_back(analytic[i]);
  }
  const double err = rel_l2(ana, num);
  EXPECT_LT(err, tol) << what << ": analytic vs finite-difference relative L2 error " << err;
  double norm = 0;
  for (double v : num) norm += v * v;
  EXPECT_GT(norm, 0.0) << what << ": the numeric gradient is identically zero (test is vacuous)";
}

}  // namespace mg::testing
