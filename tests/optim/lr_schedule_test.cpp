// Megatron's LR schedule in samples, against closed forms.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace mg {
namespace {

LRSchedule sched(const std::string& style) {
  LRSchedule s;
  s.lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_steps = 100;
  s.decay_steps = 1100;
  s.style = style;
  return s;
}

TEST(LRSchedule, WarmupIsLinearFromInit) {
  LRSchedule s = sched("cosine");
  s.lr_warmup_init = 1e-5;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-5);
  EXPECT_DOUBLE_EQ(s.at(50), 1e-5 + (1e-3 - 1e-5) * 0.5);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
}

TEST(LRSchedule, DecayStyles) {
  EXPECT_DOUBLE_EQ(sched("linear").at(600), 1e-4 + 0.5 * 9e-4);
  EXPECT_NEAR(sched("cosine").at(350), 1e-4 + 0.5 * (std::cos(M_PI * 0.25) + 1) * 9e-4, 1e-15);
  EXPECT_DOUBLE_EQ(sched("constant").at(5000), 1e-3);
  EXPECT_DOUBLE_EQ(sched("linear").at(1100), 1e-4);
  EXPECT_DOUBLE_EQ(sched("cosine").at(2000), 1e-4);
  EXPECT_DOUBLE_EQ(sched("inverse-square-root").at(400), 1e-3 * std::sqrt(100.0 / 400.0));
}

TEST(LRSchedule, RejectsUnknownStyleNamingTheFlag) {
  LRSchedule s = sched("exponential");
  try {
    s.validate();
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-decay-style"), std::string::npos);
  }
}

}  // namespace
}  // namespace mg
