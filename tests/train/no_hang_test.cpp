// No hang, through the real binary (label parallel; the full sweep under label slow): a rank
// stopped with SIGSTOP (MG_FAULT_STOP) in the forward, the backward, the optimizer step or a
// checkpoint save of a TP2xPP2 run, or of a DP2 run with the distributed optimizer, ends the
// whole job within --distributed-timeout-minutes plus the census grace, exit code 3, with a
// report naming the stopped rank; a checkpoint directory it leaves behind loads and trains on.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "testing/bounded_run.h"
#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

const std::string kModel =
    " train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 6 --lr 2e-3"
    " --log-interval 1 --seed 7";
// 0.05 minutes = 3 s; a timed-out rank then waits 1 s (the census grace) for the others'
// answers. The margin covers the abort and mpirun's teardown on a loaded 2-core machine.
const std::string kTimeoutFlag = " --distributed-timeout-minutes 0.05";
constexpr double kTimeout = 3, kGrace = 1, kMargin = 5;
constexpr int kStopIteration = 3;

struct Layout {
  const char* name;
  int ranks;
  const char* flags;
};
const Layout kTp2Pp2{"tp2pp2", 4,
                     " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"};
const Layout kDp2{"dp2_distopt", 2, " --use-distributed-optimizer"};

struct Case {
  Layout layout;
  int rank;
  const char* site;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.layout.name << ", rank " << c.rank << " stopped in " << c.site;
}

class NoHang : public ::testing::TestWithParam<Case> {};

TEST_P(NoHang, StoppedRankEndsTheJobNamingIt) {
  const Case c = GetParam();
  const bool in_save = std::string(c.site) == "checkpoint-save";
  const testing::TempDir d("mg_nohang");
  const std::string ckpt = (d.path / "ck").string();
  const std::string save = in_save ? " --save " + ckpt + " --save-interval 1" : "";
  const std::string stop =
      std::to_string(c.rank) + ":" + c.site + ":" + std::to_string(kStopIteration);
  const testing::BoundedRun r =
      testing::run_bounded("MG_FAULT_STOP=" + stop + " " + testing::mpirun_prefix(c.layout.ranks) +
                               MG_BINARY + kModel + c.layout.flags + save + kTimeoutFlag,
                           120, "MG_FAULT_STOP: rank");
  ASSERT_FALSE(r.hit_limit) << "the job hung\n" << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.leftovers, 0) << "processes outlived the job";
  EXPECT_NE(r.output.find("MG_FAULT_STOP: rank " + std::to_string(c.rank) + " stops (SIGSTOP) in " +
                          c.site + " of iteration " + std::to_string(kStopIteration)),
            std::string::npos)
      << r.output;
  // From the stop to the end of the job: the timeout, the census grace, the teardown. (A peer
  // may have started its wait a moment before the stop, hence the slack below the timeout.)
  EXPECT_GT(r.after_marker, kTimeout - 0.5) << r.output;
  EXPECT_LT(r.after_marker, kTimeout + kGrace + kMargin) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("rank [0-9]+ timed out after [0-9.]+ s \\(--distributed-timeout-"
                           "minutes 0.05\\) in [a-z/ -]+")))
      << r.output;
  // The stopped rank is named among those that do not answer the census (alone, or beside a
  // rank that was itself busy past the census grace on a loaded machine: "ranks [1,2]").
  const std::string k = std::to_string(c.rank);
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("not responding: (rank " + k +
                                             " \\(|ranks \\[([0-9]+,)*" + k + "(,[0-9]+)*\\])")))
      << r.output;
  std::printf("%s: rank %d stopped in %s: job ended %.2f s after the stop\n", c.layout.name, c.rank,
              c.site, r.after_marker);
  if (!in_save) return;
  // The save of iteration 3 never completed: iteration 2 is the latest, and it loads.
  std::ifstream latest(ckpt + "/latest_checkpointed_iteration.txt");
  int iteration = 0;
  latest >> iteration;
  EXPECT_EQ(iteration, kStopIteration - 1);
  const testing::BoundedRun resumed =
      testing::run_bounded(testing::mpirun_prefix(c.layout.ranks) + MG_BINARY + kModel +
                               c.layout.flags + " --load " + ckpt + kTimeoutFlag,
                           120);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("iter_0000002' (iteration 2,"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(testing::log_values(resumed.output, "lm loss").size(), 4u) << resumed.output;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string site = info.param.site;
  for (char& ch : site)
    if (ch == '-') ch = '_';
  return std::string(info.param.layout.name) + "_rank" + std::to_string(info.param.rank) + "_" +
         site;
}

const char* const kSites[] = {"forward", "backward", "optimizer", "checkpoint-save"};

// Every rank once and every site once (TP2xPP2: rank r at site r), and both DP ranks.
std::vector<Case> core_cases() {
  std::vector<Case> v;
  for (int r = 0; r < 4; ++r) v.push_back({kTp2Pp2, r, kSites[r]});
  v.push_back({kDp2, 0, "checkpoint-save"});
  v.push_back({kDp2, 1, "backward"});
  return v;
}
// The rest of every rank x every site.
std::vector<Case> sweep_cases() {
  std::vector<Case> v;
  const auto core = core_cases();
  for (const Layout& l : {kTp2Pp2, kDp2})
    for (int r = 0; r < l.ranks; ++r)
      for (const char* s : kSites) {
        bool in_core = false;
        for (const Case& c : core)
          in_core |= std::string(c.layout.name) == l.name && c.rank == r && c.site == s;
        if (!in_core) v.push_back({l, r, s});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Core, NoHang, ::testing::ValuesIn(core_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Sweep, NoHang, ::testing::ValuesIn(sweep_cases()), case_name);

TEST(NoHang, TimeoutFlagIsChecked) {
  for (const char* bad : {"0", "-1", "nan", "inf"}) {
    const testing::BoundedRun r = testing::run_bounded(
        std::string(MG_BINARY) + kModel + " --distributed-timeout-minutes " + bad, 60);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    // Non-finite values stop in the flag parser (core/parse_number.h), the rest in validation.
    const bool finite = std::string(bad) != "nan" && std::string(bad) != "inf";
    EXPECT_NE(r.output.find(finite ? "--distributed-timeout-minutes must be a positive number"
                                   : "--distributed-timeout-minutes expects a finite number"),
              std::string::npos)
        << r.output;
  }
}

TEST(NoHang, MalformedFaultStopIsAUsageError) {
  const testing::BoundedRun r =
      testing::run_bounded("MG_FAULT_STOP=1:sideways:2 " + std::string(MG_BINARY) + kModel, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("MG_FAULT_STOP='1:sideways:2'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg
