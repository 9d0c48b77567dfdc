// The option tables of the `megatron` subcommands (subcommands.h runs them).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "checkpoint/convert.h"
#include "cli/option_table.h"
#include "data/preprocess.h"
#include "inference/generate.h"
#include "plan/plan_command.h"
#include "serve/server.h"
#include "train/train_config.h"

namespace mg {

const std::vector<Option<TrainConfig>>& train_options();
const std::vector<Option<PreprocessConfig>>& preprocess_options();
const std::vector<Option<MergeConfig>>& merge_options();
const std::vector<Option<GenerateConfig>>& generate_options();
// `megatron serve`: its own flags (ServeConfig's) and every `train` flag, as upstream's server
// scripts pass them.
struct ServeCommand {
  ServeConfig serve;
  TrainConfig train;
  bool use_checkpoint_args = false;  // --use-checkpoint-args: model flags given yield to the
                                     // checkpoint's (upstream's meaning) instead of being checked
  // tools/run_text_generation_server.py's generation flags: read and unused (requests carry
  // their own sampling), as there.
  double temperature = 1.0, top_p = 0.0;
  int64_t top_k = 1, num_tokens_to_generate = 30;
  bool return_log_probs = false;
  std::vector<std::string> prompts;
};
const std::vector<Option<ServeCommand>>& serve_options();
// The server's config: the model is the checkpoint's (--load); a structural model flag given
// must agree with it (UsageError naming the flag) unless --use-checkpoint-args, the others
// (--seq-length) apply; the layout, precision, device and tokenizer from `train`'s flags.
ServeConfig serve_config(const ServeCommand& c, const std::set<std::string>& given);
const std::vector<Option<ConvertConfig>>& convert_options();
// `megatron plan`: its own flags (plan/plan_command.h) and every `train` flag.
const std::vector<Option<PlanCommand>>& plan_options();
// The `train` flags of a plan command line (plan's own removed): --search's commands reuse them.
std::vector<std::string> plan_train_args(const std::vector<std::string>& args);

inline TrainConfig parse_train_args(const std::vector<std::string>& args,
                                    std::set<std::string>* given = nullptr) {
  return parse_args(train_options(), args, "train", given);
}

}  // namespace mg
