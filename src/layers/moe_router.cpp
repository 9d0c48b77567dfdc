// MoE router forward/backward and capacity dropping (see moe_router.h for the upstream rules).
// Weights: softmax over the top-k logits (default), top-k of softmax over all E (pre-softmax), or
// top-k sigmoid scores divided by their sum when k > 1; then × the scaling factor.
#include "layers/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace mg {

void MoeRouterConfig::validate() const {
  MG_USER_CHECK(num_experts >= 1, "--num-experts must be >= 1 (got ", num_experts, ")");
  MG_USER_CHECK(topk >= 1 && topk <= num_experts, "--moe-router-topk must be in [1, ", num_experts,
                "] (got ", topk, ")");
  // Upstream's TransformerConfig refuses this too: softmax over a single logit is 1 whatever
  // the logit, so the router would get no gradient from the weights.
  MG_USER_CHECK(!(topk == 1 && score == RouterScore::Softmax && !pre_softmax),
                "--moe-router-topk 1 with the softmax score function needs "
                "--moe-router-pre-softmax");
  MG_USER_CHECK(topk_scaling_factor > 0, "--moe-router-topk-scaling-factor must be > 0 (got ",
                topk_scaling_factor, ")");
  MG_USER_CHECK(aux_loss_coeff >= 0 && z_loss_coeff >= 0,
                "--moe-aux-loss-coeff and --moe-z-loss-coeff must be >= 0");
  MG_USER_CHECK(group_topk >= 0 && num_groups >= 0,
                "--moe-router-group-topk and --moe-router-num-groups must be >= 0 (got ",
                group_topk, " and ", num_groups, ")");
  if (group_topk == 0) return;  // as upstream, --moe-router-num-groups alone routes plainly
  // Upstream's rules (TransformerConfig), and what makes the group scores and the choice
  // well defined: each chosen group contributes its best topk / group_topk scores.
  MG_USER_CHECK(num_groups >= 1, "--moe-router-group-topk ", group_topk,
                " needs --moe-router-num-groups (the number of expert groups)");
  MG_USER_CHECK(num_experts % num_groups == 0, "--num-experts ", num_experts,
                " must be divisible by --moe-router-num-groups ", num_groups);
  MG_USER_CHECK(group_topk <= num_groups, "--moe-router-group-topk ", group_topk,
                " must be <= --moe-router-num-groups ", num_groups);
  MG_USER_CHECK(topk >= group_topk && topk / group_topk <= num_experts / num_groups,
                "--moe-router-topk ", topk, " must be at least --moe-router-group-topk ",
                group_topk, " and at most it x the experts per group (", num_experts / num_groups,
                ")");
}

namespace {

// Sigmoid scores are normalised by sum + this, as upstream, so an all-zero row stays finite.
constexpr double kNormEps = 1e-20;

// The k best of row (n), best first; equal scores go to the lower index, as a stable sort would.
template <typename T>
void topk_indices(const T* row, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [row](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

// The token's k experts by score (best first): top-k among the experts of its best groups
// under group-limited routing (a group's score: the sum of its best k / group_topk scores;
// ties to the lower index, as everywhere), else the plain top-k.
template <typename T>
void choose_experts(const MoeRouterConfig& cfg, const T* scores, int32_t* out) {
  const int64_t E = cfg.num_experts, k = cfg.topk;
  if (cfg.group_topk == 0 || cfg.num_groups <= 1) return topk_indices(scores, E, k, out);
  const int64_t G = cfg.num_groups, per = E / G, best = k / cfg.group_topk;
  std::vector<T> group_score(static_cast<size_t>(G), T(0));
  std::vector<int32_t> top(static_cast<size_t>(best));
  for (int64_t g = 0; g < G; ++g) {
    topk_indices(scores + g * per, per, best, top.data());
    for (int32_t i : top) group_score[size_t(g)] += scores[g * per + i];
  }
  std::vector<int32_t> groups(static_cast<size_t>(cfg.group_topk));
  topk_indices(group_score.data(), G, cfg.group_topk, groups.data());
  std::vector<T> masked(static_cast<size_t>(E), -std::numeric_limits<T>::infinity());
  for (int32_t g : groups)
    for (int64_t e = g * per; e < (g + 1) * per; ++e) masked[size_t(e)] = scores[e];
  topk_indices(masked.data(), E, k, out);
}

// p (n) = softmax(x); returns logsumexp(x).
template <typename T>
T softmax_row(const T* x, int64_t n, T* p) {
  const T mx = *std::max_element(x, x + n);
  T sum = 0;
  for (int64_t e = 0; e < n; ++e) sum += p[e] = std::exp(x[e] - mx);
  for (int64_t e = 0; e < n; ++e) p[e] /= sum;
  return mx + std::log(sum);
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// dx += J_softmaxᵀ·dp for p = softmax(x): dx_e += p_e·(dp_e − Σ_m p_m·dp_m).
template <typename T>
void softmax_backward_row(const T* p, const T* dp, int64_t n, T* dx) {
  T dot = 0;
  for (int64_t e = 0; e < n; ++e) dot += p[e] * dp[e];
  for (int64_t e = 0; e < n; ++e) dx[e] += p[e] * (dp[e] - dot);
}

// q_j = s_j / (Σ s + eps) for s_j = sigmoid(x_j): dx_j += σ'(x_j)·(dq_j/S − Σ_m dq_m·s_m/S²).
template <typename T>
void normalized_sigmoid_backward(const T* s, const T* dq, int64_t n, T* dx_of_s) {
  T sum = 0, dot = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j], dot += dq[j] * s[j];
  const T den = sum + T(kNormEps);
  for (int64_t j = 0; j < n; ++j) dx_of_s[j] = dq[j] / den - dot / (den * den);
}

}  // namespace

template <typename T>
MoeRouterCache<T> moe_router_forward(const MoeRouterConfig& cfg, const T* logits, int64_t tokens,
                                     int64_t sequences) {
  cfg.validate();
  const int64_t E = cfg.num_experts, k = cfg.topk;
  MG_CHECK(sequences >= 1 && tokens % sequences == 0, tokens, " router tokens are not ", sequences,
           " sequences");
  MoeRouterCache<T> c;
  c.groups = cfg.per_sequence ? sequences : 1;
  const int64_t G = c.groups;
  c.experts.resize(size_t(tokens * k));
  c.weights.resize(size_t(tokens * k));
  c.aux_scores.resize(size_t(tokens * E));
  c.tokens_per_expert.assign(size_t(G * E), 0);
  c.score_sums.assign(size_t(G * E), T(0));
  std::vector<T> scores(static_cast<size_t>(E));  // (E) the scores top-k selects on
  std::vector<int32_t> aux_top(static_cast<size_t>(k));
  for (int64_t t = 0; t < tokens; ++t) {
    const T* x = logits + t * E;
    int32_t* ex = c.experts.data() + t * k;
    T* w = c.weights.data() + t * k;
    T* q = c.aux_scores.data() + t * E;
    const T lse = softmax_row(x, E, q);
    c.lse_sq_sum += lse * lse;
    if (cfg.score == RouterScore::Softmax) {
      if (cfg.pre_softmax) {
        choose_experts(cfg, q, ex);
        for (int64_t j = 0; j < k; ++j) w[j] = q[ex[j]];
      } else {
        choose_experts(cfg, x, ex);
        for (int64_t j = 0; j < k; ++j) scores[size_t(j)] = x[ex[j]];
        softmax_row(scores.data(), k, w);
      }
    } else {
      for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = sigmoid(x[e]);
      choose_experts(cfg, scores.data(), ex);
      T sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += w[j] = scores[size_t(ex[j])];
      if (k > 1)
        for (int64_t j = 0; j < k; ++j) w[j] /= sum + T(kNormEps);
      // The aux loss sees the sigmoid scores normalised over all E.
      T all = 0;
      for (int64_t e = 0; e < E; ++e) all += scores[size_t(e)];
      for (int64_t e = 0; e < E; ++e) q[e] = scores[size_t(e)] / (all + T(kNormEps));
    }
    for (int64_t j = 0; j < k; ++j) w[j] *= T(cfg.topk_scaling_factor);
    // Upstream counts f_e from its own top-k over the aux scores (the same order as the routing
    // scores, up to ties rounding creates).
    topk_indices(q, E, k, aux_top.data());
    for (int32_t e : aux_top) ++c.tokens_per_expert[size_t((t % G) * E + e)];
    T* sums = c.score_sums.data() + (t % G) * E;
    for (int64_t e = 0; e < E; ++e) sums[e] += q[e];
  }
  moe_router_global_losses(cfg, c, tokens);
  return c;
}

template <typename T>
void moe_router_global_losses(const MoeRouterConfig& cfg, MoeRouterCache<T>& c,
                              int64_t total_tokens) {
  // Per group g of n = T/G tokens: coeff·E·Σ_e (count_ge/(n·k))·(Σ_{t in g} q_te / n), then the
  // mean over the G groups.
  const int64_t E = cfg.num_experts, k = cfg.topk, G = c.groups;
  c.total_tokens = total_tokens;
  T aux = 0;
  for (int64_t i = 0; i < G * E; ++i)
    aux += c.score_sums[size_t(i)] * T(c.tokens_per_expert[size_t(i)]);
  const T n = T(total_tokens / G);
  c.aux_loss = aux * T(cfg.aux_loss_coeff) * T(E) / (T(k) * n * n * T(G));
  c.z_loss = T(cfg.z_loss_coeff) * c.lse_sq_sum / T(total_tokens);
}

template <typename T>
void moe_router_backward(const MoeRouterConfig& cfg, const MoeRouterCache<T>& c, const T* logits,
                         const T* dweights, int64_t tokens, T* dlogits) {
  const int64_t E = cfg.num_experts, k = cfg.topk, G = c.groups;
  const T n = T(c.total_tokens), per_group = T(c.total_tokens / G);
  const size_t nE = static_cast<size_t>(E), nk = static_cast<size_t>(k);
  std::vector<T> p(nE), dp(nE), s(nE), ds(nE);      // (E) per-token scratch
  std::vector<T> wk(nk), dwk(nk), sk(nk), dsk(nk);  // (k)
  for (int64_t t = 0; t < tokens; ++t) {
    const T* x = logits + t * E;
    const int32_t* ex = c.experts.data() + t * k;
    const T* dw = dweights + t * k;
    const T* q = c.aux_scores.data() + t * E;
    T* dx = dlogits + t * E;
    std::fill(dx, dx + E, T(0));
    const T lse = softmax_row(x, E, p.data());
    // z-loss: d/dx (coeff_z/T)·lse² = (coeff_z/T)·2·lse·softmax(x).
    const T zscale = T(cfg.z_loss_coeff) * T(2) * lse / n;
    for (int64_t e = 0; e < E; ++e) dx[e] += zscale * p[size_t(e)];
    // Routing weights (the scaling factor is a constant multiplier).
    for (int64_t j = 0; j < k; ++j) dwk[size_t(j)] = dw[j] * T(cfg.topk_scaling_factor);
    if (cfg.score == RouterScore::Softmax) {
      if (cfg.pre_softmax) {
        std::fill(dp.begin(), dp.end(), T(0));
        for (int64_t j = 0; j < k; ++j) dp[size_t(ex[j])] += dwk[size_t(j)];
        softmax_backward_row(p.data(), dp.data(), E, dx);
      } else {
        for (int64_t j = 0; j < k; ++j) sk[size_t(j)] = x[ex[j]];
        softmax_row(sk.data(), k, wk.data());
        std::fill(dsk.begin(), dsk.end(), T(0));
        softmax_backward_row(wk.data(), dwk.data(), k, dsk.data());
        for (int64_t j = 0; j < k; ++j) dx[ex[j]] += dsk[size_t(j)];
      }
    } else {
      for (int64_t j = 0; j < k; ++j) sk[size_t(j)] = sigmoid(x[ex[j]]);
      if (k > 1) normalized_sigmoid_backward(sk.data(), dwk.data(), k, dsk.data());
      else dsk[0] = dwk[0];
      for (int64_t j = 0; j < k; ++j)
        dx[ex[j]] += dsk[size_t(j)] * sk[size_t(j)] * (1 - sk[size_t(j)]);
    }
    // Aux loss: dq_te = coeff·E·count_ge/(n²·k·G) for token t of group g (n = T/G tokens),
    // counts held constant.
    if (cfg.aux_loss_coeff != 0) {
      const int64_t* count = c.tokens_per_expert.data() + (t % G) * E;
      for (int64_t e = 0; e < E; ++e)
        dp[size_t(e)] =
            T(cfg.aux_loss_coeff) * T(E) * T(count[e]) / (T(k) * per_group * per_group * T(G));
      if (cfg.score == RouterScore::Softmax) {
        softmax_backward_row(q, dp.data(), E, dx);
      } else {
        for (int64_t e = 0; e < E; ++e) s[size_t(e)] = sigmoid(x[e]);
        normalized_sigmoid_backward(s.data(), dp.data(), E, ds.data());
        for (int64_t e = 0; e < E; ++e) dx[e] += ds[size_t(e)] * s[size_t(e)] * (1 - s[size_t(e)]);
      }
    }
  }
}

int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts,
                            double capacity_factor) {
  MG_USER_CHECK(capacity_factor > 0, "--moe-expert-capacity-factor must be > 0 (got ",
                capacity_factor, ")");
  // Same association as upstream's get_capacity: (T·k / E) · c, then ceil.
  return int64_t(std::ceil(double(tokens * topk) / double(num_experts) * capacity_factor));
}

template <typename T>
CapacityDrop moe_capacity_drop(const std::vector<int32_t>& experts, const std::vector<T>& weights,
                               int64_t tokens, int64_t topk, int64_t num_experts,
                               double capacity_factor, bool by_position) {
  MG_CHECK(experts.size() == size_t(tokens * topk) && weights.size() == experts.size(),
           "experts and weights must be (T, k)");
  CapacityDrop d;
  d.capacity = moe_expert_capacity(tokens, topk, num_experts, capacity_factor);
  d.keep.assign(experts.size(), 1);
  std::vector<std::vector<int64_t>> per_expert(
      static_cast<size_t>(num_experts));  // flat (t, j) slots
  for (int64_t i = 0; i < int64_t(experts.size()); ++i) {
    MG_CHECK(experts[size_t(i)] >= 0 && experts[size_t(i)] < num_experts, "expert out of range");
    per_expert[size_t(experts[size_t(i)])].push_back(i);
  }
  for (auto& slots : per_expert) {
    if (int64_t(slots.size()) <= d.capacity) continue;
    // Slots are in token order and a token picks an expert at most once, so the index
    // tie-break is the lower token (and "position" keeps that order).
    if (!by_position)
      std::stable_sort(slots.begin(), slots.end(), [&weights](int64_t a, int64_t b) {
        return weights[size_t(a)] > weights[size_t(b)];
      });
    for (size_t i = size_t(d.capacity); i < slots.size(); ++i) {
      d.keep[size_t(slots[i])] = 0;
      ++d.dropped;
    }
  }
  return d;
}

#define MG_MOE_ROUTER_INSTANTIATE(T)                                                               \
  template MoeRouterCache<T> moe_router_forward<T>(const MoeRouterConfig&, const T*, int64_t,      \
                                                   int64_t);                                       \
  template void moe_router_global_losses<T>(const MoeRouterConfig&, MoeRouterCache<T>&, int64_t);  \
  template void moe_router_backward<T>(const MoeRouterConfig&, const MoeRouterCache<T>&, const T*, \
                                       const T*, int64_t, T*);                                     \
  template CapacityDrop moe_capacity_drop<T>(const std::vector<int32_t>&, const std::vector<T>&,   \
                                             int64_t, int64_t, int64_t, double, bool);
MG_MOE_ROUTER_INSTANTIATE(float)
MG_MOE_ROUTER_INSTANTIATE(double)
#undef MG_MOE_ROUTER_INSTANTIATE

}  // namespace mg
