// The one option table behind `megatron train`: --help text, parsing and per-flag type checks
// are all generated from it, so they cannot drift. Semantic validation lives next to each config
// (TrainConfig::finalize_and_validate).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace mg {

struct Option {
  std::string flag;      // "--hidden-size"
  std::string metavar;   // "N"; empty for on/off switches
  std::string help;
  std::function<void(TrainConfig&, const std::string&)> set;
  std::function<std::string(const TrainConfig&)> show;  // current value, for --help defaults
};

const std::vector<Option>& train_options();

// Parses argv-style arguments (without the subcommand). Throws UsageError naming the flag.
TrainConfig parse_train_args(const std::vector<std::string>& args);

std::string train_help();

}  // namespace mg
