#include "comm/rank_threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "comm/mpi_communicator.h"
#include "core/error.h"

namespace mg {

RankThreads choose_rank_threads(int cores, int usable_cores, int ranks_on_node, const char* omp_env,
                                int env_threads) {
  RankThreads t;
  t.cores = std::max(1, cores);
  t.usable_cores = std::max(1, usable_cores);
  t.ranks_on_node = std::max(1, ranks_on_node);
  t.from_env = omp_env != nullptr && *omp_env != '\0';
  t.threads = t.from_env ? std::max(1, env_threads)
                         : std::max(1, std::min(t.usable_cores, t.cores / t.ranks_on_node));
  return t;
}

RankThreads set_rank_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hw = int(std::thread::hardware_concurrency());
  const int usable = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : hw;
  // The OpenMP runtime has read OMP_NUM_THREADS itself: its value is what the env gives.
  const RankThreads t = choose_rank_threads(hw > 0 ? hw : usable, usable, local_size(),
                                            std::getenv("OMP_NUM_THREADS"), omp_get_max_threads());
  if (!t.from_env) omp_set_num_threads(t.threads);
  return t;
}

std::string describe(const RankThreads& t) {
  if (t.from_env) return str_cat(" > threads per rank: ", t.threads, " (OMP_NUM_THREADS)");
  const bool bound = t.usable_cores < t.cores / std::max(t.ranks_on_node, 1);
  return str_cat(" > threads per rank: ", t.threads, " (", t.cores, " cores / ", t.ranks_on_node,
                 t.ranks_on_node == 1 ? " rank" : " ranks", " on this node",
                 bound ? str_cat(", bound to ", t.usable_cores, " cores") : std::string(),
                 "; OMP_NUM_THREADS overrides)");
}

}  // namespace mg
