// The mixture-of-experts MLP block of a transformer layer (Megatron-Core's MoELayer), CPU:
//   logits = x Wrᵀ (E per token, fp32), top-k experts and weights (layers/moe_router.h),
//   tokens permuted by expert (expert order, then token order; assignments beyond an expert's
//   capacity dropped), each expert an MLP (GELU or SwiGLU) on its tokens,
//   out = Σ_k weight_k · expert_k(x) + shared_experts(x), reduced over TP, + residual.
// Tensor parallelism splits every expert as the dense MLP is split (expert TP = TP by default;
// other expert TPs: parallel folding, below): each rank
// routes the FULL rows (gathered under SP) alike, so routing and the aux losses equal the
// 1-rank run's; its expert shards give partial outputs that are combined by weight, then
// all-reduced (or reduce-scattered under SP) once. In backward the routing weights' gradients
// (dot products with the partial outputs) are all-reduced over TP, every rank takes the same
// router gradient, and only TP rank 0 adds the router's input gradient (the reduction sums
// the ranks). The experts' fc2 biases are added on TP rank 0 before the reduction.
// The load-balancing and z losses enter backward through the router, scaled as the LM loss is
// (LayerInputs::loss_scale).
#pragma once
#include <cstdint>
#include <vector>

#include "layers/moe_router.h"
#include "moe/ep_dispatch.h"
#include "tensor/tensor.h"

namespace mg {

namespace tp {
struct TPGroup;
}
struct LayerWeights;
struct LayerCache;
struct LayerScratch;
struct LayerDims;
struct LayerInputs;
struct DropoutRows;

// One MoE layer's expert parameters (or gradients) on this rank: the router and each expert's
// linear_fc1 / linear_fc2 (null biases without --add-bias-linear). The shared experts use the
// dense MLP's fields of LayerWeights.
struct MoeWeights {
  void* router_w = nullptr;          // (E, H)
  std::vector<void*> fc1_w, fc2_w;   // per expert: (fc1 rows / TP, H), (H, F_e / TP)
  std::vector<float*> fc1_b, fc2_b;  // per expert: (fc1 rows / TP), (H)
};

// The routing of one micro-batch through one MoE layer, kept for backward: decided on the host
// (on the GPU from a copy of the logits, N x E floats), its index arrays and weights copied to
// the device for the token movement ops (backend/op_list.inc: gather_rows, combine_rows).
struct MoeRouting {
  std::vector<float> logits;          // (N, E) the router logits' host copy (GPU only)
  MoeRouterCache<float> router;       // chosen experts, weights, aux scores, losses
  std::vector<uint8_t> keep;          // (N, k) 1 where the assignment was not dropped
  std::vector<int32_t> row_token;     // (rows) the token of each permuted row
  std::vector<int32_t> row_slot;      // (rows) its (token, k) slot: token * k + j
  std::vector<int32_t> slot_row;      // (N, k) the permuted row of each slot, -1 if dropped
  std::vector<int64_t> expert_begin;  // (E + 1) first permuted row of each expert
  int64_t dropped = 0;                // assignments dropped for capacity
  int64_t rows() const { return expert_begin.empty() ? 0 : expert_begin.back(); }
  // This rank's experts' side: the rows each local expert takes, in order.
  std::vector<int64_t> local_rows;  // (E / EP)
  moe::EpRoute route;               // alltoall under EP: who sends how many rows where
  // allgather under EP: the gathered tokens (source rank x S*B + token) and slots (x k) of the
  // expert-side rows, and every EP rank's routing weights (EP x S*B x k).
  std::vector<int32_t> g_token;
  std::vector<int32_t> g_slot;
  std::vector<float> g_weights;
  std::vector<int32_t> g_slot_row;  // (EP x S*B x k) their expert-side rows, or -1
  // Parallel folding with expert TP > 1 (alltoall): each permuted row is sent to its expert's
  // ETP ranks; the sent rows' permuted rows, and each permuted row's copies (rows x ETP).
  std::vector<int32_t> v_row, v_map;
  // On the compute device: the token of each expert-side row, its slot, the row of each slot,
  // and the weights by slot (allgather: the gathered ones); folding: v_row, v_map and the
  // sent rows' tokens.
  Tensor dev_row_token, dev_row_slot, dev_slot_row, dev_weights, dev_v_row, dev_v_map, dev_v_token;
};

// Expert parallelism (LayerInputs::ep with more than one rank): this rank holds experts
// [rank E/EP, (rank+1) E/EP). alltoall: its permuted rows go to their experts' ranks
// (moe/ep_dispatch.h) and their outputs come back before the weighted combine; allgather:
// every EP rank's rows and routing are gathered, this rank's experts run on theirs and
// combine them by weight, and a reduce-scatter over EP brings each rank its tokens' sums. Both
// give the single rank's result (up to the summation order of the allgather's combine).
// Parallel folding (LayerDims::folded: --expert-tensor-parallel-size ETP other than TP): the
// experts are split over ETP ranks of their own grid (parallel/rank_grid.h), not over TP.
// Every TP rank still routes the full rows alike, but dispatches only its share of the tokens
// (its sequence-parallel chunk) over the experts' ETP x EP group: each row goes to all ETP
// ranks holding its expert's shards, whose partial outputs come back and are summed (alltoall;
// allgather sums them in its reduce-scatter). Its tokens' outputs fill their rows of the full
// (S*B, H) sum, zeros elsewhere, so the TP reduction that follows completes every row; in
// backward the routing weights' gradients of its tokens, zeros elsewhere, are completed by
// the same TP all-reduce.
// y (R, H) = x_mid + dropout(MoE(norm output)): the MLP half of transformer_layer_forward,
// from the pre-MLP norm's output in c.ln2 (R rows).
void moe_forward(const tp::TPGroup& g, float* y, const float* x_mid, const LayerWeights& w,
                 LayerCache& c, LayerScratch& s, const LayerDims& d, const LayerInputs& in,
                 const DropoutRows* dropout);
// dy (R, H): the block output's gradient (through the dropout mask); leaves dL/d(norm output)
// (R, H) in s.d_ln and adds the parameter gradients into gw.
void moe_backward(const tp::TPGroup& g, const float* dy, const LayerWeights& w,
                  const LayerWeights& gw, const LayerCache& c, LayerScratch& s, const LayerDims& d,
                  const LayerInputs& in);

}  // namespace mg
