// The bubble arithmetic of train/pipeline_bubble.h on hand-made timer totals.
#include "train/pipeline_bubble.h"

#include <gtest/gtest.h>

#include <string>

#include "core/timers.h"

namespace mg {
namespace {

// Every exchange phase, and only those (the names with a send or a receive), counts as wait.
TEST(PipelineBubble, IdleFractionCountsEachP2pPhaseOverForwardBackward) {
  for (int p = 0; p < timers::kNumPhases; ++p) {
    if (p == timers::kForwardBackward) continue;
    std::vector<double> t(timers::kNumPhases, 0.0);
    t[timers::kForwardBackward] = 4.0;
    t[size_t(p)] = 1.0;
    const std::string name = timers::name(timers::Phase(p));
    const bool p2p =
        name.find("send") != std::string::npos || name.find("recv") != std::string::npos;
    EXPECT_EQ(idle_fraction(t), p2p ? 0.25 : 0.0) << name;
  }
}

TEST(PipelineBubble, IdleFractionSumsTheWaits) {
  std::vector<double> t(timers::kNumPhases, 0.0);
  t[timers::kForwardBackward] = 10.0;
  t[timers::kForwardCompute] = 4.0;  // compute and the DP reduction are not waits
  t[timers::kAllGradsSync] = 3.0;
  t[timers::kForwardRecv] = 1.0;
  t[timers::kBackwardSend] = 0.5;
  t[timers::kForwardSendBackwardRecv] = 0.25;
  t[timers::kForwardBackwardSendForwardBackwardRecv] = 0.25;
  EXPECT_DOUBLE_EQ(idle_fraction(t), 0.2);
  t[timers::kForwardBackward] = 0;  // nothing timed: no fraction
  EXPECT_EQ(idle_fraction(t), 0.0);
}

TEST(PipelineBubble, AnalyticIsPMinusOneOverVM) {
  EXPECT_DOUBLE_EQ(analytic_bubble(4, 1, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(analytic_bubble(4, 2, 8), 3.0 / 16);
  EXPECT_DOUBLE_EQ(analytic_bubble(8, 4, 8), 7.0 / 32);
  EXPECT_EQ(analytic_bubble(1, 1, 8), 0.0);
}

// Stage values are the means over each stage's ranks.
TEST(PipelineBubble, LineHasEachStagesMeanAndTheAnalyticValue) {
  EXPECT_EQ(bubble_line({0.5, 0.3}, 2, 2, 2, 4),
            " pipeline bubble (p2p wait / forward-backward time) per stage: stage 0 0.250 |"
            " stage 1 0.150 | analytic (p-1)/(v m) = (2-1)/(2*4) = 0.125");
  EXPECT_EQ(bubble_line({0.1, 0.2, 0.3, 0.0}, 1, 4, 1, 8),
            " pipeline bubble (p2p wait / forward-backward time) per stage: stage 0 0.100 |"
            " stage 1 0.200 | stage 2 0.300 | stage 3 0.000 | analytic (p-1)/(v m) ="
            " (4-1)/(1*8) = 0.375");
}

}  // namespace
}  // namespace mg
