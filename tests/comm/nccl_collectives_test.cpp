// Exact NCCL collective tests with rank-encoded inputs (label gpu, under mpirun -np 2): the same
// closed forms and byte counts as the MPI tests, on device buffers, one GPU per rank. Skipped
// (every rank) where fewer GPUs than ranks are visible: NCCL refuses two ranks on one GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/dispatch.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/staging_communicator.h"
#include "moe/ep_dispatch.h"
#include "testing/bf16_sum_reference.h"
#include "testing/mpi_main.h"

namespace mg {
namespace {

// Skips on every rank alike (a skip on one rank only would leave the others in a collective).
bool enough_gpus(std::string* why) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ok = cuda::available(why) && cuda::device_count() >= world ? 1 : 0;
  if (ok == 0 && why->empty()) *why = "fewer GPUs than ranks";
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return ok == 1;
}

#define MG_REQUIRE_GPUS()                                                              \
  do {                                                                                 \
    std::string why;                                                                   \
    if (!enough_gpus(&why)) GTEST_SKIP() << "needs one CUDA device per rank: " << why; \
    ops::set_device(Device::CUDA, local_rank());                                       \
  } while (0)

std::vector<float> on_host(const cuda::Buffer& b, size_t n) {
  std::vector<float> h(n);
  cuda::copy_to_host(h.data(), b.get(), n * sizeof(float));
  return h;
}
cuda::Buffer on_device(const std::vector<float>& h) {
  cuda::Buffer b(h.size() * sizeof(float));
  cuda::copy_to_device(b.get(), h.data(), h.size() * sizeof(float));
  return b;
}

TEST(NcclCollectives, AllReduceReduceScatterAllGather) {
  MG_REQUIRE_GPUS();
  auto w = nccl_world();
  const int p = w->size(), r = w->rank();
  std::vector<float> x(6);
  for (int i = 0; i < 6; ++i) x[i] = float(r * 10 + i);
  auto dx = on_device(x);
  w->all_reduce(dx.as<float>(), 6);
  x = on_host(dx, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], float(10 * p * (p - 1) / 2 + p * i));
  EXPECT_EQ(w->stats().all_reduce_bytes, 2 * (p - 1) * 6 * 4 / p);

  const int n = 3;
  std::vector<float> in(size_t(p * n));
  for (int i = 0; i < p * n; ++i) in[i] = float(r + 100 * i);
  auto din = on_device(in);
  cuda::Buffer dout(n * sizeof(float));
  w->reduce_scatter(din.as<float>(), dout.as<float>(), n);
  const auto out = on_host(dout, n);
  for (int j = 0; j < n; ++j) EXPECT_EQ(out[j], float(p * (p - 1) / 2 + 100 * p * (r * n + j)));

  auto mine = on_device({float(r), float(r * r)});
  cuda::Buffer all(size_t(2 * p) * sizeof(float));
  auto req = w->iall_gather(mine.get(), all.get(), 2);
  req->wait();
  const auto a = on_host(all, size_t(2 * p));
  for (int q = 0; q < p; ++q) {
    EXPECT_EQ(a[2 * q], float(q));
    EXPECT_EQ(a[2 * q + 1], float(q * q));
  }
}

TEST(NcclCollectives, BroadcastAndPointToPoint) {
  MG_REQUIRE_GPUS();
  auto w = nccl_world();
  const int p = w->size(), r = w->rank();
  auto b = on_device({float(r + 1), float(r + 2)});
  w->broadcast(b.as<float>(), 2, p - 1);
  const auto bh = on_host(b, 2);
  EXPECT_EQ(bh[0], float(p));
  EXPECT_EQ(bh[1], float(p + 1));
  // A ring: send r*7 to the next rank, receive from the previous.
  auto send = on_device({float(r * 7)});
  cuda::Buffer recv(sizeof(float));
  w->batch_isend_irecv(
      {{true, send.as<float>(), 1, (r + 1) % p}, {false, recv.as<float>(), 1, (r + p - 1) % p}});
  EXPECT_EQ(on_host(recv, 1)[0], float(((r + p - 1) % p) * 7));
  EXPECT_EQ(w->stats().p2p_bytes, 4);
}

TEST(NcclCollectives, AllToAll) {
  MG_REQUIRE_GPUS();
  auto w = nccl_world();
  const int p = w->size(), r = w->rank();
  // Chunk j of rank r holds 100 r + 10 j + i: rank r receives 100 j + 10 r + i from rank j.
  std::vector<float> in(size_t(2 * p));
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < 2; ++i) in[size_t(2 * j + i)] = float(100 * r + 10 * j + i);
  auto din = on_device(in);
  cuda::Buffer dout(in.size() * sizeof(float));
  w->all_to_all(din.get(), dout.get(), 2, DType::F32);
  const auto out = on_host(dout, in.size());
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < 2; ++i) EXPECT_EQ(out[size_t(2 * j + i)], float(100 * j + 10 * r + i));
  EXPECT_EQ(w->stats().all_to_all_bytes, (p - 1) * 2 * 4);
}

// Uneven chunks, as the MPI test: rank r sends (r + 2 j + 1) % 3 elements 100 r + 10 j + i to
// rank j (some none).
struct UnevenExchange {
  std::vector<int64_t> sc, rc;
  std::vector<float> in, want;
  int64_t sent_to_others = 0;
  UnevenExchange(int p, int r) : sc(static_cast<size_t>(p)), rc(sc.size()) {
    for (int j = 0; j < p; ++j) {
      sc[size_t(j)] = (r + 2 * j + 1) % 3;
      rc[size_t(j)] = (j + 2 * r + 1) % 3;
      for (int i = 0; i < sc[size_t(j)]; ++i) in.push_back(float(100 * r + 10 * j + i));
      for (int i = 0; i < rc[size_t(j)]; ++i) want.push_back(float(100 * j + 10 * r + i));
      if (j != r) sent_to_others += sc[size_t(j)];
    }
  }
  // Runs it on device buffers and checks the result and the byte count.
  void check(Communicator& w) const {
    auto din = on_device(in);
    cuda::Buffer dout(want.size() * sizeof(float));
    w.all_to_all_v(din.get(), sc.data(), dout.get(), rc.data(), DType::F32);
    EXPECT_EQ(on_host(dout, want.size()), want);
    EXPECT_EQ(w.stats().all_to_all_bytes, sent_to_others * 4);
  }
};

// Only the non-empty chunks are grouped sends and receives.
TEST(NcclCollectives, AllToAllV) {
  MG_REQUIRE_GPUS();
  auto w = nccl_world();
  UnevenExchange(w->size(), w->rank()).check(*w);
}

// MPI under --device cuda: the device buffers go through host copies.
TEST(NcclCollectives, StagedMpiAllToAllV) {
  MG_REQUIRE_GPUS();
  auto w = make_staging_communicator(mpi_world(), Device::CPU);
  UnevenExchange(w->size(), w->rank()).check(*w);
}

// The MoE token exchange on device buffers (its scratch and block copies on the device) gives
// what the host run over MPI gives (tests/moe/ep_dispatch_test.cpp checks that one against an
// all-gathered reference), and combine brings every row back. NCCL wrapped as the process
// groups wrap it: the route's host counts go through device copies.
TEST(NcclCollectives, EpDispatchOnDeviceMatchesHost) {
  MG_REQUIRE_GPUS();
  auto w = make_staging_communicator(nccl_world(), Device::CUDA);
  auto host = mpi_world();
  const int p = w->size(), r = w->rank();
  const int64_t LE = 2, H = 3;
  std::vector<int64_t> counts(size_t(LE * p));
  for (size_t g = 0; g < counts.size(); ++g) counts[g] = int64_t((g * 5 + size_t(r) * 3) % 4);
  const moe::EpRoute route = moe::ep_route(*w, counts);
  EXPECT_EQ(route.recv, moe::ep_route(*host, counts).recv);
  std::vector<float> x(size_t(route.rows_in() * H)), want(size_t(route.rows_out() * H));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(1000 * r) + float(i);
  moe::ep_dispatch(*host, route, x.data(), want.data(), H, DType::F32);
  auto dx = on_device(x);
  cuda::Buffer dout(want.size() * sizeof(float)), dback(x.size() * sizeof(float));
  w->reset_stats();
  moe::ep_dispatch(*w, route, dx.get(), dout.get(), H, DType::F32);
  EXPECT_EQ(on_host(dout, want.size()), want);
  EXPECT_EQ(w->stats().all_to_all_bytes, moe::ep_dispatch_bytes(route, H, DType::F32));
  moe::ep_combine(*w, route, dout.get(), dback.get(), H, DType::F32);
  EXPECT_EQ(on_host(dback, x.size()), x);
}

// ncclBfloat16 sums (--grad-reduce-in-bf16) against the fp64 reference of the MPI tests
// (testing/bf16_sum_reference.h), with half of fp32's byte counts.
TEST(NcclCollectives, Bf16SumsRoundEachPartialSum) {
  MG_REQUIRE_GPUS();
  auto w = nccl_world();
  const int p = w->size(), r = w->rank();
  const int64_t n_out = 129, n = n_out * p;
  std::vector<uint16_t> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = testing::bits(testing::input(r, i));
  cuda::Buffer dx(size_t(n) * 2), dout(size_t(n_out) * 2);
  cuda::copy_to_device(dx.get(), x.data(), size_t(n) * 2);
  w->ireduce_scatter(dx.get(), dout.get(), n_out, DType::BF16)->wait();
  std::vector<uint16_t> out(static_cast<size_t>(n_out));
  cuda::copy_to_host(out.data(), dout.get(), size_t(n_out) * 2);
  testing::expect_bf16_sums(out, r * n_out, p);
  EXPECT_EQ(w->stats().reduce_scatter_bytes, (p - 1) * n_out * 2);
  w->all_reduce(dx.get(), n, ReduceOp::Sum, DType::BF16);
  cuda::copy_to_host(x.data(), dx.get(), size_t(n) * 2);
  testing::expect_bf16_sums(x, 0, p);
  EXPECT_EQ(w->stats().all_reduce_bytes, 2 * (p - 1) * n * 2 / p);
}

}  // namespace
}  // namespace mg

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
