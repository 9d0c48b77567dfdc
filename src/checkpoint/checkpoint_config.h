// What saving and loading a checkpoint read of the run's settings: the directories, what to
// skip, and what the checkpoint records (optimizer kind, seed, command line, model). train/
// fills it from its TrainConfig (TrainConfig::checkpoint_config), so checkpoint/ needs no train/.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace mg {

struct CheckpointConfig {
  std::string save;                         // --save DIR: where save_checkpoint writes
  std::string load;                         // --load DIR: where load_checkpoint reads
  bool no_save_optim = false;               // --no-save-optim: weights only
  bool no_load_optim = false;               // --no-load-optim: the optimizer starts afresh
  bool no_load_rng = false;                 // --no-load-rng: no note on a changed --seed
  bool finetune = false;                    // --finetune: params only, iteration 0
  bool exit_on_missing_checkpoint = false;  // --exit-on-missing-checkpoint
  int64_t ckpt_keep_last = 0;               // --ckpt-keep-last K (0: keep all)
  std::string optimizer = "adam";           // --optimizer: which state the checkpoint holds
  uint32_t seed = 1234;                     // --seed, recorded
  std::vector<std::string> argv;            // the command line, recorded
  GPTConfig model;                          // recorded, and checked against on load
};

}  // namespace mg
