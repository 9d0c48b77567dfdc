// Megatron's distributed optimizer (ZeRO-1 over DP, docs/reference/megatron-reference.md §5). The model's
// buffers use the bucketed layout (ParamLayout::assign_buckets); DP rank d owns the d-th
// contiguous 1/DP of every bucket and keeps optimizer state only for the parameter elements in
// it (fp32 models: the model params are the main params, so 8 + 8/d bytes per parameter;
// bf16/f16 models: fp32 main params of the shard too, 6 + 12/d; the all-gather moves 16 bits).
// Step: reduce-scatter each bucket's grads (pre-scaled by 1/DP) -> global grad norm over the
// owned shards of all ranks -> clip + update the shard -> all-gather each bucket's params.
// With --grad-reduce-in-bf16 the reduce-scatter sums a bf16 copy of the bucket (rounded after
// the pre-scaling) and the shard is widened back to fp32 (grad_reducer.h).
#pragma once
#include <memory>
#include <vector>

#include "backend/dispatch.h"
#include "distributed/grad_reducer.h"
#include "distributed/model_optimizer.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"

namespace mg {

// The elements [lo, hi) of bucket [begin, end) that rank d of its dp ranks owns (the bucket
// is padded to a multiple of dp), and how many of them are parameters (not padding): the
// optimizer state a shard keeps. The memory estimate reads the same two functions.
std::pair<int64_t, int64_t> bucket_shard(std::pair<int64_t, int64_t> bucket, int64_t dp, int64_t d);
int64_t owned_param_elements(const ParamLayout& layout, std::pair<int64_t, int64_t> shard);

class DistributedOptimizer final : public ModelOptimizer {
 public:
  // overlap_grad_reduce: each bucket's reduce-scatter starts during the last backward once its
  // grads are final. overlap_param_gather: the all-gathers started after the step are waited
  // for only when the next forward reaches each bucket's parameters.
  // grad_reduce_dtype: F32, or BF16 (--grad-reduce-in-bf16).
  DistributedOptimizer(ParamStore& store, ProcessGroups& g, const OptimizerConfig& cfg,
                       bool overlap_grad_reduce = false, bool overlap_param_gather = false,
                       DType grad_reduce_dtype = DType::F32);
  ~DistributedOptimizer() override;

  // Right before the last micro-batch's backward.
  void arm() override { tracker_.arm(); }
  // After the backward, the reduce-scatter: this rank's shard of each bucket holds the
  // DP-averaged grads. Call before the TP (sequence-parallel) and tied-embedding grad reductions.
  void reduce_grads() override;
  // Waits for every pending parameter all-gather (before reading parameters outside forward).
  void wait_params() override;
  std::optional<int64_t> buckets_launched_early() const override { return early_; }
  // L2 norm over all ranks' shards, each parameter counted once (collective over the world).
  double grad_norm() override;
  // The grad elements grad_norm() counts on this rank (--log-num-zeros-in-grad counts the same).
  const std::vector<ops::Range>* counted_ranges() const override { return &counted_; }
  // Clip + update the owned shard, then all-gather every bucket's params.
  void step(float lr, float wd, double grad_norm, float decoupled_lr) override;
  size_t state_bytes() const override { return optim_->state_bytes(); }
  // The optimizer over this rank's shard (its runs are the owned elements).
  Optimizer& state() override { return *optim_; }
  int64_t owned_param_elements() const { return owned_; }

 private:
  // The ranks bucket b is sharded over: DP x CP, or for expert buckets the expert-data-parallel
  // group (the other EP ranks hold other experts).
  Communicator& group(size_t b) const {
    return store_.layout().bucket_is_expert(b) ? g_.expert_dp() : *g_.dp_cp;
  }
  ParamStore& store_;
  ProcessGroups& g_;
  std::vector<ParamRun> owned_runs_;  // parameter elements of this rank's shards
  std::vector<ops::Range> counted_;   // the subset counted by the grad norm
  std::unique_ptr<Optimizer> optim_;
  BucketTracker tracker_;
  bool overlap_grad_, overlap_params_;
  DType grad_dtype_;
  // Per bucket, on the compute device: n / DP reduced grads (f32, or bf16 under BF16), n / DP
  // params in the model dtype (the all-gather's input), and under BF16 the bf16 copy of the
  // bucket's n grads (the reduce-scatter's input).
  std::vector<Tensor> grad_shard_, param_shard_, grad_bf16_;
  std::vector<std::unique_ptr<CommRequest>> grad_req_, param_req_;
  int64_t owned_ = 0, early_ = 0;
  void launch_reduce_scatter(size_t b);
};

}  // namespace mg
