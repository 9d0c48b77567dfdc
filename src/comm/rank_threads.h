// Threads per rank. Ranks that share a node divide its cores among themselves,
// as torchrun's OMP_NUM_THREADS=1 keeps Megatron's ranks from oversubscribing a node: without
// it, every rank's OpenMP pool would take every core and N ranks would spin-wait on each
// other (measured: bench/rank_threads.sh). An explicit OMP_NUM_THREADS wins.
#pragma once
#include <string>

namespace mg {

struct RankThreads {
  int threads = 1;        // the OpenMP threads this rank uses
  int cores = 1;          // the node's cores (std::thread::hardware_concurrency)
  int usable_cores = 1;   // the cores this rank may run on (sched_getaffinity)
  int ranks_on_node = 1;  // local_size(): ranks sharing the node's memory
  bool from_env = false;  // OMP_NUM_THREADS was given
};

// The rule, without side effects: OMP_NUM_THREADS (omp_env, non-empty) gives `env_threads`;
// else max(1, min(usable_cores, cores / ranks_on_node)).
RankThreads choose_rank_threads(int cores, int usable_cores, int ranks_on_node, const char* omp_env,
                                int env_threads);

// Applies the rule to this process (omp_set_num_threads unless OMP_NUM_THREADS is set) and
// returns what it chose. Calls local_size(), so with MPI running every rank must call it.
RankThreads set_rank_threads();

// The start-up line: " > threads per rank: 1 (2 cores / 8 ranks on this node)".
std::string describe(const RankThreads& t);

}  // namespace mg
