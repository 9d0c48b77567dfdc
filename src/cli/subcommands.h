// The `megatron` binary's subcommands as one table: a name, the line `megatron --help` shows,
// the command's own --help, the function that runs it, and whether it runs under MPI. main()
// only looks a command up here and reports its errors.
#pragma once
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"

namespace mg {

struct Subcommand {
  const char* name;
  const char* summary;    // its line in `megatron --help` ('\n' continues it, indented)
  std::string (*help)();  // `megatron NAME --help`: the usage line and the option table
  // Runs the command on its arguments (the command name removed); mpi is null unless
  // needs_mpi. Returns the exit status; a UsageError it throws exits 2.
  int (*run)(const std::vector<std::string>& args, const MpiSession* mpi);
  bool needs_mpi;            // starts MPI: every rank runs it, a failure on one ends the job
  bool blocks_stop_signals;  // SIGINT/SIGTERM blocked before MPI starts its threads, so the
                             // command's own thread waits for them (serve: mg::serve)
};

const std::vector<Subcommand>& subcommands();

// `megatron --help`: what the program is, then each subcommand's summary line.
std::string usage_text();

}  // namespace mg
