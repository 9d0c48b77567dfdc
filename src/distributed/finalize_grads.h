// After the last micro-batch's backward and the data-parallel reduction (GradReducer or the
// DistributedOptimizer's reduce-scatter: step 1 of Megatron's finalize_model_grads), steps 2-3:
//  2. sequence parallel: grads of TP-replicated params that saw only this rank's sequence
//     chunk (LayerNorms, row-parallel biases) all-reduced over TP, coalesced into one call;
//  3. tied embeddings with PP > 1: the first stage's word-embedding grad and the last stage's
//     output-layer grad all-reduced over the embedding group.
// Also the matching init-time sync of the tied copy, the global grad norm, and a gather of all
// parameters into the single-rank layout.
#pragma once
#include <vector>

#include "model/param_store.h"
#include "parallel/process_groups.h"

namespace mg {

void finalize_grads(ParamStore& store, ProcessGroups& g);

// Megatron's zero-init + all-reduce that gives the last stage's output layer the first
// stage's word embedding (PP > 1).
void sync_tied_embedding_params(ParamStore& store, ProcessGroups& g);

// L2 norm of the whole model's gradient, counting every parameter once: TP-replicated params
// only on TP rank 0, the tied copy not at all. All-reduced over the model-parallel group (DP
// replicas hold identical grads after finalize_grads).
double global_grad_norm(ParamStore& store, ProcessGroups& g);

// Every parameter in the single-rank layout (gpt_param_layout(cfg)), assembled over all ranks.
// Collective; every rank gets the result.
std::vector<float> gather_full_params(ParamStore& store, ProcessGroups& g);

}  // namespace mg
