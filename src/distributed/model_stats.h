// The optional per-iteration statistics of Megatron's log line and TensorBoard
// (--log-params-norm, --log-num-zeros-in-grad), over the whole model with every parameter
// counted once (as global_grad_norm counts it: TP-replicated params on TP rank 0 only, the
// tied output-layer copy not at all). Collective: every rank calls them and gets the result.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/dispatch.h"
#include "model/param_store.h"
#include "parallel/process_groups.h"

namespace mg {

// L2 norm of all parameters, from the model's params in their storage dtype. With the
// distributed optimizer the caller first waits for the parameter all-gather.
double params_l2_norm(ParamStore& store, ProcessGroups& g);

// Number of exactly-zero gradient elements after the data-parallel reduction. shard: with the
// distributed optimizer, this rank's counted part of its grad shard (summed over the world);
// nullptr otherwise (the whole local grad, summed over the model-parallel group).
int64_t count_zero_grads(ParamStore& store, ProcessGroups& g, const std::vector<ops::Range>* shard);

}  // namespace mg
