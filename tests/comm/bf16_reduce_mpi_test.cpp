// The communicator's bf16 sums (--grad-reduce-in-bf16) over MPI, against a reference computed
// here in fp64: every rank can build every rank's inputs, rounded to bf16 by nearbyint on a
// scaled double (not the library's bit trick). Over 2 ranks each element is added once, so the
// result is exactly round(a + b); over p ranks the partial sums are rounded, so the result is
// a bf16 value within the bound of p - 1 roundings, gamma_{p-1} = (p-1)u / (1 - (p-1)u) with
// u = 2^-8, times the sum of |inputs|, of the exact sum of the rounded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/mpi_communicator.h"

namespace mg {
namespace {

// Round to 8 significant bits, ties to even (the default rounding mode of nearbyint).
double round_bf16(double x) {
  if (x == 0) return 0;
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(x, 8 - e)), e - 8);
}
uint16_t bits(double bf16_value) {
  const float f = float(bf16_value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xffffu, 0u) << bf16_value << " is not a bf16 value";
  return uint16_t(u >> 16);
}
double value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rank r's element i, rounded to bf16: mixed signs and magnitudes 2^-4 .. 2^3, so sums round.
double input(int r, int64_t i) {
  uint64_t h = uint64_t(r) * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull + 1;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const double unit = double(h >> 11) / double(1ull << 53);  // [0, 1)
  return round_bf16((2 * unit - 1) * std::ldexp(1.0, int(h % 8) - 4));
}

// Checks out[j] (element `first + j` of the full vector) against the reference.
void expect_bf16_sums(const std::vector<uint16_t>& out, int64_t first, int p) {
  const double u = std::ldexp(1.0, -8), gamma = (p - 1) * u / (1 - (p - 1) * u);
  int64_t rounded = 0;
  for (size_t j = 0; j < out.size(); ++j) {
    const int64_t i = first + int64_t(j);
    double exact = 0, magnitude = 0;
    for (int r = 0; r < p; ++r) exact += input(r, i), magnitude += std::fabs(input(r, i));
    const double got = value(out[j]);
    if (p == 2)
      ASSERT_EQ(got, round_bf16(exact)) << "element " << i;
    else
      ASSERT_LE(std::fabs(got - exact), gamma * magnitude) << "element " << i;
    rounded += got != exact;
  }
  // The inputs make most sums inexact in bf16: the test would see an fp32 sum.
  EXPECT_GT(rounded, int64_t(out.size()) / 2);
}

TEST(MpiBf16Sum, AllReduceRoundsEachPartialSum) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  const int64_t n = 1001;  // not a multiple of the rank count
  std::vector<uint16_t> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = y[size_t(i)] = bits(input(r, i));
  w->all_reduce(x.data(), n, ReduceOp::Sum, DType::BF16);
  expect_bf16_sums(x, 0, p);
  EXPECT_EQ(w->stats().all_reduce_bytes, 2 * (p - 1) * n * 2 / p);  // half of fp32's
  w->iall_reduce(y.data(), n, DType::BF16)->wait();
  EXPECT_EQ(y, x);  // the same algorithm, non-blocking
  EXPECT_EQ(w->stats().all_reduce_bytes, 2 * (2 * (p - 1) * n * 2 / p));
}

TEST(MpiBf16Sum, ReduceScatterRoundsEachPartialSum) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  const int64_t n_out = 257;
  std::vector<uint16_t> in(size_t(n_out * p)), out(n_out), out_async(n_out);
  for (int64_t i = 0; i < n_out * p; ++i) in[size_t(i)] = bits(input(r, i));
  w->reduce_scatter(in.data(), out.data(), n_out, DType::BF16);
  expect_bf16_sums(out, r * n_out, p);
  EXPECT_EQ(w->stats().reduce_scatter_bytes, (p - 1) * n_out * 2);
  w->ireduce_scatter(in.data(), out_async.data(), n_out, DType::BF16)->wait();
  EXPECT_EQ(out_async, out);
}

TEST(MpiBf16Sum, OnlySumsAreBf16) {
  auto w = mpi_world();
  uint16_t x = bits(1.0);
  EXPECT_THROW(w->all_reduce(&x, 1, ReduceOp::Max, DType::BF16), std::exception);
  EXPECT_THROW(w->all_reduce(&x, 1, ReduceOp::Sum, DType::F16), std::exception);
}

}  // namespace
}  // namespace mg
