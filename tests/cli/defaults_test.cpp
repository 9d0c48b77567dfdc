// The train defaults and rules that match upstream Megatron-LM's (restated from
// megatron/training/arguments.py validate_args and training.py):
//  * --lr has no default; a run without it is refused (upstream's scheduler cannot take None).
//  * iteration-based (--train-iters) and sample-based (--train-samples) runs take only their own
//    schedule flags; --train-samples trains train_samples // global batch iterations.
//  * the warmup from --lr-warmup-fraction is fraction x decay samples, unrounded.
//  * --ddp-bucket-size defaults to max(40M, 1M x data-parallel size).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "cli/commands.h"
#include "testing/usage_error.h"
#include "train/run_length.h"

namespace mg {
namespace {

TrainConfig config(const std::string& flags, int world = 1) {
  std::vector<std::string> args;
  std::istringstream in(
      "--mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
      "--vocab-size 64 --micro-batch-size 2 " +
      flags);
  for (std::string a; in >> a;) args.push_back(a);
  TrainConfig c = parse_train_args(args);
  c.finalize_and_validate(world);
  return c;
}

std::string refusal(const std::string& flags) {
  return testing::usage_error_of([&] { config(flags); });
}

TEST(UpstreamDefaults, LrIsRequired) {
  EXPECT_NE(refusal("--train-iters 4").find("--lr is required"), std::string::npos);
  EXPECT_EQ(config("--train-iters 4 --lr 0").lr_schedule().lr, 0.0);  // given, even 0: taken
}

TEST(UpstreamDefaults, IterationAndSampleFlagsDoNotMix) {
  struct Case {
    std::string flags, names;
  };
  for (const Case& c : {
           Case{"--train-iters 4 --train-samples 8", "--train-samples"},
           Case{"--train-iters 4 --lr-decay-samples 8", "--lr-decay-samples"},
           Case{"--train-iters 4 --lr-warmup-samples 2", "--lr-warmup-samples"},
           Case{"--train-samples 16 --lr-decay-iters 4", "--lr-decay-iters"},
           Case{"--train-samples 16 --lr-warmup-iters 1", "--lr-warmup-iters"},
           Case{"--train-iters 4 --lr-decay-style WSD --lr-wsd-decay-samples 2",
                "--lr-wsd-decay-samples"},
           Case{"--train-samples 16 --lr-decay-style WSD --lr-wsd-decay-iters 1",
                "--lr-wsd-decay-iters"},
           Case{"--train-samples 16 --lr-warmup-samples 2 --lr-warmup-fraction 0.1",
                "--lr-warmup-fraction"},
           Case{"--train-iters 4 --lr-warmup-iters 1 --lr-warmup-fraction 0.1",
                "--lr-warmup-fraction"},
           Case{"", "--train-iters N or --train-samples N"},
       }) {
    const std::string e = refusal(c.flags + " --lr 1e-3");
    EXPECT_NE(e.find(c.names), std::string::npos) << c.flags << ": " << e;
  }
  // Each mode's own flags are taken.
  config(
      "--train-iters 4 --lr 1e-3 --lr-decay-iters 3 --lr-warmup-iters 1 "
      "--lr-decay-style WSD --lr-wsd-decay-iters 1");
  config(
      "--train-samples 16 --lr 1e-3 --lr-decay-samples 12 --lr-warmup-samples 2 "
      "--lr-decay-style WSD --lr-wsd-decay-samples 4");
}

TEST(UpstreamDefaults, TrainSamplesSetTheIterationsAndTheSchedules) {
  // 100 samples at global batch 8: 100 // 8 = 12 iterations; the training split still asks
  // for all 100 samples, as upstream's get_train_valid_test_num_samples.
  TrainConfig c = config(
      "--train-samples 100 --global-batch-size 8 --lr 1e-3 --min-lr 1e-4 "
      "--lr-decay-samples 90 --lr-warmup-samples 10 --lr-decay-style WSD "
      "--lr-wsd-decay-samples 30 --eval-interval 5 --eval-iters 2");
  EXPECT_EQ(c.train_iters, 12);
  const LRSchedule s = c.lr_schedule();
  EXPECT_EQ(s.decay_steps, 90);
  EXPECT_EQ(s.warmup_steps, 10.0);
  EXPECT_EQ(s.wsd_decay_steps, 30);
  EXPECT_EQ(s.wd_incr_steps, 100);
  // train, valid = (12 // 5 + 1) x 2 x 8, test = 2 x 8.
  EXPECT_EQ(c.split_samples(), (std::array<int64_t, 3>{100, 48, 16}));
  // Without --lr-decay-samples the decay runs over --train-samples.
  EXPECT_EQ(config("--train-samples 100 --global-batch-size 8 --lr 1e-3").lr_schedule().decay_steps,
            100);
  EXPECT_NE(refusal("--train-samples 7 --global-batch-size 8 --lr 1e-3").find("--train-samples 7"),
            std::string::npos);
}

TEST(UpstreamDefaults, WarmupFractionIsNotRounded) {
  // 10 iterations x 2 samples = 20 decay samples; 7.5% of them is 1.5 warmup samples (the old
  // code truncated it to 1). Upstream: lr = init + (max - init) * step / 1.5 while step <= 1.5.
  TrainConfig d = config(
      "--train-iters 10 --global-batch-size 2 --micro-batch-size 2 "
      "--lr 1e-3 --lr-warmup-fraction 0.075 --lr-decay-style linear");
  const LRSchedule t = d.lr_schedule();
  EXPECT_DOUBLE_EQ(t.warmup_steps, 0.075 * 20);  // 1.5 samples
  EXPECT_DOUBLE_EQ(t.at(1), 1e-3 * 1.0 / 1.5);
  // After the warmup: linear decay from 1.5 to 20 samples.
  EXPECT_DOUBLE_EQ(t.at(2), 1e-3 * (1.0 - (2.0 - 1.5) / (20.0 - 1.5)));
}

TEST(UpstreamDefaults, DdpBucketSizeIsMaxOf40MAnd1MPerDataParallelRank) {
  EXPECT_EQ(config("--train-iters 1 --lr 1e-3").parallel.ddp_bucket_size, 40000000);
  EXPECT_EQ(config("--train-iters 1 --lr 1e-3", 40).parallel.ddp_bucket_size, 40000000);
  EXPECT_EQ(config("--train-iters 1 --lr 1e-3", 64).parallel.ddp_bucket_size, 64000000);
  EXPECT_EQ(config("--train-iters 1 --lr 1e-3 --tensor-model-parallel-size 2", 128)
                .parallel.ddp_bucket_size,
            64000000);  // DP = 128 / 2
  EXPECT_EQ(config("--train-iters 1 --lr 1e-3 --ddp-bucket-size 1000", 64).parallel.ddp_bucket_size,
            1000);
}

// --rampup-batch-size SAMPLES must be positive (upstream divides by it on the first batch), and
// the train split holds what the ramp's iterations consume: --train-samples 24 with batches
// 8, 8, 8 (SAMPLES 100 over (32 - 8) / 8 = 3 increments: one per 33.3 samples) runs while the
// consumed count is <= 24: 0, 8, 16, 24 -> 4 iterations, 32 samples.
TEST(UpstreamDefaults, RampupSamplesPositiveAndTheSplitHoldsTheRamp) {
  EXPECT_NE(refusal("--lr 1e-3 --train-samples 24 --global-batch-size 32 "
                    "--rampup-batch-size 8 8 0")
                .find("SAMPLES must be positive"),
            std::string::npos);
  const TrainConfig c =
      config("--lr 1e-3 --train-samples 24 --global-batch-size 32 --rampup-batch-size 8 8 100");
  EXPECT_EQ(c.train_iters, 4);
  EXPECT_EQ(c.split_samples()[0], 32);
  EXPECT_EQ(samples_consumed(c.rampup, 4), 32);
  // Without a ramp, whole global batches of --train-samples: the split holds --train-samples.
  const TrainConfig plain = config("--lr 1e-3 --train-samples 70 --global-batch-size 16");
  EXPECT_EQ(plain.train_iters, 4);
  EXPECT_EQ(plain.split_samples()[0], 70);
}

}  // namespace
}  // namespace mg
