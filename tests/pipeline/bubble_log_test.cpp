// --timing-log-level 2 under pipeline parallelism prints the measured bubble per stage beside
// the analytic (p-1)/(v m) (train/pipeline_bubble.h), through the real binary on 2 ranks.
#include <gtest/gtest.h>

#include <regex>

#include "testing/mpirun.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

// PP2, m = global batch / micro batch = 4 micro-batches per iteration.
const std::string kRun =
    testing::mpirun_prefix(2) + MG_BINARY +
    " train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 2 --seq-length 16"
    " --vocab-size 128 --micro-batch-size 2 --global-batch-size 8 --train-iters 4"
    " --log-interval 2 --lr 1e-3 --pipeline-model-parallel-size 2";

// The stage values of every bubble line, per line.
std::vector<std::vector<double>> bubble_lines(const std::string& log, const std::string& analytic) {
  std::vector<std::vector<double>> lines;
  const std::regex line_re(
      " pipeline bubble \\(p2p wait / forward-backward time\\) per stage:"
      "((?: stage [0-9]+ [0-9.]+ \\|)+) analytic \\(p-1\\)/\\(v m\\) = " +
      analytic + "\n");
  const std::regex stage_re(" stage ([0-9]+) ([0-9.]+) \\|");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line_re);
       it != std::sregex_iterator(); ++it) {
    const std::string stages = (*it)[1];
    std::vector<double> v;
    for (auto s = std::sregex_iterator(stages.begin(), stages.end(), stage_re);
         s != std::sregex_iterator(); ++s) {
      EXPECT_EQ(std::stoi((*s)[1]), int(v.size())) << stages;
      v.push_back(std::stod((*s)[2]));
    }
    lines.push_back(v);
  }
  return lines;
}

void expect_bubble_per_stage(const std::string& log, const std::string& analytic) {
  const auto lines = bubble_lines(log, analytic);
  ASSERT_EQ(lines.size(), 2u) << log;  // one per log interval
  for (const auto& stages : lines) {
    ASSERT_EQ(stages.size(), 2u) << log;
    for (double f : stages) {
      EXPECT_GE(f, 0.0) << log;
      EXPECT_LE(f, 1.0) << log;
    }
  }
}

TEST(PipelineBubbleLog, Pp2PrintsEachStagesIdleFraction) {
  auto r = testing::run_command(kRun + " --timing-log-level 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bubble_per_stage(r.output, "\\(2-1\\)/\\(1\\*4\\) = 0\\.250");
}

TEST(PipelineBubbleLog, InterleavedPp2PrintsTheAnalyticValue) {
  auto r =
      testing::run_command(kRun + " --timing-log-level 2 --num-virtual-stages-per-pipeline-rank 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bubble_per_stage(r.output, "\\(2-1\\)/\\(2\\*4\\) = 0\\.125");
}

// Level 1 has no p2p timers, so no line.
TEST(PipelineBubbleLog, Level1PrintsNoBubble) {
  auto r = testing::run_command(kRun + " --timing-log-level 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("forward-backward"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("pipeline bubble"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg
