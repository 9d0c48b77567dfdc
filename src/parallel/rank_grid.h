// Megatron's rank grid: world = TP x CP x EP x DP x PP in the order "tp-cp-ep-dp-pp", TP
// fastest-varying (adjacent ranks), so rank = tp + TP * (cp + CP * (dp + DP * pp)) with CP = EP
// = 1 today. Groups over any subset of dimensions follow parallel_state's
// generate_masked_orthogonal_rank_groups: groups ordered by their index over the other
// dimensions, members by their index over the grouped ones.
#pragma once
#include <string>
#include <vector>

namespace mg {

struct RankGrid {
  int tp = 1, pp = 1, dp = 1;  // sizes
  int world() const { return tp * pp * dp; }

  struct Coord {
    int tp, dp, pp;
  };
  Coord coord(int rank) const { return {rank % tp, (rank / tp) % dp, rank / (tp * dp)}; }
  int rank_of(const Coord& c) const { return c.tp + tp * (c.dp + dp * c.pp); }

  // All groups spanning the '-'-joined dimensions, e.g. "tp", "dp", "pp", "tp-pp".
  std::vector<std::vector<int>> groups(const std::string& dims) const;
  // Megatron's embedding groups: {first, last} stage of each pipeline ({first} when PP = 1).
  std::vector<std::vector<int>> embedding_groups() const;
};

}  // namespace mg
