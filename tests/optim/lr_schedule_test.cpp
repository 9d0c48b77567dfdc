// Megatron's LR schedule in samples, against closed forms.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/train_config.h"

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

namespace mg {
namespace {

TEST(LRSchedule, WSDAnnealShapes) {
  // decay horizon 1000 samples, no warmup, final anneal over the last 200.
  for (const char* shape : {"linear", "cosine", "exponential", "minus_sqrt"}) {
    LRSchedule s;
    s.lr = 1.0;
    s.min_lr = 0.1;
    s.decay_steps = 1000;
    s.style = "WSD";
    s.wsd_style = shape;
    s.wsd_decay_steps = 200;
    EXPECT_DOUBLE_EQ(s.at(500), 1.0) << shape;  // stable phase
    EXPECT_DOUBLE_EQ(s.at(800), 1.0) << shape;  // anneal starts after 800
    const double r = 0.5;                       // at 900
    const double coeff = std::string(shape) == "linear"        ? 1 - r
                         : std::string(shape) == "cosine"      ? 0.5 * (std::cos(M_PI * r) + 1)
                         : std::string(shape) == "exponential" ? 2 * std::pow(0.5, r) - 1
                                                               : 1 - std::sqrt(r);
    EXPECT_NEAR(s.at(900), 0.1 + coeff * 0.9, 1e-15) << shape;
    EXPECT_NEAR(s.at(1000), 0.1, 1e-15) << shape;  // end of the anneal
    EXPECT_DOUBLE_EQ(s.at(1200), 0.1) << shape;    // after decay
  }
}

TEST(LRSchedule, WarmupFromIterationsSamplesOrFraction) {
  TrainConfig c;
  c.train_iters = 100;
  c.global_batch_size = 8;
  c.lr = 1e-3;
  c.lr_warmup_iters = 10;
  EXPECT_EQ(c.lr_schedule().warmup_steps, 80);
  EXPECT_EQ(c.lr_schedule().decay_steps, 800);
  // Sample-based (--train-samples): the -samples flags, as they are.
  c.lr_warmup_iters = 0;
  c.train_samples = 800;
  c.lr_warmup_samples = 33;
  EXPECT_EQ(c.lr_schedule().warmup_steps, 33);
  EXPECT_EQ(c.lr_schedule().decay_steps, 800);
  c.lr_warmup_samples = 0;
  c.lr_warmup_fraction = 0.25;
  c.lr_decay_samples = 400;
  EXPECT_EQ(c.lr_schedule().decay_steps, 400);
  EXPECT_EQ(c.lr_schedule().warmup_steps, 100);
  // Megatron: inverse-square-root decays after warmup, floored at min_lr.
  LRSchedule s = c.lr_schedule();
  s.style = "inverse-square-root";
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(400), 1e-3 * std::sqrt(100.0 / 400.0));
}

TEST(LRSchedule, WeightDecaySchedule) {
  LRSchedule s;
  s.start_wd = 0.0;
  s.end_wd = 0.1;
  s.wd_incr_steps = 1000;
  s.wd_style = "linear";
  EXPECT_DOUBLE_EQ(s.weight_decay_at(250), 0.025);
  s.wd_style = "cosine";
  EXPECT_NEAR(s.weight_decay_at(250), 0.1 * 0.5 * (std::cos(M_PI * 0.75) + 1), 1e-15);
  EXPECT_DOUBLE_EQ(s.weight_decay_at(2000), 0.1);
  s.wd_style = "constant";
  EXPECT_THROW(s.validate(), UsageError);  // constant needs start == end
}

}  // namespace
}  // namespace mg
