// The `megatron` binary: one program, subcommands (train now; preprocess, generate, serve,
// convert and plan as they land). User errors print one line naming the flag and exit 2.
#include <malloc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/options.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/process_groups.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: megatron <command> [flags]\n\n"
    "Trains GPT-style transformer language models, the way Megatron-LM does, in one native "
    "program.\n\n"
    "commands:\n"
    "  train     train a model (megatron train --help for its flags)\n\n"
    "Threads: set OMP_NUM_THREADS (default: all cores).\n"
    "Many ranks: mpirun -np N megatron train ... (data-parallel size = N / (TP x PP)).\n";

int run(int argc, char** argv, const mg::MpiSession& mpi) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "train") {
    for (const std::string& a : args)
      if (a == "--help" || a == "-h") {
        std::fputs(mg::train_help().c_str(), stdout);
        return 0;
      }
    mg::TrainConfig cfg = mg::parse_train_args(args);
    const std::string warning = cfg.finalize_and_validate(mpi.world_size());
    if (!warning.empty()) mg::log_line(warning);
    mg::RankGrid grid{cfg.parallel.tp(), cfg.parallel.pp(), cfg.data_parallel_size};
    mg::ProcessGroups groups = mg::make_mpi_process_groups(grid);
    mg::run_training(cfg, groups);
    return 0;
  }
  throw mg::UsageError("unknown command '" + command + "' (see `megatron --help`)");
}

}  // namespace

int main(int argc, char** argv) {
  // Keep large freed blocks (oneDNN's GEMM packing buffers) in the heap instead of returning
  // them to the kernel with munmap after every call: re-faulting and zeroing those pages cost
  // several percent of a training step.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mg::MpiSession mpi(&argc, &argv);
  mg::set_log_rank(mpi.world_rank());
  try {
    return run(argc, argv, mpi);
  } catch (const mg::UsageError& e) {
    // Every rank validates the same flags, so every rank stops here; rank 0 says why.
    if (mpi.world_rank() == 0) mg::log_error(std::string("megatron: error: ") + e.what());
    return 2;
  } catch (const std::exception& e) {
    // A failure on one rank: end the whole job rather than leave the others waiting.
    mg::log_error(std::string("megatron: internal error: ") + e.what());
    if (mpi.world_size() > 1) mg::MpiSession::abort(1);
    return 1;
  }
}
