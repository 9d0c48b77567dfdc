// NCCL implementation of Communicator for ranks that each own one GPU: buffers are device
// pointers, collectives are queued on the CUDA compute stream (tensor/device_runtime.h) and the
// blocking calls return once that stream has finished them. Bootstrapped through MPI: rank 0 of
// the group makes the NCCL unique id and broadcasts it over the group's MPI communicator. Built
// only with the CUDA backend (MG_HAS_CUDA). Byte counters follow the MPI communicator's
// (docs/reference/formulas.md's ring convention), so both backends report the same figures.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mg {

// NCCL needs a GPU of its own for every rank: a usage error (naming --distributed-backend mpi)
// when two ranks of this node have selected the same GPU, told apart by PCI bus id, so a
// launcher that gives each rank one GPU through CUDA_VISIBLE_DEVICES passes. Collective over
// the ranks of each node.
void check_one_gpu_per_rank();

// The whole job over NCCL (every rank must call it).
std::unique_ptr<Communicator> nccl_world();
// As mpi_group: this rank's group of the given disjoint groups of world ranks, or nullptr.
std::unique_ptr<Communicator> nccl_group(const std::vector<std::vector<int>>& groups,
                                         const std::string& name);

}  // namespace mg
