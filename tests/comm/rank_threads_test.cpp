// Threads per rank. The rule (cores / ranks on the node, within the rank's
// affinity, at least 1; OMP_NUM_THREADS wins) on its own, and as `megatron train` applies and
// logs it under mpirun with 1, 2 and 4 ranks.
#include "comm/rank_threads.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <regex>
#include <thread>

#include "testing/mpirun.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

TEST(RankThreads, CoresAreDividedAmongTheNodesRanks) {
  EXPECT_EQ(choose_rank_threads(64, 64, 8, nullptr, 0).threads, 8);
  EXPECT_EQ(choose_rank_threads(64, 64, 1, nullptr, 0).threads, 64);
  EXPECT_EQ(choose_rank_threads(2, 2, 8, nullptr, 0).threads, 1);   // never 0
  EXPECT_EQ(choose_rank_threads(64, 4, 2, nullptr, 0).threads, 4);  // bound to 4 cores
  EXPECT_EQ(choose_rank_threads(10, 10, 3, "", 7).threads, 3);      // empty: unset
  const RankThreads env = choose_rank_threads(64, 64, 8, "5", 5);
  EXPECT_EQ(env.threads, 5);
  EXPECT_TRUE(env.from_env);
}

// What each rank logs, in rank order of appearance.
std::vector<int> logged_threads(const std::string& output) {
  std::vector<int> v;
  const std::regex line(R"(> threads per rank: ([0-9]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it)
    v.push_back(std::stoi((*it)[1].str()));
  return v;
}

const std::string kTiny =
    " train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8"
    " --vocab-size 64 --micro-batch-size 1 --train-iters 1 --lr 1e-3";

TEST(RankThreads, TrainLogsEachRanksShareOfTheNode) {
  // --bind-to none: every rank may use every core (mpirun binds 1-2 ranks to a core each by
  // default), so the expectation is the rule restated from the machine's core count.
  const int cores = int(std::thread::hardware_concurrency());
  for (int np : {1, 2, 4}) {
    SCOPED_TRACE(np);
    // ctest sets OMP_NUM_THREADS=1 for every test: this one needs it unset.
    const auto r = testing::run_command("env -u OMP_NUM_THREADS " + testing::mpirun_prefix(np) +
                                        "--bind-to none " + MG_BINARY + kTiny);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<int> t = logged_threads(r.output);
    ASSERT_EQ(t.size(), size_t(np)) << r.output;
    for (int n : t) EXPECT_EQ(n, std::max(1, cores / np)) << r.output;
    EXPECT_NE(r.output.find(std::to_string(np) + (np == 1 ? " rank" : " ranks") + " on this node"),
              std::string::npos)
        << r.output;
  }
  const auto r =
      testing::run_command("OMP_NUM_THREADS=3 " + testing::mpirun_prefix(2) + MG_BINARY + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(logged_threads(r.output), (std::vector<int>{3, 3})) << r.output;
  EXPECT_NE(r.output.find("(OMP_NUM_THREADS)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg
