// MPI implementation of Communicator, and the process-wide MPI session (init/finalize/abort).
// Every blocking call is a non-blocking one waited for within --distributed-timeout-minutes
// (comm/watchdog.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mg {

// Initializes MPI when the process was started by an MPI launcher (mpirun / mpiexec / a PMI
// launcher); a plain single process runs without MPI at all (no singleton start-up).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  bool active() const { return active_; }
  // Ends every rank of the job (a rank-local failure must not leave the others waiting).
  [[noreturn]] static void abort(int code);

 private:
  int rank_ = 0, size_ = 1;
  bool active_ = false;
};

// This rank's place among the ranks of its node. From MPI when it is running (the ranks
// sharing memory; every rank must call it then), else the launcher's variables
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), else 0. A GPU run picks its
// GPU by it (ops::set_device).
int local_rank();
// How many ranks run on this node (the same sources; 1 when none says).
int local_size();

// The whole job.
std::unique_ptr<Communicator> mpi_world();
// Root's bytes to every rank of the job (resized to fit), on a communicator of their own. The
// others wait without a bound and without spinning (sleeping between tests): a server's
// followers idle here until the next command, for as long as no request comes.
void mpi_broadcast_idle(std::vector<uint8_t>& bytes, int root);
// Splits MPI_COMM_WORLD into the given disjoint groups (world ranks, in group order; every
// rank must pass the same list). Returns this rank's group, or nullptr if it is in none. The
// name ("tensor-parallel", ...) is how timeout reports call the group (comm/watchdog.h).
std::unique_ptr<Communicator> mpi_group(const std::vector<std::vector<int>>& groups,
                                        const std::string& name);

}  // namespace mg
