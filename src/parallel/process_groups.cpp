#include "parallel/process_groups.h"

#include "comm/mpi_communicator.h"
#include "comm/staging_communicator.h"
#include "core/error.h"
#ifdef MG_HAS_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace mg {

std::vector<ProcessGroups::Named> ProcessGroups::named() const {
  const std::vector<Named> all = {{"world", world.get()},
                                  {"tp", tp.get()},
                                  {"pp", pp.get()},
                                  {"dp", dp.get()},
                                  {"cp", cp.get()},
                                  {"dp_cp", dp_cp.get()},
                                  {"model_parallel", model_parallel.get()},
                                  {"embedding", embedding.get()},
                                  {"ep", ep.get()},
                                  {"edp", edp.get()},
                                  {"etp_ep", etp_ep.get()},
                                  {"expert_mp", expert_mp.get()}};
  std::vector<Named> out;
  for (const Named& n : all)
    if (n.comm) out.push_back(n);
  return out;
}

namespace {
// Every group but the world, each made by `make` from its lists of world ranks. Every rank
// creates every group in the same order (a collective per split).
// Groups are named as timeout reports call them.
template <typename Make>
void make_groups(ProcessGroups& g, const RankGrid& grid, Make make) {
  g.tp = make(grid.groups("tp"), "tensor-parallel");
  g.pp = make(grid.groups("pp"), "pipeline");
  g.dp = make(grid.groups("dp"), "data-parallel");
  g.cp = make(grid.groups("cp"), "context-parallel");
  g.dp_cp = make(grid.groups("dp-cp"), "data-context-parallel");
  g.model_parallel = make(grid.groups("tp-pp"), "model-parallel");
  g.embedding = make(grid.embedding_groups(), "embedding");
  if (grid.ep > 1) g.ep = make(grid.expert_groups("ep"), "expert-parallel");
  if (grid.ep > 1 || grid.folded()) g.edp = make(grid.expert_groups("edp"), "expert-data-parallel");
  if (grid.folded()) {
    g.etp_ep = make(grid.expert_groups("etp-ep"), "expert-tensor-and-expert-parallel");
    g.expert_mp = make(grid.expert_groups("etp-ep-pp"), "expert-model-parallel");
  }
}
}  // namespace

namespace {
// The world over MPI and this rank's place in the grid; the other groups still to be made.
ProcessGroups mpi_world_groups(const RankGrid& grid) {
  ProcessGroups g;
  g.grid = grid;
  g.world = mpi_world();
  MG_CHECK(g.world->size() == grid.world(), "world size ", g.world->size(), " != grid ",
           grid.world());
  g.world_rank = g.world->rank();
  g.coord = grid.coord(g.world_rank);
  // Every rank has arrived (within --distributed-timeout-minutes) before the splits, which
  // MPI offers only as blocking calls.
  g.world->barrier();
  return g;
}
}  // namespace

ProcessGroups make_mpi_process_groups(const RankGrid& grid) {
  ProcessGroups g = mpi_world_groups(grid);
  make_groups(g, grid, mpi_group);
  return g;
}

ProcessGroups make_gpu_process_groups(const RankGrid& grid, const std::string& backend) {
  MG_USER_CHECK(backend == "mpi" || backend == "nccl", "--distributed-backend '", backend, "'");
#ifdef MG_HAS_CUDA
  if (backend == "nccl") check_one_gpu_per_rank();  // NCCL refuses two ranks on one GPU
#else
  MG_USER_CHECK(backend == "mpi", "--distributed-backend nccl needs a build with the CUDA backend");
#endif
  ProcessGroups g = mpi_world_groups(grid);
  // The world stays on MPI (host values); its GPU buffers are staged through the host.
  g.world = make_staging_communicator(std::move(g.world), Device::CPU);
  make_groups(g, grid, [&](const std::vector<std::vector<int>>& groups, const std::string& name) {
#ifdef MG_HAS_CUDA
    if (backend == "nccl") return make_staging_communicator(nccl_group(groups, name), Device::CUDA);
#endif
    return make_staging_communicator(mpi_group(groups, name), Device::CPU);
  });
  return g;
}

ProcessGroups make_single_process_groups() {
  ProcessGroups g;
  g.world = make_self_communicator();
  g.tp = make_self_communicator();
  g.pp = make_self_communicator();
  g.dp = make_self_communicator();
  g.cp = make_self_communicator();
  g.dp_cp = make_self_communicator();
  g.model_parallel = make_self_communicator();
  g.embedding = make_self_communicator();
  return g;
}

}  // namespace mg
