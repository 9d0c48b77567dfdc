// The training loop on one rank: per iteration, num_micro_batches forward/backward passes
// accumulate grads, then clip + AdamW with the scheduled learning rate; Megatron-format log
// lines every --log-interval iterations and validation every --eval-interval.
#pragma once
#include <vector>

#include "train/train_config.h"

namespace mg {

struct TrainResult {
  std::vector<double> losses;      // lm loss of every iteration
  std::vector<double> grad_norms;  // before clipping
  std::vector<double> valid_losses;
  double mean_iteration_seconds = 0;  // over all iterations but the first
};

TrainResult run_training(const TrainConfig& cfg);

}  // namespace mg
