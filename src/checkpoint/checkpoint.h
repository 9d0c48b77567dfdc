// Distributed checkpoints in global coordinates (docs/checkpoint-format.md). Every tensor piece
// is stored with its key, dtype, global shape and where it sits in the global tensor (TP split
// and element range), so model weights and optimizer state reload into any TP/PP/DP layout,
// with or without the distributed optimizer. Each rank writes its own shard file in parallel,
// and each piece exactly once (DP replicas and TP-replicated copies write nothing).
// Saving is atomic: everything goes to iter_%07d.tmp, is fsynced and checksummed, and only
// after every rank finished is the directory renamed and latest_checkpointed_iteration.txt
// replaced (a crash at any moment leaves the previous complete checkpoint as the latest).
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "checkpoint/checkpoint_config.h"
#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"

namespace mg {

// Version 2 records each piece's partition stride and the whole model description; version 1
// checkpoints (GPT-2 only, no strides) still load.
constexpr int kCheckpointVersion = 2;

// Training progress saved beside the tensors.
struct TrainProgress {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0, consumed_valid_samples = 0;
  int64_t scheduler_samples = 0;  // the LR schedule's clock (successful steps only)
  int64_t skipped_iterations = 0;
  bool has_scaler = false;
  LossScalerState scaler;
};

// What a checkpoint reads and writes on this rank.
struct CheckpointIO {
  GPTModel& model;
  Optimizer& optimizer;  // the plain optimizer, or the distributed optimizer's shard optimizer
  ProcessGroups& groups;
  const CheckpointConfig& cfg;
  bool distributed_optimizer;
};

std::string checkpoint_dir_name(int64_t iteration);  // "iter_0000010"
// The directory of dir's latest complete checkpoint ("" when dir holds none).
std::string latest_checkpoint_dir(const std::string& dir);
// Stops with one message listing every structural field (model/fields.cpp) on which the model
// record `saved` (a checkpoint's "model", or a --dump-final-params file's) and cfg disagree, as
// the flags that give each; `where` names the file ("checkpoint 'DIR'").
void check_model_record(const nlohmann::json& saved, const GPTConfig& cfg, const std::string& where);
// The model record of cfg (every field, resolved), as checkpoints store it.
nlohmann::json model_record(const GPTConfig& cfg);
// The model config recorded in the latest checkpoint under dir.
GPTConfig checkpoint_model_config(const std::string& dir);

// Collective over all ranks: saves under cfg.save. Logs time, bytes and bandwidth.
void save_checkpoint(const CheckpointIO& io, const TrainProgress& progress);
// Loads cfg.load's latest checkpoint into the model (and optimizer, unless --no-load-optim or
// --finetune) and fills progress (left at zero under --finetune). Returns false when the
// directory holds no checkpoint (a fresh start; an error with --exit-on-missing-checkpoint).
// Verifies checksums and shapes; a mismatch stops with the file or key and what was expected.
bool load_checkpoint(const CheckpointIO& io, TrainProgress& progress);

}  // namespace mg
