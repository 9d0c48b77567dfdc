// How long a run is and how its schedules count: Megatron's iteration-based
// (--train-iters, schedules in --lr-*-iters) or sample-based (--train-samples, schedules in
// --lr-*-samples) training, which validate_args keeps apart, and the required --lr.
#pragma once
#include <cstdint>

namespace mg {

struct TrainConfig;

// Megatron's --rampup-batch-size START INCREMENT SAMPLES (RampupBatchsizeNumMicroBatches): the
// global batch starts at START and grows by INCREMENT every SAMPLES / ((G - START) / INCREMENT)
// consumed samples, reaching --global-batch-size G once more than SAMPLES are consumed.
struct BatchRampup {
  int64_t start = 0, increment = 0, samples = 0;  // start 0: no ramp-up
  int64_t final_size = 0;                         // --global-batch-size
  // The global batch of the iteration that starts after `consumed` samples.
  int64_t at(int64_t consumed) const;
};

// The samples `iterations` iterations consume (the ramp's batches, then whole global batches).
// Under a ramp this can pass --train-samples by up to one batch, as in Megatron.
int64_t samples_consumed(const BatchRampup& rampup, int64_t iterations);

// Refuses what Megatron refuses -- neither or both of --train-iters and --train-samples, a
// sample-based schedule flag (--lr-decay-samples, --lr-warmup-samples, --lr-wsd-decay-samples)
// in an iteration-based run or an iteration-based one (--lr-*-iters) in a sample-based run,
// no --lr -- with a UsageError naming the flags. Then, for --train-samples, sets train_iters
// to train_samples / global_batch_size (Megatron's update_train_iters: a partial last batch
// is not trained; with --rampup-batch-size, the ramp's iterations first). Needs
// global_batch_size set; sets c.rampup.
void resolve_run_length(TrainConfig& c);

}  // namespace mg
