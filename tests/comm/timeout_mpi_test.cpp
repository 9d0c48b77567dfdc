// The bounded wait of comm/watchdog.h under mpirun -np 3 (label parallel): a rank that does not
// join a collective or a transfer within the timeout makes the waiting ranks time out with a
// report naming the operation, its group and the rank that does not answer (not merely the
// neighbour that waits on it); a deadlock (every rank answers the census) is told apart from a
// stopped rank; a rank slower than the others but within the timeout is no failure. The timeout
// handler is replaced so the reporting ranks stay alive (the wait throws); the late rank joins
// afterwards, so every posted operation completes before the next test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <regex>
#include <stdexcept>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"
#include "testing/mpi_main.h"

namespace mg {
namespace {

using Clock = std::chrono::steady_clock;

void keep_going(const std::string&) {}  // the wait then throws the report

struct Outcome {
  bool timed_out = false;
  std::string report;
  double seconds = 0;
};

template <typename F>
Outcome timed(F f) {
  Outcome o;
  const Clock::time_point start = Clock::now();
  try {
    f();
  } catch (const std::runtime_error& e) {
    o.timed_out = true;
    o.report = e.what();
  }
  o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return o;
}

// The seconds "rank R timed out after X s" reports (-1 when absent). The report gives the time
// actually waited, which a loaded machine stretches past the timeout.
double reported_wait(const std::string& report, int rank) {
  const std::regex re("rank " + std::to_string(rank) + " timed out after ([0-9.]+) s");
  std::smatch m;
  return std::regex_search(report, m, re) ? std::stod(m[1]) : -1.0;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Rank 2 sleeps through the timeout (not polling: "computing"), then joins: late by far more
// than the census takes (timeout + 2 graces), so a loaded machine's scheduling delays of a few
// seconds do not let it join before the others' reports.
constexpr double kTimeout = 0.5, kLate = 6.0;

TEST(CommTimeout, AllReduceNamesTheRankThatDoesNotJoin) {
  auto w = mpi_world();
  ASSERT_EQ(w->size(), 3);
  const int r = w->rank();
  set_comm_timeout(kTimeout);
  ASSERT_EQ(census_grace(), 1.0);
  static std::vector<float> x;  // an abandoned all-reduce still writes here after its wait threw
  x.assign(4, float(r));
  if (r == 2) {
    sleep_s(kLate);
    w->all_reduce(x.data(), 4);
    EXPECT_EQ(x, std::vector<float>(4, 3.f));  // 0 + 1 + 2: the others' abandoned parts count
  } else {
    const Outcome o = timed([&] { w->all_reduce(x.data(), 4); });
    ASSERT_TRUE(o.timed_out);
    EXPECT_GE(reported_wait(o.report, r), kTimeout) << o.report;
    EXPECT_NE(o.report.find("in all-reduce over the world group [0-2]"), std::string::npos)
        << o.report;
    EXPECT_NE(o.report.find("not responding: rank 2 (stopped, stuck, or computing"),
              std::string::npos)
        << o.report;
    // Rank 0 reports after the census grace; rank 1 defers to it for one more grace.
    EXPECT_GE(o.seconds, kTimeout + census_grace());
    EXPECT_LT(o.seconds, kTimeout + 2 * census_grace() + 2.0);  // 2 s of scheduling slack
    if (r == 0) {
      EXPECT_NE(o.report.find("rank 1: "), std::string::npos) << o.report;
    }
  }
  set_comm_timeout(30);  // the late rank catches up
  w->barrier();
}

TEST(CommTimeout, PipelineChainNamesTheStoppedRankNotItsNeighbour) {
  auto w = mpi_world();
  const int r = w->rank();
  set_comm_timeout(kTimeout);
  // 2 -> 1 -> 0: rank 0 waits on rank 1, which waits on rank 2, which is late.
  static float from_1 = -1, from_2 = -1, mine = 0;
  mine = float(r);
  if (r == 2) {
    sleep_s(kLate);
    w->batch_isend_irecv({{true, &mine, 1, 1}});
  } else if (r == 1) {
    const Outcome o = timed([&] { w->batch_isend_irecv({{false, &from_2, 1, 2}}); });
    ASSERT_TRUE(o.timed_out);
    EXPECT_NE(o.report.find("in recv from rank 2 (world group [0-2])"), std::string::npos)
        << o.report;
    EXPECT_NE(o.report.find("not responding: rank 2 ("), std::string::npos) << o.report;
    w->batch_isend_irecv({{true, &mine, 1, 0}});  // completes rank 0's abandoned receive
  } else {
    const Outcome o = timed([&] { w->batch_isend_irecv({{false, &from_1, 1, 1}}); });
    ASSERT_TRUE(o.timed_out);
    EXPECT_GE(reported_wait(o.report, 0), kTimeout) << o.report;
    EXPECT_NE(o.report.find("in recv from rank 1 (world group [0-2])"), std::string::npos)
        << o.report;
    // The neighbour answered the census with its own wait; the late rank did not.
    EXPECT_NE(o.report.find("not responding: rank 2 ("), std::string::npos) << o.report;
    EXPECT_NE(o.report.find("rank 1: "), std::string::npos) << o.report;
    EXPECT_NE(o.report.find("recv from rank 2 (world group [0-2])"), std::string::npos) << o.report;
  }
  set_comm_timeout(30);
  w->barrier();
}

TEST(CommTimeout, DeadlockIsToldApartFromAStoppedRank) {
  auto w = mpi_world();
  const int r = w->rank();
  set_comm_timeout(kTimeout);
  // Ranks 0 and 1 both receive from each other first; rank 2 receives from rank 0.
  static float in = -1, out = 0;
  out = float(r);
  const int peer = r == 2 ? 0 : 1 - r;
  const Outcome o = timed([&] { w->batch_isend_irecv({{false, &in, 1, peer}}); });
  ASSERT_TRUE(o.timed_out);
  if (r == 0) {
    EXPECT_NE(o.report.find("every rank answered: a deadlock"), std::string::npos) << o.report;
    EXPECT_EQ(o.report.find("not responding"), std::string::npos) << o.report;
    // Every rank answered at once: no grace to wait out.
    EXPECT_LT(o.seconds, kTimeout + census_grace());
  }
  set_comm_timeout(30);
  // The abandoned receives complete (into `in`, which outlives them).
  if (r == 0) w->batch_isend_irecv({{true, &out, 1, 1}, {true, &out, 1, 2}});
  if (r == 1) w->batch_isend_irecv({{true, &out, 1, 0}});
  w->barrier();
}

TEST(CommTimeout, SlowRankWithinTheTimeoutIsNoFailure) {
  auto w = mpi_world();
  const int r = w->rank();
  set_comm_timeout(2.0);
  if (r == 2) sleep_s(0.3);
  std::vector<float> x(3, float(r + 1));
  const Outcome o = timed([&] { w->all_reduce(x.data(), 3); });
  EXPECT_FALSE(o.timed_out) << o.report;
  EXPECT_EQ(x, std::vector<float>(3, 6.f));
  if (r == 0) sleep_s(0.3);
  float b = r == 0 ? 42.f : 0.f;
  EXPECT_FALSE(timed([&] { w->broadcast(&b, 1, 0); }).timed_out);
  EXPECT_EQ(b, 42.f);
  w->barrier();
}

TEST(CommTimeout, RankListsAreShort) {
  EXPECT_EQ(format_ranks({3}), "[3]");
  EXPECT_EQ(format_ranks({0, 2}), "[0,2]");
  EXPECT_EQ(format_ranks({0, 1}), "[0,1]");
  EXPECT_EQ(format_ranks({0, 1, 2, 3}), "[0-3]");
  EXPECT_EQ(format_ranks({0, 1, 2, 3, 8, 10, 11, 12}), "[0-3,8,10-12]");
  std::vector<int> every_other;
  for (int i = 0; i < 40; i += 2) every_other.push_back(i);
  EXPECT_EQ(format_ranks(every_other), "[0,2,4,6,8,10,12,14,... (20 ranks)]");
}

}  // namespace
}  // namespace mg

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  mg::set_timeout_handler(mg::keep_going);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
