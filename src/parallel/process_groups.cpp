#include "parallel/process_groups.h"

#include "comm/mpi_communicator.h"
#include "comm/staging_communicator.h"
#include "core/error.h"
#ifdef MG_HAS_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace mg {

namespace {
// Every group but the world, each made by `make` from its lists of world ranks. Every rank
// creates every group in the same order (a collective per split).
template <typename Make>
void make_groups(ProcessGroups& g, const RankGrid& grid, Make make) {
  g.tp = make(grid.groups("tp"));
  g.pp = make(grid.groups("pp"));
  g.dp = make(grid.groups("dp"));
  g.model_parallel = make(grid.groups("tp-pp"));
  g.embedding = make(grid.embedding_groups());
}
}  // namespace

ProcessGroups make_mpi_process_groups(const RankGrid& grid) {
  ProcessGroups g;
  g.grid = grid;
  g.world = mpi_world();
  MG_CHECK(g.world->size() == grid.world(), "world size ", g.world->size(), " != grid ",
           grid.world());
  g.world_rank = g.world->rank();
  g.coord = grid.coord(g.world_rank);
  make_groups(g, grid,
              [](const std::vector<std::vector<int>>& groups) { return mpi_group(groups); });
  return g;
}

ProcessGroups make_gpu_process_groups(const RankGrid& grid, const std::string& backend) {
  ProcessGroups g = make_mpi_process_groups(grid);
  auto host = [](std::unique_ptr<Communicator>& c) {
    c = make_staging_communicator(std::move(c), Device::CPU);
  };
  host(g.world);
  if (backend == "mpi") {
    for (auto* c : {&g.tp, &g.pp, &g.dp, &g.model_parallel, &g.embedding}) host(*c);
    return g;
  }
  MG_USER_CHECK(backend == "nccl", "--distributed-backend '", backend, "'");
#ifdef MG_HAS_CUDA
  make_groups(g, grid, [](const std::vector<std::vector<int>>& groups) {
    return make_staging_communicator(nccl_group(groups), Device::CUDA);
  });
  return g;
#else
  MG_USER_CHECK(false, "--distributed-backend nccl needs a build with the CUDA backend");
  return g;
#endif
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
