// Writing a weights-only checkpoint (iteration 0) tensor by tensor, as a TP x PP (DP 1) run
// would save it (docs/checkpoint-format.md): one shard file per world rank in our rank order
// (TP fastest), each rank's pieces cut from the global tensor per its sharding descriptor, each
// element written once, then the indexes, metadata.json and the atomic publish. Holds no model:
// `convert` streams a model larger than half the host's memory through it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/metadata.h"
#include "model/param_layout.h"

namespace mg {

class CheckpointWriter {
 public:
  // Creates DIR/iter_0000000.tmp and one shard file per rank. model.vocab_pad_tp is set to tp
  // (the vocabulary is padded as a TP-tp run pads it). The layout must be valid for the model.
  CheckpointWriter(const std::string& dir, GPTConfig model, int64_t tp, int64_t pp, DType dtype,
                   std::vector<std::string> argv);
  // Without finish() (an error on the way), removes the .tmp directory.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The parameters to add, each once, in any order: the single-rank layout's names and global
  // shapes (the vocabulary padded for this TP size).
  const ParamLayout& global_layout() const { return global_; }
  // The global tensor `name` (row-major, dtype of the checkpoint): each rank owning a piece of
  // it writes that piece.
  void add(const std::string& name, const char* global);
  // Writes the indexes and metadata.json and publishes the checkpoint (latest = 0).
  void finish();

 private:
  struct Rank {
    ShardSpec shard;
    ParamLayout layout;
    std::unique_ptr<ckpt::SyncedWriter> bin;
    ShardIndex index;
  };
  std::string dir_, tmp_;
  GPTConfig model_;
  int64_t tp_, pp_;
  DType dtype_;
  std::vector<std::string> argv_;
  ParamLayout global_;
  std::vector<Rank> ranks_;
  std::map<std::string, int> added_;
  bool finished_ = false;
};

}  // namespace mg
