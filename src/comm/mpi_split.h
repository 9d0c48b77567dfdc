// The MPI communicator of this rank's group among disjoint groups of world ranks: the split
// both the MPI and the NCCL communicators are built on.
#pragma once
#include <mpi.h>

#include <vector>

namespace mg {

// Every rank must pass the same groups (world ranks, in group order). Returns a new
// communicator ordered as the group lists this rank's group, or MPI_COMM_NULL if it is in none.
MPI_Comm split_world(const std::vector<std::vector<int>>& groups);

}  // namespace mg
