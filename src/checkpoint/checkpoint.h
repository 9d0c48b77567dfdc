// Distributed checkpoints in global coordinates (docs/checkpoint-format.md). Every tensor piece
// is stored with its key, dtype, global shape and where it sits in the global tensor (TP split
// and element range), so model weights and optimizer state reload into any TP/PP/DP layout,
// with or without the distributed optimizer. Each rank writes its own shard file in parallel,
// and each piece exactly once (DP replicas and TP-replicated copies write nothing).
// Saving is atomic: everything goes to iter_%07d.tmp, is fsynced and checksummed, and only
// after every rank finished is the directory renamed and latest_checkpointed_iteration.txt
// replaced (a crash at any moment leaves the previous complete checkpoint as the latest;
// checkpoint_dir.h keeps the directory clean across crashes).
#pragma once
#include <string>

#include "checkpoint/checkpoint_config.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/metadata.h"
#include "checkpoint/model_record.h"
#include "model/param_store.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"

namespace mg {

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
  ParamStore& params;    // every model chunk of this rank
  Optimizer& optimizer;  // the plain optimizer, or the distributed optimizer's shard optimizer
  ProcessGroups& groups;
  const CheckpointConfig& cfg;
  bool distributed_optimizer;
};

// The directory of dir's latest checkpoint, as latest_checkpointed_iteration.txt names it ("" when
// dir has no such file).
std::string latest_checkpoint_dir(const std::string& dir);
// The model config recorded in the latest checkpoint under dir.
GPTConfig checkpoint_model_config(const std::string& dir);
// Checks one checkpoint directory (iter_%07d) without loading it: its metadata (fields,
// checksum, iteration = directory name), every index and every shard file's size and CRC-32.
void verify_checkpoint(const std::string& ckdir);

// Collective over all ranks: saves under cfg.save. Logs time, bytes and bandwidth.
void save_checkpoint(const CheckpointIO& io, const TrainProgress& progress);
// Loads cfg.load's latest checkpoint into the model (and optimizer, unless --no-load-optim or
// --finetune) and fills progress (left at zero under --finetune). Returns false when the
// directory holds no checkpoint (a fresh start; an error with --exit-on-missing-checkpoint).
// Verifies checksums and shapes; a mismatch stops with the file or key and what was expected.
bool load_checkpoint(const CheckpointIO& io, TrainProgress& progress);

}  // namespace mg
