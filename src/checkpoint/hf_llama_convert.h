// `megatron convert` for the Llama family (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM), streamed tensor
// by tensor in the file's dtype: HF safetensors (single or sharded) -> a weights-only checkpoint
// laid out for a TP x PP run (checkpoint_writer.h), and a checkpoint -> HF files (sharded past
// --max-shard-size) with config.json and the tokenizer files. Peak memory is
// about the largest tensor (the word embedding) twice, not the model.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/convert.h"

namespace mg {

// The files of an HF model directory that are not weights: config.json, the tokenizer's and
// the generation settings (config.json first). hf-to-megatron keeps them in CKPT_DIR/hf/; the
// export writes them.
const std::vector<std::string>& hf_side_files();

// `config` is the parsed config.json at config_path (its architecture of the Llama family).
void llama_hf_to_megatron(const ConvertConfig& cfg, const nlohmann::json& config,
                          const std::string& config_path);
void llama_megatron_to_hf(const ConvertConfig& cfg);

}  // namespace mg
