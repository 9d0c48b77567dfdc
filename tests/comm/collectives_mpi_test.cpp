// Exact collective tests over MPI with rank-encoded inputs (run under mpirun, label
// `parallel`): every rank r contributes values built from r, so each result is known in closed
// form and compared exactly; byte counters are checked against the ring-algorithm convention.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "comm/mpi_communicator.h"
#include "parallel/process_groups.h"
#include "tensor/bf16.h"
#include "testing/mpi_main.h"

namespace mg {
namespace {

TEST(MpiCollectives, AllReduceSumAndMax) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  std::vector<float> x(6);
  for (int i = 0; i < 6; ++i) x[i] = float(r * 10 + i);
  w->all_reduce(x.data(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], float(10 * p * (p - 1) / 2 + p * i));
  EXPECT_EQ(w->stats().all_reduce_bytes, 2 * (p - 1) * 6 * 4 / p);
  std::vector<float> m = {float(r), float(-r)};
  w->all_reduce(m.data(), 2, ReduceOp::Max);
  EXPECT_EQ(m[0], float(p - 1));
  EXPECT_EQ(m[1], 0.f);
}

TEST(MpiCollectives, ReduceScatterAndAllGather) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  const int n = 3;
  std::vector<float> in(size_t(p * n)), out(n);
  for (int i = 0; i < p * n; ++i) in[i] = float(r + 100 * i);
  w->reduce_scatter(in.data(), out.data(), n);
  for (int j = 0; j < n; ++j) EXPECT_EQ(out[j], float(p * (p - 1) / 2 + 100 * p * (r * n + j)));
  EXPECT_EQ(w->stats().reduce_scatter_bytes, (p - 1) * n * 4);
  std::vector<float> mine = {float(r), float(r * r)}, all(size_t(2 * p));
  w->all_gather(mine.data(), all.data(), 2);
  for (int q = 0; q < p; ++q) {
    EXPECT_EQ(all[2 * q], float(q));
    EXPECT_EQ(all[2 * q + 1], float(q * q));
  }
  EXPECT_EQ(w->stats().all_gather_bytes, (p - 1) * 2 * 4);
}

TEST(MpiCollectives, BroadcastAndRingExchange) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  std::vector<float> b = {float(r), 7.f};
  w->broadcast(b.data(), 2, p - 1);
  EXPECT_EQ(b[0], float(p - 1));
  // Everyone sends its rank to the right and receives from the left, in one batch.
  float send = float(r), recv = -1.f;
  w->batch_isend_irecv({{true, &send, 1, (r + 1) % p}, {false, &recv, 1, (r + p - 1) % p}});
  EXPECT_EQ(recv, float((r + p - 1) % p));
  EXPECT_EQ(w->stats().p2p_bytes, 4);
  w->barrier();
}

TEST(MpiCollectives, AllToAll) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  // Chunk j of rank r holds 100 r + 10 j + i: rank r receives 100 j + 10 r + i from rank j.
  std::vector<float> in(size_t(2 * p)), out(size_t(2 * p));
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < 2; ++i) in[size_t(2 * j + i)] = float(100 * r + 10 * j + i);
  w->all_to_all(in.data(), out.data(), 2, DType::F32);
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < 2; ++i) EXPECT_EQ(out[size_t(2 * j + i)], float(100 * j + 10 * r + i));
  EXPECT_EQ(w->stats().all_to_all_bytes, (p - 1) * 2 * 4);
  std::vector<int32_t> in32(static_cast<size_t>(p)), out32(in32.size());
  for (int j = 0; j < p; ++j) in32[size_t(j)] = 1000 * r + j;
  w->all_to_all(in32.data(), out32.data(), 1, DType::I32);
  for (int j = 0; j < p; ++j) EXPECT_EQ(out32[size_t(j)], 1000 * j + r);
}

// Uneven chunks: rank r sends (r + 2 j + 1) % 3 elements to rank j (some none), element i
// holding 100 r + 10 j + i, so rank r expects (j + 2 r + 1) % 3 elements 100 j + 10 r + i from
// rank j.
TEST(MpiCollectives, AllToAllV) {
  auto w = mpi_world();
  const int p = w->size(), r = w->rank();
  for (DType t : {DType::F32, DType::BF16}) {
    const int64_t e = int64_t(dtype_size(t));
    std::vector<int64_t> sc(static_cast<size_t>(p)), rc(sc.size());
    std::vector<float> in, want;
    int64_t sent_to_others = 0;
    for (int j = 0; j < p; ++j) {
      sc[size_t(j)] = (r + 2 * j + 1) % 3;
      rc[size_t(j)] = (j + 2 * r + 1) % 3;
      for (int i = 0; i < sc[size_t(j)]; ++i) in.push_back(float(100 * r + 10 * j + i));
      for (int i = 0; i < rc[size_t(j)]; ++i) want.push_back(float(100 * j + 10 * r + i));
      if (j != r) sent_to_others += sc[size_t(j)];
    }
    // bf16: the values' bf16 bits, compared as bits.
    std::vector<uint16_t> in16(in.size()), want16(want.size()), out16(want.size());
    for (size_t i = 0; i < in.size(); ++i) in16[i] = bf16_from_f32(in[i]);
    for (size_t i = 0; i < want.size(); ++i) want16[i] = bf16_from_f32(want[i]);
    std::vector<float> out(want.size(), -1.f);
    w->reset_stats();
    if (t == DType::F32) {
      w->all_to_all_v(in.data(), sc.data(), out.data(), rc.data(), t);
      EXPECT_EQ(out, want);
    } else {
      w->all_to_all_v(in16.data(), sc.data(), out16.data(), rc.data(), t);
      EXPECT_EQ(out16, want16);
    }
    EXPECT_EQ(w->stats().all_to_all_bytes, sent_to_others * e) << dtype_name(t);
  }
  // A count MPI cannot carry is refused, not wrapped (checked before anything moves).
  std::vector<int64_t> huge(size_t(p), 0);
  huge[size_t((r + 1) % p)] = int64_t(1) << 31;
  EXPECT_THROW(w->all_to_all_v(nullptr, huge.data(), nullptr, huge.data(), DType::F32),
               std::exception);
}

TEST(MpiCollectives, SubgroupsFollowTheGrid) {
  auto w = mpi_world();
  if (w->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ProcessGroups g = make_mpi_process_groups(RankGrid{2, 1, 2});
  // TP groups {0,1} {2,3}; DP groups {0,2} {1,3}.
  float t = float(w->rank()), d = float(w->rank());
  g.tp->all_reduce(&t, 1);
  g.dp->all_reduce(&d, 1);
  const int r = w->rank();
  EXPECT_EQ(t, float(r < 2 ? 1 : 5));
  EXPECT_EQ(d, float(r % 2 == 0 ? 2 : 4));
  EXPECT_EQ(g.tp->rank(), r % 2);
  EXPECT_EQ(g.dp->rank(), r / 2);
}

}  // namespace
}  // namespace mg

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
