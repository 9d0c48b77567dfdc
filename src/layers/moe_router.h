// MoE router on the CPU: top-k expert choice and weights from router logits [T, E], the switch
// load-balancing loss coeff·E·Σ_e f_e·p_e and the z-loss coeff_z·mean(logsumexp(logits)²), their
// backward into the logits, and expert capacity dropping. Follows Megatron-Core's
// topk_routing_with_score_function, compute_routing_scores_for_aux_loss,
// switch_load_balancing_loss_func, z_loss_func and apply_router_token_dropping (moe_utils.py).
// Templated on the scalar so tests can run the same math in double for finite differences.
#pragma once
#include <cstdint>
#include <vector>

namespace mg {

enum class RouterScore { Softmax, Sigmoid };

struct MoeRouterConfig {
  int64_t num_experts = 1;                   // E (--num-experts)
  int64_t topk = 1;                          // k (--moe-router-topk), 1 <= k <= E
  RouterScore score = RouterScore::Softmax;  // --moe-router-score-function
  bool pre_softmax = false;          // softmax over all E before top-k (--moe-router-pre-softmax);
                                     // ignored by sigmoid, whose scores always come before top-k
  double topk_scaling_factor = 1.0;  // multiplies the chosen weights (> 0)
  // Group-limited routing (DeepSeek-V3's device/node-limited top-k): the E experts in
  // num_groups groups; each token picks the group_topk groups whose best topk / group_topk
  // scores sum highest, then its top-k among their experts. 0: plain top-k.
  int64_t num_groups = 0;       // --moe-router-num-groups
  int64_t group_topk = 0;       // --moe-router-group-topk
  double aux_loss_coeff = 0.0;  // --moe-aux-loss-coeff (switch-style load balancing)
  // --moe-router-load-balancing-type seq_aux_loss: the load-balancing loss of each sequence of
  // the micro-batch (tokens are sequence-first, token t in sequence t % B), averaged over them.
  bool per_sequence = false;
  double z_loss_coeff = 0.0;  // --moe-z-loss-coeff
  void validate() const;
};

// What the forward keeps for the backward, and the loss values.
template <typename T>
struct MoeRouterCache {
  std::vector<int32_t> experts;  // (T, k) chosen experts, best first, ties to lower index
  std::vector<T> weights;        // (T, k) routing weights of the chosen experts
  std::vector<T> aux_scores;     // (T, E) softmax, or sigmoid normalised over E
  // (G, E) tokens routed to each expert (f_e·T·k) in each of the G load-balancing groups: the
  // micro-batch (G = 1), or each of its B sequences (per_sequence)
  std::vector<int64_t> tokens_per_expert;
  int64_t groups = 1;
  int64_t total_tokens = 0;   // T over the ranks that split the sequence
  std::vector<T> score_sums;  // (G, E) Σ_t q_te over this rank's tokens of group g
  T lse_sq_sum = 0;           // Σ_t logsumexp(logits_t)² over this rank's tokens
  T aux_loss = 0;             // coeff·E·Σ_e f_e·p_e (per_sequence: its mean over G)
  T z_loss = 0;               // coeff_z·mean_t(logsumexp(logits_t)²)
};

// logits (T, E), already x·Wrᵀ; T = S·B tokens of `sequences` = B sequences (sequence-first).
template <typename T>
MoeRouterCache<T> moe_router_forward(const MoeRouterConfig& cfg, const T* logits, int64_t tokens,
                                     int64_t sequences = 1);

// Context parallelism splits each sequence over ranks: after tokens_per_expert is summed over
// them, this sets total_tokens (the sum of the ranks' tokens) and the losses to this rank's
// share (its tokens' terms of the whole sequence's losses: the shares sum to the losses of the
// whole micro-batch, and each rank's backward is its tokens' part of the gradient).
template <typename T>
void moe_router_global_losses(const MoeRouterConfig& cfg, MoeRouterCache<T>& cache,
                              int64_t total_tokens);

// Sets dlogits (T, E) to the gradient of sum(weights ⊙ dweights) + aux_loss + z_loss.
// f_e (tokens_per_expert) is a constant, as upstream: routing is not differentiable.
template <typename T>
void moe_router_backward(const MoeRouterConfig& cfg, const MoeRouterCache<T>& cache,
                         const T* logits, const T* dweights, int64_t tokens, T* dlogits);

// capacity = ceil(T·k/E · capacity_factor) tokens per expert (--moe-expert-capacity-factor).
int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts,
                            double capacity_factor);

struct CapacityDrop {
  std::vector<uint8_t> keep;  // (T, k) 1 where the (token, slot) assignment survives
  int64_t capacity = 0;       // per expert
  int64_t dropped = 0;        // assignments dropped over all experts
};

// --moe-token-drop-policy: "probs" keeps each expert's `capacity` highest-weight assignments
// (ties to the lower token index), "position" its first `capacity` in token order; the rest
// are dropped.
template <typename T>
CapacityDrop moe_capacity_drop(const std::vector<int32_t>& experts, const std::vector<T>& weights,
                               int64_t tokens, int64_t topk, int64_t num_experts,
                               double capacity_factor, bool by_position = false);

}  // namespace mg
