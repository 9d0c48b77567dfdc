// `megatron convert`: a Hugging Face model directory (config.json and model.safetensors, or
// shards with model.safetensors.index.json) of GPT2LMHeadModel, LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM or MixtralForCausalLM (dispatched on config.json's
// "architectures") to a megatron-cpp checkpoint (iteration 0, weights only, laid out for a
// TP x PP run; training can --load it under any parallel layout) and back. The destination must be new or empty unless
// --overwrite; a failed conversion leaves no partial output (and no .tmp) behind.
#pragma once
#include <string>

#include "model/config.h"

namespace mg {

struct ConvertConfig {
  std::string direction;  // --direction hf-to-megatron | megatron-to-hf
  std::string load;       // --load: HF directory, or checkpoint directory (its latest checkpoint)
  std::string save;       // --save: checkpoint directory, or HF directory
  int64_t make_vocab_size_divisible_by = 128;  // vocabulary padding of the checkpoint
  bool overwrite = false;  // --overwrite: --save may be non-empty or a training checkpoint
  bool allow_unused_tensors = false;  // hf-to-megatron: skip file tensors the config does not use
  int64_t target_tp = 1;  // --target-tensor-parallel-size: the layout written (hf-to-megatron)
  int64_t target_pp = 1;  // --target-pipeline-parallel-size
  std::string max_shard_size = "5GB";  // megatron-to-hf: save_pretrained's shard limit
  std::string tokenizer_model;  // megatron-to-hf: tokenizer files from here (default LOAD/hf)
  void validate() const;
};

void convert(const ConvertConfig& cfg);

class GPTModel;
class ParamStore;
// Loads the weights of dir's latest checkpoint into a single-rank model or parameter store (any
// layout the checkpoint was saved with); no optimizer state is read or allocated.
void load_checkpoint_weights(const std::string& dir, GPTModel& model);
void load_checkpoint_weights(const std::string& dir, ParamStore& store);

}  // namespace mg
