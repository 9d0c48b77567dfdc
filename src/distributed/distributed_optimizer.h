// Megatron's distributed optimizer (ZeRO-1 over DP, megatron-reference.md §5). The model's
// buffers use the bucketed layout (ParamLayout::assign_buckets); DP rank d owns the d-th
// contiguous 1/DP of every bucket and keeps optimizer state only for the parameter elements in
// it (fp32 models: the model params are the main params, so 8 + 8/d bytes per parameter).
// Step: reduce-scatter each bucket's grads (pre-scaled by 1/DP) -> global grad norm over the
// owned shards of all ranks -> clip + update the shard -> all-gather each bucket's params.
#pragma once
#include <memory>
#include <vector>

#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"

namespace mg {

class DistributedOptimizer {
 public:
  DistributedOptimizer(GPTModel& model, ProcessGroups& g, const OptimizerConfig& cfg);

  // After finalize_grads (without its DP step): this rank's shard of each bucket holds the
  // DP-averaged grads.
  void reduce_scatter_grads();
  // L2 norm over all ranks' shards, each parameter counted once (collective over the world).
  double grad_norm();
  // Clip + update the owned shard, then all-gather every bucket's params.
  void step(float lr, float wd, double grad_norm);
  size_t state_bytes() const { return optim_->state_bytes(); }
  int64_t owned_param_elements() const { return owned_; }

 private:
  GPTModel& model_;
  ProcessGroups& g_;
  std::vector<ParamRun> owned_runs_;    // parameter elements of this rank's shards
  std::vector<ParamRun> counted_runs_;  // the subset counted by the grad norm
  std::unique_ptr<Optimizer> optim_;
  std::vector<float> shard_;            // staging for one bucket's shard
  int64_t owned_ = 0;
};

}  // namespace mg
