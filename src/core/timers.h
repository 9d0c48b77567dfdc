// Named phase timers in Megatron's vocabulary (--timing-log-level, --timing-log-option): each
// phase has a level (1: the step's big phases, 2: finer phases and our per-op-kind compute
// timers) and accumulates wall time while a Scope is alive, if its level is enabled. The
// trainer prints them per log interval as (min, max) across ranks in ms per iteration.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg::timers {

enum Phase : int {
  // level 1 (Megatron names)
  kForwardBackward,
  kAllGradsSync,
  kParamsAllGather,
  kOptimizer,
  kBatchGenerator,
  // level 2 (Megatron names)
  kForwardCompute,
  kBackwardCompute,
  kForwardRecv,
  kForwardSend,
  kBackwardRecv,
  kBackwardSend,
  kForwardSendBackwardRecv,
  kBackwardSendForwardRecv,
  kForwardSendForwardRecv,  // the interleaved schedule's
  kBackwardSendBackwardRecv,
  kForwardBackwardSendForwardBackwardRecv,
  kEmbeddingGradsAllReduce,
  kOptimizerUnscaleAndCheckInf,
  kOptimizerClipMainGrad,
  kOptimizerInnerStep,
  // level 2, ours: where the compute goes, by kind of op (forward and backward together)
  kGemm,
  kAttention,
  kLayerNorm,
  kGeluResidual,
  kCrossEntropy,
  kEmbedding,
  kTpComm,
  kCast,
  // level 2: a MoE layer's parts, forward and backward (docs/moe.md)
  kMoeRouter,   // router GEMM, top-k, losses
  kMoePermute,  // the tokens gathered by expert (forward), their gradients scattered back
  kMoeExperts,  // the experts' MLPs (their GEMMs also count in compute/gemm)
  kMoeCombine,  // the weighted sum of expert outputs, and its backward
  kNumPhases
};

const char* name(Phase p);
int level(Phase p);

void set_level(int level);  // 0 disables every timer
int enabled_level();
// Called where a timed phase starts and where it stops (nullptr: nothing). A GPU run sets the
// device synchronize here, as Megatron's timers synchronize CUDA, so that each phase holds its
// kernels rather than the time it took to queue them. Phases below the level cost nothing.
void set_sync(void (*sync)());

// Accumulated seconds per phase since the last reset.
std::vector<double> totals();
void reset();

class Scope {
 public:
  explicit Scope(Phase p);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  // Ends the phase before the scope does (the destructor then does nothing).
  void stop();

 private:
  Phase p_;
  int64_t start_ns_;  // < 0 when not timing
  bool stopped_ = false;
};

}  // namespace mg::timers
