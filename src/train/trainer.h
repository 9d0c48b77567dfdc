// The training loop: per iteration, the pipeline schedule runs this DP rank's micro-batches
// (grads accumulate), finalize_grads reduces them across DP / SP / tied embeddings, then clip
// with the global grad norm + AdamW with the scheduled learning rate. Megatron-format log lines
// every --log-interval iterations and validation every --eval-interval.
#pragma once
#include <vector>

#include "parallel/process_groups.h"
#include "train/train_config.h"

namespace mg {

struct TrainResult {
  std::vector<double> losses;         // lm loss of every iteration (averaged over DP)
  std::vector<double> grad_norms;     // before clipping (0 on skipped iterations)
  std::vector<double> loss_scales;    // fp16 loss scale used by each iteration (1 otherwise)
  std::vector<bool> skipped;          // iterations whose step an fp16 overflow skipped
  std::vector<double> valid_losses;   // each validation, the one after training last
  std::vector<double> test_losses;    // the test evaluation after training (if a test split)
  double mean_iteration_seconds = 0;  // over all iterations but the first
  bool exited_early = false;          // --exit-interval / --exit-duration-in-mins / SIGTERM
};

TrainResult run_training(const TrainConfig& cfg, ProcessGroups& groups);

}  // namespace mg
