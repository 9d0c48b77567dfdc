// A single-rank f32 model with its optimizer and checkpoint settings, for the tools that read or
// write a whole checkpoint on one process (`megatron convert`, the checkpoint fuzzer). Its
// activations are sized for 8 tokens, whatever the model's context length (parameter shapes
// depend only on max_position_embeddings).
#pragma once
#include <memory>

#include "checkpoint/checkpoint.h"
#include "core/checked_math.h"
#include "model/gpt.h"
#include "tensor/device_runtime.h"

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
    // Params, grads and Adam state in f32, the f32 copy the conversion makes and one sample's
    // activations, refused up front when the host cannot hold them.
    const char* what = "bytes to convert the model";
    runtime::check_host_fits(checked_add(checked_mul(shard_param_count(small).elements, 20, what),
                                         GPTModel::activation_bytes(small, 1, StageSpec{}), what),
                             str_cat("converting a model of ", cfg.num_parameters(),
                                     " parameters (", cfg.num_layers, " layers, hidden size ",
                                     cfg.hidden_size, ")"));
    model = std::make_unique<GPTModel>(small, 1);
    optim = std::make_unique<Optimizer>(model->layout(), OptimizerConfig{});
  }
  CheckpointIO io() { return {model->store(), *optim, groups, ckpt, false}; }
};

}  // namespace mg
