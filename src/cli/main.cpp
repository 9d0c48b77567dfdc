// The `megatron` binary: one program, subcommands (train now; preprocess, generate, serve,
// convert and plan as they land). User errors print one line naming the flag and exit 2.
#include <malloc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/options.h"
#include "core/error.h"
#include "core/log.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: megatron <command> [flags]\n\n"
    "Trains GPT-style transformer language models, the way Megatron-LM does, in one native "
    "program.\n\n"
    "commands:\n"
    "  train     train a model (megatron train --help for its flags)\n\n"
    "Threads: set OMP_NUM_THREADS (default: all cores).\n";

int run(int argc, char** argv) {
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
    cfg.finalize_and_validate();
    mg::run_training(cfg);
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
  try {
    return run(argc, argv);
  } catch (const mg::UsageError& e) {
    mg::log_error(std::string("megatron: error: ") + e.what());
    return 2;
  } catch (const std::exception& e) {
    mg::log_error(std::string("megatron: internal error: ") + e.what());
    return 1;
  }
}
