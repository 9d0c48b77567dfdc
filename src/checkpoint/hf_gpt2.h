// Hugging Face GPT-2 <-> our parameters. HF's GPT2LMHeadModel names ("transformer.h.0.attn.
// c_attn.weight", ...; files saved from GPT2Model without the "transformer." prefix are read
// too), its Conv1D weights stored [in, out] (ours are [out, in]), its fused QKV columns ordered
// [all q | all k | all v] (ours interleave rows per head [q_h, k_h, v_h]), and its unpadded
// vocabulary (ours is padded with zero rows to --make-vocab-size-divisible-by). The output
// layer is tied to wte in both, so lm_head.weight is neither needed nor written.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "model/config.h"

namespace mg {

// HF config.json (n_layer, n_embd, n_head, n_positions, vocab_size, n_inner,
// layer_norm_epsilon, initializer_range) as our config.
GPTConfig hf_gpt2_config(const std::string& config_json_path, int64_t make_vocab_size_divisible_by);
void write_hf_gpt2_config(const std::string& path, const GPTConfig& cfg);

// The single-rank flat parameters (gpt_param_layout(cfg) offsets) from an HF file. Every tensor
// of the file must be used: a tensor the config does not map (a layer past n_layer, a stray
// name) is a UsageError naming it, unless allow_unused (then it is reported and skipped).
// HF's causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias) are not weights and are
// skipped; an lm_head.weight must equal wte (GPT-2 ties them).
std::vector<float> params_from_hf(const SafetensorsReader& hf, const GPTConfig& cfg,
                                  bool allow_unused = false);
// HF tensors from the single-rank flat parameters.
std::vector<NamedF32> params_to_hf(const std::vector<float>& params, const GPTConfig& cfg);

}  // namespace mg
