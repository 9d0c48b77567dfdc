// The EP token exchange (moe/ep_dispatch.h) over MPI at EP = world size (ctest runs 2, 3 and
// 4 ranks): random per-expert row counts with zeros and one expert no rank routes to. The
// reference for what each rank's experts receive is built independently from an all_gather of
// every rank's counts and rows; the byte counters are compared with closed forms computed here
// from the gathered counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "comm/mpi_communicator.h"
#include "moe/ep_dispatch.h"
#include "tensor/bf16.h"
#include "testing/mpi_main.h"

namespace mg::moe {
namespace {

struct Case {
  int64_t LE, H;
  uint32_t seed;
};
const Case kCases[] = {{2, 3, 1}, {1, 5, 2}, {3, 1, 3}};

// Rows as raw bytes (f32 or bf16 values of a normal draw), so comparisons are bit for bit.
std::vector<char> random_rows(int64_t rows, int64_t H, DType t, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<char> b(size_t(rows * H) * dtype_size(t));
  for (int64_t i = 0; i < rows * H; ++i) {
    const float v = d(rng);
    const uint16_t h = bf16_from_f32(v);
    if (t == DType::BF16) std::memcpy(b.data() + i * 2, &h, 2);
    else std::memcpy(b.data() + i * 4, &v, 4);
  }
  return b;
}

void run_case(const Case& c, DType t) {
  SCOPED_TRACE(::testing::Message() << "LE " << c.LE << " H " << c.H << " " << dtype_name(t));
  auto ep = mpi_world();
  const int EP = ep->size(), me = ep->rank();
  const int64_t E = c.LE * EP, row = c.H * int64_t(dtype_size(t));
  std::mt19937 rng(c.seed * 7919u + uint32_t(me));
  // Counts 0..3 (zeros included); expert E-2 gets nothing from anyone.
  std::vector<int64_t> counts(static_cast<size_t>(E));
  for (int64_t& n : counts) n = int64_t(rng() % 4);
  counts[size_t(E - 2)] = 0;
  int64_t rows_in = 0;
  for (int64_t n : counts) rows_in += n;
  const std::vector<char> x = random_rows(rows_in, c.H, t, rng);

  // The reference, from every rank's counts and rows (padded to the longest).
  std::vector<int64_t> all_counts(size_t(E * EP)), all_rows_in(static_cast<size_t>(EP));
  ep->all_gather(counts.data(), all_counts.data(), E, DType::I64);
  ep->all_gather(&rows_in, all_rows_in.data(), 1, DType::I64);
  const int64_t pad = *std::max_element(all_rows_in.begin(), all_rows_in.end());
  std::vector<char> mine(size_t(pad * row)), all(size_t(pad * row * EP));
  std::copy(x.begin(), x.end(), mine.begin());
  ep->all_gather(mine.data(), all.data(), pad * c.H, t);
  std::vector<char> expected;
  std::vector<int64_t> expected_recv(static_cast<size_t>(E));
  int64_t combine_rows = 0;  // rows that come back to other ranks on combine
  for (int64_t l = 0; l < c.LE; ++l) {
    const int64_t g = me * c.LE + l;
    for (int s = 0; s < EP; ++s) {
      const int64_t* cs = &all_counts[size_t(s * E)];
      int64_t before = 0;
      for (int64_t h = 0; h < g; ++h) before += cs[h];
      const char* from = all.data() + (s * pad + before) * row;
      expected.insert(expected.end(), from, from + cs[g] * row);
      expected_recv[size_t(s * c.LE + l)] = cs[g];
      if (s != me) combine_rows += cs[g];
    }
  }
  int64_t dispatch_rows = 0;  // rows for experts on other ranks
  for (int64_t g = 0; g < E; ++g)
    if (g / c.LE != me) dispatch_rows += counts[size_t(g)];

  ep->reset_stats();
  const EpRoute r = ep_route(*ep, counts);
  EXPECT_EQ(ep->stats().all_to_all_bytes, (EP - 1) * c.LE * 8);
  EXPECT_EQ(r.recv, expected_recv);
  EXPECT_EQ(r.rows_in(), rows_in);
  ASSERT_EQ(r.rows_out() * row, int64_t(expected.size()));
  if (me == (E - 2) / c.LE) {  // the owner of the expert no one routes to
    EXPECT_EQ(r.rows_per_local_expert()[size_t((E - 2) % c.LE)], 0);
  }

  ep->reset_stats();
  std::vector<char> out(expected.size()), back(x.size());
  ep_dispatch(*ep, r, x.data(), out.data(), c.H, t);
  EXPECT_EQ(out, expected);
  EXPECT_EQ(ep->stats().all_to_all_bytes, ep_dispatch_bytes(r, c.H, t));
  EXPECT_EQ(ep->stats().all_to_all_bytes, dispatch_rows * row);

  ep->reset_stats();
  ep_combine(*ep, r, out.data(), back.data(), c.H, t);
  EXPECT_EQ(back, x);
  EXPECT_EQ(ep->stats().all_to_all_bytes, combine_rows * row);
}

TEST(EpDispatch, MatchesGatheredReferenceF32) {
  for (const Case& c : kCases) run_case(c, DType::F32);
}

TEST(EpDispatch, MatchesGatheredReferenceBF16) {
  for (const Case& c : kCases) run_case(c, DType::BF16);
}

}  // namespace
}  // namespace mg::moe

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
