// The communicator's bf16 sums (--grad-reduce-in-bf16) over MPI on 2, 3 and 4 ranks, sync and
// non-blocking, against the fp64 reference of testing/bf16_sum_reference.h, and their byte
// counts (half of fp32's).
#include <gtest/gtest.h>

#include <vector>

#include "comm/mpi_communicator.h"
#include "testing/bf16_sum_reference.h"

namespace mg {
namespace {

using testing::bits;
using testing::expect_bf16_sums;
using testing::input;

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
