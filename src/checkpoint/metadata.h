// A checkpoint's metadata.json and its rank_%05d.json shard indexes as typed structs
// (docs/checkpoint-format.md). save_checkpoint writes them from these structs; the parsers
// here check every field's presence, type and range, the shard file names and (version 3) the
// metadata's own CRC-32, so any text, however malformed, either parses or throws a UsageError
// naming the file and the field. Nothing else in checkpoint/ reads these files' JSON.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "optim/loss_scaler.h"
#include "tensor/tensor.h"

namespace mg {

// Version 3 adds the metadata's own checksum ("metadata_crc32"); version 2 records each
// piece's partition stride and the whole model; versions 1 and 2 still load (no checksum).
constexpr int kCheckpointVersion = 3;

// One rank's two files and their checksums.
struct ShardFiles {
  std::string index;  // "rank_00003.json"
  uint32_t index_crc32 = 0;
  std::string bin;  // "rank_00003.bin"
  uint64_t bin_bytes = 0;
  uint32_t bin_crc32 = 0;
};

struct CheckpointMetadata {
  int version = kCheckpointVersion;
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0, consumed_valid_samples = 0;
  int64_t scheduler_samples = 0;  // the LR schedule's clock
  int64_t skipped_iterations = 0;
  std::string optimizer = "adam";  // optimizer.kind: adam | sgd
  bool optimizer_saved = true;     // optimizer.saved: false under --no-save-optim
  int64_t optimizer_steps = 0;     // optimizer.steps: Adam's step count (bias correction)
  uint32_t seed = 0;               // rng.seed
  GPTConfig model;                 // written as model_record(model); read back validated
  DType precision = DType::F32;    // the weights' dtype
  int64_t tp = 1, pp = 1, dp = 1;  // layout.*_parallel_size
  int64_t cp = 1;  // layout.context_parallel_size (absent before context parallelism: 1)
  bool distributed_optimizer = false;
  std::vector<std::string> args;               // the command line it was trained with
  std::optional<LossScalerState> loss_scaler;  // fp16 runs
  std::vector<ShardFiles> ranks;               // one per world rank: tp * pp * dp
};

// metadata.json's text for m (at version kCheckpointVersion, with its checksum).
std::string checkpoint_metadata_text(const CheckpointMetadata& m);
// Parses and validates metadata.json's text; `path` names it in messages.
CheckpointMetadata parse_checkpoint_metadata(const std::string& text, const std::string& path);

// One stored tensor piece (a rank index's "pieces" entry).
struct PieceInfo {
  std::string key;  // "model/<name>", "optim/exp_avg/<name>", ...
  DType dtype = DType::F32;
  Shape global_shape, local_shape;
  int tp_split_dim = -1;  // -1: not split
  int64_t tp_stride = 1, tp_size = 1, tp_rank = 0;
  int64_t local_begin = 0, numel = 0;  // elements [local_begin, +numel) of the local shard
  uint64_t offset = 0;                 // byte offset in the rank's .bin
};

struct ShardIndex {
  int64_t rank = 0;
  std::string bin;  // "rank_00003.bin"
  uint64_t bin_bytes = 0;
  uint32_t bin_crc32 = 0;
  std::vector<PieceInfo> pieces;
};

std::string shard_index_text(const ShardIndex& s);
// Parses a rank index; each piece's shapes, TP coordinates and element range are checked to be
// a slice of its global tensor (the reader then checks that its bytes lie inside the .bin).
ShardIndex parse_shard_index(const std::string& text, const std::string& path);

// "rank_00003" (the stem of rank 3's two files).
std::string rank_name(int64_t rank);

}  // namespace mg
