// `megatron plan`, the command: its own flags beside train's, and what it does with them
// (measure or load a device profile, plan one layout or search them all, print a report or
// JSON). The model of memory and time is planner.h's.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "train/train_config.h"

namespace mg {

struct PlanCommand {
  TrainConfig train;
  int num_gpus = 0;  // --num-gpus / --world-size (0: 1)
  std::string device_profile = "h100-sxm";
  bool search = false;
  int top = 5;
  bool json = false;
  bool profile_device = false;
  bool show_profile = false;
  std::string output;
};

// Runs the command on every rank (a profile measured now needs them all); rank 0 prints.
// args: the command line as given (recorded as the plan's argv); train_args: its `train` flags
// (plan's own removed), which --search's suggested commands reuse; given: the flags given.
void run_plan(PlanCommand c, const std::vector<std::string>& args,
              std::vector<std::string> train_args, const std::set<std::string>& given,
              const MpiSession& mpi);

}  // namespace mg
