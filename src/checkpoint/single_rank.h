// A single-rank f32 model with its optimizer and checkpoint settings, for the tools that read or
// write a whole checkpoint on one process (`megatron convert`, the checkpoint fuzzer). Its
// activations are sized for 8 tokens, whatever the model's context length (parameter shapes
// depend only on max_position_embeddings).
#pragma once
#include <memory>

#include "checkpoint/checkpoint.h"

namespace mg {

struct SingleRankModel {
  CheckpointConfig ckpt;
  ProcessGroups groups = make_single_process_groups();
  std::unique_ptr<GPTModel> model;
  std::unique_ptr<Optimizer> optim;
  explicit SingleRankModel(const GPTConfig& cfg) {
    ckpt.model = cfg;
    GPTConfig small = cfg;
    small.max_position_embeddings = cfg.max_positions();
    small.seq_length = 8;
    model = std::make_unique<GPTModel>(small, 1);
    optim = std::make_unique<Optimizer>(model->layout(), OptimizerConfig{});
  }
  CheckpointIO io() { return {*model, *optim, groups, ckpt, false}; }
};

}  // namespace mg
