// Megatron's dynamic loss scaler, step by step against its rules (grad_scaler.py): hysteresis,
// halving with a floor, doubling after a window of clean steps; a static scale never moves.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mg {
namespace {

TEST(LossScaler, DynamicHysteresisBackoffAndGrowth) {
  LossScalerConfig c;
  c.initial_loss_scale = 1024;
  c.min_loss_scale = 128;
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // first overflow: hysteresis 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // hysteresis used up: halve
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // stays exhausted until a growth refills it: halve again
  EXPECT_EQ(s.scale(), 256);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 256);
  s.update(false);  // third clean step in a row: double, hysteresis refilled
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // refilled hysteresis absorbs one overflow
  EXPECT_EQ(s.scale(), 512);
  s.update(false);
  s.update(false);
  s.update(true);  // an overflow resets the clean-step count; hysteresis now used up
  EXPECT_EQ(s.scale(), 256);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 128);  // floor
}

TEST(LossScaler, StaticScaleNeverChanges) {
  LossScalerConfig c;
  c.loss_scale = 8;
  LossScaler s(c);
  for (bool inf : {true, true, false, false, false}) {
    s.update(inf);
    EXPECT_EQ(s.scale(), 8);
  }
}

TEST(LossScaler, BadSettingsNameTheFlag) {
  LossScalerConfig c;
  c.hysteresis = 0;
  try {
    c.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--hysteresis"), std::string::npos);
  }
  c = {};
  c.min_loss_scale = 1e12;
  EXPECT_THROW(c.validate(), UsageError);
}

}  // namespace
}  // namespace mg
