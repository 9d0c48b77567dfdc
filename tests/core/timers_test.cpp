// Phase timers: levels gate which phases time, nested scopes of one phase count once, and the
// sync hook (a GPU run's device synchronize) runs exactly where a timed phase starts and stops.
#include "core/timers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace mg {
namespace {

int g_syncs = 0;
void count_sync() { ++g_syncs; }

struct TimersTest : ::testing::Test {
  void SetUp() override {
    timers::reset();
    timers::set_sync(&count_sync);
    g_syncs = 0;
  }
  void TearDown() override {
    timers::set_sync(nullptr);
    timers::set_level(0);
    timers::reset();
  }
};

TEST_F(TimersTest, SyncRunsWhereATimedPhaseStartsAndStops) {
  timers::set_level(2);
  {
    timers::Scope outer(timers::kGemm);  // level 2: timed
    EXPECT_EQ(g_syncs, 1);
    {
      timers::Scope inner(timers::kGemm);  // nested, same phase: counted once, no sync
      EXPECT_EQ(g_syncs, 1);
    }
    EXPECT_EQ(g_syncs, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(g_syncs, 2);
  const double t = timers::totals()[timers::kGemm];
  EXPECT_GE(t, 0.004);
  EXPECT_LT(t, 1.0);
}

TEST_F(TimersTest, PhasesAboveTheLevelNeitherTimeNorSync) {
  timers::set_level(1);
  { timers::Scope s(timers::kGemm); }  // level 2 > 1
  EXPECT_EQ(g_syncs, 0);
  EXPECT_EQ(timers::totals()[timers::kGemm], 0.0);
  { timers::Scope s(timers::kOptimizer); }  // level 1: timed
  EXPECT_EQ(g_syncs, 2);
  timers::set_level(0);
  { timers::Scope s(timers::kOptimizer); }
  EXPECT_EQ(g_syncs, 2);
}

}  // namespace
}  // namespace mg
