// The replicated optimizer (every DP rank steps the whole store, after GradReducer's bucketed
// all-reduce) and the factory that picks it or the distributed optimizer.
#include "distributed/model_optimizer.h"

#include "distributed/distributed_optimizer.h"
#include "distributed/finalize_grads.h"
#include "distributed/grad_reducer.h"

namespace mg {

namespace {

class ReplicatedOptimizer final : public ModelOptimizer {
 public:
  ReplicatedOptimizer(ParamStore& store, ProcessGroups& g, const OptimizerConfig& cfg,
                      const GradSyncConfig& sync)
      : store_(store), g_(g), optim_(store.layout(), cfg, store.dtype(), store.param_data()) {
    // Expert grads may be reduced over ranks of their own even when DP x CP is 1 (folding).
    if (g.dp_cp->size() > 1 || g.expert_dp().size() > 1)
      reducer_ =
          std::make_unique<GradReducer>(store, g, sync.overlap_grad_reduce, sync.reduce_dtype);
  }
  void arm() override {
    if (reducer_) reducer_->arm();
  }
  void reduce_grads() override {
    if (reducer_) reducer_->finish();
  }
  void wait_params() override {}
  double grad_norm() override { return global_grad_norm(store_, g_); }
  const std::vector<ops::Range>* counted_ranges() const override { return nullptr; }
  void step(float lr, float wd, double grad_norm, float decoupled_lr) override {
    optim_.step(store_.param_data(), store_.grads(), lr, wd, grad_norm, decoupled_lr);
  }
  Optimizer& state() override { return optim_; }
  size_t state_bytes() const override { return optim_.state_bytes(); }
  std::optional<int64_t> buckets_launched_early() const override {
    if (!reducer_) return std::nullopt;
    return reducer_->buckets_launched_early();
  }

 private:
  ParamStore& store_;
  ProcessGroups& g_;
  Optimizer optim_;
  std::unique_ptr<GradReducer> reducer_;
};

}  // namespace

std::unique_ptr<ModelOptimizer> make_model_optimizer(ParamStore& store, ProcessGroups& g,
                                                     const OptimizerConfig& cfg, bool distributed,
                                                     const GradSyncConfig& sync) {
  if (distributed)
    return std::make_unique<DistributedOptimizer>(store, g, cfg, sync.overlap_grad_reduce,
                                                  sync.overlap_param_gather, sync.reduce_dtype);
  return std::make_unique<ReplicatedOptimizer>(store, g, cfg, sync);
}

}  // namespace mg
