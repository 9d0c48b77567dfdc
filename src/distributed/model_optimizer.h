// The trainer's one optimizer interface: reduce the grads over data parallel, measure them, step
// the parameters. Each implementation owns how its state is sharded over DP: the replicated
// optimizer (every DP rank steps every parameter; GradReducer all-reduces the grads) and the
// distributed optimizer (ZeRO-1: each DP rank steps its shard; grads reduce-scattered, params
// all-gathered). Further kinds (FSDP, Muon) implement the same calls.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "backend/dispatch.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"

namespace mg {

class ModelOptimizer {
 public:
  virtual ~ModelOptimizer() = default;
  // Right before the last micro-batch's backward: buckets may start reducing as their grads
  // become final (--overlap-grad-reduce).
  virtual void arm() = 0;
  // After the backward, before the TP (sequence-parallel) and tied-embedding sums: the
  // data-parallel reduction is complete.
  virtual void reduce_grads() = 0;
  // Waits for parameters still being gathered (before reading them outside a forward).
  virtual void wait_params() = 0;
  // L2 norm of the grads, each parameter counted once (collective over the world).
  virtual double grad_norm() = 0;
  // The grad elements this rank counts in grad_norm(); null: the whole local grad buffer.
  virtual const std::vector<ops::Range>* counted_ranges() const = 0;
  // Clip (given the global norm) and update the parameters with lr (decoupled_lr for the
  // embedding and output layer; NaN: lr) and weight decay wd.
  virtual void step(float lr, float wd, double grad_norm, float decoupled_lr) = 0;
  // This rank's optimizer state (checkpoints read and write its slots).
  virtual Optimizer& state() = 0;
  virtual size_t state_bytes() const = 0;
  // DP buckets whose reduction started during a backward; nullopt when no grads are reduced
  // over data parallel.
  virtual std::optional<int64_t> buckets_launched_early() const = 0;
};

struct GradSyncConfig {
  bool overlap_grad_reduce = false;   // --overlap-grad-reduce
  bool overlap_param_gather = false;  // --overlap-param-gather (distributed optimizer)
  DType reduce_dtype = DType::F32;    // BF16 under --grad-reduce-in-bf16
};

// The distributed optimizer under --use-distributed-optimizer, else the replicated one.
std::unique_ptr<ModelOptimizer> make_model_optimizer(ParamStore& store, ProcessGroups& g,
                                                     const OptimizerConfig& cfg, bool distributed,
                                                     const GradSyncConfig& sync);

}  // namespace mg
