// The `megatron` binary: one program, subcommands (cli/subcommands.h's table). User errors
// print one line naming the flag or file and exit 2; a failure on one rank ends every rank of
// the job.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/subcommands.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/log.h"

namespace {

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// A command without MPI: one process, its own error prefix.
int run_alone(const mg::Subcommand& c, const std::vector<std::string>& args) {
  try {
    return c.run(args, nullptr);
  } catch (const mg::UsageError& e) {
    mg::log_error(std::string("megatron ") + c.name + ": error: " + e.what());
    return 2;
  } catch (const std::exception& e) {
    mg::log_error(std::string("megatron ") + c.name + ": internal error: " + e.what());
    return 1;
  }
}

int run_under_mpi(const mg::Subcommand& c, const std::vector<std::string>& args, int* argc,
                  char*** argv) {
  if (c.blocks_stop_signals) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  }
  mg::MpiSession mpi(argc, argv);
  mg::set_log_rank(mpi.world_rank());
  try {
    return c.run(args, &mpi);
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

}  // namespace

int main(int argc, char** argv) {
  // Keep large freed blocks (oneDNN's GEMM packing buffers) in the heap instead of returning
  // them to the kernel with munmap after every call: re-faulting and zeroing those pages cost
  // several percent of a training step.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(mg::usage_text().c_str(), stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  for (const mg::Subcommand& c : mg::subcommands()) {
    if (command != c.name) continue;
    if (wants_help(args)) {
      std::fputs(c.help().c_str(), stdout);
      return 0;
    }
    return c.needs_mpi ? run_under_mpi(c, args, &argc, &argv) : run_alone(c, args);
  }
  mg::log_error("megatron: error: unknown command '" + command + "' (see `megatron --help`)");
  return 2;
}
