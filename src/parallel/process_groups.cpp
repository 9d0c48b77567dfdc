#include "parallel/process_groups.h"

#include "comm/mpi_communicator.h"
#include "core/error.h"

namespace mg {

ProcessGroups make_mpi_process_groups(const RankGrid& grid) {
  ProcessGroups g;
  g.grid = grid;
  g.world = mpi_world();
  MG_CHECK(g.world->size() == grid.world(), "world size ", g.world->size(), " != grid ",
           grid.world());
  g.world_rank = g.world->rank();
  g.coord = grid.coord(g.world_rank);
  // Every rank creates every group in the same order (a collective per split).
  g.tp = mpi_group(grid.groups("tp"));
  g.pp = mpi_group(grid.groups("pp"));
  g.dp = mpi_group(grid.groups("dp"));
  g.model_parallel = mpi_group(grid.groups("tp-pp"));
  g.embedding = mpi_group(grid.embedding_groups());
  return g;
}

ProcessGroups make_single_process_groups() {
  ProcessGroups g;
  g.world = make_self_communicator();
  g.tp = make_self_communicator();
  g.pp = make_self_communicator();
  g.dp = make_self_communicator();
  g.model_parallel = make_self_communicator();
  g.embedding = make_self_communicator();
  return g;
}

}  // namespace mg
