// Megatron's rank grid: world = TP x CP x EP x DP x PP in the order "tp-cp-ep-dp-pp", TP
// fastest-varying (adjacent ranks), so rank = tp + TP * (cp + CP * (dp + DP * pp)) with EP = 1
// today. Groups over any subset of dimensions follow parallel_state's
// generate_masked_orthogonal_rank_groups: groups ordered by their index over the other
// dimensions, members by their index over the grouped ones.
#pragma once
#include <string>
#include <vector>

namespace mg {

struct RankGrid {
  int tp = 1, pp = 1, dp = 1;  // sizes (dp: the pure data-parallel replicas)
  int cp = 1;                  // context-parallel size (last, so {tp, pp, dp} still reads)
  // Expert parallelism (MoE layers only): the experts' own grid is "etp-ep-edp-pp" over the
  // same ranks (Megatron's parallel folding): within a pipeline stage, a rank's dense index
  // j = tp + TP (cp + CP dp) is read as etp + ETP (ep + EP edp), ETP the experts' TP
  // (--expert-tensor-parallel-size; 0 here means TP). With ETP = TP this is the dense layout's
  // CP x DP ranks split into EP x EDP (EP fastest).
  int ep = 1;
  int etp = 0;
  int expert_tp() const { return etp > 0 ? etp : tp; }
  bool folded() const { return expert_tp() != tp; }  // experts split otherwise than the MLP
  int edp() const { return tp * cp * dp / (expert_tp() * ep); }
  int world() const { return tp * cp * pp * dp; }

  struct Coord {
    int tp, dp, pp;
    int cp = 0;
  };
  Coord coord(int rank) const {
    return {rank % tp, (rank / (tp * cp)) % dp, rank / (tp * cp * dp), (rank / tp) % cp};
  }
  int rank_of(const Coord& c) const { return c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp)); }
  // A rank's place in the experts' grid.
  int ep_rank(const Coord& c) const { return stage_index(c) / expert_tp() % ep; }
  int edp_rank(const Coord& c) const { return stage_index(c) / (expert_tp() * ep); }
  int etp_rank(const Coord& c) const { return stage_index(c) % expert_tp(); }
  int stage_index(const Coord& c) const { return c.tp + tp * (c.cp + cp * c.dp); }

  // All groups spanning the '-'-joined dimensions, e.g. "tp", "cp", "dp", "pp", "tp-pp"
  // (model parallel), "dp-cp" (gradient reduction), "tp-cp".
  std::vector<std::vector<int>> groups(const std::string& dims) const;
  // The experts' groups over "ep" (token exchange), "edp" (expert gradients, the distributed
  // optimizer's expert shards), "etp-ep" (folding's token exchange) or "etp-ep-pp" (experts'
  // norms when folded); as groups() orders them.
  std::vector<std::vector<int>> expert_groups(const std::string& dims) const;
  // Megatron's embedding groups: {first, last} stage of each pipeline ({first} when PP = 1).
  std::vector<std::vector<int>> embedding_groups() const;
};

}  // namespace mg
