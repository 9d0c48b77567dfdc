// This rank's place in the grid and its communicators, built once at start-up and passed
// explicitly to whatever needs them (no global state).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "parallel/rank_grid.h"

namespace mg {

struct ProcessGroups {
  RankGrid grid;
  int world_rank = 0;
  RankGrid::Coord coord{0, 0, 0};
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tp;              // tensor parallel
  std::unique_ptr<Communicator> pp;              // pipeline stages of this model replica
  std::unique_ptr<Communicator> dp;              // data-parallel replicas (the loader's)
  std::unique_ptr<Communicator> cp;              // context parallel: ranks sharing sequences
  std::unique_ptr<Communicator> dp_cp;           // dp x cp: dense gradients are reduced and the
                                                 // distributed optimizer shards over it
  std::unique_ptr<Communicator> model_parallel;  // tp x pp: one model replica (grad norm)
  std::unique_ptr<Communicator> embedding;       // first + last stage; null on middle stages
  std::unique_ptr<Communicator> ep;              // expert parallel (EP > 1 only): MoE tokens
                                                 // are exchanged over it
  std::unique_ptr<Communicator> edp;             // expert data parallel (EP > 1 or folded)
  // Parallel folding (RankGrid::folded, expert TP other than TP) only:
  std::unique_ptr<Communicator> etp_ep;     // the experts' ETP x EP ranks: each TP rank's
                                            // share of the tokens is dispatched over it
  std::unique_ptr<Communicator> expert_mp;  // ETP x EP x PP: the experts' norms

  // The group expert gradients are reduced and sharded over: TP x DP x CP / (ETP x EP) ranks
  // (RankGrid::edp), which is DP x CP itself when EP = 1 and ETP = TP (no group of its own).
  Communicator& expert_dp() const { return edp ? *edp : *dp_cp; }
  // The EP rank's sum of a value (itself when EP = 1).
  double ep_sum(double v) const { return ep ? all_reduce_sum(*ep, v) : v; }
  // A whole-model sum from this rank's parts (each element counted once per TP shard):
  // `dense` summed over TP x PP, `experts` over the experts' ETP x EP x PP.
  double model_sum(double dense, double experts) const {
    if (expert_mp)
      return all_reduce_sum(*model_parallel, dense) + all_reduce_sum(*expert_mp, experts);
    return all_reduce_sum(*model_parallel, dense + ep_sum(experts));
  }

  // The groups by name (the field names above), in declaration order, those this rank has
  // (embedding is null on middle stages, the expert groups without EP or folding): what walks
  // every group (the log line's byte counters) looks them up here, not by position.
  struct Named {
    std::string_view name;
    Communicator* comm;
  };
  std::vector<Named> named() const;

  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == grid.pp - 1; }
};

// Over MPI_COMM_WORLD (which must have grid.world() ranks).
ProcessGroups make_mpi_process_groups(const RankGrid& grid);
// For GPU training over MPI_COMM_WORLD: backend "mpi" wraps the MPI groups so GPU buffers are
// staged through host memory; "nccl" builds every group but the world over NCCL (host values
// such as loss sums are staged through the device), the world over MPI. Needs the GPU selected.
ProcessGroups make_gpu_process_groups(const RankGrid& grid, const std::string& backend);
// A single process: every group is this rank alone.
ProcessGroups make_single_process_groups();

}  // namespace mg
