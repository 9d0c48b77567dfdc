// `megatron plan` flags: the device count and profile, the search and the output, then every
// `train` flag (a `train` command line with `train` replaced by `plan` plans that run).
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](PlanCommand& c) -> auto& { return c.expr; }

const std::vector<Option<PlanCommand>>& plan_options() {
  using C = PlanCommand;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = {
      valued<C>("--num-gpus", "N", "devices the run would use (default: --world-size, else 1)",
                MG_FIELD(num_gpus)),
      valued<C>("--world-size", "N", "the same as --num-gpus", MG_FIELD(num_gpus)),
      valued<C>("--device-profile", "NAME|FILE", "h100-sxm, h200, a100-80gb, cpu (measured on "
                "this machine now), or a profile JSON file (docs/planner.md)",
                MG_FIELD(device_profile)),
      on_off<C>("--search", "rank every valid layout of the model on --num-gpus devices by "
                "predicted throughput and print the fastest as train command lines",
                MG_FIELD(search)),
      valued<C>("--top", "N", "layouts --search prints", MG_FIELD(top)),
      on_off<C>("--json", "print JSON instead of the table", MG_FIELD(json)),
      on_off<C>("--profile-device", "measure this machine (GEMM shapes, memory bandwidth, MPI "
                "collectives over the ranks of `mpirun -np N`) and write a profile",
                MG_FIELD(profile_device)),
      on_off<C>("--show-profile", "print the --device-profile as JSON (a starting point for a "
                "profile file of your own) and exit", MG_FIELD(show_profile)),
      valued<C>("--output", "FILE", "where --profile-device writes the profile (default: stdout)",
                MG_FIELD(output)),
    };
    for (Option<C>& o : options_of<C>(train_options(), MG_FIELD(train))) t.push_back(std::move(o));
    return t;
  }();
  return table;
}

#undef MG_FIELD

std::vector<std::string> plan_train_args(const std::vector<std::string>& args) {
  static const std::set<std::string> valued = {"--num-gpus", "--world-size", "--device-profile",
                                               "--top", "--output"};
  static const std::set<std::string> switches = {"--search", "--json", "--profile-device",
                                                 "--show-profile"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (switches.count(name)) continue;
    if (valued.count(name)) {
      if (args[i].find('=') == std::string::npos) ++i;
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

}  // namespace mg
// clang-format on
