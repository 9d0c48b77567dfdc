// One-rank cases of the EP token exchange: all_to_all_v on the self communicator is a copy
// that counts nothing, and at EP = 1 dispatch and combine are the identity (every expert is
// local and there is one source), with the route's counts the caller's own.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/communicator.h"
#include "moe/ep_dispatch.h"

namespace mg::moe {
namespace {

TEST(SelfAllToAllV, CopiesAndCountsNothing) {
  auto self = make_self_communicator();
  const std::vector<float> in = {1.f, -2.f, 3.5f};
  std::vector<float> out(3, 0.f);
  const int64_t n = 3;
  self->all_to_all_v(in.data(), &n, out.data(), &n, DType::F32);
  EXPECT_EQ(out, in);
  EXPECT_EQ(self->stats().all_to_all_bytes, 0);
  const int64_t fewer = 2;  // this rank's own chunk must arrive whole
  EXPECT_THROW(self->all_to_all_v(in.data(), &n, out.data(), &fewer, DType::F32), std::exception);
}

TEST(EpDispatchOneRank, IsTheIdentity) {
  auto self = make_self_communicator();
  const std::vector<int64_t> counts = {2, 0, 3, 1};
  const EpRoute r = ep_route(*self, counts);
  EXPECT_EQ(r.local_experts, 4);
  EXPECT_EQ(r.recv, counts);
  EXPECT_EQ(r.rows_per_local_expert(), counts);
  EXPECT_EQ(r.rows_in(), 6);
  EXPECT_EQ(r.rows_out(), 6);
  const int64_t H = 2;
  std::vector<float> x(size_t(6 * H)), out(x.size()), back(x.size());
  std::iota(x.begin(), x.end(), 1.f);
  ep_dispatch(*self, r, x.data(), out.data(), H, DType::F32);
  EXPECT_EQ(out, x);
  ep_combine(*self, r, out.data(), back.data(), H, DType::F32);
  EXPECT_EQ(back, x);
  EXPECT_EQ(ep_dispatch_bytes(r, H, DType::F32), 0);
  EXPECT_EQ(self->stats().all_to_all_bytes, 0);
}

TEST(EpDispatchOneRank, RefusesExpertsThatDoNotSplit) {
  auto self = make_self_communicator();
  EXPECT_THROW(ep_route(*self, {}), std::exception);
  EXPECT_THROW(ep_route(*self, {1, -1}), std::exception);
}

}  // namespace
}  // namespace mg::moe
