// What the MPI and the NCCL communicators share of MPI: the communicator of this rank's group
// among disjoint groups of world ranks (the split both are built on), and the bounded wait.
#pragma once
#include <mpi.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace mg {

// Every rank must pass the same groups (world ranks, in group order). Returns a new
// communicator ordered as the group lists this rank's group, or MPI_COMM_NULL if it is in none.
MPI_Comm split_world(const std::vector<std::vector<int>>& groups);
// The group of groups that holds this rank (world ranks), or none.
std::vector<int> my_group(const std::vector<std::vector<int>>& groups);

// Waits for n requests within --distributed-timeout-minutes (comm/watchdog.h): op over group,
// or the point-to-point batch p2p. Requests already complete cost one MPI_Testall.
void wait_mpi(MPI_Request* reqs, int n, const char* op, const GroupInfo& group,
              const std::vector<P2POp>* p2p = nullptr);

}  // namespace mg
