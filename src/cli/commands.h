// The option tables of the `megatron` subcommands.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/convert.h"
#include "cli/option_table.h"
#include "data/preprocess.h"
#include "inference/generate.h"
#include "inference/server.h"
#include "train/train_config.h"

namespace mg {

const std::vector<Option<TrainConfig>>& train_options();
const std::vector<Option<PreprocessConfig>>& preprocess_options();
const std::vector<Option<MergeConfig>>& merge_options();
const std::vector<Option<GenerateConfig>>& generate_options();
const std::vector<Option<ServeConfig>>& serve_options();
const std::vector<Option<ConvertConfig>>& convert_options();

inline TrainConfig parse_train_args(const std::vector<std::string>& args,
                                    std::set<std::string>* given = nullptr) {
  return parse_args(train_options(), args, "train", given);
}

}  // namespace mg
